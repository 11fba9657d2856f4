#!/usr/bin/env python3
"""What a build really read, against what it was meant to read.

Usage:
  tools/build_deps.py torch BUILD --include DIR [DIR ...]
  tools/build_deps.py packages BUILD --packages PKG [PKG ...] [--targets T ...] [--allow DIR ...] [--source DIR]

`torch`: every header an object of BUILD was compiled from (ninja's deps log, or the depfiles
of a Makefile tree) that is a LibTorch header (an include/{torch,ATen,c10,caffe2}/ path) must lie
under one of the configured torch's include folders. A machine with Debian's libtorch-dev once
answered a LibTorch include of a target built without LibTorch's include path from
/usr/include: the build passed there and failed on a fresh machine.

`packages`: every file the build read from outside the source tree, the build tree and --allow
(the headers of its objects, and the libraries its links name) must come from a Debian package
that PKG... (the packages scripts/setup.sh installs for that tier) install, with their
dependencies; --targets limits the check to what those targets build (the demo's). A file of a
package outside that set is installed on this machine by something else (a later tier, by hand)
and missing on a fresh one; a file of no package was put there by hand.

Exit 1 with one line per problem: the object (or link) and the file it read.
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

TORCH_HEADER = re.compile(r"/include/(torch|ATen|c10|caffe2)/")


# ---- what the build read ----------------------------------------------------------------------

def parse_ninja_deps(text):
    """`ninja -t deps` output -> {object: [headers]}."""
    deps, current = {}, None
    for line in text.splitlines():
        if not line.strip():
            current = None
        elif not line[0].isspace():
            current = line.split(": #deps", 1)[0]
            deps[current] = []
        elif current is not None:
            deps[current].append(line.strip())
    return deps


def parse_depfile(text):
    """A make-style depfile (`obj.o: a.cpp b.h \\`) -> (target, [prerequisites])."""
    joined = text.replace("\\\n", " ")
    target, _, rest = joined.partition(": ")
    return target.strip(), [p.replace("\\ ", " ") for p in re.split(r"(?<!\\) +", rest.strip()) if p]


def read_deps(build):
    """{object: [every file its compile read]} of a ninja or a Makefile tree."""
    if os.path.isfile(os.path.join(build, "build.ninja")):
        out = subprocess.run(["ninja", "-C", build, "-t", "deps"], check=True, capture_output=True, text=True).stdout
        return parse_ninja_deps(out)
    deps = {}
    for path in glob.glob(os.path.join(build, "**", "*.o.d"), recursive=True):
        with open(path, encoding="utf-8", errors="replace") as f:
            target, files = parse_depfile(f.read())
        deps[os.path.relpath(path[:-2], build)] = files
    if not deps:
        raise SystemExit(f"build_deps: {build}: no ninja deps log and no depfiles: build it first")
    return deps


def target_commands(build, targets):
    """The commands ninja runs to build `targets` (all of BUILD's when empty)."""
    out = subprocess.run(["ninja", "-C", build, "-t", "commands", *targets], check=True, capture_output=True,
                         text=True).stdout
    return out.splitlines()


def objects_of(commands):
    """The objects those commands compile (their -o with -c)."""
    objs = set()
    for cmd in commands:
        words = cmd.split()
        if "-c" in words and "-o" in words:
            objs.add(words[words.index("-o") + 1])
    return objs


def link_inputs(commands):
    """{link output: [absolute library files it names]} of the link commands among `commands`."""
    links = {}
    for cmd in commands:
        try:
            words = shlex.split(cmd)
        except ValueError:
            words = cmd.split()
        if "-c" in words or "-o" not in words:
            continue
        libs = []
        for w in words:
            for part in w.split(","):  # -Wl,--no-as-needed,/path/lib.so
                if part.startswith("/") and re.search(r"\.(so(\.[0-9.]+)?|a)$", part) and os.path.isfile(part):
                    libs.append(part)
        if libs:
            links[words[words.index("-o") + 1]] = libs
    return links


def absolute(build, path):
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(build, path))


def under(path, folders):
    real = os.path.realpath(path)
    for folder in folders:
        f = os.path.realpath(folder).rstrip("/") + "/"
        if real.startswith(f) or os.path.normpath(path).startswith(f):
            return True
    return False


# ---- the torch check ---------------------------------------------------------------------------

def foreign_torch_headers(deps, build, torch_includes):
    """[(object, header)] for each LibTorch header read from outside the configured torch."""
    found = []
    for obj, files in sorted(deps.items()):
        for h in files:
            path = absolute(build, h)
            if TORCH_HEADER.search(path) and not under(path, torch_includes):
                found.append((obj, path))
    return found


# ---- the packages check ------------------------------------------------------------------------

