// Real pipelines against the real PyTorch loop on the same data (tests/e2e/pipelines/
// make_pipelines.py): variable-length token sequences saved as a list of per-sample tensors or
// as (input, target) records, batched by a padding collate_fn or by default_collate. The scan
// must fail exactly at the batches where the loop raises, with the loop's own error text.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli.h"
#include "support/oracle_suite.h"
#include "support/test_helpers.h"

using namespace batchcheck;
using Json = nlohmann::json;

namespace {

class Pipelines : public test_util::OracleSuite<Pipelines> {
 public:
  static constexpr const char* kTag = "pipelines";
  static constexpr const char* kScript = "tests/e2e/pipelines/make_pipelines.py";
  static constexpr const char* kWhat = "the pipeline tests";
};

}  // namespace

TEST_F(Pipelines, PadCollateFailsExactlyAtTheBatchLongerThanThePositionTable) {
  for (const std::string name : {"textpad", "records", "textpad-multiple"}) {
    SCOPED_TRACE(name);
    const Json& t = truth(name);
    const std::set<uint64_t> expected = loop_failures(t, "forward");
    ASSERT_FALSE(expected.empty());
    EXPECT_TRUE(loop_failures(t, "collate").empty());
    Scan s = scan(name);
    EXPECT_EQ(s.code, 1) << s.err;
    EXPECT_EQ(scan_failures(s.report, "forward-error"), expected) << s.report["findings"].dump(1);
    EXPECT_EQ(s.report["summary"]["errors"], 1) << s.report["findings"].dump(1);
    for (const auto& f : s.report["findings"]) {
      if (f["id"] != "forward-error") continue;
      EXPECT_NE(f["message"].get<std::string>().find(t["failures"][0]["error"].get<std::string>()), std::string::npos)
          << f["message"];
      // The reproduce snippet uses the user's collate_fn, not default_collate.
      bool saw = false;
      for (const auto& fix : f["fixes"]) {
        if (fix["id"] != "reproduce") continue;
        saw = true;
        EXPECT_EQ(fix["code"].get<std::string>().rfind("import torch\nfrom torch import nn\nidx = range(", 0), 0u) << fix["code"];
        EXPECT_NE(fix["code"].get<std::string>().find("\nx, y = collate_fn([dataset[i] for i in idx])\n"), std::string::npos)
            << fix["code"];
      }
      EXPECT_TRUE(saw);
    }
  }
  // The padded length is what the model sees: with a multiple of 48, batch 0 (12 long) is 48.
  Scan m = scan("textpad-multiple");
  EXPECT_EQ(m.report["batches"]["first"]["input_shape"], Json::parse("[8, 48]")) << m.report["batches"].dump();
}

TEST_F(Pipelines, DefaultCollateOnRaggedSamplesFailsWherePyTorchsDoes) {
  const Json& t = truth("ragged-default");
  const std::set<uint64_t> expected = loop_failures(t, "collate");
  ASSERT_EQ(expected, (std::set<uint64_t>{1, 2, 3}));
  Scan s = scan("ragged-default");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_EQ(scan_failures(s.report, "collate-error"), expected) << s.report["findings"].dump(1);
  ASSERT_EQ(s.report["findings"].size(), 1u) << s.report["findings"].dump(1);
  const Json& f = s.report["findings"][0];
  // PyTorch's own message for the first failing batch, word for word.
  EXPECT_EQ(f["evidence"]["error"], t["failures"][0]["error"]);
  EXPECT_EQ(f["evidence"]["collate"], "default");
  EXPECT_EQ(f["stage"], "collate");
  // Batch 2 is [64, 3, 64, 10, 5, 60, 22, 1]: row 0 and the rows whose length differs from it.
  EXPECT_EQ(f["occurrences"][1]["samples"], Json::parse("[16, 17, 19, 20, 21, 22, 23]"));
  EXPECT_EQ(f["message"].get<std::string>().rfind("default_collate cannot put this batch's inputs together: stack "
                                                  "expects each tensor to be equal size, but got [20] at entry 0 and [50] "
                                                  "at entry 1; the samples' shapes: [20], [50] x2, [7], [33], [9], [41], [18]",
                                                  0),
            0u)
      << f["message"];
  // The fix names the config that makes batchcheck check the padded pipeline.
  EXPECT_EQ(f["fixes"][0]["id"], "pad-collate-variable-length");
  EXPECT_NE(f["fixes"][0]["code"].get<std::string>().find("\"collate\": {\"pad\": {\"inputs\": 0}}"), std::string::npos);
  EXPECT_EQ(s.report["dataset"]["input_shape"], Json::parse("[-1]"));
}

