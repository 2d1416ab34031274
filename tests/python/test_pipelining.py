# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""ptc.pipelining: PTC's schedules in torch.distributed.pipelining and torch's
schedules in PTC (docs/pipelines.md).

Fast tier: the Python API; torch's own orders (the installed torch)
imported, validated and simulated; the latency grid of zb-v against torch's
ZBV and DualPipeV; a small transformer cut into stages run by torch's
runtime over gloo in 4 processes under every PTC kind torch can express,
gradients and losses against the unpipelined model; torch's orders and
PTC's new kinds run by `ptc train` under mpirun, losses and parameters
against PTC's 1f1b. The slow tier (marker `slow`) repeats the gradient check
over more micro-batches, steps, link latencies and both action-list forms."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import ptc
from conftest import PTC, SRC, run_ranks

torch = pytest.importorskip("torch")
S = pytest.importorskip("torch.distributed.pipelining.schedules")


from pipelines_table import tables  # noqa: E402  (after torch: see the module)
from pipelines_table import torch_order as _torch_order  # noqa: E402


def torch_order(cls, P, M, V=2):
    """torch's pipeline_order of schedule class `cls` (dict rank -> actions)."""
    return _torch_order(cls.__name__, P, M, V)


TORCH_CLASSES = ["ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
                 "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV"]


# ---- the API -------------------------------------------------------------------------

def test_import_ptc_does_not_import_torch():
    code = ("import sys, ptc; s = ptc.Schedule.generate('zb-v', 4, 8); "
            "print(s.stage_indices(1), 'torch' in sys.modules)")
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert out.strip() == "[1, 6] False"


def test_schedule_api():
    s = ptc.Schedule.generate("zb-interleaved", 4, 8, chunks=3, cost_w=1)
    assert (s.ranks, s.stages, s.pipes, s.microbatches, s.kind) == (4, 12, 1, 8,
                                                                     "zb-interleaved")
    assert s.stage_indices(2) == [2, 6, 10]
    acts = s.actions()
    assert sorted(acts) == [0, 1, 2, 3]
    assert acts[0][0] == "0F0" and sum(len(a) for a in acts.values()) == 3 * 8 * 12
    comms = s.actions(comms=True)
    assert any(a.startswith("0SEND_F") for a in comms[0])
    # text of PTC and of torch read back to the same figures
    figs = s.simulate(cost_w=1)
    again = ptc.Schedule.parse(s.text()).simulate(cost_w=1)
    back = ptc.Schedule.from_torch(s.to_torch())
    back.validate()
    assert figs == again == back.simulate(cost_w=1)
    assert back.kind == "torch" and back.skipped_actions == 0
    assert ptc.Schedule.from_torch(s.to_torch(comms=True)).skipped_actions > 0
    with pytest.raises(ptc.InvalidError, match="unknown schedule kind 'zb-q'"):
        ptc.Schedule.generate("zb-q", 4, 8)
    with pytest.raises(ptc.InvalidError, match="dualpipev needs microbatches"):
        ptc.Schedule.generate("dualpipev", 4, 7)
    with pytest.raises(ptc.UnsupportedError, match="2 pipelines \\(chimera\\)"):
        ptc.Schedule.generate("chimera", 4, 8).to_torch()
    with pytest.raises(ptc.FormatError, match="cell 1 '0Q0': unknown action type"):
        ptc.Schedule.from_torch("0Q0\n")
    k = ptc.Schedule.generate("kfkb", 4, 16, adaptive=True, latency=2)
    assert k.kind == "kfkb" and k.simulate(latency=2)["makespan"] < \
        ptc.Schedule.generate("1f1b", 4, 16).simulate(latency=2)["makespan"]


# ---- torch's orders in PTC -------------------------------------------------------------

@pytest.mark.parametrize("name", TORCH_CLASSES)
def test_torch_orders_validated_and_simulated(name):
    cls = getattr(S, name)
    order = torch_order(cls, 4, 8)
    s = ptc.Schedule.from_torch(order)
    assert (s.ranks, s.microbatches) == (4, 8 if name != "Schedule1F1B" else 9)
    if name == "Schedule1F1B":
        # torch's own order: its last rank starts at F1 and runs an F8
        with pytest.raises(ptc.InvalidError, match="rank 3 step 1 \\(B0\\): backward before "
                                                   "the forward"):
            s.validate()
        with pytest.raises(ptc.FormatError, match="rank 3 runs micro-batch 8, out of range"):
            ptc.Schedule.from_torch(order, microbatches=8)
        return
    s.validate()
    f = s.simulate(cost_w=1)
    assert f["makespan"] > 24    # 8 micro-batches of F+B = 3 on every rank
    if name == "ScheduleDualPipeV":
        # PTC's dualpipev is DeepSeek's order, as torch builds it
        mine = ptc.Schedule.generate("dualpipev", 4, 8, cost_w=1).actions()
        flat = {r: [x for a in order[r] if a is not None
                    for x in (a.sub_actions or (a,))] for r in order}
        assert mine == {r: [str(a) for a in flat[r]] for r in flat}


