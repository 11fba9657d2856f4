"""Write a ready batchcheck scan from your own PyTorch objects.

    from batchcheck.export import export_scan
    export_scan("scan/", model, loader, loss=nn.CrossEntropyLoss())
    # prints: batchcheck scan scan/config.json

What it writes into the folder:
  - model.pt: the model as TorchScript: torch.jit.script, or torch.jit.trace on the loader's
    first batch when scripting fails (with a warning: a trace freezes control flow, the shapes
    it saw, and the train/eval mode it was traced in);
  - for a torchvision ImageFolder whose transform is Resize/CenterCrop/ToTensor/Normalize (random
    crops and flips allowed: their deterministic stand-in is declared), nothing: the config
    points at the folder and batchcheck reads the images itself;
  - else the dataset, read sample by sample (dataset[i], with progress on stderr) and streamed
    to disk, any size: inputs.npy and targets.npy for samples of one shape, values + offsets
    .npy files for a field whose samples vary in length (token sequences);
  - order.json: the batches your loader's next epoch delivers, when its order is not plain
    sequential (shuffle, a sampler, a batch sampler). They are recorded through a copy of your
    loader over a dataset of indices with the same sampler and generator, and every RNG it
    draws from is restored afterwards, so your own training sees the same order;
  - config.json: model, data, loader (batch size, drop_last, collate, order), loss.

Your dataset must return (input, target) pairs, a single input, or a dict with the keys named
by `input_key`/`target_key`. A collate_fn other than default_collate is described by `pad`:
{"inputs": 0} for pad_sequence(batch_first=True, padding_value=0) of the inputs; the first
batch is built both ways and must agree, else export_scan raises. Needs torch and numpy only.
"""
import contextlib
import json
import os
import random
import shutil
import sys
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler, default_collate

__all__ = ["export_scan", "loss_config"]


