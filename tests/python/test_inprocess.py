"""The engine in the scanning process (written by the team): where the user's step or model runs
in their process (model.format "eager"), batchcheck.scan() runs the engine there too, on the
LibTorch their torch loaded (python/batchcheck/_inprocess.py). Its report is the supervised
engine's, finding for finding; the user's torch settings (intra-op threads) are theirs during
and after the scan; and a scan it cannot serve (another torch release, a flag only a process of
its own honours, BATCHCHECK_ENGINE=process) runs the engine in its process as before.

Run by ctest with BATCHCHECK_BINARY (the built command) and python/ on PYTHONPATH.
"""
import os
import time
import unittest
import warnings
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import batchcheck
from batchcheck import _inprocess, _session


def loader(bad_label_at=None, nan_at=None, n=70, batch_size=8):
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(n, 6, generator=g), torch.randint(0, 4, (n,), generator=g)
    if bad_label_at is not None:
        y[bad_label_at] = 9
    if nan_at is not None:
        x[nan_at, 2] = float("nan")
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def step(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))


def findings(report):
    """The findings without their timing: id, severity, and each occurrence's batch and samples."""
    return sorted((f.id, f.severity, tuple((o.get("batch"), tuple(o.get("samples") or ())) for o in f.data.get("occurrences", [])))
                  for f in report.findings)


