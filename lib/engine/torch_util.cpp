#include "engine/torch_util.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <typeinfo>

#include "core/base/errors.h"
#include "core/base/files.h"
#include "core/base/text.h"

// LibTorch's OpenMP runtime, where it has one (weak: a LibTorch built without OpenMP has none).
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace batchcheck {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

at::ScalarType torch_dtype(NpyDtype d) {
  switch (d) {
    case NpyDtype::Float16: return at::kHalf;
    case NpyDtype::Float32: return at::kFloat;
    case NpyDtype::Float64: return at::kDouble;
    case NpyDtype::Int8: return at::kChar;
    case NpyDtype::Int16: return at::kShort;
    case NpyDtype::Int32: return at::kInt;
    case NpyDtype::Int64: return at::kLong;
    case NpyDtype::UInt8: return at::kByte;
    case NpyDtype::Bool: return at::kBool;
  }
  return at::kFloat;
}

TensorMeta meta_of(const at::Tensor& t, bool drop_first) {
  TensorMeta m;
  if (!t.defined()) return m;
  m.present = true;
  auto sizes = t.sizes();
  m.shape.assign(sizes.begin() + (drop_first && !sizes.empty() ? 1 : 0), sizes.end());
  m.dtype = dtype_name(t.scalar_type());
  m.floating = at::isFloatingType(t.scalar_type());
  return m;
}

std::string describe(const c10::IValue& v) {
  if (v.isTensor()) return "a tensor";
  if (v.isGenericDict()) return "a dict";
  if (v.isList()) return "a list";
  if (v.isTuple()) return "a tuple";
  if (v.isString()) return "a string";
  if (v.isInt()) return "an int";
  if (v.isDouble()) return "a float";
  if (v.isBool()) return "a bool";
  if (v.isNone()) return "None";
  if (v.isObject()) return "an object";
  return "a " + std::string(v.tagKind());
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}


std::optional<c10::IValue> batch_rows(const c10::IValue& v, const std::vector<uint64_t>& rows, uint64_t batch) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.dim() == 0 || static_cast<uint64_t>(t.size(0)) != batch) return std::nullopt;
    std::vector<int64_t> idx(rows.begin(), rows.end());
    return c10::IValue(t.index_select(0, at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(t.device())));
  }
  if (v.isList()) {
    c10::List<c10::IValue> list = v.toList();
    if (list.size() != batch) return std::nullopt;
    c10::impl::GenericList out(list.elementType());
    for (uint64_t r : rows) out.push_back(list.get(r));
    return c10::IValue(out);
  }
  return std::nullopt;
}

std::string exception_message(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

void require_model_file(const std::string& path, const char* what) {
  std::error_code exists_ec;
  if (std::filesystem::exists(path, exists_ec)) require_regular_file(path, path, what);
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw InputError(path, "", "cannot read the model: " + std::string(std::strerror(errno)));
  if (probe.peek() == std::ifstream::traits_type::eof()) throw InputError(path, "", "the model file is empty");
}

void one_intraop_thread_here() {
  // LibTorch sets a thread's count once, on its first parallel op (lazy_init_num_threads, to the
  // process's torch.set_num_threads): done now, so that it comes before this and not after.
  (void)at::get_num_threads();
  if (omp_set_num_threads != nullptr) omp_set_num_threads(1);
}

}  // namespace batchcheck
