"""One scan of batchcheck.scan(): the engine's config and process, and what feeds it (the user's
loader through the stream's server, or a TensorDataset's arrays), from the first batch to the
report."""
import json
import os
import subprocess
import sys
import time
import threading
import warnings
from collections.abc import Mapping

import torch

from batchcheck import _arrays, _capture, _inprocess
from batchcheck import export as _export
from batchcheck._cli import binary
from batchcheck._batch import describe, is_flat
from batchcheck._janitor import Janitor
from batchcheck._prepare import (OutputPathError, StepCall, _EagerForward, _EagerStep, _engine_model, _failure_reason,
                                 _keyword_names, _select_code, forward_call, is_path, model_captures, step_captures)
from batchcheck._stream import _Engine, _Server
from batchcheck._wire import _cut, _fields
from batchcheck.report import Report


def _innermost_batch_sampler(loader):
    """The batch sampler that draws the indices: accelerate's BatchSamplerShard (a Trainer's loader)
    and other wrappers hold the user's as .batch_sampler."""
    bs = getattr(loader, "batch_sampler", None)
    for _ in range(8):
        inner = getattr(bs, "batch_sampler", None)
        if inner is None or inner is bs:
            break
        bs = inner
    return bs


def _sampler_name(loader):
    bs = _innermost_batch_sampler(loader)
    sampler = getattr(bs, "sampler", None) if type(bs).__name__ == "BatchSampler" or bs is not loader.batch_sampler \
        else bs
    if sampler is None:
        sampler = loader.sampler
    return type(sampler).__name__


def _batch_size(loader):
    """The loader's batch size: its own, or (a loader built on a batch_sampler, as accelerate's
    are) the batch sampler's."""
    if loader.batch_size is not None:
        return loader.batch_size
    size = getattr(_innermost_batch_sampler(loader), "batch_size", None)
    return size if isinstance(size, int) and size > 0 else None


def _rank_share(loader):
    """{"rank", "world_size", "samples"} of a DistributedSampler the loader draws from (one DDP
    rank's loader: the other ranks' samples are theirs, not dropped), else None."""
    from torch.utils.data.distributed import DistributedSampler
    for s in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if isinstance(s, DistributedSampler):
            try:
                return {"rank": int(s.rank), "world_size": int(s.num_replicas), "samples": int(len(s))}
            except (TypeError, ValueError):
                return None
    return None


def _source(model, loader, step):
    """What the report is of, in the user's terms (its config is scan()'s own, gone afterwards)."""
    what = type(model).__name__
    if step is not None:
        what = "%s (step %s)" % (what, getattr(step, "__name__", type(step).__name__))
    return "batchcheck.scan(): %s on your DataLoader (%s, batch_size=%s%s)" % (
        what, _sampler_name(loader), _batch_size(loader), ", drop_last=True" if loader.drop_last else "")


def _collate_name(loader):
    """The loader's collate function as `reproduce` should call it: "module.function" where it is a
    module's function by that name, "loader.collate_fn" where it has none (a lambda, a closure, a
    function of the script itself); None for PyTorch's default_collate."""
    from torch.utils.data._utils.collate import default_collate
    fn = loader.collate_fn
    if fn is default_collate:
        return None
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    import keyword
    ok = isinstance(module, str) and module != "__main__" and name.isidentifier() and \
        not keyword.iskeyword(name) and \
        all(part.isidentifier() and not keyword.iskeyword(part) for part in module.split("."))
    if ok:
        import sys
        ok = getattr(sys.modules.get(module), name, None) is fn
    return "%s.%s" % (module, name) if ok else "loader.collate_fn"


def _each(*steps):
    """Runs every step in order, even where one raises; then raises the first exception."""
    error = None
    for step in steps:
        try:
            step()
        except BaseException as e:  # a KeyboardInterrupt in one must not skip putting the loader back
            error = error or e
    if error is not None:
        raise error


