"""batchcheck.scan(step=) against the user's own training epoch (forward, loss, backward, an SGD
step) on the same DataLoader, as a user compares them: an MLP over tabular rows (TensorDataset), a
small CNN with BatchNorm over a per-sample Dataset with a transform, and a 2-layer
nn.TransformerEncoder. Each case runs the epoch and the scans alternated in one process, REPEAT
times; the medians and their ratios print one line each. Columns: the default path (the step as
written, in this process) and capture=True (the step traced and run by the engine).

    BATCHCHECK_BINARY=build/app/batchcheck PYTHONPATH=python python bench/step_vs_epoch.py [REPEAT] [CASE...]
"""
import os
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import batchcheck


class Shifted(Dataset):
    """A per-sample Dataset with a transform (a flip and a normalization), as image pipelines are."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 3, 32, 32, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if i % 2:
            x = x.flip(-1)
        return (x - 0.5) / 0.25, self.y[i]


def mlp():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(400_000, 64, generator=g), torch.randint(0, 10, (400_000,), generator=g)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    return model, DataLoader(TensorDataset(x, y), batch_size=256), lambda m, b: F.cross_entropy(m(b[0]), b[1])


def cnn():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10))
    return model, DataLoader(Shifted(4096), batch_size=128), lambda m, b: F.cross_entropy(m(b[0]), b[1])


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 128)
        layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(128, 5)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))


def transformer():
    g = torch.Generator().manual_seed(0)
    ids, y = torch.randint(0, 1000, (1024, 64), generator=g), torch.randint(0, 5, (1024,), generator=g)
    return Block(), DataLoader(TensorDataset(ids, y), batch_size=64), lambda m, b: F.cross_entropy(m(b[0]), b[1])


CASES = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


def epoch(model, loader, step):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model.train()
    for batch in loader:
        opt.zero_grad(set_to_none=True)
        step(model, batch).backward()
        opt.step()


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(repeat=3, *names):
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    print("%-12s %10s %16s %16s" % ("workload", "epoch", "scan(step=)", "capture=True"))
    for name in names or CASES:
        torch.manual_seed(0)
        model, loader, step = CASES[name]()
        times = {"epoch": [], "step": [], "capture": []}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(repeat):  # alternated: the machine's drift lands on every column alike
                times["epoch"].append(timed(lambda: epoch(model, loader, step)))
                r = []
                times["step"].append(timed(lambda: r.append(batchcheck.scan(model, loader, step=step, quiet=True))))
                times["capture"].append(timed(lambda: r.append(batchcheck.scan(model, loader, step=step, capture=True,
                                                                                quiet=True))))
        e, s, c = (statistics.median(times[k]) for k in ("epoch", "step", "capture"))
        print("%-12s %9.2fs %9.2fs %5.2fx %9.2fs %5.2fx" % (name, e, s, s / e, c, c / e), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 3, *args[1:])
