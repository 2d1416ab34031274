"""One process of test_collective.py: joins a gloo group (init_method file://),
cuts its rank's local tensors of test_checkpoint.model() — every dtype, a 0-d
and an empty tensor, optimizer state — under a configuration, and either saves
them with ptc.save or loads them with ptc.load into zeroed tensors and
compares every byte with the slice cut in this process, then tries to save
while the test holds the store's writer lock.

    python ckpt_worker.py save|load STORE CONFIG[;CONFIG...] INIT_FILE OUT_DIR

RANK and WORLD_SIZE come from the environment. Writes OUT_DIR/rank-R.json.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import ptc
from test_checkpoint import RULES, empty_states, model, raw, shapes


def main():
    mode, store, config, init, out = sys.argv[1:6]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world)
    g = model()
    res = {"rank": rank}
    with ptc.Store(store) as st:
        if mode == "save":
            lay = ptc.Layout(g, config, RULES)
            assert lay.world == world
            state = {n: sh.take(g[n]) for n, sh in lay.shards(rank).items() if sh.present}
            lay.close()
            bad = dict(state)
            if rank == 2:              # one process's wrong dtype: nobody writes
                bad["blk.1.f32.rep"] = torch.zeros(4, 3, 2, dtype=torch.float64)
            try:
                ptc.save(st, bad, config=config, rules=RULES, rank=rank, step=1,
                         global_shapes=shapes(g))
            except ptc.Error as e:
                res["bad"] = [type(e).__name__, e.message]
            res["versions_after_bad"] = [v["version"] for v in st.versions()]
            res["version"] = ptc.save(st, state, config=config, rules=RULES, rank=rank,
                                      step=3, meta={"by": "gloo"}, global_shapes=shapes(g))
            res["tensors"] = len(state)
        else:                          # CONFIG: configurations separated by ';'
            for cfg in config.split(";"):
                lay = ptc.Layout(g, cfg, RULES)
                assert lay.world == world
                state = empty_states(lay)[rank]
                rec = ptc.load(st, state, config=cfg, rank=rank)
                res[cfg] = {
                    "record": {k: rec[k] for k in ("version", "step", "config", "meta")},
                    "mismatch": [n for n, x in state.items()
                                 if raw(x) != raw(lay.shard(n, rank).take(g[n]))],
                    "tensors": len(state)}
                lay.close()
            # the test holds the store's writer lock meanwhile: loading needed
            # none, saving fails on process 0's begin and every process says so
            lay = ptc.Layout(g, "tp=2", RULES)
            state = {n: sh.take(g[n]) for n, sh in lay.shards(rank).items() if sh.present}
            lay.close()
            try:
                ptc.save(st, state, config="tp=2", rules=RULES, rank=rank,
                         global_shapes=shapes(g))
            except ptc.Error as e:
                res["locked"] = [type(e).__name__, e.message]
    with open(os.path.join(out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
