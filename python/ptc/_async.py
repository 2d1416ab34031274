"""ptc.async_save: save the state while training goes on.

The call returns once this process's state is snapshotted: every local
tensor copied into host memory of the package's own (CUDA tensors with
asynchronous copies on a side stream into pinned memory, one wait at the
end; CPU tensors and numpy arrays with memcpy). libptc then runs the whole
save protocol on a thread of its own (ptc_ckpt_save_locals_async): the
exchange of the descriptions, process 0's begin, the writes of every
process, the commit. ``handle.wait()`` returns the committed version or
raises the save's error; ``handle.done()`` tells without blocking.

Threads and collectives: the background protocol's collectives run over a
process group of their own — a gloo group over the same processes, made once
per group at the first async_save (a collective call: every process of the
default group makes it, in the same order) — so they never interleave with
the training job's collectives on its own groups, whose order the job keeps.
gloo runs collectives of different groups from different threads; nccl
groups are never used from the background thread.

The snapshot memory is the state's size, allocated at the first save and
reused (grown, never shrunk) by every later one: a save first waits for the
previous one of this process, so one snapshot is ever in use. A save
(ptc.save or async_save) waits for this process's pending async save; if
that one failed and its handle was never waited for, its error is raised
there. At exit the pending save is waited for, so that it commits.

Crash safety is the store's: a version is visible only once committed, so a
process killed while its save persists leaves the previous versions intact
and no partial version (the next save removes the partial pack files).
"""

import atexit
import ctypes
import sys
import threading
from ctypes import byref, c_uint64, c_void_p
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _errors
from . import _lib as L
from ._transport import Transport

_lock = threading.Lock()
_pending: Optional["AsyncSave"] = None
_groups: Dict[Any, Any] = {}
ALIGN = 64


def _background(group: Any) -> Transport:
    """The transport of the background protocol: over a gloo group of its own
    with the processes of @p group (made at first use, collectively)."""
    dist = sys.modules.get("torch.distributed")
    if group is None and (dist is None or not dist.is_available() or
                          not dist.is_initialized()):
        return Transport(None)
    import torch.distributed as dist
    if dist.get_world_size(group) == 1:
        return Transport(group)
    key = "default" if group is None else group
    bg = _groups.get(key)
    if bg is None:
        if group is None:
            bg = dist.new_group(backend="gloo")
        else:
            bg = dist.new_group(ranks=dist.get_process_group_ranks(group), backend="gloo",
                                use_local_synchronization=True)
        _groups[key] = bg
    return Transport(bg)


# ---- the snapshot ----------------------------------------------------------------------------

class _Snapshot:
    """Host memory the state is copied into, per kind (pageable for host
    tensors, pinned per device), grown to the state and reused."""

    def __init__(self) -> None:
        self.host: Optional[np.ndarray] = None
        self.dev: Dict[Any, Any] = {}

    def bytes(self) -> int:
        n = self.host.nbytes if self.host is not None else 0
        return n + sum(int(t.numel()) for t in self.dev.values())

    def host_area(self, n: int) -> int:
        if self.host is None or self.host.nbytes < n:
            self.host = None     # the old one goes first: the peak is the new size
            self.host = np.empty(max(n, 1), dtype=np.uint8)
        return int(self.host.ctypes.data)

    def dev_area(self, dev: Any, n: int) -> Any:
        t = self.dev.get(dev.key)
        if t is None or int(t.numel()) < n:
            self.dev.pop(dev.key, None)
            t = self.dev[dev.key] = dev.host(max(n, 1))
        return t


_snap = _Snapshot()


def snapshot_bytes() -> int:
    """Bytes of this process's snapshot memory (0 before the first async_save)."""
    return _snap.bytes()


def _take_snapshot(loc: Any) -> None:
    """Copy every local tensor of @p loc into the snapshot memory and point
    its description there (no longer streamed)."""
    sizes = []
    for i in range(loc.n):
        d = loc.arr[i]
        vol = 1
        for k in range(d.ndim):
            vol *= int(d.shape[k])
        sizes.append(vol * _arrays.dtype_size(d.dtype) if d.data else 0)
    dev, host_off, dev_off, host_n, dev_n = None, [], [], 0, 0
    for i in range(loc.n):
        if loc.arr[i].streamed:
            dev = loc.stream.dev
            dev_off.append(dev_n)
            host_off.append(-1)
            dev_n += (sizes[i] + ALIGN - 1) // ALIGN * ALIGN
        else:
            host_off.append(host_n)
            dev_off.append(-1)
            host_n += (sizes[i] + ALIGN - 1) // ALIGN * ALIGN
    base = _snap.host_area(host_n) if host_n else 0
    area = _snap.dev_area(dev, dev_n) if dev is not None and dev_n else None
    last = None
    if area is not None:
        dev.begin()
    for i in range(loc.n):
        d, n = loc.arr[i], sizes[i]
        if n == 0:
            d.streamed = False
            continue
        if d.streamed:
            src = loc.stream.tensors[int(d.data)]
            dst = area[dev_off[i]:dev_off[i] + n]
            last = dev.copy(dst, src)
            d.data, d.streamed = dst.data_ptr(), False
        else:
            ctypes.memmove(base + host_off[i], d.data, n)
            d.data = base + host_off[i]
    if last is not None:
        dev.wait(last)          # in order on the side stream: every copy is done


