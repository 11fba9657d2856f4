#include "core/pipeline/value_findings.h"

#include <algorithm>

#include <cmath>

#include "core/base/text.h"
#include "core/pipeline/classify.h"

namespace batchcheck {

namespace {

std::string bounds_text(const ValueRule& r) {
  return "[" + (r.lo ? format_number(*r.lo) : std::string("-inf")) + ", " +
         (r.hi ? format_number(*r.hi) : std::string("inf")) + "]";
}

nlohmann::ordered_json stats_json(const ValueStats& s) {
  nlohmann::ordered_json j = {{"elements", s.elements}, {"nan", s.nan}, {"inf", s.inf}};
  j["min"] = std::isnan(s.min) ? nlohmann::ordered_json() : nlohmann::ordered_json(s.min);
  j["max"] = std::isnan(s.max) ? nlohmann::ordered_json() : nlohmann::ordered_json(s.max);
  if (s.below + s.above) {
    j["out_of_range"] = s.below + s.above;
    j["offending_values"] = s.bad_values;
  }
  if (s.ignored) j["ignored"] = s.ignored;
  j["bad_samples_in_batch"] = s.bad_rows_total;
  return j;
}

// Why a region loss holds its predictions or mask targets to [0, 1]: it raises on neither.
std::string region_contract_text(Slot slot, const LossConfig& loss) {
  const std::string name = to_string(loss.type);
  if (slot == Slot::Output) {
    return " (" + name + " with activation \"none\" takes probabilities; logits train silently on a wrong loss: "
           "give the loss its sigmoid or softmax)";
  }
  return " (" + name + " takes a binary or one-hot mask; any other value trains silently on a wrong loss)";
}

// What a class index out of range does in each region loss: MONAI's one_hot scatters it
// (an index error; a device-side assert on CUDA), smp's dice and jaccard call F.one_hot (which
// raises), smp's focal compares it with each class and trains on it as background everywhere.
void region_class_error(const LossConfig& loss, const ValueRule& rule, const ValueStats& rg, nlohmann::ordered_json& ev,
                        std::string& cuda) {
  if (rg.bad_values.empty()) return;
  const std::string v = format_number(rg.bad_values.front());
  if (loss.target_format == TargetFormat::Index) {
    ev["pytorch_cpu_error"] = "index " + v + " is out of bounds for dimension 1 with size " + std::to_string(rule.classes);
    cuda = cuda_text::kScatterIndex;
  } else if (loss.type == LossType::Focal) {
    ev["pytorch_cpu_error"] = nullptr;
    ev["silent"] = "the pixel matches no class: it trains as background of every class";
  } else if (loss.type == LossType::DiceCe) {
    ev["pytorch_cpu_error"] = "Target " + v + " is out of bounds.";
    cuda = cuda_text::kClass;
  } else {
    ev["pytorch_cpu_error"] = "Class values must be smaller than num_classes.";
  }
}

}  // namespace

std::vector<uint64_t> all_rows(uint64_t n) {
  std::vector<uint64_t> rows(n);
  for (uint64_t i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

void rows_to_samples(ValueStats& s, const std::vector<uint64_t>& row_samples, uint64_t batch_size) {
  std::vector<uint64_t> samples;
  for (uint64_t r : s.bad_rows) {
    if (r < row_samples.size() && row_samples[r] < batch_size) samples.push_back(row_samples[r]);
  }
  std::sort(samples.begin(), samples.end());
  samples.erase(std::unique(samples.begin(), samples.end()), samples.end());
  s.bad_rows = std::move(samples);
  s.bad_rows_total = s.bad_rows.size();
}

std::vector<Emitted> value_findings(Slot slot, const ValueRule& rule, const TensorMeta& meta, BatchView& view,
                                    ValueStats s, const LossConfig& loss_cfg, uint64_t batch_size, bool rows_are_samples,
                                    const std::vector<uint64_t>* row_samples) {
  std::vector<Emitted> out;
  if (s.ok()) return out;
  const LossType loss = loss_cfg.type;
  const bool nonfinite = s.nan + s.inf > 0;
  const bool range = s.below + s.above > 0;
  ValueStats nf = s, rg = s;
  if (nonfinite && range) {
    // Attribute each kind to its own samples.
    ValueRule finite_only;
    nf = view.check(slot, finite_only);
    ValueRule range_only = rule;
    range_only.finite = false;
    rg = view.check(slot, range_only);
  }
  if (row_samples && rows_are_samples) {
    for (ValueStats* v : {&s, &nf, &rg}) rows_to_samples(*v, *row_samples, batch_size);
  }
  if (!rows_are_samples) {
    for (ValueStats* v : {&s, &nf, &rg}) {
      v->bad_rows = all_rows(batch_size);
      v->bad_rows_total = batch_size;
    }
  }
  const std::string what = slot == Slot::Input ? "inputs" : slot == Slot::Output ? "predictions" : "targets";
  const std::string prefix = slot == Slot::Input ? "input" : slot == Slot::Output ? "output" : "target";
  const std::string stage = slot == Slot::Input ? "data" : slot == Slot::Output ? "output" : "target";
  const std::string of_batch = " in " + plural(nonfinite && range ? nf.bad_rows_total : s.bad_rows_total, "sample") +
                               " of a batch of " + std::to_string(batch_size);
  if (nonfinite) {
    nlohmann::ordered_json ev = stats_json(nf);
    ev["shape"] = meta.shape;
    std::string cuda;
    if (slot == Slot::Output && loss == LossType::Bce) {
      cuda = cuda_text::kBceInput;
      ev["pytorch_cpu_error"] = "all elements of input should be between 0 and 1";
    }
    std::string msg = what + " hold " + nonfinite_text(nf.nan, nf.inf) + of_batch;
    if (slot == Slot::Output && loss == LossType::Bce) msg += "; NaN fails BCELoss's range check like an out-of-range value";
    out.push_back({prefix + "-nonfinite", stage, msg, ev, nf.bad_rows, nf.bad_rows_total, cuda});
  }
  if (range) {
    nlohmann::ordered_json ev = stats_json(rg);
    ev["shape"] = meta.shape;
    std::string cuda, msg;
    if (rule.class_index) {
      ev["classes"] = rule.classes;
      if (rule.ignore_index) ev["ignore_index"] = *rule.ignore_index;
      cuda = loss_cfg.reduction == Reduction::None ? cuda_text::kClassNone : cuda_text::kClass;
      std::vector<std::string> vals;
      for (double v : rg.bad_values) vals.push_back(format_number(v));
      msg = "class indices must lie in [0, " + std::to_string(rule.classes) + ")" +
            (rule.ignore_index ? " or equal ignore_index " + std::to_string(*rule.ignore_index) : std::string()) +
            "; found " + join(vals) + " (" + plural(rg.below + rg.above, "value") + " in " +
            plural(rg.bad_rows_total, "sample") + ")";
      if (is_region_loss(loss)) {
        region_class_error(loss_cfg, rule, rg, ev, cuda);
      } else if (!rg.bad_values.empty()) {
        ev["pytorch_cpu_error"] = "Target " + format_number(rg.bad_values.front()) + " is out of bounds.";
      }
    } else if (is_region_loss(loss)) {
      if (slot == Slot::Output) ev["activation"] = to_string(loss_cfg.activation);
      msg = what + " must lie in " + bounds_text(rule) + region_contract_text(slot, loss_cfg) + "; found min " +
            format_number(rg.min) + ", max " + format_number(rg.max) + " (" + plural(rg.below + rg.above, "value") + " in " +
            plural(rg.bad_rows_total, "sample") + ")";
    } else {
      const bool bce = loss == LossType::Bce || loss == LossType::BceWithLogits;
      std::string contract = slot == Slot::Output && loss == LossType::Nll ? " (log-probabilities for nll)"
                             : bce && !(slot == Slot::Output && loss == LossType::BceWithLogits)
                                 ? std::string(" (") + to_string(loss) + ")"
                                 : std::string();
      msg = what + " must lie in " + bounds_text(rule) + contract + "; found min " + format_number(rg.min) + ", max " +
            format_number(rg.max) + " (" + plural(rg.below + rg.above, "value") + " in " +
            plural(rg.bad_rows_total, "sample") + ")";
      if (slot == Slot::Output && loss == LossType::Bce) {
        cuda = cuda_text::kBceInput;
        ev["pytorch_cpu_error"] = "all elements of input should be between 0 and 1";
      }
      if (slot == Slot::Target && loss == LossType::Bce) {
        cuda = cuda_text::kBceTarget;
        ev["pytorch_cpu_error"] = "all elements of target should be between 0 and 1 (torch 2.x; 1.13 silently computes a wrong loss)";
      }
    }
    out.push_back({prefix + "-out-of-range", stage, msg, ev, rg.bad_rows, rg.bad_rows_total, cuda});
  }
  return out;
}

}  // namespace batchcheck
