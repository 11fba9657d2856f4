"""batchcheck: the batch-shape and value-range errors that crash PyTorch training, found before
the run starts.

    batchcheck scan config.json            # the command line (also: python -m batchcheck)
    report = batchcheck.scan(model, loader, loss)   # your own DataLoader, streamed to the engine
    from batchcheck.export import export_scan       # or: write a scan to disk for the CLI
"""
from batchcheck._cli import binary  # noqa: F401
from batchcheck.api import Finding, Occurrence, Report, ScanFailed, scan  # noqa: F401

try:  # written into the package by its build (pyproject.toml), from CMakeLists.txt's version
    from batchcheck._version import __version__
except ImportError:  # a source checkout's python/ on sys.path
    __version__ = "0+source"