TEST_F(Pipelines, ACleanPaddedPipelinePassesWithTheDefaultChecks) {
  const Json& t = truth("textpad-clean");
  ASSERT_TRUE(t["failures"].empty()) << t.dump(1);
  Scan s = scan("textpad-clean");
  EXPECT_EQ(s.code, 0) << s.err << s.report["findings"].dump(1);
}

TEST_F(Pipelines, RecordedOrdersReplayTheSamplersNoFormulaCan) {
  // The global-seed pattern, a WeightedRandomSampler with replacement, a bucketing batch
  // sampler: each replayed from loader.order fails at exactly the loop's batches.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"global-seed", "target-out-of-range"}, {"weighted", "target-out-of-range"}, {"bucketing", "forward-error"}};
  for (const auto& [name, id] : cases) {
    SCOPED_TRACE(name);
    const Json& t = truth(name);
    const std::set<uint64_t> expected = loop_failures(t, "forward");
    ASSERT_FALSE(expected.empty());
    Scan s = scan(name);
    EXPECT_EQ(s.code, 1) << s.err;
    EXPECT_EQ(scan_failures(s.report, id), expected) << s.report["findings"].dump(1);
    EXPECT_EQ(s.report["batches"]["checked"], t["batches"]);
    EXPECT_EQ(s.report["geometry"]["sampler"], "recorded");
    EXPECT_EQ(s.report["geometry"]["order"], "order.json");
    for (const auto& f : s.report["findings"]) {
      if (f["id"] == "target-out-of-range") {
        EXPECT_EQ(f["samples"], Json::parse("[13]"));
      }
    }
  }
  // With replacement some samples are never drawn: said, as an info.
  Scan w = scan("weighted");
  bool dropped = false;
  for (const auto& f : w.report["findings"]) dropped = dropped || (f["id"] == "samples-dropped" && f["severity"] == "info");
  EXPECT_TRUE(dropped) << w.report["findings"].dump(1);
  EXPECT_EQ(w.report["geometry"]["batches_per_rank"], 6);
  EXPECT_EQ(w.report["geometry"]["samples_per_rank"], 48);
  // The bucketing sampler ends on a batch of one: the tail warning, from the recorded batch.
  Scan b = scan("bucketing");
  bool single = false;
  for (const auto& f : b.report["findings"]) {
    if (f["id"] != "tail-batch-singleton") continue;
    single = true;
    EXPECT_EQ(f["batch"], 8);
    EXPECT_EQ(f["fixes"][0]["id"], "skip-single-sample-batches");
  }
  EXPECT_TRUE(single) << b.report["findings"].dump(1);
}

TEST_F(Pipelines, AnOrderRecordedForOtherDataIsRefusedNamingTheIndex) {
  const std::string dir = (dir_->path() / "global-seed").string();
  {
    std::ofstream o(dir + "/stale.json");
    o << "[[0, 1, 2], [3, 40, 5]]";
  }
  std::ifstream in(dir + "/config.json");
  Json cfg = Json::parse(in);
  cfg["loader"]["order"] = "stale.json";
  {
    std::ofstream o(dir + "/stale-config.json");
    o << cfg.dump();
  }
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"scan", dir + "/stale-config.json", "-q"}, out, err), 2);
  EXPECT_EQ(err.str(), "batchcheck: error: stale.json: [1][1]: sample index 40 is outside the dataset's 40 samples (0..39): "
                       "the order was recorded for other data\n");
}

