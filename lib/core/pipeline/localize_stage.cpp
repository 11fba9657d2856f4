#include "core/pipeline/localize_stage.h"

#include <algorithm>

namespace batchcheck {

std::optional<LocalizePlan> plan_localize(const std::vector<Emitted>& emitted, const std::optional<ValueRule>& rule,
                                          uint64_t batch_size, std::map<std::string, unsigned>& localized) {
  LocalizePlan p;
  for (const auto& e : emitted) {
    const bool nonfinite = e.id == "output-nonfinite" || e.id == "loss-nonfinite";
    // An extra output's range is not the prediction's: only its NaN is localized. Neither is
    // a region loss's (logits given as probabilities): no layer is at fault but the loss's
    // missing activation.
    const bool range = e.id == "output-out-of-range" && !e.evidence.contains("output") && !e.evidence.contains("activation") &&
                       rule && (rule->lo || rule->hi);
    if ((!nonfinite && !range) || localized[e.id] >= kLocalizePerId) continue;
    if (std::find(p.ids.begin(), p.ids.end(), e.id) != p.ids.end()) continue;
    p.ids.push_back(e.id);
    if (nonfinite) p.req.nonfinite = true;
    if (range) {
      p.req.lo = rule->lo;
      p.req.hi = rule->hi;
    }
    // A bad value in every row may be one sample's, spread by a batch statistic: halving
    // finds which.
    if (batch_size > 1 && e.rows.size() >= batch_size) p.req.halve = true;
  }
  if (p.ids.empty()) return std::nullopt;
  if (p.req.nonfinite) {
    // One run answers one question: the NaN first (a prediction's range is measured on
    // finite values).
    p.req.lo.reset();
    p.req.hi.reset();
    p.ids.erase(std::remove(p.ids.begin(), p.ids.end(), "output-out-of-range"), p.ids.end());
  }
  for (const auto& id : p.ids) ++localized[id];
  return p;
}

}  // namespace batchcheck
