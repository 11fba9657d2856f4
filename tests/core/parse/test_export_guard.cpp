// AOTInductor's input-check texts (torch/_inductor/codegen/cpp_wrapper_cpu.py, torch 2.15) -> guards.
#include <gtest/gtest.h>

#include "core/parse/export_guard.h"

using namespace batchcheck;
using Kind = ExportGuard::Kind;

TEST(ExportGuard, ParsesEachCheckAOTInductorCompilesIn) {
  struct Case {
    const char* text;
    Kind kind;
    int64_t input, dim, expected, got;
  };
  const Case cases[] = {
      {"input_handles[0]: dim value is too small at 0, expected it to be >= 2, but got: 1\n", Kind::TooSmall, 0, 0, 2, 1},
      {"input_handles[1]: dim value is too large at 0, expected to be <= 64, but got: 100", Kind::TooLarge, 1, 0, 64, 100},
      {"input_handles[0]: unmatched dim value at 1, expected: 16, but got: 15\n", Kind::Size, 0, 1, 16, 15},
      {"input_handles[0]: unmatched stride value at 0, expected: 16, but got: 32", Kind::Stride, 0, 0, 16, 32},
      {"input_handles[0]: unmatched dtype, expected: 6(at::kFloat), but got: 7\n", Kind::Dtype, 0, 0, 6, 7},
      {"input_handles[0]: unmatched device type, expected: 00(cpu), but got: 1", Kind::Device, 0, 0, 0, 1},
  };
  for (const Case& c : cases) {
    auto g = parse_export_guard(c.text);
    ASSERT_TRUE(g.has_value()) << c.text;
    EXPECT_EQ(g->kind, c.kind) << c.text;
    EXPECT_EQ(g->input, c.input) << c.text;
    EXPECT_EQ(g->dim, c.dim) << c.text;
    EXPECT_EQ(g->expected, c.expected) << c.text;
    EXPECT_EQ(g->got, c.got) << c.text;
  }
}

TEST(ExportGuard, OtherErrorsAreNotGuards) {
  EXPECT_FALSE(parse_export_guard("shape '[16, -1]' is invalid for input of size 96"));
  EXPECT_FALSE(parse_export_guard("input_handles[0]: something new"));
  EXPECT_FALSE(parse_export_guard(""));
}

TEST(ExportGuard, DescribesTheAcceptedRangeInTheUsersTerms) {
  ExportGuard tail{Kind::TooSmall, 0, 0, 2, 1};
  EXPECT_EQ(describe_export_guard(tail, 1),
            "the exported program accepts batches of 2 or more samples, but this batch holds 1 (torch.export "
            "specializes sizes 0 and 1: a dynamic batch dimension starts at 2)");
  ExportGuard fixed{Kind::Size, 0, 0, 8, 3};
  EXPECT_EQ(describe_export_guard(fixed, 3),
            "the program was exported with a fixed batch size of 8 (no dynamic batch dimension), but this batch holds 3");
  ExportGuard feature{Kind::Size, 0, 1, 16, 15};
  EXPECT_EQ(describe_export_guard(feature, 8),
            "the program was exported for size 16 at dimension 1 of input 0, but the data has 15");
  ExportGuard big{Kind::TooLarge, 0, 0, 64, 100};
  EXPECT_EQ(describe_export_guard(big, 100),
            "the exported program accepts batches of at most 64 samples, but this batch holds 100");
}
