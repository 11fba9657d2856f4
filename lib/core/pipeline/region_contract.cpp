// The target contracts of the region losses (dice, dice_ce, jaccard, focal) as MONAI and
// segmentation-models-pytorch implement them. These losses raise on few of their misuses: a
// mask of 255 or a prediction of logits given as probabilities trains silently on a wrong
// loss, so the contract is what the loss means, not only what makes it raise.
#include <algorithm>

#include "core/pipeline/contract.h"

namespace batchcheck {

namespace {

std::vector<int64_t> without_channel(std::vector<int64_t> shape) {
  if (shape.size() >= 2) shape.erase(shape.begin() + 1);
  return shape;
}

std::vector<int64_t> with_channel(std::vector<int64_t> shape, int64_t c) {
  if (shape.size() >= 2) shape[1] = c;
  return shape;
}

ValueRule mask_rule(const LossConfig& loss, const ChecksConfig& checks, const TensorMeta& target) {
  ValueRule r;
  r.lo = 0.0;
  r.hi = 1.0;
  if (checks.target_range) {
    r.lo = std::max(*r.lo, checks.target_range->lo);
    r.hi = std::min(*r.hi, checks.target_range->hi);
  }
  r.finite = target.floating;
  if (loss.ignore_index_given) r.ignore_index = loss.ignore_index;
  return r;
}

ValueRule class_rule(const LossConfig& loss, int64_t classes) {
  ValueRule r;
  r.class_index = true;
  r.classes = classes;
  // Floating class indices (MONAI's one_hot takes them) are checked by value too.
  r.lo = 0.0;
  r.hi = static_cast<double>(classes - 1);
  r.finite = true;
  if (loss.ignore_index_given) r.ignore_index = loss.ignore_index;
  return r;
}

}  // namespace

void plan_region_contract(const LossConfig& loss, const ChecksConfig& checks, const TensorMeta& output,
                          const TensorMeta& target, ContractPlan& plan) {
  const std::string name = to_string(loss.type);
  const std::string format = std::string("target_format \"") + to_string(loss.target_format) + "\"";
  auto issue = [&](const char* id, const std::string& message) {
    plan.issues.push_back({id, message, {{"output_shape", output.shape}, {"target_shape", target.shape}, {"target_format", to_string(loss.target_format)}}});
  };
  if (output.shape.size() < 2) {
    issue("shape-mismatch", name + " needs predictions of shape (N, C, ...) with a channel dimension; got " + shape_text(output.shape));
    return;
  }
  const int64_t classes = output.shape[1];
  bool ok = true;
  switch (loss.target_format) {
    case TargetFormat::Mask:
      if (target.shape != output.shape) {
        issue("shape-mismatch", name + " with " + format + " needs the target in the prediction's shape " + shape_text(output.shape) +
                                    ", got " + shape_text(target.shape) + " (MONAI: ground truth has different shape (" +
                                    torch_size_text(target.shape) + ") from input (" + torch_size_text(output.shape) +
                                    "); class indices want \"index\" or \"classes\")");
        ok = false;
      }
      plan.target_rule = mask_rule(loss, checks, target);
      break;
    case TargetFormat::Binary:
      if (classes != 1) {
        issue("shape-mismatch", name + " with " + format + " needs a prediction of one channel, got " + std::to_string(classes) +
                                    " in " + shape_text(output.shape) + " (several classes want \"mask\", \"index\" or \"classes\")");
        ok = false;
      } else if (target.shape != output.shape && target.shape != without_channel(output.shape)) {
        issue("shape-mismatch", name + " with " + format + " needs the target in shape " + shape_text(output.shape) + " or " +
                                    shape_text(without_channel(output.shape)) + " for predictions " + shape_text(output.shape) +
                                    ", got " + shape_text(target.shape));
        ok = false;
      }
      plan.target_rule = mask_rule(loss, checks, target);
      break;
    case TargetFormat::Index:
    case TargetFormat::Classes: {
      const bool index = loss.target_format == TargetFormat::Index;
      const std::vector<int64_t> channel_of_one = with_channel(output.shape, 1);
      const bool shape_ok = index ? target.shape == channel_of_one
                                  : target.shape == without_channel(output.shape) || target.shape == channel_of_one;
      if (!shape_ok) {
        std::string want = index ? shape_text(channel_of_one) : shape_text(without_channel(output.shape));
        std::string hint;
        if (index && target.shape.size() >= 2 && target.shape.size() == output.shape.size() && target.shape[1] != 1) {
          hint = " (MONAI: labels should have a channel with length equal to one)";
        } else if (index && target.shape == without_channel(output.shape)) {
          hint = " (the channel of one is missing: target.unsqueeze(1), or \"classes\")";
        }
        issue("shape-mismatch", name + " with " + format + " needs class indices of shape " + want + " for predictions " +
                                    shape_text(output.shape) + ", got " + shape_text(target.shape) + hint);
        ok = false;
      }
      // smp's dice and jaccard one-hot the classes with F.one_hot, which takes int64 only
      // (with an ignore_index they convert first); MONAI's one_hot converts itself.
      const bool one_hot = !index && (loss.type == LossType::Dice || loss.type == LossType::Jaccard) && !loss.ignore_index_given;
      if (!index && target.floating) {
        plan.issues.push_back({"target-dtype", "class-index targets must be integers, got " + target.dtype,
                               {{"target_dtype", target.dtype}, {"expected", "int64"}}});
        ok = false;
      } else if (one_hot && target.dtype != "int64") {
        plan.issues.push_back({"target-dtype",
                               name + " one-hot encodes class indices with F.one_hot, which needs int64, got " + target.dtype +
                                   " (PyTorch: one_hot is only applicable to index tensor of type LongTensor)",
                               {{"target_dtype", target.dtype}, {"expected", "int64"}}});
        ok = false;
      }
      if (index && classes == 1) {
        // MONAI ignores to_onehot_y for one channel: the target is then a mask.
        plan.target_rule = mask_rule(loss, checks, target);
      } else {
        plan.target_rule = class_rule(loss, classes);
        if (!target.floating) plan.target_rule->finite = false;
        plan.class_targets = true;
      }
      break;
    }
  }
  plan.can_compute_loss = ok && plan.output_rows_are_samples;
}

}  // namespace batchcheck
