"""One process of test_dtensor.py: a small Llama-style model (token embedding,
attention with rotary-free heads, SwiGLU feed-forward, RMSNorm, output head;
uneven vocabulary and hidden sizes) trained with AdamW under FSDP2
(fully_shard) and tensor parallelism (parallelize_module) on gloo, saved with
ptc.save without a config (the layout read from the DTensors) and with
torch.distributed.checkpoint (DCP), then resumed on other meshes.

    python dtensor_worker.py save STORE DCP_DIR INIT_FILE OUT_DIR
        4 processes, mesh (dp=2, tp=2): K steps, both saves, M more steps
        (the uninterrupted run's losses); then for each mesh of MESHES: a
        fresh model loaded with ptc.load (no config) and another with
        dcp.load, every local tensor compared bit for bit, M steps trained.
        Also: DTensors of uneven shapes under strided and 2-D placements
        (distribute_tensor) saved to STORE-x, and their local tensors checked
        against the pieces ptc reads from their placements.
    python dtensor_worker.py one STORE DCP_DIR INIT_FILE OUT_DIR
        1 process: the same for (dp=1) under fully_shard and for a plain
        model (whole tensors, no DTensor); DCP's whole tensors written to
        OUT_DIR/dcp.safetensors; a Partial DTensor refused.

RANK and WORLD_SIZE come from the environment; PTC_DTENSOR_MESHES (e.g.
"dp=4;tp=4;dp=2,tp=2") picks the meshes of `save`, PTC_DTENSOR_COMPRESS its
compression. Writes OUT_DIR/rank-R.json.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import ptc
from ptc import _dtensor

VOCAB, DIM, HEADS, HIDDEN, LAYERS, SEQ, BATCH = 30, 16, 4, 36, 2, 8, 8
K, M = 3, 3  # steps before the save, steps after it


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        hd = DIM // HEADS
        q, k, v = (w(x).view(b, s, -1, hd).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for blk in self.layers:
            x = blk(x)
        return self.output(self.norm(x))


TP_MODULES = ("attention.wq", "attention.wk", "attention.wv", "attention.wo",
              "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")

# How ptc views the version under a configuration (ptc export --config, the
# mount, reshard): the tensor-parallel splits of TP_PLAN, for parameters and
# their optimizer moments; Adam's 0-d steps and everything else replicated.
RULES = "match *.step tp=replicate pp=all\n" + "".join(
    "match *.%s.weight* tp=split(%d) pp=all\n" % (m, 1 if m.endswith(("wo", "w2")) else 0)
    for m in TP_MODULES) + "match * tp=replicate pp=all\n"

# Uneven DTensors on the (dp=2, tp=2) mesh: name -> (shape, placements).
EXTRAS = {
    "strided_uneven": ((7, 3), "SS0:2,S0"),    # FSDP2 x TP rows, chunks 2+2 / 2+1
    "strided_alone": ((9, 2), "SS0:2,R"),      # two runs per rank: two pieces
    "grid": ((5, 6), "S1,S0"),                 # a 2-D box, uneven
    "strided_cols": ((2, 10), "S1,SS1:3"),     # strided after a split, on dim 1
    "empty_part": ((1, 4), "S0,R"),            # dp rank 1 holds nothing
}


def extra_placements(spec):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    out = []
    for p in spec.split(","):
        if p == "R":
            out.append(Replicate())
        elif p.startswith("SS"):
            d, sf = p[2:].split(":")
            out.append(_StridedShard(int(d), split_factor=int(sf)))
        else:
            out.append(Shard(int(p[1:])))
    return out


def extra_tensor(name, shape):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    return torch.randn(shape, generator=g)


def save_extras(store):
    """EXTRAS placed on the (dp=2, tp=2) mesh and saved without a config; the
    local tensors that differ from the pieces ptc reads. The local tensors
    are cut as DTensor cuts them (each placement's split, left to right;
    distribute_tensor itself refuses uneven strided shards)."""
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    coord = mesh.get_coordinate()
    state, bad = {}, []
    for name, (shape, spec) in EXTRAS.items():
        full = extra_tensor(name, shape)
        pl, part = extra_placements(spec), full
        for m, p in enumerate(pl):
            if not p.is_replicate():
                part = p._split_tensor(part, mesh.size(m), with_padding=False,
                                       contiguous=True)[0][coord[m]]
        x = DTensor.from_local(part.contiguous(), mesh, pl, run_check=False, shape=full.shape,
                               stride=full.stride())
        state[name] = x
        lshape, pieces = _dtensor.local_pieces(x, name)
        loc = x.to_local()
        if tuple(loc.shape) != lshape:
            bad.append(name)
            continue
        flat = loc.reshape(-1)
        for lo, hi, off, st in pieces:
            box = full[tuple(slice(a, b) for a, b in zip(lo, hi))]
            ext = tuple(b - a for a, b in zip(lo, hi))
            at = flat.storage_offset() + off  # as_strided's offset counts from the storage
            if not torch.equal(torch.as_strided(flat, ext, st, at), box):
                bad.append(name)
    return ptc.save(store, state), bad


TP_PLAN = {m: RowwiseParallel() if m.endswith(("wo", "w2")) else ColwiseParallel()
           for m in TP_MODULES}


def parse_mesh(text):
    """{"dp": D, "tp": T} of "dp=2,tp=2" (missing keys 1)."""
    d = dict(kv.split("=") for kv in text.split(",") if kv)
    return {"dp": int(d.get("dp", 1)), "tp": int(d.get("tp", 1))}


def build(mesh_text, seed, plain=False):
    """The model under a mesh, initialised from @p seed, its AdamW and the dp
    coordinate and degree of this process."""
    torch.manual_seed(seed)
    model = Llama()
    if plain:
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2), 0, 1
    m = parse_mesh(mesh_text)
    mesh = init_device_mesh("cpu", (m["dp"], m["tp"]), mesh_dim_names=("dp", "tp"))
    if m["tp"] > 1:
        for blk in model.layers:
            parallelize_module(blk, mesh["tp"], TP_PLAN)
    if m["dp"] > 1 or m["tp"] == 1:
        for blk in model.layers:
            fully_shard(blk, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2), \
        mesh["dp"].get_local_rank(), m["dp"]


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(VOCAB, (BATCH, SEQ + 1), generator=g)


def train(model, opt, dp_i, dp, steps, first):
    """@p steps AdamW steps from step @p first; the global batch's mean loss of each."""
    losses = []
    for k in range(first, first + steps):
        data = batch(k)
        lo, hi = dp_i * BATCH // dp, (dp_i + 1) * BATCH // dp
        x, y = data[lo:hi, :-1], data[lo:hi, 1:]
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        if dist.is_initialized() and dist.get_world_size() > 1 and dp > 1:
            dist.all_reduce(mean)  # every tp rank holds its dp rank's loss: dp * tp copies
            mean /= dist.get_world_size()
        losses.append(float(mean))
    return losses


