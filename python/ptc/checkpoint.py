"""ptc.save / ptc.load: collective save and load of a training job's state
(parameters, optimizer state, training-state record) over a torch.distributed
process group or in one process, binding the non-collective steps of
libptc's training-state checkpoint API (include/ptc/ckpt.h).

Saving (every process of the group calls ``save``):

1. every process turns its ``state`` into pointers, dtypes and shapes (no
   copies) and the group exchanges what each holds (names, dtypes, global
   shapes, ranks) as JSON in uint8 tensors, so that every process builds the
   same layout of the whole collection; each checks its local tensors
   against it;
2. process 0 begins the version (``ptc_ckpt_begin``: the store's writer
   lock, the version number, the parent) and the group learns the numbers;
3. every process writes its ranks' shards into its own pack files
   (``ptc_ckpt_write_local``, in parallel over libptc's threads) and the
   shard descriptors travel to every process as uint8 tensors;
4. process 0 commits with the training-state record (``ptc_ckpt_commit``),
   or aborts, and the group learns the outcome.

Every step ends in an agreement: a failure on any process makes every process
raise the same ``ptc.Error`` ("checkpoint save failed on process P: ...") and
no version becomes visible. No object is pickled: the group exchanges byte
tensors (``all_gather`` of lengths, then of padded bytes).

Loading: process 0 resolves the version, every process builds the layout of
that version under its ``config`` (``ptc_layout_of_version``), checks its
tensors against it and fills them in place (``ptc_ckpt_load_local``), which
reads only the stored blocks its pieces touch, whatever configuration saved
them; then the group agrees on the outcome.
"""

import ctypes
import json
import math
import os
import sys
from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p

from . import _arrays, _errors
from . import _lib as L
from ._lib import call, dec
from .layout import Layout

CKPT_FUNCTIONS = L.CKPT_FUNCTIONS

# the record's named fields a caller may set (record=...), with their kinds
RECORD_FIELDS = {"schedule": str, "seed": "u64", "epoch": "u63", "sample": "u63",
                 "global_batch": "u63", "dataset": str, "loss": float, "rng": bytes}


# ---- the processes of a call ----------------------------------------------------------

class _Group:
    """The processes taking part: a torch.distributed group, or this one alone."""

    def __init__(self, group):
        self.dist = None
        self.size, self.me = 1, 0
        if group is None:
            dist = sys.modules.get("torch.distributed")
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return
        else:
            import torch.distributed as dist
        self.size = dist.get_world_size(group)
        self.me = dist.get_rank(group)
        if self.size <= 1:
            self.size, self.me = 1, 0
            return
        import torch
        self.torch, self.dist, self.group = torch, dist, group
        self.device = torch.device("cpu")
        if dist.get_backend(group) == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())

    def exchange(self, code, payload):
        """Every process's (code, bytes): all_gather of [code, length] as int64,
        then of the bytes padded to the longest, as uint8 tensors."""
        if self.dist is None:
            return [(code, payload)]
        torch, dist = self.torch, self.dist
        head = torch.tensor([code, len(payload)], dtype=torch.int64, device=self.device)
        heads = [torch.empty_like(head) for _ in range(self.size)]
        dist.all_gather(heads, head, group=self.group)
        heads = [tuple(int(v) for v in h.tolist()) for h in heads]
        longest = max(n for _, n in heads)
        if longest == 0:
            return [(c, b"") for c, _ in heads]
        buf = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        if payload:
            buf[:len(payload)].copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        bufs = [torch.empty_like(buf) for _ in range(self.size)]
        dist.all_gather(bufs, buf, group=self.group)
        return [(c, bufs[p][:n].cpu().numpy().tobytes()) for p, (c, n) in enumerate(heads)]


def _code_and_text(err):
    if isinstance(err, _errors.Error):
        return (err.code if err.code < 0 else -1), err.message
    return _errors.InvalidError.code, "%s: %s" % (type(err).__name__, err)


def _agree(grp, what, err, payload=b""):
    """Exchange this process's outcome (an exception or None, and bytes) and
    return every process's bytes; if any process failed, raise the failure
    of the lowest failing process on every process."""
    if grp.dist is None:
        if err is not None:
            raise err
        return [payload]
    code, text = _code_and_text(err) if err is not None else (0, None)
    res = grp.exchange(code, text.encode("utf-8", "replace") if err is not None else payload)
    for p, (c, data) in enumerate(res):
        if c < 0:
            exc = _errors.make_error(c, "%s failed on process %d: %s"
                                     % (what, p, data.decode("utf-8", "replace")))
            raise exc from err
    return [data for _, data in res]


