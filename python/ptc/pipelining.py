"""PTC's pipeline schedules for torch.distributed.pipelining.

libptc generates, validates and simulates the schedules (include/ptc/sched.h);
this module binds those calls and hands the result to torch's runtime in the
form that runtime loads: its per-rank action lists (docs/pipelines.md).

    import ptc
    sched = ptc.schedule(stages, n_microbatches=8, kind="zb-v", loss_fn=loss)
    sched.step(x, target=y, losses=losses)      # a torch pipelining schedule

``stages`` are this rank's ``torch.distributed.pipelining.PipelineStage``
objects; which stage indices a rank holds under a kind is
``Schedule.generate(...).stage_indices(rank)`` (looped kinds: rank r holds
r, r+P, ...; zb-v and dualpipev: r and 2P-1-r).

Nothing here imports torch until ``schedule()`` or ``Schedule.runtime()`` is
called, so ``import ptc`` works without it. Written and tested against torch
2.15: both forms load through ``_PipelineScheduleRuntime._load_csv`` (a
private API of torch; missing, UnsupportedError), the ``comms`` form uses
the WAIT_SEND_F/WAIT_SEND_B and REDUCE_GRAD actions of torch 2.15's runtime.
"""

import ctypes
import os
import tempfile
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from . import _errors
from . import _lib as L

__all__ = ["Schedule", "schedule", "KINDS"]

#: The generator kinds of libptc (ptc_sched_kind_parse).
KINDS = ("gpipe", "1f1b", "interleaved", "kfkb", "chimera", "zb-h1", "zb-v", "zb-h2",
         "zb-interleaved", "looped-bfs", "dualpipev", "dualpipe")


def _text(call, *args):
    """Run a sched call that returns malloc'd text; free it; return str."""
    out = ctypes.c_void_p()
    n = ctypes.c_size_t()
    L.call(call, *args, ctypes.byref(out), ctypes.byref(n))
    try:
        return ctypes.string_at(out, n.value).decode()
    finally:
        L.lib().ptc_sched_text_free(out)


def _costs(cost_f, cost_b, cost_w, latency, bandwidth, act_bytes):
    c = L.SchedCosts()
    c.f, c.b, c.w = float(cost_f), float(cost_b), float(cost_w)
    c.latency, c.bandwidth, c.act_bytes = float(latency), float(bandwidth), float(act_bytes)
    return c


