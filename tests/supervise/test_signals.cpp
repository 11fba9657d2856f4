// Interruption: SIGINT/SIGTERM stop the scan after the current batch, the report is
// written (atomically) with "complete": false, and the exit code is 128 + signal.
// A second signal exits at once, leaving no report. Runs the real binary.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>

#include "support/workspace.h"

using namespace batchcheck;
using namespace batchcheck::test_util;

extern char** environ;

namespace {

// 20000 batches of one sample through a deliberately slow model: several seconds.
void slow_setup(Workspace& w) {
  w.inputs(20000, 16)
      .float_targets(std::vector<float>(20000, 0.0f))
      .model("def forward(self, x):\n    for i in range(300):\n        x = torch.tanh(x)\n    return x.sum(1, keepdim=True)\n")
      .loader(R"({"batch_size": 1})");
  w.write_config();
}

struct Child {
  pid_t pid = -1;
  std::string log;
};

Child start(Workspace& w) {
  // As in test_cli.cpp: LeakSanitizer's tracer cannot cope with a child that dlopened
  // LibTorch; this process read its own options at start-up and is unaffected.
  const char* asan = std::getenv("ASAN_OPTIONS");
  ::setenv("ASAN_OPTIONS", (std::string(asan ? asan : "") + ":detect_leaks=0").c_str(), 1);
  Child c;
  c.log = w.file("stderr.log");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string bin = BATCHCHECK_BINARY_DIR "/app/batchcheck";
  std::string cfg = w.file("cfg.json"), out = w.file("report.json");
  std::vector<char*> argv = {bin.data(), const_cast<char*>("scan"), cfg.data(), const_cast<char*>("-o"), out.data(),
                             const_cast<char*>("-v"), nullptr};
  EXPECT_EQ(posix_spawn(&c.pid, bin.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return c;
}

// Waits until the -v log shows `needle` (at most 60 s).
bool wait_for(const Child& c, const std::string& needle) {
  for (int i = 0; i < 1200; ++i) {
    std::ifstream in(c.log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

void expect_incomplete_report(Workspace& w) {
  std::ifstream in(w.file("report.json"));
  ASSERT_TRUE(in) << "no report written";
  Json r = Json::parse(in);
  EXPECT_EQ(r["complete"], false);
  EXPECT_GE(r["batches"]["checked"].get<int>(), 5);
  EXPECT_LT(r["batches"]["checked"].get<int>(), 20000);
  EXPECT_NE(r["notes"].dump().find("interrupted"), std::string::npos);
}

}  // namespace

TEST(Signals, SigintWritesAnIncompleteReportAndExits130) {
  Workspace w("sigint");
  slow_setup(w);
  Child c = start(w);
  ASSERT_TRUE(wait_for(c, "rank 0 batch 5 "));
  kill(c.pid, SIGINT);
  EXPECT_EQ(wait_exit(c.pid), 130);
  expect_incomplete_report(w);
}

TEST(Signals, SigtermExits143) {
  Workspace w("sigterm");
  slow_setup(w);
  Child c = start(w);
  ASSERT_TRUE(wait_for(c, "rank 0 batch 5 "));
  kill(c.pid, SIGTERM);
  EXPECT_EQ(wait_exit(c.pid), 143);
  expect_incomplete_report(w);
}

TEST(Signals, SecondSignalExitsAtOnceWithoutAReport) {
  Workspace w("sigint2");
  slow_setup(w);
  // A scan that cannot finish its current batch quickly on any machine: one batch of
  // everything, through a forward of minutes (the second signal ends it at once).
  w.loader(R"({"batch_size": 20000})");
  w.model("def forward(self, x):\n    for i in range(60000):\n        x = torch.tanh(x)\n    return x.sum(1, keepdim=True)\n");
  w.write_config();
  Child c = start(w);
  ASSERT_TRUE(wait_for(c, "checking 1 batches"));  // the handlers are installed
  // The engine child announces the scan before its batch: give it time to be inside the
  // long forward, so that the first signal cannot end the scan on its own.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  kill(c.pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(c.pid, SIGINT);
  EXPECT_EQ(wait_exit(c.pid), 130);
  EXPECT_FALSE(std::filesystem::exists(w.file("report.json")));
}
