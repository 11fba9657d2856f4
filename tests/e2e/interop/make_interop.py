"""Builds interop cases for batchcheck with real PyTorch and records PyTorch's own verdict.

Usage: $BATCHCHECK_PYTHON tests/e2e/interop/make_interop.py OUTDIR

For each case this writes OUTDIR/<case>/ with model.pt (a torch.jit.script-ed or torch.jit.trace-d
module saved with torch.jit.save), the data (inputs.npy + targets.npy via np.save, or data.pt via
torch.save holding {"inputs": tensor, "targets": tensor}) and config.json in batchcheck's format.
OUTDIR/manifest.json lists every case with PyTorch's ground truth.

Ground truth comes from the real training loop: the SAVED model and the SAVED data are loaded back,
fed through torch.utils.data.DataLoader(TensorDataset(x, y), ...) exactly as the config says, and each
batch runs forward, the torch.nn.functional loss, backward and an SGD step. expected_batch is the index
of the first batch that raises or yields a non-finite loss (null when the epoch completes). The loop is
run a second time forward-only (no backward, no step) and both must agree, so a verdict never hinges
on optimiser dynamics.

pytorch_error is the first line of the exception text; when the exception comes out of the TorchScript
interpreter (whose first line is always "The following operation failed in the TorchScript
interpreter."), it is the interpreter's last line, the original exception, with its
"builtins.ValueError: " / "RuntimeError: " prefix removed. A non-finite loss is recorded as
"non-finite loss: nan".

Deterministic, byte for byte: fixed torch / numpy seeds, and the script re-executes itself with
PYTHONHASHSEED=0 so scripted modules serialise their constants in a fixed order. Quiet on success except one summary line on stderr; exits 1
with a message when any case's ground truth differs from what the case is meant to show.

Run with the Python whose torch matches the build (BATCHCHECK_PYTHON), with torchvision and numpy.
"""
import json
import os
import re
import sys
import time
import warnings
from typing import Dict, List

# torch.jit.script serialises a module's constants (Final attributes) in Python set order, which follows
# string hashing: without a fixed PYTHONHASHSEED, model.pt differs from run to run (weights do not).
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(2)
warnings.filterwarnings("ignore")  # std() on one sample, tracer notes: expected, not news

TS_WRAPPER = "The following operation failed in the TorchScript interpreter."


# ----------------------------------------------------------------------------------------------
# Models, written as a user would write them.
# ----------------------------------------------------------------------------------------------

class SmallCNNHeadBN(nn.Module):
    """Binary image classifier: conv trunk, global pool, flatten, an MLP head with BatchNorm1d."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(inplace=True), nn.Linear(64, 1),
        )

    def forward(self, x):
        return torch.sigmoid(self.head(self.features(x)))


class BatchStandardizedScorer(nn.Module):
    """Scores standardized over the batch (unbiased std) before the sigmoid: NaN on a batch of one."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x):
        s = self.body(x)
        s = (s - s.mean(dim=0, keepdim=True)) / s.std(dim=0, keepdim=True)
        return torch.sigmoid(s)


class TinySegNet(nn.Module):
    """A small FCN: per-pixel class logits (B, C, H, W)."""

    def __init__(self, num_classes=4):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, num_classes, 1),
        )

    def forward(self, x):
        return self.net(x)


class SqueezeHeadCNN(nn.Module):
    """Binary classifier returning logits of shape (B,) via a bare .squeeze()."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.fc = nn.Linear(16, 1)

    def forward(self, x):
        x = self.features(x).flatten(1)
        return self.fc(x).squeeze()


class HardcodedViewCNN(nn.Module):
    """CIFAR-style net whose author baked the batch size of 16 into the flatten."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 8 * 8, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(16, -1)
        return F.log_softmax(self.fc(x), dim=1)


class TabularMLP(nn.Module):
    def __init__(self, d_in=12):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


class CleanCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.fc = nn.Linear(32, 1)

    def forward(self, x):
        return self.fc(self.features(x))


class DictSegNet(nn.Module):
    """torchvision segmentation style: returns {"out": logits, "aux": logits}."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        )
        self.classifier = nn.Conv2d(16, 1, 1)
        self.aux_classifier = nn.Conv2d(16, 1, 1)

    def forward(self, x) -> Dict[str, torch.Tensor]:
        f = self.backbone(x)
        return {"out": self.classifier(f), "aux": self.aux_classifier(f)}


# ----------------------------------------------------------------------------------------------
# Cases.
# ----------------------------------------------------------------------------------------------

def images(rng, n, c=3, h=16, w=16):
    return rng.standard_normal((n, c, h, w), dtype=np.float32)


def case_bn_tail_scripted():
    torch.manual_seed(101)
    rng = np.random.default_rng(101)
    n, b = 65, 8
    x = images(rng, n)
    y = rng.integers(0, 2, size=(n, 1)).astype(np.float32)
    return dict(
        name="bn_tail_scripted", kind="scripted", model=torch.jit.script(SmallCNNHeadBN().train()),
        data="npy", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="bce"), expected_batch=8, expected_ids=["batchnorm-single-value"],
        error_has="Expected more than 1 value per channel when training",
        description="CNN with BatchNorm1d after global pooling + flatten, sigmoid + BCE; N=65, B=8 leaves a "
                    "last batch of 1, so BatchNorm1d sees one value per channel at batch 8.")


def case_torchvision_mobilenet_tail():
    import torchvision
    torch.manual_seed(102)
    rng = np.random.default_rng(102)
    n, b = 33, 8
    x = images(rng, n, h=32, w=32)
    y = rng.integers(0, 3, size=(n,)).astype(np.int64)
    model = torchvision.models.mobilenet_v3_small(num_classes=3)  # random init, no download
    return dict(
        name="torchvision_mobilenet_tail", kind="scripted", model=torch.jit.script(model.train()),
        data="npy", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="cross_entropy"), expected_batch=4, expected_ids=["batchnorm-single-value"],
        error_has="Expected more than 1 value per channel when training",
        description="torchvision mobilenet_v3_small(num_classes=3), random init, scripted; 3x32x32 inputs "
                    "reach a 1x1 map inside the network, so the last batch of 1 (N=33, B=8) fails in a "
                    "BatchNorm2d at batch 4.")


def case_nan_small_batch_traced():
    torch.manual_seed(103)
    rng = np.random.default_rng(103)
    n, b = 41, 8
    x = images(rng, n)
    y = rng.integers(0, 2, size=(n, 1)).astype(np.float32)
    model = BatchStandardizedScorer().train()
    traced = torch.jit.trace(model, torch.from_numpy(x[:b]))
    return dict(
        name="nan_small_batch_traced", kind="traced", model=traced,
        data="pt", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="bce"), expected_batch=5, expected_ids=["output-nonfinite"],
        error_has="all elements of input should be between 0 and 1",
        description="traced MLP that standardizes its scores over the batch with an unbiased std before the "
                    "sigmoid; on the last batch of 1 (N=41, B=8) std is NaN, the predictions are NaN and "
                    "BCE raises at batch 5.")


def segmentation_255_data():
    rng = np.random.default_rng(104)
    n = 64
    x = images(rng, n)
    y = rng.integers(0, 4, size=(n, 16, 16)).astype(np.int64)
    y[37, 4:9, 5:12] = 255  # a "void" region from a VOC-style mask, only in sample 37
    return x, y


def case_label255_scripted():
    torch.manual_seed(104)
    x, y = segmentation_255_data()
    return dict(
        name="label255_scripted", kind="scripted", model=torch.jit.script(TinySegNet().train()),
        data="npy", x=x, y=y, loader=dict(batch_size=8, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="cross_entropy"), expected_batch=4, expected_ids=["target-out-of-range"],
        error_has="Target 255 is out of bounds",
        description="segmentation with 4 classes and cross_entropy; sample 37's mask has a void region "
                    "labelled 255 and no ignore_index, so the loss raises at batch 4 (B=8, no shuffle).")


def case_label255_ignored():
    torch.manual_seed(104)
    x, y = segmentation_255_data()
    return dict(
        name="label255_ignored", kind="scripted", model=torch.jit.script(TinySegNet().train()),
        data="npy", x=x, y=y, loader=dict(batch_size=8, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="cross_entropy", ignore_index=255), expected_batch=None, expected_ids=[],
        error_has=None,
        description="same data and model as label255_scripted but cross_entropy(ignore_index=255): the "
                    "void pixels are skipped and the epoch completes.")


def case_squeeze_tail_scripted():
    torch.manual_seed(106)
    rng = np.random.default_rng(106)
    n, b = 49, 8
    x = images(rng, n)
    y = rng.integers(0, 2, size=(n,)).astype(np.float32)
    return dict(
        name="squeeze_tail_scripted", kind="scripted", model=torch.jit.script(SqueezeHeadCNN().train()),
        data="npy", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="bce_with_logits"), expected_batch=6, expected_ids=["batch-dim-mismatch"],
        error_has="Target size (torch.Size([1])) must be the same as input size (torch.Size([]))",
        description="binary classifier ending in fc(x).squeeze(): (B,1) -> (B,) normally, but the last "
                    "batch of 1 (N=49, B=8) becomes a 0-d tensor and BCE-with-logits against a (1,) "
                    "target raises at batch 6.")


def case_hardcoded_view_scripted():
    torch.manual_seed(107)
    rng = np.random.default_rng(107)
    n, b = 40, 16
    x = images(rng, n, h=32, w=32)
    y = rng.integers(0, 10, size=(n,)).astype(np.int64)
    return dict(
        name="hardcoded_view_scripted", kind="scripted", model=torch.jit.script(HardcodedViewCNN().train()),
        data="npy", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="nll"), expected_batch=2, expected_ids=["hardcoded-batch-size"],
        error_has="shapes cannot be multiplied",
        description="CIFAR-style CNN with x.view(16, -1) before the classifier and log_softmax + nll; "
                    "N=40, B=16: the last batch of 8 views to (16, 512), which the Linear(1024, 10) "
                    "rejects at batch 2.")


def case_shuffled_nan_input_pt():
    torch.manual_seed(108)
    rng = np.random.default_rng(108)
    n, b, seed, bad = 160, 16, 3, 50
    x = rng.standard_normal((n, 12), dtype=np.float32)
    y = (x[:, :3].sum(axis=1, keepdims=True) * 0.5).astype(np.float32)
    x[bad, 7] = np.nan  # one missing measurement
    # The order PyTorch's DataLoader really delivers. Not torch.randperm(n, generator=seeded) alone: each
    # epoch's iterator first draws a base seed from the same generator, which shifts the permutation.
    order = [int(i) for batch in DataLoader(list(range(n)), batch_size=1, shuffle=True,
                                            generator=torch.Generator().manual_seed(seed)) for i in batch]
    shuffled_batch = order.index(bad) // b
    if shuffled_batch == bad // b:
        raise SystemExit("make_interop: shuffled_nan_input_pt: the shuffled batch equals the unshuffled "
                         "one; pick another seed so the case tests the shuffle order")
    return dict(
        name="shuffled_nan_input_pt", kind="scripted", model=torch.jit.script(TabularMLP().train()),
        data="pt", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=True, seed=seed),
        loss=dict(type="mse"), expected_batch=shuffled_batch, expected_ids=["input-nonfinite"],
        error_has="non-finite loss",
        description=f"tabular MLP regression with MSE, shuffle=True with generator seed {seed}; sample {bad} "
                    f"has a NaN feature, so the loss is NaN at batch {shuffled_batch}, where the shuffled "
                    f"order puts it (unshuffled it would be batch {bad // b}).")


def case_clean_scripted():
    torch.manual_seed(109)
    rng = np.random.default_rng(109)
    n, b = 64, 16
    x = images(rng, n)
    y = rng.integers(0, 2, size=(n, 1)).astype(np.float32)
    return dict(
        name="clean_scripted", kind="scripted", model=torch.jit.script(CleanCNN().train()),
        data="npy", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=True, seed=7),
        loss=dict(type="bce_with_logits"), expected_batch=None, expected_ids=[], error_has=None,
        description="well-formed CNN with BatchNorm2d, logits (B,1) against float targets (B,1), "
                    "bce_with_logits; N=64 divisible by B=16, shuffled: the epoch completes.")


def case_clean_traced_dict_output():
    torch.manual_seed(110)
    rng = np.random.default_rng(110)
    n, b = 42, 8
    x = images(rng, n)
    y = (rng.random((n, 1, 16, 16)) < 0.3).astype(np.float32)
    model = DictSegNet().train()
    traced = torch.jit.trace(model, torch.from_numpy(x[:b]), strict=False)
    return dict(
        name="clean_traced_dict_output", kind="traced", model=traced, output="out",
        data="pt", x=x, y=y, loader=dict(batch_size=b, drop_last=False, shuffle=False, seed=0),
        loss=dict(type="bce_with_logits"), expected_batch=None, expected_ids=[], error_has=None,
        description="traced torchvision-style segmentation net returning {'out', 'aux'}; config selects "
                    "'out' (B,1,16,16) for bce_with_logits against binary masks; N=42, B=8 leaves a last "
                    "batch of 2, which BatchNorm2d handles: the epoch completes.")


CASES = [
    case_bn_tail_scripted,
    case_torchvision_mobilenet_tail,
    case_nan_small_batch_traced,
    case_label255_scripted,
    case_label255_ignored,
    case_squeeze_tail_scripted,
    case_hardcoded_view_scripted,
    case_shuffled_nan_input_pt,
    case_clean_scripted,
    case_clean_traced_dict_output,
]


# ----------------------------------------------------------------------------------------------
# Writing and ground truth.
# ----------------------------------------------------------------------------------------------

def little_c(a):
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<")))


def write_case(outdir, c):
    d = os.path.join(outdir, c["name"])
    os.makedirs(d, exist_ok=True)
    torch.jit.save(c["model"], os.path.join(d, "model.pt"))
    if c["data"] == "npy":
        np.save(os.path.join(d, "inputs.npy"), little_c(c["x"]))
        np.save(os.path.join(d, "targets.npy"), little_c(c["y"]))
        data = {"format": "npy", "inputs": "inputs.npy", "targets": "targets.npy"}
    else:
        torch.save({"inputs": torch.from_numpy(little_c(c["x"])).clone(),
                    "targets": torch.from_numpy(little_c(c["y"])).clone()},
                   os.path.join(d, "data.pt"))
        data = {"format": "pt", "path": "data.pt"}
    model = {"path": "model.pt", "mode": "train"}
    if "output" in c:
        model["output"] = c["output"]
    config = {
        "model": model,
        "data": data,
        "loader": c["loader"],
        "loss": c["loss"],
        "checks": {"probe_batch_sizes": []},
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return d


def error_line(e):
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].startswith(TS_WRAPPER):
        last = lines[-1].strip()
        return re.sub(r"^(builtins\.)?[A-Za-z_.]*(Error|Exception): ", "", last)
    return lines[0].strip()


def select_output(out, sel):
    if sel is None:
        return out
    return out[sel]


def compute_loss(kind, out, y, loss_cfg):
    if kind == "bce":
        return F.binary_cross_entropy(out, y)
    if kind == "bce_with_logits":
        return F.binary_cross_entropy_with_logits(out, y)
    if kind == "cross_entropy":
        return F.cross_entropy(out, y, ignore_index=loss_cfg.get("ignore_index", -100))
    if kind == "nll":
        return F.nll_loss(out, y, ignore_index=loss_cfg.get("ignore_index", -100))
    if kind == "mse":
        return F.mse_loss(out, y)
    raise ValueError(f"unknown loss {kind}")


def ground_truth(case_dir, step):
    """Replays the saved case through PyTorch's DataLoader and a real training step."""
    with open(os.path.join(case_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg["data"]["format"] == "npy":
        x = torch.from_numpy(np.load(os.path.join(case_dir, cfg["data"]["inputs"])))
        y = torch.from_numpy(np.load(os.path.join(case_dir, cfg["data"]["targets"])))
    else:
        blob = torch.load(os.path.join(case_dir, cfg["data"]["path"]))
        x, y = blob["inputs"], blob["targets"]
    ld = cfg["loader"]
    gen = torch.Generator().manual_seed(ld["seed"]) if ld["shuffle"] else None
    loader = DataLoader(TensorDataset(x, y), batch_size=ld["batch_size"], shuffle=ld["shuffle"],
                        generator=gen, drop_last=ld["drop_last"])
    torch.manual_seed(0)  # dropout inside the models
    model = torch.jit.load(os.path.join(case_dir, cfg["model"]["path"]))
    if cfg["model"]["mode"] == "train":
        model.train()
    else:
        model.eval()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if step else None
    for i, (xb, yb) in enumerate(loader):
        try:
            if step:
                opt.zero_grad()
                out = select_output(model(xb), cfg["model"].get("output"))
                loss = compute_loss(cfg["loss"]["type"], out, yb, cfg["loss"])
            else:
                with torch.no_grad():
                    out = select_output(model(xb), cfg["model"].get("output"))
                    loss = compute_loss(cfg["loss"]["type"], out, yb, cfg["loss"])
            if not torch.isfinite(loss).all():
                return i, f"non-finite loss: {loss.item()}"
            if step:
                loss.backward()
                opt.step()
        except Exception as e:  # noqa: BLE001 - any exception is the verdict
            return i, error_line(e)
    return None, None


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: make_interop.py OUTDIR\n")
        return 2
    outdir = argv[1]
    os.makedirs(outdir, exist_ok=True)
    t0 = time.time()
    manifest: List[dict] = []
    problems = []
    for make in CASES:
        c = make()
        d = write_case(outdir, c)
        got_batch, got_err = ground_truth(d, step=True)
        fwd_batch, fwd_err = ground_truth(d, step=False)
        name = c["name"]
        if got_batch != c["expected_batch"]:
            problems.append(f"{name}: PyTorch stopped at batch {got_batch} ({got_err}), "
                            f"the case means batch {c['expected_batch']}")
        elif c["error_has"] is not None and (got_err is None or c["error_has"] not in got_err):
            problems.append(f"{name}: PyTorch's error {got_err!r} lacks {c['error_has']!r}")
        if (fwd_batch, fwd_err) != (got_batch, got_err):
            problems.append(f"{name}: forward-only replay gives batch {fwd_batch} ({fwd_err}), "
                            f"the training loop batch {got_batch} ({got_err})")
        manifest.append({
            "case": name,
            "kind": c["kind"],
            "data": c["data"],
            "expected_batch": got_batch,
            "expected_ids": c["expected_ids"],
            "pytorch_error": got_err,
            "description": c["description"],
        })
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    if problems:
        sys.stderr.write("make_interop: ground truth differs from what the cases intend:\n")
        for p in problems:
            sys.stderr.write(f"  {p}\n")
        return 1
    failing = sum(1 for m in manifest if m["expected_batch"] is not None)
    sys.stderr.write(f"make_interop: {len(manifest)} cases ({failing} failing, {len(manifest) - failing} clean) "
                     f"in {outdir} [{time.time() - t0:.1f}s]\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
