# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""StepDataset: this rank's records step by step from the step files, with a
position that carries a job across a change of dp degree and global batch so
every sample of the epoch is consumed once — and `ptc dataset audit` agrees,
also when DataLoader workers read ahead of the loop."""

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import ptc
import ptc.torch
import ranks as rank_procs
from conftest import PTC, fuse_available

N = 203      # records, so batches and dp parts are uneven


def decode(rec):
    return int(bytes(rec).split(b"-")[1])


@pytest.fixture
def store(tmp_path):
    (tmp_path / "lines.txt").write_text("".join("rec-%d\n" % i for i in range(N)))
    st = ptc.Store(tmp_path / "st", create=True)
    st.ingest("corpus", "lines", [tmp_path / "lines.txt"])
    yield st
    st.close()


def ranks(src, dp, batch, state=None, **kw):
    out = []
    for r in range(dp):
        ds = ptc.torch.StepDataset(src, "corpus", seed=11, epoch=0, batch=batch, dp=dp,
                                   rank=r, decode=decode, **kw)
        if state is not None:
            ds.load_state_dict(state)
        out.append(ds)
    return out


def run_steps(iters, nsteps=None):
    """Take nsteps steps (all if None) from every rank's iterator in lockstep."""
    seen = []
    k = 0
    for parts in zip(*iters):
        for p in parts:
            seen += p
        k += 1
        if nsteps is not None and k == nsteps:
            return seen
    for it in iters:       # every rank ends its epoch at the same step
        assert next(it, None) is None
    return seen


def test_records_are_the_epoch_order(store):
    (ds,) = ranks(store, 1, 10)
    seen = run_steps([iter(ds)])
    assert sorted(seen) == list(range(N)) and seen != list(range(N))
    assert ds.ids(0).tolist() == seen[:10]
    assert store.audit("corpus", 11, 0) == {"samples": N, "once": N, "repeated": 0,
                                            "missing": 0}


@pytest.mark.parametrize("workers", [0, 2])
def test_exactly_once_across_a_dp_and_batch_change(store, workers):
    first = ranks(store, 4, 12)
    seen = run_steps([iter(d.loader(num_workers=workers)) if workers else iter(d)
                      for d in first], nsteps=5)
    state = first[0].state_dict()
    assert state["position"] == 60
    assert {json.dumps(d.state_dict(), sort_keys=True) for d in first} == \
        {json.dumps(state, sort_keys=True)}
    mid = store.audit("corpus", 11, 0)
    assert mid["once"] == 60 and mid["repeated"] == 0
    # resumed with dp=3 and a global batch of 9 (JSON on the way: plain data)
    state = json.loads(json.dumps(state))
    second = ranks(store, 3, 9, state)
    seen += run_steps([iter(d.loader(num_workers=workers)) if workers else iter(d)
                       for d in second])
    assert sorted(seen) == list(range(N))
    assert store.audit("corpus", 11, 0) == {"samples": N, "once": N, "repeated": 0,
                                            "missing": 0}


class CountingDecode:
    """decode, counting the records decoded in every process (the workers'
    reads: a step's records are decoded right after its read is counted)."""

    def __init__(self):
        self.n = multiprocessing.Value("i", 0)

    def __call__(self, rec):
        with self.n.get_lock():
            self.n.value += 1
        return decode(rec)


def test_prefetched_steps_are_not_counted(store):
    """Workers read ahead; the job stops after 3 steps. Counting on commit gives
    an audit that agrees with consumption; counting reads does not."""
    for count, seed in (("commit", 11), ("read", 12)):
        dec = CountingDecode()
        parts = [ptc.torch.StepDataset(store, "corpus", seed=seed, epoch=0, batch=10, dp=2,
                                       rank=r, decode=dec, count=count) for r in range(2)]
        loaders = [iter(p.loader(num_workers=2, prefetch_factor=4)) for p in parts]
        seen = run_steps(loaders, nsteps=3)
        # the workers have read ahead: a step more than the 3 x 10 records taken
        deadline = time.monotonic() + 60
        while dec.n.value < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert dec.n.value >= 40, "the workers did not read ahead"
        state = parts[0].state_dict()
        for p in parts[1:]:
            p.state_dict()
        del loaders                      # the job stops; workers go away
        for p in parts:
            p.close()
        assert state["position"] == 30
        again = [ptc.torch.StepDataset(store, "corpus", seed=seed, epoch=0, batch=7, dp=3,
                                       rank=r, decode=decode, count=count) for r in range(3)]
        for p in again:
            p.load_state_dict(state)
        seen += run_steps([iter(p.loader(num_workers=2)) for p in again])
        for p in again:
            p.close()
        assert sorted(seen) == list(range(N))       # consumed once either way
        audit = store.audit("corpus", seed, 0)
        if count == "commit":
            assert audit == {"samples": N, "once": N, "repeated": 0, "missing": 0}
        else:
            assert audit["repeated"] > 0 and audit["missing"] == 0   # served != consumed