class Schedule:
    """A PTC schedule (an owned ``ptc_sched``): its sizes, placement, the
    text of PTC and of torch, validation and simulation. Make one with
    :meth:`generate`, :meth:`parse` or :meth:`from_torch`."""

    def __init__(self, handle: Any) -> None:
        self._h = handle

    # ---- making ------------------------------------------------------------------

    @classmethod
    def generate(cls, kind: str, ranks: int, microbatches: int, *, chunks: Optional[int] = None,
                 k: Optional[int] = None, adaptive: bool = False, mem_limit: float = 0.0,
                 cost_f: float = 1.0, cost_b: float = 2.0, cost_w: float = 0.0,
                 latency: float = 0.0, bandwidth: float = 0.0,
                 act_bytes: float = 0.0) -> "Schedule":
        """Generate kind ``kind`` for ``ranks`` pipeline ranks and ``microbatches``
        micro-batches (ptc_sched_generate_costed; ``adaptive=True`` with kind
        "kfkb" picks k by simulation, ptc_sched_adapt_kfkb). The costs and
        links are what the latency-aware kinds plan for (docs/schedule-format.md).
        Raises InvalidError for an unknown kind or an unmet requirement."""
        kid = ctypes.c_int()
        L.call("ptc_sched_kind_parse", L.enc(kind), ctypes.byref(kid))
        costs = _costs(cost_f, cost_b, cost_w, latency, bandwidth, act_bytes)
        h = L.Handle("ptc_sched_destroy")
        if adaptive:
            if kind != "kfkb" or k is not None:
                raise _errors.InvalidError("adaptive applies to kind 'kfkb' without k")
            a = L.SchedAdaptive(ranks, microbatches, float(mem_limit), 0, 0.0, 0)
            L.call("ptc_sched_adapt_kfkb", ctypes.byref(h.ptr), ctypes.byref(a),
                   ctypes.byref(costs))
            return cls(h)
        g = L.SchedGen(kid.value, int(ranks), int(microbatches),
                       int(chunks if chunks is not None else (2 if kind in ("zb-v", "dualpipev")
                                                               else 1)),
                       int(k if k is not None else 1), float(cost_f), float(cost_b),
                       float(cost_w))
        L.call("ptc_sched_generate_costed", ctypes.byref(h.ptr), ctypes.byref(g),
               ctypes.byref(costs))
        return cls(h)

    @classmethod
    def parse(cls, text: Union[str, bytes]) -> "Schedule":
        """A schedule in PTC's text format (docs/schedule-format.md)."""
        b = text.encode() if isinstance(text, str) else bytes(text)
        h = L.Handle("ptc_sched_destroy")
        L.call("ptc_sched_parse", ctypes.byref(h.ptr), b, len(b))
        return cls(h)

    @classmethod
    def from_torch(cls, text: Union[str, bytes, Dict[int, List[Any]]],
                   microbatches: int = 0) -> "Schedule":
        """Torch's action lists (the CSV of ``_dump_csv``, either form; a dict
        rank -> list of actions or None, as ``pipeline_order``, also works).
        Communication and memory actions are left out. Not validated: call
        :meth:`validate`."""
        if isinstance(text, dict):
            text = "\n".join(",".join("" if a is None else str(a) for a in text[r])
                             for r in sorted(text)) + "\n"
        b = text.encode() if isinstance(text, str) else bytes(text)
        h = L.Handle("ptc_sched_destroy")
        skipped = ctypes.c_size_t()
        L.call("ptc_sched_from_torch", ctypes.byref(h.ptr), b, len(b), int(microbatches),
               ctypes.byref(skipped))
        s = cls(h)
        s.skipped_actions = skipped.value
        return s

    # ---- reading -----------------------------------------------------------------

    def _get(self, name, *args):
        return getattr(L.lib(), name)(self._h.ptr, *args)

    @property
    def ranks(self) -> int:
        return self._get("ptc_sched_ranks")

    @property
    def stages(self) -> int:
        """Stages per pipeline (torch's num_stages)."""
        return self._get("ptc_sched_stages")

    @property
    def pipes(self) -> int:
        return self._get("ptc_sched_pipes")

    @property
    def microbatches(self) -> int:
        return self._get("ptc_sched_microbatches")

    @property
    def kind(self) -> str:
        return L.dec(self._get("ptc_sched_kind")) or ""

    def stage_indices(self, rank: int) -> List[Any]:
        """The stages ``rank`` holds, chunk 0 first (for pipes == 1, the
        stage_index of its PipelineStage objects)."""
        out = []
        for c in range(self._get("ptc_sched_chunks", int(rank))):
            pipe, st = ctypes.c_int(), ctypes.c_int()
            L.call("ptc_sched_stage_of", self._h.ptr, int(rank), c, ctypes.byref(pipe),
                   ctypes.byref(st))
            out.append(st.value if self.pipes == 1 else (pipe.value, st.value))
        return out

    def text(self) -> str:
        """PTC's text format."""
        return _text("ptc_sched_format", self._h.ptr)

    def to_torch(self, comms: bool = False) -> str:
        """Torch's action lists as CSV text, one line per rank: compute actions
        (``_load_csv(path)``), or with ``comms=True`` also PTC's sends,
        receives, waits and gradient reductions (``format="compute_comms"``).
        Raises UnsupportedError for two-pipe schedules (chimera, dualpipe)."""
        return _text("ptc_sched_to_torch", self._h.ptr,
                     L.SCHED_TORCH_COMMS if comms else L.SCHED_TORCH_COMPUTE)

    def actions(self, comms: bool = False) -> Dict[int, List[str]]:
        """dict rank -> list of torch action strings (``"3F0"``, ``"1I2"``...)."""
        rows = self.to_torch(comms).split("\n")
        return {r: [c for c in rows[r].split(",") if c] for r in range(self.ranks)}

    def validate(self) -> None:
        """Check dependencies and deadlock-freedom (ptc_sched_validate); raise
        InvalidError or DeadlockError with the validator's message."""
        rep = L.SchedReport()
        code = L.lib().ptc_sched_validate(self._h.ptr, ctypes.byref(rep))
        msg = rep.message.decode()
        L.lib().ptc_sched_report_clear(ctypes.byref(rep))
        if code:
            raise _errors.error_class(code)(msg, code)

    def simulate(self, cost_f: float = 1.0, cost_b: float = 2.0, cost_w: float = 0.0,
                 latency: float = 0.0, bandwidth: float = 0.0,
                 act_bytes: float = 0.0) -> Dict[str, Any]:
        """Simulated figures: dict with makespan, bubble_fraction and
        peak_activations (per rank, whole-stage units)."""
        costs = _costs(cost_f, cost_b, cost_w, latency, bandwidth, act_bytes)
        sim = L.Handle("ptc_sched_sim_destroy")
        L.call("ptc_sched_simulate", self._h.ptr, ctypes.byref(costs), ctypes.byref(sim.ptr))
        lib = L.lib()
        try:
            return {"makespan": lib.ptc_sched_sim_makespan(sim.ptr),
                    "bubble_fraction": lib.ptc_sched_sim_bubble(sim.ptr),
                    "peak_activations": [lib.ptc_sched_sim_peak(sim.ptr, r)
                                         for r in range(self.ranks)]}
        finally:
            sim.close()

    def close(self) -> None:
        self._h.close()

    # ---- torch --------------------------------------------------------------------

    def runtime(self, stages: Iterable[Any], loss_fn: Optional[Callable[..., Any]] = None,
                comms: bool = False, **kwargs: Any) -> Any:
        """A torch ``_PipelineScheduleRuntime`` over this rank's ``stages`` that
        runs this schedule: its action lists loaded with ``_load_csv``
        (compute only: torch adds its communication; ``comms=True``: PTC's).
        Extra keyword arguments go to the runtime (scale_grads, ...)."""
        try:
            from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
        except ImportError as e:
            raise _errors.UnsupportedError(
                "this torch has no torch.distributed.pipelining.schedules."
                "_PipelineScheduleRuntime (tested: torch 2.15): %s" % e) from None
        if not hasattr(_PipelineScheduleRuntime, "_load_csv"):
            raise _errors.UnsupportedError("this torch's _PipelineScheduleRuntime has no "
                                           "_load_csv (tested: torch 2.15)")
        if self.pipes != 1:
            raise _errors.UnsupportedError(
                "%s runs two pipelines; torch.distributed.pipelining runs one" % self.kind)
        stages = list(stages)
        if not stages:
            raise _errors.InvalidError("schedule: no PipelineStage given")
        rank, P, S = stages[0].group_rank, stages[0].group_size, stages[0].num_stages
        if (P, S) != (self.ranks, self.stages):
            raise _errors.InvalidError(
                "schedule: the stages are %d of %d over %d ranks; the schedule has %d stages "
                "over %d ranks" % (len(stages), S, P, self.stages, self.ranks))
        want = self.stage_indices(rank)
        have = sorted(st.stage_index for st in stages)
        if sorted(want) != have:
            raise _errors.InvalidError(
                "schedule: rank %d holds stages %s under %s; its PipelineStage objects are %s"
                % (rank, want, self.kind or "this schedule", have))
        rt = _PipelineScheduleRuntime(stages, self.microbatches, loss_fn=loss_fn, **kwargs)
        fd, path = tempfile.mkstemp(prefix="ptc-sched-", suffix=".csv")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self.to_torch(comms))
            rt._load_csv(path, format="compute_comms" if comms else "compute_only")
        finally:
            os.unlink(path)
        return rt


