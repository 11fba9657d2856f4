// The fix builders, case by case: every replay finding gets exactly the fixes that are
// right for its case, never one that is already applied or that changes nothing.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/findings/findings.h"
#include "core/findings/fixes.h"

using namespace batchcheck;

namespace {

struct LoaderCase {
  uint64_t samples = 1041, batch_size = 8, world_size = 1;
  bool drop_last = false;
  LossType loss = LossType::Bce;
};

Geometry geometry(const LoaderCase& s) {
  LoaderSpec spec;
  spec.samples = s.samples;
  spec.batch_size = s.batch_size;
  spec.world_size = s.world_size;
  spec.drop_last = s.drop_last;
  return compute_geometry(spec);
}

struct Case {
  const char* name;
  LoaderCase setup;
  const char* id;
  uint64_t batch_size;              // evidence.batch_size: the failing batch's size
  std::optional<uint64_t> batch;    // nullopt: a probe
  Severity severity;
  nlohmann::ordered_json evidence;  // merged over {"batch_size": batch_size}
  std::vector<std::string> fixes;   // the exact fix ids, in order
};

std::vector<std::string> fix_ids(const Case& c, Finding* out = nullptr) {
  Geometry g = geometry(c.setup);
  Finding f;
  f.id = c.id;
  f.severity = c.severity;
  f.batch = c.batch;
  f.probe = !c.batch;
  f.probe_size = c.batch ? 0 : c.batch_size;
  f.evidence = c.evidence.is_null() ? nlohmann::ordered_json::object() : c.evidence;
  f.evidence["batch_size"] = c.batch_size;
  f.samples = {1040};
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = c.setup.loss;
  ctx.batch_indices = {1040};
  attach_fixes(f, ctx);
  std::vector<std::string> ids;
  for (const auto& fix : f.fixes) ids.push_back(fix.id);
  if (out) *out = f;
  return ids;
}

using V = std::vector<std::string>;
using J = nlohmann::ordered_json;

}  // namespace

