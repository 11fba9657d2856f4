// The search for the samples a failed forward follows, on fake forwards: one guilty sample,
// two, an error that follows the batch's size, every sample at fault, a device-side assert
// re-run on the CPU first, and the budget of 2·log2(B) forwards.
#include "core/pipeline/blame_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace batchcheck;

namespace {

ForwardResult failure(const std::string& error, const std::string& location = "File \"m.py\", line 8") {
  ForwardResult r;
  r.error = error;
  r.location = location;
  return r;
}

ForwardResult ok() {
  ForwardResult r;
  r.ok = true;
  return r;
}

// A model whose embedding raises on these rows.
struct BadRows {
  std::set<uint64_t> bad;
  uint64_t calls = 0;
  std::optional<ForwardResult> operator()(const std::vector<uint64_t>& rows) {
    ++calls;
    for (uint64_t r : rows) {
      if (bad.count(r)) return failure("index out of range in self");
    }
    return ok();
  }
};

}  // namespace

TEST(BlameStage, BudgetIsTwiceLog2OfTheBatch) {
  EXPECT_EQ(blame_budget(2), 2u);
  EXPECT_EQ(blame_budget(3), 4u);
  EXPECT_EQ(blame_budget(32), 10u);
  EXPECT_EQ(blame_budget(33), 12u);
}

TEST(BlameStage, OneGuiltySampleIsNamedAndTheBatchWithoutItRuns) {
  for (uint64_t guilty : {0u, 7u, 16u, 31u}) {
    BadRows model{{guilty}};
    const Blame b = blame_forward_error(failure("index out of range in self"), 32, false, std::ref(model));
    EXPECT_EQ(b.verdict, Blame::Verdict::Samples) << guilty;
    EXPECT_EQ(b.rows, std::vector<uint64_t>{guilty});
    EXPECT_TRUE(b.complete);
    EXPECT_LE(b.forwards, blame_budget(32));
    EXPECT_EQ(b.forwards, model.calls);
  }
}

TEST(BlameStage, TwoGuiltySamplesWithinTheBudget) {
  BadRows model{{3, 20}};
  const Blame b = blame_forward_error(failure("index out of range in self"), 32, false, std::ref(model));
  EXPECT_EQ(b.verdict, Blame::Verdict::Samples);
  ASSERT_FALSE(b.rows.empty());
  for (uint64_t r : b.rows) EXPECT_TRUE(r == 3 || r == 20) << r;
  EXPECT_LE(model.calls, blame_budget(32));
  // Both found means the batch without them ran; one found means the search said it may hold more.
  EXPECT_EQ(b.complete, b.rows.size() == 2);
}

TEST(BlameStage, AnErrorOfTheBatchsSizeFollowsNoSample) {
  // view(16, -1): every part of a batch of 5 fails alike, whatever it holds.
  uint64_t calls = 0;
  auto model = [&calls](const std::vector<uint64_t>& rows) -> std::optional<ForwardResult> {
    ++calls;
    if (rows.size() == 16) return ok();
    return failure("shape '[16, -1]' is invalid for input of size " + std::to_string(rows.size() * 4));
  };
  const Blame b = blame_forward_error(failure("shape '[16, -1]' is invalid for input of size 20"), 5, false, model);
  EXPECT_EQ(b.verdict, Blame::Verdict::NoSample);
  EXPECT_TRUE(b.rows.empty());
  EXPECT_LE(calls, blame_budget(5));
}

TEST(BlameStage, EverySampleAtFaultNamesNone) {
  BadRows model{{0, 1, 2, 3, 4, 5, 6, 7}};
  const Blame b = blame_forward_error(failure("index out of range in self"), 8, false, std::ref(model));
  EXPECT_EQ(b.verdict, Blame::Verdict::NoSample);
}

