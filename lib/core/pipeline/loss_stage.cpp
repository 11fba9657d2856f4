#include "core/pipeline/loss_stage.h"

#include <cmath>

#include "core/base/text.h"
#include "core/pipeline/classify.h"
#include "core/pipeline/forward_stage.h"

namespace batchcheck {

std::optional<Emitted> loss_finding(const LossResult& loss, const LossConfig& cfg, uint64_t n,
                                    const ValueStats* class_target_stats) {
  const std::string name = to_string(cfg.type);
  if (!loss.ok && is_out_of_memory(loss.error)) return out_of_memory_finding("the loss", loss.error, n);
  if (!loss.ok) return Emitted{"loss-error", "loss", name + " raised: " + loss.error, {{"error", loss.error}}, all_rows(n), n, ""};
  if (!loss.nonfinite) return std::nullopt;
  std::string why;
  if (class_target_stats && cfg.reduction == Reduction::Mean && class_target_stats->ignored == class_target_stats->elements) {
    why = ": every target equals ignore_index " + std::to_string(cfg.ignore_index) + ", and the mean over zero elements is NaN";
  }
  nlohmann::ordered_json value =
      std::isnan(loss.value) ? nlohmann::ordered_json("nan") : nlohmann::ordered_json(format_number(loss.value));
  if (returns_loss(cfg.type)) {
    // The model's own loss: name its terms (torchvision's loss_classifier, loss_box_reg, ...).
    nlohmann::ordered_json ev = {{"loss", value}, {"nonfinite_elements", loss.nonfinite}};
    if (!loss.nonfinite_terms.empty()) ev["nonfinite_terms"] = loss.nonfinite_terms;
    return Emitted{"loss-nonfinite", "loss",
                   std::string(cfg.type == LossType::Step ? "the loss your training step returned is " : "the loss forward returned is ") +
                       format_number(loss.value) +
                       (loss.nonfinite_terms.empty() ? std::string() : " (not finite: " + join(loss.nonfinite_terms) + ")"),
                   ev, all_rows(n), n, ""};
  }
  return Emitted{"loss-nonfinite", "loss", name + " loss is " + format_number(loss.value) + why,
                 {{"loss", value}, {"nonfinite_elements", loss.nonfinite}}, all_rows(n), n, ""};
}

std::optional<Emitted> backward_finding(const BackwardResult& b, uint64_t n) {
  if (!b.ok && is_out_of_memory(b.error)) return out_of_memory_finding("loss.backward()", b.error, n);
  if (!b.ok) {
    nlohmann::ordered_json ev = {{"error", b.error}};
    if (!b.location.empty()) ev["location"] = b.location;
    if (!b.source_line.empty()) ev["source_line"] = b.source_line;
    if (!b.raised_in.empty()) ev["raised_in"] = b.raised_in;
    if (!b.traceback.empty()) ev["traceback"] = b.traceback;
    const bool lost = is_device_assert(b.error);
    return Emitted{lost ? "cuda-device-assert" : "backward-error", "backward",
                   "loss.backward() raised on a batch of " + plural(n, "sample") + " (forward and loss succeeded): " + b.error +
                       (lost ? "; that process's CUDA context is unusable after it (PyTorch cannot recover one), so batchcheck went on after this batch in a fresh process" : ""),
                   ev, all_rows(n), n, ""};
  }
  if (b.nonfinite_total == 0) return std::nullopt;
  nlohmann::ordered_json params = nlohmann::ordered_json::array();
  std::vector<std::string> names;
  for (const auto& g : b.nonfinite) {
    params.push_back({{"name", g.name}, {"elements", g.elements}, {"nan", g.nan}, {"inf", g.inf}});
    if (names.size() < 3) names.push_back(g.name + " (" + nonfinite_text(g.nan, g.inf, ", ") + ")");
  }
  const std::string more =
      b.nonfinite_total > names.size() ? " and " + std::to_string(b.nonfinite_total - names.size()) + " more" : "";
  return Emitted{"gradient-nonfinite", "backward",
                 "loss.backward() on a batch of " + plural(n, "sample") + " gave non-finite gradients to " +
                     plural(b.nonfinite_total, "parameter") + ": " + join(names) + more +
                     "; one optimizer step would write NaN/Inf into the weights",
                 {{"parameters", params}, {"nonfinite_parameters", b.nonfinite_total}}, all_rows(n), n, ""};
}

}  // namespace batchcheck
