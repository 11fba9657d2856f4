"""The model as the engine takes it: scripted, traced, through the keyword adapter, or run
eagerly here where TorchScript can do neither; and the user's own training step (step=, or a
loss given as any callable), traced together with the model, per batch shape (_capture.py)."""

from collections.abc import Mapping

import torch

from batchcheck import export as _export


class _Keywords(torch.nn.Module):
    """forward(*tensors) calls model(**{name: tensor}) and returns the prediction (or the loss)
    it selects: for a model that takes its batch as keywords (Hugging Face's model(**batch)),
    whose parameters are not in the batch's order (GPT-2: forward(input_ids, past_key_values,
    attention_mask, ..., labels)). The engine passes the fields positionally, in that order."""

    def __init__(self, model, names, pick):
        super().__init__()
        self.model = model
        self.names = None if names is None else list(names)
        self.pick = pick

    def forward(self, *args):
        if self.names is None:  # positional: output= is a path the engine cannot select itself
            return _select(self.model(*args), self.pick)
        return _select(self.model(**dict(zip(self.names, args))), self.pick)


def _adapter(model, call, keywords, pick):
    """The module that returns the prediction where the engine cannot select it itself (a model
    called by keyword, or output= a path), else None: the model as it is."""
    if keywords or is_path(pick):
        return _Keywords(model, call if keywords else None, pick)
    return None


def _code_key(k):
    """A subscript's key as Python code reads it back, every non-ASCII character escaped."""
    import json
    if isinstance(k, str):
        return json.dumps(k)
    if isinstance(k, (int, float, bool)) or k is None:
        return repr(k)
    return json.dumps(str(k))


def field_code(batch, fields):
    """{field name: the Python expression that reads it from `batch`}, as the engine names the
    fields (_wire._fields): the batch itself, batch[k] of a tuple, batch["key"] of a Mapping; a
    nested batch's fields are already such paths."""
    from batchcheck._batch import is_flat
    names = [name for name, _ in fields]
    if isinstance(batch, torch.Tensor):
        return {names[0]: "batch"}
    if isinstance(batch, Mapping) and is_flat(batch):
        by_name = {str(k): k for k in batch}
        return {n: "batch[%s]" % _code_key(by_name[n]) for n in names if n in by_name}
    if isinstance(batch, (tuple, list)) and is_flat(batch):
        return {n: "batch[%d]" % k for k, n in enumerate(names)}
    return {n: n for n in names}  # paths: batch[0][1], batch.x


def forward_call(batch, fields, call, keywords, pick, target_key):
    """How forward is called on the collated `batch` (for the report's `reproduce`): the call,
    the prediction selected from `out` where the adapter selects it, and the targets."""
    code = field_code(batch, fields)
    if keywords:
        args = ", ".join("%s=%s" % (name, code[name]) for name in call)
    else:
        args = ", ".join(code[name] for name in call)
    select = _select_code(pick) if keywords or is_path(pick) else ""
    return {"forward": "model(%s)" % args, "select": select, "targets": code.get(target_key, "")}


class OutputPathError(ValueError):
    """output= names nothing in what forward returned: the scan's configuration, never a batch's
    finding (raised through the step and the forward it runs in)."""


def output_path(output):
    """output= as _select takes it: None, an index, a key, or a path into what forward returns
    (`out["logits"]`, `out[0][1]`, `out.logits`, or a tuple of keys and indices) as a tuple of
    steps ("[]", key) / (".", name). A single subscript stays a key or index: the engine selects
    that itself. Raises ValueError in one line for anything else."""
    if output is None or isinstance(output, int) and not isinstance(output, bool):
        return output
    if isinstance(output, (tuple, list)) and output and \
            all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in output):
        steps = tuple(("[]", k) for k in output)
        return steps[0][1] if len(steps) == 1 else steps
    if not isinstance(output, str):
        raise ValueError("batchcheck.scan: output= is an index, a key or a path such as 'out[\"logits\"]', got %s"
                         % type(output).__name__)
    if not output.startswith("out") or len(output) == 3 or output[3].isalnum() or output[3] == "_":
        return output  # a key of the dict forward returns ("out", "outputs")
    import ast
    from batchcheck._wire import _cut
    steps = []
    try:
        node = ast.parse(output, mode="eval").body
    except (SyntaxError, ValueError):
        node = None
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Attribute):
            steps.append((".", node.attr))
        else:
            key = node.slice.value if type(node.slice).__name__ == "Index" else node.slice  # ast.Index: Python 3.8
            if not isinstance(key, ast.Constant) or not isinstance(key.value, (str, int)) or isinstance(key.value, bool):
                if isinstance(key, ast.UnaryOp) and isinstance(key.op, ast.USub) and isinstance(key.operand, ast.Constant) \
                        and type(key.operand.value) is int:
                    steps.append(("[]", -key.operand.value))
                    node = node.value
                    continue
                node = None
                break
            steps.append(("[]", key.value))
        node = node.value
    if not isinstance(node, ast.Name) or node.id != "out" or not steps:
        raise ValueError("batchcheck.scan: output=%s is not a path into what forward returns (out): write it as "
                         "'out[\"logits\"]', 'out[0][1]' or 'out.logits'" % _cut(repr(output)))
    steps.reverse()
    return steps[0][1] if len(steps) == 1 and steps[0][0] == "[]" else tuple(steps)


