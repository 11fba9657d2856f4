// End to end: one small setup per finding id of SPEC.md, made with TorchScript models
// defined in C++ and .npy data, scanned through the same run_cli() main() uses.
#include <gtest/gtest.h>

#include <cstdio>

#include <cmath>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "cli.h"
#include "core/parse/npy.h"
#include "core/views/html_view.h"
#include "core/views/views.h"
#include "engine/fixtures.h"
#include "support/test_helpers.h"
#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

namespace {

const char* kSumModel = "def forward(self, x):\n    return x.sum(1, keepdim=True)\n";

std::vector<Json> with_id(const Json& report, const std::string& id) {
  std::vector<Json> out;
  for (const auto& f : report["findings"]) {
    if (f["id"] == id) out.push_back(f);
  }
  return out;
}

// Exactly one finding with this id; returns it.
Json one(const ScanRun& r, const std::string& id) {
  auto fs = with_id(r.report, id);
  EXPECT_EQ(fs.size(), 1u) << id << " in " << r.report["findings"].dump(1) << r.err;
  return fs.empty() ? Json() : fs[0];
}

void expect_finding(const Json& f, const std::string& severity, Json batch, std::vector<int64_t> samples, Json rank = 0) {
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f["severity"], severity) << f.dump(1);
  EXPECT_EQ(f["batch"], batch) << f.dump(1);
  EXPECT_EQ(f["rank"], rank) << f.dump(1);
  EXPECT_EQ(f["samples"].get<std::vector<int64_t>>(), samples) << f.dump(1);
  if (severity != "info") {
    EXPECT_FALSE(f["fixes"].empty()) << f.dump(1);
  }
}

std::vector<float> zeros(std::size_t n) { return std::vector<float>(n, 0.0f); }

}  // namespace

TEST(ScanE2E, CleanSetupPasses) {
  Workspace s("clean");
  auto r = s.inputs(8, 3).float_targets(zeros(8)).model(kSumModel).scan();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.report["verdict"], "pass");
  EXPECT_TRUE(r.report["findings"].empty()) << r.report["findings"].dump(1);
  EXPECT_EQ(r.report["batches"]["checked"], 2);
  EXPECT_EQ(r.report["batches"]["last"]["output_shape"], Json({4, 1}));
  EXPECT_EQ(r.report["dataset"]["input_shape"], Json({3}));
  EXPECT_EQ(r.report["summary"], Json({{"errors", 0}, {"warnings", 0}, {"infos", 0}}));
}

TEST(ScanE2E, DataLoaderKeysAreNotedAsNotChangingTheReplay) {
  Workspace s("dlkeys");
  auto r = s.inputs(8, 3).float_targets(zeros(8)).model(kSumModel).loader(R"({"batch_size": 4, "num_workers": 8, "pin_memory": true})").scan();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.report["notes"], Json({"loader.num_workers, loader.pin_memory: accepted; they change how fast batches arrive, "
                                     "not which samples they hold, so the replay is the same"}));
}

TEST(ScanE2E, DistributedSamplerShufflesByDefaultAsPyTorchDoes) {
  Workspace s("ddp-default");
  auto r = s.inputs(20, 3).float_targets(zeros(20)).model(kSumModel).loader(R"({"batch_size": 5, "world_size": 4})").scan();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.report["geometry"]["sampler"], "distributed");
  EXPECT_EQ(r.report["geometry"]["shuffle"], true) << "DistributedSampler(shuffle=True, seed=0) is PyTorch's default";
  EXPECT_EQ(r.report["geometry"]["pytorch_equivalent"],
            "DataLoader(ds, batch_size=5, sampler=DistributedSampler(ds, num_replicas=4, rank=r))");
  EXPECT_TRUE(r.report["notes"].empty()) << "its seed defaults to 0: reproducible" << r.report["notes"];
  s.loader(R"({"batch_size": 5, "sampler": "distributed", "seed": -1, "epoch": 3})");
  auto one_gpu = s.scan();
  EXPECT_EQ(one_gpu.code, 0) << one_gpu.err;
  EXPECT_EQ(one_gpu.report["geometry"]["pytorch_equivalent"],
            "DataLoader(ds, batch_size=5, sampler=DistributedSampler(ds, num_replicas=1, rank=r, seed=-1)); sampler.set_epoch(3)");
}

TEST(ScanE2E, ImpossibleLoaderSetupsAreRefusedAsPyTorchRefusesThem) {
  Workspace s("refused");
  s.inputs(20, 3).float_targets(zeros(20)).model(kSumModel);
  s.loader(R"({"batch_size": 5, "world_size": 2, "seed": 18446744073709551615, "epoch": 1})");
  auto overflow = s.scan();
  EXPECT_EQ(overflow.code, 2);
  EXPECT_EQ(overflow.err, "batchcheck: error: " + s.file("cfg.json") +
                              ": loader.seed: seed + epoch = 18446744073709551615 + 1 exceeds 2^64-1: DistributedSampler "
                              "calls manual_seed(seed + epoch), which raises \"Overflow when unpacking long long\" (torch "
                              "2.x; \"... long\" in 1.13), so this training never starts\n");
  // One loader seeded once, at epoch 2^64-1: refused at once, not replayed for ever.
  s.loader(R"({"batch_size": 5, "shuffle": true, "seed": 1, "epoch": 18446744073709551615})");
  auto epochs = s.scan();
  EXPECT_EQ(epochs.code, 2);
  EXPECT_NE(epochs.err.find("loader.epoch: epoch 18446744073709551615 of a shuffled DataLoader means replaying 2^65 "
                            "earlier permutations of 20 samples"),
            std::string::npos)
      << epochs.err;
  s.loader(R"({"batch_size": 5, "sampler": "sequential", "world_size": 2})");
  EXPECT_EQ(s.scan().code, 2);
}

TEST(ScanE2E, TailBatchPartial) {
  Workspace s("partial");
  auto r = s.inputs(10, 3).float_targets(zeros(10)).model(kSumModel).scan();
  EXPECT_EQ(r.code, 0);
  expect_finding(one(r, "tail-batch-partial"), "info", 2, {8, 9});
}

