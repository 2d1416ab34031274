# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""ptc.save / ptc.load across hosts (docs/checkpoint.md, "Across hosts"):
gloo processes given host identities of their own (host=), each host's store
a private directory that no other host's process opens (hosts_worker.py).
Four processes on three hosts (two on h0) save under tp=2,pp=2 with one
replica per host; the version across hosts loads byte-exact under dp=2,tp=2
on the same hosts, then — host h2's store deleted — under tp=2 on two
processes of h0 and h1 from the survivors' parts and h2's replica on h0, the
bytes moved between hosts equal to the plan's lower bound; with h1 gone as
well, rank 2's shards exist nowhere and every process raises the same error
naming the ranks."""

import json
import os
import shutil
import subprocess
import sys

import ptc

HERE = os.path.dirname(os.path.abspath(__file__))


def run(mode, base, config, hosts, tmp, name):
    world = len(hosts)
    out = tmp / name
    out.mkdir()
    env = dict(os.environ, WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.join(HERE, "hosts_worker.py"), mode, str(base), config,
           ",".join(hosts), str(tmp / (name + ".init")), str(out)]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r))) for r in range(world)]
    try:
        for p in procs:
            p.wait(timeout=180)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * world
    return [json.load(open(out / ("rank-%d.json" % r))) for r in range(world)]


def test_save_and_load_across_hosts(tmp_path):
    base = tmp_path / "disks"
    for h in ("h0", "h1", "h2"):   # each host's store, made before two processes share h0's
        ptc.Store(base / h, create=True).close()
    saved = run("save", base, "tp=2,pp=2", ["h0", "h0", "h1", "h2"], tmp_path, "save")
    assert [r["version"] for r in saved] == [1] * 4
    for h in ("h0", "h1", "h2"):   # one part per host, an ordinary version of its store
        with ptc.Store(base / h) as st:
            assert [v["version"] for v in st.versions()] == [1]
            st.verify()

    # every host present, another configuration
    a = run("load", base, "dp=2,tp=2", ["h0", "h0", "h1", "h2"], tmp_path, "a")
    for r in a:
        assert r["mismatch"] == [] and r["tensors"] > 0, r
        assert r["record"]["version"] == 1 and r["record"]["step"] == 3
        assert r["record"]["meta"] == {"by": "hosts"} and r["record"]["hosts"] == 3
        assert r["record"]["moved_bytes"] == r["record"]["lower_bound"] > 0
    assert len({json.dumps(r["record"]) for r in a}) == 1

    # host h2 lost with its store: its ranks' shards come from h0's replica
    shutil.rmtree(base / "h2")
    b = run("load", base, "tp=2", ["h0", "h1"], tmp_path, "b")
    for r in b:
        assert r["mismatch"] == [] and r["tensors"] > 0, r
        assert r["record"]["hosts"] == 2
        assert r["record"]["moved_bytes"] == r["record"]["lower_bound"] > 0

    # h1 lost too: h1's shards had their only copy on h2
    shutil.rmtree(base / "h1")
    c = run("load", base, "tp=2", ["h0", "h0"], tmp_path, "c")
    errs = {tuple(r["error"]) for r in c}
    assert len(errs) == 1, errs
    kind, msg = errs.pop()
    assert kind == "NotFoundError" and "lost with every copy" in msg and "(2)" in msg, msg
