"""Device tensors through host memory: the bounded ring of pinned host
buffers that ptc.save, ptc.load and ptc.async_save copy CUDA tensors through.

libptc never touches the device (it stays CUDA-free for CPU users): it takes
a ptc_ckpt_stream (include/ptc/ckpt.h) whose callbacks this module answers
with torch's copies — asynchronous (``non_blocking``) copies on a side
stream of the tensor's device, between the device tensor and page-locked
(pinned) host buffers, ordered after the work already queued on the current
stream, and CUDA events to know when a buffer is full or free again.

Save: libptc first names the streamed shards in the order it will write them
(plan); the ring copies ahead in that order, so the device-to-host copies of
the next chunks run while libptc checksums, compresses and writes the one it
holds, and a buffer is copied into again as soon as libptc releases it.
Load: libptc reads and verifies the stored blocks of a window of a tensor
straight into a buffer (acquire), then hands it over (push): its
host-to-device copy is queued and the buffer is reused once the copy's
event has completed, while the next windows are read.

Memory: one ring per device and process, allocated at its first use and
reused by every later call (never a copy of the whole state): ``ring_bytes``
of the call, else PTC_RING_MIB from the environment, else 256 MiB, in chunks
of 8 MiB (at least 4 of them).

Without a GPU (CI): PTC_FAKE_DEVICE=1 in the environment, or
``with fake_device():``, sends CPU torch tensors down this same path to a
CUDA-free stand-in device whose copies run in order on a thread of their own
(one stream) with events: the same ring, callbacks and libptc streaming as
CUDA tensors. A testing aid only.
"""

import collections
import contextlib
import ctypes
import os
import queue
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import _errors
from . import _lib as L
from ._transport import callback_error

MIB = 1 << 20
CHUNK = 8 * MIB              # bytes of one pull / push (ptc_ckpt_stream.chunk)
DEFAULT_RING_MIB = 256
MIN_SLOTS = 4

_fake_on = False


def ring_bytes_default() -> int:
    """The ring of a call that gives none: PTC_RING_MIB MiB, else 256 MiB."""
    v = os.environ.get("PTC_RING_MIB")
    if not v:
        return DEFAULT_RING_MIB * MIB
    try:
        mib = int(v)
    except ValueError:
        mib = 0
    if mib <= 0:
        raise _errors.InvalidError("PTC_RING_MIB: '%s' is not a positive number of MiB" % v)
    return mib * MIB


@contextlib.contextmanager
def fake_device() -> Iterator[None]:
    """CPU torch tensors take the device path (the stand-in device) inside."""
    global _fake_on
    old, _fake_on = _fake_on, True
    try:
        yield
    finally:
        _fake_on = old


def _fake_enabled() -> bool:
    return _fake_on or os.environ.get("PTC_FAKE_DEVICE") == "1"


# ---- devices ---------------------------------------------------------------------------------

class _Cuda:
    """A CUDA device: pinned host memory, a side stream, events."""

    def __init__(self, index: int) -> None:
        import torch
        self.torch = torch
        self.key = ("cuda", index)
        self.dev = torch.device("cuda", index)
        self.side = torch.cuda.Stream(self.dev)

    def host(self, n: int) -> Any:
        return self.torch.empty(n, dtype=self.torch.uint8, pin_memory=True)

    def begin(self) -> None:
        """The copies come after the work already queued on the current stream."""
        self.side.wait_stream(self.torch.cuda.current_stream(self.dev))

    def copy(self, dst: Any, src: Any) -> Any:
        with self.torch.cuda.stream(self.side):
            dst.copy_(src, non_blocking=True)
            ev = self.torch.cuda.Event()
            ev.record(self.side)
        return ev

    def wait(self, ev: Any) -> None:
        ev.synchronize()

    def end(self) -> None:
        """Later work on the current stream sees what the copies wrote."""
        self.torch.cuda.current_stream(self.dev).wait_stream(self.side)


class _FakeEvent:
    __slots__ = ("done", "exc")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.exc: Optional[BaseException] = None


class _Fake:
    """The CUDA-free stand-in: copies run in order on one worker thread (a
    stream), each with an event; host memory is ordinary."""

    key = ("fake", 0)

    def __init__(self) -> None:
        import torch
        self.torch = torch
        self.q: "queue.Queue[Tuple[Any, Any, _FakeEvent]]" = queue.Queue()
        self.worker = threading.Thread(target=self._work, name="ptc-fake-device", daemon=True)
        self.worker.start()

    def _work(self) -> None:
        while True:
            dst, src, ev = self.q.get()
            try:
                dst.copy_(src)
            except BaseException as e:  # noqa: B036 -- raised by wait()
                ev.exc = e
            ev.done.set()

    def host(self, n: int) -> Any:
        return self.torch.empty(n, dtype=self.torch.uint8)

    def begin(self) -> None:
        pass

    def copy(self, dst: Any, src: Any) -> _FakeEvent:
        ev = _FakeEvent()
        self.q.put((dst, src, ev))
        return ev

    def wait(self, ev: _FakeEvent) -> None:
        ev.done.wait()
        if ev.exc is not None:
            raise ev.exc

    def end(self) -> None:
        pass