TEST_F(Pipelines, TheExportHelperWritesScansThatFailWhereTheLoopFails) {
  // python/batchcheck_export.py from the user's own DataLoader, model and loss; then the same
  // loader runs its epoch in the real loop (the helper restored the RNGs it drew from).
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"export-textpad", "forward", "forward-error"},
      {"export-ragged-default", "collate", "collate-error"},
      {"export-weighted", "forward", "target-out-of-range"},
      {"export-shuffled", "forward", "target-out-of-range"},
      {"export-traced", "forward", "target-out-of-range"},
      {"export-bucket-generator", "forward", "target-out-of-range"},
      {"export-bucket-pyrandom", "forward", "target-out-of-range"},
      {"export-fixed-clean", "forward", ""}};
  for (const auto& [name, stage, id] : cases) {
    SCOPED_TRACE(name);
    const Json& t = truth(name);
    Scan s = scan(name);
    EXPECT_EQ(s.report["batches"]["checked"], t["batches"]);
    if (id.empty()) {
      EXPECT_TRUE(t["failures"].empty());
      EXPECT_EQ(s.code, 0) << s.err << s.report["findings"].dump(1);
      EXPECT_EQ(s.report["dataset"]["input_shape"], Json::parse("[10]"));  // written as .npy
      continue;
    }
    const std::set<uint64_t> expected = loop_failures(t, stage);
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(s.code, 1) << s.err;
    EXPECT_EQ(scan_failures(s.report, id), expected) << s.report["findings"].dump(1);
  }
  // A model TorchScript cannot compile is traced, with a warning that says what tracing freezes.
  std::ifstream warning(dir_->file("export-traced/warning.txt"));
  const std::string said((std::istreambuf_iterator<char>(warning)), std::istreambuf_iterator<char>());
  EXPECT_EQ(said.rfind("export_scan: torch.jit.script failed (", 0), 0u) << said;
  EXPECT_NE(said.find("tracing the model on the first batch in train mode instead. A trace freezes Python control flow"),
            std::string::npos)
      << said;
  // Variable-length token sequences are streamed as values + offsets .npy files.
  {
    std::ifstream in(dir_->path() / "export-textpad" / "config.json");
    const Json cfg = Json::parse(in);
    EXPECT_EQ(cfg["data"]["inputs"], Json::parse(R"({"values": "inputs.values.npy", "offsets": "inputs.offsets.npy"})")) << cfg.dump();
    EXPECT_EQ(cfg["data"]["targets"], "targets.npy");
  }
  // A plain shuffled loader is recorded (its seed came from the global RNG).
  EXPECT_EQ(scan("export-shuffled").report["geometry"]["sampler"], "recorded");
  EXPECT_EQ(scan("export-textpad").report["geometry"]["sampler"], "sequential");
}

TEST_F(Pipelines, TwoInputsFromDictRecordsPositionallyByNameOrAsOneDict) {
  for (const std::string name : {"two-input-positional", "two-input-named", "dict-record"}) {
    SCOPED_TRACE(name);
    const Json& t = truth(name);
    const std::set<uint64_t> expected = loop_failures(t, "forward");
    ASSERT_EQ(expected, (std::set<uint64_t>{3}));
    Scan s = scan(name);
    EXPECT_EQ(s.code, 1) << s.err;
    EXPECT_EQ(scan_failures(s.report, "forward-error"), expected) << s.report["findings"].dump(1);
    EXPECT_EQ(s.report["summary"]["errors"], 1) << s.report["findings"].dump(1);
    EXPECT_EQ(s.report["dataset"]["input_shape"], Json::parse("[-1]"));
  }
}

