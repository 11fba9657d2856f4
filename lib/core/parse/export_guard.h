#pragma once
// The input checks an AOTInductor program (torch.export + aoti_compile_and_package) runs
// before its kernels: the shape guards torch.export recorded, raised as text. Parsed here
// into what a finding needs; pure, no LibTorch.
#include <cstdint>
#include <optional>
#include <string>

namespace batchcheck {

struct ExportGuard {
  enum class Kind { TooSmall, TooLarge, Size, Dtype, Stride, Device };
  Kind kind = Kind::Size;
  int64_t input = 0;     // which input of the program
  int64_t dim = 0;       // which dimension (sizes and strides)
  int64_t expected = 0;  // the bound (TooSmall: >=, TooLarge: <=) or the exact value
  int64_t got = 0;
};

// "input_handles[0]: dim value is too small at 0, expected it to be >= 2, but got: 1" and
// its siblings (too large, unmatched dim/stride/dtype/device value); nullopt for any other text.
std::optional<ExportGuard> parse_export_guard(const std::string& message);

// One sentence for the finding: what the program accepts and what the batch holds.
std::string describe_export_guard(const ExportGuard& g, uint64_t batch_size);

}  // namespace batchcheck
