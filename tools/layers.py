#!/usr/bin/env python3
"""The include graph of lib/ and app/, folder by folder, and its one rule: includes run down.

Usage: tools/layers.py [--graph] [ROOT]

lib/core/ is layered as the data's path: each folder below may include only itself and the
folders before it. Above core, image and supervise are torch-free and see only core; the
engine sees core and image; the app sees everything but may take from the engine only its
torch-free glue (scan_module.h, scan_command.h). LibTorch headers appear in lib/engine/ only.
lib/engine/ is layered too: its base (ENGINE_BASE, at its root) includes only itself, each
folder of ENGINE the base and the folders before it, and the rest of its root (the backend
that wires them, the glue) anything of the engine.

--graph prints the folder graph. --compile-db FILE reads the graph from a build's
compile_commands.json: its translation units under lib/ and app/ and the headers they reach,
instead of every file of the tree. Exit 1 with one line per include that breaks a rule.
"""
import json
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
ENGINE = ["checks", "localize", "data", "model"]
ENGINE_BASE = {"torch_util", "cuda_runtime", "device", "backend_options", "compat"}  # lib/engine/<name>.h/.cpp
ENGINE_ORDER = ["engine/base"] + ["engine/" + f for f in ENGINE] + ["engine"]
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
    if parts[1] == "engine":
        if len(parts) > 3:
            return "engine/" + parts[2]
        return "engine/base" if os.path.splitext(parts[2])[0] in ENGINE_BASE else "engine"
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
        return "core" in ABOVE.get(src.split("/")[0], ())
    if src.startswith("engine") and dst.startswith("engine"):
        return dst in ENGINE_ORDER and ENGINE_ORDER.index(dst) < ENGINE_ORDER.index(src)
    if src == "app" and dst.startswith("engine"):
        return include in APP_ENGINE_GLUE
    return dst.split("/")[0] in ABOVE.get(src.split("/")[0], ())


def tree_files(root):
    """Every .h and .cpp under lib/ and app/, relative to root."""
    for top in ("lib", "app"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith((".h", ".cpp")):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def compiled_files(root, database):
    """The translation units of compile_commands.json under lib/ and app/, and every header of
    lib/ and app/ they reach through quoted includes (as the build's -I lib and -I app find them)."""
    with open(database, encoding="utf-8") as f:
        entries = json.load(f)
    root = os.path.realpath(root)
    todo = []
    for e in entries:
        path = os.path.realpath(os.path.join(e.get("directory", ""), e["file"]))
        rel = os.path.relpath(path, root)
        if rel.split(os.sep)[0] in ("lib", "app"):
            if not os.path.isfile(path):
                raise ValueError(f"it lists {rel}, which is not in the tree (a stale build: configure it again)")
            todo.append(rel)
    seen = set()
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for line in f:
                m = INCLUDE.search(line)
                if not m:
                    continue
                for base in (os.path.dirname(rel), "lib", "app"):
                    cand = os.path.normpath(os.path.join(base, m.group(1)))
                    if os.path.isfile(os.path.join(root, cand)):
                        todo.append(cand)
                        break
    return sorted(seen)


def check(root, files=None):
    problems, edges = [], {}
    for rel in (tree_files(root) if files is None else files):
        src = unit_of(rel)
        if src is None:
            continue
        if src == "core":
            problems.append(f"{rel}: lies in lib/core/ itself: every core module belongs to a layer folder")
            continue
        if (src.startswith("core/") and src[5:] not in CORE) or (
                src.startswith("engine/") and src not in ENGINE_ORDER):
            problems.append(f"{rel}: lib/{src}/ is not a layer: add it to tools/layers.py (and ARCHITECTURE.md)")
            continue
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if TORCH.search(line) and not src.startswith("engine"):
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
    database = None
    if "--compile-db" in argv:
        i = argv.index("--compile-db")
        if i + 1 >= len(argv):
            print("layers: --compile-db needs a compile_commands.json", file=sys.stderr)
            return 2
        database = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    args = [a for a in argv if a != "--graph"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    try:
        files = compiled_files(root, database) if database else None
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"layers: {database}: cannot read the compile database: {e}", file=sys.stderr)
        return 2
    problems, edges = check(root, files)
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