// A collate_fn that builds the attention mask from the padded ids: the data holds no mask,
// loader.collate.mask generates it, and the scan fails where the loop does.
TEST_F(Pipelines, GeneratedAttentionMaskIsTheCollateFnsMask) {
  const Json& t = truth("mask-generated");
  const std::set<uint64_t> expected = loop_failures(t, "forward");
  ASSERT_EQ(expected, (std::set<uint64_t>{3}));
  Scan s = scan("mask-generated");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_EQ(scan_failures(s.report, "forward-error"), expected) << s.report["findings"].dump(1);
  EXPECT_EQ(s.report["summary"]["errors"], 1) << s.report["findings"].dump(1);
  // The mask's values: a model that returns NaN unless the mask is 1 exactly on the tokens
  // (padding to a multiple of 8 included) passes every batch.
  Scan values = scan("mask-values");
  EXPECT_EQ(values.code, 0) << values.err << values.report["findings"].dump(1);
  // The mask must mark a padded field that forward receives.
  const std::string dir = (dir_->path() / "mask-generated").string();
  std::ifstream in(dir + "/config.json");
  Json cfg = Json::parse(in);
  cfg["model"]["inputs"] = Json::parse(R"(["attention_mask"])");
  std::ofstream(dir + "/variant.json") << cfg.dump();
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"scan", dir + "/variant.json", "-q"}, out, err), 2);
  EXPECT_EQ(err.str(), "batchcheck: error: " + dir + "/variant.json: loader.collate.mask.attention_mask: marks \"input_ids\", "
                       "which model.inputs does not list\n");
  // With the whole record as forward's input, the marked field must be in the data.
  cfg["model"]["inputs"] = "record";
  cfg["loader"]["collate"] = Json::parse(R"({"pad": {"inputs": 0}, "mask": {"attention_mask": "input_idz"}})");
  std::ofstream(dir + "/variant2.json") << cfg.dump();
  std::ostringstream out2, err2;
  EXPECT_EQ(run_cli({"scan", dir + "/variant2.json", "-q"}, out2, err2), 2);
  EXPECT_EQ(err2.str(), "batchcheck: error: " + dir + "/variant2.json: loader.collate.mask: marks \"input_idz\", which is not a "
                        "field of the data (fields: input_ids); did you mean \"input_ids\"?\n");
}

TEST_F(Pipelines, ModelInputsThatDoNotFitForwardOrTheDataAreRefusedAtLoad) {
  auto with_inputs = [&](const std::string& name, const Json& inputs) {
    const std::string dir = (dir_->path() / name).string();
    std::ifstream in(dir + "/config.json");
    Json cfg = Json::parse(in);
    cfg["model"]["inputs"] = inputs;
    if (inputs.is_object() && !inputs.contains("attention_mask")) cfg["loader"]["collate"]["pad"].erase("attention_mask");
    const std::string path = dir + "/variant.json";
    std::ofstream(path) << cfg.dump();
    std::ostringstream out, err;
    const int code = run_cli({"scan", path, "-q"}, out, err);
    EXPECT_EQ(code, 2) << err.str();
    return err.str();
  };
  const std::string two = (dir_->path() / "two-input-positional" / "model.pt").string();
  const std::string rec = (dir_->path() / "dict-record" / "model.pt").string();
  EXPECT_EQ(with_inputs("dict-record", Json::parse(R"(["input_ids", "attention_mask"])")),
            "batchcheck: error: " + rec + ": forward: takes 1 required input (batch) but model.inputs lists 2 fields (input_ids, attention_mask)\n");
  EXPECT_EQ(with_inputs("two-input-positional", "record"),
            "batchcheck: error: " + two + ": forward: takes 2 required inputs (input_ids, attention_mask), its first is Tensor; "
            "model.inputs \"record\" passes the whole record (input_ids, attention_mask) as one Dict[str, Tensor] argument\n");
  EXPECT_EQ(with_inputs("two-input-positional", Json::parse(R"({"input_id": "input_ids", "attention_mask": "attention_mask"})")),
            "batchcheck: error: " + two + ": forward: has no argument \"input_id\", which model.inputs names (arguments: "
            "input_ids, attention_mask); did you mean \"input_ids\"?\n");
  EXPECT_EQ(with_inputs("two-input-positional", Json::parse(R"({"input_ids": "input_ids"})")),
            "batchcheck: error: " + two + ": forward: argument \"attention_mask\" has no default and model.inputs names no field for it\n");
  EXPECT_EQ(with_inputs("two-input-positional", Json::parse(R"(["input_ids", "attn_mask"])")),
            "batchcheck: error: data.pt: sample 0, key \"attn_mask\": missing, but model.inputs names it (keys: input_ids, "
            "attention_mask, label); did you mean \"attention_mask\"?\n");
}

