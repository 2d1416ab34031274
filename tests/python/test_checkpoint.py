"""ptc.save / ptc.load in one process: bit-exact round trips of every dtype
(several ranks' worth of local tensors per call, loaded under other
configurations), the training-state record, reuse of unchanged shards, and
wrong input — shapes, names, dtypes, ranks, a missing store, a store locked by
another writer, a failed write — raising the right ptc.Error with nothing
written. The multi-process side is test_train.py."""

import ctypes
import errno
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ptc
from ptc import _lib
from test_errors import HOLD, store_files

DTYPES = ["BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32",
          "F64", "F8_E4M3", "F8_E5M2"]
KINDS = ["col", "row", "fused", "rep"]
RULES = """layer blk.{L}.
optim .m
match *.col tp=split(0)
match *.row tp=split(1)
match *.fused tp=split(0,blocks=3)
match *.rep tp=replicate
match scalar tp=replicate pp=all
match empty tp=split(0) pp=first
"""


def random_tensor(dtype, shape, gen):
    tdt = ptc._arrays.torch_dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "BOOL":
        return torch.randint(0, 2, shape, generator=gen).bool()
    size = torch.empty(0, dtype=tdt).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=gen)
    return raw.view(tdt).reshape(shape)      # any bit pattern: NaNs, infs, subnormals


def model():
    """{name: global tensor}: every dtype under every kind of placement, layers
    0 and 1, optimizer state for some, a 0-d and an empty tensor."""
    gen = torch.Generator().manual_seed(1)
    out = {}
    for i, dt in enumerate(DTYPES):
        kind = KINDS[i % len(KINDS)]
        shape = {"col": (7, 5), "row": (3, 9), "fused": (12, 2), "rep": (4, 3, 2)}[kind]
        name = "blk.%d.%s.%s" % (i % 2, dt.lower(), kind)
        out[name] = random_tensor(dt, shape, gen)
        if i % 3 == 0:
            out[name + ".m"] = random_tensor(dt, shape, gen)
    out["scalar"] = random_tensor("F64", (), gen)
    out["empty"] = random_tensor("F32", (0, 3), gen)
    return out


def raw(x):
    """The bytes of a torch tensor or numpy array."""
    if isinstance(x, np.ndarray):
        return x.tobytes()
    return x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def local_states(g, config, like="torch"):
    """Every rank's {name: local tensor} of the global tensors @p g under config."""
    lay = ptc.Layout(g, config, RULES)
    states = []
    for r in range(lay.world):
        st = {}
        for name, sh in lay.shards(r).items():
            if sh.present:
                x = sh.take(g[name])
                if like == "numpy" and sh.dtype not in ("BF16", "F8_E4M3", "F8_E5M2"):
                    x = x.numpy()
                st[name] = x
        states.append(st)
    return lay, states


def empty_states(lay, like="torch"):
    out = []
    for r in range(lay.world):
        st = {}
        for name, sh in lay.shards(r).items():
            if sh.present:
                st[name] = ptc._arrays.empty(sh.shape, sh.dtype, like)
        out.append(st)
    return out


@pytest.fixture
def st(tmp_path):
    s = ptc.Store(tmp_path / "st", create=True)
    yield s
    s.close()


def shapes(g):
    return {n: tuple(x.shape) for n, x in g.items()}


@pytest.mark.parametrize("src", ["dp=2,tp=2,pp=2,zero=1", "tp=3"])
def test_every_dtype_round_trips_bit_exact_under_other_configs(st, src):
    g = model()
    lay, states = local_states(g, src, like="numpy")
    v = ptc.save(st, states, config=src, rules=RULES, rank=list(range(lay.world)), step=7,
                 global_shapes=shapes(g))
    assert v == 1
    assert sorted(t[0] for t in st.tensors()) == sorted(g)
    for dst in ["dp=1", "tp=2", "dp=3,zero=1", "dp=2,tp=3,pp=2,zero=1", "tp=4,pp=2"]:
        lay2 = ptc.Layout(g, dst, RULES)
        for like in ("torch", "numpy"):
            out = empty_states(lay2, like)
            rec = ptc.load(st, out, config=dst, rank=list(range(lay2.world)))
            assert rec["version"] == 1 and rec["step"] == 7 and rec["format"] == 1
            for r in range(lay2.world):
                for name, x in out[r].items():
                    want = lay2.shard(name, r).take(g[name])
                    assert raw(x) == raw(want), (dst, like, r, name)
        # rank by rank, as processes do
        for r in range(lay2.world):
            one = empty_states(lay2)[r]
            ptc.load(st, one, config=dst, rank=r)
            assert all(raw(x) == raw(lay2.shard(n, r).take(g[n])) for n, x in one.items())
        lay2.close()
    whole = {n: torch.empty_like(x) for n, x in g.items()}
    ptc.load(st, whole, config="dp=1", rank=0)
    assert all(raw(whole[n]) == raw(g[n]) for n in g)
    for n in g:                           # the store reads the same bytes back
        assert raw(st.read(n, like="torch")) == raw(g[n])
    st.verify()