def _attempt(fn, *args):
    """(result, None) or (None, the exception fn raised)."""
    try:
        return fn(*args), None
    except Exception as e:     # every process must reach the agreement
        return None, e


# ---- arguments ---------------------------------------------------------------------------

def _store_of(store, writable):
    from .store import Store, shared_store
    if isinstance(store, Store):
        return store
    return shared_store(os.fspath(store), writable=writable)


def _rank_states(rank, state):
    """[(rank, {name: tensor})]: one rank and a mapping, or a sequence of ranks
    and a sequence of mappings (one process running several ranks)."""
    if isinstance(rank, int) and not isinstance(rank, bool):
        if not hasattr(state, "items"):
            raise _errors.InvalidError("state must map tensor names to this rank's tensors")
        return [(rank, state)]
    try:
        ranks = [int(r) for r in rank]
    except TypeError:
        raise _errors.InvalidError("rank must be an int or a sequence of ints, not %r"
                                   % (rank,)) from None
    if hasattr(state, "items") or len(state) != len(ranks):
        raise _errors.InvalidError("with %d ranks, state must be a sequence of %d mappings"
                                   % (len(ranks), len(ranks)))
    if len(set(ranks)) != len(ranks):
        raise _errors.InvalidError("rank %d given twice" % next(
            r for r in ranks if ranks.count(r) > 1))
    return list(zip(ranks, state))


def _is_dtensor(x):
    DTensor = _arrays.dtensor_class()
    return DTensor is not None and isinstance(x, DTensor)


def _dtensor_box(x, name):
    """(local shape, global offset) of this process's shard of DTensor @p x, or
    None where torch cannot tell."""
    for p in x.placements:
        if p.is_partial():
            raise _errors.InvalidError("tensor '%s' is a DTensor with a Partial placement "
                                       "(reduce it first)" % name)
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:
        return None
    shape, off = compute_local_shape_and_global_offset(x.shape, x.device_mesh, x.placements)
    return tuple(int(s) for s in shape), tuple(int(o) for o in off)


def _refs(items, writable):
    """{rank: {name: ArrayRef}} and {rank: {name: (global shape, dtensor box)}} of
    the states; DTensors give their local shard."""
    refs, info = {}, {}
    for r, st in items:
        refs[r], info[r] = {}, {}
        for name, x in st.items():
            if not isinstance(name, str):
                raise _errors.InvalidError("tensor names must be str, not %r" % (name,))
            what = "tensor '%s'" % name
            if _is_dtensor(x):
                box = _dtensor_box(x, name)
                local = getattr(x, "_local_tensor", None)
                if local is None:
                    local = x.to_local()
                refs[r][name] = _arrays.array_ref(local, writable=writable, what=what)
                info[r][name] = (tuple(int(s) for s in x.shape), box)
            else:
                refs[r][name] = _arrays.array_ref(x, writable=writable, what=what)
                info[r][name] = (None, None)
    return refs, info


def _u(v, what, bits):
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

    def __init__(self, step, meta, record):
        self.rec = L.CkptRecord()
        self._keep = []
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

    def check(self):
        """The record's JSON as libptc would store it (raises what commit would)."""
        text = c_void_p()
        call("ptc_ckpt_record_to_json", byref(self.rec), byref(text))
        try:
            return ctypes.string_at(text).decode("utf-8")
        finally:
            L.lib().ptc_store_free(text)


def record_dict(rec, version):
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


def _options(threads=None, compress=None, reuse=True, parent=None):
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


def _require_ckpt(what):
    lib = L.lib()
    missing = [n for n in CKPT_FUNCTIONS if not lib.has(n)]
    if missing:
        raise _errors.UnsupportedError(
            "%s needs the training-state checkpoint API of libptc (include/ptc/ckpt.h); "
            "the loaded library (%s) lacks %s" % (what, L.library_path(), missing[0]))


# ---- checks against a layout ------------------------------------------------------------

def _volume(shape):
    return math.prod(shape) if shape else 1


