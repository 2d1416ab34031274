"""One rank process of test_train.py: a small Llama-style model (HF parameter
names, grouped-query attention, RoPE, SwiGLU, RMSNorm) trained with torch
tensor parallelism (DTensor parallelize_module: column-parallel q/k/v/gate/up
and head, row-parallel o/down and a vocab-parallel embedding — the `llama`
rules preset's placements) over the tp dimension of a dp x tp device mesh,
data parallelism by averaging gradients over the dp dimension, and AdamW
(its moments are DTensors like their parameters: `<param>.exp_avg` and
`<param>.exp_avg_sq` in the preset's `optim` line). Data comes from a stored
token dataset through ptc.torch.StepDataset.

    python tp_train.py --store S --dp D --tp T --steps N [--save-at K] [--resume]
                       [--copy-to DIR ...] --out DIR

Started by test_train.py with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
set (gloo on the CPU). Each rank writes DIR/rank-R.json: the global loss of
every step it ran, the version saved or loaded and the error checks' outcomes.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

import ptc
import ptc.torch

VOCAB, HIDDEN, HEADS, KV_HEADS, INTER, LAYERS, SEQ = 64, 32, 4, 2, 64, 2, 8
BATCH, SEED, LR = 8, 3, 1e-2


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        hd = HIDDEN // HEADS
        self.q_proj = nn.Linear(HIDDEN, HEADS * hd, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * hd, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * hd, bias=False)
        self.o_proj = nn.Linear(HEADS * hd, HIDDEN, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        hd = HIDDEN // HEADS
        # column-parallel outputs are this rank's heads: the views follow them
        q = self.q_proj(x).view(b, s, -1, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(HIDDEN, eps=1e-6)
        self.self_attn = Attention()
        self.post_attention_layernorm = nn.RMSNorm(HIDDEN, eps=1e-6)
        self.mlp = MLP()

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-6)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        hd = HIDDEN // HEADS
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat((ang, ang), -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((ang, ang), -1).sin(), persistent=False)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        s = ids.shape[1]
        for layer in self.model.layers:
            x = layer(x, self.cos[:s], self.sin[:s])
        return self.lm_head(self.model.norm(x))


def tp_plan():
    plan = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(),
                                                  output_layouts=Replicate()),
            "lm_head": ColwiseParallel(output_layouts=Replicate())}
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                  "mlp.gate_proj", "mlp.up_proj"):
            plan[p + m] = ColwiseParallel()
        for m in ("self_attn.o_proj", "mlp.down_proj"):
            plan[p + m] = RowwiseParallel()
    return plan


def build(dp, tp):
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(SEED)          # the same full model everywhere, then sharded
    model = parallelize_module(Llama(), mesh["tp"], tp_plan())
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    return mesh, model, opt


def train_state(model, opt):
    """{global name: tensor} of parameters and AdamW moments (created empty when
    the optimizer has not stepped yet, as a resumed job's are)."""
    state = {}
    for name, p in model.named_parameters():
        s = opt.state[p]
        if not s:
            s["step"] = torch.tensor(0.0)
            s["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            s["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state[name] = p.data if not isinstance(p, DTensor) else p
        state[name + ".exp_avg"] = s["exp_avg"]
        state[name + ".exp_avg_sq"] = s["exp_avg_sq"]
    return state


def local(t):
    return t._local_tensor if isinstance(t, DTensor) else t


def step(model, opt, batch, dp_group, dp):
    ids = torch.tensor(np.stack(batch).astype(np.int64))
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    for p in model.parameters():     # data parallelism: the mean gradient over dp
        g = local(p.grad)
        dist.all_reduce(g, group=dp_group)
        g.div_(dp)
    opt.step()
    opt.zero_grad(set_to_none=True)
    total = loss.detach().clone()
    dist.all_reduce(total, group=dp_group)
    return float(total) / dp


def outcome(fn):
    """{"class", "message"} of the ptc.Error fn raised (None: no error)."""
    try:
        fn()
    except ptc.Error as e:
        return {"class": type(e).__name__, "message": e.message}
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--save-at", type=int, default=0)
    ap.add_argument("--copy-to", action="append", default=[])
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dp, tp = args.dp, args.tp
    cfg = "dp=%d,tp=%d" % (dp, tp)
    mesh, model, opt = build(dp, tp)
    dp_rank, tp_rank = mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()
    assert rank == dp_rank * tp + tp_rank           # ptc's rank order (tp fastest)
    st = ptc.Store(args.store)
    # one tp rank per dp rank counts what the loop consumed (the others read the same)
    ds = ptc.torch.StepDataset(st, "tokens", seed=SEED, epoch=0, batch=BATCH, dp=dp,
                               rank=dp_rank, decode=lambda r: np.frombuffer(r, "<u2"),
                               count="commit" if tp_rank == 0 else False)
    res = {"rank": rank, "losses": {}, "checks": {}}
    start = 0
    if args.resume:
        state = train_state(model, opt)
        # a failure on one process reaches every process as the same error
        res["checks"]["load_missing_version"] = outcome(
            lambda: ptc.load(st, state, config=cfg, rank=rank, version=99))
        bad = dict(state)
        if rank == world - 1:
            name = "model.layers.0.mlp.up_proj.weight"
            bad[name] = torch.zeros(local(state[name]).shape, dtype=torch.float64)
        res["checks"]["load_bad_dtype"] = outcome(
            lambda: ptc.load(st, bad, config=cfg, rank=rank))
        rec = ptc.load(st, state, config=cfg, rank=rank)
        start = rec["step"]
        for s in opt.state.values():
            s["step"].fill_(start)
        ds.load_state_dict(json.loads(rec["meta"]["data"]))
        res["loaded"] = {"version": rec["version"], "step": rec["step"],
                         "config": rec["config"], "loss": rec["loss"]}
    it = iter(ds)
    res["seen"] = {}          # step -> the sample ids this dp rank consumed
    for j, k in enumerate(range(start, args.steps)):
        res["losses"][k + 1] = step(model, opt, next(it), mesh["dp"].get_group(), dp)
        if tp_rank == 0:
            res["seen"][k + 1] = [int(i) for i in ds.ids(j)]
        if k + 1 == args.save_at:
            state = train_state(model, opt)
            bad = dict(state)
            if rank == 1:                 # one process's wrong shape: nobody writes
                name = "model.layers.1.self_attn.k_proj.weight"
                bad[name] = torch.zeros(3, 3)
            res["checks"]["save_bad_shape"] = outcome(
                lambda: ptc.save(st, bad, config=cfg, rules="llama", rank=rank, step=k + 1))
            res["versions_after_bad"] = [v["version"] for v in st.versions()]
            meta = {"data": json.dumps(ds.state_dict())}
            res["saved"] = ptc.save(st, state, config=cfg, rules="llama", rank=rank,
                                    step=k + 1, meta=meta,
                                    record={"loss": res["losses"][k + 1], "seed": SEED,
                                            "dataset": "tokens", "global_batch": BATCH,
                                            "sample": ds.position})
            dist.barrier()
            if rank == 0:                  # stores to resume from, as they are now
                for d in args.copy_to:
                    shutil.copytree(args.store, d)
            dist.barrier()
    for _ in it:                           # the end of the epoch commits the counts
        pass
    ds.close()
    st.close()
    with open(os.path.join(args.out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