def test_one_rank_world_needs_no_global_shapes(st):
    g = {"w": torch.arange(12.0).reshape(3, 4), "b": torch.ones(3, dtype=torch.bfloat16)}
    v = ptc.save(st, g, config="dp=1", rules="none", rank=0)
    out = {"w": np.zeros((3, 4), np.float32), "b": np.zeros(3, np.uint16)}   # bf16 raw bits
    ptc.load(st, out, config="dp=1", rank=0, version=v)
    assert np.array_equal(out["w"], g["w"].numpy())
    assert raw(out["b"]) == raw(g["b"])


def test_record_and_meta(st):
    g = {"w": torch.ones(4)}
    v = ptc.save(st, g, config="dp=1", rules="none", rank=0, step=42,
                 meta={"data": '{"position": 64}', "note": "ünïcode"},
                 record={"loss": 2.5, "seed": 2 ** 64 - 1, "epoch": 3, "sample": 64,
                         "global_batch": 16, "dataset": "corpus", "schedule": "1f1b",
                         "rng": bytes(range(256))})
    rec = ptc.load(st, {"w": torch.zeros(4)}, config="dp=1", rank=0)
    assert rec == {"version": v, "format": 1, "step": 42, "config": "dp=1,tp=1,pp=1",
                   "schedule": "1f1b", "seed": 2 ** 64 - 1, "epoch": 3, "sample": 64,
                   "global_batch": 16, "dataset": "corpus", "loss": 2.5,
                   "rng": bytes(range(256)),
                   "meta": {"data": '{"position": 64}', "note": "ünïcode"}}
    assert ptc.read_record(st) == rec and ptc.read_record(st.path, v) == rec
    assert st.versions()[-1]["step"] == "42"
    # NaN loss, no step: 0
    ptc.save(st, g, config="dp=1", rules="none", rank=0, record={"loss": float("nan")})
    r2 = ptc.read_record(st)
    assert r2["step"] == 0 and r2["loss"] != r2["loss"] and r2["meta"] == {}


def test_a_version_without_record_loads_with_format_0(tmp_path, st):
    from safetensors.torch import save_file
    save_file({"w": torch.arange(6.0)}, str(tmp_path / "m.safetensors"))
    st.import_safetensors([tmp_path / "m.safetensors"], "tp=2", "match w tp=split(0) pp=first\n")
    out = [{"w": torch.zeros(3)}, {"w": torch.zeros(3)}]
    rec = ptc.load(st, out, config="tp=2", rank=[0, 1])
    assert rec["format"] == 0 and rec["version"] == 1
    assert torch.equal(torch.cat([out[0]["w"], out[1]["w"]]), torch.arange(6.0))
    with pytest.raises(ptc.NotFoundError, match="no training-state record"):
        ptc.read_record(st)


def test_unchanged_shards_are_referenced_and_compress(st):
    g = model()
    lay, states = local_states(g, "tp=2")
    ranks = [0, 1]
    kw = dict(config="tp=2", rules=RULES, rank=ranks, global_shapes=shapes(g))
    ptc.save(st, states, **kw)
    ptc.save(st, states, **kw)                         # nothing changed: references
    old = [s["blk.1.f32.rep"].clone() for s in states]
    for r in ranks:                                    # a replicated tensor changes
        states[r]["blk.1.f32.rep"].view(torch.uint8)[0] ^= 1
    changed = [dict(s) for s in states]
    for r in ranks:
        states[r]["blk.1.f32.rep"] = old[r]
    ptc.save(st, changed, compress="zstd:3", threads=2, **kw)
    ptc.save(st, changed, reuse=False, **kw)
    v = st.versions()
    assert [x["parent"] for x in v] == [0, 1, 2, 3]
    assert v[1]["stored_bytes"] == 0 < v[2]["stored_bytes"] < v[0]["stored_bytes"]
    assert v[3]["stored_bytes"] == v[0]["stored_bytes"]
    for ver in (2, 3, 4):
        out = empty_states(lay)
        ptc.load(st, out, config="tp=2", rank=ranks, version=ver)
        for r in ranks:
            for name, x in out[r].items():
                want = (states if ver == 2 else changed)[r][name]
                assert raw(x) == raw(want), (ver, name)
    st.verify(all=True)


# ---- wrong input ------------------------------------------------------------------------------

def small():
    g = {"lm_head.weight": torch.randn(10, 4), "model.norm.weight": torch.randn(4),
         "model.embed_tokens.weight": torch.randn(10, 4)}
    lay = ptc.Layout(g, "tp=2", "llama")
    states = [{n: lay.shard(n, r).take(x) for n, x in g.items()} for r in range(2)]
    return g, lay, states


