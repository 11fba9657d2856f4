"""The user's step run eagerly, with the checks the engine makes in a captured graph made where
PyTorch makes them: the arguments of embedding, the class-index losses, one_hot and BCE read
before the op runs (as engine/localize/argument_check does in a graph), and the gradients of
the loss checked for NaN/Inf. What it finds goes to the engine in the batch's header ("faults",
"gradients"), in the engine's own terms (core/pipeline/backend.h's OpFault and GradStats), so that
the findings, their words and their fixes are the command's.

The path that takes over where no capture of the step can be made; the capture's successor when
torch.jit.trace goes (ARCHITECTURE.md)."""
import contextlib
import math
import traceback
import weakref

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from batchcheck._capture import _library, own
from batchcheck._prepare import OutputPathError


class Stopped(Exception):
    """An op was given what makes it raise (on CUDA: assert): the step stops before it."""

    def __init__(self, fault):
        super().__init__("batchcheck stopped the step before %s: %s" % (fault["site"]["op"], fault["what"]))
        self.fault = fault


def _site(op, stack):
    """The op, the innermost module running, and the user's line."""
    site = {"op": op}
    if stack and stack[-1][0]:
        site["module"] = stack[-1][0]
    # The user's innermost line inside what batchcheck called (their step, their forward), else
    # the innermost line of the library whose code it is (transformers'): never a frame outside
    # batchcheck's call (its server thread's, the line that called scan()).
    library, entered, caller = None, False, None
    for f in reversed(traceback.extract_stack()):
        p = f.filename.replace("\\", "/")
        if own(f.filename):
            if entered:  # back in batchcheck's own code, outside the op's callers
                break
            continue  # the dispatch mode's own frames, innermost
        entered = True
        if caller is None and "/torch/" not in p and not p.startswith("<") and not _stdlib(p):
            caller = f  # the code that called the op (its arguments are that code's)
        if not _library(f.filename) and not _stdlib(p):
            library = f
            break
        if library is None and "/torch/" not in p and not p.startswith("<") and not _stdlib(p):
            library = f
    if caller is not None and caller is not library:
        # An installed library called the op (torchvision's detection loss): its arguments are not
        # the user's to change there.
        site["library"] = "%s, line %d" % (caller.filename, caller.lineno)
    if library is not None:
        site.update(file=library.filename, line=library.lineno)
        if library.line:
            site["source_line"] = library.line.strip()
    return site


def _stdlib(path):
    """Whether a file is Python's own (threading.py, runpy.py)."""
    import sysconfig
    for key in ("stdlib", "platstdlib"):
        root = sysconfig.get_paths().get(key)
        if root and path.startswith(root.replace("\\", "/") + "/") and "-packages/" not in path:
            return True
    return False


_MAX_SHIFT = 4  # a field shifted by more steps than this (tgt[1:], x[2:]) is not looked for


def _batch_dim(shape, batch):
    """A field's dimension of the batch: its first of the batch's size (batch first, as
    default_collate stacks), else its only one ([T, B] from pad_sequence)."""
    if not shape or batch <= 0:
        return None
    if shape[0] == batch:
        return 0
    dims = [d for d in range(1, len(shape)) if shape[d] == batch]
    return dims[0] if len(dims) == 1 else None


def _views(field, batch):
    """(view of the field, its shape's batch dimension): the field as it is, and for a 2-D one
    ([B, T] or [T, B]) transposed and shifted along its steps; as core/pipeline/batch_layout.h's
    field_views, each tried against an op's argument by its values."""
    d = _batch_dim(list(field.shape), batch)
    if d is None:
        return
    if field.dim() != 2:
        yield field, d
        return
    steps = field.shape[1 - d]
    for length in range(max(1, steps - _MAX_SHIFT), steps + 1):
        for offset in range(0, steps - length + 1):
            v = field.narrow(1 - d, offset, length)
            yield v, d
            yield v.t(), 1 - d


