// `scan --jobs`: engine processes side by side, each replaying every J-th step, write the
// report one process writes, byte for byte, on every kind of finding (root causes past the
// per-id cap, a shape error at the tail whose larger batch ran in another job, a crash and
// the fresh child after it, DDP ranks, probes). The default splits a long scan after
// measuring it, and stays one job on a short one. Every process has one intra-op thread
// here: LibTorch's reductions round differently with other thread counts.
#include <gtest/gtest.h>

#include <cmath>

#include <fstream>
#include <sstream>
#include <thread>

#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

namespace {

const std::string kBin = BATCHCHECK_BINARY_DIR "/app/batchcheck";

struct BinaryRun {
  int code = -1;
  std::string report, err;
};

BinaryRun run_binary(const std::string& cfg, const std::string& out, const std::string& flags, const std::string& env = "") {
  std::remove(out.c_str());
  const std::string log = out + ".stderr";
  CommandResult r = run_command("env ASAN_OPTIONS=detect_leaks=0 " + env + " '" + kBin + "' scan '" + cfg + "' -o '" + out +
                                "' " + flags + " 2>'" + log + "'");
  return {r.status, slurp(out), slurp(log)};
}

std::vector<float> zeros(uint64_t n) { return std::vector<float>(n, 0.0f); }

const ModuleSpec kBatchNorm{"BatchNorm1d",
                            "def forward(self, x):\n"
                            "    assert not (self.training and x.size(0) == 1), "
                            "'Expected more than 1 value per channel when training, got input size [1, 3]'\n"
                            "    return x\n",
                            {},
                            {}};

}  // namespace

TEST(Jobs, EveryFindingScenarioReportsAsOneJob) {
  TempDir dir("jobs-eq");
  struct Case {
    std::string name, cfg, env;
  };
  std::vector<Case> cases;
  const std::string samples = BATCHCHECK_SOURCE_DIR "/sample_configs/";
  for (const char* s : {"segmentation_tail.json", "classification_label255.json", "clean.json"}) cases.push_back({s, samples + s, ""});
  cases.push_back({"label255, 2 DDP ranks, shuffled", sample_config_in(dir, "classification_label255.json", {{"loader", {{"world_size", 2}, {"shuffle", true}, {"seed", 3}}}}), ""});

  // NaN from log() in 6 batches: root causes on the first 3 only, wherever they ran.
  Workspace nan("jobs-nan");
  nan.inputs(40, 3, [](uint64_t i, uint64_t) { return i % 7 == 3 ? -1.0f : 0.5f; })
      .float_targets(zeros(40))
      .model("def forward(self, x):\n    return torch.log(x).sum(1, keepdim=True)\n");
  cases.push_back({"NaN in 6 batches", nan.write_config(), ""});
  // view(4, -1): the tail of 2 fails; with 3 jobs its job never ran a batch of 4.
  Workspace view("jobs-view");
  view.inputs(10, 3).float_targets(zeros(10)).model("def forward(self, x):\n    return x.view(4, -1).sum(1, keepdim=True)\n");
  cases.push_back({"hard-coded batch size", view.write_config(), ""});
  // BatchNorm on a tail of 1, and the probes.
  Workspace bn("jobs-bn");
  bn.inputs(9, 3).float_targets(zeros(9))
      .model("def forward(self, x):\n    return self.bn.forward(x).sum(1, keepdim=True)\n", {}, {{"bn", kBatchNorm}})
      .checks(R"({"probe_batch_sizes": [1, 2]})");
  cases.push_back({"BatchNorm tail and probes", bn.write_config(), ""});
  // NaN inputs in the first batch turn the statistics NaN; the tail of 1 (3 values per channel)
  // cannot: it is judged on its own, whether or not its job ran the first batch.
  // Traced BatchNorm: the ATen op, without the check that raises on one value per channel.
  const ModuleSpec traced_bn = traced_batchnorm(3);
  Workspace bn_nan("jobs-bn-nan");
  bn_nan.inputs(9, 3, [](uint64_t i, uint64_t j) { return i == 1 && j == 0 ? std::nanf("") : 0.25f * static_cast<float>(i + j); })
      .float_targets(zeros(9))
      .model("def forward(self, x):\n    return self.bn.forward(x.view(x.size(0), 1, 3)).sum(2)\n", {},
             {{"bn", traced_batchnorm(1)}})
      .checks(R"({"probe_batch_sizes": []})");
  cases.push_back({"NaN inputs, then a BatchNorm tail", bn_nan.write_config(), ""});
  // Two batches of one in a recorded order: each is judged on its own, whichever job ran the other.
  Workspace bn_two("jobs-bn-two");
  bn_two.inputs(10, 3, [](uint64_t i, uint64_t j) { return 0.25f * static_cast<float>(i + j); })
      .float_targets(zeros(10))
      .model("def forward(self, x):\n    return self.bn.forward(x).sum(1, keepdim=True)\n", {}, {{"bn", traced_bn}})
      .checks(R"({"probe_batch_sizes": []})")
      .loader(R"({"order": "order.json"})");
  std::ofstream(bn_two.file("order.json")) << "[[0, 1, 2, 3], [4], [5, 6, 7, 8], [9]]";
  cases.push_back({"two BatchNorm batches of one", bn_two.write_config(), ""});
  // A crash at step 3: a forward-crash finding, and a fresh child goes on.
  Workspace crash("jobs-crash");
  crash.inputs(24, 3).float_targets(zeros(24)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n");
  cases.push_back({"crash at step 3", crash.write_config(), "BATCHCHECK_TEST_FAULT=step:3:SEGV"});

  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    BinaryRun one = run_binary(c.cfg, dir.file("one.json"), "-q --jobs 1 --threads 1", c.env);
    ASSERT_LE(one.code, 1) << one.err;
    ASSERT_FALSE(one.report.empty());
    for (const char* flags : {"-q --jobs 3 --threads 3"}) {  // three: uneven shares of ranks and tails
      BinaryRun jobs = run_binary(c.cfg, dir.file("jobs.json"), flags, c.env);
      EXPECT_EQ(jobs.code, one.code) << flags << ": " << jobs.err;
      EXPECT_EQ(jobs.report, one.report) << flags;
    }
  }
}

