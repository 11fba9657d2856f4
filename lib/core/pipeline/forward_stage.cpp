#include "core/pipeline/forward_stage.h"

#include <algorithm>
#include <optional>

#include "core/base/text.h"
#include "core/parse/export_guard.h"
#include "core/pipeline/classify.h"

namespace batchcheck {

Emitted out_of_memory_finding(const std::string& what, const std::string& error, uint64_t n) {
  nlohmann::ordered_json ev = {{"error", error}};
  const std::optional<uint64_t> bytes = allocation_bytes(error);
  if (bytes) ev["bytes_requested"] = *bytes;
  return {"batch-out-of-memory", "forward",
          what + " ran out of memory on a batch of " + plural(n, "sample") +
              (bytes ? " (it asked for " + std::to_string(*bytes) + " bytes)" : std::string()) + ": " + error +
              "; training dies here the same way",
          ev, all_rows(n), n, ""};
}

namespace {

// "torch.Size([1, 3])" at `at` in `s` -> {1, 3}; nullopt where it is not one.
std::optional<std::vector<int64_t>> torch_size_at(const std::string& s, std::string::size_type at) {
  static const std::string kOpen = "torch.Size([";
  if (s.compare(at, kOpen.size(), kOpen) != 0) return std::nullopt;
  const std::string::size_type end = s.find("])", at);
  if (end == std::string::npos) return std::nullopt;
  std::vector<int64_t> dims;
  std::string::size_type p = at + kOpen.size();
  while (p < end) {
    std::size_t used = 0;
    try {
      dims.push_back(std::stoll(s.substr(p, end - p), &used));
    } catch (const std::exception&) {
      return std::nullopt;
    }
    p += used;
    while (p < end && (s[p] == ',' || s[p] == ' ')) ++p;
  }
  return dims;
}

// PyTorch's size check of a loss's input and target, written in Python (a trace loses it):
// BCELoss "Using a target size (T) that is different to the input size (I)", BCEWithLogitsLoss
// "Target size (T) must be the same as input size (I)". {loss, input, target}.
struct LossSizeMismatch {
  std::string loss;
  std::vector<int64_t> input, target;
};
std::optional<LossSizeMismatch> loss_size_mismatch(const std::string& m) {
  struct Form {
    const char* loss;
    const char* target_at;
    const char* input_at;
  };
  static const Form kForms[] = {{"BCELoss", "Using a target size (", "that is different to the input size ("},
                                {"BCEWithLogitsLoss", "Target size (", "must be the same as input size ("}};
  for (const Form& f : kForms) {
    const std::string::size_type t = m.find(f.target_at), i = m.find(f.input_at);
    if (t == std::string::npos || i == std::string::npos) continue;
    auto target = torch_size_at(m, t + std::string(f.target_at).size());
    auto input = torch_size_at(m, i + std::string(f.input_at).size());
    if (target && input) return LossSizeMismatch{f.loss, *input, *target};
  }
  return std::nullopt;
}

}  // namespace

Emitted forward_failure(const ForwardResult& fwd, const ForwardFailureContext& ctx) {
  if (const std::optional<LossSizeMismatch> m = loss_size_mismatch(fwd.error)) {
    // The step's loss raised its own size check: the shapes it was given, as the check says.
    nlohmann::ordered_json ev = {{"error", fwd.error}, {"loss", m->loss}, {"input_shape", m->input}, {"target_shape", m->target}};
    if (!fwd.location.empty()) ev["location"] = fwd.location;
    if (!fwd.source_line.empty()) ev["source_line"] = fwd.source_line;
    return {"shape-mismatch", "output",
            m->loss + " is given an input of shape [" + join_ints(m->input, ", ") + "] and a target of shape [" +
                join_ints(m->target, ", ") + "] on a batch of " + plural(ctx.batch_size, "sample") + " and raises: " + fwd.error,
            ev, all_rows(ctx.batch_size), ctx.batch_size, ""};
  }
  const std::optional<ExportGuard> guard = parse_export_guard(fwd.error);
  const uint64_t n = ctx.batch_size;
  // torch.export treats a dynamic dimension's sizes 0 and 1 as special and guards it to >= 2:
  // the eager model it came from takes the batch of one the program refuses.
  const bool specialized = guard && guard->kind == ExportGuard::Kind::TooSmall && guard->dim == 0 && guard->expected == 2 &&
                           guard->got == 1 && n == 1 && !ctx.trains_exported;
  std::string id = specialized ? "export-batch-specialized"
                   : guard     ? "export-shape-guard"
                               : classify_forward_error(fwd.error, n, ctx.largest_ok_batch);
  nlohmann::ordered_json ev = {{"error", fwd.error}};
  if (!fwd.location.empty()) ev["location"] = fwd.location;
  if (!fwd.source_line.empty()) ev["source_line"] = fwd.source_line;
  if (!fwd.raised_in.empty()) ev["raised_in"] = fwd.raised_in;
  if (!fwd.traceback.empty()) ev["traceback"] = fwd.traceback;
  if (ctx.largest_ok_batch) ev["largest_ok_batch_size"] = ctx.largest_ok_batch;
  if (id == "batchnorm-single-value" && !ctx.batchnorm_modules.empty()) ev["batchnorm_modules"] = ctx.batchnorm_modules;
  std::string msg;
  if (ctx.input_dtype == "float64" && is_dtype_mismatch_error(fwd.error)) {
    // The classic: float64 numpy data into a float32 model.
    ev["cause"] = "input-dtype";
    ev["input_dtype"] = ctx.input_dtype;
    msg = "the inputs are float64 but the model computes in float32; forward raised on a batch of " +
          plural(n, "sample") + ": " + fwd.error;
  } else if (guard) {
    static const char* kinds[] = {"min", "max", "size", "stride", "dtype", "device"};
    ev["guard"] = {{"input", guard->input}, {"dim", guard->dim}, {"check", kinds[static_cast<int>(guard->kind)]},
                   {"expected", guard->expected}, {"got", guard->got}};
    // AOTInductor skips these checks unless AOTI_RUNTIME_CHECK_INPUTS is set (batchcheck sets it).
    msg = specialized
              ? describe_export_guard(*guard, n) +
                    ", so this batch was not checked; the eager model it was exported from trains on a batch of one, "
                    "so this is about the exported program, not the training run (model.trains_exported: true when "
                    "training runs this program itself)"
              : describe_export_guard(*guard, n) +
          "; in training, AOTInductor runs its compiled code on this batch unchecked (the checks run only with "
          "AOTI_RUNTIME_CHECK_INPUTS=1): outside the shapes it was compiled for, its results are undefined";
  } else if (id == "cuda-device-assert") {
    msg = "a CUDA kernel's assertion fired during forward on a batch of " + plural(n, "sample") + ": " + fwd.error +
          "; that process's CUDA context is unusable after it (PyTorch cannot recover one), so batchcheck went on after this batch in a fresh process";
  } else if (id == "batch-out-of-memory") {
    Emitted e = out_of_memory_finding("forward", fwd.error, n);
    for (const auto& [key, value] : ev.items()) {
      if (!e.evidence.contains(key)) e.evidence[key] = value;
    }
    return e;
  } else if (id == "batchnorm-single-value") {
    msg = "BatchNorm saw one value per channel in train mode on a batch of " + plural(n, "sample") + ": " + fwd.error;
  } else if (id == "hardcoded-batch-size") {
    msg = "forward runs at batch size " + std::to_string(ctx.largest_ok_batch) + " but fails at " + std::to_string(n) +
          " with a shape error: " + fwd.error;
  } else {
    msg = "forward raised on a batch of " + plural(n, "sample") + ": " + fwd.error;
  }
  return {id, "forward", msg, ev, all_rows(n), n, cuda_equivalent_of_forward_error(fwd.error)};
}

Emitted unchecked_batch_finding(const std::string& why, uint64_t batch_size) {
  return {"batch-unchecked", "forward", why, {{"error", why}}, all_rows(batch_size), batch_size, ""};
}

Emitted frozen_shape_finding(const FrozenShape& frozen, const Emitted& failed, uint64_t batch_size) {
  Emitted e = failed;
  e.id = "trace-frozen-shape";
  const std::string shape = "[" + join_ints(frozen.shape, ", ") + "]";
  uint64_t values = 1;
  for (int64_t d : frozen.input_shape) values *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  std::string at = frozen.site.op;
  if (!frozen.site.file.empty()) at += " at File \"" + frozen.site.file + "\", line " + std::to_string(frozen.site.line);
  e.message = "the trace froze the shape " + shape + " into " + at +
              " (torch.jit.trace records the example batch's sizes as constants where the code reads them as Python "
              "numbers): this batch's [" + join_ints(frozen.input_shape, ", ") + "] (" + std::to_string(values) +
              " values, a batch of " + plural(batch_size, "sample") +
              ") does not fit it, so the traced model fails here and this batch was not checked (nor any other batch "
              "this finding lists). The eager model it came from runs here where its code reads the size from the input "
              "(int(x.size(0)), a shape a library computes); a literal size in the code fails eagerly too. To check "
              "these batches: batchcheck.scan() from Python (a capture per batch shape), or torch.jit.script";
  e.evidence["frozen_shape"] = frozen.shape;
  e.evidence["input_shape"] = frozen.input_shape;
  e.evidence["op"] = frozen.site.op;
  e.cuda.clear();
  return e;
}

void name_raising_module(Emitted& e, const std::string& module, const std::string& type) {
  e.evidence["module"] = module;
  if (!type.empty()) e.evidence["module_type"] = type;
  const std::string named = "BatchNorm " + module + (type.empty() ? "" : " (" + type + ")") + " saw";
  const std::string::size_type at = e.message.find("BatchNorm saw");
  if (at != std::string::npos) e.message.replace(at, std::string("BatchNorm saw").size(), named);
}

std::optional<Emitted> reclassify_forward_failure(const std::string& id, const nlohmann::ordered_json& evidence,
                                                  uint64_t batch_size, uint64_t largest_ok_batch,
                                                  const std::vector<std::string>& batchnorm_modules) {
  // Only what forward_failure() made, and not the dtype's own message (its context is gone); a
  // batch no capture could run was not run at all: never "forward raised".
  if (id == "export-shape-guard" || id == "export-batch-specialized" || id == "trace-frozen-shape" || id == "batch-unchecked" ||
      !evidence.contains("error") ||
      evidence.contains("cause")) {
    return std::nullopt;
  }
  if (evidence.value("largest_ok_batch_size", uint64_t{0}) == largest_ok_batch) return std::nullopt;
  ForwardResult fwd;
  fwd.error = evidence.at("error").get<std::string>();
  fwd.location = evidence.value("location", "");
  fwd.source_line = evidence.value("source_line", "");
  fwd.raised_in = evidence.value("raised_in", "");
  fwd.traceback = evidence.value("traceback", "");
  ForwardFailureContext ctx;
  ctx.batch_size = batch_size;
  ctx.largest_ok_batch = largest_ok_batch;
  ctx.batchnorm_modules = batchnorm_modules;
  Emitted e = forward_failure(fwd, ctx);
  for (const auto& [key, value] : evidence.items()) {
    // Added after it; a search for the samples belongs to the id it was made for.
    if (!e.evidence.contains(key) && key != "largest_ok_batch_size" && (key != "blame" || e.id == id)) e.evidence[key] = value;
  }
  return e;
}

}  // namespace batchcheck