TEST(Fixes, EveryFindingGetsTheFixesForItsCase) {
  const LoaderCase seed;                               // 1041 at 8: a tail of one
  const LoaderCase no_tail{1040, 8, 1, false};          // every batch full
  const LoaderCase dropped{1041, 8, 1, true};           // drop_last already set
  const LoaderCase ce{1041, 8, 1, false, LossType::CrossEntropy};
  const LoaderCase mse{1041, 8, 1, false, LossType::Mse};
  const LoaderCase step{1041, 8, 1, false, LossType::Step};
  const std::vector<Case> cases = {
      {"bn on the tail", seed, "batchnorm-single-value", 1, 130, Severity::Error, {},
       V{"drop-last", "batch-size-divisor", "groupnorm-instead-of-batchnorm", "reproduce"}},
      {"bn probe, loader never makes a batch of one", no_tail, "batchnorm-single-value", 1, std::nullopt,
       Severity::Warning, {}, V{"groupnorm-instead-of-batchnorm", "reproduce"}},
      {"bn probe with drop_last already set", dropped, "batchnorm-single-value", 1, std::nullopt, Severity::Warning, {},
       V{"groupnorm-instead-of-batchnorm", "reproduce"}},
      {"bn mid-epoch (not the tail)", seed, "batchnorm-single-value", 8, 3, Severity::Error, {},
       V{"groupnorm-instead-of-batchnorm", "reproduce"}},
      {"view(8, -1) on the tail", seed, "hardcoded-batch-size", 1, 130, Severity::Error, {},
       V{"dynamic-batch-dim", "explicit-squeeze-dim", "drop-last", "batch-size-divisor", "reproduce"}},
      {"squeeze ate the batch dim", seed, "batch-dim-mismatch", 1, 130, Severity::Error, {},
       V{"explicit-squeeze-dim", "dynamic-batch-dim", "drop-last", "batch-size-divisor", "reproduce"}},
      {"bce target needs a channel dim", seed, "shape-mismatch", 8, 0, Severity::Error,
       J{{"output_shape", {8, 1, 4, 4}}, {"target_shape", {8, 4, 4}}}, V{"reshape-target", "reproduce"}},
      {"ce masks stored (N,1,H,W)", ce, "shape-mismatch", 8, 0, Severity::Error,
       J{{"output_shape", {8, 3, 4, 4}}, {"target_shape", {8, 1, 4, 4}}}, V{"reshape-target", "reproduce"}},
      {"baked-in batch size: no target fix", seed, "shape-mismatch", 1, 130, Severity::Error,
       J{{"output_shape", {8, 1}}, {"target_shape", {1, 1}}}, V{"drop-last", "batch-size-divisor", "reproduce"}},
      {"bce prediction out of range", seed, "output-out-of-range", 8, 4, Severity::Error, {},
       V{"bce-with-logits", "clamp-predictions", "reproduce"}},
      {"bce NaN prediction on the tail", seed, "output-nonfinite", 1, 130, Severity::Error, {},
       V{"bce-with-logits", "drop-last", "batch-size-divisor", "reproduce"}},
      {"mse NaN prediction", mse, "output-nonfinite", 8, 2, Severity::Error, {}, V{"reproduce"}},
      {"class 255", ce, "target-out-of-range", 8, 2, Severity::Error, J{{"classes", 3}, {"offending_values", {255}}},
       V{"ignore-index", "remap-labels"}},
      // Label 10 of 10 classes: numbered from 1; ignoring it would drop those samples silently.
      {"class 10 of 10: the remap first", ce, "target-out-of-range", 8, 2, Severity::Error,
       J{{"classes", 10}, {"offending_values", {10}}}, V{"remap-labels", "ignore-index"}},
      // A class index inside the user's step (a T5's flattened labels): the cross_entropy family's
      // fixes, never BCE's clamp into [0, 1], which would destroy every label.
      {"a class index inside a step", step, "target-out-of-range", 8, 2, Severity::Error,
       J{{"index_fault", {{"op", "aten::cross_entropy_loss"}, {"what", "class index"}, {"value", 200}, {"classes", 100}}}},
       V{"ignore-index", "remap-labels"}},
      {"soft labels out of range: no ignore_index", ce, "target-out-of-range", 8, 2, Severity::Error,
       J{{"max", 1.5}}, V{"normalize-soft-targets"}},
      {"bce 0..255 masks", seed, "target-out-of-range", 8, 2, Severity::Error, J{{"max", 255}},
       V{"scale-targets", "clamp-targets"}},
      // A label of 2.0 among 0/1 labels is no 8-bit mask: dividing by 255 would turn every 1.0 into 0.004.
      {"bce label 2.0", seed, "target-out-of-range", 8, 2, Severity::Error, J{{"max", 2}, {"min", 0}},
       V{"correct-targets", "clamp-targets"}},
      {"int targets for bce", seed, "target-dtype", 8, 0, Severity::Error, {}, V{"cast-target"}},
      {"NaN input", seed, "input-nonfinite", 8, 5, Severity::Error, {}, V{"clean-data"}},
      {"NaN loss", seed, "loss-nonfinite", 8, 5, Severity::Error, {}, V{"reproduce"}},
      {"in-place op in backward", seed, "backward-error", 8, 0, Severity::Error, {}, V{"reproduce"}},
      {"NaN gradients", seed, "gradient-nonfinite", 8, 0, Severity::Error, {}, V{"clip-and-find", "reproduce"}},
      {"traced in eval, scanned in train", seed, "trace-mode-mismatch", 0, std::nullopt, Severity::Warning, {},
       V{"trace-in-scan-mode", "script-instead"}},
      {"float64 inputs", seed, "forward-error", 8, 0, Severity::Error, J{{"cause", "input-dtype"}},
       V{"cast-inputs", "reproduce"}},
      {"ragged samples through default_collate", seed, "collate-error", 8, 3, Severity::Error,
       J{{"field", "inputs"}, {"collate", "default"}}, V{"pad-collate-variable-length", "reproduce"}},
      {"pad_sequence on unequal trailing dims", seed, "collate-error", 8, 3, Severity::Error,
       J{{"field", "inputs"}, {"collate", "pad"}}, V{"same-trailing-dims", "reproduce"}},
  };
  for (const auto& c : cases) EXPECT_EQ(fix_ids(c), c.fixes) << c.name;
}

// A NaN prediction the localizer traced to the model's input: BCEWithLogitsLoss cannot remove a
// NaN from the data; cleaning the data leads.
TEST(Fixes, ANanPredictionFromTheInputLeadsWithCleaningTheData) {
  const LoaderCase no_tail{1040, 8, 1, false};
  Geometry g = geometry(no_tail);
  Finding f;
  f.id = "output-nonfinite";
  f.severity = Severity::Error;
  f.batch = 3;
  f.evidence = {{"batch_size", 8}};
  f.root_cause = {{"kind", "input"}, {"name", "x"}};
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = LossType::Bce;
  attach_fixes(f, ctx);
  ASSERT_FALSE(f.fixes.empty());
  EXPECT_EQ(f.fixes[0].id, "clean-data");
  for (const auto& fix : f.fixes) EXPECT_NE(fix.id, "bce-with-logits");
}

