#!/usr/bin/env bash
# The pip package, as a user gets it: an sdist of the checkout, a wheel built from that sdist
# (pip, scikit-build-core, CMake) against the torch of a fresh virtual environment with the CUDA
# toolkit off PATH, the wheel installed there; then the `batchcheck` command, `python -m
# batchcheck` and the Python package are used from that environment alone.
#
#   test_package.sh <source dir> <python with torch> <work dir> [<C++ compiler>]
#
# The fresh venv gets torch through a .pth file naming the build Python's site-packages (a copy
# of torch and its CUDA libraries would be 5 GB per run); everything else it has, pip put there.
# The wheel's objects come from ccache when the default build compiled the same sources.
set -euo pipefail
SRC=$1 PY=$2 WORK=$3 CXX_OF_THE_BUILD=${4:-}
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK/dist" "$WORK/src"

"$PY" -m venv "$WORK/venv"
V=$WORK/venv/bin
site=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "$site" > "$("$V/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_torch_of_the_build.pth"
"$V/python" -c 'import torch' || fail "the fresh venv cannot import torch through the .pth"
"$V/pip" install -q --disable-pip-version-check build

echo "== sdist" >&2
"$V/python" -m build --sdist -o "$WORK/dist" "$SRC" >/dev/null
sdist=$(ls "$WORK/dist"/batchcheck-*.tar.gz)
tar tzf "$sdist" >"$WORK/sdist.txt"
grep -q '/lib/engine/torch_backend.cpp$' "$WORK/sdist.txt" || fail "the sdist lacks the engine's sources"
! grep -qE '^[^/]+/(tests|build[^/]*|bench-data)/' "$WORK/sdist.txt" || fail "the sdist carries tests or build trees"
tar xzf "$sdist" -C "$WORK/src"
unpacked=$(ls -d "$WORK/src"/batchcheck-*)

echo "== wheel from the sdist, without the CUDA toolkit on PATH" >&2
nocuda_path=$(tr ':' '\n' <<<"$PATH" | grep -v -i cuda | paste -sd: -)
settings=(--config-settings=build-dir="$unpacked/build" --config-settings=cmake.define.BATCHCHECK_WERROR=ON)
# The default build's compiler by the same name: GCC's precompiled headers differ by the driver's
# name (c++ or x86_64-linux-gnu-g++), and so would every object ccache could share.
if [[ -n $CXX_OF_THE_BUILD ]]; then export CXX=$CXX_OF_THE_BUILD; fi
if command -v ccache >/dev/null 2>&1; then
  settings+=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache)")
  export CCACHE_BASEDIR=$unpacked CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
fi
env -u CUDA_HOME -u CUDA_PATH PATH="$nocuda_path" "$V/pip" wheel -q --disable-pip-version-check --no-deps \
  -w "$WORK/dist" "${settings[@]}" "$unpacked" >"$WORK/wheel.log" 2>&1 || { tail -40 "$WORK/wheel.log" >&2; fail "pip wheel"; }
wheel=$(ls "$WORK/dist"/batchcheck-*.whl)
"$V/python" -m zipfile -l "$wheel" >"$WORK/wheel.txt"
for f in batchcheck/_bin/batchcheck batchcheck/_bin/libbatchcheck_scan.so batchcheck/export.py batchcheck/_version.py; do
  grep -q "^$f " "$WORK/wheel.txt" || fail "the wheel lacks $f"
done

echo "== install the wheel into the fresh venv" >&2
"$V/pip" install -q --disable-pip-version-check "$wheel"
ver=$("$V/python" -c 'import batchcheck; print(batchcheck.__version__)')
want=$(sed -nE 's/^project\(batchcheck VERSION ([0-9.]+).*/\1/p' "$SRC/CMakeLists.txt")
[[ $ver == "$want" ]] || fail "batchcheck.__version__ is '$ver', CMakeLists.txt says '$want'"
torch_ver=$("$V/python" -c 'import torch; print(torch.__version__.split("+")[0])')
out=$("$V/batchcheck" --version)
[[ $out == "batchcheck $want (LibTorch $torch_ver)" ]] || fail "batchcheck --version printed '$out'"
out=$(cd "$WORK" && "$V/python" -m batchcheck --version)
[[ $out == "batchcheck $want (LibTorch $torch_ver)" ]] || fail "python -m batchcheck --version printed '$out'"
readelf -d "$("$V/python" -c 'import batchcheck, os; print(os.path.dirname(batchcheck.__file__))')/_bin/libbatchcheck_scan.so" >"$WORK/dynamic.txt"
grep -q 'RUNPATH.*\$ORIGIN/../../torch/lib' "$WORK/dynamic.txt" || fail "the engine does not look for LibTorch next to the package"

echo "== scan the bundled sample with the installed command (from another folder)" >&2
set +e
(cd "$WORK" && "$V/batchcheck" scan "$SRC/sample_configs/segmentation_tail.json" -o "$WORK/report.json" 2>"$WORK/scan.err")
rc=$?
set -e
[[ $rc == 1 ]] || { cat "$WORK/scan.err" >&2; fail "scan exited $rc, expected 1 (the seed's NaN at the last batch)"; }
"$V/python" - "$WORK/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
hit = [f for f in r["findings"] if f["id"] == "output-nonfinite"]
assert hit and hit[0]["batch"] == 130 and hit[0]["samples"] == [1040], hit
PY
echo "== the README's Python example and python -m batchcheck scan file.py:function, from the installed package" >&2
set +e
(cd "$WORK" && env -u PYTHONPATH "$V/python" "$SRC/sample_configs/python_scan.py" 2>"$WORK/example.err")
rc=$?
(cd "$WORK" && env -u PYTHONPATH "$V/python" -m batchcheck scan "$SRC/sample_configs/python_scan.py:setup" -o "$WORK/py.json" 2>"$WORK/pym.err")
rc2=$?
set -e
[[ $rc == 1 ]] || { cat "$WORK/example.err" >&2; fail "the Python example exited $rc, expected 1"; }
grep -q "batchnorm-single-value at batch 64, samples \[1784\]" "$WORK/example.err" || { cat "$WORK/example.err" >&2; fail "the example's batch of one"; }
grep -q "input-nonfinite at batch [0-9]*, samples \[1234\]" "$WORK/example.err" || { cat "$WORK/example.err" >&2; fail "the example's NaN image"; }
[[ $rc2 == 1 ]] || { cat "$WORK/pym.err" >&2; fail "python -m batchcheck scan file.py:setup exited $rc2, expected 1"; }
"$V/python" - "$WORK/py.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert [f["batch"] for f in r["findings"] if f["id"] == "batchnorm-single-value"] == [64], r["findings"]
PY
echo "package: ok ($(basename "$wheel"))" >&2
