#!/usr/bin/env bash
# Configures and builds batchcheck into ./build (./build-debian with BATCHCHECK_TORCH=debian), or
# $BUILD_DIR ($BUILD_TARGET: that target only). Extra args go to cmake. Which torch: see scripts/torch-env.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch-env.sh
bc_cmake_args
BUILD_DIR=${BUILD_DIR:-$BC_BUILD_DIR}
# A build folder configured for another torch is made afresh: CMake caches the LibTorch it found.
if [[ -f "$BUILD_DIR/CMakeCache.txt" ]] &&
   ! grep -qxF "BATCHCHECK_PYTHON:FILEPATH=$BC_PYTHON" "$BUILD_DIR/CMakeCache.txt"; then
  echo "build: $BUILD_DIR was configured for another torch; configuring it afresh" >&2
  rm -rf "$BUILD_DIR"
fi
# ccache, where installed (scripts/setup.sh does): paths relative to the tree, so another
# checkout or the pip package's build of the same sources (tests/package) reuses the objects.
if command -v ccache >/dev/null 2>&1; then
  BC_CMAKE_ARGS+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
fi
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" "${BC_CMAKE_ARGS[@]}" "$@" >/dev/null
else
  cmake -S . -B "$BUILD_DIR" "${BC_CMAKE_ARGS[@]}" "$@" >/dev/null
fi
# Two jobs: the torch translation units need ~1.5 GB each. BUILD_TARGET builds one target only.
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
