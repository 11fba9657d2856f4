#!/usr/bin/env python3
"""The include graph of lib/ and app/, folder by folder, and its one rule: includes run down.

Usage: tools/layers.py [--graph] [ROOT]

lib/core/ is layered as the data's path: each folder below may include only itself and the
folders before it. Above core, image and supervise are torch-free and see only core; the
engine sees core and image; the app sees everything but may take from the engine only its
torch-free glue (scan_module.h, scan_command.h). LibTorch headers appear in lib/engine/ only.
Exit 1 with one line per include that breaks a rule; --graph prints the folder graph.
"""
import os
import re
import sys

CORE = ["base", "parse", "config", "plan", "report", "findings", "pipeline", "scan", "journal", "views",
        "command"]
ABOVE = {  # unit -> the units it may include besides itself (any core folder: "core")
    "image": {"core"},
    "engine": {"core", "image"},
    "supervise": {"core"},
    "app": {"core", "supervise", "engine"},
}
APP_ENGINE_GLUE = {"engine/scan_module.h", "engine/scan_command.h"}
TORCH = re.compile(r'#include\s*<(torch|ATen|c10)/')
INCLUDE = re.compile(r'#include\s*"([^"]+)"')


def unit_of(rel):
    """'lib/core/plan/geometry.h' -> 'core/plan'; 'app/cli.cpp' -> 'app'; None outside the layers."""
    parts = rel.split("/")
    if parts[0] == "app":
        return "app"
    if parts[0] != "lib" or len(parts) < 3:
        return None
    if parts[1] == "core":
        return "core/" + parts[2] if len(parts) > 3 else "core"
    return parts[1]


def target_of(include, rel):
    """The unit an include names: "core/plan/geometry.h" -> core/plan; "cli.h" in app -> app."""
    first = include.split("/")[0]
    if first in ("core", "engine", "image", "supervise"):
        return unit_of("lib/" + include)
    return unit_of(rel)  # relative to the including file's folder


def allowed(src, dst, include):
    if src == dst:
        return True
    if src.startswith("core/"):
        return dst.startswith("core/") and dst[5:] in CORE and CORE.index(dst[5:]) < CORE.index(src[5:])
    if dst.startswith("core/"):
        return "core" in ABOVE.get(src, ())
    if src == "app" and dst == "engine":
        return include in APP_ENGINE_GLUE
    return dst in ABOVE.get(src, ())


def check(root):
    problems, edges = [], {}
    for top in ("lib", "app"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".h", ".cpp")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                src = unit_of(rel)
                if src is None:
                    continue
                if src == "core":
                    problems.append(f"{rel}: lies in lib/core/ itself: every core module belongs to a layer folder")
                    continue
                if src.startswith("core/") and src[5:] not in CORE:
                    problems.append(f"{rel}: lib/{src}/ is not a layer: add it to tools/layers.py (and ARCHITECTURE.md)")
                    continue
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        if TORCH.search(line) and src != "engine":
                            problems.append(f"{rel}:{n}: includes LibTorch outside lib/engine/")
                        m = INCLUDE.search(line)
                        if not m:
                            continue
                        dst = target_of(m.group(1), rel)
                        if dst is None or dst == "core":
                            continue
                        edges[(src, dst)] = edges.get((src, dst), 0) + 1
                        if not allowed(src, dst, m.group(1)):
                            problems.append(f"{rel}:{n}: includes {m.group(1)}: {src} may not include {dst}")
    return sorted(problems), edges


def main(argv):
    graph = "--graph" in argv
    args = [a for a in argv if a != "--graph"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, edges = check(root)
    if graph:
        for (src, dst), n in sorted(edges.items()):
            if src != dst:
                print(f"{src} -> {dst} ({n})")
    for p in problems:
        print("layers: " + p, file=sys.stderr)
    if not graph:
        print(f"layers: {sum(edges.values())} includes between {len({s for s, _ in edges})} folders, "
              f"{len(problems)} breaking a rule")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
