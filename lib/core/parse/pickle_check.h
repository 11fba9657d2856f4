#pragma once
// A bounded check of a torch.save data file before LibTorch's unpickler reads a byte of it.
// LibTorch trusts the pickle: opcodes on an empty stack, nesting 200,000 levels deep, or a
// tensor whose shape reaches past its storage crash it (SIGSEGV) or make it read heap bytes
// that are not in the file. This walks the zip's members and the pickle's opcodes on a
// simulated stack, with the opcodes tensor containers use only, a depth limit, and every
// tensor's sizes, strides and offset checked against its storage member's size. Pure, no
// LibTorch; fuzzed (fuzz_pickle_check).
#include <string>
#include <string_view>

namespace batchcheck {

// Containers nested deeper than this are refused (a dict of tuples of tensors is depth 3).
inline constexpr int kMaxPickleDepth = 100;

// "" when LibTorch may read the file; else what is wrong, in one line, for the error.
std::string check_torch_save(std::string_view bytes);

}  // namespace batchcheck
