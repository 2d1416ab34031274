"""ptc.save / ptc.load: collective save and load of a training job's state
(parameters, optimizer state, training-state record) over a torch.distributed
process group or in one process.

The protocol is libptc's (include/ptc/ckpt.h), the same code the C API runs
over MPI: ``ptc_ckpt_save_locals_over`` and ``ptc_ckpt_load_locals_over``.
This module only converts: each tensor of ``state`` becomes a description
(name, rank, pointer, dtype, local shape, and where known its global shape
and where a DTensor's local tensor lies — a box, or the pieces of a strided
shard, read from its mesh and placements by ptc._dtensor; no copies), the
arguments become C structs, and the
process group becomes a ptc_transport whose callbacks run torch.distributed
collectives on uint8 tensors (ptc._transport). libptc then exchanges the
descriptions and agrees on the layout of the whole collection (that of
``config`` and the rules, or, without a config, the explicit layout the
descriptions make), checks every
local tensor against it, and saves (process 0 begins, every process writes
its ranks' shards, process 0 commits) or loads (process 0 resolves the
version, every process reads the stored blocks its pieces touch).

Every step ends in an agreement: a failure on any process — a conversion
here, a check, a write, a collective — makes every process raise the same
``ptc.Error`` ("checkpoint save failed on process P: ...") and no version
becomes visible. A check of the exchanged descriptions, which every process
computes alike, is raised as is (e.g. "tensor 'w' is F32 on rank 0 and F16
on rank 1").
"""

import ctypes
import os
from ctypes import byref, c_int, c_uint64, c_void_p
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _arrays, _dtensor, _errors, _ring
from . import _lib as L
from ._lib import call, dec
from ._transport import Transport, set_error

if TYPE_CHECKING:
    from .store import Store

CKPT_FUNCTIONS = L.CKPT_FUNCTIONS

# the record's named fields a caller may set (record=...), with their kinds
RECORD_FIELDS = {"schedule": str, "seed": "u64", "epoch": "u63", "sample": "u63",
                 "global_batch": "u63", "dataset": str, "loss": float, "rng": bytes}

StoreLike = Union[str, "os.PathLike[str]", "Store"]   # a store's path or an open one
State = Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]
Ranks = Union[int, Sequence[int]]


# ---- arguments ---------------------------------------------------------------------------

def _store_of(store: StoreLike, writable: bool, create: bool = False) -> Any:
    from .store import Store, shared_store
    if isinstance(store, Store):
        return store
    return shared_store(os.fspath(store), writable=writable, create=create)


def _rank_states(rank: Ranks, state: State) -> List[Tuple[int, Mapping[str, Any]]]:
    """[(rank, {name: tensor})]: one rank and a mapping, or a sequence of ranks
    and a sequence of mappings (one process running several ranks)."""
    if isinstance(rank, int) and not isinstance(rank, bool):
        if not hasattr(state, "items"):
            raise _errors.InvalidError("state must map tensor names to this rank's tensors")
        return [(rank, state)]  # type: ignore[list-item]
    try:
        ranks = [int(r) for r in rank]  # type: ignore[union-attr]
    except TypeError:
        raise _errors.InvalidError("rank must be an int or a sequence of ints, not %r"
                                   % (rank,)) from None
    if hasattr(state, "items") or len(state) != len(ranks):
        raise _errors.InvalidError("with %d ranks, state must be a sequence of %d mappings"
                                   % (len(ranks), len(ranks)))
    return list(zip(ranks, state))  # type: ignore[arg-type]


