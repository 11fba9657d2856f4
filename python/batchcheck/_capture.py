"""The captures of the user's code that the engine runs, one per batch shape, each proven against
the user's own code before it is trusted.

A trace (torch.jit.trace) records one run: Python's shape arithmetic (len(x), b, c, h, w =
y.size(), a mask made from a length) becomes constants of the example batch's shape, and PyTorch's
checks written in Python (BatchNorm's "Expected more than 1 value per channel", a loss's size
check) are not in the graph. So at the first batch of each shape the scan meets, the user's code
runs eagerly here (the truth) and the capture on the same batch, with the same random draws:
- both run and agree: the capture serves every batch of that shape;
- the code runs and no capture agrees: a capture traced at this shape (its own archive);
- the code raises: that exception is the batch's finding, as PyTorch raises it first, unless the
  capture raises the same (the engine then reads the failing op's arguments, naming the sample).
A shape that no capture can serve is told to the engine as unchecked (an error, never a pass).
"""
import contextlib
import os
import random
import traceback

import numpy as np
import torch

# Distinct shapes with a capture of their own; past it, a batch of a new shape goes unchecked
# (a loader of variable-length batches whose step freezes the length: each batch its own trace).
LIMIT = 32
_SEED = 20261205


def signature(tensors):
    """What makes two batches the same to a trace: every field's name, shape and dtype."""
    return tuple((name, tuple(t.shape), t.dtype) for name, t in tensors)


def _leaves(out):
    """The tensors of a step's or a model's value, in order (a dict's, a ModelOutput's, a tuple's)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in _leaves(v)]
    return []


def same(a, b):
    """Whether two values agree as one computation's: the same tensors' shapes, and values equal
    up to the rounding that another order of the same float operations gives."""
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb) or not la:
        return False
    for x, y in zip(la, lb):
        if x.shape != y.shape:
            return False
        x, y = x.detach().cpu(), y.detach().cpu()
        if x.is_floating_point() or y.is_floating_point():
            if not torch.allclose(x.double(), y.double(), rtol=1e-3, atol=1e-5, equal_nan=True):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def message(e):
    """An exception's own message, one line: TorchScript's traceback and C++ frames left out, so
    that the user's eager error and a capture's are compared as PyTorch said them."""
    text = str(e).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if "Traceback of TorchScript" in text or "TorchScript interpreter" in text:
        # "...\nRuntimeError: index out of range in self": the last "SomeError: " line.
        for k in range(len(lines) - 1, -1, -1):
            head, sep, rest = lines[k].partition(": ")
            if sep and head.endswith(("Error", "Exception")) and " " not in head.strip():
                return rest.strip()
    return lines[0].strip() if lines else type(e).__name__


# batchcheck's own files: its package folder (a folder named batchcheck elsewhere, a virtual
# environment under ~/.cache/batchcheck, is not ours).
_OWN = os.path.dirname(os.path.abspath(__file__)).replace("\\", "/") + "/"


def own(path):
    """Whether a frame's file is batchcheck's own."""
    return os.path.abspath(path).replace("\\", "/").startswith(_OWN)


def _library(path):
    """Whether a frame's file is library code (torch's, an installed package's, batchcheck's)."""
    p = path.replace("\\", "/")
    return "/site-packages/" in p or "/dist-packages/" in p or "/torch/" in p or p.startswith("<") or own(path)


def _module_of(tb, modules):
    """The innermost module whose forward the traceback passes through: 'layer4.0.bn1 (BatchNorm2d)'."""
    found = None
    while tb is not None:
        me = tb.tb_frame.f_locals.get("self")
        if isinstance(me, torch.nn.Module) and id(me) in modules:
            found = "%s (%s)" % (modules[id(me)], type(me).__name__)
        tb = tb.tb_next
    return found


def record(e, named_modules=()):
    """What the engine is told of an exception the user's code raised on a batch: its message and
    where, as a TorchScript error's text would say (the user's innermost line, the library frame
    below it that raised)."""
    frames = traceback.extract_tb(e.__traceback__)
    rec = {"message": message(e), "type": type(e).__name__}
    user = [f for f in frames if not _library(f.filename)]
    if user:
        f = user[-1]
        rec["location"] = 'File "%s", line %d, in %s' % (f.filename, f.lineno, f.name)
        if f.line:
            rec["source_line"] = f.line.strip()
        inner = frames[-1]
        if inner is not f and _library(inner.filename):
            rec["raised_in"] = 'File "%s", line %d, in %s' % (inner.filename, inner.lineno, inner.name)
    shown = frames[-6:]
    rec["traceback"] = "Traceback (most recent call last):\n" + "".join(traceback.format_list(shown)) + \
        "%s: %s" % (type(e).__name__, rec["message"])
    # The user's model is the step's "model": its modules by their own names (fc.1, not model.fc.1).
    names = {id(m): (n[len("model."):] if n.startswith("model.") else n) for n, m in named_modules if n}
    module = _module_of(e.__traceback__, names)
    if module:
        rec["module"] = module
    return rec


@contextlib.contextmanager
def untouched(module, mode):
    """The module run as training runs it (train or eval mode), then put back as it was: its
    buffers (BatchNorm's statistics), its modules' modes, every RNG; the random draws inside the
    same for each run (a seed), so that an eager run and a capture's draw the same dropout masks."""
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    modes = [(m, m.training) for m in module.modules()]
    cuda = torch.cuda.is_initialized()
    state = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None, random.getstate(),
             np.random.get_state())
    module.train(mode == "train")
    torch.manual_seed(_SEED)
    random.seed(_SEED)
    np.random.seed(_SEED % (1 << 32))
    try:
        yield
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        for m, t in modes:
            m.training = t
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state_all(state[1])
        random.setstate(state[2])
        np.random.set_state(state[3])


