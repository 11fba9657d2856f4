# bc_torch from a Python's torch package without torch's CMake config, the way
# torch.utils.cpp_extension builds an extension: torch/include, libc10 and libtorch_cpu, and the
# package's C++ ABI flag. find_package(Torch) on a CUDA wheel requires the CUDA toolkit even for a
# CPU build; this does not, so `pip install` needs no nvcc. CUDA stays a run-time load
# (engine/torch_util.h: load_cuda_runtime), as in the default build (cmake/TorchCpu.cmake).
#
# Which Python: BATCHCHECK_TORCH_PYTHON, else the one scikit-build-core runs (Python_EXECUTABLE).
# pip's isolated build hides the environment's own site-packages behind PYTHONPATH; `-E` looks
# past it, so the torch linked is the one the package will be imported next to.
if(NOT BATCHCHECK_TORCH_PYTHON)
  if(Python_EXECUTABLE)
    set(BATCHCHECK_TORCH_PYTHON "${Python_EXECUTABLE}")
  else()
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
    set(BATCHCHECK_TORCH_PYTHON "${Python3_EXECUTABLE}")
  endif()
endif()
set(_bc_probe "import os, torch\nprint(os.path.dirname(torch.__file__))\nprint(torch.__version__.split('+')[0])\nprint(int(torch._C._GLIBCXX_USE_CXX11_ABI))")
set(_bc_torch_found FALSE)
foreach(_bc_flags "" "-E")
  execute_process(COMMAND "${BATCHCHECK_TORCH_PYTHON}" ${_bc_flags} -c "${_bc_probe}"
    RESULT_VARIABLE _bc_rc OUTPUT_VARIABLE _bc_out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_bc_rc EQUAL 0)
    set(_bc_torch_found TRUE)
    break()
  endif()
endforeach()
if(NOT _bc_torch_found)
  message(FATAL_ERROR "batchcheck builds against the torch of the Python that installs it, and "
    "${BATCHCHECK_TORCH_PYTHON} cannot import torch: install torch first (pip install torch), "
    "or name a Python that has it with -DBATCHCHECK_TORCH_PYTHON=/path/to/python")
endif()
string(REPLACE "\n" ";" _bc_out "${_bc_out}")
list(GET _bc_out 0 _bc_torch_dir)
list(GET _bc_out 1 Torch_VERSION)
list(GET _bc_out 2 _bc_cxx11_abi)
if(Torch_VERSION VERSION_LESS 2)
  message(FATAL_ERROR "batchcheck's pip build needs torch 2.x; ${BATCHCHECK_TORCH_PYTHON} has torch ${Torch_VERSION}")
endif()
set(TORCH_LIBRARY "${_bc_torch_dir}/lib/libtorch.so")  # what cmake/TorchWheel.cmake reads

add_library(bc_torch INTERFACE)
target_include_directories(bc_torch SYSTEM INTERFACE
  "${_bc_torch_dir}/include" "${_bc_torch_dir}/include/torch/csrc/api/include")
target_compile_definitions(bc_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${_bc_cxx11_abi})
# torch 2.x's headers are C++20 (its own config forces it too).
target_compile_features(bc_torch INTERFACE cxx_std_20)
# --no-as-needed: libtorch_cpu registers the operators at load time; nothing may drop it.
target_link_libraries(bc_torch INTERFACE
  "-Wl,--no-as-needed,${_bc_torch_dir}/lib/libtorch_cpu.so" "-Wl,--as-needed"
  "${_bc_torch_dir}/lib/libc10.so")
message(STATUS "batchcheck: LibTorch ${Torch_VERSION} of ${BATCHCHECK_TORCH_PYTHON} (${_bc_torch_dir}), without its CMake config")
