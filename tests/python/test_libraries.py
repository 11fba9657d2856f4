"""The models people train, from the libraries they come from (random weights, no downloads),
through batchcheck.scan(), each clean and with an injected fault, each compared with the real
eager training loop on the same loader: where the loop raises or turns NaN, batchcheck must
name that batch (and the sample); where the loop trains, batchcheck must pass.

Which path each takes: every model here reaches the engine as TorchScript. timm's, smp's and
MONAI's compile with torch.jit.script; BERT and DistilBERT do not (forward takes **kwargs) and
are traced on the first batch (torchscript=True: forward returns tuples).
Skipped (with the reason) where a library is not installed."""
import sys
import unittest
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import batchcheck

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


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup.sh installs it)")
class TestTransformers(Case):
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