class Unscriptable(nn.Module):
    """Neither scripted (a lambda) nor traced (a string among its outputs): run eagerly. Its first
    forward (the trace's) takes a second: the engine started on the guess has connected by then."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l = nn.Linear(6, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            time.sleep(1.0)
        f = lambda t: self.l(t)  # noqa: E731
        return f(x), "meta"


class Engines:
    """Which engine each scan ran: "here" (the module) or "process" (a supervised process)."""

    def __init__(self):
        self.used = []

    def __enter__(self):
        here, process = _inprocess.Engine, _session._Engine
        used = self.used

        def in_here(*a, **k):
            used.append("here")
            return here(*a, **k)

        def in_process(*a, **k):
            used.append("process")
            return process(*a, **k)
        self.patches = [mock.patch.object(_session._inprocess, "Engine", in_here), mock.patch.object(_session, "_Engine", in_process)]
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in self.patches:
            p.stop()
        return False


class TestTheEngineInThisProcess(unittest.TestCase):
    def scan(self, data, engine=None, **kw):
        env = {"BATCHCHECK_ENGINE": engine} if engine else {}
        with mock.patch.dict(os.environ, env), Engines() as used:
            report = batchcheck.scan(model(), data, step=step, quiet=True, **kw)
        return report, used.used

    def test_the_step_as_written_runs_the_engine_here(self):
        report, used = self.scan(loader())
        self.assertTrue(report.ok, report.text)
        self.assertEqual(used, ["here"])
        self.assertIn("checked 9 batches", report.text)

    def test_its_report_is_the_supervised_engines(self):
        # A class index past the classes in batch 2 (sample 17), a NaN input in batch 5 (sample 41).
        for data in (loader(), loader(bad_label_at=17), loader(nan_at=41)):
            here, used_here = self.scan(data)
            there, used_there = self.scan(data, engine="process")
            self.assertEqual((used_here, used_there), (["here"], ["process"]))
            self.assertEqual(findings(here), findings(there))
            self.assertEqual(here.ok, there.ok)
            self.assertEqual(here.data["batches"], there.data["batches"])
        ids = {f.id: [(o["batch"], o["samples"]) for o in f.data["occurrences"]] for f in here.findings}
        self.assertEqual(ids["input-nonfinite"], [(5, [41])], here.text)
        bad, _ = self.scan(loader(bad_label_at=17))
        self.assertIn((2, [17]), [(o["batch"], o["samples"]) for f in bad.findings for o in f.data["occurrences"]], bad.text)

    def test_the_users_threads_stay_theirs(self):
        before = torch.get_num_threads()
        seen = set()

        def counting(model, batch):
            seen.add(torch.get_num_threads())
            return step(model, batch)
        try:
            torch.set_num_threads(2)
            with Engines() as used:  # 25 steps of a few rows: past where a process's engine paces its threads
                report = batchcheck.scan(model(), loader(n=200), step=counting, quiet=True)
            self.assertEqual(used.used, ["here"])
            self.assertTrue(report.ok, report.text)
            self.assertEqual(seen, {2})
            self.assertEqual(torch.get_num_threads(), 2)
            # The engine's own thread: one intra-op thread, set after LibTorch's own first setting
            # of that thread (to the process's 2), which would otherwise come later and win.
            with Engines() as used:
                report = batchcheck.scan(model(), loader(), step=step, quiet=True, args=["-v"])
            self.assertIn("the engine runs in the scanning process; its checks on 1 intra-op thread of their own", report.text)
            self.assertEqual(torch.get_num_threads(), 2)
        finally:
            torch.set_num_threads(before)

    def test_a_cuda_scan_keeps_its_engine_process(self):
        eager = {"model": {"format": "eager"}}
        self.assertTrue(_inprocess.serves(eager, None, []))
        self.assertTrue(_inprocess.serves(eager, "cpu", []))
        for device in ("cuda", "cuda:1"):
            self.assertFalse(_inprocess.serves(eager, device, []), device)
        self.assertFalse(_inprocess.serves(eager, None, ["--device", "cuda"]))
        self.assertFalse(_inprocess.serves({"model": {"format": "torchscript"}}, None, []))

    def test_what_it_cannot_serve_runs_in_a_process(self):
        # A flag only a supervisor honours, the process asked for, a torch of another release.
        _, used = self.scan(loader(), args=["--batch-timeout", "30"])
        self.assertEqual(used, ["process"])
        _, used = self.scan(loader(), engine="process")
        self.assertEqual(used, ["process"])
        with mock.patch.object(torch, "__version__", "1.0.0"), mock.patch.dict(_inprocess._LIB, clear=True):
            report, used = self.scan(loader(bad_label_at=17))
        self.assertEqual(used, ["process"])
        self.assertFalse(report.ok)
        # the module's check is cached per path: the real torch is served here again
        _, used = self.scan(loader())
        self.assertEqual(used, ["here"])

    def test_its_errors_are_the_commands(self):
        # A flag the command refuses: the same one line, from the engine here or in its process.
        texts = []
        for engine in (None, "process"):
            with self.assertRaises(RuntimeError) as cm:
                self.scan(loader(), engine=engine, args=["--mode", "sideways"])
            texts.append(str(cm.exception))
        self.assertEqual(texts[0], texts[1])
        self.assertEqual(texts[0].splitlines()[-1], 'batchcheck: error: --mode: unknown mode "sideways" (expected train or eval)')

    def test_a_model_run_eagerly_runs_the_engine_here_too(self):
        with Engines() as used:
            report = batchcheck.scan(model(), loader(bad_label_at=17), nn.CrossEntropyLoss(), eager=True, quiet=True)
        self.assertEqual(used.used, ["here"])
        self.assertFalse(report.ok)
        with mock.patch.dict(os.environ, {"BATCHCHECK_ENGINE": "process"}):
            there = batchcheck.scan(model(), loader(bad_label_at=17), nn.CrossEntropyLoss(), eager=True, quiet=True)
        self.assertEqual(findings(report), findings(there))

    def test_a_loaders_worker_processes_beside_the_engine_thread(self):
        # Workers fork when the loader's iterator starts, before the engine's thread does: the
        # batches come back in the sampler's order, the bad label named where it is.
        samples = list(zip(*loader(bad_label_at=17).dataset.tensors))
        data = DataLoader(samples, batch_size=8, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(3))
        with Engines() as used:
            report = batchcheck.scan(model(), data, step=step, quiet=True)
        self.assertEqual(used.used, ["here"])
        # The epoch training runs next is the one scanned (the scan puts the generator back).
        truth = [k for k, (x, y) in enumerate(data) if (y == 9).any()]
        self.assertEqual(len(truth), 1)
        self.assertEqual([(o["batch"], o["samples"]) for f in report.errors() for o in f.data["occurrences"]],
                         [(truth[0], [17])], report.text)

    def test_a_model_torchscript_cannot_take_after_an_engine_process_of_the_first_guess(self):
        # The engine starts on a guess (TorchScript: a process), which the model then refutes: the
        # engine here is served after that process's connection, however far it got.
        for _ in range(2):
            with Engines() as used, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                samples = list(zip(*loader(bad_label_at=17).dataset.tensors))  # a Dataset of theirs: streamed
                report = batchcheck.scan(Unscriptable(), DataLoader(samples, batch_size=8), nn.CrossEntropyLoss(), quiet=True)
            self.assertEqual(used.used, ["process", "here"])
            self.assertEqual([(f.id, [(o["batch"], o["samples"]) for o in f.data["occurrences"]]) for f in report.errors()],
                             [("target-out-of-range", [(2, [17])])], report.text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
