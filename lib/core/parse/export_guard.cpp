#include "core/parse/export_guard.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace batchcheck {

namespace {

// The integer after `marker` (searched from `pos`), and `pos` moved past it.
bool int_after(const std::string& s, std::size_t& pos, const char* marker, int64_t& out) {
  const std::size_t at = s.find(marker, pos);
  if (at == std::string::npos) return false;
  std::size_t p = at + std::char_traits<char>::length(marker);
  const bool negative = p < s.size() && s[p] == '-';
  if (negative) ++p;
  if (p >= s.size() || s[p] < '0' || s[p] > '9') return false;
  uint64_t v = 0;
  for (; p < s.size() && s[p] >= '0' && s[p] <= '9'; ++p) {
    v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + static_cast<uint64_t>(s[p] - '0');
  }
  const uint64_t cap = static_cast<uint64_t>(INT64_MAX);
  out = negative ? -static_cast<int64_t>(std::min(v, cap)) : static_cast<int64_t>(std::min(v, cap));
  pos = p;
  return true;
}

bool starts(const std::string& s, std::size_t at, const char* prefix) { return s.compare(at, std::char_traits<char>::length(prefix), prefix) == 0; }

}  // namespace

std::optional<ExportGuard> parse_export_guard(const std::string& message) {
  // The texts of torch/_inductor/codegen/cpp_wrapper_cpu.py (AOTInductor's input checks).
  ExportGuard g;
  std::size_t p = 0;
  if (!int_after(message, p, "input_handles[", g.input) || !starts(message, p, "]: ")) return std::nullopt;
  p += 3;
  if (starts(message, p, "dim value is too small at ") || starts(message, p, "dim value is too large at ")) {
    const bool small = starts(message, p, "dim value is too small");
    g.kind = small ? ExportGuard::Kind::TooSmall : ExportGuard::Kind::TooLarge;
    if (int_after(message, p, " at ", g.dim) && int_after(message, p, small ? ">= " : "<= ", g.expected) &&
        int_after(message, p, "but got: ", g.got)) {
      return g;
    }
    return std::nullopt;
  }
  if (starts(message, p, "unmatched dim value at ") || starts(message, p, "unmatched stride value at ")) {
    g.kind = starts(message, p, "unmatched dim") ? ExportGuard::Kind::Size : ExportGuard::Kind::Stride;
    if (int_after(message, p, " at ", g.dim) && int_after(message, p, "expected: ", g.expected) &&
        int_after(message, p, "but got: ", g.got)) {
      return g;
    }
    return std::nullopt;
  }
  if (starts(message, p, "unmatched dtype, ") || starts(message, p, "unmatched device type, ")) {
    g.kind = starts(message, p, "unmatched dtype") ? ExportGuard::Kind::Dtype : ExportGuard::Kind::Device;
    if (int_after(message, p, "expected: ", g.expected) && int_after(message, p, "but got: ", g.got)) return g;
  }
  return std::nullopt;
}

std::string describe_export_guard(const ExportGuard& g, uint64_t batch_size) {
  const std::string got = std::to_string(g.got), want = std::to_string(g.expected);
  const std::string where = "dimension " + std::to_string(g.dim) + " of input " + std::to_string(g.input);
  switch (g.kind) {
    case ExportGuard::Kind::TooSmall:
      if (g.dim == 0) {
        return "the exported program accepts batches of " + want + " or more samples, but this batch holds " +
               std::to_string(batch_size) +
               (g.expected == 2 ? " (torch.export specializes sizes 0 and 1: a dynamic batch dimension starts at 2)" : "");
      }
      return "the exported program accepts " + where + " of " + want + " or more, but the data has " + got;
    case ExportGuard::Kind::TooLarge:
      if (g.dim == 0) {
        return "the exported program accepts batches of at most " + want + " samples, but this batch holds " +
               std::to_string(batch_size);
      }
      return "the exported program accepts " + where + " of at most " + want + ", but the data has " + got;
    case ExportGuard::Kind::Size:
      if (g.dim == 0) {
        return "the program was exported with a fixed batch size of " + want + " (no dynamic batch dimension), but this batch holds " +
               std::to_string(batch_size);
      }
      return "the program was exported for size " + want + " at " + where + ", but the data has " + got;
    case ExportGuard::Kind::Stride:
      return "the program expects stride " + want + " at " + where + " (a contiguous tensor), got " + got;
    case ExportGuard::Kind::Dtype:
      return "the program was exported for another dtype of input " + std::to_string(g.input) +
             " (aoti dtype code " + want + ", got " + got + ")";
    case ExportGuard::Kind::Device:
      return "the program was compiled for another device than the one input " + std::to_string(g.input) +
             " is on (aoti device code " + want + ", got " + got + ")";
  }
  return "";
}

}  // namespace batchcheck
