#include "core/scan/replay.h"

#include <algorithm>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "core/base/errors.h"
#include "core/base/log.h"
#include "core/base/text.h"
#include "core/findings/error_text.h"
#include "core/findings/findings.h"
#include "core/pipeline/classify.h"
#include "core/pipeline/collate_stage.h"
#include "core/pipeline/contract.h"
#include "core/pipeline/forward_stage.h"
#include "core/pipeline/localize_stage.h"
#include "core/pipeline/loss_stage.h"
#include "core/pipeline/model_findings.h"
#include "core/pipeline/post_stage.h"
#include "core/pipeline/value_findings.h"
#include "core/pipeline/worker.h"
#include "core/plan/step_order.h"
#include "core/report/catalog.h"
#include "core/scan/replayer.h"

namespace batchcheck {

namespace detail {

void Replayer::run_probes(uint64_t first_step, const std::vector<int64_t>& delivered) {
  if (!complete_ || failing_) return;
  if (shard_ && shard_->index != 0) return;  // shard 0 runs them
  bool reset = false;
  const auto& sizes = cfg_.checks.probe_batch_sizes;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t size = sizes[i];
    const uint64_t step = first_step + i;
    if (size > delivered.size() || size == 0 || !runs(step)) continue;
    if (stop_requested()) {
      complete_ = false;
      break;
    }
    if (!reset) {
      collect_pending();
      backend_.reset_model();
      reset = true;
    }
    std::vector<int64_t> probe(delivered.begin(), delivered.begin() + static_cast<std::ptrdiff_t>(size));
    BatchContext ctx{StepInfo{step, std::nullopt, std::nullopt, true, size}, &probe, false};
    check_batch(ctx);
    collect_pending();
    if (log_enabled(LogLevel::debug)) {
      log_debug("probe batch of " + std::to_string(size) + ": " + (batch_has_error_ ? "findings" : "ok"));
    }
    if (failing_) break;
  }
  collect_pending();
  if (stop_requested()) complete_ = false;
}

// The undecided --jobs default's first job, asked to go on as job 0 of J: it keeps the steps up
// to the next multiple of J (the next one may be read already), then every J-th.
void Replayer::split_if_requested(std::optional<uint64_t> next_step) {
  if (!settings_.split || !shard_ || !shard_->job() || shard_->count != 1 || !next_step) return;
  const int jobs = settings_.split->load();
  if (jobs < 2) return;
  const uint64_t j = static_cast<uint64_t>(jobs);
  const uint64_t from = (*next_step + j - 1) / j * j;
  shard_ = Shard{0, j, Shard::kJobsSource, from};
  sink_.split(j, from);
}

void Replayer::run(const OrderFn& order) {
  const DatasetInfo data = backend_.dataset();
  model_ = backend_.model();
  input_names_ = backend_.input_names();
  backward_ = backward_enabled(cfg_);
  // Weights that are NaN in the file are every batch's root cause already (model-nonfinite).
  localize_ = cfg_.checks.root_cause && resume_.localize && model_root_cause(model_, cfg_.model.mode).is_null();
  blame_ = cfg_.checks.root_cause && resume_.localize;
  loaded_bad_batchnorm_ = backend_.nonfinite_batchnorm_stats();
  LoaderSpec spec = loader_spec(cfg_.loader, data.samples);
  BatchPlan plan(compute_geometry(spec), spec.recorded ? std::vector<int64_t>{} : order(spec));
  const Geometry& g = plan.geometry();
  check_rank_share(g, cfg_.file);

  const std::vector<uint64_t> ranks = replay_ranks(spec.world_size, settings_.rank,
                                                     spec.share ? std::optional<uint64_t>(spec.share->rank) : std::nullopt);
  const std::vector<uint64_t> batch_list = replay_batches(g.batches_per_rank, settings_.edges, cfg_.checks.max_batches);
  const uint64_t per_rank = batch_list.size();
  const uint64_t total = per_rank * ranks.size();
  total_ = total;

  ScanStart start;
  start.data = data;
  start.model = model_;
  start.device = backend_.device();
  start.device_note = backend_.device_note();
  start.libtorch = settings_.libtorch_version;
  start.backward = backward_;
  start.ranks = ranks;
  start.replay_steps = total;
  start.geometry = geometry_findings(plan, ranks, cfg_.loss.type);
  sink_.start(start);
  // Said here, before its batches' lines; once: by job 0 of a --jobs scan, not again by a
  // resumed replay.
  if (log_enabled(LogLevel::debug) && resume_.start_step == 0 && (!shard_ || !shard_->job() || shard_->index == 0)) {
    log_debug(scan_start_line(start));
  }

  auto indices_of = [&](uint64_t step) { return plan.batch_indices(ranks[step / per_rank], batch_list[step % per_rank]); };
  // The probes read the first samples the first scanned rank delivers (its first batches'):
  // never one only another rank trains on, or one no batch holds.
  std::vector<int64_t> probe_samples;
  uint64_t largest_probe = 0;
  for (uint64_t p : cfg_.checks.probe_batch_sizes) largest_probe = std::max(largest_probe, p);
  for (uint64_t b = 0; b < g.batches_per_rank && probe_samples.size() < largest_probe; ++b) {
    for (int64_t i : plan.batch_indices(ranks.front(), b)) {
      if (probe_samples.size() < largest_probe) probe_samples.push_back(i);
    }
  }
  // --fail-fast: the probes, then every rank's first and last batch, then the rest.
  const bool fail_fast = settings_.fail_fast && settings_.fail_on != FailOn::Never;
  delivered_ = produced_sizes(g);
  const StepOrder steps(ranks.size(), per_rank, fail_fast, [this](uint64_t s) { return runs(s); });
  if (fail_fast) {
    run_probes(total, probe_samples);
    collect_pending();
    backend_.reset_model();  // the replay starts from the model as loaded
  }
  std::vector<int64_t> indices, next;
  bool have_next = false;
  std::optional<uint64_t> current_rank;
  StepOrder::Cursor cursor = steps.start(resume_.start_step);
  for (std::optional<uint64_t> step = failing_ ? std::nullopt : steps.next(cursor); step;) {
    if (stop_requested()) {
      complete_ = false;
      break;
    }
    const uint64_t rank = ranks[*step / per_rank], b = batch_list[*step % per_rank];
    if (current_rank && *current_rank != rank) {
      // Each DDP rank trains its own replica loaded from the file: no running statistics
      // carry over from the previous rank's batches.
      collect_pending();
      backend_.reset_model();
    }
    current_rank = rank;
    indices = have_next ? std::move(next) : indices_of(*step);
    // The batch after this one, so the backend can read it during this forward.
    StepOrder::Cursor after = cursor;
    const std::optional<uint64_t> following = steps.next(after);
    have_next = following.has_value();
    if (have_next) next = indices_of(*following);
    BatchContext ctx{StepInfo{*step, rank, b, false, indices.size()}, &indices, rank == ranks.front()};
    check_batch(ctx, have_next ? &next : nullptr);
    if (fail_fast) collect_pending();  // this step's findings decide whether to go on
    if (log_enabled(LogLevel::debug)) {
      log_debug("rank " + std::to_string(spec.rank_id(rank)) + " batch " + std::to_string(b) + " (" + plural(indices.size(), "sample") +
                "): " + (batch_has_error_ ? "findings" : "ok"));
    }
    if (failing_) break;
    split_if_requested(following);
    cursor = after;
    step = following;
  }
  collect_pending();
  if (failing_) complete_ = false;
  if (!fail_fast) run_probes(total, probe_samples);
  ScanEnd end;
  end.complete = complete_;
  end.device_lost = device_lost_;
  end.stopped_at_error = failing_;
  sink_.finish(end);
}

}  // namespace detail

std::string scan_start_line(const ScanStart& s) {
  return "batchcheck: " + std::to_string(s.data.samples) + " samples, checking " + std::to_string(s.replay_steps) +
         " batches on " + s.device;
}

void replay(const Config& cfg, const ScanSettings& settings, Backend& backend, const OrderFn& order, ScanSink& sink,
            const ReplayResume& resume) {
  detail::Replayer r(cfg, settings, backend, sink, resume);
  r.run(order);
}

}  // namespace batchcheck
