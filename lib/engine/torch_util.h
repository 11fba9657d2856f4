#pragma once
// Small LibTorch helpers shared by the engine's translation units (data sources, model
// runners, the backend). Engine-internal: nothing outside lib/engine includes this.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <exception>
#include <string>

#include "core/backend.h"
#include "core/error_text.h"
#include "core/npy.h"

namespace batchcheck {

std::string dtype_name(at::ScalarType t);
at::ScalarType torch_dtype(NpyDtype d);
TensorMeta meta_of(const at::Tensor& t, bool drop_first = false);

// What an IValue is, in Python's words (never LibTorch's GenericDict/GenericList).
std::string describe(const c10::IValue& v);

std::string read_all(const std::string& path);

// A model file that exists is a regular, readable, non-empty file (InputError otherwise);
// `what` names the expected kind in the message.
void require_model_file(const std::string& path, const char* what);

// Loads libtorch_cuda.so, and libtorch.so which needs it, from beside libtorch_cpu.so when they
// are not loaded yet (the build links libtorch_cpu only: cmake/TorchCpu.cmake): for a CUDA
// device, and before a library built against the whole LibTorch (model.libraries, a .pt2
// package). Must come before anything asks LibTorch about CUDA, which settles its CUDA hooks
// once. "" when CUDA's library is loaded or this LibTorch has none; otherwise why it failed to
// load (the loader's words).
std::string load_cuda_runtime();
bool cuda_runtime_loaded();
// "; LibTorch's CUDA library and libtorch.so did not load: ..." when load_cuda_runtime() failed (a library
// built against the whole LibTorch may fail of that), else "".
std::string libtorch_rest_note();

// An exception's text without LibTorch's C++ backtrace.
std::string exception_message(const std::exception& e);

// A failed forward or backward: the message, TorchScript's source location and traceback.
template <class Result>
void fill_error(Result& r, const std::exception& e) {
  ErrorText t = parse_error_text(exception_message(e));
  r.error = t.message;
  r.location = t.location;
  r.source_line = t.source_line;
  r.raised_in = t.raised_in;
  r.traceback = t.traceback;
}

}  // namespace batchcheck