def _rows(bad, arg, batch, fields=(), maps=()):
    """The batch's samples where `bad` (a mask over `arg`, an op's argument) holds: batch-first
    where arg's first dimension is the batch's size, else through the one view of a field whose
    values arg equals ([T, B], [B*T] flattened, tgt[1:] flattened) where all such views agree;
    [] where none is proven. As the engine's argument_check."""
    if batch <= 0 or bad.dim() == 0:
        return []
    positions = torch.nonzero(bad.reshape(-1)).flatten()
    if bad.shape[0] == batch:
        return sorted(set((positions // max(1, bad[0].numel())).tolist()))
    values = arg.detach().cpu().reshape(-1)
    # A field whose rows the batch's index structure maps to samples (_batch.row_maps), passed as it is.
    for field, rows_to in maps:
        if field.numel() == values.numel() and field.dim() and torch.equal(field.detach().cpu().reshape(-1).to(values.dtype), values):
            rows = positions // max(1, field[0].numel())
            return sorted(set(rows_to[rows[rows < len(rows_to)]].tolist()))
    found = None
    for field in fields:
        for view, d in _views(field.detach().cpu(), batch):
            if view.numel() != values.numel():
                continue
            v = view.reshape(-1).to(values.dtype)
            same = ((v == values) | (v.isnan() & values.isnan())).all() if values.is_floating_point() else torch.equal(v, values)
            if not bool(same):
                continue
            inner = 1
            for s in view.shape[d + 1:]:
                inner *= s
            rows = sorted(set(((positions // inner) % view.shape[d]).tolist()))
            if found is not None and found != rows:
                return []  # two views of the data, two answers: not known
            found = rows
    return found or []


class OpChecks(TorchFunctionMode):
    """A TorchFunctionMode over one run of the step: each checked op's arguments are read before
    it runs; a fault that would raise stops the step (Stopped)."""

    def __init__(self, batch, fields=(), maps=()):
        super().__init__()
        self.batch = batch
        self.fields = list(fields)  # the batch's tensors: what an op's argument may be made of (_rows)
        self.maps = list(maps)  # (field, its rows' samples) where the batch's index structure proves them
        self.faults = []
        self.stack = []  # (module name, type, id) of the forwards running

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        check = _CHECKS.get(func)
        if check is not None:
            with torch._C.DisableTorchFunction():
                found = check(self, *args, **kwargs)
            new = found if isinstance(found, list) else [] if found is None else [found]
            for fault in new:
                if self.stack and self.stack[-1][0]:
                    fault["module_type"] = self.stack[-1][1]  # "criterion (BCELoss)"
                self.faults.append(fault)
            stop = next((f for f in new if f.get("fatal", True)), None)
            if stop is not None:
                raise Stopped(stop)
        return func(*args, **kwargs)

    def _index(self, op, index, bound, what, bound_name, ignore=None, fault_id="index", rows=None):
        if not isinstance(index, torch.Tensor) or index.is_floating_point() or index.numel() == 0:
            return None
        i = index.detach().cpu().long()
        bad = (i < 0) | (i >= bound)
        if ignore is not None:
            bad &= i != ignore
        if not bool(bad.any()):
            return None
        values = i[bad]
        lo, hi = int(values.min()), int(values.max())
        used = i[i != ignore] if ignore is not None else i.reshape(-1)
        fault = {"id": fault_id, "what": what, "bound_name": bound_name, "value": lo if lo < 0 and hi < bound else hi,
                 "bound": int(bound), "rows": rows if rows is not None else _rows(bad, i, self.batch, self.fields, self.maps),
                 "fatal": True,
                 "smallest": int(used.min()),  # the smallest index given: whether labels start at 0 or at 1
                 "site": _site(op, self.stack)}
        return fault

    def embedding(self, input, weight, *args, **kwargs):
        return self._index("aten::embedding", input, weight.shape[0], "token id", "num_embeddings")

    def embedding_bag(self, input, weight, offsets=None, *args, **kwargs):
        """As embedding; a flat input's samples are its bags, cut by offsets."""
        rows = None
        if isinstance(input, torch.Tensor) and input.dim() == 1 and isinstance(offsets, torch.Tensor) and offsets.numel():
            i = input.detach().cpu().long()
            bad = torch.nonzero((i < 0) | (i >= weight.shape[0])).flatten()
            rows = sorted(set((torch.searchsorted(offsets.detach().cpu().long(), bad, right=True) - 1).clamp(min=0).tolist()))
        return self._index("aten::embedding_bag", input, weight.shape[0], "token id", "num_embeddings", rows=rows)

    def gather(self, input, dim, index, *args, **kwargs):
        """gather's index along `dim`, in [0, the size of that dimension) (a DQN's actions)."""
        if not isinstance(input, torch.Tensor) or not isinstance(dim, int) or input.dim() == 0:
            return None
        return self._index("aten::gather", index, input.shape[dim], "index", "size")

    def pack_padded(self, input, lengths, batch_first=False, *args, **kwargs):
        """pack_padded_sequence's lengths, each in [1, the padded length]: a sample of length 0 (an
        empty text, a silent clip) raises. The lengths come sorted: their rows are read from the
        batch's field that holds the same values."""
        if not isinstance(input, torch.Tensor) or not isinstance(lengths, torch.Tensor) or input.dim() < 2:
            return None
        padded = input.shape[1] if batch_first else input.shape[0]
        n = lengths.detach().cpu().long().reshape(-1)
        bad = (n <= 0) | (n > padded)
        if not bool(bad.any()):
            return None
        rows = None
        for t in self.fields:  # the batch's lengths field, in the batch's own order
            if isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() == n.numel() and not t.is_floating_point():
                field = t.detach().cpu().long()
                if torch.equal(field.sort().values, n.sort().values):
                    rows = torch.nonzero((field <= 0) | (field > padded)).flatten().tolist()
                    break
        v = int(n[bad][0])
        return {"id": "index", "contract": "pack_padded_sequence", "what": "sequence length", "loss": "",
                "text": "a sequence length of %d for a padded length of %d" % (v, padded), "consequence": "",
                "fatal": True, "rows": rows if rows is not None else [],
                "detail": {"length": v, "padded": int(padded)}, "site": _site("aten::_pack_padded_sequence", self.stack)}

    def scatter(self, input, dim, index, *args, **kwargs):
        """scatter's index along `dim`; [N, C] scattered along 1 by [N, 1] is a one-hot of labels
        (an image library's mixup_target): its value is a class."""
        if not isinstance(input, torch.Tensor) or not isinstance(dim, int) or input.dim() == 0:
            return None
        one_hot = input.dim() == 2 and dim in (1, -1) and isinstance(index, torch.Tensor) and index.dim() == 2 and \
            index.shape[1] == 1
        if one_hot:
            return self._index("aten::scatter", index, input.shape[dim], "class value", "num_classes")
        return self._index("aten::scatter", index, input.shape[dim], "index", "size")

    def class_index(self, input, target, *args, ignore_index=-100, **kwargs):
        if not isinstance(input, torch.Tensor):
            return None
        bound = input.shape[1] if input.dim() >= 2 else input.shape[0]
        name = "aten::nll_loss" if kwargs.get("_nll") else "aten::cross_entropy_loss"
        return self._index(name, target, bound, "class index", "classes", ignore_index, "target-out-of-range")

    def nll(self, input, target, *args, ignore_index=-100, **kwargs):
        return self.class_index(input, target, ignore_index=ignore_index, _nll=True)

    def one_hot(self, tensor, num_classes=-1):
        if num_classes < 0:
            return None
        return self._index("aten::one_hot", tensor, num_classes, "class value", "num_classes")

    def bce(self, input, target, *args, logits=False, **kwargs):
        loss = "BCEWithLogitsLoss" if logits else "BCELoss"
        op = "aten::binary_cross_entropy" + ("_with_logits" if logits else "")
        if input.shape != target.shape:
            return {"id": "shape-mismatch", "what": "input", "loss": loss, "input_shape": list(input.shape),
                    "target_shape": list(target.shape), "fatal": True, "site": _site(op, self.stack)}
        for k, t in enumerate((input, target)):
            if not t.is_floating_point() or t.numel() == 0:
                continue
            ranged = not (logits and k == 0)
            d = t.detach().cpu().double()
            finite = torch.isfinite(d)
            outside = (finite & ((d < 0) | (d > 1))) if ranged else torch.zeros_like(finite)
            nonfinite = int((~finite).sum())
            if nonfinite == 0 and not bool(outside.any()):
                continue
            what = "input" if k == 0 else "target"
            fault = {"id": ("output" if k == 0 else "target") + ("-nonfinite" if nonfinite else "-out-of-range"),
                     "what": what, "loss": loss, "nonfinite": nonfinite, "outside": int(outside.sum()), "lo": 0.0,
                     "hi": 1.0, "elements": t.numel(), "fatal": not logits, "rows": _rows(~finite | outside, t, self.batch, self.fields),
                     "site": _site(op, self.stack)}
            if nonfinite < t.numel():
                fault["min"], fault["max"] = float(d[finite].min()), float(d[finite].max())
            return fault
        return None

    def bce_logits(self, input, target, *args, **kwargs):
        return self.bce(input, target, logits=True)

    def ctc(self, log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
        """ctc_loss's contract, per sample: its input length within the frames, its target's
        labels below the classes and none the blank, and the target (with a blank between each
        repeated label) no longer than its input, else its loss is inf (0 with zero_infinity)."""
        if not isinstance(log_probs, torch.Tensor) or log_probs.dim() not in (2, 3):
            return None
        frames, classes = log_probs.shape[0], log_probs.shape[-1]
        n = log_probs.shape[1] if log_probs.dim() == 3 else 1
        il = torch.as_tensor(input_lengths).detach().cpu().long().reshape(-1)
        tl = torch.as_tensor(target_lengths).detach().cpu().long().reshape(-1)
        t = torch.as_tensor(targets).detach().cpu().long()
        if il.numel() != n or tl.numel() != n:
            return None
        labels = []
        start = 0
        for i in range(n):
            k = int(tl[i])
            labels.append(t[i, :k] if t.dim() == 2 else t[start:start + k])
            start += k
        site = _site("aten::ctc_loss", self.stack)
        base = {"contract": "ctc_loss", "loss": "", "site": site, "bound": int(classes)}

        def fault(fid, what, rows, text, consequence, fatal, detail):
            return dict(base, id=fid, what=what, rows=rows, text=text, consequence=consequence, fatal=fatal,
                        detail=detail)
        out = []
        long_in = [i for i in range(n) if int(il[i]) > frames or int(il[i]) < 0]
        if long_in:
            i = long_in[0]
            out.append(fault("index", "input length", long_in, "an input length of %d for %d frames of log_probs "
                             "(row %d of the batch)" % (int(il[i]), frames, i), "", True,
                             {"input_lengths": [int(il[j]) for j in long_in[:8]], "frames": int(frames)}))
            return out
        past = [i for i in range(n) if labels[i].numel() and (int(labels[i].max()) >= classes or int(labels[i].min()) < 0)]
        if past:
            i = past[0]
            v = int(labels[i].max()) if int(labels[i].max()) >= classes else int(labels[i].min())
            out.append(fault("index", "target label", past, "a CTC target label %d for %d classes (row %d of the batch)" % (v, classes, i),
                             "", True, {"value": v, "classes": int(classes)}))
            return out
        too_long = []
        for i in range(n):
            lab = labels[i]
            repeats = int((lab[1:] == lab[:-1]).sum()) if lab.numel() > 1 else 0
            if lab.numel() + repeats > int(il[i]):
                too_long.append((i, lab.numel() + repeats, int(il[i])))
        if too_long:
            i, need, have = too_long[0]
            out.append(fault(
                "loss-nonfinite", "target longer than input", [r for r, _, _ in too_long],
                "a CTC target that needs %d frames (its labels, and a blank between repeats) for an input of %d (row %d of the batch)"
                % (need, have, i),
                "ctc_loss %s for it without a word" % ("is 0 with zero_infinity=True: it does not train" if zero_infinity
                                                       else "is inf (its gradients NaN)"),
                False, {"needed": [x for _, x, _ in too_long[:8]], "input_lengths": [x for _, _, x in too_long[:8]],
                        "zero_infinity": bool(zero_infinity)}))
        blanks = [i for i in range(n) if bool((labels[i] == blank).any())]
        if blanks:
            out.append(fault("target-out-of-range", "blank in target", blanks,
                             "a CTC target holding the blank index %d (row %d of the batch)" % (blank, blanks[0]),
                             "ctc_loss reads it as no label at all: a wrong loss without a word", False,
                             {"blank": int(blank), "classes": int(classes), "rows": len(blanks), "batch": int(n)}))
        return out or None


_CHECKS = {
    F.embedding: OpChecks.embedding,
    F.embedding_bag: OpChecks.embedding_bag,
    torch.gather: OpChecks.gather,
    torch.Tensor.gather: OpChecks.gather,
    F.cross_entropy: OpChecks.class_index,
    F.nll_loss: OpChecks.nll,
    F.one_hot: OpChecks.one_hot,
    F.binary_cross_entropy: OpChecks.bce,
    F.binary_cross_entropy_with_logits: OpChecks.bce_logits,
    F.ctc_loss: OpChecks.ctc,
    torch._VF._pack_padded_sequence: OpChecks.pack_padded,
    torch.scatter: OpChecks.scatter,
    torch.Tensor.scatter: OpChecks.scatter,
    torch.Tensor.scatter_: OpChecks.scatter,
}


_NAMES = weakref.WeakKeyDictionary()  # owner -> ({id(module): name}, [(name, parameter)]): once per scan, not per batch


def _named(owner):
    got = _NAMES.get(owner)
    if got is None:
        strip = lambda n: n[len("model."):] if n.startswith("model.") else n  # noqa: E731
        got = ({id(m): strip(n) for n, m in owner.named_modules() if n},
               [(strip(n), p) for n, p in owner.named_parameters() if p.requires_grad])
        _NAMES[owner] = got
    return got


def _module_names(owner):
    return _named(owner)[0]


class _ModuleStack:
    """Which module's forward is running, by the names the model gives them (global hooks, for
    one run); "" for the step's own wrapper and modules outside the model: the step's own code."""

    def __init__(self, checks, owner):
        self.checks = checks
        self.names = _module_names(owner)

    def __enter__(self):
        from torch.nn.modules import module as m

        stack = self.checks.stack

        def pre(mod, args):
            stack.append((self.names.get(id(mod), ""), type(mod).__name__, id(mod)))

        def post(mod, args, out):
            # Down to this module's own entry: a module inside it whose forward raised, caught in
            # this one's, left its entry (torch before 2.1 has no always_call to pop it).
            key = id(mod)
            if any(e[2] == key for e in stack):
                while stack and stack.pop()[2] != key:
                    pass
        post_hook = m.register_module_forward_hook
        try:
            after = post_hook(post, always_call=True)
        except TypeError:  # torch 2.0 and older
            after = post_hook(post)
        self.handles = [m.register_module_forward_pre_hook(pre), after]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        return False


def _maps(fields, maps):
    """(field, its rows' samples) of the fields the batch's index structure maps: `maps`, the
    stream's _batch.row_maps of the batch (made once a batch, for the engine too)."""
    given = dict(fields)
    return [(given[name], m) for name, m in (maps or {}).items() if name in given]


def _tensors(fields):
    return [t for _, t in fields if isinstance(t, torch.Tensor)]


def run_step(captures, fields, train, batch, original=None, maps=None):
    """The step on a batch, eagerly, checked: (loss or None, faults, gradient stats or None, the
    exception it raised or None, its half watch or None: captures.watch_half). `captures`: a StepCall (the step on `original`, the batch as
    the loader yielded it) or Captures (on the fields). In train mode the loss is backpropagated
    as training's loss.backward() does it (a loss of more than one element, or one without a
    graph, raises what backward raises), through torch.autograd.grad so that the parameters'
    .grad stay untouched, and each parameter's NaN/Inf counted. `batch`: the batch's number of
    samples (its layout need not be batch-first). `maps`: (field, its rows' samples), _maps'."""
    checks = OpChecks(batch, _tensors(fields), maps or ())
    owner = captures.owner
    half = HalfWatch(checks) if getattr(captures, "watch_half", False) else contextlib.nullcontext()
    try:
        with captures.scope(), _ModuleStack(checks, owner):
            try:
                with torch.enable_grad(), checks, captures.precision_scope(), half:
                    loss = captures.run_on(fields, original)
            except Stopped:
                return None, checks.faults, None, None, _half(half)
            except OutputPathError:  # scan(output=) names nothing there: the scan's error, not the batch's
                raise
            except Exception as e:  # the step's own error: the batch's finding
                return None, checks.faults, None, e, _half(half)
            grads = None
            if train and isinstance(loss, torch.Tensor) and bool(torch.isfinite(loss).all()):
                try:
                    grads = _gradients(owner, loss)
                except Exception as e:  # backward's own error (an in-place op, a loss without a graph)
                    return loss.detach(), checks.faults, None, e, _half(half)
            return loss.detach(), checks.faults, grads, None, _half(half)
    finally:
        captures.put_back()


def _half(watch):
    return watch.result() if isinstance(watch, HalfWatch) else None


def _gradients(owner, loss):
    """The NaN/Inf counts of the parameters' gradients of `loss`, computed as loss.backward()
    computes them: its own checks first (a scalar, a graph), then autograd.grad."""
    # backward's own checks, in its order and words (torch.autograd._make_grads, then the engine)
    if not loss.requires_grad:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    if loss.numel() != 1:
        raise RuntimeError("grad can be implicitly created only for scalar outputs")
    named = _named(owner)[1]
    if not named:
        return []
    got = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    grads = []
    present = [g for g in got if g is not None and g.is_floating_point()]
    # One sync for the usual case: a norm is finite where every element is (or overflowed: counted below).
    if not present or bool(torch.isfinite(torch.stack([n.float() for n in torch._foreach_norm(present)])).all()):
        return grads
    for (name, _), g in zip(named, got):
        if g is None or not g.is_floating_point():
            continue
        bad = ~torch.isfinite(g)
        if not bool(bad.any()):
            continue
        nan = int(torch.isnan(g).sum())
        grads.append({"name": name, "elements": g.numel(), "nan": nan, "inf": int(bad.sum()) - nan})
    return grads


def _summary(name, t):
    """TensorSummary's fields (core/findings/root_cause.h) of a float tensor."""
    d = t.detach().cpu().double()
    finite = torch.isfinite(d)
    s = {"name": name, "shape": list(t.shape), "elements": t.numel(), "nan": int(torch.isnan(d).sum()),
         "pos_inf": int((d == float("inf")).sum()), "neg_inf": int((d == float("-inf")).sum())}
    if bool(finite.any()):
        v = d[finite]
        s.update(min=float(v.min()), max=float(v.max()), negative=int((v < 0).sum()), zero=int((v == 0).sum()),
                 outside_unit=int((v.abs() > 1).sum()))
    return s


def _finite(t):
    return not t.is_floating_point() or bool(torch.isfinite(t).all())


def _floating_leaves(x):
    from torch.utils._pytree import tree_flatten  # tree_leaves is newer than torch 2.0
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]


# Ops whose output holds whatever the memory held (dropout's mask before bernoulli_ fills it): a
# NaN or Inf there was made by no computation, so it is neither an overflow nor a NaN's origin.
_UNDEFINED_VALUES = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                               "new_empty_strided", "resize_", "resize_as_"})


def _undefined(func):
    return getattr(getattr(func, "overloadpacket", None), "__name__", None) in _UNDEFINED_VALUES


def _op_name(func):
    """An aten op as a graph names it: aten.addmm.default -> aten::addmm."""
    return "aten::" + str(func).split(".")[1] if str(func).startswith("aten.") else str(func)


class _FirstNonfinite(TorchDispatchMode):
    """Each op as it runs: the first whose output holds NaN from inputs without one (the origin),
    and the first whose output holds Inf from finite inputs (where a NaN made of an Inf began: an
    exp that overflowed, a mask's -inf fill)."""

    def __init__(self, stack):
        super().__init__()
        self.stack = stack
        self.nan = self.inf = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.nan is None and not _undefined(func):
            outs, ins = _floating_leaves(out), _floating_leaves((args, kwargs or {}))
            if any(bool(torch.isnan(t).any()) for t in outs) and not any(bool(torch.isnan(t).any()) for t in ins):
                self.nan = self._record(func, ins, outs)
            elif self.inf is None and not all(_finite(t) for t in outs) and all(_finite(t) for t in ins):
                self.inf = self._record(func, ins, outs)
        return out

    def _record(self, func, ins, outs):
        return {"site": _site(_op_name(func), self.stack), "inputs": [_summary("input %d" % k, t) for k, t in enumerate(ins[:4])],
                "output": _summary("output", next(t for t in outs if not _finite(t)))}


_HALF_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
HALF_MAX = 65504.0
# The headroom share from which the op holding the peak is placed: the smallest the command takes
# is above 0, but a peak under a tenth of the range is no warning at any share users set.
_PLACE_FROM = 0.1


def _wide(x):
    """A half tensor (or a half dtype an op is asked for) in float32; anything else as it is."""
    if isinstance(x, torch.Tensor) and x.dtype in _HALF_NAMES:
        return x.float()
    return torch.float32 if isinstance(x, torch.dtype) and x in _HALF_NAMES else x


def _in_float32(func, args, kwargs):
    """The largest |value| the op makes with its half arguments (and a half dtype it is asked
    for) in float32 instead; None where that is not finite either, or the op cannot run so."""
    from torch.utils._pytree import tree_map
    try:
        outs = _floating_leaves(func(*tree_map(_wide, args), **tree_map(_wide, kwargs)))
    except Exception:  # noqa: BLE001 - an op without a float32 kernel: no measure, no overflow claimed
        return None
    m = max((float(t.detach().abs().amax()) for t in outs if t.numel()), default=None)
    return m if m is not None and math.isfinite(m) else None


def _largest(t):
    """The largest |value| of a half tensor (NaN where it holds one): one pass of aminmax, without
    the full-size copy abs() makes (a third of the watch's cost); LibTorch 1.13 has no float16
    aminmax on the CPU."""
    try:
        lo, hi = (float(v) for v in torch.aminmax(t))  # one read back each (a GPU sync each)
        return math.nan if math.isnan(lo) or math.isnan(hi) else max(-lo, hi)
    except RuntimeError:
        return float(t.abs().amax())


# Ops whose output holds only values of their first argument, besides the views: copies of it.
_SAME_VALUES = frozenset({"clone", "detach", "_unsafe_view", "alias", "lift_fresh", "_to_copy"})


def _storage(t):
    """t's storage, or None for a tensor without one (a subclass, a meta tensor)."""
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def _whole_storage(t):
    """The address of t's storage where t covers all of it (not a slice written in place)."""
    st = _storage(t)
    if st is None or t.storage_offset() != 0 or not t.is_contiguous() or t.numel() * t.element_size() != st.nbytes():
        return None
    return st.data_ptr()


def _repeats(func, schema, args, measured):
    """The dtype of func's first argument where func's output repeats its values (a view, a copy
    in that dtype) and that argument's storage was measured whole; else None."""
    src = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if src is None or src.dtype not in _HALF_NAMES or schema is None or schema.is_mutable:
        return None
    name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
    if name not in _SAME_VALUES and not any(r.alias_info is not None for r in schema.returns):
        return None
    st = _storage(src)
    return src.dtype if st is not None and st.data_ptr() in measured else None


class HalfWatch(TorchDispatchMode):
    """The engine's half watch (engine/checks/half_watch.h) over a step run here in half
    precision, op by op as PyTorch runs them: the largest finite |value| of any float16/bfloat16
    output, the first op whose half output went non-finite from finite arguments (an overflow
    where the same op gives a finite value in float32), and the op that held the peak once it
    reaches a tenth of float16's range, each placed (module, line, samples). HalfCheck's fields
    (core/pipeline/backend.h), sent in the batch's header as "half"."""

    def __init__(self, checks):
        super().__init__()
        self.checks = checks
        self.dtype = None
        self.peak = 0.0
        self.overflow = self.peak_site = None
        # The storages of half outputs measured whole in this run: a view or a copy of one holds
        # no value not measured (in-place writes into them are measured as they run).
        self.measured = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        before = None
        schema = getattr(func, "_schema", None)
        if self.overflow is None and getattr(schema, "is_mutable", False):
            # An in-place op (y += y, relu_) writes over its arguments: their values as they were,
            # in float32, for the finiteness of what it was given and its float32 value.
            from torch.utils._pytree import tree_map
            before = tree_map(_wide, (args, kwargs))
        out = func(*args, **kwargs)
        if _undefined(func):
            return out
        repeats = _repeats(func, schema, args, self.measured)
        for t in _floating_leaves(out):
            if t.dtype not in _HALF_NAMES or not t.numel():
                continue
            if repeats is t.dtype:
                continue  # its values are its argument's, measured already (41% of a transformer's)
            self.dtype = self.dtype or _HALF_NAMES[t.dtype]
            m = _largest(t.detach())
            whole = _whole_storage(t)
            if whole is not None:
                self.measured.add(whole)
            if math.isfinite(m):
                if m > self.peak:
                    self.peak = m
                    if t.dtype == torch.float16 and m >= _PLACE_FROM * HALF_MAX:
                        self.peak_site = dict(self._place(func, t, t.detach().abs() >= m), peak=m)
            elif self.overflow is None and all(bool(torch.isfinite(x).all()) for x in _floating_leaves(before or (args, kwargs))):
                fp32 = _in_float32(func, *(before or (args, kwargs)))
                if fp32 is not None:
                    self.overflow = dict(self._place(func, t, ~torch.isfinite(t)), fp32_max=fp32)
        return out

    def _place(self, func, t, mask):
        c = self.checks
        op = _op_name(func)
        op = "aten::to" if op == "aten::_to_copy" else op  # autocast's cast, as a graph records it
        return {"origin": "op", "kind": "nonfinite", "site": _site(op, c.stack), "dtype": _HALF_NAMES[t.dtype],
                "output": _summary("output", t), "rows": _rows(mask, t, c.batch, c.fields, c.maps)}

    def result(self):
        """The header's "half", or None where no half op ran."""
        if self.dtype is None:
            return None
        out = {"dtype": self.dtype, "peak": self.peak}
        if self.overflow is not None:
            out["overflow"] = self.overflow
        if self.peak_site is not None:
            out["peak_site"] = self.peak_site
        return out


def localize(captures, fields, batch, original=None, maps=None):
    """Where the first NaN/Inf of a failing batch was born, its step run once more eagerly: a
    model input that holds it, a parameter that does, or the first op that made it from finite
    values. Localization's fields (core/findings/root_cause.h); None where nothing was seen."""
    for (name, t) in fields:
        if isinstance(t, torch.Tensor) and not _finite(t):
            return {"origin": "input", "kind": "nonfinite", "name": name, "output": _summary(name, t)}
    owner = captures.owner
    for name, p in list(owner.named_parameters()) + list(owner.named_buffers()):
        if not _finite(p):
            name = name[len("model."):] if name.startswith("model.") else name
            return {"origin": "parameter", "kind": "nonfinite", "name": name, "output": _summary(name, p)}
    checks = OpChecks(batch, _tensors(fields), maps or ())
    seen = _FirstNonfinite(checks.stack)
    try:
        with captures.scope(), _ModuleStack(checks, owner), torch.no_grad():
            try:
                with seen, captures.precision_scope():
                    captures.run_on(fields, original)
            except Exception:  # it raised after the first bad value, or before: what was seen stands
                pass
    finally:
        captures.put_back()
    first = seen.nan or seen.inf
    if first is None:
        return None
    loc = dict(first, origin="op", kind="nonfinite")
    if seen.nan is not None and seen.inf is not None:
        loc["inf_from"] = seen.inf["site"]
    return loc
