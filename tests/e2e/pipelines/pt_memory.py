"""Peak memory of a scan of a torch.save dataset (tests/test_resources.cpp).

    python pt_memory.py write OUT N F   # OUT/data.pt (N samples of F float32 features), a model, a config
    python pt_memory.py scan BIN OUT    # scans it with the batchcheck binary BIN, then deletes data.pt

`scan` prints {"exit": code, "peak_rss_mb": ...}: the largest resident set of the scan's
processes (the engine child included: the supervisor waits for it). It runs in a process that
never imported torch: the spawned child's peak would otherwise start at this one's.
"""
import json
import os
import sys


def write(out, n, f):
    import torch

    class Sum(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum(1, keepdim=True)

    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.save({"inputs": torch.randn(n, f), "targets": torch.zeros(n, 1)}, os.path.join(out, "data.pt"))
    torch.jit.script(Sum()).save(os.path.join(out, "model.pt"))
    config = {"model": {"path": "model.pt", "mode": "eval"}, "data": {"path": "data.pt"},
              "loader": {"batch_size": 1024, "shuffle": True, "seed": 0},
              "loss": {"type": "mse"}, "checks": {"probe_batch_sizes": []}}
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(config, fh)


def scan(binary, out):
    args = [binary, "scan", os.path.join(out, "config.json"), "-q", "-o", os.path.join(out, "report.json")]
    pid = os.posix_spawn(binary, args, os.environ)
    _, status, usage = os.wait4(pid, 0)
    os.remove(os.path.join(out, "data.pt"))
    print(json.dumps({"exit": os.waitstatus_to_exitcode(status), "peak_rss_mb": usage.ru_maxrss / 1024.0}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        scan(sys.argv[2], sys.argv[3])