TEST(Fixes, ImagesOfTwoSizesAreResizedSequencesOfTwoLengthsPadded) {
  // Samples that differ past their first dimension: one size in the Dataset's transform, from the
  // samples' shapes or from torch.stack's own words; lengths alone: padding only.
  const LoaderCase seed;
  const J images = J::array({J{{"shape", {3, 64, 64}}, {"count", 7}}, J{{"shape", {3, 32, 32}}, {"count", 1}}});
  const J lengths = J::array({J{{"shape", {12, 8}}, {"count", 5}}, J{{"shape", {9, 8}}, {"count", 3}}});
  const J stacked = "stack expects each tensor to be equal size, but got [3, 64, 64] at entry 0 and [3, 32, 32] at entry 3";
  Finding f;
  EXPECT_EQ(fix_ids({"shapes", seed, "collate-error", 8, 3, Severity::Error,
                     J{{"field", "inputs"}, {"collate", "default"}, {"sample_shapes", images}}, {}}, &f),
            (V{"resize-samples", "pad-collate-variable-length", "reproduce"}));
  EXPECT_EQ(f.fixes[0].code, "transforms.Resize((64, 64))  # first in the transform; torchvision.transforms");
  EXPECT_EQ(fix_ids({"words", seed, "collate-error", 8, 3, Severity::Error,
                     J{{"field", "inputs"}, {"collate", "default"}, {"error", stacked}}, {}}),
            (V{"resize-samples", "pad-collate-variable-length", "reproduce"}));
  EXPECT_EQ(fix_ids({"lengths", seed, "collate-error", 8, 3, Severity::Error,
                     J{{"field", "inputs"}, {"collate", "default"}, {"sample_shapes", lengths}}, {}}),
            (V{"pad-collate-variable-length", "reproduce"}));
}

TEST(Fixes, PadCollateFixIsTheConfigBatchcheckThenChecks) {
  const LoaderCase seed;
  Finding f;
  fix_ids({"targets", seed, "collate-error", 8, 3, Severity::Error, J{{"field", "targets"}, {"collate", "default"}}, {}}, &f);
  EXPECT_EQ(f.fixes[0].code,
            "DataLoader(..., collate_fn=lambda b: (default_collate([x for x, _ in b]), pad_sequence([y for _, y in b], "
            "batch_first=True, padding_value=-100)))  # batchcheck config: \"loader\": {\"collate\": {\"pad\": "
            "{\"targets\": -100}}}");
  EXPECT_EQ(f.fixes[0].tradeoff, "the padding value must be ignored by the loss (ignore_index=-100)");
}

TEST(Fixes, InplaceBackwardErrorNamesTheOutOfPlaceFix) {
  Case c{"inplace", LoaderCase{}, "backward-error", 8, 0, Severity::Error, {}, {}};
  Geometry g = geometry(c.setup);
  Finding f;
  f.id = c.id;
  f.batch = 0;
  f.message = "loss.backward() raised: one of the variables needed for gradient computation has been modified by an inplace operation";
  f.evidence["batch_size"] = 8;
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = LossType::Bce;
  ctx.batch_indices = {0, 1, 2, 3, 4, 5, 6, 7};
  attach_fixes(f, ctx);
  ASSERT_EQ(f.fixes.size(), 2u);
  EXPECT_EQ(f.fixes[0].id, "out-of-place");
  EXPECT_EQ(f.fixes[1].code,
            "import torch\nfrom torch import nn\nfrom torch.utils.data import default_collate\nidx = range(0, 8)\n"
            "x, y = default_collate([dataset[i] for i in idx])\nmodel.train(True)\nout = model(x)\n"
            "loss = nn.BCELoss()(out, y)\nloss.backward()\n");
}

