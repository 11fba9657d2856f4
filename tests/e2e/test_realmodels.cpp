// Real torchvision models with batchcheck's DEFAULT config, against the real PyTorch training
// loop on the same archive and data (tests/e2e/realmodels/make_realmodels.py): every clean setup
// passes, every setup where the loop fails (forward, loss, backward or poisoned BatchNorm
// statistics) fails at the same rank and batch, an eval-mode trace is named (and where the
// user's eager model raises BatchNorm's "Expected more than 1 value per channel", that batch
// fails), and files that are not what batchcheck expects say what they are.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using Json = nlohmann::json;

namespace {

// The first batch of `rank` with an error finding of the replay (probes excluded).
Json first_error_batch(const Json& report, uint64_t rank) {
  Json first = nullptr;
  for (const auto& f : report["findings"]) {
    if (f["severity"] != "error" || f["batch"].is_null() || f["rank"] != rank) continue;
    if (first.is_null() || f["batch"] < first) first = f["batch"];
  }
  return first;
}

bool has_id(const Json& report, const std::string& id) {
  for (const auto& f : report["findings"]) {
    if (f["id"] == id) return true;
  }
  return false;
}

void write(const std::string& path, const Json& j) {
  std::ofstream out(path);
  out << j.dump(1);
}

}  // namespace

