"""The training steps users write, as pytorch/examples writes them (written by the team): a CNN
with log_softmax + NLL, a VAE with BCE + KLD, a GAN discriminator step with labels made in the
step, a siamese net with squeeze + BCE, a file-backed super-resolution Dataset with MSE, and
torchvision's resnet18. Each is scanned through step= or loss= without wrappers and compared with
its real loop on the same loader: the faults at the same batch and sample, no false alarm, and a
first fix a reviewer would apply.

Run by ctest with BATCHCHECK_BINARY (the built command) and python/ on PYTHONPATH.
"""
import contextlib
import os
import sys
import tempfile
import unittest
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import batchcheck
import reproduce_check  # noqa: F401 - every reproduce a scan here prints is run as printed


@contextlib.contextmanager
def warnings_off():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def real_loop(model, loader, step):
    """The training loop, going on past a failing batch: {batch: the error's first line}. No
    optimizer step, as in the scan (the weights stay as they are)."""
    model.train()
    failed = {}
    for k, batch in enumerate(loader):
        try:
            step(model, batch).backward()
        except (RuntimeError, ValueError, IndexError, AssertionError) as e:
            failed[k] = str(e).strip().splitlines()[0]
        model.zero_grad(set_to_none=True)
    return failed


def errors(report):
    """{finding id: [(batch, samples) of each occurrence]} of the error findings."""
    out = {}
    for f in report.findings:
        if f.severity == "error":
            out[f.id] = [(o["batch"], o["samples"]) for o in f.data["occurrences"]]
    return out


def first_fix(report, finding_id):
    f = [f for f in report.findings if f.id == finding_id][0]
    return f.fixes[0]["id"] if f.fixes else None


class MnistNet(nn.Module):  # examples/mnist
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 6 * 6, 10)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout(torch.flatten(F.max_pool2d(x, 2), 1))
        return F.log_softmax(self.fc(x), dim=1)


