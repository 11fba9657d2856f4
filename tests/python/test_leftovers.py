"""What a scan leaves behind, however its process ends (written by the team): scan() in a child
process, ended by SIGTERM, SIGHUP, SIGINT and os._exit in the user's step while it runs, with the
engine in that process (the step's default) and in its own; after each, its temporary directory
is as before and no engine process of it remains. A step's
KeyboardInterrupt and SystemExit reach the caller as themselves, and a TMPDIR too long for a
Unix socket's path still scans.

Run by ctest with BATCHCHECK_BINARY (the built command) and python/ on PYTHONPATH.
"""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

CHILD = textwrap.dedent("""
    import os, sys, time
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset
    import batchcheck

    how, marker = sys.argv[1], sys.argv[2]
    calls = [0]

    def step(model, batch):
        calls[0] += 1
        if calls[0] == 3:  # the scan is running: its engine started, its folder made
            open(marker, "w").close()
            if how == "exit":
                os._exit(7)
            if how == "keyboard":
                raise KeyboardInterrupt
            if how == "systemexit":
                raise SystemExit(5)
        if calls[0] >= 3 and how in ("SIGTERM", "SIGHUP", "SIGINT"):
            time.sleep(0.3)  # long enough for the signal to land mid-scan
        return F.cross_entropy(model(batch[0]), batch[1])

    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.rand(400, 4, generator=g), torch.randint(0, 3, (400,), generator=g)), batch_size=4)
    try:
        report = batchcheck.scan(torch.nn.Linear(4, 3), loader, step=step, quiet=True)
        print("REPORT", report.ok)
    except BaseException as e:
        print("RAISED", type(e).__name__, flush=True)
""")


def processes_mentioning(text):
    """The pids whose command line holds `text` (the scan's config path lies in its TMPDIR)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


class TestNothingLeftBehind(unittest.TestCase):
    def run_child(self, how, tmp_name="t", engine=None):
        root = tempfile.mkdtemp(prefix="bc-leftovers-")
        tmp = os.path.join(root, tmp_name)
        os.makedirs(tmp)
        marker = os.path.join(root, "started")
        env = dict(os.environ, TMPDIR=tmp)
        env.pop("BATCHCHECK_ENGINE", None)
        if engine:
            env["BATCHCHECK_ENGINE"] = engine
        child = subprocess.Popen([sys.executable, "-c", CHILD, how, marker], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        if how.startswith("SIG"):
            deadline = time.time() + 120
            while not os.path.exists(marker) and time.time() < deadline and child.poll() is None:
                time.sleep(0.05)
            self.assertTrue(os.path.exists(marker), child.communicate()[1] if child.poll() is not None else "no start")
            child.send_signal(getattr(signal, how))
        out, err = child.communicate(timeout=300)
        # The watcher removes what the process could not: give it a moment.
        deadline = time.time() + 20
        while (os.listdir(tmp) or processes_mentioning(tmp)) and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(os.listdir(tmp), [], (how, out, err))
        self.assertEqual(processes_mentioning(tmp), [], how)
        return child.returncode, out, err

    def test_each_signal_and_os_exit_leave_nothing(self):
        # The engine in the scanning process (the step's default) and in a process of its own.
        for engine, how in [(e, h) for e in (None, "process") for h in ("SIGTERM", "SIGHUP", "SIGINT", "exit")]:
            with self.subTest(how=how, engine=engine):
                code, out, err = self.run_child(how, engine=engine)
                if how == "exit":
                    self.assertEqual(code, 7, err)
                elif how == "SIGINT":
                    self.assertIn("RAISED KeyboardInterrupt", out, err)
                else:
                    self.assertEqual(code, -getattr(signal, how), err)

    def test_the_steps_keyboard_interrupt_and_system_exit_reach_the_caller(self):
        for engine, (how, name) in [(e, c) for e in (None, "process") for c in (("keyboard", "KeyboardInterrupt"), ("systemexit", "SystemExit"))]:
            with self.subTest(how=how, engine=engine):
                code, out, err = self.run_child(how, engine=engine)
                self.assertIn("RAISED %s" % name, out, err)

    def test_a_tmpdir_too_long_for_a_sockets_path(self):
        code, out, err = self.run_child("none", "x" * 120)
        self.assertIn("REPORT True", out, err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
