// Models as users of torch 2.x save them (tests/e2e/modern/make_modern.py, run with a torch 2.x
// Python): a transformer through scaled_dot_product_attention, an AOTInductor .pt2 with a
// dynamic batch dimension, an uncompiled ExportedProgram. The default build scans them as the
// real loop runs them; a LibTorch too old for them says so, naming what is missing.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using Json = nlohmann::json;

namespace {

// The LibTorch this binary links, as (major, minor).
std::pair<int, int> linked_torch() {
  int major = 0, minor = 0;
  std::sscanf(BATCHCHECK_TORCH_VERSION, "%d.%d", &major, &minor);
  return {major, minor};
}

struct Scan {
  int code;
  std::string err;
  Json report;
};

Scan scan(const test_util::TempDir& dir, const std::string& name) {
  const std::string report_path = dir.file(name + "-report.json");
  std::ostringstream out, err;
  Scan s;
  s.code = run_cli({"scan", (dir.path() / name / "config.json").string(), "-o", report_path, "-q"}, out, err);
  s.err = err.str();
  std::ifstream in(report_path);
  if (in) s.report = Json::parse(in);
  return s;
}

}  // namespace

TEST(Modern, Torch2ModelsScanAsTheRealLoopRunsThem) {
  const std::string py = BATCHCHECK_TORCH2_PYTHON;
  if (py.empty() || test_util::run_command(py + " -c 'import sys, torch; sys.exit(torch.__version__ < \"2\")' 2>/dev/null").status != 0) {
    GTEST_SKIP() << "no Python with torch 2.x (BATCHCHECK_TORCH2_PYTHON=\"" << py
                 << "\"): the models saved by torch 2.x cannot be made (scripts/setup.sh makes the venv)";
  }
  const auto [major, minor] = linked_torch();
  const bool modern = major >= 2;
  const bool aoti = major > 2 || (major == 2 && minor >= 6);
  test_util::TempDir dir("modern");
  auto gen = test_util::run_command(py + " " BATCHCHECK_SOURCE_DIR "/tests/e2e/modern/make_modern.py " + dir.path().string() +
                                    (aoti ? "" : " --no-aoti") + " 2>&1");
  ASSERT_EQ(gen.status, 0) << "make_modern.py failed: " << gen.output;
  std::ifstream in(dir.file("manifest.json"));
  const Json manifest = Json::parse(in);
  auto truth = [&](const std::string& name) {
    for (const auto& c : manifest["cases"]) {
      if (c["case"] == name) return c;
    }
    ADD_FAILURE() << "no case " << name;
    return Json();
  };

  // The transformer: the real loop (train mode, backward) runs every batch.
  ASSERT_TRUE(truth("transformer")["failure"].is_null()) << manifest.dump(1);
  Scan t = scan(dir, "transformer");
  const std::string model_pt = (dir.path() / "transformer" / "model.pt").string();
  if (modern) {
    EXPECT_EQ(t.code, 0) << t.err;
    EXPECT_EQ(t.report["mode"], "train");
    for (const auto& f : t.report["findings"]) EXPECT_NE(f["severity"], "error") << f.dump(1);
  } else {
    EXPECT_EQ(t.code, 2);
    EXPECT_EQ(t.err, "batchcheck: error: " + model_pt +
                         ": the archive uses the operator aten::scaled_dot_product_attention, which the LibTorch this "
                         "batchcheck links (" BATCHCHECK_TORCH_VERSION
                         ") does not have: it was saved by a newer torch; build batchcheck against the torch you train with "
                         "(the default build, or BATCHCHECK_PYTHON=/path/to/your/python scripts/build.sh; see the README)\n");
  }

  // An ExportedProgram that was never compiled: the command that compiles it.
  Scan e = scan(dir, "exported");
  EXPECT_EQ(e.code, 2);
  const std::string exported_pt2 = (dir.path() / "exported" / "model.pt2").string();
  if (aoti) {
    EXPECT_EQ(e.err, "batchcheck: error: " + exported_pt2 +
                         ": an ExportedProgram (torch.export.save) that is not compiled: LibTorch has no runtime for it; "
                         "compile it with AOTInductor and scan that package: torch._inductor.aoti_compile_and_package("
                         "torch.export.load(\"" + exported_pt2 + "\"), package_path=\"model_aoti.pt2\")\n");
  } else {
    EXPECT_EQ(e.err, "batchcheck: error: " + exported_pt2 +
                         ": a .pt2 program needs LibTorch 2.6 or newer, and this batchcheck links LibTorch " BATCHCHECK_TORCH_VERSION
                         ": build it against the torch you train with (the default build; see the README)\n");
    return;
  }

  // The AOTInductor package: the real loop over the program (input checks on) fails on the tail
  // batch of one, which torch.export's specialization of sizes 0 and 1 refuses; the eager model
  // it came from takes it. By default the program stands in for that model: a warning about
  // the program at that batch, not a failed gate.
  const Json a_truth = truth("aoti");
  ASSERT_FALSE(a_truth["failure"].is_null()) << a_truth.dump(1);
  EXPECT_EQ(a_truth["accepted_batch_sizes"], Json({2, 3, 8}));
  Scan stand_in = scan(dir, "aoti");
  EXPECT_EQ(stand_in.code, 0) << stand_in.err << stand_in.report.dump(1);
  const Json* specialized = nullptr;
  for (const auto& f : stand_in.report["findings"]) {
    EXPECT_NE(f["id"], "export-shape-guard") << f.dump(1);
    if (f["id"] == "export-batch-specialized" && f.value("probe", Json()).is_null()) specialized = &f;
  }
  ASSERT_NE(specialized, nullptr) << stand_in.report.dump(1);
  EXPECT_EQ((*specialized)["severity"], "warning");
  EXPECT_EQ((*specialized)["batch"], a_truth["failure"]["batch"]);
  EXPECT_EQ((*specialized)["samples"], Json({16}));
  EXPECT_EQ((*specialized)["message"],
            "the exported program accepts batches of 2 or more samples, but this batch holds 1 (torch.export specializes "
            "sizes 0 and 1: a dynamic batch dimension starts at 2), so this batch was not checked; the eager model it was "
            "exported from trains on a batch of one, so this is about the exported program, not the training run "
            "(model.trains_exported: true when training runs this program itself)");
  // Training that runs the program itself stops there: the scan fails at the same batch as the
  // real loop, naming the range the program accepts.
  {
    const std::string cfg_path = (dir.path() / "aoti" / "config.json").string();
    std::ifstream cin(cfg_path);
    Json cfg = Json::parse(cin);
    cin.close();
    cfg["model"]["trains_exported"] = true;
    std::ofstream(cfg_path) << cfg.dump();
  }
  Scan a = scan(dir, "aoti");
  ASSERT_EQ(a.code, 1) << a.err;
  EXPECT_EQ(a.report["mode"], "eval");
  EXPECT_EQ(a.err.find("Error: input_handles"), std::string::npos) << "the program's own stderr line leaks:\n" << a.err;
  const Json* guard = nullptr;
  for (const auto& f : a.report["findings"]) {
    if (f["id"] == "export-shape-guard" && f.value("probe", Json()).is_null()) guard = &f;
  }
  ASSERT_NE(guard, nullptr) << a.report.dump(1);
  EXPECT_EQ((*guard)["severity"], "error");
  EXPECT_EQ((*guard)["batch"], a_truth["failure"]["batch"]);
  EXPECT_EQ((*guard)["samples"], Json({16}));
  EXPECT_EQ((*guard)["evidence"]["guard"]["check"], "min");
  EXPECT_EQ((*guard)["evidence"]["guard"]["expected"], 2);
  std::set<std::string> fixes;
  for (const auto& fx : (*guard)["fixes"]) fixes.insert(fx["id"].get<std::string>());
  EXPECT_TRUE(fixes.count("drop-last") && fixes.count("re-export-dynamic-batch")) << guard->dump(1);
}
