#!/usr/bin/env bash
# README command 2 (what CI runs), in tiers that fit CI's budget on 2 cores:
#   1. the default build (LibTorch of torch 2.15.0 from pip, build/): the whole suite; then README
#      command 1 (scripts/demo.sh) and the package tests again, the two commands in order;
#   2. Debian's libtorch-dev 1.13 under ASan (build-debian-asan/): the torch-free core and the
#      parsers whole (core_tests, where memory bugs live), the engine's unit tests, and a small
#      end-to-end subset through LibTorch 1.13;
#   3. the fuzzers, 10 s each, built in the second tier's tree (its core carries UBSan and
#      libFuzzer's coverage as well).
# --full runs the release matrix instead of tiers 2-3: Debian's build plain with its whole
# suite (build-debian/), the suite under ASan + UBSan (build-asan/), the fuzzers 45 s each.
# BATCHCHECK_QUICK=1 runs tier 1 only (a fast local loop).
set -euo pipefail
cd "$(dirname "$0")/.."
FULL=0
case "${1:-}" in
  --full) FULL=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
esac
scripts/setup.sh

# Each stage line starts with the time since the start (CI's tiers fit in 25 minutes).
stage() { echo "== [$((SECONDS / 60))m$((SECONDS % 60))s] $*" >&2; }
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# The closing line sums every ctest run: "tests: N passed, M failed".
summary() {
  local total failed
  total=$(grep -oE 'tests failed out of [0-9]+' "$LOG" | awk '{s += $5} END {print s + 0}')
  failed=$(grep -oE '[0-9]+ tests failed out of' "$LOG" | awk '{s += $1} END {print s + 0}')
  echo "tests: $((total - failed)) passed, $failed failed"
}

# Each skipped test's reason, one line each (ctest itself prints only "Skipped").
skips() {
  grep -h -A1 ': Skipped$' "$1/Testing/Temporary/LastTest.log" 2>/dev/null | grep -v -e ': Skipped$' -e '^--$' |
    sort -u | sed 's/^/  skipped: /' >&2 || true
}
torch_line() { "$1" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "torch ?"; }
source scripts/torch-env.sh

stage "build and test, default build: $(torch_line "$BC_PYTHON") (build/)"
# The real-model suite: eight torchvision families in CI's tiers (residual + BatchNorm,
# inverted residual with SE and hardswish, stochastic depth, channel shuffle, no BatchNorm,
# inception branches, segmentation with a dict output, an aux head); all thirteen with --full.
REALMODELS="resnet18 mobilenet_v3_small efficientnet_b0 shufflenet_v2 squeezenet1_1 googlenet lraspp deeplabv3_aux"
[[ $FULL == 1 ]] && REALMODELS=""
scripts/build.sh -DBATCHCHECK_WERROR=ON -DBATCHCHECK_BUILD_TESTS=ON -DBATCHCHECK_REALMODELS_ARCHS="$REALMODELS"
(cd "${BUILD_DIR:-$BC_BUILD_DIR}" && ctest --output-on-failure -j 2) | tee -a "$LOG"
skips "${BUILD_DIR:-$BC_BUILD_DIR}"

if [[ "${BATCHCHECK_QUICK:-0}" == 1 ]]; then
  summary
  exit 0
fi

