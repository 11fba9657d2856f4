#pragma once
// Small LibTorch helpers shared by the engine's translation units (data sources, model
// runners, the backend): dtypes, IValues, files, error texts. Engine-internal.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <exception>
#include <optional>
#include <vector>
#include <string>

#include "core/findings/error_text.h"
#include "core/parse/npy.h"
#include "core/pipeline/backend.h"

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

// The rows of one of forward's arguments, when it is batched along its first dimension (a
// tensor, or a list of per-sample values); nullopt otherwise.
std::optional<c10::IValue> batch_rows(const c10::IValue& v, const std::vector<uint64_t>& rows, uint64_t batch);

// An exception's text without LibTorch's C++ backtrace.
std::string exception_message(const std::exception& e);

// This thread's intra-op work on one thread, without touching the process's setting: OpenMP
// keeps a thread's own count (libgomp). For the engine inside the user's process, whose step
// runs on the process's threads meanwhile: a second team of workers would spin beside theirs.
void one_intraop_thread_here();

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
