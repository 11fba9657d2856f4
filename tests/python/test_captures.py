"""Training steps written the way real code reads them (pytorch/examples' kinds and the language
models' idioms), each scanned through step= and compared with its own real loop on the same loader:
clean with a tail batch (no false error), with one fault in batch 0 and with one in a later batch
(found at the batch where the real loop fails, at its sample where the step keeps samples apart).
The code uses what traces freeze: len(x), sizes unpacked as Python ints, masks made from lengths,
sequence-first [T, B] batches, a loss inside the model's forward, autocast.

Run by ctest with BATCHCHECK_BINARY (the built command) and python/ on PYTHONPATH.
"""
import inspect
import itertools
import os
import unittest

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, TensorDataset

import batchcheck
import reproduce_check  # noqa: F401 - every reproduce a scan here prints is run as printed


def real_loop(model, loader, step):
    """The training loop, going on past a failing batch (no optimizer step, as in the scan):
    {batch: the error's first line, or "non-finite loss"} for each batch that fails."""
    model.train()
    failed = {}
    for k, batch in enumerate(loader):
        try:
            loss = step(model, batch)
            if not torch.isfinite(loss).all():
                failed[k] = "non-finite loss"
            loss.backward()
        except (RuntimeError, ValueError, IndexError) as e:
            failed[k] = str(e).strip().splitlines()[0]
        model.zero_grad(set_to_none=True)
    return failed


def error_batches(report):
    """{batch: {finding id: samples}} of the error findings of the epoch (not the probes)."""
    out = {}
    for f in report.findings:
        if f.severity != "error":
            continue
        for o in f.data["occurrences"]:
            if o.get("batch") is not None:
                out.setdefault(o["batch"], {})[f.id] = o["samples"]
    return out


# ---- the models and steps ---------------------------------------------------------------------

class TinyVGG(nn.Module):  # fast_neural_style's perceptual features, small
    def __init__(self):
        super().__init__()
        self.s1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.s2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())

    def forward(self, x):
        a = self.s1(x)
        return a, self.s2(a)


class Transformer(nn.Module):  # fast_neural_style's image transformer, small
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.ReLU(),
                                 nn.Conv2d(8, 3, 3, padding=1))
        self.vgg = TinyVGG()
        for p in self.vgg.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        return self.net(x)


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    return features.bmm(features.transpose(1, 2)) / (ch * h * w)


STYLE = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(5))


def style_step(model, batch):
    x, _ = batch
    n_batch = len(x)
    y = model(x)
    features_y, features_x = model.vgg(y), model.vgg(x)
    content = F.mse_loss(features_y[1], features_x[1])
    style = 0.0
    for ft_y, gm_s in zip(features_y, [gram_matrix(f) for f in model.vgg(STYLE.repeat(4, 1, 1, 1))]):
        style = style + F.mse_loss(gram_matrix(ft_y), gm_s[:n_batch, :, :])
    return content + 1e3 * style


class SiameseBN(nn.Module):  # siamese_network with its BatchNorm head
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, a, b):
        return torch.sigmoid(self.fc(torch.cat([self.enc(a), self.enc(b)], 1)))


bce = nn.BCELoss()


def siamese_step(model, batch):
    a, b, y = batch
    return bce(model(a, b).squeeze(), y)


VOCAB, PAD = 50, 0


class Seq2Seq(nn.Module):  # language_translation's shape: [T, B] batches, padded
    def __init__(self):
        super().__init__()
        self.src_embedding = nn.Embedding(VOCAB, 16, padding_idx=PAD)
        self.rnn = nn.GRU(16, 16)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, src):
        h, _ = self.rnn(self.src_embedding(src))
        return self.out(h)


def seq_step(model, batch):
    src, tgt = batch
    logits = model(src)  # [T, B, V]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=PAD)


class Pairs(Dataset):
    """Token sequences of varying length, (src, tgt) per sample."""

    def __init__(self, n, bad=None, lo=3, hi=9):
        g = torch.Generator().manual_seed(2)
        self.items = []
        for i in range(n):
            t = int(torch.randint(lo, hi, (1,), generator=g))
            src = torch.randint(1, VOCAB, (t,), generator=g)
            self.items.append((src, torch.roll(src, 1)))
        if bad is not None:
            self.items[bad][0][1] = VOCAB + 7  # a token id past the vocabulary

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def shifted_step(model, batch):  # language_translation's loss: each position predicts the next target
    src, tgt = batch
    logits = model(src)[:-1]  # [T-1, B, V]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[1:].reshape(-1), ignore_index=PAD)


