"""Where a DTensor's local tensor lies in its global tensor: the pieces of an
explicit layout (include/ptc/layout.h, ptc_layout_create_explicit) read from
its DeviceMesh and placements.

Placements are applied left to right over the mesh dimensions, as DTensor
does (torch.distributed.tensor._utils.compute_local_shape_and_global_offset):
along every tensor dimension the local tensor holds a list of runs of global
indices, initially the whole extent.

- ``Replicate()`` leaves the runs as they are.
- ``Shard(d)`` on a mesh dimension of size n, at coordinate i: the runs of
  dimension d, concatenated (their "logical" extent L), are split with the
  split rule (torch.chunk: c = ceil(L/n), part i = [min(i*c, L),
  min((i+1)*c, L))) and the rank keeps part i.
- ``_StridedShard(d, split_factor=sf)``: the logical extent is first split
  into sf parts, each of those into n parts, and the rank keeps part i of
  each, in order (FSDP2's ``fully_shard`` over a dimension that tensor
  parallelism already split: ``_StridedShard(0, sf=tp)`` on dp followed by
  ``Shard(0)`` on tp holds rows tp_chunk(j) -> dp_chunk(i), one run).
- ``Partial`` is refused: its local tensor is a summand, not a piece.

The local tensor is row-major over the runs: its extent along d is the sum of
the runs' lengths, and it holds one piece per combination of runs (one run
per dimension: a box), at the local offset where those runs start, with the
local tensor's row-major strides. A Shard / Replicate DTensor is one piece; a
strided shard that is not followed by the split it interleaves with (e.g.
``(_StridedShard(0, sf=2), Replicate())``) holds sf pieces.
"""

from itertools import product
from typing import Any, List, Sequence, Tuple

from . import _errors

Run = Tuple[int, int]   # [lo, hi) of global indices
Piece = Tuple[Tuple[int, ...], Tuple[int, ...], int, Tuple[int, ...]]  # lo, hi, offset, strides


def split(extent: int, n: int, i: int) -> Run:
    """Part i of n of an extent (torch.chunk / ptc_split)."""
    c = -(-extent // n)
    return min(i * c, extent), min((i + 1) * c, extent)


def _take(runs: List[Run], a: int, b: int) -> List[Run]:
    """The runs of logical positions [a, b) of the concatenation of @p runs."""
    out: List[Run] = []
    pos = 0
    for lo, hi in runs:
        n = hi - lo
        s, e = max(a, pos), min(b, pos + n)
        if s < e:
            g0 = lo + s - pos
            if out and out[-1][1] == g0:       # adjacent in both orders: one run
                out[-1] = (out[-1][0], g0 + e - s)
            else:
                out.append((g0, g0 + e - s))
        pos += n
    return out


def _length(runs: List[Run]) -> int:
    return sum(hi - lo for lo, hi in runs)


def _placement_kind(p: Any) -> str:
    name = type(p).__name__
    if name == "_StridedShard":
        return "strided"
    if p.is_replicate():
        return "replicate"
    if p.is_shard():
        return "shard"
    if p.is_partial():
        return "partial"
    return name


def runs_of(shape: Sequence[int], mesh_shape: Sequence[int], coord: Sequence[int],
            placements: Sequence[Any], name: str = "?") -> List[List[Run]]:
    """Per tensor dimension, the runs of global indices the rank at mesh
    coordinate @p coord holds."""
    runs: List[List[Run]] = [[(0, int(s))] for s in shape]
    for m, p in enumerate(placements):
        kind = _placement_kind(p)
        if kind == "replicate":
            continue
        if kind == "partial":
            raise _errors.InvalidError(
                "tensor '%s' is a DTensor with a Partial placement on mesh dimension %d: its "
                "local tensor is a summand, not a part (reduce it first, e.g. "
                ".redistribute(placements=[Replicate(), ...]))" % (name, m))
        if kind not in ("shard", "strided"):
            raise _errors.UnsupportedError("tensor '%s': DTensor placement %r on mesh dimension "
                                           "%d is not supported" % (name, p, m))
        d = int(p.dim)
        if d < 0:
            d += len(shape)
        if not 0 <= d < len(shape):
            raise _errors.InvalidError("tensor '%s': placement %r names dimension %d of a "
                                       "%d-d tensor" % (name, p, d, len(shape)))
        n, i = int(mesh_shape[m]), int(coord[m])
        total = _length(runs[d])
        if kind == "shard":
            runs[d] = _take(runs[d], *split(total, n, i))
            continue
        sf = int(p.split_factor)
        new: List[Run] = []
        for j in range(sf):
            a, b = split(total, sf, j)
            ca, cb = split(b - a, n, i)
            for r in _take(runs[d], a + ca, a + cb):
                if new and new[-1][1] == r[0]:
                    new[-1] = (new[-1][0], r[1])
                else:
                    new.append(r)
        runs[d] = new
    return runs


def pieces_of(runs: List[List[Run]]) -> Tuple[Tuple[int, ...], List[Piece]]:
    """The local shape and the pieces (lo, hi, local offset, local strides)
    of a local tensor holding @p runs, row-major over them."""
    local = tuple(_length(r) for r in runs)
    strides = [1] * len(local)
    for d in range(len(local) - 2, -1, -1):
        strides[d] = strides[d + 1] * local[d + 1]
    starts = []  # per dimension: each run's first local index
    for r in runs:
        at, s = 0, []
        for lo, hi in r:
            s.append(at)
            at += hi - lo
        starts.append(s)
    out: List[Piece] = []
    for combo in product(*[range(len(r)) for r in runs]):
        lo = tuple(runs[d][k][0] for d, k in enumerate(combo))
        hi = tuple(runs[d][k][1] for d, k in enumerate(combo))
        off = sum(starts[d][k] * strides[d] for d, k in enumerate(combo))
        out.append((lo, hi, off, tuple(strides)))
    return local, out


def local_pieces(x: Any, name: str) -> Tuple[Tuple[int, ...], List[Piece]]:
    """The local shape and pieces of DTensor @p x on this process; ((), [])
    never: a process outside the DTensor's mesh raises LookupError (it holds
    no part of the tensor)."""
    mesh = x.device_mesh
    coord = mesh.get_coordinate()
    if coord is None:
        raise LookupError(name)
    runs = runs_of(tuple(x.shape), tuple(mesh.shape), coord, x.placements, name)
    return pieces_of(runs)