TEST(BlameStage, ASampleThatFailsOnlyWithAnotherIsNotGuiltyAlone) {
  // Rows 1 and 6 together (a pairwise term): neither fails among samples that run.
  uint64_t calls = 0;
  auto model = [&calls](const std::vector<uint64_t>& rows) -> std::optional<ForwardResult> {
    ++calls;
    const bool a = std::count(rows.begin(), rows.end(), 1u) > 0, b = std::count(rows.begin(), rows.end(), 6u) > 0;
    return a && b ? failure("index out of range in self") : ok();
  };
  const Blame b = blame_forward_error(failure("index out of range in self"), 8, false, model);
  EXPECT_EQ(b.verdict, Blame::Verdict::NoSample);
  EXPECT_LE(calls, blame_budget(8));
  Emitted e{"forward-error", "forward", "m", {}, all_rows(8), 8, ""};
  apply_blame(e, b, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(e.rows.size(), 8u);
  EXPECT_EQ(e.message,
            "m; it follows no single sample: none fails among samples that run, so it depends on the batch (its size of 8, "
            "say) or on several samples together");
}

TEST(BlameStage, ADeviceSideAssertRunsTheBatchOnTheCpuFirst) {
  BadRows model{{4}};
  ForwardResult assert_text = failure("CUDA error: device-side assert triggered", "");
  const Blame b = blame_forward_error(assert_text, 32, true, std::ref(model));
  ASSERT_TRUE(b.cpu.has_value());
  EXPECT_EQ(b.cpu->error, "index out of range in self");
  EXPECT_EQ(b.verdict, Blame::Verdict::Samples);
  EXPECT_EQ(b.rows, std::vector<uint64_t>{4});
  EXPECT_LE(b.forwards, blame_budget(32));
  EXPECT_EQ(b.forwards, model.calls);

  Emitted e{"cuda-device-assert", "forward", "a CUDA kernel's assertion fired", {{"error", "CUDA error: device-side assert triggered"}},
            all_rows(32), 32, ""};
  std::vector<int64_t> indices;
  for (int64_t i = 96; i < 128; ++i) indices.push_back(i);
  apply_blame(e, b, indices);
  EXPECT_EQ(e.rows, std::vector<uint64_t>{4});
  EXPECT_EQ(e.total, 1u);
  EXPECT_EQ(e.evidence["cpu"]["error"], "index out of range in self");
  EXPECT_EQ(e.evidence["location"], "File \"m.py\", line 8");
  EXPECT_EQ(e.evidence["blame"]["verdict"], "samples");
  EXPECT_EQ(e.cuda, "Assertion `srcIndex < srcSelectDimSize` failed.");
  EXPECT_NE(e.message.find("; the same batch on the CPU raises: index out of range in self (File \"m.py\", line 8)"),
            std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("; it follows sample 100 of the batch of 32: the batch without it runs, and it fails among samples that run"),
            std::string::npos)
      << e.message;
}

TEST(BlameStage, AnAssertTheCpuDoesNotRaiseIsCudasOwn) {
  BadRows model{{}};
  const Blame b = blame_forward_error(failure("CUDA error: device-side assert triggered", ""), 8, true, std::ref(model));
  EXPECT_EQ(b.verdict, Blame::Verdict::CudaOnly);
  EXPECT_EQ(model.calls, 1u);
}

TEST(BlameStage, ABackendThatCannotRerunSaysNothing) {
  auto model = [](const std::vector<uint64_t>&) -> std::optional<ForwardResult> { return std::nullopt; };
  const Blame b = blame_forward_error(failure("index out of range in self"), 8, false, model);
  EXPECT_EQ(b.verdict, Blame::Verdict::Unknown);
  Emitted e{"forward-error", "forward", "m", {}, all_rows(8), 8, ""};
  apply_blame(e, b, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(e.rows.size(), 8u);
  EXPECT_EQ(e.message, "m");
  EXPECT_FALSE(blamable("batchnorm-single-value"));
  EXPECT_TRUE(blamable("forward-error"));
  EXPECT_TRUE(blamable("cuda-device-assert"));
}

TEST(BlameStage, ABatchOfOneIsNotSearched) {
  BadRows model{{0}};
  EXPECT_EQ(blame_forward_error(failure("index out of range in self"), 1, false, std::ref(model)).verdict, Blame::Verdict::Unknown);
  EXPECT_EQ(model.calls, 0u);
}
