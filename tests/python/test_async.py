# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""ptc.async_save: the call returns a snapshot (the tensors change at once and
the version holds what they were), host and device (stand-in) tensors; the
snapshot memory reused; errors raised by wait() — and by the next save when
nobody waited; saves waiting for the previous one; four gloo processes
saving in the background over their own group; a process killed with
SIGKILL while its save persists leaves the previous version intact, no
partial version, and a store that verifies and saves again."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import ptc
import ranks
from conftest import wait_ranks
from ptc import _async, _ring
from test_checkpoint import RULES, empty_states, local_states, raw, shapes
from test_device import big_model
from test_errors import HOLD

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def st(tmp_path):
    s = ptc.Store(tmp_path / "st", create=True)
    yield s
    _async.wait_pending(raise_unseen=False)
    s.close()


def loaded(st, g, config, version=None):
    lay, want = local_states(g, config)
    got = empty_states(lay)
    ptc.load(st, got, config=config, rank=list(range(lay.world)), version=version)
    return got, want


@pytest.mark.parametrize("device", [False, True])
def test_the_call_returns_a_snapshot(st, device):
    g = big_model()
    lay, states = local_states(g, "tp=2")
    with _ring.fake_device() if device else np.errstate():
        h = ptc.async_save(st, states, config="tp=2", rules=RULES, rank=[0, 1], step=4,
                           global_shapes=shapes(g), meta={"by": "async"})
        for s in states:                      # the job goes on
            for x in s.values():
                x.reshape(-1).view(torch.uint8).fill_(0xEE)
        assert h.wait() == 1
        assert h.done() and h.version == 1 and h.wait() == 1
        first = _async._snap.host
        size = _async.snapshot_bytes()
        assert size >= sum(x.numel() * x.element_size() for s in states for x in s.values())
        _, states = local_states(g, "tp=2")
        assert ptc.async_save(st, states, config="tp=2", rules=RULES, rank=[0, 1],
                              global_shapes=shapes(g)).wait() == 2
        assert _async.snapshot_bytes() == size and _async._snap.host is first
    got, want = loaded(st, g, "dp=1", version=1)
    assert all(raw(got[0][n]) == raw(x) for n, x in want[0].items())
    rec = ptc.read_record(st, 1)
    assert rec["step"] == 4 and rec["meta"] == {"by": "async"}
    st.verify(all=True)


def test_errors_surface_at_wait(st):
    g = big_model()
    _, states = local_states(g, "tp=2")
    with pytest.raises(ptc.InvalidError, match="state must be a sequence"):
        ptc.async_save(st, states[0], config="tp=2", rules=RULES, rank=[0, 1])  # alone: now
    holder = subprocess.Popen([sys.executable, "-c", HOLD, ptc.library_path(), st.path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    st.lock_timeout = 0.1                     # a busy save fails after 0.1 s, not the default 60
    try:
        assert holder.stdout.readline().strip() == "locked"
        h = ptc.async_save(st, states, config="tp=2", rules=RULES, rank=[0, 1],
                           global_shapes=shapes(g))
        with pytest.raises(ptc.BusyError, match=r"locked by another process \(pid %d\); waited 0\.1 s"
                           % holder.pid):
            h.wait()
        with pytest.raises(ptc.BusyError):
            h.wait()                          # the same error again
        h2 = ptc.async_save(st, states, config="tp=2", rules=RULES, rank=[0, 1],
                            global_shapes=shapes(g))
        while not h2.done():
            time.sleep(0.01)
    finally:
        holder.communicate("\n", timeout=30)
    # nobody waited for h2: the next save raises its error first
    with pytest.raises(ptc.BusyError):
        ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g))
    assert ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1],
                    global_shapes=shapes(g)) == 1
    assert [v["version"] for v in st.versions()] == [1]


def test_saves_wait_for_the_previous_one(st):
    g = big_model()
    _, states = local_states(g, "tp=2")
    kw = dict(config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g))
    h1 = ptc.async_save(st, states, step=1, **kw)
    h2 = ptc.async_save(st, states, step=2, **kw)
    assert h1.done()
    assert ptc.save(st, states, step=3, **kw) == 3
    assert h2.done()
    assert [h1.wait(), h2.wait()] == [1, 2]
    assert [v["step"] for v in st.versions()] == ["1", "2", "3"]


def run(world, mode, store, config, tmp, name, fake=False, kill_on=None):
    out = tmp / name
    out.mkdir()
    env = dict(os.environ, WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    if fake:
        env["PTC_FAKE_DEVICE"] = "1"
    procs = ranks.start(os.path.join(HERE, "async_worker.py"),
                        [mode, store, config, tmp / (name + ".init"), out], world, env, out)
    if kill_on:
        try:
            for p in procs:                   # every process is persisting
                p.wait_for(kill_on)
            for p in procs:
                p.send_signal(signal.SIGKILL)
            for p in procs:
                p.wait(timeout=240)
        finally:
            for p in procs:
                p.kill()
        return [p.returncode for p in procs]
    return wait_ranks(procs, out, timeout=240)


def test_four_processes_save_in_the_background(tmp_path):
    store = tmp_path / "st"
    ptc.Store(store, create=True).close()
    res = run(4, "async", store, "dp=2,tp=2", tmp_path, "async", fake=True)
    assert [r["versions"] for r in res] == [[1, 2, 3]] * 4
    assert all(r["done1_after_second"] and r["done2_after_save"] for r in res)
    g = big_model()
    with ptc.Store(store) as st:
        for v, data in ((1, g), (3, None)):
            if data is None:
                data = {n: x.clone() for n, x in g.items()}
                data["blk.0.big.col"].mul_(2)
            for n, x in data.items():
                assert raw(st.read(n, version=v, like="torch")) == raw(x), (v, n)
        st.verify(all=True)


def test_killed_while_persisting(tmp_path):
    store = tmp_path / "st"
    ptc.Store(store, create=True).close()
    codes = run(2, "crash", store, "tp=2", tmp_path, "crash", kill_on="persisting")
    assert codes == [-signal.SIGKILL] * 2
    assert os.listdir(store / "packs" / "v2")      # the killed save's pack files
    g = big_model()
    with ptc.Store(store) as st:
        assert [v["version"] for v in st.versions()] == [1]
        st.verify(all=True)
        got, want = loaded(st, g, "tp=2")
        assert all(raw(got[r][n]) == raw(x) for r in range(2) for n, x in want[r].items())
        _, states = local_states(g, "tp=2")
        assert ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1],
                        global_shapes=shapes(g)) == 2
        st.verify(all=True)
        assert st.gc()["files_removed"] == 0          # the debris went with the new save
