// Resource faults around a real scan, through the binary: limits (ulimit -f, -v, -s), a
// full device, the process killed mid-scan, two scans writing one report. Each ends as
// exit 0, 1 or 2 with one line, never as a signal, a hang or a file left behind.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <iostream>
#include <nlohmann/json.hpp>

#include "core/base/sanitizer.h"
#include "support/test_helpers.h"
#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

namespace {

constexpr bool kAsan = BATCHCHECK_ASAN;

const std::string kBin = BATCHCHECK_BINARY_DIR "/app/batchcheck";

struct LimitRun {
  int code = -1;
  std::string err;
};

// `prefix` runs first in the same shell (a ulimit); the report goes to `out`.
LimitRun scan(Workspace& w, const std::string& prefix, const std::string& out) {
  const std::string log = w.file("err.log");
  CommandResult r = run_command("(" + prefix + "; ASAN_OPTIONS=detect_leaks=0 exec '" + kBin + "' scan '" + w.file("cfg.json") +
                                "' -q -o '" + out + "') 2>'" + log + "'");
  std::ifstream in(log);
  return {r.status, std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())};
}

void setup(Workspace& w, uint64_t n = 64) {
  w.inputs(n, 4).float_targets(std::vector<float>(n, 0.0f)).model("def forward(self, x):\n    return x.sum(1, keepdim=True)\n");
  w.write_config();
}

bool one_error_line(const std::string& err) {
  return err.rfind("batchcheck: error: ", 0) == 0 && std::count(err.begin(), err.end(), '\n') == 1;
}

std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) out.push_back(name);
  }
  return out;
}

}  // namespace

TEST(Resources, FileSizeLimitIsExit2AndLeavesNoTempFile) {
  Workspace w("res-fsize");
  setup(w);
  LimitRun r = scan(w, "ulimit -f 1", w.file("report.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("cannot write the report: File too large"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(w.file("report.json")));
  EXPECT_TRUE(leftovers(std::filesystem::path(w.file("x")).parent_path()).empty());
}

TEST(Resources, FullDeviceIsExit2) {
  Workspace w("res-full");
  setup(w);
  LimitRun r = scan(w, "true", "/dev/full");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err, "batchcheck: error: /dev/full: cannot write the report: No space left on device\n");
}

TEST(Resources, AddressSpaceLimitIsExit2WithOneLine) {
  if (kAsan) GTEST_SKIP() << "AddressSanitizer reserves terabytes of address space: ulimit -v cannot apply";
  Workspace w("res-as");
  setup(w);
  LimitRun r = scan(w, "ulimit -v 300000", w.file("report.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("ulimit -v"), std::string::npos) << r.err;
}

TEST(Resources, SmallStackIsNeverASignal) {
  if (kAsan) GTEST_SKIP() << "AddressSanitizer's own stack frames need more than the limit";
  Workspace w("res-stack");
  setup(w);
  for (const char* kib : {"32", "64", "256"}) {
    SCOPED_TRACE(kib);
    LimitRun r = scan(w, std::string("ulimit -s ") + kib, w.file("report.json"));
    EXPECT_GE(r.code, 0) << r.err;  // -1: killed by a signal
    EXPECT_LE(r.code, 2) << r.err;
    if (r.code == 2) {
      EXPECT_TRUE(one_error_line(r.err)) << r.err;
      EXPECT_NE(r.err.find("ulimit -s"), std::string::npos) << r.err;
    }
  }
}

TEST(Resources, KilledMidScanLeavesNoTempFileAndNoEngine) {
  Workspace w("res-kill");
  w.inputs(4000, 4).float_targets(std::vector<float>(4000, 0.0f))
      .model("def forward(self, x):\n    for i in range(2000):\n        x = torch.tanh(x)\n    return x.sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 1})");
  w.write_config();
  const std::string pidfile = w.file("pid");
  run_command("ASAN_OPTIONS=detect_leaks=0 '" + kBin + "' scan '" + w.file("cfg.json") + "' -q -o '" + w.file("report.json") +
              "' >/dev/null 2>&1 & echo $! > '" + pidfile + "'");
  std::ifstream pf(pidfile);
  pid_t pid = 0;
  pf >> pid;
  ASSERT_GT(pid, 0);
  // The engine child is running batches once it exists for a while.
  std::string child;
  for (int i = 0; i < 200 && child.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    child = run_command("pgrep -P " + std::to_string(pid)).output;
  }
  ASSERT_FALSE(child.empty()) << "no engine child";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(pid, SIGKILL);
  const pid_t engine = static_cast<pid_t>(std::stol(child));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gone = ::kill(engine, 0) != 0 ||
           run_command("ps -o stat= -p " + std::to_string(engine)).output.find('Z') != std::string::npos;
  }
  EXPECT_TRUE(gone) << "the engine child outlived the batchcheck process";
  EXPECT_FALSE(std::filesystem::exists(w.file("report.json")));
  EXPECT_TRUE(leftovers(std::filesystem::path(w.file("x")).parent_path()).empty());
}

TEST(Resources, TwoScansWritingOneReportLeaveOneWholeReport) {
  Workspace w("res-race");
  setup(w, 512);
  const std::string out = w.file("report.json");
  const std::string one = "ASAN_OPTIONS=detect_leaks=0 '" + kBin + "' scan '" + w.file("cfg.json") + "' -q -o '" + out + "'";
  CommandResult r = run_command("(" + one + " & " + one + " & wait %1; a=$?; wait %2; b=$?; echo $a $b)");
  EXPECT_EQ(r.output, "0 0\n");
  std::ifstream in(out);
  ASSERT_TRUE(in);
  Json report = Json::parse(in);
  EXPECT_EQ(report["verdict"], "pass");
  EXPECT_TRUE(leftovers(std::filesystem::path(out).parent_path()).empty());
}

TEST(Resources, BatchLargerThanMemoryIsExit2NamingTheSize) {
  if (kAsan) GTEST_SKIP() << "AddressSanitizer aborts on a 64 GiB allocation instead of failing it";
  Workspace w("res-oom");
  w.model("def forward(self, x):\n    return x\n");
  // Rows of 16 GiB (float32 x 2^32), batches of 4: 64 GiB each, in a sparse file.
  const std::string path = w.file("x.npy");
  {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4294967296), }";
    while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
    dict += '\n';
    std::ofstream out(path, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(dict.size() & 0xff) << static_cast<char>(dict.size() >> 8) << dict;
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) + (uint64_t{4} << 34));
  std::ofstream(w.file("cfg.json")) << R"({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy"}, "loader": {"batch_size": 4},
                                         "loss": {"type": "none"}, "checks": {"probe_batch_sizes": []}})";
  LimitRun r = scan(w, "ulimit -v 33554432", w.file("report.json"));  // 32 GiB of address space
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("batchcheck: error: x.npy: a batch of 4 samples needs 65536 MiB and allocating it failed (", 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find("): not enough memory (RAM, or the limit of ulimit -v) for this batch size\n"), std::string::npos) << r.err;
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
}

