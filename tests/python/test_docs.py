# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""Every ```python block of docs/python.md runs, in order, in an empty folder;
the ```python torchrun block (the FSDP2 x TP job with async_save) runs on
four gloo processes, as torchrun would start them (slow tier)."""

import contextlib
import io
import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import SRC


def blocks():
    text = open(os.path.join(SRC, "docs", "python.md")).read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_docs_examples_run(tmp_path, monkeypatch):
    code = blocks()
    assert len(code) >= 12
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__docs__"}
    out = io.StringIO()
    for i, block in enumerate(code):
        with contextlib.redirect_stdout(out):
            try:
                exec(compile(block, "docs/python.md block %d" % (i + 1), "exec"), ns)
            except Exception as e:
                pytest.fail("block %d failed: %r\n%s" % (i + 1, e, block))
    text = out.getvalue()
    # the figures the comments promise
    assert "(16, 32) (16, 0) (32, 32)" in text and "(30, 45)" in text
    assert "'position': 256" in text and "256 16" in text
    assert "320\n320\n" in text
    assert "1 dp=1,tp=2,pp=1\n1 5 dp=1,tp=2,pp=1 2.25 {'data': '{\"position\": 40}'}\n" in text
    assert ("local shape [49, 32], but the layout of dp=1,tp=2,pp=1 gives [50, 32]\n"
            "tensor 'lm_head.weight' on rank 0 has dtype F16; version 1 has F32\n[1]\n") in text
    assert "1\nexplicit:1\ntensor([[ 8.,  9., 10., 11.]])\n" in text
    ns["st"].close()


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


@pytest.mark.slow  # four processes for ~30 s on two cores; test_dtensor covers its paths
def test_docs_torchrun_example_runs(tmp_path):
    pytest.importorskip("torch.distributed.fsdp")
    text = open(os.path.join(SRC, "docs", "python.md")).read()
    (code,) = re.findall(r"```python torchrun\n(.*?)```", text, re.S)
    script = tmp_path / "train.py"
    script.write_text(code)
    env = dict(os.environ, WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "ckpt")],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(4)]
    try:
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * 4, outs
    lines = outs[0].splitlines()
    assert lines[0] == "saved versions 1..3, configuration explicit:4", outs[0]
    m = re.fullmatch(r"resumed at step 4 on dp=4: losses (\S+) (\S+), uninterrupted (\S+) (\S+) "
                     r"\(differ by (\S+)\)", lines[1])
    assert m and m.group(1, 2) == m.group(3, 4) and float(m.group(5)) <= 1e-5, lines
    import ptc
    with ptc.Store(tmp_path / "ckpt") as st:
        assert [(v["version"], v["config"]) for v in st.versions()] == \
            [(1, "explicit:4"), (2, "explicit:4"), (3, "explicit:4")]
        assert [ptc.read_record(tmp_path / "ckpt", v)["step"] for v in (1, 2, 3)] == [2, 4, 6]
        st.verify(all=True)
