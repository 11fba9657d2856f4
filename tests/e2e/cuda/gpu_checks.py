"""The Python side of scripts/gpu-check.sh: cases made on the spot, checked, PASS or FAIL per line.

Usage: PYTHON tests/e2e/cuda/gpu_checks.py CHECK OUTDIR [--device cuda|cpu] [--small]

  embedding  writes OUTDIR/embedding/ (a TorchScript model with nn.Embedding(100, 16), 600 samples
             whose token ids reach 100 in sample 100 and 4000 in sample 500, batches of 32) and
             checks `batchcheck scan` of it: both batches (3 and 15) found, each naming its sample,
             the scan complete (a device-side assert on CUDA goes on in a fresh process).
  api        batchcheck.scan() over a DataLoader with 2 workers, the model already on the device:
             the NaN sample and the class 255 named at the batches the real loop meets them, and the
             caller's own CUDA context still works after every scan.
  precision  the three overflowing models of tests/python/test_precision.py (attention logits, a
             linear layer on one sample scaled by 1000, a sum over a long sequence): the real AMP
             loop on the device (torch.autocast fp16 around forward and the loss, a GradScaler, an
             SGD step) gets its first non-finite loss at the batch where batchcheck.scan(precision=
             "fp16") on the device names half-overflow, at the sample; the scan on the CPU names the
             same batch; and in bf16 both pass.
  speed      the workloads of issue 42: resnet18 at 32 px (20,000 samples, batch 128) and resnet50
             at 128 px (2,048 samples, batch 64): the caller's first and warm eager training epochs
             (SGD step included) against batchcheck.scan() of the same loader, the scan's fixed and
             per-batch costs apart (a scan of the first 8 batches against the whole one).

--device cpu runs the same checks on the CPU (a dry run of this script where no GPU is; --small
makes the speed workloads tiny). Needs BATCHCHECK_BINARY and PYTHONPATH=python (gpu-check.sh sets
them). Exit status: the number of FAIL lines.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

FAILED = []


def say(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


class EmbeddingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)

    def forward(self, x):
        return self.emb(x.long()).mean(1)


def embedding_check(out, device):
    d = os.path.join(out, "embedding")
    os.makedirs(d, exist_ok=True)
    x = np.array([[(i + j) % 100 for j in range(4)] for i in range(600)], dtype=np.float32)
    x[100, 2] = 100
    x[500, 0] = 4000
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), np.zeros((600, 16), np.float32))
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(EmbeddingNet()), os.path.join(d, "m.pt"))
    cfg = {"model": {"path": "m.pt"}, "data": {"inputs": "x.npy", "targets": "y.npy"},
           "loader": {"batch_size": 32}, "loss": {"type": "mse"}, "device": device}
    with open(os.path.join(d, "cfg.json"), "w") as f:
        json.dump(cfg, f)
    report = os.path.join(d, "report.json")
    t0 = time.perf_counter()
    run = subprocess.run([os.environ["BATCHCHECK_BINARY"], "scan", os.path.join(d, "cfg.json"), "-q", "-o", report],
                         capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if run.returncode != 1 or not os.path.exists(report):
        say(False, "(c) embedding: batchcheck exited %d: %s" % (run.returncode, run.stderr.strip()[-400:]))
        return
    r = json.load(open(report))
    errors = [f for f in r["findings"] if f["severity"] == "error"]
    want_id = "cuda-device-assert" if device == "cuda" else "forward-error"
    got = [(f["id"], o["batch"], o["samples"]) for f in errors for o in f["occurrences"]]
    say(got == [(want_id, 3, [100]), (want_id, 15, [500])],
        "(c) embedding on %s: %s at batches 3 and 15, samples [100] and [500], complete=%s (%.1f s): got %s"
        % (device, want_id, r.get("complete"), wall, got))
    say(r.get("complete") is True, "(c) embedding on %s: the scan went on after each assert (complete)" % device)
    if errors:
        print("     " + errors[0]["message"][:400])


class Images(Dataset):
    """Images as a user's Dataset returns them (one tensor per __getitem__): a NaN in sample 70,
    class 255 in sample 200."""

    def __init__(self, n, size, classes):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 3, size, size, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.x[70, 0, 0, 0] = float("nan")
        self.y[200] = 255

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class SmallConv(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.body(x).flatten(1))


def context_works(device):
    try:
        return torch.ones(4, device=device).sum().item() == 4.0
    except RuntimeError as e:
        print("     " + str(e).splitlines()[0])
        return False


def api_check(device):
    import batchcheck
    torch.manual_seed(0)
    model = SmallConv().to(device)
    loader = DataLoader(Images(320, 16, 10), batch_size=32, num_workers=2)
    for attempt in (1, 2):
        t0 = time.perf_counter()
        report = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), device=device, quiet=True)
        wall = time.perf_counter() - t0
        errors = [f for f in report.findings if f.severity == "error"]
        got = {f.id: (f.batch, list(f.samples)) for f in errors}
        # The NaN also spreads through BatchNorm into every prediction of its batch: that batch only.
        ok = (got.get("input-nonfinite") == (2, [70]) and got.get("target-out-of-range") == (6, [200])
              and all(f.batch in (2, 6) for f in errors))
        say(ok, "(d) scan() %d on %s, DataLoader with 2 workers, model on %s: %s (%.2f s)"
            % (attempt, device, next(model.parameters()).device, sorted((f.id, f.batch) for f in errors), wall))
        say(context_works(device), "(f) after scan() %d: the caller's own %s context still works" % (attempt, device))


def resnet(name, classes):
    try:
        import torchvision
        return getattr(torchvision.models, name)(num_classes=classes)
    except ImportError:
        import timm
        return timm.create_model(name, num_classes=classes)


def epoch(model, loader, device, opt, loss_fn):
    torch.cuda.synchronize() if device == "cuda" else None
    t0 = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def speed_check(device, small):
    import batchcheck
    workloads = [("resnet18", 32, 20000, 128), ("resnet50", 128, 2048, 64)]
    if small:
        workloads = [("resnet18", 32, 512, 128), ("resnet50", 64, 128, 64)]
    for name, px, n, b in workloads:
        torch.manual_seed(0)
        data = TensorDataset(torch.rand(n, 3, px, px), torch.randint(0, 10, (n,)))
        loader = DataLoader(data, batch_size=b)
        model = resnet(name, 10).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        first = epoch(model, loader, device, opt, nn.CrossEntropyLoss())
        warm = epoch(model, loader, device, opt, nn.CrossEntropyLoss())
        batches = len(loader)
        whole, part = [], []
        for _ in range(2):
            t0 = time.perf_counter()
            r = batchcheck.scan(model, loader, nn.CrossEntropyLoss(), device=device, quiet=True)
            whole.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            batchcheck.scan(model, loader, nn.CrossEntropyLoss(), device=device, quiet=True, args=["--max-batches", "8"])
            part.append(time.perf_counter() - t0)
        scan, scan8 = statistics.median(whole), statistics.median(part)
        per_batch = (scan - scan8) / max(1, batches - 8)
        fixed = scan - per_batch * batches
        print("     %s %dpx, %d samples, batch %d (%d batches) on %s: first epoch %.2f s, warm %.2f s, scan %.2f s "
              "(fixed %.2f s + %.1f ms a batch), scan/first %.2fx, scan/warm %.2fx"
              % (name, px, n, b, batches, device, first, warm, scan, fixed, per_batch * 1000, scan / first, scan / warm),
              flush=True)
        say(r.ok, "(e) %s: the clean workload passes (%d findings)" % (name, len(r.findings)))
        if device == "cuda" and not small:
            # Issue 42's goal; reported, not gated: timings are for the closing note.
            print("     goal %s: scan <= 1.0x the first epoch: %s; <= 1.2x a warm one: %s"
                  % (name, "met" if scan <= first else "not met", "met" if scan <= 1.2 * warm else "not met"))
        say(context_works(device), "(f) after the %s scans: the caller's own %s context still works" % (name, device))


def precision_check(device):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import test_precision
    import batchcheck
    for name, case in (("attention", test_precision.attention_case), ("linear x1000", test_precision.linear_case),
                       ("long sum", test_precision.sequence_case)):
        model, loader, sample = case()
        ce = nn.CrossEntropyLoss()
        real = test_precision.amp_loop(model, loader, ce, "fp16", device)
        found = {}
        for where in dict.fromkeys([device, "cpu"]):
            r = batchcheck.scan(model.to(where), loader, ce, precision="fp16", device=where, quiet=True)
            over = [f for f in r.findings if f.id == "half-overflow"]
            found[where] = (over[0].batch, over[0].samples) if over else None
        say(real is not None and found[device] == (real, [sample]) and found["cpu"] == found[device],
            "(h) fp16 %s: the real AMP loop on %s first gets a non-finite loss at batch %s; half-overflow on %s %s, on "
            "the CPU %s" % (name, device, real, device, found[device], found["cpu"]))
        bf16 = batchcheck.scan(model.to(device), loader, ce, precision="bf16", device=device, quiet=True)
        say(bf16.ok and test_precision.amp_loop(model, loader, ce, "bf16", device) is None,
            "(h) bf16 %s on %s: the scan passes as the real loop does" % (name, device))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["embedding", "api", "precision", "speed"])
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.check == "embedding":
        embedding_check(a.out, a.device)
    elif a.check == "api":
        api_check(a.device)
    elif a.check == "precision":
        precision_check(a.device)
    else:
        speed_check(a.device, a.small)
    sys.exit(len(FAILED))


if __name__ == "__main__":
    main()
