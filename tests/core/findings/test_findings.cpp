#include <gtest/gtest.h>

#include <algorithm>

#include "core/findings/findings.h"

using namespace batchcheck;

namespace {
LoaderSpec spec(uint64_t n, uint64_t b) {
  LoaderSpec s;
  s.samples = n;
  s.batch_size = b;
  return s;
}

const Finding* find(const std::vector<Finding>& fs, const std::string& id) {
  auto it = std::find_if(fs.begin(), fs.end(), [&](const Finding& f) { return f.id == id; });
  return it == fs.end() ? nullptr : &*it;
}

std::vector<std::string> ids(const std::vector<Finding>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs) out.push_back(f.id);
  return out;
}
}  // namespace

TEST(GeometryFindings, SingletonTailCarriesDropLastAndDivisorFixes) {
  BatchPlan plan(compute_geometry(spec(1041, 8)), {});
  auto fs = geometry_findings(plan, {0}, LossType::Bce);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"tail-batch-singleton"});
  const Finding& f = fs[0];
  EXPECT_EQ(f.severity, Severity::Warning);
  EXPECT_EQ(f.batch, 130u);
  EXPECT_EQ(f.samples, std::vector<int64_t>{1040});
  EXPECT_EQ(f.rank, 0u);
  ASSERT_GE(f.fixes.size(), 3u);
  EXPECT_EQ(f.fixes[0].id, "drop-last");
  EXPECT_EQ(f.fixes[0].tradeoff, "drops 1 of 1041 samples per epoch");
  EXPECT_EQ(f.fixes[1].id, "batch-size-divisor");
  EXPECT_EQ(f.fixes[1].batch_sizes, (std::vector<uint64_t>{3, 347}));
  EXPECT_EQ(f.fixes[2].id, "pad-collate");
  EXPECT_NE(f.fixes[2].tradeoff.find("[0, 1]"), std::string::npos);
}

TEST(GeometryFindings, PartialTailIsInfo) {
  BatchPlan plan(compute_geometry(spec(1028, 8)), {});
  auto fs = geometry_findings(plan, {0}, LossType::Mse);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"tail-batch-partial"});
  EXPECT_EQ(fs[0].severity, Severity::Info);
  EXPECT_EQ(fs[0].samples, (std::vector<int64_t>{1024, 1025, 1026, 1027}));
  EXPECT_EQ(fs[0].count, 4u);
}

TEST(GeometryFindings, CleanSetupHasNone) {
  BatchPlan plan(compute_geometry(spec(1024, 8)), {});
  EXPECT_TRUE(geometry_findings(plan, {0}, LossType::Bce).empty());
}

TEST(GeometryFindings, EmptyLoaderIsAnErrorWithFixes) {
  LoaderSpec s = spec(5, 8);
  s.drop_last = true;
  BatchPlan plan(compute_geometry(s), {});
  auto fs = geometry_findings(plan, {0}, LossType::Bce);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"empty-loader"});
  EXPECT_EQ(fs[0].severity, Severity::Error);
  EXPECT_FALSE(fs[0].fixes.empty());
  BatchPlan none(compute_geometry(spec(0, 8)), {});
  EXPECT_EQ(ids(geometry_findings(none, {0}, LossType::Bce)), std::vector<std::string>{"empty-loader"});
}

TEST(GeometryFindings, DistributedPaddingAndDropped) {
  LoaderSpec s = spec(10, 2);
  s.world_size = 4;
  BatchPlan plan(compute_geometry(s), {});
  auto fs = geometry_findings(plan, {0, 1, 2, 3}, LossType::Bce);
  const Finding* pad = find(fs, "sampler-padding");
  ASSERT_TRUE(pad);
  EXPECT_EQ(pad->severity, Severity::Warning);
  // 10 over 4 ranks: 12 slots; the copies of 0 and 1 land on ranks 2 and 3 (10 mod 4 .. 3).
  EXPECT_EQ(pad->rank, 2u);
  EXPECT_EQ(pad->ranks, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(pad->samples, (std::vector<int64_t>{0}));  // rank 2's copy: never merged across ranks
  ASSERT_EQ(pad->occurrences.size(), 2u);
  EXPECT_EQ(pad->occurrences[1].rank, 3u);
  EXPECT_EQ(pad->occurrences[1].samples, (std::vector<int64_t>{1}));
  EXPECT_EQ(pad->count, 2u);
  EXPECT_EQ(pad->evidence["ranks_receiving_padding"], nlohmann::ordered_json({2, 3}));
  const Finding* tail = find(fs, "tail-batch-singleton");
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->samples, (std::vector<int64_t>{8}));  // rank 0's last batch
  ASSERT_EQ(tail->occurrences.size(), 4u);             // one per rank: 8, 9, 0, 1
  EXPECT_EQ(tail->occurrences[3].samples, (std::vector<int64_t>{1}));
  EXPECT_EQ(tail->count, 4u);

  // Only rank 1: no padding copy reaches it.
  EXPECT_EQ(find(geometry_findings(plan, {1}, LossType::Bce), "sampler-padding"), nullptr);
  // DataLoader(drop_last=True) cuts each rank's tail, padding included (N=5, B=2, W=2):
  // rank 0 gets [0, 2], rank 1 [1, 3]; the copy of 0 is never delivered.
  LoaderSpec cut_tail = spec(5, 2);
  cut_tail.world_size = 2;
  cut_tail.drop_last = true;
  BatchPlan ct(compute_geometry(cut_tail), {});
  EXPECT_EQ(find(geometry_findings(ct, {0, 1}, LossType::Bce), "sampler-padding"), nullptr);

  s.sampler_drop_last = true;  // 10 over 4 ranks: 2 each, 2 cut
  BatchPlan cut(compute_geometry(s), {});
  const auto cut_fs = geometry_findings(cut, {0, 1, 2, 3}, LossType::Bce);
  const Finding* dropped = find(cut_fs, "samples-dropped");
  ASSERT_TRUE(dropped);
  EXPECT_EQ(dropped->count, 2u);
}

TEST(GeometryFindings, AccumulationPartialWindow) {
  LoaderSpec s = spec(1040, 8);
  s.accumulation_steps = 4;  // 130 batches = 32 * 4 + 2
  BatchPlan plan(compute_geometry(s), {});
  auto fs = geometry_findings(plan, {0}, LossType::Bce);
  const Finding* f = find(fs, "accumulation-partial-window");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->batch, 128u);
  EXPECT_EQ(f->batches, (std::vector<uint64_t>{128, 129}));
  EXPECT_EQ(f->count, 16u);
  EXPECT_EQ(f->fixes[0].batch_sizes, (std::vector<uint64_t>{2, 5, 10}));
}
