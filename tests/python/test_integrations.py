"""The training-framework callbacks against the real libraries: PyTorch Lightning's Trainer and
Hugging Face's transformers Trainer, each on a loader whose training dies, with and without
batchcheck's callback. Skipped (with the reason) where the library is not installed."""
import os
import sys
import tempfile
import unittest
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import batchcheck
import reproduce_check  # noqa: F401 - every reproduce a scan here prints is run as printed

warnings.filterwarnings("ignore")


class Pairs(Dataset):
    def __init__(self, n, labels=None, as_dict=False):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 6, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)
        for i, c in (labels or {}).items():
            self.y[i] = c
        self.as_dict = as_dict

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]} if self.as_dict else (self.x[i], self.y[i])


try:
    import lightning.pytorch as L
except ImportError:
    L = None

try:
    import transformers
except ImportError:
    transformers = None


if L is not None:
    from batchcheck.lightning import BatchCheck

    class Module(L.LightningModule):
        def __init__(self, loader):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
            self.loader = loader
            self.loss_fn = nn.CrossEntropyLoss()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, _):
            x, y = batch
            return self.loss_fn(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return self.loader


def lightning_trainer(callbacks=()):
    return L.Trainer(max_epochs=1, accelerator="cpu", devices=1, callbacks=list(callbacks), logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


@unittest.skipIf(L is None, "lightning is not installed (scripts/setup.sh installs it)")
class TestLightning(unittest.TestCase):
    def test_fit_fails_fast_where_the_epoch_would_die(self):
        loader = DataLoader(Pairs(17), batch_size=8)  # the last batch holds one sample
        with self.assertRaisesRegex(ValueError, "Expected more than 1 value per channel"):
            lightning_trainer().fit(Module(loader))  # the real loop, without batchcheck: dies at batch 2
        module = Module(loader)
        check = BatchCheck(loss=nn.CrossEntropyLoss(), quiet=True)
        trainer = lightning_trainer([check])
        with self.assertRaises(batchcheck.ScanFailed) as caught:
            trainer.fit(module)
        self.assertEqual(trainer.global_step, 0)  # before the first step
        hit = [f for f in caught.exception.report.errors() if f.id == "batchnorm-single-value"]
        self.assertEqual([(f.batch, f.samples) for f in hit], [(2, [16])])
        self.assertIn("batchnorm-single-value at batch 2", str(caught.exception))

    def test_clean_loader_trains(self):
        check = BatchCheck(loss=nn.CrossEntropyLoss(), quiet=True)
        trainer = lightning_trainer([check])
        trainer.fit(Module(DataLoader(Pairs(17), batch_size=8, shuffle=True, drop_last=True)))
        self.assertTrue(check.report.ok, check.report.text)
        self.assertEqual(trainer.global_step, 2)


@unittest.skipIf(transformers is None, "transformers is not installed (scripts/setup.sh installs it)")
class TestHuggingFace(unittest.TestCase):
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))

        def forward(self, x, labels=None):
            logits = self.net(x)
            if labels is None:
                return {"logits": logits}
            return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}

    def trainer(self, ds, callbacks=()):
        from transformers import Trainer, TrainingArguments
        self.tmp = tempfile.mkdtemp()
        args = TrainingArguments(output_dir=self.tmp, num_train_epochs=1, per_device_train_batch_size=8, report_to=[],
                                 use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=3)
        return Trainer(model=self.Classifier(), args=args, train_dataset=ds, callbacks=list(callbacks))

    def test_label_out_of_range_stops_the_run_before_training(self):
        from batchcheck.huggingface import BatchCheckCallback
        ds = Pairs(24, labels={11: 255}, as_dict=True)
        with self.assertRaisesRegex((IndexError, RuntimeError), "out of bounds|Target 255"):
            self.trainer(ds).train()  # the real loop dies on the batch holding sample 11
        check = BatchCheckCallback(nn.CrossEntropyLoss(), output="logits", quiet=True)
        trainer = self.trainer(ds, [check])
        with self.assertRaises(batchcheck.ScanFailed) as caught:
            trainer.train()
        self.assertEqual(trainer.state.global_step, 0)
        hit = [f for f in caught.exception.report.errors() if f.id == "target-out-of-range"]
        self.assertEqual([f.samples for f in hit], [[11]])

    def test_a_padding_collators_batch_encoding_through_the_callback(self):
        # DataCollatorWithPadding yields a BatchEncoding (a Mapping, not a dict); the Trainer's loader
        # is accelerate's, shuffled: the header names its real sampler and batch size.
        import os
        from transformers import BertTokenizerFast, DataCollatorWithPadding, Trainer, TrainingArguments
        from batchcheck.huggingface import BatchCheckCallback
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d"]) + "\n")
        tok = BertTokenizerFast(vocab_file=os.path.join(d, "vocab.txt"))
        rows = [dict(tok(" ".join("abcd"[(i + k) % 4] for k in range(2 + i % 5))), labels=i % 3) for i in range(24)]
        rows[11]["labels"] = 255

        class Texts(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.fc = nn.Embedding(tok.vocab_size, 8), nn.Linear(8, 3)

            def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
                logits = self.fc(self.emb(input_ids).mean(1))
                return {"logits": logits} if labels is None else {"loss": nn.functional.cross_entropy(logits, labels),
                                                                 "logits": logits}
        args = TrainingArguments(output_dir=d, num_train_epochs=1, per_device_train_batch_size=8, report_to=[],
                                 use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=3)
        check = BatchCheckCallback(nn.CrossEntropyLoss(), output="logits", quiet=True)
        trainer = Trainer(model=Texts(), args=args, train_dataset=rows, data_collator=DataCollatorWithPadding(tok),
                          callbacks=[check])
        with self.assertRaises(batchcheck.ScanFailed) as caught:
            trainer.train()
        report = caught.exception.report
        self.assertEqual([f.samples for f in report.errors() if f.id == "target-out-of-range"], [[11]], report.text)
        self.assertIn("RandomSampler, batch_size=8", report.data["source"])
        with self.assertRaisesRegex((IndexError, RuntimeError), "out of bounds|Target 255"):
            Trainer(model=Texts(), args=args, train_dataset=rows, data_collator=DataCollatorWithPadding(tok)).train()

    def test_clean_dataset_trains(self):
        from batchcheck.huggingface import BatchCheckCallback
        check = BatchCheckCallback(nn.CrossEntropyLoss(), output="logits", quiet=True)
        trainer = self.trainer(Pairs(24, as_dict=True), [check])
        trainer.train()
        self.assertTrue(check.report.ok, check.report.text)
        self.assertEqual(trainer.state.global_step, 3)


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]] + sys.argv[1:])
