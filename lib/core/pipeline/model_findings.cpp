#include "core/pipeline/model_findings.h"

#include "core/base/text.h"
#include "core/report/catalog.h"

namespace batchcheck {

namespace {

// "layer3.0.conv1.weight", "a and b", "a, b and 3 more" (the report keeps the full list).
std::string names_text(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 3;
  std::vector<std::string> shown(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(std::min(names.size(), kShown)));
  if (names.size() > kShown) return join(shown) + " and " + std::to_string(names.size() - kShown) + " more";
  if (shown.size() == 2) return shown[0] + " and " + shown[1];
  return join(shown);
}

}  // namespace

std::optional<Finding> model_nonfinite_finding(const ModelInfo& m, const std::string& model_path) {
  if (m.nonfinite_parameters.empty() && m.nonfinite_buffers.empty()) return std::nullopt;
  Finding f;
  f.id = "model-nonfinite";
  f.severity = default_severity(f.id);
  f.stage = "model";
  std::vector<std::string> parts;
  // How much of each parameter: all of it poisons every prediction; a few rows (one rare word's
  // embedding) only the predictions that use them.
  bool whole = m.nonfinite_weights.empty();
  std::vector<std::string> shown;
  nlohmann::ordered_json detail = nlohmann::ordered_json::array();
  for (const auto& w : m.nonfinite_weights) {
    // Only an embedding's rows spare the samples that do not hold their ids.
    whole = whole || w.nonfinite == w.values || !w.embedding || w.rows.empty();
    std::string s = w.name + ": " + std::to_string(w.nonfinite) + " of " + std::to_string(w.values) + " values";
    if (!w.rows.empty()) {
      s += std::string(w.rows_total == 1 ? ", in row " : ", in rows ") + join_ints(w.rows) +
           (w.rows_total > w.rows.size() ? " and " + std::to_string(w.rows_total - w.rows.size()) + " more" : "");
    }
    if (shown.size() < 3) shown.push_back(s);
    detail.push_back({{"name", w.name}, {"nonfinite", w.nonfinite}, {"values", w.values}, {"rows", w.rows}, {"rows_total", w.rows_total},
                      {"embedding", w.embedding}});
  }
  if (!m.nonfinite_parameters.empty()) {
    parts.push_back(plural(m.nonfinite_parameters.size(), "parameter") + " (" +
                    (shown.empty() ? names_text(m.nonfinite_parameters)
                                   : join(shown, "; ") + (m.nonfinite_weights.size() > shown.size() ? "; ..." : "")) +
                    ")");
  }
  if (!m.nonfinite_buffers.empty()) {
    parts.push_back(plural(m.nonfinite_buffers.size(), "buffer") + " (" + names_text(m.nonfinite_buffers) + ")");
  }
  f.message = "the model holds NaN or Inf in " + join(parts, " and ") + " as loaded from " + model_path +
              (m.nonfinite_parameters.empty() ? ": batches normalized with these statistics (eval mode) come out NaN"
               : whole                        ? ": every prediction computed with them is NaN, whatever the batch"
                                              : ": a prediction is NaN where its sample holds one of those ids (an "
                                                "embedding's rows), the others are not");
  f.evidence = {{"parameters", m.nonfinite_parameters}, {"buffers", m.nonfinite_buffers}};
  if (!detail.empty()) f.evidence["nonfinite_weights"] = detail;
  return f;
}

nlohmann::ordered_json model_root_cause(const ModelInfo& m, Mode mode) {
  const bool buffers = mode == Mode::Eval && !m.nonfinite_buffers.empty();
  if (m.nonfinite_parameters.empty() && !buffers) return nullptr;
  std::vector<std::string> names = m.nonfinite_parameters;
  if (buffers) names.insert(names.end(), m.nonfinite_buffers.begin(), m.nonfinite_buffers.end());
  return {{"kind", "model"},
          {"summary", "the model's own " + std::string(m.nonfinite_parameters.empty() ? "buffers" : "weights") +
                          " hold NaN or Inf as loaded (" + names_text(names) + "), not this batch: see model-nonfinite"},
          {"parameters", m.nonfinite_parameters},
          {"buffers", buffers ? m.nonfinite_buffers : std::vector<std::string>{}}};
}

}  // namespace batchcheck
