"""The plain-I/O bound of a checkpoint on this machine's disk: what write() +
fsync() and cold pread() of the same bytes cost with no checkpoint library
at all, so that bench_ckpt.py can show how far DCP and ptc are from it.

  write  one process per file (as the saving ranks), all started together;
         each writes its file's bytes from memory with 1 MiB write() calls
         and fsyncs it; figures: slowest process end - first start, and the
         part that was fsync (the write() calls only fill the page cache)
  read   the same files after posix_fadvise(DONTNEED), read back with 1 MiB
         preads by N threads of one process taking the next chunk from a
         shared counter (queue depth N), or one thread after
         posix_fadvise(WILLNEED) of everything (the kernel queues the reads);
         each read follows a fresh write by --gap seconds
  warm   the memory bound of a warm load: one process per loading rank, all
         started together, each reading as many bytes as its rank loads from
         the files (in the page cache) into memory it touched before, with 1
         MiB preads on one thread (a plain read); slowest end - first start

    python bench/python/bench_io_bound.py --sizes 400M,400M,200M,200M [--dir DIR]

Used by bench_ckpt.py (--io-bound, on by default) with the per-rank file
sizes of each side's checkpoint; runnable alone with --sizes.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.abspath(__file__)
MIB = 1 << 20


def drop_cache(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# ---- write: one process per file ------------------------------------------------------------

def write_worker(path, size, ready, go, result):
    """Fill a buffer of @size bytes (not timed), signal ready, wait for go,
    write it with 1 MiB write() calls, fsync, report the times."""
    chunk = bytearray(os.urandom(MIB))
    buf = chunk * (size // MIB) + chunk[:size % MIB]    # distinct pages, as a rank's tensors
    mv = memoryview(buf)
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.0005)
    t0 = time.time()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    off = 0
    while off < size:
        off += os.write(fd, mv[off:off + MIB])
    t1 = time.time()
    os.fsync(fd)
    os.close(fd)
    t2 = time.time()
    with open(result, "w") as f:
        json.dump({"t0": t0, "t_written": t1, "t_synced": t2, "bytes": size}, f)


def write_bound(folder, sizes, timeout=600):
    """Write len(sizes) files concurrently, one process each: the seconds
    from the first start to the last fsync's return."""
    os.makedirs(folder, exist_ok=True)
    ctl = tempfile.mkdtemp(prefix="ptc-io-ctl-")
    go = os.path.join(ctl, "go")
    procs, paths = [], []
    for i, size in enumerate(sizes):
        path = os.path.join(folder, "file-%d" % i)
        paths.append(path)
        procs.append(subprocess.Popen(
            [sys.executable, HERE, "--write-worker", path, str(size),
             os.path.join(ctl, "ready-%d" % i), go, os.path.join(ctl, "res-%d" % i)]))
    t_wait = time.time()
    while not all(os.path.exists(os.path.join(ctl, "ready-%d" % i)) for i in range(len(sizes))):
        if time.time() - t_wait > timeout or any(p.poll() not in (None, 0) for p in procs):
            for p in procs:
                p.kill()
            raise RuntimeError("io bound: a writer did not start")
        time.sleep(0.005)
    # the same conditions as a save: nothing of these files cached, dirty
    # pages of earlier phases written back
    os.sync()
    open(go, "w").close()
    for p in procs:
        p.wait(timeout=timeout)
    res = [json.load(open(os.path.join(ctl, "res-%d" % i))) for i in range(len(sizes))]
    for name in os.listdir(ctl):
        os.unlink(os.path.join(ctl, name))
    os.rmdir(ctl)
    t0 = min(r["t0"] for r in res)
    return paths, {
        "bytes": sum(sizes),
        "files": len(sizes),
        "wall_s": max(r["t_synced"] for r in res) - t0,
        "write_calls_s": max(r["t_written"] for r in res) - t0,
        "gb_per_s": sum(sizes) / 1e9 / (max(r["t_synced"] for r in res) - t0),
    }


# ---- read: N threads of one process ---------------------------------------------------------

def read_bound(paths, threads, chunk=MIB, willneed=False):
    """Read every byte of @paths cold with @threads threads of @chunk-byte
    preads (optionally after fadvise WILLNEED of everything)."""
    drop_cache(paths)
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    work = []
    for fd in fds:
        size = os.fstat(fd).st_size
        work += [(fd, off, min(chunk, size - off)) for off in range(0, size, chunk)]
    total = sum(n for _, _, n in work)
    nxt = [0]
    lock = threading.Lock()
    err = []

    def run():
        buf = bytearray(chunk)
        mv = memoryview(buf)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(work):
                return
            fd, off, n = work[i]
            got = 0
            while got < n:
                k = os.preadv(fd, [mv[got:n]], off + got)
                if k <= 0:
                    err.append("short read")
                    return
                got += k

    t0 = time.perf_counter()
    if willneed:
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    th = [threading.Thread(target=run) for _ in range(threads)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.perf_counter() - t0
    for fd in fds:
        os.close(fd)
    if err:
        raise RuntimeError(err[0])
    return {"bytes": total, "threads": threads, "chunk": chunk, "willneed": willneed,
            "wall_s": dt, "gb_per_s": total / 1e9 / dt}


READ_VARIANTS = [(1, MIB, False), (4, MIB, False), (16, MIB, False), (1, MIB, True)]


# ---- warm: one process per loading rank, from the page cache -----------------------------------

def warm_worker(spec, ready, go, result):
    """Read the (path, offset, bytes) ranges of @p spec (JSON) into a buffer
    touched beforehand, after @p go appears; report the times."""
    ranges = json.loads(spec)
    total = sum(n for _, _, n in ranges)
    buf = bytearray(total)          # zeroed: its pages are there
    mv = memoryview(buf)
    fds = {p: os.open(p, os.O_RDONLY) for p in {r[0] for r in ranges}}
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.0005)
    t0 = time.time()
    at = 0
    for path, off, n in ranges:
        end = at + n
        while at < end:
            at += os.preadv(fds[path], [mv[at:min(end, at + MIB)]], off + (at - (end - n)))
    t1 = time.time()
    for fd in fds.values():
        os.close(fd)
    with open(result, "w") as f:
        json.dump({"t0": t0, "t1": t1, "bytes": total}, f)


