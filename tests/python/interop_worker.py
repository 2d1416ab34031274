"""One process of test_interop.py: joins a gloo group (init_method file://)
and works on version 1 of STORE, which `ptc train` saved:

1. loads it with ptc.load under LOAD_CONFIG (one rank per process) and
   compares every byte with the slice of the stored whole tensor;
2. loads it under SAVE_CONFIG (several ranks per process), compares the
   same way, and saves those tensors with ptc.save under SAVE_CONFIG as
   version 2, with version 1's training-state record, so that `ptc train
   --resume --version 2` continues the job.

    python interop_worker.py STORE LOAD_CONFIG SAVE_CONFIG INIT_FILE OUT_DIR

RANK and WORLD_SIZE come from the environment. Writes OUT_DIR/rank-R.json.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import ptc

RULES = "ptc-mlp"          # the rules `ptc train` stores its state under
RECORD = ("schedule", "seed", "epoch", "sample", "global_batch", "loss")


def raw(x):
    return x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def load(st, whole, specs, config, ranks):
    """ptc.load of version 1 under @p config into fresh tensors of @p ranks;
    returns (record, states, names whose bytes differ from the stored ones)."""
    lay = ptc.Layout(specs, config, RULES)
    states = [{n: torch.full(sh.shape, 7, dtype=whole[n].dtype)
               for n, sh in lay.shards(r).items() if sh.present} for r in ranks]
    rec = ptc.load(st, states, config=config, rank=ranks, version=1)
    bad = [n for r, s in zip(ranks, states) for n, x in s.items()
           if raw(x) != raw(lay.shard(n, r).take(whole[n]))]
    lay.close()
    return rec, states, bad


def main():
    store, load_cfg, save_cfg, init, out = sys.argv[1:6]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world)
    res = {"rank": rank}
    with ptc.Store(store) as st:
        specs = [(n, dt, shape) for n, dt, shape, _ in st.tensors(1)]
        whole = {n: st.read(n, version=1, like="torch") for n, _, _ in specs}
        rec, _, res["load_mismatch"] = load(st, whole, specs, load_cfg, [rank])
        res["record"] = {k: rec[k] for k in ("version", "step", "config", "meta")}
        per = ptc.Layout(specs, save_cfg, RULES).world // world
        ranks = list(range(rank * per, (rank + 1) * per))
        _, states, res["save_mismatch"] = load(st, whole, specs, save_cfg, ranks)
        res["saved"] = ptc.save(st, states, config=save_cfg, rules=RULES, rank=ranks,
                                step=rec["step"], meta=rec["meta"],
                                record={k: rec[k] for k in RECORD},
                                global_shapes={n: shape for n, _, shape in specs})
        res["tensors"] = sum(len(s) for s in states)
    with open(os.path.join(out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
