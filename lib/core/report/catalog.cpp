#include "core/report/catalog.h"

#include <algorithm>
#include <sstream>

#include "core/base/errors.h"
#include "core/base/text.h"

namespace batchcheck {

namespace {

const std::vector<FindingInfo> kCatalog = {
    {"tail-batch-partial", Severity::Info, "geometry",
     "the last batch of an epoch holds fewer samples than batch_size (N mod B)",
     "",
     "a dataset size that batch_size does not divide",
     "drop-last, batch-size-divisor"},
    {"tail-batch-singleton", Severity::Warning, "geometry",
     "the last batch holds exactly one sample",
     "ValueError: Expected more than 1 value per channel when training (BatchNorm); shape errors after a .squeeze()",
     "N mod B == 1 (per rank under DistributedSampler)",
     "drop-last, batch-size-divisor, pad-collate; with a recorded order: skip-single-sample-batches"},
    {"empty-loader", Severity::Error, "geometry",
     "a rank gets zero batches",
     "the training loop runs no step at all; DDP hangs waiting for the rank",
     "drop_last with fewer samples per rank than batch_size; more ranks than samples",
     "smaller-batch-size, keep-last, sampler-keep-tail"},
    {"samples-dropped", Severity::Info, "geometry",
     "drop_last or sampler_drop_last discards samples every epoch (or, recorded, samples in no batch)",
     "",
     "drop_last=True with a dataset size batch_size does not divide",
     "batch-size-divisor"},
    {"rank-share", Severity::Info, "geometry",
     "the recorded order is one rank's share of a DistributedSampler's epoch: the other ranks train on the rest",
     "",
     "batchcheck.scan() of one DDP rank's loader",
     ""},
    {"sampler-padding", Severity::Warning, "geometry",
     "DistributedSampler repeats samples so that every rank gets as many",
     "",
     "a dataset size world_size does not divide: the repeated samples weigh twice in the epoch",
     "sampler-drop-last, world-size-divisor"},
    {"accumulation-partial-window", Severity::Warning, "geometry",
     "the last gradient-accumulation window has fewer than K micro-batches",
     "",
     "batches per epoch not a multiple of accumulation_steps: the last step's gradient is scaled wrong",
     "accumulation-steps-divisor, scale-partial-window"},
    {"sample-unreadable", Severity::Error, "load",
     "a sample's file cannot be loaded as the dataset loads it (PIL cannot open or decode the image)",
     "PIL.UnidentifiedImageError: cannot identify image file; OSError: image file is truncated",
     "a corrupt or truncated download, a non-image file with an image extension, a file removed",
     "replace-file, skip-unreadable"},
    {"collate-error", Severity::Error, "collate",
     "the batch's samples cannot be put together as the DataLoader's collate_fn does",
     "RuntimeError: stack expects each tensor to be equal size",
     "variable-length samples (token sequences, images of different sizes) with default_collate",
     "pad-collate-variable-length, same-trailing-dims, reproduce"},
    {"input-nonfinite", Severity::Error, "data",
     "NaN or Inf in the inputs",
     "nothing is raised: the loss turns NaN and the weights after the next optimizer step",
     "missing values in the data, a division by zero in preprocessing, an overflow in float16",
     "clean-data"},
    {"target-nonfinite", Severity::Error, "target",
     "NaN or Inf in the targets",
     "nothing is raised: the loss is NaN",
     "missing labels, a broken normalization",
     "clean-data"},
    {"target-out-of-range", Severity::Error, "target",
     "targets break the loss contract: a class index outside [0, C) that is not ignore_index, BCE targets outside [0, 1]",
     "CPU: IndexError: Target 255 is out of bounds. CUDA: Assertion `t >= 0 && t < n_classes` failed. (then "
     "device-side assert triggered); BCELoss on CUDA: Assertion `target_val >= zero && target_val <= one` failed.",
     "a 255 'void' label in segmentation masks, labels counted from 1, unnormalized soft targets",
     "more-classes, ignore-index, remap-labels, normalize-soft-targets, scale-targets, clamp-targets"},
    {"target-dtype", Severity::Error, "target",
     "the targets have a dtype the loss rejects",
     "RuntimeError: expected scalar type Long but found Int (cross_entropy); result type Float can't be cast to Long (BCE)",
     "int32 or uint8 class indices read from numpy or PIL masks; integer BCE targets",
     "cast-target"},
    {"forward-error", Severity::Error, "forward",
     "the model's forward raised",
     "whatever forward raises, with TorchScript's source location and traceback",
     "a shape that only some batches have, float64 inputs into a float32 model, an assertion in the model",
     "cast-inputs, reproduce"},
    {"batchnorm-single-value", Severity::Error, "forward",
     "BatchNorm saw one value per channel in train mode",
     "ValueError: Expected more than 1 value per channel when training; a traced model raises nothing and its "
     "running_var turns NaN (traced in eval mode: nothing changes, inferred from the shapes)",
     "a last batch of one sample; global pooling before a BatchNorm1d",
     "drop-last, batch-size-divisor, groupnorm-instead-of-batchnorm"},
    {"hardcoded-batch-size", Severity::Error, "forward",
     "forward works at the full batch size and fails with a shape error at a smaller one",
     "RuntimeError: shape '[16, -1]' is invalid for input of size ...",
     "x.view(self.batch_size, -1) or a reshape with the batch size baked in",
     "dynamic-batch-dim, explicit-squeeze-dim"},
    {"batch-dim-mismatch", Severity::Error, "output",
     "the prediction's first dimension is not the batch size",
     "ValueError: Expected input batch_size (1) to match target batch_size (16); Using a target size that is different "
     "to the input size",
     ".squeeze() on a batch of one, a batch size baked into a view",
     "explicit-squeeze-dim, dynamic-batch-dim"},
    {"shape-mismatch", Severity::Error, "output",
     "prediction and target shapes break the loss contract",
     "ValueError: Target size must be the same as input size; RuntimeError: only batches of spatial targets supported",
     "(N, 1) predictions against (N,) targets, (N, 1, H, W) masks for cross_entropy",
     "reshape-target"},
    {"half-overflow", Severity::Error, "forward",
     "in half precision (--precision fp16, or your step's torch.autocast) an op's output overflowed: the same op's value "
     "is finite in float32 but past float16's 65,504",
     "no error: the loss turns NaN/inf; with a GradScaler every step is skipped and the scale collapses",
     "attention logits or a linear layer on a large-norm input, a sum over a long sequence, an exp",
     "use-bf16, fp32-module, scale-inputs"},
    {"half-headroom", Severity::Warning, "forward",
     "in an fp16 scan an op's largest value reached checks.half_headroom (default 50%) of float16's 65,504: the "
     "overflow of a later epoch",
     "",
     "activations that grow with the input's scale or as the weights train",
     "use-bf16, fp32-module, scale-inputs"},
    {"bce-autocast-unsafe", Severity::Error, "loss",
     "BCELoss (binary_cross_entropy) under torch.autocast: PyTorch refuses it on CUDA",
     "RuntimeError: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.",
     "a sigmoid then BCELoss, trained with AMP",
     "bce-with-logits"},
    {"output-nonfinite", Severity::Error, "output",
     "NaN or Inf in the predictions (or in an extra output of loss.aux)",
     "BCELoss: RuntimeError: all elements of input should be between 0 and 1; CUDA: Assertion `input_val >= zero && "
     "input_val <= one` failed.; other losses return NaN",
     "a sigmoid that overflowed, log of zero, a NaN weight, batch statistics over one sample",
     "bce-with-logits, drop-last, batch-size-divisor"},
    {"output-out-of-range", Severity::Error, "output",
     "predictions outside what the loss accepts (or checks.output_range)",
     "BCELoss: RuntimeError: all elements of input should be between 0 and 1; CUDA: Assertion `input_val >= zero && "
     "input_val <= one` failed.",
     "raw logits into BCELoss, probabilities into nll_loss, an add after a sigmoid",
     "bce-with-logits, log-softmax-output, clamp-predictions"},
    {"loss-nonfinite", Severity::Error, "loss",
     "the loss is NaN or Inf (with loss.type \"model\": the loss forward returned, its terms named)",
     "nothing is raised: backward fills the gradients with NaN",
     "every target equal to ignore_index (a mean over zero elements), an extreme logit; a CTC target longer than its input",
     "ignore-index-mean; CTC: ctc-lengths, ctc-zero-infinity"},
    {"loss-error", Severity::Error, "loss",
     "computing the loss raised",
     "whatever the loss raises",
     "a dtype or shape the loss does not take",
     "reproduce"},
    {"backward-error", Severity::Error, "backward",
     "loss.backward() raised",
     "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation; "
     "grad can be implicitly created only for scalar outputs; element 0 of tensors does not require grad",
     "an in-place op on a tensor autograd saved; a step that returns a per-sample loss, or a loss without its graph "
     "(.item(), .detach(), a constant)",
     "out-of-place, reduce-loss, return-loss-tensor"},
    {"gradient-nonfinite", Severity::Error, "backward",
     "parameters got NaN or Inf gradients",
     "nothing is raised: the next optimizer step writes NaN into the weights",
     "sqrt or norm at zero, log near zero, an overflow in the backward pass",
     "clip-and-find"},
    {"cuda-device-assert", Severity::Error, "forward/backward",
     "on CUDA, a kernel's assertion fired: that process's CUDA context is unusable, and the scan goes on after the batch in a fresh one",
     "RuntimeError: CUDA error: device-side assert triggered",
     "a class index out of range, an embedding index past the table, BCE inputs outside [0, 1]",
     "reproduce (rerun with --device cpu to name the op)"},
    {"export-shape-guard", Severity::Error, "forward",
     "a .pt2 program's input check fails for this batch",
     "RuntimeError: Expected input at *args[0].shape[0] to be >= 2, but got 1",
     "a dynamic batch dimension exported with a minimum of 2; a static batch size",
     "drop-last, batch-size-divisor, re-export-dynamic-batch, re-export-dynamic-dim"},
    {"export-batch-specialized", Severity::Warning, "forward",
     "a .pt2 program refuses a batch of one that the eager model it was exported from takes",
     "RuntimeError: Expected input at *args[0].shape[0] to be >= 2, but got 1 (only when training runs the program)",
     "torch.export specializes a dynamic dimension's sizes 0 and 1, so a dynamic batch dimension starts at 2",
     "drop-last, batch-size-divisor"},
    {"forward-crash", Severity::Error, "forward",
     "the engine process died while checking this batch",
     "the training process dies: SIGSEGV inside LibTorch or an extension, an abort, the OOM killer (SIGKILL)",
     "a custom operator's bug, an out-of-memory batch",
     "reproduce, drop-last, batch-size-divisor"},
    {"batch-out-of-memory", Severity::Error, "forward",
     "an allocation failed while checking this batch (forward, loss or backward)",
     "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes; "
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate N GiB",
     "a batch size too large for the device's memory; an op that materializes a huge tensor (expand + "
     "contiguous, an outer product) only at some batch shapes",
     "smaller-batch-size, reproduce"},
    {"forward-timeout", Severity::Error, "forward",
     "the batch ran longer than --batch-timeout",
     "the training process hangs",
     "an endless loop in the model, a deadlock",
     "reproduce"},
    {"model-nonfinite", Severity::Error, "model",
     "the model's parameters or buffers hold NaN or Inf as loaded from its file",
     "nothing is raised: every prediction that uses those values (all of them for a whole parameter; for BatchNorm "
     "buffers, every eval-mode prediction) is NaN",
     "a run that diverged and saved its weights; one rare id's embedding row; a BatchNorm running_var poisoned by a batch of one",
     "reset-nonfinite-rows (a few rows), earlier-checkpoint, clip-gradients"},
    {"trace-mode-mismatch", Severity::Warning, "model",
     "a traced archive has BatchNorm's or dropout's training flag frozen to the other mode than the scan's",
     "nothing is raised: what only train mode computes cannot show (BatchNorm on one value per channel is "
     "still inferred from the shapes)",
     "torch.jit.trace after model.eval()",
     "trace-in-scan-mode, script-instead"},
    {"trace-frozen-shape", Severity::Error, "forward",
     "a traced model fails on a shape the trace froze into its graph (the example batch's size as a constant), where "
     "the eager model it came from computes it from the input: the batches it blocks are not checked, so the scan "
     "cannot pass them",
     "RuntimeError: shape '[28, 1]' is invalid for input of size 19 (only the traced model raises)",
     "torch.jit.trace of code that turns a size into a Python number: int(x.size(0)), a shape read by transformers' "
     "code, sequences of another length than the example's",
     "script-instead, scan-eager"},
    {"batch-unchecked", Severity::Error, "forward",
     "batchcheck.scan() could not check a batch: your code runs on it, but no capture of it (a trace of your step at "
     "that batch's shape) computes what your code does, so nothing of the batch was checked",
     "none: training runs this batch unchecked",
     "code a trace cannot record faithfully at that shape (a branch on a tensor's value, a size read as a Python "
     "number), or more distinct batch shapes than captures are kept for",
     "script-instead, reproduce"},
};

}  // namespace

const std::vector<FindingInfo>& finding_catalog() { return kCatalog; }

const FindingInfo* find_finding(const std::string& id) {
  for (const auto& f : kCatalog) {
    if (id == f.id) return &f;
  }
  return nullptr;
}

Severity default_severity(const std::string& id) {
  const FindingInfo* f = find_finding(id);
  return f ? f->severity : Severity::Error;  // a failure of a batch; tests keep every id listed
}

std::string explain_text(const std::string& id) {
  const FindingInfo* f = find_finding(id);
  if (!f) {
    std::vector<std::string> ids;
    for (const auto& e : kCatalog) ids.emplace_back(e.id);
    std::string hint = did_you_mean(id, ids);
    throw InputError("", "explain", "unknown finding id \"" + id + "\"" +
                                        (hint.empty() ? " (run 'batchcheck explain' for the list)" : hint));
  }
  std::ostringstream out;
  out << f->id << " (" << to_string(f->severity) << ", stage " << f->stage << ")\n"
      << "  " << f->what << "\n";
  if (*f->pytorch) out << "In PyTorch:\n  " << f->pytorch << "\n";
  out << "Typical causes:\n  " << f->causes << "\n"
      << "Fixes the report offers:\n  " << f->fixes << "\n";
  return out.str();
}

std::string explain_all_text() {
  std::size_t width = 0;
  for (const auto& f : kCatalog) width = std::max(width, std::string(f.id).size());
  std::ostringstream out;
  for (const auto& f : kCatalog) {
    const std::string id = f.id, severity = to_string(f.severity);
    out << id << std::string(width + 2 - id.size(), ' ') << severity << std::string(9 - severity.size(), ' ') << f.what
        << "\n";
  }
  out << "Run 'batchcheck explain ID' for the PyTorch errors, causes and fixes of one.\n";
  return out.str();
}

}  // namespace batchcheck
