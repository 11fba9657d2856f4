"""The models people train, from the libraries they come from (random weights, no downloads),
through batchcheck.scan(), each clean and with an injected fault, each compared with the real
eager training loop on the same loader: where the loop raises or turns NaN, batchcheck must
name that batch (and the sample); where the loop trains, batchcheck must pass.

Which path each takes: every model here reaches the engine as TorchScript. timm's, smp's and
MONAI's compile with torch.jit.script; BERT and DistilBERT do not (forward takes **kwargs) and
are traced on the first batch (torchscript=True: forward returns tuples). GPT-2 can be neither
(its padding mask is built with torch.vmap): its forward runs eagerly in the test's process,
model(**batch) with its labels, and the engine checks the loss it returns.
The region losses of MONAI and smp (Dice, DiceCE, Jaccard, focal) are checked by their own
target contracts: where they raise, against the loop; where they train silently on a wrong
loss, against the loop's loss value leaving [0, 1].
Skipped (with the reason) where a library is not installed."""
import sys
import unittest
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import batchcheck
import reproduce_check  # noqa: F401 - every reproduce a scan here prints is run as printed

warnings.filterwarnings("ignore")


def lib(name):
    try:
        return __import__(name)
    except ImportError:
        return None


timm, smp, monai, transformers = lib("timm"), lib("segmentation_models_pytorch"), lib("monai"), lib("transformers")


def eager_loop(model, loader, loss_fn, prediction=lambda out: out):
    """The training loop: (batch, what happened) at its first failure, else None. A NaN loss
    is a failure too (the loop's next step trains on NaN)."""
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for k, batch in enumerate(loader):
        *inputs, y = batch
        try:
            loss = loss_fn(prediction(model(*inputs)), y)
            if not torch.isfinite(loss):
                return k, "nan loss"
            opt.zero_grad()
            loss.backward()
            opt.step()
        except (RuntimeError, ValueError, IndexError) as e:
            return k, str(e).splitlines()[0]
    return None


def errors(report):
    return [(f.id, f.batch, f.samples) for f in report.errors()]


class Case(unittest.TestCase):
    def check(self, make, loader, loss, *, expect=None, prediction=lambda out: out, **options):
        """Runs the eager loop and the scan on fresh copies of one model; `expect`: the finding id
        batchcheck must report at the loop's failing batch (None: the loop trains and the scan passes)."""
        torch.manual_seed(0)
        truth = eager_loop(make(), loader, loss, prediction)
        torch.manual_seed(0)
        report = batchcheck.scan(make(), loader, loss, quiet=True, **options)
        if expect is None:
            self.assertIsNone(truth)
            self.assertTrue(report.ok, report.text)
            return report
        self.assertIsNotNone(truth, "the eager loop trained through the injected fault")
        self.assertFalse(report.ok, report.text)
        hit = [f for f in report.errors() if f.id == expect]
        self.assertTrue(hit, (truth, errors(report)))
        self.assertEqual(hit[0].batch, truth[0], (truth, errors(report)))
        return hit[0]


def images(n, size, classes=5, nan=()):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(n, 3, size, size, generator=g)
    for i in nan:
        x[i, :, 0, 0] = float("nan")
    return TensorDataset(x, torch.randint(0, classes, (n,), generator=g))


@unittest.skipIf(timm is None, "timm is not installed (scripts/setup.sh installs it)")
class TestTimm(Case):
    def test_resnet18_last_batch_of_one_at_32px(self):
        # 32 px: layer4 sees 1x1, so a batch of one leaves BatchNorm one value per channel.
        make = lambda: timm.create_model("resnet18", pretrained=False, num_classes=5)  # noqa: E731
        loader = DataLoader(images(9, 32), batch_size=4)
        hit = self.check(make, loader, nn.CrossEntropyLoss(), expect="batchnorm-single-value")
        self.assertEqual(hit.samples, [8])
        self.check(make, DataLoader(images(9, 32), batch_size=4, drop_last=True), nn.CrossEntropyLoss())

    def test_efficientnet_and_convnext_nan_image(self):
        for name in ("efficientnet_b0", "convnext_atto"):
            with self.subTest(name):
                make = lambda: timm.create_model(name, pretrained=False, num_classes=5)  # noqa: E731
                loader = DataLoader(images(12, 32, nan=[6]), batch_size=4, shuffle=False)
                hit = self.check(make, loader, nn.CrossEntropyLoss(), expect="input-nonfinite")
                self.assertEqual(hit.samples, [6])

    def test_vit_clean_and_label_out_of_range(self):
        make = lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=32)  # noqa: E731
        self.check(make, DataLoader(images(8, 32), batch_size=4), nn.CrossEntropyLoss())
        ds = images(8, 32)
        ds.tensors[1][5] = 255
        hit = self.check(make, DataLoader(ds, batch_size=4), nn.CrossEntropyLoss(), expect="target-out-of-range")
        self.assertEqual(hit.samples, [5])