def pad_collate_tb(batch):  # sequence-first, as pad_sequence makes by default
    src, tgt = zip(*batch)
    return pad_sequence(src, padding_value=PAD), pad_sequence(tgt, padding_value=PAD)


class GPT(nn.Module):  # minGPT's shape: the loss computed in forward from the targets
    def __init__(self, block=8):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, 16)
        self.pos = nn.Embedding(block, 16)
        self.ln = nn.LayerNorm(16)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
        logits = self.head(self.ln(self.tok(idx) + self.pos(pos)))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def gpt_step(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


def gpt_autocast_step(model, batch):
    x, y = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(x)
    return F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1))


class RNNClassifier(nn.Module):  # mnist_rnn
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return F.log_softmax(self.fc(out[:, -1, :]), dim=1)


def rnn_step(model, batch):
    x, y = batch
    return F.nll_loss(model(x.squeeze(1)), y)


NZ = 4


class G(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.ConvTranspose2d(NZ, 8, 4, 1, 0, bias=False), nn.BatchNorm2d(8), nn.ReLU(True),
                                  nn.ConvTranspose2d(8, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class D(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Conv2d(3, 8, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
                                  nn.Conv2d(8, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x)


torch.manual_seed(0)
netG = G()


def gan_step(netD, batch):  # dcgan's discriminator update, as written there
    real_cpu = batch[0]
    b_size = real_cpu.size(0)
    label = torch.full((b_size,), 1.0, dtype=torch.float)
    err_real = bce(netD(real_cpu).view(-1), label)
    fake = netG(torch.randn(b_size, NZ, 1, 1))
    fake_label = torch.full((b_size,), 0.0, dtype=torch.float)
    return err_real + bce(netD(fake.detach()).view(-1), fake_label)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(64, 16), nn.Linear(16, 4), nn.Linear(16, 4)
        self.fc3, self.fc4 = nn.Linear(4, 16), nn.Linear(16, 64)

    def forward(self, x):
        h = F.relu(self.fc1(x.view(-1, 64)))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(logvar) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae_step(model, batch):
    x, _ = batch
    recon, mu, logvar = model(x)
    b = F.binary_cross_entropy(recon, x.view(-1, 64), reduction="sum")
    return b - 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


class ResNetish(nn.Module):  # imagenet's kind: BatchNorm, cross_entropy
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten())
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(self.body(x))


def imagenet_step(model, batch):
    images, target = batch
    output = model(images)
    # label smoothing written out, with the batch size read as a Python number
    n = len(images)
    smooth = torch.full((n, 5), 0.02).scatter(1, target.clamp(0, 4).unsqueeze(1), 0.92)
    return F.cross_entropy(output, target) + 0.1 * -(smooth * F.log_softmax(output, 1)).sum() / n


class SR(nn.Module):  # super_resolution
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x):
        return self.shuffle(self.conv(x))


def sr_step(model, batch):
    lo, hi = batch
    return F.mse_loss(model(lo), hi)


class T5ish(nn.Module):  # an encoder over [B, T] with labels flattened to [B*T]
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.lm_head = nn.Linear(16, VOCAB)

    def forward(self, input_ids):
        return self.lm_head(torch.tanh(self.emb(input_ids)))


def t5_step(model, batch):
    ids, labels = batch
    labels = labels.masked_fill(labels == PAD, -100)
    logits = model(ids)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)


def pad_collate_bt(batch):  # batch-first, with each sample's length
    src, tgt = zip(*batch)
    lengths = torch.tensor([len(s) for s in src])
    return pad_sequence(src, batch_first=True, padding_value=PAD), pad_sequence(tgt, batch_first=True), lengths


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc(self.emb(x)).squeeze(-1)


def masked_step(model, batch):  # a masked mean over each sequence's real positions
    x, y, lengths = batch
    pred = model(x)
    t = x.shape[1]
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return (((pred - y.float() / VOCAB) ** 2) * mask).sum() / mask.sum()


# ---- the cases --------------------------------------------------------------------------------

def images(n, c=3, s=8, seed=0):
    return torch.rand(n, c, s, s, generator=torch.Generator().manual_seed(seed))


def case_style(bad):
    x = images(18, 3, 16)
    if bad is not None:
        x[bad, 0, 1, 1] = float("nan")
    return Transformer(), DataLoader(TensorDataset(x, torch.zeros(18)), batch_size=4), style_step


def case_siamese(bad, n=34):
    g = torch.Generator().manual_seed(1)
    a, b = torch.rand(n, 1, 8, 8, generator=g), torch.rand(n, 1, 8, 8, generator=g)
    y = torch.randint(0, 2, (n,), generator=g).float()
    if bad is not None:
        y[bad] = 2.0
    return SiameseBN(), DataLoader(TensorDataset(a, b, y), batch_size=8), siamese_step


def case_seq2seq(bad):
    return Seq2Seq(), DataLoader(Pairs(60, bad), batch_size=16, collate_fn=pad_collate_tb), seq_step


def case_shifted(bad):
    ds = Pairs(60)
    if bad is not None:
        ds.items[bad][1][2] = VOCAB + 5  # a target token past the vocabulary, inside tgt[1:]
    return Seq2Seq(), DataLoader(ds, batch_size=16, collate_fn=pad_collate_tb), shifted_step


def case_gpt(bad):
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, VOCAB, (42, 8), generator=g)
    y = torch.roll(x, -1, 1)
    if bad is not None:
        y[bad, 2] = VOCAB + 3  # a target token past the vocabulary
    return GPT(), DataLoader(TensorDataset(x, y), batch_size=8), gpt_step


