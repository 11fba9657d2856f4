"""Precision as trained: the scan in fp16 and bf16 against the user's own AMP loop on the CPU
(torch.autocast around forward and the loss, a GradScaler and an optimizer step as the user has
them). Each overflowing model is found at the batch where the real loop's loss first goes
non-finite, at its sample and op; the same models pass in bf16; clean models pass both; a model
at 60% of float16's range gets the headroom warning.

Run by ctest with BATCHCHECK_BINARY (the built command) and python/ on PYTHONPATH.
"""
import unittest

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import batchcheck
import reproduce_check  # noqa: F401 - every reproduce a scan here prints is run as printed

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def amp_loop(model, loader, loss_fn, precision, device="cpu"):
    """The user's AMP epoch on `device`: the first batch whose loss is not finite, or None."""
    import copy
    model = copy.deepcopy(model).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    for k, (x, y) in enumerate(loader):
        with torch.autocast(device, dtype=DTYPES[precision]):
            loss = loss_fn(model(x.to(device)), y.to(device))
        if not torch.isfinite(loss).all():
            return k
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    return None


class Attention(nn.Module):
    """Self-attention without the 1/sqrt(d) scale: a large-norm input's logits pass 65,504."""

    def __init__(self, d=32, classes=4):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):  # [B, T, d]
        logits = self.q(x) @ self.k(x).transpose(1, 2)
        h = torch.softmax(logits, dim=-1) @ self.v(x)
        return self.head(h.mean(1))


class Mlp(nn.Module):
    def __init__(self, d=16, classes=4, hidden=64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class SequenceSum(nn.Module):
    """A sum over a long sequence in half precision: one sample's positive activations add past 65,504."""

    def __init__(self, d=8, classes=4):
        super().__init__()
        self.proj, self.head = nn.Linear(d, d), nn.Linear(d, classes)

    def forward(self, x):  # [B, T, d]
        return self.head(torch.relu(self.proj(x)).sum(1) / 4096.0)


class MaskedResidual(nn.Module):
    """Causal attention (a -inf mask: not an overflow) then an in-place residual (h += fc(h)) that
    overflows for a large-norm sample: the mask must not hide the overflow after it."""

    def __init__(self, d=32, classes=4):
        super().__init__()
        self.q, self.k, self.fc = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):  # [B, T, d]
        t = x.shape[1]
        xn = x / (x.norm(dim=-1, keepdim=True) + 1e-6)
        scores = self.q(xn) @ self.k(xn).transpose(1, 2) / 8.0
        scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        h = torch.softmax(scores, dim=-1) @ xn
        y = self.fc(x)
        y += y  # 2x: still fits float16
        y += y  # 4x: does not
        return self.head((h + y).mean(1))


class SmallTransformer(nn.Module):
    def __init__(self, d=32, classes=4):
        super().__init__()
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 64, dropout=0.0, batch_first=True), 2)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.norm(self.enc(x)).mean(1))


def loader_of(x, y, batch_size):
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def attention_case():
    torch.manual_seed(0)
    x = torch.randn(48, 8, 32)
    x[29] *= 300.0  # batch 3 of 8 per batch: sample 29
    return Attention(), loader_of(x, torch.randint(0, 4, (48,)), 8), 29


def linear_case():
    torch.manual_seed(0)
    x = torch.randn(96, 64) * 100.0  # raw, unnormalized features
    x[70] *= 1000.0  # batch 4 of 16
    return Mlp(d=64), loader_of(x, torch.randint(0, 4, (96,)), 16), 70


def sequence_case():
    torch.manual_seed(0)
    x = torch.randn(12, 4096, 8) * 0.1
    x[9] += 100.0  # batch 2 of 4: every step of its sequence adds
    return SequenceSum(), loader_of(x, torch.randint(0, 4, (12,)), 4), 9


def masked_case():
    torch.manual_seed(0)
    x = torch.randn(40, 6, 32)
    model = MaskedResidual()
    with torch.no_grad():  # sample 13's fc output at 30% of 65,504: the in-place sums pass it
        lo, hi = 1.0, 1e6
        for _ in range(60):
            mid = (lo * hi) ** 0.5
            lo, hi = (mid, hi) if model.fc(x[13] * mid).abs().max() < 0.3 * 65504 else (lo, mid)
    x[13] *= lo  # batch 1 of 8
    return model, loader_of(x, torch.randint(0, 4, (40,)), 8), 13


