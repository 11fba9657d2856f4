// The command line, in-process, through the same run_cli() that main() calls.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <sstream>

#include "cli.h"
#include "support/test_helpers.h"

using namespace batchcheck;

namespace {
struct CliRun {
  int code;
  std::string out, err;
};

CliRun cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int code = run_cli(args, out, err);
  return {code, out.str(), err.str()};
}
}  // namespace

TEST(Cli, SuggestSeedCaseTable) {
  CliRun r = cli({"suggest", "--samples", "1041", "--batch-size", "8"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Exact divisors of 1041: 1, 3, 347, 1041"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

// --divides and --multiple-of: what the step asks of every batch, as CI can ask it.
TEST(Cli, SuggestTakesTheStepsConstraints) {
  CliRun r = cli({"suggest", "--samples", "92", "--batch-size", "24", "--divides", "256", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::ordered_json::parse(r.out);
  EXPECT_EQ(j["divides"], nlohmann::ordered_json({256}));
  EXPECT_EQ(j["requested_broken"], "24 does not divide 256 (--divides)");
  EXPECT_EQ(j["nearest"][2]["batch_size"], 8);
  r = cli({"suggest", "--samples", "92", "--batch-size", "24", "--multiple-of", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("batchcheck: error: --multiple-of: ", 0), 0u) << r.err;
}

TEST(Cli, SuggestJson) {
  CliRun r = cli({"suggest", "--samples", "1028", "--batch-size", "8", "--world-size", "4", "--accumulation", "4", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::ordered_json::parse(r.out);
  EXPECT_EQ(j["per_rank_samples"], 257);
  EXPECT_EQ(j["tail"], 1);
  EXPECT_EQ(j["divisors"], nlohmann::ordered_json({1, 257}));
  EXPECT_EQ(j["accumulation"]["steps"], 4);
}

TEST(Cli, SuggestMaxUint64) {
  CliRun r = cli({"suggest", "--samples", "18446744073709551615", "--batch-size", "8", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::ordered_json::parse(r.out);
  EXPECT_EQ(j["samples"].get<uint64_t>(), UINT64_MAX);
  EXPECT_EQ(j["divisors"].size(), 128u);
}

TEST(Cli, BadNumbersAreExit2WithOneLine) {
  struct Case {
    std::vector<std::string> args;
    std::string err;
  };
  const std::vector<Case> cases = {
      {{"suggest", "--samples", "abc", "--batch-size", "8"},
       "batchcheck: error: --samples: expected a non-negative integer, got \"abc\"\n"},
      {{"suggest", "--samples", "-5", "--batch-size", "8"},
       "batchcheck: error: --samples: expected a non-negative integer, got \"-5\"\n"},
      {{"suggest", "--samples", "18446744073709551616", "--batch-size", "8"},
       "batchcheck: error: --samples: 18446744073709551616 is larger than 18446744073709551615 (2^64-1)\n"},
      {{"suggest", "--samples", "100", "--batch-size", "0"},
       "batchcheck: error: --batch-size: expected a positive integer, got 0\n"},
      {{"suggest", "--samples", "100", "--batch-size", "1.5"},
       "batchcheck: error: --batch-size: expected a positive integer, got \"1.5\"\n"},
      {{"suggest", "--samples", "100", "--batch-size", "8", "--world-size", "0"},
       "batchcheck: error: --world-size: expected a positive integer, got 0\n"},
      {{"sugest"}, "batchcheck: error: unknown command \"sugest\"; did you mean \"suggest\"?\n"},
  };
  for (const auto& c : cases) {
    CliRun r = cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args[0];
    EXPECT_EQ(r.err, c.err);
    EXPECT_EQ(r.out, "");
  }
}

TEST(Cli, MissingRequiredFlagIsExit2) {
  CliRun r = cli({"suggest", "--samples", "10"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("batchcheck: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("--batch-size"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
}

TEST(Cli, ThreadsAreBounded) {
  CliRun r = cli({"scan", "cfg.json", "--threads", "2147483648"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "batchcheck: error: --threads: 2147483648 is more than 1024 intra-op threads\n");
}

TEST(Cli, LogFlagsAreCheckedBeforeTheScan) {
  EXPECT_EQ(cli({"scan", "cfg.json", "--log-level", "verbose"}).err,
            "batchcheck: error: --log-level: unknown level \"verbose\" (expected debug, info, warn or error)\n");
  EXPECT_EQ(cli({"scan", "cfg.json", "--log-level", "warnings"}).err,
            "batchcheck: error: --log-level: unknown level \"warnings\"; did you mean \"warn\"? (expected debug, info, warn or error)\n");
  const std::string dir = std::filesystem::temp_directory_path().string();
  CliRun d = cli({"scan", "cfg.json", "--log-file", dir});
  EXPECT_EQ(d.code, 2);
  EXPECT_EQ(d.err, "batchcheck: error: " + dir + ": --log-file: cannot write the log: it is a directory\n");
  EXPECT_EQ(cli({"scan", "cfg.json", "--log-file", "/no-such-folder/scan.jsonl"}).err,
            "batchcheck: error: /no-such-folder/scan.jsonl: --log-file: cannot write the log: the folder /no-such-folder does not exist\n");
  EXPECT_EQ(cli({"scan", "cfg.json", "--log-file", "-"}).err,
            "batchcheck: error: --log-file: \"-\" is not a file: the log's text lines are on stderr already\n");
  EXPECT_EQ(cli({"scan", "cfg.json", "--log-file", ""}).err,
            "batchcheck: error: --log-file: an empty path: name the file to append the log to\n");
  EXPECT_EQ(cli({"scan", "cfg.json", "-v", "--log-level", "warn"}).code, 2);
}

TEST(Cli, HelpAndVersion) {
  CliRun help = cli({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("suggest"), std::string::npos);
  EXPECT_NE(help.out.find("Exit codes"), std::string::npos);
  CliRun sub = cli({"suggest", "--help"});
  EXPECT_EQ(sub.code, 0);
  EXPECT_NE(sub.out.find("--min-tail"), std::string::npos) << sub.out;
  EXPECT_NE(sub.out.find("--samples INT REQUIRED"), std::string::npos) << "integer flags read as integers:\n" << sub.out;
  EXPECT_EQ(sub.out.find("TEXT"), std::string::npos) << sub.out;
  CliRun scan = cli({"scan", "--help"});
  EXPECT_NE(scan.out.find("--max-batches INT"), std::string::npos) << scan.out;
  EXPECT_NE(scan.out.find("--no-backward"), std::string::npos) << scan.out;
  CliRun v = cli({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind("batchcheck 0.1.0 (LibTorch " BATCHCHECK_TORCH_VERSION ")", 0), 0u) << v.out;
}

// The installed shape: the binary loads libbatchcheck_scan.so for `scan` only.
TEST(Binary, ScanGoesThroughTheLoadableModule) {
  // Under ASan, LeakSanitizer's stop-the-world tracer itself crashes (SIGSEGV) at the exit of
  // a process that dlopened LibTorch and started its OpenMP pool; leak checking stays on for
  // every in-process test. The variable is inert in normal builds.
  const std::string bin = "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 " BATCHCHECK_BINARY_DIR "/app/batchcheck";
  auto missing = batchcheck::test_util::run_command(bin + " scan /nonexistent/cfg.json 2>&1");
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.output, "batchcheck: error: /nonexistent/cfg.json: cannot read: No such file or directory\n");
  auto clean = batchcheck::test_util::run_command(bin + " scan " BATCHCHECK_SOURCE_DIR "/sample_configs/clean.json -q");
  EXPECT_EQ(clean.status, 0);
  EXPECT_EQ(nlohmann::ordered_json::parse(clean.output)["verdict"], "pass");
  auto seed = batchcheck::test_util::run_command(bin + " scan " BATCHCHECK_SOURCE_DIR "/sample_configs/segmentation_tail.json -q");
  EXPECT_EQ(seed.status, 1);
  auto report = nlohmann::ordered_json::parse(seed.output);
  EXPECT_EQ(report["findings"][0]["id"], "output-nonfinite");
  EXPECT_EQ(report["findings"][0]["batch"], 130);
  EXPECT_EQ(report["findings"][0]["samples"], nlohmann::ordered_json({1040}));
  EXPECT_EQ(report["summary"], nlohmann::ordered_json({{"errors", 1}, {"warnings", 1}, {"infos", 0}}));
}

TEST(Binary, SuggestDoesNotLoadLibTorch) {
  auto ldd = batchcheck::test_util::run_command("ldd " BATCHCHECK_BINARY_DIR "/app/batchcheck");
  ASSERT_EQ(ldd.status, 0);
  EXPECT_EQ(ldd.output.find("libtorch"), std::string::npos) << ldd.output;
}
