#!/usr/bin/env bash
# Installs exactly what batchcheck needs and this machine lacks: Debian packages with apt-get,
# and (default build) torch 2.15.0 in a virtual environment outside the checkout, with pip.
# Idempotent: prints nothing and touches nothing when everything is already there.
# --print-packages: the Debian packages this set-up installs, one a line, and nothing else
# (the suite checks that every file a build reads comes from them: tools/build_deps.py).
# Which torch: see scripts/torch-env.sh (BATCHCHECK_TORCH=pip|debian, BATCHCHECK_PYTHON=...).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch-env.sh

# BATCHCHECK_SETUP=demo (README command 1): what building and using batchcheck needs, not the
# test suite's tools (GoogleTest, libxml2, a browser, clang, the real-library venv's extras).
SETUP=${BATCHCHECK_SETUP:-all}
# python3 and python3-venv in every mode: scripts/wheel.sh makes its tools' venv with python3.
PACKAGES=(
  cmake g++ make ninja-build ccache
  libcli11-dev libspdlog-dev nlohmann-json3-dev
  libjpeg-dev libpng-dev libwebp-dev
  python3 python3-venv
)
if [[ $SETUP != demo ]]; then
  PACKAGES+=(libgtest-dev libbenchmark-dev libxml2-utils libxml2-dev chromium-headless-shell fonts-dejavu-core)
fi
case $BC_TORCH in
  debian) PACKAGES+=(libtorch-dev python3-torch python3-torchvision python3-numpy) ;;
esac
# clang builds the libFuzzer targets and tier 2's ASan tree; optional for the rest. Its sanitizer
# and libFuzzer runtimes (and <fuzzer/FuzzedDataProvider.h>) are libclang-rt-14-dev, which clang
# only recommends: --no-install-recommends below leaves it out unless it is named.
if [[ "${BATCHCHECK_WITH_FUZZ:-1}" == 1 && $SETUP != demo ]]; then PACKAGES+=(clang libclang-rt-14-dev); fi

if [[ "${1:-}" == --print-packages ]]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
    command -v sudo >/dev/null 2>&1 || { echo "setup: error: installing ${missing[*]} needs root (or sudo, which is not installed)" >&2; exit 2; }
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[[ $BC_TORCH == debian ]] && exit 0

if [[ $BC_TORCH == python ]]; then
  "$BC_PYTHON" -c 'import torch, numpy' 2>/dev/null || {
    echo "setup: error: BATCHCHECK_PYTHON=$BC_PYTHON cannot import torch and numpy" >&2
    exit 2
  }
  exit 0
fi

want="torch==$BC_TORCH_PIN torchvision==$BC_TORCHVISION_PIN numpy==$BC_NUMPY_PIN"
# The libraries users train with, for the suite's real-library cases (Lightning and Hugging Face
# callbacks; timm, transformers, segmentation-models-pytorch and MONAI models): pure Python, and
# pinned so that pip never moves the torch above. Not for the demo.
if [[ $SETUP != demo ]]; then
  want+=" lightning==2.6.6 transformers==4.57.6 accelerate==1.16.0 timm==1.0.31"
  want+=" segmentation-models-pytorch==0.6.0 monai==1.6.1 torch-geometric==2.8.1"
fi
have_pins() {
  [[ -x "$BC_PYTHON" ]] && "$BC_PYTHON" - $want 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
wanted = dict(a.split("==") for a in sys.argv[1:])
sys.exit(0 if all(version(p).split("+")[0] == v for p, v in wanted.items()) else 1)
PY
}
have_pins && exit 0
echo "setup: installing $want into $BATCHCHECK_VENV (about 5.4 GB on disk, 1-3 minutes)" >&2
[[ -x "$BC_PYTHON" ]] || /usr/bin/python3 -m venv "$BATCHCHECK_VENV"
"$BC_PYTHON" -m pip install -q --disable-pip-version-check $want
have_pins || { echo "setup: error: $BATCHCHECK_VENV does not hold $want after pip install" >&2; exit 1; }