class VAE(nn.Module):  # examples/vae
    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(784, 64), nn.Linear(64, 8), nn.Linear(64, 8)
        self.fc3, self.fc4 = nn.Linear(8, 64), nn.Linear(64, 784)

    def forward(self, x):
        h = F.relu(self.fc1(x.view(-1, 784)))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(logvar) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae_step(model, batch):
    x, _ = batch
    recon, mu, logvar = model(x)
    bce = F.binary_cross_entropy(recon, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


NZ = 8


class Generator(nn.Module):  # examples/dcgan, small
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.ConvTranspose2d(NZ, 16, 4, 1, 0, bias=False), nn.BatchNorm2d(16), nn.ReLU(True),
                                  nn.ConvTranspose2d(16, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Conv2d(3, 16, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
                                  nn.Conv2d(16, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x)


torch.manual_seed(0)
netG = Generator()
criterion = nn.BCELoss()


def d_step(netD, batch):
    real, _ = batch
    b = real.size(0)
    label = torch.full((b,), 1.0)
    err_real = criterion(netD(real).view(-1), label)
    fake = netG(torch.randn(b, NZ, 1, 1))
    label_fake = torch.full((b,), 0.0)
    err_fake = criterion(netD(fake.detach()).view(-1), label_fake)
    return err_real + err_fake


class Siamese(nn.Module):  # examples/siamese_network, small
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(16, 1)

    def forward(self, a, b):
        return torch.sigmoid(self.fc(torch.cat([self.enc(a), self.enc(b)], 1)))


class PairsDataset(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.a, self.b = torch.rand(n, 1, 10, 10, generator=g), torch.rand(n, 1, 10, 10, generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g).float()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.a[i], self.b[i], self.y[i]


def siamese_step(model, batch):
    a, b, y = batch
    return criterion(model(a, b).squeeze(), y)


class SuperResolution(Dataset):
    """examples/super_resolution's shape: low-resolution input, high-resolution target, each read
    from its own file as the Dataset is indexed."""

    def __init__(self, folder, attr="files"):
        self.attr = attr  # examples/super_resolution names its list image_filenames
        setattr(self, attr, sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".npy")))

    def __len__(self):
        return len(getattr(self, self.attr))

    def __getitem__(self, i):
        hi = torch.from_numpy(np.load(getattr(self, self.attr)[i]))
        return F.avg_pool2d(hi.unsqueeze(0), 2).squeeze(0), hi


class SRNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x):
        return self.shuffle(self.conv(x))


class TestTrainingSteps(unittest.TestCase):
    def test_cnn_with_log_softmax_and_nll(self):
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(97, 1, 16, 16, generator=g), torch.randint(0, 10, (97,), generator=g)
        y[37] = 10  # a label past the ten classes
        loader = DataLoader(TensorDataset(x, y), batch_size=32)
        torch.manual_seed(0)
        model = MnistNet()
        report = batchcheck.scan(model, loader, nn.NLLLoss(), quiet=True)
        truth = real_loop(model, loader, lambda m, b: F.nll_loss(m(b[0]), b[1]))
        self.assertEqual(sorted(truth), [1])
        self.assertEqual(errors(report), {"target-out-of-range": [(1, [37])]}, report.text)
        # Label 10 of ten classes among labels from 0: no shift (target - 1 would make -1); the
        # head one class short leads, the remap names the value (ignoring drops them, last).
        self.assertEqual(first_fix(report, "target-out-of-range"), "more-classes")
        fixes = [f for f in report.findings if f.id == "target-out-of-range"][0].fixes
        self.assertEqual([x["id"] for x in fixes][:3], ["more-classes", "remap-labels", "ignore-index"])
        self.assertNotIn("target - 1", fixes[1]["code"])
        # The last batch of one ran clean through this model (no BatchNorm): information, and the
        # gate the docs suggest passes on the clean data.
        tail = [f for f in report.findings if f.id == "tail-batch-singleton"][0]
        self.assertEqual(tail.severity, "info", tail.message)
        y[37] = 3
        clean = batchcheck.scan(model, loader, nn.NLLLoss(), fail_on="warning", quiet=True)
        self.assertTrue(clean.ok, clean.text)

    def test_vae_with_bce_and_kld(self):
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(200, 1, 28, 28, generator=g), torch.randint(0, 10, (200,), generator=g)
        x[77, 0, 3, 3] = 2.0  # a pixel past 1: BCE's target in this step
        loader = DataLoader(TensorDataset(x, y), batch_size=32)
        report = batchcheck.scan(VAE(), loader, step=vae_step, quiet=True)
        truth = real_loop(VAE(), loader, vae_step)
        self.assertEqual(sorted(truth), [2])
        self.assertIn("target", truth[2])
        self.assertEqual(errors(report), {"target-out-of-range": [(2, [77])]}, report.text)
        # A label of 2.0 is no 8-bit mask: no division by 255 first.
        self.assertEqual(first_fix(report, "target-out-of-range"), "correct-targets")
        f = report.errors()[0]
        self.assertIn("in your step's aten::binary_cross_entropy", f.message)
        self.assertIn("test_steps.py", f.message)  # the user's line
        # The KL term ran too: a clean VAE passes, its loss summed over both terms.
        x[77, 0, 3, 3] = 0.5
        self.assertTrue(batchcheck.scan(VAE(), loader, step=vae_step, quiet=True).ok)
        self.assertTrue(any("run as written" in n for n in report.data["notes"]), report.data["notes"])

    def test_gan_discriminator_step_with_labels_made_in_the_step(self):
        g = torch.Generator().manual_seed(0)
        x = torch.rand(100, 3, 8, 8, generator=g) * 2 - 1
        x[41, 0, 2, 2] = float("nan")
        loader = DataLoader(TensorDataset(x, torch.zeros(100)), batch_size=16, shuffle=True,
                            generator=torch.Generator().manual_seed(3))
        torch.manual_seed(0)
        netD = Discriminator()
        report = batchcheck.scan(netD, loader, step=d_step, quiet=True)
        truth = real_loop(netD, loader, d_step)  # the epoch the scan replayed (its RNGs restored)
        self.assertEqual(len(truth), 1, truth)
        (batch, error), = truth.items()
        self.assertIn("between 0 and 1", error)
        found = errors(report)
        self.assertEqual(found["input-nonfinite"], [(batch, [41])], report.text)
        self.assertEqual(found["output-nonfinite"], [(batch, [41])], report.text)
        self.assertEqual(set(found), {"input-nonfinite", "output-nonfinite"}, report.text)
        nan = [f for f in report.findings if f.id == "output-nonfinite"][0]
        self.assertIn("criterion (BCELoss)", nan.message)  # the module by the step's own name for it
        # Traced to the input: BCEWithLogitsLoss cannot remove a NaN from the data.
        self.assertEqual(nan.data["root_cause"]["kind"], "input", nan.data)
        self.assertEqual(first_fix(report, "output-nonfinite"), "clean-data")

    def test_siamese_with_squeeze_and_bce(self):
        loader = DataLoader(PairsDataset(33), batch_size=8)  # a last batch of one
        report = batchcheck.scan(Siamese(), loader, step=siamese_step, quiet=True)
        truth = real_loop(Siamese(), loader, siamese_step)
        self.assertEqual(sorted(truth), [4])
        self.assertIn("different to the input size", truth[4])
        self.assertEqual(errors(report), {"shape-mismatch": [(4, [32])]}, report.text)
        self.assertEqual(first_fix(report, "shape-mismatch"), "explicit-squeeze-dim")
        # The batches that train are no alarm: loss= as a callable, the same step.
        full = DataLoader(PairsDataset(32), batch_size=8)
        ok = batchcheck.scan(Siamese(), full, loss=lambda out, y: criterion(out.squeeze(), y), quiet=True)
        self.assertTrue(ok.ok, ok.text)

    def test_file_backed_super_resolution_with_mse(self):
        with tempfile.TemporaryDirectory() as d:
            g = torch.Generator().manual_seed(0)
            for i in range(20):
                hi = torch.rand(1, 8, 8, generator=g)
                if i == 13:
                    hi[0, 4, 4] = float("nan")
                np.save(os.path.join(d, "%03d.npy" % i), hi.numpy())
            loader = DataLoader(SuperResolution(d), batch_size=4)
            report = batchcheck.scan(SRNet(), loader, nn.MSELoss(), quiet=True)
            truth_nan = [k for k, (lo, hi) in enumerate(loader) if torch.isnan(hi).any()]
            self.assertEqual(truth_nan, [3])
            found = errors(report)
            self.assertEqual(found["target-nonfinite"], [(3, [13])], report.text)
            self.assertEqual(found["input-nonfinite"], [(3, [13])], report.text)

    def test_a_corrupt_file_in_the_first_batch_is_a_finding_naming_the_file(self):
        # Batch 0 is no different from batch 1 (scan() raised the loader's error before).
        # The file comes from the Dataset's list of one path per sample, under any name of its own.
        for bad, attr in ((1, "files"), (5, "files"), (5, "image_filenames")):
            with self.subTest(bad=bad, attr=attr), tempfile.TemporaryDirectory() as d:
                g = torch.Generator().manual_seed(0)
                for i in range(12):
                    np.save(os.path.join(d, "%03d.npy" % i), torch.rand(1, 8, 8, generator=g).numpy())
                path = os.path.join(d, "%03d.npy" % bad)
                with open(path, "r+b") as f:
                    f.truncate(100)  # the header survives, the pixels do not
                loader = DataLoader(SuperResolution(d, attr), batch_size=4)
                report = batchcheck.scan(SRNet(), loader, nn.MSELoss(), quiet=True)
                self.assertEqual(errors(report), {"sample-unreadable": [(bad // 4, [bad])]}, report.text)
                f = report.errors()[0]
                self.assertIn("dataset[%d] (%s)" % (bad, path), f.message)
                fixes = {x["id"]: x["code"] for x in f.fixes}
                # Python run where the user trains (no interpreter named), on the file itself.
                self.assertEqual(fixes["replace-file"], "import numpy as np; np.load(\"%s\")  # raises the same error" % path)
                self.assertIn("Subset(dataset", fixes["skip-unreadable"])
                self.assertNotIn("ImageFolder", fixes["skip-unreadable"])

    def test_torchvision_resnet18_with_cross_entropy(self):
        import torchvision
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(40, 3, 32, 32, generator=g), torch.randint(0, 10, (40,), generator=g)
        y[5] = 255
        loader = DataLoader(TensorDataset(x, y), batch_size=16)
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10)
        report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), quiet=True)
        truth = real_loop(model, loader, lambda m, b: F.cross_entropy(m(b[0]), b[1]))
        self.assertEqual(sorted(truth), [0])
        self.assertEqual(errors(report), {"target-out-of-range": [(0, [5])]}, report.text)
        self.assertEqual(first_fix(report, "target-out-of-range"), "ignore-index")
        # A last batch of one: the BatchNorm layer whose check raises is named, not torch's functional.py.
        y[5] = 3
        tail = DataLoader(TensorDataset(x[:17], y[:17]), batch_size=8)
        report = batchcheck.scan(model, tail, nn.CrossEntropyLoss(), quiet=True)
        truth = real_loop(model, tail, lambda m, b: F.cross_entropy(m(b[0]), b[1]))
        self.assertEqual(sorted(truth), [2])
        self.assertEqual(errors(report), {"batchnorm-single-value": [(2, [16])]}, report.text)
        bn = report.errors()[0]
        self.assertIn("BatchNorm layer4.0.bn1 (BatchNorm2d) saw one value per channel", bn.message)
        self.assertEqual(bn.data["evidence"]["module"], "layer4.0.bn1")
        self.assertEqual(first_fix(report, "batchnorm-single-value"), "drop-last")

    def test_a_shuffled_loaders_tail_gets_drop_last(self):
        # DataLoader(..., drop_last=True) is the standard fix with shuffle=True as without.
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(17, 6, generator=g), torch.randint(0, 3, (17,), generator=g)
        bn = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
        for shuffle in (False, True):
            loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=shuffle, generator=torch.Generator().manual_seed(1))
            report = batchcheck.scan(bn, loader, nn.CrossEntropyLoss(), quiet=True)
            self.assertEqual(first_fix(report, "batchnorm-single-value"), "drop-last", (shuffle, report.text))
            self.assertEqual(first_fix(report, "tail-batch-singleton"), "drop-last", (shuffle, report.text))
            tail = [f for f in report.findings if f.id == "tail-batch-singleton"][0]
            self.assertIn("17 = 2 x 8 + 1", tail.message)  # the arithmetic, as for a plain loader
            self.assertNotIn("order.json", report.text)
        partial = batchcheck.scan(nn.Linear(6, 3), DataLoader(TensorDataset(x[:15], y[:15]), batch_size=8, shuffle=True),
                                  nn.CrossEntropyLoss(), quiet=True)
        self.assertEqual(first_fix(partial, "tail-batch-partial"), "drop-last", partial.text)

    def test_words_name_the_users_objects(self):
        # report.text names the model and the loader, not scan()'s temporary files.
        g = torch.Generator().manual_seed(0)
        loader = DataLoader(TensorDataset(torch.rand(20, 6, generator=g), torch.randint(0, 3, (20,), generator=g)),
                            batch_size=8, shuffle=True)
        report = batchcheck.scan(nn.Linear(6, 3), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertNotIn("/batchcheck-", report.text)
        self.assertIn("batchcheck.scan(): Linear on your DataLoader (RandomSampler, batch_size=8)", report.text)
        self.assertEqual(report.data["source"], "batchcheck.scan(): Linear on your DataLoader (RandomSampler, batch_size=8)")
        self.assertIn("20 = 2 x 8 + 4", report.text)
        # Why TorchScript refused a model: the reason and its place, not cut at the colon.
        from batchcheck._prepare import _failure_reason

        class Kwargs(nn.Module):
            def forward(self, x, **kw):
                return x
        try:
            torch.jit.script(Kwargs())
            self.fail("scripted")
        except Exception as e:
            reason = _failure_reason(e)
        self.assertIn("variable number of arguments", reason)
        self.assertIn("test_steps.py\", line", reason)
        self.assertIn("def forward(self, x, **kw):", reason)

    def test_a_shape_the_trace_froze_is_the_traces_not_the_users(self):
        # The user's code reads the batch size from the input; torch.jit.trace froze the example's 4.
        import json
        import subprocess

        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)

            def forward(self, x):
                return self.fc(x).view(int(x.size(0)), -1).sum(1, keepdim=True)
        with tempfile.TemporaryDirectory() as d:
            torch.manual_seed(0)
            eager = Head()
            with warnings_off():
                torch.jit.trace(eager, torch.rand(4, 3)).save(os.path.join(d, "m.pt"))
            x = np.random.default_rng(0).random((10, 3), dtype=np.float32)
            np.save(os.path.join(d, "x.npy"), x)
            np.save(os.path.join(d, "y.npy"), np.zeros((10, 1), np.float32))
            with open(os.path.join(d, "cfg.json"), "w") as f:
                json.dump({"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},
                           "loader": {"batch_size": 4}, "loss": {"type": "mse"}}, f)
            run = subprocess.run([os.environ["BATCHCHECK_BINARY"], "scan", os.path.join(d, "cfg.json"), "-q", "-o",
                                  os.path.join(d, "r.json")], capture_output=True, text=True)
            # Not the user's code's fault, but a batch the scan could not run: never a pass.
            self.assertEqual(run.returncode, 1, run.stderr)
            report = json.load(open(os.path.join(d, "r.json")))
            found = {f["id"]: f for f in report["findings"]}
            self.assertNotIn("hardcoded-batch-size", found)
            f = found["trace-frozen-shape"]
            self.assertEqual((f["severity"], f["batch"], f["samples"]), ("error", 2, [8, 9]))
            self.assertIn("the trace froze the shape [4, -1] into aten::view", f["message"])
            self.assertIn("this batch was not checked", f["message"])
            self.assertEqual(f["fixes"][0]["id"], "script-instead")
            # The eager model runs on that batch of two.
            self.assertEqual(eager(torch.from_numpy(x[8:])).shape, (2, 1))

    def test_a_finding_tells_every_batch_it_found(self):
        # Class 255 in batches 0 and 3: the finding's own attributes say both, not only .data.
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g)
        y[2], y[30] = 255, 255
        report = batchcheck.scan(nn.Linear(6, 3), DataLoader(TensorDataset(x, y), batch_size=8), nn.CrossEntropyLoss(), quiet=True)
        f = [f for f in report.findings if f.id == "target-out-of-range"][0]
        self.assertEqual(f.batches, [0, 3])
        self.assertEqual(f.count, 2)
        self.assertEqual([(o.rank, o.batch, o.samples, o.count) for o in f.occurrences], [(0, 0, [2], 1), (0, 3, [30], 1)])
        self.assertIn("at batch 0 and 1 more (batches [0, 3])", repr(f))
        self.assertIsInstance(f.occurrences[0], batchcheck.Occurrence)

    def test_refusals_say_why(self):
        loader = DataLoader(PairsDataset(8), batch_size=4)
        with self.assertRaisesRegex(TypeError, "pass loss= or step=, not both"):
            batchcheck.scan(Siamese(), loader, criterion, step=siamese_step)
        with self.assertRaisesRegex(TypeError, "step is your training step"):
            batchcheck.scan(Siamese(), loader, step="train")


