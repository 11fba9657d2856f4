#pragma once
// What the scan needs from a tensor library, without naming one. The LibTorch
// implementation lives in engine/torch_backend.cpp; tests can substitute their own.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/findings/root_cause.h"
#include "core/pipeline/value_check.h"

namespace batchcheck {

struct TensorMeta {
  bool present = false;
  std::vector<int64_t> shape;
  std::string dtype;  // "float32", "int64", ...
  bool floating = false;

  // Elements, or 0 when absent.
  uint64_t numel() const {
    if (!present) return 0;
    uint64_t n = 1;
    for (auto d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
};

struct DatasetInfo {
  uint64_t samples = 0;
  TensorMeta input, target;  // per-sample shapes (without the sample dimension)
  bool has_targets = false;
};

// Ops whose training flag tracing froze into the graph as a constant (a traced archive
// keeps the mode it was traced in, whatever model.train() says later).
struct FrozenModeOps {
  uint64_t batch_norm = 0, dropout = 0;
  uint64_t total() const { return batch_norm + dropout; }
};

// A BatchNorm op and the shape of what it normalized.
struct BatchNormSite {
  std::string module;  // its module path ("layer4.1.bn2")
  std::vector<int64_t> input_shape;
};

// A parameter holding NaN or Inf as loaded: how much of it, and which rows (its first dimension:
// an embedding's ids, a linear layer's outputs) where it has two dimensions or more.
struct NonfiniteWeight {
  std::string name;
  uint64_t nonfinite = 0, values = 0;
  std::vector<int64_t> rows;  // the first few
  uint64_t rows_total = 0;    // rows holding any; 0 where it has one dimension
  // An embedding's table (Embedding, EmbeddingBag): a row is an id, used by the samples that
  // hold it; any other layer's row is an output unit every sample goes through.
  bool embedding = false;
};

struct ModelInfo {
  std::vector<std::string> batchnorm_modules;  // qualified names of BatchNorm submodules
  std::string format = "torchscript";          // "torchscript" or "pt2" (an AOTInductor package)
  FrozenModeOps frozen_train, frozen_eval;     // constant training=True / training=False
  // Qualified names of the parameters and buffers that hold NaN or Inf as loaded from the file.
  std::vector<std::string> nonfinite_parameters, nonfinite_buffers;
  std::vector<NonfiniteWeight> nonfinite_weights;  // the parameters', in detail
  ForwardCall call;  // how forward is called on the batch (model.call, or the stream's greeting)
};

// A batch the collate function cannot build: default_collate stacking samples of unequal
// shape, or pad_sequence on samples whose trailing dimensions differ. PyTorch raises it from
// next(iter(loader)) at that batch, before the model runs.
struct CollateFailure {
  std::string field;    // the field's name ("inputs", "targets", or a record's key)
  bool padded = false;  // loader.collate pads it (pad_sequence), else default_collate stacks it
  std::string error;    // LibTorch's own message, as PyTorch raises it
  // The distinct per-sample shapes in batch order, with how many rows have each; a rank
  // that differs is a shape too.
  std::vector<std::pair<std::vector<int64_t>, uint64_t>> shapes;
  std::vector<uint64_t> rows;  // row 0, then the rows whose shape differs from row 0's
  bool users = false;  // the user's own collate_fn raised (batchcheck.scan()): its words, not a stacking's
};

// A sample the dataset cannot load (an image file PIL cannot open or decode): PyTorch raises
// from the dataset's __getitem__ at its batch, before the collate.
struct UnreadableSample {
  uint64_t row = 0;   // in the batch
  std::string file;   // as the user would find it (the root as written, then the relative path); "" where not known
  std::string error;  // why, in PIL's words where PIL has them
  // A Dataset of the user's (batchcheck.scan()), not an image folder: its index, and its file
  // only where the exception or the Dataset shows it.
  bool dataset = false;
  int64_t index = -1;
};

// Why a batch never reaches the model: the dataset raised (unreadable samples), or else the
// collate_fn did.
struct LoadFailure {
  std::vector<UnreadableSample> unreadable;  // every such sample of the batch, in row order
  CollateFailure collate;                    // when `unreadable` is empty
};

enum class Slot { Input, Output, Target };
const char* to_string(Slot s);

// An op's arguments outside its contract, read before it ran (engine/localize/argument_check.h): indices
// past their bound (an embedding's token ids, a loss's class indices: what CUDA's assert or the
// CPU's "index out of range in self" does not say), or a loss's input or target outside its
// range (BCE's [0, 1]) inside the model's own training step.
struct OpFault {
  OpSite site;               // the op, its module path, the user's line
  std::string module_type;   // the module's class ("Embedding"), where known
  // The finding it makes: "index" (an op's indices), or output-out-of-range, output-nonfinite,
  // target-out-of-range, target-nonfinite, shape-mismatch (a loss's input or target).
  std::string id = "index";
  std::string what;          // "token id", "class index", "class value"; "input", "target" of a loss
  std::string bound_name;    // "num_embeddings", "classes", "num_classes"
  int64_t value = 0;         // indices: the farthest value out of bounds
  int64_t bound = 0;
  std::optional<int64_t> smallest;  // indices: the smallest one given, where known (labels from 0 or 1)
  std::string loss;          // a loss's: "BCELoss", "BCEWithLogitsLoss"
  double lo = 0, hi = 0;     // its range, and the values seen: min, max (finite ones)
  double min = 0, max = 0;
  uint64_t outside = 0, nonfinite = 0, elements = 0;
  std::vector<int64_t> input_shape, target_shape;  // shape-mismatch: the loss's two shapes
  bool fatal = true;         // the op raises (on CUDA: asserts) on it; else it computes a wrong loss
  std::vector<uint64_t> rows;  // the batch's rows holding such values (empty: not per row)
  // An op's own contract beyond indices and a loss's range (ctc_loss's lengths and blank): its
  // name, what broke it in words, what the op does then (not fatal), and its numbers.
  std::string contract, text, consequence;
  nlohmann::ordered_json detail;
  // The installed library's line that called the op (torchvision's detection loss), where not
  // the user's: its arguments are not the user's to pass there.
  std::string library_caller;
};

struct ForwardResult {
  bool ok = false;
  std::string error;     // one line: the exception's message without C++ backtrace
  // TorchScript "File ..., line N" of the user's line that failed, when known, with its text,
  // and the library frame below it that raised (core/findings/error_text.h)
  std::string location, source_line, raised_in;
  std::string traceback; // the TorchScript traceback, when there is one
  // loss.type "step": the ops inside whose arguments broke their contract, in the order they
  // ran; `stopped`: forward stopped before the last of them ran (it would raise, or on CUDA
  // assert), so `error` is batchcheck's, not the model's.
  std::vector<OpFault> faults;
  bool stopped = false;
  // The user's own code raised this in their process (batchcheck.scan()), where the capture the
  // engine runs would not raise the same: no part of the batch is run again here. `module`: the
  // module whose forward raised, named there; `unchecked`: no capture computes what their code
  // does on this batch, which is therefore not checked.
  bool eager = false;
  bool unchecked = false;
  std::string module;
};


// A batch run in half precision (config precision fp16/bf16): what its forward's ops did to
// the dtype's range, watched on every op; the localizer's answers where they are needed.
struct HalfCheck {
  bool ran = false;           // the batch ran in half precision
  std::string dtype;          // "float16", "bfloat16"
  double peak = 0;            // the largest finite |value| an op's half output held
  // The first op whose half output went non-finite where the same op's float32 value is
  // finite: the overflow, placed (module, line, rows) and measured (fp32_max).
  std::optional<Localization> overflow;
  // The op whose half output held the peak, placed, when the peak reached the headroom share
  // and grew past the last one placed.
  std::optional<Localization> peak_site;
};

// A shape a trace froze into its graph (the example batch's), which the failing op was given:
// the traced model fails on other sizes where the eager model it came from runs.
struct FrozenShape {
  OpSite site;
  std::vector<int64_t> shape;        // the constant the op was given ([28, 1])
  std::vector<int64_t> input_shape;  // what it had to fit this batch
};

// The whole batch's forward once, through the argument check (engine/localize/argument_check.h).
struct ArgumentRun {
  std::optional<FrozenShape> frozen;  // the failing op's shape was a traced constant
  ForwardResult result;
  std::optional<OpFault> fault;
  // The module whose own Python raised the error (F.batch_norm's check inside layer4.1.bn2),
  // where a raise did; its class where known.
  std::string raised_module, raised_module_type;
};
// loss.backward() on the current batch: an error, or the parameters whose gradients
// are not finite.
struct GradStats {
  std::string name;  // qualified parameter name
  uint64_t elements = 0, nan = 0, inf = 0;
};
struct BackwardResult {
  bool ok = false;
  std::string error, location, source_line, raised_in, traceback;
  std::vector<GradStats> nonfinite;  // the first kMaxNonfiniteGrads, in parameter order
  uint64_t nonfinite_total = 0;      // parameters with non-finite gradients
};
constexpr std::size_t kMaxNonfiniteGrads = 32;

struct LossResult {
  bool ok = false;
  std::string error;
  uint64_t elements = 0;
  uint64_t nonfinite = 0;
  double value = 0;  // the reduced loss (first element for reduction="none")
  // Loss type "model": the terms of the dict forward returned that are not finite.
  std::vector<std::string> nonfinite_terms;
};

// One batch's prediction and target, frozen after its forward, so that its value checks
// and loss can run on another thread while the next batch's forward runs.
class BatchView {
 public:
  virtual ~BatchView() = default;
  virtual ValueStats check(Slot slot, const ValueRule& rule) = 0;  // Output or Target
  virtual LossResult loss(const LossConfig& loss) = 0;
  // loss.aux's extra outputs, by position in loss.aux.
  virtual ValueStats check_aux(std::size_t /*k*/, const ValueRule& /*rule*/) { return {}; }
  virtual LossResult aux_loss(std::size_t /*k*/, const LossConfig& /*loss*/) { return {}; }
  // Re-runs this batch's forward instrumented to say where a bad value came from
  // (core/findings/root_cause.h); called on the main thread, never while another forward runs.
  virtual std::optional<Localization> localize(const LocalizeRequest& /*req*/) { return std::nullopt; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DatasetInfo dataset() const = 0;
  virtual ModelInfo model() const = 0;
  // Reads these dataset indices as the current batch and collates them. Throws InputError
  // for unusable data files; a batch whose samples do not load or do not collate is returned
  // (a finding, not an error).
  virtual std::optional<LoadFailure> load_batch(const std::vector<int64_t>& indices) = 0;
  // A hint: the batch after the current one. A backend may read it (and check its inputs)
  // while the current batch runs; load_batch() with the same indices then takes it.
  virtual void prefetch(const std::vector<int64_t>& /*indices*/) {}
  // Shapes and dtypes of the current batch's tensors (Output after a successful forward).
  // Slot::Input is the first input field.
  virtual TensorMeta meta(Slot slot) const = 0;
  // The input fields forward takes, in order ({"inputs"} for one), and each one's batch.
  virtual std::vector<std::string> input_names() const { return {"inputs"}; }
  virtual TensorMeta input_meta(std::size_t /*field*/) const { return meta(Slot::Input); }
  virtual ValueStats check_input(std::size_t /*field*/, const ValueRule& rule) { return check(Slot::Input, rule); }
  // The sample (position in the batch) of each row of input `field`, where the batch's own index
  // structure proves it (a graph's batch vector, EmbeddingBag offsets, lengths); empty: its rows
  // are the samples, or not known.
  virtual std::vector<uint64_t> input_row_samples(std::size_t /*field*/) const { return {}; }
  virtual ValueStats check(Slot slot, const ValueRule& rule) = 0;
  virtual ForwardResult forward() = 0;
  virtual LossResult loss(const LossConfig& loss) = 0;
  // loss.aux's extra outputs of the current batch (after a successful forward), by position
  // in loss.aux. aux_loss() compares one with the target by the same loss; with backward on,
  // its weighted loss joins the one backward() propagates, as the training loss sums them.
  virtual TensorMeta aux_meta(std::size_t /*k*/) const { return {}; }
  virtual ValueStats check_aux(std::size_t /*k*/, const ValueRule& /*rule*/) { return {}; }
  virtual LossResult aux_loss(std::size_t /*k*/, const LossConfig& /*loss*/) { return {}; }
  // Back-propagates the loss of the last successful loss() call and clears the gradients
  // afterwards (no optimizer step: the parameters never change). Only called when the
  // backend was built with backward on.
  virtual BackwardResult backward() { return {}; }
  // After a forward that ran in half precision: what it did to the range (HalfCheck);
  // `headroom`: the share of float16's range whose op is placed. Not run: ran = false.
  virtual HalfCheck half_check(double /*headroom*/) { return {}; }
  // Restores the model exactly as loaded from its file (running statistics included), so
  // probes do not see state left by earlier batches.
  virtual void reset_model() {}
  // The device the backend runs on ("cpu", "cuda:0").
  virtual std::string device() const = 0;
  // Why the device is the one it is, where a launcher chose it ("" otherwise).
  virtual std::string device_note() const { return ""; }
  // BatchNorm modules whose running statistics are not finite now (after a forward in
  // train mode). A traced model runs BatchNorm on one value per channel without the
  // Python check that raises, and its running_var silently turns NaN.
  virtual std::vector<std::string> nonfinite_batchnorm_stats() { return {}; }
  // BatchNorm ops an eval-mode trace froze (training=False) that saw one value per channel in
  // the current batch's forward, in the order they ran: the user's eager model in train mode
  // raises at the first. Runs the batch again, instrumented; empty when there are none.
  virtual std::vector<BatchNormSite> frozen_batchnorm_single_value() { return {}; }
  // Forward again on these rows of the current batch, in this order, without autograd (a failed
  // forward's search for its samples: core/pipeline/blame_stage.h): on the CPU where `cpu` (a
  // device-side assert left the scan's device unusable), else on the scan's device. The model's
  // state is as before afterwards. nullopt where the backend cannot.
  virtual std::optional<ForwardResult> forward_rows(const std::vector<uint64_t>& /*rows*/, bool /*cpu*/) { return std::nullopt; }
  // The current batch's forward again, reading the indices its ops are given (embedding,
  // class indices): the op, the bound and the rows, where they show a failed forward's cause.
  // On the CPU where `cpu`, as forward_rows. nullopt where the backend cannot.
  virtual std::optional<ArgumentRun> forward_arguments(bool /*cpu*/) { return std::nullopt; }
  // The current batch's forward again, instrumented: where its bad value came from.
  virtual std::optional<Localization> localize(const LocalizeRequest& /*req*/) { return std::nullopt; }
  // The current batch's prediction and target, usable from another thread; nullptr when
  // the backend cannot provide one (the scan then checks synchronously).
  virtual std::shared_ptr<BatchView> snapshot() { return nullptr; }
};

// The Backend's current batch as a BatchView, for the synchronous path.
class CurrentBatch : public BatchView {
 public:
  explicit CurrentBatch(Backend& b) : backend_(b) {}
  ValueStats check(Slot slot, const ValueRule& rule) override { return backend_.check(slot, rule); }
  LossResult loss(const LossConfig& loss) override { return backend_.loss(loss); }
  ValueStats check_aux(std::size_t k, const ValueRule& rule) override { return backend_.check_aux(k, rule); }
  LossResult aux_loss(std::size_t k, const LossConfig& loss) override { return backend_.aux_loss(k, loss); }
  std::optional<Localization> localize(const LocalizeRequest& req) override { return backend_.localize(req); }

 private:
  Backend& backend_;
};

// One input field of the Backend's current batch, for its value checks.
class CurrentInputField : public BatchView {
 public:
  CurrentInputField(Backend& b, std::size_t field) : backend_(b), field_(field) {}
  ValueStats check(Slot, const ValueRule& rule) override { return backend_.check_input(field_, rule); }
  LossResult loss(const LossConfig&) override { return {}; }

 private:
  Backend& backend_;
  std::size_t field_;
};

}  // namespace batchcheck
