#pragma once
// The replay's machinery, shared by its two translation units: replay.cpp walks the steps
// (ranks, batches, probes, splits) and replay_batch.cpp runs one batch through the stages.
// Not an interface: only core/scan includes it.
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/pipeline/backend.h"
#include "core/pipeline/forward_stage.h"
#include "core/pipeline/post_stage.h"
#include "core/pipeline/value_findings.h"
#include "core/pipeline/worker.h"
#include "core/scan/replay.h"

namespace batchcheck::detail {

struct BatchContext {
  StepInfo step;
  const std::vector<int64_t>* indices = nullptr;
  bool shapes = false;  // the report's first/last batch shapes come from this step
  uint64_t size() const { return step.size; }
};

// A batch whose post-forward stage runs on the worker.
struct PendingPost {
  std::vector<int64_t> indices;
  BatchContext ctx;
  StepEnd end;
  std::future<PostResult> result;
  std::shared_ptr<BatchView> view;  // for localizing its bad values afterwards
  std::optional<ValueRule> rule;    // the prediction's contract
};

class Replayer {
 public:
  Replayer(const Config& cfg, const ScanSettings& settings, Backend& backend, ScanSink& sink, const ReplayResume& resume)
      : cfg_(cfg), settings_(settings), backend_(backend), sink_(sink), resume_(resume),
        shard_(settings.shard), largest_ok_batch_(resume.largest_ok_batch) {}

  void run(const OrderFn& order);

 private:
  bool runs(uint64_t step) const {
    if (shard_ && step < total_ && !shard_->has_step(step)) return false;  // another shard's
    return step >= resume_.start_step && resume_.skip.count(step) == 0;
  }
  void check_batch(const BatchContext& ctx, const std::vector<int64_t>* next = nullptr);
  void check_batch_stages(const BatchContext& ctx, const std::vector<int64_t>* next);
  void end_step(const StepEnd& e);
  void record(const BatchContext& ctx, const std::string& id, const std::string& stage, const std::string& message,
              nlohmann::ordered_json evidence, const std::vector<uint64_t>& rows, uint64_t total_rows,
              const std::string& cuda_equivalent = "");
  void apply(const BatchContext& ctx, const std::vector<Emitted>& emitted);
  void collect_pending();
  void forward_failed(const BatchContext& ctx, const ForwardResult& fwd);
  void check_batchnorm_stats(const BatchContext& ctx);
  // NaN inputs turn running statistics NaN at any batch size: that is input-nonfinite's
  // finding, not a single value per channel.
  bool single_value_check(const BatchContext& ctx, bool inputs_bad) const {
    return cfg_.model.mode == Mode::Train && !model_.batchnorm_modules.empty() && ctx.size() == 1 && !inputs_bad;
  }
  void run_backward(const BatchContext& ctx);
  void localize(const BatchContext& ctx, const std::vector<Emitted>& emitted, const std::optional<ValueRule>& rule,
                BatchView& view);
  void run_probes(uint64_t first_step, const std::vector<int64_t>& delivered);
  void split_if_requested(std::optional<uint64_t> next_step);
  bool stop_requested() const { return device_lost_ || (settings_.stop && settings_.stop->load() != 0); }
  StepEnd step_end(const BatchContext& ctx, bool forward_ok) const;

  const Config& cfg_;
  const ScanSettings& settings_;
  Backend& backend_;
  ScanSink& sink_;
  const ReplayResume& resume_;
  std::optional<Shard> shard_;  // this replay's steps (settings_.shard, until it splits)
  bool backward_ = false;
  uint64_t total_ = 0;  // replay steps; the probes follow
  uint64_t largest_ok_batch_ = 0;
  bool batch_has_error_ = false;
  bool complete_ = true;
  // --fail-fast: a finding that fails the gate was recorded (probes at sizes the loader
  // never delivers are warnings: they do not count).
  bool failing_ = false;
  std::vector<uint64_t> delivered_;
  // A device-side assert leaves the CUDA context unusable: nothing after it can run.
  bool device_lost_ = false;
  uint64_t ended_step_ = UINT64_MAX;  // the last step whose end the sink heard from check_batch
  ModelInfo model_;
  std::vector<std::string> input_names_;  // the backend's input fields, fixed for the scan
  std::vector<std::string> loaded_bad_batchnorm_;  // BatchNorm statistics NaN in the file: not ours to report
  std::set<std::tuple<std::string, int64_t, uint64_t>> keys_sent_;  // (id, rank, probe size) with batch indices sent
  bool localize_ = true;
  std::map<std::string, unsigned> localized_;  // per finding id
  bool blame_ = true;  // search a failed forward's batch for its samples (checks.root_cause)
  std::map<std::string, unsigned> blamed_;  // batches searched per finding id
  std::optional<FrozenShape> frozen_;        // a shape the trace froze, once a failure showed it
  std::unique_ptr<PendingPost> pending_;
  std::unique_ptr<Worker<PostResult>> worker_;
};

}  // namespace batchcheck::detail