def _dtensor_place(loc: Any, x: Any, local: Any, name: str) -> Optional[Any]:
    """Describe where DTensor @p x's local tensor @p local lies in its global
    tensor (ptc._dtensor: its mesh coordinate and placements) in the
    ptc_ckpt_local @p loc: a box, or the pieces of a strided shard. Returns
    what the description points to (keep it alive), or None where this
    process is outside the DTensor's mesh (it holds none of it)."""
    try:
        shape, pieces = _dtensor.local_pieces(x, name)
    except LookupError:
        return None
    if tuple(local.shape) != shape:
        raise _errors.InvalidError("tensor '%s': the DTensor's local tensor has shape %s, but "
                                   "its placements give %s" % (name, list(local.shape),
                                                              list(shape)))
    what = "tensor '%s'" % name
    if len(pieces) == 1 and pieces[0][2] == 0:
        lo, hi = pieces[0][0], pieces[0][1]
        loc.has_box = True
        loc.box.ndim = _set_shape(loc.box.lo, lo, what)
        _set_shape(loc.box.hi, hi, what)
        return ()
    arr = (L.Piece * max(1, len(pieces)))()
    for i, (lo, hi, off, st) in enumerate(pieces):
        arr[i].box.ndim = _set_shape(arr[i].box.lo, lo, what)
        _set_shape(arr[i].box.hi, hi, what)
        arr[i].local_offset = off
        _set_shape(arr[i].local_stride, st, what)
    if not pieces:  # an empty shard: a box of its (empty) local shape
        loc.has_box = True
        loc.box.ndim = _set_shape(loc.box.hi, shape, what)
    else:
        loc.pieces, loc.npieces = arr, len(pieces)
    return arr


def _set_shape(dst: Any, shape: Sequence[int], what: str) -> int:
    if len(shape) > L.MAX_DIMS:
        raise _errors.InvalidError("%s has %d dimensions (at most %d)"
                                   % (what, len(shape), L.MAX_DIMS))
    for d, v in enumerate(shape):
        dst[d] = int(v)
    return len(shape)


class _Locals:
    """The ranks and the described local tensors of one call (ptc_ckpt_local),
    and the arrays and bytes they point to. Device tensors are streamed:
    their description carries a token of ``stream`` (ptc._ring), which must be
    closed after the call (``close()``)."""

    def __init__(self, rank: Ranks, state: State, writable: bool,
                 global_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                 ring_bytes: Optional[int] = None, stage: bool = False) -> None:
        items = _rank_states(rank, state)
        DTensor = _arrays.dtensor_class()
        gs = dict(global_shapes or {})
        self.nranks = len(items)
        self.ranks = (c_int * max(1, len(items)))(*[r for r, _ in items])
        n = sum(len(st) for _, st in items)
        self.arr = (L.CkptLocal * max(1, n))()
        self._keep: List[Any] = []
        self.stream: Optional[_ring.Stream] = None
        self.local: List[Any] = []   # per description: its array (host) or device tensor
        self._ring_bytes = ring_bytes
        # with @p stage device tensors go through host copies instead
        # (calls that bind host buffers only: across hosts); a load's are
        # copied to the device by unstage() after the call
        self._stage = stage
        self.staged: List[Tuple[Any, Any]] = []
        try:
            self._describe(items, DTensor, gs, writable)
        except BaseException:
            self.close()
            raise

    def _describe(self, items: List[Tuple[int, Mapping[str, Any]]], DTensor: Any,
                  gs: Dict[str, Sequence[int]], writable: bool) -> None:
        i = 0
        for r, st in items:
            for name, x in st.items():
                if not isinstance(name, str):
                    raise _errors.InvalidError("tensor names must be str, not %r" % (name,))
                what = "tensor '%s'" % name
                loc = self.arr[i]
                g = None
                if DTensor is not None and isinstance(x, DTensor):
                    local = getattr(x, "_local_tensor", None)
                    if local is None:
                        local = x.to_local()
                    keep = _dtensor_place(loc, x, local, name)
                    if keep is None:
                        continue  # outside its mesh: this process holds none of it
                    self._keep.append(keep)
                    g = tuple(int(s) for s in x.shape)
                    x = local
                elif name in gs:
                    g = tuple(int(s) for s in gs[name])
                i += 1
                dev = _ring.device_of(x, what)
                if dev is not None and self._stage:
                    x, dev = self._host_copy(x, writable), None
                ref = (self._streamed(dev, x, what) if dev is not None
                       else _arrays.array_ref(x, writable=writable, what=what))
                b = name.encode("utf-8")
                self._keep += [b, ref]
                self.local.append(ref.obj)
                loc.name, loc.rank = b, r
                loc.dtype = _arrays.dtype_value(ref.dtype)
                loc.ndim = _set_shape(loc.shape, ref.shape, what)
                if g is not None:
                    loc.has_global = True
                    loc.global_ndim = _set_shape(loc.global_shape, g, what + " (global)")
                loc.data = ref.ptr or None
                loc.streamed = dev is not None
        self.n = i

    def _streamed(self, dev: Any, x: Any, what: str) -> _arrays.ArrayRef:
        """A device tensor's description: its token in this call's stream."""
        if self.stream is None:
            self.stream = _ring.Stream(dev, self._ring_bytes)
        elif self.stream.dev is not dev:
            raise _errors.UnsupportedError(
                "%s is on %s, other tensors of this process on another device: one "
                "device per process" % (what, x.device))
        tok = self.stream.add(x, what)
        return _arrays.ArrayRef(x, tok, _arrays.dtype_name(x.dtype), tuple(x.shape),
                                x.numel() * x.element_size())

    def _host_copy(self, x: Any, writable: bool) -> Any:
        """A host tensor of device tensor @p x's shape and dtype: for a save
        holding its bytes now, for a load copied to @p x by unstage()."""
        import torch
        host = torch.empty(tuple(x.shape), dtype=x.dtype)
        if writable:
            self.staged.append((x, host))
        else:
            host.copy_(x)
        return host

    def unstage(self) -> None:
        """After a successful load: the staged host copies to their device
        tensors (on the current stream, which the copies precede when this
        returns)."""
        staged, self.staged = self.staged, []
        for x, host in staged:
            x.copy_(host)

    def options(self, o: Any) -> Any:
        """Options @p o with this call's stream, if it has one."""
        if self.stream is not None:
            self.stream.options(o)
        return o

    def close(self) -> None:
        """After the libptc call: the stream's copies done, its ring free."""
        if self.stream is not None:
            s, self.stream = self.stream, None
            s.close()


