#include "core/pipeline/precision_stage.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/base/text.h"
#include "core/findings/root_cause.h"

namespace batchcheck {

namespace {

// 77382.82 -> "77,383": a magnitude against 65,504, not a float's digits.
std::string magnitude(double v) {
  if (!(std::fabs(v) >= 1000.0) || std::fabs(v) >= 1e15) return format_number(v);
  std::string digits = std::to_string(static_cast<long long>(std::llround(std::fabs(v))));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::string ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}

// Reached, not rounded up: 0.599 is 59%, and 0.29 (28.999... in binary) 29%.
std::string percent(double share) { return std::to_string(static_cast<int>(std::floor(share * 100.0 + 1e-9))) + "%"; }

std::string rows_text(const std::vector<uint64_t>& rows, uint64_t batch_size) {
  if (rows.empty() || rows.size() >= batch_size) return "the whole batch of " + std::to_string(batch_size);
  return plural(rows.size(), "sample", "samples") + " of a batch of " + std::to_string(batch_size);
}

nlohmann::ordered_json site_evidence(const Localization& l) {
  nlohmann::ordered_json e = op_site_json(l.site);
  e["dtype"] = l.dtype;
  return e;
}

}  // namespace

std::vector<Emitted> half_findings(const HalfCheck& h, uint64_t batch_size, double headroom) {
  std::vector<Emitted> out;
  if (!h.ran) return out;
  const bool fp16 = h.dtype == "float16";
  const double limit = fp16 ? kHalfMax : 3.3895313892515355e38;  // bfloat16's largest: float32's range
  if (h.overflow) {
    const Localization& l = *h.overflow;
    const double v = *l.fp32_max;
    std::vector<uint64_t> rows = l.origin_rows;
    Emitted e;
    e.id = "half-overflow";
    e.stage = "forward";
    e.message = l.dtype + " overflow in " + op_site_text(l.site) + ": in float32 this op gives " + magnitude(v) +
                (v > limit ? " > " + magnitude(limit) + ", " + l.dtype + "'s largest value" : "") + "; in " + l.dtype +
                " it gives " + nonfinite_text(l.output.nan, l.output.pos_inf + l.output.neg_inf) + " in " +
                rows_text(rows, batch_size) +
                ", and from there the predictions and the loss go NaN/inf (in training: a skipped step with a GradScaler, "
                "NaN weights without one). A GradScaler does not help: it scales the gradients, not forward's values";
    e.evidence = {{"op", site_evidence(l)}, {"fp32_max", v}, {"limit", limit}, {"dtype", l.dtype}};
    e.rows = rows.empty() ? all_rows(batch_size) : rows;
    e.total = e.rows.size();
    out.push_back(std::move(e));
  }
  if (h.peak_site && fp16 && h.peak_site->peak && *h.peak_site->peak >= headroom * kHalfMax) {
    const Localization& l = *h.peak_site;
    const double v = *l.peak, share = v / kHalfMax;
    Emitted e;
    e.id = "half-headroom";
    e.stage = "forward";
    e.message = "float16 headroom: " + op_site_text(l.site) +  " gave " + magnitude(v) + ", " + percent(share) +
                " of float16's largest value 65,504 (the warning is at " + percent(headroom) + "), in " +
                rows_text(l.origin_rows, batch_size) + "; inputs " + ratio(kHalfMax / v) +
                "x as large overflow here (half-overflow): the next epochs' augmentations or a drift in the weights will";
    e.evidence = {{"op", site_evidence(l)}, {"peak", v}, {"share", share}, {"headroom", headroom}, {"limit", kHalfMax}};
    e.rows = l.origin_rows.empty() ? all_rows(batch_size) : l.origin_rows;
    e.total = e.rows.size();
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<Emitted> bce_autocast_finding(const Config& cfg, uint64_t batch_size) {
  if (cfg.precision.dtype == Precision::Fp32) return std::nullopt;
  const bool step = cfg.loss.type == LossType::Step && cfg.precision.bce_in_step;
  if (cfg.loss.type != LossType::Bce && !step) return std::nullopt;
  Emitted e;
  e.id = "bce-autocast-unsafe";
  e.stage = "loss";
  e.message = std::string(step ? "your step calls binary_cross_entropy (BCELoss) inside its torch.autocast"
                               : "BCELoss (binary_cross_entropy) under torch.autocast") +
              " in " + dtype_name(cfg.precision.dtype) +
              ": on CUDA PyTorch refuses it at the first batch (\"unsafe to autocast\"); its log(p) loses the small "
              "probabilities a sigmoid in half precision rounds to 0 and 1." +
              (step ? "" : " The scan ran this loss in float32");
  e.evidence = {{"loss", "bce"}, {"precision", to_string(cfg.precision.dtype)}};
  e.cuda = "RuntimeError: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.";
  e.rows = all_rows(batch_size);
  e.total = batch_size;
  return e;
}

}  // namespace batchcheck
