"""Issue 33 from Python: ptc.save beside a gc loop waits for the store's
writer lock instead of raising BusyError (and Store(lock_timeout=...) bounds
the wait); a read-only Store lists the datasets of a store that never held
one as an empty list."""

import fcntl
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import ptc
from conftest import PTC, run_ptc

HOLD = r"""
import fcntl, sys, time
f = open(sys.argv[1] + "/lock", "a+")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def state(step):
    return {"lm_head.weight": np.full((64, 16), step, dtype=np.float32)}


def test_save_beside_a_gc_loop(tmp_path):
    path = tmp_path / "st"
    with ptc.Store(path, create=True) as st:
        ptc.save(st, state(0), config="tp=1", rules="llama", rank=0, step=0)
    stop = tmp_path / "stop"
    loop = subprocess.Popen(
        ["bash", "-c", 'n=0; while [ ! -e "$1" ]; do "$0" gc --store "$2" >/dev/null || exit 1; '
         'n=$((n+1)); done; echo $n', PTC, str(stop), str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        with ptc.Store(path) as st:
            for step in range(1, 41):
                ptc.save(st, state(step), config="tp=1", rules="llama", rank=0, step=step)
                if step >= 2:  # keep the first and the newest
                    run_ptc("versions", "delete", "--store", path, step)
    finally:
        stop.touch()
        out, _ = loop.communicate(timeout=60)
    assert loop.returncode == 0, "a gc failed beside the saves"
    assert int(out) > 0
    with ptc.Store(path) as st:
        assert [v["version"] for v in st.versions()][-1] == 41
        got = {"lm_head.weight": np.zeros((64, 16), dtype=np.float32)}
        assert ptc.load(st, got, config="tp=1", rank=0)["step"] == 40
        assert (got["lm_head.weight"] == 40).all()
        st.verify(all=True)


def test_lock_timeout(tmp_path):
    path = tmp_path / "st"
    with ptc.Store(path, create=True) as st:
        ptc.save(st, state(0), config="tp=1", rules="llama", rank=0)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), "1.0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with ptc.Store(path, lock_timeout=0.2) as st:
            assert st.lock_timeout == 0.2
            t0 = time.monotonic()
            with pytest.raises(ptc.BusyError, match=r"pid %d\); waited 0\.2 s" % holder.pid):
                ptc.save(st, state(1), config="tp=1", rules="llama", rank=0)
            assert time.monotonic() - t0 >= 0.19
            st.lock_timeout = 30      # the holder lets go within that
            assert ptc.save(st, state(1), config="tp=1", rules="llama", rank=0) == 2
    finally:
        holder.wait(timeout=30)


def test_readonly_datasets_of_a_store_without_any(tmp_path):
    path = tmp_path / "st"
    with ptc.Store(path, create=True) as st:
        ptc.save(st, state(0), config="tp=1", rules="llama", rank=0)
    before = open(path / "meta" / "data.mdb", "rb").read()
    with ptc.Store(path, readonly=True) as st:
        assert st.datasets() == []
        st.verify(all=True)
    with ptc.Store(path) as st:
        assert st.datasets() == []
    assert open(path / "meta" / "data.mdb", "rb").read() == before