def is_path(pick):
    """Whether output= is a path the engine cannot select itself (an adapter returns the prediction)."""
    return isinstance(pick, tuple)


def path_text(steps):
    from batchcheck._batch import _key
    return "out" + "".join("[%s]" % _key(k) if kind == "[]" else "." + k for kind, k in steps)


def _select(out, pick):
    """The prediction in what forward returned: out[pick] of a dict (a ModelOutput too), the
    pick-th (an index) or first element of a tuple, the element at the end of a path, else out
    itself."""
    if is_path(pick):
        for i, (kind, k) in enumerate(pick):
            try:
                out = getattr(out, k) if kind == "." else out[k]
            except (KeyError, IndexError, TypeError, AttributeError) as e:
                raise OutputPathError("batchcheck.scan: output=%s: %s is %s, which has no %s (%s)" % (
                    path_text(pick), path_text(pick[:i]), _what(out), path_text(pick[i:i + 1])[3:],
                    type(e).__name__)) from None
        return out
    if isinstance(out, dict):
        return out[pick]
    if isinstance(out, (tuple, list)):
        return out[pick if isinstance(pick, int) else 0]
    return out


def _what(x):
    if isinstance(x, torch.Tensor):
        import warnings
        with warnings.catch_warnings():  # a traced shape is tensors: read as numbers, the trace is not kept
            warnings.simplefilter("ignore")
            return "a tensor of shape %s" % [int(d) for d in x.shape]
    if isinstance(x, Mapping):
        from batchcheck._batch import _key
        from batchcheck._wire import _cut
        return "a %s (keys: %s)" % (type(x).__name__, _cut(", ".join(_key(k) for k in list(x)[:8])))
    if isinstance(x, (tuple, list)):
        return "a %s of %d" % (type(x).__name__, len(x))
    return "a " + type(x).__name__


class _EagerForward:
    """The user's model run eagerly in this process (model.format "eager"), on a copy, so that the
    scan moves none of their BatchNorm statistics: the prediction of a batch, selected as the
    engine would (output=, "loss"/"logits" of a dict, the first of a tuple)."""

    def __init__(self, model, names, keywords, pick, mode, aux=None, precision=None):
        import copy
        self.model = copy.deepcopy(model)
        self.model.train(mode == "train")
        self.names, self.keywords, self.pick = list(names), keywords, pick
        self.aux = [str(k) for k in (aux or {})]  # loss.aux's keys: the extra outputs sent beside the prediction
        params = list(self.model.parameters())
        self.device = params[0].device if params else torch.device("cpu")
        self.precision = precision  # scan(precision=): forward under torch.autocast, as the user's AMP loop runs it

    def outputs(self, fields):
        """(the prediction, {aux key: tensor}) of forward on the batch's fields."""
        given = dict(fields)
        args = [given[n].to(self.device) for n in self.names]
        from batchcheck._capture import autocast_for
        with torch.no_grad(), autocast_for(self.device, self.precision):
            raw = self.model(**dict(zip(self.names, args))) if self.keywords else self.model(*args)
        out = _select(raw, self.pick)
        if not isinstance(out, torch.Tensor):
            raise TypeError("the model's prediction is %s, not a tensor (name it with output=)" % type(out).__name__)
        aux = {key: _aux_output(raw, key) for key in self.aux}
        if self.precision not in (None, "fp32"):  # autocast runs the losses in float32: the engine's loss gets what they would
            out, aux = _float(out), {k: _float(t) for k, t in aux.items()}
        return out, aux

    def serve(self, fields, batch, original=None, maps=None):
        """(the tensors to send or None, what the batch's header adds), `batch`: its number of
        samples. Forward with the arguments of its index and loss ops read before they run
        (_eager.OpChecks), as the engine reads them in a graph, so that a token id past the
        embedding names its sample, not the whole batch."""
        from batchcheck._capture import record
        from batchcheck._eager import OpChecks, Stopped, _maps, _ModuleStack, _tensors
        checks = OpChecks(batch, _tensors(fields), _maps(fields, maps))
        extra = {}
        try:
            with _ModuleStack(checks, self.model), checks:
                pred, aux = self.outputs(fields)
            # The tensors the engine is sent: the prediction, and aux='s outputs by their keys.
            out = {"batchcheck.prediction": pred, **{"batchcheck.aux." + k: t for k, t in aux.items()}}
        except Stopped:
            out = None
        except OutputPathError:
            raise
        except Exception as e:  # what their forward raised: the engine classifies it
            out = None
            extra["forward_error"] = record(e, self.model.named_modules())
        if checks.faults:
            extra["faults"] = checks.faults
        return out, extra