TEST(ScanE2E, TailBatchSingleton) {
  Workspace s("singleton");
  auto r = s.inputs(9, 3).float_targets(zeros(9)).model(kSumModel).scan();
  EXPECT_EQ(r.code, 0);
  // The batch of one ran through forward, the loss and backward clean: information, with no
  // claim about BatchNorm or .squeeze() the model does not have, and --fail-on warning passes.
  const Json f = one(r, "tail-batch-singleton");
  expect_finding(f, "info", 2, {8});
  const std::string message = f["message"].get<std::string>();
  EXPECT_NE(message.find("; it ran through forward, the loss and backward in this scan without an error"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("BatchNorm"), std::string::npos) << message;
  EXPECT_EQ(s.scan({"--fail-on", "warning"}).code, 0);
  // A batch of one the scan did not run stays a warning.
  auto cut = s.scan({"--max-batches", "2"});
  expect_finding(one(cut, "tail-batch-singleton"), "warning", 2, {8});
  EXPECT_EQ(s.scan({"--fail-on", "warning", "--max-batches", "2"}).code, 1);
}

TEST(ScanE2E, EmptyLoader) {
  Workspace s("empty");
  auto r = s.inputs(3, 3).float_targets(zeros(3)).model(kSumModel).loader(R"({"batch_size": 4, "drop_last": true})").scan();
  EXPECT_EQ(r.code, 1);
  expect_finding(one(r, "empty-loader"), "error", nullptr, {});
  EXPECT_EQ(r.report["batches"]["checked"], 0);
}

TEST(ScanE2E, SamplesDropped) {
  Workspace s("dropped");
  auto r = s.inputs(10, 3).float_targets(zeros(10)).model(kSumModel).loader(R"({"batch_size": 4, "drop_last": true})").scan();
  EXPECT_EQ(r.code, 0);
  Json f = one(r, "samples-dropped");
  expect_finding(f, "info", nullptr, {8, 9});
  EXPECT_EQ(f["count"], 2);
}

TEST(ScanE2E, SamplerPaddingAcrossRanks) {
  Workspace s("padding");
  auto r = s.inputs(10, 3).float_targets(zeros(10)).model(kSumModel).loader(R"({"batch_size": 2, "world_size": 4, "shuffle": false})").scan();
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.report["geometry"]["pytorch_equivalent"],
            "DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, num_replicas=4, rank=r, shuffle=False))");
  Json f = one(r, "sampler-padding");
  expect_finding(f, "warning", 1, {0}, 2);  // the copies land on ranks 2 and 3
  EXPECT_EQ(f["ranks"], Json({2, 3}));
  EXPECT_EQ(r.report["batches"]["checked"], 8);  // 4 ranks x 2 batches
  EXPECT_EQ(r.report["geometry"]["samples_per_rank"], 3);
  // --rank restricts the replay to one rank.
  auto r2 = s.scan({"--rank", "2"});
  EXPECT_EQ(r2.report["batches"]["checked"], 2);
  EXPECT_EQ(r2.report["batches"]["ranks"], Json({2}));
  auto bad = s.scan({"--rank", "4"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "batchcheck: error: --rank: rank 4 does not exist with world_size 4 (ranks are 0..3)\n");
}

TEST(ScanE2E, AccumulationPartialWindow) {
  Workspace s("accum");
  auto r = s.inputs(12, 3).float_targets(zeros(12)).model(kSumModel).loader(R"({"batch_size": 2, "accumulation_steps": 4})").scan();
  Json f = one(r, "accumulation-partial-window");
  expect_finding(f, "warning", 4, {});
  EXPECT_EQ(f["batches"], Json({4, 5}));
}

TEST(ScanE2E, InputNonfinite) {
  Workspace s("input_nan");
  auto r = s.inputs(8, 3, [](uint64_t i, uint64_t j) { return i == 5 && j == 1 ? NAN : 0.5f; })
               .float_targets(zeros(8))
               .model(kSumModel)
               .scan();
  EXPECT_EQ(r.code, 1);
  expect_finding(one(r, "input-nonfinite"), "error", 1, {5});
}

TEST(ScanE2E, TargetNonfinite) {
  Workspace s("target_nan");
  std::vector<float> y = zeros(8);
  y[2] = INFINITY;
  auto r = s.inputs(8, 3).float_targets(y).model(kSumModel).scan();
  expect_finding(one(r, "target-nonfinite"), "error", 0, {2});
}

TEST(ScanE2E, TargetOutOfRangeClassIndex) {
  Workspace s("label_oob");
  std::vector<int64_t> y = {0, 1, 2, 0, 1, 2, 255, 0};
  auto r = s.inputs(8, 3).class_targets(y).model("def forward(self, x):\n    return x * 2.0\n").loss(R"({"type": "cross_entropy"})").scan();
  EXPECT_EQ(r.code, 1);
  Json f = one(r, "target-out-of-range");
  expect_finding(f, "error", 1, {6});
  EXPECT_EQ(f["cuda_equivalent"], "Assertion `t >= 0 && t < n_classes` failed.");
  EXPECT_EQ(f["evidence"]["pytorch_cpu_error"], "Target 255 is out of bounds.");
  EXPECT_EQ(f["fixes"][0]["id"], "ignore-index");
  EXPECT_EQ(f["fixes"][0]["code"], "nn.CrossEntropyLoss(ignore_index=255)");
  // With ignore_index=255 the same data is clean.
  auto ok = s.loss(R"({"type": "cross_entropy", "ignore_index": 255})").scan();
  EXPECT_EQ(ok.code, 0) << ok.report["findings"].dump(1);
}

TEST(ScanE2E, TargetOutOfRangeBce) {
  Workspace s("bce_target");
  std::vector<float> y = {0, 1, 0, 255, 0, 1, 0, 1};
  auto r = s.inputs(8, 3, [](uint64_t, uint64_t) { return 0.1f; })
               .float_targets(y)
               .model(kSumModel)
               .loss(R"({"type": "bce"})")
               .scan();
  Json f = one(r, "target-out-of-range");
  expect_finding(f, "error", 0, {3});
  EXPECT_EQ(f["cuda_equivalent"], "Assertion `target_val >= zero && target_val <= one` failed.");
  EXPECT_EQ(f["fixes"][0]["id"], "scale-targets");
}

TEST(ScanE2E, TargetDtype) {
  Workspace s("dtype");
  auto r = s.inputs(8, 3, [](uint64_t, uint64_t) { return 0.1f; })
               .class_targets({0, 1, 0, 1, 0, 1, 0, 1})
               .model("def forward(self, x):\n    return x.sum(1)\n")
               .loss(R"({"type": "bce"})")
               .scan();
  Json f = one(r, "target-dtype");
  expect_finding(f, "error", 0, {0, 1, 2, 3});
  EXPECT_EQ(f["batches"], Json({0, 1}));
  EXPECT_NE(f["message"].get<std::string>().find("Found dtype Long but expected Float"), std::string::npos);
}

TEST(ScanE2E, ForwardErrorWithSourceLocation) {
  Workspace s("index");
  auto r = s.inputs(8, 1, [](uint64_t i, uint64_t) { return i == 5 ? 7.0f : 1.0f; })
               .float_targets(zeros(8))
               .model("def forward(self, x):\n    idx = x.long().view(-1)\n    return torch.index_select(self.table, 0, idx)\n",
                      {{"table", {5, 1}, {0, 1, 2, 3, 4}}})
               .scan();
  Json f = one(r, "forward-error");
  // The error follows sample 5: the batch without it runs (the search, within 2·log2(4) forwards).
  expect_finding(f, "error", 1, {5});
  EXPECT_EQ(f["evidence"]["blame"]["verdict"], "samples") << f.dump(1);
  EXPECT_LE(f["evidence"]["blame"]["forwards"].get<int>(), 4);
  EXPECT_EQ(f["cuda_equivalent"], "Assertion `srcIndex < srcSelectDimSize` failed.");
  EXPECT_NE(f["evidence"]["error"].get<std::string>().find("index out of range in self"), std::string::npos) << f.dump(1);
  EXPECT_NE(f["evidence"]["location"].get<std::string>().find("line 3"), std::string::npos) << f.dump(1);
}

TEST(ScanE2E, BatchNormSingleValue) {
  ModuleSpec bn{"BatchNorm1d",
                // What F.batch_norm's _verify_batch_size raises (C++-defined modules have no ValueError).
                "def forward(self, x):\n"
                "    assert not (self.training and x.size(0) == 1), "
                "'Expected more than 1 value per channel when training, got input size [1, 3]'\n"
                "    return x\n",
                {},
                {}};
  Workspace s("bn");
  s.inputs(9, 3).float_targets(zeros(9)).model("def forward(self, x):\n    return self.bn.forward(x).sum(1, keepdim=True)\n", {}, {{"bn", bn}});
  auto r = s.scan();
  EXPECT_EQ(r.code, 1);
  Json f = one(r, "batchnorm-single-value");
  expect_finding(f, "error", 2, {8});
  EXPECT_EQ(f["evidence"]["batchnorm_modules"], Json({"bn"}));
  std::vector<std::string> fixes;
  for (const auto& x : f["fixes"]) fixes.push_back(x["id"]);
  EXPECT_EQ(fixes, (std::vector<std::string>{"drop-last", "batch-size-divisor", "groupnorm-instead-of-batchnorm", "reproduce"}));
  EXPECT_NE(one(r, "tail-batch-singleton")["message"].get<std::string>().find("BatchNorm (bn)"), std::string::npos);
  // In eval mode BatchNorm uses running statistics: the same model passes.
  EXPECT_EQ(s.scan({"--mode", "eval"}).code, 0);
}

TEST(ScanE2E, ProbesReadOnlySamplesTheLoaderDeliversAndARanksShareIsNotDropped) {
  // Rank 1 of 2's recorded share: samples 1, 3, 5, 7. Sample 0 (rank 0's) holds a NaN: rank 1's
  // scan neither reads it in a probe nor calls rank 0's samples dropped.
  Workspace s("rank_share");
  s.inputs(8, 3, [](uint64_t i, uint64_t j) { return i == 0 && j == 0 ? std::nanf("") : 0.1f * static_cast<float>(i + j); })
      .float_targets(zeros(8))
      .model(kSumModel);
  std::ofstream(s.file("order.json")) << "[[1, 3], [5, 7]]";
  s.checks(R"({"probe_batch_sizes": [1]})");
  s.loader(R"({"batch_size": 2, "order": "order.json", "order_rank": {"rank": 1, "world_size": 2, "samples": 4}})");
  auto r = s.scan();
  EXPECT_EQ(r.code, 0) << r.err << r.report["findings"].dump(1);
  EXPECT_TRUE(with_id(r.report, "input-nonfinite").empty()) << r.report["findings"].dump(1);
  EXPECT_TRUE(with_id(r.report, "samples-dropped").empty());
  const Json f = one(r, "rank-share");
  EXPECT_EQ(f["severity"], "info");
  EXPECT_EQ(f["message"], "the recorded order (order.json) is rank 1 of 2's share of the epoch: DistributedSampler splits the 8 "
                          "samples over the 2 ranks, 4 samples each, and this rank delivers 4 distinct ones; the other 4 are the "
                          "other ranks' to train on, checked where each rank runs its scan");
  EXPECT_EQ(f["evidence"]["delivered_samples"], 4);
  // Without order_rank the same order is a sampler that skips samples: said as such.
  s.loader(R"({"batch_size": 2, "order": "order.json"})");
  auto plain = s.scan();
  EXPECT_EQ(plain.code, 0) << plain.err;
  expect_finding(one(plain, "samples-dropped"), "info", nullptr, {0, 2, 4, 6});
  EXPECT_TRUE(with_id(plain.report, "input-nonfinite").empty()) << plain.report["findings"].dump(1);
}

TEST(ScanE2E, ARankSharesFindingsCarryItsOwnRankAndRankSelectsIt) {
  // Rank 3 of 4 over 10 samples (DistributedSampler pads to 12): samples 3, 7 and the padding
  // copy 1. Its NaN in sample 7 is rank 3's in every view, and --rank 3 is the order's rank.
  Workspace s("rank_share_label");
  s.inputs(10, 3, [](uint64_t i, uint64_t j) { return i == 7 && j == 0 ? std::nanf("") : 0.1f * static_cast<float>(i + j); })
      .float_targets(zeros(10))
      .model(kSumModel);
  std::ofstream(s.file("order.json")) << "[[3, 7], [1]]";
  s.loader(R"({"batch_size": 2, "order": "order.json", "order_rank": {"rank": 3, "world_size": 4, "samples": 3}})");
  for (const std::vector<std::string>& flags : {std::vector<std::string>{}, std::vector<std::string>{"--rank", "3"}}) {
    auto r = s.scan(flags);
    EXPECT_EQ(r.code, 1) << r.err;
    const Json f = one(r, "input-nonfinite");
    EXPECT_EQ(f["rank"], 3);
    EXPECT_EQ(f["samples"], Json::array({7}));
    EXPECT_EQ(r.report["batches"]["ranks"], Json::array({3}));
    EXPECT_EQ(r.report["series"]["ranks"][0]["rank"], 3);
    const std::string junit = junit_view(r.report), html = html_view(r.report);
    EXPECT_NE(junit.find("at batch 0 (rank 3), samples [7]"), std::string::npos) << junit;
    EXPECT_EQ(junit.find("rank 0"), std::string::npos) << junit;
    EXPECT_NE(html.find("batch 0 (rank 3)"), std::string::npos);
    EXPECT_EQ(html.find("rank 0"), std::string::npos);
  }
  auto other = s.scan({"--rank", "0"});
  EXPECT_EQ(other.code, 2);
  EXPECT_EQ(other.err,
            "batchcheck: error: --rank: rank 0 is not in the recorded order: it holds rank 3's share (loader.order_rank); "
            "use --rank 3 or leave --rank out\n");
}

TEST(ScanE2E, ARankShareIsCheckedAgainstTheOrderAndTheDataset) {
  // order_rank is a claim about the recorded order: checked against it and the dataset's size.
  Workspace s("rank_share_checked");
  s.inputs(10, 3).float_targets(zeros(10)).model(kSumModel);
  std::ofstream(s.file("order.json")) << "[[0, 1], [2, 3], [4, 5], [6, 7], [8]]";
  // A share of 2 over 4 ranks is DistributedSampler's (10 // 4 with drop_last), but the order
  // delivers 9; a share of 2^64-1 is none DistributedSampler gives.
  const std::pair<const char*, std::string> refused[] = {
      {R"({"batch_size": 2, "order": "order.json", "order_rank": {"rank": 3, "world_size": 4, "samples": 2}})",
       ": loader.order_rank: the order delivers 9 samples, more than rank 3 of 4's share of 10 samples over 4 ranks (2): it is "
       "not one rank's share; leave order_rank out, or record that rank's own order\n"},
      {R"({"batch_size": 2, "order": "order.json", "order_rank": {"rank": 0, "world_size": 2, "samples": 18446744073709551615}})",
       ": loader.order_rank.samples: 18446744073709551615 is not a DistributedSampler's share of 10 samples over 2 ranks (5)\n"}};
  for (const auto& [loader, what] : refused) {
    s.loader(loader);
    auto r = s.scan();
    EXPECT_EQ(r.code, 2) << loader;
    EXPECT_EQ(r.err, "batchcheck: error: " + s.file("cfg.json") + what);
  }
  // 2^20 ranks over 10 samples: one sample each, and this order delivers 9.
  s.loader(R"({"batch_size": 2, "order": "order.json", "order_rank": {"rank": 0, "world_size": 1048576}})");
  auto many = s.scan();
  EXPECT_EQ(many.code, 2);
  EXPECT_NE(many.err.find("loader.order_rank: the order delivers 9 samples, more than rank 0 of 1048576's share of 10 "
                          "samples over 1048576 ranks (1)"),
            std::string::npos)
      << many.err;
  // One rank alone: there are no other ranks, so sample 9 is dropped, not another rank's.
  s.loader(R"({"batch_size": 2, "order": "order.json", "order_rank": {"rank": 0, "world_size": 1}})");
  auto alone = s.scan();
  EXPECT_EQ(alone.code, 0) << alone.err;
  EXPECT_TRUE(with_id(alone.report, "rank-share").empty()) << alone.report["findings"].dump(1);
  expect_finding(one(alone, "samples-dropped"), "info", nullptr, {9});
}

TEST(ScanE2E, ProbeExposesASmallBatchFailureTheLoaderNeverDelivers) {
  ModuleSpec bn{"BatchNorm1d",
                // What F.batch_norm's _verify_batch_size raises (C++-defined modules have no ValueError).
                "def forward(self, x):\n"
                "    assert not (self.training and x.size(0) == 1), "
                "'Expected more than 1 value per channel when training, got input size [1, 3]'\n"
                "    return x\n",
                {},
                {}};
  Workspace s("probe");
  s.inputs(8, 3).float_targets(zeros(8)).model("def forward(self, x):\n    return self.bn.forward(x).sum(1, keepdim=True)\n", {}, {{"bn", bn}});
  s.checks(R"({"probe_batch_sizes": [1, 2]})");
  auto r = s.scan();
  // 8 samples at batch 8: the loader never delivers a batch of one, so the probe's
  // failure is information about the model (nearly every BatchNorm network has it), never a
  // failed gate, not even with --fail-on warning.
  EXPECT_EQ(r.code, 0) << r.report["findings"].dump(1);
  Json f = one(r, "batchnorm-single-value");
  EXPECT_EQ(f["severity"], "info");
  EXPECT_EQ(f["probe"], 1);
  EXPECT_EQ(f["batch"], nullptr);
  EXPECT_EQ(f["rank"], nullptr);
  EXPECT_EQ(f["evidence"]["delivered_batch_sizes"], Json({4}));
  EXPECT_NE(f["message"].get<std::string>().find(
                "the configured loader never delivers a batch of 1 (its batches hold 4 samples), so training does not hit "
                "this now; it would with 1 sample left over per rank, e.g. a dataset of 9 samples"),
            std::string::npos)
      << f["message"];
  std::vector<std::string> fixes;
  for (const auto& x : f["fixes"]) fixes.push_back(x["id"]);
  EXPECT_EQ(fixes, (std::vector<std::string>{"groupnorm-instead-of-batchnorm", "reproduce"})) << "no tail fix: there is no tail";
  EXPECT_EQ(s.scan({"--fail-on", "warning"}).code, 0);
  EXPECT_EQ(s.scan({"--fail-on", "info"}).code, 1);

  // The same probe at a size the loader does deliver (9 samples: a tail of one) is an
  // error, but the replay finds it first: the probe adds nothing then.
  Workspace t("probe-tail");
  t.inputs(9, 3).float_targets(zeros(9)).model("def forward(self, x):\n    return self.bn.forward(x).sum(1, keepdim=True)\n", {}, {{"bn", bn}});
  auto tail = t.scan();
  EXPECT_EQ(tail.code, 1);
  EXPECT_EQ(one(tail, "batchnorm-single-value")["batch"], 2);
}

TEST(ScanE2E, TracedBatchNormTurnsRunningVarNanWithoutRaising) {
  const ModuleSpec bn = traced_batchnorm(3);
  Workspace s("traced_bn");
  s.inputs(9, 3).float_targets(zeros(9)).model("def forward(self, x):\n    return self.bn.forward(x).sum(1, keepdim=True)\n", {}, {{"bn", bn}});
  auto r = s.scan();
  EXPECT_EQ(r.code, 1);
  Json f = one(r, "batchnorm-single-value");
  expect_finding(f, "error", 2, {8});
  EXPECT_EQ(f["evidence"]["nonfinite_running_stats"], true);
  EXPECT_EQ(f["evidence"]["batchnorm_modules"], Json({"bn"}));
  EXPECT_EQ(s.scan({"--mode", "eval"}).code, 0);

  // Over 3 positions a sample of one has 3 values per channel: its statistics stay finite.
  // NaN inputs in the first batch turned them NaN earlier; the tail is not blamed for that.
  const ModuleSpec spatial = traced_batchnorm(1);
  Workspace n("traced_bn_nan");
  n.inputs(9, 3, [](uint64_t i, uint64_t j) { return i == 1 && j == 0 ? std::nanf("") : 0.25f * static_cast<float>(i + j); })
      .float_targets(zeros(9))
      .model("def forward(self, x):\n    return self.bn.forward(x.view(x.size(0), 1, 3)).sum(2)\n", {}, {{"bn", spatial}})
      .checks(R"({"probe_batch_sizes": []})");
  auto nan = n.scan();
  EXPECT_EQ(nan.code, 1);
  EXPECT_EQ(one(nan, "input-nonfinite")["batch"], 0);
  EXPECT_TRUE(with_id(nan.report, "batchnorm-single-value").empty()) << nan.report["findings"].dump(1);
}

TEST(ScanE2E, HardcodedBatchSize) {
  Workspace s("view");
  auto r = s.inputs(10, 3).float_targets(zeros(10)).model("def forward(self, x):\n    return x.view(4, -1).sum(1, keepdim=True)\n").scan();
  Json f = one(r, "hardcoded-batch-size");
  expect_finding(f, "error", 2, {8, 9});
  EXPECT_EQ(f["fixes"][0]["id"], "dynamic-batch-dim");
  EXPECT_EQ(f["evidence"]["largest_ok_batch_size"], 4);
}

TEST(ScanE2E, BatchDimMismatchFromSqueeze) {
  Workspace s("squeeze");
  auto r = s.inputs(9, 3).float_targets(zeros(9), {9}).model("def forward(self, x):\n    return x.sum(1, keepdim=True).squeeze()\n").scan();
  Json f = one(r, "batch-dim-mismatch");
  expect_finding(f, "error", 2, {8});
  EXPECT_EQ(f["fixes"][0]["id"], "explicit-squeeze-dim");
}

TEST(ScanE2E, ShapeMismatch) {
  Workspace s("shape");
  auto r = s.inputs(8, 3).float_targets(zeros(8), {8}).model(kSumModel).loss(R"({"type": "bce_with_logits"})").scan();
  Json f = one(r, "shape-mismatch");
  expect_finding(f, "error", 0, {0, 1, 2, 3});  // batch 0's samples; batch 1's are its own occurrence
  EXPECT_EQ(f["occurrences"], Json::parse(R"([{"rank": 0, "batch": 0, "samples": [0, 1, 2, 3], "count": 4},
                                              {"rank": 0, "batch": 1, "samples": [4, 5, 6, 7], "count": 4}])"));
  EXPECT_EQ(f["count"], 8);
  EXPECT_NE(f["message"].get<std::string>().find("Target size (torch.Size([4])) must be the same as input size (torch.Size([4, 1]))"),
            std::string::npos)
      << f.dump(1);
}

TEST(ScanE2E, OutputNonfinite) {
  Workspace s("out_nan");
  auto r = s.inputs(8, 1, [](uint64_t i, uint64_t) { return i == 3 ? -1.0f : 1.0f; })
               .float_targets(zeros(8))
               .model("def forward(self, x):\n    return torch.log(x)\n")
               .scan();
  expect_finding(one(r, "output-nonfinite"), "error", 0, {3});
}

TEST(ScanE2E, OutputOutOfRangeForBce) {
  Workspace s("out_range");
  auto r = s.inputs(8, 1, [](uint64_t i, uint64_t) { return i == 2 ? 1.5f : 0.5f; })
               .float_targets(zeros(8))
               .model("def forward(self, x):\n    return x\n")
               .loss(R"({"type": "bce"})")
               .scan();
  Json f = one(r, "output-out-of-range");
  expect_finding(f, "error", 0, {2});
  EXPECT_EQ(f["cuda_equivalent"], "Assertion `input_val >= zero && input_val <= one` failed.");
  EXPECT_EQ(f["fixes"][0]["id"], "bce-with-logits");
  EXPECT_EQ(f["evidence"]["max"], 1.5);
}

TEST(ScanE2E, OutputRangeFromChecks) {
  Workspace s("out_range_cfg");
  auto r = s.inputs(8, 1, [](uint64_t i, uint64_t) { return static_cast<float>(i); })
               .model("def forward(self, x):\n    return x\n")
               .loss(R"({"type": "none"})")
               .checks(R"({"output_range": [0, 5], "probe_batch_sizes": []})")
               .scan();
  Json f = one(r, "output-out-of-range");
  expect_finding(f, "error", 1, {6, 7});
  EXPECT_EQ(r.report["dataset"]["target_shape"], nullptr);
}

TEST(ScanE2E, LossNonfiniteWhenEveryTargetIsIgnored) {
  Workspace s("all_ignored");
  auto r = s.inputs(8, 3)
               .class_targets({0, 1, 2, 0, -100, -100, -100, -100})
               .model("def forward(self, x):\n    return x\n")
               .loss(R"({"type": "cross_entropy"})")
               .scan();
  Json f = one(r, "loss-nonfinite");
  expect_finding(f, "error", 1, {4, 5, 6, 7});
  EXPECT_NE(f["message"].get<std::string>().find("every target equals ignore_index -100"), std::string::npos) << f.dump(1);
}

TEST(ScanE2E, LossError) {
  Workspace s("loss_error");
  auto r = s.inputs(8, 3)
               .class_targets({0, 1, 2, 0, 1, 2, 0, 1})
               .model("def forward(self, x):\n    return x\n")
               .loss(R"({"type": "cross_entropy", "weight": [1, 2]})")
               .scan();
  Json f = one(r, "loss-error");
  expect_finding(f, "error", 0, {0, 1, 2, 3});
  EXPECT_EQ(f["occurrences_total"], 2);
  EXPECT_NE(f["message"].get<std::string>().find("weight tensor should be defined either for all 3 classes"), std::string::npos);
}

TEST(ScanE2E, EdgesAndMaxBatches) {
  Workspace s("edges");
  s.inputs(41, 3).float_targets(zeros(41)).model(kSumModel);
  auto edges = s.scan({"--edges"});
  EXPECT_EQ(edges.report["batches"]["checked"], 2);
  EXPECT_EQ(edges.report["batches"]["last"]["index"], 10);
  auto some = s.scan({"--max-batches", "3"});
  EXPECT_EQ(some.report["batches"]["checked"], 3);
}

TEST(ScanE2E, ReportToStdoutAndSummaryToStderr) {
  Workspace s("stdout");
  s.inputs(9, 3).float_targets(zeros(9)).model(kSumModel).scan();
  std::ostringstream out, err;
  int code = run_cli({"scan", s.file("cfg.json")}, out, err);
  EXPECT_EQ(code, 0) << err.str();
  Json report = Json::parse(out.str());
  EXPECT_EQ(report["schema_version"], 1);
  EXPECT_NE(err.str().find("info: tail-batch-singleton at batch 2, samples [8]"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("verdict: pass"), std::string::npos);
}

TEST(ScanE2E, ReportToDevNullLeavesTheDeviceAlone) {
  Workspace s("devnull");
  s.inputs(8, 3).float_targets(zeros(8)).model(kSumModel).write_config();
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"scan", s.file("cfg.json"), "-o", "/dev/null", "-q"}, out, err), 0) << err.str();
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

