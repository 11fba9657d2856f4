#include "core/scan/replayer.h"

#include <algorithm>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "core/base/errors.h"
#include "core/base/text.h"
#include "core/findings/error_text.h"
#include "core/findings/findings.h"
#include "core/pipeline/blame_stage.h"
#include "core/pipeline/op_faults.h"
#include "core/pipeline/classify.h"
#include "core/pipeline/collate_stage.h"
#include "core/pipeline/contract.h"
#include "core/pipeline/forward_stage.h"
#include "core/pipeline/localize_stage.h"
#include "core/pipeline/precision_stage.h"
#include "core/pipeline/loss_stage.h"
#include "core/pipeline/model_findings.h"
#include "core/pipeline/post_stage.h"
#include "core/pipeline/value_findings.h"
#include "core/pipeline/worker.h"
#include "core/plan/step_order.h"
#include "core/report/catalog.h"

namespace batchcheck::detail {

void Replayer::record(const BatchContext& ctx, const std::string& id, const std::string& stage,
                      const std::string& message, nlohmann::ordered_json evidence, const std::vector<uint64_t>& rows,
                      uint64_t total_rows, const std::string& cuda_equivalent) {
  batch_has_error_ = true;
  if (settings_.fail_fast && fails(default_severity(id), settings_.fail_on) &&
      (!ctx.step.probe || std::find(delivered_.begin(), delivered_.end(), ctx.step.size) != delivered_.end())) {
    failing_ = true;
  }
  RecordEvent ev;
  ev.at = ctx.step;
  ev.id = id;
  ev.stage = stage;
  ev.message = message;
  ev.evidence = std::move(evidence);
  ev.count = total_rows;
  ev.cuda = cuda_equivalent;
  const std::vector<int64_t>& indices = *ctx.indices;
  for (uint64_t r : rows) {
    // A row of the batch, never of a tensor that is larger than the batch.
    if (r >= indices.size()) continue;
    if (ev.samples.size() >= kSampleCap) break;
    const int64_t idx = indices[r];
    if (std::find(ev.samples.begin(), ev.samples.end(), idx) == ev.samples.end()) ev.samples.push_back(idx);
  }
  auto key = std::make_tuple(id, ctx.step.rank ? static_cast<int64_t>(*ctx.step.rank) : -1,
                             ctx.step.probe ? ctx.step.size : 0);
  // The first record of each finding names its batch; a half-headroom record may lead the
  // finding later (the scan's largest value), so each names its own.
  if (keys_sent_.insert(key).second || id == "half-headroom") ev.batch_indices = indices;
  sink_.record(std::move(ev));
}

StepEnd Replayer::step_end(const BatchContext& ctx, bool forward_ok) const {
  StepEnd e;
  e.step = ctx.step.step;
  e.forward_ok = forward_ok;
  e.size = ctx.size();
  if (ctx.shapes) {
    e.shapes = BatchShapes{ctx.step.batch.value_or(0), ctx.size(), backend_.meta(Slot::Input),
                           backend_.meta(Slot::Output), backend_.meta(Slot::Target)};
  }
  return e;
}

void Replayer::forward_failed(const BatchContext& ctx, const ForwardResult& fwd) {
  ForwardFailureContext fc;
  fc.batch_size = ctx.size();
  fc.largest_ok_batch = largest_ok_batch_;
  const TensorMeta in = backend_.meta(Slot::Input);
  if (in.present) fc.input_dtype = in.dtype;
  fc.batchnorm_modules = model_.batchnorm_modules;
  fc.trains_exported = cfg_.model.trains_exported;
  if (fwd.unchecked) {
    apply(ctx, {unchecked_batch_finding(fwd.error, ctx.size())});
    return;
  }
  Emitted e = forward_failure(fwd, fc);
  if (fwd.eager) {
    // Raised by the user's own code in their process: the capture here is not what ran, so it
    // is not searched for samples or shapes; the module is the one their traceback passed.
    const std::string::size_type paren = fwd.module.rfind(" (");
    if (e.id == "batchnorm-single-value" && paren != std::string::npos && fwd.module.back() == ')') {
      name_raising_module(e, fwd.module.substr(0, paren), fwd.module.substr(paren + 2, fwd.module.size() - paren - 3));
    } else if (!fwd.module.empty()) {
      e.evidence["module"] = fwd.module;
    }
    e.evidence["raised_by"] = "your code";
    apply(ctx, {e});
    return;
  }
  if (e.id == "cuda-device-assert") device_lost_ = true;
  if (is_shape_error(fwd.error) && blame_) {
    // A size a trace froze is the trace's, not the user's code: once seen, each failure that
    // names the same shape is it; else the batch runs once more, reading what the op was given.
    const auto names = [&fwd](const FrozenShape& f) {
      return fwd.error.find("shape '[" + join_ints(f.shape, ", ") + "]'") != std::string::npos;
    };
    std::optional<FrozenShape> frozen;
    if (frozen_ && names(*frozen_)) {
      frozen = frozen_;
      frozen->input_shape.clear();
    } else if (blamed_["trace-frozen-shape"] < kBlamePerId) {
      ++blamed_["trace-frozen-shape"];
      sink_.localizing(ctx.step);
      if (std::optional<ArgumentRun> run = backend_.forward_arguments(device_lost_); run && run->frozen) frozen = run->frozen;
    }
    if (frozen) {
      if (!frozen->input_shape.empty()) frozen_ = frozen;
      apply(ctx, {frozen_shape_finding(*frozen, e, ctx.size())});
      return;
    }
  }
  if (e.id == "batchnorm-single-value" && blame_ && blamed_[e.id] < kBlamePerId) {
    // The error points into torch's functional.py: the BatchNorm layer is where its check raised.
    ++blamed_[e.id];
    sink_.localizing(ctx.step);
    if (std::optional<ArgumentRun> run = backend_.forward_arguments(device_lost_); run && !run->raised_module.empty()) {
      name_raising_module(e, run->raised_module, run->raised_module_type);
    }
  }
  if (blame_ && blamable(e.id) && ctx.size() > 1 && blamed_[e.id] < kBlamePerId) {
    ++blamed_[e.id];
    // Which samples it follows: forwards on parts of the batch (on the CPU where the device is
    // lost). Told as localizing: a process that dies here costs the search, not the batch.
    sink_.localizing(ctx.step);
    const bool lost = device_lost_;
    RunArguments arguments;
    // An index past its bound (or CUDA's assert, which hides which): the op's arguments say.
    if (lost || asserts_on_cuda(fwd.error)) arguments = [this, lost] { return backend_.forward_arguments(lost); };
    const Blame b = blame_forward_error(
        fwd, ctx.size(), lost, [this, lost](const std::vector<uint64_t>& rows) { return backend_.forward_rows(rows, lost); },
        arguments);
    apply_blame(e, b, *ctx.indices);
  }
  apply(ctx, {e});
}

// An allocation the batch could not get (LibTorch's allocator, std::bad_alloc) is a finding for
// that batch, as training would die there, and the scan goes on with the next one. After the
// step ended (the localizer) it is dropped: a root cause is a bonus.
void Replayer::check_batch(const BatchContext& ctx, const std::vector<int64_t>* next) {
  try {
    check_batch_stages(ctx, next);
  } catch (const InputError&) {
    throw;  // the data itself cannot be read at this batch size: exit 2, named (data_source)
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    if (ended_step_ == ctx.step.step || (pending_ && pending_->ctx.step.step == ctx.step.step)) return;
    collect_pending();  // the batch before it comes first, as everywhere
    apply(ctx, {out_of_memory_finding("checking the batch", parse_error_text(e.what()).message, ctx.size())});
    end_step(step_end(ctx, false));
  }
}

void Replayer::end_step(const StepEnd& e) {
  ended_step_ = e.step;
  sink_.end(e);
}

void Replayer::check_batch_stages(const BatchContext& ctx, const std::vector<int64_t>* next) {
  batch_has_error_ = false;
  sink_.begin(ctx.step, *ctx.indices);
  std::optional<LoadFailure> failure = backend_.load_batch(*ctx.indices);
  if (next) backend_.prefetch(*next);
  if (failure) {
    // PyTorch raises from next(iter(loader)): the model never sees this batch.
    collect_pending();
    apply(ctx, {failure->unreadable.empty() ? collate_finding(failure->collate) : unreadable_finding(failure->unreadable)});
    end_step(step_end(ctx, false));
    return;
  }
  // Every input field: one finding per field, named when there are several.
  const std::vector<std::string>& names = input_names_;
  for (std::size_t k = 0; k < names.size(); ++k) {
    const TensorMeta input = backend_.input_meta(k);
    auto rule = input_rule(input);
    if (!rule) continue;
    CurrentInputField view(backend_, k);
    ValueStats stats = view.check(Slot::Input, *rule);
    if (stats.ok()) continue;
    std::vector<Emitted> emitted;
    const std::vector<uint64_t> row_samples = backend_.input_row_samples(k);
    check_values(cfg_.loss, ctx.size(), Slot::Input, *rule, input, view, emitted, &stats, true,
                 row_samples.empty() ? nullptr : &row_samples);
    if (names.size() > 1) name_part(emitted, "field", names[k]);
    apply(ctx, emitted);
  }
  if (ctx.step.batch && *ctx.step.batch == 0 && !ctx.step.probe) {
    // CUDA refuses the loss at the first batch, whatever forward then does.
    if (auto e = bce_autocast_finding(cfg_, ctx.size())) apply(ctx, {*e});
  }
  const bool inputs_bad = batch_has_error_;
  if (single_value_check(ctx, inputs_bad) && backend_.nonfinite_batchnorm_stats() != loaded_bad_batchnorm_) {
    // Statistics an earlier batch made NaN (a batch of one, NaN inputs or activations) would
    // be taken for this batch's: start it from the model as loaded (train-mode outputs never
    // read the running statistics), so each batch of one is judged alone, as it is in
    // whichever job of --jobs runs it.
    collect_pending();
    backend_.reset_model();
  }

  ForwardResult fwd = backend_.forward();
  // The previous batch's post-forward stage ran during this forward: record it now,
  // before this batch's own post stage, so every id sees its batches in order.
  collect_pending();
  // The loss ops inside the user's own step (loss.type "step"), checked where they ran.
  const std::vector<Emitted> op_faults = op_fault_findings(fwd.faults, ctx.size(), cfg_.loss.type == LossType::Step);
  apply(ctx, op_faults);
  if (!fwd.ok) {
    // Stopped before a loss op that would raise (or assert): its findings say why.
    if (!fwd.stopped) forward_failed(ctx, fwd);
    end_step(step_end(ctx, false));
    if (fwd.stopped) {
      CurrentBatch current(backend_);
      localize(ctx, op_faults, std::nullopt, current);
    }
    return;
  }
  largest_ok_batch_ = std::max(largest_ok_batch_, ctx.size());
  if (cfg_.precision.dtype != Precision::Fp32) {
    // Half precision: an op that overflowed comes first, as the NaN it made comes later.
    apply(ctx, half_findings(backend_.half_check(cfg_.checks.half_headroom), ctx.size(), cfg_.checks.half_headroom));
  }
  if (single_value_check(ctx, inputs_bad)) {
    check_batchnorm_stats(ctx);
  }

  const TensorMeta output = backend_.meta(Slot::Output);
  const TensorMeta target = backend_.meta(Slot::Target);
  ContractPlan plan = plan_contract(cfg_.loss, cfg_.checks, ctx.size(), output, target);
  for (const auto& issue : plan.issues) {
    record(ctx, issue.id, issue.id == "target-dtype" ? "target" : "output", issue.message, issue.evidence,
           all_rows(ctx.size()), ctx.size());
  }
  std::vector<AuxPlan> aux;
  for (std::size_t k = 0; k < cfg_.loss.aux.size(); ++k) {
    AuxPlan a{backend_.aux_meta(k), {}};
    a.plan = plan_contract(cfg_.loss, cfg_.checks, ctx.size(), a.meta, target);
    std::vector<Emitted> issues;
    for (const auto& issue : a.plan.issues) {
      if (issue.id == "target-dtype") continue;  // the target's own: found with the prediction
      issues.push_back({issue.id, "output", issue.message, issue.evidence, all_rows(ctx.size()), ctx.size(), ""});
    }
    name_part(issues, "output", cfg_.loss.aux[k].first);
    apply(ctx, issues);
    aux.push_back(std::move(a));
  }
  PostInput post_in{plan, std::move(aux), output, target, ctx.size(), batch_has_error_};
  const uint64_t elements = output.numel() + target.numel();
  // Overlapping costs a thread hand-off (microseconds): only for large batches.
  std::shared_ptr<BatchView> view = elements >= (1u << 16) ? backend_.snapshot() : nullptr;
  if (!view) {
    CurrentBatch current(backend_);
    PostResult post = post_stage(cfg_.loss, post_in, current);
    apply(ctx, post.emitted);
    // The loss was computed and is finite exactly when nothing was found in this batch.
    if (backward_ && plan.can_compute_loss && !batch_has_error_) run_backward(ctx);
    StepEnd end = step_end(ctx, true);
    end.stats = post.stats;
    end_step(end);
    localize(ctx, post.emitted, plan.output_rule, current);
    return;
  }
  if (!worker_) worker_ = std::make_unique<Worker<PostResult>>();
  pending_ = std::make_unique<PendingPost>();
  pending_->indices = *ctx.indices;
  pending_->ctx = ctx;
  pending_->ctx.indices = &pending_->indices;
  pending_->end = step_end(ctx, true);
  pending_->view = view;
  pending_->rule = plan.output_rule;
  pending_->result = worker_->submit([this, post_in, view] { return post_stage(cfg_.loss, post_in, *view); });
}

void Replayer::apply(const BatchContext& ctx, const std::vector<Emitted>& emitted) {
  for (const auto& e : emitted) record(ctx, e.id, e.stage, e.message, e.evidence, e.rows, e.total, e.cuda);
}

void Replayer::collect_pending() {
  if (!pending_) return;
  std::unique_ptr<PendingPost> p = std::move(pending_);
  const bool had_error = batch_has_error_;
  PostResult post;
  try {
    post = p->result.get();
  } catch (const std::exception& e) {
    // Its own batch's allocation failure, never the batch being checked now.
    if (!is_out_of_memory(e)) throw;
    apply(p->ctx, {out_of_memory_finding("checking the prediction", parse_error_text(e.what()).message, p->ctx.size())});
    sink_.end(p->end);
    batch_has_error_ = had_error;
    return;
  }
  apply(p->ctx, post.emitted);
  p->end.stats = post.stats;
  sink_.end(p->end);
  localize(p->ctx, post.emitted, p->rule, *p->view);
  batch_has_error_ = had_error;  // the flag belongs to the batch being checked now
}

void Replayer::run_backward(const BatchContext& ctx) {
  if (auto e = backward_finding(backend_.backward(), ctx.size())) {
    if (e->id == "cuda-device-assert") device_lost_ = true;
    apply(ctx, {*e});
  }
}

// After the step ended: re-run the batch instrumented to say where its NaN or out-of-range
// prediction came from. The sink hears the start first, so a process that dies here is known
// to have died in the localizer, not in the batch.
void Replayer::localize(const BatchContext& ctx, const std::vector<Emitted>& emitted, const std::optional<ValueRule>& rule,
                        BatchView& view) {
  if (!localize_) return;
  std::optional<LocalizePlan> plan = plan_localize(emitted, rule, ctx.size(), localized_);
  if (!plan) return;
  sink_.localizing(ctx.step);
  std::optional<Localization> l = view.localize(plan->req);
  CauseEvent c;
  c.at = ctx.step;
  c.ids = plan->ids;
  c.root_cause = l ? root_cause_json(*l, *ctx.indices) : nlohmann::ordered_json();
  sink_.cause(std::move(c));
}

void Replayer::check_batchnorm_stats(const BatchContext& ctx) {
  // A trace made in eval mode runs BatchNorm on its running statistics: nothing raises and
  // nothing turns NaN here, but the user's eager model in train mode raises at this batch.
  if (model_.frozen_eval.batch_norm > 0) {
    const std::vector<BatchNormSite> sites = backend_.frozen_batchnorm_single_value();
    if (!sites.empty()) {
      std::vector<std::string> modules;
      for (const auto& s : sites) modules.push_back(s.module);
      const std::string shape = "[" + join_ints(sites.front().input_shape, ",") + "]";
      record(ctx, "batchnorm-single-value", "forward",
             "BatchNorm " + sites.front().module + " gets one value per channel (input " + shape +
                 ") on this batch of 1 sample: in train mode PyTorch raises \"Expected more than 1 value per channel "
                 "when training\" here, so training stops at this batch; the archive was traced in eval mode, which "
                 "normalizes with the running statistics and hides it" +
                 (sites.size() > 1 ? " (" + plural(sites.size() - 1, "more BatchNorm op", "more BatchNorm ops") + " too)" : ""),
             {{"batchnorm_modules", modules}, {"input_shape", sites.front().input_shape}, {"traced_in", "eval"}}, {0}, 1);
      return;
    }
  }
  // Only a batch of one can give BatchNorm a single value per channel; the statistics were
  // as loaded before it (see check_batch), so those NaN now are this batch's doing.
  std::vector<std::string> fresh;
  for (const auto& name : backend_.nonfinite_batchnorm_stats()) {
    if (std::find(loaded_bad_batchnorm_.begin(), loaded_bad_batchnorm_.end(), name) == loaded_bad_batchnorm_.end()) {
      fresh.push_back(name);
    }
  }
  if (fresh.empty()) return;
  record(ctx, "batchnorm-single-value", "forward",
         "BatchNorm saw one value per channel in train mode on a batch of 1 sample and raised nothing "
         "(a traced model loses PyTorch's check), but its running_var became NaN: every evaluation after "
         "this epoch returns NaN",
         {{"batchnorm_modules", fresh}, {"nonfinite_running_stats", true}}, {0}, 1);
}

// Probes: batches of the given sizes from the start of the dataset, on the model exactly
// as loaded from its file (no running statistics from the replay's batches).

}  // namespace batchcheck::detail