TEST(Jobs, TheDefaultSplitsALongScanAndKeepsAShortOneWhole) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: the default never splits";
  // A few ms a step of elementwise ops (as fast in Debian's LibTorch as in pip's, unlike a
  // matmul), 1200 steps: seconds of work against a start-up of ~0.5 s (more under ASan).
  Workspace w("jobs-auto");
  w.inputs(9600, 256).float_targets(zeros(9600))
      .model("def forward(self, x):\n"
             "    for i in range(400):\n"
             "        x = torch.tanh(x * 1.0001)\n"
             "    return x.sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 8})");
  const std::string cfg = w.write_config();
  TempDir dir("jobs-auto-out");
  // Job 0 splits early (after its first batches) and goes on with the even steps: its child
  // crashes at step 1100, and the fresh one resumes with job 0's share, as one job resumes.
  const std::string crash = "BATCHCHECK_TEST_FAULT=step:1100:SEGV";
  BinaryRun split = run_binary(cfg, dir.file("auto.json"), "-v --threads 2", crash);
  ASSERT_EQ(split.code, 1) << split.err;
  EXPECT_NE(split.err.find("batchcheck: 9600 samples, checking 1200 batches on cpu\n"), std::string::npos) << split.err;
  EXPECT_NE(split.err.find(": 2 jobs\n"), std::string::npos) << split.err;
  BinaryRun one = run_binary(cfg, dir.file("one.json"), "-q --jobs 1 --threads 1", crash);
  EXPECT_NE(one.report.find("\"forward-crash\""), std::string::npos) << one.report.substr(0, 2000);
  EXPECT_EQ(split.report, one.report);

  // 40 steps of a sum: less than a start-up's work on any machine (under ASan too, where a step
  // of the seed's model takes long enough to pay): one job, the report of one job.
  Workspace small("jobs-small");
  small.inputs(160, 3).float_targets(zeros(160)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n");
  const std::string small_cfg = small.write_config();
  BinaryRun whole = run_binary(small_cfg, dir.file("small.json"), "-v --threads 2");
  EXPECT_EQ(whole.code, 0) << whole.err;
  EXPECT_EQ(whole.err.find(" jobs\n"), std::string::npos) << whole.err;  // no split
  EXPECT_EQ(whole.report, run_binary(small_cfg, dir.file("small1.json"), "-q --jobs 1 --threads 1").report);
}

TEST(Jobs, InputErrorsAndRefusalsAreOneLine) {
  // Every job meets the same bad input: one line, as with one job.
  Workspace w("jobs-bad");
  w.inputs(10, 3).float_targets(zeros(10)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 4, "world_size": 2})");
  const std::string cfg = w.write_config();
  TempDir dir("jobs-bad-out");
  BinaryRun jobs = run_binary(cfg, dir.file("r.json"), "--jobs 2 --rank 5");
  BinaryRun one = run_binary(cfg, dir.file("r.json"), "--jobs 1 --rank 5");
  EXPECT_EQ(jobs.code, 2);
  EXPECT_EQ(jobs.err, one.err);
  EXPECT_EQ(jobs.err, "batchcheck: error: --rank: rank 5 does not exist with world_size 2 (ranks are 0..1)\n");

  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"scan", cfg, "--jobs", "0"}, out, err), 2);
  EXPECT_EQ(err.str(), "batchcheck: error: --jobs: expected a positive integer, got 0\n");
  err.str("");
  EXPECT_EQ(run_cli({"scan", cfg, "--jobs", "65"}, out, err), 2);
  EXPECT_EQ(err.str(), "batchcheck: error: --jobs: 65 is more than 64 engine processes\n");
  err.str("");
  EXPECT_EQ(run_cli({"scan", cfg, "--shard", "0/2", "-o", dir.file("p.json"), "--jobs", "2"}, out, err), 2);
  EXPECT_EQ(err.str(), "batchcheck: error: --jobs: a shard runs as one job: start more shards instead (--shard K/N with a larger N)\n");
}
