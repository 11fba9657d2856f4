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
    f.fixes.push_back({"ctc-labels-past-blank", "number the target labels from 1: the blank is " + blank,
                       "targets = targets + 1  # labels 0..C-2 become 1..C-1; or nn.CTCLoss(blank=C - 1) with the last class free",
                       "the model's output classes shift by one: its head needs C = labels + 1", {}});
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
