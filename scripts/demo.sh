#!/usr/bin/env bash
# README command 1: install what is missing, build, and run batchcheck on the bundled sample.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
echo "+ batchcheck suggest --samples 1041 --batch-size 8" >&2
"$BUILD_DIR/app/batchcheck" suggest --samples 1041 --batch-size 8
