#!/usr/bin/env bash
# Makes (or keeps) a virtual environment that holds the torch of another Python, and numpy, with
# their dependencies: links to that Python's copies in its own site-packages (a copy of torch and
# its CUDA libraries would be 5 GB), as pip would lay them out, and nothing else of it. README
# command 1 installs batchcheck's wheel into such a venv, so that it never shares a
# site-packages with the suite's venv (command 2).
#
#   scripts/venv-with-torch.sh VENV PYTHON_WITH_TORCH
set -euo pipefail
VENV=$1 PY=$2
if [[ ! -x $VENV/bin/python ]]; then
  "$PY" -m venv "$VENV"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" - "$site" <<'PY'
import importlib.metadata as md, os, sys
try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
except ImportError:  # a bare venv: pip's own copy (torch does not need packaging)
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
out, seen, stack = sys.argv[1], set(), [("torch", ""), ("numpy", "")]
while stack:
    name, extra = stack.pop()
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    key = (d.metadata["Name"].lower().replace("_", "-"), extra)
    if key in seen:
        continue
    seen.add(key)
    for line in d.requires or []:
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate(dict(default_environment(), extra=extra)):
            stack += [(r.name, "")] + [(r.name, e) for e in r.extras]
    for f in d.files or []:
        top = f.parts[0]
        src = os.path.join(str(d.locate_file("")), top)
        dst = os.path.join(out, top)
        if top.endswith(".pth") or top == ".." or os.path.lexists(dst) or not os.path.exists(src):
            continue
        os.symlink(src, dst)
PY
"$VENV/bin/python" -c 'import torch, numpy' || { echo "venv-with-torch: $VENV cannot import torch" >&2; exit 1; }
