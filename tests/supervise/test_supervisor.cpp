// The supervised scan, through the real binary: the report equals the in-process scan's;
// a batch whose process crashes or never finishes is a finding and the scan goes on in a
// fresh engine child; a crash while loading is one line and exit 2; SIGINT while the
// model is stuck ends the scan at once with an incomplete report. Crashes come from
// BATCHCHECK_TEST_FAULT (the engine child really dies of the signal).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>

#include "engine/scan_command.h"
#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

extern char** environ;
namespace fs = std::filesystem;

namespace {

const std::string kBin = BATCHCHECK_BINARY_DIR "/app/batchcheck";

struct BinaryRun {
  int code = -1;
  Json report;
  std::string err;
};

// Runs `batchcheck scan <cfg> -o report.json <flags>` with `env` (VAR=value ...) prepended.
BinaryRun run_binary(Workspace& w, const std::string& flags, const std::string& env = "") {
  w.write_config();
  const std::string log = w.file("stderr.log"), report = w.file("report.json");
  std::remove(report.c_str());
  CommandResult r = run_command("env ASAN_OPTIONS=detect_leaks=0 " + env + " '" + kBin + "' scan '" + w.file("cfg.json") +
                                "' -o '" + report + "' " + flags + " 2>'" + log + "'");
  BinaryRun b;
  b.code = r.status;
  std::ifstream e(log);
  b.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  std::ifstream in(report);
  if (in) b.report = Json::parse(in);
  return b;
}

// 16 samples in batches of 2; the model loops forever on any batch holding the value 7.
void endless_setup(Workspace& w) {
  w.inputs(16, 3, [](uint64_t i, uint64_t) { return i == 5 ? 7.0f : 0.5f; })
      .float_targets(std::vector<float>(16, 0.0f))
      .model("def forward(self, x):\n"
             "    if bool((x == 7.0).any()):\n"
             "        while bool(x.sum() == x.sum()):\n"
             "            x = x * 1.0\n"
             "    return x.sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 2})");
}

void plain_setup(Workspace& w) {
  w.inputs(10, 3).float_targets(std::vector<float>(10, 0.0f)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 2})");
}

const Json* find(const Json& report, const std::string& id) {
  for (const auto& f : report["findings"]) {
    if (f["id"] == id) return &f;
  }
  return nullptr;
}

