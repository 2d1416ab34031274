"""ptc.torch: the PyTorch side of the package — StepDataset, an iterable of
one data-parallel rank's records step by step from the step files of the
dataset view (DESIGN.md, "Dataset view"), with a saveable sample position.

Reading goes through a mount (`ptc mount`: plain file reads of
``datasets/<NAME>/seed-S/epoch-E/batch-B/start-X/dp-D/rank-R/step-K`` and its
``.idx``) or, without a mount, through the view library of libptc
(``ptc_view_pread`` on the same paths of a view over the store), so the
bytes are the ones the mount would serve.

Counting for ``ptc dataset audit`` (served counts per dataset, seed, epoch):

* ``count="commit"`` (the default for a store): a step counts when the loop
  has consumed it and commits its position — at ``state_dict()`` (the save),
  ``commit()``, or the end of the epoch. Steps that DataLoader workers
  prefetched but the loop never took are not counted, so the audit agrees
  with what the loop consumed however far the workers ran ahead.
* ``count="read"``: a step counts when its bytes are read (its last byte),
  as a mount counts. Through a mount this is the only choice (the mount
  process counts what it serves); with prefetching workers the audit then
  also counts steps read but not consumed.
* ``count=False``: nothing is counted.

The position (``state_dict()["position"]``) is the sample position of the
epoch order that the next global batch starts at. A job resumed with another
dp degree or global batch builds its StepDataset with the new dp/batch/rank
and calls ``load_state_dict``: step 0 then starts at that position
(``start-X`` of the view), so every sample of the epoch is seen once.

With DataLoader workers iterate ``ds.loader(num_workers=N, ...)``: the loop's
position follows the steps it takes from the loader, not the steps the
workers have read.
"""

import json
import os
from ctypes import POINTER, byref, c_size_t, c_uint, c_uint64, create_string_buffer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.utils.data

from . import _errors
from . import _lib as L
from ._lib import call, enc
from .store import Store, shared_store

__all__ = ["StepDataset", "StepLoader"]


def _u64(v, what):
    v = int(v)
    if v < 0 or v >= 1 << 64:
        raise _errors.InvalidError("%s: %d is not a non-negative 64-bit integer" % (what, v))
    return v


class _StoreSource:
    """Reads step files through a view over a store (one per process)."""

    def __init__(self, store, count_reads):
        self.pid = os.getpid()
        self.store = store
        self._vs = L.Handle("ptc_view_store_destroy")
        call("ptc_view_store_create", byref(self._vs.ptr), None, None)
        call("ptc_view_store_attach", self._vs.ptr, self.store._ptr(), bool(count_reads))
        self.view = L.lib().ptc_view_store_view(self._vs.ptr)
        self.count_reads = count_reads

    def read(self, path, size):
        buf = np.empty(size, dtype=np.uint8)
        got = c_size_t()
        if size:
            call("ptc_view_pread", self.view, enc(path), 0, buf.ctypes.data, size, byref(got))
            if got.value != size:
                raise _errors.PtcIOError("short read of %s: %d of %d bytes"
                                         % (path, got.value, size))
        return buf

    def open_empty(self, path):
        # an empty step file counts its (empty) records when it is opened
        st = L.ViewStat()
        call("ptc_view_stat_path", self.view, enc(path), byref(st))

    def flush(self):
        if self.count_reads:
            call("ptc_view_store_flush", self._vs.ptr)

    def close(self):
        self._vs.close()


class _MountSource:
    """Reads step files through a mounted tree (ordinary file reads)."""

    def __init__(self, root):
        self.root = root
        self.pid = os.getpid()

    def read(self, path, size):
        buf = np.empty(size, dtype=np.uint8)
        full = self.root + path
        try:
            fd = os.open(full, os.O_RDONLY)
        except FileNotFoundError:
            raise _errors.NotFoundError("no step file %s" % full) from None
        try:
            mv = memoryview(buf)
            done = 0
            while done < size:
                n = os.preadv(fd, [mv[done:]], done)
                if n <= 0:
                    raise _errors.PtcIOError("short read of %s: %d of %d bytes"
                                             % (full, done, size))
                done += n
        finally:
            os.close(fd)
        return buf

    def open_empty(self, path):
        os.close(os.open(self.root + path, os.O_RDONLY))

    def flush(self):
        pass

    def close(self):
        pass