class _Indices(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def loss_config(loss):
    """The batchcheck `loss` section for a torch.nn loss module (None: type "none"; "model":
    forward computes its own loss from the targets, as torchvision's detection models do)."""
    if loss is None:
        return {"type": "none"}
    if isinstance(loss, str) and loss == "model":
        return {"type": "model"}
    region = _region_loss_config(loss)
    if region is not None:
        return region
    kinds = [(nn.CrossEntropyLoss, "cross_entropy"), (nn.NLLLoss, "nll"), (nn.BCEWithLogitsLoss, "bce_with_logits"),
             (nn.BCELoss, "bce"), (nn.MSELoss, "mse"), (nn.L1Loss, "l1"), (nn.SmoothL1Loss, "smooth_l1")]
    for cls, name in kinds:
        if isinstance(loss, cls):
            break
    else:
        raise TypeError("export_scan: batchcheck checks the losses CrossEntropyLoss, NLLLoss, BCEWithLogitsLoss, BCELoss, "
                        "MSELoss, L1Loss and SmoothL1Loss of torch.nn, MONAI's DiceLoss, DiceCELoss and FocalLoss, "
                        "segmentation_models_pytorch's DiceLoss, JaccardLoss and FocalLoss, and "
                        "torchvision.ops.sigmoid_focal_loss; got %s (pass loss=None to check the model only)"
                        % type(loss).__name__)
    out = {"type": name}
    if getattr(loss, "reduction", "mean") != "mean":
        out["reduction"] = loss.reduction
    if name in ("cross_entropy", "nll") and loss.ignore_index != -100:
        out["ignore_index"] = loss.ignore_index
    if name == "cross_entropy" and loss.label_smoothing:
        out["label_smoothing"] = loss.label_smoothing
    if name == "smooth_l1" and loss.beta != 1.0:
        out["beta"] = loss.beta
    weight = getattr(loss, "weight", None)
    if weight is not None:
        out["weight"] = weight.detach().cpu().flatten().tolist()
    pos_weight = getattr(loss, "pos_weight", None)
    if pos_weight is not None:
        out["pos_weight"] = pos_weight.detach().cpu().flatten().tolist()
    return out


def known_loss(loss):
    """Whether batchcheck computes this loss itself (loss_config takes it); any other callable
    runs inside the user's step (batchcheck.scan(loss=fn) with fn(prediction, target))."""
    try:
        loss_config(loss)
        return True
    except TypeError:
        return False


def _region_loss_config(loss):
    """The loss section of MONAI's and smp's region losses (read from their attributes, without
    importing either library), or None for any other loss."""
    cls = type(loss)
    module, name = getattr(cls, "__module__", "") or "", cls.__name__
    if getattr(loss, "__module__", "") == "torchvision.ops.focal_loss" and getattr(loss, "__name__", "") == "sigmoid_focal_loss":
        # The function itself, with its defaults (alpha 0.25, gamma 2), on logits and masks.
        return {"type": "focal", "activation": "sigmoid", "target_format": "mask", "alpha": 0.25, "gamma": 2.0}
    if module.startswith("monai.losses"):
        return _monai_loss(loss, name)
    if module.startswith("segmentation_models_pytorch.losses"):
        return _smp_loss(loss, name)
    return None


def _monai_loss(loss, name):
    if name == "DiceCELoss":
        dice = loss.dice
        out = _monai_dice(dice, "dice_ce", name)
        out.pop("ignore_index", None)  # DiceCELoss takes none
        return out
    if name == "DiceLoss":
        return _monai_dice(loss, "jaccard" if getattr(loss, "jaccard", False) else "dice", name)
    if name == "FocalLoss":
        out = {"type": "focal", "activation": "softmax" if loss.use_softmax else "sigmoid",
               "target_format": "index" if loss.to_onehot_y else "mask", "gamma": float(loss.gamma)}
        if isinstance(loss.alpha, float):
            out["alpha"] = loss.alpha
        return _with_reduction(_with_ignore(out, loss), loss)
    raise TypeError("export_scan: of MONAI's losses batchcheck checks DiceLoss, DiceCELoss and FocalLoss; got %s "
                    "(pass loss=None to check the model only)" % name)


def _monai_dice(loss, kind, name):
    if getattr(loss, "other_act", None) is not None:
        raise TypeError("export_scan: %s(other_act=...) applies an activation batchcheck cannot name; use sigmoid=True or "
                        "softmax=True, or pass loss=None to check the model only" % name)
    activation = "sigmoid" if loss.sigmoid else "softmax" if loss.softmax else "none"
    out = {"type": kind, "activation": activation, "target_format": "index" if loss.to_onehot_y else "mask"}
    return _with_reduction(_with_ignore(out, loss), loss)


def _smp_loss(loss, name):
    kinds = {"DiceLoss": "dice", "JaccardLoss": "jaccard", "FocalLoss": "focal"}
    if name not in kinds:
        raise TypeError("export_scan: of segmentation_models_pytorch's losses batchcheck checks DiceLoss, JaccardLoss and "
                        "FocalLoss; got %s (pass loss=None to check the model only)" % name)
    mode = loss.mode
    target_format = {"binary": "binary", "multiclass": "classes", "multilabel": "mask"}[mode]
    from_logits = getattr(loss, "from_logits", True)
    if name == "FocalLoss":
        # smp's focal is a sigmoid focal loss per class, on logits (probabilities with from_logits=False).
        out = {"type": "focal", "activation": "sigmoid" if from_logits else "none", "target_format": target_format}
        fn = getattr(loss, "focal_loss_fn", None)
        kw = getattr(fn, "keywords", {}) or {}
        if kw.get("gamma") is not None:
            out["gamma"] = float(kw["gamma"])
        if kw.get("alpha") is not None:
            out["alpha"] = float(kw["alpha"])
        red = kw.get("reduction", "mean")
        if red in ("sum", "none"):
            out["reduction"] = red
    else:
        activation = ("softmax" if mode == "multiclass" else "sigmoid") if from_logits else "none"
        out = {"type": kinds[name], "activation": activation, "target_format": target_format}
    return _with_ignore(out, loss)


def _with_ignore(out, loss):
    ignore = getattr(loss, "ignore_index", None)
    if ignore is not None:
        out["ignore_index"] = int(ignore)
    return out


def _with_reduction(out, loss):
    red = getattr(loss, "reduction", "mean")
    red = getattr(red, "value", red)  # MONAI keeps an enum
    if red in ("sum", "none"):
        out["reduction"] = red
    return out


def _split(sample, input_key, target_key):
    """(input, target or None) of one dataset item."""
    if isinstance(sample, dict):
        if input_key not in sample:
            raise KeyError("export_scan: the dataset's samples are dicts without the key %r (keys: %s); pass input_key="
                           % (input_key, ", ".join(map(str, sample))))
        return sample[input_key], sample.get(target_key)
    if isinstance(sample, (tuple, list)):
        if len(sample) not in (1, 2):
            raise ValueError("export_scan: a sample must be (input, target) or (input,); got %d elements" % len(sample))
        return sample[0], (sample[1] if len(sample) == 2 else None)
    return sample, None


def _tensor(v, what, i):
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    if isinstance(v, np.ndarray):
        return torch.from_numpy(v)
    if isinstance(v, (int, float, bool)):
        return torch.tensor(v)
    raise TypeError("export_scan: the %s of sample %d is %s, not a tensor, an array or a number" % (what, i, type(v).__name__))


class _Progress:
    def __init__(self, total, what):
        self.total, self.what, self.last = total, what, -1
        self.tty = sys.stderr.isatty()

    def __call__(self, done):
        pct = 100 * done // max(self.total, 1)
        if pct != self.last and (self.tty or pct % 10 == 0):
            self.last = pct
            end = "\r" if self.tty and done < self.total else "\n"
            sys.stderr.write("batchcheck.export: %s %d/%d (%d%%)%s" % (self.what, done, self.total, pct, end))
            sys.stderr.flush()


class _NotRagged(ValueError):
    """Samples that vary in more than their first dimension: no values + offsets layout."""


class _Ragged:
    """A variable-length field as values + offsets .npy files (sample i is
    values[offsets[i]:offsets[i+1]]), streamed: the values go to disk as they come, and the
    .npy header is written in front of them at the end. Only the offsets stay in memory."""

    def __init__(self, folder, name):
        self.folder, self.name = folder, name
        self.raw_path = os.path.join(folder, name + ".values.raw")
        self.raw = open(self.raw_path, "wb")
        self.offsets = [0]
        self.dtype = self.trailing = None

    def add(self, t, i):
        a = np.ascontiguousarray(t.numpy())
        if a.ndim == 0:
            raise _NotRagged("sample %d of %s is a scalar among variable-length samples" % (i, self.name))
        if self.dtype is None:
            self.dtype, self.trailing = a.dtype, a.shape[1:]
        elif a.dtype != self.dtype or a.shape[1:] != self.trailing:
            raise _NotRagged("sample %d of %s is %s %s, the first was %s (n, %s)"
                             % (i, self.name, a.dtype, list(a.shape), self.dtype, ", ".join(map(str, self.trailing))))
        self.raw.write(a.tobytes())
        self.offsets.append(self.offsets[-1] + a.shape[0])

    def finish(self):
        self.raw.close()
        values = self.name + ".values.npy"
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                  "shape": (self.offsets[-1],) + tuple(self.trailing)}
        with open(os.path.join(self.folder, values), "wb") as out, open(self.raw_path, "rb") as src:
            np.lib.format.write_array_header_1_0(out, header)
            shutil.copyfileobj(src, out, 1 << 20)
        os.remove(self.raw_path)
        offsets = self.name + ".offsets.npy"
        np.save(os.path.join(self.folder, offsets), np.asarray(self.offsets, dtype=np.int64))
        return {"values": values, "offsets": offsets}


