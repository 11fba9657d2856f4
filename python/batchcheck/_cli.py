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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        exe = binary()
    except FileNotFoundError as e:
        sys.stderr.write("%s\n" % e)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + list(argv))


if __name__ == "__main__":
    sys.exit(main())
