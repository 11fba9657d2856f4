"""Every figure of the scan-cost table in one run, each beside its baseline (docs/performance.md):

  (1) batchcheck.scan() against the user's own training epoch (forward, loss, backward, an SGD
      step) on the same DataLoader, in this process, alternated, medians: scan(model, loader,
      loss), scan(step=) and scan(eager=True) (forward and loss only) on an MLP, a small CNN with a
      per-sample Dataset and a transformer block (bench/step_vs_epoch.py's workloads);
  (2) the transformer and the CNN under precision="bf16" and "fp16" against the user's autocast
      epoch in that dtype (the CNN's fp16 rows on 1,024 samples: CPU float16 convolutions are slow);
  (3) the fixed cost: a scan of a loader of one batch (MLP, CNN);
  (4) with --build DIR (a tree configured with -DBATCHCHECK_BUILD_BENCHMARKS=ON): the command
      against the bare LibTorch loop (forward, loss, backward) on the tabular and segmentation
      workloads of ~10 s (bench-data/p1x4, p2x4) and the seed sample, per batch and the fixed cost
      (a run of one batch, less one batch) apart; whole processes, alternated, medians.

    BATCHCHECK_BINARY=build/app/batchcheck PYTHONPATH=python python bench/epoch_table.py \
        [--runs 3] [--build build] [--only python|command]
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
import warnings
from unittest import mock

import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_vs_epoch as W  # noqa: E402  (the workloads)

import batchcheck  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def epoch(model, loader, step, dtype=None):
    """The user's epoch; under torch.autocast(dtype) where given, as an AMP loop runs it."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model.train()
    scope = torch.autocast("cpu", dtype=dtype) if dtype else contextlib.nullcontext()
    for batch in loader:
        opt.zero_grad(set_to_none=True)
        with scope:
            loss = step(model, batch)
        loss.backward()
        opt.step()


def in_a_process(fn):
    """fn with the engine in a process of its own where it would run in this one (_inprocess.py):
    the path of every scan before it, for the column beside it."""
    def run():
        with mock.patch.dict(os.environ, {"BATCHCHECK_ENGINE": "process"}):
            return fn()
    return run