// Batches this large have their value checks and loss run on the worker thread while the
// next forward runs: findings must still land on the right batches, in order.
TEST(ScanE2E, OverlappedChecksOnLargeBatchesKeepTheirBatches) {
  const uint64_t n = 16, f = 10000;
  Workspace s("overlap");
  std::vector<float> y(n * f, 0.25f);
  y[5 * f + 17] = 2.0f;      // batch 1: target out of [0, 1]
  y[9 * f + 3] = NAN;        // batch 2: NaN target
  y[14 * f + 1] = 3.0f;      // batch 3: out of range again
  s.inputs(n, f, [](uint64_t, uint64_t) { return 0.0f; })
      .float_targets(y, {n, f})
      .model("def forward(self, x):\n    return torch.sigmoid(x)\n")
      .loss(R"({"type": "bce"})");
  auto r = s.scan({"--no-backward"});  // backward runs every stage on the main thread
  EXPECT_EQ(r.code, 1);
  Json range = one(r, "target-out-of-range");
  expect_finding(range, "error", 1, {5});
  EXPECT_EQ(range["occurrences"][1]["batch"], 3);
  EXPECT_EQ(range["occurrences"][1]["samples"], Json({14}));
  EXPECT_EQ(range["batches"], Json({1, 3}));
  expect_finding(one(r, "target-nonfinite"), "error", 2, {9});
  EXPECT_EQ(r.report["batches"]["checked"], 4);
}

