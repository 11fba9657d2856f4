"""A batch as the loader yields it, and its tensor leaves, each named by its path.

The user's step (and model) get the batch exactly as yielded: a tensor, any nesting of tuples,
lists, Mappings (dict, BatchEncoding, UserDict), namedtuples, dataclasses and objects holding
tensors (a graph library's Data/Batch), with non-tensor leaves (lists of lengths, strings, None).
The engine gets its tensor leaves as named fields: `batch[0][1]`, `batch["input_ids"]`, `batch.x`;
a list of numbers (a CTC collate's lengths) becomes a field too, so that its values are checked.
"""
import copy
import dataclasses
import json
from collections.abc import Mapping

import torch

# A batch past these is not walked further (a loader's batch is a few fields, not a tree of
# thousands): what lies deeper is not checked, never an error.
MAX_DEPTH = 12
MAX_LEAVES = 256

# The dtypes the engine takes (_wire._DTYPES); a leaf of another (complex, float8) is not sent.
_SENDABLE = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
             torch.int8, torch.uint8, torch.bool)


def _key(k):
    """A Mapping key as Python writes it in a subscript: "input_ids" in double quotes, 3 as 3."""
    if isinstance(k, str):
        return json.dumps(k, ensure_ascii=False)
    if isinstance(k, (int, float, bool)) or k is None:
        return repr(k)
    return json.dumps(str(k), ensure_ascii=False)


def _numbers(seq):
    """A tensor of a flat list or tuple of Python numbers (the lengths a collate returns), else None."""
    if not seq or len(seq) > (1 << 24):
        return None
    if all(isinstance(v, bool) for v in seq):
        return torch.tensor(list(seq), dtype=torch.bool)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in seq):
        try:
            return torch.tensor(list(seq), dtype=torch.int64)
        except (OverflowError, RuntimeError):
            return None
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seq):
        return torch.tensor([float(v) for v in seq], dtype=torch.float64)
    return None


def _attributes(obj):
    """(name, value) of an object that holds tensors: a graph library's Data/Batch (its to_dict()),
    a dataclass's fields, else its public attributes; [] for anything else."""
    to_dict = getattr(type(obj), "to_dict", None)
    if callable(to_dict):
        try:
            d = obj.to_dict()
        except Exception:  # noqa: BLE001 - an object whose to_dict needs arguments: its attributes below
            d = None
        if isinstance(d, Mapping):
            return [(str(k), v) for k, v in d.items()]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f.name, getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return [(k, v) for k, v in attrs.items() if isinstance(k, str) and not k.startswith("_")]
    return []


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def leaves(batch, root="batch"):
    """[(path, tensor)] of a batch's tensor leaves, in the order the batch holds them, and the
    paths of the leaves left out (a dtype the engine does not take, a sparse tensor, past the
    limits). Lists of numbers are tensors here; strings, None and other values are not fields."""
    out, skipped, seen = [], [], set()

    def keep(path, t):
        if t.layout != torch.strided or t.dtype not in _SENDABLE or t.is_nested or len(out) >= MAX_LEAVES:
            skipped.append(path)
        else:
            out.append((path, t))

    def walk(x, path, depth):
        if isinstance(x, torch.Tensor):
            keep(path, x)
            return
        if isinstance(x, (str, bytes, int, float, bool, complex)) or x is None:
            return
        if depth >= MAX_DEPTH or id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, Mapping):
            for k, v in list(x.items()):
                walk(v, "%s[%s]" % (path, _key(k)), depth + 1)
        elif _is_namedtuple(x):
            for name, v in zip(type(x)._fields, x):
                walk(v, "%s.%s" % (path, name), depth + 1)
        elif isinstance(x, (tuple, list)):
            numbers = _numbers(x)
            if numbers is not None:
                keep(path, numbers)
                return
            for k, v in enumerate(x):
                walk(v, "%s[%d]" % (path, k), depth + 1)
        else:
            for name, v in _attributes(x):
                walk(v, "%s.%s" % (path, name), depth + 1)

    walk(batch, root, 0)
    return out, skipped


def is_flat(batch):
    """Whether the batch is what the engine's own forward takes field by field: a tensor, a
    Mapping of tensors (other values beside them), or a plain tuple/list of tensors."""
    if isinstance(batch, torch.Tensor):
        return True
    if isinstance(batch, Mapping):
        return any(isinstance(v, torch.Tensor) for v in batch.values()) and \
            all(isinstance(v, torch.Tensor) or not _holds_tensors(v) for v in batch.values())
    if isinstance(batch, (tuple, list)) and not _is_namedtuple(batch):
        return bool(batch) and all(isinstance(v, torch.Tensor) for v in batch)
    return False


