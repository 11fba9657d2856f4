// The fixes of an op's own contract (ctc_loss, pack_padded_sequence): the data's repair first,
// the op's option with its trade-off after, none offered that is already in effect.
#include <gtest/gtest.h>

#include "core/findings/contract_fixes.h"

using namespace batchcheck;
using J = nlohmann::ordered_json;

namespace {
std::vector<std::string> ids(const Finding& f) {
  std::vector<std::string> out;
  for (const auto& x : f.fixes) out.push_back(x.id);
  return out;
}

Finding contract(const char* id, const char* name, const char* what, J detail) {
  Finding f;
  f.id = id;
  f.evidence = {{"contract", name}, {"what", what}, {"detail", std::move(detail)}};
  return f;
}
}  // namespace

TEST(ContractFixes, ACtcTargetLongerThanItsInputRepairsTheLengthsFirst) {
  Finding f = contract("loss-nonfinite", "ctc_loss", "target longer than input", {{"zero_infinity", false}});
  ASSERT_TRUE(contract_fixes(f));
  EXPECT_EQ(ids(f), (std::vector<std::string>{"ctc-lengths", "ctc-zero-infinity"}));
  EXPECT_EQ(f.fixes[1].code, "nn.CTCLoss(zero_infinity=True)");
  EXPECT_EQ(f.fixes[1].tradeoff, "those samples stop training without a word: the loss no longer says the lengths are wrong");
  // zero_infinity already set: not offered again.
  Finding z = contract("loss-nonfinite", "ctc_loss", "target longer than input", {{"zero_infinity", true}});
  ASSERT_TRUE(contract_fixes(z));
  EXPECT_EQ(ids(z), (std::vector<std::string>{"ctc-lengths"}));
}

TEST(ContractFixes, ACtcBlankOrLabelPastTheClassesAndAnInputLength) {
  // Every target of the batch holds the blank: labels numbered from 0, shifted first.
  Finding b = contract("target-out-of-range", "ctc_loss", "blank in target", {{"blank", 0}, {"classes", 6}, {"rows", 8}, {"batch", 8}});
  ASSERT_TRUE(contract_fixes(b));
  EXPECT_EQ(ids(b), (std::vector<std::string>{"ctc-labels-past-blank", "filter-blank-targets"}));
  EXPECT_EQ(b.fixes[0].title, "number the target labels from 1: the blank is 0");
  // One target of eight: a stray label in the data, dropped first.
  Finding s = contract("target-out-of-range", "ctc_loss", "blank in target", {{"blank", 0}, {"classes", 6}, {"rows", 1}, {"batch", 8}});
  ASSERT_TRUE(contract_fixes(s));
  EXPECT_EQ(ids(s), (std::vector<std::string>{"filter-blank-targets", "ctc-labels-past-blank"}));
  Finding l = contract("forward-error", "ctc_loss", "target label", {{"value", 6}, {"classes", 6}});
  ASSERT_TRUE(contract_fixes(l));
  EXPECT_EQ(ids(l), (std::vector<std::string>{"more-classes", "remap-labels"}));
  EXPECT_EQ(l.fixes[0].code, "nn.Linear(in_features, 7)  # the last layer");
  Finding i = contract("forward-error", "ctc_loss", "input length", {{"frames", 12}});
  ASSERT_TRUE(contract_fixes(i));
  EXPECT_EQ(ids(i), (std::vector<std::string>{"ctc-lengths"}));
}

TEST(ContractFixes, AnEmptySampleForPackPaddedSequenceIsDropped) {
  Finding p = contract("forward-error", "pack_padded_sequence", "sequence length", {{"length", 0}, {"padded", 5}});
  ASSERT_TRUE(contract_fixes(p));
  EXPECT_EQ(ids(p), (std::vector<std::string>{"drop-empty-samples"}));
  // Found by its error alone (a capture of the step): the same fix.
  Finding e;
  e.id = "forward-error";
  e.evidence = {{"error", "RuntimeError: Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"}};
  ASSERT_TRUE(contract_fixes(e));
  EXPECT_EQ(ids(e), (std::vector<std::string>{"drop-empty-samples"}));
  // torchvision's detection models refuse a box of no area; a user's collate_fn that raised.
  Finding box;
  box.id = "forward-error";
  box.evidence = {{"error", "AssertionError: All bounding boxes should have positive height and width. Found invalid box"}};
  ASSERT_TRUE(contract_fixes(box));
  EXPECT_EQ(ids(box), (std::vector<std::string>{"filter-degenerate-boxes"}));
  Finding yours;
  yours.id = "collate-error";
  yours.evidence = {{"collate", "yours"}, {"error", "ValueError: 'maybe' is not in list"}};
  ASSERT_TRUE(contract_fixes(yours));
  EXPECT_EQ(ids(yours), (std::vector<std::string>{"drop-failing-samples"}));
  // Any other finding: not one of these ops'.
  Finding other;
  other.id = "forward-error";
  other.evidence = {{"error", "mat1 and mat2 shapes cannot be multiplied"}};
  EXPECT_FALSE(contract_fixes(other));
  EXPECT_TRUE(other.fixes.empty());
}
