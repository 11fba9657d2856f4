// libFuzzer target over what LibTorch itself parses, through the real, supervised binary:
// the first byte picks the role ('M': the bytes are the model's TorchScript archive; anything
// else: a torch.save data file), the rest is the file. `batchcheck scan` on it must end as
// exit 0, 1 or 2, exit 2 with exactly one "batchcheck: error: " line, within 60 s, and leave
// no temporary file: never a signal, a hang or exit 3. Black-box: LibTorch is not instrumented,
// so libFuzzer's mutations are not guided by its coverage. BATCHCHECK_FUZZ_BIN names the
// binary (scripts/fuzz.sh passes the default build's).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

extern char** environ;

namespace {

namespace fs = std::filesystem;
std::string g_bin;
fs::path g_dir;
const fs::path kFixed = BATCHCHECK_SOURCE_DIR "/tests/fuzz/scan";

void write_file(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

[[noreturn]] void fail(const std::string& what, const std::string& err) {
  std::cerr << "fuzz_scan: property violated: " << what << "\n--- stderr of batchcheck ---\n" << err << "---\n";
  std::abort();  // libFuzzer saves the input as a crash artifact
}

// Runs `batchcheck scan cfg`; returns the wait status, its stderr in `err`.
int run_scan(const fs::path& cfg, std::string& err) {
  const fs::path log = g_dir / "err.log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const std::string out = (g_dir / "report.json").string(), cfg_s = cfg.string();
  char* argv[] = {const_cast<char*>(g_bin.c_str()), const_cast<char*>("scan"), const_cast<char*>(cfg_s.c_str()),
                  const_cast<char*>("-q"), const_cast<char*>("-o"), const_cast<char*>(out.c_str()), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, g_bin.c_str(), &fa, nullptr, argv, environ) != 0) {
    std::perror("fuzz_scan: posix_spawn");
    std::exit(1);
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail("no exit within 60 s (a hang)", read_file(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  err = read_file(log);
  return status;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* bin = std::getenv("BATCHCHECK_FUZZ_BIN");
  if (!bin || access(bin, X_OK) != 0) {
    std::cerr << "fuzz_scan: set BATCHCHECK_FUZZ_BIN to a built batchcheck binary (scripts/fuzz.sh does)\n";
    std::exit(1);
  }
  g_bin = bin;
  char tmpl[] = "/tmp/fuzz_scan.XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("fuzz_scan: mkdtemp");
    std::exit(1);
  }
  g_dir = tmpl;
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(g_dir, ec);
  });
  const std::string fixed = kFixed.string();
  write_file(g_dir / "model_role.json",
             "{\"model\": {\"path\": \"" + (g_dir / "fuzzed.pt").string() + "\"}, \"data\": {\"inputs\": \"" + fixed +
                 "/inputs.npy\", \"targets\": \"" + fixed + "/targets.npy\"}, \"loader\": {\"batch_size\": 4}, "
                 "\"loss\": {\"type\": \"bce_with_logits\"}}");
  write_file(g_dir / "data_role.json",
             "{\"model\": {\"path\": \"" + fixed + "/model.pt\"}, \"data\": {\"format\": \"pt\", \"path\": \"" +
                 (g_dir / "fuzzed.pt").string() + "\"}, \"loader\": {\"batch_size\": 4}, "
                 "\"loss\": {\"type\": \"bce_with_logits\"}}");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool model_role = data[0] == 'M';
  write_file(g_dir / "fuzzed.pt", std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  std::string err;
  const int status = run_scan(g_dir / (model_role ? "model_role.json" : "data_role.json"), err);
  if (WIFSIGNALED(status)) fail("killed by signal " + std::to_string(WTERMSIG(status)), err);
  const int code = WEXITSTATUS(status);
  if (code != 0 && code != 1 && code != 2) fail("exit " + std::to_string(code), err);
  if (code == 2 && (err.rfind("batchcheck: error: ", 0) != 0 || std::count(err.begin(), err.end(), '\n') != 1)) {
    fail("exit 2 without exactly one error line", err);
  }
  for (const auto& e : fs::directory_iterator(g_dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) fail("left " + e.path().string(), err);
  }
  return 0;
}
