#!/usr/bin/env bash
# Prepares a GPU run on a machine with Rust for a GPU machine without it (or without a network):
# builds the release tools and the tests/backends/nccl_gpu.rs test binary, strips them into
# target/gpu-stage/bin, and downloads megatron-core's wheel (Python 3.12, no dependencies: the GPU
# machine's torch, numpy and packaging serve) into target/gpu-stage/wheels. Then, on the GPU
# machine, with target/gpu-stage copied beside a checkout of the same commit:
#   scripts/gpu-run.sh OUTDIR      # scripts/gpu-tests.sh + bench/gpu_vs_megatron.sh, logs in OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
stage=target/gpu-stage
rm -rf "$stage"; mkdir -p "$stage/bin" "$stage/wheels"
cargo build --release --locked --quiet --bins
test_bin=$(cargo test --release --locked --test backends --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "backends" and m.get("executable"):
        print(m["executable"])')
for f in target/release/mcore-launch target/release/mcore-selftest "$test_bin"; do
  strip -o "$stage/bin/$(basename "$f" | sed 's/-[0-9a-f]*$//')" "$f"
done
# The C trainer of gpu-tests.sh section 6, with the library beside it (found through $ORIGIN).
cp target/release/libmcore_init.so "$stage/bin/libmcore_init.so.0.1"
cc -std=c11 -O2 -Iinclude examples/c/id_group_trainer.c -L"$stage/bin" -l:libmcore_init.so.0.1 \
  -Wl,-rpath,'$ORIGIN' -o "$stage/bin/id_group_trainer"
for v in ${MCORE_BENCH_MEGATRON:-0.19.2}; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any \
    -d "$stage/wheels" "megatron-core==$v"
done
du -sh "$stage"; ls -l "$stage"/*
