// The torch-free half of root-cause localization: the search for the samples that cause a
// batch's failure, which findings get localized, and what the report and summary say.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/findings/root_cause.h"
#include "core/pipeline/localize_stage.h"

using namespace batchcheck;

namespace {

// A batch fails when it holds every row of one of the culprit sets.
auto fails_with(std::vector<std::set<uint64_t>> culprits) {
  return [culprits](const std::vector<uint64_t>& rows) {
    std::set<uint64_t> have(rows.begin(), rows.end());
    for (const auto& c : culprits) {
      if (std::includes(have.begin(), have.end(), c.begin(), c.end())) return true;
    }
    return false;
  };
}

}  // namespace

TEST(Halving, FindsTheOneSampleThatFails) {
  Halving h = halve_failing_rows(64, fails_with({{37}}));
  EXPECT_EQ(h.rows, (std::vector<uint64_t>{37}));
  EXPECT_FALSE(h.batch_dependent);
  EXPECT_LE(h.forwards, 12u);  // two per halving at most: 2 log2(64)
}

TEST(Halving, FindsSamplesThatFailOnlyTogether) {
  // Rows 1 and 2 (of 4) straddle both halves: neither half fails alone.
  Halving h = halve_failing_rows(4, fails_with({{1, 2}}));
  EXPECT_EQ(h.rows, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(h.batch_dependent);
  Halving wide = halve_failing_rows(32, fails_with({{3, 17, 30}}));
  EXPECT_EQ(wide.rows, (std::vector<uint64_t>{3, 17, 30}));
  EXPECT_TRUE(wide.batch_dependent);
}

TEST(Halving, StopsAtItsBudget) {
  uint64_t calls = 0;
  Halving h = halve_failing_rows(
      1024, [&](const std::vector<uint64_t>& rows) {
        ++calls;
        return rows.size() > 1000;  // only near-whole batches fail
      },
      10);
  EXPECT_LE(calls, 10u);
  EXPECT_EQ(h.forwards, calls);
  EXPECT_FALSE(h.batch_dependent);  // not proven: the budget ran out
}

TEST(RootCauseText, NamesTheOpItsLineAndWhatItWasGiven) {
  Localization l;
  l.origin = "op";
  l.kind = "nonfinite";
  l.site = {"aten::log", "head.score", "/src/model.py", 42, "return torch.log(p)"};
  TensorSummary in;
  in.name = "self";
  in.min = -0.31;
  in.max = 0.97;
  in.negative = 12;
  l.inputs = {in};
  l.output.nan = 12;
  l.halved = true;
  l.rows = {1};
  const std::vector<int64_t> indices{1039, 1040, 1041};
  EXPECT_EQ(root_cause_summary(l, indices),
            "first NaN: aten::log at model.py:42 in head.score, on log of values in [-0.31, 0.97]: 12 negative; from "
            "sample 1040");
  nlohmann::ordered_json j = root_cause_json(l, indices);
  EXPECT_EQ(j["kind"], "op");
  EXPECT_EQ(j["op"], "aten::log");
  EXPECT_EQ(j["module"], "head.score");
  EXPECT_EQ(j["file"], "/src/model.py");
  EXPECT_EQ(j["line"], 42);
  EXPECT_EQ(j["source_line"], "return torch.log(p)");
  EXPECT_EQ(j["inputs"][0]["negative"], 12);
  EXPECT_EQ(j["samples"], nlohmann::ordered_json::parse("[1040]"));
  EXPECT_EQ(j["batch_dependent"], false);

  // Several rows that fail only together.
  l.rows = {0, 2};
  l.batch_dependent = true;
  EXPECT_NE(root_cause_summary(l, indices).find("; batch-dependent: samples 1039, 1041 fail together"), std::string::npos);
}

TEST(RootCauseText, DivisionAndInfParents) {
  Localization l;
  l.origin = "op";
  l.kind = "nonfinite";
  l.site = {"aten::div", "", "m.py", 7, ""};
  TensorSummary a, b;
  a.min = 0;
  a.max = 0;
  a.zero = 4;
  b.min = 0;
  b.max = 0;
  b.zero = 1;
  l.inputs = {a, b};
  l.output.nan = 4;
  EXPECT_EQ(root_cause_summary(l, {}), "first NaN: aten::div at m.py:7, on division of values in [0, 0] by values in [0, 0]: 1 zero divisor, 0/0");
  l.site = {"aten::sub", "", "m.py", 9, ""};
  l.inputs = {};
  l.inf_from = OpSite{"aten::exp", "enc", "m.py", 8, ""};
  EXPECT_EQ(root_cause_summary(l, {}), "first NaN: aten::sub at m.py:9; the Inf came from aten::exp at m.py:8 in enc");
  EXPECT_EQ(root_cause_json(l, {})["inf_from"]["op"], "aten::exp");
}

TEST(RootCauseText, RangeInputsParametersAndNothing) {
  Localization r;
  r.origin = "op";
  r.kind = "range";
  r.lo = 0.0;
  r.hi = 1.0;
  r.site = {"aten::add", "", "m.py", 3, ""};
  TensorSummary in;
  in.min = 0.2;
  in.max = 0.9;
  r.inputs = {in};
  r.output.min = 0.2;
  r.output.max = 2.4;
  r.output.above = 3;
  EXPECT_EQ(root_cause_summary(r, {}), "out of [0, 1]: aten::add at m.py:3 took values in [0.2, 0.9] to [0.2, 2.4] (3 above 1)");
  EXPECT_EQ(root_cause_json(r, {})["value"], "out of range");

  Localization p;
  p.origin = "parameter";
  p.kind = "nonfinite";
  p.name = "head.fc.weight";
  p.output.nan = 1;
  EXPECT_EQ(root_cause_summary(p, {}), "first NaN: the model's head.fc.weight holds it");

  Localization i;
  i.origin = "input";
  i.kind = "nonfinite";
  i.name = "x";
  i.output.pos_inf = 2;
  EXPECT_EQ(root_cause_summary(i, {}), "first Inf: the model's input x already holds it (2 non-finite values)");
  i.name = "input";  // not "the model's input input"
  EXPECT_EQ(root_cause_summary(i, {}), "first Inf: the model's input already holds it (2 non-finite values)");

  EXPECT_TRUE(root_cause_json(Localization{}, {}).is_null());
}

TEST(LocalizeStage, FirstFewBatchesPerIdNanBeforeRange) {
  std::map<std::string, unsigned> done;
  ValueRule bce;
  bce.lo = 0.0;
  bce.hi = 1.0;
  Emitted nan{"output-nonfinite", "output", "", nlohmann::ordered_json::object(), {0, 1, 2, 3}, 4, ""};
  Emitted range{"output-out-of-range", "output", "", nlohmann::ordered_json::object(), {2}, 1, ""};
  Emitted other{"target-out-of-range", "target", "", nlohmann::ordered_json::object(), {2}, 1, ""};
  auto p = plan_localize({nan, range, other}, bce, 4, done);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->req.nonfinite);
  EXPECT_FALSE(p->req.lo);
  EXPECT_TRUE(p->req.halve);  // every row: maybe one sample's spread by the batch
  EXPECT_EQ(p->ids, (std::vector<std::string>{"output-nonfinite"}));

  auto r = plan_localize({range}, bce, 4, done);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->req.nonfinite);
  EXPECT_EQ(r->req.hi, 1.0);
  EXPECT_FALSE(r->req.halve);  // the rows already name the samples

  for (unsigned k = 1; k < kLocalizePerId; ++k) EXPECT_TRUE(plan_localize({nan}, bce, 4, done));
  EXPECT_FALSE(plan_localize({nan}, bce, 4, done));  // past the first few batches
  EXPECT_FALSE(plan_localize({other}, bce, 4, done));
  // An extra output's range (loss.aux) is not the prediction's.
  Emitted aux = range;
  aux.evidence["output"] = "aux";
  std::map<std::string, unsigned> fresh;
  EXPECT_FALSE(plan_localize({aux}, bce, 4, fresh));
  // Nor a region loss's without its activation: the logits are everywhere, the loss is at fault.
  Emitted logits = range;
  logits.evidence["activation"] = "none";
  EXPECT_FALSE(plan_localize({logits}, bce, 4, fresh));
}
