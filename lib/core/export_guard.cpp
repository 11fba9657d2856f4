#include "core/export_guard.h"

#include <cstdlib>
#include <regex>

namespace batchcheck {

namespace {

int64_t to_int(const std::string& s) { return std::strtoll(s.c_str(), nullptr, 10); }

}  // namespace

std::optional<ExportGuard> parse_export_guard(const std::string& message) {
  // The texts of torch/_inductor/codegen/cpp_wrapper_cpu.py (AOTInductor's input checks).
  static const std::regex head(R"(input_handles\[(\d+)\]: )");
  static const std::regex bound(R"(dim value is too (small|large) at (\d+), expected (?:it )?to be (>=|<=) (-?\d+), but got: (-?\d+))");
  static const std::regex exact(R"(unmatched (dim|stride) value at (\d+), expected: (-?\d+), but got: (-?\d+))");
  static const std::regex kind_only(R"(unmatched (dtype|device type), expected: (-?\d+).*but got: (-?\d+))");
  std::smatch h;
  if (!std::regex_search(message, h, head)) return std::nullopt;
  ExportGuard g;
  g.input = to_int(h[1]);
  const std::string rest = h.suffix();
  std::smatch m;
  if (std::regex_search(rest, m, bound)) {
    g.kind = m[1] == "small" ? ExportGuard::Kind::TooSmall : ExportGuard::Kind::TooLarge;
    g.dim = to_int(m[2]);
    g.expected = to_int(m[4]);
    g.got = to_int(m[5]);
    return g;
  }
  if (std::regex_search(rest, m, exact)) {
    g.kind = m[1] == "dim" ? ExportGuard::Kind::Size : ExportGuard::Kind::Stride;
    g.dim = to_int(m[2]);
    g.expected = to_int(m[3]);
    g.got = to_int(m[4]);
    return g;
  }
  if (std::regex_search(rest, m, kind_only)) {
    g.kind = m[1] == "dtype" ? ExportGuard::Kind::Dtype : ExportGuard::Kind::Device;
    g.expected = to_int(m[2]);
    g.got = to_int(m[3]);
    return g;
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