def _write_data(folder, dataset, input_key, target_key):
    """Reads every sample once, streaming each field to disk (any size): samples of one shape
    to a .npy file written row by row through a memory map; variable-length samples (token
    sequences) to values + offsets .npy files. A field that turns out to vary is rewritten
    from the first sample. Samples that vary in more than their first dimension (images of
    different sizes) go to data.pt as lists of per-sample tensors: the scan then reports the
    batches where default_collate fails, as it fails for you."""
    try:
        return _write_npy(folder, dataset, input_key, target_key)
    except _NotRagged:
        for name in os.listdir(folder):
            if name.startswith(("inputs.", "targets.")) and name.endswith((".npy", ".raw")):
                os.remove(os.path.join(folder, name))
        return _write_pt(folder, dataset, input_key, target_key)


def _operator_libraries(scripted):
    """torchvision's ops library when the model calls its operators (nms, roi_align): the
    scan loads it before the model (model.libraries)."""
    try:
        graph = str(scripted.inlined_graph)
    except Exception:
        return []
    if "torchvision::" not in graph:
        return []
    import glob
    import torchvision
    return sorted(glob.glob(os.path.join(os.path.dirname(torchvision.__file__), "_C*.so")))[:1]


def _lists_collate(collate_fn, samples):
    """Whether collate_fn leaves the batch as tuple(zip(*batch)): lists of the samples' own
    fields (torchvision's detection recipe)."""
    try:
        out = collate_fn(samples)
    except Exception:
        return False
    fields = list(zip(*samples))
    return (isinstance(out, (tuple, list)) and len(out) == len(fields) and
            all(isinstance(o, (tuple, list)) and len(o) == len(f) and all(a is b for a, b in zip(o, f))
                for o, f in zip(out, fields)))


