# procs: 1 (rank processes or a mount: one multi-process slot, cmake/tests.cmake)
"""Layouts read from DTensors: ptc.save without a config records each tensor's
place from its DeviceMesh and placements (explicit per-rank pieces), and the
version loads into any other layout.

- The pieces ptc reads from placements (ptc._dtensor) against torch's own
  split of an index tensor, on random meshes and placements (Shard on any
  mesh dimension, Replicate, _StridedShard, uneven and empty parts).
- A small Llama-style model trained with AdamW under FSDP2 (fully_shard) x
  tensor parallelism (parallelize_module) on a (dp=2, tp=2) gloo mesh of four
  processes, saved with ptc.save (no config) and with DCP, resumed on (dp=4),
  (tp=4), (dp=1) and as a plain model in one process: every loaded tensor
  (parameters, AdamW moments and steps) equals DCP's bit for bit and the
  losses continue within 1e-5 of the uninterrupted run. The version then
  goes through `ptc export` (whole, one rank of its own layout, a
  configuration), `ptc reshard` and the mount, each tensor equal to DCP's.
- Uneven strided and 2-D DTensors from distribute_tensor read back whole,
  and loaded back into DTensors through the stand-in device's ring.
- The same FSDP2 x TP state saved in the background (ptc.async_save, its
  DTensors snapshotted on the host and through the CUDA-free stand-in
  device) while the next steps train, and with ptc.save through the
  stand-in's pinned ring: every tensor equals the blocking save's; one
  resume loads through the ring in windows smaller than the tensors.
(dtensor_worker.py runs the processes.)
"""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import ptc
from conftest import PTC, fuse_available, run_ptc, run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.fsdp")
from torch.distributed.tensor import Replicate, Shard  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402

from ptc import _dtensor  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dtensor_worker as W  # noqa: E402


# ---- pieces from placements ------------------------------------------------------------------

def torch_local(shape, mesh_shape, coord, placements):
    """The global flat indices a rank's local tensor holds, as DTensor places
    them: each placement's own split of the index tensor, left to right."""
    x = torch.arange(int(np.prod(shape)), dtype=torch.int64).reshape(shape)
    for m, p in enumerate(placements):
        if p.is_replicate():
            continue
        parts, _ = p._split_tensor(x, mesh_shape[m], with_padding=False, contiguous=True)
        x = parts[coord[m]]
    return x


def from_pieces(shape, local_shape, pieces):
    """The local tensor of global flat indices the pieces describe."""
    idx = torch.arange(int(np.prod(shape)), dtype=torch.int64).reshape(shape)
    out = torch.full((int(np.prod(local_shape)),), -1, dtype=torch.int64)
    for lo, hi, off, st in pieces:
        ext = tuple(b - a for a, b in zip(lo, hi))
        torch.as_strided(out, ext, st, off).copy_(idx[tuple(slice(a, b)
                                                            for a, b in zip(lo, hi))])
    return out.reshape(local_shape)


def random_placement(rng, ndim):
    k = rng.randrange(4)
    if k == 0 or ndim == 0:
        return Replicate()
    d = rng.randrange(ndim)
    if k == 1:
        return Shard(d)
    return _StridedShard(d, split_factor=rng.randrange(1, 5))


def test_pieces_equal_torch_placement():
    rng = random.Random(29)
    kinds = set()
    for _ in range(600):
        ndim = rng.randrange(0, 4)
        shape = tuple(rng.randrange(0, 10) for _ in range(ndim))
        mesh_shape = tuple(rng.randrange(1, 5) for _ in range(rng.randrange(1, 4)))
        placements = [random_placement(rng, ndim) for _ in mesh_shape]
        coord = tuple(rng.randrange(n) for n in mesh_shape)
        runs = _dtensor.runs_of(shape, mesh_shape, coord, placements)
        local_shape, pieces = _dtensor.pieces_of(runs)
        want = torch_local(shape, mesh_shape, coord, placements)
        assert tuple(want.shape) == local_shape, (shape, mesh_shape, coord, placements)
        assert torch.equal(from_pieces(shape, local_shape, pieces), want), \
            (shape, mesh_shape, coord, placements, pieces)
        kinds.add(min(len(pieces), 3))
    assert kinds == {0, 1, 2, 3}  # empty, one box, strided shards of 2 and more pieces