TEST_F(Pipelines, EachInputFieldIsCheckedAndNamed) {
  Scan s = scan("npy-two-fields");
  EXPECT_EQ(s.code, 1) << s.err;
  ASSERT_GE(s.report["findings"].size(), 1u) << s.report["findings"].dump(1);
  const Json& f = s.report["findings"][0];
  EXPECT_EQ(f["id"], "input-nonfinite");
  EXPECT_EQ(f["batch"], 0);
  EXPECT_EQ(f["samples"], Json::parse("[5]"));
  EXPECT_EQ(f["evidence"]["field"], "b");
  EXPECT_EQ(f["message"].get<std::string>().rfind("field \"b\": ", 0), 0u) << f["message"];
  // loss.target: the labels as one more field of the map, named the target: the same scan.
  const std::string dir = (dir_->path() / "npy-two-fields").string();
  std::ifstream in(dir + "/config.json");
  Json cfg = Json::parse(in);
  cfg["data"]["inputs"]["label"] = "y.npy";
  cfg["data"].erase("targets");
  cfg["loss"]["target"] = "label";
  std::ofstream(dir + "/by-target.json") << cfg.dump();
  std::ostringstream out, err;
  const std::string report = dir_->file("by-target-report.json");
  EXPECT_EQ(run_cli({"scan", dir + "/by-target.json", "-q", "-o", report}, out, err), 1) << err.str();
  std::ifstream r(report);
  const Json by_target = Json::parse(r);
  EXPECT_EQ(by_target["findings"], s.report["findings"]);
  EXPECT_EQ(by_target["dataset"]["target_shape"], s.report["dataset"]["target_shape"]);
}

TEST_F(Pipelines, OperatorLibrariesLoadBeforeTheModel) {
  if (!std::filesystem::exists(dir_->path() / "operator-library")) {
    GTEST_SKIP() << "torchvision is not installed for " << test_util::python() << ": no operator library to load";
  }
  // Without the library first: this test runs the scan in-process, and a loaded library stays.

  std::ostringstream out, err;
  const std::string dir = (dir_->path() / "operator-library").string();
  EXPECT_EQ(run_cli({"scan", dir + "/no-library.json", "-q"}, out, err), 2);
  EXPECT_EQ(err.str(), "batchcheck: error: " + dir + "/model.pt: the archive uses the operator torchvision::nms, which no "
                       "loaded library registers: add the shared library that defines it (torchvision's: the _C*.so in "
                       "the torchvision package folder) to model.libraries\n");

  // A file that is not a shared library: one line naming it.
  const std::string bogus = dir + "/not-a-library.so";
  std::ofstream(bogus) << "text";
  std::ifstream in(dir + "/config.json");
  Json cfg = Json::parse(in);
  cfg["model"]["libraries"] = Json::array({"not-a-library.so"});
  std::ofstream(dir + "/bogus.json") << cfg.dump();
  std::ostringstream out2, err2;
  EXPECT_EQ(run_cli({"scan", dir + "/bogus.json", "-q"}, out2, err2), 2);
  EXPECT_EQ(err2.str().rfind("batchcheck: error: not-a-library.so: cannot load this operator library (model.libraries): ", 0), 0u)
      << err2.str();

  const Json& t = truth("operator-library");
  EXPECT_TRUE(t["failures"].empty()) << t.dump(1);
  Scan s = scan("operator-library");
  EXPECT_EQ(s.code, 0) << s.err << s.report["findings"].dump(1);
  EXPECT_EQ(s.report["batches"]["checked"], 4);
}

