#include "core/pipeline/contract.h"

#include <algorithm>
#include <limits>

#include "core/base/text.h"

namespace batchcheck {

namespace {

bool is_integer_dtype(const TensorMeta& m) { return !m.floating; }

std::string torch_dtype_name(const std::string& dtype) {
  // PyTorch's own spelling in "Found dtype Long but expected Float".
  if (dtype == "float32") return "Float";
  if (dtype == "float64") return "Double";
  if (dtype == "float16") return "Half";
  if (dtype == "bfloat16") return "BFloat16";
  if (dtype == "int64") return "Long";
  if (dtype == "int32") return "Int";
  if (dtype == "int16") return "Short";
  if (dtype == "int8") return "Char";
  if (dtype == "uint8") return "Byte";
  if (dtype == "bool") return "Bool";
  return dtype;
}

ValueRule intersect(ValueRule rule, const std::optional<Range>& extra) {
  if (!extra) return rule;
  rule.lo = rule.lo ? std::max(*rule.lo, extra->lo) : extra->lo;
  rule.hi = rule.hi ? std::min(*rule.hi, extra->hi) : extra->hi;
  rule.finite = true;
  return rule;
}

ValueRule finite_rule() { return ValueRule{}; }

ValueRule unit_rule() {
  ValueRule r;
  r.lo = 0.0;
  r.hi = 1.0;
  return r;
}

}  // namespace

const char* to_string(Slot s) {
  switch (s) {
    case Slot::Input: return "input";
    case Slot::Output: return "output";
    case Slot::Target: return "target";
  }
  return "input";
}

std::string shape_text(const std::vector<int64_t>& shape) { return "[" + join_ints(shape) + "]"; }

std::string torch_size_text(const std::vector<int64_t>& shape) { return "torch.Size([" + join_ints(shape) + "])"; }

std::optional<ValueRule> input_rule(const TensorMeta& input) {
  if (!input.present || !input.floating) return std::nullopt;
  return finite_rule();
}

ContractPlan plan_contract(const LossConfig& loss, const ChecksConfig& checks, uint64_t batch_size,
                           const TensorMeta& output, const TensorMeta& target) {
  ContractPlan plan;
  const LossType t = loss.type;
  if (returns_loss(t)) {
    // forward returned the loss itself: no prediction to hold to a contract, only the loss.
    plan.can_compute_loss = true;
    return plan;
  }

  // Predictions: the batch dimension first, since every later check assumes it.
  bool batch_ok = !output.shape.empty() && output.shape[0] == static_cast<int64_t>(batch_size);
  plan.output_rows_are_samples = batch_ok;
  if (!batch_ok) {
    ContractIssue issue{"batch-dim-mismatch", "", {}};
    if (output.shape.empty()) {
      issue.message = "the prediction is a 0-d tensor for a batch of " + plural(batch_size, "sample") +
                      ": the batch dimension is gone (a .squeeze() without a dim?)";
    } else if (batch_size == 1 && target.present && output.shape.size() < target.shape.size()) {
      issue.message = "the prediction has shape " + shape_text(output.shape) + " for a batch of 1, the target " +
                      shape_text(target.shape) + ": the batch dimension was squeezed away";
    } else {
      issue.message = "the prediction's first dimension is " + std::to_string(output.shape[0]) + " for a batch of " +
                      plural(batch_size, "sample") + " (a batch size baked into a view or reshape?)";
    }
    issue.evidence = {{"output_shape", output.shape}, {"batch_size", batch_size}};
    if (target.present) issue.evidence["target_shape"] = target.shape;
    plan.issues.push_back(issue);
  }

  // Output value rule.
  switch (t) {
    case LossType::Bce: plan.output_rule = intersect(unit_rule(), checks.output_range); break;
    case LossType::Nll: {
      ValueRule r;
      r.hi = 0.0;
      plan.output_rule = intersect(r, checks.output_range);
      break;
    }
    case LossType::None:
      if (checks.output_range) plan.output_rule = intersect(ValueRule{}, checks.output_range);
      break;
    case LossType::Dice:
    case LossType::DiceCe:
    case LossType::Jaccard:
    case LossType::Focal:
      // Without an activation the loss takes the prediction as probabilities: logits there
      // give a Dice of no meaning (negative, unbounded) and train silently.
      plan.output_rule = intersect(loss.activation == Activation::None ? unit_rule() : finite_rule(), checks.output_range);
      break;
    default: plan.output_rule = intersect(finite_rule(), checks.output_range); break;
  }
  if (plan.output_rule && !output.floating) {
    // Integer predictions cannot be NaN; the range still applies.
    plan.output_rule->finite = false;
  }

  if (t == LossType::None || !target.present) {
    plan.can_compute_loss = false;
    return plan;
  }

  if (is_region_loss(t)) {
    plan_region_contract(loss, checks, output, target, plan);
    return plan;
  }

  const bool class_loss = t == LossType::CrossEntropy || t == LossType::Nll;
  bool structural_ok = batch_ok;
  if (class_loss) {
    if (output.shape.size() < 2) {
      plan.issues.push_back({"shape-mismatch",
                             std::string(t == LossType::Nll ? "nll_loss" : "cross_entropy") +
                                 " needs predictions of shape (N, C, ...) with a class dimension; got " +
                                 shape_text(output.shape),
                             {{"output_shape", output.shape}, {"target_shape", target.shape}}});
      structural_ok = false;
    }
    const bool probabilities = t == LossType::CrossEntropy && target.floating && target.shape == output.shape;
    if (probabilities) {
      plan.target_rule = intersect(unit_rule(), checks.target_range);
    } else if (target.floating || target.dtype != "int64") {
      // uint8 masks too: cross_entropy raises "expected scalar type Long but found Byte".
      plan.issues.push_back({"target-dtype",
                             "class-index targets must be int64, got " + target.dtype + " (PyTorch: expected scalar type Long but found " +
                                 torch_dtype_name(target.dtype) + ")",
                             {{"target_dtype", target.dtype}, {"expected", "int64"}}});
      structural_ok = false;
    } else if (output.shape.size() >= 2) {
      // Target (N, d1..dk) for predictions (N, C, d1..dk).
      std::vector<int64_t> expected = output.shape;
      expected.erase(expected.begin() + 1);
      if (target.shape != expected) {
        plan.issues.push_back({"shape-mismatch",
                               "class-index targets must have shape " + shape_text(expected) + " for predictions " +
                                   shape_text(output.shape) + ", got " + shape_text(target.shape),
                               {{"output_shape", output.shape}, {"target_shape", target.shape}, {"expected_target_shape", expected}}});
        structural_ok = false;
      }
      plan.class_targets = true;
      ValueRule r;
      r.class_index = true;
      r.classes = output.shape[1];
      r.ignore_index = loss.ignore_index;
      r.finite = false;  // integer targets; checks.target_range does not apply to class indices
      plan.target_rule = r;
    }
  } else {
    // bce, bce_with_logits, mse, l1, smooth_l1: elementwise, equal shapes.
    if (t == LossType::Bce || t == LossType::BceWithLogits) {
      if (is_integer_dtype(target)) {
        plan.issues.push_back({"target-dtype",
                               "BCE targets must be floating point, got " + target.dtype + " (PyTorch: " +
                                   (t == LossType::Bce ? "Found dtype " + torch_dtype_name(target.dtype) + " but expected " +
                                                             torch_dtype_name(output.dtype)
                                                       : "result type Float can't be cast to the desired output type " +
                                                             torch_dtype_name(target.dtype)) +
                                   ")",
                               {{"target_dtype", target.dtype}, {"expected", output.dtype}}});
        structural_ok = false;
      } else if (t == LossType::Bce && target.dtype != output.dtype) {
        plan.issues.push_back({"target-dtype",
                               "BCELoss needs the target dtype to equal the prediction's (" + output.dtype + "), got " +
                                   target.dtype + " (PyTorch: Found dtype " + torch_dtype_name(target.dtype) +
                                   " but expected " + torch_dtype_name(output.dtype) + ")",
                               {{"target_dtype", target.dtype}, {"expected", output.dtype}}});
        structural_ok = false;
      }
      plan.target_rule = intersect(unit_rule(), checks.target_range);
      if (!target.floating) plan.target_rule->finite = false;
    } else {
      plan.target_rule = intersect(finite_rule(), checks.target_range);
      if (!target.floating) plan.target_rule->finite = false;
    }
    if (batch_ok && output.shape != target.shape) {
      std::string pytorch;
      if (t == LossType::Bce) {
        pytorch = "Using a target size (" + torch_size_text(target.shape) + ") that is different to the input size (" +
                  torch_size_text(output.shape) + ") is deprecated";
      } else if (t == LossType::BceWithLogits) {
        pytorch = "Target size (" + torch_size_text(target.shape) + ") must be the same as input size (" +
                  torch_size_text(output.shape) + ")";
      } else {
        pytorch = "PyTorch only warns and broadcasts, which silently computes the wrong loss";
      }
      plan.issues.push_back({"shape-mismatch",
                             "prediction " + shape_text(output.shape) + " and target " + shape_text(target.shape) +
                                 " differ in shape (" + pytorch + ")",
                             {{"output_shape", output.shape}, {"target_shape", target.shape}}});
      structural_ok = false;
    }
  }
  plan.can_compute_loss = structural_ok;
  return plan;
}

}  // namespace batchcheck
