"""ptc.Store: a store directory (LMDB metadata + pack files) and the
operations of the `ptc` command on it, calling the same libptc functions as
cli/cmd_*.c."""

import ctypes
import json
import os
import weakref
from ctypes import byref, c_char_p, c_int64, c_size_t, c_uint64, c_void_p
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _arrays, _errors
from . import _lib as L
from ._lib import call, dec, enc

PathLike = Union[str, bytes, "os.PathLike[str]"]
# progress(what, bytes done, bytes total)
ProgressFn = Optional[Callable[[str, int, int], None]]
# a tensor of a version: (name, dtype, global shape, placement)
TensorRow = Tuple[str, str, Tuple[int, ...], str]


def _version_dict(v):
    return {
        "version": v.version, "parent": v.parent, "step": dec(v.step) or "",
        "config": dec(v.config) or "", "created_unix_ns": v.created_unix_ns,
        "tensors": v.tensor_count, "bytes": v.bytes, "stored_bytes": v.stored_bytes,
        "rules": dec(v.rules) or "", "metadata": json.loads(dec(v.metadata_json) or "{}"),
    }


def _dataset_dict(d):
    return {
        "name": d.name.decode("utf-8"), "format": d.format.decode("utf-8"), "id": d.id,
        "samples": d.samples, "bytes": d.bytes, "stored_bytes": d.stored_bytes,
        "codec": "zstd" if d.codec else "none", "pack": "packs/datasets/d%d.pack" % d.id,
        "created_unix_ns": d.created_unix_ns,
    }


def _plan_dict(st):
    keys = ("bytes_total", "bytes_reused", "bytes_local_copy", "bytes_network",
            "bytes_network_lower_bound", "max_rank_send", "max_rank_recv", "bytes_host_copy",
            "bytes_fanout", "tensors", "shards", "shards_reused", "transfers")
    d = {k: getattr(st, k) for k in keys}
    d["hosts"] = st.hosts
    d["plan_seconds"] = st.plan_seconds
    return d


_CONVERT_DTYPES = ("F32", "BF16", "F16")

# Stores open in this process, by real path: LMDB allows one environment per
# file per process, so package code that needs a store reuses an open one.
_open_stores = weakref.WeakValueDictionary()


def shared_store(path: PathLike, writable: bool = False, create: bool = False) -> "Store":
    """An open Store of @p path in this process (the one already open, if any),
    else a new one (read-only unless @p writable; created if missing with
    @p create and @p writable)."""
    key = (os.getpid(), os.path.realpath(path))
    st = _open_stores.get(key)
    if st is not None and st._h and (not writable or not st.readonly):
        return st
    if st is not None and st._h:
        raise _errors.InvalidError("store %s is open read-only in this process; a writable "
                                   "handle is needed" % path)
    return Store(path, create=create and writable, readonly=not writable)


def _convert_dtype(dtype, what):
    if dtype is None:
        return L.DTYPE_COUNT
    name = _arrays.dtype_name(dtype)
    if name not in _CONVERT_DTYPES:
        raise _errors.InvalidError("%s must be F32, BF16 or F16, not '%s'" % (what, name))
    return _arrays.dtype_value(name)


