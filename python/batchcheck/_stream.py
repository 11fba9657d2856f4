"""The stream of a scan: the user's loader served batch by batch to the engine's stream source
over a Unix socket, in the order the engine asks (with the read-ahead while the engine starts),
and the engine's process itself. What crosses the socket is `_wire`'s."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict, deque

import torch

from batchcheck._batch import row_maps
from batchcheck._wire import _dtype, _fields, _file_of, _indexed_tensors, _nbytes, _recv, _send, _send_batch


_SUN_PATH = 108  # sizeof(sockaddr_un.sun_path) on Linux


def _same_user(conn):
    """Whether the peer of a connection runs as this user (SO_PEERCRED): the batches are theirs."""
    try:
        import struct
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        return uid == os.getuid()
    except (OSError, AttributeError):  # no SO_PEERCRED here: the folder's permissions guard it
        return True


def pump_lines(f, lines, quiet):
    """The engine's stderr, line by line until its end: kept in `lines`, and ours unless quiet."""
    for line in iter(f.readline, b""):
        text = line.decode("utf-8", "replace")
        lines.append(text)
        if not quiet:
            sys.stderr.write(text)


class _Engine:
    """The command's process, its stderr pumped (to ours unless quiet) and kept for the report."""

    here = False  # not in this process (_inprocess.Engine is)

    def __init__(self, cmd, quiet, janitor=None):
        from batchcheck._cli import engine_env
        # A session of its own, so that the janitor can end it by its group where this process ends
        # without a word; its engine child dies with it (PR_SET_PDEATHSIG, supervise/engine_child).
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=engine_env(),
                                     start_new_session=True)
        if janitor is not None:
            janitor.group(self.proc.pid)
        self.lines = []
        self.quiet = quiet
        self.pumping = threading.Thread(target=self._pump, daemon=True)
        self.pumping.start()

    def _pump(self):
        pump_lines(self.proc.stderr, self.lines, self.quiet)

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



