# Sourced by setup.sh, build.sh and test.sh: which LibTorch batchcheck builds against.
#
#   BATCHCHECK_TORCH=pip     (default) the LibTorch inside a pip-installed torch 2.15.0, in a virtual
#                            environment outside the checkout ($BATCHCHECK_VENV), made once and reused
#   BATCHCHECK_TORCH=debian  Debian's libtorch-dev 1.13 (CPU only) and python3-torch for the tests
#   BATCHCHECK_PYTHON=/path/to/python
#                            the torch that Python already has (your own environment): no venv is made
#
# Sets BC_TORCH (pip|debian|python), BC_PYTHON, BC_BUILD_DIR (default build dir) and BC_CMAKE_ARGS.
BC_TORCH_PIN=2.15.0
BC_TORCHVISION_PIN=0.29.2
BC_NUMPY_PIN=2.4.6
BATCHCHECK_VENV=${BATCHCHECK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/batchcheck/venv-torch-$BC_TORCH_PIN}

if [[ -n "${BATCHCHECK_PYTHON:-}" ]]; then
  BC_TORCH=python
  BC_PYTHON=$BATCHCHECK_PYTHON
  BC_BUILD_DIR=build
else
  case "${BATCHCHECK_TORCH:-pip}" in
    pip) BC_TORCH=pip; BC_PYTHON=$BATCHCHECK_VENV/bin/python3; BC_BUILD_DIR=build ;;
    debian) BC_TORCH=debian; BC_PYTHON=/usr/bin/python3; BC_BUILD_DIR=build-debian ;;
    *) echo "batchcheck: error: BATCHCHECK_TORCH=${BATCHCHECK_TORCH}: expected pip or debian" >&2; exit 2 ;;
  esac
fi

# CMake arguments for the chosen torch (valid once setup.sh has run).
bc_cmake_args() {
  if [[ $BC_TORCH == debian ]]; then
    BC_CMAKE_ARGS=(-DCMAKE_PREFIX_PATH=/usr -DBATCHCHECK_PYTHON=/usr/bin/python3 -DBATCHCHECK_SETUP_TORCH=debian)
    # The venv's torch 2.x, where there is one, makes the archives a newer torch saves (tests).
    if [[ -x "$BATCHCHECK_VENV/bin/python3" ]]; then
      BC_CMAKE_ARGS+=("-DBATCHCHECK_TORCH2_PYTHON=$BATCHCHECK_VENV/bin/python3")
    fi
    return
  fi
  "$BC_PYTHON" -c 'import torch' 2>/dev/null || {
    echo "batchcheck: error: $BC_PYTHON: cannot import torch (scripts/setup.sh installs it; BATCHCHECK_TORCH=debian builds against libtorch-dev)" >&2
    exit 2
  }
  # LibTorch straight from the torch package, as the pip package builds (cmake/TorchPython.cmake):
  # no CUDA toolkit needed, and the same compile commands, so ccache shares their objects.
  BC_CMAKE_ARGS=(-DBATCHCHECK_TORCH_FROM_PYTHON=ON "-DBATCHCHECK_TORCH_PYTHON=$BC_PYTHON" "-DBATCHCHECK_PYTHON=$BC_PYTHON"
    "-DBATCHCHECK_SETUP_TORCH=$BC_TORCH")
}