def _grid():
    return [(P, M, L) for P in (4, 8) for M in (8, 16, 32) for L in (0, 0.25, 0.5, 1, 2)]


def test_zero_bubble_grid_against_torch():
    """zb-v planned for the links: makespan <= torch's ZBV and DualPipeV orders,
    peak per rank <= ZBV's; dualpipev <= DualPipeV; zb-interleaved <= torch's
    interleaved zero bubble (F=1, B=2, W=1: I = W)."""
    rows = []
    for P, M, L in _grid():
        zbv = ptc.Schedule.from_torch(torch_order(S.ScheduleZBVZeroBubble, P, M))
        izb = ptc.Schedule.from_torch(torch_order(S.ScheduleInterleavedZeroBubble, P, M))
        tz, ti = zbv.simulate(cost_w=1, latency=L), izb.simulate(cost_w=1, latency=L)
        bound = tz["makespan"]
        mine = ptc.Schedule.generate("zb-v", P, M, cost_w=1, latency=L).simulate(cost_w=1,
                                                                                  latency=L)
        assert all(a <= b for a, b in zip(mine["peak_activations"], tz["peak_activations"]))
        if M >= 2 * P:
            dpv = ptc.Schedule.from_torch(torch_order(S.ScheduleDualPipeV, P, M))
            td = dpv.simulate(cost_w=1, latency=L)
            bound = min(bound, td["makespan"])
            md = ptc.Schedule.generate("dualpipev", P, M, cost_w=1, latency=L)
            fd = md.simulate(cost_w=1, latency=L)
            assert fd["makespan"] <= td["makespan"] + 1e-9, (P, M, L)
            assert all(a <= b for a, b in zip(fd["peak_activations"], td["peak_activations"]))
        assert mine["makespan"] <= bound + 1e-9, (P, M, L, mine["makespan"], bound)
        mi = ptc.Schedule.generate("zb-interleaved", P, M, chunks=2, cost_w=1, latency=L)
        fi = mi.simulate(cost_w=1, latency=L)
        assert fi["makespan"] <= ti["makespan"] + 1e-9, (P, M, L)
        assert all(a <= b for a, b in zip(fi["peak_activations"], ti["peak_activations"]))
        rows.append((P, M, L, mine["makespan"], bound))
    assert len(rows) == 30
    # the figure of the report: P=8, M=16 at latency one forward
    assert [r[3:] for r in rows if r[:3] == (8, 16, 1)] == [(87.5, 89.5)]


# ---- PTC's schedules in torch: gradients against the unpipelined model -----------------

def _gloo(jobs, tmp_path, world=4, timeout=600):
    out = tmp_path / "out"
    return run_ranks("pipelining_worker.py", world, [tmp_path / "init", out, json.dumps(jobs)],
                     out, timeout=timeout)


def _check(results, jobs):
    for r, res in enumerate(results):
        assert len(res) == len(jobs)
        for got in res:
            assert "error" not in got, (r, got["job"], got.get("trace"))
            assert got["grad_rel"] <= 1e-6, (r, got)
            assert got["loss_rel"] <= 1e-6, (r, got)
    for i, job in enumerate(jobs):
        # every stage on exactly one rank; the last stage's rank saw losses
        held = sorted(s for res in results for s in res[i]["stages"])
        assert held == list(range(len(held))), job
        assert sum(res[i]["has_losses"] for res in results) == 1


FAST_JOBS = [
    {"kind": "gpipe", "M": 4}, {"kind": "1f1b", "M": 4},
    {"kind": "interleaved", "M": 4, "chunks": 2}, {"kind": "kfkb", "M": 4, "k": 2},
    {"kind": "kfkb", "M": 4, "adaptive": True, "latency": 2},
    {"kind": "zb-h1", "M": 4}, {"kind": "zb-h2", "M": 4}, {"kind": "zb-v", "M": 4},
    {"kind": "zb-interleaved", "M": 6, "chunks": 3}, {"kind": "looped-bfs", "M": 4, "chunks": 2},
    {"kind": "dualpipev", "M": 8, "latency": 1, "comms": True},
]