# ---- the handle --------------------------------------------------------------------------

class AsyncSave:
    """A save running in the background (ptc.async_save): ``wait()`` for its
    version, ``done()`` to ask."""

    def __init__(self, handle: Any, tr: Transport, keep: Tuple[Any, ...],
                 cause: Optional[BaseException]) -> None:
        self._h, self._tr, self._keep, self._cause = handle, tr, keep, cause
        self._version: Optional[int] = None
        self._error: Optional[BaseException] = None
        self._seen = False     # the error reached the caller
        self._mu = threading.Lock()

    def done(self) -> bool:
        """Whether the save has ended (committed or failed); never blocks."""
        with self._mu:
            return self._h is None or bool(L.lib().ptc_ckpt_async_done(self._h))

    def _join(self) -> None:
        with self._mu:
            if self._h is None:
                return
            v = c_uint64()
            rc = L.lib().ptc_ckpt_async_wait(self._h, byref(v))
            self._h, self._keep = None, ()
            try:
                self._tr.check(rc, self._cause)
                self._version = v.value
            except BaseException as e:  # noqa: B036 -- raised by wait()
                self._error = e
            self._tr = None

    def wait(self) -> int:
        """Block until the save has committed and return its version; raise
        its ptc.Error (the same on every process) if it failed."""
        self._join()
        if self._error is not None:
            self._seen = True
            raise self._error
        assert self._version is not None
        return self._version

    @property
    def version(self) -> Optional[int]:
        """The committed version once waited for, else None."""
        return self._version


def wait_pending(raise_unseen: bool = True) -> None:
    """Wait for this process's pending async save; raise its error if it
    failed and its handle never raised it (@p raise_unseen)."""
    global _pending
    with _lock:
        h, _pending = _pending, None
    if h is None:
        return
    h._join()
    if raise_unseen and h._error is not None and not h._seen:
        h._seen = True
        raise h._error


@atexit.register
def _at_exit() -> None:
    try:
        wait_pending(raise_unseen=False)
    except BaseException:  # noqa: B036 -- nothing to raise to at exit
        pass


# ---- async_save --------------------------------------------------------------------------

def async_save(store: Any, state: Any, *, config: Any = None, rules: Any = None,
               rank: Any = None, group: Any = None, step: Optional[int] = None,
               meta: Optional[Mapping[str, str]] = None,
               record: Optional[Mapping[str, Any]] = None,
               global_shapes: Optional[Mapping[str, Sequence[int]]] = None,
               compress: Any = None, threads: Optional[int] = None,
               reuse: bool = True, rules_file: Any = None) -> AsyncSave:
    """ptc.save in the background: the arguments are save's (without
    @p config, the layout the DTensors have; a missing store is created).
    Returns once this process's state is copied (the tensors may change at
    once); the save's outcome comes from the handle's ``wait()``.

    Collective like save (every process of @p group calls it); the first call
    per group makes the background gloo group, also collectively. Waits for
    this process's previous async save first.
    """
    from . import checkpoint as C
    C._require_ckpt("ptc.async_save")
    global _pending
    wait_pending()
    tr = _background(group)

    def convert() -> Tuple[Any, ...]:
        st = C._store_of(store, writable=True, create=True)
        st._ptr()
        cfg = L.parse_config(config) if config is not None else None
        rl = C._rules_of(rules, rules_file)
        if cfg is not None and rl is None:
            raise _errors.InvalidError("a save with config= needs rules= (a preset name or "
                                       "rules text) or rules_file=")
        rec = C._Record(step, meta, record) if tr.rank == 0 else None
        o = C._options(threads, compress, reuse)
        loc = C._Locals(tr.rank if rank is None else rank, state, writable=False,
                        global_shapes=global_shapes)
        try:
            _take_snapshot(loc)
        finally:
            loc.close()
        return st, cfg, rl, loc, rec, o

    got, rc, cause = C._convert(tr, convert)
    h = c_void_p()
    L.lib().ptc_error_clear()
    if rc < 0:
        keep: Tuple[Any, ...] = ()
        rc = L.lib().ptc_ckpt_save_locals_async(byref(h), byref(tr.t), rc, None, None, 0, None,
                                                0, None, None, None, None, None)
    else:
        st, cfg, rl, loc, rec, o = got
        keep = (st, cfg, rl, loc, rec, o)
        rc = L.lib().ptc_ckpt_save_locals_async(
            byref(h), byref(tr.t), 0, st._ptr(), loc.ranks, loc.nranks, loc.arr, loc.n,
            byref(cfg) if cfg is not None else None, rl.ptr if rl is not None else None,
            byref(rec.rec) if rec is not None else None, byref(o), None)
    if rc < 0:              # no thread started (no handle): raised here
        tr.check(rc, cause)
    a = AsyncSave(h, tr, keep, cause)
    with _lock:
        _pending = a
    return a
