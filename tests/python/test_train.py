# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""The issue's training test: four gloo rank processes train a small
Llama-style model with torch tensor parallelism (DTensor parallelize_module,
column/row-parallel plans over the tp dimension of a dp x tp mesh) x data
parallelism and AdamW on a stored token dataset; ptc.save at step 5. Then
two processes under another tp/dp load that version (ptc.load,
StepDataset.load_state_dict) and continue: their losses stay within 1e-5
(relative) of the run that went on unchanged, and every sample of the epoch is
consumed once (the loop's ids and `ptc dataset audit` agree). On the way, a
wrong tensor on one process makes every process raise the same error and
write nothing."""

import os
import socket

import numpy as np
import pytest

import ptc
import ranks
from conftest import wait_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
N = 80            # samples: windows of 9 tokens; global batch 8 -> 10 steps
STEPS, SAVE_AT = 10, 5


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(world, out, *args):
    """Start @p world rank processes of tp_train.py; returns them (not waited)."""
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    return ranks.start(os.path.join(HERE, "tp_train.py"), ["--out", out, *args], world, env, out)


def finish(procs, out):
    return wait_ranks(procs, out, timeout=240)


@pytest.fixture
def token_store(tmp_path):
    rng = np.random.default_rng(7)
    # a learnable sequence: mostly next = 5 * cur + 3 (mod 64), some noise
    toks = np.empty(N * 9, dtype="<u2")
    toks[0] = 1
    for i in range(1, len(toks)):
        toks[i] = (5 * int(toks[i - 1]) + 3) % 64 if rng.random() < 0.9 else rng.integers(64)
    (tmp_path / "tokens.bin").write_bytes(toks.tobytes())
    path = tmp_path / "st"
    with ptc.Store(path, create=True) as st:
        st.ingest("tokens", "tokens:u16:9", [tmp_path / "tokens.bin"])
    return path


def close(a, b):
    return abs(a - b) <= 1e-5 * abs(b)


def test_tp_dp_training_resumes_under_other_configurations(tmp_path, token_store):
    resumed = {"dp1-tp2": tmp_path / "st-a", "dp2-tp1": tmp_path / "st-b"}
    first = finish(start(4, tmp_path / "run", "--store", token_store, "--dp", 2, "--tp", 2,
                         "--steps", STEPS, "--save-at", SAVE_AT,
                         *sum((["--copy-to", p] for p in resumed.values()), [])),
                   tmp_path / "run")
    losses = first[0]["losses"]
    assert sorted(map(int, losses)) == list(range(1, STEPS + 1))
    assert all(r["losses"] == losses for r in first)
    assert losses[str(STEPS)] < 0.7 * losses["1"]            # it learns
    # rank 1's wrong shape: every process raised the same error, nothing written
    checks = [r["checks"]["save_bad_shape"] for r in first]
    assert checks == [checks[0]] * 4
    assert checks[0]["class"] == "InvalidError"
    assert checks[0]["message"] == (
        "checkpoint save failed on process 1: tensor 'model.layers.1.self_attn.k_proj.weight' "
        "on rank 1: local shape [3, 3], but the layout of dp=2,tp=2,pp=1 gives [8, 32]")
    assert all(r["versions_after_bad"] == [] for r in first)
    assert {r["saved"] for r in first} == {1}

    runs = {}
    procs = {}
    for name, path in resumed.items():
        dp, tp = (int(x[2:]) for x in name.split("-"))
        procs[name] = start(2, tmp_path / name, "--store", path, "--dp", dp, "--tp", tp,
                            "--steps", STEPS, "--resume")
    for name in resumed:
        runs[name] = finish(procs[name], tmp_path / name)

    with ptc.Store(token_store) as st:
        v = st.versions()
        assert [x["version"] for x in v] == [1] and v[0]["step"] == str(SAVE_AT)
        assert v[0]["config"] == "dp=2,tp=2,pp=1"
        rec = ptc.read_record(st)
        assert rec["step"] == SAVE_AT and rec["global_batch"] == 8
        assert rec["sample"] == SAVE_AT * 8 and rec["dataset"] == "tokens"
        assert close(rec["loss"], losses[str(SAVE_AT)])
        names = [t[0] for t in st.tensors()]
        assert "model.layers.1.mlp.down_proj.weight.exp_avg_sq" in names
        assert len(names) == 3 * (2 + 9 * 2 + 1)
        assert st.audit("tokens", 3, 0) == {"samples": N, "once": N, "repeated": 0,
                                            "missing": 0}
    for name, ranks in runs.items():
        for r in ranks:
            assert r["loaded"] == {"version": 1, "step": SAVE_AT, "config": "dp=2,tp=2,pp=1",
                                   "loss": rec["loss"]}
            assert sorted(map(int, r["losses"])) == list(range(SAVE_AT + 1, STEPS + 1))
            for k, loss in r["losses"].items():
                assert close(loss, losses[k]), (name, k, loss, losses[k])
        # errors agreed on every process
        c = [r["checks"] for r in ranks]
        assert c[0] == c[1]
        assert c[0]["load_missing_version"]["class"] == "NotFoundError"
        assert c[0]["load_missing_version"]["message"].startswith(
            "checkpoint load failed on process 0: version 99")
        assert c[0]["load_bad_dtype"] == {
            "class": "InvalidError",
            "message": "checkpoint load failed on process 1: tensor "
                       "'model.layers.0.mlp.up_proj.weight' on rank 1 has dtype F64; "
                       "version 1 has F32"}
        # every sample of the epoch once: the loops' ids and the audit
        seen = [i for r in first for k, ids in r["seen"].items() if int(k) <= SAVE_AT
                for i in ids]
        seen += [i for r in ranks for ids in r["seen"].values() for i in ids]
        assert sorted(seen) == list(range(N))
        with ptc.Store(resumed[name]) as st:
            assert st.audit("tokens", 3, 0) == {"samples": N, "once": N, "repeated": 0,
                                                "missing": 0}
    assert sorted(i for r in first for ids in r["seen"].values() for i in ids) == \
        list(range(N))
