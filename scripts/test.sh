#!/usr/bin/env bash
# README command 2: install what is missing, build with warnings as errors, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DBATCHCHECK_WERROR=ON -DBATCHCHECK_BUILD_TESTS=ON
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j 2