// A step's loss that backward() refuses: the fix that makes training's backward run leads.
TEST(Fixes, AStepLossBackwardRefusesLeadsWithTheLossFix) {
  const std::pair<std::string, std::string> cases[] = {
      {"grad can be implicitly created only for scalar outputs", "reduce-loss"},
      {"element 0 of tensors does not require grad and does not have a grad_fn", "return-loss-tensor"}};
  for (const auto& [error, fix] : cases) {
    Case c{"step-loss", LoaderCase{}, "backward-error", 8, 0, Severity::Error, {}, {}};
    Geometry g = geometry(c.setup);
    Finding f;
    f.id = c.id;
    f.batch = 0;
    f.message = "loss.backward() raised on a batch of 8 samples (forward and loss succeeded): " + error;
    FixContext ctx;
    ctx.geometry = &g;
    ctx.loss.type = LossType::Step;
    ctx.batch_indices = {0, 1, 2, 3, 4, 5, 6, 7};
    attach_fixes(f, ctx);
    ASSERT_GE(f.fixes.size(), 1u) << error;
    EXPECT_EQ(f.fixes[0].id, fix) << error;
  }
  Finding f;
  f.id = "backward-error";
  f.message = "loss.backward() raised: grad can be implicitly created only for scalar outputs";
  FixContext ctx;
  LoaderCase s;
  Geometry g = geometry(s);
  ctx.geometry = &g;
  ctx.loss.type = LossType::Step;
  attach_fixes(f, ctx);
  EXPECT_EQ(f.fixes[0].code, "return loss.mean()  # a per-sample loss (reduction=\"none\"): backward() takes one number");
}

TEST(Fixes, ReproduceUsesTheWholeFailingBatchTheModeAndTheLossOptions) {
  LoaderCase s{1041, 8, 1, false, LossType::CrossEntropy};
  Geometry g = geometry(s);
  Finding f;
  f.id = "loss-nonfinite";
  f.batch = 7;
  f.samples = {61};  // the bad sample: reproduce still feeds the whole batch
  f.evidence["batch_size"] = 3;
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = LossType::CrossEntropy;
  ctx.loss.ignore_index = 255;
  ctx.loss.reduction = Reduction::Sum;
  ctx.mode = Mode::Eval;
  ctx.output = std::string("out");
  ctx.batch_indices = {60, 61, 9};
  attach_fixes(f, ctx);
  ASSERT_FALSE(f.fixes.empty());
  EXPECT_EQ(f.fixes.back().code,
            "import torch\nfrom torch import nn\nfrom torch.utils.data import default_collate\nidx = [60, 61, 9]\n"
            "x, y = default_collate([dataset[i] for i in idx])\nmodel.train(False)\nout = model(x)[\"out\"]\n"
            "loss = nn.CrossEntropyLoss(ignore_index=255, reduction='sum')(out, y)\n");
  EXPECT_EQ(f.fixes.back().title, "reproduce it in Python on the same samples (batch 7)");
}

// A shuffled batch of 128: the code lists every index, 16 to a line, so that it runs as pasted
// (no reference to the report's objects); the fix carries them as data too.
TEST(Fixes, ReproduceOfALongShuffledBatchListsItsIndicesInTheCode) {
  LoaderCase s{1041, 128, 1, false, LossType::CrossEntropy};
  Geometry g = geometry(s);
  Finding f;
  f.id = "loss-nonfinite";
  f.batch = 3;
  f.evidence["batch_size"] = 128;
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = LossType::CrossEntropy;
  for (int64_t i = 0; i < 128; ++i) ctx.batch_indices.push_back((i * 37) % 1041);
  attach_fixes(f, ctx);
  const Fix& r = f.fixes.back();
  ASSERT_EQ(r.id, "reproduce");
  EXPECT_EQ(r.code.rfind("import torch\nfrom torch import nn\nfrom torch.utils.data import default_collate\nidx = [\n"
                         "    0, 37, 74, 111, 148, 185, 222, 259, 296, 333, 370, 407, 444, 481, 518, 555,\n    592, ",
                         0),
            0u)
      << r.code;
  EXPECT_NE(r.code.find(",\n]\nx, y = default_collate([dataset[i] for i in idx])\n"), std::string::npos) << r.code;
  EXPECT_EQ(r.code.find("fix["), std::string::npos);
  EXPECT_EQ(r.indices, ctx.batch_indices);
  // A run of consecutive indices stays inline as a range.
  ctx.batch_indices.clear();
  for (int64_t i = 256; i < 384; ++i) ctx.batch_indices.push_back(i);
  Finding g2 = f;
  g2.fixes.clear();
  attach_fixes(g2, ctx);
  EXPECT_NE(g2.fixes.back().code.find("idx = range(256, 384)\n"), std::string::npos);
}

