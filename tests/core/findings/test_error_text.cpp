#include <gtest/gtest.h>

#include "core/findings/error_text.h"

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

// A scripted model saved and loaded (torch 2.15's text): the serialized code's traceback, then
// the original code's, whose innermost frame is torch's linear.py; the user's line is above it.
TEST(ErrorText, LocationIsTheUsersLineNotTorchsOwn) {
  const std::string what =
      "The following operation failed in the TorchScript interpreter.\n"
      "Traceback of TorchScript, serialized code (most recent call last):\n"
      "  File \"code/__torch__.py\", line 25, in forward\n"
      "    _0 = (fc).forward(torch.view(h, [batch_size, -1]), )\n"
      "          ~~~~~~~~~~~ <--- HERE\n"
      "  File \"code/__torch__/torch/nn/modules/linear.py\", line 14, in forward\n"
      "    return torch.linear(input, weight, bias)\n"
      "           ~~~~~~~~~~~~ <--- HERE\n"
      "\n"
      "Traceback of TorchScript, original code (most recent call last):\n"
      "  File \"/tmp/um/usermodel.py\", line 21, in forward\n"
      "    def forward(self, x):\n"
      "        h = torch.relu(self.body(x))\n"
      "        return self.head(h)\n"
      "               ~~~~~~~~~ <--- HERE\n"
      "  File \"/tmp/um/usermodel.py\", line 11, in forward\n"
      "    def forward(self, h):\n"
      "        return self.fc(h.view(self.batch_size, -1))\n"
      "               ~~~~~~~ <--- HERE\n"
      "  File \"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py\", line 134, in forward\n"
      "        return F.linear(input, self.weight, self.bias)\n"
      "               ~~~~~~~~ <--- HERE\n"
      "RuntimeError: addmm: mat1 and mat2 shapes cannot be multiplied (4x9 and 12x3)\n";
  ErrorText t = parse_error_text(what);
  EXPECT_EQ(t.message, "addmm: mat1 and mat2 shapes cannot be multiplied (4x9 and 12x3)");
  EXPECT_EQ(t.location, "File \"/tmp/um/usermodel.py\", line 11, in forward");
  EXPECT_EQ(t.source_line, "return self.fc(h.view(self.batch_size, -1))");
  EXPECT_EQ(t.raised_in, "File \"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py\", line 134, in forward");
  EXPECT_NE(t.traceback.find("serialized code"), std::string::npos);  // the whole traceback is kept

  // Only torch's frames (a bare nn.Linear scripted): the innermost one, nothing below it.
  ErrorText lib = parse_error_text(
      "Traceback of TorchScript, original code (most recent call last):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/nn/modules/linear.py\", line 114, in forward\n"
      "        return F.linear(input, self.weight, self.bias)\n"
      "               ~~~~~~~~ <--- HERE\n"
      "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x9 and 12x3)\n");
  EXPECT_EQ(lib.location, "File \"/usr/lib/python3/dist-packages/torch/nn/modules/linear.py\", line 114, in forward");
  EXPECT_EQ(lib.source_line, "return F.linear(input, self.weight, self.bias)");
  EXPECT_EQ(lib.raised_in, "");
}

TEST(ErrorText, LibraryFrames) {
  EXPECT_TRUE(library_frame("/venv/lib/python3.11/site-packages/torchvision/models/resnet.py"));
  EXPECT_TRUE(library_frame("/usr/lib/python3/dist-packages/torch/nn/functional.py"));
  EXPECT_TRUE(library_frame("code/__torch__/torch/nn/modules/linear.py"));
  EXPECT_TRUE(library_frame("/src/pytorch/torch/nn/modules/conv.py"));
  EXPECT_FALSE(library_frame("/home/u/project/model.py"));
  EXPECT_FALSE(library_frame("code/__torch__/model.py"));
  EXPECT_FALSE(library_frame("<string>"));
  // batchcheck's package run from a checkout: its step wrapper is never the user's line.
  EXPECT_TRUE(library_frame("/tmp/fresh/python/batchcheck/_prepare.py"));
  EXPECT_FALSE(library_frame("/home/u/python/batchcheck/train/step.py"));
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

// A traced op's source: the tracer's Python stack, innermost first. The user's frame is the
// innermost outside torch, before torch.jit.trace's own frames.
TEST(ErrorText, UserFrameOfATracedOpsStack) {
  const std::string stack =
      "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py(134): forward\n"
      "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py(1777): _slow_forward\n"
      "/home/me/model.py(36): forward\n"
      "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py(1787): _wrapped_call_impl\n"
      "/home/me/model.py(166): forward\n"
      "/venv/lib/python3.11/site-packages/torch/jit/_trace.py(1216): trace_module\n"
      "/home/me/export.py(20): main\n"
      "Serialized   File \"code/__torch__/m.py\", line 10\n";
  auto f = user_frame_of_trace(stack);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->file, "/home/me/model.py");
  EXPECT_EQ(f->line, 36u);
  // Only library frames before the trace call: the innermost one.
  auto lib = user_frame_of_trace(
      "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py(134): forward\n"
      "/venv/lib/python3.11/site-packages/torch/jit/_trace.py(1216): trace_module\n"
      "/home/me/export.py(20): main\n");
  ASSERT_TRUE(lib);
  EXPECT_EQ(lib->line, 134u);
  EXPECT_FALSE(user_frame_of_trace("def forward(self, x):\n    return x\n"));
}
