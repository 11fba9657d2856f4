"""Any batch a DataLoader yields, and the user's step as it runs (written by the team): a Mapping
subclass (transformers' BatchEncoding), a two-view nested batch ([[view1, view2], labels]), a
graph library's Batch (torch_geometric), a tuple with Python lists of lengths, a momentum
encoder's no_grad update, an in-place mix of the batch, a branch on a value, and losses that
backward() refuses. Each is scanned through step= (or loss=) as the loader yields it and compared
with its real loop on the same loader: clean passes where the loop trains, the faulty batch and
sample named where it fails.

Run by ctest with BATCHCHECK_BINARY (the built command) and python/ on PYTHONPATH.
"""
import sys
import unittest
from collections import UserDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import batchcheck
import reproduce_check  # noqa: F401 - every reproduce a scan here prints is run as printed


def real_loop(model, loader, step):
    """The training loop (no optimizer step, as the scan): {batch: what failed}, an exception's
    first line or "nonfinite loss"."""
    model.train()
    failed = {}
    for k, batch in enumerate(loader):
        try:
            loss = step(model, batch)
            loss.backward()
            if not torch.isfinite(loss).all():
                failed[k] = "nonfinite loss"
        except (RuntimeError, ValueError, IndexError, AssertionError) as e:
            failed[k] = str(e).strip().splitlines()[0]
        model.zero_grad(set_to_none=True)
    return failed


def errors(report):
    """{finding id: [(batch, samples)]} of the error findings."""
    return {f.id: [(o["batch"], o["samples"]) for o in f.data["occurrences"]] for f in report.findings
            if f.severity == "error"}


def error_batches(report):
    """{batch: {finding id: samples}} of the error findings' occurrences."""
    out = {}
    for f in report.findings:
        if f.severity == "error":
            for o in f.data["occurrences"]:
                out.setdefault(o["batch"], {})[f.id] = o["samples"]
    return out


def clean_then_faulty(test, model, loader_of, step, bad):
    """The scan and the real loop on the clean loader (loader_of(None): both pass), then on the
    faulty one (loader_of(bad)): its (report, truth, loader)."""
    for case in (None, bad):
        loader = loader_of(case)
        report = batchcheck.scan(model, loader, step=step, quiet=True)
        truth = real_loop(model, loader, step)
        if case is None:
            test.assertEqual(truth, {})
            test.assertTrue(report.ok, report.text)
    return report, truth, loader


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- a Mapping subclass: transformers' BatchEncoding from a padding collator -------------------

class TinyLM(nn.Module):
    def __init__(self, vocab=50, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.fc = nn.Linear(16, classes)

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.fc(h.mean(1))


class Texts(Dataset):
    def __init__(self, n, bad=None):
        g = torch.Generator().manual_seed(0)
        self.ids = [torch.randint(1, 50, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g) for _ in range(n)]
        self.labels = torch.randint(0, 3, (n,), generator=g)
        if bad is not None:
            self.ids[bad][1] = 77  # past the 50-token vocabulary

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i].tolist(), "labels": int(self.labels[i])}