def parse_status(text):
    """dpkg's status file -> {package: (depends, provides)} of the installed packages; depends is a
    list of alternatives (each a list of names), provides a list of names."""
    pkgs = {}
    for stanza in text.split("\n\n"):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line[:1].isspace() and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        name = fields.get("Package")
        if not name or "installed" not in fields.get("Status", "").split()[-1:]:
            continue
        depends = []
        for field in ("Pre-Depends", "Depends"):
            for group in filter(None, (g.strip() for g in fields.get(field, "").split(","))):
                depends.append([re.split(r"[\s(:]", alt.strip(), maxsplit=1)[0] for alt in group.split("|")])
        provides = [re.split(r"[\s(:]", p.strip(), maxsplit=1)[0] for p in fields.get("Provides", "").split(",") if p.strip()]
        pkgs[name] = (depends, provides)
    return pkgs


def closure(roots, installed):
    """The packages `roots` bring, with their dependencies (an alternative or a virtual package
    counts as every installed package that satisfies it)."""
    providers = {}
    for name, (_, provides) in installed.items():
        providers.setdefault(name, set()).add(name)
        for p in provides:
            providers.setdefault(p, set()).add(name)
    seen, todo = set(), [r.split(":")[0] for r in roots]
    while todo:
        name = todo.pop()
        for pkg in providers.get(name, ()):
            if pkg in seen:
                continue
            seen.add(pkg)
            for group in installed[pkg][0]:
                for alt in group:
                    todo.append(alt)
    return seen


def owners(paths):
    """{path: package} for the paths a Debian package installed (dpkg -S, its database's names:
    /usr/lib and /lib alike under merged /usr)."""
    result, todo = {}, {}  # todo: a name dpkg may know -> the paths it stands for (a link and its target)
    for p in paths:
        for cand in {p, os.path.realpath(p)}:
            todo.setdefault(cand, set()).add(p)
            if cand.startswith("/usr/lib/"):
                todo.setdefault(cand[4:], set()).add(p)
            elif cand.startswith("/lib/"):
                todo.setdefault("/usr" + cand, set()).add(p)
    names = sorted(todo)
    for i in range(0, len(names), 500):
        out = subprocess.run(["dpkg-query", "-S", *names[i:i + 500]], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("diversion "):
                continue
            pkgs, sep, path = line.rpartition(": ")
            for p in todo.get(path, ()) if sep else ():
                result.setdefault(p, pkgs.split(",")[0].strip().split(":")[0])
    return result


def package_problems(reads, allowed_folders, owner_of, packages):
    """reads: {who: [files]}. One line per file outside the allowed folders that no package of
    `packages` installed."""
    problems, said = [], set()
    for who, files in sorted(reads.items()):
        for f in files:
            if under(f, allowed_folders) or (who, f) in said:
                continue
            said.add((who, f))
            pkg = owner_of.get(f)
            if pkg is None:
                problems.append(f"{who}: reads {f}, which no Debian package installed (put there by hand?)")
            elif pkg not in packages:
                problems.append(f"{who}: reads {f}, of the package {pkg}, which this tier's set-up does not install")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="check", required=True)
    t = sub.add_parser("torch")
    t.add_argument("build")
    t.add_argument("--include", nargs="+", required=True)
    p = sub.add_parser("packages")
    p.add_argument("build")
    p.add_argument("--packages", nargs="+", required=True)
    p.add_argument("--targets", nargs="*", default=[])
    p.add_argument("--allow", nargs="*", default=[])
    p.add_argument("--source", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--status", default="/var/lib/dpkg/status")
    a = ap.parse_args(argv)
    build = os.path.abspath(a.build)
    deps = read_deps(build)

    if a.check == "torch":
        found = foreign_torch_headers(deps, build, a.include)
        for obj, header in found:
            print(f"{obj}: reads {header}, a LibTorch header from outside the configured torch")
        print(f"build_deps: {len(deps)} objects, {sum(map(len, deps.values()))} header reads, {len(found)} from another torch "
              f"than the configured one ({', '.join(a.include)})", file=sys.stderr)
        return 1 if found else 0

    commands = target_commands(build, a.targets)
    if a.targets:
        wanted = objects_of(commands)
        deps = {o: f for o, f in deps.items() if o in wanted}
    reads = {o: [absolute(build, h) for h in files] for o, files in deps.items()}
    reads.update({"link " + o: libs for o, libs in link_inputs(commands).items()})
    allowed = [a.source, build] + a.allow
    outside = sorted({f for files in reads.values() for f in files if not under(f, allowed)})
    with open(a.status, encoding="utf-8", errors="replace") as f:
        installed = parse_status(f.read())
    have = closure(a.packages, installed)
    problems = package_problems(reads, allowed, owners(outside), have)
    for line in problems:
        print(line)
    print(f"build_deps: {len(reads)} objects and links read {len(outside)} files from outside the trees, "
          f"{len(problems)} not installed by the set-up's {len(a.packages)} packages ({len(have)} with their dependencies)",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