class MomentumQueue(nn.Module):
    """A momentum encoder's queue (MoCo): the step enqueues each batch's keys and asserts that the
    queue's length is a multiple of the batch size, as MoCo's _dequeue_and_enqueue does."""

    def __init__(self, k=256):
        super().__init__()
        self.enc = nn.Linear(6, 4)
        self.k = k
        self.register_buffer("queue", torch.zeros(k, 4))

    def forward(self, x):
        return self.enc(x)


def moco_step(model, batch):
    x, y = batch
    keys = model(x)
    assert model.k % keys.shape[0] == 0, "K % batch_size == 0"  # MoCo's own assert
    with torch.no_grad():
        model.queue[:keys.shape[0]] = keys.detach()
    return F.cross_entropy(keys, y)


def mixup_step(model, batch):
    x, y = batch
    if len(x) % 2:
        raise ValueError("Batch size should be even when using this")  # timm's Mixup
    lam = 0.7
    x = x * lam + x.flip(0) * (1 - lam)
    return F.cross_entropy(model(x), y)


class TestFixesTriedBeforeTheyArePrinted(unittest.TestCase):
    """A loader fix (a batch size, drop_last) is run on the user's own step before it is printed:
    the first fix, applied to the real loop, trains the epoch (issue 60 item 1)."""

    def data(self, n):
        g = torch.Generator().manual_seed(0)
        return TensorDataset(torch.rand(n, 6, generator=g), torch.randint(0, 4, (n,), generator=g))

    def test_a_step_that_asserts_its_queue_divides_the_batch_gets_a_size_that_passes(self):
        ds = self.data(92)
        loader = DataLoader(ds, batch_size=24)
        self.assertEqual(sorted(real_loop(MomentumQueue(), loader, moco_step)), [0, 1, 2, 3])  # 24 and 20: neither divides 256
        with warnings_off():
            report = batchcheck.scan(MomentumQueue(), loader, step=moco_step, quiet=True)
        f = [f for f in report.findings if f.severity == "error"][0]
        fix = f.fixes[0]
        self.assertEqual(fix["id"], "batch-size-divisor", report.text)
        self.assertIn("verified", fix)
        self.assertIn("ran with batch_size=%d" % fix["batch_sizes"][0], fix["verified"])
        self.assertIn("fixes tried:", report.text)
        self.assertIn("verified: ran with batch_size=", report.text)  # the summary printed again with it
        for b in fix["batch_sizes"]:  # each size offered trains the epoch
            self.assertEqual(real_loop(MomentumQueue(), DataLoader(ds, batch_size=b), moco_step), {}, b)

    def test_mixups_even_batch_keeps_drop_last_and_withdraws_the_sizes_that_still_fail(self):
        ds = self.data(101)  # odd: every batch size leaves an odd batch somewhere, but drop_last
        loader = DataLoader(ds, batch_size=16)
        self.assertEqual(sorted(real_loop(nn.Linear(6, 4), loader, mixup_step)), [6])
        with warnings_off():
            report = batchcheck.scan(nn.Linear(6, 4), loader, step=mixup_step, quiet=True)
        f = [f for f in report.findings if f.severity == "error"][0]
        ids = [x["id"] for x in f.fixes]
        self.assertEqual(ids[0], "drop-last", report.text)
        self.assertNotIn("batch-size-divisor", ids, report.text)
        self.assertIn("the only batch that failed", f.fixes[0]["verified"])
        self.assertEqual(real_loop(nn.Linear(6, 4), DataLoader(ds, batch_size=16, drop_last=True), mixup_step), {})

    def test_a_filter_and_a_label_map_run_on_the_failing_batch(self):
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(40, 6, generator=g), torch.randint(0, 4, (40,), generator=g)
        x[13, 2] = float("nan")  # batch 1
        y[29] = 7  # batch 3: 4 classes
        model = nn.Sequential(nn.Linear(6, 4))
        report = batchcheck.scan(model, DataLoader(TensorDataset(x, y), batch_size=8), nn.CrossEntropyLoss(), quiet=True)
        by_id = {f.id: f for f in report.findings if f.severity == "error"}
        clean = [fx for fx in by_id["input-nonfinite"].fixes if fx["id"] == "clean-data"][0]
        self.assertEqual(clean["verified"], "batch 1 ran without the samples this finding names: they pass")
        remap = [fx for fx in by_id["target-out-of-range"].fixes if fx["id"] == "remap-labels"][0]
        self.assertEqual(remap["verified"], "batch 3 ran with the label 7 mapped to class 0 (any class the model has): they pass")

    def test_a_bad_label_gets_no_loader_fix(self):
        ds = self.data(40)
        ds.tensors[1][13] = 9  # 4 classes: whatever the batch size, sample 13's batch fails
        with warnings_off():
            report = batchcheck.scan(nn.Linear(6, 4), DataLoader(ds, batch_size=8), step=mixup_step, quiet=True)
        for f in report.findings:
            self.assertFalse({"drop-last", "batch-size-divisor"} & {x["id"] for x in f.fixes}, report.text)