// --- the backward pass ----------------------------------------------------------------

TEST(ScanE2E, BackwardErrorFromAnInplaceOpOnASigmoidOutput) {
  Workspace s("backward");
  s.inputs(8, 3, [](uint64_t i, uint64_t j) { return 0.1f * static_cast<float>(i + j); })
      .float_targets(std::vector<float>(8, 0.5f), {8, 1})
      .model("def forward(self, x):\n    y = torch.sigmoid(torch.mm(x, self.w))\n    y *= 0.5\n    return y\n",
             {{"w", {3, 1}, {0.1f, 0.2f, 0.3f}}})
      .loss(R"({"type": "bce"})");
  auto r = s.scan();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.report["backward"], true);
  Json f = one(r, "backward-error");
  expect_finding(f, "error", 0, {0, 1, 2, 3});
  EXPECT_EQ(f["stage"], "backward");
  EXPECT_EQ(f["batches"], Json({0, 1}));
  EXPECT_NE(f["message"].get<std::string>().find(
                "loss.backward() raised on a batch of 4 samples (forward and loss succeeded): one of the variables needed "
                "for gradient computation has been modified by an inplace operation"),
            std::string::npos)
      << f["message"];
  EXPECT_EQ(f["fixes"][0]["id"], "out-of-place");
  EXPECT_EQ(f["fixes"].back()["code"],
            "import torch\nfrom torch import nn\nfrom torch.utils.data import default_collate\nidx = range(0, 4)\n"
            "x, y = default_collate([dataset[i] for i in idx])\nmodel.train(True)\nout = model(x)\n"
            "loss = nn.BCELoss()(out, y)\nloss.backward()\n");
  // Forward-only, it passes: exactly what PyTorch does without backward().
  auto fwd = s.scan({"--no-backward"});
  EXPECT_EQ(fwd.code, 0) << fwd.report["findings"].dump(1);
  EXPECT_EQ(fwd.report["backward"], false);
  EXPECT_EQ(s.scan({"--mode", "eval"}).code, 0) << "no backward in eval mode by default";
  s.checks(R"({"probe_batch_sizes": [], "backward": false})");
  EXPECT_EQ(s.scan().code, 0);
  s.checks(R"({"probe_batch_sizes": [], "backward": true})");
  EXPECT_EQ(s.scan({"--mode", "eval"}).code, 1) << "checks.backward: true runs it in eval mode too";
}