def test_ptc_schedules_in_torch_gradients(tmp_path):
    _check(_gloo(FAST_JOBS, tmp_path), FAST_JOBS)


@pytest.mark.slow
def test_ptc_schedules_in_torch_gradients_grid(tmp_path):
    jobs = []
    for M in (8, 16):
        for lat in (0, 0.5, 2):
            for comms in (False, True):
                for kind, extra in (("gpipe", {}), ("1f1b", {}), ("interleaved", {"chunks": 2}),
                                    ("kfkb", {"k": 3}), ("kfkb", {"adaptive": True}),
                                    ("zb-h1", {}), ("zb-h2", {}), ("zb-v", {}),
                                    ("zb-interleaved", {"chunks": 2}),
                                    ("zb-interleaved", {"chunks": 3}),
                                    ("looped-bfs", {"chunks": 2}), ("dualpipev", {})):
                    jobs.append(dict(kind=kind, M=M, latency=lat, comms=comms, steps=2,
                                     **extra))
    _check(_gloo(jobs, tmp_path, timeout=3000), jobs)


# ---- torch's schedules and PTC's new kinds under `ptc train` ----------------------------

def _mpirun():
    m = shutil.which("mpirun")
    if not m or not os.access(PTC, os.X_OK):
        pytest.skip("needs mpirun and the ptc command")
    return [m, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def _params(path):
    from safetensors.numpy import load_file
    return load_file(str(path))


def test_torch_schedules_run_under_ptc_train(tmp_path):
    mpirun = _mpirun()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_mpi_yield_when_idle="1")
    common = ["--model", "mlp:layers=8,hidden=8,vocab=16,tokens=4", "--seed", "7", "--steps",
              "3", "--microbatches", "8", "--timeout", "120"]

    def train(schedule, name, P=4):
        store, out = tmp_path / (name + ".store"), tmp_path / (name + ".safetensors")
        cmd = ([PTC] if P == 1 else mpirun + ["-np", str(P), PTC]) + \
            ["train", "--config", "pp=%d" % P, "--schedule", schedule, *common, "--store",
             str(store), "--save-every", "0"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, (name, r.stderr[-2000:])
        losses = [line.split()[3] for line in r.stdout.splitlines() if line.startswith("step ")]
        assert len(losses) == 3, r.stdout
        e = subprocess.run([PTC, "export", "--store", str(store), "--out", str(out),
                            "--params-only"], capture_output=True, text=True, timeout=300)
        assert e.returncode == 0, (name, e.stderr)
        return losses, out

    ref_losses, ref = train("1f1b", "ref", P=1)
    assert ref_losses[0] != ref_losses[2]     # training moved
    runs = {}
    for name in TORCH_CLASSES:
        if name == "Schedule1F1B":
            continue                           # rejected: see above
        s = ptc.Schedule.from_torch(torch_order(getattr(S, name), 4, 8))
        s.validate()
        path = tmp_path / (name + ".txt")
        path.write_text(s.text())
        runs[name] = train(str(path), name)
    for kind in ("zb-h2", "zb-interleaved", "looped-bfs", "dualpipev", "dualpipe"):
        runs[kind] = train(kind, kind)
    ref_p = _params(ref)
    close_only = {"ScheduleLoopedBFS", "dualpipe"}
    for name, (losses, out) in runs.items():
        if name in close_only:
            # torch's LoopedBFS runs each chunk's backwards in reverse
            # micro-batch order and dualpipe keeps two replicas of every
            # stage: the gradient sums run in another order
            got = _params(out)
            for k, v in ref_p.items():
                d = abs(got[k].astype("float64") - v).max()
                assert d <= 1e-6 * max(abs(v).max(), 1e-30), (name, k, d)
            for a, b in zip(losses, ref_losses):
                assert abs(float(a) - float(b)) <= 1e-6 * abs(float(b)), (name, losses)
        else:
            assert losses == ref_losses, name
            # every parameter byte for byte (the files' metadata holds each
            # run's training record, schedule included)
            got = _params(out)
            assert sorted(got) == sorted(ref_p), name
            for k, v in ref_p.items():
                assert got[k].dtype == v.dtype and got[k].tobytes() == v.tobytes(), (name, k)


@pytest.mark.slow
def test_docs_table_is_current():
    """docs/pipelines.md holds what pipelines_table.py prints now."""
    text = open(os.path.join(SRC, "docs", "pipelines.md")).read()
    begin, end = "<!-- pipelines-table: begin -->\n", "<!-- pipelines-table: end -->"
    doc = text[text.index(begin) + len(begin):text.index(end)]
    assert doc == tables().rstrip() + "\n"
