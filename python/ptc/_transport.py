"""The processes of a collective call, as libptc's ptc_transport
(include/ptc/transport.h): a torch.distributed process group, or this
process alone (ptc_transport_self).

The callbacks run torch.distributed collectives on uint8 tensors that view
libptc's buffers: on the CPU for gloo (no copy: the tensors are the C
memory), through the current CUDA device for nccl. gloo also serves the
gather; nccl leaves it NULL, so libptc's all-gather stands in for it.

A callback never lets an exception into C: it keeps it, sets libptc's error
(the exception's PTC_E_* code for a ptc.Error, PTC_E_NOMEM for a
MemoryError, else PTC_E_IO) with the message "torch.distributed all_gather:
RuntimeError: ...", and returns the code. The libptc call then ends on this
process with that error; :meth:`Transport.check` raises the call's ptc.Error
chained to the kept exception (a KeyboardInterrupt or SystemExit is raised
as it is).
"""

import ctypes
import sys
from ctypes import byref
from typing import Any, Callable, Optional

from . import _errors
from . import _lib as L


def _escape(text: str) -> bytes:
    """@p text as a printf format that prints it (ptc_error_set)."""
    return text.replace("%", "%%").encode("utf-8", "replace")


def callback_error(exc: BaseException, what: str) -> int:
    """libptc's error of this thread for an exception of a callback (@p what
    names the step: "torch.distributed all_gather"); returns its code."""
    if isinstance(exc, _errors.Error):
        return set_error(exc)
    code = _errors.NoMemoryError.code if isinstance(exc, MemoryError) else \
        _errors.PtcIOError.code
    return L.lib().ptc_error_set(code, _escape("%s: %s: %s" % (what, type(exc).__name__, exc)))


def set_error(exc: BaseException) -> int:
    """Set libptc's error of this thread from @p exc; returns its code."""
    if isinstance(exc, _errors.Error):
        code, text = (exc.code if exc.code < 0 else -1), exc.message
    elif isinstance(exc, MemoryError):
        code, text = _errors.NoMemoryError.code, "MemoryError: %s" % exc
    else:
        code, text = _errors.InvalidError.code, "%s: %s" % (type(exc).__name__, exc)
    return L.lib().ptc_error_set(code, _escape(text))


