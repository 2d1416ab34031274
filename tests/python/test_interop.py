# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""The Python package and `ptc train` run the same checkpoint protocol
(libptc's ptc_ckpt_save_*_over / _load_*_over) and read each other's saves
under other configurations:

1. `ptc train` (2 MPI processes, pp=2) trains the demo model two steps and
   saves version 1;
2. two gloo processes load it with ptc.load under tp=2 and under
   dp=2,pp=2,zero=1 (every byte equals the slice of the stored tensor) and
   save the second as version 2 with version 1's record (ptc.save, two ranks
   per process): every tensor of version 2 equals version 1's byte for byte;
3. `ptc train --resume` under dp=2 continues from version 2 and, in another
   run, from version 1: the same losses to the last digit and the same
   parameters and AdamW moments after two more steps."""

import os
import re
import shutil
import subprocess

import pytest
import torch

import ptc
from conftest import PTC, run_ranks

MODEL = "mlp:layers=4,hidden=8,vocab=16,tokens=4"
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")


def train(np, store, config, *args):
    """`ptc train` under mpirun; returns {step: loss text} of the steps it ran."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
           str(np), PTC, "train", "--config", config, "--schedule", "1f1b", "--microbatches",
           "4", "--model", MODEL, "--seed", "5", "--store", str(store), "--steps", "2",
           "--save-every", "0", "--timeout", "60", *args]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(re.findall(r"^step (\d+) loss (\S+)", r.stdout, re.M))


def python_save(world, store, load_cfg, save_cfg, tmp):
    out = tmp / "py"
    return run_ranks("interop_worker.py", world,
                     [store, load_cfg, save_cfg, tmp / "py.init", out], out, timeout=120, env=ENV)


def whole(st, version):
    """{name: bytes} of every tensor of a version."""
    return {n: st.read(n, version=version, like="torch").reshape(-1).view(torch.uint8)
            .numpy().tobytes() for n, _, _, _ in st.tensors(version)}


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_python_and_ptc_train_resume_each_other(tmp_path, ptc_bin):
    store = tmp_path / "st"
    first = train(2, store, "dp=1,tp=1,pp=2")
    assert sorted(first) == ["0", "1"]

    got = python_save(2, store, "tp=2", "dp=2,pp=2,zero=1", tmp_path)
    with ptc.Store(store) as st:
        v1 = st.versions()[0]
        for r in got:
            assert r["load_mismatch"] == [] and r["save_mismatch"] == []
            assert r["record"] == {"version": 1, "step": 2, "config": "dp=1,tp=1,pp=2",
                                   "meta": {"data": "synthetic", "lr": "0.00100000005",
                                            "model": MODEL}}
            assert r["saved"] == 2
        # 6 tensors per layer, 4 more, and two AdamW moments of each
        assert sum(r["tensors"] for r in got) > 3 * (6 * 4 + 4)
        v2 = st.versions()[1]
        assert v2["config"] == "dp=2,tp=1,pp=2,zero=1" and v2["step"] == v1["step"] == "2"
        assert whole(st, 2) == whole(st, 1)
        rec1, rec2 = ptc.read_record(st, 1), ptc.read_record(st, 2)
        assert {k: v for k, v in rec2.items() if k not in ("version", "config")} == \
            {k: v for k, v in rec1.items() if k not in ("version", "config")}

    # `ptc train` resumes the Python save exactly as it resumes its own
    from_py = train(2, store, "dp=2,tp=1,pp=1", "--resume", "--version", "2")
    from_c = train(2, store, "dp=2,tp=1,pp=1", "--resume", "--version", "1")
    assert sorted(from_py) == ["2", "3"] and from_py == from_c
    with ptc.Store(store) as st:
        assert [v["version"] for v in st.versions()] == [1, 2, 3, 4]
        assert whole(st, 3) == whole(st, 4) != whole(st, 2)
        assert ptc.read_record(st, 3)["step"] == 4
        st.verify(all=True)