def masks(n, size, bad=None):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(n, 3, size, size, generator=g)
    y = (torch.rand(n, 1, size, size, generator=g) > 0.5).float()
    if bad is not None:
        y[bad, 0, :4, :4] = 255.0  # a mask saved as 0/255
    return TensorDataset(x, y)


@unittest.skipIf(smp is None, "segmentation-models-pytorch is not installed (scripts/setup.sh installs it)")
class TestSegmentationModels(Case):
    def test_unet_and_fpn_sigmoid_bce_with_a_255_mask(self):
        for arch in ("Unet", "FPN"):
            with self.subTest(arch):
                make = lambda: nn.Sequential(getattr(smp, arch)("resnet18", encoder_weights=None, classes=1), nn.Sigmoid())  # noqa: E731
                self.check(make, DataLoader(masks(8, 64), batch_size=4), nn.BCELoss())
                hit = self.check(make, DataLoader(masks(8, 64, bad=6), batch_size=4), nn.BCELoss(), expect="target-out-of-range")
                self.assertEqual(hit.samples, [6])


@unittest.skipIf(monai is None, "MONAI is not installed (scripts/setup.sh installs it)")
class TestMonai(Case):
    def test_unet_class_index_255(self):
        from monai.networks.nets import UNet
        make = lambda: UNet(spatial_dims=2, in_channels=1, out_channels=3, channels=(8, 16, 32), strides=(2, 2),  # noqa: E731
                            num_res_units=1)
        g = torch.Generator().manual_seed(3)
        x, y = torch.rand(8, 1, 32, 32, generator=g), torch.randint(0, 3, (8, 32, 32), generator=g)
        self.check(make, DataLoader(TensorDataset(x, y), batch_size=4), nn.CrossEntropyLoss())
        y = y.clone()
        y[6, 0, 0] = 255
        hit = self.check(make, DataLoader(TensorDataset(x, y), batch_size=4), nn.CrossEntropyLoss(), expect="target-out-of-range")
        self.assertEqual(hit.samples, [6])


def small_unet(classes):
    from monai.networks.nets import UNet
    return lambda: UNet(spatial_dims=2, in_channels=1, out_channels=classes, channels=(8, 16, 32), strides=(2, 2),
                        num_res_units=1)


