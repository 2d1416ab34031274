"""Every ```python block of docs/python.md runs, in order, in an empty folder."""

import contextlib
import io
import os
import re

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
