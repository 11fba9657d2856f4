"""batchcheck.scan(): the checks of `batchcheck scan` on your own DataLoader object.

    import batchcheck
    report = batchcheck.scan(model, loader, nn.CrossEntropyLoss())
    if not report.ok:
        raise SystemExit(report.text)

Your loader runs in your process, as training runs it (its sampler, collate_fn, transforms and
workers); each batch it yields is sent to batchcheck's engine over a Unix socket, nothing is
written to disk but the model (scripted, or traced on the first batch) and the recorded order
(a TensorDataset under default_collate goes whole, through memfds: _arrays.py).
The engine runs in its own supervised process: a crash of LibTorch is a finding, never a crash
of yours. Every RNG the loader can reach is restored afterwards, so the epoch your training
runs next is the one that was scanned.
"""
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
from collections import OrderedDict, deque

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from batchcheck import _arrays
from batchcheck import export as _export
from batchcheck._cli import binary

__all__ = ["scan", "Report", "Finding", "ScanFailed"]


class ScanFailed(Exception):
    """The scan's gate failed (the training callbacks raise it): .report holds the findings."""

    def __init__(self, report, message=None):
        self.report = report
        if message is None:
            errors = report.errors()
            first = errors[0] if errors else (report.findings[0] if report.findings else None)
            where = "" if first is None else ": %s at batch %s, samples %s" % (first.id, first.batch, first.samples[:8])
            message = "batchcheck: the scan failed (%d errors)%s\n%s" % (len(errors), where, report.text)
        super().__init__(message)


class Finding:
    """One finding of the report: .id, .severity, .batch, .samples, .message, .fixes and every
    other field of its JSON object as .data."""

    def __init__(self, data):
        self.data = data
        self.id = data.get("id")
        self.severity = data.get("severity")
        self.batch = data.get("batch")
        self.samples = data.get("samples", [])
        self.message = data.get("message", "")
        self.fixes = data.get("fixes", [])

    def __repr__(self):
        where = "" if self.batch is None else " at batch %s" % self.batch
        return "<Finding %s %s%s samples=%s>" % (self.severity, self.id, where, self.samples[:8])


class Report:
    """The report of a scan: .ok (the verdict passes), .findings, .data (the JSON report as a
    dict), .text (what the command printed), .to_json(), .html(path)."""

    def __init__(self, data, text, exit_code):
        self.data = data
        self.text = text
        self.exit_code = exit_code
        self.findings = [Finding(f) for f in data.get("findings", [])]

    @property
    def ok(self):
        return self.exit_code == 0

    def errors(self):
        return [f for f in self.findings if f.severity == "error"]

    def to_json(self, indent=2):
        return json.dumps(self.data, indent=indent)

    def html(self, path):
        """Writes the HTML view of this report to `path` (batchcheck render)."""
        with tempfile.TemporaryDirectory(prefix="batchcheck-") as tmp:
            src = os.path.join(tmp, "report.json")
            with open(src, "w") as f:
                json.dump(self.data, f)
            subprocess.run([binary(), "render", src, "--html", os.fspath(path)], check=True)
        return path

    def __repr__(self):
        return "<batchcheck Report %s: %d findings>" % ("ok" if self.ok else "FAILED", len(self.findings))


# ---- the batches: what the loader yields, as named tensor fields ----

def _fields(batch, input_key, target_key):
    """A collated batch as [(name, tensor)]: (inputs, targets), a single tensor, or a dict."""
    if isinstance(batch, torch.Tensor):
        return [("inputs", batch)]
    if isinstance(batch, dict):
        out = [(str(k), v) for k, v in batch.items() if isinstance(v, torch.Tensor)]
        if not out:
            raise TypeError("batchcheck.scan: the loader's batches are dicts without tensors")
        return out
    if isinstance(batch, (tuple, list)) and batch and all(isinstance(v, torch.Tensor) for v in batch):
        # (inputs, targets); (input, input_1, ..., targets): forward's inputs in order, the targets last.
        if len(batch) == 1:
            return [(input_key, batch[0])]
        extra = [("%s_%d" % (input_key, k), t) for k, t in enumerate(batch[1:-1], 1)]
        return [(input_key, batch[0])] + extra + [(target_key, batch[-1])]
    raise TypeError("batchcheck.scan: a batch must be a tensor, a tuple of tensors (inputs..., targets) or a dict of tensors; "
                    "the loader yields %s"
                    % type(batch).__name__)