class StepDataset(torch.utils.data.IterableDataset):
    """This data-parallel rank's records of dataset @p name, one list per step.

    @p source: a mount point of `ptc mount`, a store directory, or a ptc.Store.
    @p seed, @p epoch: the epoch order; @p batch: the global batch B;
    @p start: the sample position X of step 0; @p dp, @p rank: this rank's
    part of every global batch (the split rule).
    @p policy: None (the default rule: the split rule, last batch partial) or a
    batch policy, "drop-last", "equal" or "drop-last+equal" (docs/dataset.md,
    "Batch policies"): the step files of ``dp-D/policy-P``, so "equal" gives
    every rank floor(B_k / dp) records and "drop-last" has no partial last step.
    @p decode: called on each record (a uint8 numpy array viewing the step's
    buffer, no copy) in the process that reads it; None keeps those arrays.
    @p count: "commit" (default for a store), "read" (the only choice through
    a mount) or False; see the module documentation.

    Iterating yields, per step, the list of this rank's decoded records.
    """

    def __init__(self, source: Union[str, "os.PathLike[str]", Store], name: str, *, seed: int,
                 epoch: int, batch: int, start: int = 0, dp: int = 1, rank: int = 0,
                 decode: Optional[Callable[[np.ndarray], Any]] = None,
                 count: Union[None, bool, str] = None, policy: Optional[str] = None) -> None:
        super().__init__()
        self.name = str(name)
        self.seed = _u64(seed, "seed")
        self.epoch = _u64(epoch, "epoch")
        self.batch = _u64(batch, "batch")
        self.start = _u64(start, "start")
        self.dp = _u64(dp, "dp")
        self.rank = _u64(rank, "rank")
        if self.batch < 1:
            raise _errors.InvalidError("batch must be at least 1")
        if self.dp < 1 or self.rank >= self.dp:
            raise _errors.InvalidError("rank %d outside dp=%d" % (self.rank, self.dp))
        if not L.lib().ptc_store_dataset_name_ok(enc(self.name)):
            raise _errors.InvalidError("'%s' is not a dataset name" % self.name)
        self.policy = None if policy in (None, "none") else str(policy)
        pol = c_uint()
        call("ptc_batch_policy_parse", enc("none" if self.policy is None else self.policy),
             byref(pol))
        self._policy = pol.value
        self.decode = decode
        self._store = None            # the main process's Store for counting
        if isinstance(source, Store):
            self._store = source
            source = source.path
        source = os.path.abspath(os.fspath(source))
        if os.path.isfile(os.path.join(source, "datasets", self.name, "info.json")):
            self.mode = "mount"
            with open(os.path.join(source, "datasets", self.name, "info.json")) as f:
                info = json.load(f)
            self.samples = int(info["samples"])
            self.generation = None
        elif os.path.isdir(os.path.join(source, "meta")):
            self.mode = "store"
            d = (self._store or shared_store(source)).dataset(self.name)
            self.samples = int(d["samples"])
            self.generation = int(d["id"])
        elif os.path.isdir(os.path.join(source, "datasets")):
            raise _errors.NotFoundError("no dataset '%s' under the mount %s"
                                        % (self.name, source))
        else:
            raise _errors.NotFoundError("%s is neither a ptc mount nor a ptc store" % source)
        self.source = source
        if count is None:
            count = "read" if self.mode == "mount" else "commit"
        if count not in ("commit", "read", False):
            raise _errors.InvalidError("count must be 'commit', 'read' or False, not %r"
                                       % (count,))
        if self.mode == "mount" and count != "read":
            raise _errors.UnsupportedError(
                "a mount counts every record it serves: use count='read' there, or read "
                "from the store (count='commit') to count only what the loop consumed")
        self.count = count
        self._consumed = 0     # steps from `start` the loop has taken
        self._counted = 0      # of which counted (count="commit")
        self._reader = None    # per process: _StoreSource / _MountSource
        self._counter = None

    # -- positions --------------------------------------------------------------------
    def _path(self, step: int, level: int = L.DATASET_STEP_LEVEL_FILE) -> str:
        """The view path of this rank's step file @p step (level INDEX: its .idx; level
        RANK: their directory), as libptc spells it (ptc_dataset_step_format)."""
        buf = create_string_buffer(L.DATASET_STEP_PATH_MAX)
        call("ptc_dataset_step_format", byref(self._step(step)), level, buf, len(buf))
        return "/datasets/%s/%s" % (self.name, buf.value.decode())

    def _prefix(self) -> str:
        return self._path(0, L.DATASET_STEP_LEVEL_RANK)

    def steps(self) -> int:
        """Number of steps from `start` to the end of the epoch (under the policy)."""
        n = c_uint64()
        call("ptc_batch_steps_policy", self.samples, self.batch, self.start, self._policy,
             byref(n))
        return n.value

    def _step(self, step: int) -> Any:
        return L.DatasetStep(self.seed, self.epoch, self.batch, self.start, self.dp, self.rank,
                             step, self._policy)

    def part(self, step: int) -> Tuple[int, int]:
        """Positions [lo, hi) of the epoch order that this rank reads at @p step."""
        lo, hi = c_uint64(), c_uint64()
        call("ptc_dataset_step_range", self.samples, byref(self._step(step)), byref(lo),
             byref(hi))
        return lo.value, hi.value

    def ids(self, step: int) -> np.ndarray:
        """Sample ids of this rank's records of @p step, in epoch order."""
        lo, hi = self.part(step)
        out = np.empty(hi - lo, dtype=np.uint64)
        n = c_uint64()
        call("ptc_dataset_step_ids", self.samples, byref(self._step(step)),
             out.ctypes.data_as(POINTER(c_uint64)), hi - lo, byref(n))
        return out

    @property
    def position(self) -> int:
        """The sample position the next step starts at."""
        return min(self.start + self._consumed * self.batch, max(self.samples, self.start))

    # -- reading ----------------------------------------------------------------------
    def _source(self):
        r = self._reader
        if r is None or r.pid != os.getpid():
            if self.mode == "mount":
                r = _MountSource(self.source)
            else:
                r = _StoreSource(self._proc_store(), self.count == "read")
            self._reader = r
        return r

    def _proc_store(self):
        """This process's Store: writable where it counts (the main process unless
        count=False; a worker only with count="read")."""
        st = self._store
        if st is not None and st._h and st._h._pid == os.getpid():
            return st
        worker = torch.utils.data.get_worker_info() is not None
        writable = self.count == "read" or (self.count == "commit" and not worker)
        self._store = shared_store(self.source, writable=writable)
        return self._store

    def read_step(self, step: int) -> List[np.ndarray]:
        """The raw records of @p step: a list of uint8 arrays viewing one buffer."""
        lo, hi = self.part(step)
        n = hi - lo
        src = self._source()
        path = self._path(step)
        idx_path = self._path(step, L.DATASET_STEP_LEVEL_INDEX)
        idx = np.frombuffer(src.read(idx_path, 8 * (n + 1)).data, dtype="<u8")
        size = int(idx[-1])
        if size == 0:
            if n:
                src.open_empty(path)
            data = np.empty(0, dtype=np.uint8)
        else:
            data = src.read(path, size)
        src.flush()
        return [data[int(idx[i]):int(idx[i + 1])] for i in range(n)]

    def _records(self, step):
        recs = self.read_step(step)
        if self.decode is not None:
            recs = [self.decode(r) for r in recs]
        return recs

    def _steps(self, tagged):
        first = self._consumed
        total = self.steps()
        info = torch.utils.data.get_worker_info()
        stride, off = (info.num_workers, info.id) if info is not None else (1, 0)
        for k in range(first + off, total, stride):
            recs = self._records(k)
            if tagged:
                yield k, recs
            else:
                if info is None:
                    self._consumed = k + 1
                yield recs
        if info is None and not tagged:
            self.commit()

    def __iter__(self) -> Iterator[List[Any]]:
        return self._steps(tagged=False)

    def loader(self, **kwargs: Any) -> "StepLoader":
        """A DataLoader over this dataset (batch_size=None: one item per step)
        that keeps this object's position at the steps the loop has taken, also
        with num_workers > 0. Keyword arguments go to DataLoader."""
        return StepLoader(self, **kwargs)

    # -- counting and state -----------------------------------------------------------
    def commit(self) -> None:
        """Count the steps the loop has taken since the last commit (count="commit";
        one LMDB transaction). Called by state_dict() and at the end of the epoch."""
        if self.count != "commit" or self._counted >= self._consumed:
            self._counted = max(self._counted, self._consumed)
            return
        if self._counter is None or self._counter._pid != os.getpid():
            self._counter = L.Handle("ptc_dataset_counter_destroy")
            call("ptc_dataset_counter_create", byref(self._counter.ptr),
                 self._proc_store()._ptr())
        add = L.lib().ptc_dataset_counter_add
        nm = enc(self.name)
        for k in range(self._counted, self._consumed):
            for i in self.ids(k):
                L.check(add(self._counter.ptr, nm, self.generation, self.seed, self.epoch,
                            int(i)))
        call("ptc_dataset_counter_flush", self._counter.ptr)
        self._counted = self._consumed

    def state_dict(self) -> Dict[str, Any]:
        """The position to save with the checkpoint (plain ints and strings; commits
        the consumed steps first)."""
        self.commit()
        d = {"name": self.name, "seed": self.seed, "epoch": self.epoch,
             "position": self.position, "samples": self.samples}
        if self.generation is not None:
            d["generation"] = self.generation
        return d

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue at the saved position with this object's dp, rank and batch. A
        position past the dataset's samples is refused (InvalidError): a state
        never holds one (the end of the epoch is `samples`)."""
        for k in ("name", "seed", "epoch"):
            if k in state and state[k] != getattr(self, k):
                raise _errors.InvalidError("state is of %s %r, this dataset's is %r"
                                           % (k, state[k], getattr(self, k)))
        if "samples" in state and int(state["samples"]) != self.samples:
            raise _errors.InvalidError("state is of a dataset of %d samples, this one has %d"
                                       % (state["samples"], self.samples))
        g = state.get("generation")
        if g is not None and self.generation is not None and int(g) != self.generation:
            raise _errors.InvalidError("dataset '%s' was ingested again since the state "
                                       "was saved" % self.name)
        position = _u64(state["position"], "position")
        if position > self.samples:  # never saved from this dataset: a damaged state
            raise _errors.InvalidError("position %d is past the end of dataset '%s' (%d samples)"
                                       % (position, self.name, self.samples))
        self.start = position
        self._consumed = self._counted = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Move to the beginning (or position @p start) of epoch @p epoch."""
        self.commit()
        self.epoch = _u64(epoch, "epoch")
        self.start = _u64(start, "start")
        self._consumed = self._counted = 0

    def close(self) -> None:
        """Commit, then release the handles this process opened."""
        self.commit()
        for h in (self._counter,):
            if h is not None:
                h.close()
        self._counter = None
        if self._reader is not None and self._reader.pid == os.getpid():
            self._reader.close()
        self._reader = None


class _Tagged(torch.utils.data.IterableDataset):
    def __init__(self, ds):
        super().__init__()
        self.ds = ds

    def __iter__(self):
        return self.ds._steps(tagged=True)


def _keep(x):
    return x


class StepLoader:
    """A DataLoader over a StepDataset whose workers read steps ahead while the
    dataset's position follows the steps the loop takes."""

    def __init__(self, ds: StepDataset, **kwargs: Any) -> None:
        kwargs.setdefault("batch_size", None)
        kwargs.setdefault("collate_fn", _keep)
        if kwargs["batch_size"] is not None:
            raise _errors.InvalidError("a StepLoader yields whole steps: batch_size must be None")
        self.ds = ds
        self.kwargs = kwargs

    def __iter__(self) -> Iterator[List[Any]]:
        ds = self.ds
        dl = torch.utils.data.DataLoader(_Tagged(ds), **self.kwargs)
        expect = ds._consumed
        for k, recs in dl:
            if k != expect:
                raise _errors.StoreError("step %d came before step %d" % (k, expect))
            expect = k + 1
            ds._consumed = k + 1
            yield recs
        ds.commit()

    def __len__(self) -> int:
        return self.ds.steps() - self.ds._consumed