int line_count(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

// One intra-op thread per process everywhere: LibTorch's reductions round differently with
// other thread counts (the last digits of the plotted statistics).
TEST(Supervisor, ReportEqualsTheInProcessScan) {
  for (const char* name : {"classification_label255.json", "segmentation_tail.json", "clean.json"}) {
    TempDir dir("sup-eq");
    const std::string cfg = std::string(BATCHCHECK_SOURCE_DIR "/sample_configs/") + name;
    ScanCommand cmd;
    cmd.config_path = cfg;
    cmd.output_path = dir.file("inproc.json");
    cmd.quiet = true;
    cmd.handle_signals = false;
    cmd.threads = 1;
    std::ostringstream out, err;
    scan_command(cmd, out, err);
    std::ifstream a(dir.file("inproc.json"));
    ASSERT_TRUE(a);
    const Json inproc = Json::parse(a);
    // The default (one job that may split), one supervised child, and two jobs.
    for (const char* flags : {"--threads 1", "--jobs 1 --threads 1", "--jobs 2 --threads 2"}) {
      SCOPED_TRACE(std::string(name) + " " + flags);
      CommandResult r = run_command("env ASAN_OPTIONS=detect_leaks=0 '" + kBin + "' scan '" + cfg + "' -q -o '" +
                                    dir.file("sup.json") + "' " + flags);
      EXPECT_LE(r.status, 1);
      std::ifstream b(dir.file("sup.json"));
      ASSERT_TRUE(b);
      EXPECT_EQ(inproc, Json::parse(b));
    }
  }
}

// The jobs of a split scan write their -v lines to the same stderr: each line must arrive
// whole (one write), never interleaved with another job's ("rank rank 0 batch 14 ...").
TEST(Supervisor, TwoJobsVerboseLinesArriveWhole) {
  TempDir dir("sup-verbose");
  const std::string cfg = BATCHCHECK_SOURCE_DIR "/sample_configs/clean.json";
  const std::regex line(R"(rank 0 batch \d+ \(32 samples\): ok|probe batch of [12]: ok)");
  for (int run = 0; run < 3; ++run) {
    CommandResult r = run_command("env ASAN_OPTIONS=detect_leaks=0 '" + kBin + "' scan '" + cfg + "' -v --jobs 2 -o '" +
                                  dir.file("r.json") + "' 2>'" + dir.file("err.log") + "'");
    EXPECT_EQ(r.status, 0);
    std::ifstream in(dir.file("err.log"));
    std::string l;
    int steps = 0;
    while (std::getline(in, l)) {
      // The summary's "  first batch 0: ..." lines are indented; a step's line is not.
      if (l.find("batch") == std::string::npos || l.rfind("batchcheck:", 0) == 0 || l.rfind("  ", 0) == 0) continue;
      EXPECT_TRUE(std::regex_match(l, line)) << l;
      ++steps;
    }
    EXPECT_EQ(steps, 32 + 2);  // 1,024 samples in batches of 32, the probes of 1 and 2
  }
}

TEST(Supervisor, EndlessForwardIsAForwardTimeoutAndTheScanGoesOn) {
  Workspace w("sup-timeout");
  endless_setup(w);
  BinaryRun r = run_binary(w, "--batch-timeout 1");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.report["complete"], true);
  EXPECT_EQ(r.report["batches"]["checked"], 8);  // every batch: the one that hung counts as checked
  const Json* f = find(r.report, "forward-timeout");
  ASSERT_NE(f, nullptr) << r.report.dump(2);
  EXPECT_EQ((*f)["batch"], 2);
  EXPECT_EQ((*f)["samples"], Json::array({4, 5}));
  EXPECT_EQ((*f)["severity"], "error");
  EXPECT_EQ((*f)["evidence"]["timeout_seconds"], 1);
  EXPECT_NE((*f)["message"].get<std::string>().find("ran longer than the batch timeout of 1 second"), std::string::npos);
}

TEST(Supervisor, CrashedBatchIsAFindingAndTheScanGoesOn) {
  Workspace w("sup-crash");
  plain_setup(w);
  BinaryRun r = run_binary(w, "", "BATCHCHECK_TEST_FAULT=step:1:SEGV");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.report["complete"], true);
  EXPECT_EQ(r.report["batches"]["checked"], 5);
  const Json* f = find(r.report, "forward-crash");
  ASSERT_NE(f, nullptr) << r.report.dump(2);
  EXPECT_EQ((*f)["batch"], 1);
  EXPECT_EQ((*f)["samples"], Json::array({2, 3}));
  EXPECT_EQ((*f)["evidence"]["signal"], "SIGSEGV");
  EXPECT_EQ(r.report["batches"]["last"]["index"], 4);  // batches after the crash were replayed
  // The fixes include the batch to run in Python.
  bool reproduce = false;
  for (const auto& fix : (*f)["fixes"]) reproduce |= fix["id"] == "reproduce";
  EXPECT_TRUE(reproduce);
}

TEST(Supervisor, OutOfMemoryKillIsAFinding) {
  Workspace w("sup-kill");
  plain_setup(w);
  BinaryRun r = run_binary(w, "", "BATCHCHECK_TEST_FAULT=step:4:KILL");
  EXPECT_EQ(r.code, 1) << r.err;
  const Json* f = find(r.report, "forward-crash");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ((*f)["batch"], 4);
  EXPECT_NE((*f)["message"].get<std::string>().find("SIGKILL (killed: out of memory?)"), std::string::npos);
}

TEST(Supervisor, CrashesInARowStopTheScan) {
  Workspace w("sup-loop");
  plain_setup(w);
  BinaryRun r = run_binary(w, "", "BATCHCHECK_TEST_FAULT=from:1:ABRT");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.report["complete"], false);
  EXPECT_EQ(r.report["findings"][0]["id"], "forward-crash");
  EXPECT_EQ(r.report["findings"][0]["batches"], Json::array({1, 2, 3}));
  bool noted = false;
  for (const auto& n : r.report["notes"]) noted |= n.get<std::string>().find("3 batches in a row crashed") != std::string::npos;
  EXPECT_TRUE(noted) << r.report["notes"].dump();
}

