#!/usr/bin/env bash
# README command 2: install what is missing, build with warnings as errors, run every test, for
# both supported builds: the default (LibTorch of torch 2.15.0 from pip, build/) and Debian's
# libtorch-dev 1.13 (build-debian/); then the suite under ASan + UBSan, then the fuzzers for a
# bounded time. BATCHCHECK_QUICK=1 runs the default build's suite only (a fast local loop).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# Each stage line starts with the time since the start (CI gives the whole run 45 minutes).
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
scripts/build.sh -DBATCHCHECK_WERROR=ON -DBATCHCHECK_BUILD_TESTS=ON
(cd "${BUILD_DIR:-$BC_BUILD_DIR}" && ctest --output-on-failure -j 2) | tee -a "$LOG"
skips "${BUILD_DIR:-$BC_BUILD_DIR}"

if [[ "${BATCHCHECK_QUICK:-0}" == 1 ]]; then
  summary
  exit 0
fi

stage "build and test, Debian's libtorch-dev: $(torch_line /usr/bin/python3) (build-debian/)"
BATCHCHECK_TORCH=debian scripts/setup.sh
# The real-model suite on LibTorch 1.13: three families (residual + BatchNorm, inverted residual
# with DDP ranks, segmentation) instead of twelve, which take 9 of CI's minutes on 1.13; the
# default build runs all twelve.
BATCHCHECK_TORCH=debian BUILD_DIR=build-debian scripts/build.sh -DBATCHCHECK_WERROR=ON -DBATCHCHECK_BUILD_TESTS=ON \
  -DBATCHCHECK_REALMODELS_ARCHS="resnet18 mobilenet_v2 lraspp"
(cd build-debian && ctest --output-on-failure -j 2) | tee -a "$LOG"
skips build-debian

stage "ASan + UBSan build and test, Debian's libtorch-dev (build-asan/)"
# Against Debian's LibTorch: no suppressions are needed there, so leaks and UB reports fail the run.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# -O1: the sanitized LibTorch translation units compile in half the time of -O2 (the tests
# themselves are -O0 in every tree: tests/CMakeLists.txt).
BATCHCHECK_TORCH=debian BUILD_DIR=build-asan scripts/build.sh -DENABLE_SANITIZERS=ON -DBATCHCHECK_WERROR=ON -DBATCHCHECK_BUILD_TESTS=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
# The real-model suite runs torchvision's networks (LibTorch's code, not ours) for minutes;
# under ASan it would take most of CI's budget, so it runs in the plain trees only. The
# Modern suite feeds LibTorch 1.13 archives saved by torch 2.x, whose refused load leaks
# inside LibTorch's TorchScript compiler (libtorch_cpu's graph nodes): plain trees only too.
# The detection models' test is LibTorch's torchvision code for most of its 40 s: plain trees only.
(cd build-asan && ctest --output-on-failure -j 2 -E '^(RealModels|Modern)\.|^Pipelines\.DetectionModels') | tee -a "$LOG"

stage "fuzzers (build-fuzz/)"
# Eight targets at 15 s each: 2 minutes of CI (scripts/fuzz.sh alone defaults to 45 s each).
FUZZ_SECONDS=${FUZZ_SECONDS:-15} scripts/fuzz.sh
stage "done"
summary