TEST(RealModels, DefaultConfigAgreesWithTheTrainingLoop) {
  if (!test_util::python_torch_available()) {
    GTEST_SKIP() << test_util::python_missing_line("the real-model suite");
  }
  test_util::TempDir dir("realmodels");
  // A subset (BATCHCHECK_REALMODELS_ARCHS) keeps the hand-written backward case.
  const std::string subset = BATCHCHECK_REALMODELS_ARCHS;
  auto gen = test_util::run_command(test_util::python() + " " BATCHCHECK_SOURCE_DIR "/tests/e2e/realmodels/make_realmodels.py " +
                                    dir.path().string() + (subset.empty() ? "" : " " + subset + " inplace"));
  ASSERT_EQ(gen.status, 0) << "make_realmodels.py failed: " << gen.output;
  std::ifstream in(dir.file("manifest.json"));
  Json manifest = Json::parse(in);

  std::set<std::string> archs, kinds;
  int clean = 0, failing = 0, hidden_by_eval_trace = 0, inferred_from_eval_trace = 0;
  bool backward_only = false;
  for (const auto& c : manifest["cases"]) {
    const std::string name = c["case"];
    archs.insert(c["arch"].get<std::string>());
    kinds.insert(c["kind"].get<std::string>() + "/" + (c["traced_in"].is_null() ? "-" : c["traced_in"].get<std::string>()));
    const std::string report_path = (dir.path() / name / "report.json").string();
    std::ostringstream out, err;
    const int code = run_cli({"scan", (dir.path() / name / "config.json").string(), "-o", report_path, "-q"}, out, err);
    ASSERT_TRUE(code == 0 || code == 1) << name << ": " << err.str();
    std::ifstream rin(report_path);
    const Json report = Json::parse(rin);

    bool pytorch_fails = false;
    for (std::size_t rank = 0; rank < c["failures"].size(); ++rank) {
      Json truth = c["failures"][rank];
      // Traced in eval mode, the archive hides what the user's eager model does in train mode;
      // a batch that gives its BatchNorm one value per channel is still found (from the shapes
      // the frozen ops see), so there the eager loop is the truth when it fails first.
      const Json eager = c.contains("eager_failures") ? c["eager_failures"][rank] : Json();
      if (!eager.is_null() && eager["why"].get<std::string>().find("Expected more than 1 value per channel") != std::string::npos) {
        if (truth.is_null() || eager["batch"] < truth["batch"]) truth = eager;
        ++inferred_from_eval_trace;
      }
      const Json expected = truth.is_null() ? Json() : truth["batch"];
      pytorch_fails = pytorch_fails || !truth.is_null();
      EXPECT_EQ(first_error_batch(report, rank), expected)
          << name << " rank " << rank << ": PyTorch " << (truth.is_null() ? std::string("completes the epoch") : truth.dump())
          << "\n" << report["findings"].dump(1);
    }
    EXPECT_EQ(code, pytorch_fails ? 1 : 0) << name << "\n" << report["findings"].dump(1);
    (pytorch_fails ? failing : clean)++;

    if (c["traced_in"] == "eval") {
      // Scanned in train mode, the eval trace cannot fail as the user's model does: say so,
      // wherever the graph holds an op whose training flag tracing froze (BatchNorm, dropout).
      EXPECT_EQ(has_id(report, "trace-mode-mismatch"), c["mode_modules"] > 0) << name << "\n" << report["findings"].dump(1);
      for (const auto& f : c.value("eager_failures", Json::array())) {
        if (!f.is_null()) ++hidden_by_eval_trace;
      }
    } else {
      EXPECT_FALSE(has_id(report, "trace-mode-mismatch")) << name << "\n" << report["findings"].dump(1);
    }
    if (name == "inplace-backward") {
      backward_only = true;
      EXPECT_TRUE(has_id(report, "backward-error")) << report["findings"].dump(1);
    }
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"scripted/-", "traced/train", "traced/eval"}));
  EXPECT_TRUE(backward_only);
  if (subset.empty()) {
    EXPECT_GE(archs.size(), 12u + 1);  // + the hand-written backward case
    EXPECT_GE(clean, 20);
    EXPECT_GE(failing, 15);
    EXPECT_GE(hidden_by_eval_trace, 8) << "the eval traces must hide real failures, or the mismatch test proves nothing";
    EXPECT_GE(inferred_from_eval_trace, 8) << "BatchNorm on one value per channel behind an eval trace";
  } else {
    std::istringstream names(subset);
    const std::size_t n = std::distance(std::istream_iterator<std::string>(names), std::istream_iterator<std::string>());
    EXPECT_EQ(archs.size(), n + 1) << subset;
    EXPECT_GE(clean, static_cast<int>(n));
    EXPECT_GE(failing, 2);
    EXPECT_GE(hidden_by_eval_trace, 1) << "the eval traces must hide real failures, or the mismatch test proves nothing";
    EXPECT_GE(inferred_from_eval_trace, 1) << "BatchNorm on one value per channel behind an eval trace";
  }

  // Files that are not what batchcheck expects: one line that says what they are.
  const std::map<std::string, std::string> says = {
      {"state_dict", "not a TorchScript archive: it is a state_dict"},
      {"pickled nn.Module", "not a TorchScript archive: it is a pickled nn.Module"},
      {"training checkpoint", "not a TorchScript archive: it is a training checkpoint"},
      {"numpy arrays", "it holds numpy arrays"},
      {"TensorDataset", "it holds a pickled TensorDataset"}};
  const std::string good = (dir.path() / "resnet18-script-clean").string();
  for (const auto& w : manifest["wrong_files"]) {
    const std::string file = (dir.path() / w["file"].get<std::string>()).string();
    Json cfg = {{"model", {{"path", good + "/model.pt"}}},
                {"data", {{"inputs", good + "/inputs.npy"}, {"targets", good + "/targets.npy"}}},
                {"loader", {{"batch_size", 8}}},
                {"loss", {{"type", "cross_entropy"}}}};
    if (w["role"] == "model") cfg["model"]["path"] = file;
    else cfg["data"] = {{"format", "pt"}, {"path", file}};
    const std::string cfg_path = dir.file("wrong.json");
    write(cfg_path, cfg);
    std::ostringstream out, err;
    EXPECT_EQ(run_cli({"scan", cfg_path, "-q"}, out, err), 2) << w;
    const std::string e = err.str();
    EXPECT_EQ(e.rfind("batchcheck: error: " + file + ": " + says.at(w["says"]), 0), 0u) << e;
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
    EXPECT_EQ(e.find("Generic"), std::string::npos) << e;
  }
}
