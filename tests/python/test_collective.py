# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""ptc.save / ptc.load across real processes: four gloo processes (one rank
each, dp=2 x tp=2) save every dtype (BF16, F16, F32, F64, integers, BOOL, FP8,
a 0-d and an empty tensor, optimizer state), then two processes under other
configurations load their ranks' tensors: every byte equals the slice cut in
one process from the whole tensor, and the store holds the whole tensors. A
wrong dtype on one saving process, or the store's writer lock held by
another process, makes every process raise the same error and write nothing;
loading needs no lock. The processes are started with subprocess and meet
through init_method file:// (ckpt_worker.py)."""

import subprocess
import sys

import ptc
from conftest import run_ranks
from test_checkpoint import model, raw
from test_errors import HOLD, store_files


def run(world, mode, store, config, tmp, name):
    out = tmp / name
    return run_ranks("ckpt_worker.py", world, [mode, store, config, tmp / (name + ".init"), out],
                     out)


def test_four_processes_save_two_load_under_other_configs(tmp_path, monkeypatch):
    store = tmp_path / "st"
    ptc.Store(store, create=True).close()
    saved = run(4, "save", store, "dp=2,tp=2", tmp_path, "save")
    assert {r["version"] for r in saved} == {1}
    assert all(r["versions_after_bad"] == [] for r in saved)
    assert [r["bad"] for r in saved] == [[
        "InvalidError", "tensor 'blk.1.f32.rep' is F32 on rank 0 and F64 on rank 2"]] * 4
    g = model()
    with ptc.Store(store) as st:
        assert [v["version"] for v in st.versions()] == [1]
        assert st.versions()[0]["config"] == "dp=2,tp=2,pp=1"
        assert sorted(t[0] for t in st.tensors()) == sorted(g)
        for n, x in g.items():
            assert raw(st.read(n, like="torch")) == raw(x), n
        st.verify()
    configs = ["tp=2", "pp=2", "dp=2,zero=1"]
    before = store_files(store)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, ptc.library_path(), str(store)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setenv("PTC_LOCK_TIMEOUT", "0")  # the save must not wait for the lock
        got = run(2, "load", store, ";".join(configs), tmp_path, "load")
    finally:
        holder.communicate("\n", timeout=30)
    # a save under the held lock: process 0's BusyError on both, nothing written
    assert got[0]["locked"] == got[1]["locked"]
    assert got[0]["locked"][0] == "BusyError"
    assert got[0]["locked"][1].startswith("checkpoint save failed on process 0: store ")
    assert "locked by another process (pid %d)" % holder.pid in got[0]["locked"][1]
    assert store_files(store) == before
    with ptc.Store(store) as st:
        assert [v["version"] for v in st.versions()] == [1]
    for cfg in configs:
        for r in got:
            assert r[cfg]["mismatch"] == [], (cfg, r)
            assert r[cfg]["record"] == {"version": 1, "step": 3, "config": "dp=2,tp=2,pp=1",
                                        "meta": {"by": "gloo"}}
            assert r[cfg]["tensors"] > 0
