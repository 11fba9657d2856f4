#include <gtest/gtest.h>

#include "core/error_text.h"

using namespace batchcheck;

TEST(ErrorText, TorchScriptTracebackKeepsTheSourceLine) {
  const std::string what =
      "The following operation failed in the TorchScript interpreter.\n"
      "Traceback of TorchScript, original code (most recent call last):\n"
      "  File \"/home/u/model.py\", line 12, in forward\n"
      "        x = self.features(x)\n"
      "        return x.view(16, -1)\n"
      "               ~~~~~~ <--- HERE\n"
      "RuntimeError: shape '[16, -1]' is invalid for input of size 80\n";
  ErrorText t = parse_error_text(what);
  EXPECT_EQ(t.message, "shape '[16, -1]' is invalid for input of size 80");
  EXPECT_EQ(t.location, "File \"/home/u/model.py\", line 12, in forward");
  EXPECT_NE(t.traceback.find("<--- HERE"), std::string::npos);
}

TEST(ErrorText, PythonExceptionsKeepTheirClass) {
  ErrorText t = parse_error_text(
      "The following operation failed in the TorchScript interpreter.\n"
      "Traceback of TorchScript (most recent call last):\n"
      "  File \"code/__torch__/torch/nn/functional.py\", line 5, in _verify_batch_size\n"
      "builtins.ValueError: Expected more than 1 value per channel when training, got input size torch.Size([1, 8])\n");
  EXPECT_EQ(t.message, "ValueError: Expected more than 1 value per channel when training, got input size torch.Size([1, 8])");
}

TEST(ErrorText, CppBacktraceIsDropped) {
  ErrorText t = parse_error_text(
      "index out of range in self\n"
      "Exception raised from operator() at ../aten/src/ATen/native/TensorAdvancedIndexing.cpp:1189 (most recent call first):\n"
      "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x6c (0x7f in /lib/libc10.so)\n"
      "frame #1: <unknown function> + 0x1234 (0x7f in /lib/libtorch_cpu.so)\n");
  EXPECT_EQ(t.message, "index out of range in self");
  EXPECT_TRUE(t.location.empty());
  EXPECT_TRUE(t.traceback.empty());
}
