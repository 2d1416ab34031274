"""ptc.layout / ptc.Layout: the layout function of libptc (include/ptc/layout.h)
— for every tensor and rank of a parallel configuration, whether the rank
holds the tensor, its local shape and its pieces."""

import ctypes
from ctypes import byref, c_size_t
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arrays, _errors
from . import _lib as L
from ._lib import call

# name -> array (numpy, torch, DTensor: its global shape) or (dtype, shape), or
# [(name, dtype, shape)]
Tensors = Union[Mapping[str, Any], Sequence[Tuple[str, Any, Sequence[int]]]]


@dataclass(frozen=True)
class Piece:
    """A box [lo, hi) of the global tensor and where its elements are in the
    local tensor: element g of the box is at local flat element
    ``offset + sum_d (g[d] - lo[d]) * strides[d]``."""
    lo: Tuple[int, ...]
    hi: Tuple[int, ...]
    offset: int
    strides: Tuple[int, ...]

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(h - l for l, h in zip(self.lo, self.hi))


@dataclass(frozen=True)
class Shard:
    """One tensor on one rank."""
    name: str
    dtype: str
    global_shape: Tuple[int, ...]
    placement: str
    present: bool                 # the rank's pipeline stage holds the tensor
    shape: Optional[Tuple[int, ...]]  # local shape (None when not present)
    flat: bool                    # zero-sharded: 1-D local tensor of a flat range
    flat_range: Tuple[int, int]   # that range of the tp/pp-local shard's flat order
    owner: int                    # lowest rank holding an identical shard (-1: none)
    pieces: List[Piece] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        if not self.present:
            return 0
        return int(np.prod(self.shape, dtype=np.int64)) * _arrays.dtype_size(self.dtype)

    def _views(self, local: Any, global_: Any) -> Iterator[Tuple[Any, Any]]:
        loc = np.asarray(local).reshape(-1)
        isz = loc.itemsize
        for p in self.pieces:
            if any(h <= l for l, h in zip(p.lo, p.hi)):
                continue
            base = loc[p.offset:]
            lv = np.lib.stride_tricks.as_strided(base, shape=p.shape,
                                                 strides=tuple(s * isz for s in p.strides))
            gv = global_[tuple(slice(l, h) for l, h in zip(p.lo, p.hi))]
            yield lv, gv

    def take(self, global_array: Any) -> Any:
        """This rank's local tensor cut from the whole tensor @p global_array (numpy
        or torch; the result is of the same kind)."""
        if not self.present:
            raise _errors.InvalidError("rank does not hold tensor '%s'" % self.name)
        if tuple(global_array.shape) != self.global_shape:
            raise _errors.InvalidError("tensor '%s': global shape is %s, not %s" % (
                self.name, list(self.global_shape), list(global_array.shape)))
        if _arrays.is_torch(global_array):
            import torch
            out = torch.empty(self.shape, dtype=global_array.dtype)
            g = global_array.detach().cpu()
            flat = out.view(-1)
            for p in self.pieces:
                if any(h <= l for l, h in zip(p.lo, p.hi)):
                    continue
                lv = torch.as_strided(flat, p.shape, p.strides, p.offset)
                lv.copy_(g[tuple(slice(l, h) for l, h in zip(p.lo, p.hi))])
            return out
        out = np.empty(self.shape, dtype=global_array.dtype)
        for lv, gv in self._views(out, np.asarray(global_array)):
            lv[...] = gv
        return out

    def place(self, local: Any, global_array: Any) -> Any:
        """Write this rank's @p local tensor into its place in @p global_array."""
        if _arrays.is_torch(global_array):
            import torch
            flat = local.reshape(-1)
            for p in self.pieces:
                if any(h <= l for l, h in zip(p.lo, p.hi)):
                    continue
                global_array[tuple(slice(l, h) for l, h in zip(p.lo, p.hi))].copy_(
                    torch.as_strided(flat, p.shape, p.strides, p.offset))
            return global_array
        for lv, gv in self._views(local, global_array):
            gv[...] = lv
        return global_array


def _tensor_specs(tensors: "Tensors") -> List[Tuple[str, str, Tuple[int, ...]]]:
    """[(name, dtype, shape)] from a mapping name -> array / (dtype, shape) or a
    list of (name, dtype, shape). DTensors give their global shape."""
    items = tensors.items() if hasattr(tensors, "items") else tensors
    out = []
    for item in items:
        if hasattr(tensors, "items"):
            name, v = item
            if isinstance(v, (tuple, list)) and len(v) == 2:
                dt, shape = v
            elif hasattr(v, "shape") and hasattr(v, "dtype"):
                dt, shape = v.dtype, tuple(v.shape)
            else:
                raise _errors.InvalidError("tensor '%s': give an array or (dtype, shape)" % name)
        else:
            name, dt, shape = item
        out.append((str(name), _arrays.dtype_name(dt), tuple(int(s) for s in shape)))
    return out