def test_fsdp2_strided_shard_is_one_box():
    # FSDP2 over a tensor-parallel split of the same dimension: tp chunk j, dp chunk i
    p = [_StridedShard(0, split_factor=2), Shard(0)]
    for i in range(2):
        for j in range(2):
            local, pieces = _dtensor.pieces_of(_dtensor.runs_of((8, 4), (2, 2), (i, j), p))
            assert local == (2, 4)
            assert pieces == [((j * 4 + i * 2, 0), (j * 4 + i * 2 + 2, 4), 0, (4, 1))]
    # on its own, a strided shard holds one run of each of the split_factor parts
    local, pieces = _dtensor.pieces_of(_dtensor.runs_of((8, 3), (2,), (1,),
                                                        [_StridedShard(0, split_factor=2)]))
    assert local == (4, 3)
    assert pieces == [((2, 0), (4, 3), 0, (3, 1)), ((6, 0), (8, 3), 6, (3, 1))]


# ---- FSDP2 x TP across processes ----------------------------------------------------------

def launch(world, mode, tmp, name, env=None):
    out = tmp / name
    return run_ranks("dtensor_worker.py", world,
                     [mode, tmp / "st", tmp / "dcp", tmp / (name + ".init"), out], out,
                     timeout=600, env=dict(os.environ, **(env or {})))


def check_resumed(res, want, mesh):
    assert res["differ"] == [], (mesh, res["differ"])  # ptc's tensors are DCP's, bit for bit
    assert res["step"] == W.K
    assert res["tensors"] == 84  # 21 parameters, their exp_avg, exp_avg_sq and step
    assert np.max(np.abs(np.array(res["losses"]) - want)) <= 1e-5, (mesh, res["losses"], want)


def safetensors_dict(path):
    from safetensors.torch import load_file
    return load_file(str(path))


def safetensors_meta(path):
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        return f.metadata()


def check_rank_file(path, whole, config):
    """A rank's export: each tensor is what its pieces (ptc.layout) say."""
    meta = safetensors_meta(path)
    assert meta["ptc.config"] == config
    layout = json.loads(meta["ptc.layout"])
    got = safetensors_dict(path)
    assert sorted(got) == sorted(layout)
    for name, x in got.items():
        g = whole[name]
        want = torch.empty(x.numel(), dtype=g.dtype)
        for p in layout[name]["pieces"]:
            box = tuple(slice(a, b) for a, b in p["box"])
            ext = tuple(b - a for a, b in p["box"])
            torch.as_strided(want, ext, p["strides"], p["offset"]).copy_(g[box])
        assert torch.equal(x.reshape(-1), want), (path, name)


def run_grid(tmp_path, meshes, compress=None, ring_loads=()):
    env = {"PTC_DTENSOR_MESHES": ";".join(meshes), "PTC_DTENSOR_RING_LOADS": ";".join(ring_loads)}
    if compress:
        env["PTC_DTENSOR_COMPRESS"] = compress
    saved = launch(4, "save", tmp_path, "save", env)
    want = np.array(saved[0]["losses"])  # the uninterrupted run's steps K..K+M-1
    for r in saved:
        assert r["version"] == 1 and r["ring_version"] == 1
        assert r["async_versions"] == [1, 1]
        assert r["losses"] == saved[0]["losses"]
        # FSDP2 x TP: strided shards, 2-D boxes, 1-D dp shards, Adam's plain steps
        assert r["placements"] == ["(2, 2) ('S(0)', 'S(1)')", "(2, 2) ('_S(0, 2)', 'S(0)')",
                                   "(2,) ('S(0)',)", "plain"]
        for m in meshes:
            check_resumed(r[m], want, m)
        assert r["extras_version"] == 1 and r["extras_bad"] == []
    one = launch(1, "one", tmp_path, "one")[0]
    check_resumed(one["dp=1"], want, "dp=1")
    check_resumed(one["plain"], want, "plain")
    assert one["dp=1"]["placements"] == ["(1,) ('S(0)',)", "plain"]
    assert one["plain"]["placements"] == ["plain"]
    assert one["partial"][0] == "InvalidError"
    assert one["partial"][1].startswith("tensor 'partial' is a DTensor with a Partial placement "
                                        "on mesh dimension 0")
    return saved, safetensors_dict(tmp_path / "one" / "dcp.safetensors")


