"""python -m batchcheck ...: the same command as `batchcheck ...`, plus a scan of Python objects:

    python -m batchcheck scan train.py:setup [-o report.json] [--html page.html] [scan flags]
    python -m batchcheck scan mypackage.data:setup

`setup` is a function of that file or module, called without arguments, that returns
(model, loader, loss) or a dict with those keys: the objects batchcheck.scan() takes.
"""
import importlib
import importlib.util
import os
import sys

from batchcheck._cli import main as cli_main


def _python_target(arg):
    if ":" not in arg or arg.endswith(".json") or os.path.exists(arg):
        return None
    where, _, name = arg.rpartition(":")
    return (where, name) if where and name.isidentifier() else None


def _load(where, name):
    if where.endswith(".py"):
        if not os.path.isfile(where):
            raise SystemExit("batchcheck: error: %s: no such file" % where)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(where)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise SystemExit("batchcheck: error: %s: no function %s" % (where, name))
    got = fn()
    if isinstance(got, dict):
        return got["model"], got["loader"], got.get("loss")
    model, loader, *rest = got
    return model, loader, (rest[0] if rest else None)


def scan_python(target, argv):
    import batchcheck
    out = html = None
    options, rest, i = {}, [], 0
    while i < len(argv):
        a = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        if a in ("-o", "--output", "--html", "--mode", "--fail-on", "--device") and value is None:
            raise SystemExit("batchcheck: error: %s needs a value" % a)
        if a in ("-o", "--output"):
            out = value
        elif a == "--html":
            html = value
        elif a == "--mode":
            options["mode"] = value
        elif a == "--fail-on":
            options["fail_on"] = value
        elif a == "--device":
            options["device"] = value
        else:
            rest.append(a)
            i += 1
            continue
        i += 2
    if target[0].endswith(".py"):
        for path, flag in ((out, "-o"), (html, "--html")):
            if path and os.path.exists(path) and os.path.samefile(path, target[0]):
                raise SystemExit("batchcheck: error: %s: %s would write over the script it scans" % (path, flag))
    model, loader, loss = _load(*target)
    report = batchcheck.scan(model, loader, loss, args=rest, **options)
    if out:
        with open(out, "w") as f:
            f.write(report.to_json() + "\n")
    if html:
        report.html(html)
    return report.exit_code


def main(argv):
    if len(argv) >= 2 and argv[0] == "scan":
        target = _python_target(argv[1])
        if target:
            return scan_python(target, argv[2:])
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