def findings(report, fid):
    return [f for f in report.findings if f.id == fid]


class TestOverflowAgainstTheAmpLoop(unittest.TestCase):
    def check(self, case, op):
        model, loader, sample = case()
        ce = nn.CrossEntropyLoss()
        expected = amp_loop(model, loader, ce, "fp16")
        self.assertIsNotNone(expected, "the real fp16 loop must fail for this case to mean anything")
        self.assertIsNone(amp_loop(model, loader, ce, "bf16"))
        report = batchcheck.scan(model, loader, ce, precision="fp16", quiet=True)
        over = findings(report, "half-overflow")
        self.assertTrue(over, report.text)
        f = over[0]
        self.assertEqual(f.batch, expected, report.text)
        self.assertEqual(f.samples, [sample], report.text)
        if op is not None:
            self.assertEqual(f.data["evidence"]["op"]["op"], op, report.text)
        self.assertGreater(f.data["evidence"]["fp32_max"], 65504)
        self.assertIn("GradScaler does not help", f.message)
        self.assertEqual([x["id"] for x in f.fixes][:3], ["use-bf16", "fp32-module", "scale-inputs"])
        self.assertFalse(report.ok)
        self.assertTrue(any("torch.autocast" in n and "float16" in n for n in report.data["notes"]), report.data["notes"])
        bf16 = batchcheck.scan(model, loader, ce, precision="bf16", quiet=True)
        self.assertFalse(findings(bf16, "half-overflow"), bf16.text)
        self.assertTrue(bf16.ok, bf16.text)
        fp32 = batchcheck.scan(model, loader, ce, quiet=True)
        self.assertTrue(fp32.ok, fp32.text)
        self.assertFalse(any("precision: float16" in n for n in fp32.data["notes"]))

    def test_attention_logits_past_the_range_for_one_large_norm_sample(self):
        self.check(attention_case, "aten::matmul")

    def test_a_linear_layer_on_one_sample_scaled_by_1000(self):
        self.check(linear_case, "aten::linear")

    def test_a_sum_over_a_long_sequence(self):
        self.check(sequence_case, "aten::sum")

    def test_an_in_place_residual_after_a_minus_inf_attention_mask(self):
        self.check(masked_case, "aten::add_")


class TestTheStepAsWrittenIsWatched(unittest.TestCase):
    """step= runs as written in the scanning process: its half ops watched there (_eager.HalfWatch)
    as the engine watches a graph's, the overflow at the AMP loop's batch and sample, measured in
    float32, for each case above; bf16 and float32 pass."""

    def test_the_notes_say_how_the_step_ran_in_half(self):
        # The step as written: watched in the scanning process, and the engine's note says so; with
        # capture=True the engine ran it under its autocast, and no note says float32.
        model, loader, _ = linear_case()

        def step(m, batch):
            x, y = batch
            return nn.functional.cross_entropy(m(x), y)
        written = batchcheck.scan(model, loader, step=step, precision="fp16", quiet=True)
        notes = " ".join(written.data["notes"])
        self.assertIn("your step ran under it in your process, every op's float16 output watched there", notes)
        self.assertNotIn("not watched", notes)
        captured = batchcheck.scan(model, loader, step=step, precision="fp16", capture=True, quiet=True)
        self.assertNotIn("float32, as your step runs", captured.text + " ".join(captured.data["notes"]))
        self.assertIn("every op's float16 output was watched", " ".join(captured.data["notes"]))

    def test_each_overflow_case_through_a_step(self):
        def step(model, batch):
            return nn.functional.cross_entropy(model(batch[0]), batch[1])
        for case in (attention_case, linear_case, sequence_case, masked_case):
            model, loader, sample = case()
            expected = amp_loop(model, loader, nn.CrossEntropyLoss(), "fp16")
            report = batchcheck.scan(model, loader, step=step, precision="fp16", quiet=True)
            over = findings(report, "half-overflow")
            self.assertTrue(over, (case.__name__, report.text))
            self.assertEqual((over[0].batch, over[0].samples), (expected, [sample]), (case.__name__, report.text))
            self.assertGreater(over[0].data["evidence"]["fp32_max"], 65504)
            self.assertEqual([x["id"] for x in over[0].fixes][:3], ["use-bf16", "fp32-module", "scale-inputs"])
            self.assertTrue(batchcheck.scan(model, loader, step=step, precision="bf16", quiet=True).ok, case.__name__)
            self.assertTrue(batchcheck.scan(model, loader, step=step, quiet=True).ok, case.__name__)

    def test_a_nested_batch_under_the_steps_own_autocast(self):
        model, loader, sample = linear_case()
        nested = DataLoader(loader.dataset, batch_size=loader.batch_size,
                            collate_fn=lambda s: {"views": [torch.stack([x for x, _ in s])], "y": torch.stack([y for _, y in s])})

        def step(model, batch):
            with torch.autocast("cpu", dtype=torch.float16):
                return nn.functional.cross_entropy(model(batch["views"][0]), batch["y"])
        report = batchcheck.scan(model, nested, step=step, quiet=True)
        over = findings(report, "half-overflow")
        self.assertTrue(over, report.text)
        self.assertEqual((over[0].batch, over[0].samples),
                         (amp_loop(model, loader, nn.CrossEntropyLoss(), "fp16"), [sample]), report.text)


