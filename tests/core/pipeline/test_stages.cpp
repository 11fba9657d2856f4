// The forward, loss and backward stages' findings from fixed results: the exact messages a
// user reads, the evidence, and which failures lose the device.
#include <gtest/gtest.h>

#include <cmath>

#include "core/pipeline/collate_stage.h"
#include "core/pipeline/forward_stage.h"
#include "core/pipeline/loss_stage.h"
#include "core/pipeline/post_stage.h"
#include "core/pipeline/value_findings.h"

using namespace batchcheck;

namespace {
ForwardResult raised(const std::string& error) {
  ForwardResult f;
  f.error = error;
  return f;
}
}  // namespace

TEST(ForwardStage, ClassifiesAndSaysWhatTheUserMustKnow) {
  ForwardFailureContext ctx;
  ctx.batch_size = 1;
  ctx.largest_ok_batch = 8;
  Emitted e = forward_failure(raised("shape '[8, -1]' is invalid for input of size 12"), ctx);
  EXPECT_EQ(e.id, "hardcoded-batch-size");
  EXPECT_EQ(e.stage, "forward");
  EXPECT_EQ(e.message, "forward runs at batch size 8 but fails at 1 with a shape error: shape '[8, -1]' is invalid for input of size 12");
  EXPECT_EQ(e.evidence["largest_ok_batch_size"], 8);
  EXPECT_EQ(e.rows, std::vector<uint64_t>{0});
  EXPECT_EQ(e.total, 1u);

  ctx.batchnorm_modules = {"bn1", "layer1.0.bn1"};
  e = forward_failure(raised("Expected more than 1 value per channel when training, got input size [1, 8]"), ctx);
  EXPECT_EQ(e.id, "batchnorm-single-value");
  EXPECT_EQ(e.message, "BatchNorm saw one value per channel in train mode on a batch of 1 sample: Expected more than 1 value "
                       "per channel when training, got input size [1, 8]");
  EXPECT_EQ(e.evidence["batchnorm_modules"], nlohmann::ordered_json::array({"bn1", "layer1.0.bn1"}));

  ctx = {};
  ctx.batch_size = 4;
  ctx.input_dtype = "float64";
  e = forward_failure(raised("expected scalar type Double but found Float"), ctx);
  EXPECT_EQ(e.evidence["cause"], "input-dtype");
  EXPECT_EQ(e.message, "the inputs are float64 but the model computes in float32; forward raised on a batch of 4 samples: "
                       "expected scalar type Double but found Float");
  EXPECT_FALSE(e.evidence.contains("largest_ok_batch_size")) << "no forward has succeeded yet";

  ForwardResult f = raised("index out of range in self");
  f.location = "model.py, line 7";
  e = forward_failure(f, ctx);
  EXPECT_EQ(e.id, "forward-error");
  EXPECT_EQ(e.message, "forward raised on a batch of 4 samples: index out of range in self");
  EXPECT_EQ(e.evidence["location"], "model.py, line 7");
  EXPECT_EQ(e.cuda, "Assertion `srcIndex < srcSelectDimSize` failed.");
  EXPECT_EQ(e.rows, (std::vector<uint64_t>{0, 1, 2, 3}));

  e = forward_failure(raised("CUDA error: device-side assert triggered"), ctx);
  EXPECT_EQ(e.id, "cuda-device-assert");
  EXPECT_NE(e.message.find("CUDA context is unusable after it (PyTorch cannot recover one), so batchcheck went on after this batch in a fresh process"), std::string::npos) << e.message;
}

TEST(ForwardStage, AnUncheckedBatchStaysUncheckedWhenTheScanIsAggregated) {
  // The aggregate reclassifies forward failures by the whole scan's largest batch; a batch no
  // capture could run was not run, and must not become "forward raised" with a tail fix.
  const Emitted e = unchecked_batch_finding("this batch (inputs [2, 4]) was not checked: its trace at this shape does not "
                                            "compute what your code does", 2);
  EXPECT_EQ(e.id, "batch-unchecked");
  EXPECT_FALSE(reclassify_forward_failure(e.id, e.evidence, 2, 4, {}));
  // A forward error of the same batch is reclassified as before (the largest batch now known).
  const Emitted raised_here = forward_failure(raised("shape '[4, -1]' is invalid for input of size 8"), ForwardFailureContext{2, 0, "", {}, false});
  EXPECT_TRUE(reclassify_forward_failure(raised_here.id, raised_here.evidence, 2, 4, {}));
}

