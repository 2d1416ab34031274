"""Distributed checkpoint save/load on the CPU over gloo: torch.distributed.
checkpoint (DCP) against ptc.save / ptc.load, on the same Llama-style state
(parameters + AdamW moments, fp32; --state) in one run on one machine.

Phases (each a fresh set of rank processes, so every figure is that phase's):
  save   4 ranks, dp=2 x tp=2, optimizer moments sharded over dp
  async  4 ranks, the same state saved in the background (ptc.async_save,
         dcp.async_save over a gloo group of its own), after one untimed
         save (the snapshot memory, the group), --async-reps timed saves
         (3): the training stall (the call's time), the time until the
         commit is durable, and right before each, in the same ranks, the
         snapshot copy alone (memcpy of the same bytes into memory touched
         before) and write() + fsync() of the same bytes; medians
  load   into 2 ranks and into 8 ranks, resharding on the way, into sharded
         destinations (dp=2 x tp=N/2) and whole tensors (a pipeline layout:
         pp=2, and dp=2 x pp=4); cold (the checkpoint's pages dropped from
         the page cache with posix_fadvise DONTNEED first) into fresh
         destinations (torch.empty: the load faults their pages in), warm
         (read again at once), and cold again into the same tensors, now
         touched, as a job's initialized model and optimizer tensors are
         ("touched"; its own storage bound measured right before it)
Figures: wall time (slowest rank, between barriers), RSS per rank before
the call and its peak (VmHWM, reset right before the call, so that the construction
of the state does not count) when the call returns (before any check),
and that peak above the rank's own tensors (for a load, whose destination
pages are faulted in by the call, above before + the destination bytes),
bytes on disk, bytes each rank received; every loaded element
is checked against the value it was saved with (a function of its global
index), so both sides are known to load the same bytes.

    python bench/python/bench_ckpt.py [--impl dcp,ptc] [--state s|m|l] [--load-worlds 2,8]
                                      [--out DIR] [--no-io-bound] [--io-reps N] [--settle S]

--state picks the model: l (the default) is 1.24 GiB, m 565 MiB, s 158 MiB.
`make bench-python` runs --state m --io-reps 2 (BENCH_ARGS adds or overrides):
loads into 2 and 8 ranks, both destinations, both sides, and the bounds in
a few minutes on 2 shared cores (the 8-rank loads start 8 gloo processes on
them: oversubscribed, so their figures include the scheduler's share).

The plain-I/O bound of the same run (bench_io_bound.py): the data files of
each side's checkpoint written again by one process each with write() +
fsync(), then read back cold with plain preads (1 to 16 threads, and after
fadvise WILLNEED); each side's save and its async save's time to the commit
are compared with the write bound of its own files, the cold loads with the
fastest cold read of the same bytes, the warm loads with the memory bound
measured right after them: one process per rank reading as many bytes from
the page cache into memory (bench_io_bound.warm_bound).
Bounds measured next to the figures, in the rank processes ("paired"):
before each cold load, process 0 reads the checkpoint's data files cold with
16 threads of 1 MiB preads (bench_io_bound.read_bound) and drops them again;
each async save is compared with the write() + fsync() of its rounds. On a
shared machine these are the fairer bounds: the ones at the end come
minutes later, under another load.
--settle S waits S seconds after each side's save before its cold loads
(and makes the bound's reads wait as long): a cold read soon after a large
write is slower on the virtual disk of the development machine.

Rank processes are started with subprocess (no pickle crosses a process
boundary); results come back as JSON files. The ptc side is two calls,
ptc.save and ptc.load (libptc's include/ptc/ckpt.h underneath).
"""

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


# ---- the model state ----------------------------------------------------------------------

def model_spec(layers, hidden, inter, vocab, heads, kv_heads):
    """[(name, global shape, tp split dim or None)] of a Llama-style model: HF names,
    column-parallel q/k/v/gate/up (split 0), row-parallel o/down (split 1),
    vocab-parallel embedding and head, replicated norms — the llama preset."""
    hd = hidden // heads
    spec = [("model.embed_tokens.weight", (vocab, hidden), 0)]
    for i in range(layers):
        p = "model.layers.%d." % i
        spec += [
            (p + "input_layernorm.weight", (hidden,), None),
            (p + "self_attn.q_proj.weight", (heads * hd, hidden), 0),
            (p + "self_attn.k_proj.weight", (kv_heads * hd, hidden), 0),
            (p + "self_attn.v_proj.weight", (kv_heads * hd, hidden), 0),
            (p + "self_attn.o_proj.weight", (hidden, heads * hd), 1),
            (p + "post_attention_layernorm.weight", (hidden,), None),
            (p + "mlp.gate_proj.weight", (inter, hidden), 0),
            (p + "mlp.up_proj.weight", (inter, hidden), 0),
            (p + "mlp.down_proj.weight", (hidden, inter), 1),
        ]
    spec += [("model.norm.weight", (hidden,), None), ("lm_head.weight", (vocab, hidden), 0)]
    return spec