class StaleMask(nn.Module):
    """A dropout written out: its mask starts as torch.empty_like (whatever the memory held, here
    the Inf of a tensor just freed) and bernoulli_ fills it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 512)  # 16 x 512 half values: a size glibc hands back when freed

    def forward(self, x):
        h = self.lin(x)
        stale = torch.full_like(h, float("inf"))
        del stale
        return h * torch.empty_like(h).bernoulli_(0.9)


def freed_memory_comes_back(dtype=torch.bfloat16, value=float("inf")):
    """Whether this allocator hands a freed tensor's memory to the next empty_like of its size."""
    h = torch.zeros(16, 512, dtype=dtype)
    for _ in range(5):
        stale = torch.full_like(h, value)
        del stale
        if not bool(torch.isfinite(torch.empty_like(h)).all()):
            return True
    return False


class TestUninitializedMemoryIsNoOverflow(unittest.TestCase):
    def test_an_empty_like_mask_is_not_an_overflow(self):
        # empty_like's values were made by no computation: a clean transformer's dropout under
        # bf16 was reported as an overflow in aten::empty_like (its mask before bernoulli_).
        if not freed_memory_comes_back():
            self.skipTest("this allocator does not hand back the freed memory")
        torch.manual_seed(0)
        loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 512, (32,))), batch_size=16)

        def step(model, batch):
            return nn.functional.cross_entropy(model(batch[0]), batch[1])
        for capture in (False, True):
            report = batchcheck.scan(StaleMask(), loader, step=step, precision="bf16", capture=capture, quiet=True)
            self.assertFalse(findings(report, "half-overflow"), (capture, report.text))
            self.assertTrue(report.ok, (capture, report.text))


class NoisyLog(nn.Module):
    """Dropout written out (a mask made by empty_like, filled by bernoulli_), then a log that makes
    a NaN for a first feature below -1."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        h = self.lin(x)
        mask = torch.empty_like(h).bernoulli_(0.9)
        return (h * mask).sum(1, keepdim=True) + torch.log(x[:, :1] + 1.0)


class TestAnEmptyTensorIsNoNansOrigin(unittest.TestCase):
    def test_the_nan_is_born_in_the_log_not_in_empty_like(self):
        # Deterministic algorithms fill empty_like's output with NaN (torch >= 2.1): values no op
        # made, so the search for where the NaN was born passes over them to the log.
        deterministic = getattr(getattr(torch.utils, "deterministic", None), "fill_uninitialized_memory", None)
        if deterministic is None:
            self.skipTest("this torch does not fill empty tensors")
        g = torch.Generator().manual_seed(0)
        x = torch.rand(32, 8, generator=g)
        x[20, 0] = -2.0
        loader = DataLoader(TensorDataset(x, torch.zeros(32, 1)), batch_size=16)
        torch.use_deterministic_algorithms(True)
        try:
            self.assertTrue(bool(torch.isnan(torch.empty(4)).all()))
            report = batchcheck.scan(NoisyLog(), loader, step=lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]),
                                     quiet=True)
        finally:
            torch.use_deterministic_algorithms(False)
        nan = [f for f in report.findings if f.severity == "error" and f.data.get("root_cause")]
        self.assertTrue(nan, report.text)
        self.assertEqual(nan[0].batch, 1, report.text)
        self.assertEqual(nan[0].data["root_cause"].get("op"), "aten::log", nan[0].data["root_cause"])


def amp_step(model, batch):
    """A step= as AMP code writes it: forward and the loss under the step's own torch.autocast."""
    x, y = batch
    with torch.autocast("cpu", dtype=torch.float16):
        return nn.functional.cross_entropy(model(x), y)


