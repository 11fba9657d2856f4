#include "core/findings/contract_fixes.h"

#include <string>

#include "core/base/text.h"

namespace batchcheck {

namespace {

void ctc_fixes(Finding& f, const std::string& what, const nlohmann::ordered_json& d) {
  if (what == "target longer than input") {
    // The lengths first: an input length counted before a subsampling, or a target the audio
    // cannot hold; zero_infinity only silences those samples.
    f.fixes.push_back({"ctc-lengths", "give ctc_loss the input lengths after the model's subsampling, and drop samples whose "
                                      "target needs more frames than their input has",
                       "keep = target_lengths + repeats <= input_lengths  # repeats: equal labels in a row, each needs a "
                       "blank between them; filter the dataset by it",
                       "fewer samples; a target longer than its audio cannot be aligned at all", {}});
    if (!d.value("zero_infinity", false)) {
      f.fixes.push_back({"ctc-zero-infinity", "make ctc_loss 0 for a sample that cannot be aligned instead of inf",
                         "nn.CTCLoss(zero_infinity=True)",
                         "those samples stop training without a word: the loss no longer says the lengths are wrong", {}});
    }
  } else if (what == "blank in target") {
    const std::string blank = std::to_string(d.value("blank", int64_t{0}));
    const Fix shift{"ctc-labels-past-blank", "number the target labels from 1: the blank is " + blank,
                    "targets = targets + 1  # labels 0..C-2 become 1..C-1; or nn.CTCLoss(blank=C - 1) with the last class free",
                    "the model's output classes shift by one: its head needs C = labels + 1", {}};
    const Fix drop{"filter-blank-targets", "drop (or re-transcribe) the samples whose target holds the blank " + blank,
                   "keep = [(t != " + blank + ").all() for t in targets]  # filter the dataset by it",
                   "fewer samples: a stray " + blank + " in a transcript is a data error", {}};
    // A few targets holding it: stray labels in the data; every target: labels numbered from 0.
    const bool stray = d.value("rows", uint64_t{0}) < d.value("batch", uint64_t{0});
    f.fixes.push_back(stray ? drop : shift);
    f.fixes.push_back(stray ? shift : drop);
  } else if (what == "target label") {
    const std::string v = std::to_string(d.value("value", int64_t{0}));
    f.fixes.push_back({"more-classes", "give the model as many output classes as the labels need (the blank included)",
                       "nn.Linear(in_features, " + std::to_string(d.value("value", int64_t{0}) + 1) + ")  # the last layer",
                       "a new head: retrain it", {}});
    f.fixes.push_back({"remap-labels", "map the label " + v + " to a class the model has", "targets[targets == " + v + "] = <class>",
                       "changes the labels", {}});
  } else if (what == "input length") {
    f.fixes.push_back({"ctc-lengths", "give ctc_loss input lengths no longer than log_probs' frames (its first dimension)",
                       "input_lengths = torch.full((N,), log_probs.shape[0], dtype=torch.long)  # or each sample's frames after subsampling",
                       "a length counted before the model's subsampling is too long", {}});
  }
}

}  // namespace

bool contract_fixes(Finding& f) {
  const std::string contract = f.evidence.value("contract", std::string());
  if (contract == "ctc_loss") {
    const nlohmann::ordered_json none = nlohmann::ordered_json::object();
    ctc_fixes(f, f.evidence.value("what", std::string()), f.evidence.contains("detail") ? f.evidence["detail"] : none);
    return true;
  }
  const std::string error = f.evidence.value("error", std::string());
  if (f.id == "forward-error" && error.find("All bounding boxes should have positive height and width") != std::string::npos) {
    // torchvision's detection models refuse a box of no area: a data error, filtered out.
    f.fixes.push_back({"filter-degenerate-boxes", "drop the boxes of zero width or height (x2 <= x1 or y2 <= y1) in the dataset",
                       "keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])\n"
                       "target[\"boxes\"], target[\"labels\"] = boxes[keep], target[\"labels\"][keep]",
                       "those annotations are lost: check how they were made", {}});
    return true;
  }
  if (f.id == "collate-error" && f.evidence.value("collate", std::string()) == "yours") {
    // Their own collate_fn raised on these samples (a label not in its list): dropped, the rest trains.
    f.fixes.push_back({"drop-failing-samples", "drop the samples your collate_fn raises on, or make it take them",
                       "dataset = torch.utils.data.Subset(dataset, [i for i in range(len(dataset)) if i not in bad])"
                       "  # bad: this finding's samples",
                       "fewer samples: what your collate_fn refused is in its error", {}});
    return true;
  }
  if (contract == "pack_padded_sequence" ||
      (f.id == "forward-error" && error.find("Length of all samples has to be greater than 0") != std::string::npos)) {
    // pack_padded_sequence on a sample of length 0: PyTorch raises; the sample is the finding's.
    f.fixes.push_back({"drop-empty-samples", "drop the samples of length 0 before batching (an empty text, a silent clip)",
                       "dataset = [s for s in dataset if len(s[0]) > 0]  # or skip them in collate_fn",
                       "fewer samples: check why they are empty", {}});
    return true;
  }
  return false;
}

}  // namespace batchcheck
