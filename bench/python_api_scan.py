"""The Python API's scan of a bench workload (bench-data/p1, p2): the workload's model and .npy
arrays as a user's own nn.Module and DataLoader (a TensorDataset over the arrays, the config's
batch size), scanned by batchcheck.scan(); scripts/bench.py times it against the command's
scan of the same config: the whole process, and the call alone (printed: "scan() wall S"). Needs BATCHCHECK_BINARY and python/ on PYTHONPATH."""
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import batchcheck

LOSSES = {"cross_entropy": nn.CrossEntropyLoss, "bce": nn.BCELoss, "bce_with_logits": nn.BCEWithLogitsLoss,
          "mse": nn.MSELoss}


def main(cfg_path, *flags):
    base = os.path.dirname(os.path.abspath(cfg_path))
    cfg = json.load(open(cfg_path))
    model = torch.jit.load(os.path.join(base, cfg["model"]["path"]))
    x = torch.from_numpy(np.load(os.path.join(base, cfg["data"]["inputs"]), mmap_mode="r").copy())
    y = torch.from_numpy(np.load(os.path.join(base, cfg["data"]["targets"]), mmap_mode="r").copy())
    loader = DataLoader(TensorDataset(x, y), batch_size=cfg["loader"]["batch_size"])
    start = time.perf_counter()
    report = batchcheck.scan(model, loader, LOSSES[cfg["loss"]["type"]](), quiet=True, args=list(flags))
    # The call itself, as a training script pays it (torch imported, the data loaded already).
    print("scan() wall %.4f" % (time.perf_counter() - start))
    return 0 if report.exit_code in (0, 1) else report.exit_code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
