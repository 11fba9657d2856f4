#pragma once
// The scan configuration of SPEC.md as a typed, validated struct.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace batchcheck {

struct RecordedOrder;

enum class Mode { Train, Eval };
// Model: forward computes the loss itself from the targets it takes (torchvision's detection
// models in train mode return a dict of losses, summed as their training recipe does).
// Dice, DiceCe, Jaccard, Focal: the region losses of MONAI and segmentation-models-pytorch,
// whose targets are masks or class indices per pixel (region_contract.cpp).
// Model: forward(inputs..., targets) computes its loss (torchvision's detectors). Step: forward
// is the user's whole training step (batchcheck.scan(step=...), traced with the model): it takes
// every field of the batch and returns the loss, each loss op inside checked where it runs.
enum class LossType { Bce, BceWithLogits, CrossEntropy, Nll, Mse, L1, SmoothL1, None, Model, Dice, DiceCe, Jaccard, Focal, Step };
bool is_region_loss(LossType t);
// Whether forward returns the loss itself (no prediction to hold to a loss's contract).
inline bool returns_loss(LossType t) { return t == LossType::Model || t == LossType::Step; }
// How a region loss turns predictions into probabilities (MONAI's sigmoid=/softmax= flags,
// smp's from_logits with its mode): none means the model already outputs probabilities.
enum class Activation { None, Sigmoid, Softmax };
// What a region loss's target is:
//   Mask:    the prediction's shape, values in [0, 1] (MONAI without to_onehot_y, smp multilabel);
//   Binary:  one channel, the target with or without it (smp binary mode reshapes both);
//   Index:   class indices with a channel of one, (N, 1, ...) (MONAI's to_onehot_y);
//   Classes: class indices (N, ...) as cross_entropy takes them (smp multiclass; (N, 1, ...) too).
enum class TargetFormat { Mask, Binary, Index, Classes };
enum class Reduction { Mean, Sum, None };
// Stream: batches from the user's own DataLoader, served by batchcheck.scan() (Python).
enum class DataFormat { Npy, Pt, ImageFolder, Stream };
// TorchScript (torch.jit.save), a torch.export program compiled by AOTInductor (.pt2), or
// Eager: the user's own model ran forward in their Python process (batchcheck.scan's path for
// a model TorchScript can neither script nor trace) and the stream carries its prediction.
enum class ModelFormat { TorchScript, Pt2, Eager };
// The stream's field that holds an eager forward's prediction (or the loss, with loss "model").
inline constexpr const char* kEagerPredictionField = "batchcheck.prediction";
// ... and loss.aux's outputs, each as "batchcheck.aux.<key>".
inline constexpr const char* kEagerAuxPrefix = "batchcheck.aux.";
// ... and a field's rows -> samples map, as "batchcheck.rows.<field>" (int64, one per row).
inline constexpr const char* kRowSamplesPrefix = "batchcheck.rows.";
// Which sampler feeds the DataLoader: SequentialSampler, RandomSampler (shuffle=True) or
// DistributedSampler (its own defaults: shuffle=True, seed=0).
enum class SamplerKind { Sequential, Random, Distributed };

const char* to_string(Mode m);

// Why a .pt2 model cannot be scanned in train mode (config "mode" and --mode).
inline constexpr const char* kPt2NoTrain =
    "a .pt2 program runs as it was exported, without a train mode (BatchNorm and Dropout stay as they were at export): "
    "remove \"mode\", or scan the TorchScript archive of the model for train-mode checks";
// Why a .pt2 model cannot be scanned in another precision (config "precision" and --precision).
inline constexpr const char* kPt2NoPrecision =
    "a .pt2 program runs in the precision it was compiled in (AOTInductor fixes each kernel's dtype): remove "
    "\"precision\", or scan the TorchScript archive of the model in fp16 or bf16";
const char* to_string(LossType t);
const char* to_string(Activation a);
const char* to_string(TargetFormat f);
const char* to_string(Reduction r);
const char* to_string(DataFormat f);
const char* to_string(SamplerKind k);
std::optional<LossType> parse_loss_type(const std::string& s);
const std::vector<std::string>& loss_type_names();

struct Range {
  double lo = 0, hi = 0;
};

// model.inputs: which data fields feed forward, and how.
enum class InputsKind {
  Single,      // unset: the one input field, as forward's only argument
  Positional,  // ["input_ids", "attention_mask"]: passed in this order
  Named,       // {"input_ids": "ids", ...}: forward's argument name -> field
  Record,      // "record": every input field, as one Dict[str, Tensor] argument
};

// How forward is called on the collated `batch`, as Python code for `reproduce`: batchcheck.scan()
// says (model.call, or its stream's greeting). Empty: the batch is (x, y) and forward model(x).
struct ForwardCall {
  std::string forward;  // "model(batch[0])", "model(**batch)"
  std::string select;   // the prediction selected from `out`, where forward does not return it
  std::string targets;  // "batch[1]", "batch[\"labels\"]"
  std::string loss;     // a loss.type "step" that is the user's callable loss: its name ("loss_fn")
};