class _Server:
    """Serves the loader's batches to the engine, in the order the engine asks for them: a batch
    of the epoch comes from the live loader iterator (the order it draws is recorded from the
    iterator itself and must match the batch asked for); any other set of samples (the engine's
    probes: a batch of one) is collate_fn([dataset[i] for i in indices]) in this process."""

    def __init__(self, loader, expected, input_key, target_key, janitor=None):
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
        self.first_key = None  # its indices, where the draw was recorded
        self.unpatch = None
        self.exhausted = False
        self.error = None
        self.forward = None  # an _EagerForward or _EagerStep: it runs here (serve), the engine checks what it gives
        self.captures = None  # a step's captures (_capture.py): which one runs each batch, proven per shape
        self.libraries = []  # operator libraries the prepared model calls (torchvision's), for the engine
        self.call = None  # how forward is called on the batch (_prepare.forward_call), for `reproduce`
        self.conns = set()  # open connections (closed with the scan)
        self.closing = False
        # Batches drawn from a live loader before the engine asks (it is loading LibTorch
        # meanwhile, on one core): the loader's workers use the other instead of competing with
        # the engine's steps for both later.
        self.ahead = deque()
        self.ahead_end = False  # the iterator ended while reading ahead
        self.ahead_error = None  # what it raised then
        self.asked = False  # the engine asked for a batch: reading ahead stops
        # The frames of batches whose step (or forward) ran before the engine asked (serve_ahead):
        # by indices, and the order of those drawn for pushing.
        self.prepared = {}
        self.pending = deque()
        self.lock = threading.Lock()
        self.dir = tempfile.mkdtemp(prefix="batchcheck-")
        if janitor is not None:
            janitor.folder(self.dir)
        self.sock_dir = None
        self.path = os.path.join(self.dir, "loader.sock")
        if len(os.fsencode(self.path)) > _SUN_PATH - 1:
            # A TMPDIR too long for a Unix socket's path (108 bytes): the socket alone in a short
            # private folder of its own, under /tmp.
            self.sock_dir = tempfile.mkdtemp(prefix="bc-", dir="/tmp")
            if janitor is not None:
                janitor.folder(self.sock_dir)
            self.path = os.path.join(self.sock_dir, "s")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.workers = []  # the threads spawn() started (serving, reading ahead)
        self._first_fields = None

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
                if self.closing or self.asked:
                    return
                got = self._pull_ahead()
                if got is None:
                    return
                size += _nbytes(got[1])

    def _pull_ahead(self):
        """The live loader's next (indices, batch) appended to `ahead` (the lock held), or None at
        its end or where it failed (the failure raised where the batch is wanted)."""
        if self.ahead_end or self.ahead_error is not None:
            return None
        try:
            got = self.next_live()
        except Exception as e:  # the loader itself failed
            self.ahead_error = e
            return None
        if got is None:
            self.ahead_end = True
            return None
        self.ahead.append(got)
        return got

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
            self.first_key = tuple(idx) if idx is not None else None
            return batch

    def more_fields(self, k):
        """The fields of up to k more of the epoch's batches, drawn now and served in their turn
        (a step that raises on the first batch is traced on the next that loads)."""
        out = []
        with self.lock:
            while len(self.ahead) < k and self._pull_ahead() is not None:
                pass
            for _, batch in list(self.ahead)[:k]:
                if not isinstance(batch, Exception):
                    try:
                        out.append(_fields(batch, self.input_key, self.target_key))
                    except TypeError:
                        continue
        return out

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
        """The batch default_collate makes of a TensorDataset's samples: each tensor's rows (a
        slice where they are consecutive, as a sequential sampler's are: no gather; the step gets
        its own copy of the batch anyway)."""
        n = len(indices)
        first = indices[0] if n else 0
        if n and 0 <= first and first + n <= len(self.tensors[0]) and \
                indices == list(range(first, first + n)):
            return [t[first:first + n] for t in self.tensors]
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
        failure = {"error": "collate", "field": "batch", "message": str(e) or type(e).__name__}
        from torch.utils.data._utils.collate import default_collate
        if self.loader.collate_fn is not default_collate:
            failure["collate"] = "yours"
            rows = self._collate_rows(indices, e)
        else:
            rows = self._odd_shapes(indices)
        if rows:
            failure["rows"] = rows
        return failure

    def _odd_shapes(self, indices, limit=4096):
        """The rows of a batch default_collate could not stack whose samples' shapes differ from
        the most common ones (a 32x32 image among 64x64): the samples it names."""
        if len(indices) > limit:
            return []
        from collections import Counter

        from batchcheck._batch import leaves
        ds = self.loader.dataset
        shapes = [tuple((p, tuple(t.shape)) for p, t in leaves(ds[i], "sample")[0]) for i in indices]
        common, count = Counter(shapes).most_common(1)[0]
        if count * 2 <= len(shapes):  # no shape most samples share: the batch as a whole
            return []
        return [row for row, s in enumerate(shapes) if s != common]

    def _collate_rows(self, indices, e, limit=256):
        """The rows of a batch whose sample alone makes the user's collate_fn raise what the batch
        raised (a label outside its list, a field it cannot read); [] where none does alone (a
        mismatch between samples) or the batch is past `limit` samples."""
        if len(indices) > limit:
            return []
        ds, rows = self.loader.dataset, []
        for row, i in enumerate(indices):
            try:
                self.loader.collate_fn([ds[i]])
            except Exception as one:  # noqa: BLE001 - the user's code: what it raised is the finding's
                if type(one) is type(e) and str(one) == str(e):
                    rows.append(row)
        return rows if len(rows) < len(indices) else []

    def first_fields(self):
        if self._first_fields is None:
            self._first_fields = _fields(self.first, self.input_key, self.target_key)
        return self._first_fields

    def hello(self):
        fields = []
        for name, t in _fields(self.first, self.input_key, self.target_key):
            fields.append({"name": name, "dtype": _dtype(t, name), "shape": list(t.shape[1:])})
        hello = {"samples": len(self.loader.dataset), "fields": fields, "libraries": self.libraries}
        if self.call is not None:
            hello["call"] = self.call
        return hello

    def spawn(self, target, *args):
        """A thread of the scan's, joined by close(): none runs the user's code or torch after
        scan() returns (a thread still inside torch at the interpreter's exit can abort it)."""
        t = threading.Thread(target=target, args=args, daemon=True)
        self.workers.append(t)
        t.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._admit(conn):
                self.spawn(self._serve, conn)
            elif self.closing:
                return

    def _admit(self, conn):
        """Whether an accepted connection is served: its peer is this user's and the server is
        not closing (it is then kept, to be shut on close); else it is closed."""
        if _same_user(conn):
            with self.lock:
                if not self.closing:
                    self.conns.add(conn)
                    return True
        conn.close()
        return False

    def serve_here(self, running):
        """The engine's connection accepted and served on this thread, for an engine in this
        process (it connects once): the user's step then runs where their training runs it, on
        the main thread, with its allocator arena (a thread's own arena maps a CNN's activations
        afresh each batch: twice the page faults) and its OpenMP team. `running()`: whether the
        engine still runs: a connection before its own (an engine process started on a guess of
        the config, then stopped) is served to its end, and the next one accepted, until it ends."""
        self.sock.settimeout(0.05)
        try:
            while not self.closing and running():
                try:
                    conn, _ = self.sock.accept()
                except socket.timeout:
                    continue
                except OSError as e:  # no connection can be taken: the engine's own, waiting, is refused
                    if self.error is None:
                        self.error = e
                    self.shut_listener()
                    return
                conn.settimeout(None)
                if self._admit(conn):
                    self._serve(conn)
        finally:
            try:
                self.sock.settimeout(None)
            except OSError:
                pass

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
                        got = self._next_pending() or self._next_to_push()
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
        except BaseException as e:  # KeyboardInterrupt, SystemExit in the user's step: theirs, raised by scan()
            self.error = e
        finally:
            with self.lock:
                self.conns.discard(conn)
            conn.close()

    def serve_ahead(self, limit=8):
        """The user's step (or forward) run on the epoch's first batches while the engine starts
        (it loads LibTorch and the model first, ~0.2 s), their frames kept until it asks for them
        or takes them pushed: the start overlaps the work instead of preceding it. A thread of its
        own; stops once the engine asks, at the epoch's end, or after `limit` batches."""
        try:
            # The batches drawn before the first that loaded (they failed), and it unless made already.
            keys = [k for k in self.window if k is not None and k not in self.prepared]
            while len(self.prepared) < limit:
                with self.lock:
                    if self.closing or self.asked:
                        return
                    if keys:
                        key = keys.pop(0)
                        batch = self.window[key]
                    else:
                        got = self._next_to_push()
                        if got is None:
                            return
                        key, batch = tuple(got[0]), got[1]
                        self.pending.append(key)
                    self.prepared[key] = self._frames(list(key), batch)
        except BaseException as e:  # noqa: BLE001 - raised by scan() (a KeyboardInterrupt in their step)
            if self.error is None:
                self.error = e

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
        """Sends one batch's frames: made ahead (serve_ahead), or now."""
        key = tuple(indices)
        header, tensors = self.prepared.pop(key, None) or self._frames(indices, batch)
        if key in self.pending:
            self.pending.remove(key)
        if pushed:
            header["pushed"] = list(indices)
        if tensors is None:
            _send(conn, json.dumps(header).encode())
        else:
            _send_batch(conn, json.dumps(header).encode(), tensors)

    def _next_pending(self):
        """The next batch made ahead and not yet sent, as (indices, None), for a push."""
        return (list(self.pending[0]), None) if self.pending else None

    def _frames(self, indices, batch):
        """(header, tensors) of one batch: its fields (with the eager forward's prediction), or
        why it failed (tensors None)."""
        if isinstance(batch, Exception):
            return self._failure(indices, batch), None
        tensors = [(n, t.detach().cpu().contiguous()) for n, t in _fields(batch, self.input_key, self.target_key)]
        if self.forward is not None:
            # A batch whose leaves vary with its size (a tuple of per-sample images, a probe of one
            # sample): the first batch's fields it lacks go empty. Its code runs here on the batch
            # itself; the engine only checks the values there are.
            have = {n for n, _ in tensors}
            tensors += [(n, torch.empty([0] + list(t.shape[1:]), dtype=t.dtype)) for n, t in self.first_fields()
                        if n not in have]
        # Rows that are not samples (a graph's nodes, a flat text), mapped through the batch's own
        # index structure, so that a finding on them names their samples (here and in the engine).
        maps = row_maps(tensors, len(indices))
        forward_error = capture = None
        extra = {}
        if self.forward is not None:  # their model or step, run eagerly here and checked
            pred, extra = self.forward.serve(tensors, len(indices), batch, maps)
            if pred is not None:  # the prediction, or it and aux='s outputs by their field names
                for name, t in (pred.items() if isinstance(pred, dict) else [("batchcheck.prediction", pred)]):
                    tensors.append((name, t.detach().cpu().contiguous()))
        elif self.captures is not None:
            capture, forward_error = self.captures.decide(tuple(indices), tensors)
        tensors += [("batchcheck.rows." + name, rows.contiguous()) for name, rows in maps.items()]
        header = {"fields": [{"name": n, "dtype": _dtype(t, n), "shape": list(t.shape)} for n, t in tensors]}
        if capture is not None and capture != self.captures.saved[0][0]:
            header["capture"] = capture  # another shape's archive, beside the model's
        if forward_error is not None:
            header["forward_error"] = forward_error
        header.update(extra)
        return header, [t for _, t in tensors]

    def shut_listener(self):
        """No more connections: one waiting to be accepted is refused (its engine reads an end)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self):
        # Nothing of the loader runs after this: open connections are shut, and the lock waits
        # for a batch being served or pushed, before the iterator's hook and the RNGs go back.
        self.closing = True
        self.shut_listener()
        for conn in list(self.conns):  # a copy made under the GIL; shut without the lock a push may hold
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.lock:  # the batch being served or pushed is done
            pass
        for t in [self.thread] + self.workers:
            if t.is_alive() and t is not threading.current_thread():
                t.join(timeout=30)
        if self.unpatch:
            self.unpatch()
        try:
            self.sock.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.sock_dir is not None:
                shutil.rmtree(self.sock_dir, ignore_errors=True)