def encoding_collate(samples):
    """What DataCollatorWithPadding returns: a BatchEncoding (a UserDict, not a dict)."""
    from transformers import BatchEncoding
    n = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.long)
    mask = torch.zeros(len(samples), n, dtype=torch.long)
    for k, s in enumerate(samples):
        ids[k, :len(s["input_ids"])] = torch.tensor(s["input_ids"])
        mask[k, :len(s["input_ids"])] = 1
    return BatchEncoding({"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([s["labels"] for s in samples])})


def text_step(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return F.cross_entropy(logits, batch["labels"])


# --- a two-view batch: [[view1, view2], labels] from default_collate -----------------------------

class TwoViews(Dataset):
    def __init__(self, n, bad=None):
        g = torch.Generator().manual_seed(1)
        self.x = torch.rand(n, 12, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.bad = bad

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        v1, v2 = self.x[i] + 0.01, self.x[i] * 0.9
        if i == self.bad:
            v2 = v2.clone()
            v2[3] = float("nan")
        return [v1, v2], self.y[i]


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, x):
        return self.net(x)


def contrastive_step(model, batch):
    (x1, x2), _ = batch
    z1, z2 = F.normalize(model(x1), dim=1), F.normalize(model(x2), dim=1)
    logits = z1 @ z2.t() / 0.1
    return F.cross_entropy(logits, torch.arange(len(x1)))


# --- a momentum encoder (MoCo): a no_grad update of the key encoder and an in-place queue write ---

class MoCo(nn.Module):
    def __init__(self, K=64, m=0.99):
        super().__init__()
        self.q, self.k = Encoder(), Encoder()
        for pk, pq in zip(self.k.parameters(), self.q.parameters()):
            pk.data.copy_(pq.data)
            pk.requires_grad = False
        self.K, self.m = K, m
        self.register_buffer("queue", F.normalize(torch.randn(8, K), dim=0))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update(self):
        for pq, pk in zip(self.q.parameters(), self.k.parameters()):
            pk.data = pk.data * self.m + pq.data * (1.0 - self.m)

    @torch.no_grad()
    def _enqueue(self, keys):
        b = keys.shape[0]
        p = int(self.ptr)
        idx = (torch.arange(b) + p) % self.K
        self.queue[:, idx] = keys.t()
        self.ptr[0] = (p + b) % self.K

    def forward(self, x1, x2):
        q = F.normalize(self.q(x1), dim=1)
        with torch.no_grad():
            self._momentum_update()
            k = F.normalize(self.k(x2), dim=1)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.queue.clone().detach()
        logits = torch.cat([pos, neg], 1) / 0.07
        self._enqueue(k)
        return F.cross_entropy(logits, torch.zeros(len(x1), dtype=torch.long))


def moco_step(model, batch):
    (x1, x2), _ = batch
    return model(x1, x2)


# --- a graph batch (torch_geometric) ----------------------------------------------------------------

def graphs(n, bad_x=None, bad_y=None):
    from torch_geometric.data import Data
    g = torch.Generator().manual_seed(2)
    out = []
    for i in range(n):
        nodes = int(torch.randint(3, 7, (1,), generator=g))
        x = torch.rand(nodes, 5, generator=g)
        if i == bad_x:
            x[1, 2] = float("nan")
        edge_index = torch.randint(0, nodes, (2, nodes * 2), generator=g)
        y = torch.tensor([9 if i == bad_y else int(torch.randint(0, 3, (1,), generator=g))])
        out.append(Data(x=x, edge_index=edge_index, y=y))
    return out


class GraphNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(5, 16), nn.Linear(16, 3)

    def forward(self, x, edge_index, batch):
        from torch_geometric.utils import scatter
        h = F.relu(self.lin1(x))
        h = h + scatter(h[edge_index[0]], edge_index[1], dim=0, dim_size=h.size(0), reduce="mean")
        return self.lin2(scatter(h, batch, dim=0, reduce="mean"))


def graph_step(model, data):
    return F.cross_entropy(model(data.x, data.edge_index, data.batch), data.y)


# --- a tuple holding Python lists: a CTC collate's lengths -----------------------------------------

class Utterances(Dataset):
    def __init__(self, n, bad=None):
        g = torch.Generator().manual_seed(3)
        self.frames = [torch.rand(int(torch.randint(10, 16, (1,), generator=g)), 6, generator=g) for _ in range(n)]
        self.labels = [torch.randint(1, 5, (int(torch.randint(2, 5, (1,), generator=g)),), generator=g) for _ in range(n)]
        if bad is not None:
            self.frames[bad][2, 1] = float("nan")

    def __len__(self):
        return len(self.frames)

    def __getitem__(self, i):
        return self.frames[i], self.labels[i]


def ctc_collate(samples):
    x = nn.utils.rnn.pad_sequence([s[0] for s in samples])  # [T, B, 6]
    y = torch.cat([s[1] for s in samples])
    return x, y, [len(s[0]) for s in samples], [len(s[1]) for s in samples]


class Acoustic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        return self.fc(x).log_softmax(-1)


def ctc_step(model, batch):
    x, y, xl, yl = batch
    return F.ctc_loss(model(x), y, torch.tensor(xl), torch.tensor(yl))


# --- EmbeddingBag over a flat text cut by offsets (the text-classification tutorial's collate) ---

def bag_collate(samples):
    labels = torch.tensor([y for y, _ in samples])
    offsets = torch.tensor([0] + [len(t) for _, t in samples[:-1]]).cumsum(0)
    return labels, torch.cat([t for _, t in samples]), offsets


class Bags(Dataset):
    def __init__(self, n, bad=None):
        g = torch.Generator().manual_seed(5)
        self.items = [(int(torch.randint(0, 4, (1,), generator=g)),
                       torch.randint(0, 30, (int(torch.randint(2, 7, (1,), generator=g)),), generator=g)) for _ in range(n)]
        if bad is not None:
            self.items[bad][1][-1] = 33  # past the 30-token vocabulary

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class BagNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(30, 8)
        self.fc = nn.Linear(8, 4)

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))


def bag_step(model, batch):
    label, text, offsets = batch
    return F.cross_entropy(model(text, offsets), label)


# --- frames packed flat, cut by their lengths -----------------------------------------------------

def flat_collate(samples):
    return torch.cat([s[0] for s in samples]), [len(s[0]) for s in samples], torch.stack([s[1][0] for s in samples])


def flat_step(model, batch):
    frames, lengths, y = batch
    pooled = torch.stack([chunk.mean(0) for chunk in torch.split(model(frames), lengths)])
    return F.cross_entropy(pooled, y)


class TestSamplesThroughTheBatchsIndexStructure(unittest.TestCase):
    def test_a_nan_in_one_graphs_node_features(self):
        from torch_geometric.loader import DataLoader as GraphLoader
        torch.manual_seed(0)
        model = GraphNet()
        loader = GraphLoader(graphs(40, bad_x=27), batch_size=8)
        report = batchcheck.scan(model, loader, step=graph_step, quiet=True)
        self.assertEqual(real_loop(model, loader, graph_step), {3: "nonfinite loss"})
        found = errors(report)
        self.assertEqual(found["input-nonfinite"], [(3, [27])], report.text)  # the graph, through batch.batch
        nan = [f for f in report.findings if f.id == "input-nonfinite"][0]
        self.assertIn('field "batch.x"', report.text)
        self.assertIn("in 1 sample of a batch of 8", nan.message)

    def test_a_token_id_past_the_vocabulary_in_an_embedding_bags_flat_text(self):
        torch.manual_seed(0)
        model = BagNet()
        report, truth, _ = clean_then_faulty(
            self, model, lambda bad: DataLoader(Bags(40, bad), batch_size=8, collate_fn=bag_collate), bag_step, 13)
        self.assertEqual(sorted(truth), [1])
        found = error_batches(report)
        self.assertEqual(sorted(found), [1], report.text)
        self.assertEqual({s for v in found[1].values() for s in v}, {13}, report.text)
        fixes = [x["id"] for f in report.findings if f.severity == "error" for x in f.data["fixes"]]
        self.assertIn("resize-embeddings", fixes, report.text)  # an embedding's fixes

    def test_frames_packed_flat_and_cut_by_their_lengths(self):
        torch.manual_seed(0)
        model = nn.Linear(6, 5)
        loader = DataLoader(Utterances(24, 6), batch_size=4, collate_fn=flat_collate)
        report = batchcheck.scan(model, loader, step=flat_step, quiet=True)
        self.assertEqual(real_loop(model, loader, flat_step), {1: "nonfinite loss"})
        self.assertEqual(errors(report)["input-nonfinite"], [(1, [6])], report.text)

    def test_readings_of_the_index_structure(self):
        from batchcheck._batch import row_maps
        x = torch.zeros(7, 4)  # 7 rows of 4 features (a dimension of 3 would read as a padded [T, B] layout)
        batch = torch.tensor([0, 0, 1, 1, 1, 2, 2])
        ptr = torch.tensor([0, 2, 5, 7])
        self.assertEqual(row_maps([("x", x), ("batch", batch), ("ptr", ptr)], 3)["x"].tolist(), batch.tolist())
        self.assertEqual(row_maps([("x", x), ("lengths", torch.tensor([2, 3, 2]))], 3)["x"].tolist(), batch.tolist())
        self.assertEqual(row_maps([("x", x), ("offsets", torch.tensor([0, 2, 4]))], 3)["x"].tolist(), [0, 0, 1, 1, 2, 2, 2])
        # [0, 2, 5] over 7 rows reads as offsets and as lengths (an empty first sample): not proven.
        self.assertNotIn("x", row_maps([("x", x), ("offsets", torch.tensor([0, 2, 5]))], 3))
        # Two readings that disagree prove nothing; a padded [T, B] field is the layouts' to read.
        self.assertNotIn("x", row_maps([("x", x), ("lengths", torch.tensor([2, 3, 2])), ("other", torch.tensor([0, 1, 6]))], 3))
        self.assertEqual(row_maps([("x", torch.zeros(7, 3, 2)), ("lengths", torch.tensor([2, 3, 2]))], 3), {})


class TestAnyBatch(unittest.TestCase):
    def test_a_mapping_subclass_batch_encoding(self):
        model = TinyLM()
        report, truth, _ = clean_then_faulty(
            self, model, lambda bad: DataLoader(Texts(40, bad), batch_size=8, collate_fn=encoding_collate), text_step, 13)
        self.assertEqual(sorted(truth), [1])
        self.assertIn("index out of range", truth[1])
        found = error_batches(report)
        self.assertEqual(sorted(found), [1], report.text)
        self.assertEqual({s for v in found[1].values() for s in v}, {13}, report.text)
        # Without a step: the BatchEncoding is a Mapping of tensors, its keys the fields.
        loader = DataLoader(Texts(40, 13), batch_size=8, collate_fn=encoding_collate)
        report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), target_key="labels", quiet=True)
        found = error_batches(report)
        self.assertEqual(sorted(found), [1], report.text)
        self.assertEqual({s for v in found[1].values() for s in v}, {13}, report.text)

    def test_a_two_view_nested_batch(self):
        torch.manual_seed(0)
        model = Encoder()
        report, truth, _ = clean_then_faulty(
            self, model, lambda bad: DataLoader(TwoViews(50, bad), batch_size=16), contrastive_step, 21)
        self.assertEqual(truth, {1: "nonfinite loss"})
        found = errors(report)
        self.assertEqual(found["input-nonfinite"], [(1, [21])], report.text)
        nan = [f for f in report.findings if f.id == "input-nonfinite"][0]
        self.assertIn("batch[0][1]", nan.message)  # the field by its path in the batch

    def test_a_graph_batch(self):
        from torch_geometric.loader import DataLoader as GraphLoader
        torch.manual_seed(0)
        model = GraphNet()
        report, truth, _ = clean_then_faulty(
            self, model, lambda bad: GraphLoader(graphs(40, bad_y=bad), batch_size=8), graph_step, 19)
        self.assertEqual(sorted(truth), [2])
        self.assertIn("out of bounds", truth[2])
        self.assertEqual(errors(report), {"target-out-of-range": [(2, [19])]}, report.text)

    def test_a_tuple_holding_python_lists(self):
        torch.manual_seed(0)
        model = Acoustic()
        report, truth, _ = clean_then_faulty(
            self, model, lambda bad: DataLoader(Utterances(24, bad), batch_size=4, collate_fn=ctc_collate), ctc_step, 6)
        self.assertEqual(truth, {1: "nonfinite loss"})
        found = errors(report)
        self.assertIn("input-nonfinite", found, report.text)
        self.assertEqual(found["input-nonfinite"][0][0], 1, report.text)
        self.assertIn('field "batch[0]"', report.text)  # the field by its path

    def test_a_loader_prepared_by_accelerate_names_its_real_sampler_and_batch_size(self):
        from accelerate import Accelerator
        g = torch.Generator().manual_seed(6)
        ds = torch.utils.data.TensorDataset(torch.rand(20, 6, generator=g), torch.randint(0, 3, (20,), generator=g))
        loader = Accelerator(cpu=True).prepare(DataLoader(ds, batch_size=8, shuffle=True))
        report = batchcheck.scan(nn.Linear(6, 3), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertIn("RandomSampler", report.data["source"])
        self.assertIn("batch_size=8", report.data["source"])
        self.assertNotIn("batch_size=None", report.text)

    def test_a_tuple_of_per_sample_images_and_dicts_whose_leaves_vary_with_the_batch(self):
        # torchvision's detection collate, tuple(zip(*batch)): the tail and the probes hold fewer leaves.
        g = torch.Generator().manual_seed(7)
        items = [(torch.rand(3, 8, 8, generator=g), {"boxes": torch.rand(2, 4, generator=g), "labels": torch.tensor([1, 2])})
                 for _ in range(7)]
        items[5][1]["labels"][1] = 4  # past the 3 classes
        model = nn.Sequential(nn.Flatten(), nn.Linear(192, 3))

        def step(model, batch):
            images, targets = batch
            logits = model(torch.stack(images)).repeat_interleave(2, 0)
            return F.cross_entropy(logits, torch.cat([t["labels"] for t in targets]))
        loader = DataLoader(items, batch_size=3, collate_fn=lambda b: tuple(zip(*b)))
        report = batchcheck.scan(model, loader, step=step, quiet=True)
        truth = real_loop(model, loader, step)
        self.assertEqual(sorted(truth), [1])
        self.assertEqual(sorted(error_batches(report)), [1], report.text)

    def test_a_collate_fn_that_raises_on_one_sample_names_it(self):
        # torchaudio's speech-command tutorial: label_to_index(word) in the collate_fn.
        labels = ["no", "yes"]
        items = [(torch.rand(1, 20), "maybe" if i == 11 else labels[i % 2]) for i in range(24)]

        def collate(batch):
            return torch.stack([w for w, _ in batch]), torch.tensor([labels.index(word) for _, word in batch])
        loader = DataLoader(items, batch_size=8, collate_fn=collate)
        model = nn.Sequential(nn.Flatten(), nn.Linear(20, 2))
        report = batchcheck.scan(model, loader, step=lambda m, b: F.cross_entropy(m(b[0]), b[1]), quiet=True)
        self.assertEqual(errors(report), {"collate-error": [(1, [11])]}, report.text)
        f = report.errors()[0]
        self.assertIn("your collate_fn raised on this batch: 'maybe' is not in list", f.message)
        self.assertNotIn("pad-collate-variable-length", [x["id"] for x in f.fixes])

    def test_default_collate_that_cannot_stack_names_the_sample_of_another_shape(self):
        images = [(torch.rand(3, 16 if i == 19 else 32, 16 if i == 19 else 32), 0) for i in range(24)]
        loader = DataLoader(images, batch_size=8)
        model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 2))
        report = batchcheck.scan(model, loader, step=lambda m, b: F.cross_entropy(m(b[0]), b[1]), quiet=True)
        self.assertEqual(errors(report), {"collate-error": [(2, [19])]}, report.text)

    def test_a_namedtuple_batch_and_a_gather_index_past_its_dimension(self):
        # A DQN's replay samples (cleanrl's update): a namedtuple per transition, its action gathered.
        from collections import namedtuple
        T = namedtuple("Transition", "observations actions rewards")
        g = torch.Generator().manual_seed(8)
        data = [T(torch.randn(4, generator=g), torch.randint(0, 2, (1,), generator=g), torch.ones(1)) for _ in range(40)]
        data[21] = data[21]._replace(actions=torch.tensor([2]))  # 2 actions: 0 and 1
        q = nn.Linear(4, 2)

        def update(q, b):
            return F.mse_loss(q(b.observations).gather(1, b.actions).squeeze(), b.rewards.flatten())
        loader = DataLoader(data, batch_size=8)
        report = batchcheck.scan(q, loader, step=update, quiet=True)
        truth = real_loop(q, loader, update)
        self.assertEqual(sorted(truth), [2])
        self.assertEqual(error_batches(report), {2: {"forward-error": [21]}}, report.text)
        self.assertIn("index 2 >= size 2 of aten::gather", report.text)

    def test_a_batch_no_model_call_takes_is_refused_with_the_way_forward(self):
        loader = DataLoader(TwoViews(8), batch_size=4)
        with self.assertRaises(TypeError) as e:
            batchcheck.scan(Encoder(), loader, nn.CrossEntropyLoss(), quiet=True)
        self.assertEqual(str(e.exception),
                         "batchcheck.scan: the loader yields list(list(Tensor, Tensor), Tensor), which is not one model "
                         "input and its targets: pass step=, your training step step(model, batch) -> loss, which gets "
                         "each batch as the loader yields it (or name the model's input and the targets by their paths, "
                         "e.g. input_key='batch[0][0]', target_key='batch[1]')")

    def test_input_key_and_target_key_name_a_nested_batchs_leaves_by_their_paths(self):
        torch.manual_seed(0)
        model = nn.Linear(12, 4)
        loader = DataLoader(TwoViews(50, bad=21), batch_size=16)
        report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), input_key="batch[0][1]", target_key="batch[1]",
                                 quiet=True)
        truth = real_loop(model, loader, lambda m, b: F.cross_entropy(m(b[0][1]), b[1]))
        self.assertEqual(truth, {1: "nonfinite loss"})
        self.assertEqual(errors(report)["input-nonfinite"], [(1, [21])], report.text)


