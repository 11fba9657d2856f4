"""Real pipelines and the real PyTorch loop on them (tests/test_pipelines.cpp).

Writes one folder per case under OUT: the model (TorchScript), the data as a user saves it
(per-sample variable-length token sequences), config.json, and in manifest.json what the real
training loop does on the same data: which batches raise, and what.

    python make_pipelines.py OUT
"""
import json
import os
import random
import sys
from typing import Dict, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
from batchcheck_export import export_scan  # noqa: E402
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler, default_collate

VOCAB, POSITIONS, CLASSES, BATCH = 100, 64, 3, 8


class TextClassifier(torch.nn.Module):
    """Token + learned position embeddings: a batch longer than the position table fails."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, 16, padding_idx=0)
        self.pos = torch.nn.Embedding(POSITIONS, 16)
        self.fc = torch.nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1), device=x.device)
        h = self.tok(x) + self.pos(positions).unsqueeze(0)
        return self.fc(h.mean(1))


class TwoInputTransformer(torch.nn.Module):
    """forward(input_ids, attention_mask): a transformer layer that ignores padded positions."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, 16, padding_idx=0)
        self.pos = torch.nn.Embedding(POSITIONS, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.fc = torch.nn.Linear(16, CLASSES)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.tok(input_ids) + self.pos(positions).unsqueeze(0)
        h = self.layer(h, src_key_padding_mask=attention_mask == 0)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        return self.fc((h * m).sum(1) / m.sum(1))


class RecordModel(torch.nn.Module):
    """forward(batch: Dict[str, Tensor]): the whole record as one argument."""

    def __init__(self):
        super().__init__()
        self.inner = TwoInputTransformer()

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        return self.inner(batch["input_ids"], batch["attention_mask"])


class Records(Dataset):
    def __init__(self, records):
        self.records = records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return self.records[i]


class BatchSizedHead(torch.nn.Module):
    """A head written for one batch size: the tail batch cannot be viewed as 4 rows."""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(18, CLASSES)
        self.batch_size = 4

    def forward(self, h):
        return self.fc(h.view(self.batch_size, -1))  # user-line


class UserLineNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Conv1d(2, 3, 3, padding=1)
        self.head = BatchSizedHead()

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def pad_records(batch):
    out = {k: pad_sequence([r[k] for r in batch], batch_first=True, padding_value=0) for k in ("input_ids", "attention_mask")}
    out["label"] = default_collate([r["label"] for r in batch])
    return out


def record_loop(model, loader, call):
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    failures, b = [], 0
    for batch in loader:
        train_step(failures, b, lambda: loss_fn(call(model, batch), batch["label"]))
        model.zero_grad()
        b += 1
    return {"batches": b, "failures": failures}


class Samples(Dataset):
    def __init__(self, xs, ys):
        self.xs, self.ys = xs, ys

    def __len__(self):
        return len(self.xs)

    def __getitem__(self, i):
        return self.xs[i], self.ys[i]


class Indices(Dataset):
    """Yields its own index: iterating a DataLoader over it records the batches the same
    loader delivers over the real dataset, with the same draws from the RNGs."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class ShuffledBuckets:
    """A bucketing batch sampler that shuffles its buckets every epoch with its own
    self.generator, as length-bucketing samplers do: the loader knows nothing of it."""

    def __init__(self, n, size, seed):
        self.buckets = [list(range(i, min(i + size, n))) for i in range(0, n, size)]
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self):
        for k in torch.randperm(len(self.buckets), generator=self.generator).tolist():
            yield self.buckets[k]

    def __len__(self):
        return len(self.buckets)


class PyRandomBuckets(ShuffledBuckets):
    """The same with Python's random.Random held by the sampler."""

    def __init__(self, n, size, seed):
        super().__init__(n, size, seed)
        self.rng = random.Random(seed)

    def __iter__(self):
        order = list(range(len(self.buckets)))
        self.rng.shuffle(order)
        for k in order:
            yield self.buckets[k]


def record(loader_for):
    return [b.tolist() for b in loader_for(Indices(40))]


def pad_collate(pad, multiple=1):
    def collate(batch):
        x = pad_sequence([s[0] for s in batch], batch_first=True, padding_value=pad)
        if multiple > 1 and x.size(1) % multiple:
            x = F.pad(x, (0, multiple - x.size(1) % multiple), value=pad)
        return x, default_collate([s[1] for s in batch])
    return collate


def sequences(batch_lengths, seed):
    """Per batch: the lengths of its samples (a list) -> token sequences, labels."""
    g = torch.Generator().manual_seed(seed)
    xs = []
    for lengths in batch_lengths:
        for n in lengths:
            xs.append(torch.randint(1, VOCAB, (n,), generator=g))
    ys = torch.randint(0, CLASSES, (len(xs),), generator=g)
    return xs, ys


def train_step(failures, b, step):
    """One training step without the optimizer; what it raises is recorded for batch b."""
    try:
        loss = step()
        loss.backward()
    except Exception as e:
        failures.append({"batch": b, "stage": "forward", "error": str(e).splitlines()[0]})


def real_loop(model, loader):
    """The training loop without the optimizer step: every batch, and what each raises."""
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    failures = []
    it = iter(loader)
    b = 0
    while True:
        try:
            x, y = next(it)
        except StopIteration:
            break
        except Exception as e:  # the collate_fn raised: the model never sees the batch
            failures.append({"batch": b, "stage": "collate", "error": str(e).splitlines()[0]})
            b += 1
            continue
        train_step(failures, b, lambda: loss_fn(model(x), y))
        model.zero_grad()
        b += 1
    return {"batches": b, "failures": failures}


def write_case(out, name, model, data, config, loader, order=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    if order is not None:
        with open(os.path.join(d, "order.json"), "w") as f:
            json.dump(order, f)
    torch.jit.script(model).save(os.path.join(d, "model.pt"))
    torch.save(data, os.path.join(d, "data.pt"))
    config = dict(config)
    config["model"] = {"path": "model.pt"}
    config.setdefault("loss", {"type": "cross_entropy"})
    config["data"] = {"path": "data.pt"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    truth = real_loop(model, loader)
    truth["case"] = name
    return truth


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = TextClassifier()
    cases = []

    # Five batches of 8; the longest sample of each: 12, 50, 64, 70, 30. Batches 0 and 4 hold
    # samples of one length (default_collate stacks them), the others vary.
    lengths = [[12] * 8, [20, 50, 7, 33, 50, 9, 41, 18], [64, 3, 64, 10, 5, 60, 22, 1], [70, 8, 16, 69, 2, 40, 11, 6],
               [30] * 8]
    xs, ys = sequences(lengths, 1)
    ds = Samples(xs, ys)
    pad_cfg = {"batch_size": BATCH, "collate": {"pad": {"inputs": 0}}}

    # pad_sequence in the collate_fn: only the batch longer than the 64 positions fails.
    cases.append(write_case(out, "textpad", model, {"inputs": xs, "targets": ys}, {"loader": pad_cfg},
                            DataLoader(ds, batch_size=BATCH, collate_fn=pad_collate(0))))
    # The same, saved as torch.save([dataset[i] for i in range(len(dataset))]).
    cases.append(write_case(out, "records", model, [ds[i] for i in range(len(ds))], {"loader": pad_cfg},
                            DataLoader(ds, batch_size=BATCH, collate_fn=pad_collate(0))))
    # Lengths rounded up to a multiple of 48: batches 1-3 become 96 long.
    cases.append(write_case(out, "textpad-multiple", model, {"inputs": xs, "targets": ys},
                            {"loader": {"batch_size": BATCH, "collate": {"pad": {"inputs": 0}, "pad_to_multiple_of": 48}}},
                            DataLoader(ds, batch_size=BATCH, collate_fn=pad_collate(0, 48))))
    # No collate_fn: default_collate cannot stack samples of unequal length.
    cases.append(write_case(out, "ragged-default", model, {"inputs": xs, "targets": ys},
                            {"loader": {"batch_size": BATCH}}, DataLoader(ds, batch_size=BATCH)))
    # Shuffled: a seeded DataLoader, every sample at most 64 long: a clean setup.
    short = [[min(n, 64) for n in b] for b in lengths]
    cxs, cys = sequences(short, 2)
    cds = Samples(cxs, cys)
    cases.append(write_case(out, "textpad-clean", model, {"inputs": cxs, "targets": cys},
                            {"loader": {"batch_size": BATCH, "shuffle": True, "seed": 5, "collate": {"pad": {"inputs": 0}}}},
                            DataLoader(cds, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(5),
                                       collate_fn=pad_collate(0))))

    # A forward error raised inside torch's nn.Linear from the user's view(self.batch_size, -1):
    # 10 samples in batches of 4, the tail of 2 fails.
    uxs = torch.randn(10, 2, 6, generator=torch.Generator().manual_seed(4))
    uys = torch.arange(10) % CLASSES
    cases.append(write_case(out, "user-line", UserLineNet(), {"inputs": uxs, "targets": uys},
                            {"loader": {"batch_size": 4}}, DataLoader(Samples(uxs, uys), batch_size=4)))

    # A checkpoint whose weights already hold NaN (a run that diverged, then saved): every
    # batch's loss is NaN, and the cause is the weight, not the data.
    nan_model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, CLASSES))
    with torch.no_grad():
        nan_model[3].weight[1, 2] = float("nan")
    truth = write_case(out, "nan-weight", nan_model, {"inputs": uxs, "targets": uys}, {"loader": {"batch_size": 4}},
                       DataLoader(Samples(uxs, uys), batch_size=4))
    truth["nan_batches"] = [b for b, (x, y) in enumerate(DataLoader(Samples(uxs, uys), batch_size=4))
                            if not torch.isfinite(torch.nn.functional.cross_entropy(nan_model(x), y))]
    cases.append(truth)

    # Orders no formula replays, recorded from the user's own loader (loader.order). Class 3
    # of 3 in sample 13: the loop fails at the batches that hold it.
    fxs, _ = sequences([[10] * 40], 3)
    fys = torch.arange(40) % CLASSES
    fys[13] = CLASSES
    fds = Samples(fxs, fys)
    fdata = {"inputs": fxs, "targets": fys}
    order_cfg = {"loader": {"batch_size": BATCH, "order": "order.json"}}

    # The global-seed pattern: torch.manual_seed(7), then DataLoader(shuffle=True) without a
    # generator. The loader's iterator draws its base seed from the global RNG before the
    # sampler does: recording through an identical loader keeps those draws.
    def global_seed(dataset):
        torch.manual_seed(7)
        return DataLoader(dataset, batch_size=BATCH, shuffle=True)
    order = record(global_seed)
    cases.append(write_case(out, "global-seed", model, fdata, order_cfg, global_seed(fds), order))

    # WeightedRandomSampler with replacement: sample 13 drawn often, some samples never.
    weights = [1.0] * 40
    weights[13] = 4.0

    def weighted(dataset):
        torch.manual_seed(3)
        return DataLoader(dataset, batch_size=BATCH, sampler=WeightedRandomSampler(weights, num_samples=48, replacement=True))
    order = record(weighted)
    cases.append(write_case(out, "weighted", model, fdata, order_cfg, weighted(fds), order))

    # A bucketing batch sampler: samples sorted by length, batches of at most 160 tokens
    # (padded), so batch sizes vary; the one holding the 70-token sample fails.
    by_length = sorted(range(len(xs)), key=lambda i: (len(xs[i]), i))
    buckets, current = [], []
    for i in by_length:
        if current and (len(current) + 1) * len(xs[i]) > 160:
            buckets.append(current)
            current = []
        current.append(i)
    buckets.append(current)
    cases.append(write_case(out, "bucketing", model, {"inputs": xs, "targets": ys},
                            {"loader": {"order": "order.json", "collate": {"pad": {"inputs": 0}}}},
                            DataLoader(ds, batch_sampler=buckets, collate_fn=pad_collate(0)),
                            {"samples": len(xs), "ranks": [buckets]}))

    # Two inputs from dict records (input_ids, attention_mask, label), both padded per batch:
    # positionally, by argument name, and as one Dict[str, Tensor].
    records = [{"input_ids": x, "attention_mask": torch.ones_like(x), "label": y} for x, y in zip(xs, ys)]
    two = TwoInputTransformer()
    rec_loader = DataLoader(Records(records), batch_size=BATCH, collate_fn=pad_records)
    multi_cfg = {"batch_size": BATCH, "collate": {"pad": {"input_ids": 0, "attention_mask": 0}}}
    for name, m, inputs, call in [
            ("two-input-positional", two, ["input_ids", "attention_mask"], lambda m, b: m(b["input_ids"], b["attention_mask"])),
            ("two-input-named", two, {"attention_mask": "attention_mask", "input_ids": "input_ids"},
             lambda m, b: m(attention_mask=b["attention_mask"], input_ids=b["input_ids"])),
            ("dict-record", RecordModel(), "record", lambda m, b: m({k: b[k] for k in ("input_ids", "attention_mask")}))]:
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        torch.jit.script(m).save(os.path.join(d, "model.pt"))
        torch.save(records, os.path.join(d, "data.pt"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model": {"path": "model.pt", "inputs": inputs}, "data": {"path": "data.pt", "targets": "label"},
                       "loader": multi_cfg, "loss": {"type": "cross_entropy"}}, f, indent=1)
        truth = record_loop(m, rec_loader, call)
        truth["case"] = name
        cases.append(truth)

    # The attention mask generated by the collate_fn from the padded token ids (no mask in the
    # data): loader.collate.mask.
    def pad_with_mask(batch):
        ids = pad_sequence([r["input_ids"] for r in batch], batch_first=True, padding_value=0)
        lengths = torch.tensor([len(r["input_ids"]) for r in batch])
        mask = (torch.arange(ids.size(1)).unsqueeze(0) < lengths.unsqueeze(1)).long()
        return {"input_ids": ids, "attention_mask": mask, "label": default_collate([r["label"] for r in batch])}
    bare = [{"input_ids": x, "label": y} for x, y in zip(xs, ys)]
    d = os.path.join(out, "mask-generated")
    os.makedirs(d, exist_ok=True)
    torch.jit.script(two).save(os.path.join(d, "model.pt"))
    torch.save(bare, os.path.join(d, "data.pt"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model": {"path": "model.pt", "inputs": ["input_ids", "attention_mask"]},
                   "data": {"path": "data.pt", "targets": "label"},
                   "loader": {"batch_size": BATCH, "collate": {"pad": {"input_ids": 0}, "mask": {"attention_mask": "input_ids"}}},
                   "loss": {"type": "cross_entropy"}}, f, indent=1)
    truth = record_loop(two, DataLoader(Records(bare), batch_size=BATCH, collate_fn=pad_with_mask),
                        lambda m, b: m(b["input_ids"], b["attention_mask"]))
    truth["case"] = "mask-generated"
    cases.append(truth)

    class MaskIsPadding(torch.nn.Module):
        """NaN logits unless the mask is 1 exactly on the tokens (ids are never 0) and the
        lengths agree with the padded ids, padding to a multiple of 8 included."""

        def __init__(self):
            super().__init__()
            self.classes = CLASSES

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            ok = input_ids.shape == attention_mask.shape and input_ids.size(1) % 8 == 0 and bool(
                ((input_ids != 0).long() == attention_mask).all()) and attention_mask.dtype == torch.long
            logits = torch.zeros(input_ids.size(0), self.classes)
            return logits if ok else logits + float("nan")
    d = os.path.join(out, "mask-values")
    os.makedirs(d, exist_ok=True)
    torch.jit.script(MaskIsPadding()).save(os.path.join(d, "model.pt"))
    torch.save(bare, os.path.join(d, "data.pt"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model": {"path": "model.pt", "inputs": ["input_ids", "attention_mask"], "mode": "eval"},
                   "data": {"path": "data.pt", "targets": "label"},
                   "loader": {"batch_size": BATCH, "collate": {"pad": {"input_ids": 0}, "pad_to_multiple_of": 8,
                                                               "mask": {"attention_mask": "input_ids"}}},
                   "loss": {"type": "cross_entropy"}}, f, indent=1)

    # Two float fields from one .npy each ("inputs": {field: file}); a NaN in the second field's
    # sample 5. The loop raises nothing: its loss is NaN from batch 0 on.
    import numpy as np

    class TwoFloat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, CLASSES)

        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return self.fc(a) + self.fc(b)
    d = os.path.join(out, "npy-two-fields")
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(40, 4, generator=g), torch.randn(40, 4, generator=g)
    b[5, 2] = float("nan")
    np.save(os.path.join(d, "a.npy"), a.numpy())
    np.save(os.path.join(d, "b.npy"), b.numpy())
    np.save(os.path.join(d, "y.npy"), (torch.arange(40) % CLASSES).numpy())
    torch.jit.script(TwoFloat()).save(os.path.join(d, "model.pt"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model": {"path": "model.pt", "inputs": ["a", "b"]},
                   "data": {"inputs": {"a": "a.npy", "b": "b.npy"}, "targets": "y.npy"},
                   "loader": {"batch_size": BATCH}, "loss": {"type": "cross_entropy"}}, f, indent=1)

    # Extra outputs (aux heads), as torchvision's segmentation models return them: a dict
    # {"out", "aux"} and a training loss out + 0.5 * aux. Sample 21 is finite to the main head
    # but overflows the aux head's cube: the loop's loss is NaN at batch 2 only.
    class AuxHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.head = torch.nn.Conv2d(4, CLASSES, 1)
            self.aux = torch.nn.Conv2d(3, CLASSES, 1)

        def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
            return {"out": self.head(torch.relu(self.body(x))), "aux": self.aux(x * x * x)}
    d = os.path.join(out, "aux-heads")
    os.makedirs(d, exist_ok=True)
    aux_model = AuxHeads()
    g = torch.Generator().manual_seed(8)
    ax = torch.randn(40, 3, 6, 6, generator=g)
    ax[21, 1, 2, 2] = 1e15
    ay = torch.randint(0, CLASSES, (40, 6, 6), generator=g)
    torch.jit.script(aux_model).save(os.path.join(d, "model.pt"))
    torch.save({"inputs": ax, "targets": ay}, os.path.join(d, "data.pt"))
    base = {"model": {"path": "model.pt", "output": "out"}, "data": {"path": "data.pt"},
            "loader": {"batch_size": BATCH}}
    for name, loss in (("config.json", {"type": "cross_entropy", "aux": {"aux": 0.5}}),
                       ("no-aux.json", {"type": "cross_entropy"}),
                       ("typo.json", {"type": "cross_entropy", "aux": {"axu": 0.5}})):
        with open(os.path.join(d, name), "w") as f:
            json.dump({**base, "loss": loss}, f, indent=1)
    failures = []
    losses, preds = [], []  # per batch, for the report's series
    aux_model.train()
    for b, (x, y) in enumerate(DataLoader(Samples(ax, ay), batch_size=BATCH)):
        o = aux_model(x)
        loss = F.cross_entropy(o["out"], y) + 0.5 * F.cross_entropy(o["aux"], y)
        preds.append([o["out"].min().item(), o["out"].max().item()])
        losses.append(loss.item() if torch.isfinite(loss) else None)
        if not torch.isfinite(loss):
            failures.append({"batch": b, "stage": "loss", "error": "loss is not finite"})
            continue
        loss.backward()
        if any(p.grad is not None and not torch.isfinite(p.grad).all() for p in aux_model.parameters()):
            failures.append({"batch": b, "stage": "backward", "error": "gradient is not finite"})
        aux_model.zero_grad()
    cases.append({"case": "aux-heads", "batches": b + 1, "failures": failures, "losses": losses, "preds": preds})
    # The same heads as a tuple (Inception's (logits, aux_logits)): indices select them.
    class AuxTuple(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
            o = self.inner(x)
            return o["out"], o["aux"]
    torch.jit.script(AuxTuple(aux_model)).save(os.path.join(d, "tuple.pt"))
    with open(os.path.join(d, "tuple.json"), "w") as f:
        json.dump({**base, "model": {"path": "tuple.pt", "output": 0},
                   "loss": {"type": "cross_entropy", "aux": {"1": 0.5}}}, f, indent=1)
    export_scan(os.path.join(out, "export-aux-heads"), aux_model, DataLoader(Samples(ax, ay), batch_size=BATCH),
                loss=torch.nn.CrossEntropyLoss(), output="out", aux={"aux": 0.5})

    # An operator library: a model calling torchvision.ops.nms loads only with torchvision's
    # ops library in model.libraries.
    try:
        import glob
        import torchvision
        libs = sorted(glob.glob(os.path.join(os.path.dirname(torchvision.__file__), "_C*.so")))
    except ImportError:
        libs = []
    if libs:
        class WithNms(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, CLASSES)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                boxes = torch.cat([x[:, :2], x[:, :2] + x[:, 2:].abs() + 1], 1)
                keep = torchvision.ops.nms(boxes, x[:, 0], 0.5)
                return self.fc(x) + 0.0 * float(keep.numel())
        d = os.path.join(out, "operator-library")
        os.makedirs(d, exist_ok=True)
        nms_model = WithNms()
        torch.jit.script(nms_model).save(os.path.join(d, "model.pt"))
        xs4 = torch.randn(20, 4, generator=torch.Generator().manual_seed(6))
        ys4 = torch.arange(20) % CLASSES
        torch.save({"inputs": xs4, "targets": ys4}, os.path.join(d, "data.pt"))
        for name, extra in (("config.json", {"libraries": [libs[0]]}), ("no-library.json", {})):
            with open(os.path.join(d, name), "w") as f:
                json.dump({"model": {"path": "model.pt", **extra}, "data": {"path": "data.pt"},
                           "loader": {"batch_size": 5}, "loss": {"type": "cross_entropy"}}, f, indent=1)
        truth = real_loop(nms_model, DataLoader(Samples(xs4, ys4), batch_size=5))
        truth["case"] = "operator-library"
        cases.append(truth)

    # A torchvision detection model, trained as torchvision's reference does: images of
    # different sizes and a dict of boxes and labels per image, kept as lists by
    # collate_fn=lambda b: tuple(zip(*b)); forward computes its own losses from the targets.
    # Sample 9 has a box of zero width (torchvision raises), sample 18 a label past num_classes.
    if libs:
        # torchvision's Faster R-CNN (transform, RPN, RoI heads: nms, roi_align) on a small
        # backbone and box head: seconds per epoch on 2 cores, on LibTorch 1.13's slow GEMM too.
        from torchvision.models.detection import FasterRCNN
        from torchvision.models.detection.anchor_utils import AnchorGenerator
        from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
        from torchvision.ops import MultiScaleRoIAlign
        torch.manual_seed(5)
        backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
                                       torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU())
        backbone.out_channels = 32
        detector = FasterRCNN(backbone, min_size=64, max_size=96,
                              rpn_anchor_generator=AnchorGenerator(((16, 32),), ((0.5, 1.0, 2.0),)),
                              box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2),
                              box_head=TwoMLPHead(32 * 7 * 7, 64), box_predictor=FastRCNNPredictor(64, 3))
        d = os.path.join(out, "detection")
        os.makedirs(d, exist_ok=True)
        torch.jit.script(detector).save(os.path.join(d, "model.pt"))
        g = torch.Generator().manual_seed(9)
        records = []
        for i in range(24):
            h, w = 48 + 8 * (i % 3), 64 - 8 * (i % 2)
            n = 1 + i % 3
            xy = torch.rand(n, 2, generator=g) * 20
            boxes = torch.cat([xy, xy + 8 + torch.rand(n, 2, generator=g) * 16], 1)
            labels = 1 + torch.randint(0, 2, (n,), generator=g)
            if i == 9:
                boxes[0, 2] = boxes[0, 0]
            if i == 18:
                labels[-1] = 7
            records.append((torch.rand(3, h, w, generator=g), {"boxes": boxes, "labels": labels}))
        torch.save(records, os.path.join(d, "data.pt"))
        # Two keys: pickle writes a one-key dict with SETITEM, which LibTorch 1.13's unpickler lacks.
        torch.save({"inputs": [r[0] for r in records], "ids": torch.arange(24)}, os.path.join(d, "images.pt"))
        det_cfg = {"model": {"path": "model.pt", "libraries": [libs[0]], "output": 0}, "data": {"path": "data.pt"},
                   "loader": {"batch_size": 4, "collate": {"list": True}}, "loss": {"type": "model"}}
        for name, cfg in (("config.json", det_cfg),
                          ("no-list.json", {**det_cfg, "loader": {"batch_size": 4}}),
                          ("list-ce.json", {**det_cfg, "loss": {"type": "cross_entropy"}}),
                          ("tensors.json", {"model": det_cfg["model"], "data": {"path": "../operator-library/data.pt"},
                                            "loader": {"batch_size": 4}, "loss": {"type": "none"}}),
                          ("tensor-targets.json", {**det_cfg, "data": {"path": "../operator-library/data.pt"}}),
                          ("eval.json", {**det_cfg, "model": {**det_cfg["model"], "mode": "eval"}}),
                          ("no-targets.json", {**det_cfg, "data": {"path": "images.pt"}})):
            with open(os.path.join(d, name), "w") as f:
                json.dump(cfg, f, indent=1)
        scripted_detector = torch.jit.load(os.path.join(d, "model.pt"))
        scripted_detector.train()
        failures = []
        loader = DataLoader(Records(records), batch_size=4, collate_fn=lambda batch: tuple(zip(*batch)))
        for b, (images, targets) in enumerate(loader):
            try:
                losses = scripted_detector(list(images), list(targets))[0]
                loss = sum(losses.values())
                if not torch.isfinite(loss):
                    failures.append({"batch": b, "stage": "loss", "error": "loss is not finite"})
                    continue
                loss.backward()
            except Exception as e:
                failures.append({"batch": b, "stage": "forward", "error": str(e).strip().splitlines()[-1]})
            scripted_detector.zero_grad()
        cases.append({"case": "detection", "batches": b + 1, "failures": failures})
        export_scan(os.path.join(out, "export-detection"), detector, loader, loss="model", output=0)

    # The export helper, from the user's own objects: it writes the scan, then the user's own
    # loader runs its epoch (the helper restored every RNG it drew from while recording).
    def exported(name, loader, **kw):
        export_scan(os.path.join(out, name), model, loader, loss=torch.nn.CrossEntropyLoss(), **kw)
        truth = real_loop(model, loader)
        truth["case"] = name
        cases.append(truth)

    exported("export-textpad", DataLoader(ds, batch_size=BATCH, collate_fn=pad_collate(0)), pad={"inputs": 0})
    exported("export-ragged-default", DataLoader(ds, batch_size=BATCH))
    torch.manual_seed(3)
    exported("export-weighted", DataLoader(fds, batch_size=BATCH,
                                           sampler=WeightedRandomSampler(weights, num_samples=48, replacement=True)))
    torch.manual_seed(7)
    exported("export-shuffled", DataLoader(fds, batch_size=BATCH, shuffle=True))
    # Batch samplers with RNGs of their own: recording must not move them, or the epoch the
    # loop then sees is the next one (the right samples named at the wrong batch).
    exported("export-bucket-generator", DataLoader(fds, batch_sampler=ShuffledBuckets(len(fds), BATCH, 11)))
    exported("export-bucket-pyrandom", DataLoader(fds, batch_sampler=PyRandomBuckets(len(fds), BATCH, 12)))
    exported("export-fixed-clean", DataLoader(Samples(fxs, torch.arange(40) % CLASSES), batch_size=BATCH, drop_last=True))

    # A model TorchScript cannot compile (*args): the helper traces it, and says what that means.
    class Unscriptable(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = TextClassifier()

        def forward(self, *xs):
            return self.inner(xs[0])
    import warnings
    unscriptable = Unscriptable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_scan(os.path.join(out, "export-traced"), unscriptable, DataLoader(fds, batch_size=BATCH),
                    loss=torch.nn.CrossEntropyLoss())
    truth = real_loop(unscriptable, DataLoader(fds, batch_size=BATCH))
    truth["case"] = "export-traced"
    cases.append(truth)
    said = [str(w.message) for w in caught if "torch.jit.script failed" in str(w.message)]
    with open(os.path.join(out, "export-traced", "warning.txt"), "w") as f:
        f.write(said[0] if said else "")

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