def flatten(msd, osd):
    """{name: tensor} of a model's and an optimizer's state dicts (DTensors as
    they are; the same tensor objects)."""
    flat = {"model." + k: v for k, v in msd.items()}
    for fqn, st in osd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                flat["optim.%s.%s" % (fqn, k)] = v
    return flat


def flat_state(model, opt):
    """The flattened state of @p model and @p opt, and its state dicts (for
    set_state_dict)."""
    msd, osd = get_state_dict(model, opt)
    return flatten(msd, osd), msd, osd


def local(x):
    return x._local_tensor if isinstance(x, DTensor) else x


def bits(x):
    x = local(x).detach().contiguous().reshape(-1)
    return x.view(torch.int32) if x.dtype == torch.float32 else x


def placements(flat):
    """The distinct placements of the state: what kinds of DTensor it holds."""
    seen = set()
    for x in flat.values():
        if isinstance(x, DTensor):
            seen.add("%s %s" % (tuple(x.device_mesh.shape), tuple(str(p) for p in x.placements)))
        else:
            seen.add("plain")
    return sorted(seen)


def resume(store, dcp_dir, mesh_text, plain=False):
    """A fresh model loaded from ptc's save and another from DCP's: the tensors
    that differ bit for bit (or whose global values differ from the saved ones),
    and the M steps' losses of ptc's."""
    model, opt, dp_i, dp = build(mesh_text, seed=99, plain=plain)
    flat, msd, osd = flat_state(model, opt)
    rec = ptc.load(store, flat)
    other, opt2, _, _ = build(mesh_text, seed=98, plain=plain)
    flat2, msd2, osd2 = flat_state(other, opt2)
    dcp.load({"model": msd2, "optim": osd2}, checkpoint_id=dcp_dir)
    differ = sorted(n for n in flat if not torch.equal(bits(flat[n]), bits(flat2[n])))
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    losses = train(model, opt, dp_i, dp, M, K)
    return {"differ": differ, "losses": losses, "step": rec["step"], "tensors": len(flat),
            "placements": placements(flat)}


def write_dcp_whole(dcp_dir, path):
    """DCP's whole tensors (loaded into a plain model) as a safetensors file."""
    from safetensors.torch import save_file
    model, opt, _, _ = build(None, seed=97, plain=True)
    flat, msd, osd = flat_state(model, opt)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=dcp_dir)
    save_file({n: local(x).contiguous() for n, x in flatten(msd, osd).items()}, path)


def refuse_partial(store):
    """[type, message] of ptc.save of a Partial DTensor."""
    from torch.distributed.tensor import Partial
    mesh = init_device_mesh("cpu", (1,))
    x = DTensor.from_local(torch.ones(3), mesh, [Partial()])
    try:
        ptc.save(store, {"partial": x})
    except ptc.Error as e:
        return [type(e).__name__, e.message]
    return None


def main():
    mode, store, dcp_dir, init, out = sys.argv[1:6]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    res = {"rank": rank}
    if mode == "save":
        model, opt, dp_i, dp = build("dp=2,tp=2", seed=7)
        res["before"] = train(model, opt, dp_i, dp, K, 0)
        flat, msd, osd = flat_state(model, opt)
        res["placements"] = placements(flat)
        res["version"] = ptc.save(store, flat, step=K, rules=RULES,
                                  compress=os.environ.get("PTC_DTENSOR_COMPRESS"))
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=dcp_dir)
        res["losses"] = train(model, opt, dp_i, dp, M, K)
        for m in os.environ.get("PTC_DTENSOR_MESHES", "dp=4;tp=4").split(";"):
            res[m] = resume(store, dcp_dir, m)
        res["extras_version"], res["extras_bad"] = save_extras(store + "-x")
    else:
        res["dp=1"] = resume(store, dcp_dir, "dp=1")
        res["plain"] = resume(store, dcp_dir, None, plain=True)
        write_dcp_whole(dcp_dir, os.path.join(out, "dcp.safetensors"))
        res["partial"] = refuse_partial(store)
    dist.destroy_process_group()
    with open(os.path.join(out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