class TestLeaves(unittest.TestCase):
    """_batch.leaves: every tensor leaf by its path, lists of numbers as tensors, the rest left."""

    def test_paths_of_each_kind_of_batch(self):
        from collections import namedtuple
        from dataclasses import dataclass

        from batchcheck._batch import is_flat, leaves
        t = torch.zeros(2, 3)
        names = lambda b: [p for p, _ in leaves(b)[0]]  # noqa: E731
        self.assertEqual(names([[t, t], t]), ["batch[0][0]", "batch[0][1]", "batch[1]"])
        self.assertEqual(names(UserDict({"input_ids": t, "n": 3, "text": ["a", "b"]})), ['batch["input_ids"]'])
        self.assertEqual(names((t, [4, 5], [1.5, 2.0], None, "s")), ["batch[0]", "batch[1]", "batch[2]"])
        lengths = leaves((t, [4, 5]))[0][1][1]
        self.assertEqual((lengths.dtype, lengths.tolist()), (torch.int64, [4, 5]))
        Pair = namedtuple("Pair", "x y")
        self.assertEqual(names(Pair(t, t)), ["batch.x", "batch.y"])

        @dataclass
        class Sample:
            image: torch.Tensor
            label: torch.Tensor
            name: str
        self.assertEqual(names(Sample(t, t, "a")), ["batch.image", "batch.label"])
        from torch_geometric.data import Batch
        g = Batch.from_data_list(graphs(3))
        self.assertEqual(sorted(names(g)), ["batch.batch", "batch.edge_index", "batch.ptr", "batch.x", "batch.y"])
        # What the engine's own forward takes field by field, and what needs a step.
        self.assertTrue(is_flat((t, t)) and is_flat({"a": t, "b": ["x"]}) and is_flat(t))
        self.assertFalse(is_flat([[t, t], t]) or is_flat(Pair(t, t)) or is_flat(g) or is_flat((t, [1, 2])))
        # A cycle, a complex tensor and past the limits: left out, never an error.
        loop = [t]
        loop.append(loop)
        self.assertEqual(names(loop), ["batch[0]"])
        self.assertEqual(leaves((t, torch.zeros(2, dtype=torch.complex64)))[1], ["batch[1]"])

    def test_each_run_gets_its_own_copy(self):
        from batchcheck._batch import private_copy
        x = torch.ones(4, 2)
        batch = UserDict({"x": x, "meta": [1, 2]})
        mine = private_copy(batch)
        mine["x"].mul_(3)
        self.assertTrue(torch.equal(x, torch.ones(4, 2)))
        self.assertIsInstance(mine, UserDict)