class LossInForwardUnscriptable(nn.Module):
    """A forward that computes its loss from the labels (transformers' kind) and cannot be
    scripted (**kwargs): traced, on a batch its labels let it run."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 4)

    def forward(self, x, labels, **extra):
        return F.cross_entropy(self.lin(x), labels)


class TestClaimsTrueOfTheCase(unittest.TestCase):
    """What the report and its warnings say is true of the scan that ran (issue 60 item 5)."""

    def test_a_nan_in_one_rare_words_embedding_row_is_that_row_not_every_prediction(self):
        class Bag(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(50, 8)
                self.fc = nn.Linear(8, 3)

            def forward(self, ids):
                return self.fc(self.emb(ids).mean(1))

        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, 40, (32, 5), generator=g)
        ids[21, 2] = 47  # the one sample holding the rare word
        ds = TensorDataset(ids, torch.randint(0, 3, (32,), generator=g))
        model = Bag()
        with torch.no_grad():
            model.emb.weight[47] = float("nan")
        loader = DataLoader(ds, batch_size=8)
        report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), quiet=True)
        f = [f for f in report.findings if f.id == "model-nonfinite"][0]
        self.assertIn("emb.weight: 8 of 400 values, in row 47", f.message)
        self.assertNotIn("whatever the batch", f.message)
        self.assertNotIn("model.pt", f.message)  # batchcheck's own temporary copy is not the user's
        self.assertEqual(f.fixes[0]["id"], "reset-nonfinite-rows", report.text)
        self.assertEqual(sorted(b for g_ in report.findings if g_.id == "output-nonfinite" for b in g_.batches), [2])
        exec(f.fixes[0]["code"], {"torch": torch, "model": model})  # the first fix, applied as printed
        for x, y in loader:
            self.assertTrue(torch.isfinite(F.cross_entropy(model(x), y)))

    def test_a_label_past_the_classes_of_a_loss_inside_forward_is_ignored_as_minus_100(self):
        g = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.rand(40, 6, generator=g), torch.randint(0, 4, (40,), generator=g))
        ds.tensors[1][19] = 9
        model = LossInForwardUnscriptable()
        with warnings_off():
            report = batchcheck.scan(model, DataLoader(ds, batch_size=8), loss="model", quiet=True)
        f = [f for f in report.findings if f.severity == "error"][0]
        self.assertEqual((f.batch, f.samples), (2, [19]), report.text)
        fix = f.fixes[0]
        self.assertEqual(fix["id"], "ignore-index", report.text)
        self.assertNotIn("ignore_index=", fix["code"])  # no argument the user could pass to forward's own loss
        for x, labels in DataLoader(ds, batch_size=8):  # the first fix, applied as printed, in the loop
            scope = {"labels": labels}
            exec(fix["code"], scope)
            self.assertTrue(torch.isfinite(model(x, scope["labels"])))

    def test_a_step_that_runs_but_cannot_be_traced_is_not_said_to_raise(self):
        g = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.rand(24, 6, generator=g), torch.randint(0, 4, (24,), generator=g))

        def untraceable(model, batch):  # code a trace cannot follow, which runs as training runs it
            if torch.jit.is_tracing():
                raise RuntimeError("this step cannot be traced")
            x, y = batch
            return F.cross_entropy(model(x), y)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            report = batchcheck.scan(nn.Linear(6, 4), DataLoader(ds, batch_size=8), step=untraceable, capture=True,
                                     quiet=True)
        said = " ".join(str(w.message) for w in seen if "batchcheck.scan" in str(w.message))
        self.assertIn("your step runs, but no trace of it can be made (this step cannot be traced)", said)
        self.assertNotIn("your step raises", said)
        self.assertNotIn("half-precision ops watched", said)  # float32: none to watch
        self.assertTrue(report.ok, report.text)

    def test_one_bad_label_in_batch_0_does_not_send_a_traceable_model_eager(self):
        g = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.rand(40, 6, generator=g), torch.randint(0, 4, (40,), generator=g))
        ds.tensors[1][3] = 4  # 4 classes: batch 0's sample 3
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            report = batchcheck.scan(LossInForwardUnscriptable(), DataLoader(ds, batch_size=8), loss="model", quiet=True)
        said = " ".join(str(w.message) for w in seen)
        self.assertNotIn("can neither script nor trace", said)
        self.assertNotIn("runs eagerly", said)
        self.assertEqual([(f.batch, f.samples) for f in report.findings if f.severity == "error"], [(0, [3])], report.text)
        self.assertFalse(any("model.format \"eager\"" in n for n in report.data.get("notes", [])), report.data.get("notes"))
        self.assertTrue(any("ran in the engine as 1 capture" in n for n in report.data.get("notes", [])))


CTC_FRAMES, CTC_CLASSES = 12, 6


class CtcData(Dataset):
    """Speech-like samples: 12 frames each, a target of 3 labels from 1 (the blank is 0)."""

    def __init__(self, n=16, long=(), blank=()):
        g = torch.Generator().manual_seed(0)
        self.items = []
        for i in range(n):
            tgt = torch.randint(1, CTC_CLASSES, (14 if i in long else 3,), generator=g)
            if i in blank:
                tgt[1] = 0
            self.items.append((torch.randn(CTC_FRAMES, 4, generator=g), tgt))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def ctc_collate(batch):  # the CTC tutorial's: targets concatenated, the lengths as Python lists
    x = torch.stack([a for a, _ in batch])
    return x, torch.cat([t for _, t in batch]), [CTC_FRAMES] * len(batch), [len(t) for _, t in batch]


class CtcEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, CTC_CLASSES)

    def forward(self, x):
        return self.lin(x).log_softmax(-1).transpose(0, 1)  # [T, N, C]


def ctc_step(model, batch):
    x, targets, input_lengths, target_lengths = batch
    return F.ctc_loss(model(x), targets, input_lengths, target_lengths)


class TestOpContracts(unittest.TestCase):
    """The contracts of the ops real steps use, checked before they run, with the sample and the
    fixes of each (issue 60 item 4)."""

    def test_a_ctc_target_longer_than_its_input_is_its_sample_with_the_lengths_fix(self):
        data = CtcData(long={10})
        loader = DataLoader(data, batch_size=8, collate_fn=ctc_collate)
        report = batchcheck.scan(CtcEncoder(), loader, step=ctc_step, quiet=True)
        self.assertEqual(errors(report), {"loss-nonfinite": [(1, [10])]}, report.text)
        f = [f for f in report.findings if f.id == "loss-nonfinite"][0]
        self.assertRegex(f.message, r"^a CTC target that needs \d+ frames \(its labels, and a blank between repeats\) for an "
                                    r"input of 12")
        self.assertEqual([x["id"] for x in f.fixes], ["ctc-lengths", "ctc-zero-infinity", "reproduce"])
        # The first fix applied: the sample whose target its input cannot hold is dropped.
        kept = [k for k in range(len(data)) if len(data[k][1]) <= CTC_FRAMES]
        self.assertEqual(real_loop(CtcEncoder(), DataLoader(torch.utils.data.Subset(data, kept), batch_size=8,
                                                            collate_fn=ctc_collate), ctc_step), {})
        for x, t, il, tl in DataLoader(torch.utils.data.Subset(data, kept), batch_size=8, collate_fn=ctc_collate):
            self.assertTrue(torch.isfinite(ctc_step(CtcEncoder(), (x, t, il, tl))))

    def test_a_ctc_target_holding_the_blank_is_named_not_passed(self):
        report = batchcheck.scan(CtcEncoder(), DataLoader(CtcData(blank={5}), batch_size=8, collate_fn=ctc_collate),
                                 step=ctc_step, quiet=True)
        f = [f for f in report.findings if f.id == "target-out-of-range"]
        self.assertEqual([(x.batch, x.samples) for x in f], [(0, [5])], report.text)
        self.assertEqual(f[0].fixes[0]["id"], "filter-blank-targets")  # one target of eight: a stray label
        self.assertIn("verified", f[0].fixes[0])
        self.assertFalse(report.ok)

    def test_a_one_hot_made_by_scatter_names_the_label_and_remaps_it(self):
        g = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.rand(32, 6, generator=g), torch.randint(0, 4, (32,), generator=g))
        ds.tensors[1][17] = 4  # 4 classes, labels 0..3: a label 4

        def mixup_target_step(model, batch):  # an image library's mixup_target: a one-hot by scatter_
            x, y = batch
            soft = torch.zeros(len(y), 4).scatter_(1, y.unsqueeze(1), 1.0)
            return F.cross_entropy(model(x), soft)
        report = batchcheck.scan(nn.Linear(6, 4), DataLoader(ds, batch_size=8), step=mixup_target_step, quiet=True)
        f = [f for f in report.findings if f.severity == "error"]
        self.assertEqual([(x.id, x.batch, x.samples) for x in f], [("forward-error", 2, [17])], report.text)
        self.assertIn("class value 4", f[0].message)
        self.assertEqual([x["id"] for x in f[0].fixes][:2], ["more-classes", "remap-labels"])

    def test_an_empty_sample_given_to_pack_padded_sequence_is_dropped_first(self):
        g = torch.Generator().manual_seed(0)
        seqs = [torch.randn(int(n), 3, generator=g) for n in torch.randint(1, 6, (24,), generator=g)]
        seqs[9] = torch.zeros(0, 3)

        class Seq(Dataset):
            def __len__(self):
                return len(seqs)

            def __getitem__(self, i):
                return seqs[i], i % 2

        def pad(batch):
            xs = [x for x, _ in batch]
            return nn.utils.rnn.pad_sequence(xs, batch_first=True), torch.tensor([len(x) for x in xs]), \
                torch.tensor([y for _, y in batch])

        rnn = nn.GRU(3, 4, batch_first=True)

        def step(model, batch):
            x, lengths, y = batch
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            _, h = model(packed)
            return F.cross_entropy(h[-1][:, :2], y)
        report = batchcheck.scan(rnn, DataLoader(Seq(), batch_size=8, collate_fn=pad), step=step, quiet=True)
        f = [f for f in report.findings if f.severity == "error"]
        self.assertEqual([(x.id, x.batch, x.samples) for x in f], [("forward-error", 1, [9])], report.text)
        self.assertEqual(f[0].fixes[0]["id"], "drop-empty-samples")
        kept = [i for i in range(len(seqs)) if len(seqs[i])]  # the first fix applied
        self.assertEqual(real_loop(rnn, DataLoader(torch.utils.data.Subset(Seq(), kept), batch_size=8, collate_fn=pad),
                                   step), {})


class Fragile(nn.Module):
    def forward(self, x):
        raise RuntimeError("not on this input")


class FallbackBody(nn.Module):  # a forward that catches its submodule's error and goes on
    def __init__(self):
        super().__init__()
        self.fragile, self.head = Fragile(), nn.Linear(6, 4)

    def forward(self, x):
        try:
            x = self.fragile(x)
        except RuntimeError:
            pass
        return self.head(x)


class WithBody(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = FallbackBody()


def torch_2_0_hooks():
    """torch 2.0's register_module_forward_hook, the package's oldest torch: no always_call (2.1)."""
    from unittest import mock
    from torch.nn.modules import module as m
    real = m.register_module_forward_hook

    def register(hook, **kwargs):
        if kwargs:
            raise TypeError("register_module_forward_hook() got an unexpected keyword argument %r" % next(iter(kwargs)))
        return real(hook)
    return mock.patch.object(m, "register_module_forward_hook", register)


class TestOldestTorch(unittest.TestCase):
    """torch 2.0 (pyproject's torch>=2.0) has no always_call for the global forward hook, which
    batchcheck's module stack used: every step scan raised TypeError there."""

    def test_a_step_scans_with_torch_2_0s_forward_hook(self):
        g = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.rand(32, 6, generator=g), torch.randint(0, 4, (32,), generator=g))
        ds.tensors[1][21] = 4  # 4 classes

        def step(model, batch):
            x, y = batch
            return F.cross_entropy(model.body(x), y)
        with torch_2_0_hooks():
            report = batchcheck.scan(WithBody(), DataLoader(ds, batch_size=8), step=step, quiet=True)
        self.assertEqual(errors(report), {"target-out-of-range": [(2, [21])]}, report.text)

    def test_a_half_precision_step_and_a_nans_origin_without_tree_leaves(self):
        # torch.utils._pytree.tree_leaves is newer than torch 2.0: the half watch and the NaN's
        # origin read an op's tensors without it, and find what they find with it.
        import torch.utils._pytree as pytree
        g = torch.Generator().manual_seed(0)
        ds = TensorDataset(torch.rand(48, 6, generator=g), torch.randint(0, 4, (48,), generator=g))
        ds.tensors[0][29, 2] = -1.0  # sqrt of it: a NaN born in the step

        def step(model, batch):
            x, y = batch
            return F.cross_entropy(model(torch.sqrt(x)), y)
        found = []
        for hide in (False, True):
            saved = pytree.__dict__.pop("tree_leaves") if hide else None
            try:
                for precision in (None, "bf16"):
                    torch.manual_seed(0)
                    r = batchcheck.scan(nn.Linear(6, 4), DataLoader(ds, batch_size=16), step=step, precision=precision,
                                        quiet=True)
                    found.append((errors(r), [f.message for f in r.errors()]))
            finally:
                if hide:
                    pytree.tree_leaves = saved
        self.assertEqual([(k, [b for b, _ in v]) for k, v in found[0][0].items()], [("loss-nonfinite", [1])], found[0])
        self.assertIn("aten::sqrt", found[0][1][0])
        self.assertEqual(found[:2], found[2:])

    def test_a_caught_submodule_error_leaves_no_module_named_once_its_caller_returned(self):
        # Without always_call a forward that raises gets no post hook: the module that caught it
        # pops down to its own entry when it returns.
        from types import SimpleNamespace
        from batchcheck import _eager
        model, checks, seen = WithBody(), SimpleNamespace(stack=[]), []
        with torch_2_0_hooks(), _eager._ModuleStack(checks, model):
            model.body(torch.rand(2, 6))
            seen.append([name for name, _, _ in checks.stack])
        self.assertEqual(seen, [[]])


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]] + sys.argv[1:])
