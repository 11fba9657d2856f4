#pragma once
// Forward failures → finding ids, and the CUDA message each fault gives on a GPU: tables
// of the error texts LibTorch raises (see the README's field notes on CPU vs CUDA).
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace batchcheck {

namespace cuda_text {
inline constexpr const char* kBceInput = "Assertion `input_val >= zero && input_val <= one` failed.";
inline constexpr const char* kBceTarget = "Assertion `target_val >= zero && target_val <= one` failed.";
inline constexpr const char* kClass = "Assertion `t >= 0 && t < n_classes` failed.";
// scatter_ of a class index out of range (MONAI's one_hot).
inline constexpr const char* kScatterIndex = "Assertion `idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"` failed.";
inline constexpr const char* kClassNone = "Assertion `cur_target >= 0 && cur_target < n_classes` failed.";
}  // namespace cuda_text

// batchnorm-single-value, hardcoded-batch-size, batch-out-of-memory or forward-error. largest_ok_batch is the
// largest batch size whose forward succeeded so far (0 if none).
std::string classify_forward_error(const std::string& message, uint64_t batch_size, uint64_t largest_ok_batch);

// A shape error (view, matmul, broadcast...): what a batch size baked into the model raises.
bool is_shape_error(const std::string& message);

// float64 inputs into float32 weights ("expected scalar type Double but found Float").
bool is_dtype_mismatch_error(const std::string& message);

// "CUDA error: device-side assert triggered": a kernel's assertion fired, and the CUDA
// context is unusable for the rest of the process.
bool is_device_assert(const std::string& message);
// Whether the error LibTorch raises on the CPU is a kernel's assertion on CUDA (an index past
// an embedding's table or a tensor's size, a class index past the classes): there it kills
// the CUDA context instead of raising.
bool asserts_on_cuda(const std::string& cpu_message);
// What CUDA raises for those (the text PyTorch gives).
extern const char* const kDeviceAssertError;

// An allocation that failed (LibTorch's CPU or CUDA allocator, or std::bad_alloc): the batch
// needs more memory than the device has. allocation_bytes: the bytes it asked for, when said.
bool is_out_of_memory(const std::string& message);
// The same for an exception caught around a batch: std::bad_alloc, or a LibTorch error saying so.
bool is_out_of_memory(const std::exception& e);
std::optional<uint64_t> allocation_bytes(const std::string& message);

// The device-side assert the same indexing fault fires on CUDA, or "".
std::string cuda_equivalent_of_forward_error(const std::string& message);

}  // namespace batchcheck