def _without_jobs(args):
    """args without --jobs J / --jobs=J (a scan that must run as one job)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--jobs":
            skip = True
        elif not a.startswith("--jobs="):
            out.append(a)
    return out


def _halves(autocast):
    """{dtype: device type} of the half-precision torch.autocast a step entered ((device, dtype) seen)."""
    return {dtype: device for device, dtype in autocast if dtype in (torch.float16, torch.bfloat16)}


def _recorded(halves):
    """The config's precision for a step that enters a half-precision torch.autocast of its own:
    its casts are in what runs (the capture's graph, or the step itself), none added."""
    dtype = torch.float16 if torch.float16 in halves else torch.bfloat16
    return {"dtype": "fp16" if dtype == torch.float16 else "bf16", "casts": "recorded",
            "source": "your step's torch.autocast(%r, dtype=%s)" % (halves[dtype], dtype)}


def _step_notes(runner, precision):
    """What the report says of a step run as written."""
    notes = []
    watched = ("each op's %s output watched here as it ran (its largest value; an overflow placed at its op and "
               "measured in float32)")
    dtype = "float16" if precision is not None and precision.get("dtype") == "fp16" else "bfloat16"
    if precision is not None and precision.get("casts") == "recorded":
        notes.append(("precision: your step runs under %s; its ops ran in that precision here, as in training, " + watched)
                     % (precision.get("source", "torch.autocast"), dtype))
    elif precision is not None:
        notes.append(("precision: your step ran under torch.autocast with %s (%s), " + watched)
                     % (precision.get("dtype"), precision.get("source", ""), dtype))
    else:
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in runner.owner.parameters() if p.is_floating_point()})
        notes.append("precision: %s, as your step runs (no torch.autocast seen)" % (", ".join(dtypes) or "float32"))
    return notes


def _runs_eagerly(model, call, keywords, x, mode):
    """Whether the model's own forward runs on the example (the trace's failure is TorchScript's,
    not the batch's)."""
    args = x if isinstance(x, tuple) else (x,)
    with _capture.untouched(model, mode), torch.no_grad(), _capture._quiet():
        try:
            model(**dict(zip(call, args))) if keywords else model(*args)
            return True
        except Exception:  # noqa: BLE001 - their forward raised on this batch
            return False