TEST(Supervisor, CrashWhileLoadingIsOneLineAndExit2) {
  Workspace w("sup-load");
  plain_setup(w);
  BinaryRun r = run_binary(w, "", "BATCHCHECK_TEST_FAULT=load:SEGV");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "batchcheck: error: x.npy: LibTorch crashed reading this file (SIGSEGV): the file is corrupt or was "
                   "not written by torch.save\n");
  EXPECT_TRUE(r.report.is_null());  // no report, no temp file
  EXPECT_EQ(line_count(r.err), 1);
}

TEST(Supervisor, SigintDuringAnEndlessForwardExits130WithinTwoSeconds) {
  Workspace w("sup-sigint");
  endless_setup(w);
  w.write_config();
  const std::string log = w.file("stderr.log"), out = w.file("report.json"), cfg = w.file("cfg.json");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string bin = kBin;
  std::vector<char*> argv = {bin.data(), const_cast<char*>("scan"), const_cast<char*>(cfg.c_str()), const_cast<char*>("-o"),
                             const_cast<char*>(out.c_str()), const_cast<char*>("-v"), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  // Batch 1 done: batch 2 (samples 4, 5) is looping.
  bool seen = false;
  for (int i = 0; i < 1200 && !seen; ++i) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    seen = text.find("rank 0 batch 1 ") != std::string::npos;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(seen);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_LT(took, 2.0);
  std::ifstream in(out);
  ASSERT_TRUE(in);
  Json r = Json::parse(in);
  EXPECT_EQ(r["complete"], false);
  EXPECT_EQ(r["batches"]["checked"], 2);
  std::ifstream said(log);
  const std::string err((std::istreambuf_iterator<char>(said)), std::istreambuf_iterator<char>());
  EXPECT_NE(err.find("batchcheck: warning: interrupted by SIGINT: the report holds the batches checked so far (\"complete\": false)\n"),
            std::string::npos) << err;
  // No temp file left beside the report.
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(out).parent_path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST(Supervisor, LibTorchsOwnLogLinesStayOffStderrUnlessVerbose) {
  Workspace w("sup-log");
  plain_setup(w);
  BinaryRun quiet = run_binary(w, "", "BATCHCHECK_TEST_FAULT=log:");
  EXPECT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("batchcheck test: a LibTorch"), std::string::npos) << quiet.err;
  EXPECT_EQ(quiet.err.find("InitGoogleLogging"), std::string::npos) << quiet.err;
  BinaryRun verbose = run_binary(w, "-v", "BATCHCHECK_TEST_FAULT=log:");
  EXPECT_EQ(verbose.code, 0) << verbose.err;
  EXPECT_NE(verbose.err.find("batchcheck test: a LibTorch warning"), std::string::npos) << verbose.err;
  // The user's own setting wins.
  BinaryRun asked = run_binary(w, "", "TORCH_CPP_LOG_LEVEL=WARNING GLOG_minloglevel=0 BATCHCHECK_TEST_FAULT=log:");
  EXPECT_NE(asked.err.find("batchcheck test: a LibTorch error"), std::string::npos) << asked.err;
}

// The diagnostics through the log (core/base/log.h): the engine child's lines relayed by the
// supervisor with their source, the model's warning once, its print() escaped on stderr and raw
// in --log-file's JSON lines, -v's lines in order; --log-level filters; the log file is never
// an input of the run.
TEST(Supervisor, TheEngineAndTheModelAreLoggedWithTheirSources) {
  Workspace w("sup-logfile");
  w.inputs(10, 3).float_targets(std::vector<float>(10, 0.0f))
      .model("def forward(self, x):\n"
             "    print('::error::spoof \x1b[31m')\n"
             "    torch.warn('careful: a small batch')\n"
             "    return x.sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 2})");
  const std::string log = w.file("scan.jsonl");
  BinaryRun v = run_binary(w, "-v --log-file '" + log + "'");
  ASSERT_EQ(v.code, 0) << v.err;
  const std::string warning = "batchcheck: warning from the model: careful: a small batch\n";
  const std::size_t at = v.err.find(warning);
  EXPECT_NE(at, std::string::npos) << v.err;
  EXPECT_EQ(v.err.find(warning, at + 1), std::string::npos) << "said once per distinct message:\n" << v.err;
  EXPECT_NE(v.err.find("\\x3a:error::spoof \\x1b[31m\n"), std::string::npos) << v.err;
  EXPECT_EQ(v.err.find("\n::error::"), std::string::npos) << v.err;
  std::vector<Json> records;
  {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) records.push_back(Json::parse(line));
  }
  auto count = [&](const std::string& level, const std::string& source, const std::string& message) {
    return std::count_if(records.begin(), records.end(), [&](const Json& r) {
      return r["level"] == level && r["source"] == source && r["message"].get<std::string>().rfind(message, 0) == 0;
    });
  };
  EXPECT_EQ(count("warn", "model", "careful: a small batch"), 1);
  EXPECT_EQ(count("info", "model", "::error::spoof \x1b[31m"), 5) << "one a batch";
  EXPECT_EQ(count("debug", "engine", "rank 0 batch "), 5);
  std::vector<std::string> debug;
  for (const auto& r : records) {
    if (r["level"] == "debug") debug.push_back(r["message"]);
  }
  ASSERT_FALSE(debug.empty());
  EXPECT_EQ(debug.front(), "batchcheck: 10 samples, checking 5 batches on cpu");  // before its batches
  EXPECT_EQ(debug.back(), "rank 0 batch 4 (2 samples): ok");

  BinaryRun quiet = run_binary(w, "--log-level warn");
  EXPECT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("spoof"), std::string::npos) << quiet.err;
  EXPECT_NE(quiet.err.find(warning), std::string::npos) << quiet.err;

  BinaryRun loud = run_binary(w, "--log-level loud");
  EXPECT_EQ(loud.code, 2);
  EXPECT_EQ(loud.err, "batchcheck: error: --log-level: unknown level \"loud\" (expected debug, info, warn or error)\n");

  // An error after the inputs are known is the log's last record.
  std::filesystem::remove(log);
  BinaryRun bad = run_binary(w, "--device tpu --log-file '" + log + "'");
  EXPECT_EQ(bad.code, 2) << bad.err;
  std::ifstream in(log);
  std::string last;
  for (std::string line; std::getline(in, line);) last = line;
  ASSERT_FALSE(last.empty());
  EXPECT_EQ(Json::parse(last)["level"], "error");
  EXPECT_NE(Json::parse(last)["message"].get<std::string>().find("unknown device \"tpu\""), std::string::npos) << last;

  // -q leaves out the summary, not the log.
  std::filesystem::remove(log);
  BinaryRun q = run_binary(w, "-q -v --log-file '" + log + "'");
  EXPECT_EQ(q.code, 0) << q.err;
  EXPECT_NE(q.err.find("rank 0 batch 4 (2 samples): ok\n"), std::string::npos) << q.err;
  EXPECT_EQ(q.err.find("verdict:"), std::string::npos) << q.err;
  std::ifstream qin(log);
  const std::string qlog((std::istreambuf_iterator<char>(qin)), std::istreambuf_iterator<char>());
  EXPECT_NE(qlog.find("\"rank 0 batch 4 (2 samples): ok\""), std::string::npos) << qlog;

  // The model's warning once a run, however many engine children saw it.
  BinaryRun jobs = run_binary(w, "--jobs 2");
  EXPECT_EQ(jobs.code, 0) << jobs.err;
  const std::size_t first = jobs.err.find(warning);
  EXPECT_NE(first, std::string::npos) << jobs.err;
  EXPECT_EQ(jobs.err.find(warning, first + 1), std::string::npos) << jobs.err;

  // A log that cannot be written is said once; the scan goes on.
  BinaryRun full = run_binary(w, "-v --log-file /dev/full");
  EXPECT_EQ(full.code, 0) << full.err;
  const std::string said = "batchcheck: warning: /dev/full: --log-file: cannot write the log: No space left on device; it stops "
                           "here, the scan goes on\n";
  const std::size_t once = full.err.find(said);
  EXPECT_NE(once, std::string::npos) << full.err;
  EXPECT_EQ(full.err.find(said, once + 1), std::string::npos) << full.err;

  // A log file that is another output's is refused, and not even its error is written there.
  const std::string report = w.file("report.json");
  BinaryRun shared = run_binary(w, "--log-file '" + report + "'");
  EXPECT_EQ(shared.code, 2);
  EXPECT_EQ(shared.err, "batchcheck: error: " + report + ": --log-file: is also the file of -o: two outputs of one run cannot share a file\n");
  EXPECT_FALSE(std::filesystem::exists(report));

  // Never an input of the run.
  const std::string cfg = w.file("cfg.json");
  std::ifstream c0(cfg);
  const std::string before((std::istreambuf_iterator<char>(c0)), std::istreambuf_iterator<char>());
  BinaryRun clobber = run_binary(w, "--log-file '" + cfg + "'");
  EXPECT_EQ(clobber.code, 2);
  EXPECT_NE(clobber.err.find("batchcheck: error: " + cfg + ": --log-file: is the config"), std::string::npos) << clobber.err;
  std::ifstream c1(cfg);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(c1)), std::istreambuf_iterator<char>()), before);
}

