# bc_torch: what our LibTorch code links. A CUDA build of LibTorch (pip's wheel) links
# libtorch_cuda and, through it, cuDNN, cuBLAS, NCCL...: ~0.1 s of every process's start-up and
# ~250 MB of its memory (private relocations), which a scan on the CPU never uses. There we link
# libtorch_cpu only, and the engine loads libtorch_cuda when a config asks for a CUDA device
# (engine/torch_util.h: load_cuda_runtime), before anything asks LibTorch about CUDA.
add_library(bc_torch INTERFACE)
if(TARGET torch_cuda AND TARGET torch_cpu_library AND NOT BATCHCHECK_LINK_CUDA)
  get_target_property(_bc_torch_includes torch INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(_bc_torch_options torch INTERFACE_COMPILE_OPTIONS)
  get_target_property(_bc_torch_features torch INTERFACE_COMPILE_FEATURES)
  target_link_libraries(bc_torch INTERFACE torch_cpu_library c10)
  target_include_directories(bc_torch INTERFACE ${_bc_torch_includes})
  if(_bc_torch_options)
    target_compile_options(bc_torch INTERFACE ${_bc_torch_options})
  endif()
  if(_bc_torch_features)
    target_compile_features(bc_torch INTERFACE ${_bc_torch_features})
  endif()
  message(STATUS "batchcheck: linking libtorch_cpu only; libtorch_cuda is loaded for CUDA scans")
else()
  target_link_libraries(bc_torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_options(bc_torch INTERFACE ${TORCH_CXX_FLAGS})
endif()
