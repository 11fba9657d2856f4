"""The cost of batchcheck.scan(step=) on the training steps of tests/python/test_captures.py (the
clean cases: each with a tail batch) and on a VAE over 60,000 MNIST-size samples (batch 128), the
call alone, as a training script pays it: the median of REPEAT runs per case, one line each, then
their sum. Compare two packages by running it with each on PYTHONPATH against the same engine
(BATCHCHECK_BINARY).

    python bench/python_steps.py [REPEAT]
"""
import os
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import test_captures  # noqa: E402

import batchcheck  # noqa: E402


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(784, 400), nn.Linear(400, 20), nn.Linear(400, 20)
        self.fc3, self.fc4 = nn.Linear(20, 400), nn.Linear(400, 784)

    def forward(self, x):
        h = F.relu(self.fc1(x.view(-1, 784)))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(logvar) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae_step(model, batch):
    x, _ = batch
    recon, mu, logvar = model(x)
    return F.binary_cross_entropy(recon, x.view(-1, 784), reduction="sum") - \
        0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


def vae_case(_):
    x = torch.rand(60000, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    return VAE(), DataLoader(TensorDataset(x, torch.zeros(60000)), batch_size=128), vae_step


def main(repeat=3):
    cases = {name: make for name, (make, *_ignored) in test_captures.CASES.items()}
    cases["vae, 60,000 samples"] = vae_case
    total = 0.0
    for name, make in cases.items():
        times = []
        for _ in range(repeat):
            torch.manual_seed(0)
            model, loader, step = make(None)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    batchcheck.scan(model, loader, step=step, quiet=True)
                except Exception as e:  # an older scan() that raises on the case: its time to the raise
                    name_note = " (raised %s)" % type(e).__name__
                else:
                    name_note = ""
            times.append(time.perf_counter() - start)
        t = statistics.median(times)
        total += t
        print("%-40s %.3f s%s" % (name, t, name_note))
    print("%-40s %.3f s" % ("sum of medians", total))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