def test_save_refuses_wrong_states_and_writes_nothing(st):
    g, lay, states = small()
    kw = dict(config="tp=2", rules="llama", rank=[0, 1], global_shapes=shapes(g))
    before = store_files(st.path)

    def bad(r, name, x):
        s = [dict(s) for s in states]
        if x is None:
            del s[r][name]
        else:
            s[r][name] = x
        return s

    with pytest.raises(ptc.InvalidError) as e:
        ptc.save(st, bad(1, "lm_head.weight", torch.zeros(4, 4)), **kw)
    assert e.value.message == ("tensor 'lm_head.weight' on rank 1: local shape [4, 4], but "
                               "the layout of dp=1,tp=2,pp=1 gives [5, 4]")
    with pytest.raises(ptc.InvalidError) as e:
        ptc.save(st, bad(1, "lm_head.weight", torch.zeros(5, 4, dtype=torch.float16)), **kw)
    assert e.value.message == "tensor 'lm_head.weight' is F32 on rank 0 and F16 on rank 1"
    with pytest.raises(ptc.InvalidError) as e:
        ptc.save(st, bad(0, "model.norm.weight", None), **kw)
    assert e.value.message == ("rank 0 holds tensor 'model.norm.weight' (local shape [4] "
                               "under dp=1,tp=2,pp=1), but the state has no tensor of that name")
    with pytest.raises(ptc.RuleError, match="'extra.weight'"):
        ptc.save(st, bad(0, "extra.weight", torch.zeros(3)),
                 **dict(kw, global_shapes=dict(shapes(g), **{"extra.weight": (3,)})))
    with pytest.raises(ptc.InvalidError, match="contiguous"):
        ptc.save(st, bad(0, "lm_head.weight", torch.zeros(4, 5).t()), **kw)
    with pytest.raises(ptc.InvalidError) as e:
        ptc.save(st, states[0], config="tp=2", rules="llama", rank=0, global_shapes=shapes(g))
    assert e.value.message == ("no process runs rank 1 of dp=1,tp=2,pp=1 (1 processes run 1 "
                               "of 2 ranks)")
    with pytest.raises(ptc.InvalidError) as e:
        ptc.save(st, states, config="tp=2", rules="llama", rank=[0, 1])
    assert e.value.message.startswith("tensor 'lm_head.weight': its global shape is unknown")
    with pytest.raises(ptc.InvalidError, match="rank 1 given twice"):
        ptc.save(st, states, **dict(kw, rank=[1, 1]))
    with pytest.raises(ptc.InvalidError, match="meta"):
        ptc.save(st, states, meta={"step": 5}, **kw)
    with pytest.raises(ptc.RangeError, match="step"):
        ptc.save(st, states, step=-1, **kw)
    with pytest.raises(ptc.InvalidError, match="unknown field 'lr'"):
        ptc.save(st, states, record={"lr": 1}, **kw)
    with pytest.raises(ptc.InvalidError, match="codec"):
        ptc.save(st, states, compress="lz4", **kw)
    assert st.versions() == []
    assert store_files(st.path) == before


def test_load_refuses_wrong_states(st):
    g, lay, states = small()
    ptc.save(st, states, config="tp=2", rules="llama", rank=[0, 1], global_shapes=shapes(g))
    lay1 = ptc.Layout(g, "dp=1", "llama")
    good = {n: torch.zeros(s.shape) for n, s in lay1.shards(0).items()}
    kw = dict(config="dp=1", rank=0)
    with pytest.raises(ptc.InvalidError) as e:
        ptc.load(st, dict(good, **{"lm_head.weight": torch.zeros(5, 4)}), **kw)
    assert e.value.message == ("tensor 'lm_head.weight' on rank 0: local shape [5, 4], but "
                               "the layout of dp=1,tp=1,pp=1 gives [10, 4]")
    with pytest.raises(ptc.InvalidError) as e:
        ptc.load(st, dict(good, **{"model.norm.weight": torch.zeros(4, dtype=torch.float64)}),
                 **kw)
    assert e.value.message == ("tensor 'model.norm.weight' on rank 0 has dtype F64; "
                               "version 1 has F32")
    with pytest.raises(ptc.NotFoundError) as e:
        ptc.load(st, dict(good, **{"lm_head.bias": torch.zeros(10)}), **kw)
    assert e.value.message == "tensor 'lm_head.bias' is not in version 1"
    with pytest.raises(ptc.InvalidError, match="holds tensor 'lm_head.weight'"):
        ptc.load(st, {n: x for n, x in good.items() if n != "lm_head.weight"}, **kw)
    with pytest.raises(ptc.NotFoundError, match="version 5"):
        ptc.load(st, good, version=5, **kw)
    with pytest.raises(ptc.InvalidError, match="read-only"):
        ro = np.zeros((10, 4), np.float32)
        ro.flags.writeable = False
        ptc.load(st, dict(good, **{"lm_head.weight": ro}), **kw)
    with pytest.raises(ptc.InvalidError) as e:
        ptc.load(st, good, config="pp=2", rank=0)
    assert e.value.message == "tensor 'lm_head.weight' is not held by rank 0 under dp=1,tp=1,pp=2"
    # nothing was filled by the failed calls (they stop before reading)
    assert all(not x.any() for x in good.values())
    ptc.load(st, good, **kw)
    assert all(torch.equal(good[n], g[n]) for n in g)