def check_same_version(st, other):
    """Version 1 of store @p other holds the tensors, bytes, layout, rules and
    step of version 1 of @p st (the background and streamed saves of the
    same state)."""
    with ptc.Store(st) as a, ptc.Store(other) as b:
        va, vb = a.versions()[0], b.versions()[0]
        assert (vb["config"], vb["rules"]) == (va["config"], va["rules"]) == \
            ("explicit:4", ptc.Rules(W.RULES).text)
        assert ptc.read_record(other)["step"] == W.K
        assert sorted(t[0] for t in b.tensors()) == sorted(t[0] for t in a.tensors())
        for n, *_ in a.tensors():
            assert raw_bytes(b.read(n, like="torch")) == raw_bytes(a.read(n, like="torch")), \
                (other, n)
        b.verify()


def raw_bytes(x):
    return x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def test_fsdp2_tp_save_resume_export_reshard_mount(tmp_path):
    saved, whole = run_grid(tmp_path, ["dp=4", "tp=4"], ring_loads=["tp=4"])
    st = tmp_path / "st"
    for suffix in ("-a", "-d", "-r"):  # async_save (host, device), save through the ring
        check_same_version(st, str(st) + suffix)
    with ptc.Store(st) as s:
        v = s.versions()[0]
        assert (v["config"], v["rules"]) == ("explicit:4", ptc.Rules(W.RULES).text)
        assert {t[3] for t in s.tensors()} == {""}  # no placement text: explicit pieces
        lay = ptc.Layout.of_version(s.reader(1))
        assert (lay.config, lay.world) == ("explicit:4", 4)
        wq = "model.layers.0.attention.wq.weight"
        # FSDP2 x TP: rank 1 = (dp 0, tp 1) holds rows 8..12 of wq; ranks 0 and 1
        # hold the same part of the embedding (replicas over tp: one shard)
        assert [(p.lo, p.hi) for p in lay.shard(wq, 1).pieces] == [((8, 0), (12, 16))]
        assert lay.shard("model.tok_embeddings.weight", 1).owner == 0
        lay.close()
    # ptc export: the whole model
    run_ptc("export", "--store", st, "--version", 1, "--out", tmp_path / "whole.safetensors")
    got = safetensors_dict(tmp_path / "whole.safetensors")
    assert sorted(got) == sorted(whole)
    for n in whole:
        assert torch.equal(got[n], whole[n]), n
    # one rank of its own layout, and every rank of a configuration (the rules
    # saved with it split the tensor-parallel weights)
    run_ptc("export", "--store", st, "--version", 1, "--rank", 3, "--out", tmp_path / "r3")
    check_rank_file(tmp_path / "r3", whole, "explicit:4")
    run_ptc("export", "--store", st, "--version", 1, "--config", "tp=2",
            "--out-dir", tmp_path / "tp2")
    for r in range(2):
        check_rank_file(tmp_path / "tp2" / ("rank-%d.safetensors" % r), whole, "dp=1,tp=2,pp=1")
    assert safetensors_dict(tmp_path / "tp2" / "rank-1.safetensors")[wq].shape == (8, 16)
    # ptc reshard into a configuration: a new version of the same tensors
    run_ptc("reshard", "--store", st, "--version", 1, "--to", "dp=2,tp=2")
    with ptc.Store(st) as s:
        assert s.versions()[1]["config"] == "dp=2,tp=2,pp=1"
        for n in whole:
            assert torch.equal(s.read(n, version=2, like="torch"), whole[n]), n
    # the uneven DTensors of distribute_tensor, whole
    with ptc.Store(str(st) + "-x") as s:
        for name, (shape, _) in W.EXTRAS.items():
            assert torch.equal(s.read(name, like="torch"), W.extra_tensor(name, shape)), name
    if not fuse_available():
        return
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run([PTC, "mount", "--store", str(st), str(mnt)], check=True, timeout=60)
    try:
        for cfg, r in (("dp1-tp2-pp1", 1), ("dp1-tp2-pp1", 0)):
            f = mnt / "models" / "1" / cfg / ("rank-%d.safetensors" % r)
            assert f.read_bytes() == (tmp_path / "tp2" / f.name).read_bytes()
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True, timeout=60)