TEST(LossStage, NonFiniteLossSaysWhyWhenEveryTargetIsIgnored) {
  LossConfig cfg;
  cfg.type = LossType::CrossEntropy;
  cfg.ignore_index = 255;
  LossResult ok;
  ok.ok = true;
  ok.value = 0.5;
  EXPECT_FALSE(loss_finding(ok, cfg, 4, nullptr));

  LossResult nan = ok;
  nan.value = std::numeric_limits<double>::quiet_NaN();
  nan.nonfinite = 1;
  ValueStats all_ignored;
  all_ignored.elements = all_ignored.ignored = 16;
  auto e = loss_finding(nan, cfg, 4, &all_ignored);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, "loss-nonfinite");
  EXPECT_EQ(e->message, "cross_entropy loss is nan: every target equals ignore_index 255, and the mean over zero elements is NaN");
  EXPECT_EQ(e->evidence["loss"], "nan");
  EXPECT_EQ(e->evidence["nonfinite_elements"], 1);
  ValueStats some = all_ignored;
  some.ignored = 15;
  EXPECT_EQ(loss_finding(nan, cfg, 4, &some)->message, "cross_entropy loss is nan");
  cfg.reduction = Reduction::Sum;
  EXPECT_EQ(loss_finding(nan, cfg, 4, &all_ignored)->message, "cross_entropy loss is nan") << "a sum over nothing is 0, not NaN";

  LossResult err;
  err.error = "Target 7 is out of bounds.";
  e = loss_finding(err, cfg, 2, nullptr);
  EXPECT_EQ(e->id, "loss-error");
  EXPECT_EQ(e->message, "cross_entropy raised: Target 7 is out of bounds.");
  EXPECT_EQ(e->rows, (std::vector<uint64_t>{0, 1}));
}

TEST(LossStage, TheModelsOwnLossNamesItsNonFiniteTerms) {
  LossConfig cfg;
  cfg.type = LossType::Model;
  LossResult nan;
  nan.ok = true;
  nan.elements = nan.nonfinite = 1;
  nan.value = std::numeric_limits<double>::quiet_NaN();
  nan.nonfinite_terms = {"loss_box_reg", "loss_rpn_box_reg"};
  auto e = loss_finding(nan, cfg, 4, nullptr);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, "loss-nonfinite");
  EXPECT_EQ(e->message, "the loss forward returned is nan (not finite: loss_box_reg, loss_rpn_box_reg)");
  EXPECT_EQ(e->evidence["nonfinite_terms"], nlohmann::ordered_json::parse(R"(["loss_box_reg", "loss_rpn_box_reg"])"));
}

TEST(BackwardStage, NamesTheFirstParametersAndCountsTheRest) {
  BackwardResult b;
  b.ok = true;
  EXPECT_FALSE(backward_finding(b, 8));
  b.nonfinite = {{"fc1.weight", 64, 64, 0}, {"fc1.bias", 8, 0, 8}, {"fc2.weight", 8, 4, 4}, {"fc2.bias", 1, 1, 0}};
  b.nonfinite_total = 4;
  auto e = backward_finding(b, 8);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, "gradient-nonfinite");
  EXPECT_EQ(e->message, "loss.backward() on a batch of 8 samples gave non-finite gradients to 4 parameters: fc1.weight "
                        "(64 NaNs), fc1.bias (8 Infs), fc2.weight (4 NaNs, 4 Infs) and 1 more; one optimizer step would write "
                        "NaN/Inf into the weights");
  EXPECT_EQ(e->evidence["nonfinite_parameters"], 4);
  EXPECT_EQ(e->evidence["parameters"].size(), 4u);

  BackwardResult failed;
  failed.error = "one of the variables needed for gradient computation has been modified by an inplace operation";
  e = backward_finding(failed, 8);
  EXPECT_EQ(e->id, "backward-error");
  EXPECT_EQ(e->message, "loss.backward() raised on a batch of 8 samples (forward and loss succeeded): one of the variables "
                        "needed for gradient computation has been modified by an inplace operation");
  failed.error = "CUDA error: device-side assert triggered";
  EXPECT_EQ(backward_finding(failed, 8)->id, "cuda-device-assert");
}

