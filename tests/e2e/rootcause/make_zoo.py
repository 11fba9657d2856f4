"""A zoo of NaN and range origins for root-cause localization (tests/test_rootcause.cpp).

Each case is a small model whose bad value is born at one marked line (`# zoo: NAME`), saved
scripted and traced, with data where only some batches go bad, and in manifest.json what the
real loop sees on the same data: which batches' predictions are NaN/Inf or outside [0, 1],
the op expected to be named and the marked line.

    python make_zoo.py OUT
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES = 4, 3
HERE = os.path.abspath(__file__)


def marker_line(name):
    with open(HERE) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith("# zoo: " + name):
                return number
    raise SystemExit("no marker for " + name)


class Head(torch.nn.Module):
    def __init__(self, features=FEATURES):
        super().__init__()
        self.fc = torch.nn.Linear(features, CLASSES)

    def forward(self, h):
        return self.fc(h)


class Log(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        h = torch.log(x)  # zoo: log
        return self.head(h)


class Inner(torch.nn.Module):
    def forward(self, x):
        return torch.sqrt(x)  # zoo: sqrt-nested


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x) * 2.0


class NestedSqrt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = Head()

    def forward(self, x):
        return self.head(self.block(x))


class ZeroOverZero(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        h = x / x.sum(1, keepdim=True)  # zoo: div
        return self.head(h)


class ExpOverflow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        e = torch.exp(x)
        h = e - e  # zoo: exp-inf
        return self.head(h)


class BatchStd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        h = (x - x.mean(0)) / x.std(0)  # zoo: std
        return self.head(h)


class MaskedSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        scores = x.masked_fill(x < 0, float("-inf"))
        w = torch.softmax(scores, 1)  # zoo: softmax
        return self.head(w)


class Acos(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        return self.head(torch.acos(x))  # zoo: acos


class SigmoidPlus(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(FEATURES, 1)

    def forward(self, x):
        p = torch.sigmoid(self.fc(x))
        return p + 1.5 * (x[:, :1] > 5).to(p.dtype)  # zoo: range-add


class InIf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        if x.size(0) > 2:
            h = torch.log(x)  # zoo: if
        else:
            h = x
        return self.head(h)


class InLoop(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        h = x
        for _ in range(3):
            h = torch.sqrt(h - 0.3)  # zoo: loop
        return self.head(h)


class Cat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head(2 * FEATURES)

    def forward(self, x):
        h = torch.cat([x, torch.log(x)], 1)  # zoo: cat
        return self.head(h)


class BatchSum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = Head()

    def forward(self, x):
        s = x.sum(0, keepdim=True)
        h = (x * 0.0) * s  # zoo: batch-dependent
        return self.head(h)


class LogThenBatchNorm(torch.nn.Module):
    """One sample's NaN, spread to the whole batch by BatchNorm's batch statistics."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(FEATURES)
        self.head = Head()

    def forward(self, x):
        h = torch.log(x)  # zoo: log-batchnorm
        return self.head(self.bn(h))


class InputThenBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(FEATURES)
        self.head = Head()

    def forward(self, x):
        return self.head(self.bn(x))


def positive(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, FEATURES, generator=g) * 0.8 + 0.1


def loop_truth(model, x, y, batch, range_check):
    """The real loop on the same data: which batches' predictions are bad."""
    bad = []
    with torch.no_grad():
        for b, (xb, _) in enumerate(DataLoader(TensorDataset(x, y), batch_size=batch)):
            p = model(xb)
            if range_check:
                if bool(((p < 0) | (p > 1)).any()):
                    bad.append(b)
            elif not bool(torch.isfinite(p).all()):
                bad.append(b)
    return bad


def write(out, name, flavor, model, x, y, loss, batch, expect):
    model.train()
    d = os.path.join(out, name + "-" + flavor)
    os.makedirs(d, exist_ok=True)
    if flavor == "scripted":
        saved = torch.jit.script(model)
    else:
        saved = torch.jit.trace(model, (x[:batch],), check_trace=False)
    saved.save(os.path.join(d, "model.pt"))
    torch.save({"inputs": x, "targets": y}, os.path.join(d, "data.pt"))
    config = {"model": {"path": "model.pt"}, "data": {"path": "data.pt"}, "loss": {"type": loss},
              "loader": {"batch_size": batch}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    truth = {"case": name + "-" + flavor, "bad_batches": loop_truth(model, x, y, batch, loss == "bce")}
    truth.update(expect)
    return truth


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    n, batch = 12, 4
    labels = torch.arange(n) % CLASSES
    cases = []

    def add(name, model, x, expect, y=labels, loss="cross_entropy", b=batch):
        expect = dict(expect)
        if "line" not in expect:
            expect["line"] = marker_line(name)
        for flavor in ("scripted", "traced"):
            cases.append(write(out, name, flavor, model, x, y, loss, b, expect))

    x = positive(n, 1)
    x[5, 0] = -0.5
    add("log", Log(), x, {"op": "aten::log", "module": "", "negative": 1, "samples": [5]})

    x = positive(n, 2)
    x[9, 2] = -0.25
    add("sqrt-nested", NestedSqrt(), x, {"op": "aten::sqrt", "module": "block.inner", "negative": 1, "samples": [9]})

    x = positive(n, 3)
    x[2] = 0.0
    add("div", ZeroOverZero(), x, {"op": "aten::div", "module": "", "samples": [2]})

    x = positive(n, 4)
    x[10, 1] = 100.0
    add("exp-inf", ExpOverflow(), x, {"op": "aten::sub", "module": "", "inf_op": "aten::exp", "samples": [10]})

    # 9 samples in batches of 4: the tail batch holds one sample, whose std over the batch is NaN.
    add("std", BatchStd(), positive(9, 5), {"op": "aten::std", "module": ""}, y=torch.arange(9) % CLASSES)

    x = positive(n, 6)
    x[6] = -1.0
    add("softmax", MaskedSoftmax(), x, {"op": "aten::softmax", "module": "", "inf_op": "aten::masked_fill", "samples": [6]})

    x = positive(n, 7)
    x[7, 1] = 1.5
    add("acos", Acos(), x, {"op": "aten::acos", "module": "", "samples": [7]})

    x = positive(n, 8)
    x[3, 0] = 9.0
    add("range-add", SigmoidPlus(), x, {"op": "aten::add", "module": "", "range": True},
        y=(torch.arange(n) % 2).float().unsqueeze(1), loss="bce")

    x = positive(n, 9)
    x[4, 3] = -2.0
    add("if", InIf(), x, {"op": "aten::log", "module": "", "samples": [4]})

    add("loop", InLoop(), positive(n, 10), {"op": "aten::sqrt", "module": ""})

    x = positive(n, 11)
    x[1, 1] = -3.0
    add("cat", Cat(), x, {"op": "aten::log", "module": "", "chain_op": "aten::cat", "samples": [1]})

    # Samples 5 and 6 overflow a float sum over the batch only together; each alone is finite.
    x = positive(n, 12)
    x[5, 0] = 2.0e38
    x[6, 0] = 2.0e38
    add("batch-dependent", BatchSum(), x, {"op": "aten::mul", "module": "", "inf_op": "aten::sum",
                                           "samples": [5, 6], "batch_dependent": True})

    # One sample's NaN in every row of its batch: BatchNorm (train mode) spreads it; the root
    # cause still names the sample.
    x = positive(n, 13)
    x[9, 1] = -1.0
    add("log-batchnorm", LogThenBatchNorm(), x, {"op": "aten::log", "module": "", "samples": [9], "spread": True})
    x = positive(n, 14)
    x[9, 2] = float("nan")
    add("input-batchnorm", InputThenBatchNorm(), x, {"kind": "input", "name": "x", "samples": [9], "spread": True,
                                                     "line": 0})

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
