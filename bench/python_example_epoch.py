"""The README's Python example (sample_configs/python_scan.py): `scan` times the
batchcheck.scan() call on its loader; `train` times two epochs of the eager training loop on the
same model and loader (forward, loss, backward, an SGD step), each printed on its own line. Each
mode runs in a fresh process, as a training script would: scripts/bench.py alternates them.
Needs BATCHCHECK_BINARY and python/ on PYTHONPATH."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_configs"))
import python_scan  # noqa: E402

import batchcheck  # noqa: E402


def main(mode):
    net, loader, loss = python_scan.setup()
    if mode == "scan":
        start = time.perf_counter()
        batchcheck.scan(net, loader, loss, quiet=True)
        print("scan() wall %.4f" % (time.perf_counter() - start))
        return 0
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    net.train()
    for epoch in (1, 2):
        start = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            try:
                loss(net(x), y).backward()
            except ValueError:  # BatchNorm's batch of one: the epoch the example's scan warns of
                continue
            opt.step()
        print("epoch %d wall %.4f" % (epoch, time.perf_counter() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
