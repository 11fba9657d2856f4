// Interop and differential test against real PyTorch: models made by torch.jit.script /
// torch.jit.trace (torchvision among them), data saved by np.save / torch.save, and the
// batch at which a real PyTorch training loop raises (tests/e2e/interop/make_interop.py).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using Json = nlohmann::json;

TEST(Interop, BatchcheckReportsTheBatchWherePyTorchTrainingFails) {
  if (!test_util::python_torch_available()) {
    GTEST_SKIP() << test_util::python_missing_line("the PyTorch interop test");
  }
  test_util::TempDir dir("interop");
  auto gen = test_util::run_command(test_util::python() + " " BATCHCHECK_SOURCE_DIR "/tests/e2e/interop/make_interop.py " +
                                    dir.path().string());
  ASSERT_EQ(gen.status, 0) << "make_interop.py failed";
  std::ifstream in(dir.file("manifest.json"));
  Json manifest = Json::parse(in);
  ASSERT_GE(manifest.size(), 8u);
  bool saw_traced = false, saw_pt = false, saw_torchvision = false;
  for (const auto& c : manifest) {
    const std::string name = c["case"];
    saw_traced = saw_traced || c["kind"] == "traced";
    saw_pt = saw_pt || c["data"] == "pt";
    saw_torchvision = saw_torchvision || name.find("torchvision") != std::string::npos;
    const std::string cfg = (dir.path() / name / "config.json").string();
    const std::string report_path = (dir.path() / name / "report.json").string();
    std::ostringstream out, err;
    int code = run_cli({"scan", cfg, "-o", report_path, "-q"}, out, err);
    ASSERT_TRUE(code == 0 || code == 1) << name << ": " << err.str();
    std::ifstream rin(report_path);
    Json report = Json::parse(rin);
    // The first batch with an error finding, replayed in delivery order.
    Json first_error_batch = nullptr;
    std::vector<std::string> ids_there;
    for (const auto& f : report["findings"]) {
      if (f["severity"] != "error" || f["batch"].is_null()) continue;
      if (first_error_batch.is_null() || f["batch"] < first_error_batch) first_error_batch = f["batch"];
    }
    for (const auto& f : report["findings"]) {
      if (f["severity"] == "error" && f["batch"] == first_error_batch) ids_there.push_back(f["id"]);
    }
    if (c["expected_batch"].is_null()) {
      EXPECT_EQ(code, 0) << name << ": PyTorch completes the epoch, batchcheck must pass\n" << report["findings"].dump(1);
      EXPECT_TRUE(first_error_batch.is_null()) << name;
    } else {
      EXPECT_EQ(code, 1) << name;
      EXPECT_EQ(first_error_batch, c["expected_batch"])
          << name << ": PyTorch fails at batch " << c["expected_batch"] << " (" << c["pytorch_error"] << ")\n"
          << report["findings"].dump(1);
      for (const auto& id : c["expected_ids"]) {
        EXPECT_NE(std::find(ids_there.begin(), ids_there.end(), id.get<std::string>()), ids_there.end())
            << name << ": expected " << id << " at batch " << c["expected_batch"] << "\n" << report["findings"].dump(1);
      }
    }
  }
  EXPECT_TRUE(saw_traced && saw_pt && saw_torchvision) << "the fixture set lost its coverage";
}
