"""batchcheck.scan(): the checks of `batchcheck scan` on your own DataLoader object.

    import batchcheck
    report = batchcheck.scan(model, loader, nn.CrossEntropyLoss())
    if not report.ok:
        raise SystemExit(report.text)

Your loader runs in your process, as training runs it (its sampler, collate_fn, transforms and
workers); each batch it yields is sent to batchcheck's engine over a Unix socket (_stream.py),
nothing is written to disk but the model (scripted, or traced on the first batch: _prepare.py)
and the recorded order (a TensorDataset under default_collate goes whole, through memfds:
_arrays.py). An engine that runs a model of its own runs in its own supervised process
(_session.py): a crash of LibTorch is a finding, never a crash of yours; where the user's step or
model runs here, the engine (which then runs none) runs here too (_inprocess.py). Every RNG the loader can reach is restored afterwards, so the
epoch your training runs next is the one that was scanned.
"""
import random
from types import SimpleNamespace

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from batchcheck import export as _export
from batchcheck._prepare import _loss_step, is_path, output_path
from batchcheck._session import Session
from batchcheck.report import Finding, Occurrence, Report, ScanFailed

__all__ = ["scan", "Report", "Finding", "Occurrence", "ScanFailed"]


def gate(model, loader, loss, **options):
    """The training callbacks' scan: the report when it passes, else ScanFailed. The model's
    train/eval mode is left as it was."""
    was_training = model.training
    try:
        report = scan(model, loader, loss, **options)
    finally:
        model.train(was_training)
    if not report.ok:
        raise ScanFailed(report)
    return report


def _rng_snapshot(loader):
    held = [(g, _export._get_rng_state(g)) for g in _export._reachable_rngs(loader)]
    glob = (torch.get_rng_state(), random.getstate(), np.random.get_state())

    def restore():
        torch.set_rng_state(glob[0])
        random.setstate(glob[1])
        np.random.set_state(glob[2])
        for g, s in held:
            _export._set_rng_state(g, s)
    return restore


