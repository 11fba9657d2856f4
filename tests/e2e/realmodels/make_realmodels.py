"""Real torchvision models, scanned as a new user would, against the real PyTorch training loop.

Usage: $BATCHCHECK_PYTHON tests/e2e/realmodels/make_realmodels.py OUTDIR [ARCH ...]

For each architecture (12+, small inputs so the suite runs in minutes on 2 cores) this writes cases
OUTDIR/<arch>-<variant>/ with model.pt, inputs.npy, targets.npy and a config.json that uses batchcheck's
DEFAULT checks (probes included): nothing is tuned per case.

Variants:
  script-clean   scripted, 16 samples at batch 8: every batch full
  script-tail    scripted, a tail batch of one sample (world size 2 for every other architecture)
  trace-tail     traced in train mode, the same tail
  traceeval-tail traced in EVAL mode and scanned in train mode: the archive hides train-time failures
                 (the eager model's loop is recorded too: where its BatchNorm raises, the scan must fail)

Ground truth comes from the real training loop on the SAVED archive and SAVED data, per rank (each DDP
rank holds its own replica): torch.utils.data.DataLoader (with DistributedSampler(shuffle=True, seed=0)
when world_size > 1), model.train(), forward, cross-entropy, loss.backward(), gradients set to None, no
optimizer step. A batch fails when any of these raises, the loss or a gradient is not finite, or a
BatchNorm running statistic turns non-finite (a traced BatchNorm on one value per channel raises
nothing but poisons running_var). manifest.json lists per case the (rank, batch) of each rank's first
failure, or none.

Also one hand-written model whose only fault is in backward (an in-place op on a sigmoid's output).
Run with the Python whose torch matches the build (BATCHCHECK_PYTHON), with torchvision.
"""
import copy
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.models as tvm
from torchvision.models import segmentation as tvseg
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

torch.set_num_threads(2)
warnings.filterwarnings("ignore")

CLASSES = 5
SIZE = 32


def arch_builders():
    c = CLASSES
    return {
        "resnet18": lambda: tvm.resnet18(num_classes=c),
        "mobilenet_v2": lambda: tvm.mobilenet_v2(num_classes=c),
        "mobilenet_v3_small": lambda: tvm.mobilenet_v3_small(num_classes=c),
        "efficientnet_b0": lambda: tvm.efficientnet_b0(num_classes=c),
        "shufflenet_v2": lambda: tvm.shufflenet_v2_x0_5(num_classes=c),
        "regnet_y_400mf": lambda: tvm.regnet_y_400mf(num_classes=c),
        "densenet121": lambda: tvm.densenet121(num_classes=c),
        "mnasnet0_5": lambda: tvm.mnasnet0_5(num_classes=c),
        "squeezenet1_1": lambda: tvm.squeezenet1_1(num_classes=c),
        "convnext_tiny": lambda: tvm.convnext_tiny(num_classes=c),
        "googlenet": lambda: tvm.googlenet(num_classes=c, aux_logits=False, init_weights=True),
        "lraspp": lambda: tvseg.lraspp_mobilenet_v3_large(num_classes=c, weights_backbone=None),
        # An aux head, trained as torchvision's reference recipe does: loss(out) + 0.5 * loss(aux).
        "deeplabv3_aux": lambda: tvseg.deeplabv3_mobilenet_v3_large(num_classes=c, weights_backbone=None, aux_loss=True),
    }


# Extra outputs each architecture's training loss adds, with their weights (loss.aux).
AUX = {"deeplabv3_aux": {"aux": 0.5}}


