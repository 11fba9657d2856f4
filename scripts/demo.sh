#!/usr/bin/env bash
# README command 1: install what is missing, build batchcheck's wheel, install it the way a user
# does (pip install of the wheel: no compiler involved) into a venv of its own that holds torch,
# and scan the bundled samples with the installed command and the Python API: the seed's case
# (1041 images, batch 8, a model that turns NaN on the last batch of one) and the README's Python
# example (your own DataLoader: a NaN image, a last batch of one through BatchNorm).
#
# It compiles what the wheel and the samples need, never the test suite (README command 2 does),
# and installs nowhere the suite looks: the demo's venv is ~/.cache/batchcheck/demo-venv
# ($BATCHCHECK_DEMO_VENV), its wheel in dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
# Each step's time, where a fresh machine spends it (docs/install.md).
took() { echo "  ($(($SECONDS - ${1})) s)" >&2; }
echo "+ BATCHCHECK_SETUP=demo scripts/setup.sh   # Debian packages and the torch venv, where missing" >&2
t=$SECONDS
BATCHCHECK_SETUP=demo scripts/setup.sh
took $t
source scripts/torch-env.sh
# The wheel, and in the same build the bundled samples' models and data (sample_configs/generated/):
# one compile of the sources (-Werror as the suite's builds). No test is compiled.
echo "+ BATCHCHECK_SAMPLES=ON scripts/wheel.sh   # dist/batchcheck-*.whl, built against $("$BC_PYTHON" -c 'import torch; print("torch", torch.__version__)'), and the samples' data" >&2
t=$SECONDS
wheel=$(BATCHCHECK_PYTHON=$BC_PYTHON BATCHCHECK_WERROR=ON BATCHCHECK_SAMPLES=ON scripts/wheel.sh | tail -1)
took $t
DEMO=${BATCHCHECK_DEMO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/batchcheck/demo-venv}
scripts/venv-with-torch.sh "$DEMO" "$BC_PYTHON"
echo "+ pip install $wheel   (into $DEMO)" >&2
t=$SECONDS
"$DEMO/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
took $t
echo "+ batchcheck scan sample_configs/segmentation_tail.json -o segmentation_tail.report.json" >&2
status=0
"$DEMO/bin/batchcheck" scan sample_configs/segmentation_tail.json -o segmentation_tail.report.json || status=$?
echo "(exit code $status: 1 means the gate found errors, as it should on this sample; report in segmentation_tail.report.json)" >&2
[[ $status -eq 1 ]]
echo "+ python sample_configs/python_scan.py   # batchcheck.scan(model, loader, loss)" >&2
status=0
env -u PYTHONPATH "$DEMO/bin/python" sample_configs/python_scan.py || status=$?
echo "(exit code $status: 1 again, the NaN image and the last batch of one found)" >&2
[[ $status -eq 1 ]]
echo "demo: done in $((SECONDS - start)) s; batchcheck is installed in $DEMO (source $DEMO/bin/activate)" >&2
