"""Rank processes of the multi-process tests, started from a fork server that
has imported torch once (multiprocessing's "forkserver", torch and
torch.distributed preloaded) instead of as fresh interpreters that each
import it: a rank process then costs its own work, not torch's ~2 s of
start-up CPU, which on the 2-core CI machine is most of a test's cost.

Each rank is still a process of its own (forked from the server, not from
the test), with the environment, argv and sys.path a fresh `python SCRIPT
ARGS` would have; its stdout and stderr go to a log file, which
wait_all prints when a rank fails. The differences from a fresh
interpreter: torch is already imported (its thread count is set from the
rank's OMP_NUM_THREADS), and the process ends with os._exit after the
script (multiprocessing's way: its stdio flushed, no interpreter teardown).
PTC_TEST_FORK=0 starts fresh interpreters instead (subprocess.Popen)."""

import multiprocessing
import os
import runpy
import subprocess
import sys
import time

_ctx = None


def _context():
    """The fork server, started with one thread per math library (as the
    ranks run: their environment sets OMP_NUM_THREADS=1) so that it imports
    torch without starting thread pools that its forks would not have."""
    global _ctx
    if _ctx is None:
        from multiprocessing import forkserver
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed"])
        one = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
        keep = {k: os.environ.get(k) for k in one}
        os.environ.update({k: "1" for k in one})
        try:
            forkserver.ensure_running()
        finally:
            for k, v in keep.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        _ctx = ctx
    return _ctx


def _run(script, args, env, log):
    """In the forked rank: a fresh process's environment, argv, path and
    output, then the script as __main__."""
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    multiprocessing.set_start_method(None, force=True)  # a fresh process's default
    sys.argv = [script, *args]
    sys.path[:0] = [os.path.dirname(script)] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if "torch" in sys.modules and env.get("OMP_NUM_THREADS"):
        sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
    runpy.run_path(script, run_name="__main__")


class Rank:
    """A started rank process, with what the tests use of subprocess.Popen:
    wait(timeout), poll(), kill(), send_signal(), pid, returncode; and log,
    wait_for(prefix)."""

    def __init__(self, script, args, env, log):
        self.log = str(log)
        self.args = [str(a) for a in args]
        if os.environ.get("PTC_TEST_FORK", "1") == "0":
            with open(self.log, "ab") as f:
                self._p = subprocess.Popen([sys.executable, script, *self.args], env=env,
                                           stdout=f, stderr=subprocess.STDOUT)
            self._mp = None
        else:
            # the log exists before the rank runs: wait_for may read it at once
            open(self.log, "ab").close()
            self._mp = _context().Process(target=_run, args=(script, self.args, dict(env),
                                                             self.log))
            self._mp.start()
            self._p = None
        self.pid = self._p.pid if self._p else self._mp.pid

    @property
    def returncode(self):
        return self._p.returncode if self._p else self._mp.exitcode

    def poll(self):
        return self._p.poll() if self._p else self._mp.exitcode

    def wait(self, timeout=None):
        if self._p:
            return self._p.wait(timeout=timeout)
        self._mp.join(timeout)
        if self._mp.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._mp.exitcode

    def wait_for(self, prefix, timeout=120):
        """The first line of the rank's output that starts with @p prefix,
        once written whole; an AssertionError if the rank ends without one."""
        end = time.monotonic() + timeout
        while True:
            done = self.poll() is not None  # before reading: a last line is in the log
            with open(self.log, errors="replace") as f:
                for line in f:
                    if line.startswith(prefix) and line.endswith("\n"):
                        return line
            assert not done, "rank ended (%s) without a line %r" % (self.returncode, prefix)
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)

    def send_signal(self, sig):
        os.kill(self.pid, sig)

    def kill(self):
        if self.poll() is None:
            self.send_signal(9)


def wait_all(procs, timeout=180):
    """Wait for @p procs (those still running when one times out are
    killed) and check that every one exited 0; the output of a rank that did
    not (a Rank's log) is printed."""
    try:
        for p in procs:
            p.wait(timeout=timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for r, p in enumerate(procs):
            log = getattr(p, "log", None)
            if p.returncode != 0 and log and os.path.exists(log):
                sys.stderr.write("---- rank %d (exit %s): %s\n%s" % (
                    r, p.returncode, log, open(log, errors="replace").read()[-20000:]))
    assert [p.returncode for p in procs] == [0] * len(procs)


def start(script, args, world, env, logs):
    """@p world ranks of @p script (RANK = 0..world-1 added to @p env), each
    logging to LOGS/rank-R.log."""
    os.makedirs(logs, exist_ok=True)
    return [Rank(script, args, dict(env, RANK=str(r)), os.path.join(logs, "rank-%d.log" % r))
            for r in range(world)]
