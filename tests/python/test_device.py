"""Device tensors in ptc.save / ptc.load, through the CUDA-free stand-in
device (ptc._ring.fake_device: CPU tensors take the device path, copies run
in order on a worker thread with events): the same ring of host buffers,
stream callbacks and libptc streaming as CUDA tensors. Chunks of 1 MiB and a
ring of 4 of them, smaller than the state, so that every path runs: copies
ahead in libptc's order, buffers reused, windows of loads.

Round trips byte-exact under other configurations (every dtype, device and
host tensors in one call, several ranks per process); unchanged device
shards referenced by the next version; the ring the only host memory of the
copies (its size, every buffer given back); a failing copy failing the call
with nothing written and the ring free again; what cannot be streamed. The
real CUDA path runs in scripts/gpu-check.sh."""

import os

import pytest
import torch

import ptc
from ptc import _ring
from test_checkpoint import RULES, empty_states, local_states, model, raw, shapes

MIB = 1 << 20


@pytest.fixture(autouse=True)
def small_ring(monkeypatch):
    """1 MiB chunks, 4 of them: the ring is far smaller than the states."""
    monkeypatch.setattr(_ring, "CHUNK", MIB)
    monkeypatch.setenv("PTC_RING_MIB", "4")
    with _ring.fake_device():
        yield


@pytest.fixture
def st(tmp_path):
    s = ptc.Store(tmp_path / "st", create=True)
    yield s
    s.close()


def big_model():
    """test_checkpoint's model plus tensors of several chunks per rank."""
    g = model()
    gen = torch.Generator().manual_seed(7)
    g["blk.0.big.col"] = torch.randn(1536, 1024, generator=gen)              # 6 MiB
    g["blk.1.big.row"] = torch.randn(512, 1536, generator=gen).to(torch.bfloat16)
    g["blk.1.big.fused"] = torch.randn(768, 1000, generator=gen)             # blocks
    return g


def ring_clean():
    for r in _ring._rings.values():
        assert not r.lock.locked()
        assert r.nbytes == 4 * MIB


@pytest.mark.parametrize("src,dst", [("dp=2,tp=2,pp=2,zero=1", "tp=3"),
                                     ("tp=3", "dp=2,pp=2,zero=1"), ("tp=2", "dp=1")])
def test_device_round_trip_under_other_configs(st, src, dst):
    g = big_model()
    lay, states = local_states(g, src)
    ranks = list(range(lay.world))
    v = ptc.save(st, states, config=src, rules=RULES, rank=ranks, step=5,
                 global_shapes=shapes(g))
    ring_clean()
    assert v == 1
    for n, x in g.items():
        assert raw(st.read(n, like="torch")) == raw(x), n
    st.verify()
    dlay, want = local_states(g, dst)
    got = empty_states(dlay)
    rec = ptc.load(st, got, config=dst, rank=list(range(dlay.world)))
    ring_clean()
    assert rec["step"] == 5
    for r in range(dlay.world):
        for n, x in want[r].items():
            assert raw(got[r][n]) == raw(x), (r, n)


def test_a_load_waiting_for_a_buffer_is_woken_by_a_queued_copy():
    """A load's thread that finds every buffer held (and none copying to the
    device) waits; it must wake when a held buffer's copy is queued, the
    buffer to be free once that copy is done. Driven through the stream's
    callbacks in the order that hung a load into 4 ranks on an H200 (16
    libptc threads over 4 buffers): 4 threads hold the 4 buffers, a fifth
    waits, the 4 push their copies and take no more."""
    import threading
    import types
    x = torch.zeros(8 * MIB, dtype=torch.uint8)
    s = _ring.Stream(_ring.device_of(x))
    tok = s.add(x, "x")
    s.options(types.SimpleNamespace())
    assert len(s.ring.slots) == 4
    outs = [[None] for _ in range(5)]
    for i in range(4):
        s._acquire(tok, i * MIB, MIB, outs[i])
    fifth = threading.Thread(target=s._acquire, args=(tok, 4 * MIB, MIB, outs[4]), daemon=True)
    fifth.start()
    fifth.join(0.2)
    assert fifth.is_alive()                   # every buffer held: it waits
    for i in range(4):
        s._push(tok, i * MIB, MIB)
    fifth.join(10)
    assert not fifth.is_alive(), "the waiting thread was not woken by the queued copies"
    assert outs[4][0] in s.ring.ptrs
    s._push(tok, 4 * MIB, MIB)
    s.close()
    ring_clean()


