"""The real PyTorch training loop of a batchcheck config, on CUDA, until it fails.

Usage: PYTHON tests/e2e/cuda/device_assert.py CONFIG.json

Run it in a child process: a device-side assert leaves the CUDA context unusable. It replays
the config's DataLoader (batch_size, shuffle with torch.Generator().manual_seed(seed), drop_last)
over the config's .npy data through its TorchScript model on cuda, with CUDA_LAUNCH_BLOCKING=1
and a synchronize after every step, so the error is pinned to its batch. Prints one JSON line:
{"batch": B, "error": "..."} for the first failing batch, or {"batch": null}.
"""
import json
import os
import sys

os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # before CUDA starts

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

LOSSES = {"bce": torch.nn.BCELoss, "bce_with_logits": torch.nn.BCEWithLogitsLoss,
          "cross_entropy": torch.nn.CrossEntropyLoss, "nll": torch.nn.NLLLoss, "mse": torch.nn.MSELoss}


def main():
    path = sys.argv[1]
    base = os.path.dirname(os.path.abspath(path))
    cfg = json.load(open(path))
    rel = lambda p: os.path.join(base, p)  # noqa: E731
    x = torch.from_numpy(np.load(rel(cfg["data"]["inputs"])))
    y = torch.from_numpy(np.load(rel(cfg["data"]["targets"])))
    loader_cfg = cfg.get("loader", {})
    shuffle = loader_cfg.get("shuffle", False)
    gen = torch.Generator().manual_seed(loader_cfg.get("seed", 0)) if shuffle else None
    loader = DataLoader(TensorDataset(x, y), batch_size=loader_cfg.get("batch_size", 1), shuffle=shuffle,
                        generator=gen, drop_last=loader_cfg.get("drop_last", False))
    model = torch.jit.load(rel(cfg["model"]["path"]), map_location="cuda")
    train = cfg["model"].get("mode", "train") == "train"
    model.train(train)
    loss_fn = LOSSES[cfg.get("loss", {}).get("type", "cross_entropy")]()
    for b, (xb, yb) in enumerate(loader):
        try:
            out = model(xb.cuda())
            loss = loss_fn(out, yb.cuda())
            if train:
                loss.backward()
                model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
        except RuntimeError as e:
            print(json.dumps({"batch": b, "error": str(e).strip().splitlines()[0]}))
            return
    print(json.dumps({"batch": None}))


if __name__ == "__main__":
    main()