// batchcheck.scan() says how forward is called on the batch as the loader yields it: a dict
// by keyword, the prediction selected, the targets by their key; a loss given as a callable is
// the user's `loss_fn`, not a `step` they do not have.
// The fix names the normalization the model has: a BatchNorm1d is not told it is a BatchNorm2d.
TEST(Fixes, GroupNormNamesTheModuleThatRaised) {
  LoaderCase s{17, 8, 1, false, LossType::CrossEntropy};
  Geometry g = geometry(s);
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = LossType::CrossEntropy;
  Finding f;
  f.id = "batchnorm-single-value";
  f.batch = 2;
  f.evidence = {{"batch_size", 1}, {"module", "head.1"}, {"module_type", "BatchNorm1d"}};
  attach_fixes(f, ctx);
  const auto it = std::find_if(f.fixes.begin(), f.fixes.end(), [](const Fix& x) { return x.id == "groupnorm-instead-of-batchnorm"; });
  ASSERT_NE(it, f.fixes.end());
  EXPECT_EQ(it->code, "nn.GroupNorm(num_groups, num_channels)  # instead of nn.BatchNorm1d(num_channels) at \"head.1\"");
  f.fixes.clear();
  f.evidence = {{"batch_size", 1}};
  attach_fixes(f, ctx);
  EXPECT_NE(f.fixes[f.fixes.size() - 2].code.find("instead of nn.BatchNorm(num_channels)"), std::string::npos);
}

TEST(Fixes, ReproduceCallsForwardAsTheScanDid) {
  LoaderCase s{40, 8, 1, false, LossType::CrossEntropy};
  Geometry g = geometry(s);
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = LossType::CrossEntropy;
  ctx.collate_fn = "loader.collate_fn";
  ctx.batch_indices = {8, 9};
  ctx.call = {"model(input_ids=batch[\"input_ids\"])", "out[\"logits\"]", "batch[\"labels\"]", ""};
  Finding f;
  f.id = "loss-nonfinite";
  f.batch = 1;
  f.evidence["batch_size"] = 8;
  attach_fixes(f, ctx);
  EXPECT_EQ(f.fixes.back().code,
            "import torch\nfrom torch import nn\nidx = [8, 9]\nbatch = loader.collate_fn([dataset[i] for i in idx])\n"
            "model.train(True)\nout = model(input_ids=batch[\"input_ids\"])\nout = out[\"logits\"]\n"
            "loss = nn.CrossEntropyLoss()(out, batch[\"labels\"])\n");
  EXPECT_EQ(f.fixes.back().tradeoff, "needs your Dataset object as `dataset` and the model as `model` and your DataLoader as `loader`");
  ctx.loss.type = LossType::Step;
  ctx.call = {"model(*batch[:-1])", "", "batch[-1]", "loss_fn"};
  Finding h;
  h.id = "loss-nonfinite";
  h.batch = 1;
  h.evidence["batch_size"] = 8;
  attach_fixes(h, ctx);
  EXPECT_EQ(h.fixes.back().code,
            "import torch\nfrom torch import nn\nidx = [8, 9]\nbatch = loader.collate_fn([dataset[i] for i in idx])\n"
            "model.train(True)\nout = model(*batch[:-1])\nloss = loss_fn(out, batch[-1])\n");
  EXPECT_NE(h.fixes.back().tradeoff.find("your loss object as `loss_fn`"), std::string::npos);
  // A scan in float16 ran forward and the loss under its autocast: the reproduce does too, so a
  // half overflow shows; backward stays outside it, as in an AMP loop.
  ctx.autocast_dtype = "float16";
  Finding k = h;
  k.id = "backward-error";
  k.fixes.clear();
  attach_fixes(k, ctx);
  EXPECT_EQ(k.fixes.back().code,
            "import torch\nfrom torch import nn\nidx = [8, 9]\nbatch = loader.collate_fn([dataset[i] for i in idx])\n"
            "model.train(True)\nwith torch.autocast(\"cpu\", dtype=torch.float16):\n    out = model(*batch[:-1])\n"
            "    loss = loss_fn(out, batch[-1])\nloss.backward()\n");
}