def test_missing_and_empty_store(tmp_path):
    g = {"w": torch.ones(3)}
    with pytest.raises(ptc.NotFoundError, match="no ptc store at"):
        ptc.load(str(tmp_path / "nope"), g, config="dp=1", rank=0)
    assert not (tmp_path / "nope").exists()
    # a save creates the store it is given (a new or empty folder) ...
    assert ptc.save(tmp_path / "new" / "st", g, config="dp=1", rules="none", rank=0) == 1
    assert ptc.read_record(tmp_path / "new" / "st")["version"] == 1
    # ... never inside a folder holding something else
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(ptc.NotFoundError) as e:
        ptc.save(tmp_path / "full", g, config="dp=1", rules="none", rank=0)
    assert e.value.message == ("'%s' is not a ptc store and not empty (holds 'notes.txt'); "
                               "refusing to create a store there" % (tmp_path / "full"))
    assert sorted(os.listdir(tmp_path / "full")) == ["notes.txt"]
    with ptc.Store(tmp_path / "st", create=True) as st:
        with pytest.raises(ptc.NotFoundError, match="has no versions"):
            ptc.load(st, g, config="dp=1", rank=0)


def test_store_locked_by_another_writer(st):
    g, lay, states = small()
    kw = dict(config="tp=2", rules="llama", rank=[0, 1], global_shapes=shapes(g))
    ptc.save(st, states, **kw)
    before = store_files(st.path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, ptc.library_path(), st.path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        st.lock_timeout = 0  # writers wait for the lock by default
        with pytest.raises(ptc.BusyError) as e:
            ptc.save(st, states, step=2, **kw)
        assert e.value.code == -10 and e.value.name == "PTC_E_BUSY"
        assert "locked by another process (pid %d)" % holder.pid in e.value.message
        # loading needs no lock
        out = empty_states(lay)
        assert ptc.load(st, out, config="tp=2", rank=[0, 1])["version"] == 1
    finally:
        holder.communicate("\n", timeout=30)
    assert [v["version"] for v in st.versions()] == [1]
    assert store_files(st.path) == before


def test_failed_write_leaves_nothing(st):
    g = model()
    lay, states = local_states(g, "tp=2")
    kw = dict(config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g), threads=1)
    before = store_files(st.path)
    lib = _lib.lib()
    lib.ptc_fault_write_at(3, errno.ENOSPC)
    try:
        with pytest.raises(ptc.PtcIOError) as e:
            ptc.save(st, states, **kw)
    finally:
        lib.ptc_fault_write_at(0, 0)
    assert "rank-" in e.value.message and os.strerror(errno.ENOSPC) in e.value.message
    assert st.versions() == []
    assert store_files(st.path) == before
    assert not os.path.exists(os.path.join(st.path, "packs", "v1"))
    assert ptc.save(st, states, **kw) == 1       # the lock was released


def test_dtensor_of_a_one_process_group(tmp_path, st):
    """A DTensor's local shard is what crosses (gloo world of one)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    dist.init_process_group("gloo", init_method="file://%s" % (tmp_path / "pg"), rank=0,
                            world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        w = torch.randn(6, 4)
        d = distribute_tensor(w, mesh, [Shard(0)])
        assert ptc.save(st, {"lm_head.weight": d}, config="tp=1", rules="llama", rank=0) == 1
        out = distribute_tensor(torch.zeros(6, 4), mesh, [Shard(0)])
        ptc.load(st, {"lm_head.weight": out}, config="tp=1", rank=0)
        assert torch.equal(out.full_tensor(), w)
    finally:
        dist.destroy_process_group()


def test_without_the_checkpoint_api(monkeypatch):
    """A libptc built before ckpt.h: save and load say so."""
    L = _lib.lib()
    monkeypatch.setattr(L, "ptc_ckpt_save_locals_over",
                        _lib._Missing("ptc_ckpt_save_locals_over"))
    with pytest.raises(ptc.UnsupportedError, match="ckpt.h"):
        ptc.save("x", {}, config="dp=1", rules="none", rank=0)
    assert ctypes.sizeof(_lib.CkptRecord) > 0