def _write_pt(folder, dataset, input_key, target_key, lists=False):
    """Every sample's input and target in data.pt, per sample. With a list collate
    (detection) a target may be a dict of tensors (boxes, labels) and stays per sample."""
    n = len(dataset)
    progress = _Progress(n, "reading the dataset" if lists else "reading the dataset again (samples of different shapes)")
    xs, ys = [], []
    for i in range(n):
        x, y = _split(dataset[i], input_key, target_key)
        xs.append(_tensor(x, "input", i))
        if lists and isinstance(y, dict):
            ys.append({str(k): _tensor(v, "target", i) for k, v in y.items()})
        elif y is not None:
            ys.append(_tensor(y, "target", i))
        progress(i + 1)
    data = {"inputs": xs}
    if ys:
        # Targets of one shape are stacked (default_collate stacks them); varying ones stay per sample.
        one_shape = not lists and len({tuple(t.shape) for t in ys}) == 1
        data["targets"] = torch.stack(ys) if one_shape else ys
    torch.save(data, os.path.join(folder, "data.pt"))
    return {"format": "pt", "path": "data.pt"}


def _write_npy(folder, dataset, input_key, target_key):
    n = len(dataset)
    if n == 0:
        raise ValueError("export_scan: the dataset is empty")
    progress = _Progress(n, "reading the dataset")
    first = _split(dataset[0], input_key, target_key)
    names = ["inputs"] + (["targets"] if first[1] is not None else [])
    kinds = {"inputs": "input", "targets": "target"}
    shape0 = {name: tuple(_tensor(v, kinds[name], 0).shape) for name, v in zip(names, first)}
    maps, ragged = {}, {}
    for i in range(n):
        sample = first if i == 0 else _split(dataset[i], input_key, target_key)
        for name, value in zip(names, sample):
            t = _tensor(value, kinds[name], i)
            if name not in ragged and tuple(t.shape) != shape0[name]:
                # This field varies: values + offsets from sample 0 on.
                if name in maps:
                    del maps[name]
                    os.remove(os.path.join(folder, name + ".npy"))
                ragged[name] = _Ragged(folder, name)
                for j in range(i):
                    pj = _split(dataset[j], input_key, target_key)
                    ragged[name].add(_tensor(pj[names.index(name)], kinds[name], j), j)
            if name in ragged:
                ragged[name].add(t, i)
                continue
            if name not in maps:
                maps[name] = np.lib.format.open_memmap(os.path.join(folder, name + ".npy"), mode="w+",
                                                       dtype=t.numpy().dtype, shape=(n,) + tuple(t.shape))
            maps[name][i] = t.numpy()
        progress(i + 1)
    data = {"format": "npy"}
    for name in names:
        if name in ragged:
            data[name] = ragged[name].finish()
        else:
            maps[name].flush()
            data[name] = name + ".npy"
    return data