struct ModelConfig {
  std::string path;  // resolved against the config file's folder; empty for Eager
  InputsKind inputs_kind = InputsKind::Single;
  std::vector<std::string> input_fields;  // Positional, Named: the fields, in forward's order
  std::vector<std::string> input_args;    // Named: the argument each field feeds
  // model.libraries: shared libraries of custom operators (torchvision's ops, a user's C++
  // ops), loaded before the model; resolved, and as the user wrote them.
  std::vector<std::string> libraries, libraries_display;
  ModelFormat format = ModelFormat::TorchScript;  // "format", else from the extension (.pt2)
  Mode mode = Mode::Train;  // a .pt2 program runs as exported: eval, and train is refused
  // Which element of a tuple/list (index) or dict (key) is the prediction.
  std::optional<std::variant<int64_t, std::string>> output;
  // model.trains_exported (.pt2 only): the training loop runs this program itself, so a batch
  // it refuses stops training; by default the program stands in for the eager model it was
  // exported from, which takes a batch of one torch.export's specialization refuses.
  bool trains_exported = false;
  ForwardCall call;  // model.call
};

// data.transform for an image folder: torchvision's Resize, CenterCrop, ToTensor, Normalize,
// in that order (the deterministic stand-ins of a training pipeline's random crops).
enum class Interpolation { Bilinear, Bicubic };
struct ImageSize {
  int height = 0, width = 0;
  bool smaller_edge = false;  // one number: the smaller edge becomes `height`, aspect kept
};
struct ImageTransform {
  std::optional<ImageSize> resize;
  Interpolation interpolation = Interpolation::Bilinear;
  std::optional<ImageSize> center_crop;  // never smaller_edge: one number is a square
  std::vector<double> mean, std;         // Normalize, per channel (3); empty: none
};

struct DataConfig {
  DataFormat format = DataFormat::Npy;
  ImageTransform transform;  // imagefolder: `path` is the root folder
  // npy: the two files (resolved). pt: `path` is the file, inputs/targets are keys.
  std::string inputs, targets, path;
  // npy with several input fields: "inputs": {"input_ids": "ids.npy", ...} (files resolved).
  std::vector<std::string> field_names, field_files, field_displays;
  // npy, a variable-length field as values + offsets (Arrow's list layout: sample i is
  // values[offsets[i]:offsets[i+1]]): the offsets file per field ("" when stacked), and for
  // the one-file inputs and the targets.
  std::vector<std::string> field_offsets, field_offsets_displays;
  std::string inputs_offsets, inputs_offsets_display, targets_offsets, targets_offsets_display;
  bool has_targets = true;
  bool targets_explicit = false;  // pt: the key was named, so it must exist
  // The paths as the user wrote them, for messages.
  std::string inputs_display, targets_display, path_display;
};

// How a batch's samples become one tensor per field, as the DataLoader's collate_fn does:
// default_collate stacks (and fails on samples of unequal shape, as torch.stack does); a
// padded field is pad_sequence(batch_first=True, padding_value=...) of its samples, its length
// rounded up to a multiple of `pad_to_multiple_of`.
struct CollateConfig {
  // Padding value per field: its name, or "inputs" (every input field not named itself) and
  // "targets"; a field with no value is stacked.
  std::vector<std::pair<std::string, double>> pad;
  uint64_t pad_to_multiple_of = 1;
  // Generated fields: a mask (int64, 1 on a sample's positions, 0 on padding) of the padded
  // field named, as a collate_fn returning an attention mask builds it; name -> padded field.
  std::vector<std::pair<std::string, std::string>> masks;
  // "list": every field stays a Python list of its samples, as collate_fn=lambda b:
  // tuple(zip(*b)) leaves it (detection: images of different sizes, a dict of boxes and
  // labels per image); forward takes List[Tensor] / List[Dict[str, Tensor]].
  bool list = false;
  bool pads() const { return !pad.empty(); }
  const std::string* mask_source(const std::string& field) const {
    for (const auto& [name, source] : masks) {
      if (name == field) return &source;
    }
    return nullptr;
  }
  std::optional<double> pad_for(const std::string& field, bool target) const {
    for (const auto& [name, value] : pad) {
      if (name == field) return value;
    }
    for (const auto& [name, value] : pad) {
      if (name == (target ? "targets" : "inputs")) return value;
    }
    return std::nullopt;
  }
};

