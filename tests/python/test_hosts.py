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
naming the ranks. test_fresh_host_and_whole_version (slow): a host whose store is
empty (replaced) joins a load byte-exact, and a load takes the newest version
the hosts present hold whole, as ptc train --resume does (process 0 says so:
a ptc.PtcWarning). test_explicit_layout_with_a_fresh_host: the same fresh
host for DTensors saved without config= (an explicit layout)."""

import json
import os
import shutil

import pytest

import ptc
from conftest import run_ranks


def run(mode, base, config, hosts, tmp, name, replicas=1):
    out = tmp / name
    return run_ranks("hosts_worker.py", len(hosts),
                     [mode, base, config, ",".join(hosts), tmp / (name + ".init"), out, replicas],
                     out)


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


TAKING = ("version 2 has no copy of 1 saved rank on the hosts present; taking version 1, "
          "the newest one they hold whole")


@pytest.mark.slow
def test_fresh_host_and_whole_version(tmp_path):
    """Slow tier (python.pytest_slow): the fast tier covers its paths through
    test_explicit_layout_with_a_fresh_host (a fresh host in a Python load, the
    PtcWarning, a version named with its lost ranks) and
    net.test_net_hosts_fresh (the same choices for a version saved under a
    configuration, through the command line)."""
    base = tmp_path / "disks"
    for h in ("h0", "h1", "h2"):
        ptc.Store(base / h, create=True).close()
    # version 1 with one replica per host, version 2 with none
    assert [r["version"] for r in run("save", base, "tp=2,pp=2", ["h0", "h0", "h1", "h2"],
                                      tmp_path, "s1")] == [1] * 4
    assert [r["version"] for r in run("save", base, "tp=2,pp=2", ["h0", "h0", "h1", "h2"],
                                      tmp_path, "s2", replicas=0)] == [2] * 4

    # h2 replaced: an empty store; version 2 lacks h2's rank 3, version 1
    # holds it on h0 (h2's replica): the load takes version 1, h2 joins it,
    # reads nothing and receives its ranks' bytes over the network
    shutil.rmtree(base / "h2")
    ptc.Store(base / "h2", create=True).close()
    a = run("load", base, "dp=2,tp=2", ["h0", "h0", "h1", "h2"], tmp_path, "a")
    for r in a:
        assert r["mismatch"] == [] and r["tensors"] > 0, r
        assert r["record"]["version"] == 1 and r["record"]["step"] == 3, r
        assert r["record"]["hosts"] == 3
        assert r["record"]["moved_bytes"] == r["record"]["lower_bound"] > 0
    assert len({json.dumps(r["record"]) for r in a}) == 1
    # the older version taken is said once, by process 0, as a ptc.PtcWarning
    # at the caller's line of ptc.load
    assert a[0]["warnings"] == [["PtcWarning", TAKING, "hosts_worker.py"]], a[0]
    assert [r["warnings"] for r in a[1:]] == [[]] * 3
    with ptc.Store(base / "h2") as st:   # nothing written on the fresh host by a load
        assert st.versions() == []
    # without config=: every tensor whole in every process (the layout the
    # local tensors describe), h2 still holding nothing
    w = run("whole", base, "dp=2,tp=2", ["h0", "h0", "h1", "h2"], tmp_path, "w")
    for r in w:
        assert "error" not in r and r["mismatch"] == [] and r["tensors"] > 0, r
        assert r["record"]["version"] == 1
        assert r["warnings"] == ([["PtcWarning", TAKING, "hosts_worker.py"]]
                                 if r["rank"] == 0 else [])
        assert r["record"]["moved_bytes"] == r["record"]["lower_bound"] > 0

    # version 2 asked for: its lost rank named on every process
    b = run_version(base, 2, tmp_path)
    errs = {tuple(r["error"]) for r in b}
    assert len(errs) == 1, errs
    kind, msg = errs.pop()
    assert kind == "NotFoundError" and "the shards of 1 saved rank (3) are on no host" in msg, msg


def run_version(base, version, tmp):
    """A load of @p version on h0, h0, h1, h2 (hosts_worker's load with the
    version in the environment)."""
    os.environ["PTC_TEST_LOAD_VERSION"] = str(version)
    try:
        return run("load", base, "dp=2,tp=2", ["h0", "h0", "h1", "h2"], tmp, "v%d" % version)
    finally:
        del os.environ["PTC_TEST_LOAD_VERSION"]


def test_explicit_layout_with_a_fresh_host(tmp_path):
    """DTensors saved without config= (an explicit layout, "explicit:4") by
    processes on hosts h0, h0, h1, h1: version 1 with one replica, version 2
    without, so that each host's part of version 2 holds the shard records
    of its own ranks only. A load with a third, fresh host (an empty store)
    rebuilds version 2's layout from both parts' records, h2 receiving its
    rank's bytes over the network, byte-exact. With h1's store replaced as
    well, version 2 lacks ranks 2 and 3: the load takes version 1 (h0 holds
    h1's replica) with a ptc.PtcWarning, and version 2 asked for names them."""
    base = tmp_path / "disks"
    for h in ("h0", "h1", "h2"):
        ptc.Store(base / h, create=True).close()
    saved = run("xsave", base, "-", ["h0", "h0", "h1", "h1"], tmp_path, "xs", replicas="1,0")
    assert [r["versions"] for r in saved] == [[1, 2]] * 4
    assert ptc.read_record(base / "h0")["config"] == "explicit:4"

    def check(res, version):
        for r in res:
            assert "error" not in r and r["mismatch"] == [] and r["tensors"] > 0, r
            assert r["record"]["version"] == version and r["record"]["step"] == 5, r
            assert r["record"]["config"] == "explicit:4" and r["record"]["hosts"] == 3
            assert r["record"]["moved_bytes"] == r["record"]["lower_bound"] > 0

    a = [r["loads"][0] for r in run("xload", base, "-", ["h0", "h0", "h1", "h2"], tmp_path, "xa")]
    check(a, 2)
    assert [r["warnings"] for r in a] == [[]] * 4
    with ptc.Store(base / "h2") as st:
        assert st.versions() == []

    # h1 replaced: the default load, then version 2 asked for
    shutil.rmtree(base / "h1")
    ptc.Store(base / "h1", create=True).close()
    os.environ["PTC_TEST_LOAD_VERSION"] = "0,2"
    try:
        b = run("xload", base, "-", ["h0", "h0", "h1", "h2"], tmp_path, "xb")
    finally:
        del os.environ["PTC_TEST_LOAD_VERSION"]
    check([r["loads"][0] for r in b], 1)
    assert [r["loads"][0]["warnings"] for r in b] == [
        [["PtcWarning", "version 2 has no copy of 2 saved ranks on the hosts present; taking "
          "version 1, the newest one they hold whole", "hosts_worker.py"]], [], [], []]
    errs = {tuple(r["loads"][1]["error"]) for r in b}
    assert len(errs) == 1, errs
    kind, msg = errs.pop()
    assert kind == "NotFoundError", msg
    assert "version 2: the shards of 2 saved ranks (2, 3) are on no host present" in msg, msg