// 10 samples in batches of 2; sample 3's log is NaN. The localizer names aten::log; when it
// dies itself, the batch's finding stands without a root cause and the scan goes on.
void log_setup(Workspace& w) {
  w.inputs(10, 3, [](uint64_t i, uint64_t) { return i == 3 ? -1.0f : 0.5f; })
      .float_targets(std::vector<float>(10, 0.0f))
      .model("def forward(self, x):\n    return torch.log(x).sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 2})");
}

TEST(Supervisor, RootCauseCrossesTheJournal) {
  Workspace w("sup-cause");
  log_setup(w);
  BinaryRun r = run_binary(w, "");
  EXPECT_EQ(r.code, 1) << r.err;
  const Json* f = find(r.report, "output-nonfinite");
  ASSERT_NE(f, nullptr) << r.report.dump(2);
  EXPECT_EQ((*f)["batch"], 1);
  EXPECT_EQ((*f)["root_cause"]["op"], "aten::log") << f->dump(2);
  EXPECT_EQ((*f)["root_cause"]["inputs"][0]["negative"], 3);
  EXPECT_EQ((*f)["occurrences"][0]["root_cause"], (*f)["root_cause"]);
  EXPECT_NE(r.err.find("root cause at "), std::string::npos) << r.err;
}

TEST(Supervisor, CrashWhileLocalizingKeepsTheFindingAndGoesOnWithoutRootCauses) {
  Workspace w("sup-cause-crash");
  log_setup(w);
  BinaryRun r = run_binary(w, "", "BATCHCHECK_TEST_FAULT=localize:SEGV");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.report["complete"], true);
  EXPECT_EQ(r.report["batches"]["checked"], 5);
  EXPECT_EQ(find(r.report, "forward-crash"), nullptr) << r.report.dump(2);  // the batch did not crash
  const Json* f = find(r.report, "output-nonfinite");
  ASSERT_NE(f, nullptr) << r.report.dump(2);
  EXPECT_EQ((*f)["batch"], 1);
  EXPECT_FALSE(f->contains("root_cause"));
  bool noted = false;
  for (const auto& n : r.report["notes"]) {
    noted |= n.get<std::string>().find("localizing the root cause of batch 1 crashed the scan engine (SIGSEGV") != std::string::npos;
  }
  EXPECT_TRUE(noted) << r.report["notes"].dump();
}

