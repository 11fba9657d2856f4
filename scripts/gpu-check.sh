#!/usr/bin/env bash
# The CUDA end-to-end checks, on a machine with a GPU (under 8 minutes on one H200):
#   1. build batchcheck against the torch of $BATCHCHECK_PYTHON (default python3), tests off;
#   2. scan the seed's BCE case and the class-255 cross-entropy case on the CPU (the baseline);
#   3. [GPU] scan both on cuda: the same findings, batches and samples as on the CPU;
#   4. [GPU] run the real PyTorch loop of each on cuda, in a child process (a device-side assert
#      poisons the CUDA context): it hits the device-side assert at the batch batchcheck named,
#      which batchcheck reported without running into the assert;
#   5. [GPU] time the seed-size segmentation scan on the GPU, against the CPU.
# Without a visible GPU it runs steps 1-2 and stops before step 3, saying so (exit 0).
#
# The machine needs torch (with CUDA), cmake, ninja and a C++ compiler. Where CLI11 and
# nlohmann/json are not installed, `scripts/gpu-check.sh --pack` (run on a machine that has
# them) copies their headers into build-gpu-headers/, to carry along with the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
HEADERS=build-gpu-headers
if [[ "${1:-}" == --pack ]]; then
  rm -rf "$HEADERS" && mkdir -p "$HEADERS"
  cp -r /usr/include/CLI /usr/include/nlohmann "$HEADERS/"
  echo "gpu-check: headers in $HEADERS ($(du -sh "$HEADERS" | cut -f1))" >&2
  exit 0
fi
PY=${BATCHCHECK_PYTHON:-python3}
BUILD=${BUILD_DIR:-build-gpu}
OUT=${OUT:-$BUILD/gpu-check}
say() { echo "gpu-check: $*" >&2; }
start=$(date +%s)

torch_dir=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
say "torch $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "GPUs:", torch.cuda.device_count())')"
extra=()
if [[ -d "$HEADERS" ]] && [[ ! -d /usr/include/CLI || ! -d /usr/include/nlohmann ]]; then
  extra+=("-DBATCHCHECK_HEADERS_DIR=$PWD/$HEADERS")
fi
say "1. build ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBATCHCHECK_BUILD_TESTS=OFF \
  "-DCMAKE_PREFIX_PATH=$torch_dir;$torch_dir/share/cmake" "-DBATCHCHECK_PYTHON=$PY" "${extra[@]}" >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
BC=$BUILD/app/batchcheck
mkdir -p "$OUT"

CASES=(segmentation_tail classification_label255)
say "2. CPU baseline"
for c in "${CASES[@]}"; do
  status=0
  "$BC" scan "sample_configs/$c.json" --device cpu -q -o "$OUT/$c.cpu.json" || status=$?
  [[ $status -eq 1 ]] || { say "FAIL: $c on cpu exited $status (expected 1: the gate fails)"; exit 1; }
done

if ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  say "no CUDA device visible: steps 1-2 passed; stopping before the GPU steps (3-5) after $(( $(date +%s) - start )) s"
  exit 0
fi

# The error findings of a report, as (id, rank, batch, samples) rows.
findings() {
  "$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
for f in r["findings"]:
    if f["severity"] == "error" and f.get("probe") is None:
        print(f["id"], f["rank"], f["batch"], f["samples"])' "$1"
}

say "3. the same scans on cuda"
for c in "${CASES[@]}"; do
  status=0
  "$BC" scan "sample_configs/$c.json" --device cuda -q -o "$OUT/$c.cuda.json" || status=$?
  [[ $status -eq 1 ]] || { say "FAIL: $c on cuda exited $status (expected 1)"; exit 1; }
  if ! diff <(findings "$OUT/$c.cpu.json") <(findings "$OUT/$c.cuda.json") >&2; then
    say "FAIL: $c: the findings on cuda differ from the CPU's"
    exit 1
  fi
  say "   $c: $(findings "$OUT/$c.cuda.json" | head -1)"
done

say "4. the real loop on cuda, in a child process, runs into the device-side assert at the named batch"
for c in "${CASES[@]}"; do
  named=$(findings "$OUT/$c.cuda.json" | awk 'NR == 1 {print $3}')
  got=$("$PY" tests/e2e/cuda/device_assert.py "sample_configs/$c.json" 2>"$OUT/$c.assert.stderr" | tail -1)
  batch=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])["batch"])' "$got")
  error=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1]).get("error", ""))' "$got")
  if [[ "$batch" != "$named" || "$error" != *"device-side assert"* ]]; then
    say "FAIL: $c: the loop on cuda failed at batch $batch ($error); batchcheck named batch $named"
    exit 1
  fi
  say "   $c: device-side assert at batch $batch, as named ($(grep -m1 -o 'Assertion.*failed' "$OUT/$c.assert.stderr" || echo "$error"))"
done

say "5. timing the seed-size segmentation scan (1041 images, batch 8)"
for dev in cpu cuda; do
  t0=$EPOCHREALTIME
  "$BC" scan sample_configs/segmentation_tail.json --device "$dev" -q -o "$OUT/timing.$dev.json" || true
  say "   $dev: $("$PY" -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))' "$t0" "$EPOCHREALTIME") s (whole process: load, 131 batches, probes)"
done
say "passed in $(( $(date +%s) - start )) s"
