"""Dtypes and array pointers: numpy arrays and CPU torch tensors cross into
libptc by pointer, never copied.

PTC dtypes use safetensors names (BOOL U8 I8 I16 U16 I32 U32 I64 U64 F16
BF16 F32 F64 F8_E4M3 F8_E5M2); the enum values are those of
include/ptc/dtype.h. numpy has no bfloat16 or float8: for those the package
uses torch tensors, or ml_dtypes arrays when that package is installed, or
raw uint16 / uint8 numpy arrays when the PTC dtype is given explicitly.
"""

import sys
from typing import Any, Optional, Sequence

import numpy as np

from . import _errors

# name -> (enum value, item size)
DTYPES = {
    "BOOL": (0, 1), "U8": (1, 1), "I8": (2, 1), "I16": (3, 2), "U16": (4, 2),
    "I32": (5, 4), "U32": (6, 4), "I64": (7, 8), "U64": (8, 8), "F16": (9, 2),
    "BF16": (10, 2), "F32": (11, 4), "F64": (12, 8), "F8_E4M3": (13, 1), "F8_E5M2": (14, 1),
}
NAMES = {v: k for k, (v, _) in DTYPES.items()}

_NUMPY = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
    "I32": np.int32, "U32": np.uint32, "I64": np.int64, "U64": np.uint64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64,
}
# numpy dtypes without a native type: the raw integer type of the same size
_RAW = {"BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}
_ML_DTYPES = {"bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}

_TORCH_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16",
    "BF16": "bfloat16", "F32": "float32", "F64": "float64", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


def dtype_name(dt: Any) -> str:
    """Normalise a PTC dtype given as a name ("BF16", "bf16"), an enum value, a
    numpy dtype or a torch dtype to its safetensors name."""
    if isinstance(dt, str):
        up = dt.upper()
        if up in DTYPES:
            return up
        alias = {"FLOAT32": "F32", "FLOAT16": "F16", "BFLOAT16": "BF16", "FLOAT64": "F64",
                 "INT8": "I8", "INT16": "I16", "INT32": "I32", "INT64": "I64", "UINT8": "U8",
                 "UINT16": "U16", "UINT32": "U32", "UINT64": "U64", "FP8_E4M3": "F8_E4M3",
                 "FLOAT8_E4M3FN": "F8_E4M3", "FLOAT8_E5M2": "F8_E5M2", "FP8_E5M2": "F8_E5M2"}
        if up in alias:
            return alias[up]
        raise _errors.InvalidError("unknown dtype '%s'" % dt)
    if isinstance(dt, int) and not isinstance(dt, bool):
        if dt in NAMES:
            return NAMES[dt]
        raise _errors.InvalidError("unknown dtype value %d" % dt)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dt, torch.dtype):
        for name, tn in _TORCH_NAMES.items():
            if getattr(torch, tn, None) == dt:
                return name
        raise _errors.InvalidError("torch dtype %s has no PTC dtype" % dt)
    ndt = np.dtype(dt)
    if ndt.name in _ML_DTYPES:
        return _ML_DTYPES[ndt.name]
    for name, t in _NUMPY.items():
        if ndt == np.dtype(t):
            if ndt.byteorder == ">":
                break
            return name
    raise _errors.InvalidError("numpy dtype %s has no PTC dtype" % ndt)


def dtype_value(dt: Any) -> int:
    return DTYPES[dtype_name(dt)][0]


def dtype_size(dt: Any) -> int:
    return DTYPES[dtype_name(dt)][1]


def numpy_dtype(name: Any) -> "np.dtype[Any]":
    """The numpy dtype holding PTC dtype @p name: native, ml_dtypes, or raw bits."""
    name = dtype_name(name)
    if name in _NUMPY:
        return np.dtype(_NUMPY[name])
    try:
        import ml_dtypes  # noqa: F401 (optional)
        return np.dtype({"BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
                         "F8_E5M2": ml_dtypes.float8_e5m2}[name])
    except ImportError:
        return np.dtype(_RAW[name])


def torch_dtype(name: Any) -> Any:
    import torch
    t = getattr(torch, _TORCH_NAMES[dtype_name(name)], None)
    if t is None:
        raise _errors.UnsupportedError("this torch has no dtype for %s" % name)
    return t


def is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def dtensor_class() -> Optional[type]:
    """torch's DTensor class if its module is loaded (an object can only be a
    DTensor if it is; importing it costs ~0.7 s of sympy and friends)."""
    for mod in ("torch.distributed.tensor", "torch.distributed._tensor"):
        cls = getattr(sys.modules.get(mod), "DTensor", None)
        if cls is not None:
            return cls
    return None


def local_tensor(x: Any) -> Any:
    """A DTensor's local shard; anything else as it is."""
    DTensor = dtensor_class()
    if DTensor is not None and isinstance(x, DTensor):
        return x.to_local()
    return x


class ArrayRef:
    """A contiguous CPU buffer of an array: pointer, PTC dtype, shape, bytes.
    Keeps the array alive while the reference lives."""

    __slots__ = ("obj", "ptr", "dtype", "shape", "nbytes")

    def __init__(self, obj: Any, ptr: int, dtype: str, shape: Sequence[int],
                 nbytes: int) -> None:
        self.obj, self.ptr, self.dtype, self.shape, self.nbytes = obj, ptr, dtype, shape, nbytes


def _raw_ok(native: str, expected: str) -> bool:
    """Whether an array of dtype @p native may carry @p expected as raw bits: an
    integer type of the same size for the types numpy lacks (BF16, F8)."""
    return (expected in _RAW and native in ("U8", "I8", "U16", "I16")
            and DTYPES[native][1] == DTYPES[expected][1])


def array_ref(x: Any, dtype: Any = None, writable: bool = False,
              what: str = "array") -> ArrayRef:
    """The pointer, dtype and shape of a numpy array or a CPU torch tensor (a
    DTensor gives its local shard) without copying it.

    @p dtype, when given, is the PTC dtype expected: the array must have it, or
    for BF16 / F8 (which numpy lacks) be an integer array of the same item
    size holding the raw bits. Raises InvalidError for a non-contiguous array,
    a tensor not on the CPU, a big-endian array, a read-only array where
    @p writable, or a dtype that is not the one expected.
    """
    x = local_tensor(x)
    if is_torch(x):
        if x.device.type != "cpu":
            raise _errors.InvalidError("%s is on %s; only CPU tensors cross by pointer"
                                       % (what, x.device))
        if not x.is_contiguous():
            raise _errors.InvalidError("%s is not contiguous" % what)
        if x.is_conj() or x.is_neg():
            raise _errors.InvalidError("%s has a lazy conj/neg bit" % what)
        name = dtype_name(x.dtype)
        nbytes = x.numel() * x.element_size()
        ptr, shape = (x.data_ptr() if nbytes else 0), tuple(x.shape)
    elif isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise _errors.InvalidError("%s is not C-contiguous" % what)
        if writable and not x.flags.writeable:
            raise _errors.InvalidError("%s is read-only" % what)
        name = dtype_name(x.dtype)
        nbytes = x.nbytes
        ptr, shape = (x.ctypes.data if nbytes else 0), tuple(x.shape)
    else:
        raise _errors.InvalidError("%s must be a numpy array or a CPU torch tensor, not %s"
                                   % (what, type(x).__name__))
    if dtype is not None:
        want = dtype_name(dtype)
        if want != name:
            if not _raw_ok(name, want):
                raise _errors.InvalidError("%s has dtype %s; expected %s" % (what, name, want))
            name = want
    return ArrayRef(x, ptr, name, shape, nbytes)


def empty(shape: Sequence[int], dtype: Any, like: str = "numpy") -> Any:
    """A new C-contiguous array for PTC dtype @p dtype: a torch tensor with
    like="torch", else a numpy array (raw bits for BF16/F8 without ml_dtypes)."""
    if like == "torch":
        import torch
        return torch.empty(tuple(shape), dtype=torch_dtype(dtype))
    return np.empty(tuple(shape), dtype=numpy_dtype(dtype))