def _float(t):
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _aux_output(raw, key):
    """aux='s output `key` of what forward returned: a dict's (a ModelOutput's) key, or a tuple's
    index; raises, naming what there is, where forward has none of that name."""
    if isinstance(raw, dict):
        if key not in raw:
            raise KeyError("aux= names the output %r, but forward returns the keys %s" % (key, sorted(map(str, raw))))
        t = raw[key]
    elif isinstance(raw, (tuple, list)):
        try:
            t = raw[int(key)]
        except (ValueError, IndexError):
            raise KeyError("aux= names the output %r, but forward returns a %s of %d" % (key, type(raw).__name__, len(raw)))
    else:
        raise KeyError("aux= names the output %r, but forward returns one tensor" % key)
    if not isinstance(t, torch.Tensor):
        raise TypeError("aux= output %r is %s, not a tensor" % (key, type(t).__name__))
    return t


def _keyword_names(model, names):
    """True when forward takes `names` by keyword but not in this positional order."""
    import inspect
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return False
    params = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if params[:len(names)] == list(names):
        return False
    try:
        sig.bind(**{n: None for n in names})
    except TypeError:
        return False
    return True


class _Step(torch.nn.Module):
    """forward(*fields) is the user's training step on the batch those fields make: step(model,
    batch) returns the loss. Traced together (torch.jit.trace), every op of the step is in the
    graph the engine runs: the loss ops with their contracts, the labels a GAN makes in its step,
    a VAE's KL term. Modules the step reaches besides the model (a GAN's generator, through the
    step's closure or globals) are registered here, so that their weights are the graph's
    parameters instead of constants."""

    def __init__(self, model, step, rebuild, others):
        super().__init__()
        self.model = model
        for name, m in others:  # by the names the step gives them: a report names "criterion (BCELoss)"
            self.add_module(name, m)
        self._step = step
        self._rebuild = rebuild

    def forward(self, *fields):
        return self.run(self._rebuild(fields))

    def run(self, batch):
        """The step on a batch as the loader yields it."""
        loss = self._step(self.model, batch)
        if not isinstance(loss, torch.Tensor):
            raise TypeError("batchcheck.scan: step(model, batch) returned %s, not the loss tensor" % type(loss).__name__)
        return loss


def _rebuilder(first, names):
    """How the fields (in `names` order) make the batch again, in the structure the loader yields."""
    if isinstance(first, torch.Tensor):
        return lambda fields: fields[0]
    if isinstance(first, dict):
        return lambda fields: dict(zip(names, fields))
    kind = list if isinstance(first, list) else tuple
    return lambda fields: kind(fields)


def _modules_reached(fn, model):
    """(name, module) of the nn.Modules a step function reaches besides `model` and its
    submodules: through its closure, its defaults and the globals it names (one level: what a
    training loop's step uses), by the names it gives them."""
    import inspect
    seen = {id(m) for m in model.modules()}
    found, names = [], {"model"}
    fn = inspect.unwrap(fn)
    values = []
    if getattr(fn, "__self__", None) is not None:  # a bound method: its object's modules
        values += list(vars(fn.__self__).items()) if hasattr(fn.__self__, "__dict__") else []
        fn = fn.__func__
    code = getattr(fn, "__code__", None)
    if code is None:  # a callable object: its attributes
        values += list(vars(fn).items()) if hasattr(fn, "__dict__") else []
    else:
        values += [(n, c.cell_contents) for n, c in zip(code.co_freevars, fn.__closure__ or ()) if _cell_full(c)]
        values += [("default", d) for d in fn.__defaults__ or ()]
        glob = getattr(fn, "__globals__", {})
        values += [(n, glob[n]) for n in code.co_names if n in glob]
    for name, v in values:
        if isinstance(v, torch.nn.Module) and id(v) not in seen:
            seen.update(id(m) for m in v.modules())
            name = "".join(c if c.isalnum() or c == "_" else "_" for c in str(name)) or "module"
            while name in names or not name[0].isalpha():
                name = "step_" + name
            names.add(name)
            found.append((name, v))
    return found