_devices: Dict[Tuple[str, int], Any] = {}
_dev_lock = threading.Lock()


def device_of(x: Any, what: str = "tensor") -> Optional[Any]:
    """The device whose memory torch tensor @p x lives in, or None for host
    memory (CPU tensors, numpy arrays) that libptc reads by pointer."""
    from ._arrays import is_torch
    if not is_torch(x):
        return None
    kind = x.device.type
    if kind == "cpu" and not _fake_enabled():
        return None
    if kind not in ("cpu", "cuda"):
        raise _errors.UnsupportedError("%s is on %s: ptc copies CUDA and CPU tensors"
                                       % (what, x.device))
    key = ("cuda", x.device.index) if kind == "cuda" else _Fake.key
    with _dev_lock:
        dev = _devices.get(key)
        if dev is None:
            dev = _devices[key] = _Cuda(x.device.index) if kind == "cuda" else _Fake()
    return dev


def device_bytes(x: Any, what: str) -> Any:
    """A device tensor as a flat uint8 view of its bytes (no copy)."""
    if not x.is_contiguous():
        raise _errors.InvalidError("%s is not contiguous" % what)
    if x.is_conj() or x.is_neg():
        raise _errors.InvalidError("%s has a lazy conj/neg bit" % what)
    import torch
    flat = x.detach().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)


# ---- the ring --------------------------------------------------------------------------------

