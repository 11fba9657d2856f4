// A scan split into shards, then merged, is the scan done whole: the same report, byte for
// byte. The parts must come from one setup and cover every shard once. A real launcher
// (torchrun, --no_python) starts the shards.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "core/journal/clean_rows.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using namespace batchcheck::test_util;
using Json = nlohmann::json;

namespace {

const std::string kBin = BATCHCHECK_BINARY_DIR "/app/batchcheck";

struct CliRun {
  int code = -1;
  std::string err;
};
CliRun cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliRun r;
  r.code = run_cli(args, out, err);
  r.err = err.str();
  return r;
}

}  // namespace

TEST(Shards, MergedPartsAreTheWholeScansReport) {
  TempDir dir("shards");
  struct Case {
    std::string sample;
    Json loader;
    int shards;
  };
  // A tail batch of one with a NaN and a probe; class 255 in a shuffled loader over two DDP ranks.
  for (const Case& c : {Case{"segmentation_tail.json", Json::object(), 3},
                        Case{"classification_label255.json", Json{{"world_size", 2}}, 4}}) {
    SCOPED_TRACE(c.sample);
    const std::string cfg = sample_config_in(dir, c.sample, {{"loader", c.loader}});
    const std::string whole = dir.file("whole.json");
    CliRun w = cli({"scan", cfg, "-q", "-o", whole});
    EXPECT_EQ(w.code, 1) << w.err;
    std::vector<std::string> parts;
    for (int k = 0; k < c.shards; ++k) {
      // Each shard exits 0 whatever it found: merge judges the whole.
      CliRun s = cli({"scan", cfg, "--shard", std::to_string(k) + "/" + std::to_string(c.shards), "-o", dir.file("part-{shard}.json")});
      EXPECT_EQ(s.code, 0) << s.err;
      EXPECT_NE(s.err.find("shard " + std::to_string(k) + "/" + std::to_string(c.shards) + " (--shard): checked "), std::string::npos) << s.err;
      parts.insert(parts.begin(), dir.file("part-" + std::to_string(k) + ".json"));  // any order
    }
    std::vector<std::string> args{"merge"};
    args.insert(args.end(), parts.begin(), parts.end());
    args.insert(args.end(), {"-q", "-o", dir.file("merged.json")});
    CliRun m = cli(args);
    EXPECT_EQ(m.code, 1) << m.err;
    EXPECT_EQ(slurp(dir.file("merged.json")), slurp(whole));

    // A shard missing, a shard given twice.
    std::vector<std::string> short_args{"merge", parts[0], parts[1], "-o", dir.file("x.json")};
    CliRun missing = cli(short_args);
    EXPECT_EQ(missing.code, 2);
    EXPECT_NE(missing.err.find("batchcheck: error: merge: " + std::to_string(c.shards - 2) + " shard"), std::string::npos) << missing.err;
    args.insert(args.begin() + 1, parts[0]);
    CliRun twice = cli(args);
    EXPECT_EQ(twice.code, 2);
    EXPECT_NE(twice.err.find(": shard: shard "), std::string::npos) << twice.err;
    EXPECT_NE(twice.err.find(" is also " + parts[0] + ": each shard once"), std::string::npos) << twice.err;
  }
}

