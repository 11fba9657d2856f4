#!/usr/bin/env bash
# The pip package, as a user gets it: an sdist of the checkout; the prebuilt wheel made from that
# sdist by scripts/wheel.sh (pip, scikit-build-core, CMake against the torch of a fresh virtual
# environment, the CUDA toolkit off PATH; auditwheel) and checked (its tag, its torch pin, what it
# bundles); then installed into a fresh venv that holds only torch, with no compiler on PATH, and
# the `batchcheck` command, `python -m batchcheck` and the Python package used from there alone.
#
#   test_package.sh <source dir> <python with torch> <work dir> [<C++ compiler>]
#
# The fresh venv holds torch and numpy as links to the build Python's copies, with their
# dependencies alone (a copy would be 5 GB per run): nothing else of that site-packages, a
# batchcheck installed there included. Links in its own site-packages, as pip would put them: the
# engine finds LibTorch beside the package, as a user's does. The wheel's objects come from ccache when
# the default build compiled the same sources.
set -euo pipefail
SRC=$1 PY=$2 WORK=$3 CXX_OF_THE_BUILD=${4:-}
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK/dist" "$WORK/src" "$WORK/no-compiler"
"$SRC/scripts/venv-with-torch.sh" "$WORK/venv" "$PY"
V=$WORK/venv/bin
"$V/python" -c 'import torch, numpy' || fail "the fresh venv cannot import torch and numpy through the links"
! "$V/python" -c 'import batchcheck' 2>/dev/null || fail "the fresh venv sees a batchcheck before installing one"
"$V/pip" install -q --disable-pip-version-check build

echo "== sdist" >&2
"$V/python" -m build --sdist -o "$WORK/dist" "$SRC" >/dev/null
sdist=$(ls "$WORK/dist"/batchcheck-*.tar.gz)
tar tzf "$sdist" >"$WORK/sdist.txt"
grep -q '/lib/engine/torch_backend.cpp$' "$WORK/sdist.txt" || fail "the sdist lacks the engine's sources"
grep -q '/scripts/wheel.sh$' "$WORK/sdist.txt" || fail "the sdist lacks scripts/wheel.sh"
! grep -qE '^[^/]+/(tests|build[^/]*|bench-data)/' "$WORK/sdist.txt" || fail "the sdist carries tests or build trees"
tar xzf "$sdist" -C "$WORK/src"
unpacked=$(ls -d "$WORK/src"/batchcheck-*)

echo "== the prebuilt wheel from the sdist (scripts/wheel.sh), without the CUDA toolkit on PATH" >&2
nocuda_path=$(tr ':' '\n' <<<"$PATH" | grep -v -i cuda | paste -sd: -)
# The default build's compiler by the same name: GCC's precompiled headers differ by the driver's
# name (c++ or x86_64-linux-gnu-g++), and so would every object ccache could share.
if [[ -n $CXX_OF_THE_BUILD ]]; then export CXX=$CXX_OF_THE_BUILD; fi
wheel=$(env -u CUDA_HOME -u CUDA_PATH PATH="$nocuda_path" BATCHCHECK_PYTHON="$V/python" \
  WHEEL_BUILD_DIR="$unpacked/build-wheel" BATCHCHECK_WERROR=ON "$unpacked/scripts/wheel.sh" "$unpacked" "$WORK/dist" 2>"$WORK/wheel.log" | tail -1) || { tail -40 "$WORK/wheel.log" >&2; fail "scripts/wheel.sh"; }
[[ $(basename "$wheel") =~ ^batchcheck-[0-9.]+-py3-none-manylinux_[0-9]+_[0-9]+_x86_64\.whl$ ]] || fail "the wheel is named $(basename "$wheel")"
"$V/python" -m zipfile -l "$wheel" >"$WORK/wheel.txt"
for f in batchcheck/_bin/batchcheck batchcheck/_bin/libbatchcheck_scan.so batchcheck/_bin/libbatchcheck_inprocess.so \
  batchcheck/export.py batchcheck/_version.py; do
  grep -q "^$f " "$WORK/wheel.txt" || fail "the wheel lacks $f"
done
for lib in libjpeg libpng libwebp; do
  grep -qE "^batchcheck\.libs/$lib[^ ]*\.so" "$WORK/wheel.txt" || fail "the wheel does not bundle $lib"
done
! grep -qE "(libtorch|libc10)[^ ]*\.so" "$WORK/wheel.txt" || fail "the wheel bundles torch's own libraries"
torch_minor=$("$V/python" -c 'import torch; print(".".join(torch.__version__.split("+")[0].split(".")[:2]))')
"$V/python" -m zipfile -e "$wheel" "$WORK/wheel-files" >/dev/null
grep -qx "Requires-Dist: torch==$torch_minor.\*" "$WORK"/wheel-files/batchcheck-*.dist-info/METADATA ||
  fail "the wheel does not require torch==$torch_minor.*"
readelf -d "$WORK/wheel-files/batchcheck/_bin/libbatchcheck_scan.so" >"$WORK/wheel-dynamic.txt"
grep -qE '(RUNPATH|RPATH).*\$ORIGIN/../../torch/lib' "$WORK/wheel-dynamic.txt" || fail "the engine does not look for LibTorch next to the package"
! grep -q "$(dirname "$("$PY" -c 'import torch; print(torch.__file__)')")" "$WORK/wheel-dynamic.txt" ||
  fail "the engine names this machine's torch: not right to publish"