@pytest.mark.slow
def test_fsdp2_tp_every_mesh_compressed(tmp_path):
    # every mesh of four processes, the saving one included, from a zstd save
    run_grid(tmp_path, ["dp=4", "tp=4", "dp=2,tp=2"], compress="zstd",
             ring_loads=["dp=2,tp=2", "dp=4"])


# ---- one process: explicit saves and loads of plain and given layouts --------------------

def test_plain_state_whole_and_errors(tmp_path):
    st = tmp_path / "a" / "st"                       # created by the save
    g = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
         "step": torch.tensor(5.0), "b": torch.ones(4, dtype=torch.bfloat16)}
    assert ptc.save(st, g, step=2) == 1              # no config: every tensor whole
    with ptc.Store(st) as s:
        assert s.versions()[0]["config"] == "explicit:1"
    got = {n: torch.zeros_like(x) for n, x in g.items()}
    got["b"] = torch.zeros(4, dtype=torch.int16)    # BF16 into raw 16-bit integers
    assert ptc.load(st, got)["step"] == 2
    assert torch.equal(got["w"], g["w"]) and torch.equal(got["step"], g["step"])
    assert torch.equal(got["b"], g["b"].view(torch.int16))
    # under a configuration: the preset `none` (no rules were saved), or given rules
    half = {"w": torch.zeros(2, 4)}
    with pytest.raises(ptc.InvalidError, match="local shape \\[2, 4\\], but the layout of "
                                               "dp=1,tp=2,pp=1 gives \\[3, 4\\]"):
        ptc.load(st, [half, {}], config="tp=2", rank=[0, 1])
    states = [{"w": torch.zeros(n, 4), "step": torch.zeros(()),
               "b": torch.zeros(2, dtype=torch.bfloat16)} for n in (2, 1)]
    ptc.load(st, states, config="tp=2", rank=[0, 1],
             rules="match step tp=replicate pp=all\nmatch * tp=split(0) pp=all")
    assert torch.equal(torch.cat([states[0]["w"], states[1]["w"]]), g["w"])
    assert torch.equal(torch.cat([states[0]["b"], states[1]["b"]]), g["b"])
    # a plain tensor that is not the whole tensor needs a configuration
    with pytest.raises(ptc.InvalidError, match="neither its box nor its pieces are given"):
        ptc.save(st, {"w": torch.zeros(2, 4)}, global_shapes={"w": (3, 4)})
    with pytest.raises(ptc.InvalidError, match="needs rules= .* or rules_file="):
        ptc.save(st, g, config="dp=1")
    with pytest.raises(ptc.InvalidError, match="rules= applies to a load with config="):
        ptc.load(st, got, rules="none")


def test_rules_text_never_a_path(tmp_path):
    rules = tmp_path / "my.rules"
    rules.write_text("match * tp=split(0) pp=all\n")
    g = {"w": torch.arange(4.0)}
    st = tmp_path / "st"
    # a path given as rules is refused, naming rules_file=
    with pytest.raises(ptc.RuleError) as e:
        ptc.save(st, g, config="dp=1", rules=str(rules))
    assert e.value.message.startswith("rules '%s' is neither a preset name (llama, " % rules)
    assert e.value.message.endswith("a rules file is given as rules_file=PATH (a file of that "
                                    "name exists: pass it as rules_file=)")
    assert ptc.save(st, g, config="dp=1", rules_file=rules) == 1
    # one line of rule text, and a preset, without a newline
    assert ptc.save(st, g, config="dp=1", rules="match * tp=split(0) pp=all") == 2
    assert ptc.Rules(file=rules).text == ptc.Rules("match * tp=split(0) pp=all").text
    with pytest.raises(ptc.InvalidError, match="give rules .* or rules_file"):
        ptc.Rules("none", file=rules)
    lay = ptc.Layout({"w": ("F32", (4,))}, "tp=2", rules_file=rules)
    assert lay.shard("w", 1).shape == (2,)
    lay.close()