TEST_F(Pipelines, ExtraOutputsAreCheckedAndJoinTheLoss) {
  // torchvision's segmentation recipe: loss(out) + 0.5 * loss(aux). Only the aux head goes
  // non-finite, at the batch holding sample 21.
  const Json& t = truth("aux-heads");
  ASSERT_EQ(loop_failures(t, "loss"), (std::set<uint64_t>{2})) << t.dump(1);
  Scan s = scan("aux-heads");
  EXPECT_EQ(s.code, 1) << s.err;
  ASSERT_EQ(s.report["findings"].size(), 1u) << s.report["findings"].dump(1);
  const Json& f = s.report["findings"][0];
  EXPECT_EQ(f["id"], "output-nonfinite");
  EXPECT_EQ(scan_failures(s.report, "output-nonfinite"), loop_failures(t, "loss"));
  EXPECT_EQ(f["samples"], Json::parse("[21]"));
  EXPECT_EQ(f["evidence"]["output"], "aux");
  EXPECT_EQ(f["message"].get<std::string>().rfind("output \"aux\": predictions hold ", 0), 0u) << f["message"];
  // Its reproduce line computes the training loss, the aux term included.
  bool reproduces = false;
  for (const auto& fix : f["fixes"]) {
    if (fix["id"] != "reproduce") continue;
    reproduces = true;
    EXPECT_NE(fix["code"].get<std::string>().find("outs = model(x)\nout = outs[\"out\"]\nout_aux = outs[\"aux\"]\nloss = "
                                                  "nn.CrossEntropyLoss()(out, y) + 0.5 * nn.CrossEntropyLoss()(out_aux, y)\n"),
              std::string::npos)
        << fix["code"];
  }
  EXPECT_TRUE(reproduces) << f["fixes"].dump();

  // The export helper, told the prediction and the extra output: the same scan.
  // The report's per-batch series: the loop's training loss (out + 0.5 aux) and the range of
  // its prediction, batch by batch; no loss where the loop's is NaN.
  const Json& series = s.report["series"]["ranks"][0];
  ASSERT_EQ(series["batch"].size(), t["losses"].size());
  for (std::size_t b = 0; b < t["losses"].size(); ++b) {
    SCOPED_TRACE("batch " + std::to_string(b));
    if (t["losses"][b].is_null()) {
      EXPECT_TRUE(series["loss_min"][b].is_null());
    } else {
      EXPECT_NEAR(series["loss_min"][b].get<double>(), t["losses"][b].get<double>(), 1e-4 * t["losses"][b].get<double>());
    }
    for (int k = 0; k < 2; ++k) {
      const double want = t["preds"][b][k].get<double>();  // six significant digits in the report
      EXPECT_NEAR(series[k ? "pred_max" : "pred_min"][b].get<double>(), want, 1e-4 * std::max(1.0, std::fabs(want)));
    }
    EXPECT_EQ(series["errors"][b], b == 2 ? 1 : 0);
  }

  Scan exported = scan("export-aux-heads");
  EXPECT_EQ(exported.code, 1) << exported.err;
  EXPECT_EQ(exported.report["findings"], s.report["findings"]);

  // The same heads returned as a tuple, selected by index ("aux": {"1": 0.5}).
  const std::string dir = (dir_->path() / "aux-heads").string();
  std::ostringstream tout, terr;
  const std::string tuple_report = dir_->file("aux-tuple-report.json");
  EXPECT_EQ(run_cli({"scan", dir + "/tuple.json", "-q", "-o", tuple_report}, tout, terr), 1) << terr.str();
  std::ifstream tr(tuple_report);
  const Json by_index = Json::parse(tr);
  ASSERT_EQ(by_index["findings"].size(), 1u);
  EXPECT_EQ(by_index["findings"][0]["evidence"]["output"], "1");
  EXPECT_EQ(by_index["findings"][0]["samples"], f["samples"]);

  // Without loss.aux the prediction alone is clean: the gate would have passed this setup.
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"scan", dir + "/no-aux.json", "-q"}, out, err), 0) << err.str();

  // An output the model does not return: exit 2 at load, with the keys it does return.
  std::ostringstream out2, err2;
  EXPECT_EQ(run_cli({"scan", dir + "/typo.json", "-q"}, out2, err2), 2);
  EXPECT_EQ(err2.str(), "batchcheck: error: " + dir + "/typo.json: loss.aux.axu: the model's output has no key \"axu\" "
                        "(keys: out, aux); did you mean \"aux\"?\n");
}