class TestTheStepAsItRuns(unittest.TestCase):
    def test_a_momentum_encoders_no_grad_update_and_queue_write(self):
        torch.manual_seed(0)
        model = MoCo()
        before = state(model)
        loader = DataLoader(TwoViews(70), batch_size=16)
        report = batchcheck.scan(model, loader, step=moco_step, quiet=True)
        after = state(model)
        self.assertEqual(errors(report), {}, report.text)
        self.assertTrue(report.ok, report.text)
        for k in before:  # the scan leaves the user's model as it found it
            self.assertTrue(torch.equal(before[k], after[k]), k)
        model.eval()  # its modes too: scanned in train mode, left in eval
        batchcheck.scan(model, loader, step=moco_step, quiet=True)
        self.assertFalse(any(m.training for m in model.modules()))
        self.assertEqual(real_loop(model, loader, moco_step), {})

    def test_an_in_place_mix_of_the_batch(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(12, 8), nn.BatchNorm1d(8), nn.Linear(8, 4))

        def mixup_step(model, batch):
            x, y = batch
            assert len(x) % 2 == 0, "Batch size should be even when using this"
            lam = 0.7
            x_flipped = x.flip(0).mul_(1.0 - lam)
            x.mul_(lam).add_(x_flipped)
            target = F.one_hot(y, 4).float() * lam + F.one_hot(y.flip(0), 4).float() * (1 - lam)
            return torch.sum(-target * F.log_softmax(model(x), dim=-1), dim=-1).mean()
        loader = DataLoader(TwoViews(70), batch_size=16, collate_fn=lambda s: (torch.stack([a[0][0] for a in s]),
                                                                                torch.stack([a[1] for a in s])))
        report = batchcheck.scan(model, loader, step=mixup_step, quiet=True)
        self.assertEqual(real_loop(model, loader, mixup_step), {})  # a tail of 6: even
        self.assertEqual(errors(report), {}, report.text)
        self.assertFalse(any(f.id == "batch-unchecked" for f in report.findings), report.text)

    def test_a_branch_on_a_value(self):
        torch.manual_seed(0)
        model = Encoder()
        wide = nn.Linear(8, 2)

        def step(model, batch):
            x, y = batch
            z = model(x)
            if bool(y.max() == 3):  # a branch only some batches take, broken
                z = wide(z).view(16, -1)
            return z.pow(2).mean()
        def collate(s):  # the tail's labels are all 3: only it takes the branch
            y = torch.stack([a[1] for a in s]).clamp(max=2) if len(s) == 16 else torch.full((len(s),), 3)
            return torch.stack([a[0][0] for a in s]), y
        loader = DataLoader(TwoViews(50), batch_size=16, collate_fn=collate)
        truth = real_loop(model, loader, step)
        self.assertEqual(sorted(truth), [3])
        report = batchcheck.scan(model, loader, step=step, quiet=True)
        self.assertEqual(sorted(error_batches(report)), [3], report.text)