class _Keywords(torch.nn.Module):
    """forward(*tensors) calls model(**{name: tensor}) and returns the prediction (or the loss)
    it selects: for a model that takes its batch as keywords (Hugging Face's model(**batch)),
    whose parameters are not in the batch's order (GPT-2: forward(input_ids, past_key_values,
    attention_mask, ..., labels)). The engine passes the fields positionally, in that order."""

    def __init__(self, model, names, pick):
        super().__init__()
        self.model = model
        self.names = list(names)
        self.pick = pick

    def forward(self, *args):
        return _select(self.model(**dict(zip(self.names, args))), self.pick)


def _select(out, pick):
    """The prediction in what forward returned: out[pick] of a dict (a ModelOutput too), the
    pick-th (an index) or first element of a tuple, else out itself."""
    if isinstance(out, dict):
        return out[pick]
    if isinstance(out, (tuple, list)):
        return out[pick if isinstance(pick, int) else 0]
    return out


def _indexed_tensors(loader):
    """The tensors of a loader whose batches are a TensorDataset's rows collated by PyTorch's own
    default_collate: [t[indices] for t in tensors] is that batch exactly (torch.stack of the rows
    t[i]), read without two Python calls per sample. None where any code of the user's makes the
    batches (a Dataset of theirs, a subclass, their collate_fn): that code runs, as in training."""
    from torch.utils.data import TensorDataset
    from torch.utils.data._utils.collate import default_collate
    if type(loader.dataset) is TensorDataset and loader.collate_fn is default_collate:
        return loader.dataset.tensors
    return None


class _Engine:
    """The command's process, its stderr pumped (to ours unless quiet) and kept for the report."""

    def __init__(self, cmd, quiet):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = []
        self.quiet = quiet
        self.pumping = threading.Thread(target=self._pump, daemon=True)
        self.pumping.start()

    def _pump(self):
        for line in iter(self.proc.stderr.readline, b""):
            text = line.decode("utf-8", "replace")
            self.lines.append(text)
            if not self.quiet:
                sys.stderr.write(text)

    def wait(self):
        self.proc.stdout.read()
        code = self.proc.wait()
        self.pumping.join()
        return code, "".join(self.lines)

    def stop(self):
        """Ends it if it still runs (the scan failed before it could be served)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.pumping.join(timeout=5)
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()


class _EagerForward:
    """The user's model run eagerly in this process (model.format "eager"), on a copy, so that the
    scan moves none of their BatchNorm statistics: the prediction of a batch, selected as the
    engine would (output=, "loss"/"logits" of a dict, the first of a tuple)."""

    def __init__(self, model, names, keywords, pick, mode):
        import copy
        self.model = copy.deepcopy(model)
        self.model.train(mode == "train")
        self.names, self.keywords, self.pick = list(names), keywords, pick
        params = list(self.model.parameters())
        self.device = params[0].device if params else torch.device("cpu")

    def __call__(self, fields):
        given = dict(fields)
        args = [given[n].to(self.device) for n in self.names]
        with torch.no_grad():
            out = _select(self.model(**dict(zip(self.names, args))) if self.keywords else self.model(*args), self.pick)
        if not isinstance(out, torch.Tensor):
            raise TypeError("the model's prediction is %s, not a tensor (name it with output=)" % type(out).__name__)
        return out


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


_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
           torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
           torch.bool: "bool"}


def _nbytes(batch):
    """The bytes of the tensors in a collated batch (nested tuples, lists, dicts)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (tuple, list)):
        return sum(_nbytes(b) for b in batch)
    return 0


def _dtype(t, name):
    if t.dtype not in _DTYPES:
        raise TypeError("batchcheck.scan: field %r has dtype %s, which the engine does not take" % (name, t.dtype))
    return _DTYPES[t.dtype]


def _send(conn, payload):
    conn.sendall(struct.pack("<Q", len(payload)))
    conn.sendall(payload)


