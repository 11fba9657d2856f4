#pragma once
// Small LibTorch helpers shared by the engine's translation units (data sources, model
// runners, the backend). Engine-internal: nothing outside lib/engine includes this.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <exception>
#include <optional>
#include <vector>
#include <string>

#include "core/findings/error_text.h"
#include "core/parse/npy.h"
#include "core/pipeline/backend.h"
#include "engine/torch_backend.h"  // load_cuda_runtime

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

// "; LibTorch's CUDA library and libtorch.so did not load: ..." when load_cuda_runtime() failed (a library
// built against the whole LibTorch may fail of that), else "".
std::string libtorch_rest_note();

// The scan's device from --device / the config's "device": CUDA's library loaded first when
// asked for (in-process; the engine child has it preloaded). Throws InputError naming where the device
// was asked for when it is not there.
// `note`: why "cuda" is the GPU it is, under a launcher (core/config/device_choice.h).
c10::Device pick_device(const BackendOptions& opt, std::string* note = nullptr);

// Creates the CUDA context of `device` and the cuBLAS and cuDNN handles a model's first matmul
// and convolution would (a fraction of a second each); failures are left to the scan to meet.
void warm_cuda(const c10::Device& device);

// The rows of one of forward's arguments, when it is batched along its first dimension (a
// tensor, or a list of per-sample values); nullopt otherwise.
std::optional<c10::IValue> batch_rows(const c10::IValue& v, const std::vector<uint64_t>& rows, uint64_t batch);

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