def test_device_and_host_tensors_in_one_call(st):
    g = big_model()
    lay, states = local_states(g, "tp=2")
    host = {n: x.numpy() for n, x in states[1].items() if x.dtype == torch.float32}
    mixed = [states[0], dict(states[1], **host)]     # rank 1's F32 tensors as numpy
    ptc.save(st, mixed, config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g))
    dlay, want = local_states(g, "tp=2")
    got = empty_states(dlay)
    got[0] = {n: x.numpy() if x.dtype == torch.float64 else x for n, x in got[0].items()}
    ptc.load(st, got, config="tp=2", rank=[0, 1])
    for r in range(2):
        for n, x in want[r].items():
            assert raw(got[r][n]) == raw(x), (r, n)


def test_unchanged_device_shards_are_referenced(st):
    g = big_model()
    lay, states = local_states(g, "tp=2")
    ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g))
    ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g))
    states[0]["blk.0.big.col"][-1, -1] += 1      # the last block of one shard only
    ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g))
    v = st.versions()
    assert [x["version"] for x in v] == [1, 2, 3]
    # version 2 wrote nothing: no pack files of its own
    assert not os.path.exists(os.path.join(st.path, "packs", "v2"))
    assert v[2]["stored_bytes"] >= 3 * MIB       # the changed shard, written whole
    got = empty_states(lay)
    ptc.load(st, got, config="tp=2", rank=[0, 1])
    assert raw(got[0]["blk.0.big.col"]) == raw(states[0]["blk.0.big.col"])
    st.verify(all=True)


def test_a_failing_copy_fails_the_call_and_frees_the_ring(st, monkeypatch):
    g = big_model()
    lay, states = local_states(g, "tp=2")
    calls = {"n": 0}
    real = _ring._Fake.copy

    def copy(self, dst, src):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("DMA engine on fire")
        return real(self, dst, src)

    monkeypatch.setattr(_ring._Fake, "copy", copy)
    with pytest.raises(ptc.PtcIOError) as e:
        ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1], global_shapes=shapes(g))
    assert e.value.message == "device copy: RuntimeError: DMA engine on fire"
    assert isinstance(e.value.__cause__, RuntimeError)
    assert st.versions() == []
    ring_clean()
    monkeypatch.setattr(_ring._Fake, "copy", real)
    assert ptc.save(st, states, config="tp=2", rules=RULES, rank=[0, 1],
                    global_shapes=shapes(g)) == 1
    calls["n"] = 0
    monkeypatch.setattr(_ring._Fake, "copy", copy)
    got = empty_states(lay)
    with pytest.raises(ptc.PtcIOError, match="DMA engine on fire"):
        ptc.load(st, got, config="tp=2", rank=[0, 1])
    ring_clean()


def test_what_cannot_be_streamed(st):
    x = torch.zeros(4, 6)[:, :3]
    with pytest.raises(ptc.InvalidError, match="tensor 'w' is not contiguous"):
        ptc.save(st, {"w": x}, config="dp=1", rules="match * tp=replicate pp=all\n", rank=0)
    with pytest.raises(ptc.UnsupportedError, match="tensor 'w' is on meta"):
        ptc.save(st, {"w": torch.empty(3, device="meta")}, config="dp=1",
                 rules="match * tp=replicate pp=all\n", rank=0)
    ring_clean()
    assert st.versions() == []


def test_the_ring_is_bounded_and_reused(st):
    g = big_model()
    lay, states = local_states(g, "dp=1")
    ptc.save(st, states[0], config="dp=1", rules=RULES, rank=0)
    rings = dict(_ring._rings)
    got = empty_states(lay)[0]
    ptc.load(st, got, config="dp=1", rank=0)
    assert {k: id(r) for k, r in _ring._rings.items()} == {k: id(r) for k, r in rings.items()}
    (r,) = _ring._rings.values()
    assert r.nbytes == 4 * MIB and len(r.slots) == 4
    assert sum(x.numel() * x.element_size() for x in got.values()) > 2 * r.nbytes


# ---- CUDA, where there is one (tests/gpu/test_python_cuda.sh) ---------------------------------

def cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")


def to_cuda(states):
    return [{n: x.cuda() for n, x in s.items()} for s in states]


@pytest.mark.parametrize("dst", ["tp=3", "dp=2,pp=2,zero=1"])
def test_cuda_round_trip(st, dst):
    cuda_or_skip()
    g = big_model()
    lay, states = local_states(g, "tp=2")
    ptc.save(st, to_cuda(states), config="tp=2", rules=RULES, rank=[0, 1],
             global_shapes=shapes(g))
    for n, x in g.items():
        assert raw(st.read(n, like="torch")) == raw(x), n
    dlay, want = local_states(g, dst)
    got = to_cuda(empty_states(dlay))
    ptc.load(st, got, config=dst, rank=list(range(dlay.world)))
    for r in range(dlay.world):
        for n, x in want[r].items():
            assert raw(got[r][n].cpu()) == raw(x), (r, n)
    ring_clean()


