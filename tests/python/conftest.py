"""Shared fixtures of the ptc Python tests: the ptc command, stores in
temporary folders, synthetic models."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import ranks

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("PTC_SRC") or os.path.dirname(os.path.dirname(HERE))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: full grids and long runs, left out of the default (fast) run "
                   "(ctest python.test_<file>); run them with -m slow (python.pytest_slow, label "
                   "slow), or everything with PTC_TEST_SLOW=1")


def pytest_collection_modifyitems(config, items):
    """Tests marked slow run only when asked for: -m naming `slow`, or
    PTC_TEST_SLOW=1."""
    if "slow" in (config.getoption("-m") or "") or os.environ.get("PTC_TEST_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or PTC_TEST_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _ptc_bin():
    p = os.environ.get("PTC")
    if p:
        return p
    build = os.environ.get("PTC_BUILD") or os.path.join(SRC, "build")
    return os.path.join(build, "ptc")


PTC = _ptc_bin()


def run_ptc(*args, check=True):
    """Run the ptc command; returns CompletedProcess (text)."""
    return subprocess.run([PTC, *map(str, args)], check=check, capture_output=True, text=True)


def run_ranks(worker, world, args, out, timeout=180, env=None):
    """Run `world` processes of tests/python/WORKER with ARGS (RANK and
    WORLD_SIZE set, one thread each, this folder on PYTHONPATH; env: the
    environment to start from, os.environ by default; forked from a server
    that has imported torch: ranks.py), wait for all (those still running
    when one times out are killed), check that every one exited 0 and
    return what each wrote, OUT/rank-R.json (OUT is made here; each rank's
    output is OUT/rank-R.log)."""
    out.mkdir()
    e = dict(os.environ if env is None else env, WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    e["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, e.get("PYTHONPATH")) if p)
    procs = ranks.start(os.path.join(HERE, worker), args, world, e, out)
    return wait_ranks(procs, out, timeout)


def wait_ranks(procs, out, timeout=180):
    """Wait for the rank processes @p procs (ranks.wait_all: every one must
    exit 0) and return what each wrote, OUT/rank-R.json."""
    ranks.wait_all(procs, timeout)
    return [json.load(open(os.path.join(out, "rank-%d.json" % r))) for r in range(len(procs))]


@pytest.fixture
def ptc_bin():
    if not os.access(PTC, os.X_OK):
        pytest.skip("no ptc command at %s" % PTC)
    return PTC


@pytest.fixture
def synth(tmp_path, ptc_bin):
    """A synthetic llama-tiny checkpoint (ptc synth) with optimizer state."""
    out = tmp_path / "model.safetensors"
    run_ptc("synth", "--preset", "llama-tiny", "--seed", "5", "--optim", "--out", out)
    return out


def fuse_available():
    return (os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None
            and os.access(PTC, os.X_OK))


def python():
    return sys.executable

