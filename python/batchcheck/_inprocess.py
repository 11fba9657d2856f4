"""The engine inside this process, where the user's model or step runs here (model.format
"eager"): the engine then only reads the stream's frames and checks their values, and does it on
the LibTorch this process's torch has loaded already, through libbatchcheck_inprocess.so (the
command line as a module, beside the binary). No process starts, no second LibTorch loads (its
0.2 s of one core, on cores the user's step keeps busy), no journal is relayed. Everything else,
and any scan this cannot serve, runs the engine in its own supervised process (_stream._Engine).
BATCHCHECK_ENGINE=process asks for that process always."""
import ctypes
import os
import re
import threading

import torch

from batchcheck._stream import pump_lines

_LIB = {}  # path -> the loaded module, or None where it cannot serve this process
# One in-process run at a time: the command's diagnostics are one destination per module.
_RUNNING = threading.Lock()

# The command's flags the in-process engine cannot honour: a log file its engine's lines would
# miss, a batch timeout only a supervisor can enforce, threads and jobs that are the process's,
# a device (a CUDA scan's engine keeps its supervised process).
_PROCESS_ONLY = ("--log-file", "--batch-timeout", "--threads", "--jobs", "--shard", "--device")


def _release(version):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return m.groups() if m else None


def _torch_mapped():
    """Whether this process has mapped a libtorch_cpu.so (the imported torch's)."""
    try:
        with open("/proc/self/maps") as f:
            return any("/libtorch_cpu.so" in line for line in f)
    except OSError:
        return False


def library(binary):
    """The in-process module beside `binary` (the batchcheck executable), loaded, where it serves
    this process: built for the very release of the torch imported here (its LibTorch is the one
    the engine then uses). None otherwise."""
    path = os.path.join(os.path.dirname(os.path.abspath(binary)), "libbatchcheck_inprocess.so")
    if path in _LIB:
        return _LIB[path]
    engine = os.path.join(os.path.dirname(path), "libbatchcheck_scan.so")
    lib = None
    if os.path.isfile(path) and os.path.isfile(engine) and _torch_mapped():
        try:
            lib = ctypes.CDLL(path)
            lib.batchcheck_libtorch_version_v1.restype = ctypes.c_char_p
            built = lib.batchcheck_libtorch_version_v1().decode()
            lib.batchcheck_run_v1.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
            lib.batchcheck_run_v1.restype = ctypes.c_int
            if _release(built) is None or _release(built) != _release(torch.__version__):
                lib = None  # another torch: the engine runs against its own in a process
            else:
                # The engine itself, loaded now on this process's LibTorch: one it cannot bind
                # (another build of the release) falls back to its process instead of failing.
                ctypes.CDLL(engine)
        except (OSError, AttributeError):
            lib = None
    _LIB[path] = lib
    return lib


def serves(cfg, device, args):
    """Whether a scan of this engine config, scan()'s device= and these command flags may run in
    this process: its model or step runs here (the engine runs no model of its own), on the CPU (a
    CUDA scan's engine keeps its supervised process), with no flag only a process of its own
    honours."""
    if os.environ.get("BATCHCHECK_ENGINE") == "process":
        return False
    if cfg.get("model", {}).get("format") != "eager" or str(device or "cpu") != "cpu":
        return False
    return not any(a == f or a.startswith(f + "=") for a in args for f in _PROCESS_ONLY)


class Engine:
    """The command run by the module on a thread of its own (ctypes drops the GIL for the call),
    its stderr a pipe pumped as _stream._Engine pumps the process's; the same face. It starts once
    the stream is served (start(), or wait()): a config replaced before (relaunch) never ran. It
    waits on the stream's server, which the session closes before stopping it (it then ends)."""

    here = True

    def __init__(self, lib, argv, quiet):
        self.lib, self.argv, self.quiet = lib, [str(a) for a in argv], quiet
        self.lines = []
        self.code = None
        self.thread = self.pumping = None

    def _run(self, err_w):
        self.code = 3  # unless the command returns its own
        try:
            out = os.open(os.devnull, os.O_WRONLY)  # the report goes to its -o file
            try:
                args = [os.fsencode(a) for a in self.argv]
                with _RUNNING:
                    self.code = self.lib.batchcheck_run_v1(len(args), (ctypes.c_char_p * len(args))(*args), out, err_w)
            finally:
                os.close(out)
        except Exception as e:  # noqa: BLE001 - said as the command's error would be
            os.write(err_w, ("batchcheck: internal error: the in-process engine did not run: %s\n" % e).encode())
        finally:
            os.close(err_w)

    def _pump(self, err_r):
        with os.fdopen(err_r, "rb") as f:
            pump_lines(f, self.lines, self.quiet)

    def start(self):
        if self.thread is None:
            err_r, err_w = os.pipe()
            self.pumping = threading.Thread(target=self._pump, args=(err_r,), daemon=True)
            self.pumping.start()
            self.thread = threading.Thread(target=self._run, args=(err_w,), daemon=True)
            self.thread.start()

    def running(self):
        return self.thread is not None and self.thread.is_alive()

    def wait(self):
        self.start()
        self.thread.join()
        self.pumping.join()
        return self.code, "".join(self.lines)

    def stop(self):
        """Ends it where it runs (the scan failed, or was interrupted, before it ended): the server
        is closed already, so its reads end."""
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout=30)
        if self.pumping is not None:
            self.pumping.join(timeout=5)