class Layout:
    """The layout of tensors under a configuration and placement rules.

    @p tensors: a mapping name -> array (numpy / torch / DTensor: its global
    shape) or name -> (dtype, shape), or a list of (name, dtype, shape); the
    order is kept. @p config: "dp=2,tp=2,pp=1[,zero=1]" or the path form.
    @p rules: a preset name or rules text; or @p rules_file: a path.
    Raises RuleError (no rule, a bad split), ConfigError, InvalidError naming
    the tensor.
    """

    def __init__(self, tensors: "Tensors", config: Any, rules: Any = None,
                 rules_file: Any = None) -> None:
        specs = _tensor_specs(tensors)
        cfg = L.parse_config(config)
        rl = L.as_rules(rules, rules_file)
        arr = (L.TensorInfo * max(1, len(specs)))()
        self._names = []
        for i, (name, dt, shape) in enumerate(specs):
            if len(shape) > L.MAX_DIMS:
                raise _errors.InvalidError("tensor '%s' has %d dimensions (at most %d)"
                                           % (name, len(shape), L.MAX_DIMS))
            b = name.encode("utf-8")
            self._names.append(b)
            arr[i].name = b
            arr[i].dtype = _arrays.dtype_value(dt)
            arr[i].ndim = len(shape)
            for d, s in enumerate(shape):
                arr[i].shape[d] = s
        self._h = L.Handle("ptc_layout_destroy")
        call("ptc_layout_create", byref(self._h.ptr), arr, len(specs), rl.ptr, byref(cfg))
        self._describe(specs, cfg)

    @classmethod
    def of_version(cls, reader: Any, config: Any = None) -> "Layout":
        """The layout of a stored version (a Store.reader()) under its stored rules
        and @p config (default: the layout it was stored with: its configuration,
        or, for a version saved from DTensors, its explicit per-rank pieces, whose
        config reads "explicit:W" and whose placements are empty)."""
        self = cls.__new__(cls)
        cfg = L.parse_config(config) if config is not None else None
        self._h = L.Handle("ptc_layout_destroy")
        call("ptc_layout_of_version", byref(self._h.ptr), reader.ptr,
             byref(cfg) if cfg is not None else None)
        lib = L.lib()
        specs = []
        for t in range(lib.ptc_layout_count(self._h.ptr)):
            ti = lib.ptc_layout_tensor(self._h.ptr, t).contents
            specs.append((ti.name.decode("utf-8"), _arrays.NAMES[ti.dtype],
                          tuple(ti.shape[:ti.ndim])))
        self._describe(specs, lib.ptc_layout_config(self._h.ptr).contents)
        return self

    def _describe(self, specs: List[Tuple[str, str, Tuple[int, ...]]], cfg: Any) -> None:
        self.specs = specs
        self._index = {name: i for i, (name, _, _) in enumerate(specs)}
        self.config = L.describe_layout(self._h.ptr)
        self.world = L.config_world(cfg)
        lib = L.lib()
        self.placements = []
        if lib.ptc_layout_is_explicit(self._h.ptr):
            self.placements = [""] * len(specs)
            return
        for i in range(len(specs)):
            buf = ctypes.create_string_buffer(512)
            call("ptc_placement_format", lib.ptc_layout_placement(self._h.ptr, i), buf, 512)
            self.placements.append(buf.value.decode())

    def __len__(self) -> int:
        return len(self.specs)

    def names(self) -> List[str]:
        return [s[0] for s in self.specs]

    def shard(self, name: str, rank: int) -> Shard:
        """The Shard of tensor @p name on rank @p rank."""
        if name not in self._index:
            raise _errors.NotFoundError("no tensor '%s' in the layout" % name)
        if not 0 <= rank < self.world:
            raise _errors.RangeError("rank %d outside the world of %d ranks of %s"
                                     % (rank, self.world, self.config))
        t = self._index[name]
        _, dt, gshape = self.specs[t]
        s = L.Shard()
        call("ptc_layout_shard", self._h.ptr, t, rank, byref(s))
        pieces = []
        if s.present and s.npieces:
            arr = (L.Piece * s.npieces)()
            n = c_size_t()
            call("ptc_layout_pieces", self._h.ptr, t, rank, arr, s.npieces, byref(n))
            for p in arr[:n.value]:
                nd = p.box.ndim
                pieces.append(Piece(tuple(p.box.lo[:nd]), tuple(p.box.hi[:nd]),
                                    p.local_offset, tuple(p.local_stride[:nd])))
        return Shard(name=name, dtype=dt, global_shape=gshape, placement=self.placements[t],
                     present=bool(s.present),
                     shape=tuple(s.shape[:s.ndim]) if s.present else None,
                     flat=bool(s.flat), flat_range=(s.flat_lo, s.flat_hi), owner=s.owner,
                     pieces=pieces)

    def shards(self, rank: int) -> Dict[str, Shard]:
        """{name: Shard} of every tensor for rank @p rank, in tensor order."""
        return {name: self.shard(name, rank) for name, _, _ in self.specs}

    def local_shapes(self, rank: int) -> Dict[str, Tuple[int, ...]]:
        """{name: local shape} of the tensors rank @p rank holds."""
        return {n: s.shape for n, s in self.shards(rank).items() if s.present}

    def close(self) -> None:
        self._h.close()


def layout(tensors: "Tensors", config: Any, rules: Any = None, rank: int = 0,
           rules_file: Any = None) -> Dict[str, Shard]:
    """For rank @p rank of @p config: {name: Shard} with each tensor's local
    shape and pieces (tensors its pipeline stage does not hold have
    present=False). See Layout for the arguments."""
    lay = Layout(tensors, config, rules, rules_file=rules_file)
    try:
        return lay.shards(rank)
    finally:
        lay.close()
