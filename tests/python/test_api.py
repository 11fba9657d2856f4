"""batchcheck.scan() on the user's own DataLoader objects (their sampler, collate_fn, transforms,
workers), each verdict compared with what the real training loop does on the same loader.

Run by ctest with BATCHCHECK_BINARY (the built command) and python/ on PYTHONPATH; or against
an installed package: python tests/python/test_api.py.
"""
import json
import os
import sys
import tempfile
import time
import unittest
import warnings

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import batchcheck
import reproduce_check  # noqa: F401 - every reproduce a scan here prints is run as printed


class Pairs(Dataset):
    """(image, class) pairs; `nan` samples hold a NaN pixel, `labels` overrides some classes.
    A transform runs per sample, as a torchvision transform would."""

    def __init__(self, n, nan=(), labels=None, transform=None, classes=4):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 3, 8, 8, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        for i in nan:
            self.x[i, 0, 0, 0] = float("nan")
        for i, c in (labels or {}).items():
            self.y[i] = c
        self.transform = transform

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        return (self.transform(x) if self.transform else x), self.y[i]


def flip(x):
    return torch.flip(x, dims=[2])


def collate_as_float(batch):  # the user's own collate_fn
    xs, ys = zip(*batch)
    return torch.stack(xs).float(), torch.stack(ys)


class Net(nn.Module):
    def __init__(self, bn=False):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm1d(4) if bn else nn.Identity()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.conv(x).mean(dim=(2, 3))
        return self.fc(self.bn(h))


def real_epoch(loader):
    """The batches the training loop sees: (indices in the dataset, batch)."""
    return [b for b in loader]


def first_error(model, loader, loss):
    """Where the eager training loop raises: (batch number, message), or None."""
    model.train()
    for k, (x, y) in enumerate(loader):
        try:
            loss(model(x), y).backward()
        except (RuntimeError, ValueError, IndexError) as e:
            return k, str(e)
    return None


def ids(report, severity=None):
    return [f.id for f in report.findings if severity is None or f.severity == severity]


