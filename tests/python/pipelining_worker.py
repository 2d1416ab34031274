"""One process of test_pipelining.py: a small transformer (token and position
embedding, causal pre-norm blocks, final norm, vocabulary head) cut into
stages, run by torch.distributed.pipelining over gloo under PTC schedules
(ptc.pipelining), then compared with the same model run unpipelined in this
process on the same micro-batches.

    pipelining_worker.py INIT_FILE OUT_DIR JOBS_JSON

JOBS_JSON is a list of {"kind", "M", "chunks", "k", "adaptive", "comms",
"latency", "steps"}; RANK and WORLD_SIZE come from the environment. For each
job the process writes, in OUT_DIR/rank-R.json, the largest gradient and
loss differences relative to the reference (per tensor, the largest
absolute difference over the largest reference magnitude), the stages it
held, and the error if the job failed."""

import datetime
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage

import ptc

VOCAB, DIM, HEADS, FF, SEQ, MB_ROWS = 32, 16, 2, 32, 8, 2
DTYPE = torch.float64


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(DIM)
        self.ff = nn.Sequential(nn.Linear(DIM, FF), nn.GELU(), nn.Linear(FF, DIM))
        self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1))

    def forward(self, x):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=self.mask.to(x.dtype), need_weights=False)
        x = x + a
        return x + self.ff(self.ln2(x))


class Piece(nn.Module):
    """Stage i of S: the embeddings on the first, the head on the last."""

    def __init__(self, i, S, blocks_per_stage):
        super().__init__()
        self.first, self.last = i == 0, i == S - 1
        if self.first:
            self.tok = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.1)
        self.blocks = nn.ModuleList(Block() for _ in range(blocks_per_stage))
        if self.last:
            self.norm = nn.LayerNorm(DIM)
            self.head = nn.Linear(DIM, VOCAB)

    def forward(self, x):
        if self.first:
            x = self.tok(x) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)) if self.last else x


def loss_fn(logits, target):
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def pieces(S):
    torch.manual_seed(1234)
    return [Piece(i, S, 1).to(DTYPE) for i in range(S)]


def data(M, step):
    g = torch.Generator().manual_seed(99 + step)
    x = torch.randint(0, VOCAB, (M * MB_ROWS, SEQ), generator=g)
    y = torch.randint(0, VOCAB, (M * MB_ROWS, SEQ), generator=g)
    return x, y


def reference(S, M, steps):
    """Per step: the losses of each micro-batch and the gradients of the
    mean loss, unpipelined, after `steps - 1` SGD steps."""
    ps = pieces(S)
    opt = torch.optim.SGD([p for m in ps for p in m.parameters()], lr=0.1)
    out = []
    for step in range(steps):
        x, y = data(M, step)
        opt.zero_grad()
        losses = []
        for xm, ym in zip(x.chunk(M), y.chunk(M)):
            h = xm
            for m in ps:
                h = m(h)
            loss = loss_fn(h, ym)
            losses.append(loss.detach())
            (loss / M).backward()
        out.append((torch.stack(losses), [{n: p.grad.clone() for n, p in m.named_parameters()}
                                          for m in ps]))
        opt.step()
    return out


def rel(a, b):
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def run_job(job, rank, world):
    kind, M = job["kind"], job["M"]
    gen = ptc.Schedule.generate(kind, world, M, chunks=job.get("chunks"), k=job.get("k"),
                                adaptive=job.get("adaptive", False), cost_w=1.0,
                                latency=job.get("latency", 0.0))
    S, mine = gen.stages, gen.stage_indices(rank)
    steps = job.get("steps", 1)
    ref = reference(S, M, steps)
    ps = pieces(S)
    stages = [PipelineStage(ps[i], i, S, torch.device("cpu")) for i in mine]
    opt = torch.optim.SGD([p for i in mine for p in ps[i].parameters()], lr=0.1)
    sched = ptc.schedule(stages, M, kind=kind, loss_fn=loss_fn, chunks=job.get("chunks"),
                         k=job.get("k"), adaptive=job.get("adaptive", False), cost_w=1.0,
                         latency=job.get("latency", 0.0), comms=job.get("comms", False))
    grad_err = loss_err = 0.0
    for step in range(steps):
        x, y = data(M, step)
        opt.zero_grad()
        losses = []
        if 0 in mine and S - 1 in mine:
            sched.step(x, target=y, losses=losses)
        elif 0 in mine:
            sched.step(x)
        elif S - 1 in mine:
            sched.step(target=y, losses=losses)
        else:
            sched.step()
        ref_losses, ref_grads = ref[step]
        if losses:
            loss_err = max(loss_err, rel(torch.stack([l.detach() for l in losses]), ref_losses))
        for i in mine:
            for n, p in ps[i].named_parameters():
                assert p.grad is not None, "stage %d %s has no gradient" % (i, n)
                grad_err = max(grad_err, rel(p.grad, ref_grads[i][n]))
        opt.step()
    return {"stages": mine, "grad_rel": grad_err, "loss_rel": loss_err,
            "has_losses": S - 1 in mine}


def main():
    init, out_dir, jobs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    results = []
    for job in jobs:
        t0 = time.monotonic()
        try:
            r = run_job(job, rank, world)
        except Exception as e:  # reported per job; the others still run
            r = {"error": "%s: %s" % (type(e).__name__, e), "trace": traceback.format_exc()}
        r["job"] = job
        r["seconds"] = round(time.monotonic() - t0, 3)
        results.append(r)
        dist.barrier()
    with open(os.path.join(out_dir, "rank-%d.json" % rank), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
