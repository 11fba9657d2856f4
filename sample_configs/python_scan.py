"""The README's Python example: batchcheck.scan() on a DataLoader of your own, here a small
image classifier whose last batch holds one sample (2,049 images at batch size 32, shuffled, two
workers, a random flip in the Dataset): BatchNorm cannot train on a batch of one, and one image
holds a NaN. Run: python sample_configs/python_scan.py (exit 1: the gate finds both), or
python -m batchcheck scan sample_configs/python_scan.py:setup."""
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import batchcheck


class Images(Dataset):
    def __init__(self, n=2049):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 3, 32, 32, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.x[1234, :, 5, 5] = float("nan")  # one corrupt image

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        if torch.rand(()) < 0.5:
            x = torch.flip(x, dims=[2])
        return x, self.y[i]


def model():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10), nn.BatchNorm1d(10))


def setup():
    """What `python -m batchcheck scan sample_configs/python_scan.py:setup` scans."""
    torch.manual_seed(0)
    return model(), DataLoader(Images(), batch_size=32, shuffle=True, num_workers=2), nn.CrossEntropyLoss()


def main():
    net, loader, loss = setup()
    start = time.monotonic()
    report = batchcheck.scan(net, loader, loss)
    print("scan: %.1f s, %d findings" % (time.monotonic() - start, len(report.findings)), file=sys.stderr)
    for f in report.errors():
        print("  %s at batch %s, samples %s" % (f.id, f.batch, f.samples[:4]), file=sys.stderr)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
