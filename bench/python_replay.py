"""Program (c) of the benchmark: the same replay written in Python, as a user would:
PyTorch's DataLoader over memory-mapped .npy files, the TorchScript model, and the same
checks batchcheck runs (finite inputs, batch dimension, loss contract, finite loss).

Usage: /usr/bin/python3 bench/python_replay.py CONFIG.json
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class NpyPairs(Dataset):
    def __init__(self, inputs, targets):
        self.x = np.load(inputs, mmap_mode="r")
        self.y = np.load(targets, mmap_mode="r")

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return torch.from_numpy(np.array(self.x[i])), torch.as_tensor(np.array(self.y[i]))


def main():
    cfg_path = sys.argv[1]
    base = os.path.dirname(cfg_path)
    cfg = json.load(open(cfg_path))
    ds = NpyPairs(os.path.join(base, cfg["data"]["inputs"]), os.path.join(base, cfg["data"]["targets"]))
    loader = DataLoader(ds, batch_size=cfg["loader"]["batch_size"], shuffle=False)
    model = torch.jit.load(os.path.join(base, cfg["model"]["path"]))
    model.train(cfg["model"].get("mode", "train") == "train")
    loss_type = cfg["loss"]["type"]
    problems = 0
    with torch.no_grad():
        for xb, yb in loader:
            problems += int(not torch.isfinite(xb).all())
            out = model(xb)
            problems += int(out.shape[0] != xb.shape[0])
            problems += int(not torch.isfinite(out).all())
            if loss_type == "bce":
                problems += int(bool((out < 0).any() or (out > 1).any()))
                problems += int(out.shape != yb.shape or not torch.isfinite(yb).all())
                problems += int(bool((yb < 0).any() or (yb > 1).any()))
                loss = F.binary_cross_entropy(out, yb)
            elif loss_type == "cross_entropy":
                c = out.shape[1]
                problems += int(yb.dtype != torch.int64)
                problems += int(bool(((yb < 0) | (yb >= c)).any()))
                loss = F.cross_entropy(out, yb)
            else:
                raise SystemExit(f"python_replay: loss {loss_type} not implemented")
            problems += int(not torch.isfinite(loss).all())
    print(problems)


if __name__ == "__main__":
    main()