MOMENTS = (".exp_avg", ".exp_avg_sq")

# --state: (layers, hidden, inter, vocab, heads, kv_heads) of the model; the
# bytes are fp32 parameters and two AdamW moments
STATES = {
    "s": (2, 512, 1408, 8000, 8, 2),        # 63 tensors, 158 MiB
    "m": (4, 768, 2048, 16000, 12, 3),      # 117 tensors, 565 MiB
    "l": (4, 1024, 2816, 32000, 16, 4),     # 117 tensors, 1.24 GiB
}


def full_spec(args):
    """Parameters then their two AdamW moments: [(name, shape, tp dim, is_optim)]."""
    base = model_spec(args.layers, args.hidden, args.inter, args.vocab, args.heads,
                      args.kv_heads)
    out = [(n, s, d, False) for n, s, d in base]
    for suffix in MOMENTS:
        out += [(n + suffix, s, d, True) for n, s, d in base]
    return out


def values(torch, tid, gshape, offset, lshape):
    """The value of every element of a box: a function of the tensor and the
    element's global index, so any rank can check what it loaded."""
    if not all(lshape):
        return torch.empty(lshape, dtype=torch.float32)
    idx = torch.zeros(lshape, dtype=torch.int64)
    stride = 1
    for d in range(len(gshape) - 1, -1, -1):
        shape = [1] * len(lshape)
        shape[d] = lshape[d]
        idx += (torch.arange(offset[d], offset[d] + lshape[d]) * stride).view(shape)
        stride *= gshape[d]
    return ((idx * 7919 + tid * 104729) % 65521).to(torch.float32) / 65521.0 - 0.5


def rss_now():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss():
    """The peak RSS since the last reset_peak() (VmHWM), else of the process."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak():
    """Start the peak RSS again from the current RSS (Linux >= 4.0), so that the
    memory of the state's construction, freed before the call, is not taken
    for the call's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def drop_cache(path):
    """Drop a folder's file pages from the page cache (no root needed)."""
    for root, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def data_files(path):
    """Sizes of a checkpoint's payload files (ptc's packs, DCP's .distcp),
    largest first: what the save wrote besides metadata."""
    sizes = []
    for root, _, files in os.walk(path):
        for f in files:
            if f.endswith(".pack") or f.endswith(".distcp"):
                sizes.append(os.stat(os.path.join(root, f)).st_size)
    return sorted(sizes, reverse=True)


def disk_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


# ---- destinations ---------------------------------------------------------------------------

PTC_RULES = "llama"