def test_position_past_the_end_is_refused(store):
    """Issue 33 item 9: a state whose position is past the dataset's N samples
    is refused; N itself (the end of the epoch) leaves no step. (A start
    given directly may lie past the end: no step, test_through_a_mount.)"""
    (ds,) = ranks(store, 1, 10)
    st = ds.state_dict()
    for pos in (N + 1, 2**63):
        with pytest.raises(ptc.InvalidError, match="position %d is past the end of dataset "
                           "'corpus' \\(%d samples\\)" % (pos, N)):
            ds.load_state_dict(dict(st, position=pos))
    assert ds.position == 0          # the refused state changed nothing
    ds.load_state_dict(dict(st, position=N))
    assert ds.steps() == 0 and list(ds) == []


def test_state_of_another_epoch_is_refused(store):
    (ds,) = ranks(store, 1, 10)
    st = ds.state_dict()
    other = ptc.torch.StepDataset(store, "corpus", seed=12, epoch=0, batch=10)
    with pytest.raises(ptc.InvalidError, match="seed"):
        other.load_state_dict(st)
    with pytest.raises(ptc.InvalidError):
        ptc.torch.StepDataset(store, "corpus", seed=1, epoch=0, batch=10, dp=2, rank=2)
    with pytest.raises(ptc.NotFoundError, match="no dataset 'nope'"):
        ptc.torch.StepDataset(store, "nope", seed=1, epoch=0, batch=10)
    with pytest.raises(ptc.NotFoundError):
        ptc.torch.StepDataset("/nonexistent", "corpus", seed=1, epoch=0, batch=10)


RANK = textwrap.dedent("""
    import json, sys
    import ptc, ptc.torch
    src, dp, rank, batch, stop, state, out = sys.argv[1:8]
    ds = ptc.torch.StepDataset(src, "corpus", seed=11, epoch=0, batch=int(batch),
                               dp=int(dp), rank=int(rank), decode=lambda r: bytes(r).decode())
    if state != "-":
        ds.load_state_dict(json.load(open(state)))
    seen = []
    for k, recs in enumerate(ds.loader(num_workers=2)):
        seen += recs
        if k + 1 == int(stop):
            break
    st = ds.state_dict()
    json.dump({"seen": seen, "state": st}, open(out, "w"))
""")


def launch(src, dp, batch, stop, state, tmp):
    script = os.path.join(tmp, "rank.py")
    with open(script, "w") as f:
        f.write(RANK)
    procs = []
    for r in range(dp):
        out = os.path.join(tmp, "dp%d-r%d.json" % (dp, r))
        procs.append((rank_procs.Rank(script, [src, dp, r, batch, stop, state, out], dict(os.environ),
                                 out + ".log"), out))
    rank_procs.wait_all([p for p, _ in procs], timeout=300)
    return [json.load(open(out)) for _, out in procs]


def test_rank_processes_resume_with_another_dp(store, tmp_path):
    """Real rank processes (each with 2 DataLoader workers) stop at step 4 and
    save their position; 3 new ones continue with another global batch."""
    src = store.path
    first = launch(src, 2, 16, 4, "-", str(tmp_path))
    state = first[0]["state"]
    assert all(r["state"] == state for r in first) and state["position"] == 64
    (tmp_path / "state.json").write_text(json.dumps(state))
    second = launch(src, 3, 12, 10 ** 6, str(tmp_path / "state.json"), str(tmp_path))
    seen = [int(x.split("-")[1]) for r in first + second for x in r["seen"]]
    assert sorted(seen) == list(range(N))
    assert store.audit("corpus", 11, 0) == {"samples": N, "once": N, "repeated": 0,
                                            "missing": 0}