class Captures:
    """The captures of one scan: `trace(fields)` makes one on a batch's fields (a ScriptModule
    called with the field tensors), `eager(fields)` runs the user's own code on them; `owner` is
    the module holding every weight and buffer both touch. The first capture is the archive the
    engine loads (model.pt); others are named to it batch by batch."""

    def __init__(self, owner, trace, eager, folder, mode, device, call=None, what="step"):
        self.owner, self.trace, self.eager, self.what = owner, trace, eager, what
        self.call = call  # the fields the code takes, in order (None: every field)
        self.folder, self.mode, self.device = folder, mode, device
        self.saved = []  # [(file name, ScriptModule)], saved[0] the engine's model.pt
        self.proven = {}  # signature -> the file name of the capture proven at that shape
        self.told = {}  # batch indices -> what the engine was told of it (a child resumed asks again)
        self.unchecked = 0
        self.autocast = set()  # (device type, dtype) the step ran under torch.autocast, seen in its first run
        self.precision = None  # scan(precision=)'s dtype, for the step run eagerly here (_eager.py)

    def precision_scope(self):
        """torch.autocast of scan(precision=) around the step run eagerly (a no-op without it)."""
        return autocast_for(self.device, self.precision)

    def _args(self, fields):
        """The fields for one run, each run its own copy: a step that writes into its batch in
        place (x.mul_(lam)) must not change what the next run (the capture's proof) is given."""
        if self.call is None:
            return [t.to(self.device, copy=True) for _, t in fields]
        given = dict(fields)
        return [given[n].to(self.device, copy=True) for n in self.call]

    def run_on(self, fields, batch=None):
        """The user's code on the batch's fields (the eager path's run of a capture's step)."""
        return self.eager(self._args(fields))

    def scope(self):
        """Around one run of the user's code: its module's buffers, modes and every RNG put back."""
        return untouched(self.owner, self.mode)

    def put_back(self):
        pass  # untouched puts everything back

    def _run(self, fn, fields):
        args = self._args(fields)
        with untouched(self.owner, self.mode), torch.no_grad(), _quiet():
            try:
                return (fn(*args) if isinstance(fn, torch.jit.ScriptModule) else fn(args)), None
            except Exception as e:  # the user's code raised: a finding, not ours to raise
                return None, e

    def _save(self, module, name):
        module.save(os.path.join(self.folder, name))
        self.saved.append((name, module))

    def first(self, candidates, path):
        """The engine's first capture, saved to `path`: traced on the first batch of `candidates`
        (lists of fields) that the user's code runs on; raises the first one's exception where it
        runs on none (their step cannot run at all). Returns the capture."""
        failure = None
        for fields in candidates:
            # The trace runs the user's code on these fields: what it recorded is what the code
            # computes on them, so the capture is proven at their shape without another run.
            with untouched(self.owner, self.mode), torch.no_grad(), _quiet(), _autocast_seen(self.autocast):
                try:
                    module = self.trace(self._args(fields))
                except Exception as e:
                    failure = failure or e
                    continue
            module.save(path)
            self.saved.append((os.path.basename(path), module))
            self.proven[signature(fields)] = self.saved[0][0]
            return module
        raise failure

    def adopt(self, module, name, fields):
        """`module`, saved as `name` beside the model, is the engine's first capture: proven on
        `fields` where the user's code computes the same there."""
        self.saved.append((name, module))
        out, err = self._run(module, fields)
        with _autocast_seen(self.autocast):
            ref, ref_err = self._run(self.eager, fields)
        if err is None and ref_err is None and same(out, ref):
            self.proven[signature(fields)] = name

    def decide(self, key, fields):
        """(capture file name, error) for a batch: which capture runs it, and what the user's code
        raised on it where that is the batch's truth (the engine reports it instead of running the
        capture). Proven once per shape."""
        if key is not None and key in self.told:
            return self.told[key]
        sig = signature(fields)
        if sig in self.proven:
            return self.proven[sig], None
        told = self._decide(sig, fields)
        if key is not None:
            self.told[key] = told
            while len(self.told) > 4096:
                self.told.pop(next(iter(self.told)))
        return told

    def _decide(self, sig, fields):
        ref, ref_err = self._run(self.eager, fields)
        default = self.saved[0][0]
        # The engine's first capture, and the newest (a loader's shapes tend to come in runs).
        for name, module in dict.fromkeys([self.saved[0], self.saved[-1]]):
            out, err = self._run(module, fields)
            if ref_err is None and err is None and same(ref, out):
                self.proven[sig] = name
                return name, None
            if ref_err is not None and err is not None and message(err) == message(ref_err):
                return name, None  # the same error: the engine finds it, and names its samples
        if ref_err is not None:
            return default, record(ref_err, self.owner.named_modules())
        if len(self.saved) < LIMIT:
            with untouched(self.owner, self.mode), torch.no_grad(), _quiet():
                try:
                    module = self.trace(self._args(fields))
                except Exception as e:  # runs eagerly, cannot be traced here
                    module, why = None, "torch.jit.trace fails on it: %s" % message(e)
            if module is not None:
                out, err = self._run(module, fields)
                if err is None and same(ref, out):
                    name = "capture-%d.pt" % len(self.saved)
                    self._save(module, name)
                    self.proven[sig] = name
                    return name, None
                why = "its trace at this shape does not compute what your code does"
        else:
            why = "it is a batch shape past the %d that have a capture of their own" % LIMIT
        self.unchecked += 1
        shape = ", ".join("%s %s" % (n, list(t.shape)) for n, t in fields)
        return default, {"message": "this batch (%s) was not checked: %s; your %s runs on it, but no capture of it "
                                    "computes what it does" % (shape, why, self.what), "unchecked": True}


HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}  # scan(precision=)'s names


def autocast_for(device, precision):
    """torch.autocast on `device` (a torch.device, its name, or None: the CPU) with `precision` (a
    dtype, or scan()'s "fp16"/"bf16"); a no-op context for None or "fp32" (no autocast object is
    made: some torch versions refuse one for a device they cannot autocast, even disabled)."""
    dtype = HALF_DTYPES.get(precision) if isinstance(precision, str) else precision
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type if device is not None else "cpu", dtype=dtype)


def _autocast_on():
    try:
        return any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda"))
    except TypeError:  # torch before 2.4: no device argument
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


class _BceSeen(torch.overrides.TorchFunctionMode):
    """Whether binary_cross_entropy runs while torch.autocast is on (CUDA refuses it there)."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.binary_cross_entropy and _autocast_on():
            self.seen = True
        return func(*args, **(kwargs or {}))


def bce_under_autocast(captures, candidates, precision):
    """Whether the step calls binary_cross_entropy inside torch.autocast: its own, or (precision:
    "fp16"/"bf16") the one the engine puts around it. One eager run, on the first batch it runs on."""
    for fields in candidates:
        mode = _BceSeen()
        with autocast_for(captures.device, precision), mode:
            _, err = captures._run(captures.eager, fields)
        if err is None:
            return mode.seen
    return False


@contextlib.contextmanager
def _autocast_seen(seen):
    """Which torch.autocast the user's code enters (device type, dtype), seen at its __enter__:
    no frame of batchcheck's stays in the stack a trace records for each op (a TorchFunctionMode's
    would be taken for the user's line)."""
    cls = torch.amp.autocast_mode.autocast
    enter = cls.__enter__

    def seeing(self):
        if getattr(self, "_enabled", False):
            seen.add((str(getattr(self, "device", "?")), getattr(self, "fast_dtype", None)))
        return enter(self)
    cls.__enter__ = seeing
    try:
        yield
    finally:
        cls.__enter__ = enter


