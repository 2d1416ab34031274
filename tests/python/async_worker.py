"""One process of test_async.py: joins a gloo group (init_method file://) and
saves test_device.big_model()'s local tensors of its rank under CONFIG with
ptc.async_save.

    python async_worker.py MODE STORE CONFIG INIT_FILE OUT_DIR

MODE
  async   two async saves back to back (the tensors changed right after each
          call returns), then a blocking ptc.save; writes OUT_DIR/rank-R.json
          with the versions, what done() said, and the snapshot's size
  crash   a blocking save (version 1), then an async save whose background
          protocol stops for good at its gather of the shard descriptors
          (after this process's pack files are written): prints
          "persisting R" and waits to be killed

RANK and WORLD_SIZE come from the environment; PTC_FAKE_DEVICE=1 sends the
CPU tensors down the device path (ptc._ring).
"""

import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import ptc
from ptc import _transport
from test_checkpoint import RULES, local_states, shapes
from test_device import big_model


def state_of(g, config, rank):
    lay, states = local_states(g, config)
    return states[rank]


def main():
    mode, store, config, init, out = sys.argv[1:6]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world)
    g = big_model()
    state = state_of(g, config, rank)
    res = {"rank": rank}
    with ptc.Store(store) as st:
        if mode == "async":
            h1 = ptc.async_save(st, state, config=config, rules=RULES, rank=rank, step=1,
                                global_shapes=shapes(g))
            for x in state.values():          # training goes on at once
                x.reshape(-1).view(torch.uint8).fill_(0x5A)
            g2 = {n: x.clone() for n, x in g.items()}
            g2["blk.0.big.col"].mul_(2)
            state2 = state_of(g2, config, rank)
            h2 = ptc.async_save(st, state2, config=config, rules=RULES, rank=rank, step=2,
                                global_shapes=shapes(g))
            res["done1_after_second"] = h1.done()   # the second waited for the first
            res["snapshot"] = ptc._async.snapshot_bytes()
            v3 = ptc.save(st, state2, config=config, rules=RULES, rank=rank, step=3,
                          global_shapes=shapes(g))  # waits for the second
            res["done2_after_save"] = h2.done()
            res["versions"] = [h1.wait(), h2.wait(), v3]
        else:
            ptc.save(st, state, config=config, rules=RULES, rank=rank, step=1,
                     global_shapes=shapes(g))
            stuck = threading.Event()

            def gather(self, *args):
                print("persisting %d" % rank, flush=True)
                stuck.wait()                    # until killed

            _transport.Transport._gather = gather   # gloo's: the descriptors only
            ptc.async_save(st, state, config=config, rules=RULES, rank=rank, step=2,
                           global_shapes=shapes(g))
            while True:                         # training goes on
                time.sleep(0.1)
    with open(os.path.join(out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