// A region loss is the user's own object (MONAI's or smp's): the fixes name it so, and say
// what its constructor takes.
TEST(Fixes, RegionLossesNameTheUsersLossObject) {
  LoaderCase s{1041, 8, 1, false, LossType::Dice};
  Geometry g = geometry(s);
  FixContext ctx;
  ctx.geometry = &g;
  ctx.loss.type = LossType::Dice;
  ctx.loss.target_format = TargetFormat::Index;
  ctx.batch_indices = {8, 9};
  auto fixes = [&](const char* id, nlohmann::ordered_json ev) {
    Finding f;
    f.id = id;
    f.severity = Severity::Error;
    f.batch = 1;
    f.samples = {9};
    f.evidence = std::move(ev);
    f.evidence["batch_size"] = 8;
    attach_fixes(f, ctx);
    return f.fixes;
  };
  auto cls = fixes("target-out-of-range", {{"classes", 3}, {"offending_values", {255}}});
  ASSERT_EQ(cls.size(), 2u);
  EXPECT_EQ(cls[0].id, "ignore-index");
  EXPECT_EQ(cls[0].code, "loss_fn = DiceLoss(..., ignore_index=255)  # MONAI and smp both take it");
  auto shape = fixes("shape-mismatch", {{"output_shape", {8, 3, 4, 4}}, {"target_shape", {8, 4, 4}}});
  ASSERT_GE(shape.size(), 2u);
  EXPECT_EQ(shape[0].code, "target = target.unsqueeze(1)");
  EXPECT_EQ(shape.back().code,
            "import torch\nfrom torch import nn\nfrom torch.utils.data import default_collate\nidx = [8, 9]\n"
            "x, y = default_collate([dataset[i] for i in idx])\nmodel.train(True)\nout = model(x)\nloss = loss_fn(out, y)\n");
  EXPECT_EQ(shape.back().tradeoff, "needs your Dataset object as `dataset` and the model as `model`, and your loss object as `loss_fn`");
  ctx.loss.activation = Activation::None;
  ctx.loss.target_format = TargetFormat::Mask;
  auto out = fixes("output-out-of-range", {{"min", -3.5}, {"max", 4}});
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].id, "loss-activation");
  // MONAI's DiceCELoss takes no ignore_index: only the remap is offered.
  ctx.loss.type = LossType::DiceCe;
  ctx.loss.target_format = TargetFormat::Index;
  auto ce = fixes("target-out-of-range", {{"classes", 3}, {"offending_values", {255}}});
  ASSERT_EQ(ce.size(), 1u);
  EXPECT_EQ(ce[0].id, "remap-labels");
}

TEST(Fixes, AClassIndexInAStepGetsTheLossFunctionsFixesWithTheirCode) {
  const LoaderCase s{1041, 8, 1, false, LossType::Step};
  Finding f;
  ASSERT_EQ(fix_ids({"", s, "target-out-of-range", 8, 2, Severity::Error,
                     J{{"index_fault", {{"op", "aten::nll_loss"}, {"what", "class index"}, {"value", 10}, {"classes", 10}}}}, {}},
                    &f),
            (V{"remap-labels", "ignore-index"}));
  EXPECT_EQ(f.fixes[0].code, "target = target - 1  # where the dataset numbers its 10 classes from 1; else target[target == 10] = <class>");
  EXPECT_EQ(f.fixes[1].code, "F.nll_loss(..., ignore_index=10)");
  EXPECT_EQ(f.fixes[1].tradeoff, "samples or pixels labelled 10 stop contributing to the loss: they are silently dropped from training");
}

TEST(Fixes, ALabelEqualToTheClassesIsShiftedOnlyWhereTheLabelsStartAtOne) {
  const LoaderCase s{1041, 8, 1, false, LossType::Step};
  Finding f;
  // Labels seen from 1: the off-by-one, shifted first.
  const J from_one = {{"index_fault", {{"op", "aten::nll_loss"}, {"what", "class index"}, {"value", 2}, {"classes", 2}, {"smallest", 1}}}};
  EXPECT_EQ(fix_ids({"", s, "forward-error", 8, 2, Severity::Error, from_one, {}}), (V{"remap-labels", "ignore-index", "reproduce"}));
  // Labels seen from 0 (a UNet's mask 0/1/2 against 2 classes): target - 1 would make -1, so the
  // head one class short leads, and the remap names the value, not a shift.
  const J from_zero = {{"index_fault", {{"op", "aten::nll_loss"}, {"what", "class index"}, {"value", 2}, {"classes", 2}, {"smallest", 0}}}};
  ASSERT_EQ(fix_ids({"", s, "forward-error", 8, 2, Severity::Error, from_zero, {}}, &f),
            (V{"more-classes", "remap-labels", "ignore-index", "reproduce"}));
  EXPECT_EQ(f.fixes[0].code, "nn.Linear(in_features, 3)  # the last layer; n_classes=3 where the model takes it");
  EXPECT_EQ(f.fixes[1].code, "target[target == 2] = <class>  # labels run 0..2: 3 classes, or 2 is not a class");
  // The engine's own target check: the batch's smallest target, from its value statistics.
  const LoaderCase ce{1041, 8, 1, false, LossType::CrossEntropy};
  EXPECT_EQ(fix_ids({"", ce, "target-out-of-range", 8, 2, Severity::Error,
                     J{{"classes", 2}, {"min", 0}, {"max", 2}, {"offending_values", {2}}}, {}})[0],
            "more-classes");
}