namespace {

// nn.Embedding(100, 16) fed token ids from the data: sample 100 holds id 100 (batch 3 of 32)
// and sample 500 id 4000 (batch 15). On the CPU, aten::embedding raises "index out of range
// in self" at both; on CUDA the same op is a device-side assert.
void embedding_setup(Workspace& w) {
  w.inputs(600, 4, [](uint64_t i, uint64_t j) { return i == 100 && j == 2 ? 100.0f : i == 500 && j == 0 ? 4000.0f : float((i + j) % 100); })
      .float_targets(std::vector<float>(600 * 16, 0.0f), {600, 16})
      .model("def forward(self, x):\n    return self.emb.forward(x.long()).mean(1)\n", {},
             {{"emb", ModuleSpec{"Embedding", "def forward(self, ids):\n    return torch.embedding(self.weight, ids)\n",
                                 {{"weight", {100, 16}, std::vector<float>(1600, 0.01f)}}, {}}}})
      .loader(R"({"batch_size": 32})");
}

// Each occurrence's samples, in batch order.
std::vector<Json> occurrence_samples(const Json& f) {
  std::vector<Json> out;
  for (const auto& o : f["occurrences"]) out.push_back(o["samples"]);
  return out;
}

std::vector<std::pair<std::string, int>> error_batches(const Json& report) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& f : report["findings"]) {
    if (f["severity"] != "error") continue;
    for (const auto& b : f["batches"]) out.emplace_back(f["id"].get<std::string>(), b.get<int>());
  }
  return out;
}

}  // namespace

