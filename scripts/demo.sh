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
BATCHCHECK_SETUP=demo scripts/setup.sh
source scripts/torch-env.sh
# The bundled samples' models and data (sample_configs/generated/), made by a build of their own
# (build-demo/): the samples' generator only, no tests. -Werror as the suite's builds: the same
# flags, so ccache shares the objects with them.
echo "+ building the samples' data (build-demo/)" >&2
BUILD_DIR=build-demo BUILD_TARGET=samples scripts/build.sh -DBATCHCHECK_BUILD_TESTS=OFF -DBATCHCHECK_WERROR=ON
echo "+ scripts/wheel.sh   # dist/batchcheck-*.whl, built against $("$BC_PYTHON" -c 'import torch; print("torch", torch.__version__)')" >&2
wheel=$(BATCHCHECK_PYTHON=$BC_PYTHON BATCHCHECK_WERROR=ON scripts/wheel.sh | tail -1)
DEMO=${BATCHCHECK_DEMO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/batchcheck/demo-venv}
scripts/venv-with-torch.sh "$DEMO" "$BC_PYTHON"
echo "+ pip install $wheel   (into $DEMO)" >&2
"$DEMO/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
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