TEST(CollateStage, NamesTheCollateTheFieldAndTheShapes) {
  CollateFailure f;
  f.field = "inputs";
  f.error = "stack expects each tensor to be equal size, but got [5] at entry 0 and [7] at entry 2";
  f.shapes = {{{5}, 2}, {{7}, 1}, {{5, 2}, 1}};
  f.rows = {0, 2, 3};
  Emitted e = collate_finding(f);
  EXPECT_EQ(e.id, "collate-error");
  EXPECT_EQ(e.stage, "collate");
  EXPECT_EQ(e.message,
            "default_collate cannot put this batch's inputs together: stack expects each tensor to be equal size, but got "
            "[5] at entry 0 and [7] at entry 2; the samples' shapes: [5] x2, [7], [5, 2]; the DataLoader raises this at "
            "this batch (samples of unequal size need a padding collate_fn)");
  EXPECT_EQ(e.rows, (std::vector<uint64_t>{0, 2, 3}));
  EXPECT_EQ(e.total, 3u);
  EXPECT_EQ(e.evidence["collate"], "default");
  EXPECT_EQ(e.evidence["sample_shapes"][1]["shape"], nlohmann::ordered_json::parse("[7]"));

  // A padded field that still fails: pad_sequence's own message, no advice to pad.
  f.padded = true;
  f.error = "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 1";
  f.shapes = {{{4, 2}, 1}, {{6, 3}, 1}};
  f.rows = {0, 1};
  Emitted p = collate_finding(f);
  EXPECT_EQ(p.message, "pad_sequence cannot put this batch's inputs together: The size of tensor a (2) must match the "
                       "size of tensor b (3) at non-singleton dimension 1; the samples' shapes: [4, 2], [6, 3]");
  EXPECT_EQ(p.evidence["collate"], "pad");

  // The user's own collate_fn raised (batchcheck.scan()): its words, the rows that raise it alone.
  CollateFailure u;
  u.field = "batch";
  u.error = "'maybe' is not in list";
  u.users = true;
  u.rows = {5};
  Emitted y = collate_finding(u);
  EXPECT_EQ(y.message, "your collate_fn raised on this batch: 'maybe' is not in list");
  EXPECT_EQ(y.rows, (std::vector<uint64_t>{5}));
  EXPECT_EQ(y.evidence["collate"], "yours");
}

namespace {

// A batch's prediction and target as fixed statistics, with its losses.
class FixedView : public BatchView {
 public:
  ValueStats output, target, aux;
  LossResult main_loss, aux_result;
  ValueStats check(Slot slot, const ValueRule&) override { return slot == Slot::Output ? output : target; }
  LossResult loss(const LossConfig&) override { return main_loss; }
  ValueStats check_aux(std::size_t, const ValueRule&) override { return aux; }
  LossResult aux_loss(std::size_t, const LossConfig&) override { return aux_result; }
};

ValueStats finite_stats(uint64_t elements, double lo, double hi) {
  ValueStats s;
  s.elements = elements;
  s.min = lo;
  s.max = hi;
  return s;
}

TensorMeta float_meta(std::vector<int64_t> shape) {
  TensorMeta m;
  m.present = true;
  m.shape = std::move(shape);
  m.dtype = "float32";
  m.floating = true;
  return m;
}

LossResult loss_of(double v) {
  LossResult r;
  r.ok = true;
  r.elements = 1;
  r.value = v;
  r.nonfinite = std::isfinite(v) ? 0 : 1;
  return r;
}

}  // namespace