def check_local(layout, refs, rank, where=None, info=None, raw_ok=False):
    """Compare every local array of @p refs ({name: ArrayRef}) with @p layout's
    shard of @p rank: the rank must hold the tensor, with the same dtype (with
    @p raw_ok, BF16 / F8 also as raw bits in an integer array of their size)
    and local shape, and a DTensor's box (in @p info) must be the layout's;
    every tensor the rank holds elements of must be there. Returns [(tensor
    index, ArrayRef)] in layout order; raises InvalidError / NotFoundError
    naming the tensor."""
    names = layout.names()
    known = set(names)
    for name in refs:
        if name not in known:
            raise _errors.NotFoundError("tensor '%s' is not in %s" % (name, where or "the layout"))
    out = []
    for t, name in enumerate(names):
        sh = layout.shard(name, rank)
        ref = refs.get(name)
        if ref is None:
            if sh.present and _volume(sh.shape):
                raise _errors.InvalidError(
                    "rank %d holds tensor '%s' (local shape %s under %s), but the state has "
                    "no tensor of that name" % (rank, name, list(sh.shape), layout.config))
            continue
        if not sh.present:
            raise _errors.InvalidError("tensor '%s' is not held by rank %d under %s"
                                       % (name, rank, layout.config))
        if ref.dtype != sh.dtype and not (raw_ok and _arrays._raw_ok(ref.dtype, sh.dtype)):
            raise _errors.InvalidError("tensor '%s' on rank %d has dtype %s; %s has %s"
                                       % (name, rank, ref.dtype, where or "the layout",
                                          sh.dtype))
        if tuple(ref.shape) != tuple(sh.shape):
            raise _errors.InvalidError(
                "tensor '%s' on rank %d: local shape %s, but the layout of %s gives %s"
                % (name, rank, list(ref.shape), layout.config, list(sh.shape)))
        box = info.get(name, (None, None))[1] if info else None
        if box is not None and _volume(sh.shape):
            pieces = [p for p in sh.pieces if _volume(p.shape)]
            if (len(pieces) != 1 or pieces[0].shape != box[0]
                    or tuple(pieces[0].lo) != box[1]):
                have = ", ".join("%s:%s" % (o, o + s) for o, s in zip(box[1], box[0]))
                want = "; ".join(", ".join("%s:%s" % (lo, hi) for lo, hi in zip(p.lo, p.hi))
                                 for p in pieces)
                raise _errors.InvalidError(
                    "tensor '%s' on rank %d: the DTensor holds [%s] of the global tensor, "
                    "but the layout of %s places [%s] there (placements and rank must match "
                    "the rules)" % (name, rank, have, layout.config, want))
        out.append((t, ref))
    return out


def _buffers(layout, held, nranks):
    """The nranks x ntensors pointer array of ckpt.h from [[(t, ArrayRef)]]."""
    nt = len(layout)
    arr = (c_void_p * max(1, nranks * nt))()
    for i, pairs in enumerate(held):
        for t, ref in pairs:
            arr[i * nt + t] = ref.ptr or None
    return arr


# ---- save -----------------------------------------------------------------------------------

def _save_prepare(store, state, config, rules, rank, step, meta, record, global_shapes,
                  me):
    items = _rank_states(rank, state)
    st = _store_of(store, writable=True)
    st._ptr()
    cfg = L.parse_config(config)
    rl = L.as_rules(rules)
    refs, info = _refs(items, writable=False)
    rec = None
    if me == 0:               # process 0's record is the one stored: check it now
        rec = _Record(step, meta, record)
        rec.check()
    gs = dict(global_shapes or {})
    tensors = []
    for r, _ in items:
        for name, ref in refs[r].items():
            g = info[r][name][0]
            if g is None and name in gs:
                g = tuple(int(s) for s in gs[name])
            tensors.append([name, ref.dtype, list(g) if g is not None else None,
                            list(ref.shape), r])
    spec = {"config": L.format_config(cfg), "rules": rl.text, "ranks": [r for r, _ in items],
            "tensors": tensors}
    return st, cfg, rl, items, refs, info, rec, spec


def _replicated(rules, cfg, name):
    """Whether @p rules give tensor @p name the same local shape as its global
    one on every rank holding it under @p cfg (tp=replicate, and not an
    optimizer state flattened by zero=1)."""
    p = L.Placement()
    if L.lib().ptc_rules_resolve(rules.ptr, name.encode("utf-8"), byref(p)) < 0:
        L.lib().ptc_error_clear()
        return False
    return p.tp == L.TP_REPLICATE and (p.kind == L.KIND_PARAM or not cfg.zero)


