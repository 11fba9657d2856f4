#include "core/pipeline/collate_stage.h"

#include "core/base/text.h"
#include "core/pipeline/contract.h"

namespace batchcheck {

Emitted collate_finding(const CollateFailure& failure) {
  const bool padded = failure.padded;
  Emitted e;
  e.id = "collate-error";
  e.stage = "collate";
  if (failure.users) {
    // The user's own collate_fn raised: its words, and the samples that raise it alone.
    e.message = "your collate_fn raised on this batch: " + failure.error;
    e.evidence = {{"field", failure.field}, {"collate", "yours"}, {"error", failure.error}};
    e.rows = failure.rows;
    e.total = failure.rows.size();
    return e;
  }
  std::vector<std::string> shapes;
  nlohmann::ordered_json shape_list = nlohmann::ordered_json::array();
  for (const auto& [shape, count] : failure.shapes) {
    if (shapes.size() < 8) shapes.push_back(shape_text(shape) + (count > 1 ? " x" + std::to_string(count) : ""));
    shape_list.push_back({{"shape", shape}, {"count", count}});
  }
  if (failure.shapes.size() > 8) shapes.push_back("... (" + std::to_string(failure.shapes.size()) + " shapes)");
  e.message = std::string(padded ? "pad_sequence" : "default_collate") + " cannot put this batch's " + failure.field +
              " together: " + failure.error + "; the samples' shapes: " + join(shapes);
  if (!padded && failure.shapes.size() > 1) {
    e.message += "; the DataLoader raises this at this batch (samples of unequal size need a padding collate_fn)";
  }
  e.evidence = {{"field", failure.field},
                {"collate", padded ? "pad" : "default"},
                {"error", failure.error},
                {"sample_shapes", shape_list}};
  e.rows = failure.rows;
  e.total = failure.rows.size();
  return e;
}

}  // namespace batchcheck

namespace batchcheck {

Emitted unreadable_finding(const std::vector<UnreadableSample>& samples) {
  Emitted e;
  e.id = "sample-unreadable";
  e.stage = "load";
  std::vector<std::string> shown;
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  const bool dataset = !samples.empty() && samples.front().dataset;
  for (const auto& s : samples) {
    if (shown.size() < 4) {
      shown.push_back(s.dataset ? "dataset[" + std::to_string(s.index) + "]" + (s.file.empty() ? " (its file is not known)" : " (" + s.file + ")") +
                                      ": " + s.error
                                : s.file + " (" + s.error + ")");
    }
    nlohmann::ordered_json entry = {{"file", s.file}, {"error", s.error}};  // "" where not known
    if (s.dataset) entry["index"] = s.index;
    files.push_back(entry);
    e.rows.push_back(s.row);
  }
  if (samples.size() > shown.size()) shown.push_back("... (" + std::to_string(samples.size()) + (dataset ? " samples)" : " files)"));
  e.message = dataset ? std::string(samples.size() == 1 ? "your Dataset cannot load a sample: " : "your Dataset cannot load samples: ") +
                            join(shown) + "; the DataLoader raises at this batch, so training stops here"
                      : std::string(samples.size() == 1 ? "a sample's file cannot be loaded: " : "samples' files cannot be loaded: ") +
                            join(shown) + "; the DataLoader raises at this batch (PIL cannot open or decode " +
                            (samples.size() == 1 ? "it" : "them") + "), so training stops here";
  e.evidence = {{"files", files}};
  if (dataset) e.evidence["source"] = "dataset";
  e.total = samples.size();
  return e;
}

}  // namespace batchcheck
