// `scan --fail-fast`: the probes and every rank's first and last batch first (where tails,
// shape errors and BatchNorm on one sample live), then the rest in order; the scan stops at
// the first finding that fails the gate and says how far it went. A clean setup is the same
// report as without the flag.
#include <gtest/gtest.h>

#include <fstream>

#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

namespace {

const std::string kBin = BATCHCHECK_BINARY_DIR "/app/batchcheck";

std::vector<float> zeros(uint64_t n) { return std::vector<float>(n, 0.0f); }

Json scan_json(const std::string& cfg, const std::string& out, std::vector<std::string> flags, int expect_code) {
  std::vector<std::string> args = {"scan", cfg, "-o", out, "-q"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::ostringstream o, e;
  EXPECT_EQ(run_cli(args, o, e), expect_code) << e.str();
  std::ifstream in(out);
  return in ? Json::parse(in) : Json();
}

}  // namespace

TEST(FailFast, TheSeedStopsAtTheProbeOfOneSample) {
  TempDir dir("ff-seed");
  const std::string cfg = BATCHCHECK_SOURCE_DIR "/sample_configs/segmentation_tail.json";
  Json r = scan_json(cfg, dir.file("r.json"), {"--fail-fast"}, 1);
  EXPECT_EQ(r["complete"], false);
  EXPECT_EQ(r["stopped_at_first_error"], true);
  EXPECT_EQ(r["verdict"], "fail");
  EXPECT_EQ(r["batches"]["checked"], 0);  // one forward: the probe of 1 sample, the tail's size
  ASSERT_EQ(r["findings"][0]["id"], "output-nonfinite");
  EXPECT_EQ(r["findings"][0]["probe"], 1);
  EXPECT_EQ(r["notes"], Json::array({"--fail-fast: the scan stopped at its first error, after 0 batches (the probes and every "
                                     "rank's first and last batch come first); the rest was not checked"}));
  // Without probes: batch 0, then the last batch, where the NaN is.
  const std::string noprobe = sample_config_in(dir, "segmentation_tail.json", {{"checks", {{"probe_batch_sizes", Json::array()}}}});
  Json t = scan_json(noprobe, dir.file("t.json"), {"--fail-fast"}, 1);
  EXPECT_EQ(t["batches"]["checked"], 2);
  EXPECT_EQ(t["batches"]["first"]["index"], 0);
  EXPECT_EQ(t["batches"]["last"]["index"], 130);
  ASSERT_EQ(t["findings"][0]["id"], "output-nonfinite");
  EXPECT_EQ(t["findings"][0]["batch"], 130);
  EXPECT_EQ(t["findings"][0]["samples"], Json::array({1040}));
}

TEST(FailFast, EveryRanksEdgesComeBeforeTheMiddle) {
  // 2 ranks of 5 batches; a NaN in batch 2 of rank 1 (sample 21 of the interleaved order)
  // and a shape error at each rank's tail: the tails are found first.
  Workspace w("ff-ranks");
  w.inputs(36, 3, [](uint64_t i, uint64_t) { return i == 21 ? -1.0f : 0.5f; })
      .float_targets(zeros(36))
      .model("def forward(self, x):\n    return torch.log(x.view(4, -1)).sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 4, "world_size": 2})");
  const std::string cfg = w.write_config();
  TempDir dir("ff-ranks-out");
  Json r = scan_json(cfg, dir.file("r.json"), {"--fail-fast"}, 1);
  EXPECT_EQ(r["batches"]["checked"], 2);  // rank 0's batch 0, then its last batch
  EXPECT_EQ(r["summary"]["errors"], 1) << r["findings"].dump(1);
  EXPECT_EQ(r["findings"][0]["id"], "hardcoded-batch-size");
  EXPECT_EQ(r["findings"][0]["rank"], 0);
  EXPECT_EQ(r["findings"][0]["batch"], 4);
  // --fail-on never: nothing fails the gate, so nothing stops it.
  Json all = scan_json(cfg, dir.file("all.json"), {"--fail-fast", "--fail-on", "never"}, 0);
  EXPECT_EQ(all["complete"], true);
  EXPECT_EQ(all["batches"]["checked"], 10);
}

TEST(FailFast, ACleanSetupIsTheSameReport) {
  TempDir dir("ff-clean");
  const std::string cfg = BATCHCHECK_SOURCE_DIR "/sample_configs/clean.json";
  scan_json(cfg, dir.file("plain.json"), {"--threads", "1"}, 0);
  scan_json(cfg, dir.file("ff.json"), {"--threads", "1", "--fail-fast"}, 0);
  EXPECT_EQ(slurp(dir.file("ff.json")), slurp(dir.file("plain.json")));
}

TEST(FailFast, ACrashIsTheFirstErrorToo) {
  // Step 1 is rank 0's last batch: checked second, it crashes; no fresh child goes on.
  Workspace w("ff-crash");
  w.inputs(8, 3).float_targets(zeros(8)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n");
  w.write_config();
  const std::string out = w.file("r.json");
  CommandResult c = run_command("env ASAN_OPTIONS=detect_leaks=0 BATCHCHECK_TEST_FAULT=step:1:SEGV '" + kBin + "' scan '" +
                                w.file("cfg.json") + "' -q --fail-fast -o '" + out + "'");
  EXPECT_EQ(c.status, 1);
  Json r = Json::parse(slurp(out));
  EXPECT_EQ(r["complete"], false);
  EXPECT_EQ(r["stopped_at_first_error"], true);
  EXPECT_EQ(r["batches"]["checked"], 2);
  ASSERT_EQ(r["findings"][0]["id"], "forward-crash");
  EXPECT_EQ(r["findings"][0]["batch"], 1);

  std::ostringstream o, e;
  EXPECT_EQ(run_cli({"scan", w.file("cfg.json"), "--fail-fast", "--jobs", "2"}, o, e), 2);
  EXPECT_EQ(e.str(), "batchcheck: error: --jobs: --fail-fast runs as one job: its point is the first batches, in order of likely failure\n");
}