def _u(v: Any, what: str, bits: int) -> int:
    """@p v as an int in [0, 2^bits)."""
    try:
        iv = int(v)
        ok = not isinstance(v, bool) and iv == v
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise _errors.InvalidError("%s must be an integer, not %r" % (what, v))
    if not 0 <= iv < (1 << bits):
        raise _errors.RangeError("%s: %d is outside 0..2^%d-1" % (what, iv, bits))
    return iv


class _Record:
    """A ptc_ckpt_record to pass in, and the bytes it points to."""

    def __init__(self, step: Optional[int], meta: Optional[Mapping[str, str]],
                 record: Optional[Mapping[str, Any]]) -> None:
        self.rec = L.CkptRecord()
        self._keep: List[Any] = []
        rec = self.rec
        rec.step = _u(step if step is not None else 0, "step", 63)
        for k, v in (record or {}).items():
            kind = RECORD_FIELDS.get(k)
            if kind is None:
                raise _errors.InvalidError(
                    "record: unknown field '%s' (fields: %s; free-form keys go in meta)"
                    % (k, ", ".join(RECORD_FIELDS)))
            if v is None:
                continue
            if kind is str:
                if not isinstance(v, str):
                    raise _errors.InvalidError("record: %s must be a str, not %r" % (k, v))
                b = v.encode("utf-8")
                self._keep.append(b)
                setattr(rec, k, b)
            elif kind is float:
                rec.has_loss, rec.loss = True, float(v)
            elif kind is bytes:
                b = bytes(v)
                buf = ctypes.create_string_buffer(b, len(b))
                self._keep.append(buf)
                rec.rng, rec.rng_len = ctypes.cast(buf, c_void_p), len(b)
            else:
                setattr(rec, k, _u(v, "record: " + k, 64 if kind == "u64" else 63))
        meta = meta or {}
        if not hasattr(meta, "items"):
            raise _errors.InvalidError("meta must map str keys to str values")
        kvs = (L.CkptKv * max(1, len(meta)))()
        for i, (k, v) in enumerate(meta.items()):
            if not isinstance(k, str) or not isinstance(v, str):
                raise _errors.InvalidError("meta: keys and values must be str, not %r: %r "
                                           "(json.dumps other values)" % (k, v))
            kb, vb = k.encode("utf-8"), v.encode("utf-8")
            if b"\0" in kb or b"\0" in vb:
                raise _errors.InvalidError("meta: key or value of '%s' holds a NUL" % k)
            self._keep += [kb, vb]
            kvs[i].key, kvs[i].value = kb, vb
        self._keep.append(kvs)
        rec.extra, rec.nextra = ctypes.cast(kvs, ctypes.POINTER(L.CkptKv)), len(meta)