// The post-forward stage: findings, and the statistics the report plots (the prediction's
// finite range against the contract's band, the training loss with its aux terms).
TEST(PostStage, FindsAndMeasures) {
  LossConfig loss;
  loss.type = LossType::Bce;
  loss.aux = {{"aux", 0.5}};
  ChecksConfig checks;
  const TensorMeta out = float_meta({4, 1}), tgt = float_meta({4, 1});
  PostInput in{plan_contract(loss, checks, 4, out, tgt), {AuxPlan{out, plan_contract(loss, checks, 4, out, tgt)}}, out, tgt, 4, false};

  FixedView clean;
  clean.output = finite_stats(4, 0.1, 0.9);
  clean.target = finite_stats(4, 0, 1);
  clean.aux = finite_stats(4, 0.2, 0.7);
  clean.main_loss = loss_of(0.5);
  clean.aux_result = loss_of(0.2);
  PostResult r = post_stage(loss, in, clean);
  EXPECT_TRUE(r.emitted.empty());
  EXPECT_EQ(r.stats.pred_min, 0.1);
  EXPECT_EQ(r.stats.pred_max, 0.9);
  EXPECT_EQ(r.stats.band_lo, 0.0);
  EXPECT_EQ(r.stats.band_hi, 1.0);
  ASSERT_TRUE(r.stats.loss);
  EXPECT_DOUBLE_EQ(*r.stats.loss, 0.5 + 0.5 * 0.2);  // the recipe's loss(out) + 0.5 * loss(aux)

  // The aux head's loss is NaN: a loss finding named after the output, no loss plotted.
  FixedView bad_aux = clean;
  bad_aux.aux_result = loss_of(std::nan(""));
  r = post_stage(loss, in, bad_aux);
  ASSERT_EQ(r.emitted.size(), 1u);
  EXPECT_EQ(r.emitted[0].id, "loss-nonfinite");
  EXPECT_EQ(r.emitted[0].evidence["output"], "aux");
  EXPECT_TRUE(r.stats.loss_nonfinite);
  EXPECT_FALSE(r.stats.loss);

  // A prediction with no finite value: no range, its non-finite count, and no loss computed.
  FixedView nan = clean;
  nan.output = ValueStats{};
  nan.output.elements = 4;
  nan.output.nan = 4;
  nan.output.bad_rows = {0, 1, 2, 3};
  nan.output.bad_rows_total = 4;
  r = post_stage(loss, in, nan);
  ASSERT_FALSE(r.emitted.empty());
  EXPECT_EQ(r.emitted[0].id, "output-nonfinite");
  EXPECT_FALSE(r.stats.pred_min);
  EXPECT_EQ(r.stats.pred_nonfinite, 4u);
  EXPECT_FALSE(r.stats.loss);

  // An earlier stage's finding: values still checked and measured, the loss not computed.
  PostInput after_error = in;
  after_error.prior_error = true;
  r = post_stage(loss, after_error, clean);
  EXPECT_TRUE(r.emitted.empty());
  EXPECT_EQ(r.stats.pred_max, 0.9);
  EXPECT_FALSE(r.stats.loss);
}

// A field whose rows are not the samples (a graph's node features, a flat text): its bad rows
// are named by the samples the batch's own index structure maps them to, and the words count
// those samples, never "1 sample" with an empty list.
TEST(ValueFindings, RowsMappedToSamplesThroughTheBatchsIndexStructure) {
  LossConfig loss;
  loss.type = LossType::Step;
  FixedView view;
  ValueStats s;
  s.elements = 60;
  s.nan = 2;
  s.bad_rows = {4, 5, 11};  // node rows 4 and 5 are graph 1's, row 11 graph 3's
  s.bad_rows_total = 3;
  const std::vector<uint64_t> graph_of_row = {0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3};
  ValueRule finite;
  std::vector<Emitted> out =
      value_findings(Slot::Input, finite, float_meta({12, 5}), view, s, loss, 4, true, &graph_of_row);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, "input-nonfinite");
  EXPECT_EQ(out[0].rows, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(out[0].message, "inputs hold 2 NaNs in 2 samples of a batch of 4");
  // A row past the map, or a sample past the batch, is not believed.
  ValueStats past = s;
  past.bad_rows = {2, 20};
  const std::vector<uint64_t> bad_map = {0, 0, 9};
  out = value_findings(Slot::Input, finite, float_meta({12, 5}), view, past, loss, 4, true, &bad_map);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].rows.empty());
}
