"""Wrong inputs raise the ptc.Error subclass of the C code with libptc's
one-line message, and leave the store as it was."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import ptc


@pytest.fixture
def model(tmp_path):
    t = {"a.weight": torch.arange(12, dtype=torch.float32).reshape(4, 3),
         "b.weight": torch.ones(5, dtype=torch.bfloat16)}
    path = tmp_path / "m.safetensors"
    save_file(t, str(path))
    return path


RULES = "match * tp=split(0) pp=first\n"


def store_files(path):
    """The pack files of a store and their sizes (LMDB's own files and the
    writer lock file, which holds the pid of its last holder, aside)."""
    out = set()
    for root, _, files in os.walk(path):
        for f in files:
            if not f.endswith(".mdb") and not (root == str(path) and f == "lock"):
                p = os.path.join(root, f)
                out.add((p, os.path.getsize(p)))
    return out


def test_missing_store():
    with pytest.raises(ptc.NotFoundError) as e:
        ptc.Store("/nonexistent/store")
    assert e.value.code == -5 and e.value.name == "PTC_E_NOTFOUND"
    assert "no ptc store at '/nonexistent/store'" in str(e.value)
    assert isinstance(e.value, ptc.Error) and isinstance(e.value, LookupError)


def test_missing_version_and_tensor(tmp_path, model):
    with ptc.Store(tmp_path / "st", create=True) as st:
        with pytest.raises(ptc.NotFoundError, match="store"):
            st.info()                                   # empty store
        st.import_safetensors(model, "tp=2", RULES)
        with pytest.raises(ptc.NotFoundError, match="version 7"):
            st.info(version=7)
        with pytest.raises(ptc.NotFoundError, match="nope"):
            st.read("nope")


def test_bad_config_rules_and_inputs(tmp_path, model):
    with ptc.Store(tmp_path / "st", create=True) as st:
        with pytest.raises(ptc.InvalidError) as e:
            st.import_safetensors(model, "tp=0", RULES)
        assert "tp" in e.value.message
        with pytest.raises(ptc.RuleError, match="a.weight"):
            st.import_safetensors(model, "tp=2", "match b.* tp=split(0) pp=first\n")
        with pytest.raises(ptc.RuleError):
            st.import_safetensors(model, "tp=2", "match * tp=split(4) pp=first\n")
        with pytest.raises(ptc.NotFoundError):
            st.import_safetensors(tmp_path / "missing.safetensors", "tp=2", RULES)
        bad = tmp_path / "bad.safetensors"
        bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
        with pytest.raises(ptc.FormatError) as e:
            st.import_safetensors(bad, "tp=2", RULES)
        assert "bad.safetensors" in e.value.message
        with pytest.raises(ptc.InvalidError, match="codec"):
            st.import_safetensors(model, "tp=2", RULES, compress="lz4")
        assert st.versions() == []
        with pytest.raises(ptc.InvalidError):
            st.export(tmp_path / "x", dtype="I32")


def test_wrong_out_arrays(tmp_path, model):
    with ptc.Store(tmp_path / "st", create=True) as st:
        st.import_safetensors(model, "tp=2", RULES)
        with pytest.raises(ptc.InvalidError, match="shape"):
            st.read("a.weight", out=np.zeros((3, 4), np.float32))
        with pytest.raises(ptc.InvalidError, match="dtype"):
            st.read("a.weight", out=np.zeros((4, 3), np.int32))
        with pytest.raises(ptc.InvalidError, match="dtype F16; expected BF16"):
            st.read("b.weight", out=torch.zeros(5, dtype=torch.float16))
        with pytest.raises(ptc.InvalidError, match="contiguous"):
            st.read("a.weight", out=np.zeros((3, 4), np.float32).T)
        ro = np.zeros((4, 3), np.float32)
        ro.flags.writeable = False
        with pytest.raises(ptc.InvalidError, match="read-only"):
            st.read("a.weight", out=ro)


def test_layout_errors_name_the_tensor():
    with pytest.raises(ptc.RuleError, match="x.weight"):
        ptc.layout({"x.weight": ("F32", (4, 4))}, "tp=2", "llama")
    with pytest.raises(ptc.InvalidError):
        ptc.layout({"x": ("F32", (4,))}, "dp=2,tp=two", "none")
    with pytest.raises(ptc.RangeError):
        ptc.Layout({"x": ("F32", (4,))}, "tp=2", "none").shard("x", 2)


HOLD = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    class Opts(ctypes.Structure):
        _fields_ = [("step", ctypes.c_char_p), ("config", ctypes.c_char_p),
                    ("rules", ctypes.c_char_p), ("parent", ctypes.c_uint64),
                    ("world_size", ctypes.c_uint32), ("codec", ctypes.c_uint),
                    ("level", ctypes.c_int)]
    s, w = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.ptc_store_open(ctypes.byref(s), sys.argv[2].encode(), 0) == 0
    o = Opts(world_size=1)
    assert lib.ptc_store_writer_begin(ctypes.byref(w), s, ctypes.byref(o)) == 0
    print("locked", flush=True)
    sys.stdin.readline()
    lib.ptc_store_writer_destroy(w)
    lib.ptc_store_close(s)
""")


