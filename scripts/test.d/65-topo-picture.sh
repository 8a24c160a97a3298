#!/usr/bin/env bash
# mcore-topo --svg renders in a real browser: headless Chromium (Debian's, installed here when
# missing) takes a screenshot of the picture, and the PNG must show the group colours of the
# layout (four tensor-parallel groups -> four palette colours, a fifth absent) and the highlight;
# then the picture of two grids (--grid), one panel each.
# When Chromium cannot be installed the suite says SKIPPED loudly.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
if ! command -v chromium >/dev/null; then
  echo "== installing chromium (apt) for the picture test"
  (apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 ||
    { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; }) || true
fi
if ! command -v chromium >/dev/null; then
  echo "!!!!!!!! topo-picture: SKIPPED: chromium could not be installed; the SVG was NOT checked in a browser !!!!!!!!"
  exit 0
fi
cargo build --release --locked --bin mcore-topo >/dev/null 2>&1 || suite_abort topo-picture "cannot build mcore-topo"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/target/release/mcore-topo" --world-size 32 --tp 8 --pp 2 --gpus-per-node 4 --svg "$work/out.svg" \
  --color-by tensor_model_parallel --rank 5 >/dev/null 2>"$work/warn.txt" || suite_abort topo-picture mcore-topo
size=$(sed -n '1s/.* width="\([0-9]*\)" height="\([0-9]*\)".*/\1,\2/p' "$work/out.svg")
timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
  --user-data-dir="$work/profile" --window-size="$size" --screenshot="$work/out.png" "file://$work/out.svg" \
  >"$work/chromium.log" 2>&1
if [ ! -s "$work/out.png" ]; then
  tail -n 20 "$work/chromium.log"
  suite_abort topo-picture "no screenshot"
fi
suite_check "the screenshot's colours" python3 - "$work/out.png" "$size" <<'PY'
import json, subprocess, sys
palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1"]
r = json.loads(subprocess.check_output([sys.executable, "scripts/lib/png_colours.py", sys.argv[1], *palette, "#000000"]))
w, h = map(int, sys.argv[2].split(","))
fails = []
if (r["width"], r["height"]) != (w, h):
    fails.append(f"screenshot {r['width']}x{r['height']}, want {w}x{h}")
if r["distinct"] < 20:
    fails.append(f"only {r['distinct']} distinct colours: blank picture?")
c = r["counts"]
for col in palette[:4]:
    if c[col] < 8 * 1500:  # 8 GPUs per tensor-parallel group, most of each cell filled
        fails.append(f"{col}: {c[col]} pixels, want >= 12000")
if c[palette[4]] != 0:
    fails.append(f"a fifth group colour {palette[4]} appears ({c[palette[4]]} pixels)")
if c["#000000"] < 500:
    fails.append(f"highlight/text black: {c['#000000']} pixels")
print("png:", r)
if fails:
    print("; ".join(fails))
sys.exit(1 if fails else 0)
PY
# Two grids (train tp 2 pp 2 on ranks 0-15, rollout tp 4 on 8-23 of 24): one panel each over the
# same three nodes; train's eight tensor-parallel groups take the first eight palette colours, a
# ninth is absent, and each panel has eight pale GPUs outside its grid.
"$root/target/release/mcore-topo" --world-size 24 --grid train:tp=2,pp=2,local-world-size=16 \
  --grid rollout:tp=4,rank-offset=8,local-world-size=16 --gpus-per-node 8 --svg "$work/grids.svg" \
  --rank 9 >/dev/null 2>"$work/warn2.txt" || suite_abort topo-picture "mcore-topo --grid"
size2=$(sed -n '1s/.* width="\([0-9]*\)" height="\([0-9]*\)".*/\1,\2/p' "$work/grids.svg")
timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
  --user-data-dir="$work/profile" --window-size="$size2" --screenshot="$work/grids.png" "file://$work/grids.svg" \
  >"$work/chromium2.log" 2>&1
if [ ! -s "$work/grids.png" ]; then
  tail -n 20 "$work/chromium2.log"
  suite_abort topo-picture "no screenshot of the two grids"
fi
suite_check "the two-grid screenshot's colours" python3 - "$work/grids.png" "$size2" <<'PY'
import json, subprocess, sys
palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f"]
pale = "#f7f7f7"
r = json.loads(subprocess.check_output([sys.executable, "scripts/lib/png_colours.py", sys.argv[1], *palette, pale]))
w, h = map(int, sys.argv[2].split(","))
fails = []
if (r["width"], r["height"]) != (w, h):
    fails.append(f"screenshot {r['width']}x{r['height']}, want {w}x{h}")
c = r["counts"]
for col in palette[:8]:
    if c[col] < 2 * 1500:  # at least one tensor-parallel group of two GPUs
        fails.append(f"{col}: {c[col]} pixels, want >= 3000")
if c[palette[8]] != 0:
    fails.append(f"a ninth group colour {palette[8]} appears ({c[palette[8]]} pixels)")
if c[pale] < 16 * 1500:  # eight pale GPUs per panel
    fails.append(f"pale GPUs: {c[pale]} pixels, want >= 24000")
print("png:", r)
if fails:
    print("; ".join(fails))
sys.exit(1 if fails else 0)
PY
suite_end topo-picture
