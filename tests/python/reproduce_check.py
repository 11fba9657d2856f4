"""Every `reproduce` a scan of the test suite prints is run as printed (issue 60 item 2).

Imported by each Python test file before its tests: batchcheck.scan is wrapped so that, after a
scan returns its report, each finding's `reproduce` code runs in a namespace holding only what
its "needs" note names (the Dataset as `dataset`, a copy of the model as `model`, the step as
`step`, the loader as `loader`, the loss as `loss_fn`, the collate as `collate_fn`), with the
RNG forked so the test's own sequence is unchanged. A reproduce must raise the error its finding
names (the evidence's error text), or, for a finding of values, run and show them: a NaN or Inf
where it names one. Anything else fails the scan's test with the code in the message.
"""
import copy
import functools
import linecache
import os
import re
import traceback

import torch

import batchcheck
import batchcheck.api

# Findings whose reproduce shows a value rather than an error.
_NONFINITE = {"input-nonfinite", "target-nonfinite", "output-nonfinite", "loss-nonfinite", "gradient-nonfinite",
              "model-nonfinite"}

# Findings of an error training raises, whose evidence may word it as batchcheck stopped it.
_ERRORS = {"forward-error", "loss-error", "backward-error", "collate-error", "sample-unreadable"}

# Findings of a contract (shapes, a batch of one, values a loss takes) that one library's op
# raises on and another's does not: the reproduce may raise, with the op's own words.
_CONTRACTS = {"shape-mismatch", "batch-dim-mismatch", "hardcoded-batch-size", "batchnorm-single-value",
              "target-out-of-range", "target-dtype", "output-out-of-range"}

ran = []  # (finding id, outcome) of every reproduce run, for the suite's own count


def _tensors(x, depth=0):
    if isinstance(x, torch.Tensor):
        yield x
    elif depth < 6 and isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v, depth + 1)
    elif depth < 6 and isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v, depth + 1)
    elif depth < 6 and hasattr(x, "__dict__") and not isinstance(x, (torch.nn.Module, type)):
        for v in vars(x).values():
            yield from _tensors(v, depth + 1)


def _nonfinite_shown(ns, model):
    for name in ("batch", "x", "y", "out", "outs", "loss"):
        for t in _tensors(ns.get(name)):
            if t.is_floating_point() and not bool(torch.isfinite(t.detach()).all()):
                return True
    for p in model.parameters():
        for t in (p, p.grad):
            if t is not None and t.is_floating_point() and not bool(torch.isfinite(t.detach()).all()):
                return True
    return False


def _names_the_error(named, e):
    """Whether exception e is the error the finding names: raised at the line of the user's code
    it names (`File "...", line N`: batchcheck stops an op before it runs and says where), else
    with PyTorch's words that the finding quotes."""
    where = re.search(r'File "([^"]+)", line (\d+)', named)
    if where is not None:
        path, line = os.path.realpath(where.group(1)), int(where.group(2))
        frames = traceback.extract_tb(e.__traceback__)
        return any(os.path.realpath(fr.filename) == path and fr.lineno == line for fr in frames)
    text = _first_line(str(e))
    if named[:40] in str(e) or text[:40] in named:
        return True
    # An extra output forward does not return: the reproduce reads it as the loop does (outs[7]).
    if named.strip("\"'").startswith("aux= names the output") and re.match(r"out_\w+ = outs\[", _raised_at(e)):
        return True
    # An op batchcheck stopped before it ran, named without a line of the user's (a library's
    # forward): the exception comes through the op's own Python function (F.embedding).
    op = re.search(r"aten::(\w+)", named)
    return op is not None and any(fr.name == op.group(1) for fr in traceback.extract_tb(e.__traceback__))


def _raised_at(e):
    """The line of the reproduce's own code that raised."""
    lines = [fr.line or "" for fr in traceback.extract_tb(e.__traceback__) if fr.filename.startswith("<reproduce")]
    return lines[-1] if lines else ""


def _first_line(text):
    return text.strip().splitlines()[0] if text and text.strip() else ""


paused = []  # a test that counts its Dataset's reads pauses the check (paused.append(1))


def check(report, model, loader, step=None, loss=None):
    """Runs every reproduce of the report; raises AssertionError naming the first that misleads."""
    for f in report.findings:
        for fix in f.fixes:
            if fix.get("id") != "reproduce":
                continue
            try:
                twin = copy.deepcopy(model)
            except Exception:  # noqa: BLE001 - a model that cannot be copied runs as it is
                twin = model
            ns = {"dataset": loader.dataset, "model": twin, "loader": loader, "step": step, "loss_fn": loss,
                  "collate_fn": loader.collate_fn}
            # A batch not checked names why it was not, not an error training raises.
            named = "" if f.id == "batch-unchecked" else _first_line(str(f.data.get("evidence", {}).get("error", "")))
            # A finding that says where training raises, or quotes what PyTorch raises, names that error.
            if not named and (f.id in _ERRORS or "training raises there" in f.message or "PyTorch raises" in f.message):
                named = f.message
            with torch.random.fork_rng(devices=[]):
                try:
                    name = "<reproduce of %s>" % f.id
                    linecache.cache[name] = (len(fix["code"]), None, fix["code"].splitlines(True), name)  # its lines in tracebacks
                    exec(compile(fix["code"], name, "exec"), ns)  # noqa: S102 - the test's point
                except Exception as e:  # noqa: BLE001 - what the user would see
                    got = "%s: %s" % (type(e).__name__, _first_line(str(e)))
                    broken = isinstance(e, (NameError, SyntaxError, ImportError))
                    if broken or (named and not _names_the_error(named, e)) or (not named and f.id not in _CONTRACTS):
                        raise AssertionError("the reproduce of %s raised %s, but the finding names %r:\n%s"
                                             % (f.id, got, named or f.message, fix["code"])) from None
                    ran.append((f.id, "raised"))
                    continue
            if named:
                raise AssertionError("the reproduce of %s ran, but the finding names the error %r:\n%s"
                                     % (f.id, named, fix["code"]))
            if f.id in _NONFINITE and not _nonfinite_shown(ns, twin):
                raise AssertionError("the reproduce of %s ran and showed no NaN or Inf:\n%s" % (f.id, fix["code"]))
            ran.append((f.id, "ran"))


def _wrap(scan):
    @functools.wraps(scan)
    def checked(model, loader, loss=None, *args, **kwargs):
        report = scan(model, loader, loss, *args, **kwargs)
        step = kwargs.get("step")
        if not paused and isinstance(report, batchcheck.Report) and hasattr(loader, "dataset") and isinstance(model, torch.nn.Module):
            check(report, model, loader, step=step, loss=loss if callable(loss) else None)
        return report
    checked.unwrapped = scan
    return checked


if not hasattr(batchcheck.scan, "unwrapped"):
    batchcheck.scan = batchcheck.api.scan = _wrap(batchcheck.api.scan)


def _tell():
    import sys
    raised = sum(1 for _, how in ran if how == "raised")
    sys.stderr.write("reproduce_check: %d reproduce run as printed (%d raised the error named, %d showed the values)\n"
                     % (len(ran), raised, len(ran) - raised))


import atexit  # noqa: E402 - the count is told when the test file ends

atexit.register(_tell)