def test_store_locked_by_another_writer(tmp_path, model):
    path = tmp_path / "st"
    with ptc.Store(path, create=True) as st:
        st.import_safetensors(model, "tp=2", RULES)
    before = store_files(path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, ptc.library_path(), str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with ptc.Store(path, lock_timeout=0.1) as st:   # writers wait 0.1 s, then fail
            for op in (lambda: st.import_safetensors(model, "tp=4", RULES),
                       lambda: st.reshard("tp=4"),
                       lambda: st.gc(),
                       lambda: st.ingest("d", "lines", [str(model)])):
                with pytest.raises(ptc.BusyError) as e:
                    op()
                assert e.value.code == -10
                assert ("locked by another process (pid %d); waited 0.1 s" % holder.pid
                        in e.value.message)
            assert [v["version"] for v in st.versions()] == [1]
            assert st.datasets() == []
    finally:
        holder.communicate("\n", timeout=30)
    assert holder.returncode == 0
    assert store_files(path) == before     # nothing written


def test_readonly_store_refuses_writes(tmp_path, model):
    with ptc.Store(tmp_path / "st", create=True) as st:
        st.import_safetensors(model, "tp=2", RULES)
    with ptc.Store(tmp_path / "st", readonly=True) as st:
        with pytest.raises(ptc.InvalidError):
            st.reshard("tp=1")
        assert len(st.versions()) == 1


def test_errors_are_typed_by_code():
    assert ptc.BusyError.code == -10 and issubclass(ptc.BusyError, ptc.Error)
    assert issubclass(ptc.PtcIOError, OSError) and issubclass(ptc.RuleError, ValueError)
    e = ptc._errors.make_error(-99, "odd")
    assert type(e) is ptc.Error and e.code == -99 and str(e) == "odd"


def test_closed_store(tmp_path):
    st = ptc.Store(tmp_path / "st", create=True)
    st.close()
    st.close()
    with pytest.raises(ptc.InvalidError, match="closed"):
        st.versions()


def test_save_checks_local_tensors_against_the_layout(tmp_path):
    """ptc.save refuses a wrong state before writing anything (naming the tensor
    and both shapes); a right one makes a version."""
    g = {"lm_head.weight": (100, 32), "model.norm.weight": (32,)}
    ok = {"lm_head.weight": torch.zeros(50, 32), "model.norm.weight": torch.zeros(32)}
    with ptc.Store(tmp_path / "st", create=True) as st:
        kw = dict(config="tp=2", rules="llama", rank=[0, 1], global_shapes=g)
        with pytest.raises(ptc.InvalidError) as e:
            ptc.save(st, [ok, dict(ok, **{"lm_head.weight": torch.zeros(49, 32)})], **kw)
        assert e.value.message == ("tensor 'lm_head.weight' on rank 1: local shape [49, 32], "
                                   "but the layout of dp=1,tp=2,pp=1 gives [50, 32]")
        with pytest.raises(ptc.RuleError, match="extra"):
            ptc.save(st, [ok, dict(ok, extra=torch.zeros(3))],
                     **dict(kw, global_shapes=dict(g, extra=(3,))))
        with pytest.raises(ptc.InvalidError, match="contiguous"):
            ptc.save(st, [ok, dict(ok, **{"lm_head.weight": torch.zeros(32, 50).t()})], **kw)
        assert st.versions() == []
        assert ptc.save(st, [ok, ok], **kw) == 1
