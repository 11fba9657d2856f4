#pragma once
// A test suite over cases a Python generator writes, each in its own folder with its
// config.json, and in manifest.json what the real PyTorch loop did on the same data (which
// batches raise, at which stage). The scans run in-process and are compared with it.
// Suite supplies kTag (the temporary folder's tag), kScript (the generator, from the source
// tree) and kWhat (what is skipped without Python's torch).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "support/catalogued.h"
#include "support/test_helpers.h"

namespace batchcheck::test_util {

// The folder a generator's cases live in, under the build tree, generated there by the first
// process that asks (the others wait on a lock); "" with the generator's output in `log` when
// it failed (nothing is kept then). Tests read it through their own copy. Keyed by the bytes of the script, of the Python files
// beside it and of python/ (which generators import), and by the Python that runs them.
inline std::filesystem::path generated_cases(const std::string& tag, const std::string& script, std::string& log) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(BATCHCHECK_SOURCE_DIR) / script;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  };
  mix(python());
  std::vector<fs::path> inputs;
  for (const fs::path& d : {src.parent_path(), fs::path(BATCHCHECK_SOURCE_DIR) / "python"}) {
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.path().extension() == ".py") inputs.push_back(e.path());
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const auto& f : inputs) mix(f.string() + "\n" + slurp(f.string()));
  const fs::path root = fs::path(BATCHCHECK_BINARY_DIR) / "tests" / "generated";
  fs::create_directories(root);
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  const fs::path done = root / (tag + "-" + key);
  const int lock = ::open((root / (tag + ".lock")).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock >= 0) ::flock(lock, LOCK_EX);
  // Generated in place (a config may name its folder by absolute path), complete once stamped.
  const fs::path stamp = done / ".complete";
  if (!fs::exists(stamp)) {
    fs::remove_all(done);
    fs::create_directories(done);
    auto gen = run_command(python() + " -W ignore " + src.string() + " " + done.string() + " 2>&1");
    if (gen.status == 0) {
      std::ofstream(stamp.string()) << "ok\n";
    } else {
      log = gen.output;
      fs::remove_all(done);
    }
  }
  if (lock >= 0) ::close(lock);
  return fs::exists(stamp) ? done : fs::path();
}

template <class Suite>
class OracleSuite : public ::testing::Test {
 protected:
  using Json = nlohmann::json;

  static void SetUpTestSuite() {
    if (!python_torch_available()) return;
    dir_ = std::make_unique<TempDir>(Suite::kTag);
    // ctest runs each test in its own process: the cases are generated once per build tree
    // (keyed by the generator's code and the Python that ran it) and copied for each test,
    // which may write beside them.
    const auto cache = generated_cases(Suite::kTag, Suite::kScript, log_);
    generated_ = !cache.empty();
    if (!generated_) return;
    std::filesystem::copy(cache, dir_->path(),
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
    std::ifstream in(dir_->file("manifest.json"));
    manifest_ = Json::parse(in);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  void SetUp() override {
    if (!python_torch_available()) GTEST_SKIP() << python_missing_line(Suite::kWhat);
    ASSERT_TRUE(generated_) << Suite::kScript << " failed:\n" << log_;
  }

  static const Json& truth(const std::string& name) {
    for (const auto& c : manifest_["cases"]) {
      if (c["case"] == name) return c;
    }
    static const Json none;
    ADD_FAILURE() << "no case " << name;
    return none;
  }
  static std::string config_path(const std::string& name) { return (dir_->path() / name / "config.json").string(); }

  struct Scan {
    int code = -1;
    std::string err;
    Json report;
  };
  static Scan scan(const std::string& name, const std::vector<std::string>& extra = {}) {
    Scan s;
    const std::string report_path = dir_->file(name + "-report.json");
    std::vector<std::string> args{"scan", config_path(name), "-o", report_path, "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::ostringstream out, err;
    s.code = run_cli(args, out, err);
    s.err = err.str();
    std::ifstream in(report_path);
    if (in) s.report = Json::parse(in);
    expect_catalogued(s.report);
    return s;
  }

  // Every batch of the loop that raised at this stage, and every batch the scan reports
  // this finding id for.
  static std::set<uint64_t> loop_failures(const Json& t, const std::string& stage) {
    std::set<uint64_t> out;
    for (const auto& f : t["failures"]) {
      if (f["stage"] == stage) out.insert(f["batch"].get<uint64_t>());
    }
    return out;
  }
  static std::set<uint64_t> scan_failures(const Json& report, const std::string& id) {
    std::set<uint64_t> out;
    for (const auto& f : report["findings"]) {
      if (f["id"] != id) continue;
      for (const auto& o : f["occurrences"]) out.insert(o["batch"].get<uint64_t>());
    }
    return out;
  }

  inline static std::unique_ptr<TempDir> dir_;
  inline static bool generated_ = false;
  inline static std::string log_;
  inline static Json manifest_;
};

}  // namespace batchcheck::test_util