_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _image_folder(dataset):
    """A torchvision ImageFolder whose transform batchcheck can declare: the `data` config that
    reads the folder itself (format "imagefolder"), else None (the samples are then written
    out). Random crops become their deterministic stand-in of the same output size; random
    flips and colour changes are left out (they change values, not shapes). Duck-typed: no
    torchvision import."""
    names = {c.__name__ for c in type(dataset).__mro__}
    if "DatasetFolder" not in names or getattr(dataset, "target_transform", None) is not None:
        return None
    # The folder must be read as ImageFolder reads it: PIL's RGB loader, image extensions.
    loader = getattr(getattr(dataset, "loader", None), "__name__", "")
    extensions = tuple(e.lower() for e in (getattr(dataset, "extensions", None) or ()))
    if loader not in ("default_loader", "pil_loader") or extensions != _IMG_EXTENSIONS:
        return None
    if not isinstance(getattr(dataset, "root", None), (str, os.PathLike)):
        return None
    steps = getattr(dataset.transform, "transforms", [dataset.transform] if dataset.transform else [])
    out, order, skipped = {}, [], []
    for t in steps:
        kind = type(t).__name__
        interpolation = str(getattr(getattr(t, "interpolation", None), "value", "bilinear"))
        if kind == "Resize" and getattr(t, "max_size", None) is None and interpolation in ("bilinear", "bicubic"):
            size = t.size if isinstance(t.size, int) else list(t.size)
            out["resize"] = size[0] if isinstance(size, list) and len(size) == 1 else size
            if interpolation != "bilinear":
                out["interpolation"] = interpolation
            order.append(0)
        elif kind == "CenterCrop":
            out["center_crop"] = list(t.size) if t.size[0] != t.size[1] else t.size[0]
            order.append(1)
        elif kind == "RandomResizedCrop":
            size = list(t.size)
            out["resize"] = min(size)
            out["center_crop"] = size if size[0] != size[1] else size[0]
            order.append(1)
            skipped.append(kind + " (checked at its output size)")
        elif kind in ("RandomHorizontalFlip", "RandomVerticalFlip", "ColorJitter", "RandomRotation", "RandomGrayscale"):
            skipped.append(kind)
        elif kind == "ToTensor":
            order.append(2)
        elif kind == "Normalize":
            out["normalize"] = {"mean": [float(v) for v in t.mean], "std": [float(v) for v in t.std]}
            order.append(3)
        else:
            return None
    if 2 not in order or order != sorted(order) or len(order) != len(set(order)):
        return None
    if skipped:
        warnings.warn("export_scan: the image folder is scanned with a deterministic transform; %s left out"
                      % ", ".join(skipped), stacklevel=3)
    data = {"format": "imagefolder", "path": os.path.abspath(dataset.root)}
    if out:
        data["transform"] = out
    return data


def _first_batch(dataset, indices):
    """The samples of the first batch; one that fails to load (a corrupt image) is skipped:
    the scan reports it, the example only needs to run the model."""
    samples = []
    for i in indices:
        try:
            samples.append(dataset[i])
        except Exception:
            continue
    for i in range(len(dataset)):
        if samples:
            break
        try:
            samples.append(dataset[i])
        except Exception:
            continue
    if not samples:
        raise ValueError("export_scan: no sample of the dataset loads")
    return samples


def _pad_batch(samples, pad, input_key, target_key):
    xs, ys = [], []
    for s in samples:
        x, y = _split(s, input_key, target_key)
        xs.append(_tensor(x, "input", 0))
        ys.append(None if y is None else _tensor(y, "target", 0))

    def field(ts, value):
        return pad_sequence(ts, batch_first=True, padding_value=value) if value is not None else torch.stack(ts)
    x = field(xs, pad.get("inputs"))
    y = None if ys[0] is None else field(ys, pad.get("targets"))
    return x, y


def _reachable_rngs(loader):
    """Every RNG the loader's sampling can draw from: torch Generators, random.Random and numpy
    Generator/RandomState objects held by the loader, its sampler, its batch sampler and
    whatever those hold (a bucketing batch sampler's own self.generator, nested samplers, lists
    of them). The dataset is not read while recording, so its RNGs are not walked."""
    seen, found = set(), []

    def visit(obj, depth):
        if obj is None or depth > 6 or id(obj) in seen or isinstance(obj, (int, float, str, bytes, Dataset)):
            return
        seen.add(id(obj))
        if isinstance(obj, (torch.Generator, random.Random, np.random.Generator, np.random.RandomState)):
            found.append(obj)
        elif isinstance(obj, (list, tuple, set)):
            for x in list(obj)[:10000]:  # a list of buckets is ints: skipped above
                visit(x, depth + 1)
        elif isinstance(obj, dict):
            for x in list(obj.values())[:10000]:
                visit(x, depth + 1)
        elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.Tensor, np.ndarray)):
            for x in vars(obj).values():
                visit(x, depth + 1)

    for root in (loader.generator, loader.sampler, loader.batch_sampler):
        visit(root, 0)
    return found