class _Reader:
    """A snapshot of one version (ptc_store_reader)."""

    def __init__(self, store: "Store", version: Optional[int]) -> None:
        self._h = L.Handle("ptc_store_reader_close")
        call("ptc_store_reader_open", byref(self._h.ptr), store._ptr(), int(version or 0))
        self.store = store

    @property
    def ptr(self) -> Any:
        return self._h.ptr

    @property
    def version(self) -> int:
        return L.lib().ptc_store_reader_version(self.ptr).contents.version

    def info(self) -> Dict[str, Any]:
        return _version_dict(L.lib().ptc_store_reader_version(self.ptr).contents)

    def tensors(self) -> List[TensorRow]:
        lib = L.lib()
        out = []
        for i in range(lib.ptc_store_reader_tensor_count(self.ptr)):
            t = L.StoreTensor()
            call("ptc_store_reader_tensor", self.ptr, i, byref(t))
            out.append((t.name.decode("utf-8"), _arrays.NAMES[t.dtype], tuple(t.shape[:t.ndim]),
                        dec(t.placement) or ""))
        return out

    def find(self, name: str) -> Tuple[int, str, Tuple[int, ...]]:
        b = name.encode("utf-8")
        idx = c_size_t()
        call("ptc_store_reader_find", self.ptr, b, len(b), byref(idx))
        t = L.StoreTensor()
        call("ptc_store_reader_tensor", self.ptr, idx.value, byref(t))
        return idx.value, _arrays.NAMES[t.dtype], tuple(t.shape[:t.ndim])

    def close(self) -> None:
        self._h.close()

    def __enter__(self) -> "_Reader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Store:
    """A PTC store in directory @p path.

    ``Store(path)`` opens an existing store (``ptc.NotFoundError`` when there is
    none); ``create=True`` makes it if missing; ``readonly=True`` opens it
    without writers. Use it as a context manager or call :meth:`close`.
    ``lock_timeout`` (seconds; also the attribute of that name): how long a
    writer of this store (``ptc.save``, ingest, gc) waits for the store's
    writer lock while another process holds it before ``ptc.BusyError``;
    0 = not at all; default: ``PTC_LOCK_TIMEOUT`` from the environment, else
    60 s.
    One Store per directory per process (LMDB's rule); a process made by
    fork() must open its own.
    """

    def __init__(self, path: PathLike, create: bool = False, readonly: bool = False,
                 lock_timeout: Optional[float] = None) -> None:
        self.path = os.fspath(path)
        flags = (L.STORE_CREATE if create else 0) | (L.STORE_READONLY if readonly else 0)
        self.readonly = bool(readonly)
        self._h = L.Handle("ptc_store_close")
        call("ptc_store_open", byref(self._h.ptr), enc(self.path), flags)
        _open_stores[(os.getpid(), os.path.realpath(self.path))] = self
        if lock_timeout is not None:
            self.lock_timeout = lock_timeout

    @property
    def lock_timeout(self) -> Optional[float]:
        """Seconds a writer waits for the writer lock (None: as opened)."""
        return getattr(self, "_lock_timeout", None)

    @lock_timeout.setter
    def lock_timeout(self, seconds: float) -> None:
        call("ptc_store_set_lock_timeout", self._ptr(), int(round(float(seconds) * 1000)))
        self._lock_timeout = float(seconds)

    # -- lifetime --------------------------------------------------------------------
    def _ptr(self) -> Any:
        if not self._h:
            raise _errors.InvalidError("store %s is closed" % self.path)
        if self._h._pid != os.getpid():
            raise _errors.InvalidError("store %s was opened by another process (fork); "
                                       "open it again in this one" % self.path)
        return self._h.ptr

    def close(self) -> None:
        """Close the store (readers of it must be closed first). Idempotent."""
        self._h.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "ptc.Store(%r)" % self.path

    def reader(self, version: Optional[int] = None) -> _Reader:
        return _Reader(self, version)

    # -- versions -------------------------------------------------------------------------
    def versions(self) -> List[Dict[str, Any]]:
        """The committed versions, oldest first: dicts with version, parent, step,
        config, created_unix_ns, tensors, bytes, stored_bytes, rules, metadata
        (`ptc versions --json`)."""
        arr = ctypes.POINTER(L.VersionInfo)()
        n = c_size_t()
        call("ptc_store_versions", self._ptr(), byref(arr), byref(n))
        try:
            return [_version_dict(arr[i]) for i in range(n.value)]
        finally:
            L.lib().ptc_store_versions_free(arr, n)

    def latest(self) -> int:
        """The newest committed version number (0 for an empty store)."""
        v = c_uint64()
        call("ptc_store_latest", self._ptr(), byref(v))
        return v.value

    def info(self, version: Optional[int] = None, blocks: bool = False) -> Dict[str, Any]:
        """One version described as `ptc info --json` does: the store format, the
        version record, its tensors and shards, and the datasets."""
        with self.reader(version) as r:
            text = c_void_p()
            call("ptc_store_info_json", self._ptr(), r.version, 1 if blocks else 0,
                 byref(text))
        try:
            obj = json.loads(ctypes.string_at(text).decode("utf-8"))
        finally:
            L.lib().ptc_store_free(text)
        obj["datasets"] = self.datasets()
        return obj

    def tensors(self, version: Optional[int] = None) -> List[TensorRow]:
        """[(name, dtype, shape, placement)] of a version, in stored order."""
        with self.reader(version) as r:
            return r.tensors()

    # -- import / export ----------------------------------------------------------------
    def import_safetensors(self, paths: Union[PathLike, Sequence[PathLike]], config: Any,
                           rules: Any = None, compress: Any = None, step: Any = None,
                           progress: ProgressFn = None,
                           params: Union[None, str, Dict[str, int]] = None,
                           rules_file: Optional[PathLike] = None) -> int:
        """Import safetensors files or `model.safetensors.index.json` indexes as a
        new version laid out for @p config under @p rules (a preset name or rules
        text) or @p rules_file (a path); returns the version number (`ptc import`).

        @p params gives the rules parameters (`$NAME`, docs/rules.md): a dict
        name -> int, or "auto" for the Hugging Face config.json beside the first
        input (as `ptc import` does by default); None: no parameters."""
        if isinstance(paths, (str, bytes, os.PathLike)):
            paths = [paths]
        if params == "auto":
            first = os.fsdecode(os.fspath(paths[0])) if paths else "."
            cj = os.path.join(os.path.dirname(first) or ".", "config.json")
            params = L.hf_params(cj) if os.path.exists(cj) else {}
        paths = [enc(p) for p in paths]
        if not paths:
            raise _errors.InvalidError("import needs at least one input file")
        cfg = L.parse_config(config)
        rl = (L.Rules(rules, params, file=rules_file) if params is not None
              else L.as_rules(rules, rules_file))
        opts = L.ImportOptions()
        opts.codec, opts.level = L.parse_compress(compress)
        step_b = enc(str(step)) if step is not None else None
        opts.step = step_b
        arr = (c_char_p * len(paths))(*paths)
        version = c_uint64()
        with L.Progress(progress) as cb:
            opts.progress = cb.c
            call("ptc_import", self._ptr(), arr, len(paths), byref(cfg), rl.ptr, byref(opts),
                 byref(version))
        return version.value

    def export(self, out: PathLike, version: Optional[int] = None, config: Any = None,
               rank: Optional[int] = None, dtype: Any = None,
               progress: ProgressFn = None) -> List[str]:
        """Write safetensors files (`ptc export`):

        - neither @p config nor @p rank: the whole model (global tensors) to file @p out;
        - @p rank only: that rank's shards in the stored layout, to file @p out;
        - @p config: every rank of that configuration into folder @p out as
          rank-<R>.safetensors (with @p rank too: only that rank, to file @p out).

        @p dtype F32/BF16/F16 converts floating-point tensors. Returns the list of
        files written.
        """
        dt = _convert_dtype(dtype, "dtype")
        out = os.fspath(out)
        with self.reader(version) as r, L.Progress(progress) as cb:
            if config is None and rank is None:
                f = L.Handle("ptc_vfile_destroy")
                call("ptc_vfile_whole", byref(f.ptr), r.ptr, dt)
                try:
                    call("ptc_vfile_write", f.ptr, enc(out), cb.c, None)
                finally:
                    f.close()
                return [out]
            lay = L.Handle("ptc_layout_destroy")
            cfg = L.parse_config(config) if config is not None else None
            call("ptc_layout_of_version", byref(lay.ptr), r.ptr,
                 byref(cfg) if cfg is not None else None)
            try:
                world = L.config_world(L.lib().ptc_layout_config(lay.ptr).contents)
                if rank is not None:
                    if not 0 <= int(rank) < world:
                        raise _errors.RangeError("rank %d outside the %s world of %d ranks"
                                                 % (rank, "stored" if cfg is None else
                                                    "target", world))
                    ranks, paths = [int(rank)], [out]
                else:
                    os.makedirs(out, exist_ok=True)
                    ranks = list(range(world))
                    paths = [os.path.join(out, "rank-%d.safetensors" % k) for k in ranks]
                for k, p in zip(ranks, paths):
                    f = L.Handle("ptc_vfile_destroy")
                    call("ptc_vfile_rank", byref(f.ptr), r.ptr, lay.ptr, k, dt)
                    try:
                        call("ptc_vfile_write", f.ptr, enc(p), cb.c, None)
                    finally:
                        f.close()
                return paths
            finally:
                lay.close()

    def read(self, name: str, version: Optional[int] = None, out: Any = None,
             like: str = "numpy") -> Any:
        """Read global tensor @p name of a version into @p out (a numpy array or CPU
        torch tensor of its shape and dtype size, filled in place) or into a new
        array (like="torch" for a torch tensor, which also holds BF16 and F8);
        checksums are verified on the way. Returns the array."""
        with self.reader(version) as r:
            idx, dtype, shape = r.find(name)
            if out is None:
                out = _arrays.empty(shape, dtype, like)
            ref = _arrays.array_ref(out, dtype=dtype, writable=True, what="out")
            if ref.shape != shape:
                raise _errors.InvalidError("out for tensor '%s' has shape %s; the tensor's is %s"
                                           % (name, list(ref.shape), list(shape)))
            if ref.nbytes:
                box = L.Box()
                box.ndim = len(shape)
                for d, s in enumerate(shape):
                    box.lo[d], box.hi[d] = 0, s
                call("ptc_store_reader_read_box", r.ptr, idx, byref(box), c_void_p(ref.ptr),
                     ctypes.POINTER(c_int64)())
        return out

    # -- plan / reshard -------------------------------------------------------------------
    def plan(self, to: Any, hosts: Optional[int] = None,
             version: Optional[int] = None) -> Dict[str, Any]:
        """The figures of the minimal plan from a version's configuration to @p to
        (`ptc plan --json`): bytes_total, bytes_reused, bytes_local_copy,
        bytes_network, bytes_network_lower_bound, max_rank_send, max_rank_recv, …,
        per_host. @p hosts: ranks per host (default: one host)."""
        cfg = L.parse_config(to)
        with self.reader(version) as r:
            ls, lt = L.Handle("ptc_layout_destroy"), L.Handle("ptc_layout_destroy")
            p = L.Handle("ptc_plan_destroy")
            try:
                call("ptc_layout_of_version", byref(ls.ptr), r.ptr, None)
                call("ptc_layout_of_version", byref(lt.ptr), r.ptr, byref(cfg))
                po = L.PlanOptions()
                po.hosts = int(hosts or 0)
                call("ptc_plan_create", byref(p.ptr), ls.ptr, lt.ptr, byref(po))
                st = L.PlanStats()
                L.lib().ptc_plan_stats_get(p.ptr, byref(st))
                d = {"version": r.version,
                     "from": L.describe_layout(ls.ptr),
                     "to": L.format_config(cfg), "ranks_per_host": int(hosts or 0)}
                d.update(_plan_dict(st))
                per = []
                for h in range(st.hosts):
                    hs = L.PlanHostStats()
                    call("ptc_plan_host_stats_get", p.ptr, h, byref(hs))
                    per.append({"host": h, "bytes_in": hs.bytes_in, "bytes_out": hs.bytes_out,
                                "bytes_need": hs.bytes_need, "bytes_have": hs.bytes_have,
                                "bytes_copy": hs.bytes_copy})
                d["per_host"] = per
                return d
            finally:
                p.close()
                ls.close()
                lt.close()

    def reshard(self, to: Any, threads: Optional[int] = None, version: Optional[int] = None,
                step: Any = None, dtype: Any = None, compress: Any = None,
                hosts: Optional[int] = None) -> Dict[str, Any]:
        """Write a version under configuration @p to as a new version with threads
        on this host (`ptc reshard`); returns its figures, "version" included."""
        cfg = L.parse_config(to)
        o = L.ReshardOptions()
        L.lib().ptc_reshard_options_init(byref(o))
        if threads is not None:
            if not 1 <= int(threads) <= 4096:
                raise _errors.InvalidError("threads: %s is not 1..4096" % threads)
            o.threads = int(threads)
        step_b = enc(str(step)) if step is not None else None
        o.step = step_b
        o.dtype = _convert_dtype(dtype, "dtype")
        o.codec, o.level = L.parse_compress(compress)
        o.hosts = int(hosts or 0)
        res = L.ReshardResult()
        call("ptc_reshard_store", self._ptr(), int(version or 0), byref(cfg), byref(o),
             byref(res))
        d = {"version": res.version, "parent": res.parent, "bytes_written": res.bytes_written,
             "shards_written": res.shards_written, "shards_reused": res.shards_reused,
             "shards_aliased": res.shards_aliased, "seconds": res.seconds}
        d.update({k: v for k, v in _plan_dict(res.plan).items() if k not in d})
        return d

    # -- maintenance ----------------------------------------------------------------------
    def verify(self, version: Optional[int] = None, all: bool = False,
               progress: ProgressFn = None) -> int:
        """Re-check every block checksum of a version (all=True: every version
        and every dataset); raises ptc.ChecksumError naming tensor, rank, pack
        file and offset. Returns the version checked (0 with all=True)."""
        latest = self.latest()
        if latest == 0 and not all:
            raise _errors.NotFoundError("store %s holds no version" % self.path)
        v = L.STORE_ALL_VERSIONS if all else int(version or 0)
        with L.Progress(progress) as cb:
            call("ptc_store_verify", self._ptr(), v, cb.c, None)
        return 0 if all else int(version or latest)

    def gc(self) -> Dict[str, int]:
        """Remove pack files no committed version or dataset references (`ptc gc`);
        returns {"files_removed", "dirs_removed", "bytes_removed"}."""
        st = L.GcStats()
        call("ptc_store_gc", self._ptr(), byref(st))
        return {"files_removed": st.files_removed, "dirs_removed": st.dirs_removed,
                "bytes_removed": st.bytes_removed}

    # -- datasets -------------------------------------------------------------------------
    def datasets(self) -> List[Dict[str, Any]]:
        """The stored datasets, sorted by name (`ptc dataset ls --json`)."""
        arr = ctypes.POINTER(L.DatasetInfo)()
        n = c_size_t()
        call("ptc_store_datasets", self._ptr(), byref(arr), byref(n))
        try:
            return [_dataset_dict(arr[i]) for i in range(n.value)]
        finally:
            L.lib().ptc_store_free(arr)

    def dataset(self, name: str) -> Dict[str, Any]:
        """One dataset's catalog record (`ptc dataset info --json`)."""
        d = L.DatasetInfo()
        call("ptc_store_dataset_stat", self._ptr(), enc(name), byref(d))
        return _dataset_dict(d)

    def ingest(self, name: str, format: str, inputs: Union[PathLike, Sequence[PathLike]],
               compress: Any = None, replace: bool = False,
               progress: ProgressFn = None) -> Dict[str, Any]:
        """Ingest @p inputs of @p format (lines, jsonl, files, tokens:u16|u32:LEN,
        npy, tfrecord) as dataset @p name (`ptc dataset ingest`); returns its
        catalog record."""
        if isinstance(inputs, (str, bytes, os.PathLike)):
            inputs = [inputs]
        ins = [enc(p) for p in inputs]
        if not ins:
            raise _errors.InvalidError("dataset ingest needs at least one input")
        if not L.lib().ptc_store_dataset_name_ok(enc(name)):
            raise _errors.InvalidError(
                "'%s' is not a dataset name (1-255 characters of [A-Za-z0-9._-], not "
                "starting with '.')" % name)
        o = L.DatasetIngestOptions()
        o.codec, o.level = L.parse_compress(compress)
        o.replace = bool(replace)
        arr = (c_char_p * len(ins))(*ins)
        n = c_uint64()
        with L.Progress(progress) as cb:
            o.progress = cb.c
            call("ptc_dataset_ingest", self._ptr(), enc(name), enc(format), arr, len(ins),
                 byref(o), byref(n))
        return self.dataset(name)

    def audit(self, name: str, seed: int, epoch: int, policy: Optional[str] = None,
              batch: Optional[int] = None, dp: Optional[int] = None,
              start: int = 0) -> Dict[str, int]:
        """The exactly-once audit of (dataset, seed, epoch) (`ptc dataset audit`):
        {"samples", "once", "repeated", "missing"}. With a batch @p policy
        ("drop-last", "equal", "drop-last+equal", "none") and the @p batch, @p dp
        and @p start the epoch was read with, also "dropped": records never
        served that the policy drops, which then are not missing."""
        a = L.AuditResult()
        if policy is None:
            call("ptc_dataset_audit", self._ptr(), enc(name), int(seed), int(epoch), byref(a))
            return {"samples": a.samples, "once": a.once, "repeated": a.repeated,
                    "missing": a.missing}
        if batch is None or dp is None:
            raise _errors.InvalidError("an audit under a policy needs batch and dp")
        p = L.DatasetBatchPolicy(batch=int(batch), dp=int(dp), start=int(start))
        pol = ctypes.c_uint()
        call("ptc_batch_policy_parse", enc(policy), byref(pol))
        p.policy = pol.value
        call("ptc_dataset_audit_policy", self._ptr(), enc(name), int(seed), int(epoch),
             byref(p), byref(a))
        return {"samples": a.samples, "once": a.once, "repeated": a.repeated,
                "missing": a.missing, "dropped": a.dropped}