TEST(ScanE2E, GradientNonfiniteNamesTheParameters) {
  Workspace s("grad");
  // sqrt'(0) is infinite: the loss is finite (0) but w's gradient is NaN (inf * 0).
  s.inputs(8, 3, [](uint64_t, uint64_t) { return 1.0f; })
      .float_targets(std::vector<float>(8, 0.0f), {8, 1})
      .model("def forward(self, x):\n    return torch.sqrt(torch.mm(x, self.w) * 0.0) + self.b\n",
             {{"w", {3, 1}, {0.1f, 0.2f, 0.3f}}, {"b", {1}, {0.0f}}});
  auto r = s.scan();
  EXPECT_EQ(r.code, 1) << r.err;
  Json f = one(r, "gradient-nonfinite");
  expect_finding(f, "error", 0, {0, 1, 2, 3});
  EXPECT_EQ(f["evidence"]["parameters"], Json::parse(R"([{"name": "w", "elements": 3, "nan": 3, "inf": 0}])"));
  EXPECT_EQ(f["evidence"]["nonfinite_parameters"], 1);
  EXPECT_EQ(r.report["batches"]["first"]["output_shape"], Json({4, 1})) << "backward keeps the prediction's shape";
  EXPECT_NE(f["message"].get<std::string>().find("gave non-finite gradients to 1 parameter: w (3 NaNs)"), std::string::npos)
      << f["message"];
}