def _cell_full(cell):
    try:
        cell.cell_contents
        return True
    except ValueError:  # an empty cell (a name bound later)
        return False


def _loss_step(loss, pick, target_key):
    """A loss given as any callable (prediction, target) -> loss, as a step: the model on the
    batch's inputs (a dict's by keyword), its prediction selected as output= says."""
    def step(model, batch):
        if isinstance(batch, Mapping):
            target = batch[target_key]
            out = model(**{k: v for k, v in batch.items() if k != target_key})
        else:
            *inputs, target = batch
            out = model(*inputs)
        return loss(_select(out, pick), target)
    # How it calls forward and the loss, for the report's `reproduce` (the user has no `step`).
    step.batchcheck_call = {
        "forward": "model(**{k: v for k, v in batch.items() if k != %s})" % _code_key(target_key),
        "select": _select_code(pick), "targets": "batch[%s]" % _code_key(target_key), "loss": "loss_fn"}
    step.batchcheck_call_tuple = dict(step.batchcheck_call, forward="model(*batch[:-1])", targets="batch[-1]")
    return step


def _select_code(pick):
    """_select(out, pick) as code for `reproduce`."""
    if is_path(pick):
        return path_text(pick)
    if pick is None:
        return "out[0] if isinstance(out, (tuple, list)) else out"
    if isinstance(pick, int):
        return "out[%d] if isinstance(out, (dict, tuple, list)) else out" % pick
    return "out[%s] if isinstance(out, dict) else out[0] if isinstance(out, (tuple, list)) else out" % _code_key(pick)


def step_captures(model, step, first, names, mode, folder):
    """The user's step as the engine runs it: traced together with the model (every op of the
    step in the graph), one capture per batch shape, each proven against the step itself
    (_capture.py). The model's buffers and every RNG are as they were after each run."""
    from batchcheck._capture import Captures
    module = _Step(model, step, _rebuilder(first, names), _modules_reached(step, model))
    params = list(module.parameters())
    device = params[0].device if params else torch.device("cpu")

    def trace(args):
        return torch.jit.trace(module, tuple(args), check_trace=False, strict=False)

    return Captures(module, trace, lambda args: module(*args), folder, mode, device)


def model_captures(model, call, keywords, pick, mode, folder):
    """A traced model (TorchScript could not script it), or the keyword adapter's trace, as
    captures per batch shape proven against the model itself, as the step's are: a trace freezes
    a sequence length read as a Python number, and loses PyTorch's checks written in Python."""
    from batchcheck._capture import Captures
    target = _adapter(model, call, keywords, pick) or model
    params = list(target.parameters())
    device = params[0].device if params else torch.device("cpu")

    def trace(args):
        return _export._trace(target, args[0] if len(args) == 1 else tuple(args), mode)

    return Captures(target, trace, lambda args: target(*args), folder, mode, device, call=call, what="model")


def _no_dispatch_modes():
    try:
        from torch.utils._python_dispatch import _disable_current_modes
    except ImportError:  # torch 1.13: its half watch sees the copy too (a peak the batch itself holds)
        import contextlib
        return contextlib.nullcontext()
    return _disable_current_modes()


