"""The fixes of a loader setting tried before they are printed (issue 60 item 1).

A batch size or drop_last changes which samples meet in a batch: after the engine's report,
the user's own step (or the model and loss, called as the scan called them) runs again here on
the batches the fix would make of the same epoch order: the batches that held the finding's
samples, and the last one. A fix whose batches pass says so (`verified`); one whose batches
still fail is withdrawn; where no batch size is offered for an error that follows the batch's
size (a step asserting `K % batch_size == 0`, an even batch for Mixup), nearby sizes are tried
and the ones that pass are offered. Each run starts from the model as it was (its buffers, its
gradients, every RNG put back).
"""

import time

import torch

# Findings a batch size can change; a value fault (a NaN sample, a bad label) stays in whatever
# batch holds its sample, so trying sizes for those would find nothing.
_SIZE_FINDINGS = {"forward-error", "loss-error", "backward-error", "batchnorm-single-value", "hardcoded-batch-size",
                  "batch-dim-mismatch", "shape-mismatch", "batch-unchecked"}
_MAX_RUNS = 64          # batches run in all, over every fix tried
_MAX_SECONDS = 20.0     # and the time they may take (a large model's step), at most a tenth of the scan's beyond 2 s
_MAX_SIZES = 3          # sizes offered by a new batch-size fix
_MAX_AFFECTED = 3       # failing batches of a finding whose samples are run again
_MAX_CANDIDATES = 8     # sizes tried for an error at every batch (a size that is not its cause fails at once)


class _Runner:
    """Runs one batch (a list of dataset indices) as the scan ran it; returns None where it
    passes, else why not."""

    def __init__(self, model, loader, o, call, output, seconds=_MAX_SECONDS):
        self.model, self.loader, self.o, self.call, self.output = model, loader, o, call, output
        self.runs = 0
        self.started = time.monotonic()
        self.seconds = seconds

    def spent(self):
        return self.runs >= _MAX_RUNS or time.monotonic() - self.started > self.seconds

    def __call__(self, idx, remap=None):
        """remap: (label, class), the targets' label mapped before the loss."""
        from batchcheck import _capture
        self.runs += 1
        grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in self.model.parameters()]
        # A step may write its weights (a momentum encoder's update under no_grad): put back too.
        weights = [(p, p.detach().clone()) for p in self.model.parameters()]
        half = _capture.HALF_DTYPES.get(self.o.precision)
        try:
            batch = self.loader.collate_fn([self.loader.dataset[i] for i in idx])
            with _capture.untouched(self.model, self.o.mode), _capture._quiet():
                device = next((p.device.type for p in self.model.parameters()), "cpu")
                with torch.autocast(device, dtype=half, enabled=half is not None):
                    loss = self._loss(batch, remap)
                if loss is not None and self.o.mode == "train" and loss.requires_grad:
                    loss.backward()
            if loss is not None and not bool(torch.isfinite(loss.detach()).all()):
                return "the loss is %s" % float(loss.detach().float().flatten()[0])
            return None
        except Exception as e:  # noqa: BLE001 - the user's code: what it raises is the answer
            return "%s: %s" % (type(e).__name__, (str(e).strip().splitlines() or [""])[0])
        finally:
            with torch.no_grad():
                for p, w in weights:
                    p.copy_(w)
            for p, g in grads:
                p.grad = g

    def _loss(self, batch, remap):
        o = self.o
        if o.step is not None:
            return o.step(self.model, batch)
        ns = {"model": self.model, "batch": batch}
        out = eval(self.call["forward"], ns)  # noqa: S307 - batchcheck's own code for the user's batch
        if self.call.get("select"):
            out = eval(self.call["select"], {"out": out})  # noqa: S307
        elif self.output is not None:
            out = out[self.output]
        if o.loss == "model":
            return sum(out.values()) if isinstance(out, dict) else out
        if o.loss is None or not callable(o.loss):
            return None
        targets = eval(self.call["targets"], ns)  # noqa: S307
        if remap is not None and isinstance(targets, torch.Tensor):
            targets = targets.masked_fill(targets == remap[0], remap[1])
        return o.loss(out, targets)


def _chunks(flat, b):
    return [flat[k:k + b] for k in range(0, len(flat), b)]


def _batches_for(flat, b, samples):
    """The batches of size b (of the same epoch order) that hold `samples`, and the last."""
    chunks = _chunks(flat, b)
    where = {s: k for k, chunk in enumerate(chunks) for s in chunk}
    picked = sorted({where[s] for s in samples if s in where} | ({len(chunks) - 1} if chunks else set()))
    return [(k, chunks[k]) for k in picked]


def _try_size(run, flat, b, samples):
    """(passes, what ran): the batches of size b that hold the samples, and the last one; passes
    is None where the budget ran out before they all ran (not known)."""
    ran = []
    for k, chunk in _batches_for(flat, b, samples):
        if run.spent():
            return None, ran
        why = run(chunk)
        if why is not None:
            return False, ran
        ran.append((k, len(chunk)))
    return bool(ran), ran