def medians(fns, runs):
    """{name: median wall} of the callables, run round-robin `runs` times."""
    times = {k: [] for k in fns}
    for _ in range(runs):
        for k, fn in fns.items():
            times[k].append(W.timed(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def python_table(runs):
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    warnings.simplefilter("ignore")
    ce = nn.CrossEntropyLoss()
    print("(1) batchcheck.scan() against the user's epoch (median of %d, alternated; ratio to the epoch)" % runs)
    print("(the step's and eager=True's engine runs in the scanning process; \"in a process\": in its own, as before)")
    cols = ("loss", "step", "step-p", "eager")
    print("%-12s %8s %18s %18s %18s %18s" % ("workload", "epoch", "scan(m, ld, loss)", "scan(step=)", "step=, in a process",
                                             "eager=True (fwd)"))
    for name in W.CASES:
        torch.manual_seed(0)
        model, loader, step = W.CASES[name]()
        step_scan = lambda: batchcheck.scan(model, loader, step=step, quiet=True)  # noqa: E731
        m = medians({"epoch": lambda: epoch(model, loader, step),
                     "loss": lambda: batchcheck.scan(model, loader, ce, quiet=True),
                     "step": step_scan, "step-p": in_a_process(step_scan),
                     "eager": lambda: batchcheck.scan(model, loader, ce, eager=True, quiet=True)}, runs)
        e = m["epoch"]
        print("%-12s %7.2fs" % (name, e) + "".join(" %10.2fs %5.2fx" % (m[k], m[k] / e) for k in cols), flush=True)
    print("\n(2) precision= against the user's autocast epoch in that dtype (CPU float16 convolutions are slow in "
          "PyTorch itself: the CNN's fp16 rows run on its first 1,024 samples)")
    print("%-18s %8s %18s %18s %18s" % ("workload", "epoch", "scan(m, ld, loss)", "scan(step=)", "step=, in a process"))
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        for name in ("transformer", "cnn"):
            torch.manual_seed(0)
            model, loader, step = W.CASES[name]()
            if dtype == torch.float16 and name == "cnn":
                loader = DataLoader(Subset(loader.dataset, range(1024)), batch_size=loader.batch_size)
            step_scan = lambda: batchcheck.scan(model, loader, step=step, precision=precision, quiet=True)  # noqa: E731
            m = medians({"epoch": lambda: epoch(model, loader, step, dtype),
                         "loss": lambda: batchcheck.scan(model, loader, ce, precision=precision, quiet=True),
                         "step": step_scan, "step-p": in_a_process(step_scan)}, runs)
            e = m["epoch"]
            print("%-18s %7.2fs" % ("%s %s" % (name, precision), e) +
                  "".join(" %10.2fs %5.2fx" % (m[k], m[k] / e) for k in ("loss", "step", "step-p")), flush=True)
    print("\n(3) the fixed cost: a scan of one batch (start-up, model, the batch, the report)")
    for name in ("mlp", "cnn"):
        torch.manual_seed(0)
        model, loader, step = W.CASES[name]()
        one = DataLoader(Subset(loader.dataset, range(loader.batch_size)), batch_size=loader.batch_size)
        step_scan = lambda: batchcheck.scan(model, one, step=step, quiet=True)  # noqa: E731
        m = medians({"loss": lambda: batchcheck.scan(model, one, ce, quiet=True),
                     "step": step_scan, "step-p": in_a_process(step_scan),
                     "epoch": lambda: epoch(model, one, step)}, runs)
        print("%-12s scan(m, ld, loss) %.3f s   scan(step=) %.3f s (in a process %.3f s)   (the user's step on it: %.3f s)"
              % (name, m["loss"], m["step"], m["step-p"], m["epoch"]), flush=True)


def command_table(build, runs):
    import bench as harness  # scripts/bench.py: whole-process timing, round-robin medians

    scan = os.path.join(build, "app", "batchcheck")
    bare = os.path.join(build, "bench", "bench_bare_loop")
    data = os.path.join(ROOT, "bench-data")
    if not os.path.exists(bare):
        sys.exit("bench: %s is missing: configure %s with -DBATCHCHECK_BUILD_BENCHMARKS=ON" % (bare, build))
    subprocess.run([os.path.join(build, "bench", "bench_make_workloads"), data], check=True)
    work = {"tabular (p1x4)": (os.path.join(data, "p1x4", "config.json"), 800000 // 64),
            "segmentation (p2x4)": (os.path.join(data, "p2x4", "config.json"), 24000 // 32),
            # Its last batch (130) is the NaN the sample is about, which stops the bare loop: both
            # take the 130 before it.
            "seed sample": (os.path.join(ROOT, "sample_configs", "segmentation_tail.json"), 130)}
    print("\n(4) the command against the bare LibTorch loop (forward, loss, backward; median of %d, whole process)" % runs)
    print("%-20s %9s %9s %12s %12s %7s %10s %10s" % ("workload", "scan", "bare", "scan/batch", "bare/batch", "ratio",
                                                     "scan fixed", "bare fixed"))
    for name, (cfg, batches) in work.items():
        rows = harness.measure_together({
            "scan": [scan, "scan", cfg, "-q", "-o", os.devnull, "--max-batches", str(batches)],
            "scan 1": [scan, "scan", cfg, "-q", "-o", os.devnull, "--max-batches", "1"],
            "bare": [bare, cfg, "--tuned", "--backward", "--batches", str(batches)],
            "bare 1": [bare, cfg, "--tuned", "--backward", "--batches", "1"]}, runs)
        per = {k: (rows[k][0] - rows[k + " 1"][0]) / (batches - 1) for k in ("scan", "bare")}
        fixed = {k: rows[k + " 1"][0] - per[k] for k in ("scan", "bare")}
        print("%-20s %8.2fs %8.2fs %10.2fms %10.2fms %6.2fx %9.3fs %9.3fs"
              % (name, rows["scan"][0], rows["bare"][0], per["scan"] * 1e3, per["bare"] * 1e3, per["scan"] / per["bare"],
                 fixed["scan"], fixed["bare"]), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build", help="a build tree with the benchmarks, for (4)")
    ap.add_argument("--only", choices=("python", "command"))
    args = ap.parse_args()
    print("%s, torch %s, %d CPUs" % (time.strftime("%Y-%m-%d"), torch.__version__, os.cpu_count()))
    if args.only != "command":
        python_table(args.runs)
    if args.build and args.only != "python":
        command_table(args.build, args.runs)


if __name__ == "__main__":
    main()