def _get_rng_state(g):
    if isinstance(g, torch.Generator):
        return g.get_state()
    if isinstance(g, random.Random):
        return g.getstate()
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    return g.get_state()


def _set_rng_state(g, state):
    if isinstance(g, torch.Generator):
        g.set_state(state)
    elif isinstance(g, random.Random):
        g.setstate(state)
    elif isinstance(g, np.random.Generator):
        g.bit_generator.state = state
    else:
        g.set_state(state)


def _record_order(loader, n):
    """The batches the loader's next epoch delivers, recorded through a loader over indices
    that shares its batch sampler and generator; every RNG state is restored afterwards: the
    global torch, Python and numpy ones and every one the loader can reach (_reachable_rngs),
    so the epoch training then runs is the one recorded."""
    global_states = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    held = [(g, _get_rng_state(g)) for g in _reachable_rngs(loader)]
    try:
        probe = DataLoader(_Indices(n), batch_sampler=loader.batch_sampler, generator=loader.generator)
        return [b.tolist() for b in probe]
    finally:
        torch.set_rng_state(global_states[0])
        random.setstate(global_states[1])
        np.random.set_state(global_states[2])
        for g, state in held:
            _set_rng_state(g, state)


def _plain_sequential(loader):
    # The batch sampler's own sampler: DataLoader(batch_sampler=...) (an Accelerate loader too)
    # keeps an unused SequentialSampler as .sampler whatever its batch sampler draws from.
    bs = loader.batch_sampler
    return type(bs) is BatchSampler and isinstance(bs.sampler, SequentialSampler) and loader.batch_size is not None