// What torch.jit.trace records for BatchNorm in eval mode: training=False as a constant.
const char* kFrozenEvalBn =
    "def forward(self, x):\n"
    "    return torch.batch_norm(x, self.w, self.b, self.rm, self.rv, False, 0.1, 1e-5, False).sum(1, keepdim=True)\n";
const char* kScriptedBn =
    "def forward(self, x):\n"
    "    return torch.batch_norm(x, self.w, self.b, self.rm, self.rv, self.training, 0.1, 1e-5, False).sum(1, keepdim=True)\n";

TEST(ScanE2E, TraceModeMismatchIsNamed) {
  std::vector<ParamSpec> bn = {{"w", {3}, {1, 1, 1}}, {"b", {3}, {}}, {"rm", {3}, {}, true}, {"rv", {3}, {1, 1, 1}, true}};
  Workspace s("tracemode");
  s.inputs(9, 3).float_targets(zeros(9)).model(kFrozenEvalBn, bn);
  auto r = s.scan();
  EXPECT_EQ(r.code, 0) << "a warning, not a failed gate";
  Json f = one(r, "trace-mode-mismatch");
  EXPECT_EQ(f["severity"], "warning");
  EXPECT_EQ(f["batch"], nullptr);
  EXPECT_EQ(f["evidence"]["traced_in"], "eval");
  EXPECT_EQ(f["evidence"]["frozen_batch_norm_ops"], 1);
  EXPECT_EQ(f["message"],
            "the model was traced in eval mode: 1 batch_norm op has training=False frozen into the graph, so mode \"train\" "
            "has no effect on them; BatchNorm uses its running statistics and dropout is off, so what only train mode "
            "computes cannot show in this replay (a batch that gives BatchNorm one value per channel is still found, "
            "from the shapes the frozen ops see)");
  EXPECT_EQ(f["fixes"][0]["code"], "model.train(); torch.jit.trace(model, example_batch).save(path)");
  // Scanned in eval mode, the archive does what was asked: nothing to say.
  EXPECT_TRUE(with_id(s.scan({"--mode", "eval"}).report, "trace-mode-mismatch").empty());
  // A scripted model follows model.train(): nothing to say either.
  s.model(kScriptedBn, bn);
  EXPECT_TRUE(with_id(s.scan().report, "trace-mode-mismatch").empty());
}