class InplaceAfterSigmoid(nn.Module):
    """Forward and loss are fine; backward raises: the sigmoid's output is modified in place."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, CLASSES)

    def forward(self, x):
        h = torch.sigmoid(self.conv(x))
        h *= 2.0
        return self.fc(h.mean(dim=(2, 3)))


def pick(out, output_key):
    if output_key is None:
        return out
    return out[output_key]


def training_loss(out, y, output_key, aux):
    loss = F.cross_entropy(pick(out, output_key), y)
    for key, weight in aux.items():
        loss = loss + weight * F.cross_entropy(out[key], y)
    return loss


def oracle(make_model, x, y, batch_size, world_size, output_key, aux):
    """The real loop, per rank: the first failing batch of each rank (or None)."""
    ds = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    result = []
    for rank in range(world_size):
        model = make_model()
        model.train()
        if world_size > 1:
            loader = DataLoader(ds, batch_size=batch_size,
                                sampler=DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True, seed=0))
        else:
            loader = DataLoader(ds, batch_size=batch_size)
        bns = [m for m in model.modules() if "BatchNorm" in getattr(m, "original_name", type(m).__name__)]
        first = None
        for b, (xb, yb) in enumerate(loader):
            failed = None
            try:
                loss = training_loss(model(xb), yb, output_key, aux)
                if not torch.isfinite(loss):
                    failed = "loss"
                else:
                    loss.backward()
                    for p in model.parameters():
                        if p.grad is not None and not torch.isfinite(p.grad).all():
                            failed = "gradient"
                        p.grad = None
            except Exception as e:  # noqa: BLE001 - any failure of the loop is the ground truth
                failed = str(e).strip().splitlines()[-1][:200]
            if failed is None:
                for m in bns:
                    if not (torch.isfinite(m.running_var).all() and torch.isfinite(m.running_mean).all()):
                        failed = "BatchNorm running statistics became non-finite"
            if failed is not None:
                first = {"rank": rank, "batch": b, "why": failed}
                break
        result.append(first)
    return result


def save_case(out_dir, name, module, x, y, batch_size, world_size, output_key, meta, eager=None, aux=None):
    aux = aux or {}
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    module.save(os.path.join(d, "model.pt"))
    np.save(os.path.join(d, "inputs.npy"), x)
    np.save(os.path.join(d, "targets.npy"), y)
    loader = {"batch_size": batch_size}
    if world_size > 1:
        loader.update({"world_size": world_size, "shuffle": True, "seed": 0})
    cfg = {"model": {"path": "model.pt"}, "data": {"inputs": "inputs.npy", "targets": "targets.npy"},
           "loader": loader, "loss": {"type": "cross_entropy"}}
    if aux:
        cfg["loss"]["aux"] = aux
    if output_key is not None:
        cfg["model"]["output"] = output_key
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    path = os.path.join(d, "model.pt")
    failures = oracle(lambda: torch.jit.load(path), x, y, batch_size, world_size, output_key, aux)
    meta.update({"case": name, "world_size": world_size, "failures": failures})
    if eager is not None:
        # What the user's own (eager) model does in the same loop: what the archive hides.
        meta["eager_failures"] = oracle(lambda: copy.deepcopy(eager), x, y, batch_size, world_size, output_key, aux)
    return meta


def data(n, segmentation, seed):
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, 3, SIZE, SIZE)).astype(np.float32)
    if segmentation:
        y = g.integers(0, CLASSES, (n, SIZE, SIZE)).astype(np.int64)
    else:
        y = g.integers(0, CLASSES, (n,)).astype(np.int64)
    return x, y


def output_key_of(module, example):
    with torch.no_grad():
        out = module(example)
    if isinstance(out, dict):
        return "out"
    if isinstance(out, (tuple, list)):
        return 0
    return None


def write_wrong_files(out_dir):
    """Files users hand batchcheck by mistake, as torch.save writes them."""
    d = os.path.join(out_dir, "wrongfiles")
    os.makedirs(d, exist_ok=True)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    x = np.zeros((4, 3), np.float32)
    files = {
        "state_dict.pt": (net.state_dict(), "model", "state_dict"),
        "module.pt": (net, "model", "pickled nn.Module"),
        "checkpoint.pt": ({"epoch": 3, "model_state_dict": net.state_dict(),
                           "optimizer_state_dict": torch.optim.SGD(net.parameters(), lr=0.1).state_dict()},
                          "model", "training checkpoint"),
        "numpy.pt": ({"inputs": x, "targets": x[:, 0]}, "data", "numpy arrays"),
        "tensordataset.pt": (TensorDataset(torch.zeros(4, 3), torch.zeros(4)), "data", "TensorDataset"),
    }
    out = []
    for name, (obj, role, says) in files.items():
        torch.save(obj, os.path.join(d, name))
        out.append({"file": "wrongfiles/" + name, "role": role, "says": says})
    return out


def main():
    out_dir = sys.argv[1]
    only = set(sys.argv[2:])
    os.makedirs(out_dir, exist_ok=True)
    manifest = []
    start = time.time()
    for i, (arch, build) in enumerate(arch_builders().items()):
        if only and arch not in only:
            continue
        torch.manual_seed(i)
        seg = arch in ("lraspp", "deeplabv3_aux")
        aux = AUX.get(arch)
        model = build()
        example = torch.randn(2, 3, SIZE, SIZE)
        world = 2 if i % 2 else 1
        n_tail = 17 * world  # 17 samples per rank at batch 8: a tail of one
        x_clean, y_clean = data(16, seg, i)
        x_tail, y_tail = data(n_tail, seg, 100 + i)

        model.train()
        scripted = torch.jit.script(model)
        key = output_key_of(scripted, example)
        manifest.append(save_case(out_dir, arch + "-script-clean", scripted, x_clean, y_clean, 8, 1, key,
                                  {"arch": arch, "kind": "scripted", "traced_in": None}, aux=aux))
        manifest.append(save_case(out_dir, arch + "-script-tail", scripted, x_tail, y_tail, 8, world, key,
                                  {"arch": arch, "kind": "scripted", "traced_in": None}, aux=aux))
        model.train()
        traced = torch.jit.trace(model, example, check_trace=False, strict=False)
        key_t = output_key_of(traced, example)
        manifest.append(save_case(out_dir, arch + "-trace-tail", traced, x_tail, y_tail, 8, world, key_t,
                                  {"arch": arch, "kind": "traced", "traced_in": "train"}, aux=aux))
        eager = copy.deepcopy(model)
        model.eval()
        traced_eval = torch.jit.trace(model, example, check_trace=False, strict=False)
        key_e = output_key_of(traced_eval, example)
        # Modules whose op tracing freezes with a constant training flag. (ConvNeXt's stochastic
        # depth is a Python branch: an eval trace drops it without a trace in the graph.)
        frozen = sum(1 for m in model.modules() if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.Dropout)))
        manifest.append(save_case(out_dir, arch + "-traceeval-tail", traced_eval, x_tail, y_tail, 8, world, key_e,
                                  {"arch": arch, "kind": "traced", "traced_in": "eval", "mode_modules": frozen},
                                  eager=eager, aux=aux))

    if not only or "inplace" in only:
        torch.manual_seed(99)
        m = torch.jit.script(InplaceAfterSigmoid())
        x, y = data(16, False, 99)
        manifest.append(save_case(out_dir, "inplace-backward", m, x, y, 8, 1, None,
                                  {"arch": "inplace", "kind": "scripted", "traced_in": None}))

    wrong = write_wrong_files(out_dir)
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump({"cases": manifest, "wrong_files": wrong}, f, indent=1)
    failing = sum(1 for c in manifest if any(c["failures"]))
    print(f"make_realmodels: {len(manifest)} cases ({failing} failing in PyTorch) in {time.time() - start:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