def case_gpt_autocast(bad):
    model, loader, _ = case_gpt(bad)
    return model, loader, gpt_autocast_step


def case_rnn(bad):
    g = torch.Generator().manual_seed(4)
    x, y = torch.rand(45, 1, 8, 8, generator=g), torch.randint(0, 10, (45,), generator=g)
    if bad is not None:
        y[bad] = 10
    return RNNClassifier(), DataLoader(TensorDataset(x, y), batch_size=16), rnn_step


def case_gan(bad):
    x = images(50) * 2 - 1
    if bad is not None:
        x[bad, 1, 2, 2] = float("nan")
    torch.manual_seed(1)
    return D(), DataLoader(TensorDataset(x, torch.zeros(50)), batch_size=16), gan_step


def case_vae(bad):
    x = images(70, 1, 8, seed=6)
    if bad is not None:
        x[bad, 0, 3, 3] = 2.0  # a pixel past 1: BCE's target in this step
    return VAE(), DataLoader(TensorDataset(x, torch.zeros(70)), batch_size=16), vae_step


def case_imagenet(bad):
    g = torch.Generator().manual_seed(7)
    x, y = images(38, seed=7), torch.randint(0, 5, (38,), generator=g)
    if bad is not None:
        y[bad] = 255
    return ResNetish(), DataLoader(TensorDataset(x, y), batch_size=8), imagenet_step


def case_sr(bad):
    hi = images(30, 1, 8, seed=8)
    lo = F.avg_pool2d(hi, 2)
    if bad is not None:
        lo[bad, 0, 1, 1] = float("nan")
    return SR(), DataLoader(TensorDataset(lo, hi), batch_size=8), sr_step


def case_t5(bad):
    ds = Pairs(44, lo=6, hi=7)  # one length: a [B, T] batch flattened to [B*T]
    if bad is not None:
        ds.items[bad][1][3] = VOCAB + 1  # a label past the vocabulary
    return T5ish(), DataLoader(ds, batch_size=8, collate_fn=lambda b: tuple(torch.stack(f) for f in zip(*b))), t5_step


def case_masked(bad):
    ds = Pairs(50, lo=2, hi=12)
    if bad is not None:
        ds.items[bad][0][0] = VOCAB + 2  # an id past the embedding
    return Regressor(), DataLoader(ds, batch_size=12, collate_fn=pad_collate_bt), masked_step


