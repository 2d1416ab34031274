"""One process of test_hosts.py: joins a gloo group (init_method file://) as
the process of a named host whose store is a directory of its own
(BASE/<host>; no process opens another host's), and either saves its rank's
local tensors of test_checkpoint.model() across hosts with ptc.save(...,
across_hosts=True, replicas=1) or loads them with ptc.load(...,
across_hosts=True) into zeroed tensors and compares every byte with the slice
cut in this process.

    python hosts_worker.py save|load|whole|xsave|xload BASE CONFIG HOSTS INIT_FILE OUT_DIR
                           [REPLICAS]

HOSTS: the host of each process, comma-separated (process r is rank r).
REPLICAS: of a save (default 1). PTC_TEST_LOAD_VERSION: the version a load
takes (default: the one the hosts choose).
whole: a load without config= of every tensor whole into each process.
xsave / xload: DTensors on a 1-D CPU mesh of every process (Shard(0), a 0-d
tensor replicated) saved without config= (an explicit layout; REPLICAS may
list several saves, "1,0") / loaded into zeroed DTensors of the same
placements (PTC_TEST_LOAD_VERSION may list several loads, "0,2"; CONFIG
unused).
A load records the ptc.PtcWarnings it raised (class, message, file) in
"warnings". In save, load and whole, odd ranks pass their tensors as device
tensors (ptc._ring.fake_device: CPU tensors on the device path), staged
through host copies.
RANK and WORLD_SIZE come from the environment. Writes OUT_DIR/rank-R.json.
"""

import contextlib
import json
import os
import sys
import warnings

import torch
import torch.distributed as dist

import ptc
from ptc import _ring
from test_checkpoint import RULES, empty_states, model, raw, shapes


def main():
    mode, base, config, hosts, init, out = sys.argv[1:7]
    replicas = sys.argv[7] if len(sys.argv) > 7 else "1"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host = hosts.split(",")[rank]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world)
    g = model()
    res = {"rank": rank, "host": host}
    if mode in ("xsave", "xload"):
        with ptc.Store(os.path.join(base, host)) as st:
            explicit(mode, st, g, rank, world, host, replicas, res)
        return finish(res, out, rank, world)
    lay = ptc.Layout(g, config, RULES)
    assert lay.world == world
    # odd ranks hand their tensors over as device tensors (the stand-in
    # device), which saves and loads across hosts stage through host copies
    dev = _ring.fake_device() if rank % 2 else contextlib.nullcontext()
    with dev, ptc.Store(os.path.join(base, host)) as st:
        if mode == "save":
            state = {n: sh.take(g[n]) for n, sh in lay.shards(rank).items() if sh.present}
            res["version"] = ptc.save(st, state, config=config, rules=RULES, rank=rank, step=3,
                                      meta={"by": "hosts"}, global_shapes=shapes(g),
                                      across_hosts=True, host=host, replicas=int(replicas))
        else:
            # load: this rank's shards of CONFIG; whole: every tensor whole
            # (no config=: the layout the local tensors describe)
            whole = mode == "whole"
            state = ({n: torch.zeros_like(t) for n, t in g.items()} if whole
                     else empty_states(lay)[rank])
            try:
                with warnings.catch_warnings(record=True) as said:
                    warnings.simplefilter("always")
                    rec = ptc.load(st, state, config=None if whole else config, rank=rank,
                                   across_hosts=True, host=host,
                                   version=int(os.environ.get("PTC_TEST_LOAD_VERSION", "0"))
                                   or None)
                res["warnings"] = [[w.category.__name__, str(w.message),
                                    os.path.basename(w.filename)] for w in said
                                   if issubclass(w.category, ptc.PtcWarning)]
                res["record"] = {k: rec[k] for k in ("version", "step", "meta", "hosts",
                                                     "moved_bytes", "lower_bound",
                                                     "bytes_read")}
                res["mismatch"] = [n for n, x in state.items()
                                   if raw(x) != raw(g[n] if whole
                                                    else lay.shard(n, rank).take(g[n]))]
                res["tensors"] = len(state)
            except ptc.Error as e:
                res["error"] = [type(e).__name__, e.message]
    lay.close()
    return finish(res, out, rank, world)


def dtensors(g, rank, world, zero):
    """{name: DTensor} of the global tensors @p g on a 1-D CPU mesh of @p world
    processes: Shard(0) (torch.chunk's parts, empty ones included), a 0-d
    tensor replicated; zeros with @p zero."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for n, full in g.items():
        pl = Shard(0) if full.dim() else Replicate()
        part = full if full.dim() == 0 else pl._split_tensor(full, world, with_padding=False,
                                                             contiguous=True)[0][rank]
        part = torch.zeros_like(part) if zero else part.contiguous()
        out[n] = DTensor.from_local(part, mesh, [pl], run_check=False, shape=full.shape,
                                    stride=full.stride())
    return out


def explicit(mode, st, g, rank, world, host, replicas, res):
    """xsave: one save per entry of REPLICAS (comma-separated: "1,0" saves
    twice), the versions in "versions"; xload: one load per entry of
    PTC_TEST_LOAD_VERSION (comma-separated, 0: the hosts' choice; default
    one load), each one's outcome in "loads"."""
    want = dtensors(g, rank, world, False)
    if mode == "xsave":
        res["versions"] = [ptc.save(st, want, step=5, across_hosts=True, host=host,
                                    replicas=int(k)) for k in str(replicas).split(",")]
        return
    res["loads"] = []
    for v in os.environ.get("PTC_TEST_LOAD_VERSION", "0").split(","):
        one = {}
        res["loads"].append(one)
        state = dtensors(g, rank, world, True)
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                rec = ptc.load(st, state, across_hosts=True, host=host, version=int(v) or None)
            one["warnings"] = [[w.category.__name__, str(w.message),
                                os.path.basename(w.filename)]
                               for w in said if issubclass(w.category, ptc.PtcWarning)]
            one["record"] = {k: rec[k] for k in ("version", "step", "config", "hosts",
                                                 "moved_bytes", "lower_bound")}
            one["mismatch"] = [n for n, x in state.items()
                               if raw(x.to_local()) != raw(want[n].to_local())]
            one["tensors"] = len(state)
        except ptc.Error as e:
            one["error"] = [type(e).__name__, e.message]


def finish(res, out, rank, world):
    with open(os.path.join(out, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    if world > 1:
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
