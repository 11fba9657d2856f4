#include "core/forward_stage.h"

#include <optional>

#include "core/classify.h"
#include "core/export_guard.h"
#include "core/text.h"

namespace batchcheck {

Emitted forward_failure(const ForwardResult& fwd, const ForwardFailureContext& ctx) {
  const std::optional<ExportGuard> guard = parse_export_guard(fwd.error);
  const uint64_t n = ctx.batch_size;
  std::string id = guard ? "export-shape-guard" : classify_forward_error(fwd.error, n, ctx.largest_ok_batch);
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
    msg = describe_export_guard(*guard, n) +
          "; in training, AOTInductor runs its compiled code on this batch unchecked (the checks run only with "
          "AOTI_RUNTIME_CHECK_INPUTS=1): outside the shapes it was compiled for, its results are undefined";
  } else if (id == "cuda-device-assert") {
    msg = "a CUDA kernel's assertion fired during forward on a batch of " + plural(n, "sample") + ": " + fwd.error +
          "; the device is unusable after it, so the scan stopped here (--device cpu names the failing op)";
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

}  // namespace batchcheck