TEST(Shards, PartsOfAnotherSetupAreRefused) {
  TempDir dir("shards-foreign");
  const std::string a = sample_config_in(dir, "segmentation_tail.json");
  ASSERT_EQ(cli({"scan", a, "--shard", "0/2", "-o", dir.file("a-0.json")}).code, 0);
  // The same config with another batch size is another setup.
  Json other = Json::parse(slurp(a));
  other["loader"]["batch_size"] = 16;
  const std::string b = dir.file("other.json");
  std::ofstream(b) << other.dump();
  ASSERT_EQ(cli({"scan", b, "--shard", "1/2", "-o", dir.file("b-1.json")}).code, 0);
  CliRun r = cli({"merge", dir.file("a-0.json"), dir.file("b-1.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "batchcheck: error: " + dir.file("b-1.json") + ": identity: was scanned with another config than " +
                       dir.file("a-0.json") + "\n");
  CliRun full = cli({"merge", dir.file("a-0.json"), BATCHCHECK_SOURCE_DIR "/sample_configs/clean.json"});
  EXPECT_EQ(full.code, 2);
  EXPECT_NE(full.err.find("not a partial report of batchcheck scan --shard"), std::string::npos) << full.err;
  CliRun no_o = cli({"scan", a, "--shard", "0/2"});
  EXPECT_EQ(no_o.err, "batchcheck: error: --shard: a shard writes a partial report: give -o PART.json ({shard} in the path "
                      "becomes the shard's index)\n");
}

// Parts keep their clean batches as compact rows. A part laid out again (pretty-printed) or
// written by the first version (every batch as journal lines) merges all the same; an edited
// row is named.
TEST(Shards, PartsReadAsWrittenReformattedOrOlder) {
  TempDir dir("shards-rows");
  const std::string cfg = sample_config_in(dir, "segmentation_tail.json");
  ASSERT_EQ(cli({"scan", cfg, "-q", "-o", dir.file("whole.json")}).code, 1);
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(cli({"scan", cfg, "--shard", std::to_string(k) + "/3", "-q", "-o", dir.file("part-{shard}.json")}).code, 0);
  }
  nlohmann::ordered_json pretty = nlohmann::ordered_json::parse(slurp(dir.file("part-1.json")));
  ASSERT_FALSE(pretty["clean"]["rows"].get<std::string>().empty());
  std::ofstream(dir.file("part-1.json")) << pretty.dump(2) << "\n";
  // Version 1: the rows as journal lines, in step order.
  nlohmann::ordered_json old = nlohmann::ordered_json::parse(slurp(dir.file("part-2.json")));
  std::map<uint64_t, nlohmann::ordered_json> by_step;
  for (const auto& st : old["steps"]) by_step[st["step"].get<uint64_t>()] = st;
  for (const CleanStep& c : decode_clean_rows(old["clean"]["rows"].get<std::string>(), "part-2")) {
    by_step[c.at.step] = {{"step", c.at.step}, {"lines", clean_step_lines(c)}};
  }
  old["batchcheck_partial"] = 1;
  old["steps"] = nlohmann::ordered_json::array();
  for (auto& [step, st] : by_step) old["steps"].push_back(st);
  old.erase("clean");
  std::ofstream(dir.file("part-2.json")) << old.dump();
  const std::vector<std::string> merge{"merge", dir.file("part-0.json"), dir.file("part-1.json"), dir.file("part-2.json"), "-q",
                                       "-o", dir.file("merged.json")};
  EXPECT_EQ(cli(merge).code, 1);
  EXPECT_EQ(slurp(dir.file("merged.json")), slurp(dir.file("whole.json")));

  std::string edited = slurp(dir.file("part-0.json"));
  const auto row = edited.find("\"rows\":\"") + 8;
  edited.replace(edited.find(' ', row), 1, " x");  // the rank: "x0"
  std::ofstream(dir.file("part-0.json")) << edited;
  CliRun bad = cli(merge);
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "batchcheck: error: " + dir.file("part-0.json") + ": clean: row 1: \"x0\" is not a count: the part was edited or truncated\n");
}

// torchrun starts two processes of the real binary (--no_python); each reads RANK and
// WORLD_SIZE, scans its half and writes its part; the merge is the whole scan's report.
TEST(Shards, TorchrunStartsTheShards) {
  if (!python_torch_available()) GTEST_SKIP() << python_missing_line("the torchrun test");
  // Debian's torch 1.13 on Python 3.11 cannot start any worker ('NoneType' object has no
  // attribute 'get' in its redirects handling): the pip torch build runs this test.
  const auto probe = run_command(python() + " -m torch.distributed.run --standalone --nproc_per_node=1 --no_python true 2>&1");
  if (probe.status != 0) {
    const std::string out = probe.output.substr(0, probe.output.find_last_not_of('\n') + 1);
    GTEST_SKIP() << python() << "'s torchrun cannot start a worker here (" << out.substr(out.find_last_of('\n') + 1)
                 << "): the torchrun test runs with the default build's torch";
  }
  TempDir dir("shards-torchrun");
  const std::string cfg = sample_config_in(dir, "segmentation_tail.json");
  // torchrun gives each worker OMP_NUM_THREADS=1: the whole scan too, or reductions over
  // other thread counts differ in the last digit.
  ASSERT_EQ(run_command("ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 '" + kBin + "' scan '" + cfg + "' -q -o '" + dir.file("whole.json") + "'").status, 1);
  auto r = run_command("cd '" + dir.path().string() + "' && ASAN_OPTIONS=detect_leaks=0 " + python() +
                       " -m torch.distributed.run --standalone --nproc_per_node=2 --no_python '" + kBin + "' scan '" + cfg +
                       "' --shard env -q -o 'part-{shard}.json' 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  CliRun m = cli({"merge", dir.file("part-0.json"), dir.file("part-1.json"), "-q", "-o", dir.file("merged.json")});
  EXPECT_EQ(m.code, 1) << m.err;
  EXPECT_EQ(slurp(dir.file("merged.json")), slurp(dir.file("whole.json")));
  const Json part = Json::parse(slurp(dir.file("part-1.json")));
  EXPECT_EQ(part["shard"]["source"], "torchrun (RANK, WORLD_SIZE)");
  EXPECT_EQ(part["shard"]["count"], 2);
}
