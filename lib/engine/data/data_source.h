#pragma once
// Where the samples come from: .npy files (read row by row) or one torch.save file.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/pipeline/backend.h"

namespace batchcheck {

// A field: input k (0 .. input_names().size() - 1, in forward's order) or the target.
constexpr int kTargetField = -1;

// What the user's model did with a batch in their own process (model.format "eager"): its
// prediction, or the text of what forward raised.
// What the user's process says of a batch's forward (batchcheck.scan()'s stream): with
// model.format "eager" the prediction, or what forward raised; for a captured step, which
// capture runs the batch (another shape's archive beside the model's) and, where the user's own
// code raised on it and the capture would not raise the same, that exception, which is the
// batch's truth (PyTorch raises it first); `unchecked`: no capture computes what their code does.
struct GivenForward {
  at::Tensor output;
  std::map<std::string, at::Tensor> aux;  // loss.aux's outputs, by their keys
  std::string error;  // the exception's message; empty where forward ran
  std::string location, source_line, raised_in, traceback, module;  // where, as core/findings/error_text.h
  bool unchecked = false;
  std::string capture;  // a file name beside the model's archive; empty: the model's
  // A step run eagerly there (no capture of it could be made), checked as a capture is: the loss
  // ops' and index ops' faults in the order they ran, `stopped` where one would have raised; the
  // gradients' NaN/Inf counts (`gradients` set: the check ran) or what backward raised.
  std::vector<OpFault> faults;
  bool stopped = false;
  std::optional<std::vector<GradStats>> gradients;
  std::string backward_error;
  std::optional<Localization> localization;  // where its first NaN/Inf was born, re-run there
  // A field's rows -> the batch's samples, where batchcheck.scan() found the batch's own index
  // structure proving it (a graph's batch vector, offsets, lengths): int64, one per row.
  std::map<std::string, at::Tensor> row_samples;
  // The half watch of a step run there in half precision (its float16/bfloat16 ops' peak, the
  // first overflow and the peak's op, placed), as engine/checks/half_watch.h watches a graph.
  std::optional<HalfCheck> half;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual uint64_t samples() const = 0;
  // The input fields forward takes, in order: {"inputs"} for one input.
  virtual const std::vector<std::string>& input_names() const = 0;
  virtual bool has_targets() const = 0;
  // Per-sample shape and dtype; a dimension that varies between samples is -1.
  virtual TensorMeta sample_meta(int field) const = 0;
  // The collated batch of these samples (CollateConfig), or undefined without targets.
  // Throws CollateError where the DataLoader's collate_fn raises, UnreadableError where the
  // dataset's __getitem__ does.
  virtual at::Tensor gather(int field, const std::vector<int64_t>& indices) const = 0;
  // loader.collate.list: the batch as the Python list of its samples that
  // collate_fn=lambda b: tuple(zip(*b)) leaves: List[Tensor], or List[Dict[str, Tensor]] for
  // samples that are dicts (a detection target's boxes and labels). None without targets.
  virtual c10::IValue gather_list(int field, const std::vector<int64_t>& indices) const;
  // Bytes read per sample (every field), to decide whether prefetching pays.
  virtual uint64_t sample_bytes() const = 0;
  // Each sample's length (its first dimension) in input field k, before padding: what a
  // generated mask marks. Stacked fields: the common length.
  // Shared libraries of operators the model needs beyond model.libraries: the ones the Python
  // process that serves the stream found in the model it prepared (it says so in its greeting).
  virtual std::vector<std::string> operator_libraries() const { return {}; }
  // How the Python process calls forward on the batch (its greeting says), for `reproduce`.
  virtual ForwardCall forward_call() const { return {}; }
  // model.format "eager": the forward that came with the batch (the stream only).
  virtual std::optional<GivenForward> given_forward(const std::vector<int64_t>& /*indices*/) const { return std::nullopt; }
  virtual std::vector<int64_t> lengths(int field, const std::vector<int64_t>& indices) const {
    const TensorMeta m = sample_meta(field);
    return std::vector<int64_t>(indices.size(), m.shape.empty() ? 1 : m.shape[0]);
  }
};

struct CollateError {
  CollateFailure failure;
};

// Samples whose files do not load (an image folder's undecodable file), at the batch.
struct UnreadableError {
  std::vector<UnreadableSample> samples;
};

// The batch of `samples` (one tensor per sample) as the collate_fn builds it: torch.stack
// (default_collate), or pad_sequence(batch_first=True, padding_value=*pad) with the length
// rounded up to a multiple of `multiple`. Throws CollateError with LibTorch's own message.
at::Tensor collate_samples(const std::vector<at::Tensor>& samples, const std::string& field, std::optional<double> pad,
                           uint64_t multiple);

// A torch.save file (pt_source.cpp). Throws InputError.
std::unique_ptr<DataSource> open_pt_source(const Config& cfg);

// An image folder (image_source.cpp). Throws InputError.
std::unique_ptr<DataSource> open_image_source(const Config& cfg);

// The batches of a Python DataLoader, served by batchcheck.scan() (stream_source.cpp). Throws InputError.
std::unique_ptr<DataSource> open_stream_source(const Config& cfg);

// Opens the data the config names, with the fields model.inputs asks for. Throws InputError
// for unusable files and fields that are not there.
std::unique_ptr<DataSource> open_data_source(const Config& cfg);

// A batch read ahead: its tensors on the scan's device, and the finiteness check of its inputs.
struct StagedBatch {
  std::vector<int64_t> indices;
  std::vector<c10::IValue> inputs;  // per input field: a tensor, or a list of samples (loader.collate.list)
  at::Tensor target;
  c10::IValue target_list;  // loader.collate.list: the targets as a list of samples
  std::vector<std::optional<ValueStats>> input_stats;
  std::optional<LoadFailure> failure;  // then no inputs and an undefined target
  std::optional<GivenForward> given;   // model.format "eager"
  // On a CUDA device, the batch as read, on the host (no copy: the tensors before the move),
  // for re-running a batch on the CPU after a device-side assert killed the device.
  std::vector<c10::IValue> host_inputs;
  at::Tensor host_target;
  c10::IValue host_target_list;
};

// Reads and collates a batch (`lists`: as lists of samples), checks its inputs and moves it to
// `device`. A failing collate or unreadable samples are the batch's failure, never a throw.
// Runs on the worker thread for prefetched batches (data sources are read-only).
StagedBatch stage_batch(const DataSource& data, bool lists, const c10::Device& device, const std::vector<int64_t>& indices);

}  // namespace batchcheck