def _said(ran, b, n_batches):
    last = [size for k, size in ran if k == n_batches - 1]
    held = [k for k, _ in ran if k != n_batches - 1]
    parts = (["batch %d" % held[0] if len(held) == 1 else "the %d batches" % len(held)] if held else []) + \
        (["the last batch (%d samples)" % last[0]] if last else [])
    return "ran with batch_size=%d: %s of the same epoch order%s pass" % (
        b, " and ".join(parts), ", holding the finding's samples," if held else "")


def try_fixes(data, model, loader, order, o, call, output, scan_seconds=None):
    """Tries the findings' loader fixes (batch sizes, drop_last), filters and label maps on the
    user's own code; edits `data` (the report's JSON). Returns the lines that say what was tried."""
    flat = [i for idx in order for i in idx]
    b0 = loader.batch_size
    if not flat or not b0 or getattr(loader, "sampler", None) is None:
        return []
    named_at = {}  # batch -> (samples the error findings name there, how many findings)
    for f in data.get("findings", []):
        if f.get("severity") == "error":
            for occ in f.get("occurrences", []):
                if occ.get("batch") is not None:
                    samples, count = named_at.get(occ["batch"], (set(), 0))
                    named_at[occ["batch"]] = (samples | set(occ.get("samples", [])), count + 1)
    seconds = _MAX_SECONDS if scan_seconds is None else min(_MAX_SECONDS, max(2.0, 0.1 * scan_seconds))
    run = _Runner(model, loader, o, call or {}, output, seconds)
    said, started = [], time.monotonic()
    n_batches = len(order)
    searches = []
    for f in data.get("findings", []):
        # An error a batch size can change gets its loader fixes tried, and sizes searched; any
        # other finding's batch sizes (a tail's advice) are tried on the step all the same.
        sized = f.get("severity") == "error" and f.get("id") in _SIZE_FINDINGS and not f.get("probe")
        failing = list(f.get("batches") or ([] if f.get("batch") is None else [f["batch"]]))
        samples = [s for occ in f.get("occurrences", [])[:_MAX_AFFECTED] for s in occ.get("samples", [])] or \
            list(f.get("samples", []))
        if not (sized and failing) and not any(x.get("id") == "batch-size-divisor" and x.get("batch_sizes")
                                               for x in f.get("fixes", [])) and \
                not (f.get("severity") == "error" and any(x.get("id") in _FILTERS | {"remap-labels"}
                                                          for x in f.get("fixes", []))):
            continue
        f["fixes"] = [fix for fix in f.get("fixes", [])
                      if _tried(fix, f, sized, failing, samples, run, flat, order, b0, said)]
        if f.get("severity") == "error":
            model_loss = o.step is None and callable(o.loss) and bool((call or {}).get("targets"))
            kept = []
            for fix in f["fixes"]:
                if _tried_on_the_batch(fix, f, run, order, model_loss, named_at) is False:
                    said.append("%s: %s withdrawn: the batch still fails with it applied" % (f["id"], fix["id"]))
                    continue
                kept.append(fix)
            f["fixes"] = kept
        if sized and not any(x.get("id") == "batch-size-divisor" for x in f["fixes"]) and _follows_size(f, n_batches):
            searches.append((f, samples))
    # Then, with what is left of the budget, sizes for the errors that follow the batch's size.
    for f, samples in searches:
        found = _search_sizes(run, flat, b0, samples)
        if found:
            b, ran = found[0]
            sizes = [x for x, _ in found]
            fix = {"id": "batch-size-divisor",
                   "title": "a batch size your code runs with: %s (tried on the batches that failed)" % (
                       ", ".join(map(str, sizes))),
                   "code": "DataLoader(..., batch_size=%d)" % b,
                   "tradeoff": "changes the effective batch size (retune the learning rate); `batchcheck suggest "
                               "--divides K` or `--multiple-of M` lists the sizes a constraint of your step allows",
                   "batch_sizes": sizes,
                   "verified": _said(ran, b, len(_chunks(flat, b)))}
            at = next((k for k, x in enumerate(f["fixes"]) if x.get("id") == "reproduce"), len(f["fixes"]))
            f["fixes"].insert(at, fix)
    for f in data.get("findings", []):
        for fix in f.get("fixes", []):
            if fix.get("verified"):
                said.append("%s: %s verified: %s" % (f["id"], fix["id"], fix["verified"]))
    if run.runs:
        said.append("%d batch%s of your code run to try them (%.1f s)" % (
            run.runs, "" if run.runs == 1 else "es", time.monotonic() - started))
    return said