// A device-side assert leaves its process's CUDA context dead (PyTorch cannot recover one): the
// batch is a cuda-device-assert finding and a fresh engine child goes on after it, so a CUDA
// scan finds every batch the CPU scan finds. BATCHCHECK_TEST_FAULT=cuda-assert: makes the CPU
// behave as CUDA does (the op's error becomes the assert, and every later call of that process
// fails with it).
TEST(Supervisor, DeviceSideAssertGoesOnInAFreshProcess) {
  Workspace w("sup-device-assert");
  embedding_setup(w);
  BinaryRun cpu = run_binary(w, "--jobs 1");
  EXPECT_EQ(cpu.code, 1) << cpu.err;
  EXPECT_EQ(error_batches(cpu.report), (std::vector<std::pair<std::string, int>>{{"forward-error", 3}, {"forward-error", 15}}))
      << cpu.report.dump(2);
  // Each batch's forward error follows one sample: the batch without it runs.
  const Json* on_cpu = find(cpu.report, "forward-error");
  ASSERT_NE(on_cpu, nullptr);
  EXPECT_EQ(occurrence_samples(*on_cpu), (std::vector<Json>{{100}, {500}})) << on_cpu->dump(2);
  EXPECT_EQ((*on_cpu)["evidence"]["blame"]["verdict"], "samples");
  // The embedding's own arguments say which rows hold ids past its table: one forward.
  EXPECT_EQ((*on_cpu)["evidence"]["blame"]["forwards"], 1);
  EXPECT_NE((*on_cpu)["message"].get<std::string>().find("; sample 100: token id 100 >= num_embeddings 100 of emb (Embedding)"),
            std::string::npos)
      << (*on_cpu)["message"];
  EXPECT_NE((*on_cpu)["occurrences"][1]["message"].get<std::string>().find("sample 500: token id 4000 >= num_embeddings 100"),
            std::string::npos)
      << on_cpu->dump(2);
  for (const char* jobs : {"--jobs 1", "--jobs 2"}) {
    BinaryRun cuda = run_binary(w, jobs, "BATCHCHECK_TEST_FAULT=cuda-assert:");
    EXPECT_EQ(cuda.code, 1) << cuda.err;
    EXPECT_EQ(cuda.report["complete"], true) << jobs << "\n" << cuda.report.dump(2);
    EXPECT_EQ(cuda.report["batches"]["checked"], 19) << jobs;
    EXPECT_EQ(error_batches(cuda.report),
              (std::vector<std::pair<std::string, int>>{{"cuda-device-assert", 3}, {"cuda-device-assert", 15}}))
        << jobs << "\n" << cuda.report.dump(2);
    const Json* f = find(cuda.report, "cuda-device-assert");
    ASSERT_NE(f, nullptr);
    EXPECT_NE((*f)["message"].get<std::string>().find("went on after this batch in a fresh process"), std::string::npos)
        << (*f)["message"];
    // The batch run again on the CPU names the op's error and the line; the search, the sample.
    EXPECT_EQ(occurrence_samples(*f), (std::vector<Json>{{100}, {500}})) << f->dump(2);
    EXPECT_EQ((*f)["evidence"]["cpu"]["error"], "index out of range in self");
    EXPECT_EQ((*f)["cuda_equivalent"], "Assertion `srcIndex < srcSelectDimSize` failed.");
    EXPECT_EQ((*f)["evidence"]["blame"]["forwards"], 1);
    EXPECT_EQ((*f)["evidence"]["index_fault"]["module"], "emb");
    EXPECT_EQ((*f)["evidence"]["index_fault"]["module_type"], "Embedding");
    EXPECT_EQ((*f)["evidence"]["index_fault"]["num_embeddings"], 100);
  }
}