def record_dict(rec: Any, version: int) -> Dict[str, Any]:
    """A filled ptc_ckpt_record as a dict."""
    return {
        "version": version, "format": rec.format, "step": rec.step,
        "config": dec(rec.config) or "", "schedule": dec(rec.schedule) or "",
        "seed": rec.seed, "epoch": rec.epoch, "sample": rec.sample,
        "global_batch": rec.global_batch, "dataset": dec(rec.dataset) or "",
        "loss": rec.loss if rec.has_loss else None,
        "rng": ctypes.string_at(rec.rng, rec.rng_len) if rec.rng_len else b"",
        "meta": {dec(rec.extra[i].key): dec(rec.extra[i].value) for i in range(rec.nextra)},
    }


def _options(threads: Optional[int] = None, compress: Any = None, reuse: bool = True,
             parent: Optional[int] = None) -> Any:
    o = L.CkptOptions()
    L.lib().ptc_ckpt_options_init(byref(o))
    if threads is not None:
        if not 1 <= int(threads) <= 4096:
            raise _errors.InvalidError("threads: %s is not 1..4096" % threads)
        o.threads = int(threads)
    o.codec, o.level = L.parse_compress(compress)
    o.no_reuse = not reuse
    if parent is not None:
        o.parent = _u(parent, "parent", 64)
    return o


def _require_ckpt(what: str) -> None:
    lib = L.lib()
    missing = [n for n in CKPT_FUNCTIONS if not lib.has(n)]
    if missing:
        raise _errors.UnsupportedError(
            "%s needs the training-state checkpoint API of libptc (include/ptc/ckpt.h); "
            "the loaded library (%s) lacks %s" % (what, L.library_path(), missing[0]))


def _convert(tr: Transport, fn: Any) -> Tuple[Any, int, Optional[BaseException]]:
    """(fn(), PTC_OK, None), or (None, its code, the exception) with libptc's
    error set, so that the C call agrees on this process's failure. Alone,
    the exception is raised as it is: there is nobody to agree with."""
    try:
        return fn(), 0, None
    except Exception as e:     # every process must reach the agreement
        if tr.size == 1:
            raise
        return None, set_error(e), e


def _require_hosts(what: str) -> None:
    lib = L.lib()
    missing = [n for n in L.HOSTS_FUNCTIONS if not lib.has(n)]
    if missing:
        raise _errors.UnsupportedError(
            "%s needs libptc's store spread over hosts (include/ptc/reshard.h); the loaded "
            "library (%s) lacks %s" % (what, L.library_path(), missing[0]))


def _host_name(host: Optional[str]) -> Optional[bytes]:
    """The host identity libptc groups processes by (None: the machine's name)."""
    if host is None:
        return None
    if not isinstance(host, str) or not host or len(host.encode()) >= 256:
        raise _errors.InvalidError("host: %r is not a host name of 1..255 bytes" % (host,))
    return host.encode()


# ---- save -----------------------------------------------------------------------------------

def _rules_of(rules: Any, rules_file: Any) -> Optional[Any]:
    """The rules given (a preset name or rules text) or read from @p rules_file;
    None where neither is."""
    if rules is None and rules_file is None:
        return None
    return L.as_rules(rules, rules_file)