# The README's two commands in order on one machine: command 1 (the demo: the wheel and the
# samples' data in one build, a venv of its own), then command 2's package test again, which must find
# nothing of the demo's install (it once saw the demo's batchcheck through the shared venv).
stage "README command 1 (scripts/demo.sh), then command 2's package tests"
scripts/demo.sh 2>&1 | tail -4 >&2
(cd "${BUILD_DIR:-$BC_BUILD_DIR}" && ctest --output-on-failure -R '^Package\.') | tee -a "$LOG"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Sanitized trees: -O1 (the sanitized LibTorch translation units compile in half the time of
# -O2; the tests themselves are -O0 in every tree: tests/CMakeLists.txt). Against Debian's
# LibTorch no suppressions are needed, so leaks and UB reports fail the run.
ASAN_ARGS=(-DENABLE_SANITIZERS=ON -DBATCHCHECK_WERROR=ON -DBATCHCHECK_BUILD_TESTS=ON
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG")
BATCHCHECK_TORCH=debian scripts/setup.sh

if [[ $FULL == 0 ]]; then
  stage "tier 2: Debian's libtorch-dev $(torch_line /usr/bin/python3) under ASan, clang -O0 (build-debian-asan/)"
  # clang with ASan alone at -O0 compiles in a fifth of g++ with ASan + UBSan at -O1; UBSan and
  # libFuzzer's coverage go on the torch-free core and the image decoder only, whose fuzzers
  # this tree builds too (tier 3). engine_tests holds the end-to-end subset only
  # (tests/CMakeLists.txt).
  CXX=$(command -v clang++ || echo c++) BATCHCHECK_TORCH=debian BUILD_DIR=build-debian-asan scripts/build.sh -DENABLE_SANITIZERS=ON \
    -DBATCHCHECK_SANITIZE=address -DBATCHCHECK_E2E_SMOKE=ON -DBATCHCHECK_FUZZ_TARGETS=ON -DBATCHCHECK_WERROR=ON \
    -DBATCHCHECK_BUILD_TESTS=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG"
  # Every unit test (core, parsers, the engine's tensor checks, the include layers) and the
  # end-to-end subset: the bundled cases and bad input files through the in-process engine, the
  # CLI and the supervised binary, hostile names, and PyTorch 1.13's own DataLoader as the
  # oracle of the batch order.
  (cd build-debian-asan && ctest --output-on-failure -j 2) | tee -a "$LOG"
  skips build-debian-asan
  stage "tier 3: fuzzers (built in build-debian-asan/)"
  # Eight targets at 10 s each; scripts/fuzz.sh alone defaults to 45 s each, at -O2 (--full).
  FUZZ_SECONDS=${FUZZ_SECONDS:-10} FUZZ_BUILD_DIR=build-debian-asan scripts/fuzz.sh
  stage "done"
  summary
  exit 0
fi

stage "full: build and test, Debian's libtorch-dev: $(torch_line /usr/bin/python3) (build-debian/)"
# The real-model suite on LibTorch 1.13: three families (residual + BatchNorm, inverted residual
# with DDP ranks, segmentation) instead of thirteen, which take 9 minutes on 1.13; the default
# build runs all thirteen.
BATCHCHECK_TORCH=debian BUILD_DIR=build-debian scripts/build.sh -DBATCHCHECK_WERROR=ON -DBATCHCHECK_BUILD_TESTS=ON \
  -DBATCHCHECK_REALMODELS_ARCHS="resnet18 mobilenet_v2 lraspp"
(cd build-debian && ctest --output-on-failure -j 2) | tee -a "$LOG"
skips build-debian

stage "full: ASan + UBSan build and test, Debian's libtorch-dev (build-asan/)"
BATCHCHECK_TORCH=debian BUILD_DIR=build-asan scripts/build.sh "${ASAN_ARGS[@]}"
# The real-model suite runs torchvision's networks (LibTorch's code, not ours) for minutes;
# under ASan it would take most of the budget, so it runs in the plain trees only. The
# Modern suite feeds LibTorch 1.13 archives saved by torch 2.x, whose refused load leaks
# inside LibTorch's TorchScript compiler (libtorch_cpu's graph nodes): plain trees only too.
# The detection models' test is LibTorch's torchvision code for most of its 40 s: plain trees only.
(cd build-asan && ctest --output-on-failure -j 2 -E '^(RealModels|Modern)\.|^Pipelines\.DetectionModels') | tee -a "$LOG"

stage "full: fuzzers (build-fuzz/)"
FUZZ_SECONDS=${FUZZ_SECONDS:-45} scripts/fuzz.sh
stage "done"
summary
