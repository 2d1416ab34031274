"""Bit-exact round trips of every PTC dtype, empty and 0-d tensors, through
safetensors import, export (whole model, per-rank files of another
configuration), Store.read into numpy and torch, and a reshard."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import ptc

TORCH_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "U16": torch.uint16, "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64,
    "U64": torch.uint64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
    "F64": torch.float64, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}

RULES = """
match scalar.*   tp=replicate pp=first
match *          tp=split(0)  pp=first
"""


def random_tensor(dtype, shape, gen):
    n = int(np.prod(shape)) if shape else 1
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    size = torch.empty((), dtype=dtype).element_size()
    # every bit pattern, NaN payloads and negative zero included
    raw = torch.randint(0, 256, (n * size,), generator=gen, dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)


def bits(t):
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8) if t.dtype != torch.bool else t.to(torch.uint8)


def same_bits(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(bits(a),
                                                                                   bits(b))


@pytest.fixture(scope="module")
def tensors():
    gen = torch.Generator().manual_seed(7)
    out = {}
    for name, dt in TORCH_DTYPES.items():
        out["t.%s" % name] = random_tensor(dt, (7, 5), gen)        # uneven over 2, 3, 4
        out["empty.%s" % name] = random_tensor(dt, (0, 3), gen)
        out["scalar.%s" % name] = random_tensor(dt, (), gen)
    return out


@pytest.fixture
def store(tmp_path, tensors):
    path = tmp_path / "in.safetensors"
    save_file(tensors, str(path))
    st = ptc.Store(tmp_path / "st", create=True)
    st.import_safetensors([path], "tp=2", RULES)
    yield st
    st.close()


def test_whole_export_is_bit_exact(store, tensors, tmp_path):
    store.export(tmp_path / "whole.safetensors")
    back = load_file(str(tmp_path / "whole.safetensors"))
    assert set(back) == set(tensors)
    for k, v in tensors.items():
        assert same_bits(back[k], v), k


@pytest.mark.parametrize("cfg", ["tp=3", "tp=4,dp=2"])
def test_rank_files_hold_the_layout_pieces(store, tensors, tmp_path, cfg):
    files = store.export(tmp_path / "ranks", config=cfg)
    lay = ptc.Layout(tensors, cfg, RULES)
    assert len(files) == lay.world
    for rank, f in enumerate(files):
        got = load_file(f)
        for name, sh in lay.shards(rank).items():
            assert tuple(got[name].shape) == sh.shape, name
            assert same_bits(got[name], sh.take(tensors[name])), (name, rank)


@pytest.mark.parametrize("like", ["torch", "numpy"])
def test_read_into_arrays_is_bit_exact(store, tensors, like):
    for name, v in tensors.items():
        got = store.read(name, like=like)
        if like == "numpy":
            got = torch.from_numpy(got)
            if got.dtype != v.dtype:   # BF16 / F8 arrive as raw bits in numpy
                got = got.view(v.dtype) if got.dim() else got.reshape(1).view(v.dtype)[0]
        assert same_bits(got, v), name


def test_read_fills_the_given_tensor_in_place(store, tensors):
    v = tensors["t.BF16"]
    out = torch.zeros_like(v)
    ptr = out.data_ptr()
    assert store.read("t.BF16", out=out) is out
    assert out.data_ptr() == ptr and same_bits(out, v)
    raw = np.zeros((7, 5), dtype=np.uint16)     # BF16 bits in a numpy array
    store.read("t.BF16", out=raw)
    assert same_bits(torch.from_numpy(raw).view(torch.bfloat16), v)


def test_reshard_chain_keeps_every_bit(store, tensors, tmp_path):
    for cfg in ["tp=4", "tp=3,dp=2", "tp=1"]:
        res = store.reshard(cfg, threads=2)
        assert res["version"] == store.latest()
    assert [v["config"] for v in store.versions()] == [
        "dp=1,tp=2,pp=1", "dp=1,tp=4,pp=1", "dp=2,tp=3,pp=1", "dp=1,tp=1,pp=1"]
    for name, v in tensors.items():
        assert same_bits(store.read(name, like="torch"), v), name
    store.verify(all=True)


def test_dtype_conversion_on_export(store, tensors, tmp_path):
    store.export(tmp_path / "bf16.safetensors", dtype="BF16")
    back = load_file(str(tmp_path / "bf16.safetensors"))
    assert back["t.F32"].dtype == torch.bfloat16
    assert back["t.I32"].dtype == torch.int32 and torch.equal(back["t.I32"], tensors["t.I32"])
    ref = tensors["t.F16"].to(torch.bfloat16)
    assert same_bits(back["t.F16"][~ref.isnan()], ref[~ref.isnan()])


def test_dtype_names_of_arrays():
    assert ptc.dtype_name(np.float16) == "F16"
    assert ptc.dtype_name(torch.bfloat16) == "BF16"
    assert ptc.dtype_name(torch.float8_e5m2) == "F8_E5M2"
    assert ptc.dtype_name("bf16") == "BF16"
    with pytest.raises(ptc.InvalidError):
        ptc.dtype_name(np.complex64)
    with pytest.raises(ptc.InvalidError):
        ptc.dtype_name(np.dtype(">f4"))