def test_cuda_async_save_is_a_snapshot(st):
    cuda_or_skip()
    g = big_model()
    lay, states = local_states(g, "tp=2")
    dev = to_cuda(states)
    h = ptc.async_save(st, dev, config="tp=2", rules=RULES, rank=[0, 1],
                       global_shapes=shapes(g))
    for s in dev:                        # queued on the current stream after the call
        for x in s.values():
            x.reshape(-1).view(torch.uint8).fill_(0xEE)
    assert h.wait() == 1
    for n, x in g.items():
        assert raw(st.read(n, like="torch")) == raw(x), n


# ---- across hosts: device tensors through host copies made for the call ------------------------

@pytest.mark.parametrize("kind", ["fake", "cuda"])
def test_across_hosts_through_host_copies(tmp_path, kind):
    """Device tensors saved across hosts (one process of host h0, two ranks)
    and loaded under another configuration (three ranks): staged through
    host tensors, byte-exact."""
    if kind == "cuda":
        cuda_or_skip()
    dev = to_cuda if kind == "cuda" else (lambda states: states)
    g = big_model()
    lay, states = local_states(g, "tp=2")
    with ptc.Store(tmp_path / "h0", create=True) as st:
        v = ptc.save(st, dev(states), config="tp=2", rules=RULES, rank=[0, 1],
                     global_shapes=shapes(g), across_hosts=True, host="h0", replicas=0)
        assert v == 1
        dlay, want = local_states(g, "tp=3")
        got = dev(empty_states(dlay))
        rec = ptc.load(st, got, config="tp=3", rank=[0, 1, 2], across_hosts=True, host="h0")
        assert rec["version"] == 1 and rec["hosts"] == 1
    for r in range(dlay.world):
        for n, x in want[r].items():
            assert raw(got[r][n].cpu()) == raw(x), (r, n)


# ---- DTensors: their local tensors through the ring, on the stand-in or on CUDA ----------------

@pytest.mark.parametrize("kind", ["fake", "cuda"])
def test_dtensor_state_through_the_ring(tmp_path, kind):
    """A DTensor state with no config (one process, a (1, 1) mesh): saved
    through the ring, saved in the background (a snapshot: the tensors are
    overwritten at once), loaded back into DTensors through the ring."""
    if kind == "cuda":
        cuda_or_skip()
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    dev = "cuda" if kind == "cuda" else "cpu"
    gen = torch.Generator().manual_seed(3)
    full = {"w": torch.randn(1536, 1024, generator=gen),                 # 6 MiB: 6 chunks
            "b": torch.randn(7, 5, generator=gen).to(torch.bfloat16),
            "step": torch.tensor(3.0)}
    place = {"w": [Shard(0), Shard(1)], "b": [Replicate(), Shard(0)]}

    def dstate(src):
        return {n: DTensor.from_local(src[n].to(dev, copy=True), mesh, place[n], run_check=False)
                if n in place else src[n].to(dev, copy=True) for n in full}

    def local(x):
        return x._local_tensor if isinstance(x, DTensor) else x

    dist.init_process_group("gloo", init_method="file://%s" % (tmp_path / "pg"), rank=0,
                            world_size=1)
    try:
        mesh = init_device_mesh(dev, (1, 1), mesh_dim_names=("dp", "tp"))
        state = dstate(full)
        assert ptc.save(tmp_path / "a", state, step=1) == 1
        ring_clean()
        h = ptc.async_save(tmp_path / "b", state, step=1)
        for x in state.values():
            local(x).reshape(-1).view(torch.uint8).fill_(0xEE)
        assert h.wait() == 1
        for s in ("a", "b"):
            with ptc.Store(tmp_path / s) as got:
                assert got.versions()[0]["config"] == "explicit:1"
                for n, x in full.items():
                    assert raw(got.read(n, like="torch")) == raw(x), (s, n)
        back = dstate({n: torch.zeros_like(x) for n, x in full.items()})
        assert ptc.load(tmp_path / "b", back)["step"] == 1
        ring_clean()
        for n, x in full.items():
            assert raw(local(back[n]).cpu()) == raw(x), n
    finally:
        dist.destroy_process_group()