def notes(captures, precision=None):
    """What the report says of the captures: how many, proven at how many shapes, and the precision
    the step ran in (the user's autocast, replayed where the trace recorded its casts)."""
    out = []
    shapes = len(captures.proven)
    n = len(captures.saved)
    what = captures.what
    ran = "1 capture (a trace)" if n == 1 else \
        "%d captures (traces at the batch shapes whose sizes your code reads as Python numbers)" % n
    out.append("your %s ran in the engine as %s, each proven against your %s run eagerly on a batch of its shape "
               "(%d batch shape%s proven)" % (what, ran, what, shapes, "" if shapes == 1 else "s"))
    if captures.unchecked:
        out.append("%d batch%s could not be checked: no capture computes what your %s does on it (batch-unchecked)"
                   % (captures.unchecked, "" if captures.unchecked == 1 else "es", what))
    if captures.autocast:
        graph = "\n".join(str(m.inlined_graph) for _, m in captures.saved)
        for device, dtype in sorted(captures.autocast, key=str):
            name = str(dtype).replace("torch.", "")
            kind = {"bfloat16": "BFloat16(", "float16": "Half("}.get(name)
            replayed = kind is not None and kind in graph
            out.append("precision: your %s runs under torch.autocast(%r, dtype=%s); %s" % (
                what, device, dtype, "the capture recorded its casts, so the engine ran those ops in %s as your %s does" % (name, what)
                if replayed else "the capture holds none of its casts, so the engine did not run it in %s" % name))
    elif precision in (None, "fp32"):  # scan(precision=) in half: the engine's own note says how it ran
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in captures.owner.parameters() if p.is_floating_point()})
        out.append("precision: %s, as your %s runs (no torch.autocast seen)" % (", ".join(dtypes) or "float32", what))
    return out


@contextlib.contextmanager
def _quiet():
    """Tracing and TorchScript's own warnings are about the capture, not the user's data."""
    import warnings
    from batchcheck.export import _quiet_jit
    with _quiet_jit(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield

