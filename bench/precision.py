"""The cost of a half-precision scan (batchcheck.scan(precision=)) on the CPU: for each model, the
median of REPEAT runs of the fp32 scan, the fp16 and bf16 scans, the fp16 scan without the watch
of every op's half output (BATCHCHECK_BENCH_NO_HALF_WATCH=1: autocast only), and the user's own
AMP epoch (torch.autocast around forward and the loss, GradScaler, SGD step), one line each.

    python bench/precision.py [REPEAT]
"""
import copy
import os
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import test_precision  # noqa: E402

import batchcheck  # noqa: E402


def amp_epoch(model, loader, dtype):
    model = copy.deepcopy(model).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
    for x, y in loader:
        with torch.autocast("cpu", dtype=dtype):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def scan(model, loader, precision, watch=True):
    def run():
        if not watch:
            os.environ["BATCHCHECK_BENCH_NO_HALF_WATCH"] = "1"
        try:
            report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), precision=precision, quiet=True)
        finally:
            os.environ.pop("BATCHCHECK_BENCH_NO_HALF_WATCH", None)
        assert report.ok, report.text
    return run


def main():
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    import torchvision
    torch.manual_seed(0)
    cases = {
        "resnet18, 256 images 3x64x64, batch 32": (torchvision.models.resnet18(num_classes=10),
                                                   torch.randn(256, 3, 64, 64), 10, 32),
        "transformer (2 layers, d=64), 512 x 32 tokens, batch 64": (test_precision.SmallTransformer(d=64),
                                                                    torch.randn(512, 32, 64), 4, 64),
        "MLP 64-64-4, 20,000 samples, batch 128": (test_precision.Mlp(d=64), torch.randn(20000, 64), 4, 128),
    }
    for name, (model, x, classes, bs) in cases.items():
        loader = DataLoader(TensorDataset(x, torch.randint(0, classes, (len(x),))), batch_size=bs)
        row = {
            "fp32 scan": timed(scan(model, loader, None), repeat),
            "fp16 scan": timed(scan(model, loader, "fp16"), repeat),
            "fp16 scan, no watch": timed(scan(model, loader, "fp16", watch=False), repeat),
            "bf16 scan": timed(scan(model, loader, "bf16"), repeat),
            "bf16 scan, no watch": timed(scan(model, loader, "bf16", watch=False), repeat),
            "AMP epoch fp16": timed(lambda: amp_epoch(model, loader, torch.float16), repeat),
            "AMP epoch bf16": timed(lambda: amp_epoch(model, loader, torch.bfloat16), repeat),
        }
        print(name)
        for k, v in row.items():
            print("  %-22s %7.2f s" % (k, v))
        print("  watch cost: fp16 %.2fx, bf16 %.2fx" % (row["fp16 scan"] / row["fp16 scan, no watch"],
                                                       row["bf16 scan"] / row["bf16 scan, no watch"]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