def _tried(fix, f, sized, failing, samples, run, flat, order, b0, said):
    """Whether the fix stays: drop_last where the last batch alone failed; a batch size where
    its batches pass (or were not reached within the budget). Edits the fix with what ran."""
    n_batches = len(order)
    if fix.get("id") == "drop-last" and sized:
        # The other batches ran in the scan: drop_last trains where the last batch alone failed.
        if failing == [n_batches - 1] and len(order[-1]) < b0:
            fix["verified"] = ("with drop_last=True the last batch (%d samples) is not delivered; it was the only "
                               "batch that failed" % len(order[-1]))
            return True
        said.append("%s: drop-last withdrawn: batches %s fail, not only the last" % (f["id"], failing[:8]))
        return False
    if fix.get("id") != "batch-size-divisor" or not fix.get("batch_sizes"):
        return True
    good, bad, untried = [], [], []
    for b in fix["batch_sizes"]:
        ok, ran = _try_size(run, flat, b, samples)
        (good if ok else untried if ok is None else bad).append((b, ran))
    if not good and not untried:
        said.append("%s: batch-size-divisor withdrawn: batch_size=%s fails your code" % (
            f["id"], "/".join(str(b) for b, _ in bad)))
        return False
    if bad:  # only the sizes not seen to fail are offered
        fix["tradeoff"] = "changes the effective batch size (retune the learning rate); %s fail%s your code" % (
            ", ".join(str(b) for b, _ in bad), "s" if len(bad) == 1 else "")
    first = good[0][0] if good else untried[0][0]
    fix["batch_sizes"] = [b for b, _ in good + untried]
    fix["code"] = "DataLoader(..., batch_size=%d)" % first
    if good:
        fix["verified"] = _said(good[0][1], first, len(_chunks(flat, first)))
    return True


# Fixes that drop the finding's samples (the data cleaned, empty samples dropped, the unalignable
# or badly indexed filtered out): tried by running each failing batch without them.
_FILTERS = {"clean-data", "drop-empty-samples", "ctc-lengths", "filter-indices", "filter-degenerate-boxes",
            "drop-failing-samples", "filter-blank-targets"}


def _tried_on_the_batch(fix, f, run, order, model_loss, named_at):
    """A filter or a label map, run on the failing batches (the first few) with it applied: the
    batch without the finding's samples, or with its label mapped to class 0 (a loss of the
    scan's own, whose targets batchcheck reads). True: it passed (fix["verified"] says how);
    False: a batch still fails (the fix is withdrawn); None: not tried."""
    occurrences = [o for o in f.get("occurrences", []) if o.get("batch") is not None][:_MAX_AFFECTED]
    if not occurrences or fix.get("id") not in _FILTERS | {"remap-labels"}:
        return None
    remap = None
    if fix["id"] == "remap-labels":
        ev = f.get("evidence", {})
        values = ev.get("offending_values") or ([ev["index_fault"]["value"]] if "index_fault" in ev else [])
        if not model_loss or not values or not isinstance(values[0], (int, float)):
            return None
        remap = (int(values[0]), 0)
    ran = []
    for o in occurrences:
        if run.spent():
            return None
        idx = list(order[o["batch"]])
        named, others = named_at.get(o["batch"], (set(), 0))
        if remap is None:
            # Every sample an error finding names at that batch: another fault there is its own.
            idx = [i for i in idx if i not in named | set(o.get("samples", []))]
            if not idx:
                continue
        elif others > 1:
            continue  # another error at that batch: the label alone cannot make it pass
        if run(idx, remap) is not None:
            return False
        ran.append(o["batch"])
    if not ran:
        return None
    where = "batch %d" % ran[0] if len(ran) == 1 else "batches %s" % ", ".join(map(str, ran))
    fix["verified"] = ("%s ran with the label %d mapped to class 0 (any class the model has)" % (where, remap[0])
                       if remap else "%s ran without the samples this finding names" % where) + ": they pass"
    return True


def _follows_size(f, n_batches):
    """An error at every batch: the batch's size, not a sample, is what the code refuses (a
    divisibility assert fails every batch)."""
    batches = f.get("batches") or []
    return n_batches > 0 and len(batches) >= n_batches


def _search_sizes(run, flat, b0, samples):
    """Sizes near b0 whose batches (those holding the samples, and the last) pass: [(b, ran)]."""
    import math
    found, n = [], len(flat)
    # The sizes people pick (powers of two), then the divisors of the epoch, then the nearest.
    powers = sorted((1 << k for k in range(1, 20) if 2 <= (1 << k) <= min(n, 4 * b0)),
                    key=lambda b: abs(math.log(b / b0)))
    divisors = sorted((b for b in range(2, min(n, 4 * b0) + 1) if n % b == 0), key=lambda b: abs(b - b0))
    near = [b for d in range(1, b0) for b in (b0 - d, b0 + d) if 2 <= b <= n]
    candidates = []
    for b in powers + divisors + near:
        if b != b0 and b not in candidates:
            candidates.append(b)
    for b in candidates[:_MAX_CANDIDATES]:
        if run.spent() or len(found) >= _MAX_SIZES:
            break
        tail = len(flat) % b
        if tail == 1:
            continue  # a batch of one: the tail fault batchcheck steers away from
        ok, ran = _try_size(run, flat, b, samples)
        if ok:
            found.append((b, ran))
    return found

