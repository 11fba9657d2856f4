"""The `batchcheck` command of the pip package: the C++ binary in batchcheck/_bin/, run in place
of this process (same arguments, exit code and signals)."""
import os
import sys


def binary():
    """The batchcheck executable: $BATCHCHECK_BINARY, else the one installed with this package."""
    env = os.environ.get("BATCHCHECK_BINARY")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "batchcheck")
    if os.path.exists(here):
        return here
    raise FileNotFoundError(
        "batchcheck: error: this batchcheck package has no engine (%s is missing): install it with "
        "`pip install batchcheck` (or from a checkout: `pip install .`), or set BATCHCHECK_BINARY to a "
        "built build/app/batchcheck" % here)


def torch_lib():
    """The lib folder of the torch this Python runs: the one imported already, else the one an
    import would find (importlib, without importing it); None where there is none."""
    mod = sys.modules.get("torch")
    path = getattr(mod, "__file__", None) if mod is not None else None
    if path is None:
        import importlib.util
        try:
            spec = importlib.util.find_spec("torch")
        except (ImportError, ValueError):
            spec = None
        path = spec.origin if spec is not None else None
    lib = os.path.join(os.path.dirname(path), "lib") if path else None
    return lib if lib and os.path.isdir(lib) else None


def engine_env(env=None):
    """The environment the engine runs in: the LibTorch of the torch this Python runs goes first
    on the loader's path, before the package's neighbour and a system libtorch (a wheel installed
    with --target and used through PYTHONPATH finds no torch beside it, and the loader would take
    Debian's libtorch-dev). No Python torch: the engine's own search, as before."""
    env = dict(os.environ if env is None else env)
    lib = torch_lib()
    if lib is not None:
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = lib + (":" + old if old else "")
    return env


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        exe = binary()
    except FileNotFoundError as e:
        sys.stderr.write("%s\n" % e)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(exe, [exe] + list(argv), engine_env())


if __name__ == "__main__":
    sys.exit(main())
