#!/usr/bin/env bash
# Configures and builds batchcheck into ./build (or $BUILD_DIR). Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" "$@" >/dev/null
else
  cmake -S . -B "$BUILD_DIR" "$@" >/dev/null
fi
# Two jobs: the torch translation units need ~1.5 GB each.
cmake --build "$BUILD_DIR" -j "${JOBS:-2}"