class Transport:
    """A ptc_transport for the processes of @p group (default: torch.distributed's
    default group when one is initialised, else this process alone).

    ``size``/``rank`` are this process's place; ``t`` is the struct to pass by
    reference. Keep the object alive during the libptc call (it holds the
    callbacks)."""

    def __init__(self, group: Any = None) -> None:
        self.exc: Optional[BaseException] = None
        self.t = L.Transport()
        self.size, self.rank = 1, 0
        dist = None
        if group is None:
            dist = sys.modules.get("torch.distributed")
            if dist is not None and not (dist.is_available() and dist.is_initialized()):
                dist = None
        else:
            import torch.distributed as dist
        if dist is not None:
            self.size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        if self.size <= 1:
            self.size, self.rank = 1, 0
            L.lib().ptc_transport_self(byref(self.t))
            return
        import torch
        self.torch, self.dist, self.group = torch, dist, group
        self.cpu = dist.get_backend(group) != "nccl"
        self.device = (torch.device("cpu") if self.cpu
                       else torch.device("cuda", torch.cuda.current_device()))
        self._fns = (L.ALLGATHER_FN(self._guard("all_gather", self._allgather)),
                     L.GATHER_FN(self._guard("gather", self._gather)) if self.cpu
                     else L.GATHER_FN(),
                     L.BROADCAST_FN(self._guard("broadcast", self._broadcast)),
                     L.BARRIER_FN(self._guard("barrier", self._barrier)))
        self.t.rank, self.t.size = self.rank, self.size
        self.t.allgather, self.t.gather, self.t.broadcast, self.t.barrier = self._fns
        if self.cpu:  # point-to-point messages (gloo); nccl: libptc's all-gathers
            self._xfn = L.EXCHANGE_FN(self._guard("exchange", self._exchange))
            self.t.exchange = self._xfn

    # -- the callbacks --------------------------------------------------------------
    def _guard(self, what: str, fn: Callable[..., None]) -> Callable[..., int]:
        def cb(user: Any, *args: Any) -> int:
            try:
                fn(*args)
                return 0
            except BaseException as e:  # noqa: B036 -- never into C; raised by check()
                self.exc = self.exc or e
                return callback_error(e, "torch.distributed " + what)
        return cb

    def _view(self, ptr: int, n: int) -> Any:
        """A uint8 CPU tensor over @p n bytes of C memory at @p ptr (no copy)."""
        return self.torch.frombuffer((ctypes.c_uint8 * n).from_address(ptr),
                                     dtype=self.torch.uint8)

    def _global(self, r: int) -> int:
        return r if self.group is None else self.dist.get_global_rank(self.group, r)

    def _allgather(self, inp: int, n: int, out: int) -> None:
        if n == 0:
            return
        src, dst = self._view(inp, n), self._view(out, n * self.size)
        if self.cpu:
            self.dist.all_gather(list(dst.view(self.size, n).unbind(0)), src, group=self.group)
            return
        d = self.torch.empty(n * self.size, dtype=self.torch.uint8, device=self.device)
        self.dist.all_gather_into_tensor(d, src.to(self.device), group=self.group)
        dst.copy_(d.cpu())

    def _gather(self, inp: int, n: int, out: Optional[int], root: int) -> None:
        if n == 0:
            return
        outs = None
        if self.rank == root:
            outs = list(self._view(out, n * self.size).view(self.size, n).unbind(0))
        self.dist.gather(self._view(inp, n), gather_list=outs, dst=self._global(root),
                         group=self.group)

    def _broadcast(self, buf: int, n: int, root: int) -> None:
        if n == 0:
            return
        b = self._view(buf, n)
        if self.cpu:
            self.dist.broadcast(b, src=self._global(root), group=self.group)
            return
        d = b.to(self.device)
        self.dist.broadcast(d, src=self._global(root), group=self.group)
        b.copy_(d.cpu())

    def _exchange(self, nsend: int, to: int, sbuf: int, slen: int, nrecv: int, frm: int,
                  rbuf: int, rlen: int) -> None:
        """ptc_transport.exchange: isend / irecv of each message (one process
        pair's messages match in order: torch.distributed keeps it)."""
        P = ctypes.POINTER
        ints, ptrs, sizes = P(ctypes.c_int), P(ctypes.c_void_p), P(ctypes.c_size_t)
        to_, sb, sl = (ctypes.cast(to, ints), ctypes.cast(sbuf, ptrs), ctypes.cast(slen, sizes))
        fr, rb, rl = (ctypes.cast(frm, ints), ctypes.cast(rbuf, ptrs), ctypes.cast(rlen, sizes))
        work = []
        for j in range(nrecv):
            if rl[j]:
                work.append(self.dist.irecv(self._view(rb[j], rl[j]), src=self._global(fr[j]),
                                            group=self.group))
        for i in range(nsend):
            if sl[i]:
                work.append(self.dist.isend(self._view(sb[i], sl[i]), dst=self._global(to_[i]),
                                            group=self.group))
        for w in work:
            w.wait()

    def _barrier(self) -> None:
        self.dist.barrier(group=self.group)

    # -- after the call --------------------------------------------------------------
    def check(self, rc: int, cause: Optional[BaseException] = None) -> int:
        """@p rc when the libptc call succeeded; else raise its ptc.Error (libptc's
        message, the same on every process), chained to this process's own
        failure: @p cause (what failed before the call) or a callback's
        exception."""
        kept, self.exc = self.exc, None
        if rc >= 0:
            return rc
        cause = cause or kept
        if cause is not None and not isinstance(cause, Exception):
            raise cause
        raise L.last_error(rc) from cause
