// The batch side of localizing: the instrumented forward through the model runner, then
// halving the batch (plain forwards on subsets of its rows) to the samples that cause it.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "engine/model/localize_batch.h"

#include "engine/localize/localize.h"
#include "engine/model/model_runner.h"
#include "engine/model/outputs.h"
#include "engine/torch_util.h"

namespace batchcheck {

namespace {

bool still_bad(const at::Tensor& p, const LocalizeRequest& req) {
  if (!p.defined() || !p.is_floating_point() || p.numel() == 0) return false;
  at::Tensor d = p.detach();
  if (req.nonfinite) return !at::isfinite(d).all().item<bool>();
  return (req.lo && (d < *req.lo).any().item<bool>()) || (req.hi && (d > *req.hi).any().item<bool>());
}

}  // namespace

std::optional<Localization> localize_batch(ModelRunner& model, const Config& cfg, const std::vector<c10::IValue>& args,
                                           uint64_t batch, const LocalizeRequest& req) {
  std::optional<Localization> result;
  const std::vector<at::Tensor> kept = model.save_buffers();
  auto prediction = [&cfg](const c10::IValue& out) { return select_outputs(out, cfg).prediction; };
  LocalizeRequest asked = req;
  asked.batch = batch;
  try {
    result = model.localize(args, asked, prediction);
    if (result) result->forwards = 1;
    if (result && !result->origin.empty() && req.halve && batch > 1) {
      bool sliceable = true;
      for (const auto& a : args) sliceable = sliceable && batch_rows(a, {0}, batch).has_value();
      if (sliceable) {
        // The rows alone: their prediction is bad, clean, or forward raised (another failure,
        // such as BatchNorm on one sample).
        enum class Alone { Bad, Clean, Raised };
        auto run = [&](const std::vector<uint64_t>& rows) {
          std::vector<c10::IValue> sub;
          for (const auto& a : args) sub.push_back(*batch_rows(a, rows, batch));
          try {
            at::NoGradGuard no_grad;
            return still_bad(prediction(model.forward(sub)), req) ? Alone::Bad : Alone::Clean;
          } catch (const std::exception&) {
            return Alone::Raised;
          }
        };
        auto fails = [&](const std::vector<uint64_t>& rows) { return run(rows) == Alone::Bad; };
        // Where the bad value appeared in only some rows, those are the samples: one forward
        // on them alone confirms it (unless they come out clean); else the search.
        Halving h;
        const auto& seen = result->origin_rows;
        if (!seen.empty() && seen.size() < batch && run(seen) != Alone::Clean) {
          h.rows = seen;
          h.forwards = 1;
        } else {
          Halving search = halve_failing_rows(batch, fails);
          search.forwards += seen.empty() || seen.size() >= batch ? 0 : 1;
          h = std::move(search);
        }
        result->halved = true;
        result->rows = std::move(h.rows);
        result->batch_dependent = h.batch_dependent;
        result->forwards += h.forwards;
      }
    }
  } catch (const std::exception&) {  // a root cause is a bonus: its failure is no finding
    result.reset();
  }
  model.restore_buffers(kept);
  return result;
}

}  // namespace batchcheck