// An archive traced in eval mode, scanned in train mode, with a last batch of one: its
// BatchNorm normalizes with the running statistics and raises nothing, but the user's eager
// model in train mode raises there. The two warnings (trace-mode-mismatch, tail-batch-singleton)
// mean the real run dies: an error at that batch, where BatchNorm sees one value per channel.
TEST(ScanE2E, EvalTraceWithATailOfOneIsTheErrorTrainingHits) {
  const std::string frozen =
      "def forward(self, x):\n"
      "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,\n"
      "                            False, 0.1, 1e-5, False)\n";
  ModuleSpec bn = traced_batchnorm(3);
  bn.source = frozen;
  Workspace s("evaltrace-tail");
  s.inputs(9, 3).float_targets(zeros(9)).model("def forward(self, x):\n    return self.bn.forward(x).sum(1, keepdim=True)\n", {}, {{"bn", bn}});
  auto r = s.scan();
  EXPECT_EQ(r.code, 1) << r.report["findings"].dump(1);
  Json f = one(r, "batchnorm-single-value");
  expect_finding(f, "error", 2, {8});
  EXPECT_EQ(f["message"],
            "BatchNorm bn gets one value per channel (input [1,3]) on this batch of 1 sample: in train mode PyTorch raises "
            "\"Expected more than 1 value per channel when training\" here, so training stops at this batch; the archive "
            "was traced in eval mode, which normalizes with the running statistics and hides it");
  EXPECT_EQ(f["evidence"]["batchnorm_modules"], Json({"bn"}));
  EXPECT_EQ(f["evidence"]["input_shape"], Json({1, 3}));
  EXPECT_EQ(f["evidence"]["traced_in"], "eval");
  EXPECT_EQ(one(r, "trace-mode-mismatch")["severity"], "warning");
  EXPECT_EQ(s.scan({"--mode", "eval"}).code, 0) << "evaluation takes a batch of one";

  // Over 3 positions a sample of one gives each channel 3 values: PyTorch does not raise.
  ModuleSpec spatial = traced_batchnorm(1);
  spatial.source = frozen;
  Workspace p("evaltrace-spatial");
  p.inputs(9, 3).float_targets(zeros(9)).model("def forward(self, x):\n    return self.bn.forward(x.view(x.size(0), 1, 3)).sum(2)\n", {},
                                              {{"bn", spatial}});
  auto wide = p.scan();
  EXPECT_EQ(wide.code, 0) << wide.report["findings"].dump(1);
  EXPECT_TRUE(with_id(wide.report, "batchnorm-single-value").empty()) << wide.report["findings"].dump(1);
}

// A prediction with more rows than the batch: its row numbers name no sample.
TEST(ScanE2E, OutputLargerThanTheBatchNeverIndexesPastIt) {
  Workspace s("bigout");
  s.inputs(8, 3).float_targets(zeros(8)).model("def forward(self, x):\n    return torch.full([x.size(0) * 1000, 1], 2.0)\n")
      .loss(R"({"type": "bce"})");
  auto r = s.scan();
  EXPECT_EQ(r.code, 1);
  expect_finding(one(r, "batch-dim-mismatch"), "error", 0, {0, 1, 2, 3});
  Json range = one(r, "output-out-of-range");
  expect_finding(range, "error", 0, {0, 1, 2, 3});
  EXPECT_EQ(range["count"], 8) << "the batch's samples, never the output's 4000 rows";
}

// Never touch the inputs: -o naming the config, the model or a data file is refused
// before any work; a report that cannot be delivered is never a pass.
TEST(ScanE2E, ReportNeverOverwritesAnInputAndALostReportIsNotAPass) {
  Workspace s("inputs-safe");
  s.inputs(8, 3).float_targets(zeros(8)).model(kSumModel);
  ASSERT_EQ(s.scan().code, 0);
  for (const char* name : {"cfg.json", "m.pt", "x.npy", "y.npy"}) {
    const std::string path = s.file(name);
    auto read_bytes = [](const std::string& p) {
      std::ifstream in(p, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    const std::string before = read_bytes(path);
    std::ostringstream out, err;
    EXPECT_EQ(run_cli({"scan", s.file("cfg.json"), "-o", path, "-q"}, out, err), 2) << name;
    EXPECT_NE(err.str().find(": -o: is the "), std::string::npos) << err.str();
    EXPECT_NE(err.str().find(", an input of this run: refusing to overwrite it"), std::string::npos) << err.str();
    EXPECT_EQ(read_bytes(path), before) << name << " was modified";
  }
  std::ostringstream closed, err;
  closed.setstate(std::ios::badbit);  // what a closed or full stdout looks like to the writer
  EXPECT_EQ(run_cli({"scan", s.file("cfg.json"), "-q"}, closed, err), 2);
  EXPECT_EQ(err.str(), "batchcheck: error: <stdout>: cannot write the report (standard output is closed or full); use -o FILE\n");
  // As in test_cli.cpp: LeakSanitizer cannot trace a process that dlopened LibTorch.
  auto full = run_command("ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 " BATCHCHECK_BINARY_DIR "/app/batchcheck scan " +
                          s.file("cfg.json") + " -q > /dev/full");
  EXPECT_EQ(full.status, 2) << full.output;
}

TEST(ScanE2E, StdoutHoldsOnlyTheReportAndAnyNameWorks) {
  Workspace s("stdout-pure");
  s.inputs(8, 3).float_targets(zeros(8)).model("def forward(self, x):\n    print('hello from forward')\n    return x.sum(1, keepdim=True)\n");
  s.scan();  // writes cfg.json
  const std::string bin = "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 " BATCHCHECK_BINARY_DIR "/app/batchcheck";
  auto r = run_command(bin + " scan " + s.file("cfg.json") + " -q 2>/dev/null");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(Json::accept(r.output)) << "the model's print() went to stdout:\n" << r.output.substr(0, 200);
  auto e = run_command(bin + " scan " + s.file("cfg.json") + " -q -o /dev/null 2>&1");
  EXPECT_NE(e.output.find("hello from forward"), std::string::npos) << "the print goes to stderr";


  // A report name of 255 bytes (NAME_MAX): the temporary file beside it must still fit.
  const std::string long_name = s.file(std::string(250, 'r') + ".json");
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"scan", s.file("cfg.json"), "-o", long_name, "-q"}, out, err), 0) << err.str();
  EXPECT_TRUE(std::filesystem::exists(long_name));
  // A config whose name is not UTF-8: the report replaces the byte instead of failing.
  const std::string odd = s.file("cfg-\xff.json");
  std::filesystem::copy_file(s.file("cfg.json"), odd);
  std::ostringstream out2, err2;
  EXPECT_EQ(run_cli({"scan", odd, "-q"}, out2, err2), 0) << err2.str();
  EXPECT_NE(out2.str().find("cfg-\xEF\xBF\xBD.json"), std::string::npos) << out2.str().substr(0, 300);
  for (const auto& entry : std::filesystem::directory_iterator(s.file(""))) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