TEST_F(Pipelines, DetectionModelsTrainOnListsOfImagesAndTargets) {
  if (!std::filesystem::exists(dir_->path() / "detection")) {
    GTEST_SKIP() << "torchvision is not installed for " << test_util::python() << ": no detection model";
  }
  // torchvision's Faster R-CNN as its reference recipe trains it: lists of images of different
  // sizes and of {boxes, labels} dicts, forward(images, targets) returning its losses. The loop
  // raises at batch 2 (a box of zero width) and batch 4 (a label past num_classes).
  const Json& t = truth("detection");
  ASSERT_EQ(loop_failures(t, "forward"), (std::set<uint64_t>{2, 4})) << t.dump(1);
  Scan s = scan("detection");
  EXPECT_EQ(s.code, 1) << s.err;
  EXPECT_EQ(scan_failures(s.report, "forward-error"), loop_failures(t, "forward"));
  ASSERT_EQ(s.report["findings"].size(), 1u) << s.report["findings"].dump(1);
  const Json& f = s.report["findings"][0];
  EXPECT_NE(f["message"].get<std::string>().find("All bounding boxes should have positive height and width"), std::string::npos) << f["message"];
  // The second batch fails for another reason: its occurrence says which.
  ASSERT_EQ(f["occurrences"].size(), 2u);
  EXPECT_FALSE(f["occurrences"][0].contains("message"));
  EXPECT_NE(f["occurrences"][1]["message"].get<std::string>().find("Target 7 is out of bounds"), std::string::npos) << f["occurrences"][1];
  EXPECT_EQ(s.report["dataset"]["target_dtype"], "dict");
  EXPECT_EQ(s.report["dataset"]["input_shape"], Json::parse("[3, -1, -1]"));

  // The export helper, from the user's detector and loader: the list collate, the model's own
  // loss and torchvision's ops library declared, the same findings.
  Scan exported = scan("export-detection");
  EXPECT_EQ(exported.code, 1) << exported.err;
  EXPECT_EQ(scan_failures(exported.report, "forward-error"), loop_failures(t, "forward"));
  EXPECT_EQ(exported.report["findings"][0]["occurrences"], f["occurrences"]);

  // The summary shows the second cause under the first.
  const std::string dir = (dir_->path() / "detection").string();
  std::ostringstream sout, serr;
  EXPECT_EQ(run_cli({"scan", dir + "/config.json", "-o", dir_->file("detection-summary.json")}, sout, serr), 1);
  // The loss's class index read from its arguments, and the sample that holds it.
  EXPECT_NE(serr.str().find("\n    at batch 4: forward raised on a batch of 4 samples: Target 7 is out of bounds; sample 18: class "
                            "index 7 >= classes 3 of roi_heads (RoIHeads)\n"),
            std::string::npos)
      << serr.str();

  // Misconfigurations, each one line naming what to set.
  auto error_of = [&](const std::string& config) {
    std::ostringstream out, err;
    EXPECT_EQ(run_cli({"scan", dir + "/" + config, "-q"}, out, err), 2) << config;
    return err.str();
  };
  EXPECT_EQ(error_of("no-list.json"),
            "batchcheck: error: data.pt: targets: is a dict per sample (boxes, labels), which a detection DataLoader keeps "
            "as a list with collate_fn=lambda b: tuple(zip(*b)): set loader.collate to {\"list\": true}\n");
  EXPECT_EQ(error_of("list-ce.json"),
            "batchcheck: error: " + dir + "/list-ce.json: loader.collate.list: batches stay lists of samples, which "
            "batchcheck's cross_entropy cannot compare with a prediction: set loss.type to \"model\" (forward computes its "
            "loss from the targets, as torchvision's detection models do) or \"none\"\n");
  EXPECT_EQ(error_of("tensor-targets.json"),
            "batchcheck: error: " + dir + "/model.pt: forward: argument \"targets\" (Optional[List[Dict[str, Tensor]]]) takes a dict per "
            "sample (e.g. boxes and labels), but the field \"targets\" holds a tensor per sample\n");
  EXPECT_EQ(error_of("eval.json"),
            "batchcheck: error: " + dir + "/eval.json: model.output: forward returned no losses (an empty dict): torchvision's "
            "detection models return their losses in train mode only; scan with model.mode \"train\"\n");
  EXPECT_EQ(error_of("no-targets.json"),
            "batchcheck: error: " + dir + "/no-targets.json: loss.type: \"model\" passes the targets to forward, which computes "
            "the loss, but images.pt holds no targets\n");
  EXPECT_EQ(error_of("tensors.json"),
            "batchcheck: error: " + dir + "/model.pt: forward: argument \"images\" (List[Tensor]) takes a list of per-sample "
            "tensors, as a detection DataLoader's collate_fn=lambda b: tuple(zip(*b)) passes them: set loader.collate to "
            "{\"list\": true}\n");
}