def schedule(stages: Iterable[Any], n_microbatches: int, kind: str = "1f1b",
             loss_fn: Optional[Callable[..., Any]] = None, *, chunks: Optional[int] = None,
             k: Optional[int] = None, adaptive: bool = False, mem_limit: float = 0.0,
             cost_f: float = 1.0, cost_b: float = 2.0, cost_w: float = 0.0,
             latency: float = 0.0, bandwidth: float = 0.0, act_bytes: float = 0.0,
             comms: bool = False, **kwargs: Any) -> Any:
    """A torch.distributed.pipelining schedule that runs PTC's ``kind`` over
    this rank's ``stages`` (PipelineStage objects): call ``.step(...)`` as on
    torch's own schedules. The pipeline ranks are the stages' group size; a
    looped kind's chunks per rank are num_stages / ranks unless given. Every
    rank must pass the same arguments (each generates the same schedule).
    See :meth:`Schedule.generate` for the cost and link arguments and
    :meth:`Schedule.runtime` for ``comms`` and the keyword arguments."""
    stages = list(stages)
    if not stages:
        raise _errors.InvalidError("schedule: no PipelineStage given")
    P, S = stages[0].group_size, stages[0].num_stages
    if chunks is None and kind in ("interleaved", "zb-interleaved", "looped-bfs"):
        if S % P:
            raise _errors.InvalidError("schedule: %d stages are not a multiple of %d ranks"
                                       % (S, P))
        chunks = S // P
    s = Schedule.generate(kind, P, n_microbatches, chunks=chunks, k=k, adaptive=adaptive,
                          mem_limit=mem_limit, cost_f=cost_f, cost_b=cost_b, cost_w=cost_w,
                          latency=latency, bandwidth=bandwidth, act_bytes=act_bytes)
    try:
        return s.runtime(stages, loss_fn=loss_fn, comms=comms, **kwargs)
    finally:
        s.close()