@pytest.mark.skipif(not fuse_available(), reason="needs /dev/fuse, fusermount3 and ptc")
def test_through_a_mount(store, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run([PTC, "mount", "--store", store.path, str(mnt)], check=True, timeout=60)
    try:
        first = ranks(str(mnt), 2, 10)
        assert first[0].mode == "mount" and first[0].count == "read"
        seen = run_steps([iter(d) for d in first], nsteps=7)
        state = first[0].state_dict()
        # the same bytes as the store path gives
        direct = ptc.torch.StepDataset(store, "corpus", seed=11, epoch=0, batch=10, dp=2,
                                       rank=1, count=False)
        via = ptc.torch.StepDataset(str(mnt), "corpus", seed=11, epoch=0, batch=10, dp=2,
                                    rank=1, start=500)
        assert via.steps() == 0
        assert [bytes(r) for r in direct.read_step(3)] == \
            [("rec-%d" % i).encode() for i in direct.ids(3)]
        second = ranks(str(mnt), 3, 8, state)
        seen += run_steps([iter(d) for d in second])
        with pytest.raises(ptc.UnsupportedError):
            ptc.torch.StepDataset(str(mnt), "corpus", seed=11, epoch=0, batch=10,
                                  count="commit")
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True, timeout=60)
    assert sorted(seen) == list(range(N))
    # the mount process saves its counts as it exits, after the unmount returns
    want = {"samples": N, "once": N, "repeated": 0, "missing": 0}
    deadline = time.monotonic() + 60
    while store.audit("corpus", 11, 0) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.audit("corpus", 11, 0) == want


@pytest.mark.parametrize("policy,per_rank,dropped", [
    ("equal", lambda k: 3 if k < 20 else 1, 20),        # 203 = 20*10 + 3; 10 = 3*3 + 1
    ("drop-last", None, 3),
    ("drop-last+equal", lambda k: 3, 23),
])
def test_policy(store, policy, per_rank, dropped):
    """policy= reads the step files of dp-D/policy-P: equal parts per rank,
    no partial last step under drop-last, and the audit under the policy
    reports the records it left out as dropped, none missing."""
    parts = ranks(store, 3, 10, policy=policy)
    assert parts[0]._prefix().endswith("/dp-3/policy-%s/rank-0" % policy)
    steps = parts[0].steps()
    assert steps == (20 if "drop-last" in policy else 21)
    for k in range(steps):
        lens = [len(p.read_step(k)) for p in parts]
        if per_rank is not None:
            assert lens == [per_rank(k)] * 3, (k, lens)
        else:
            assert lens == [4, 4, 2], (k, lens)
    # read through the iterator (counted at commit), one epoch per policy
    seed = {"equal": 21, "drop-last": 22, "drop-last+equal": 23}[policy]
    parts = [ptc.torch.StepDataset(store, "corpus", seed=seed, epoch=0, batch=10, dp=3, rank=r,
                                   decode=decode, policy=policy) for r in range(3)]
    seen = run_steps([iter(p) for p in parts])
    assert len(seen) == len(set(seen)) == N - dropped
    assert store.audit("corpus", seed, 0, policy=policy, batch=10, dp=3) == {
        "samples": N, "once": N - dropped, "repeated": 0, "missing": 0, "dropped": dropped}
    assert store.audit("corpus", seed, 0) == {
        "samples": N, "once": N - dropped, "repeated": 0, "missing": dropped}


def test_policy_errors(store):
    for bad in ("sometimes", "equal+drop-last", ""):
        with pytest.raises(ptc.InvalidError):
            ptc.torch.StepDataset(store, "corpus", seed=1, epoch=0, batch=10, policy=bad)
    with pytest.raises(ptc.InvalidError):
        store.audit("corpus", 1, 0, policy="equal", batch=10)
    with pytest.raises(ptc.InvalidError):
        store.audit("corpus", 1, 0, policy="bogus", batch=10, dp=3)
    # policy "none" is the default rule
    a = ptc.torch.StepDataset(store, "corpus", seed=1, epoch=0, batch=10, dp=3, policy="none")
    b = ptc.torch.StepDataset(store, "corpus", seed=1, epoch=0, batch=10, dp=3)
    assert a._prefix() == b._prefix() and a.steps() == b.steps() == 21