def save(store: StoreLike, state: State, *, config: Any = None, rules: Any = None,
         rank: Optional[Ranks] = None, group: Any = None, step: Optional[int] = None,
         meta: Optional[Mapping[str, str]] = None, record: Optional[Mapping[str, Any]] = None,
         global_shapes: Optional[Mapping[str, Sequence[int]]] = None, compress: Any = None,
         threads: Optional[int] = None, reuse: bool = True, rules_file: Any = None,
         ring_bytes: Optional[int] = None, across_hosts: bool = False,
         host: Optional[str] = None, replicas: int = 1, keep_local: int = 0) -> int:
    """Save this process's local tensors as part of a new version; collective
    over @p group (default: torch.distributed's default group when one is
    initialised, else this process alone). Returns the committed version. A
    @p store given as a path is created if it does not exist (in a new or
    empty directory).

    @p state maps global tensor names to this rank's local tensors (numpy
    arrays, CPU torch tensors, DTensors: their local shard). A process running
    several ranks passes a sequence of ranks and a sequence of mappings; one
    rank (@p rank, default: this process's rank in @p group) a mapping.

    Without @p config the layout is the one the tensors have: each DTensor
    where its DeviceMesh and placements put its local tensor (Shard on any
    mesh dimension, Replicate, FSDP2's strided shards; Partial is refused),
    each plain tensor whole. The version records it as explicit per-rank
    pieces and loads into any other layout (docs/checkpoint.md, "Layouts from
    DTensors"). The processes' ranks together must be 0..W-1, and the ranks'
    local tensors together must hold every element of every tensor exactly
    once (replicas aside). @p rules / @p rules_file, if given, must place
    every tensor: they are stored as the rules the version is viewed with
    under a configuration (ptc export --config, the mount, reshard).

    With @p config the layout is @p config under @p rules (a preset name or
    rules text) or @p rules_file (a path): each local tensor must have the
    local shape and dtype it gives @p rank (a DTensor also its place), and
    the processes' ranks together must be the configuration's world. A plain
    tensor's global shape comes from a DTensor of the same name on another
    rank or from @p global_shapes (not needed for a world of one rank or a
    replicated tensor).

    @p step (optimizer steps completed), @p meta (str -> str: the record's
    free-form key/values) and @p record (the named fields: schedule, seed,
    epoch, sample, global_batch, dataset, loss, rng) make the training-state
    record; process 0's are stored. @p compress: None or "zstd[:LEVEL]";
    @p threads: libptc's threads per process (default: the CPUs, at most 16);
    @p reuse: reference shards unchanged since the newest version instead of
    writing them again.

    CUDA tensors (and DTensors with CUDA shards) are copied to the host
    through a ring of pinned buffers (@p ring_bytes, default PTC_RING_MIB or
    256 MiB per process; ptc._ring) while libptc writes: never a copy of the
    whole state. A save waits for this process's pending ``async_save``.

    With @p across_hosts the store is spread over hosts (docs/checkpoint.md,
    "Across hosts"): @p store is the same path on every host, each host's own
    disk; processes are grouped into hosts by @p host (default: the machine's
    host name; tests give processes of one machine names of their own) and
    the returned version G is committed across hosts only when every host
    has written its part: its ranks' shards and, with @p replicas K (< the
    hosts), copies of hosts h-1..h-K's. @p keep_local M keeps the parts of
    the newest M versions on each host (0: all); the deleted versions' files
    are kept as spares that the next save overwrites in place (`ptc gc`
    removes them when the job is done). CUDA tensors are copied to
    host memory first (a host copy of this process's device tensors for the
    call; not through the ring).

    Raises the ptc.Error of the first failing process on every process; then
    no version becomes visible and its pack files are removed.
    """
    _require_ckpt("ptc.save")
    if across_hosts:
        _require_hosts("ptc.save(across_hosts=True)")
    from ._async import wait_pending
    wait_pending()
    tr = Transport(group)

    def convert() -> Tuple[Any, ...]:
        st = _store_of(store, writable=True, create=True)
        st._ptr()
        cfg = L.parse_config(config) if config is not None else None
        rl = _rules_of(rules, rules_file)
        if cfg is not None and rl is None:
            raise _errors.InvalidError("a save with config= needs rules= (a preset name or "
                                       "rules text) or rules_file=")
        rec = _Record(step, meta, record) if tr.rank == 0 else None
        o = _options(threads, compress, reuse)
        if across_hosts:  # checked here: a failure is agreed
            _host_name(host)
            _u(replicas, "replicas", 31)
            _u(keep_local, "keep_local", 31)
        # last: a stream holds the ring until closed
        loc = _Locals(tr.rank if rank is None else rank, state, writable=False,
                      global_shapes=global_shapes, ring_bytes=ring_bytes, stage=across_hosts)
        return st, cfg, rl, loc, rec, loc.options(o)

    got, rc, cause = _convert(tr, convert)
    v = c_uint64()
    if rc < 0 and across_hosts:  # every process takes the same collective path
        rc = L.lib().ptc_reshard_hosts_save_locals(byref(tr.t), rc, None, None, None, 0, None, 0,
                                                   None, None, None, None, None, byref(v))
    elif rc < 0:
        rc = L.lib().ptc_ckpt_save_locals_over(byref(tr.t), rc, None, None, 0, None, 0, None,
                                               None, None, None, byref(v))
    else:
        st, cfg, rl, loc, rec, opts = got
        L.lib().ptc_error_clear()
        try:
            if across_hosts:
                ho = L.CkptHostsOptions()
                L.lib().ptc_ckpt_hosts_options_init(byref(ho))
                ho.replicas, ho.keep = _u(replicas, "replicas", 31), _u(keep_local, "keep_local",
                                                                         31)
                rc = L.lib().ptc_reshard_hosts_save_locals(
                    byref(tr.t), 0, _host_name(host), st._ptr(), loc.ranks, loc.nranks,
                    loc.arr, loc.n, byref(cfg) if cfg is not None else None,
                    rl.ptr if rl is not None else None,
                    byref(rec.rec) if rec is not None else None, byref(opts), byref(ho),
                    byref(v))
            else:
                rc = L.lib().ptc_ckpt_save_locals_over(
                    byref(tr.t), 0, st._ptr(), loc.ranks, loc.nranks, loc.arr, loc.n,
                    byref(cfg) if cfg is not None else None, rl.ptr if rl is not None else None,
                    byref(rec.rec) if rec is not None else None, byref(opts), byref(v))
        finally:
            cause = _close(loc, rc, cause)
    tr.check(rc, cause)
    return v.value


