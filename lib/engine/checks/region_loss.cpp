#include "engine/checks/region_loss.h"

#include "core/base/errors.h"

namespace batchcheck {

namespace {

constexpr double kSmooth = 1e-5;  // MONAI's smooth_nr and smooth_dr

struct Targets {
  at::Tensor onehot;  // (N, C, S) in the prediction's dtype
  at::Tensor valid;   // (N, 1, S): 0 where the target equals ignore_index
  at::Tensor index;   // (N, S) int64 class indices, for dice_ce's cross entropy; undefined for masks
};

bool class_format(const LossConfig& loss, int64_t classes) {
  if (loss.target_format == TargetFormat::Classes) return true;
  return loss.target_format == TargetFormat::Index && classes > 1;  // MONAI ignores to_onehot_y for one channel
}

Targets targets(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss) {
  const int64_t n = out.size(0), c = out.size(1);
  Targets t;
  if (class_format(loss, c)) {
    at::Tensor idx = tgt.reshape({n, -1});
    t.valid = loss.ignore_index_given ? idx.ne(loss.ignore_index) : at::ones_like(idx, at::kBool);
    idx = at::where(t.valid, idx, at::zeros_like(idx)).to(at::kLong).clamp(0, c - 1);
    t.index = at::where(t.valid, idx, at::full_like(idx, loss.ignore_index_given ? loss.ignore_index : -100));
    t.valid = t.valid.unsqueeze(1).to(out.scalar_type());
    t.onehot = at::one_hot(idx, c).permute({0, 2, 1}).to(out.scalar_type()) * t.valid;
    return t;
  }
  at::Tensor m = tgt.reshape({n, c, -1});
  t.valid = loss.ignore_index_given ? m.ne(loss.ignore_index).to(out.scalar_type()) : at::ones_like(m, out.scalar_type());
  t.onehot = m.to(out.scalar_type()).clamp(0, 1) * t.valid;
  return t;
}

at::Tensor probabilities(const at::Tensor& x, Activation a) {
  switch (a) {
    case Activation::Sigmoid: return at::sigmoid(x);
    case Activation::Softmax: return x.size(1) > 1 ? at::softmax(x, 1) : x;
    case Activation::None: break;
  }
  return x;
}

at::Tensor reduce(const at::Tensor& f, Reduction r) {
  switch (r) {
    case Reduction::Mean: return f.mean();
    case Reduction::Sum: return f.sum();
    case Reduction::None: break;
  }
  return f;
}

// 1 - Dice (or Jaccard) per sample and channel.
at::Tensor overlap_loss(const at::Tensor& p, const Targets& t, bool jaccard) {
  const at::Tensor tp = (p * t.onehot).sum(2);
  const at::Tensor fp = (p * (1 - t.onehot)).sum(2);
  const at::Tensor fn = ((1 - p) * t.onehot).sum(2);
  if (jaccard) return 1 - (tp + kSmooth) / (tp + fp + fn + kSmooth);
  return 1 - (2 * tp + kSmooth) / (2 * tp + fp + fn + kSmooth);
}

}  // namespace

at::Tensor region_loss(const at::Tensor& out, const at::Tensor& tgt, const LossConfig& loss) {
  if (out.dim() < 2) throw InternalError("region_loss: predictions without a channel dimension");
  const int64_t n = out.size(0), c = out.size(1);
  const Targets t = targets(out, tgt, loss);
  const at::Tensor x = out.reshape({n, c, -1});
  switch (loss.type) {
    case LossType::Dice:
    case LossType::Jaccard: {
      const at::Tensor p = probabilities(x, loss.activation) * t.valid;
      return reduce(overlap_loss(p, t, loss.type == LossType::Jaccard), loss.reduction);
    }
    case LossType::DiceCe: {
      // MONAI's DiceCELoss: Dice of the activated prediction plus cross entropy of the raw one
      // (binary cross entropy with logits for one channel).
      const at::Tensor p = probabilities(x, loss.activation) * t.valid;
      const at::Tensor dice = overlap_loss(p, t, false).mean();
      const at::Tensor ce = c > 1 && t.index.defined()
                                ? at::cross_entropy_loss(x, t.index, {}, at::Reduction::Mean, loss.ignore_index_given ? loss.ignore_index : -100)
                            : c > 1 ? at::cross_entropy_loss(x, t.onehot, {}, at::Reduction::Mean)
                                    : at::binary_cross_entropy_with_logits(x, t.onehot);
      return dice + ce;
    }
    case LossType::Focal: {
      // Sigmoid focal loss per element on logits (smp's and torchvision's form); probabilities
      // (activation "none") are turned back into logits, as smp does with from_logits=False.
      at::Tensor z = x;
      if (loss.activation == Activation::None) {
        const at::Tensor q = x.clamp(1e-7, 1 - 1e-7);
        z = at::log(q / (1 - q));
      }
      const at::Tensor logpt = at::binary_cross_entropy_with_logits(z, t.onehot, {}, {}, at::Reduction::None);
      const at::Tensor pt = at::exp(-logpt);
      at::Tensor f = (1 - pt).pow(loss.gamma) * logpt;
      if (loss.alpha) f = f * (*loss.alpha * t.onehot + (1 - *loss.alpha) * (1 - t.onehot));
      f = f * t.valid;
      return reduce(f, loss.reduction);
    }
    default: break;
  }
  throw InternalError(std::string("region_loss: not a region loss: ") + to_string(loss.type));
}

}  // namespace batchcheck