class TestScan(unittest.TestCase):
    def test_nan_samples_named_at_the_batches_the_loop_delivers_them(self):
        # Enough batches that two workers draw ahead of what they deliver.
        torch.manual_seed(7)
        nan = [13, 77, 150]
        ds = Pairs(200, nan=nan, transform=flip)
        loader = DataLoader(ds, batch_size=6, shuffle=True, num_workers=2, collate_fn=collate_as_float)
        report = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertFalse(report.ok)
        named = {}
        for f in report.findings:
            if f.id == "input-nonfinite":
                for o in f.data["occurrences"]:  # one finding, every batch it happened at
                    named.update({s: o["batch"] for s in o["samples"]})
        # The epoch training runs next is the one scanned (the RNGs were restored): each NaN
        # sample, told apart by its pixels, is in the batch the report names.
        truth = {}
        for k, (x, _) in enumerate(real_epoch(loader)):
            for row in torch.nonzero(torch.isnan(x).flatten(1).any(1)).flatten().tolist():
                i = [i for i in nan if torch.equal(torch.nan_to_num(x[row]), torch.nan_to_num(flip(ds.x[i])))]
                truth[i[0]] = k
        self.assertEqual(sorted(truth), nan)
        self.assertEqual(named, truth)

    def test_label_255_is_the_error_cross_entropy_raises(self):
        ds = Pairs(20, labels={17: 255})
        loader = DataLoader(ds, batch_size=8)
        truth = first_error(Net(), loader, nn.CrossEntropyLoss())
        self.assertIsNotNone(truth)
        report = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(), quiet=True)
        hit = [f for f in report.findings if f.id == "target-out-of-range"]
        self.assertTrue(hit, report.findings)
        self.assertEqual((hit[0].batch, hit[0].samples), (truth[0], [17]))
        # ignore_index=255 is what segmentation trains with: then nothing is out of range.
        ok = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(ignore_index=255), quiet=True)
        self.assertNotIn("target-out-of-range", ids(ok))

    def test_last_batch_of_one_through_batchnorm_fails_like_training(self):
        ds = Pairs(17)
        loader = DataLoader(ds, batch_size=8)
        torch.manual_seed(0)
        truth = first_error(Net(bn=True), loader, nn.CrossEntropyLoss())
        self.assertEqual(truth[0], 2)
        self.assertIn("Expected more than 1 value per channel", truth[1])
        report = batchcheck.scan(Net(bn=True), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertFalse(report.ok)
        hit = [f for f in report.findings if f.id == "batchnorm-single-value" and f.severity == "error"]
        self.assertTrue(hit, report.findings)
        self.assertEqual((hit[0].batch, hit[0].samples), (2, [16]))
        # drop_last, the fix the report gives, passes.
        fixed = batchcheck.scan(Net(bn=True), DataLoader(ds, batch_size=8, drop_last=True), nn.CrossEntropyLoss(), quiet=True)
        self.assertTrue(fixed.ok, fixed.text)

    def test_eager_forward_is_checked_like_the_engines(self):
        # The model stays in this process (eager=True: what a model TorchScript can neither
        # script nor trace gets); the engine checks what it returns. The same verdicts as above.
        ds = Pairs(17, nan=[3], labels={9: 255})
        model = Net(bn=True)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        report = batchcheck.scan(model, DataLoader(ds, batch_size=8), nn.CrossEntropyLoss(), eager=True, quiet=True)
        self.assertTrue(any(n.startswith('model.format "eager"') for n in report.data["notes"]), report.data["notes"])
        errors = {(f.id, f.batch): f.samples for f in report.findings if f.severity == "error"}
        self.assertEqual(errors[("input-nonfinite", 0)], [3])
        self.assertEqual(errors[("target-out-of-range", 1)], [9])
        self.assertEqual(errors[("batchnorm-single-value", 2)], [16])  # their BatchNorm raised, here
        # The scan ran a copy: the user's BatchNorm statistics did not move.
        for k, v in model.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)

    def test_aux_outputs_are_checked_on_the_eager_path_as_in_the_engine(self):
        # Inception's kind: forward returns (logits, aux logits), the loss sums both. The aux head
        # turns NaN for sample 11 alone; eagerly or in the engine, the same finding.
        class TwoHeads(nn.Module):
            def __init__(self):
                super().__init__()
                self.net, self.aux = Net(), nn.Linear(3, 4)

            def forward(self, x):
                pooled = x.mean(dim=(2, 3))
                return self.net(x), self.aux(torch.log(pooled - 0.2))  # NaN where a mean is below 0.2

        ds = Pairs(17)
        ds.x[11] *= 0.01
        loader = DataLoader(ds, batch_size=8)
        found = {}
        for eager in (True, None):
            report = batchcheck.scan(TwoHeads(), loader, nn.CrossEntropyLoss(), output=0, aux={"1": 0.4}, eager=eager,
                                     quiet=True)
            found[eager] = sorted((f.id, f.batch, tuple(f.samples)) for f in report.findings if f.severity == "error")
            self.assertIn(("output-nonfinite", 1, (11,)), found[eager], report.text)
            self.assertIn('output "1"', " ".join(f.message for f in report.findings), report.text)
        self.assertEqual(found[True], found[None])
        # An output forward does not return: each batch's forward error says what there is.
        r = batchcheck.scan(TwoHeads(), loader, nn.CrossEntropyLoss(), output=0, aux={"7": 0.4}, eager=True, quiet=True)
        self.assertEqual(ids(r, "error"), ["forward-error"], r.text)
        self.assertIn("aux= names the output '7', but forward returns a tuple of 2", r.errors()[0].message)

    def test_a_libtorch_crash_is_a_finding_and_the_scan_goes_on(self):
        # The engine child crashes at batch 1 (a fault injected into the engine, as the
        # supervisor's own tests do); a fresh child connects again and asks for the rest, which
        # the stream serves from the batches the live loader already delivered (some pushed to
        # the dead child). The NaN sample after the crash is still named at its batch.
        torch.manual_seed(3)
        ds = Pairs(40, nan=[29])
        loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=1)
        os.environ["BATCHCHECK_TEST_FAULT"] = "step:1:SEGV"
        try:
            report = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(), quiet=True)
        finally:
            del os.environ["BATCHCHECK_TEST_FAULT"]
        errors = {f.id: (f.batch, f.samples) for f in report.errors()}
        self.assertEqual(errors["forward-crash"][0], 1, report.text)
        truth = [k for k, (x, _) in enumerate(real_epoch(loader)) if torch.isnan(x).any()]
        self.assertGreater(truth[0], 1)  # after the crash
        self.assertEqual(errors["input-nonfinite"], (truth[0], [29]))
        self.assertEqual(report.data["batches"]["checked"], 10)

    def test_the_engine_waits_for_a_slow_model_preparation(self):
        # The engine starts before the model is scripted and saved (it loads LibTorch meanwhile),
        # and waits for the stream's greeting: a slow preparation is waited for, not a failure.
        # Meanwhile the loader's batches are read ahead (here: all of them, with its workers): they
        # are served in the epoch's order, the findings at the batches the loop delivers them.
        from batchcheck import _session, _stream
        prepare, read_ahead = _session._engine_model, _stream._Server.read_ahead
        drawn = []

        def slow(*a, **k):
            time.sleep(2)
            return prepare(*a, **k)

        def counted(server):
            read_ahead(server)
            drawn.append((len(server.ahead), server.ahead_end))
        _session._engine_model, _stream._Server.read_ahead = slow, counted
        try:
            torch.manual_seed(5)
            ds = Pairs(17, nan=[6, 11])
            loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
            report = batchcheck.scan(Net(bn=True), loader, nn.CrossEntropyLoss(), quiet=True)
        finally:
            _session._engine_model, _stream._Server.read_ahead = prepare, read_ahead
        self.assertEqual(drawn, [(4, True)])  # the 4 after the first, then the end
        truth = {}
        for k, (x, _) in enumerate(real_epoch(loader)):
            for row in torch.nonzero(torch.isnan(x).flatten(1).any(1)).flatten().tolist():
                truth[[i for i in (6, 11) if torch.equal(torch.nan_to_num(x[row]), torch.nan_to_num(ds.x[i]))][0]] = k
        named = {s: o["batch"] for f in report.findings if f.id == "input-nonfinite"
                 for o in f.data["occurrences"] for s in o["samples"]}
        self.assertEqual(named, truth, report.text)
        self.assertIn(("batchnorm-single-value", 4), [(f.id, f.batch) for f in report.errors()])

    def test_the_engine_starts_before_the_first_batch_and_again_for_other_fields(self):
        # It starts on the guess (inputs, targets); a batch of other fields ("labels") starts it again.
        from batchcheck import _session
        commands = []
        engine = _session._Engine

        class Seen(engine):
            def __init__(self, cmd, quiet, janitor=None):
                super().__init__(cmd, quiet, janitor)
                with open(cmd[2]) as f:
                    commands.append(json.load(f)["data"])

        def as_dict(batch):
            x, y = collate_as_float(batch)
            return {"inputs": x, "labels": y}
        _session._Engine = Seen
        try:
            kept = batchcheck.scan(Net(), DataLoader(Pairs(20, labels={13: 9}), batch_size=8), nn.CrossEntropyLoss(), quiet=True)
            self.assertEqual(len(commands), 1)
            again = batchcheck.scan(Net(), DataLoader(Pairs(20, labels={13: 9}), batch_size=8, collate_fn=as_dict),
                                    nn.CrossEntropyLoss(), quiet=True)
        finally:
            _session._Engine = engine
        self.assertEqual(len(commands), 3)
        self.assertNotIn("targets", commands[1])
        self.assertEqual(commands[2]["targets"], "labels")
        for report in (kept, again):
            self.assertEqual([(f.id, f.batch, f.samples) for f in report.errors()], [("target-out-of-range", 1, [13])])

    def test_batches_read_ahead_are_served_from_the_loader_even_out_of_order(self):
        # --edges asks for the last batch second; it was read ahead already (the model's
        # preparation is slow): it must be the one the loader's workers made, not made again here.
        from batchcheck import _session, _stream
        prepare = _session._engine_model

        class Counted(Pairs):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                self.here = os.getpid()
                self.calls = 0  # in this process only: a worker counts on its own copy

            def __getitem__(self, i):
                if os.getpid() == self.here:
                    self.calls += 1
                return super().__getitem__(i)

        def slow(*a, **k):
            time.sleep(1.5)
            return prepare(*a, **k)
        ds = Counted(120, nan=[117])  # 15 batches: the last is past the 4 pushed behind the first
        _session._engine_model = slow
        reproduce_check.paused.append(1)  # its reproduce would read the Dataset this test counts
        try:
            report = batchcheck.scan(Net(), DataLoader(ds, batch_size=8, num_workers=2), nn.CrossEntropyLoss(), quiet=True,
                                     args=["--edges"], try_fixes=False)  # the fixes tried would read it too
        finally:
            _session._engine_model = prepare
            reproduce_check.paused.clear()
        self.assertEqual([(f.id, f.batch, f.samples) for f in report.errors() if f.id == "input-nonfinite"], [("input-nonfinite", 14, [117])])
        self.assertEqual(ds.calls, 1)  # the probe's batch of one, nothing else (8 more: batch 14 made again here)
        # A live loader's stream runs as one job, whatever --jobs says.
        report = batchcheck.scan(Net(), DataLoader(ds, batch_size=8, num_workers=1), nn.CrossEntropyLoss(), quiet=True,
                                 args=["--jobs", "2"])
        self.assertEqual(report.data["batches"]["checked"], 15, report.text)
        # Without workers nothing is read ahead (their Dataset would run beside the model's preparation).
        started = []
        read_ahead = _stream._Server.read_ahead
        _stream._Server.read_ahead = lambda server: started.append(1)
        try:
            batchcheck.scan(Net(), DataLoader(ds, batch_size=8), nn.CrossEntropyLoss(), quiet=True)
        finally:
            _stream._Server.read_ahead = read_ahead
        self.assertEqual(started, [])

    def test_their_collate_fn_raising_is_the_batch_collate_error(self):
        def picky(batch):
            if len(batch) < 4:
                raise ValueError("picky collate: a batch of %d" % len(batch))
            return collate_as_float(batch)
        loader = DataLoader(Pairs(10), batch_size=4, collate_fn=picky)
        report = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(), quiet=True)
        hit = [f for f in report.findings if f.id == "collate-error"]
        self.assertTrue(hit, report.findings)
        self.assertEqual((hit[0].batch, hit[0].samples), (2, [8, 9]))
        self.assertIn("picky collate: a batch of 2", json.dumps(hit[0].data))

    def test_clean_loader_report_object(self):
        loader = DataLoader(Pairs(16), batch_size=8, shuffle=True, num_workers=1)
        report = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertTrue(report.ok, report.text)
        self.assertEqual(ids(report, "error"), [])
        self.assertEqual(json.loads(report.to_json())["verdict"], report.data["verdict"])
        with tempfile.TemporaryDirectory() as tmp:
            page = report.html(os.path.join(tmp, "report.html"))
            with open(page) as f:
                self.assertIn("<html", f.read())

    def test_the_log_of_a_scan_names_the_models_warning_and_each_batch(self):
        class Warns(nn.Module):  # scripted: the warning stays in the graph
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 4)

            def forward(self, x):
                if x.shape[0] < 8:
                    warnings.warn("a batch of fewer than 8")
                return self.fc(x.mean(dim=(2, 3)))

        loader = DataLoader(Pairs(20), batch_size=8)
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "scan.jsonl")
            report = batchcheck.scan(Warns(), loader, nn.CrossEntropyLoss(), quiet=True,
                                     args=("--log-level", "debug", "--log-file", log))
            with open(log) as f:
                records = [json.loads(line) for line in f]
        self.assertTrue(report.ok, report.text)
        self.assertIn("batchcheck: warning from the model: a batch of fewer than 8", report.text)
        said = [(r["level"], r["source"], r["message"]) for r in records]
        self.assertEqual(said.count(("warn", "model", "a batch of fewer than 8")), 1, said)
        batches = [m for (level, source, m) in said if level == "debug" and m.startswith("rank 0 batch ")]
        self.assertEqual(batches, ["rank 0 batch 0 (8 samples): ok", "rank 0 batch 1 (8 samples): ok",
                                   "rank 0 batch 2 (4 samples): ok"])

    def test_tensor_dataset_batches_are_the_loaders_own(self):
        # A TensorDataset under PyTorch's default_collate is read by indexing, without a Python
        # call per sample: each batch must be exactly the one the loader yields, and the findings
        # where the real epoch (shuffled, its own generator) delivers them.
        from torch.utils.data import TensorDataset
        from batchcheck import _stream
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(100, 3, 8, 8, generator=g), torch.randint(0, 4, (100,), generator=g)
        x[37, 1, 2, 3] = float("nan")
        y[61] = 255
        loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(3))
        self.assertIsNotNone(_stream._indexed_tensors(loader))
        order = [list(b) for b in loader.batch_sampler]
        server = _stream._Server(loader, order, "inputs", "targets")
        try:
            for idx in order:
                want = torch.utils.data.default_collate([loader.dataset[i] for i in idx])
                got = server._index(idx)
                self.assertEqual(len(got), len(want))
                for a, b in zip(got, want):  # bit for bit, the NaN row too
                    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        finally:
            server.close()
        report = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(), quiet=True)
        epoch = real_epoch(loader)  # the RNGs were restored: the epoch scanned
        nan_at = [k for k, (xb, _) in enumerate(epoch) if torch.isnan(xb).any()]
        label_at = [k for k, (_, yb) in enumerate(epoch) if (yb == 255).any()]
        found = {f.id: f for f in report.errors()}
        self.assertEqual((found["input-nonfinite"].batch, found["input-nonfinite"].samples), (nan_at[0], [37]))
        self.assertEqual((found["target-out-of-range"].batch, found["target-out-of-range"].samples), (label_at[0], [61]))
        # Any code of the user's in the batches is run, not bypassed.
        class Mine(TensorDataset):
            pass
        self.assertIsNone(_stream._indexed_tensors(DataLoader(Mine(x, y), batch_size=16)))
        self.assertIsNone(_stream._indexed_tensors(DataLoader(TensorDataset(x, y), batch_size=16, collate_fn=collate_as_float)))

    def test_tensor_dataset_goes_whole_through_memory_with_the_streams_verdicts(self):
        # Such a loader runs no code of the user's: its tensors go to the engine once (memfds), with
        # the sampler's order, and the engine splits the epoch over its jobs. Its report must be the
        # stream's, finding for finding; the memory must be freed afterwards.
        from torch.utils.data import TensorDataset
        from batchcheck import _arrays
        if not _arrays.plan([torch.zeros(1)], [[0]], 1):
            self.skipTest("no memfd here: the stream serves TensorDatasets")
        g = torch.Generator().manual_seed(1)
        x, y = torch.rand(97, 3, 8, 8, generator=g), torch.randint(0, 4, (97,), generator=g)
        x[5, 0, 1, 1] = float("inf")
        y[40] = 255
        cases = {"shuffled": DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(5)),
                 "sequential": DataLoader(TensorDataset(x, y), batch_size=8)}  # a last batch of one
        made = []

        class Seen(_arrays.Arrays):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                made.append(list(self.fds))
        plan, whole = _arrays.plan, _arrays.Arrays
        for name, loader in cases.items():
            with self.subTest(name):
                torch.manual_seed(0)
                _arrays.Arrays = Seen
                try:
                    fast = batchcheck.scan(Net(bn=True), loader, nn.CrossEntropyLoss(), quiet=True)
                    self.assertEqual(len(made), 1)
                    for fd in made.pop():  # closed with the scan
                        with self.assertRaises(OSError):
                            os.fstat(fd)
                    _arrays.plan = lambda *a, **k: False
                    torch.manual_seed(0)
                    streamed = batchcheck.scan(Net(bn=True), loader, nn.CrossEntropyLoss(), quiet=True)
                    self.assertEqual(made, [])
                finally:
                    _arrays.plan, _arrays.Arrays = plan, whole
                key = lambda r: sorted((f.id, f.severity, f.batch, tuple(f.samples)) for f in r.findings)
                self.assertEqual(key(fast), key(streamed), fast.text)
                self.assertEqual(fast.exit_code, streamed.exit_code)
                epoch = real_epoch(loader)
                inf_at = [k for k, (xb, _) in enumerate(epoch) if torch.isinf(xb).any()]
                self.assertEqual([(f.batch, f.samples) for f in fast.errors() if f.id == "input-nonfinite"], [(inf_at[0], [5])])
        self.assertIn(("batchnorm-single-value", 12), [(f.id, f.batch) for f in fast.errors()])

    def test_tensor_dataset_of_large_batches_streams_to_several_jobs(self):
        # Batches over 256 KiB are streamed (one copy to memory would cost more than it saves),
        # but any of them can be served at any time: the engine splits the epoch over its jobs,
        # each asking for its own batches. The findings stay where the real epoch has them.
        from torch.utils.data import TensorDataset
        from batchcheck import _arrays, _session
        g = torch.Generator().manual_seed(4)
        x, y = torch.rand(120, 3, 64, 64, generator=g), torch.randint(0, 4, (120,), generator=g)  # 384 KiB a batch of 8
        x[37, 2, 5, 5] = float("nan")
        y[50] = 255
        loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(9))
        commands = []
        engine = _session._Engine

        class Seen(engine):
            def __init__(self, cmd, quiet, janitor=None):
                commands.append(cmd)
                super().__init__(cmd, quiet, janitor)
        _session._Engine = Seen
        try:
            report = batchcheck.scan(Net(), loader, nn.CrossEntropyLoss(), quiet=True, args=["--jobs", "2"])
        finally:
            _session._Engine = engine
        self.assertEqual(len(commands), 1)
        self.assertNotIn("/proc/", json.dumps(report.data))
        self.assertEqual(commands[0].count("--jobs"), 1)  # theirs (2): not held to one job
        epoch = real_epoch(loader)
        nan_at = [k for k, (xb, _) in enumerate(epoch) if torch.isnan(xb).any()]
        label_at = [k for k, (_, yb) in enumerate(epoch) if (yb == 255).any()]
        found = {f.id: (f.batch, f.samples) for f in report.errors()}
        self.assertEqual(found["input-nonfinite"], (nan_at[0], [37]), report.text)
        self.assertEqual(found["target-out-of-range"], (label_at[0], [50]), report.text)
        self.assertEqual(report.data["batches"]["checked"], 15)
        self.assertFalse(_arrays.plan(list(loader.dataset.tensors), [list(b) for b in loader.batch_sampler], 120))  # draws an epoch: last

    def test_tensor_dataset_fields_and_what_stays_on_the_stream(self):
        from torch.utils.data import TensorDataset
        from batchcheck import _arrays
        ok = [torch.zeros(10, 3), torch.zeros(10, dtype=torch.long)]
        order = [list(range(0, 5)), list(range(5, 10))]
        self.assertEqual(_arrays.plan(ok, order, 10), _arrays.supported())
        if not _arrays.supported():
            self.skipTest("no memfd here: the stream serves TensorDatasets")
        self.assertFalse(_arrays.plan([torch.zeros(10, 3, dtype=torch.bfloat16)], order, 10))  # no .npy dtype
        self.assertFalse(_arrays.plan(ok, [[0, 10]], 10))  # the loader raises at that batch: the stream says so
        self.assertFalse(_arrays.plan(ok, [[-1]], 10))
        per_batch, limit, available = _arrays.PER_BATCH, _arrays.LIMIT, _arrays._available
        try:
            _arrays.PER_BATCH = 50  # 20 bytes a row: batches of 5 rows stream as fast as they are copied
            self.assertFalse(_arrays.plan(ok, order, 10))
            self.assertTrue(_arrays.plan(ok, [[i, i + 1] for i in range(0, 10, 2)], 10))
            _arrays.PER_BATCH = per_batch
            _arrays.LIMIT = 100
            self.assertFalse(_arrays.plan(ok, order, 10))  # 200 bytes: too much to hold twice
            _arrays.LIMIT = limit
            _arrays._available = lambda: 399
            self.assertFalse(_arrays.plan(ok, order, 10))  # under twice their size available
            _arrays._available = lambda: 400
            self.assertTrue(_arrays.plan(ok, order, 10))
        finally:
            _arrays.PER_BATCH, _arrays.LIMIT, _arrays._available = per_batch, limit, available
        with tempfile.TemporaryDirectory() as cg:  # a container's memory limit counts
            for name, value in (("memory.max", "1000\n"), ("memory.current", "600\n")):
                with open(os.path.join(cg, name), "w") as f:
                    f.write(value)
            cgroup, _arrays.CGROUP = _arrays.CGROUP, cg
            try:
                self.assertEqual(_arrays._available(), 400)
            finally:
                _arrays.CGROUP = cgroup
        # Where memfd is refused (an old kernel, a seccomp profile), the scan streams instead.
        memfd = os.memfd_create

        def refused(*a):
            raise OSError(38, "Function not implemented")
        os.memfd_create = refused
        try:
            streamed = batchcheck.scan(Net(), DataLoader(TensorDataset(torch.rand(20, 3, 8, 8), torch.full((20,), 7)), batch_size=8),
                                       nn.CrossEntropyLoss(), quiet=True)
        finally:
            os.memfd_create = memfd
        self.assertEqual([(f.id, f.batch) for f in streamed.errors()][:1], [("target-out-of-range", 0)])
        # Fields keep their names in the config, never in the files' (they are the user's).
        arrays = _arrays.Arrays([("inputs", ok[0]), ("../mask", torch.ones(10, 3)), ("targets", ok[1])])
        cfg = arrays.data_config(["inputs", "../mask"], "targets")
        self.assertEqual(sorted(cfg["inputs"]), ["../mask", "inputs"])
        files = list(cfg["inputs"].values()) + [cfg["targets"]]
        self.assertEqual([os.path.dirname(f) for f in files], ["/proc/%d/fd" % os.getpid()] * 3)
        self.assertTrue(all("mask" not in os.readlink(f) for f in files))
        import numpy as np
        self.assertTrue(np.array_equal(np.load(cfg["targets"]), ok[1].numpy()))
        self.assertTrue(np.array_equal(np.load(cfg["inputs"]["../mask"]), np.ones((10, 3), dtype=np.float32)))
        arrays.close()
        self.assertFalse(any(os.path.exists(f) and "batchcheck-field" in os.readlink(f) for f in files))

        class TwoInputs(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(6, 3)

            def forward(self, a, b):
                return self.fc(torch.cat([a, b], 1))
        g = torch.Generator().manual_seed(2)
        a, b, y = torch.rand(30, 3, generator=g), torch.rand(30, 3, generator=g), torch.randint(0, 3, (30,), generator=g)
        b[22, 1] = float("nan")
        y[7] = 3
        report = batchcheck.scan(TwoInputs(), DataLoader(TensorDataset(a, b, y), batch_size=8), nn.CrossEntropyLoss(), quiet=True)
        found = {f.id: (f.batch, f.samples) for f in report.errors()}
        self.assertEqual(found["input-nonfinite"], (2, [22]), report.text)
        self.assertEqual(found["target-out-of-range"], (0, [7]), report.text)

    def test_refused_loaders_say_why(self):
        with self.assertRaisesRegex(TypeError, "pass your torch.utils.data.DataLoader"):
            batchcheck.scan(Net(), [1, 2], nn.CrossEntropyLoss())
        with self.assertRaisesRegex(TypeError, "batch_size=None"):
            batchcheck.scan(Net(), DataLoader(Pairs(4), batch_size=None), nn.CrossEntropyLoss())



class ArrayPairs(Dataset):
    """The user's Dataset over the .npy files a command's config names: (x[i], y[i])."""

    def __init__(self, x, y):
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class TestTheCommandsReproduceRuns(unittest.TestCase):
    """The command's reproduce (a config of .npy files and a TorchScript model) runs as printed
    with the user's Dataset over those files and the model loaded: it raises the error its finding
    names, or shows the NaN (reproduce_check.check, as for every scan() of this suite)."""

    def scan(self, model, x, y, loss, batch_size=8, **loader):
        import subprocess
        from batchcheck._cli import binary
        from batchcheck.report import Report
        with tempfile.TemporaryDirectory() as tmp:
            np.save(os.path.join(tmp, "x.npy"), x)
            np.save(os.path.join(tmp, "y.npy"), y)
            scripted = torch.jit.script(model)
            scripted.save(os.path.join(tmp, "m.pt"))
            cfg = {"model": {"path": "m.pt"}, "data": {"format": "npy", "inputs": "x.npy", "targets": "y.npy"},
                   "loader": dict({"batch_size": batch_size}, **loader), "loss": loss}
            with open(os.path.join(tmp, "c.json"), "w") as f:
                json.dump(cfg, f)
            done = subprocess.run([binary(), "scan", os.path.join(tmp, "c.json"), "-o", os.path.join(tmp, "r.json"), "--quiet"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            with open(os.path.join(tmp, "r.json")) as f:
                report = Report(json.load(f), done.stderr, done.returncode)
            loaded = torch.jit.load(os.path.join(tmp, "m.pt"))
        ds = ArrayPairs(x, y)
        before = len(reproduce_check.ran)
        reproduce_check.check(report, loaded, DataLoader(ds, batch_size=batch_size))
        return report, len(reproduce_check.ran) - before

    def test_a_nan_prediction_and_a_view_of_a_fixed_batch_size(self):
        g = torch.Generator().manual_seed(0)
        x = torch.rand(21, 4, generator=g).numpy()
        x[19, 1] = np.nan

        class Fixed(nn.Module):  # view(8, -1): the tail of 5 raises
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 2)

            def forward(self, x):
                return torch.sigmoid(self.lin(x).view(8, -1))
        y = (torch.rand(21, 2, generator=g) > 0.5).float().numpy()
        report, ran = self.scan(Fixed(), x, y, {"type": "bce"})
        self.assertIn("hardcoded-batch-size", [f.id for f in report.findings], report.text)
        self.assertGreaterEqual(ran, 1)

    def test_a_nan_input_through_cross_entropy(self):
        g = torch.Generator().manual_seed(0)
        x = torch.rand(24, 4, generator=g).numpy()
        x[10, 0] = np.inf
        y = torch.randint(0, 3, (24,), generator=g).numpy()
        report, ran = self.scan(nn.Sequential(nn.Linear(4, 3)), x, y, {"type": "cross_entropy"})
        self.assertIn("output-nonfinite", [f.id for f in report.findings], report.text)
        self.assertGreaterEqual(ran, 1)


class TestADistributedRank(unittest.TestCase):
    """scan() of one DDP rank's loader (the DDP tutorial's multigpu.py: DistributedSampler over 2
    ranks), with a NaN in a sample only rank 1 trains on: each rank's scan speaks of its share."""

    def test_each_rank_scans_its_share_in_its_own_words(self):
        from torch.utils.data.distributed import DistributedSampler
        n, batch = 64, 8
        rank1 = list(DistributedSampler(Pairs(n), num_replicas=2, rank=1, shuffle=True, seed=0))
        bad = rank1[0]  # rank 1's first sample: the one a probe of dataset[0..] might have read
        data = Pairs(n, nan=(bad,))
        for rank in (0, 1):
            with self.subTest(rank=rank):
                loader = DataLoader(data, batch_size=batch,
                                    sampler=DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=0))
                report = batchcheck.scan(Net(bn=True), loader, nn.CrossEntropyLoss(), quiet=True)
                self.assertNotIn("samples-dropped", ids(report), report.text)
                share = [f for f in report.findings if f.id == "rank-share"]
                self.assertEqual(len(share), 1, report.text)
                self.assertIn("rank %d of 2's share of the epoch" % rank, share[0].message)
                self.assertIn("32 samples each", share[0].message)
                self.assertIn("the other 32 are the other ranks' to train on", share[0].message)
                for f in report.findings:  # a bad value is the data's, whatever the batch's size
                    if f.id.startswith(("input-", "target-")):
                        self.assertNotIn("training does not hit this now", f.message)
                # The real loop of this rank: its batches, where the NaN reaches the loss.
                truth = [k for k, (x, y) in enumerate(loader) if not torch.isfinite(x).all()]
                found = sorted(o["batch"] for f in report.findings if f.id == "input-nonfinite"
                               for o in f.data["occurrences"])
                self.assertEqual(found, truth, report.text)
                self.assertEqual(truth, [0] if rank == 1 else [])
                if rank == 1:
                    f = [f for f in report.findings if f.id == "input-nonfinite"][0]
                    self.assertEqual(f.data["occurrences"][0]["samples"], [bad])
                # Every probe read a sample this rank delivers.
                mine = set(int(i) for i in loader.sampler)
                for f in report.findings:
                    if f.data.get("probe"):
                        for o in f.data["occurrences"]:
                            self.assertLessEqual(set(o["samples"]), mine, report.text)

if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]] + sys.argv[1:])
