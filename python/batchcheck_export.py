"""The export helper for scripts that put python/ on sys.path: it is batchcheck.export.

    from batchcheck_export import export_scan   # == from batchcheck.export import export_scan
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batchcheck.export import *  # noqa: E402,F401,F403
from batchcheck.export import export_scan, loss_config  # noqa: E402,F401