# name: (make the case, a sample of batch 0, a sample of a later batch, whether the real loop's
# error keeps to the sample: the scan must name it)
CASES = {
    "gram matrix with len(x)": (case_style, 1, 9, False),
    "siamese with BatchNorm and squeeze": (case_siamese, 3, 19, True),
    "seq2seq on [T, B] batches": (case_seq2seq, 5, 40, True),
    "[T, B] targets shifted by one (translation)": (case_shifted, 5, 40, True),
    "loss inside forward (minGPT)": (case_gpt, 2, 30, True),
    "step under autocast": (case_gpt_autocast, 2, 30, True),
    "mnist_rnn": (case_rnn, 4, 33, True),
    "dcgan discriminator": (case_gan, 6, 40, True),
    "vae": (case_vae, 7, 50, True),
    "imagenet with label smoothing by len()": (case_imagenet, 0, 25, True),
    "super_resolution": (case_sr, 2, 27, True),
    "flattened labels (T5)": (case_t5, 1, 37, True),
    "mask from lengths": (case_masked, 3, 45, True),
}


def scan_and_loop(make, bad, capture=False):
    """The scan (the step as written, or capture=True: traced), then the real loop on the same
    model and loader (the scan leaves both as they were)."""
    torch.manual_seed(0)
    model, loader, step = make(bad)
    report = batchcheck.scan(model, loader, step=step, quiet=True, capture=capture)
    return report, real_loop(model, loader, step), loader


class TestCapturesAgainstTheRealLoop(unittest.TestCase):
    def test_each_step_clean_and_with_a_fault_in_batch_0_and_in_a_later_batch(self):
        for name, (make, first, later, by_sample) in CASES.items():
            for bad, capture in itertools.product((None, first, later), (False, True)):
                with self.subTest(case=name, bad=bad, capture=capture):
                    report, truth, loader = scan_and_loop(make, bad, capture)
                    found = error_batches(report)
                    self.assertEqual(sorted(found), sorted(truth), "%s\nreal loop: %s\n%s" % (name, truth, report.text))
                    if bad is None:
                        self.assertTrue(report.ok, report.text)
                        continue
                    batch = bad // loader.batch_size
                    self.assertEqual(sorted(truth), [batch], truth)
                    if by_sample:
                        named = set(s for samples in found[batch].values() for s in samples)
                        self.assertEqual(named, {bad}, "%s\n%s" % (name, report.text))

    def test_reproduce_builds_the_batch_with_the_loaders_collate_fn_and_raises_as_training_did(self):
        report, truth, loader = scan_and_loop(case_seq2seq, 40)
        fix = [x for f in report.errors() for x in f.data["fixes"] if x["id"] == "reproduce"][0]
        # pad_collate_tb of this script (run as __main__: by the loader's name), or of the module.
        self.assertRegex(fix["code"], r"^import torch\nfrom torch import nn\n(from test_captures import pad_collate_tb\n"
                                      r"idx = range\(32, 48\)\nbatch = pad_collate_tb|idx = range\(32, 48\)\n"
                                      r"batch = loader\.collate_fn)\(\[dataset\[i\] for i in idx\]\)\n")
        self.assertNotIn("default_collate", fix["code"])
        model, _, step = case_seq2seq(40)
        scope = {"dataset": loader.dataset, "model": model, "step": step, "loader": loader}
        with self.assertRaises(IndexError) as raised:
            exec(fix["code"], scope)
        self.assertEqual(str(raised.exception), truth[2])

    def test_a_batchnorm_tail_of_one_is_reported_first_as_pytorch_raises_it(self):
        # PyTorch raises BatchNorm's check before the loss's size check the .squeeze() would fail.
        report, truth, _ = scan_and_loop(lambda bad: case_siamese(bad, n=33), None)
        self.assertEqual(list(truth.values()), ["Expected more than 1 value per channel when training, got input size "
                                                "torch.Size([1, 8])"])
        found = error_batches(report)
        self.assertEqual(found, {4: {"batchnorm-single-value": [32]}}, report.text)
        f = [f for f in report.findings if f.id == "batchnorm-single-value"][0]
        self.assertIn("BatchNorm fc.1 (BatchNorm1d)", f.message)

    def test_a_gram_matrix_sliced_by_len_passes_its_tail_with_a_capture_of_its_own(self):
        report, truth, _ = scan_and_loop(case_style, None, capture=True)
        self.assertEqual(truth, {})
        self.assertTrue(report.ok, report.text)
        self.assertTrue(any("2 captures" in n for n in report.data["notes"]), report.data["notes"])

    def test_the_precision_the_step_ran_in_is_in_the_notes(self):
        report, _, _ = scan_and_loop(case_gpt_autocast, None)
        notes = " ".join(report.data["notes"])
        self.assertIn("torch.autocast", notes)
        self.assertIn("bfloat16", notes)
        for capture in (False, True):
            plain, _, _ = scan_and_loop(case_gpt, None, capture)
            self.assertIn("float32", " ".join(plain.data["notes"]))


