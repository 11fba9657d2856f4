"""A TensorDataset under PyTorch's default_collate, handed to the engine whole.

Such a loader runs no code of the user's: batch k is [t[order[k]] for t in tensors] exactly, so
its tensors go to the engine once, as .npy files in anonymous memory (memfd: RAM, never disk), with
the sampler's recorded order, and the engine reads them as the command reads a config's arrays
(its jobs split over the cores) instead of taking 3,000 small batches one by one from a socket.
The engine opens them as /proc/<this process>/fd/<n>; they are freed when closed or when this
process ends, however it ends (a file in /dev/shm would outlive a killed process). Anything else
(no memfd, too little memory, a dtype .npy cannot hold, an index past the tensors, which the
loader raises on at its batch) takes the stream.
"""
import itertools
import os

import numpy as np
import torch

LIMIT = 1 << 30  # at most this much of the machine's memory held twice (the tensors and their copy)
# The copy pays off where batches are small: a streamed batch costs ~0.2 ms whatever its size,
# writing to memory ~1 ms a MB, before the engine can start (P1's 8 KB batches: 1.4x the
# command's time streamed, 1.0x whole; P2's 2 MB: 1.05x streamed, 1.3x whole).
PER_BATCH = 256 << 10
_NPY = {torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
        torch.uint8, torch.bool}


CGROUP = "/sys/fs/cgroup"


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _available():
    """The memory this process may still take, in bytes: MemAvailable, and under a cgroup (v2)
    memory limit (a container's) what is left of it; 0 where MemAvailable cannot be read."""
    free = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            try:
                free = int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return 0
    limit, used = _read(os.path.join(CGROUP, "memory.max")).strip(), _read(os.path.join(CGROUP, "memory.current")).strip()
    if limit.isdigit() and used.isdigit():
        free = min(free, max(0, int(limit) - int(used)))
    return free


def _proc_fd(fd):
    return "/proc/%d/fd/%d" % (os.getpid(), fd)


def supported():
    """Whether this system has memfd and /proc/<pid>/fd."""
    return hasattr(os, "memfd_create") and os.path.isdir(os.path.dirname(_proc_fd(0)))


def batch_bytes(tensors, order):
    """The average bytes of a batch of the order."""
    row = sum(t[0].numel() * t.element_size() for t in tensors if len(t))
    return row * sum(len(b) for b in order) / max(1, len(order))


def plan(tensors, order, n):
    """Whether the tensors go to the engine whole: True where each is a plain CPU tensor of a
    .npy dtype, a batch averages under PER_BATCH bytes, they fit LIMIT and half of the memory
    available, and every index of the order is one of the n samples."""
    if not tensors or not supported():
        return False
    for t in tensors:
        if t.device.type != "cpu" or t.layout != torch.strided or t.dtype not in _NPY or t.dim() < 1 or len(t) != n:
            return False
    size = sum(t.numel() * t.element_size() for t in tensors)
    if size > LIMIT or batch_bytes(tensors, order) > PER_BATCH or 2 * size > _available():
        return False
    flat = np.fromiter(itertools.chain.from_iterable(order), dtype=np.int64)
    return not len(flat) or (int(flat.min()) >= 0 and int(flat.max()) < n)


class Arrays:
    """The tensors written as .npy into memfds, one per field; freed by close()."""

    def __init__(self, named):
        self.fds = []
        self.files = {}
        try:
            for name, t in named:
                fd = os.memfd_create("batchcheck-field", os.MFD_CLOEXEC)  # field names are the user's: not in names
                self.fds.append(fd)
                with os.fdopen(os.dup(fd), "wb") as f:
                    np.save(f, t.detach().contiguous().numpy(), allow_pickle=False)
                self.files[name] = _proc_fd(fd)
        except BaseException:
            self.close()
            raise

    def data_config(self, inputs, target):
        """config.data for the fields: one input as a file, several as field -> file."""
        ins = self.files[inputs[0]] if len(inputs) == 1 else {name: self.files[name] for name in inputs}
        cfg = {"format": "npy", "inputs": ins}
        if target is not None:
            cfg["targets"] = self.files[target]
        return cfg

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []
