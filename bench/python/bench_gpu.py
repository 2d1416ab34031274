"""CUDA tensors in ptc.save / ptc.load / ptc.async_save on one GPU, against
the plain copies of the same bytes (issue 29's GPU figures; run by
scripts/gpu-check.sh):

  async stall     ptc.async_save's call on a state of --gib GiB of CUDA
                  tensors (after one untimed save: the pinned snapshot
                  memory) against a plain device-to-pinned copy of the same
                  bytes (non_blocking copies into pinned memory allocated and
                  touched before, one synchronize)          goal <= 1.2x
  commit          the same save's time until its wait returns
  save            ptc.save of the state (through the pinned ring)
  load, cold      ptc.load into CUDA tensors, the store's pages dropped first,
                  against the storage read + host-to-device copy overlapped:
                  one thread reading the pack files with 8 MiB preads into two
                  pinned buffers in turn, each copied to the device
                  (non_blocking) while the next is read   goal <= 1.2x
  load, warm      the same, pages cached, against the same bound warm

Every loaded tensor is compared with what was saved (on the device).
--device fake runs the same code on the CPU through ptc's CUDA-free
stand-in device (a rehearsal of the script where no GPU exists; its figures
mean nothing).

    python bench/python/bench_gpu.py [--gib 4] [--dir DIR] [--json FILE] [--device cuda|fake]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

MIB = 1 << 20


def drop_cache(path):
    for root, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def pack_files(path):
    out = []
    for root, _, files in os.walk(path):
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".pack")]
    return out


class Dev:
    """CUDA, or the stand-in on the CPU (--device fake)."""

    def __init__(self, torch, kind):
        self.torch, self.kind = torch, kind
        self.cuda = kind == "cuda"
        self.device = torch.device("cuda") if self.cuda else torch.device("cpu")

    def pinned(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, pin_memory=self.cuda)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def stream(self):
        return self.torch.cuda.Stream() if self.cuda else None


def make_state(torch, dev, gib):
    """{name: tensor} of about @p gib GiB: 128 MiB tensors, F32 and BF16."""
    state, total, i = {}, 0, 0
    g = torch.Generator(device=dev.device).manual_seed(3)
    while total < gib * (1 << 30):
        dt = torch.float32 if i % 2 == 0 else torch.bfloat16
        rows = (128 * MIB) // (4096 * (4 if dt == torch.float32 else 2))
        x = torch.randn(rows, 4096, generator=g, device=dev.device).to(dt)
        state["layers.%d.w" % i] = x
        total += x.numel() * x.element_size()
        i += 1
    dev.sync()
    return state, total


def copy_bound(torch, dev, state, total):
    """A plain device-to-pinned copy of the state (pinned memory allocated and
    touched before): the best of 3."""
    buf = dev.pinned(total)
    best = None
    for _ in range(3):
        dev.sync()
        t0 = time.perf_counter()
        at = 0
        for x in state.values():
            n = x.numel() * x.element_size()
            buf[at:at + n].copy_(x.reshape(-1).view(torch.uint8), non_blocking=True)
            at += n
        dev.sync()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


def read_h2d_bound(torch, dev, files, total, chunk=8 * MIB):
    """Storage read + host-to-device copy, overlapped: preads into two pinned
    buffers in turn, each copied to the device while the next is read."""
    dst = torch.empty(total + len(files) * chunk, dtype=torch.uint8, device=dev.device)
    bufs = [dev.pinned(chunk), dev.pinned(chunk)]
    views = [memoryview(b.numpy()) for b in bufs]
    stream = dev.stream()
    events = [None, None]
    dev.sync()
    t0 = time.perf_counter()
    at, k = 0, 0
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        size, off = os.fstat(fd).st_size, 0
        while off < size:
            if events[k] is not None:
                events[k].synchronize()
            n = os.preadv(fd, [views[k][:min(chunk, size - off)]], off)
            if dev.cuda:
                with torch.cuda.stream(stream):
                    dst[at:at + n].copy_(bufs[k][:n], non_blocking=True)
                    events[k] = torch.cuda.Event()
                    events[k].record(stream)
            else:
                dst[at:at + n].copy_(bufs[k][:n])
            off += n
            at += n
            k ^= 1
        os.close(fd)
    dev.sync()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="cuda", choices=["cuda", "fake"])
    args = ap.parse_args()
    import torch
    import ptc
    from ptc import _async, _ring
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: torch sees no CUDA device", file=sys.stderr)
        return 77
    if args.device == "fake":
        os.environ["PTC_FAKE_DEVICE"] = "1"
    dev = Dev(torch, args.device)
    work = tempfile.mkdtemp(prefix="ptc-gpu-", dir=args.dir)
    out = {"device": torch.cuda.get_device_name() if dev.cuda else "fake (CPU)",
           "gib": args.gib, "ring_mib": _ring.ring_bytes_default() >> 20}
    try:
        state, total = make_state(torch, dev, args.gib)
        out["bytes"] = total
        rules = "match * tp=replicate pp=all\n"
        st = ptc.Store(os.path.join(work, "st"), create=True)
        kw = dict(config="dp=1", rules=rules, rank=0)
        out["copy_d2h_s"] = copy_bound(torch, dev, state, total)
        # async: one untimed save (the pinned snapshot memory), then the timed one
        ptc.async_save(st, state, step=0, **kw).wait()
        for x in state.values():
            x.add_(1)
        saved = {n: x.clone() for n, x in state.items()}   # what the async save holds
        dev.sync()
        t0 = time.perf_counter()
        h = ptc.async_save(st, state, step=1, **kw)
        out["async_stall_s"] = time.perf_counter() - t0
        v_async = h.wait()
        out["async_commit_s"] = time.perf_counter() - t0
        out["snapshot_bytes"] = _async.snapshot_bytes()
        for x in state.values():
            x.add_(1)
        dev.sync()
        t0 = time.perf_counter()
        v = ptc.save(st, state, step=2, **kw)
        out["save_s"] = time.perf_counter() - t0
        files = [f for f in pack_files(st.path) if "/v%d/" % v in f]
        got = {n: torch.empty_like(x) for n, x in state.items()}
        for temp in ("cold", "warm"):
            if temp == "cold":
                drop_cache(st.path)
            dev.sync()
            t0 = time.perf_counter()
            ptc.load(st, got, config="dp=1", rank=0, version=v)
            dev.sync()
            out["load_%s_s" % temp] = time.perf_counter() - t0
            out["bad_tensors_%s" % temp] = sum(not torch.equal(got[n], x)
                                               for n, x in state.items())
            if temp == "cold":
                drop_cache(st.path)
            out["read_h2d_%s_s" % temp] = read_h2d_bound(torch, dev, files, total)
        ptc.load(st, got, config="dp=1", rank=0, version=v_async)
        out["bad_tensors_async"] = sum(not torch.equal(got[n], x) for n, x in saved.items())
        st.verify(all=True)
        st.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["stall_over_copy"] = out["async_stall_s"] / out["copy_d2h_s"]
    out["load_cold_over_bound"] = out["load_cold_s"] / out["read_h2d_cold_s"]
    out["load_warm_over_bound"] = out["load_warm_s"] / out["read_h2d_warm_s"]
    gb = total / 1e9
    print("device %s, state %.2f GiB, ring %d MiB" % (out["device"], total / 2 ** 30,
                                                     out["ring_mib"]))
    print("  async_save stall %.3f s  vs device->pinned copy %.3f s (%.1f GB/s): %.2fx "
          "(goal <= 1.2)" % (out["async_stall_s"], out["copy_d2h_s"], gb / out["copy_d2h_s"],
                             out["stall_over_copy"]))
    print("  async_save until committed %.3f s; save %.3f s (%.2f GB/s)"
          % (out["async_commit_s"], out["save_s"], gb / out["save_s"]))
    for temp in ("cold", "warm"):
        print("  load %s %.3f s vs read+H2D overlapped %.3f s: %.2fx (goal <= 1.2); bad "
              "tensors %d" % (temp, out["load_%s_s" % temp], out["read_h2d_%s_s" % temp],
                              out["load_%s_over_bound" % temp], out["bad_tensors_%s" % temp]))
    print("  async version bad tensors %d" % out["bad_tensors_async"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    bad = out["bad_tensors_cold"] + out["bad_tensors_warm"] + out["bad_tensors_async"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