// Asserts in three batches in a row stop the scan as three crashes do, saying where to look.
TEST(Supervisor, DeviceSideAssertsInARowStopTheScan) {
  Workspace w("sup-device-asserts");
  w.inputs(40, 4, [](uint64_t i, uint64_t) { return i >= 8 ? 100.0f : 1.0f; })
      .float_targets(std::vector<float>(40 * 16, 0.0f), {40, 16})
      .model("def forward(self, x):\n    return torch.embedding(self.weight, x.long()).mean(1)\n", {{"weight", {100, 16}, {}}})
      .loader(R"({"batch_size": 4})");
  BinaryRun r = run_binary(w, "--jobs 1", "BATCHCHECK_TEST_FAULT=cuda-assert:");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.report["complete"], false);
  EXPECT_EQ(error_batches(r.report),
            (std::vector<std::pair<std::string, int>>{{"cuda-device-assert", 2}, {"cuda-device-assert", 3}, {"cuda-device-assert", 4}}))
      << r.report.dump(2);
  bool noted = false;
  for (const auto& n : r.report["notes"]) {
    noted |= n.get<std::string>().find("3 batches in a row crashed, timed out or lost the CUDA device") != std::string::npos;
  }
  EXPECT_TRUE(noted) << r.report["notes"].dump();
}

// Another torch than the engine was built for (a wheel for torch 2.15 in a torch 2.14
// environment) is one line and exit 2 before LibTorch loads: never a dynamic linker error, a
// crash or exit 3.
TEST(Supervisor, AnotherTorchIsOneLineBeforeLoading) {
  Workspace w("sup-torch");
  plain_setup(w);
  TempDir other("other-torch");
  fs::create_directories(other.path() / "torch" / "lib");
  std::ofstream(other.path() / "torch" / "version.py") << "__version__ = '2.14.1+cu128'\n";
  std::ofstream(other.path() / "torch" / "lib" / "libtorch_cpu.so") << "not a library";
  const std::string lib = (other.path() / "torch" / "lib").string();
  BinaryRun r = run_binary(w, "", "LD_LIBRARY_PATH='" + lib + "'");
  const std::string built = BATCHCHECK_TORCH_VERSION;
  if (built.rfind("1.", 0) == 0) GTEST_SKIP() << "this build's LibTorch (" << built << ") is the system's: LD_LIBRARY_PATH may not lead it";
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("batchcheck: error: this batchcheck was built for torch " + built.substr(0, built.rfind('.')) +
                            " and finds torch 2.14.1+cu128 in " + lib + ": pip install torch==",
                        0),
            0u)
      << r.err;
}

// A second torch that is real: Debian's libtorch 1.13. A test of its own, skipped with its reason
// where the package is not installed (a fresh machine's tier 1 runs before tier 2 installs it),
// so that what ran is never a matter of which machine ran it.
TEST(Supervisor, DebiansLibtorchIsOneLineBeforeLoading) {
  const std::string built = BATCHCHECK_TORCH_VERSION;
  if (built.rfind("1.", 0) == 0) GTEST_SKIP() << "this build's LibTorch (" << built << ") is the system's";
  if (!fs::exists("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so")) {
    GTEST_SKIP() << "Debian's libtorch-dev is not installed (scripts/test.sh installs it for tier 2, after tier 1)";
  }
  Workspace w("sup-debian-torch");
  plain_setup(w);
  BinaryRun deb = run_binary(w, "", "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu");
  EXPECT_EQ(deb.code, 2) << deb.err;
  EXPECT_NE(deb.err.find("and finds torch 1.13.0 in /usr/lib/x86_64-linux-gnu: "), std::string::npos) << deb.err;
  EXPECT_EQ(line_count(deb.err), 1) << deb.err;
}
