#!/usr/bin/env bash
# Performance harness (issue 5): builds a Release tree with the benchmarks, generates the
# workloads once (bench-data/, cached), prints whole-process figures and ratios, then the
# Google Benchmark micro-benchmarks. Extra args go to scripts/bench.py (e.g. --runs 3).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=build-bench scripts/build.sh -DCMAKE_BUILD_TYPE=Release -DBATCHCHECK_BUILD_BENCHMARKS=ON -DBATCHCHECK_BUILD_TESTS=OFF
status=0
python3 scripts/bench.py --build build-bench "$@" || status=$?
echo
build-bench/bench/bench_micro --benchmark_min_time=0.2
echo
build-bench/bench/bench_localize --benchmark_min_time=0.5
exit $status