def whole_config(world):
    """The pipeline layout of whole tensors for @p world ranks."""
    return "pp=2" if world == 2 else "dp=%d,pp=4" % (world // 4)


def whole_names(args, world, rank):
    """The tensors rank @p rank holds whole under whole_config(world) (the
    same sets on both sides)."""
    import ptc
    lay = ptc.Layout({n: ("F32", s) for n, s, _, _ in full_spec(args)}, whole_config(world),
                     PTC_RULES)
    return {n for n, sh in lay.shards(rank).items() if sh.present}


def whole_state(torch, args, world, rank, fill):
    """{name: whole tensor} of the tensors the rank holds; bytes."""
    names = whole_names(args, world, rank)
    state, nbytes = {}, 0
    for tid, (name, shape, _, _) in enumerate(full_spec(args)):
        if name in names:
            state[name] = (values(torch, tid, shape, [0] * len(shape), shape) if fill
                           else torch.empty(shape))
            nbytes += state[name].numel() * 4
    return state, nbytes


def whole_check(torch, args, state):
    bad = 0
    for tid, (name, shape, _, _) in enumerate(full_spec(args)):
        if name in state and not torch.equal(state[name],
                                             values(torch, tid, shape, [0] * len(shape), shape)):
            bad += 1
    return bad


def copy_area(states):
    """Host memory for copy_bound, touched (filled with a first copy)."""
    import numpy as np
    buf = np.empty(sum(x.numel() * x.element_size() for x in states.values()), dtype=np.uint8)
    copy_bound(states, buf)
    return buf


def copy_bound(states, buf):
    """The snapshot copy alone: memcpy of every tensor into @p buf, host
    memory touched before (copy_area); seconds."""
    import ctypes
    ts = [x for x in states.values() if x.numel()]
    at, t0 = buf.ctypes.data, time.perf_counter()
    for x in ts:
        ctypes.memmove(at, x.data_ptr(), x.numel() * x.element_size())
        at += x.numel() * x.element_size()
    return time.perf_counter() - t0


def paired_read(dist, res, ckpt, rank):
    """The storage bound next to a cold load: process 0 reads the
    checkpoint's data files cold (dropped first) with 16 threads of 1 MiB
    preads (bench_io_bound.read_bound), the fastest plain read there, while
    the other ranks wait; then the pages are dropped again for the load."""
    if rank == 0:
        sys.path.insert(0, os.path.dirname(HERE))
        import bench_io_bound
        paths = data_paths(ckpt)
        res["read_bound_s"] = bench_io_bound.read_bound(paths, 16)["wall_s"]
        bench_io_bound.drop_cache(paths)
    dist.barrier()


def paired_write(dist, states, path):
    """The write bound next to a save: every rank writes its tensors' bytes
    with 1 MiB write() calls to a file of its own and fsyncs it, all
    together between barriers (bench_io_bound's write, in the ranks); the
    slowest rank's seconds (every rank returns its own: max over ranks)."""
    views = [memoryview(x.numpy()).cast("B") for x in states.values() if x.numel()]
    dist.barrier()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for mv in views:
        for off in range(0, len(mv), 1 << 20):
            os.write(fd, mv[off:off + (1 << 20)])
    os.fsync(fd)
    os.close(fd)
    dt = time.perf_counter() - t0
    dist.barrier()
    os.unlink(path)
    return dt


def timed(dist, res, fn):
    """@p fn between barriers: its time on this rank and the slowest's window."""
    dist.barrier()
    reset_peak()
    res["rss_before"] = rss_now()
    res["t_start_epoch"] = time.time()
    t0 = time.perf_counter()
    out = fn()
    res["seconds"] = time.perf_counter() - t0
    dist.barrier()
    res["wall"] = time.perf_counter() - t0
    res["peak_rss_op"] = peak_rss()     # the peak up to the end of the call (no checks yet)
    return out


def warm_wall(dist, fn):
    """The same load again with the pages cached, every rank done checking."""
    r = {}
    timed(dist, r, fn)
    return r["wall"]


def cold_touched(dist, res, ckpt, rank, fn):
    """The cold load again, into the same tensors, now touched (as a model's
    initialized tensors are when a job loads into them): the pages dropped
    and the storage bound measured next to it first (paired_read)."""
    r = {}
    paired_read(dist, r, ckpt, rank)
    timed(dist, r, fn)
    res["wall_touched"] = r["wall"]
    if "read_bound_s" in r:
        res["read_bound_touched_s"] = r["read_bound_s"]


def async_phase(dist, res, save, wait, bump, states, reps, scratch):
    """One untimed async save and its wait, then @p reps timed ones, each
    right after the snapshot copy alone of the same state (a memcpy into
    memory of the state's size, allocated and touched before the first
    save): the stall (the call), the time until its commit is durable (the
    wait's return); the medians, and the rounds. rss_before is the RSS
    before the first save (the snapshot memory counts in the peak; the
    memcpy's does not)."""
    area = copy_area(states)
    reset_peak()
    res["rss_before"] = rss_now()
    wait(save(0))
    rounds = {"copy_s": [], "stall": [], "commit": [], "write_s": []}
    for k in range(1, reps + 1):
        bump()                           # the next step's values: nothing to reuse
        rounds["write_s"].append(paired_write(dist, states, scratch))
        dist.barrier()
        rounds["copy_s"].append(copy_bound(states, area))
        dist.barrier()
        if k == 1:
            res["t_start_epoch"] = time.time()
        t0 = time.perf_counter()
        h = save(k)
        rounds["stall"].append(time.perf_counter() - t0)
        wait(h)
        rounds["commit"].append(time.perf_counter() - t0)
    res["peak_rss_op"] = peak_rss()
    dist.barrier()
    for key, xs in rounds.items():
        res[key] = sorted(xs)[len(xs) // 2]
        res[key + "_rounds"] = xs
    res["wall"] = res["commit"]


# ---- the DCP side -------------------------------------------------------------------------

def dcp_state(torch, args, dp, tp, fill):
    """{name: DTensor} on a (dp, tp) mesh: parameters Shard(tp dim) over tp and
    replicated over dp; moments also sharded over dp (dim 0), as FSDP2 + TP
    keep them."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    state = {}
    nbytes = 0
    for tid, (name, shape, d, optim) in enumerate(full_spec(args)):
        tp_pl = Shard(d) if d is not None else Replicate()
        dp_pl = Shard(0) if optim else Replicate()
        placements = (dp_pl, tp_pl)
        lshape, off = compute_local_shape_and_global_offset(shape, mesh, placements)
        local = values(torch, tid, shape, off, lshape) if fill else torch.empty(lshape)
        nbytes += local.numel() * 4
        stride = [1] * len(shape)
        for k in range(len(shape) - 2, -1, -1):
            stride[k] = stride[k + 1] * shape[k + 1]
        state[name] = DTensor.from_local(local, mesh, placements, run_check=False,
                                         shape=torch.Size(shape), stride=tuple(stride))
    return state, nbytes


def dcp_check(torch, args, state):
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    bad = 0
    for tid, (name, shape, _, _) in enumerate(full_spec(args)):
        t = state[name]
        lshape, off = compute_local_shape_and_global_offset(shape, t.device_mesh, t.placements)
        if not torch.equal(t.to_local(), values(torch, tid, shape, off, lshape)):
            bad += 1
    return bad


def run_dcp(torch, dist, args, phase, rank, world, ckpt):
    import torch.distributed.checkpoint as dcp
    whole = args.dest == "whole"
    if whole:
        state, nbytes = whole_state(torch, args, world, rank, fill=False)
    else:
        state, nbytes = dcp_state(torch, args, 2, world // 2, fill=phase in ("save", "async"))
    res = {"bytes_local": nbytes, "rss_before": rss_now()}
    if phase == "async":
        bg = dist.new_group(backend="gloo")
        locals_ = {n: x.to_local() for n, x in state.items()}

        def bump():
            for x in locals_.values():
                x.add_(1.0)

        async_phase(dist, res, lambda k: dcp.async_save(
            state, checkpoint_id=os.path.join(ckpt, "async-%d" % k), process_group=bg),
            lambda f: f.result(), bump, locals_, args.async_reps,
            os.path.join(os.path.dirname(ckpt), "write-bound-%d" % rank))
        return res
    if phase == "save":
        timed(dist, res, lambda: dcp.save(state, checkpoint_id=ckpt))
        return res
    check = whole_check if whole else dcp_check
    paired_read(dist, res, ckpt, rank)
    timed(dist, res, lambda: dcp.load(state, checkpoint_id=ckpt))
    res["bad_tensors"] = check(torch, args, state)
    res["wall_warm"] = warm_wall(dist, lambda: dcp.load(state, checkpoint_id=ckpt))
    cold_touched(dist, res, ckpt, rank, lambda: dcp.load(state, checkpoint_id=ckpt))
    return res


# ---- the ptc side (hooks for ptc.save / ptc.load) -------------------------------------------

def ptc_state(torch, args, dp, tp, fill):
    """This rank's local tensors in PTC's layout of dp x tp with zero=1 (moments
    as flat ranges of the tp-local shard), filled from the pieces."""
    import ptc
    cfg = "dp=%d,tp=%d,zero=1" % (dp, tp)
    spec = full_spec(args)
    lay = ptc.Layout({n: ("F32", s) for n, s, _, _ in spec}, cfg, PTC_RULES)
    rank = int(os.environ["RANK"])
    state, nbytes = {}, 0
    for tid, (name, shape, _, _) in enumerate(spec):
        sh = lay.shard(name, rank)
        local = torch.empty(sh.shape, dtype=torch.float32)
        if fill:
            flat = local.view(-1)
            for p in sh.pieces:
                v = values(torch, tid, shape, p.lo, p.shape)
                torch.as_strided(flat, p.shape, p.strides, p.offset).copy_(v)
        state[name] = local
        nbytes += local.numel() * 4
    return state, nbytes, lay, cfg


def ptc_check(torch, args, lay, rank, state):
    bad = 0
    for tid, (name, shape, _, _) in enumerate(full_spec(args)):
        sh = lay.shard(name, rank)
        flat = state[name].view(-1)
        for p in sh.pieces:
            v = values(torch, tid, shape, p.lo, p.shape)
            if not torch.equal(torch.as_strided(flat, p.shape, p.strides, p.offset), v):
                bad += 1
                break
    return bad


def run_ptc(torch, dist, args, phase, rank, world, ckpt):
    import ptc
    whole = args.dest == "whole"
    if whole:
        state, nbytes = whole_state(torch, args, world, rank, fill=False)
        cfg = whole_config(world)
    else:
        state, nbytes, lay, cfg = ptc_state(torch, args, 2, world // 2,
                                            fill=phase in ("save", "async"))
    res = {"bytes_local": nbytes, "rss_before": rss_now()}
    if rank == 0 and phase != "load-cold":     # one process creates the store
        ptc.Store(ckpt, create=True).close()
    dist.barrier()
    st = ptc.Store(ckpt)
    global_shapes = {n: s for n, s, _, _ in full_spec(args)}
    # these calls are the whole ptc side
    if phase == "async":
        def bump():
            for x in state.values():
                x.add_(1.0)

        async_phase(dist, res, lambda k: ptc.async_save(
            st, state, config=cfg, rules=PTC_RULES, rank=rank, step=k,
            global_shapes=global_shapes), lambda h: h.wait(), bump, state, args.async_reps,
            os.path.join(os.path.dirname(ckpt), "write-bound-%d" % rank))
    elif phase == "save":
        timed(dist, res, lambda: ptc.save(st, state, config=cfg, rules=PTC_RULES, rank=rank,
                                          group=None, step=1, global_shapes=global_shapes))
    else:
        paired_read(dist, res, ckpt, rank)
        timed(dist, res, lambda: ptc.load(st, state, config=cfg, rank=rank))
        res["bad_tensors"] = (whole_check(torch, args, state) if whole
                              else ptc_check(torch, args, lay, rank, state))
        res["wall_warm"] = warm_wall(dist, lambda: ptc.load(st, state, config=cfg, rank=rank))
        cold_touched(dist, res, ckpt, rank, lambda: ptc.load(st, state, config=cfg, rank=rank))
    st.close()
    return res


# ---- rank processes -------------------------------------------------------------------------

def worker(args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    fn = run_dcp if args.impl == "dcp" else run_ptc
    err = None
    try:
        res = fn(torch, dist, args, args.phase, rank, world, args.ckpt)
    except Exception as e:      # reported, not raised: the other ranks may be waiting
        res, err = {}, "%s: %s" % (type(e).__name__, e)
    res["peak_rss"] = peak_rss()
    res["error"] = err
    res["t_end_epoch"] = time.time()
    with open(os.path.join(args.results, "rank-%d.json" % rank), "w") as f:
        json.dump(res, f)
    if err is None:
        dist.barrier()
    dist.destroy_process_group() if err is None else None
    return 0 if err is None else 3


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def launch(args, impl, phase, world, ckpt, timeout, dest="sharded"):
    results = tempfile.mkdtemp(prefix="ptc-bench-res-")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    base = [sys.executable, HERE, "--worker", "--impl", impl, "--phase", phase, "--ckpt", ckpt,
            "--results", results, "--dest", dest] + model_args(args)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(base, env=dict(env, RANK=str(r))) for r in range(world)]
    for p in procs:
        try:
            p.wait(timeout=max(1, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    ranks = []
    for r in range(world):
        path = os.path.join(results, "rank-%d.json" % r)
        ranks.append(json.load(open(path)) if os.path.exists(path) else
                     {"error": "rank %d exited %s" % (r, procs[r].returncode)})
    shutil.rmtree(results, ignore_errors=True)
    ranks[0]["phase_s"] = time.perf_counter() - t0
    return ranks


def phase_done(impl, key, ranks, phase):
    """summarize() and a progress line: the timed figures and the phase's
    whole time (process start, imports, the state, checks)."""
    x = summarize(ranks, phase)
    x["phase_s"] = ranks[0]["phase_s"]
    figs = " ".join("%s %.2f s" % (k[:-2], x[k]) for k in
                    ("wall_s", "wall_warm_s", "wall_touched_s", "stall_s", "copy_s",
                     "commit_s") if k in x)
    print("%s %s: %s (phase %.0f s, load average %.1f)" % (
        impl, key, x.get("error") or figs, x["phase_s"], os.getloadavg()[0]), flush=True)
    return x


def model_args(args):
    return ["--layers", str(args.layers), "--hidden", str(args.hidden), "--inter",
            str(args.inter), "--vocab", str(args.vocab), "--heads", str(args.heads),
            "--kv-heads", str(args.kv_heads), "--async-reps", str(args.async_reps)]


def summarize(ranks, phase):
    errs = [r["error"] for r in ranks if r.get("error")]
    if errs:
        return {"error": errs[0]}
    out = {"wall_s": max(r["wall"] for r in ranks),
           "peak_rss_per_rank": [r["peak_rss"] for r in ranks],
           "peak_rss_op_per_rank": [r["peak_rss_op"] for r in ranks],
           "rss_before_per_rank": [r["rss_before"] for r in ranks],
           "bytes_per_rank": [r["bytes_local"] for r in ranks]}
    # the call's memory above the rank's own tensors (a load faults in its
    # destination, a save and an async save find their state there already)
    own = [r["bytes_local"] if phase == "load-cold" else 0 for r in ranks]
    out["rss_over_own_per_rank"] = [r["peak_rss_op"] - r["rss_before"] - o
                                    for r, o in zip(ranks, own)]
    out["t_start_epoch"] = min(r["t_start_epoch"] for r in ranks)
    out["t_end_epoch"] = max(r["t_end_epoch"] for r in ranks)
    for k in ("stall", "commit", "copy_s", "write_s"):
        if k in ranks[0]:
            name = k + ("" if k.endswith("_s") else "_s")
            out[name] = max(r[k] for r in ranks)
            # each round's figure: the slowest rank's
            out[name[:-2] + "_rounds_s"] = [max(x) for x in
                                            zip(*(r[k + "_rounds"] for r in ranks))]
    if "read_bound_s" in ranks[0]:
        out["read_bound_s"] = ranks[0]["read_bound_s"]
    if "wall_warm" in ranks[0]:
        out["wall_warm_s"] = max(r["wall_warm"] for r in ranks)
    if "wall_touched" in ranks[0]:
        out["wall_touched_s"] = max(r["wall_touched"] for r in ranks)
    if "read_bound_touched_s" in ranks[0]:
        out["read_bound_touched_s"] = ranks[0]["read_bound_touched_s"]
    if "bad_tensors" in ranks[0]:
        out["bad_tensors"] = sum(r["bad_tensors"] for r in ranks)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", default="dcp,ptc")
    ap.add_argument("--state", choices=sorted(STATES), default="l",
                    help="the model's size: s 158 MiB, m 565 MiB, l 1.24 GiB (default); "
                         "--layers etc. change one figure of it")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--inter", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--load-worlds", default="2,8",
                    help="rank counts to load into, comma-separated (2 and 8)")
    ap.add_argument("--dests", default="sharded,whole",
                    help="load destinations: sharded (dp=2 x tp=N/2), whole (pp=2; dp=2 x pp=4)")
    ap.add_argument("--no-async", dest="run_async", action="store_false",
                    help="skip the async phase")
    ap.add_argument("--async-reps", type=int, default=3,
                    help="timed async saves (after an untimed one); medians reported")
    ap.add_argument("--out", default=None, help="folder for the checkpoints (default: a temp)")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait after each save before its cold loads (both sides)")
    ap.add_argument("--io-reps", type=int, default=3, help="rounds of each io-bound figure")
    ap.add_argument("--no-io-bound", dest="io_bound", action="store_false",
                    help="skip the plain write()/pread() bound of the same bytes")
    # rank-process arguments
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--dest", default="sharded", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for k, v in zip(("layers", "hidden", "inter", "vocab", "heads", "kv_heads"),
                    STATES[args.state]):
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.worker:
        sys.exit(worker(args))

    sys.path.insert(0, os.path.dirname(HERE))
    import bench_io_bound
    t_run = time.perf_counter()
    total = sum(4 * __import__("math").prod(s) for _, s, _, _ in full_spec(args))
    print("state %s: %d tensors, %.0f MiB (fp32 parameters + 2 AdamW moments); "
          "loads into %s ranks (%s)" % (args.state, len(full_spec(args)), total / 2 ** 20,
                                        args.load_worlds, args.dests), flush=True)
    work = args.out or tempfile.mkdtemp(prefix="ptc-bench-")
    report = {"state_bytes": total, "tensors": len(full_spec(args)), "results": {},
              "warm_bound": {}}
    worlds = [int(w) for w in args.load_worlds.split(",")]
    for impl in args.impl.split(","):
        ckpt = os.path.join(work, impl)
        shutil.rmtree(ckpt, ignore_errors=True)
        r = {}
        r["save_4"] = phase_done(impl, "save_4", launch(args, impl, "save", 4, ckpt,
                                                       args.timeout), "save")
        if "error" not in r["save_4"]:
            r["save_4"]["disk_bytes"] = disk_bytes(ckpt)
            r["save_4"]["data_files"] = data_files(ckpt)
            time.sleep(args.settle)
            for dest in args.dests.split(","):
                for world in worlds:
                    drop_cache(ckpt)
                    key = "load_%d" % world + ("_whole" if dest == "whole" else "")
                    x = r[key] = phase_done(impl, key, launch(args, impl, "load-cold", world,
                                                              ckpt, args.timeout, dest),
                                            "load-cold")
                    if "error" not in x and args.io_bound:
                        # the memory bound of the warm load, its files still cached
                        paths = data_paths(ckpt)
                        report["warm_bound"]["%s_%s" % (impl, key)] = \
                            bench_io_bound.warm_bound(paths, x["bytes_per_rank"],
                                                      reps=args.io_reps)
        if args.run_async:
            actx = os.path.join(work, impl + "-async")
            shutil.rmtree(actx, ignore_errors=True)
            r["async_4"] = phase_done(impl, "async_4", launch(args, impl, "async", 4, actx,
                                                              args.timeout), "async")
            shutil.rmtree(actx, ignore_errors=True)
        report["results"][impl] = r
    # Both sides' checkpoints stay until the end, so that no side is measured
    # while the disk deletes the other's (a disk mounted with `discard` sends
    # the deletion of 1.3 GB to the device as discards).
    if not args.keep:
        for impl in args.impl.split(","):
            shutil.rmtree(os.path.join(work, impl), ignore_errors=True)
    if args.io_bound:
        t0 = time.perf_counter()
        report["io_bound"] = io_bound(report, work, args.io_reps)
        print("io bound: %.0f s" % (time.perf_counter() - t0), flush=True)
    if not args.out and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    report["ratios"] = ratios(report)
    if "io_bound" in report:
        report["vs_io_bound"] = vs_bound(report)
    report["paired"] = paired(report)
    report["run_s"] = time.perf_counter() - t_run
    report["loadavg_end"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print_table(report)


def data_paths(path):
    out = []
    for root, _, files in os.walk(path):
        out += [os.path.join(root, f) for f in sorted(files)
                if f.endswith(".pack") or f.endswith(".distcp")]
    return out


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def paired(report):
    """Each side's figures over the bounds measured next to them, in the
    same rank processes: a cold load over the plain read of the same files
    just before it, an async save's commit over the plain write()+fsync of
    the same bytes by the same ranks just before it (median of the rounds'
    ratios), and the stall over the memcpy alone (likewise)."""
    out = {}
    for impl, r in report["results"].items():
        for k, x in r.items():
            if k.startswith("load_") and x.get("read_bound_s"):
                out["%s_%s_cold" % (impl, k)] = x["wall_s"] / x["read_bound_s"]
            if k.startswith("load_") and x.get("read_bound_touched_s"):
                out["%s_%s_cold_touched" % (impl, k)] = (x["wall_touched_s"] /
                                                         x["read_bound_touched_s"])
        a = r.get("async_4", {})
        if "commit_rounds_s" in a:
            out["%s_async_commit" % impl] = med(
                [c / w for c, w in zip(a["commit_rounds_s"], a["write_rounds_s"])])
            out["%s_async_after_stall" % impl] = med(
                [(c - s) / w for c, s, w in zip(a["commit_rounds_s"], a["stall_rounds_s"],
                                                 a["write_rounds_s"])])
            out["%s_stall_over_copy" % impl] = med(
                [s / c for s, c in zip(a["stall_rounds_s"], a["copy_rounds_s"])])
    return out


def ratios(report):
    """DCP over ptc (> 1: ptc faster), and ptc's async stall against its copy
    and DCP's stall."""
    d, p = report["results"].get("dcp", {}), report["results"].get("ptc", {})
    ok = lambda x: x and "error" not in x  # noqa: E731
    out = {}
    if ok(d.get("save_4")) and ok(p.get("save_4")):
        out["save"] = d["save_4"]["wall_s"] / p["save_4"]["wall_s"]
    for k in p:
        if k.startswith("load_") and ok(p[k]) and ok(d.get(k)):
            out[k + "_cold"] = d[k]["wall_s"] / p[k]["wall_s"]
            out[k + "_warm"] = d[k]["wall_warm_s"] / p[k]["wall_warm_s"]
            if "wall_touched_s" in d[k] and "wall_touched_s" in p[k]:
                out[k + "_cold_touched"] = d[k]["wall_touched_s"] / p[k]["wall_touched_s"]
    a = p.get("async_4")
    if ok(a):
        out["ptc_stall_over_copy"] = a["stall_s"] / a["copy_s"]
        if ok(d.get("async_4")):
            out["async_stall"] = d["async_4"]["stall_s"] / a["stall_s"]
            out["async_commit"] = d["async_4"]["commit_s"] / a["commit_s"]
    return out


def io_bound(report, work, reps):
    """The plain-I/O bound of each side's data files (write + fsync by one
    process per file, cold reads after the same gap as the first load
    after its save): see bench_io_bound.py."""
    sys.path.insert(0, os.path.dirname(HERE))
    import bench_io_bound
    gaps = []
    for r in report["results"].values():
        loads = [x for k, x in r.items() if k.startswith("load_") and "t_start_epoch" in x]
        if loads and "t_end_epoch" in r.get("save_4", {}):
            gaps.append(loads[0]["t_start_epoch"] - r["save_4"]["t_end_epoch"])
    gap = bench_io_bound.median(gaps) if gaps else 0.0
    out = {}
    for impl, r in report["results"].items():
        sizes = r.get("save_4", {}).get("data_files")
        if not sizes:
            continue
        folder = os.path.join(work, "io-" + impl)
        # the reads are the same for both sides' bytes: measured once, on ptc's
        variants = bench_io_bound.READ_VARIANTS if impl == "ptc" or "ptc" not in \
            report["results"] else []
        out[impl] = bench_io_bound.measure(folder, sizes, variants, reps=reps, gap_s=gap)
        shutil.rmtree(folder, ignore_errors=True)
    return out


def vs_bound(report):
    """Each figure over its bound (1.0 = at the bound): a save and an async
    save's commit over the write bound of its own files, a cold load over the
    fastest cold read, a warm load over the memory bound measured after it."""
    b = report["io_bound"]
    rd = next((x["read_best_s"] for x in b.values() if x.get("read")), None)
    out = {}
    for impl, r in report["results"].items():
        if impl in b and "wall_s" in r.get("save_4", {}):
            out["%s_save" % impl] = r["save_4"]["wall_s"] / b[impl]["write"]["wall_s"]
        if impl in b and "commit_s" in r.get("async_4", {}):
            a, wb = r["async_4"], b[impl]["write"]["wall_s"]
            out["%s_async_commit" % impl] = a["commit_s"] / wb
            # the part after the call returned: the background save alone
            out["%s_async_after_stall" % impl] = (a["commit_s"] - a["stall_s"]) / wb
        for k, x in r.items():
            if k.startswith("load_") and "wall_s" in x and rd:
                out["%s_%s_cold" % (impl, k)] = x["wall_s"] / rd
            if k.startswith("load_") and "wall_touched_s" in x and rd:
                out["%s_%s_cold_touched" % (impl, k)] = x["wall_touched_s"] / rd
            wb = report["warm_bound"].get("%s_%s" % (impl, k))
            if k.startswith("load_") and "wall_warm_s" in x and wb:
                out["%s_%s_warm" % (impl, k)] = x["wall_warm_s"] / wb["wall_s"]
    return out


def goals(report):
    """[(goal, figure, holds)] of issue 29's targets that this run measured."""
    rt, vb = report.get("ratios", {}), report.get("vs_io_bound", {})
    pr = report.get("paired", {})
    p = report["results"].get("ptc", {})
    out = []

    def add(what, v, ok):
        if v is not None:
            out.append((what, v, ok(v)))
    add("save: DCP / ptc >= 1.5", rt.get("save"), lambda v: v >= 1.5)
    add("async stall / snapshot copy <= 1.2 (paired rounds)", pr.get("ptc_stall_over_copy"),
        lambda v: v <= 1.2)
    add("async stall: DCP / ptc >= 1", rt.get("async_stall"), lambda v: v >= 1)
    add("async commit / write+fsync <= 1.3 (paired rounds)", pr.get("ptc_async_commit"),
        lambda v: v <= 1.3)
    add("async commit / write+fsync <= 1.3 (bound at the end)", vb.get("ptc_async_commit"),
        lambda v: v <= 1.3)
    for k in sorted(x for x in p if x.startswith("load_")):
        add("%s warm / memory bound <= 1.2" % k, vb.get("ptc_%s_warm" % k), lambda v: v <= 1.2)
        add("%s cold / storage bound <= 1.2 (paired)" % k, pr.get("ptc_%s_cold" % k),
            lambda v: v <= 1.2)
        add("%s cold / storage bound <= 1.2 (bound at the end)" % k, vb.get("ptc_%s_cold" % k),
            lambda v: v <= 1.2)
        add("%s cold, touched dest. / storage bound <= 1.2 (paired)" % k,
            pr.get("ptc_%s_cold_touched" % k), lambda v: v <= 1.2)
    for k, x in p.items():
        if "rss_over_own_per_rank" in x:
            extra = x.get("bytes_per_rank", [0]) if k.startswith("async") else None
            over = max(v - (e if extra else 0) for v, e in
                       zip(x["rss_over_own_per_rank"], extra or [0] * 99))
            add("%s peak RSS above own tensors%s <= 64 MiB (MiB)" % (
                k, " and the snapshot" if extra else ""), over / 2 ** 20, lambda v: v <= 64)
    return out


def print_table(report):
    print("\n%-5s %-13s %8s %8s %9s %8s %8s %8s %10s %24s %24s" % (
        "impl", "phase", "wall s", "warm s", "touched s", "stall s", "copy s", "commit s",
        "disk MiB",
        "RSS MiB before (ranks)", "peak RSS over own (MiB)"))
    for impl, r in report["results"].items():
        for phase, x in r.items():
            if "error" in x:
                print("%-5s %-13s %s" % (impl, phase, x["error"][:100]))
                continue
            f = lambda k: "%.2f" % x[k] if k in x else "-"  # noqa: E731
            print("%-5s %-13s %8.2f %8s %9s %8s %8s %8s %10s %24s %24s" % (
                impl, phase, x["wall_s"], f("wall_warm_s"), f("wall_touched_s"), f("stall_s"),
                f("copy_s"),
                f("commit_s"),
                "%.0f" % (x["disk_bytes"] / 2 ** 20) if "disk_bytes" in x else "-",
                ",".join("%.0f" % (v / 2 ** 20) for v in x["rss_before_per_rank"]),
                ",".join("%.0f" % (v / 2 ** 20) for v in x["rss_over_own_per_rank"])))
    if report.get("ratios"):
        print("ratios DCP/ptc:", json.dumps({k: round(v, 2) for k, v in report["ratios"].items()}))
    for impl, x in report.get("io_bound", {}).items():
        w = x["write"]
        print("io bound, %s's %d data files (%.0f MiB): write()+fsync %.2f s (%.2f GB/s; "
              "write() calls %.2f s) rounds %s" % (
                  impl, w["files"], w["bytes"] / 2 ** 20, w["wall_s"], w["gb_per_s"],
                  w["write_calls_s"], " ".join("%.2f" % v for v in w["rounds_s"])))
        if x["read"]:
            print("  reads of the same files, each %.1f s after its write:" % x["gap_s"])
        for rd in x["read"]:
            print("  cold read, %2d threads x %d MiB preads%s: %.2f s (%.2f GB/s) rounds %s" % (
                rd["threads"], rd["chunk"] >> 20, " after WILLNEED" if rd["willneed"] else "",
                rd["wall_s"], rd["gb_per_s"], " ".join("%.2f" % v for v in rd["rounds_s"])))
    for k, w in report.get("warm_bound", {}).items():
        print("memory bound of %s's warm load: %d processes reading %.0f MiB from the page "
              "cache: %.2f s rounds %s" % (k, w["procs"], w["bytes"] / 2 ** 20, w["wall_s"],
                                           " ".join("%.2f" % v for v in w["rounds_s"])))
    if report.get("paired"):
        print("over the bounds measured next to them (1.0 = at it):", json.dumps(
            {k: round(v, 2) for k, v in report["paired"].items()}))
    if "vs_io_bound" in report:
        print("over the bounds (1.0 = at it):", json.dumps(
            {k: round(v, 2) for k, v in report["vs_io_bound"].items()}))
    g = goals(report)
    if g:
        print("\ngoals (issue 29):")
        for what, v, ok in g:
            print("  %-62s %8.2f  %s" % (what, v, "yes" if ok else "NO"))


if __name__ == "__main__":
    main()