def _send_batch(conn, header, tensors):
    """The header frame, then one frame per tensor, sent from the tensors' own memory (no copy)
    in as few system calls as the socket takes: a batch of 3,000 small batches is that many
    round trips, each a few syscalls otherwise."""
    bufs = [struct.pack("<Q", len(header)), header]
    for t in tensors:
        bufs.append(struct.pack("<Q", t.numel() * t.element_size()))
        if t.numel():
            bufs.append(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    while bufs:
        sent = conn.sendmsg(bufs[:512])  # IOV_MAX is 1024
        while bufs and sent >= len(bufs[0]):  # drop what went out; a partial send resumes mid-buffer
            sent -= len(bufs[0])
            bufs.pop(0)
        if bufs and sent:
            bufs[0] = memoryview(bufs[0])[sent:]


def _recv(conn):
    head = b""
    while len(head) < 8:
        chunk = conn.recv(8 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack("<Q", head)
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _file_of(dataset, i, error):
    """The file sample i of the Dataset reads, where the exception names it (an OSError's
    filename) or the Dataset keeps one path per sample (ImageFolder's samples, a list of files or
    paths); None where neither shows it. Named for the user, never opened here."""
    name = getattr(error, "filename", None)
    if isinstance(name, (str, os.PathLike)):
        return os.fspath(name)
    try:
        n = len(dataset)
    except TypeError:
        return None
    for attr in ("samples", "imgs", "files", "file_list", "filenames", "paths", "image_paths", "images"):
        seq = getattr(dataset, attr, None)
        if not isinstance(seq, (list, tuple)) or len(seq) != n:
            continue
        item = seq[i]
        if isinstance(item, (tuple, list)) and item:
            item = item[0]
        if isinstance(item, (str, os.PathLike)):
            return os.fspath(item)
    return None


class _Server:
    """Serves the loader's batches to the engine, in the order the engine asks for them: a batch
    of the epoch comes from the live loader iterator (the order it draws is recorded from the
    iterator itself and must match the batch asked for); any other set of samples (the engine's
    probes: a batch of one) is collate_fn([dataset[i] for i in indices]) in this process."""

    def __init__(self, loader, expected, input_key, target_key):
        self.loader = loader
        self.input_key, self.target_key = input_key, target_key
        self.order = expected
        self.expected = {tuple(b) for b in expected}
        self.tensors = _indexed_tensors(loader)
        self.window = OrderedDict()  # recent live batches by indices (a resumed child asks again)
        self.live = None
        self.drawn = []  # the indices the live iterator drew, batch by batch
        self.yielded = 0  # batches it delivered
        self.delivered = set()  # their indices
        self.first = None
        self.unpatch = None
        self.exhausted = False
        self.error = None
        self.forward = None  # an _EagerForward: the model runs here, the engine checks its outputs
        self.libraries = []  # operator libraries the prepared model calls (torchvision's), for the engine
        self.conns = set()  # open connections (closed with the scan)
        self.closing = False
        # Batches drawn from a live loader before the engine asks (it is loading LibTorch
        # meanwhile, on one core): the loader's workers use the other instead of competing with
        # the engine's steps for both later.
        self.ahead = deque()
        self.ahead_end = False  # the iterator ended while reading ahead
        self.ahead_error = None  # what it raised then
        self.asked = False  # the engine asked for a batch: reading ahead stops
        self.lock = threading.Lock()
        self.dir = tempfile.mkdtemp(prefix="batchcheck-")
        self.path = os.path.join(self.dir, "loader.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def start_live(self):
        """The live iterator, recording the indices of each batch as the iterator itself draws
        them (workers deliver in that order). A multi-worker iterator draws its first indices
        while it is made, so the drawing is watched from before iter() until the scan ends."""
        if self.tensors is not None:  # no Python code of theirs to run: batches by indexing
            return
        from torch.utils.data import dataloader as dl
        cls = dl._BaseDataLoaderIter
        draw = cls.__dict__.get("_next_index")
        if draw is None:  # another torch: no order check, the engine's own indices then name samples
            self.live = iter(self.loader)
            return
        server = self

        def recorded(it):
            idx = draw(it)
            server.drawn.append(list(idx))  # only this scan iterates a loader meanwhile
            return idx
        cls._next_index = recorded
        self.unpatch = lambda: setattr(cls, "_next_index", draw)
        self.live = iter(self.loader)
        # An Accelerate DataLoaderShard (the HF Trainer's loader) draws through a plain
        # DataLoader iterator inside its own; a batch on a device comes back to the CPU below.

    def next_live(self):
        """(indices, batch or an exception) of the live iterator's next batch, or None at its
        end. Batch j holds the j-th indices drawn: workers may draw ahead, they deliver in order."""
        j = self.yielded
        if self.tensors is not None:
            if j >= len(self.order):
                return None
            idx = list(self.order[j])
            self.drawn.append(idx)
            self.yielded += 1
            return idx, self._index(idx)
        try:
            batch = next(self.live)
        except StopIteration:
            return None
        except Exception as e:  # their Dataset or collate_fn raised: the batch's failure
            if len(self.drawn) <= j:
                raise
            batch = e
        self.yielded += 1
        idx = self.drawn[j] if len(self.drawn) > j else None
        return idx, batch

    def read_ahead(self, budget=256 << 20):
        """Draws the live loader's next batches into `ahead` until the engine asks for one, the
        epoch ends, or they hold `budget` bytes (a thread of its own, started with the engine)."""
        size = 0
        while size < budget:
            with self.lock:
                if self.closing or self.asked or self.ahead_end or self.ahead_error is not None:
                    return
                try:
                    got = self.next_live()
                except Exception as e:  # the loader itself failed: raised where the batch is wanted
                    self.ahead_error = e
                    return
                if got is None:
                    self.ahead_end = True
                    return
                self.ahead.append(got)
                size += _nbytes(got[1])

    def _draw(self):
        """The live loader's next (indices, batch): read ahead already, or drawn now. Its indices
        count as delivered from here (a batch read ahead is still to be drawn from `ahead`)."""
        if self.ahead:
            got = self.ahead.popleft()
        elif self.ahead_error is not None:
            e, self.ahead_error = self.ahead_error, None
            raise e
        elif self.ahead_end:
            return None
        else:
            got = self.next_live()
        if got is not None and got[0] is not None:
            self.delivered.add(tuple(got[0]))
        return got

    def first_batch(self):
        """The first batch that loads: its fields are the stream's. One that raised before it (a
        corrupt file in batch 0) is kept for the engine, which reports it at its batch."""
        failed = None
        while True:
            got = self.next_live()
            if got is None:
                if failed is not None:  # not one batch loads: nothing to learn the fields from
                    raise failed
                raise ValueError("batchcheck.scan: the loader yields no batch")
            idx, batch = got
            if idx is not None:
                self.delivered.add(tuple(idx))
            if isinstance(batch, Exception):
                if idx is None:  # no record of its draw: it cannot be named
                    raise batch
                failed = failed or batch
                self._keep(tuple(idx), batch)
                continue
            self._keep(tuple(idx) if idx is not None else None, batch)
            self.first = batch
            return batch

    def _keep(self, key, batch):
        self.window[key] = batch
        while len(self.window) > 8:
            self.window.popitem(last=False)

    def _batch_for(self, indices):
        key = tuple(indices)
        if key in self.window:
            return self.window[key]
        if key in self.expected and key not in self.delivered and not self.exhausted:
            while True:
                got = self._draw()
                if got is None:
                    self.exhausted = True
                    break
                idx, batch = got
                if idx is None:  # no record of the draw (see start_live): taken as the batch asked for
                    idx = indices
                self._keep(tuple(idx), batch)
                if tuple(idx) == key:
                    return batch
        # A probe's samples, or a batch asked for out of the epoch's order (--fail-fast asks for
        # the edges first): their Dataset and collate_fn, in this process.
        if self.tensors is not None:
            return self._index(indices)
        ds = self.loader.dataset
        try:
            samples = [ds[i] for i in indices]
        except Exception as e:
            return e
        try:
            return self.loader.collate_fn(samples)
        except Exception as e:
            return e

    def _index(self, indices):
        """The batch default_collate makes of a TensorDataset's samples: each tensor's rows."""
        rows = torch.as_tensor(indices, dtype=torch.long)
        try:
            return [t[rows] for t in self.tensors]
        except Exception as e:  # an index past the tensors: named sample by sample (_failure)
            return e

    def _failure(self, indices, e):
        ds = self.loader.dataset
        for row, i in enumerate(indices):
            try:
                ds[i]
            except Exception as d:
                failure = {"error": "dataset", "row": row, "index": int(i), "message": "%s: %s" % (type(d).__name__, d)}
                path = _file_of(ds, int(i), d)
                if path:
                    failure["file"] = path
                return failure
        return {"error": "collate", "field": "batch", "message": str(e) or type(e).__name__}

    def hello(self):
        fields = []
        for name, t in _fields(self.first, self.input_key, self.target_key):
            fields.append({"name": name, "dtype": _dtype(t, name), "shape": list(t.shape[1:])})
        return {"samples": len(self.loader.dataset), "fields": fields, "libraries": self.libraries}

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                if self.closing:
                    conn.close()
                    return
                self.conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        credits = 0  # batches the engine asked to have pushed ahead of its requests
        try:
            while True:
                msg = _recv(conn)
                if msg is None:
                    return
                req = json.loads(msg)
                with self.lock:
                    if self.closing:
                        return
                    if "hello" in req:
                        _send(conn, json.dumps(self.hello()).encode())
                        continue
                    self.asked = True
                    if "credit" in req:
                        credits += int(req["credit"])
                    else:
                        indices = [int(i) for i in req["indices"]]
                        self._respond(conn, indices, self._batch_for(indices))
                        credits += int(req.get("ahead", 0))
                    # The epoch's next batches while the engine checks this one: the two
                    # processes overlap instead of taking turns.
                    while credits > 0 and not self.closing:
                        got = self._next_to_push()
                        if got is None:
                            _send(conn, b'{"end": true}')
                            credits = 0
                            break
                        self._respond(conn, got[0], got[1], pushed=True)
                        credits -= 1
        except (OSError, ValueError, KeyError) as e:  # the engine went away, or a malformed request
            if self.error is None or (isinstance(self.error, OSError) and not isinstance(e, OSError)):
                self.error = e  # a dead connection's broken pipe (an engine stopped) hides nothing
        except Exception as e:  # the loader itself failed: the engine reads a closed socket
            if self.error is None or isinstance(self.error, OSError):  # not hidden by a dead engine's pipe
                self.error = e
        finally:
            with self.lock:
                self.conns.discard(conn)
            conn.close()

    def _next_to_push(self):
        """The live iterator's next batch, kept in the window: (indices, batch), or None at the
        epoch's end or where the draws are not recorded (nothing to name the batch by)."""
        if self.exhausted or (self.tensors is None and (self.live is None or self.unpatch is None)):
            return None
        if len(self.drawn) < self.yielded:  # draws not recorded (see start_live): nothing to push by
            self.exhausted = True
            return None
        got = self._draw()
        if got is None or got[0] is None:
            # The end, or a batch without a recorded draw: no more pushes (the engine then asks).
            self.exhausted = True
            return None
        self._keep(tuple(got[0]), got[1])
        return got

    def _respond(self, conn, indices, batch, pushed=False):
        """One batch's frames: its fields (with the eager forward's prediction), or why it failed."""
        if isinstance(batch, Exception):
            header = self._failure(indices, batch)
            if pushed:
                header["pushed"] = list(indices)
            _send(conn, json.dumps(header).encode())
            return
        tensors = [(n, t.detach().cpu().contiguous()) for n, t in _fields(batch, self.input_key, self.target_key)]
        forward_error = None
        if self.forward is not None:
            try:
                pred = self.forward(tensors)
                tensors.append(("batchcheck.prediction", pred.detach().cpu().contiguous()))
            except Exception as e:  # what their forward raised: the engine classifies it
                forward_error = str(e).strip() or type(e).__name__
        header = {"fields": [{"name": n, "dtype": _dtype(t, n), "shape": list(t.shape)} for n, t in tensors]}
        if forward_error is not None:
            header["forward_error"] = forward_error
        if pushed:
            header["pushed"] = list(indices)
        _send_batch(conn, json.dumps(header).encode(), [t for _, t in tensors])

    def close(self):
        # Nothing of the loader runs after this: open connections are shut, and the lock waits
        # for a batch being served or pushed, before the iterator's hook and the RNGs go back.
        self.closing = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for conn in list(self.conns):  # a copy made under the GIL; shut without the lock a push may hold
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.lock:  # the batch being served or pushed is done
            pass
        if self.unpatch:
            self.unpatch()
        try:
            self.sock.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


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
        loss = self._step(self.model, self._rebuild(fields))
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
        if isinstance(batch, dict):
            target = batch[target_key]
            out = model(**{k: v for k, v in batch.items() if k != target_key})
        else:
            *inputs, target = batch
            out = model(*inputs)
        return loss(_select(out, pick), target)
    return step


def _trace_step(model, step, first, names, example, mode):
    """The step traced with the model on the first batch (its fields in `names` order), the
    model's buffers and every RNG as they were before (the trace runs the step once)."""
    from batchcheck.export import _quiet_jit
    module = _Step(model, step, _rebuilder(first, names), _modules_reached(step, model))
    params = list(module.parameters())
    device = params[0].device if params else torch.device("cpu")
    example = tuple(t.to(device) for t in example)
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    was_training = [(m, m.training) for m in module.modules()]
    rng = torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)
    module.train(mode == "train")
    try:
        with _quiet_jit(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's warnings are about the step's Python, not the user's data
            traced = torch.jit.trace(module, example, check_trace=False, strict=False)
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        for m, t in was_training:
            m.training = t
        torch.set_rng_state(rng[0])
        if rng[1] is not None:
            torch.cuda.set_rng_state_all(rng[1])
    return traced


def _sampler_name(loader):
    sampler = loader.batch_sampler if type(loader.batch_sampler).__name__ != "BatchSampler" else loader.sampler
    return type(sampler).__name__


def _source(model, loader, step):
    """What the report is of, in the user's terms (its config is scan()'s own, gone afterwards)."""
    what = type(model).__name__
    if step is not None:
        what = "%s (step %s)" % (what, getattr(step, "__name__", type(step).__name__))
    return "batchcheck.scan(): %s on your DataLoader (%s, batch_size=%s%s)" % (
        what, _sampler_name(loader), loader.batch_size, ", drop_last=True" if loader.drop_last else "")


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
    if keywords:
        example = tuple(dict(fields)[name] for name in call)
        return _export._trace(_Keywords(model, call, pick), example, mode)
    scripted, _ = _export._script_or_trace(model, x, mode)
    return scripted


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


def scan(model, loader, loss=None, *, step=None, mode="train", output=None, aux=None, fail_on=None, device=None,
         input_key="inputs", target_key=None, eager=None, args=(), quiet=False):
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
    (post-processing, several loss terms, labels made in the step): traced with the model and run
    in the engine, every loss op inside checked where it runs (BCE's ranges, class indices, an
    embedding's ids), a NaN traced to the op that made it. loss= may also be any callable
    (prediction, target) -> loss: it runs as such a step."""
    if not isinstance(loader, DataLoader):
        raise TypeError("batchcheck.scan: pass your torch.utils.data.DataLoader, got %s" % type(loader).__name__)
    if isinstance(loader.dataset, IterableDataset):
        raise TypeError("batchcheck.scan: an IterableDataset has no sample indices to name; scan a map-style Dataset")
    if loader.batch_sampler is None:  # batch_size=None and no batch_sampler
        raise TypeError("batchcheck.scan: the loader has batch_size=None (no automatic batching): its items are not batches")
    if mode not in ("train", "eval"):
        raise ValueError("batchcheck.scan: mode is 'train' or 'eval', got %r" % (mode,))
    n = len(loader.dataset)
    sequential = _export._plain_sequential(loader)
    if sequential:
        b = loader.batch_size
        order = [list(range(i, min(i + b, n))) for i in range(0, n, b)]
        if loader.drop_last and order and len(order[-1]) < b:
            order.pop()
    else:
        order = _export._record_order(loader, n)  # restores every RNG it draws from
    if aux and eager is True:
        raise TypeError("batchcheck.scan: aux= needs the engine's forward; an eager scan checks the prediction only")
    if step is not None and loss is not None:
        raise TypeError("batchcheck.scan: pass loss= or step=, not both (a step computes its own loss)")
    if step is None and loss is not None and not isinstance(loss, str) and callable(loss) and not _export.known_loss(loss):
        step = _loss_step(loss, output, target_key or "targets")  # any callable (prediction, target) -> loss
        loss = None
    if step is not None:
        if not callable(step):
            raise TypeError("batchcheck.scan: step is your training step, step(model, batch) -> loss; got %s" % type(step).__name__)
        if eager is True or aux:
            raise TypeError("batchcheck.scan: step= runs in the engine, traced with the model: no eager=True, no aux=")
        if device is None:  # the step is traced where the model is: device constants follow it
            params = list(model.parameters())
            if params and params[0].device.type == "cuda":
                device = "cuda"
    restore = _rng_snapshot(loader)
    server = _Server(loader, order, input_key, target_key or "targets")
    arrays = engine = None
    try:
        config = {"data": {"format": "stream", "path": server.path},
                  "loader": {} if loader.batch_size is None else {"batch_size": loader.batch_size},
                  "loss": {"type": "step"} if step is not None else _export.loss_config(loss),
                  "source": _source(model, loader, step)}
        if sequential:
            if loader.drop_last:
                config["loader"]["drop_last"] = True
        else:
            with open(os.path.join(server.dir, "order.json"), "w") as f:
                json.dump({"samples": n, "ranks": [order]}, f)
            config["loader"]["order"] = os.path.join(server.dir, "order.json")
            config["loader"]["order_name"] = "your DataLoader's order (%s)" % _sampler_name(loader)
        if aux:
            config["loss"]["aux"] = {str(k): float(w) for k, w in aux.items()}
        model_path = os.path.join(server.dir, "model.pt")
        cmd_tail = ["-o", os.path.join(server.dir, "report.json")]
        if fail_on:
            cmd_tail += ["--fail-on", fail_on]
        if device:
            cmd_tail += ["--device", device]
        cmd_tail += list(args)
        # A TensorDataset under default_collate goes to the engine whole, through memfds
        # (_arrays.py), unless its forward must run here (eager): the stream serves that.
        if eager is not True and server.tensors is not None and _arrays.plan(server.tensors, order, n):
            try:
                arrays = _arrays.Arrays(_fields(list(server.tensors), input_key, target_key or "targets"))
            except OSError:  # memfd refused here (an old kernel, a seccomp profile): the stream
                arrays = None
        # The other batches of a TensorDataset stream too, but any of them can be served at any
        # time (by indexing): the engine may split the epoch over jobs, each asking for its own
        # batches (read one step ahead, as from files: no pushes, which follow one cursor).
        random_access = arrays is None and server.tensors is not None and eager is not True and \
            _arrays.batch_bytes(server.tensors, order) >= _arrays.PER_BATCH

        def engine_config(eager_model, names, target_key, output):
            """The config for the batch's fields (names)."""
            inputs = [name for name in names if name != target_key or step is not None]  # a step takes them all
            m = {"mode": mode}
            if step is not None:
                m["inputs"] = inputs
                output = None
            elif names != [input_key, target_key] and names != [input_key]:
                m["inputs"] = inputs
            if eager_model:
                m["format"] = "eager"
            else:
                m["path"] = model_path
                if output is not None:
                    m["output"] = output
                if arrays is not None and server.libraries:  # the stream's greeting names them otherwise
                    m["libraries"] = server.libraries
            if arrays is not None and not eager_model:
                data = arrays.data_config(inputs, target_key if target_key in names else None)
            else:
                data = dict(config["data"])
                if target_key != "targets" and target_key in names:
                    data["targets"] = target_key
            return dict(config, data=data, model=m)

        def launch(cfg):
            cfg_path = os.path.join(server.dir, "config.json")
            with open(cfg_path, "w") as f:
                json.dump(cfg, f, indent=2)
            # Arrays and a random-access stream are split over the cores as the command splits its
            # data; a live loader's stream is served to one job, in its order.
            whole = cfg["data"]["format"] == "npy"
            split = whole or (random_access and cfg["model"].get("format") != "eager")
            server.exhausted = split and not whole  # nothing pushed: every batch is asked for
            tail = cmd_tail if split else _without_jobs(cmd_tail) + ["--jobs", "1"]
            return _Engine([binary(), "scan", cfg_path] + tail, quiet)

        # The engine of a stream starts now, before the first batch (the loader's workers start
        # meanwhile), on the guess that it is (inputs, targets) or a tensor: it loads LibTorch,
        # then waits for the stream's greeting (served once the model is saved) before it loads
        # the model. Other fields start it again once they are known. The engine of arrays reads
        # the model at once: it starts once the model is saved.
        guess = None
        if arrays is None:
            guess = engine_config(eager is True, [input_key, target_key or "targets"], target_key or "targets", output)
            engine = launch(guess)
        server.start_live()  # after the engine's start: a loader's workers take a while to start too
        first = server.first_batch()
        # Only with workers: without, their Dataset would run in a thread beside the model's
        # preparation, and a transform drawing from torch's global RNG would race a trace for it.
        if server.live is not None and server.unpatch is not None and loader.num_workers > 0:
            threading.Thread(target=server.read_ahead, daemon=True).start()
        if target_key is None:
            target_key = "labels" if isinstance(first, dict) and "labels" in first and "targets" not in first else "targets"
            server.target_key = target_key
        fields = _fields(first, input_key, target_key)
        xs = [t for name, t in fields if name != target_key]
        x = xs[0] if len(xs) == 1 else tuple(xs)  # forward's example: every input field, in order
        call = [name for name, _ in fields if name != target_key]
        if loss == "model" and target_key in dict(fields):
            call.append(target_key)  # forward computes its loss from them
        keywords = isinstance(first, dict) and _keyword_names(model, call)
        # What the keyword adapter (or the eager forward) selects from forward's output.
        pick = output if output is not None else ("loss" if loss == "model" else "logits")
        if keywords:
            output = None  # the adapter returns the prediction itself
        names = [name for name, _ in fields]
        if guess is not None:
            real = engine_config(eager is True, names, target_key, output)
            if real != guess:
                engine.stop()
                engine = launch(real)
        scripted = None
        if step is not None:
            # The step's own errors are the user's to see (a step that does not run at all).
            scripted = _trace_step(model, step, first, names, tuple(t for _, t in fields), mode)
            scripted.save(model_path)
        elif eager is not True:
            try:
                scripted = _engine_model(model, call, keywords, fields, x, pick, mode)
                try:
                    scripted.save(model_path)
                except RuntimeError:  # a script that cannot be saved (a Tensor argument defaulting to None)
                    if keywords:  # the adapter's trace itself: no other way but eager
                        raise
                    scripted = _export._trace(model, x, mode)
                    scripted.save(model_path)
            except Exception as e:
                if eager is False:
                    raise
                reason = _failure_reason(e)
                warnings.warn("batchcheck.scan: TorchScript can neither script nor trace the model (%s); its forward "
                              "runs eagerly in this process on a copy, and the engine checks what it returns: no gradient "
                              "checks, no checks of its weights, no root cause" % reason, stacklevel=2)
                if aux:
                    raise TypeError("batchcheck.scan: aux= needs the engine's forward; an eager scan checks the "
                                    "prediction only") from e
                scripted = None
                if engine is not None:
                    engine.stop()
                if arrays is not None:  # the forward runs here: batches go through the stream
                    arrays.close()
                    arrays = None
                engine = launch(engine_config(True, names, target_key, output))
        if scripted is None:
            server.forward = _EagerForward(model, call, keywords, pick, mode)
        else:
            server.libraries = _export._operator_libraries(scripted)
            if engine is None:
                engine = launch(engine_config(False, names, target_key, output))
        server.thread.start()
        code, text = engine.wait()
        if server.error is not None and not isinstance(server.error, OSError):
            raise server.error
        report_path = cmd_tail[1]
        if not os.path.exists(report_path):
            raise RuntimeError("batchcheck.scan: the engine wrote no report (exit %d):\n%s" % (code, text))
        with open(report_path) as f:
            data = json.load(f)
        return Report(data, text, code)
    finally:
        _each(lambda: engine is not None and engine.stop(), server.close, lambda: arrays is not None and arrays.close(),
              restore)