class TestNoFalsePass(unittest.TestCase):
    def setUp(self):
        g = torch.Generator().manual_seed(4)
        self.loader = DataLoader(torch.utils.data.TensorDataset(torch.rand(20, 6, generator=g),
                                                                torch.randint(0, 3, (20,), generator=g)), batch_size=8)
        self.model = nn.Linear(6, 3)

    def check(self, step, fix):
        truth = real_loop(self.model, self.loader, step)
        self.assertEqual(sorted(truth), [0, 1, 2])
        report = batchcheck.scan(self.model, self.loader, step=step, quiet=True)
        self.assertFalse(report.ok, report.text)
        f = [f for f in report.findings if f.id == "backward-error"][0]
        self.assertEqual(f.data["occurrences"][0]["batch"], 0)
        self.assertIn(truth[0], f.message)
        self.assertEqual(f.fixes[0]["id"], fix, f.fixes)
        return report

    def test_a_per_sample_loss(self):
        self.check(lambda m, b: F.cross_entropy(m(b[0]), b[1], reduction="none"), "reduce-loss")

    def test_a_detached_loss_or_a_number(self):
        self.check(lambda m, b: F.cross_entropy(m(b[0]), b[1]).detach(), "return-loss-tensor")
        self.check(lambda m, b: torch.tensor(F.cross_entropy(m(b[0]), b[1]).item()), "return-loss-tensor")

    def test_the_captured_step_fails_as_training_does_too(self):
        step = lambda m, b: F.cross_entropy(m(b[0]), b[1], reduction="none")  # noqa: E731
        report = batchcheck.scan(self.model, self.loader, step=step, capture=True, quiet=True)
        self.assertEqual([o["batch"] for o in [f for f in report.findings if f.id == "backward-error"][0].data["occurrences"]],
                         [0, 1, 2], report.text)