class TestAStepUnderItsOwnAutocast(unittest.TestCase):
    def test_the_steps_casts_run_as_recorded_and_the_overflow_is_found(self):
        model, loader, sample = linear_case()
        expected = amp_loop(model, loader, nn.CrossEntropyLoss(), "fp16")
        report = batchcheck.scan(model, loader, step=amp_step, quiet=True)
        over = findings(report, "half-overflow")
        self.assertTrue(over, report.text)
        self.assertEqual((over[0].batch, over[0].samples), (expected, [sample]), report.text)
        # The float32 value: the overflowing op run again in float32, where the step runs.
        self.assertGreater(over[0].data["evidence"]["fp32_max"], 65504)
        notes = " ".join(report.data["notes"])
        self.assertIn("as the casts of your step's torch.autocast run it", notes)
        self.assertIn("your step's torch.autocast('cpu', dtype=torch.float16)", notes)


    def test_binary_cross_entropy_inside_the_steps_autocast_is_an_error(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 1), nn.Flatten(0))
        loader = loader_of(torch.randn(32, 16), torch.rand(32).round(), 8)

        def bce_step(model, batch):
            x, y = batch
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return nn.functional.binary_cross_entropy(torch.sigmoid(model(x)), y)

        def logits_step(model, batch):
            x, y = batch
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return nn.functional.binary_cross_entropy_with_logits(model(x), y)
        report = batchcheck.scan(model, loader, step=bce_step, quiet=True)
        bce = findings(report, "bce-autocast-unsafe")
        self.assertEqual(len(bce), 1, report.text)
        self.assertIn("your step calls binary_cross_entropy (BCELoss) inside its torch.autocast in bfloat16", bce[0].message)
        self.assertTrue(batchcheck.scan(model, loader, step=logits_step, quiet=True).ok)


class TestAModelRunEagerly(unittest.TestCase):
    def test_its_forward_runs_under_the_autocast_and_the_notes_say_what_is_not_watched(self):
        model, loader, sample = linear_case()
        report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), precision="fp16", eager=True, quiet=True)
        nan = findings(report, "output-nonfinite")
        self.assertTrue(nan, report.text)
        self.assertEqual((nan[0].batch, nan[0].samples), (amp_loop(model, loader, nn.CrossEntropyLoss(), "fp16"), [sample]))
        self.assertIn("where its ops are not watched", " ".join(report.data["notes"]))
        self.assertTrue(batchcheck.scan(model, loader, nn.CrossEntropyLoss(), precision="bf16", eager=True, quiet=True).ok)


class TestCleanSetupsPass(unittest.TestCase):
    def test_resnet18_and_a_small_transformer_pass_fp16_and_bf16(self):
        import torchvision
        torch.manual_seed(0)
        cases = [(torchvision.models.resnet18(num_classes=10), loader_of(torch.randn(20, 3, 32, 32), torch.randint(0, 10, (20,)), 8)),
                 (SmallTransformer(), loader_of(torch.randn(40, 16, 32), torch.randint(0, 4, (40,)), 16))]
        for model, loader in cases:
            for precision in ("fp16", "bf16"):
                self.assertIsNone(amp_loop(model, loader, nn.CrossEntropyLoss(), precision))
                report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), precision=precision, quiet=True)
                self.assertEqual([f.id for f in report.findings if f.severity in ("error", "warning")], [], report.text)


class TestHeadroom(unittest.TestCase):
    def test_a_model_at_60_percent_of_the_range_is_warned(self):
        torch.manual_seed(0)
        x = torch.randn(64, 16)
        model = Mlp()
        with torch.no_grad():
            lo, hi = 1.0, 1e6  # the scale that puts sample 37's fc1 output at 60% of 65,504
            for _ in range(60):
                mid = (lo * hi) ** 0.5
                lo, hi = (mid, hi) if model.fc1(x[37] * mid).abs().max() < 0.6 * 65504 else (lo, mid)
            x[37] *= lo
            share = model.fc1(x).abs().max().item() / 65504
        self.assertAlmostEqual(share, 0.6, delta=0.01)
        loader = loader_of(x, torch.randint(0, 4, (64,)), 16)
        self.assertIsNone(amp_loop(model, loader, nn.CrossEntropyLoss(), "fp16"))  # it trains: no error now
        report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), precision="fp16", quiet=True)
        self.assertTrue(report.ok, report.text)
        head = findings(report, "half-headroom")
        self.assertEqual(len(head), 1, report.text)
        self.assertEqual((head[0].batch, head[0].samples), (2, [37]), report.text)
        self.assertRegex(head[0].message, r"gave [0-9,]+, (59|60)% of float16's largest value 65,504")
        self.assertEqual(head[0].data["evidence"]["op"]["module"], "fc1")
        # The threshold is the user's: above the peak, no warning.
        quiet = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), precision="fp16", quiet=True, args=["--half-headroom", "0.7"])
        self.assertFalse(findings(quiet, "half-headroom"), quiet.text)