def _collection(specs, cfg, rules):
    """The tensors of the whole collection [(name, dtype, global shape)] from
    every process's spec, in a deterministic order; the checks are the same on
    every process."""
    world = L.config_world(cfg)
    base = specs[0]
    for p, s in enumerate(specs[1:], 1):
        for key in ("config", "rules"):
            if s[key] != base[key]:
                raise _errors.InvalidError("process %d saves with %s '%s', process 0 with '%s'"
                                           % (p, key, s[key], base[key]))
    owner = {}
    for p, s in enumerate(specs):
        for r in s["ranks"]:
            if not 0 <= r < world:
                raise _errors.InvalidError("process %d runs rank %d, outside the world of %d "
                                           "ranks of %s" % (p, r, world, base["config"]))
            if r in owner:
                raise _errors.InvalidError("rank %d is run by processes %d and %d"
                                           % (r, owner[r], p))
            owner[r] = p
    missing = [r for r in range(world) if r not in owner]
    if missing:
        raise _errors.InvalidError("no process runs rank %d of %s (%d processes run %d of %d "
                                   "ranks)" % (missing[0], base["config"], len(specs),
                                               len(owner), world))
    order, seen = [], {}
    for s in specs:
        for name, dt, g, local, r in s["tensors"]:
            if name not in seen:
                seen[name] = [dt, g, local, r]
                order.append(name)
                continue
            have = seen[name]
            if have[0] != dt:
                raise _errors.InvalidError("tensor '%s' is %s on rank %d and %s on rank %d"
                                           % (name, have[0], have[3], dt, r))
            if g is not None:
                if have[1] is not None and list(have[1]) != list(g):
                    raise _errors.InvalidError("tensor '%s' has global shape %s on one rank "
                                               "and %s on another" % (name, have[1], g))
                have[1] = g
    out = []
    for name in order:
        dt, g, local, _ = seen[name]
        if g is None:
            if world != 1 and not _replicated(rules, cfg, name):
                raise _errors.InvalidError(
                    "tensor '%s': its global shape is unknown (give a DTensor, or "
                    "global_shapes={name: shape}; only replicated tensors go without)" % name)
            g = local
        out.append((name, dt, tuple(g)))
    return out


def save(store, state, *, config, rules, rank, group=None, step=None, meta=None, record=None,
         global_shapes=None, compress=None, threads=None, reuse=True):
    """Save this process's local tensors as part of a new version; collective
    over @p group (default: torch.distributed's default group when one is
    initialised, else this process alone). Returns the committed version.

    @p state maps global tensor names to this rank's local tensors (numpy
    arrays, CPU torch tensors, DTensors: their local shard), each of the local
    shape and dtype the layout of @p config under @p rules gives @p rank. A
    process running several ranks passes a sequence of ranks and a sequence of
    mappings. The processes' ranks together must be the configuration's world.
    A plain tensor's global shape comes from a DTensor of the same name on
    another rank or from @p global_shapes (not needed for a world of one rank).

    @p step (optimizer steps completed), @p meta (str -> str: the record's
    free-form key/values) and @p record (the named fields: schedule, seed,
    epoch, sample, global_batch, dataset, loss, rng) make the training-state
    record; process 0's are stored. @p compress: None or "zstd[:LEVEL]";
    @p threads: libptc's threads per process (default: the CPUs, at most 16);
    @p reuse: reference shards unchanged since the newest version instead of
    writing them again.

    Raises the ptc.Error of the first failing process on every process; then
    no version becomes visible and its pack files are removed.
    """
    _require_ckpt("ptc.save")
    grp = _Group(group)
    what = "checkpoint save"
    prep, err = _attempt(_save_prepare, store, state, config, rules, rank, step, meta, record,
                         global_shapes, grp.me)
    payload = json.dumps(prep[-1]).encode() if err is None else b""
    specs = [json.loads(b) for b in _agree(grp, what, err, payload)]
    st, cfg, rl, items, refs, info, rec, _ = prep
    lay = Layout(_collection(specs, cfg, rl), cfg, rl)
    txn = L.Handle("ptc_ckpt_abort")
    try:
        def check_and_begin():
            held = [check_local(lay, refs[r], r, info=info[r]) for r, _ in items]
            opts = _options(threads, compress, reuse)
            if grp.me == 0:
                call("ptc_ckpt_begin", byref(txn.ptr), st._ptr(), lay._h.ptr, rl.ptr,
                     byref(opts))
                lib = L.lib()
                vp = [lib.ptc_ckpt_txn_version(txn.ptr), lib.ptc_ckpt_txn_parent(txn.ptr)]
                return held, opts, json.dumps(vp).encode()
            return held, opts, b""

        got, err = _attempt(check_and_begin)
        out = _agree(grp, what, err, got[2] if err is None else b"")
        held, opts, _ = got
        version, parent = json.loads(out[0])

        def write():
            ranks = (c_int * max(1, len(items)))(*[r for r, _ in items])
            bufs = _buffers(lay, held, len(items))
            desc, dlen = c_void_p(), c_size_t()
            call("ptc_ckpt_write_local", st._ptr(), version, parent, lay._h.ptr, ranks,
                 len(items), bufs, byref(opts), byref(desc), byref(dlen))
            try:
                return ctypes.string_at(desc, dlen.value)
            finally:
                L.lib().ptc_store_free(desc)

        desc, err = _attempt(write)
        descs = _agree(grp, what, err, desc if err is None else b"")

        def commit():
            if grp.me != 0:
                return b""
            n = len(descs)
            keep = [ctypes.create_string_buffer(d, len(d)) for d in descs]
            ptrs = (c_void_p * n)(*[ctypes.cast(k, c_void_p) for k in keep])
            lens = (c_size_t * n)(*[len(d) for d in descs])
            v = c_uint64()
            p, txn.ptr = txn.ptr, c_void_p()      # commit consumes the transaction
            call("ptc_ckpt_commit", p, ptrs, lens, n, byref(rec.rec), byref(v))
            return str(v.value).encode()

        done, err = _attempt(commit)
        return int(_agree(grp, what, err, done if err is None else b"")[0])
    finally:
        txn.close()            # aborts a version that was begun and not committed
        lay.close()