class TestALossInsideForward(unittest.TestCase):
    """loss="model" with the targets passed to forward (minGPT): an index fault names its sample
    and gets its kind's fixes, whether the model runs in the engine (traced with its targets) or
    eagerly here (eager=True)."""

    def test_a_token_id_and_a_target_past_the_vocabulary_name_their_sample(self):
        g = torch.Generator().manual_seed(3)
        x = torch.randint(0, VOCAB, (42, 8), generator=g)
        y = torch.roll(x, -1, 1)
        for eager in (None, True):
            for bad in ("input", "target"):
                with self.subTest(eager=eager, bad=bad):
                    xx, yy = x.clone(), y.clone()
                    (xx if bad == "input" else yy)[30, 4] = VOCAB + 3
                    loader = DataLoader(TensorDataset(xx, yy), batch_size=8)
                    torch.manual_seed(0)
                    report = batchcheck.scan(GPT(), loader, loss="model", output=1, quiet=True, eager=eager)
                    truth = real_loop(GPT(), loader, gpt_step)
                    self.assertEqual(sorted(truth), [3], truth)
                    found = error_batches(report)
                    self.assertEqual(sorted(found), [3], report.text)
                    self.assertEqual({s for v in found[3].values() for s in v}, {30}, report.text)
                    fixes = [x["id"] for f in report.findings if f.severity == "error" for x in f.data["fixes"]]
                    if bad == "input":
                        self.assertEqual(fixes[:3], ["resize-embeddings", "map-unknown-ids", "check-vocab-size"], report.text)
                    else:
                        self.assertEqual(fixes[:2], ["ignore-index", "remap-labels"], report.text)
                        self.assertNotIn("clamp-targets", fixes)
                    if eager:
                        self.assertIn("in forward's aten::", report.text)
                        self.assertNotIn("your step", report.text)


class TestTheSampleOfAnArgument(unittest.TestCase):
    """Where an op's argument is not batch-first, its sample is found through the field of the
    batch its values prove it a view of (the eager path's _rows; the engine's is argument_check)."""

    def test_sequence_first_flattened_shifted_and_transposed(self):
        from batchcheck._eager import _rows
        g = torch.Generator().manual_seed(5)
        tgt = torch.randint(0, 10, (7, 4), generator=g)  # [T, B]
        tgt[3, 2] = 99  # sample 2
        for arg in (tgt, tgt.reshape(-1), tgt[1:].reshape(-1), tgt.t().reshape(-1), tgt[:-2]):
            with self.subTest(shape=list(arg.shape)):
                self.assertEqual(_rows(arg >= 10, arg, 4, [tgt]), [2])

    def test_values_no_field_holds_name_no_sample(self):
        from batchcheck._eager import _rows
        ids = torch.arange(12).reshape(3, 4)  # batch-first [B, T]: rows by the first dimension
        self.assertEqual(_rows(ids >= 9, ids, 3, [ids]), [2])
        made = (ids * 3).reshape(-1)  # not a view of any field: not proven
        self.assertEqual(_rows(made >= 30, made, 3, [ids]), [])
        self.assertEqual(_rows(made >= 30, made, 3, []), [])


