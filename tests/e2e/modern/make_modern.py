"""Models as users of torch 2.x save them, scanned by batchcheck and compared with the real loop.

Usage: PYTHON tests/e2e/modern/make_modern.py OUTDIR [--no-aoti]   (--no-aoti: skip the ~40 s compile)

Needs torch 2.x (the venv's torch 2.15 for the default build). Writes, each case in its folder with
model file, inputs.npy, targets.npy and a default config.json (nothing tuned):

  transformer/  a TorchScript transformer encoder classifier (nn.TransformerEncoder, whose attention
                runs through aten::scaled_dot_product_attention, an operator LibTorch 1.13 lacks); 17
                sequences at batch 8, so the last batch holds one
  aoti/         a classifier exported with torch.export, its batch dimension dynamic (Dim.AUTO), and
                compiled by AOTInductor into model.pt2; torch.export specializes sizes 0 and 1, so
                the program accepts batches of 2 and more: the tail batch of one is outside it
  exported/     a torch.export ExportedProgram saved with torch.export.save (not compiled)

manifest.json records, per case, what the real PyTorch loop does on the saved file and data: the
first failing batch (or none), and for aoti/ the batch sizes the compiled program accepts. The loop
runs the package with AOTI_RUNTIME_CHECK_INPUTS=1, as batchcheck does: without it AOTInductor skips
its input checks and runs code compiled for batches of 2 or more on a batch of one.
"""
import json
import os

os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"  # read once, by the first run of a package
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(2)
warnings.filterwarnings("ignore")

SEQ, DIM, CLASSES = 6, 16, 4


class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(DIM, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


class SmallNet(nn.Module):
    """A classifier whose export keeps the batch dimension symbolic."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, 32)
        self.fc2 = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def data(n, shape, seed):
    g = np.random.default_rng(seed)
    x = g.standard_normal((n,) + shape).astype(np.float32)
    y = g.integers(0, CLASSES, (n,)).astype(np.int64)
    return x, y


def write_case(out_dir, name, model_file, x, y, batch_size):
    d = os.path.join(out_dir, name)
    np.save(os.path.join(d, "inputs.npy"), x)
    np.save(os.path.join(d, "targets.npy"), y)
    cfg = {"model": {"path": model_file}, "data": {"inputs": "inputs.npy", "targets": "targets.npy"},
           "loader": {"batch_size": batch_size}, "loss": {"type": "cross_entropy"}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def first_failure(run, x, y, batch_size):
    """The real loop over the saved file: DataLoader, forward, cross-entropy (and backward where `run` trains)."""
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=batch_size)
    for b, (xb, yb) in enumerate(loader):
        try:
            loss = run(xb, yb)
            if not torch.isfinite(loss):
                return {"batch": b, "why": "loss"}
        except Exception as e:  # noqa: BLE001 - any failure of the loop is the ground truth
            return {"batch": b, "why": str(e).strip().splitlines()[-1][:300]}
    return None


def transformer_case(out_dir):
    d = os.path.join(out_dir, "transformer")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    scripted = torch.jit.script(EncoderClassifier().train())
    path = os.path.join(d, "model.pt")
    scripted.save(path)
    x, y = data(17, (SEQ, DIM), 1)
    write_case(out_dir, "transformer", "model.pt", x, y, 8)
    model = torch.jit.load(path)
    model.train()

    def run(xb, yb):
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        return loss
    return {"case": "transformer", "failure": first_failure(run, x, y, 8)}


def link_against_this_torch():
    """torch's C++ builder lists Python's LIBDIR (/usr/lib/x86_64-linux-gnu on Debian) before
    torch's own lib folder: with Debian's libtorch-dev installed too (the 1.13 build), -ltorch
    finds the system's LibTorch, the package's wrapper links none, and loading it fails with
    "undefined symbol: aoti_torch_...". Search this torch's folder first."""
    from torch._inductor import cpp_builder

    original = cpp_builder._get_python_related_args

    def torch_first():
        include_dirs, lib_dirs = original()
        return include_dirs, [os.path.join(os.path.dirname(torch.__file__), "lib")] + lib_dirs

    cpp_builder._get_python_related_args = torch_first


def aoti_case(out_dir):
    d = os.path.join(out_dir, "aoti")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(1)
    net = SmallNet().eval()
    example = (torch.randn(4, DIM),)
    ep = torch.export.export(net, example, dynamic_shapes={"x": {0: torch.export.Dim.AUTO}})
    path = os.path.join(d, "model.pt2")
    link_against_this_torch()
    torch._inductor.aoti_compile_and_package(ep, package_path=path)
    x, y = data(17, (DIM,), 2)
    write_case(out_dir, "aoti", "model.pt2", x, y, 8)
    runner = torch._inductor.aoti_load_package(path)

    def run(xb, yb):
        return F.cross_entropy(runner(xb), yb)
    accepted = [b for b in (1, 2, 3, 8) if first_failure(run, x[:b], y[:b], b) is None]
    bounds = [str(r) for r in ep.range_constraints.values()]
    return {"case": "aoti", "failure": first_failure(run, x, y, 8), "accepted_batch_sizes": accepted,
            "range_constraints": bounds}


def exported_case(out_dir):
    d = os.path.join(out_dir, "exported")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(2)
    ep = torch.export.export(SmallNet().eval(), (torch.randn(4, DIM),),
                             dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    torch.export.save(ep, os.path.join(d, "model.pt2"))
    x, y = data(17, (DIM,), 3)
    write_case(out_dir, "exported", "model.pt2", x, y, 8)
    return {"case": "exported"}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    cases = [transformer_case(out_dir), exported_case(out_dir)]
    if "--no-aoti" not in sys.argv:
        cases.append(aoti_case(out_dir))
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)
    print(f"make_modern: {len(cases)} cases with torch {torch.__version__} in {time.time() - start:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