# No compiler anywhere on PATH: installing is unpacking.
for c in gcc g++ cc c++ clang clang++ x86_64-linux-gnu-gcc x86_64-linux-gnu-g++; do
  printf '#!/bin/sh\necho "test_package: %s was called: the wheel must install without a compiler" >&2\nexit 1\n' "$c" >"$WORK/no-compiler/$c"
  chmod +x "$WORK/no-compiler/$c"
done
export PATH="$WORK/no-compiler:$PATH" CC=false CXX=false
echo "== install the wheel into the fresh venv (torch only, no compiler)" >&2
t0=$(date +%s.%N)
"$V/pip" install -q --disable-pip-version-check --no-index "$wheel" || fail "pip install of the wheel"
echo "   installed in $("$V/python" -c "import sys; print(round($(date +%s.%N) - $t0, 1))") s" >&2
ver=$("$V/python" -c 'import batchcheck; print(batchcheck.__version__)')
want=$(sed -nE 's/^project\(batchcheck VERSION ([0-9.]+).*/\1/p' "$SRC/CMakeLists.txt")
[[ $ver == "$want" ]] || fail "batchcheck.__version__ is '$ver', CMakeLists.txt says '$want'"
torch_ver=$("$V/python" -c 'import torch; print(torch.__version__.split("+")[0])')
out=$("$V/batchcheck" --version)
[[ $out == "batchcheck $want (LibTorch $torch_ver)" ]] || fail "batchcheck --version printed '$out'"
out=$(cd "$WORK" && "$V/python" -m batchcheck --version)
[[ $out == "batchcheck $want (LibTorch $torch_ver)" ]] || fail "python -m batchcheck --version printed '$out'"
readelf -d "$("$V/python" -c 'import batchcheck, os; print(os.path.dirname(batchcheck.__file__))')/_bin/libbatchcheck_scan.so" >"$WORK/dynamic.txt"
grep -qE '(RUNPATH|RPATH).*\$ORIGIN/../../torch/lib' "$WORK/dynamic.txt" || fail "the engine does not look for LibTorch next to the package"

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
echo "== the wheel installed with --target and used through PYTHONPATH, another libtorch first on the loader's path" >&2
# As with pip install --user, or batchcheck and torch in two environments: no torch beside the
# package, and a system libtorch (Debian's libtorch-dev; here a stand-in of another version, first
# on LD_LIBRARY_PATH) found before the torch the user imports. The engine must take the imported one.
"$SRC/scripts/venv-with-torch.sh" "$WORK/venv-bare" "$PY"
"$V/pip" install -q --disable-pip-version-check --no-index --no-deps --target "$WORK/target" "$wheel" || fail "pip install --target"
mkdir -p "$WORK/other-torch/torch/lib"
echo "__version__ = '2.14.1'" >"$WORK/other-torch/torch/version.py"
echo "not a library" >"$WORK/other-torch/torch/lib/libtorch_cpu.so"
set +e
(cd "$WORK" && PYTHONPATH="$WORK/target" LD_LIBRARY_PATH="$WORK/other-torch/torch/lib" \
  "$WORK/venv-bare/bin/python" "$SRC/sample_configs/python_scan.py" 2>"$WORK/target.err")
rc=$?
(cd "$WORK" && PYTHONPATH="$WORK/target" LD_LIBRARY_PATH="$WORK/other-torch/torch/lib" \
  "$WORK/venv-bare/bin/python" -m batchcheck scan "$SRC/sample_configs/segmentation_tail.json" -o "$WORK/target.json" 2>"$WORK/target-cli.err")
rc2=$?
set -e
[[ $rc == 1 ]] || { cat "$WORK/target.err" >&2; fail "scan() through PYTHONPATH exited $rc, expected 1 (the imported torch, not the one first on the loader's path)"; }
grep -q "batchnorm-single-value at batch 64, samples \[1784\]" "$WORK/target.err" || { cat "$WORK/target.err" >&2; fail "scan() through PYTHONPATH: the example's batch of one"; }
[[ $rc2 == 1 ]] || { cat "$WORK/target-cli.err" >&2; fail "python -m batchcheck scan through PYTHONPATH exited $rc2, expected 1"; }
# A step run as written: the engine runs in this Python (_inprocess.py), on the torch it imported.
(cd "$WORK" && PYTHONPATH="$WORK/target" LD_LIBRARY_PATH="$WORK/other-torch/torch/lib" "$WORK/venv-bare/bin/python" - <<'PY'
import torch, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
import batchcheck
from batchcheck import _cli, _inprocess
assert _inprocess.library(_cli.binary()) is not None, "the installed package's in-process engine does not load"
y = torch.randint(0, 3, (20,), generator=torch.Generator().manual_seed(0))
y[13] = 7
r = batchcheck.scan(torch.nn.Linear(4, 3), DataLoader(TensorDataset(torch.rand(20, 4), y), batch_size=4),
                    step=lambda m, b: F.cross_entropy(m(b[0]), b[1]), quiet=True)
assert not r.ok and (3, [13]) in [(o["batch"], o["samples"]) for f in r.findings for o in f.data["occurrences"]], r.text
PY
) || fail "scan(step=) through PYTHONPATH with the engine in the scanning process"
echo "package: ok ($(basename "$wheel"))" >&2
