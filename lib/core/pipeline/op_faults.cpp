#include "core/pipeline/op_faults.h"

#include <cstdio>

#include "core/base/text.h"
#include "core/pipeline/blame_stage.h"
#include "core/pipeline/classify.h"

namespace batchcheck {

namespace {

std::string short_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string where(const OpFault& f) {
  std::string at = f.site.op;
  if (!f.site.module.empty()) at += " in " + f.site.module + (f.module_type.empty() ? "" : " (" + f.module_type + ")");
  const std::string loc = op_location(f.site);
  if (!loc.empty()) at += " at " + loc + (f.site.source_line.empty() ? "" : ": " + f.site.source_line);
  return at;
}

nlohmann::ordered_json site_json(const OpFault& f) {
  nlohmann::ordered_json j = {{"op", f.site.op}};
  if (!f.site.module.empty()) j["module"] = f.site.module;
  if (!f.module_type.empty()) j["module_type"] = f.module_type;
  const std::string loc = op_location(f.site);
  if (!loc.empty()) j["location"] = loc;
  if (!f.site.source_line.empty()) j["source_line"] = f.site.source_line;
  if (!f.library_caller.empty()) j["called_from"] = f.library_caller;
  return j;
}

std::vector<uint64_t> rows_or_all(const OpFault& f, uint64_t batch) {
  return f.rows.empty() ? all_rows(batch) : f.rows;
}

}  // namespace

std::string op_location(const OpSite& s) {
  if (s.file.empty()) return "";
  return "File \"" + s.file + "\", line " + std::to_string(s.line);
}

std::vector<Emitted> op_fault_findings(const std::vector<OpFault>& faults, uint64_t batch, bool in_step) {
  std::vector<Emitted> out;
  const std::string owner = in_step ? ", in your step's " : ", in forward's ";
  const std::string stopped = in_step ? "the step" : "forward";
  for (const OpFault& f : faults) {
    nlohmann::ordered_json ev = site_json(f);
    ev["in_step"] = in_step;
    const std::vector<uint64_t> rows = rows_or_all(f, batch);
    const std::string consequence =
        f.fatal ? "; training raises there (on CUDA: a device-side assert), so batchcheck stopped " + stopped + " before it"
                : "; " + f.loss + " computes a loss from it without a word, a wrong one";
    if (!f.contract.empty()) {
      // An op's own contract (ctc_loss): its words, its numbers, the rows that break it.
      ev["contract"] = f.contract;
      ev["what"] = f.what;
      if (!f.detail.is_null()) ev["detail"] = f.detail;
      const std::string id = f.id == "index" ? "forward-error" : f.id;
      const std::string stage = id == "loss-nonfinite" ? "loss" : id == "target-out-of-range" ? "target" : "forward";
      out.push_back({id, stage,
                     f.text + " in " + plural(rows.size(), "sample") + " of a batch of " + std::to_string(batch) + owner + where(f) +
                         (f.fatal ? consequence : "; " + f.consequence),
                     ev, rows, rows.size(), ""});
      continue;
    }
    if (f.id == "shape-mismatch") {
      ev["loss"] = f.loss;
      ev["input_shape"] = f.input_shape;
      ev["target_shape"] = f.target_shape;
      const std::string in = "torch.Size([" + join_ints(f.input_shape, ", ") + "])", tgt = "torch.Size([" + join_ints(f.target_shape, ", ") + "])";
      const std::string raised = f.loss == "BCELoss" ? "Using a target size (" + tgt + ") that is different to the input size (" + in + ")"
                                                     : "Target size (" + tgt + ") must be the same as input size (" + in + ")";
      out.push_back({f.id, "output",
                     f.loss + " is given an input of shape [" + join_ints(f.input_shape, ", ") + "] and a target of shape [" +
                         join_ints(f.target_shape, ", ") + "] on a batch of " + std::to_string(batch) + owner + where(f) +
                         "; PyTorch raises \"" + raised + "\" there, so batchcheck stopped " + stopped + " before it",
                     ev, all_rows(batch), batch, ""});
      continue;
    }
    if (!f.loss.empty()) {
      // A loss's input or target outside its contract.
      const bool input = f.what == "input";
      ev["loss"] = f.loss;
      ev["argument"] = f.what;
      ev["elements"] = f.elements;
      if (f.nonfinite) ev["nonfinite"] = f.nonfinite;
      if (f.outside) ev["outside"] = f.outside;
      if (f.nonfinite < f.elements) {
        ev["min"] = f.min;
        ev["max"] = f.max;
      }
      std::string what = f.loss + "'s " + f.what + " holds ";
      if (f.nonfinite) what += std::to_string(f.nonfinite) + " NaN/Inf" + (f.outside ? " and " : "");
      if (f.outside) {
        what += plural(f.outside, "value") + " outside [0, 1] (min " + short_number(f.min) + ", max " + short_number(f.max) + ")";
      }
      const char* cuda = f.loss == "BCELoss" ? (input ? cuda_text::kBceInput : cuda_text::kBceTarget) : "";
      out.push_back({f.id, input ? "output" : "target",
                     what + " in " + plural(rows.size(), "sample") + " of a batch of " + std::to_string(batch) + owner +
                         where(f) + consequence,
                     ev, rows, rows.size(), cuda});
      continue;
    }
    // Indices past their bound: a class index (the loss's target), or an embedding's id.
    ev["what"] = f.what;
    ev["value"] = f.value;
    ev[f.bound_name] = f.bound;
    if (f.smallest) ev["smallest"] = *f.smallest;
    const bool target = f.id == "target-out-of-range";
    const char* cuda = target ? cuda_text::kClass
                       : f.site.op == "aten::one_hot" || f.site.op == "aten::gather" ? cuda_text::kScatterIndex
                                                        : "Assertion `srcIndex < srcSelectDimSize` failed.";
    out.push_back({target ? "target-out-of-range" : "forward-error", target ? "target" : "forward",
                   index_fault_text(f) + " in " + plural(rows.size(), "sample") + " of a batch of " + std::to_string(batch) +
                       owner + where(f) + consequence,
                   {{"index_fault", ev}}, rows, rows.size(), cuda});
  }
  return out;
}

}  // namespace batchcheck