// A forward error raised inside torch's nn.Linear: the finding points at the user's line that
// called it (the view written for one batch size), names torch's frame below it, and keeps the
// whole traceback.
TEST_F(Pipelines, ForwardErrorsPointAtTheUsersLine) {
  const Json& t = truth("user-line");
  ASSERT_EQ(loop_failures(t, "forward"), (std::set<uint64_t>{2})) << t.dump(1);
  Scan s = scan("user-line");
  EXPECT_EQ(s.code, 1) << s.err;
  ASSERT_FALSE(s.report["findings"].empty());
  const Json& f = s.report["findings"][0];
  EXPECT_EQ(f["batch"], 2) << f.dump(1);
  EXPECT_NE(f["message"].get<std::string>().find(t["failures"][0]["error"].get<std::string>()), std::string::npos);
  // The generator's own line number of the marked line.
  std::ifstream src(BATCHCHECK_SOURCE_DIR "/tests/e2e/pipelines/make_pipelines.py");
  int line = 0, marked = 0;
  for (std::string text; std::getline(src, text);) {
    ++line;
    if (text.find("# user-line") != std::string::npos && text.find("def ") == std::string::npos) marked = line;
  }
  const Json& ev = f["evidence"];
  EXPECT_NE(ev["location"].get<std::string>().find("make_pipelines.py\", line " + std::to_string(marked) + ", in forward"),
            std::string::npos)
      << ev.dump(1);
  EXPECT_EQ(ev["source_line"].get<std::string>().rfind("return self.fc(h.view(self.batch_size, -1))", 0), 0u) << ev.dump(1);
  EXPECT_NE(ev["raised_in"].get<std::string>().find("torch/nn/modules/linear.py"), std::string::npos) << ev.dump(1);
  EXPECT_NE(ev["traceback"].get<std::string>().find("linear.py"), std::string::npos);
}

// Weights that are NaN in the file: a model finding names them before any batch, and each
// batch's NaN names them as its root cause instead of blaming the batch.
TEST_F(Pipelines, NanWeightsAreNamedAsTheRootCause) {
  const Json& t = truth("nan-weight");
  ASSERT_EQ(t["nan_batches"], Json::parse("[0, 1, 2]"));
  Scan s = scan("nan-weight");
  EXPECT_EQ(s.code, 1) << s.err;
  const Json* model = nullptr;
  const Json* output = nullptr;
  for (const auto& f : s.report["findings"]) {
    if (f["id"] == "model-nonfinite") model = &f;
    if (f["id"] == "output-nonfinite") output = &f;
  }
  ASSERT_TRUE(model && output) << s.report["findings"].dump(1);
  EXPECT_EQ((*model)["evidence"]["parameters"], Json::parse("[\"3.weight\"]"));
  EXPECT_EQ((*model)["evidence"]["buffers"], Json::array());
  // One value of a linear layer's weight: every prediction goes through that unit.
  EXPECT_NE((*model)["message"].get<std::string>().find("1 parameter (3.weight: 1 of 24 values, in row 1)"), std::string::npos)
      << (*model)["message"];
  EXPECT_NE((*model)["message"].get<std::string>().find("every prediction computed with them is NaN, whatever the batch"),
            std::string::npos)
      << (*model)["message"];
  EXPECT_TRUE((*model)["batch"].is_null());
  std::set<uint64_t> loop;
  for (const auto& b : t["nan_batches"]) loop.insert(b.get<uint64_t>());
  EXPECT_EQ(scan_failures(s.report, "output-nonfinite"), loop);
  EXPECT_EQ((*output)["root_cause"]["kind"], "model");
  EXPECT_EQ((*output)["root_cause"]["parameters"], Json::parse("[\"3.weight\"]"));
  EXPECT_NE((*output)["message"].get<std::string>().find("root cause: the model's own weights hold NaN or Inf as loaded (3.weight)"),
            std::string::npos)
      << (*output)["message"];
}