struct LoaderConfig {
  uint64_t batch_size = 1;
  CollateConfig collate;
  bool drop_last = false;
  SamplerKind sampler = SamplerKind::Sequential;
  bool shuffle = false;
  // PyTorch's manual_seed takes [-2^63, 2^64): a negative seed is kept as its 64-bit
  // two's complement (what the generator sees) with seed_negative set.
  uint64_t seed = 0;
  bool seed_negative = false;
  bool seed_given = false;  // without a seed, PyTorch's shuffle order is not reproducible
  uint64_t epoch = 0;
  uint64_t world_size = 1;
  bool sampler_drop_last = false;
  uint64_t accumulation_steps = 1;
  // loader.order: the batches recorded from the user's own loader replace the sampler.
  std::shared_ptr<const RecordedOrder> order;
  std::string order_path;  // its file, resolved (never written over: scan_setup)
  // loader.order_rank: the order is one rank's share of a DistributedSampler's epoch (rank R of
  // W, its sampler yielding `samples`): the other ranks' samples are theirs, not dropped.
  struct RankShare {
    uint64_t rank = 0, world_size = 1, samples = 0;
  };
  std::optional<RankShare> order_rank;
  // DataLoader arguments accepted so a user can paste theirs, but which do not change
  // which samples land in which batch (num_workers, pin_memory, ...): named in the report.
  std::vector<std::string> ignored_keys;
  // loader.collate_fn: the user's collate function as `reproduce` calls it: "module.function",
  // or "loader.collate_fn" where it has no importable name (batchcheck.scan() writes it).
  std::string collate_fn;
};

struct LossConfig {
  LossType type = LossType::None;
  // loss.target: the data field the loss compares the prediction with (applied to data.targets).
  std::optional<std::string> target;
  int64_t ignore_index = -100;
  bool ignore_index_given = false;  // region losses ignore nothing unless told (MONAI's and smp's None)
  Activation activation = Activation::None;   // region losses
  TargetFormat target_format = TargetFormat::Mask;
  double gamma = 2.0;                          // focal
  std::optional<double> alpha;                 // focal: the positives' weight in [0, 1]
  Reduction reduction = Reduction::Mean;
  std::vector<double> weight;      // per-class weights (cross_entropy, nll) or elementwise (bce)
  std::vector<double> pos_weight;  // bce_with_logits; one value broadcasts
  double label_smoothing = 0.0;    // cross_entropy
  double beta = 1.0;               // smooth_l1
  // loss.aux: extra outputs (aux heads) the training loss adds, each compared with the same
  // target by the same loss: (key or index as written, weight), in the config's order.
  // torchvision's segmentation recipe: {"aux": 0.5} for loss(out) + 0.5 * loss(aux).
  std::vector<std::pair<std::string, double>> aux;
};

constexpr std::size_t kMaxProbeSizes = 64;

struct ChecksConfig {
  std::optional<Range> output_range, target_range;
  std::vector<uint64_t> probe_batch_sizes{1};
  uint64_t max_batches = 0;  // 0 = all
  // Back-propagate each batch's loss (gradients cleared after each batch, no optimizer
  // step). Unset: on in train mode, off in eval mode.
  std::optional<bool> backward;
  // Re-run the first batches of each NaN/range finding instrumented to say where the bad
  // value came from (root_cause). On by default: it costs nothing on a clean setup.
  bool root_cause = true;
  // half-headroom: the share of float16's largest value (65,504) an op's output may reach
  // before the scan warns; a half-precision scan only.
  double half_headroom = 0.5;
};

// The precision forward and the loss run in: as saved (fp32), or under torch.autocast with
// float16 or bfloat16 and PyTorch's own op lists, as mixed-precision training runs them.
enum class Precision { Fp32, Fp16, Bf16 };
const char* to_string(Precision p);        // "fp32", "fp16", "bf16"
const char* dtype_name(Precision p);       // "float32", "float16", "bfloat16"
std::optional<Precision> parse_precision(const std::string& s);
// float16's largest finite value.
constexpr double kHalfMax = 65504.0;

struct PrecisionConfig {
  Precision dtype = Precision::Fp32;
  // The model's graph holds its own casts (a step traced under its torch.autocast): the
  // engine enters no autocast, it watches the half-precision values only.
  bool recorded = false;
  std::string from;  // where it was asked, for the report's note: "--precision", "the config's precision"
  // The user's step calls binary_cross_entropy inside its torch.autocast (batchcheck.scan() saw
  // it run): refused on CUDA, as BCELoss is (bce-autocast-unsafe).
  bool bce_in_step = false;
};

struct Config {
  std::string file;  // as the user named it
  // What the scan is of, in the user's words, where the config is not theirs to name (it is
  // batchcheck.scan()'s, in a folder gone when it returns): "Net on your DataLoader".
  std::string source;
  std::string text;  // its bytes as parsed (a shard's part carries them: read once, never again)
  ModelConfig model;
  DataConfig data;
  LoaderConfig loader;
  LossConfig loss;
  ChecksConfig checks;
  std::string device = "cpu";
  bool sync = true;
  PrecisionConfig precision;
};

// Throws InputError naming the file, the key path and what is wrong.
Config load_config(const std::string& path);
// For tests and tools: parse from text; relative paths resolve against base_dir.
Config parse_config(const std::string& display_path, const std::string& text, const std::string& base_dir);

// checks.backward as it applies: unset means on in train mode, off in eval mode.
bool backward_enabled(const Config& cfg);

// "cpu", "cuda", "cuda:N", "auto"; false for anything else.
bool valid_device(const std::string& device);

}  // namespace batchcheck
