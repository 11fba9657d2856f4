"""What crosses the socket to the engine's stream source: a collated batch as named fields,
the frames (a length, then the bytes; a batch's tensors sent from their own memory), the dtypes
the engine takes, and the file a failing sample reads, named for the report."""
import os
import struct
from collections.abc import Mapping

import torch


def _fields(batch, input_key, target_key):
    """A collated batch as [(name, tensor)]: (inputs, targets), a single tensor, a Mapping of
    tensors by their keys; any other batch (nested, an object holding tensors, lists of numbers
    beside them) by its tensor leaves' paths (_batch.leaves: batch[0][1], batch["ids"], batch.x)."""
    from batchcheck._batch import describe, is_flat, leaves
    if isinstance(batch, torch.Tensor):
        return [("inputs", batch)]
    if isinstance(batch, Mapping) and is_flat(batch):
        return [(str(k), v) for k, v in batch.items() if isinstance(v, torch.Tensor)]
    if isinstance(batch, (tuple, list)) and is_flat(batch):
        # (inputs, targets); (input, input_1, ..., targets): forward's inputs in order, the targets last.
        if len(batch) == 1:
            return [(input_key, batch[0])]
        extra = [("%s_%d" % (input_key, k), t) for k, t in enumerate(batch[1:-1], 1)]
        return [(input_key, batch[0])] + extra + [(target_key, batch[-1])]
    out, _ = leaves(batch)
    if not out:
        raise TypeError("batchcheck.scan: the loader's batch, %s, holds no tensor and no list of numbers to check"
                        % _cut(describe(batch)))
    return out


def _cut(text, n=80):
    return text if len(text) <= n else text[:n - 3] + "..."


def _indexed_tensors(loader):
    """The tensors of a loader whose batches are a TensorDataset's rows collated by PyTorch's own
    default_collate: [t[indices] for t in tensors] is that batch exactly (torch.stack of the rows
    t[i]), read without two Python calls per sample. None where any code of the user's makes the
    batches (a Dataset of theirs, a subclass, their collate_fn): that code runs, as in training."""
    from torch.utils.data import TensorDataset
    from torch.utils.data._utils.collate import default_collate
    if type(loader.dataset) is TensorDataset and loader.collate_fn is default_collate:
        return loader.dataset.tensors
    return None



_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
           torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
           torch.bool: "bool"}


def _nbytes(batch):
    """The bytes of the tensors in a collated batch (nested tuples, lists, dicts)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    from batchcheck._batch import leaves
    return sum(t.numel() * t.element_size() for _, t in leaves(batch)[0])


def _dtype(t, name):
    if t.dtype not in _DTYPES:
        raise TypeError("batchcheck.scan: field %r has dtype %s, which the engine does not take" % (name, t.dtype))
    return _DTYPES[t.dtype]


def _send(conn, payload):
    conn.sendall(struct.pack("<Q", len(payload)))
    conn.sendall(payload)


def _send_batch(conn, header, tensors):
    """The header frame, then one frame per tensor, sent from the tensors' own memory (no copy)
    in as few system calls as the socket takes: a batch of 3,000 small batches is that many
    round trips, each a few syscalls otherwise."""
    bufs = [struct.pack("<Q", len(header)), header]
    for t in tensors:
        bufs.append(struct.pack("<Q", t.numel() * t.element_size()))
        if t.numel():
            bufs.append(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    while bufs:
        sent = conn.sendmsg(bufs[:512])  # IOV_MAX is 1024
        while bufs and sent >= len(bufs[0]):  # drop what went out; a partial send resumes mid-buffer
            sent -= len(bufs[0])
            bufs.pop(0)
        if bufs and sent:
            bufs[0] = memoryview(bufs[0])[sent:]


def _recv(conn):
    head = b""
    while len(head) < 8:
        chunk = conn.recv(8 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack("<Q", head)
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _file_of(dataset, i, error):
    """The file sample i of the Dataset reads, where the exception names it (an OSError's
    filename) or the Dataset keeps one path per sample (ImageFolder's samples, a list of files or
    paths); None where neither shows it. Named for the user, never opened here."""
    name = getattr(error, "filename", None)
    if isinstance(name, (str, os.PathLike)):
        return os.fspath(name)
    try:
        n = len(dataset)
    except TypeError:
        return None
    known = ("samples", "imgs", "files", "file_list", "filenames", "paths", "image_paths", "images")
    # The names torchvision and common Datasets use first, then any other attribute of theirs
    # that lists one path per sample (super_resolution's image_filenames, a Dataset's own name).
    others = sorted(k for k in getattr(dataset, "__dict__", {}) if k not in known)
    for attr in known + tuple(others):
        seq = getattr(dataset, attr, None)
        if not isinstance(seq, (list, tuple)) or len(seq) != n:
            continue
        item = seq[i]
        if isinstance(item, (tuple, list)) and item:
            item = item[0]
        if isinstance(item, (str, os.PathLike)) and (attr in known or _looks_like_a_path(item)):
            return os.fspath(item)
    return None


def _looks_like_a_path(item):
    """A string of an attribute batchcheck does not know by name, taken for a file's path: it has
    a folder or an extension (a list of class names or captions is none)."""
    text = os.fspath(item)
    return isinstance(text, str) and 0 < len(text) < 4096 and "\n" not in text and \
        ("/" in text or os.sep in text or os.path.splitext(text)[1] != "")