@contextlib.contextmanager
def _quiet_jit():
    """torch 2.x deprecates torch.jit.script/trace with a FutureWarning: that is batchcheck's
    choice of format for the engine, not the user's to act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, message=r".*torch\.jit\.(script|trace)")
        yield


def _script_or_trace(model, example, mode):
    try:
        with _quiet_jit():
            return torch.jit.script(model), "script"
    except Exception as e:  # TorchScript cannot compile the model: trace it on a real batch
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        warnings.warn("export_scan: torch.jit.script failed (%s); tracing the model on the first batch in %s mode instead. "
                      "A trace freezes Python control flow and the shapes it saw, and keeps BatchNorm/dropout in %s mode: "
                      "batchcheck reports a trace-mode mismatch if you scan it in the other mode" % (reason, mode, mode),
                      stacklevel=3)
        return _trace(model, example, mode), "trace"


def _trace(model, example, mode):
    was_training = model.training
    model.train(mode == "train")
    try:
        with _quiet_jit(), torch.no_grad():
            return torch.jit.trace(model, example, check_trace=False, strict=False)  # dict outputs too
    finally:
        model.train(was_training)


def export_scan(folder, model, loader=None, loss=None, dataset=None, mode="train", pad=None, pad_to_multiple_of=1,
                input_key="inputs", target_key="targets", output=None, aux=None, **loader_kwargs):
    """Writes model.pt, the data, order.json (when needed) and config.json into `folder`;
    returns the config's path and prints the batchcheck command.

    loader: your DataLoader; or pass dataset= and the DataLoader's keyword arguments
    (batch_size=..., shuffle=..., sampler=..., drop_last=...) instead.
    output: the key (dict) or index (tuple) of the prediction when forward returns several
    outputs; aux: the extra outputs your loss adds, with their weights ({"aux": 0.5} for
    loss(out["out"]) + 0.5 * loss(out["aux"])).
    loss: a torch.nn loss module, None (model checks only), or "model" when forward computes
    its loss from the targets (torchvision's detection models: a loader whose collate_fn is
    lambda b: tuple(zip(*b)) is then replayed as lists of samples; pass output=0 for a scripted
    detector, which returns (losses, detections))."""
    if aux and output is None:
        raise ValueError("export_scan: aux needs output=, the key or index of the prediction itself")
    if loader is None:
        if dataset is None:
            raise TypeError("export_scan: pass your DataLoader, or dataset= and its DataLoader arguments")
        loader = DataLoader(dataset, **loader_kwargs)
    elif loader_kwargs:
        raise TypeError("export_scan: DataLoader arguments (%s) are read from the loader you passed" % ", ".join(loader_kwargs))
    if mode not in ("train", "eval"):
        raise ValueError("export_scan: mode is 'train' or 'eval', got %r" % (mode,))
    dataset = loader.dataset
    os.makedirs(folder, exist_ok=True)
    n = len(dataset)

    custom_collate = loader.collate_fn is not default_collate
    order = None if _plain_sequential(loader) else _record_order(loader, n)
    first_indices = order[0] if order else list(range(min(n, loader.batch_size or 1)))
    samples = _first_batch(dataset, first_indices)
    lists = custom_collate and not pad and _lists_collate(loader.collate_fn, samples)
    if lists and loss != "model" and loss is not None:
        raise ValueError("export_scan: the loader keeps its batches as lists (tuple(zip(*batch))), which batchcheck's losses "
                         "cannot take: pass loss=\"model\" when forward computes its loss from the targets (detection "
                         "models), or loss=None")
    if custom_collate and not pad and not lists:
        raise ValueError("export_scan: the loader has its own collate_fn; describe it with pad={'inputs': <padding value>} "
                         "(pad_sequence(batch_first=True)) or use default_collate")
    if lists:
        x = [_split(s, input_key, target_key)[0] for s in samples]
    elif pad:
        x, _ = _pad_batch(samples, pad, input_key, target_key)
        if pad_to_multiple_of > 1 and x.dim() > 1 and x.size(1) % pad_to_multiple_of:
            widths = (0, 0) * (x.dim() - 2) + (0, pad_to_multiple_of - x.size(1) % pad_to_multiple_of)
            x = nn.functional.pad(x, widths, value=pad.get("inputs", 0))
        if custom_collate:
            theirs = loader.collate_fn(samples)
            tx = theirs[0] if isinstance(theirs, (tuple, list)) else theirs
            if not isinstance(tx, torch.Tensor) or tx.shape != x.shape or not torch.equal(tx, x):
                raise ValueError("export_scan: your collate_fn's first batch differs from pad_sequence(batch_first=True) "
                                 "with %r: batchcheck would not check the batches you train on" % (pad,))
    else:
        try:
            batch = default_collate(samples)
        except RuntimeError:  # ragged samples: batchcheck reports where default_collate fails
            batch = default_collate(samples[:1])
        x = batch[0] if isinstance(batch, (tuple, list)) else (batch[input_key] if isinstance(batch, dict) else batch)

    scripted, how = _script_or_trace(model, x, mode)
    scripted.save(os.path.join(folder, "model.pt"))
    data = _image_folder(dataset) if not pad and not lists else None
    if lists:
        data = _write_pt(folder, dataset, input_key, target_key, lists=True)
    elif data is None:
        data = _write_data(folder, dataset, input_key, target_key)

    loader_cfg = {}
    if loader.batch_size is not None:
        loader_cfg["batch_size"] = loader.batch_size
    if _plain_sequential(loader):
        if loader.drop_last:
            loader_cfg["drop_last"] = True
    else:
        with open(os.path.join(folder, "order.json"), "w") as f:
            json.dump({"samples": n, "ranks": [order]}, f)
        loader_cfg["order"] = "order.json"
    if lists:
        loader_cfg["collate"] = {"list": True}
    if pad:
        loader_cfg["collate"] = {"pad": dict(pad)}
        if pad_to_multiple_of > 1:
            loader_cfg["collate"]["pad_to_multiple_of"] = pad_to_multiple_of
    config = {"model": {"path": "model.pt", "mode": mode}, "data": data, "loader": loader_cfg, "loss": loss_config(loss)}
    if output is not None:
        config["model"]["output"] = output
    libraries = _operator_libraries(scripted)
    if libraries:
        config["model"]["libraries"] = libraries
    if aux:
        config["loss"]["aux"] = {str(k): float(w) for k, w in aux.items()}
    path = os.path.join(folder, "config.json")
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    print("batchcheck scan %s   # model %s, %d samples%s" % (path, {"script": "scripted", "trace": "traced"}[how], n,
                                                              ", recorded order" if "order" in loader_cfg else ""))
    return path
