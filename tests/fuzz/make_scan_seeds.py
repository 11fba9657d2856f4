"""Writes the fixed files and the seed corpus of fuzz_scan (run once; the outputs are in the
repository): tests/fuzz/scan/{model.pt, inputs.npy, targets.npy, data.pt} and
tests/fuzz/corpus/scan/{model, data}: the role byte ('M' model archive, 'D' torch.save data)
followed by a real file's bytes."""
import os
import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
fixed = os.path.join(here, "scan")
corpus = os.path.join(here, "corpus", "scan")
os.makedirs(fixed, exist_ok=True)
os.makedirs(corpus, exist_ok=True)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.fc(x)


torch.manual_seed(0)
model = torch.jit.script(Tiny())
model.save(os.path.join(fixed, "model.pt"))
x = torch.randn(10, 3)
y = torch.rand(10, 1)
np.save(os.path.join(fixed, "inputs.npy"), x.numpy())
np.save(os.path.join(fixed, "targets.npy"), y.numpy())
torch.save({"inputs": x, "targets": y}, os.path.join(fixed, "data.pt"))
for role, name in (("M", "model.pt"), ("D", "data.pt")):
    with open(os.path.join(fixed, name), "rb") as f:
        body = f.read()
    with open(os.path.join(corpus, name.split(".")[0]), "wb") as f:
        f.write(role.encode() + body)
