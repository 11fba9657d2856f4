"""What a scan leaves behind, removed however the scan's process ends.

scan() holds a folder in the temporary directory (the socket, the model's copy, the config, the
report) and an engine process. A `finally` removes both when scan() returns or raises, but not
when the process is ended by a signal it does not handle (SIGTERM, SIGHUP), killed, or leaves
through os._exit. So a small watcher, in a session of its own, reads a pipe from the scanning
process: the folders and the engine's process group come down it as they are made; "done" ends
it quietly (the scan cleaned up itself); an end of the pipe with no "done" is the scanning
process gone, however it went, and the watcher kills the engine's group and removes the folders.
"""
import os
import subprocess
import sys

_WATCH = r"""
import os, shutil, signal, sys
folders, groups = [], []
for line in sys.stdin:
    kind, _, value = line.rstrip("\n").partition(" ")
    if kind == "done":
        sys.exit(0)
    if kind == "dir":
        folders.append(value)
    elif kind == "pgid":
        groups.append(int(value))
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
for d in folders:
    shutil.rmtree(d, ignore_errors=True)
"""


class Janitor:
    """The watcher of one scan; a no-op where it cannot start (the scan then cleans up as before)."""

    def __init__(self):
        try:
            self.proc = subprocess.Popen([sys.executable, "-S", "-c", _WATCH], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                         close_fds=True)
        except OSError:
            self.proc = None

    def _tell(self, line):
        if self.proc is None:
            return
        try:
            self.proc.stdin.write(line.encode("utf-8", "surrogateescape") + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def folder(self, path):
        if "\n" not in path:  # a path the pipe's lines cannot carry is left to the scan's own cleanup
            self._tell("dir " + os.fspath(path))

    def group(self, pgid):
        self._tell("pgid %d" % int(pgid))

    def done(self):
        """The scan cleaned up itself: the watcher ends without touching anything."""
        if self.proc is None:
            return
        self._tell("done")
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.proc = None
