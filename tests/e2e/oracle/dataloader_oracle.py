"""Dumps the batches PyTorch's own DataLoader / DistributedSampler deliver over a grid of
setups, one JSON object per line, for the C++ geometry oracle test (tests/test_oracle.cpp).

Run with the Python whose torch matches the build (BATCHCHECK_PYTHON: the venv's torch 2.x, or Debian's
/usr/bin/python3 with python3-torch for the 1.13 build). Deterministic: the grid comes from a
fixed-seed Python RNG, the orders from torch generators seeded as a user would.
"""
import itertools
import json
import random
import sys

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Indices(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def batches_plain(n, b, drop_last, shuffle, seed, epoch):
    gen = torch.Generator().manual_seed(seed) if shuffle else None
    loader = DataLoader(Indices(n), batch_size=b, shuffle=shuffle, drop_last=drop_last, generator=gen)
    out = None
    for _ in range(epoch + 1):  # the same generator across epochs, as in a training loop
        out = [batch.tolist() for batch in loader]
    return [out]


def batches_one_replica(n, b, drop_last, shuffle, seed, epoch):
    """DDP on one GPU: DistributedSampler(num_replicas=1), which orders as randperm(seed + epoch)."""
    return batches_distributed(n, b, 1, drop_last, shuffle, seed, epoch, False)


def batches_distributed(n, b, w, drop_last, shuffle, seed, epoch, sampler_drop_last):
    ranks = []
    for r in range(w):
        sampler = DistributedSampler(Indices(n), num_replicas=w, rank=r, shuffle=shuffle, seed=seed,
                                     drop_last=sampler_drop_last)
        sampler.set_epoch(epoch)
        loader = DataLoader(Indices(n), batch_size=b, sampler=sampler, drop_last=drop_last)
        ranks.append([batch.tolist() for batch in loader])
    return ranks


def grid():
    rng = random.Random(1234)
    sizes = [0, 1, 2, 3, 5, 7, 8, 13, 16, 31, 97, 100, 257, 1028, 1041, 2003]
    batch_sizes = [1, 2, 3, 8, 64]
    worlds = [1, 2, 3, 4, 8]
    for n, b, w in itertools.product(sizes, batch_sizes, worlds):
        for _ in range(3):
            yield dict(n=n, b=b, w=w, drop_last=rng.random() < 0.5, shuffle=rng.random() < 0.6,
                       seed=rng.choice([0, 1, 42, 2**40 + 3]), epoch=rng.randrange(3),
                       sampler_drop_last=w > 1 and rng.random() < 0.5)
    # W > N and a few large worlds.
    for n in [1, 3, 5]:
        for sdl in [False, True]:
            yield dict(n=n, b=2, w=8, drop_last=False, shuffle=True, seed=3, epoch=1, sampler_drop_last=sdl)
    # DataLoader(drop_last=True) cutting the tail batch that holds DistributedSampler's padding,
    # and W > N with drop_last.
    for n, b, w in [(5, 2, 2), (10, 8, 3), (7, 3, 4), (3, 2, 8), (1, 1, 4), (9, 4, 4)]:
        for shuffle in [False, True]:
            yield dict(n=n, b=b, w=w, drop_last=True, shuffle=shuffle, seed=0, epoch=0, sampler_drop_last=False)
    # Seeds near 2^64 and negative seeds (torch.manual_seed takes [-2^63, 2^64)).
    for seed, epoch, w in [(2**64 - 1, 0, 2), (2**64 - 2, 1, 3), (2**64 - 1, 0, 1), (-1, 0, 1), (-1, 1, 2),
                           (-5, 3, 4), (-(2**63), 2, 2), (-(2**63), 0, 1), (2**63, 1, 1)]:
        yield dict(n=37, b=4, w=w, drop_last=False, shuffle=True, seed=seed, epoch=epoch, sampler_drop_last=False)
    # Epochs of one loader seeded once, at world size 1.
    for epoch in [5, 17, 40]:
        yield dict(n=23, b=4, w=1, drop_last=False, shuffle=True, seed=7, epoch=epoch, sampler_drop_last=False)
    # DistributedSampler with one replica (DDP on one GPU): shuffled with seed + epoch.
    for n, shuffle, epoch, seed in [(10, True, 0, 0), (10, True, 2, 5), (11, False, 0, 0), (1041, True, 1, 0)]:
        yield dict(n=n, b=8, w=1, drop_last=False, shuffle=shuffle, seed=seed, epoch=epoch, sampler_drop_last=False,
                   sampler="distributed")
    # seed + epoch past 2^64 - 1: PyTorch refuses to start.
    yield dict(n=10, b=2, w=2, drop_last=False, shuffle=True, seed=2**64 - 1, epoch=1, sampler_drop_last=False)


def main():
    count = 0
    for case in grid():
        if case["n"] == 0 and case["shuffle"] and case["w"] == 1:
            continue  # RandomSampler refuses an empty dataset; covered by empty-loader instead
        try:
            if case.get("sampler") == "distributed":
                ranks = batches_one_replica(case["n"], case["b"], case["drop_last"], case["shuffle"], case["seed"],
                                            case["epoch"])
            elif case["w"] == 1:
                ranks = batches_plain(case["n"], case["b"], case["drop_last"], case["shuffle"], case["seed"],
                                      case["epoch"])
            else:
                ranks = batches_distributed(case["n"], case["b"], case["w"], case["drop_last"], case["shuffle"],
                                            case["seed"], case["epoch"], case["sampler_drop_last"])
        # PyTorch refuses the setup (RuntimeError in 1.13, ValueError in 2.x): batchcheck must refuse it too.
        except (RuntimeError, ValueError) as e:
            case["error"] = str(e).splitlines()[0]
            sys.stdout.write(json.dumps(case, separators=(",", ":")) + "\n")
            count += 1
            continue
        case["ranks"] = ranks
        # Accounting in distinct samples: what no rank receives, and the repeated copies delivered.
        delivered = [i for rank in ranks for batch in rank for i in batch]
        case["dropped"] = case["n"] - len(set(delivered))
        case["padded_delivered"] = len(delivered) - len(set(delivered))
        sys.stdout.write(json.dumps(case, separators=(",", ":")) + "\n")
        count += 1
    sys.stderr.write(f"dataloader_oracle: {count} setups\n")


if __name__ == "__main__":
    main()