def warm_bound(paths, per_proc, reps=3, timeout=600):
    """The memory bound of a warm load of @p per_proc bytes per rank from the
    files @p paths (already in the page cache): len(per_proc) processes, each
    reading its share from the files' bytes in turn (wrapping around), all
    started together; median of @p reps rounds of the slowest end - first
    start."""
    sizes = [os.path.getsize(p) for p in paths]
    flat = sum(sizes)
    rounds = []
    for _ in range(reps):
        ctl = tempfile.mkdtemp(prefix="ptc-io-warm-")
        go = os.path.join(ctl, "go")
        procs, start = [], 0
        for i, want in enumerate(per_proc):
            ranges, left, at = [], int(want), start
            while left > 0:
                f, off = 0, at % flat
                while off >= sizes[f]:
                    off -= sizes[f]
                    f += 1
                n = min(left, sizes[f] - off)
                ranges.append((paths[f], off, n))
                left -= n
                at += n
            start = at
            procs.append(subprocess.Popen(
                [sys.executable, HERE, "--warm-worker", json.dumps(ranges),
                 os.path.join(ctl, "ready-%d" % i), go, os.path.join(ctl, "res-%d" % i)]))
        t_wait = time.time()
        while not all(os.path.exists(os.path.join(ctl, "ready-%d" % i))
                      for i in range(len(per_proc))):
            if time.time() - t_wait > timeout or any(p.poll() not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                raise RuntimeError("warm bound: a reader did not start")
            time.sleep(0.005)
        open(go, "w").close()
        for p in procs:
            p.wait(timeout=timeout)
        res = [json.load(open(os.path.join(ctl, "res-%d" % i))) for i in range(len(per_proc))]
        for name in os.listdir(ctl):
            os.unlink(os.path.join(ctl, name))
        os.rmdir(ctl)
        rounds.append(max(r["t1"] for r in res) - min(r["t0"] for r in res))
    return {"procs": len(per_proc), "bytes": int(sum(per_proc)), "rounds_s": rounds,
            "wall_s": median(rounds)}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def measure(folder, sizes, variants=READ_VARIANTS, reps=3, gap_s=0.0):
    """The write bound of @sizes and every read variant on those files,
    @p reps rounds of each, medians reported with every round's figure (the
    disk is shared: single figures vary). Each read follows its own fresh
    write by @p gap_s seconds, as a load follows the save in bench_ckpt.py
    (the virtual disk reads slower while it still stores what was just
    written, so a read of files written long ago would be no bound)."""
    writes, rounds = [], [[] for _ in variants]
    for _ in range(reps):
        for i, v in enumerate(variants or [None]):
            paths, w = write_bound(folder, sizes)
            writes.append(w)
            if v is not None:
                time.sleep(gap_s)
                rounds[i].append(read_bound(paths, *v))
            for p in paths:
                os.unlink(p)
    w = dict(writes[0])
    w["rounds_s"] = [x["wall_s"] for x in writes]
    w["wall_s"] = median(w["rounds_s"])
    w["write_calls_s"] = median([x["write_calls_s"] for x in writes])
    w["gb_per_s"] = w["bytes"] / 1e9 / w["wall_s"]
    reads = []
    for rs in rounds:
        r = dict(rs[0])
        r["rounds_s"] = [x["wall_s"] for x in rs]
        r["wall_s"] = median(r["rounds_s"])
        r["gb_per_s"] = r["bytes"] / 1e9 / r["wall_s"]
        reads.append(r)
    out = {"write": w, "read": reads, "gap_s": gap_s}
    if reads:
        out["read_best_s"] = min(r["wall_s"] for r in reads)
        out["read_1thread_s"] = reads[0]["wall_s"]
    return out


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--write-worker":
        path, size, ready, go, result = sys.argv[2:7]
        write_worker(path, int(size), ready, go, result)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--warm-worker":
        warm_worker(*sys.argv[2:6])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", required=True, help="file sizes, comma-separated (e.g. 400M,200M)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--gap", type=float, default=0.0, help="seconds between a write and its read")
    args = ap.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="ptc-io-")
    r = measure(folder, [parse_size(s) for s in args.sizes.split(",")], gap_s=args.gap)
    print(json.dumps(r, indent=1))
    if not args.dir:
        os.rmdir(folder)


if __name__ == "__main__":
    main()
