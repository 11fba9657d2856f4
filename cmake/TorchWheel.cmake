# LibTorch from a pip-installed torch: its CUDA libraries (cuDNN, NCCL, cudart, ...) live in
# site-packages/nvidia/*/lib, next to torch/, where libtorch_cuda.so's own RPATH finds them.
# The linker and our binaries must see those same copies first: the CUDA toolkit's older
# libnccl/libcudart in /usr/local/cuda would otherwise be linked (missing symbols) or loaded
# (a second CUDA runtime next to the one torch was built with).
get_filename_component(_bc_torch_root "${TORCH_LIBRARY}" DIRECTORY)          # .../torch/lib
get_filename_component(_bc_site_packages "${_bc_torch_root}/../.." ABSOLUTE)  # site-packages
file(GLOB _bc_wheel_cuda_dirs LIST_DIRECTORIES true "${_bc_site_packages}/nvidia/*/lib")
if(_bc_wheel_cuda_dirs)
  list(JOIN _bc_wheel_cuda_dirs ":" _bc_joined)
  add_link_options("LINKER:-rpath-link,${_bc_joined}")
  list(PREPEND CMAKE_BUILD_RPATH ${_bc_wheel_cuda_dirs})
  message(STATUS "batchcheck: LibTorch from a torch wheel; its CUDA libraries: ${_bc_site_packages}/nvidia")
endif()
set(BATCHCHECK_TORCH_VERSION "${Torch_VERSION}")

# The Python whose torch matches the LibTorch linked: the oracle, interop and real-model tests
# make their models and expected batch orders with it. A wheel's own interpreter where there is
# one (a virtual environment's bin/), else Debian's (python3-torch for libtorch-dev).
if(_bc_wheel_cuda_dirs OR EXISTS "${_bc_site_packages}/../../../bin/python3")
  get_filename_component(_bc_default_python "${_bc_site_packages}/../../../bin/python3" ABSOLUTE)
  if(NOT EXISTS "${_bc_default_python}")
    set(_bc_default_python python3)
  endif()
else()
  set(_bc_default_python /usr/bin/python3)
endif()
set(BATCHCHECK_PYTHON "${_bc_default_python}" CACHE FILEPATH "Python with the torch that matches the LibTorch linked (tests)")

# A Python with torch 2.x for the tests that need models saved by today's torch (a transformer
# through scaled_dot_product_attention, torch.export programs): the build's own Python where it
# has torch 2.x, else (the libtorch-dev build) the venv scripts/setup.sh makes, when given.
if(Torch_VERSION VERSION_GREATER_EQUAL 2)
  set(_bc_default_torch2_python "${BATCHCHECK_PYTHON}")
else()
  set(_bc_default_torch2_python "")
endif()
set(BATCHCHECK_TORCH2_PYTHON "${_bc_default_torch2_python}" CACHE FILEPATH "Python with torch 2.x (tests of models saved by torch 2.x)")