TEST(Fixes, ATokenIdPastTheEmbeddingGetsTheVocabularysFixes) {
  const LoaderCase s{1041, 8, 1, false, LossType::Step};
  Finding f;
  const J past = {{"index_fault", {{"op", "aten::embedding"}, {"module", "src_embedding"}, {"what", "token id"}, {"value", 300},
                                   {"num_embeddings", 300}}}};
  ASSERT_EQ(fix_ids({"", s, "forward-error", 8, 2, Severity::Error, past, {}}, &f),
            (V{"resize-embeddings", "map-unknown-ids", "check-vocab-size", "reproduce"}));
  // What makes the loop train first; the check (an assert that trains nothing) is the evidence after.
  EXPECT_EQ(f.fixes[0].title, "make the embedding src_embedding as large as the vocabulary");
  EXPECT_EQ(f.fixes[1].code, "ids = ids.masked_fill(ids >= 300, unk_id)");
  const J negative = {{"index_fault", {{"op", "aten::embedding"}, {"what", "token id"}, {"value", -100}, {"num_embeddings", 300}}}};
  EXPECT_EQ(fix_ids({"", s, "forward-error", 8, 2, Severity::Error, negative, {}}), (V{"map-negative-ids", "reproduce"}));
}

TEST(Fixes, AClassIndexInsideForwardGetsTheLossFunctionsFixesNotAValueRanges) {
  // minGPT's loss inside forward (loss="model"): the forward error carries the op's fault.
  const LoaderCase s{1041, 8, 1, false, LossType::Model};
  Finding f;
  const J past = {{"index_fault", {{"op", "aten::cross_entropy_loss"}, {"what", "class index"}, {"value", 53}, {"classes", 50}}}};
  ASSERT_EQ(fix_ids({"", s, "forward-error", 8, 2, Severity::Error, past, {}}, &f), (V{"ignore-index", "remap-labels", "reproduce"}));
  // The user passes no ignore_index to a loss inside forward: the label becomes -100 instead.
  EXPECT_EQ(f.fixes[0].code, "labels = labels.masked_fill(labels == 53, -100)  # before forward: its loss ignores -100 (cross_entropy's default)");
  EXPECT_EQ(f.fixes[1].code, "target[target == 53] = <class>");
  const J off_by_one = {{"index_fault", {{"op", "aten::nll_loss_nd"}, {"what", "class index"}, {"value", 50}, {"classes", 50}}}};
  ASSERT_EQ(fix_ids({"", s, "forward-error", 8, 2, Severity::Error, off_by_one, {}}, &f), (V{"remap-labels", "ignore-index", "reproduce"}));
  EXPECT_EQ(f.fixes[1].code, "labels = labels.masked_fill(labels == 50, -100)  # before forward: its loss ignores -100 (cross_entropy's default)");
  // The user's own step calls the loss: there ignore_index is theirs to pass.
  const LoaderCase step{1041, 8, 1, false, LossType::Step};
  ASSERT_EQ(fix_ids({"", step, "forward-error", 8, 2, Severity::Error, off_by_one, {}}, &f), (V{"remap-labels", "ignore-index", "reproduce"}));
  EXPECT_EQ(f.fixes[1].code, "F.nll_loss(..., ignore_index=50)");
}

// gather's index past its dimension (a DQN's action 2 against a Q-head of 2): the head widened
// first, the data filtered after.
TEST(Fixes, AnIndexPastTheDimensionGatherReadsWidensTheLayerOrFiltersTheRows) {
  const LoaderCase s{1000, 128, 1, false, LossType::Step};
  Finding f;
  const J past = {{"index_fault", {{"op", "aten::gather"}, {"what", "index"}, {"value", 2}, {"size", 2}}}};
  ASSERT_EQ(fix_ids({"", s, "forward-error", 128, 6, Severity::Error, past, {}}, &f), (V{"more-outputs", "filter-indices", "reproduce"}));
  EXPECT_EQ(f.fixes[0].code, "nn.Linear(in_features, 3)  # was 2; e.g. env.action_space.n");
  const J negative = {{"index_fault", {{"op", "aten::gather"}, {"what", "index"}, {"value", -1}, {"size", 2}}}};
  EXPECT_EQ(fix_ids({"", s, "forward-error", 128, 6, Severity::Error, negative, {}}), (V{"filter-indices", "reproduce"}));
}

