// engine/checks/half_watch: the largest half value an op made, the first op whose half output went
// non-finite from finite arguments, and the ops whose output no computation made.
#include "engine/checks/half_watch.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>

#include "engine/compat.h"

using namespace batchcheck;

TEST(HalfWatch, ThePeakAndTheFirstOverflowingOp) {
  HalfWatchResult r;
  {
    HalfWatch watch(true, r);
    const at::Tensor x = at::full({4}, 30000.0, at::kHalf);
    const at::Tensor y = at::add(x, x);  // 60000: within float16's 65,504
    (void)at::mul(y, 2);                 // 120000: Inf in float16, from finite arguments
  }
  EXPECT_EQ(r.peak, 60000.0);
  EXPECT_EQ(r.nonfinite_op, "aten::mul");
}

TEST(HalfWatch, AnArgumentAlreadyInfIsNoOverflow) {
  HalfWatchResult r;
  {
    HalfWatch watch(true, r);
    const at::Tensor x = at::full({4}, std::numeric_limits<double>::infinity(), at::kHalf);
    (void)at::add(x, 1);
  }
  EXPECT_EQ(r.nonfinite_op, "");
}

TEST(HalfWatch, AnEmptyTensorsValuesAreNoOverflow) {
  // Deterministic algorithms fill empty_like's output with NaN: what the memory held, made by no
  // op (dropout's mask before bernoulli_ fills it). Neither a peak nor an overflow.
  if (!compat::set_fill_uninitialized_memory(true)) GTEST_SKIP() << "this LibTorch does not fill empty tensors";
  HalfWatchResult r;
  {
    HalfWatch watch(true, r);
    const at::Tensor x = at::full({64}, 1.0, at::kHalf);
    const at::Tensor mask = at::empty_like(x);
    compat::set_fill_uninitialized_memory(false);
    EXPECT_TRUE(at::isnan(mask).all().item<bool>());
  }
  EXPECT_EQ(r.nonfinite_op, "");
  EXPECT_EQ(r.peak, 1.0);
}

TEST(HalfWatch, OpsWhoseOutputIsWhateverMemoryHeld) {
  // empty_like's values (dropout's mask before bernoulli_ fills it) were made by no op.
  for (const char* op : {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                         "aten::new_empty_strided", "aten::resize_", "aten::resize_as_"}) {
    EXPECT_TRUE(undefined_values(op)) << op;
  }
  for (const char* op : {"aten::add", "aten::bernoulli_", "aten::full_like", "aten::zeros_like"}) {
    EXPECT_FALSE(undefined_values(op)) << op;
  }
}