def eager_gaps(model, loader, loss_fn, correct):
    """One eager training epoch (it trains through silent faults: nothing may raise); per batch,
    how far its loss is from the loss of the corrected batch (`correct(prediction, target)`)."""
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gaps = []
    for x, y in loader:
        pred = model(x)
        loss = loss_fn(pred, y)
        with torch.no_grad():
            gaps.append(abs(loss.item() - loss_fn(*correct(pred, y)).item()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return gaps


def region_data(n, classes, channel=True, bad=None, value=255):
    """(image, target): a 0/1 mask for one class, else class indices ((N, 1, H, W) with `channel`)."""
    g = torch.Generator().manual_seed(5)
    x = torch.rand(n, 1, 32, 32, generator=g)
    if classes == 1:
        y = (torch.rand(n, 1, 32, 32, generator=g) > 0.5).float()
    else:
        y = torch.randint(0, classes, (n, 1, 32, 32) if channel else (n, 32, 32), generator=g)
    if bad is not None:
        y[bad, ..., :4, :4] = value
    return TensorDataset(x, y)


def as_unit_mask(pred, y):
    return pred, y.clamp(0, 1)


@unittest.skipIf(monai is None or smp is None, "MONAI and segmentation-models-pytorch are needed (scripts/setup.sh installs them)")
class TestRegionLosses(Case):
    """MONAI's and smp's own losses. Most of their misuses do not raise: a 0/255 mask or a prediction
    of logits given as probabilities trains on a wrong loss. There the witness is the eager loop
    itself: it trains through the batch, on a loss that differs from the corrected batch's, and
    batchcheck must fail that batch."""

    def silent(self, make, data, loss, correct, expect, batch, samples=None):
        gaps = eager_gaps(make(), DataLoader(data, batch_size=4), loss, correct)
        self.assertGreater(gaps[batch], 1e-3, "the fault did not change the loss: %s" % gaps)
        report = batchcheck.scan(make(), DataLoader(data, batch_size=4), loss, quiet=True)
        hit = [f for f in report.errors() if f.id == expect]
        self.assertTrue(hit, errors(report))
        self.assertEqual(hit[0].batch, batch)
        if samples is not None:
            self.assertEqual(hit[0].samples, samples)

    def test_monai_dice_trains_silently_on_a_255_mask(self):
        loss = monai.losses.DiceLoss(sigmoid=True)
        self.check(small_unet(1), DataLoader(region_data(8, 1), batch_size=4), loss)
        self.silent(small_unet(1), region_data(8, 1, bad=6), loss, as_unit_mask, "target-out-of-range", 1, [6])

    def test_monai_dice_without_its_activation_takes_logits_as_probabilities(self):
        self.silent(small_unet(1), region_data(8, 1), monai.losses.DiceLoss(), lambda p, y: (torch.sigmoid(p), y),
                    "output-out-of-range", 0)

    def test_monai_dice_ce_class_index_255(self):
        loss = monai.losses.DiceCELoss(to_onehot_y=True, softmax=True)
        self.check(small_unet(3), DataLoader(region_data(8, 3), batch_size=4), loss)
        hit = self.check(small_unet(3), DataLoader(region_data(8, 3, bad=6), batch_size=4), loss, expect="target-out-of-range")
        self.assertEqual(hit.samples, [6])
        # Without the channel of one MONAI's one_hot raises; batchcheck says so before.
        hit = self.check(small_unet(3), DataLoader(region_data(8, 3, channel=False), batch_size=4), loss, expect="shape-mismatch")

    def test_smp_dice_binary_255_mask_and_its_ignore_index(self):
        make = lambda: smp.Unet("resnet18", encoder_weights=None, classes=1)  # noqa: E731
        data = region_data(8, 1, bad=6)
        data.tensors = (data.tensors[0].expand(-1, 3, -1, -1).contiguous(), data.tensors[1])
        self.silent(make, data, smp.losses.DiceLoss("binary"), as_unit_mask, "target-out-of-range", 1, [6])
        self.check(make, DataLoader(data, batch_size=4), smp.losses.DiceLoss("binary", ignore_index=255))

    def test_smp_multiclass_jaccard_raises_and_focal_trains_on_label_255(self):
        data = region_data(8, 3, channel=False, bad=6)
        hit = self.check(small_unet(3), DataLoader(data, batch_size=4), smp.losses.JaccardLoss("multiclass"),
                         expect="target-out-of-range")
        self.assertEqual(hit.samples, [6])
        # smp's focal compares each label with each class: 255 is background everywhere, silently.
        focal = smp.losses.FocalLoss("multiclass")
        self.assertIsNone(eager_loop(small_unet(3)(), DataLoader(data, batch_size=4), focal))
        report = batchcheck.scan(small_unet(3)(), DataLoader(data, batch_size=4), focal, quiet=True)
        self.assertEqual(errors(report), [("target-out-of-range", 1, [6])])
        self.check(small_unet(3), DataLoader(region_data(8, 3, channel=False), batch_size=4), focal)


class Tokens(Dataset):
    """(input_ids, attention_mask, label) with padding; `bad` holds a token id >= the vocabulary."""

    def __init__(self, n, vocab, bad=None):
        g = torch.Generator().manual_seed(4)
        self.ids = torch.randint(1, vocab, (n, 12), generator=g)
        self.mask = torch.ones(n, 12, dtype=torch.int64)
        self.mask[::3, 8:] = 0
        self.ids[self.mask == 0] = 0
        self.labels = torch.randint(0, 2, (n,), generator=g)
        if bad is not None:
            self.ids[bad, 2] = vocab + 7

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.ids[i], self.mask[i], self.labels[i]


class Texts(Dataset):
    """Hugging Face style samples: {"input_ids", "attention_mask", "labels"} (labels -100 on padding)."""

    def __init__(self, n, vocab, bad=None):
        g = torch.Generator().manual_seed(6)
        self.ids = torch.randint(1, vocab, (n, 12), generator=g)
        self.mask = torch.ones(n, 12, dtype=torch.int64)
        self.mask[::3, 8:] = 0
        self.labels = self.ids.masked_fill(self.mask == 0, -100)
        if bad is not None:
            self.ids[bad, 2] = vocab + 7

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


def hf_loop(model, loader):
    """Hugging Face's training step: loss = model(**batch).loss. (batch, message) at its first failure."""
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for k, batch in enumerate(loader):
        try:
            loss = model(**batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        except (RuntimeError, IndexError) as e:
            return k, str(e)
    return None


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup.sh installs it)")
class TestTransformers(Case):
    def test_gpt2_computes_its_own_loss_from_labels_in_the_users_process(self):
        # GPT-2's padding mask is built with torch.vmap, which neither TorchScript nor the tracer
        # takes: batchcheck.scan() runs its forward eagerly (warning), model(**batch) as HF does.
        from transformers import GPT2Config, GPT2LMHeadModel
        make = lambda: GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=32))  # noqa: E731
        self.assertIsNone(hf_loop(make(), DataLoader(Texts(12, 100), batch_size=4)))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            clean = batchcheck.scan(make(), DataLoader(Texts(12, 100), batch_size=4), "model", quiet=True)
        self.assertTrue(clean.ok, clean.text)
        self.assertTrue(any("runs eagerly" in str(w.message) for w in seen))
        truth = hf_loop(make(), DataLoader(Texts(12, 100, bad=9), batch_size=4))
        self.assertEqual(truth[0], 2)
        report = batchcheck.scan(make(), DataLoader(Texts(12, 100, bad=9), batch_size=4), "model", quiet=True)
        # The token id is read where the embedding is given it: its sample, with the vocabulary's fixes.
        self.assertEqual(errors(report), [("forward-error", 2, [9])])
        self.assertEqual(truth[1], "index out of range in self")
        self.assertIn("token id 107 >= num_embeddings 100", report.errors()[0].message)
        self.assertEqual([f["id"] for f in report.errors()[0].data["fixes"]][:3], ["resize-embeddings", "map-unknown-ids", "check-vocab-size"])

    def test_bert_and_distilbert_with_attention_masks_token_id_past_the_vocabulary(self):
        from transformers import BertConfig, BertForSequenceClassification, DistilBertConfig, DistilBertForSequenceClassification
        configs = {
            "bert": lambda: BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                                     num_attention_heads=2, intermediate_size=64,
                                                                     torchscript=True)),
            "distilbert": lambda: DistilBertForSequenceClassification(DistilBertConfig(vocab_size=100, dim=32, n_layers=2,
                                                                                       n_heads=2, hidden_dim=64,
                                                                                       torchscript=True)),
        }
        for name, make in configs.items():
            with self.subTest(name):
                logits = lambda out: out[0]  # noqa: E731 - torchscript=True: forward returns (logits,)
                self.check(make, DataLoader(Tokens(12, 100), batch_size=4), nn.CrossEntropyLoss(), prediction=logits, output=0)
                hit = self.check(make, DataLoader(Tokens(12, 100, bad=9), batch_size=4), nn.CrossEntropyLoss(),
                                 expect="forward-error", prediction=logits, output=0)
                self.assertEqual(hit.batch, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]] + sys.argv[1:])
