#include "core/findings/index_fixes.h"

#include <optional>

#include "core/base/text.h"

namespace batchcheck {

std::string ignore_index_call(const std::string& op, const std::string& value) {
  const bool nll = op.find("nll_loss") != std::string::npos;
  return std::string(nll ? "F.nll_loss" : "F.cross_entropy") + "(..., ignore_index=" + value + ")";
}

void class_index_fixes(std::vector<Fix>& fixes, double value, double classes, const std::string& ignore,
                       std::optional<double> smallest) {
  const std::string v = format_number(value);
  // A label equal to the number of classes is the classic off-by-one (classes numbered from
  // 1): map it first; ignoring it drops those samples from training without a word. Where the
  // labels seen hold 0, they are numbered from 0: shifting them makes -1, so that branch is out.
  const bool from_one = !smallest || *smallest >= 1;
  const bool off_by_one = classes > 0 && value == classes && from_one;
  const bool one_short = classes > 0 && value == classes && !from_one;
  const Fix remap{"remap-labels", "map out-of-range labels to valid classes in the dataset",
                  off_by_one ? "target = target - 1  # where the dataset numbers its " + format_number(classes) +
                                   " classes from 1; else target[target == " + v + "] = <class>"
                  : one_short ? "target[target == " + v + "] = <class>  # labels run 0.." + v + ": " +
                                    format_number(classes + 1) + " classes, or " + v + " is not a class"
                              : "target[target == " + v + "] = <class>",
                  "changes the labels", {}};
  if (one_short) {
    // Labels 0..C against C outputs: the head is one class short, the usual cause.
    fixes.push_back({"more-classes", "give the model " + format_number(classes + 1) + " outputs: its labels run from 0 to " + v,
                     "nn.Linear(in_features, " + format_number(classes + 1) + ")  # the last layer; n_classes=" +
                         format_number(classes + 1) + " where the model takes it",
                     "a new head: retrain it (a checkpoint's last layer no longer fits)", {}});
  }
  if (off_by_one || one_short) fixes.push_back(remap);
  if (!ignore.empty()) {
    fixes.push_back({"ignore-index", "ignore the label " + v + " in the loss", ignore,
                     "samples or pixels labelled " + v + " stop contributing to the loss: they are silently dropped from training", {}});
  }
  if (!off_by_one && !one_short) fixes.push_back(remap);
}

void library_class_index_fixes(std::vector<Fix>& fixes, double value, double classes) {
  const std::string v = format_number(value);
  fixes.push_back({"more-classes", "build the model with " + format_number(value + 1) + " classes: its labels reach " + v,
                   "model = ...(num_classes=" + format_number(value + 1) + ")  # torchvision's detection models count the background",
                   "a new head: retrain it (a checkpoint's last layer no longer fits)", {}});
  fixes.push_back({"remap-labels", "map the label " + v + " to one of the model's " + format_number(classes) + " classes in the dataset",
                   "target[\"labels\"][target[\"labels\"] == " + v + "] = <class>", "changes the labels", {}});
}

bool library_location(const std::string& location) {
  return location.find("/site-packages/") != std::string::npos || location.find("/dist-packages/") != std::string::npos;
}

void dimension_index_fixes(std::vector<Fix>& fixes, int64_t value, int64_t size) {
  const std::string v = std::to_string(value), n = std::to_string(size);
  if (value >= 0) {
    fixes.push_back({"more-outputs", "give the layer that makes the indexed dimension " + std::to_string(value + 1) +
                                         " outputs (a Q-head as wide as the action space)",
                     "nn.Linear(in_features, " + std::to_string(value + 1) + ")  # was " + n + "; e.g. env.action_space.n",
                     "a new layer: retrain it; where " + v + " is not a valid index, filter the data instead", {}});
  }
  fixes.push_back({"filter-indices", "drop the samples whose index is outside [0, " + n + ") before they are batched",
                   "keep = (index >= 0) & (index < " + n + ")  # filter the dataset (a replay buffer's stored actions) by it",
                   "fewer samples: find where the bad index is written", {}});
}

void token_id_fixes(std::vector<Fix>& fixes, int64_t value, int64_t bound, const std::string& module) {
  if (value < 0) {
    fixes.push_back({"map-negative-ids", "a negative id reached the embedding (a label's -100 used as an input id?): map it to the pad token",
                     "ids = ids.masked_fill(ids < 0, pad_id)  # before the model; -100 belongs in the labels only",
                     "check that the pad id is masked out of the loss", {}});
    return;
  }
  // The most common index error of language models: a tokenizer or vocabulary that outgrew the
  // embedding, a special token added after it was built. What makes the loop train comes first.
  const std::string n = std::to_string(bound);
  fixes.push_back({"resize-embeddings", "make the embedding" + (module.empty() ? std::string() : " " + module) + " as large as the vocabulary",
                   "model.resize_token_embeddings(len(tokenizer))  # transformers; else nn.Embedding(len(vocab), dim)",
                   "the new rows start untrained; a saved checkpoint needs the same size", {}});
  fixes.push_back({"map-unknown-ids", "map ids past the vocabulary to the unknown token",
                   "ids = ids.masked_fill(ids >= " + n + ", unk_id)", "hides a real vocabulary mismatch", {}});
  // The check finds where the mismatch is made: evidence for the fixes above, not a fix itself.
  fixes.push_back({"check-vocab-size", "compare the vocabulary that made the ids with the embedding's " + n + " rows",
                   "assert len(tokenizer) <= model.get_input_embeddings().num_embeddings  # transformers; or max(vocab.values()) < " + n,
                   "finds the mismatch where it is made: a tokenizer whose vocabulary grew (added special tokens) after the model was built", {}});
}

}  // namespace batchcheck