class StepCall:
    """The user's step as written, on each batch as the loader yielded it (a private copy of it:
    in-place work on the batch stays in that run), the default way a step runs (ARCHITECTURE.md).
    `owner` holds the model and the modules the step reaches; its parameters and buffers are put
    back after each run from one snapshot (a momentum encoder's no_grad update moves them, as
    training would, but the scan must leave the user's model as it found it)."""

    what = "step"

    def __init__(self, model, step, mode, precision=None):
        self.owner = _Step(model, step, None, _modules_reached(step, model))
        self.mode = mode
        params = list(self.owner.parameters())
        self.device = params[0].device if params else torch.device("cpu")
        self.precision = precision  # scan(precision=)'s name: autocast_for takes it as it is
        self.saved = [(p, p.detach().clone()) for p in params] + \
            [(b, b.detach().clone()) for b in self.owner.buffers()]
        self.autocast = set()  # (device type, dtype) of the torch.autocast the step enters (its first run)
        self.watch_half = False  # its half-precision ops watched (_eager.HalfWatch): set where it runs in half
        self.modes = [(m, m.training) for m in self.owner.modules()]  # put back by close()
        self.owner.train(mode == "train")

    def precision_scope(self):
        from batchcheck._capture import autocast_for
        return autocast_for(self.device, self.precision)

    def run_on(self, fields, batch):
        from batchcheck._batch import private_copy
        with torch._C.DisableTorchFunction(), _no_dispatch_modes():  # batchcheck's copy, not an op of the step's
            mine = private_copy(batch)
        return self.owner.run(mine)

    def scope(self):
        """Around one run: the same random draws for each run of a batch (a seed: dropout masks
        agree between a run and its re-run for the NaN's origin). batchcheck.scan() puts every RNG
        back when the scan ends, and put_back the weights after each run, so nothing is saved here
        per batch (a step of a small model costs about a millisecond)."""
        import contextlib
        import random

        import numpy as np
        from batchcheck._capture import _SEED, untouched
        if torch.cuda.is_initialized():  # the scan restores the CPU's RNGs, not CUDA's: the full guard
            return untouched(self.owner, self.mode)
        torch.random.default_generator.manual_seed(_SEED)  # the CPU's alone: torch.manual_seed formats a stack per call
        random.seed(_SEED)
        np.random.seed(_SEED % (1 << 32))
        return contextlib.nullcontext()

    def close(self):
        """The modules' train/eval modes as they were before the scan."""
        for m, training in self.modes:
            m.training = training

    def put_back(self):
        """The parameters and buffers as they were before the scan (a step's in-place update of
        them undone: a momentum encoder's weights, a queue, BatchNorm's statistics)."""
        with torch.no_grad():
            for p, saved in self.saved:
                if p.shape == saved.shape:
                    p.copy_(saved)
                else:
                    p.data = saved.clone()


class _EagerStep:
    """The user's step run eagerly in this process, where no capture of it can be made (it raises
    on every batch tried), checked as a capture is (_eager.py): its loss goes to the engine as the
    prediction, with the faults of its ops, its gradients' NaN/Inf counts, or its exception."""

    def __init__(self, captures):
        self.captures = captures  # a StepCall (the step as written), or the Captures of one that raises on every batch

    def serve(self, fields, batch, original=None, maps=None):
        """(the loss or None, what the batch's header adds); `batch`: its number of samples,
        `original`: the batch as the loader yielded it (what a StepCall runs the step on), `maps`:
        the rows -> samples of its fields whose rows are not its samples (_batch.row_maps)."""
        from batchcheck._capture import message, record
        from batchcheck._eager import _maps, localize, run_step
        maps = _maps(fields, maps)
        loss, faults, grads, err, half = run_step(self.captures, fields, self.captures.mode == "train", batch, original, maps)
        extra = {"half": half} if half is not None else {}
        nonfinite = (loss is not None and not bool(torch.isfinite(loss).all())) or \
            any(f.get("nonfinite") for f in faults) or any(g["nan"] + g["inf"] for g in grads or ())
        if nonfinite:  # the failing batch once more, to say where its first NaN/Inf was born
            root = localize(self.captures, fields, batch, original, maps)
            if root is not None:
                extra["root_cause"] = root
        if faults:
            extra["faults"] = faults
        if err is not None and loss is None:
            extra["forward_error"] = record(err, self.captures.owner.named_modules())
        elif err is not None:
            extra["backward_error"] = message(err)
        if grads is not None:
            extra["gradients"] = grads
        return loss, extra


def _failure_reason(e):
    """Why TorchScript refused the model, in one line with its place: TorchScript's errors put
    the reason on a first line ending in a colon, then `File "x.py", line N` and the code."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    reason = lines[0].rstrip(":").strip() or type(e).__name__
    for k, line in enumerate(lines[1:], 1):
        if line.startswith("File \""):
            code = lines[k + 1] if k + 1 < len(lines) and not lines[k + 1].startswith(("~", "File \"")) else ""
            return "%s, at %s%s" % (reason, line, (": " + code) if code else "")
    return reason


def _engine_model(model, call, keywords, fields, x, pick, mode):
    """The model for the engine: traced through the keyword adapter (returning out[pick]), else
    scripted or traced; raises where neither works."""
    adapter = _adapter(model, call, keywords, pick)
    if adapter is not None:
        return _export._trace(adapter, tuple(dict(fields)[name] for name in call), mode)
    scripted, _ = _export._script_or_trace(model, x, mode)
    return scripted