def _close(loc: _Locals, rc: int, cause: Optional[BaseException]) -> Optional[BaseException]:
    """Close the call's stream; the cause of a failure: @p cause, else a
    device copy's exception. A copy failing after a successful call raises."""
    if rc >= 0:
        loc.unstage()
    stream = loc.stream
    if stream is None:
        return cause
    if rc >= 0:
        loc.close()
        return cause
    try:
        loc.close()
    except BaseException:  # noqa: B036 -- the call failed already: its error is raised
        pass
    return cause or stream.exc


# ---- load -----------------------------------------------------------------------------------

def load(store: StoreLike, state: State, *, config: Any = None, rank: Optional[Ranks] = None,
         version: Optional[int] = None, group: Any = None, threads: Optional[int] = None,
         rules: Any = None, rules_file: Any = None,
         ring_bytes: Optional[int] = None, across_hosts: bool = False,
         host: Optional[str] = None) -> Dict[str, Any]:
    """Fill this process's local tensors of @p state in place from a stored
    version (default: the newest, as process 0 sees it), whatever layout saved
    it; collective over @p group like save. Returns the version's
    training-state record as a dict: version, format (0: the version has
    none), step, config, schedule, seed, epoch, sample, global_batch, dataset,
    loss (None: not set), rng (bytes) and meta (str -> str).

    Without @p config each tensor of @p state receives what its layout says
    it holds: a DTensor its local shard (any mesh, any placements but
    Partial), a plain tensor the whole tensor. With @p config, the layout of
    @p config under the version's rules (or @p rules / @p rules_file: needed
    to split tensors of a version saved from DTensors without rules, whose
    tensors are otherwise whole on every rank): @p state maps the global names
    of the tensors @p rank holds to arrays of their local shape, and every
    tensor the rank holds must be there. Arrays have the stored dtype (BF16
    and FP8 also integer arrays of their size, as raw bits). Several ranks per
    process: sequences, as for save. Only the stored blocks that the local
    pieces touch are read, over libptc's threads (@p threads per process;
    default: the CPUs, at most 16, at least 8).

    CUDA tensors (and DTensors with CUDA shards) are filled through the
    pinned ring (@p ring_bytes, as for save): each window is read and
    verified into a pinned buffer and copied to the device while the next
    ones are read; the current CUDA stream is ordered after the copies when
    load returns.

    With @p across_hosts the store is spread over hosts (written by ptc train
    --replicas or ptc.save(across_hosts=True); @p host as for save): the
    hosts first recover an interrupted save and take the version ptc train
    --resume takes (the newest committed one the hosts present hold whole;
    @p version: that one, which must be committed), and each rank's bytes
    come from one host that holds them (its own part or a replica on
    another host) over @p group's point-to-point messages, by the
    minimal-movement plan; no host reads another's disk. A host whose
    store holds no part of the version (a replaced host, an empty store)
    takes part: the layout and record come from a host holding a part (a
    version saved with an explicit layout, e.g. from DTensors without
    config, from the shard records of every host present). An older version
    than the newest taken is said on process 0 as a ptc.PtcWarning. The
    returned dict
    then also holds "hosts": the hosts, "moved_bytes" (between hosts),
    "lower_bound" (the plan's per-host lower bound), "max_host_bytes" (the
    busiest host's) and "bytes_read". CUDA tensors are filled through host
    tensors of their shapes (allocated for the call, copied to the device
    after the load succeeds; not through the ring).
    """
    _require_ckpt("ptc.load")
    if across_hosts:
        _require_hosts("ptc.load(across_hosts=True)")
    tr = Transport(group)

    def convert() -> Tuple[Any, ...]:
        st = _store_of(store, writable=False)
        st._ptr()
        cfg = L.parse_config(config) if config is not None else None
        rl = _rules_of(rules, rules_file)
        if cfg is None and rl is not None:
            raise _errors.InvalidError("rules= applies to a load with config= (the layout of a "
                                       "load without one is its tensors')")
        opts, v = _options(threads), _u(version or 0, "version", 64)
        if rl is not None:
            opts.rules = rl.ptr
        if across_hosts:
            _host_name(host)
        # last: see save
        loc = _Locals(tr.rank if rank is None else rank, state, writable=True,
                      ring_bytes=ring_bytes, stage=across_hosts)
        return st, cfg, loc, loc.options(opts), v, rl

    got, rc, cause = _convert(tr, convert)
    rec, loaded = L.CkptRecord(), c_uint64()
    res = L.ReshardHostsResult()
    # libptc's warnings on this thread (a load across hosts that takes an
    # older version than the newest: process 0 says so) as ptc.PtcWarning
    with L.LogCapture() as log:
        if rc < 0 and across_hosts:
            rc = L.lib().ptc_reshard_hosts_load_locals(byref(tr.t), rc, None, None, 0, None, 0,
                                                       None, 0, None, None, byref(rec),
                                                       byref(res))
        elif rc < 0:
            rc = L.lib().ptc_ckpt_load_locals_over(byref(tr.t), rc, None, 0, None, 0, None,
                                                   0, None, None, byref(rec), byref(loaded))
        else:
            st, cfg, loc, opts, v, rl = got
            L.lib().ptc_error_clear()
            try:
                if across_hosts:
                    rc = L.lib().ptc_reshard_hosts_load_locals(
                        byref(tr.t), 0, _host_name(host), st._ptr(), v, loc.ranks, loc.nranks,
                        loc.arr, loc.n, byref(cfg) if cfg is not None else None,
                        rl.ptr if rl is not None else None, byref(rec), byref(res))
                    loaded.value = res.version
                else:
                    rc = L.lib().ptc_ckpt_load_locals_over(
                        byref(tr.t), 0, st._ptr(), v, loc.ranks, loc.nranks, loc.arr, loc.n,
                        byref(cfg) if cfg is not None else None, byref(opts), byref(rec),
                        byref(loaded))
            finally:
                cause = _close(loc, rc, cause)
    log.warn()
    tr.check(rc, cause)
    try:
        out = record_dict(rec, loaded.value)
        if across_hosts:
            out.update(hosts=res.hosts, moved_bytes=res.plan.bytes_network,
                       lower_bound=res.plan.bytes_network_lower_bound,
                       max_host_bytes=res.max_host_bytes, bytes_read=res.bytes_read)
        return out
    finally:
        L.lib().ptc_ckpt_record_free(byref(rec))


def read_record(store: StoreLike, version: Optional[int] = None) -> Dict[str, Any]:
    """The training-state record of a version (default: the newest) as load
    returns it, without reading any tensor."""
    _require_ckpt("ptc.read_record")
    st = _store_of(store, writable=False)
    v = int(version or 0) or st.latest()
    rec = L.CkptRecord()
    call("ptc_ckpt_read_record", st._ptr(), v, byref(rec))
    try:
        return record_dict(rec, v)
    finally:
        L.lib().ptc_ckpt_record_free(byref(rec))