# ---- load -----------------------------------------------------------------------------------

def _load_prepare(store, state, rank, version, me):
    items = _rank_states(rank, state)
    st = _store_of(store, writable=False)
    refs, info = _refs(items, writable=True)
    v = b""
    if me == 0:
        v = int(version or 0) or st.latest()
        if v == 0:
            raise _errors.NotFoundError("store %s has no versions" % st.path)
        v = str(v).encode()
    return st, items, refs, info, v


def load(store, state, *, config, rank, version=None, group=None, threads=None):
    """Fill this process's local tensors of @p state in place from a stored
    version (default: the newest, as process 0 sees it) under @p config, whatever
    configuration saved it; collective over @p group like save. Returns the
    version's training-state record as a dict: version, format (0: the version
    has none), step, config, schedule, seed, epoch, sample, global_batch,
    dataset, loss (None: not set), rng (bytes) and meta (str -> str).

    @p state maps the global names of the tensors this rank holds under
    @p config to arrays of their local shape and stored dtype (numpy, CPU torch,
    DTensor: its local shard is filled); every tensor the rank holds must be
    there. Several ranks per process: sequences, as for save. Only the stored
    blocks that the local pieces touch are read, over libptc's threads
    (@p threads per process; default: the CPUs, at most 16, at least 8).
    """
    _require_ckpt("ptc.load")
    grp = _Group(group)
    what = "checkpoint load"
    prep, err = _attempt(_load_prepare, store, state, rank, version, grp.me)
    out = _agree(grp, what, err, prep[-1] if err is None else b"")
    st, items, refs, info, _ = prep
    v = int(out[0])

    def fill():
        cfg = L.parse_config(config)
        with st.reader(v) as r:
            lay = Layout.of_version(r, cfg)
        try:
            where = "version %d" % v
            held = [check_local(lay, refs[rk], rk, where, info[rk], raw_ok=True)
                    for rk, _ in items]
            ranks = (c_int * max(1, len(items)))(*[rk for rk, _ in items])
            bufs = _buffers(lay, held, len(items))
            opts = _options(threads)
            rec = L.CkptRecord()
            loaded = c_uint64()
            call("ptc_ckpt_load_local", st._ptr(), v, lay._h.ptr, ranks, len(items), bufs,
                 byref(opts), byref(rec), byref(loaded))
            try:
                return record_dict(rec, loaded.value)
            finally:
                L.lib().ptc_ckpt_record_free(byref(rec))
        finally:
            lay.close()

    res, err = _attempt(fill)
    _agree(grp, what, err)
    return res


def read_record(store, version=None):
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
