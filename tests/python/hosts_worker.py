"""One process of test_hosts.py: joins a gloo group (init_method file://) as
the process of a named host whose store is a directory of its own
(BASE/<host>; no process opens another host's), and either saves its rank's
local tensors of test_checkpoint.model() across hosts with ptc.save(...,
across_hosts=True, replicas=1) or loads them with ptc.load(...,
across_hosts=True) into zeroed tensors and compares every byte with the slice
cut in this process.

    python hosts_worker.py save|load BASE CONFIG HOSTS INIT_FILE OUT_DIR [REPLICAS]

HOSTS: the host of each process, comma-separated (process r is rank r).
REPLICAS: of a save (default 1). PTC_TEST_LOAD_VERSION: the version a load
takes (default: the one the hosts choose).
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
    mode, base, config, hosts, init, out = sys.argv[1:7]
    replicas = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host = hosts.split(",")[rank]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world)
    g = model()
    res = {"rank": rank, "host": host}
    lay = ptc.Layout(g, config, RULES)
    assert lay.world == world
    with ptc.Store(os.path.join(base, host)) as st:
        if mode == "save":
            state = {n: sh.take(g[n]) for n, sh in lay.shards(rank).items() if sh.present}
            res["version"] = ptc.save(st, state, config=config, rules=RULES, rank=rank, step=3,
                                      meta={"by": "hosts"}, global_shapes=shapes(g),
                                      across_hosts=True, host=host, replicas=replicas)
        else:
            state = empty_states(lay)[rank]
            try:
                rec = ptc.load(st, state, config=config, rank=rank, across_hosts=True,
                               host=host,
                               version=int(os.environ.get("PTC_TEST_LOAD_VERSION", "0")) or None)
                res["record"] = {k: rec[k] for k in ("version", "step", "meta", "hosts",
                                                     "moved_bytes", "lower_bound",
                                                     "bytes_read")}
                res["mismatch"] = [n for n, x in state.items()
                                   if raw(x) != raw(lay.shard(n, rank).take(g[n]))]
                res["tensors"] = len(state)
            except ptc.Error as e:
                res["error"] = [type(e).__name__, e.message]
    lay.close()
    with open(os.path.join(out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    if world > 1:
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