def _holds_tensors(x):
    return bool(leaves(x)[0])


def private_copy(batch):
    """The batch for one run of the user's code: its tensors copied, the structure the same, so
    that a step writing into its batch in place (x.mul_(lam), batch.div_(255)) changes neither the
    batch the checks read nor another run's. Falls back to the batch itself where it cannot be
    copied (an object that refuses deepcopy): then its in-place work is the user's own."""
    try:
        return _copy(batch)
    except Exception:  # noqa: BLE001 - an object that refuses deepcopy
        return batch


def _copy(x):
    """deepcopy, with plain tensors, tuples, lists and dicts copied directly (deepcopy's memo and
    reduce protocol cost more than a small batch's step)."""
    if type(x) is torch.Tensor:
        return x.clone() if x.layout == torch.strided and not x.requires_grad else copy.deepcopy(x)
    if type(x) in (tuple, list):
        return type(x)(_copy(v) for v in x)
    if type(x) is dict:
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, (str, bytes, int, float, bool)) or x is None:
        return x
    return copy.deepcopy(x)


def describe(batch, depth=0):
    """A batch's structure in a few words, for a refusal: "tuple(list(Tensor, Tensor), Tensor)"."""
    if depth > 3:
        return "..."
    if isinstance(batch, torch.Tensor):
        return "Tensor"
    name = type(batch).__name__
    if isinstance(batch, Mapping):
        keys = list(batch.keys())[:4]
        return "%s(%s%s)" % (name, ", ".join("%s: %s" % (_key(k), describe(batch[k], depth + 1)) for k in keys),
                             ", ..." if len(batch) > 4 else "")
    if isinstance(batch, (tuple, list)):
        return "%s(%s%s)" % (name, ", ".join(describe(v, depth + 1) for v in batch[:4]), ", ..." if len(batch) > 4 else "")
    return name


def row_maps(fields, n):
    """{field name: int64 tensor, the sample (position in the batch) of each of its rows} for the
    fields whose rows are not the batch's samples but whose samples the batch's own index structure
    proves: a graph batch vector (one value per row, ascending, below n), a `ptr` (n + 1
    boundaries from 0 to the rows), offsets (n starts from 0, ascending) or lengths (n counts
    summing to the rows). Where two readings disagree, the field gets none (not proven)."""
    index = [(name, t) for name, t in fields
             if t.dim() == 1 and t.numel() and not t.is_floating_point() and t.dtype != torch.bool]
    out = {}
    for name, field in fields:
        if field.dim() == 0 or field.shape[0] == n or field.shape[0] == 0:
            continue
        rows = int(field.shape[0])
        # A padded layout ([T, B], [B, T] stacked otherwise) holds the batch in another dimension:
        # offsets and lengths are no proof there; a batch vector or ptr, exact, still is.
        padded = n in tuple(field.shape[1:])
        found, agree = None, True
        for other, g in index:
            if other == name:
                continue
            for m in _readings(g.detach().cpu().long(), rows, n, padded):
                if found is None:
                    found = m
                elif not torch.equal(found, m):
                    agree = False
        if found is not None and agree:
            out[name] = found
    return out


def _readings(g, rows, n, padded):
    """The row -> sample maps the values of g prove for a field of `rows` rows."""
    out = []
    steps = g[1:] - g[:-1] if g.numel() > 1 else g[:0]
    ascending = bool((steps >= 0).all())
    if g.numel() == rows and ascending and int(g.min()) >= 0 and int(g.max()) < n:
        out.append(g.clone())  # a graph batch vector
    if g.numel() == n + 1 and ascending and int(g[0]) == 0 and int(g[-1]) == rows:
        out.append(torch.repeat_interleave(torch.arange(n), steps))  # ptr
    if not padded and g.numel() == n:
        if ascending and int(g[0]) == 0 and int(g[-1]) <= rows:  # offsets
            out.append(torch.repeat_interleave(torch.arange(n), torch.cat([steps, torch.tensor([rows - int(g[-1])])])))
        if int(g.min()) >= 0 and int(g.sum()) == rows:  # lengths
            out.append(torch.repeat_interleave(torch.arange(n), g))
    return out
