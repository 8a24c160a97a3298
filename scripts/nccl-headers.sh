#!/usr/bin/env bash
# Check src/backend/nccl/config.rs's ncclConfig_t table against NVIDIA's own headers. Needs the
# network (PyPI) and a C compiler; not run in CI. For every NCCL release on the registry from
# 2.16.2 (nvidia-nccl-cu12 up to 2.27.6, nvidia-nccl-cu13 from 2.27.7), downloads the wheel into
# DIR (default a temporary directory; never the repository), extracts nvidia/nccl/include/nccl.h,
# deletes the wheel, and prints one line per release:
#   VERSION SHA256-OF-nccl.h sizeof(ncclConfig_t) NCCL_VERSION_CODE member@offset ...
#   [ncclEncryptionConfig_t=SIZE]
# compiled against the header itself (with stand-ins for the CUDA headers it includes; ncclConfig_t
# uses none of their types). The output is what docs/backends.md records and what
# config.rs's unit test `offsets_match_nvidias_headers` pins; the script ends by comparing the two.
# Usage: scripts/nccl-headers.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$(mktemp -d)}
mkdir -p "$dir/stub"
for h in cuda_runtime.h cuda_fp16.h cuda_bf16.h cuda_fp8.h; do
  printf 'typedef struct CUstream_st *cudaStream_t;\ntypedef struct CUevent_st *cudaEvent_t;\n' >"$dir/stub/$h"
done
cu12="2.16.2 2.16.5 2.17.1 2.18.1 2.18.3 2.19.3 2.20.5 2.21.5 2.22.3 2.23.4 2.24.3 2.25.1 2.26.2 2.26.5 2.27.3 2.27.5 2.27.6"
cu13="2.27.7 2.28.3 2.28.7 2.28.9 2.29.2 2.29.3 2.29.7 2.30.3 2.30.4 2.30.7 2.31.2 2.32.3"
members="blocking cgaClusterSize minCTAs maxCTAs netName splitShare trafficClass commName collnetEnable CTAPolicy
shrinkShare nvlsCTAs nChannelsPerNetPeer nvlinkCentricSched graphUsageMode numRmaCtx maxP2pPeers graphStreamOrdering
launchOrderImplicit numRmaSig rmaEagerInit hostCftMode nvlsHostMode"
fetch() { # PACKAGE VERSION -> $dir/h/VERSION/nccl.h
  local out=$dir/h/$2
  [ -s "$out/nccl.h" ] && return 0
  mkdir -p "$out" "$dir/w"
  pip download -q --disable-pip-version-check --no-deps "$1==$2" -d "$dir/w/$2" >&2
  unzip -p "$dir/w/$2"/*.whl nvidia/nccl/include/nccl.h >"$out/nccl.h"
  rm -rf "$dir/w/$2"
}
for v in $cu12; do fetch nvidia-nccl-cu12 "$v"; done
for v in $cu13; do fetch nvidia-nccl-cu13 "$v"; done
table=$dir/table.txt
: >"$table"
for v in $cu12 $cu13; do
  h=$dir/h/$v/nccl.h
  c=$dir/h/$v/probe.c
  {
    echo '#include <stdio.h>'
    echo '#include <stddef.h>'
    echo '#include "nccl.h"'
    echo 'int main(void) {'
    echo '  printf("%zu %d", sizeof(ncclConfig_t), NCCL_VERSION_CODE);'
    for m in $members; do
      if grep -qE "^[^/]*[ *]$m;" "$h"; then
        echo "  printf(\" $m@%zu\", offsetof(ncclConfig_t, $m));"
      fi
    done
    if grep -q 'ncclEncryptionConfig_t;' "$h"; then
      echo '  printf(" ncclEncryptionConfig_t=%zu", sizeof(ncclEncryptionConfig_t));'
    fi
    echo '  printf("\n"); return 0; }'
  } >"$c"
  cc -I"$dir/stub" -I"$dir/h/$v" -o "$dir/h/$v/probe" "$c"
  echo "$v $(sha256sum "$h" | cut -c1-64) $("$dir/h/$v/probe")" | tee -a "$table"
done
echo "nccl-headers: table in $table"
# The same lines must appear in docs/backends.md (between its nccl-headers markers).
if diff <(sed -n '/<!-- nccl-headers begin -->/,/<!-- nccl-headers end -->/p' "$root/docs/backends.md" \
          | grep -E '^2\.[0-9]+\.[0-9]+ ') "$table"; then
  echo "nccl-headers: docs/backends.md agrees with NVIDIA's headers"
else
  echo "nccl-headers: docs/backends.md differs from NVIDIA's headers (diff above)"; exit 1
fi
