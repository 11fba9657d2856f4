#!/usr/bin/env bash
# The acceptance checks of the CUDA path, on a machine with a GPU (about 5 minutes on one H200,
# the build included). One PASS or FAIL line per check; the exit status is the number of FAILs.
#   build  batchcheck against the torch of $BATCHCHECK_PYTHON (default python3), tests off;
#   (0)    the engine child of a CUDA scan has libtorch_cuda and cuDNN mapped before the model
#          loads, a CPU scan's none;
#   (a)    the two bundled cases on cuda: the same findings, batches and samples as on the CPU;
#          and the real PyTorch loop on cuda (a child process) hits the device-side assert at the
#          batch batchcheck named, which batchcheck reported without running into it;
#   (b)    the seed's convolutional model on cuda: no crash, the scan complete;
#   (g)    --log-file on cuda: the engine child's lines relayed, with their source;
#   (c)    a device-side assert inside forward at two batches (nn.Embedding): both found, each
#          naming its sample, the scan complete;
#   (d)    batchcheck.scan() over a DataLoader with 2 workers, the model already on cuda;
#   (e)    speed: resnet18 and resnet50 epochs against batchcheck.scan() (ratios, fixed and
#          per-batch costs apart);
#   (f)    after every scan() the caller's own CUDA context still works;
#   (h)    fp16 on the device: batchcheck.scan(precision="fp16") names half-overflow at the batch
#          where the real CUDA AMP loop first gets a non-finite loss, at its sample, and the CPU's
#          fp16 scan names the same batch; bf16 passes on both;
#   (6)    two shards under a launcher's LOCAL_RANK on the one GPU merge into the single scan's
#          report.
# Without a visible GPU it builds, runs the CPU baseline and stops cleanly (exit 0), saying so.
# GPU_CHECK_DEVICE=cpu runs the checks that need no real GPU on the CPU instead (a dry run of
# this script; (a)'s real loop and (0) need CUDA and are skipped), and GPU_CHECK_PREBUILT=DIR uses
# the batchcheck already built in DIR instead of building.
#
# The machine needs torch (with CUDA), cmake, ninja and a C++ compiler. Where CLI11,
# nlohmann/json and spdlog are not installed, `scripts/gpu-check.sh --pack` (run on a machine that has
# them) copies their headers into build-gpu-headers/, to carry along with the tree.
set -uo pipefail
cd "$(dirname "$0")/.."
HEADERS=build-gpu-headers
if [[ "${1:-}" == --pack ]]; then
  rm -rf "$HEADERS" && mkdir -p "$HEADERS"
  cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/spdlog /usr/include/fmt "$HEADERS/"
  echo "gpu-check: headers in $HEADERS ($(du -sh "$HEADERS" | cut -f1))" >&2
  exit 0
fi
PY=${BATCHCHECK_PYTHON:-python3}
BUILD=${BUILD_DIR:-build-gpu}
say() { echo "gpu-check: $*" >&2; }
start=$(date +%s)
failures=0
check() {  # check OK "what"
  if [[ "$1" == 0 ]]; then echo "PASS $2"; else echo "FAIL $2"; failures=$((failures + 1)); fi
}

torch_dir=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))') || { say "FAIL: $PY cannot import torch"; exit 1; }
say "torch $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "GPUs:", torch.cuda.device_count())')"
extra=()
if [[ -d "$HEADERS" ]] && [[ ! -d /usr/include/CLI || ! -d /usr/include/nlohmann || ! -d /usr/include/spdlog ]]; then
  extra+=("-DBATCHCHECK_HEADERS_DIR=$PWD/$HEADERS")
fi
if [[ -n "${GPU_CHECK_PREBUILT:-}" ]]; then
  BUILD=$GPU_CHECK_PREBUILT
  OUT=${OUT:-$BUILD/gpu-check}
else
  say "build ($BUILD)"
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBATCHCHECK_BUILD_TESTS=OFF \
    "-DCMAKE_PREFIX_PATH=$torch_dir;$torch_dir/share/cmake" "-DBATCHCHECK_PYTHON=$PY" "${extra[@]}" >/dev/null || exit 1
  cmake --build "$BUILD" -j "$(nproc)" >/dev/null || { say "FAIL: the build"; exit 1; }
fi
OUT=${OUT:-$BUILD/gpu-check}
BC=$BUILD/app/batchcheck
mkdir -p "$OUT"
export BATCHCHECK_BINARY=$PWD/$BC PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

CASES=(segmentation_tail classification_label255)
say "CPU baseline"
for c in "${CASES[@]}"; do
  status=0
  "$BC" scan "sample_configs/$c.json" --device cpu -q -o "$OUT/$c.cpu.json" || status=$?
  check "$([[ $status -eq 1 ]]; echo $?)" "$c on cpu exits 1 (the gate fails), got $status"
done

DEV=${GPU_CHECK_DEVICE:-cuda}
if [[ $DEV == cuda ]] && ! "$PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  say "no CUDA device visible: the build and the CPU baseline ran; stopping before the GPU checks after $(( $(date +%s) - start )) s"
  exit "$failures"
fi

# The error findings of a report, as (id, rank, batch, samples) rows.
findings() {
  "$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
for f in r["findings"]:
    if f["severity"] == "error" and f.get("probe") is None:
        print(f["id"], f["rank"], f["batch"], f["samples"])' "$1"
}
field() { "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$1" "$2"; }

