#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time
# (FUZZ_SECONDS, default 45) from the seed corpus in tests/fuzz/corpus. A crash fails.
# fuzz_scan runs the default build's binary on every input (built here if it is not).
# FUZZ_BUILD_DIR names a clang tree configured with -DBATCHCHECK_FUZZ_TARGETS=ON that already
# holds the targets (CI's second tier); without it they build in build-fuzz/ (-O2).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-45}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
if [[ -n "${FUZZ_BUILD_DIR:-}" ]]; then
  BUILD_DIR=$FUZZ_BUILD_DIR
  grep -q '^BATCHCHECK_FUZZ_TARGETS:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || {
    echo "fuzz: $BUILD_DIR was not configured with -DBATCHCHECK_FUZZ_TARGETS=ON" >&2
    exit 1
  }
else
  BUILD_DIR=build-fuzz
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DBATCHCHECK_FUZZ=ON -DBATCHCHECK_WERROR=ON >/dev/null
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-2}"
source scripts/torch-env.sh
env -u BUILD_DIR scripts/build.sh >/dev/null
export BATCHCHECK_FUZZ_BIN="$PWD/${BC_BUILD_DIR}/app/batchcheck"
for target in config npy file_kind pickle_check partial image views scan; do
  max_len=4096
  # A TorchScript archive seed is 3.5 KB; each input is a whole scan (about 0.5 s).
  [[ $target == scan ]] && max_len=16384
  # Work on a copy: the corpus in the repository stays the small, reviewed seed set.
  work="$BUILD_DIR/corpus-$target"
  rm -rf "$work" && mkdir -p "$work" && cp tests/fuzz/corpus/$target/* "$work/"
  bin="$BUILD_DIR/tests/fuzz/fuzz_$target"
  [[ -x "$bin" ]] || { echo "fuzz: $bin was not built" >&2; exit 1; }
  echo "fuzz: fuzz_$target for ${SECONDS_EACH}s" >&2
  "$bin" -max_total_time="$SECONDS_EACH" -max_len=$max_len -print_final_stats=1 \
    -artifact_prefix="$BUILD_DIR/crash-$target-" "$work" 2>"$BUILD_DIR/fuzz_$target.log" || {
    tail -40 "$BUILD_DIR/fuzz_$target.log" >&2
    echo "fuzz: fuzz_$target found a crash; its input is in $BUILD_DIR/crash-$target-*" >&2
    exit 1
  }
  grep -E "stat::number_of_executed_units|cov:" "$BUILD_DIR/fuzz_$target.log" | tail -2 >&2
done
echo "fuzz: no crashes" >&2
