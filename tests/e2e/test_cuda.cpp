// The CUDA path end to end: the seed's cases scanned on the GPU find what the CPU scan finds,
// at the same batches and samples, and the scan itself never runs into the device-side
// assert (the value checks run before the loss kernel). Skipped, with a line saying so, where
// no GPU is visible; scripts/gpu-check.sh adds the real loop's device-side assert on a GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "engine/cuda_runtime.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using Json = nlohmann::json;

namespace {

Json error_rows(const Json& report) {
  Json rows = Json::array();
  for (const auto& f : report["findings"]) {
    if (f["severity"] == "error" && f.value("probe", Json()).is_null()) {
      rows.push_back({f["id"], f["rank"], f["batch"], f["samples"]});
    }
  }
  return rows;
}

}  // namespace

TEST(Cuda, SeedCasesFindTheSameBatchesOnTheDevice) {
  if (!cuda_device_visible()) {
    GTEST_SKIP() << "no CUDA device visible (this LibTorch has no CUDA, or no GPU): the CUDA end-to-end tests run "
                    "where one is (scripts/gpu-check.sh)";
  }
  test_util::TempDir dir("cuda");
  for (const std::string name : {"segmentation_tail", "classification_label255"}) {
    const std::string cfg = BATCHCHECK_SOURCE_DIR "/sample_configs/" + name + ".json";
    Json reports[2];
    const char* devices[2] = {"cpu", "cuda"};
    for (int d = 0; d < 2; ++d) {
      const std::string path = dir.file(name + "." + devices[d] + ".json");
      std::ostringstream out, err;
      ASSERT_EQ(run_cli({"scan", cfg, "--device", devices[d], "-q", "-o", path}, out, err), 1) << name << ": " << err.str();
      std::ifstream in(path);
      reports[d] = Json::parse(in);
    }
    EXPECT_EQ(reports[1]["device"], "cuda:0");
    EXPECT_TRUE(reports[1]["complete"].get<bool>()) << "the scan ran into a device-side assert";
    EXPECT_EQ(error_rows(reports[0]), error_rows(reports[1])) << name;
    EXPECT_FALSE(error_rows(reports[1]).empty()) << name;
  }
}

namespace {

// What these check holds per process (a library loaded, CUDA hooks settled): the test runs
// again alone in a fresh process, which does the checks (true there).
bool in_fresh_process() {
  if (std::getenv("BATCHCHECK_FRESH_PROCESS")) return true;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    ADD_FAILURE() << "cannot find this test binary";
    return false;
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto r = test_util::run_command("BATCHCHECK_FRESH_PROCESS=1 '" + std::string(self, static_cast<std::size_t>(n)) +
                                        "' --gtest_filter=" + info->test_suite_name() + "." + info->name() + " 2>&1");
  EXPECT_EQ(r.status, 0) << r.output;
  return false;
}

}  // namespace

// The build links libtorch_cpu only (cmake/TorchCpu.cmake): a scan on the CPU never maps
// LibTorch's CUDA libraries, and one that asks for a CUDA device loads them first, before
// LibTorch settles its CUDA hooks, with the kernels registered.
TEST(CudaLibrary, ACpuScanNeverLoadsIt) {
  if (!in_fresh_process()) return;
  test_util::TempDir dir("cuda-lib");
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"scan", BATCHCHECK_SOURCE_DIR "/sample_configs/clean.json", "-q", "-o", dir.file("r.json")}, out, err), 0)
      << err.str();
  EXPECT_FALSE(cuda_runtime_loaded());
}

TEST(CudaLibrary, AutoLoadsItAndFallsBackToTheCpu) {
  if (!in_fresh_process()) return;
  test_util::TempDir dir("cuda-auto");
  std::ostringstream out, err;
  ASSERT_EQ(run_cli({"scan", BATCHCHECK_SOURCE_DIR "/sample_configs/clean.json", "--device", "auto", "-q", "-o", dir.file("r.json")},
                    out, err),
            0)
      << err.str();
  // Loaded (where this LibTorch has CUDA), with its kernels and hooks registered.
  EXPECT_EQ(load_cuda_runtime(), "");
  const Json report = Json::parse(test_util::slurp(dir.file("r.json")));
  EXPECT_EQ(report["device"], cuda_device_visible() ? "cuda:0" : "cpu");
}

namespace {

// The supervised binary's engine child, started for `device`, says which of LibTorch's CUDA
// libraries it has mapped before it loads the model (BATCHCHECK_TEST_FAULT=maps:).
std::string mapped_at_start(const std::string& device, const std::string& env = "") {
  test_util::TempDir dir("cuda-maps");
  const std::string log = dir.file("stderr.log");
  test_util::run_command("env BATCHCHECK_TEST_FAULT=maps: " + env + " '" BATCHCHECK_BINARY_DIR "/app/batchcheck' scan '" BATCHCHECK_SOURCE_DIR
                         "/sample_configs/clean.json' --device " + device + " -q -o '" + dir.file("r.json") + "' 2>'" + log + "'");
  const std::string err = test_util::slurp(log);
  const std::string tag = "batchcheck test: mapped before the model: ";
  const auto at = err.find(tag);
  if (at == std::string::npos) return "(no line: " + err + ")";
  return err.substr(at + tag.size(), err.find('\n', at) - at - tag.size());
}

}  // namespace

// On a GPU, cuDNN loaded late (a dlopen once libtorch_cpu runs) crashed every convolution: the
// engine child of a CUDA scan is started with libtorch_cuda (and cuDNN with it) loaded, as
// `import torch` has them, and a CPU scan's child still maps neither. Without a GPU the CUDA
// scan then stops at "CUDA is not available", after the line this reads.
TEST(CudaLibrary, TheEngineOfACudaScanHasItFromItsStart) {
  if (!libtorch_has_cuda()) {
    GTEST_SKIP() << "this LibTorch has no libtorch_cuda.so (a CPU build): nothing to preload";
  }
  const std::string cuda = mapped_at_start("cuda");
  EXPECT_NE(cuda.find("libtorch_cuda.so"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("libcudnn.so"), std::string::npos) << cuda;
  EXPECT_EQ(mapped_at_start("cpu"), "none");
  // "auto" preloads only where a GPU can be visible.
  EXPECT_EQ(mapped_at_start("auto", "CUDA_VISIBLE_DEVICES=-1"), "none");
}
