#pragma once
// A test suite over cases a Python generator writes, each in its own folder with its
// config.json, and in manifest.json what the real PyTorch loop did on the same data (which
// batches raise, at which stage). The scans run in-process and are compared with it.
// Suite supplies kTag (the temporary folder's tag), kScript (the generator, from the source
// tree) and kWhat (what is skipped without Python's torch).
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catalogued.h"
#include "cli.h"
#include "test_helpers.h"

namespace batchcheck::test_util {

template <class Suite>
class OracleSuite : public ::testing::Test {
 protected:
  using Json = nlohmann::json;

  static void SetUpTestSuite() {
    if (!python_torch_available()) return;
    dir_ = std::make_unique<TempDir>(Suite::kTag);
    auto gen = run_command(python() + " -W ignore " BATCHCHECK_SOURCE_DIR "/" + Suite::kScript + " " + dir_->path().string() + " 2>&1");
    generated_ = gen.status == 0;
    log_ = gen.output;
    if (!generated_) return;
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