// An address space too small for LibTorch's own start-up (its static initializers throw
// std::bad_alloc inside dlopen): one error line and exit 2, never terminate's banner or a signal.
TEST(Resources, AnEngineThatCannotStartInItsAddressSpaceIsOneLineAndExit2) {
  if (kAsan) GTEST_SKIP() << "AddressSanitizer reserves terabytes of shadow memory: no ulimit -v under it";
  Workspace w("res-tiny-as");
  setup(w);
  LimitRun r = scan(w, "ulimit -v 409600", w.file("report.json"));  // 400 MiB
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(one_error_line(r.err)) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ulimit -v"), std::string::npos) << r.err;
}

// A torch.save dataset is mapped, not read into memory: the scan's peak memory is the same for
// 40 MB and 400 MB of data (it was the whole file twice over: bytes, then tensors).
TEST(Resources, LargePtDatasetMemoryDoesNotGrowWithTheFile) {
  if (!python_torch_available()) GTEST_SKIP() << python_missing_line("the .pt memory test");
  if (kAsan) GTEST_SKIP() << "AddressSanitizer's shadow memory dominates the resident set";
  Workspace w("ptmemory");
  auto peak = [&](const std::string& name, uint64_t features) {
    const std::string script = python() + " -W ignore " BATCHCHECK_SOURCE_DIR "/tests/e2e/pipelines/pt_memory.py ";
    CommandResult made = run_command(script + "write '" + w.file(name) + "' 100000 " + std::to_string(features) + " 2>&1");
    EXPECT_EQ(made.status, 0) << made.output;
    CommandResult r = run_command(script + "scan '" + kBin + "' '" + w.file(name) + "' 2>&1");
    EXPECT_EQ(r.status, 0) << r.output;
    const std::string last = r.output.substr(r.output.rfind('{'));
    const nlohmann::json j = nlohmann::json::parse(last);
    EXPECT_EQ(j["exit"], 0) << r.output;
    return j["peak_rss_mb"].get<double>();
  };
  const double small = peak("small", 100);   // 40 MB of inputs
  const double large = peak("large", 1000);  // 400 MB
  std::cout << "[ info ] peak RSS: " << small << " MB for 40 MB of data, " << large << " MB for 400 MB\n";
  EXPECT_LT(large - small, 64.0) << "memory grows with the dataset";
}