class Ring:
    """Pinned host buffers of CHUNK bytes of one device, reused by every call
    (one call at a time: ``lock``)."""

    def __init__(self, dev: Any, nbytes: int, chunk: int) -> None:
        n = max(MIN_SLOTS, nbytes // chunk)
        self.chunk, self.nbytes = chunk, n * chunk
        self.mem = dev.host(self.nbytes)
        self.slots = [self.mem[i * chunk:(i + 1) * chunk] for i in range(n)]
        self.ptrs = [s.data_ptr() for s in self.slots]
        self.lock = threading.Lock()


_rings: Dict[Tuple[str, int], Ring] = {}


def ring(dev: Any, nbytes: Optional[int] = None, chunk: Optional[int] = None) -> Ring:
    """The ring of @p dev (made at first use; made again when another size is
    asked for): @p nbytes (default ring_bytes_default()) in chunks of
    @p chunk bytes (default CHUNK), at least MIN_SLOTS of them."""
    chunk = chunk or CHUNK
    want = max(MIN_SLOTS, (nbytes or ring_bytes_default()) // chunk) * chunk
    with _dev_lock:
        r = _rings.get(dev.key)
        if r is None or r.nbytes != want or r.chunk != chunk:
            r = _rings[dev.key] = Ring(dev, want, chunk)
    return r


# ---- the stream of one call -----------------------------------------------------------------

class Stream:
    """The ptc_ckpt_stream of one save or load: the device tensors of the
    call (by token) and the ring's buffers between them and libptc.

    Keep it alive during the libptc call; ``close()`` afterwards (it waits for
    the copies still in flight and frees the ring for the next call)."""

    def __init__(self, dev: Any, ring_bytes: Optional[int] = None) -> None:
        self.dev = dev
        self.ring_bytes = ring_bytes
        self.ring: Optional[Ring] = None      # taken by options(), for the call
        self.tensors: Dict[int, Any] = {}
        self.cv = threading.Condition()
        self.free: List[int] = []
        self.ahead: Dict[Tuple[int, int], Tuple[int, int, Any]] = {}  # copied ahead, not pulled
        self.held: Dict[Tuple[int, int], int] = {}                    # pulled / acquired
        self.inflight: "collections.deque[Tuple[int, Any]]" = collections.deque()
        self.order: List[Tuple[int, int, int]] = []
        self.pos: Dict[Tuple[int, int], int] = {}
        self.next = 0
        self.exc: Optional[BaseException] = None
        self.began = False
        self._fns = (L.STREAM_PLAN_FN(self._guard(self._plan)),
                     L.STREAM_PULL_FN(self._guard(self._pull)),
                     L.STREAM_RELEASE_FN(self._guard(self._release, void=True)),
                     L.STREAM_ACQUIRE_FN(self._guard(self._acquire)),
                     L.STREAM_PUSH_FN(self._guard(self._push)))
        self.c = L.CkptStream(CHUNK, *self._fns, None)

    def add(self, x: Any, what: str) -> int:
        """The token of device tensor @p x in this call."""
        tok = len(self.tensors) + 1
        self.tensors[tok] = device_bytes(x, what)
        return tok

    def _begin(self) -> None:
        if not self.began:
            self.dev.begin()
            self.began = True

    # -- the callbacks (libptc's threads; never an exception into C) ------------------------
    def _guard(self, fn: Any, void: bool = False) -> Any:
        def cb(user: Any, *args: Any) -> Any:
            try:
                fn(*args)
                return None if void else 0
            except BaseException as e:  # noqa: B036 -- kept; raised after the call
                self.exc = self.exc or e
                code = callback_error(e, "device copy")
                return None if void else code
        return cb

    def _copy_out(self, slot: int, tok: int, off: int, n: int) -> Any:
        self._begin()
        return self.dev.copy(self.ring.slots[slot][:n], self.tensors[tok][off:off + n])

    def _plan(self, tokens: Any, nbytes: Any, n: int) -> None:
        chunk = self.ring.chunk
        with self.cv:
            for i in range(n):
                tok, size = int(tokens[i] or 0), int(nbytes[i])
                for off in range(0, size, chunk):
                    self.pos[(tok, off)] = len(self.order)
                    self.order.append((tok, off, min(chunk, size - off)))
            self._ahead()

    def _ahead(self) -> None:
        """Copy the next planned chunks into the free buffers (cv held)."""
        while self.free and self.next < len(self.order):
            tok, off, n = self.order[self.next]
            self.next += 1
            if (tok, off) in self.ahead or (tok, off) in self.held:
                continue
            slot = self.free.pop()
            self.ahead[(tok, off)] = (slot, n, self._copy_out(slot, tok, off, n))

    def _take(self) -> int:
        """A buffer for a range not copied ahead: a free one, else the one
        copied ahead furthest in the plan, else wait for a release (cv held)."""
        while True:
            if self.free:
                return self.free.pop()
            if self.ahead:
                key = max(self.ahead, key=lambda k: self.pos.get(k, -1))
                slot, _, ev = self.ahead.pop(key)
                self.dev.wait(ev)
                return slot
            self.cv.wait()

    def _pull(self, tok: Any, off: int, n: int, out: Any) -> None:
        key = (int(tok or 0), int(off))
        with self.cv:
            ent = self.ahead.pop(key, None)
            if ent is not None and ent[1] == n:
                slot, ev = ent[0], ent[2]
            else:
                if ent is not None:     # copied ahead with another length: redo
                    self.dev.wait(ent[2])
                    self.free.append(ent[0])
                slot = self._take()
                ev = self._copy_out(slot, key[0], key[1], n)
            self.held[key] = slot
        self.dev.wait(ev)            # the GIL is let go while the copy finishes
        out[0] = self.ring.ptrs[slot]

    def _release(self, tok: Any, off: int, n: int) -> None:
        with self.cv:
            slot = self.held.pop((int(tok or 0), int(off)), None)
            if slot is not None:
                self.free.append(slot)
                self._ahead()
                self.cv.notify_all()

    def _acquire(self, tok: Any, off: int, n: int, out: Any) -> None:
        key = (int(tok or 0), int(off))
        while True:
            with self.cv:
                if self.free:
                    slot = self.free.pop()
                    self.held[key] = slot
                    break
                if not self.inflight:
                    self.cv.wait()
                    continue
                slot, ev = self.inflight.popleft()
            self.dev.wait(ev)        # the oldest copy to the device: its buffer is free
            with self.cv:
                self.free.append(slot)
                self.cv.notify_all()
        out[0] = self.ring.ptrs[slot]

    def _push(self, tok: Any, off: int, n: int) -> None:
        key = (int(tok or 0), int(off))
        with self.cv:
            slot = self.held.pop(key)
            self._begin()
            dst = self.tensors[key[0]][key[1]:key[1] + n]
            self.inflight.append((slot, self.dev.copy(dst, self.ring.slots[slot][:n])))
            self.cv.notify_all()     # an _acquire waiting for a copy in flight may take it

    # -- after the call ---------------------------------------------------------------------
    def close(self) -> None:
        """Wait for every copy still in flight (a load's last windows, a
        save's copies ahead), order the current stream after them, and give
        the ring back. Raises a failed copy's exception where the call did
        not already fail."""
        if self.ring is None:
            return
        try:
            err = None
            pending = [ev for _, ev in self.inflight] + [e[2] for e in self.ahead.values()]
            for ev in pending:
                try:
                    self.dev.wait(ev)
                except BaseException as e:  # noqa: B036 -- the first is raised below
                    err = err or e
            self.inflight.clear()
            self.ahead.clear()
            if self.began:
                self.dev.end()
            if err is not None and self.exc is None:
                self.exc = err
                raise err
        finally:
            self.ring.lock.release()
            self.ring = None

    def options(self, o: Any) -> None:
        """Point ptc_ckpt_options @p o at this stream, holding the device's
        ring for the call (until close())."""
        if self.ring is None:
            r = ring(self.dev, self.ring_bytes)
            r.lock.acquire()
            self.ring = r
            self.free = list(range(len(r.slots)))
            self.c.chunk = r.chunk
        o.stream = ctypes.pointer(self.c)