// A class index given to a loss inside an installed library's forward (torchvision's detection
// heads, in the user's step): the model's classes widened first, no ignore_index to pass.
TEST(Fixes, AClassIndexInsideALibrarysLossWidensTheModel) {
  const LoaderCase s{8, 2, 1, false, LossType::Step};
  Finding f;
  const J lib = {{"index_fault", {{"op", "aten::cross_entropy_loss"}, {"what", "class index"}, {"value", 5}, {"classes", 3},
                                  {"location", "File \"/usr/lib/python3/dist-packages/torchvision/models/detection/roi_heads.py\", line 38"}}}};
  ASSERT_EQ(fix_ids({"", s, "target-out-of-range", 2, 3, Severity::Error, lib, {}}, &f), (V{"more-classes", "remap-labels"}));
  EXPECT_EQ(f.fixes[0].code, "model = ...(num_classes=6)  # torchvision's detection models count the background");
  // Called from the library's own line, the user's step the location: the same.
  const J called = {{"index_fault", {{"op", "aten::cross_entropy_loss"}, {"what", "class index"}, {"value", 5}, {"classes", 3},
                                     {"location", "File \"train.py\", line 12"}, {"called_from", "roi_heads.py, line 38"}}}};
  EXPECT_EQ(fix_ids({"", s, "target-out-of-range", 2, 3, Severity::Error, called, {}}), (V{"more-classes", "remap-labels"}));
}

TEST(Fixes, AHalfOverflowInBfloat16IsNotToldToTrainInBfloat16) {
  // bfloat16 has float32's range: its overflow (a precision loss made an Inf) keeps the other fixes.
  const nlohmann::ordered_json op = {{"op", "aten::log"}, {"module", "head"}};
  Case fp16{"fp16", {}, "half-overflow", 8, 3, Severity::Error,
            {{"op", op}, {"fp32_max", 7e4}, {"dtype", "float16"}}, {}};
  EXPECT_EQ(fix_ids(fp16), (std::vector<std::string>{"use-bf16", "fp32-module", "scale-inputs", "reproduce"}));
  Case bf16{"bf16", {}, "half-overflow", 8, 3, Severity::Error,
            {{"op", op}, {"fp32_max", -16.6}, {"dtype", "bfloat16"}}, {}};
  EXPECT_EQ(fix_ids(bf16), (std::vector<std::string>{"fp32-module", "scale-inputs", "reproduce"}));
}

TEST(Fixes, DivisorFixUsesTheNearestDivisor) {
  LoaderCase s{6000, 32};
  Fix d = fix_batch_size_divisor(geometry(s));
  EXPECT_EQ(d.code, "DataLoader(..., batch_size=30)");  // not 25: 30 divides 6000 and is nearer to 32
}

TEST(Fixes, NoTradeoffReadsNone) {
  for (const char* id : {"hardcoded-batch-size", "batch-dim-mismatch", "target-dtype", "shape-mismatch"}) {
    Case c{id, LoaderCase{}, id, 1, 130, Severity::Error, J{{"output_shape", {1}}, {"target_shape", {1, 1}}}, {}};
    Finding f;
    fix_ids(c, &f);
    for (const auto& fix : f.fixes) {
      EXPECT_NE(fix.tradeoff, "none") << id << " " << fix.id;
      EXPECT_EQ(fix.tradeoff.rfind("none", 0), std::string::npos) << id << " " << fix.id << ": " << fix.tradeoff;
      EXPECT_EQ(fix.tradeoff.find("drops 0 "), std::string::npos) << id << " " << fix.id;
    }
  }
}

TEST(Fixes, PadCollateIsCompletePython) {
  Fix f = fix_pad_collate(geometry(LoaderCase{}), LossType::Bce);
  EXPECT_NE(f.code.find("def pad_to_batch_size(batch, size=8):"), std::string::npos) << f.code;
  EXPECT_NE(f.code.find("DataLoader(..., collate_fn=pad_to_batch_size)"), std::string::npos) << f.code;
}

TEST(Fixes, PythonIndices) {
  EXPECT_EQ(python_indices({4, 5, 6}), "range(4, 7)");
  EXPECT_EQ(python_indices({4, 5}), "[4, 5]");
  EXPECT_EQ(python_indices({9, 1, 2}), "[9, 1, 2]");
  EXPECT_EQ(loss_constructor(LossConfig{}), "");
  LossConfig l;
  l.type = LossType::BceWithLogits;
  l.pos_weight = {3};
  EXPECT_EQ(loss_constructor(l), "nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3]))");
}