class Unscriptable(nn.Module):
    """TorchScript cannot compile *inputs, so scan() traces it; len(x) is read as a Python number."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, *inputs):
        x = inputs[0]
        n = len(x)
        return self.fc(x) * torch.ones(n, 1)


class TestTracedModels(unittest.TestCase):
    def test_a_traced_model_reading_len_passes_its_tail_and_still_finds_a_label(self):
        g = torch.Generator().manual_seed(9)
        x, y = torch.rand(22, 6, generator=g), torch.randint(0, 3, (22,), generator=g)
        loader = DataLoader(TensorDataset(x, y), batch_size=8)  # a tail of 6
        with self.assertWarns(UserWarning):  # scripting fails: traced, as said
            clean = batchcheck.scan(Unscriptable(), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertTrue(clean.ok, clean.text)
        # Batches of 8, the tail of 6 and the probe of one sample: a trace each.
        self.assertTrue(any("your model ran in the engine as 3 captures" in n for n in clean.data["notes"]),
                        clean.data["notes"])
        y[20] = 3  # a class past the three, in the tail
        bad = batchcheck.scan(Unscriptable(), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertEqual(error_batches(bad), {2: {"target-out-of-range": [20]}}, bad.text)


class TestAStepNoCaptureCanBeMade(unittest.TestCase):
    """Where the step raises on each of the first batches, no trace of it can be made: it runs
    eagerly, checked there (the arguments of its ops, its gradients) in the engine's words."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 10)

        def forward(self, x):
            return self.fc(x)

    @staticmethod
    def step(model, batch):
        x, y = batch
        out = model(x)
        # A norm of each row scaled by its input: sqrt at 0 makes a NaN gradient for an all-zero sample.
        reg = torch.sqrt((out * x.abs().sum(1, keepdim=True)).pow(2).sum(1))
        log_prior = torch.log(x[:, 0] + 1.0).sum()  # NaN for a first feature below -1
        return F.cross_entropy(out, y) + 1e-3 * reg.sum() + 1e-3 * log_prior

    def test_faults_and_gradients_are_found_eagerly_at_the_real_loops_batches(self):
        g = torch.Generator().manual_seed(11)
        x, y = torch.rand(120, 4, generator=g) + 0.1, torch.randint(0, 10, (120,), generator=g)
        y[:64:8] = 10  # one label past the classes in each of the first 8 batches
        x[100] = 0.0  # its gradient is NaN
        x[110, 0] = -2.0  # its loss is NaN, born in the step's log
        loader = DataLoader(TensorDataset(x, y), batch_size=8)
        model = self.Net()
        with self.assertWarns(UserWarning):  # captured, it raises on every batch tried: run as written
            report = batchcheck.scan(model, loader, step=self.step, quiet=True, capture=True)
        truth = real_loop(model, loader, self.step)
        self.assertEqual(sorted(truth), list(range(8)) + [13])
        found = error_batches(report)
        for k in range(8):
            self.assertEqual(found.get(k), {"target-out-of-range": [8 * k]}, report.text)
        # The gradient the real loop computes at batch 12 holds NaN, its loss finite.
        model.zero_grad()
        self.step(model, (x[96:104], y[96:104])).backward()
        self.assertTrue(torch.isnan(model.fc.weight.grad).any())
        self.assertIn("gradient-nonfinite", found.get(12, {}), report.text)
        self.assertEqual(truth[13], "non-finite loss")
        self.assertEqual(sorted(found), list(range(8)) + [12, 13], report.text)
        # Where the NaN was born, found by running the failing batch once more.
        nan = [f for f in report.findings if 13 in f.batches and f.severity == "error"][0]
        root = nan.data.get("root_cause") or {}
        self.assertEqual((root.get("kind"), root.get("op")), ("op", "aten::log"), nan.data)
        self.assertEqual((os.path.basename(root.get("file", "")), root.get("line")), ("test_captures.py", LOG_PRIOR_LINE), root)
        self.assertTrue(any("run as written" in n for n in report.data["notes"]), report.data["notes"])


# The line of the step's log, where the NaN of batch 13 is born.
LOG_PRIOR_LINE = next(n for n, line in enumerate(inspect.getsource(inspect.getmodule(TestAStepNoCaptureCanBeMade)).splitlines(), 1)
                      if line.strip().startswith("log_prior = torch.log("))


if __name__ == "__main__":
    unittest.main()