class Session:
    """The scan of `loader` (its epoch's `order`) with the options of batchcheck.scan() (`o`)."""

    def __init__(self, model, loader, order, sequential, o):
        self.o, self.loader = o, loader
        self.started = time.monotonic()
        self.target_key, self.output = o.target_key, o.output
        self.janitor = Janitor()
        self.server = _Server(loader, order, o.input_key, o.target_key or "targets", self.janitor)
        self.arrays = self.engine = self.guess = self.step_runner = self.inputs_only = self.model = None
        n = len(loader.dataset)
        self.config = {"data": {"format": "stream", "path": self.server.path},
                       "loader": {} if loader.batch_size is None else {"batch_size": loader.batch_size},
                       "loss": {"type": "step"} if o.step is not None else _export.loss_config(o.loss),
                       "source": _source(model, loader, o.step)}
        collate = _collate_name(loader)
        if collate is not None:
            self.config["loader"]["collate_fn"] = collate
        if sequential:
            if loader.drop_last:
                self.config["loader"]["drop_last"] = True
        else:
            with open(os.path.join(self.server.dir, "order.json"), "w") as f:
                json.dump({"samples": n, "ranks": [order]}, f)
            self.config["loader"]["order"] = os.path.join(self.server.dir, "order.json")
            self.config["loader"]["order_name"] = "your DataLoader's order (%s)" % _sampler_name(loader)
            share = _rank_share(loader)
            if share is not None:
                self.config["loader"]["order_rank"] = share
        if o.aux:
            self.config["loss"]["aux"] = {str(k): float(w) for k, w in o.aux.items()}
        if o.precision is not None:
            self.config["precision"] = {"dtype": o.precision, "source": "scan(precision=%r)" % o.precision}
        self.model_path = os.path.join(self.server.dir, "model.pt")
        self.report_path = os.path.join(self.server.dir, "report.json")
        self.cmd_tail = ["-o", self.report_path] + (["--fail-on", o.fail_on] if o.fail_on else []) + \
            (["--device", o.device] if o.device else []) + list(o.args)
        # A TensorDataset under default_collate goes to the engine whole, through memfds
        # (_arrays.py), unless its forward must run here (eager): the stream serves that.
        tensors = self.server.tensors
        self.eager_step = o.step is not None and not o.capture  # the step as written, here (the default)
        self.here = o.eager is True or self.eager_step  # what runs the user's code: this process
        if not self.here and tensors is not None and _arrays.plan(tensors, order, n):
            try:
                self.arrays = _arrays.Arrays(_fields(list(tensors), o.input_key, o.target_key or "targets"))
            except OSError:  # memfd refused here (an old kernel, a seccomp profile): the stream
                self.arrays = None
        # The other batches of a TensorDataset stream too, but any of them can be served at any
        # time (by indexing): the engine may split the epoch over jobs, each asking for its own
        # batches (read one step ahead, as from files: no pushes, which follow one cursor).
        self.random_access = self.arrays is None and tensors is not None and not self.here and \
            _arrays.batch_bytes(tensors, order) >= _arrays.PER_BATCH

    def engine_config(self, eager_model, names, target_key, output):
        """The config for the batch's fields (names)."""
        o = self.o
        inputs = [name for name in names if name != target_key or o.step is not None]  # a step takes them all
        if self.inputs_only is not None:  # a nested batch's input, named by its path
            inputs = list(self.inputs_only)
        m = {"mode": o.mode}
        if o.step is not None:
            m["inputs"] = inputs
            output = None
        elif inputs != ["inputs"]:  # the engine reads "inputs" by default
            m["inputs"] = inputs
        if eager_model:
            m["format"] = "eager"
        else:
            m["path"] = self.model_path
            if output is not None:
                m["output"] = output
            if self.arrays is not None and self.server.libraries:  # the stream's greeting names them otherwise
                m["libraries"] = self.server.libraries
            if self.arrays is not None and self.server.call is not None:  # as the libraries
                m["call"] = self.server.call
        if self.arrays is not None and not eager_model:
            data = self.arrays.data_config(inputs, target_key if target_key in names else None)
        else:
            data = dict(self.config["data"])
            if target_key != "targets" and target_key in names:
                data["targets"] = target_key
        return dict(self.config, data=data, model=m)

    def launch(self, cfg):
        cfg_path = os.path.join(self.server.dir, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        # Arrays and a random-access stream are split over the cores as the command splits its
        # data; a live loader's stream is served to one job, in its order.
        whole = cfg["data"]["format"] == "npy"
        split = whole or (self.random_access and cfg["model"].get("format") != "eager")
        self.server.exhausted = split and not whole  # nothing pushed: every batch is asked for
        tail = self.cmd_tail if split else _without_jobs(self.cmd_tail) + ["--jobs", "1"]
        lib = _inprocess.library(binary()) if _inprocess.serves(cfg, self.o.device, self.o.args) else None
        if lib is not None:  # their model or step runs here: the engine too (_inprocess.py)
            self.engine = _inprocess.Engine(lib, ["scan", cfg_path] + tail, self.o.quiet)
        else:
            self.engine = _Engine([binary(), "scan", cfg_path] + tail, self.o.quiet, self.janitor)
        self.launched = json.loads(json.dumps(cfg))  # as written: later edits of self.config are not in it

    def relaunch(self, cfg):
        if self.engine is not None:
            self.engine.stop()
        self.launch(cfg)

    def first_batch(self):
        """The engine of a stream starts now, before the first batch (the loader's workers start
        meanwhile), on the guess that it is (inputs, targets) or a tensor: it loads LibTorch, then
        waits for the stream's greeting (served once the model is saved) before it loads the
        model. The engine of arrays reads the model at once: it starts once the model is saved."""
        o, server = self.o, self.server
        if self.arrays is None:
            key = o.target_key or "targets"
            self.guess = self.engine_config(self.here, [o.input_key, key], key, self.output)
            self.launch(self.guess)
        server.start_live()  # after the engine's start: a loader's workers take a while to start too
        first = server.first_batch()
        # Only with workers: without, their Dataset would run in a thread beside the model's
        # preparation, and a transform drawing from torch's global RNG would race a trace for it.
        if server.live is not None and server.unpatch is not None and self.loader.num_workers > 0:
            server.spawn(server.read_ahead)
        return first

    def prepare_model(self, model, first):
        """The batch's fields decide what forward is called with; the model is then saved as the
        engine takes it (the step traced with it, scripted, traced) or runs eagerly here."""
        o, server = self.o, self.server
        self.model = model  # the fixes are tried on it after the scan (_verify.py)
        if self.target_key is None:
            self.target_key = "labels" if isinstance(first, Mapping) and "labels" in first and "targets" not in first else "targets"
            server.target_key = self.target_key
        target_key = self.target_key
        fields = _fields(first, o.input_key, target_key)
        if o.step is None and not is_flat(first):
            # input_key= and target_key= may name the leaves by their paths (batch[0][0], batch.x).
            paths = [name for name, _ in fields]
            if o.input_key not in paths or (o.loss is not None and target_key not in paths):
                raise TypeError("batchcheck.scan: the loader yields %s, which is not one model input and its targets: "
                                "pass step=, your training step step(model, batch) -> loss, which gets each batch as "
                                "the loader yields it (or name the model's input and the targets by their paths, e.g. "
                                "input_key=%r, target_key=%r)" % (_cut(describe(first)), paths[0], paths[-1]))
            self.inputs_only = [o.input_key]
        call = self.inputs_only or [name for name, _ in fields if name != target_key]
        if o.loss == "model" and target_key in dict(fields):
            call.append(target_key)  # forward computes its loss from them
        # forward's example: every field it is called with, in order (the targets too where
        # forward computes the loss: traced without them, minGPT's forward returns no loss).
        xs = [dict(fields)[name] for name in call]
        x = xs[0] if len(xs) == 1 else tuple(xs)
        keywords = isinstance(first, Mapping) and _keyword_names(model, call)
        # What the keyword adapter (or the eager forward) selects from forward's output.
        pick = self.output if self.output is not None else ("loss" if o.loss == "model" else "logits")
        if keywords or is_path(pick):
            self.output = None  # the adapter returns the prediction itself
        names = [name for name, _ in fields]
        if o.step is None:
            server.call = forward_call(first, fields, call, keywords, pick, target_key)
        elif hasattr(o.step, "batchcheck_call"):  # a loss given as a callable: forward and loss_fn(out, y)
            server.call = o.step.batchcheck_call if isinstance(first, Mapping) else o.step.batchcheck_call_tuple
        if self.guess is not None:
            real = self.engine_config(self.here, names, target_key, self.output)
            if real != self.guess:
                self.relaunch(real)
        scripted = None
        if self.eager_step or (o.step is not None and not is_flat(first)):
            runner = StepCall(model, o.step, o.mode, o.precision)
            self.step_runner = runner  # its modes go back with the scan, whichever path runs
            # In half precision its half ops are watched here as the engine watches a capture's.
            runner.watch_half = o.precision not in (None, "fp32")
            halves, bce = self._first_run(runner, first)
            if halves and not runner.watch_half:  # its own autocast: batch 0 again, watched
                runner.watch_half = True
                server.prepared.clear()
            self._eager_step(runner, names, target_key, halves, bce)
            return
        if o.step is not None:
            captures = step_captures(model, o.step, first, names, o.mode, self.server.dir)
            # Traced on the first batch the step runs on: a batch it raises on (a bad id in batch
            # 0) is that batch's finding, found by the engine as at any other batch.
            candidates = [fields] + [f for f in server.more_fields(7) if [n for n, _ in f] == names]
            try:
                scripted = captures.first(candidates, self.model_path)
                server.captures = captures
            except Exception as e:  # no capture: each batch's finding, eagerly
                # Whether their step raises, or only the trace of it fails: the warning says which.
                _, raised = captures._run(captures.eager, candidates[0])
                why = ("your step raises on each of the first %d batches (%s), so no capture of it can be made"
                       % (len(candidates), _failure_reason(e)) if raised is not None else
                       "your step runs, but no trace of it can be made (%s)" % _failure_reason(e))
                half = bool(_halves(captures.autocast)) or o.precision not in (None, "fp32")
                warnings.warn("batchcheck.scan: %s; it runs eagerly in this process, its loss ops' and index ops' "
                              "arguments and its gradients checked there, a NaN traced to the op that made it%s"
                              % (why, ", its half-precision ops watched" if half else ""), stacklevel=3)
                if self.arrays is not None:
                    self.arrays.close()
                    self.arrays = None
                self.relaunch(self.engine_config(True, names, target_key, self.output))
                captures.precision = _capture.HALF_DTYPES.get(o.precision)
                captures.watch_half = bool(_halves(captures.autocast)) or o.precision not in (None, "fp32")
                server.forward = _EagerStep(captures)
                return
            self._step_precision(captures, candidates)
        elif o.eager is not True:
            try:
                scripted = self._traced(model, call, keywords, fields, x, pick, names)
                try:
                    scripted.save(self.model_path)
                except RuntimeError:  # a script that cannot be saved (a Tensor argument defaulting to None)
                    if keywords:  # the adapter's trace itself: no other way but eager
                        raise
                    scripted = _export._trace(model, x, o.mode)
                    scripted.save(self.model_path)
            except Exception as e:
                if o.eager is False or isinstance(e, OutputPathError):
                    raise
                why = ("forward raises on each of the first batches (%s), so TorchScript cannot trace it" if
                       getattr(e, "batchcheck_forward_raised", False) else
                       "TorchScript can neither script nor trace the model (%s)") % _failure_reason(e)
                warnings.warn("batchcheck.scan: %s; its forward runs eagerly in this process on a copy, the arguments "
                              "of its index and loss ops checked there and what it returns in the engine: no gradient "
                              "checks, no checks of its weights, no root cause" % why, stacklevel=3)
                scripted = None
                if self.arrays is not None:  # the forward runs here: batches go through the stream
                    self.arrays.close()
                    self.arrays = None
                self.relaunch(self.engine_config(True, names, target_key, self.output))
            if isinstance(scripted, torch.jit.TracedModule):
                # A trace is proven per batch shape as a step's is; a script keeps the code's own sizes.
                captures = model_captures(model, call, keywords, pick, o.mode, self.server.dir)
                captures.adopt(scripted, os.path.basename(self.model_path), fields)
                server.captures = captures
        if server.captures is not None and self.arrays is not None and not self._one_capture_serves_all(server.captures):
            self.arrays.close()  # the stream names each batch's capture, or its error
            self.arrays = None
        if scripted is None:
            server.forward = _EagerForward(model, call, keywords, pick, o.mode, o.aux, o.precision)
            if server.call is not None:  # forward's prediction is selected here (by pick), not by the engine
                server.call = dict(server.call, select=_select_code(pick))
        else:
            server.libraries = _export._operator_libraries(scripted)
            if self.engine is None:
                self.launch(self.engine_config(False, names, target_key, self.output))

    def _traced(self, model, call, keywords, fields, x, pick, names):
        """The engine's model, scripted or traced on the first batch; where the trace raises on it
        (a bad label in batch 0, for a forward that computes its loss), traced on the next
        batches the loader yields: that batch's fault is then its finding, found by the engine."""
        try:
            return _engine_model(model, call, keywords, fields, x, pick, self.o.mode)
        except OutputPathError:
            raise
        except Exception as first:
            runs = _runs_eagerly(model, call, keywords, x, self.o.mode)
            for more in self.server.more_fields(7):
                if [n for n, _ in more] != names:
                    continue
                xs = [dict(more)[name] for name in call]
                try:
                    return _engine_model(model, call, keywords, more, xs[0] if len(xs) == 1 else tuple(xs), pick,
                                         self.o.mode)
                except Exception:  # noqa: BLE001 - the next batch, or the first error below
                    continue
            first.batchcheck_forward_raised = not runs
            raise first

    def _eager_step(self, runner, names, target_key, halves, bce):
        """The step as written, run here on each batch as the loader yields it (_eager.run_step, the
        server's forward since _first_run), its checks made where PyTorch runs its ops; the engine
        gets its loss, faults, gradients."""
        if self.arrays is not None:
            self.arrays.close()
            self.arrays = None
        if halves and self.o.precision in (None, "fp32"):
            self.config["precision"] = _recorded(halves)
        if bce and "precision" in self.config:
            self.config["precision"]["bce_in_step"] = True
        cfg = self.engine_config(True, names, target_key, self.output)
        if self.engine is None or cfg != self.launched:
            self.relaunch(cfg)

    def _first_run(self, runner, first):
        """One run of the step on the first batch, as the engine gets it: the torch.autocast it
        enters itself ({dtype: device} of the half ones), and whether binary_cross_entropy runs
        inside an autocast (CUDA refuses it there)."""
        mode, server = _capture._BceSeen(), self.server
        server.forward = _EagerStep(runner)
        try:
            with _capture.untouched(runner.owner, runner.mode), _capture._quiet(), \
                    _capture._autocast_seen(runner.autocast), runner.precision_scope(), mode:
                # Batch 0 served as any batch is (checked, its frames kept for the engine): the
                # seed is the same, so this run is the one it would get.
                frames = server._frames(list(server.first_key), first) if server.first_key is not None else None
        finally:
            runner.put_back()
        if frames is not None:
            server.prepared[server.first_key] = frames
        return _halves(runner.autocast), mode.seen

    def _step_precision(self, captures, candidates):
        """A step that enters torch.autocast holds its casts in its capture: the engine runs them as
        they are (no autocast of its own around them) and watches the half values. A step that
        calls binary_cross_entropy inside it is told too (CUDA refuses it there)."""
        halves = _halves(captures.autocast)
        if not halves and self.o.precision in (None, "fp32"):
            return
        if halves:
            self.config["precision"] = _recorded(halves)
        if _capture.bce_under_autocast(captures, candidates, None if halves else self.o.precision):
            self.config["precision"]["bce_in_step"] = True
        if self.engine is not None and self.launched.get("precision") != self.config["precision"]:
            self.relaunch(dict(self.launched, precision=self.config["precision"]))

    def _one_capture_serves_all(self, captures):
        """Whether the first capture is proven at every batch shape of a TensorDataset's epoch (its
        order gives them: the full batch, the tail) and the engine's probe of one sample, with no
        batch the step raises on there: then the arrays go whole and no batch needs a word."""
        server, first = self.server, captures.saved[0][0]
        shapes = {}
        for idx in self.server.order:
            shapes.setdefault(len(idx), idx)
        shapes.setdefault(1, [0])
        for idx in shapes.values():
            batch = server._index(list(idx))
            if isinstance(batch, Exception):
                return False
            name, error = captures.decide(tuple(idx), _fields(batch, self.o.input_key, self.target_key))
            if name != first or error is not None:
                return False
        return True

    def report(self):
        """Serves the engine until it ends; its report."""
        if self.engine.here:  # the engine in this process starts at once: served here, on this thread
            self.engine.start()
            self.server.serve_here(self.engine.running)
        else:
            if self.server.forward is not None:  # their code runs here: its first batches while the engine starts
                self.server.spawn(self.server.serve_ahead)
            self.server.thread.start()
        code, text = self.engine.wait()
        if self.server.error is not None and not isinstance(self.server.error, OSError):
            raise self.server.error
        if not os.path.exists(self.report_path):
            raise RuntimeError("batchcheck.scan: the engine wrote no report (exit %d):\n%s" % (code, text))
        with open(self.report_path) as f:
            data = json.load(f)
        extra = []
        if self.server.captures is not None:
            extra = _capture.notes(self.server.captures, self.o.precision)
        elif self.step_runner is not None:
            extra = _step_notes(self.step_runner, self.config.get("precision"))
        if self.model is not None and code in (0, 1) and self.o.try_fixes:
            text = self._try_fixes(data, text)
        if extra:
            data.setdefault("notes", []).extend(extra)
            text += "".join("note: %s\n" % n for n in extra)
        return Report(data, text, code)

    def _try_fixes(self, data, text):
        """The loader fixes tried on the user's code (_verify.py); the report's JSON and text
        written again with what was tried."""
        from batchcheck import _verify
        before = json.dumps(data.get("findings", []))
        said = _verify.try_fixes(data, self.model, self.loader, self.server.order, self.o, self.server.call,
                                 self.output, time.monotonic() - self.started)
        if not said:
            return text
        data.setdefault("notes", []).extend("fixes tried: " + s for s in said)
        if json.dumps(data.get("findings", [])) != before:
            with open(self.report_path, "w") as f:
                json.dump(data, f, indent=2)
            done = subprocess.run([binary(), "render", self.report_path, "--text"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, check=False)
            # The summary the command printed, from its first line to its verdict, printed again.
            import re
            heads = list(re.finditer(r"(?m)^batchcheck: .*: checked \d+ batch", text))
            tail = re.search(r"(?m)^verdict: .*\n?", text[heads[-1].start():]) if heads else None
            if done.returncode == 0 and tail is not None:
                start = heads[-1].start()
                text = text[:start] + done.stdout.decode("utf-8", "replace") + text[start + tail.end():]
        lines = "".join("note: fixes tried: %s\n" % s for s in said)
        if not self.o.quiet:
            sys.stderr.write(lines)
        return text + lines

    def close(self):
        # An engine in this process waits on the server: the server goes first (a connection of
        # its not yet accepted is refused), an engine process is stopped first.
        here = self.engine is not None and self.engine.here
        _each(lambda: self.engine is not None and not here and self.engine.stop(), self.server.close,
              lambda: here and self.engine.stop(),
              lambda: self.arrays is not None and self.arrays.close(),
              lambda: self.step_runner is not None and self.step_runner.close(), self.janitor.done)
