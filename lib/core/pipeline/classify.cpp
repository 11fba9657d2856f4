#include "core/pipeline/classify.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace batchcheck {

namespace {

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

bool contains_any(const std::string& s, std::initializer_list<const char*> needles) {
  for (const char* n : needles) {
    if (contains(s, n)) return true;
  }
  return false;
}

}  // namespace

bool is_shape_error(const std::string& m) {
  return contains_any(m, {"shape '[",
                          "is invalid for input of size",
                          "size mismatch",
                          "must match the size of tensor",
                          "shapes cannot be multiplied",
                          "Dimension out of range",
                          "Sizes of tensors must match",
                          "sizes of tensors must match",
                          "Expected input batch_size",
                          "doesn't match the broadcast shape",
                          "cannot reshape",
                          "Expected 4-dimensional input",
                          "Expected 3D",
                          "Expected 2D",
                          "expected input with shape",
                          "must have the same size",
                          "split_with_sizes",
                          "start (",
                          "out of range (expected to be in range of"});
}

bool is_dtype_mismatch_error(const std::string& m) {
  return contains_any(m, {"expected scalar type Double but found Float", "expected scalar type Float but found Double",
                          "should be the same", "must have the same dtype"});
}

bool is_device_assert(const std::string& m) { return contains(m, "device-side assert triggered"); }

const char* const kDeviceAssertError =
    "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.";

bool asserts_on_cuda(const std::string& m) { return !cuda_equivalent_of_forward_error(m).empty(); }

bool is_out_of_memory(const std::string& m) {
  return contains_any(m, {"can't allocate memory", "CUDA out of memory", "std::bad_alloc", "OutOfMemoryError"});
}

bool is_out_of_memory(const std::exception& e) {
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr || is_out_of_memory(std::string(e.what()));
}

std::optional<uint64_t> allocation_bytes(const std::string& m) {
  // CPU: "you tried to allocate 8796093022208 bytes"; CUDA: "Tried to allocate 2.00 GiB".
  auto number_after = [&](const char* lead) -> std::optional<double> {
    const auto p = m.find(lead);
    if (p == std::string::npos) return std::nullopt;
    const char* begin = m.c_str() + p + std::strlen(lead);
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin || !(v >= 0) || v > 1.8e19) return std::nullopt;
    return v;
  };
  if (auto v = number_after("tried to allocate ")) return static_cast<uint64_t>(*v);
  if (auto v = number_after("Tried to allocate ")) {
    const std::string unit = m.substr(m.find("Tried to allocate ") + 18);
    const auto space = unit.find(' ');
    const std::string u = space == std::string::npos ? "" : unit.substr(space + 1, 3);
    const double scale = u.rfind("GiB", 0) == 0 ? 1073741824.0 : u.rfind("MiB", 0) == 0 ? 1048576.0
                         : u.rfind("KiB", 0) == 0 ? 1024.0 : u.rfind("TiB", 0) == 0 ? 1099511627776.0 : 1.0;
    if (*v * scale > 1.8e19) return std::nullopt;
    return static_cast<uint64_t>(*v * scale);
  }
  return std::nullopt;
}

std::string classify_forward_error(const std::string& message, uint64_t batch_size, uint64_t largest_ok_batch) {
  if (is_device_assert(message)) return "cuda-device-assert";
  if (is_out_of_memory(message)) return "batch-out-of-memory";
  if (contains(message, "Expected more than 1 value per channel when training")) return "batchnorm-single-value";
  if (largest_ok_batch > batch_size && is_shape_error(message)) return "hardcoded-batch-size";
  return "forward-error";
}

std::string cuda_equivalent_of_forward_error(const std::string& m) {
  if (contains(m, "index out of range in self")) return "Assertion `srcIndex < srcSelectDimSize` failed.";
  // A loss inside forward (a detection head's cross_entropy) given a label past its classes.
  if (contains(m, "Target ") && contains(m, " is out of bounds.")) return cuda_text::kClass;
  if (contains(m, "out of bounds for dimension") && contains(m, "gather")) {
    return "Assertion `idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"` failed.";
  }
  if (contains(m, "out of bounds for dimension")) {
    return "Assertion `index >= -sizes[i] && index < sizes[i] && \"index out of bounds\"` failed.";
  }
  return "";
}

}  // namespace batchcheck