if [[ $DEV == cuda ]]; then
  maps=$(BATCHCHECK_TEST_FAULT=maps: "$BC" scan sample_configs/clean.json --device cuda -q -o "$OUT/maps.json" 2>&1 >/dev/null |
         grep -o 'mapped before the model: .*')
  check "$([[ $maps == *libtorch_cuda* && $maps == *libcudnn* ]]; echo $?)" "(0) a CUDA scan's engine: $maps"
fi

say "(a, b) the bundled cases on $DEV"
for c in "${CASES[@]}"; do
  status=0
  t0=$EPOCHREALTIME
  "$BC" scan "sample_configs/$c.json" --device "$DEV" -q -o "$OUT/$c.$DEV.json" 2>"$OUT/$c.$DEV.stderr" || status=$?
  secs=$("$PY" -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))' "$t0" "$EPOCHREALTIME")
  same=1
  [[ $status -eq 1 ]] && diff <(findings "$OUT/$c.cpu.json") <(findings "$OUT/$c.$DEV.json") >&2 && same=0
  check "$same" "(a) $c on $DEV: exit $status, the CPU's findings ($(findings "$OUT/$c.$DEV.json" | head -1)), $secs s"
  crash=$(grep -c forward-crash "$OUT/$c.$DEV.json")
  check "$([[ $crash == 0 && $(field "$OUT/$c.$DEV.json" complete) == True ]]; echo $?)" \
    "(b) $c on $DEV: no forward-crash ($crash), complete"
done
if [[ $DEV == cuda ]]; then
  for c in "${CASES[@]}"; do
    named=$(findings "$OUT/$c.cuda.json" | awk 'NR == 1 {print $3}')
    got=$("$PY" tests/e2e/cuda/device_assert.py "sample_configs/$c.json" 2>"$OUT/$c.assert.stderr" | tail -1)
    batch=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])["batch"])' "$got" 2>/dev/null)
    error=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1]).get("error", ""))' "$got" 2>/dev/null)
    check "$([[ "$batch" == "$named" && "$error" == *"device-side assert"* ]]; echo $?)" \
      "(a) $c: the real loop on cuda asserts at batch $batch, batchcheck named $named ($(grep -m1 -o 'Assertion.*failed' "$OUT/$c.assert.stderr" || echo "$error"))"
  done
fi

say "(g) the log of a scan on $DEV: the engine child's lines relayed, with their source"
"$BC" scan sample_configs/segmentation_tail.json --device "$DEV" -q --log-level debug --log-file "$OUT/log.$DEV.jsonl" \
  -o "$OUT/log.$DEV.json" 2>"$OUT/log.$DEV.stderr"
got=$("$PY" - "$OUT/log.$DEV.jsonl" "$OUT/log.$DEV.json" "$DEV" <<'PYEOF' 2>&1
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
checked = json.load(open(sys.argv[2]))["batches"]["checked"]
debug = [r["message"] for r in records if r["level"] == "debug" and r["source"] == "engine"]
batches = [m for m in debug if m.startswith("rank ")]
ok = bool(debug) and debug[0].startswith("batchcheck: ") and " on " + sys.argv[3] in debug[0] and len(batches) >= checked - 2
print("ok" if ok else "bad", len(records), "records,", len(batches), "batch lines for", checked, "checked; first:", debug[:1])
PYEOF
)
check "$([[ $got == ok* ]]; echo $?)" "(g) the log on $DEV: $got"

say "(c) a device-side assert inside forward, at two batches"
"$PY" tests/e2e/cuda/gpu_checks.py embedding "$OUT" --device "$DEV" 2>"$OUT/embedding.stderr" || failures=$((failures + $?))

say "(d, f) batchcheck.scan() over a DataLoader with workers, the model on $DEV"
"$PY" tests/e2e/cuda/gpu_checks.py api "$OUT" --device "$DEV" 2>"$OUT/api.stderr" || failures=$((failures + $?))

say "(h) precision as trained: fp16 overflows against the real AMP loop on $DEV"
"$PY" tests/e2e/cuda/gpu_checks.py precision "$OUT" --device "$DEV" 2>"$OUT/precision.stderr" || failures=$((failures + $?))

say "(6) two shards under LOCAL_RANK on one GPU, merged"
rm -f "$OUT"/part-*.json
for k in 0 1; do
  LOCAL_RANK=$k RANK=$k WORLD_SIZE=2 "$BC" scan sample_configs/segmentation_tail.json --device "$DEV" --shard env -q \
    -o "$OUT/part-{shard}.json" 2>"$OUT/part$k.stderr"
done
status=0
"$BC" merge "$OUT"/part-*.json -o "$OUT/merged.json" 2>"$OUT/merge.stderr" || status=$?
same=1
[[ $status -eq 1 ]] && diff <(findings "$OUT/segmentation_tail.$DEV.json") <(findings "$OUT/merged.json") >&2 && same=0
check "$same" "(6) two shards merged (exit $status): the single scan's findings"

say "(e, f) speed: the caller's training epochs against batchcheck.scan()"
small=()
[[ $DEV == cpu ]] && small=(--small)
"$PY" tests/e2e/cuda/gpu_checks.py speed "$OUT" --device "$DEV" "${small[@]}" 2>"$OUT/speed.stderr" || failures=$((failures + $?))

say "$failures failed, in $(( $(date +%s) - start )) s"
exit "$failures"