_PRECISIONS = {"fp32": "fp32", "32": "fp32", "fp16": "fp16", "16": "fp16", "bf16": "bf16",
               torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _precision(precision):
    """scan()'s precision= as the engine's name, None where not asked."""
    if precision is None:
        return None
    try:
        return _PRECISIONS[precision]
    except (KeyError, TypeError):
        from batchcheck._wire import _cut
        raise ValueError("batchcheck.scan: precision=%s: expected \"fp32\", \"fp16\" or \"bf16\" (or torch.float16, "
                         "torch.bfloat16)" % _cut(repr(precision), 40)) from None  # a 10 MB string is named, not echoed


def lightning_precision(precision):
    """A Lightning Trainer's precision as scan()'s: "16-mixed" -> "fp16", "bf16-mixed" -> "bf16";
    None for float32 and for weights already in half precision ("16-true": the model is as it trains)."""
    return {"16-mixed": "fp16", "16": "fp16", 16: "fp16", "bf16-mixed": "bf16", "bf16": "bf16"}.get(precision)


def _refuse(loader, mode, aux, eager, loss, step):
    if not isinstance(loader, DataLoader):
        raise TypeError("batchcheck.scan: pass your torch.utils.data.DataLoader, got %s" % type(loader).__name__)
    if isinstance(loader.dataset, IterableDataset):
        raise TypeError("batchcheck.scan: an IterableDataset has no sample indices to name; scan a map-style Dataset")
    if loader.batch_sampler is None:  # batch_size=None and no batch_sampler
        raise TypeError("batchcheck.scan: the loader has batch_size=None (no automatic batching): its items are not batches")
    if mode not in ("train", "eval"):
        raise ValueError("batchcheck.scan: mode is 'train' or 'eval', got %r" % (mode,))
    if step is not None and loss is not None:
        raise TypeError("batchcheck.scan: pass loss= or step=, not both (a step computes its own loss)")
    if step is not None and not callable(step):
        raise TypeError("batchcheck.scan: step is your training step, step(model, batch) -> loss; got %s" % type(step).__name__)
    if step is not None and (eager is True or aux):
        raise TypeError("batchcheck.scan: step= runs in the engine, traced with the model: no eager=True, no aux=")


def _epoch_order(loader):
    """The batches of the epoch training runs next, and whether they are the plain sequential ones."""
    n = len(loader.dataset)
    if not _export._plain_sequential(loader):
        return _export._record_order(loader, n), False  # restores every RNG it draws from
    b = loader.batch_size
    order = [list(range(i, min(i + b, n))) for i in range(0, n, b)]
    if loader.drop_last and order and len(order[-1]) < b:
        order.pop()
    return order, True


def scan(model, loader, loss=None, *, step=None, mode="train", output=None, aux=None, fail_on=None, device=None,
         input_key="inputs", target_key=None, eager=None, args=(), quiet=False, precision=None, capture=False,
         try_fixes=True):
    """Scans one epoch of `loader` through `model` and `loss` with batchcheck's engine; returns
    the Report. loss: a torch.nn loss module, None (the model only) or "model" (forward returns
    its loss). mode: "train" (default) or "eval". fail_on: "error" (default) or "warning".
    device: "cpu" (default) or "cuda". args: further `batchcheck scan` flags. quiet: keep the
    command's text off stderr (it is in report.text either way). target_key: the targets' key in a
    dict batch ("targets", else "labels"). A dict batch goes to forward by keyword where forward
    names its keys but in another order (Hugging Face's model(**batch)); with loss="model" the
    targets go along (labels=) and the prediction is the output's "loss" (else "logits", or output=).
    eager: None (default) runs forward in this process only where TorchScript can neither script
    nor trace the model (with a warning); True always; False never (the failure is raised). An
    eager scan checks the model's outputs, the loss and the batches, not its gradients or weights,
    and names no root cause.
    step: your training step, step(model, batch) -> loss, exactly as your loop computes the loss
    (post-processing, several loss terms, labels made in the step). It runs as written, in this
    process, on a private copy of each batch exactly as your loader yields it (any nesting of
    tuples, lists, Mappings, namedtuples, dataclasses, a graph library's Batch), with its no_grad
    regions and in-place work as in training; every loss and index op inside is checked before it
    runs (BCE's ranges, class indices, an embedding's ids), its loss backpropagated as
    loss.backward() does (a loss that is not one number, or has no graph, fails as training
    would), a NaN traced to the op that made it. loss= may also be any callable
    (prediction, target) -> loss: it runs as such a step.
    capture: False (default) runs the step as written; True traces it with the model and runs the
    trace in the engine, proven per batch shape against the step run here (forward values only:
    for steps without no_grad regions or in-place work on their batch). A step under torch.autocast
    in half precision (its own, or precision=) has its half ops watched where it runs.
    precision: None or "fp32" (default: float32, or what your step's own torch.autocast casts),
    "fp16" or "bf16" (torch.float16/torch.bfloat16 too): forward and the loss run under
    torch.autocast with that dtype, as mixed-precision training runs them; an op whose output
    passes float16's 65,504 is half-overflow, one at half of it half-headroom.
    try_fixes: True (default) runs each finding's loader fixes (a batch size, drop_last, a filter on
    its samples, a label map) on your code before they are reported, each with what it ran
    ("verified"), those that still fail withdrawn; False reports them untried (your Dataset is
    read only by the scan itself)."""
    _refuse(loader, mode, aux, eager, loss, step)
    precision = _precision(precision)
    output = output_path(output)
    if is_path(output) and aux:
        raise TypeError("batchcheck.scan: aux= selects extra outputs beside output=, which must then be a key or an "
                        "index, not a path")
    if step is None and loss is not None and not isinstance(loss, str) and callable(loss) and not _export.known_loss(loss):
        step, loss = _loss_step(loss, output, target_key or "targets"), None  # any callable (prediction, target) -> loss
    if step is not None and device is None:  # the step is traced where the model is: device constants follow it
        params = list(model.parameters())
        device = "cuda" if params and params[0].device.type == "cuda" else None
    order, sequential = _epoch_order(loader)
    restore = _rng_snapshot(loader)
    options = SimpleNamespace(loss=loss, step=step, mode=mode, output=output, aux=aux, fail_on=fail_on, device=device,
                              input_key=input_key, target_key=target_key, eager=eager, args=args, quiet=quiet,
                              precision=precision, capture=bool(capture), try_fixes=bool(try_fixes))
    session = None
    try:
        session = Session(model, loader, order, sequential, options)
        first = session.first_batch()
        session.prepare_model(model, first)
        return session.report()
    finally:
        try:
            if session is not None:
                session.close()
        finally:
            restore()