class ViewsCopiesAndACache(nn.Module):
    """Half values that repeat others (views, a clone, a reshape of a matmul's output), a cache
    written in place slice by slice, and a float16 parameter that no op made, read through a view."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.table = nn.Parameter(torch.zeros(4, 4, dtype=torch.float16))
        with torch.no_grad():
            self.table[2, 3] = 30000.0  # only ever seen through table.view(-1)

    def forward(self, x):
        h = self.lin(x)                            # float16 under the autocast
        a = h.view(len(x), 2, 4).transpose(1, 2)   # views
        c = a.clone() * 3.0
        cache = torch.zeros(len(x), 4, 4, dtype=h.dtype)
        cache[:, :, :2].copy_(c)                   # written in place, slice by slice
        cache[:, :, 2:].copy_(c.flip(2) * 2.0)
        flat = cache.reshape(len(x), 16)
        return flat @ (self.table.view(-1) * 1e-4).view(16, 1).expand(16, 4)


class TestTheWatchReadsEachValueOnce(unittest.TestCase):
    """The half watch reads a view's or a copy's values only where their source was not read
    whole already (a transformer's forward: 41% of its half values): its result is the one of
    a watch that reads every output."""

    def run_watch(self, reads_all):
        from batchcheck import _eager
        calls = []
        largest, repeats = _eager._largest, _eager._repeats
        _eager._largest = lambda t: calls.append(t.numel()) or largest(t)
        if reads_all:
            _eager._repeats = lambda *a: None
        try:
            torch.manual_seed(0)
            model, x = ViewsCopiesAndACache(), torch.randn(6, 8) * 50
            with torch.autocast("cpu", dtype=torch.float16), _eager.HalfWatch(_eager.OpChecks(6, [], ())) as watch:
                model(x)
            return watch.result(), calls
        finally:
            _eager._largest, _eager._repeats = largest, repeats

    def test_the_same_result_from_fewer_reads(self):
        fewer, read = self.run_watch(False)
        every, read_all = self.run_watch(True)
        self.assertEqual(fewer, every)
        self.assertEqual(fewer["peak"], 30000.0)  # the parameter, seen only through its view
        self.assertEqual(fewer["peak_site"]["site"]["op"], "aten::view")
        self.assertLess(sum(read), sum(read_all))


class TestPrecisionArguments(unittest.TestCase):
    def test_an_unknown_precision_is_refused_in_one_line(self):
        model, loader, _ = linear_case()
        with self.assertRaises(ValueError) as e:
            batchcheck.scan(model, loader, nn.CrossEntropyLoss(), precision="fp8")
        self.assertEqual(str(e.exception), 'batchcheck.scan: precision=\'fp8\': expected "fp32", "fp16" or "bf16" '
                                           '(or torch.float16, torch.bfloat16)')

    def test_lightning_precision_names(self):
        from batchcheck.api import lightning_precision
        self.assertEqual([lightning_precision(p) for p in ("16-mixed", "bf16-mixed", "32-true", "16-true", None)],
                         ["fp16", "bf16", None, None, None])

    def test_bce_under_autocast_is_an_error_on_the_cpu_too(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 1), nn.Sigmoid(), nn.Flatten(0))
        loader = loader_of(torch.randn(32, 16), torch.rand(32).round(), 8)
        report = batchcheck.scan(model, loader, nn.BCELoss(), precision="fp16", quiet=True)
        bce = findings(report, "bce-autocast-unsafe")
        self.assertEqual(len(bce), 1, report.text)
        self.assertEqual(bce[0].batch, 0)
        self.assertEqual([x["id"] for x in bce[0].fixes], ["bce-with-logits"])
        self.assertTrue(batchcheck.scan(model, loader, nn.BCELoss(), quiet=True).ok)


if __name__ == "__main__":
    unittest.main()