// An earlier NaN batch poisons BatchNorm's running statistics; the probe runs on the model
// as loaded from its file, so it does not report them as its own ("running_var became NaN").
TEST(ScanE2E, ProbesStartFromTheModelAsSaved) {
  const ModuleSpec bn = traced_batchnorm(3);
  Workspace s("probe-fresh");
  // [N, 3, 4]: four values per channel even in a batch of one, so BatchNorm is fine there.
  s.inputs(8, 12, [](uint64_t i, uint64_t j) { return i == 5 && j == 0 ? NAN : 0.1f * static_cast<float>(i + j); });
  s.float_targets(zeros(8 * 3), {8, 3})
      .model("def forward(self, x):\n    return self.bn.forward(x.view(x.size(0), 3, 4)).sum(2)\n", {}, {{"bn", bn}});
  s.checks(R"({"probe_batch_sizes": [1]})");
  auto r = s.scan();
  EXPECT_EQ(r.code, 1);
  expect_finding(one(r, "input-nonfinite"), "error", 1, {5});
  EXPECT_TRUE(with_id(r.report, "batchnorm-single-value").empty()) << r.report["findings"].dump(1);
  for (const auto& f : r.report["findings"]) EXPECT_FALSE(f.contains("probe")) << f.dump(1);
}

TEST(ScanE2E, PrecisionFp16FindsTheOverflowAtItsSampleAndBf16Passes) {
  // mm(x, 100s): sample 5's row sums to 4 x 500 x 100 = 200,000 > 65,504; the others to 120.
  Workspace s("precision");
  s.inputs(8, 4, [](uint64_t i, uint64_t) { return i == 5 ? 500.0f : 0.3f; })
      .float_targets(zeros(8))
      .model("def forward(self, x):\n    return torch.mm(x, torch.ones(x.size(1), 1) * 100.0)\n");
  s.loader(R"({"batch_size": 4})");
  auto fp32 = s.scan();
  EXPECT_EQ(fp32.code, 0) << fp32.err << fp32.report["findings"].dump(1);
  auto bf16 = s.scan({"--precision", "bf16"});
  EXPECT_EQ(bf16.code, 0) << bf16.err << bf16.report["findings"].dump(1);
  EXPECT_TRUE(with_id(bf16.report, "half-overflow").empty());
  int major = 0, minor = 0;
  std::sscanf(BATCHCHECK_TORCH_VERSION, "%d.%d", &major, &minor);
  if (major < 2 || (major == 2 && minor < 1)) {
    // CPU autocast took float16 in 2.1: refused in one line, naming the way out.
    auto old = s.scan({"--precision", "fp16"});
    EXPECT_EQ(old.code, 2);
    EXPECT_NE(old.err.find("batchcheck: error: --precision: fp16 autocast on the CPU needs LibTorch 2.1 or later; this "
                           "batchcheck links LibTorch " BATCHCHECK_TORCH_VERSION),
              std::string::npos)
        << old.err;
    return;
  }
  auto r = s.scan({"--precision", "fp16"});
  EXPECT_EQ(r.code, 1) << r.err;
  const Json f = one(r, "half-overflow");
  EXPECT_EQ(f["batch"], 1);
  EXPECT_EQ(f["samples"], Json::array({5}));
  EXPECT_EQ(f["evidence"]["op"]["op"], "aten::mm");
  EXPECT_EQ(f["evidence"]["fp32_max"], 200000.0);
  EXPECT_EQ(f["fixes"][0]["id"], "use-bf16");
  bool noted = false;
  for (const auto& n : r.report["notes"]) noted = noted || n.get<std::string>().rfind("precision: float16 under torch.autocast(\"cpu\"", 0) == 0;
  EXPECT_TRUE(noted) << r.report["notes"].dump(1);
  // A model at 61% of the range warns (half-headroom), and passes the gate.
  s.inputs(8, 4, [](uint64_t i, uint64_t) { return i == 6 ? 100.0f : 0.3f; });  // 40,000
  auto head = s.scan({"--precision", "fp16"});
  EXPECT_EQ(head.code, 0) << head.err;
  const Json w = one(head, "half-headroom");
  EXPECT_EQ(w["severity"], "warning");
  EXPECT_EQ(w["samples"], Json::array({6}));
  EXPECT_EQ(w["evidence"]["peak"], 40000.0);
  // The batch with the largest value leads (batch 1, after batch 0's smaller one): its reproduce
  // rebuilds that whole batch, not its sample alone.
  s.inputs(8, 4, [](uint64_t i, uint64_t) { return i == 6 ? 125.0f : i == 1 ? 100.0f : 0.3f; });  // 50,000 after 40,000
  auto led = s.scan({"--precision", "fp16"});
  const Json l = one(led, "half-headroom");
  EXPECT_EQ(l["batch"], 1);
  EXPECT_EQ(l["samples"], Json::array({6}));
  const std::string code = l["fixes"].back()["code"].get<std::string>();
  EXPECT_NE(code.find("\nidx = range(4, 8)\n"), std::string::npos) << code;
}
