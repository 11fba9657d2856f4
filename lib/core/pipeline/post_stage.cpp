#include "core/pipeline/post_stage.h"

#include <optional>

#include "core/pipeline/loss_stage.h"

namespace batchcheck {

namespace {

// One of loss.aux's extra outputs as a prediction, for its value checks and loss.
class AuxOutput : public BatchView {
 public:
  AuxOutput(BatchView& v, std::size_t k) : view_(v), k_(k) {}
  ValueStats check(Slot, const ValueRule& rule) override { return view_.check_aux(k_, rule); }
  LossResult loss(const LossConfig& loss) override { return view_.aux_loss(k_, loss); }

 private:
  BatchView& view_;
  std::size_t k_;
};

}  // namespace

void name_part(std::vector<Emitted>& emitted, const char* part, const std::string& key) {
  for (auto& e : emitted) {
    e.message = std::string(part) + " \"" + key + "\": " + e.message;
    e.evidence[part] = key;
  }
}

ValueStats check_values(const LossConfig& loss, uint64_t batch_size, Slot slot, const ValueRule& rule, const TensorMeta& meta,
                        BatchView& view, std::vector<Emitted>& out, const ValueStats* stats, bool rows_are_samples,
                        const std::vector<uint64_t>* row_samples) {
  ValueStats s = stats ? *stats : view.check(slot, rule);
  if (s.ok()) return s;
  for (auto& e : value_findings(slot, rule, meta, view, s, loss, batch_size, rows_are_samples, row_samples)) {
    out.push_back(std::move(e));
  }
  return s;
}

PostResult post_stage(const LossConfig& loss_cfg, const PostInput& in, BatchView& view) {
  PostResult result;
  std::vector<Emitted>& out = result.emitted;
  BatchStats& stats = result.stats;
  const ContractPlan& plan = in.plan;
  const uint64_t n = in.batch_size;
  if (plan.output_rule) {
    const ValueStats s =
        check_values(loss_cfg, n, Slot::Output, *plan.output_rule, in.output, view, out, nullptr, plan.output_rows_are_samples);
    if (s.elements > s.nan + s.inf) {
      stats.pred_min = s.min;
      stats.pred_max = s.max;
    }
    stats.pred_nonfinite = s.nan + s.inf;
    stats.band_lo = plan.output_rule->lo;
    stats.band_hi = plan.output_rule->hi;
  }
  std::optional<ValueStats> target_stats;
  if (plan.target_rule) {
    target_stats = view.check(Slot::Target, *plan.target_rule);
    check_values(loss_cfg, n, Slot::Target, *plan.target_rule, in.target, view, out, &*target_stats);
  }
  bool can_compute_loss = plan.can_compute_loss;
  for (std::size_t k = 0; k < in.aux.size(); ++k) {
    const AuxPlan& a = in.aux[k];
    can_compute_loss = can_compute_loss && a.plan.can_compute_loss;
    if (!a.plan.output_rule) continue;
    AuxOutput one(view, k);
    std::vector<Emitted> found;
    check_values(loss_cfg, n, Slot::Output, *a.plan.output_rule, a.meta, one, found, nullptr, a.plan.output_rows_are_samples);
    name_part(found, "output", loss_cfg.aux[k].first);
    for (auto& e : found) out.push_back(std::move(e));
  }
  if (!can_compute_loss || in.prior_error || !out.empty()) return result;

  const ValueStats* class_stats = plan.class_targets && target_stats ? &*target_stats : nullptr;
  const LossResult loss = view.loss(loss_cfg);
  stats.loss_nonfinite = loss.ok && loss.nonfinite > 0;
  if (auto e = loss_finding(loss, loss_cfg, n, class_stats)) {
    out.push_back(std::move(*e));
    return result;
  }
  double total = loss.value;
  // The training loss sums them: a non-finite extra loss makes it non-finite.
  for (std::size_t k = 0; k < in.aux.size(); ++k) {
    AuxOutput one(view, k);
    const LossResult extra = one.loss(loss_cfg);
    stats.loss_nonfinite = extra.ok && extra.nonfinite > 0;
    if (auto e = loss_finding(extra, loss_cfg, n, class_stats)) {
      std::vector<Emitted> found{std::move(*e)};
      name_part(found, "output", loss_cfg.aux[k].first);
      out.push_back(std::move(found.front()));
      return result;
    }
    total += loss_cfg.aux[k].second * extra.value;
  }
  if (loss.ok) stats.loss = total;
  return result;
}

}  // namespace batchcheck