class UncheckedWords(unittest.TestCase):
    """A batch the scan could not check is batch-unchecked ("not checked"), never "forward raised",
    and no tail-batch fix leads it: a captured step whose loss changes each call (a counter, as a
    schedule in the step would) has no capture that agrees with it at the tail's shape."""

    def test_a_tail_no_capture_computes_is_unchecked(self):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        loader = DataLoader(torch.utils.data.TensorDataset(torch.randn(10, 4), torch.randint(0, 3, (10,))), batch_size=4)
        calls = [0]

        def step(m, b):
            calls[0] += 1
            return F.cross_entropy(m(b[0]), b[1]) * (1.0 + calls[0])
        report = batchcheck.scan(model, loader, step=step, capture=True, quiet=True)
        unchecked = [f for f in report.findings if f.id == "batch-unchecked"]
        self.assertTrue(unchecked, report.text)
        f = unchecked[0]
        self.assertEqual((f.severity, f.batch, f.samples), ("error", 2, [8, 9]), report.text)
        self.assertIn("was not checked", f.message)
        self.assertNotIn("forward raised", f.message)
        self.assertNotIn(f.fixes[0]["id"], ("drop-last", "batch-size-divisor"), f.fixes)
        self.assertFalse(report.ok)


class FirstFixTrains(unittest.TestCase):
    """The first fix of a label equal to the number of classes fits the labels the step was given:
    from 0 (a mask of 0, 1, 2 against 2 classes), the head one class short leads, and applied (3
    outputs) the real loop trains; from 1, the shift leads, and applied the loop trains."""

    def test_the_first_fix_applied_makes_the_loop_train(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(20, 4, generator=g)

        def step(m, b):
            return F.cross_entropy(m(b[0]), b[1])
        for labels, first, apply in (
                (torch.randint(0, 2, (20,), generator=g), "more-classes", lambda y: (nn.Linear(4, 3), y)),
                (torch.ones(20, dtype=torch.long), "remap-labels", lambda y: (nn.Linear(4, 2), y - 1))):
            y = labels.clone()
            y[13] = 2
            loader = DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
            report = batchcheck.scan(nn.Linear(4, 2), loader, step=step, quiet=True)
            found = [f for f in report.findings if f.severity == "error"]
            self.assertEqual([(f.id, f.batch, f.samples) for f in found], [("target-out-of-range", 1, [13])], report.text)
            self.assertEqual(found[0].fixes[0]["id"], first, found[0].fixes)
            model, fixed = apply(y)
            self.assertEqual(real_loop(model, DataLoader(torch.utils.data.TensorDataset(x, fixed), batch_size=8), step), {})


class _TwoHeads(nn.Module):
    """forward returns ({"heads": (probabilities, logits)}, its input): the prediction sits deep."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        return {"heads": (y.sigmoid(), y)}, x


class OutputPaths(unittest.TestCase):
    """output= as a path into what forward returns (out[0]["heads"][0]): the engine's model (a
    trace that returns the prediction), and a loss given as a callable (run as a step); a path
    that names nothing is refused in one line."""

    def setUp(self):
        torch.manual_seed(0)
        self.x, self.t = torch.randn(10, 4), torch.rand(10, 3)

    def loader(self, bad):
        t = self.t.clone()
        if bad is not None:
            t[bad, 1] = 1.5
        return DataLoader(torch.utils.data.TensorDataset(self.x, t), batch_size=4)

    def test_a_nested_output_with_a_loss_module_and_a_callable(self):
        def step(m, b):
            return nn.BCELoss()(m(b[0])[0]["heads"][0], b[1])
        for output, loss in (('out[0]["heads"][0]', nn.BCELoss()), ((0, "heads", 0), F.binary_cross_entropy)):
            for bad in (None, 7):
                loader = self.loader(bad)
                report = batchcheck.scan(_TwoHeads(), loader, loss, output=output, quiet=True)
                truth = real_loop(_TwoHeads(), loader, step)
                if bad is None:
                    self.assertEqual(truth, {})
                    self.assertEqual(errors(report), {}, report.text)
                else:
                    self.assertEqual(sorted(truth), [1])
                    self.assertEqual(error_batches(report)[1], {"target-out-of-range": [7]}, report.text)

    def test_a_path_that_names_nothing_is_refused_in_one_line(self):
        cases = (('out[0]["head"][0]', 'batchcheck.scan: output=out[0]["head"][0]: out[0] is a dict (keys: "heads"), '
                                        'which has no ["head"] (KeyError)'),
                 ("out[1][9]", "batchcheck.scan: output=out[1][9]: out[1] is a tensor of shape [4, 4], which has no [9] "
                               "(IndexError)"),
                 ("out(0)", "batchcheck.scan: output='out(0)' is not a path into what forward returns (out): write it as "
                            "'out[\"logits\"]', 'out[0][1]' or 'out.logits'"))
        for output, text in cases:
            for loss in (nn.BCELoss(), F.binary_cross_entropy):
                with self.assertRaises(ValueError) as e:
                    batchcheck.scan(_TwoHeads(), self.loader(None), loss, output=output, quiet=True)
                self.assertEqual(str(e.exception), text)


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=[sys.argv[0]] + sys.argv[1:])
