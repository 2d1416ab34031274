"""The exceptions of the package: one class per PTC_E_* code of libptc, and
the warning class of libptc's warnings (PtcWarning).

Every failure of a libptc call raises the subclass of :class:`Error` that
matches the C code, carrying the code (``e.code``, negative), its symbolic
name (``e.name``, e.g. ``"PTC_E_BUSY"``) and libptc's one-line message
(``e.message``, the text of ``ptc_last_error()``; ``ptc_strerror(code)``
when the library left none).
"""

import builtins
from typing import Dict, Optional, Type


class Error(Exception):
    """A libptc failure (base class of every error this package raises)."""

    __module__ = "ptc"

    code: int = -1
    name: str = "PTC_E_INVAL"
    message: str

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        if code is not None:
            self.code = code
            self.name = _NAMES.get(code, "PTC_E_%d" % -code)
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(%r, code=%d)" % (type(self).__name__, self.message, self.code)


class InvalidError(Error, builtins.ValueError):
    """PTC_E_INVAL: an invalid argument or malformed text."""

    __module__ = "ptc"
    code = -1
    name = "PTC_E_INVAL"


class NoMemoryError(Error, builtins.MemoryError):
    """PTC_E_NOMEM: out of memory."""

    __module__ = "ptc"
    code = -2
    name = "PTC_E_NOMEM"


class PtcIOError(Error, builtins.OSError):
    """PTC_E_IO: an operating-system I/O call failed."""

    __module__ = "ptc"
    code = -3
    name = "PTC_E_IO"


class FormatError(Error, builtins.ValueError):
    """PTC_E_FORMAT: a file violates its format."""

    __module__ = "ptc"
    code = -4
    name = "PTC_E_FORMAT"


class NotFoundError(Error, builtins.LookupError):
    """PTC_E_NOTFOUND: no such store, version, tensor, dataset or file."""

    __module__ = "ptc"
    code = -5
    name = "PTC_E_NOTFOUND"


class ExistsError(Error):
    """PTC_E_EXISTS: already exists."""

    __module__ = "ptc"
    code = -6
    name = "PTC_E_EXISTS"


class ChecksumError(Error):
    """PTC_E_CHECKSUM: stored data does not match its checksum."""

    __module__ = "ptc"
    code = -7
    name = "PTC_E_CHECKSUM"


class UnsupportedError(Error):
    """PTC_E_UNSUPPORTED: not built in or not supported."""

    __module__ = "ptc"
    code = -8
    name = "PTC_E_UNSUPPORTED"


class RangeError(Error, builtins.ValueError):
    """PTC_E_RANGE: a number or box is out of range."""

    __module__ = "ptc"
    code = -9
    name = "PTC_E_RANGE"


class BusyError(Error):
    """PTC_E_BUSY: the store is locked by another writer."""

    __module__ = "ptc"
    code = -10
    name = "PTC_E_BUSY"


class RuleError(Error, builtins.ValueError):
    """PTC_E_RULE: a placement rule is missing or inconsistent."""

    __module__ = "ptc"
    code = -11
    name = "PTC_E_RULE"


class ConfigError(Error, builtins.ValueError):
    """PTC_E_CONFIG: a parallel configuration does not fit."""

    __module__ = "ptc"
    code = -12
    name = "PTC_E_CONFIG"


class CudaError(Error):
    """PTC_E_CUDA: a CUDA call failed."""

    __module__ = "ptc"
    code = -13
    name = "PTC_E_CUDA"


class MpiError(Error):
    """PTC_E_MPI: an MPI call failed."""

    __module__ = "ptc"
    code = -14
    name = "PTC_E_MPI"


class NcclError(Error):
    """PTC_E_NCCL: an NCCL call failed."""

    __module__ = "ptc"
    code = -15
    name = "PTC_E_NCCL"


class DeadlockError(Error):
    """PTC_E_DEADLOCK: a schedule cannot complete."""

    __module__ = "ptc"
    code = -16
    name = "PTC_E_DEADLOCK"


class StoreError(Error):
    """PTC_E_STORE: the store's metadata is inconsistent."""

    __module__ = "ptc"
    code = -17
    name = "PTC_E_STORE"


class PtcTimeoutError(Error, builtins.TimeoutError):
    """PTC_E_TIMEOUT: a watchdog fired."""

    __module__ = "ptc"
    code = -18
    name = "PTC_E_TIMEOUT"


class PtcWarning(builtins.UserWarning):
    """A warning of libptc: a call that succeeded but did something the caller
    should know of, e.g. a load across hosts that took an older version than
    the newest (its message is libptc's one-line log text)."""

    __module__ = "ptc"


_CLASSES = {c.code: c for c in (
    InvalidError, NoMemoryError, PtcIOError, FormatError, NotFoundError, ExistsError,
    ChecksumError, UnsupportedError, RangeError, BusyError, RuleError, ConfigError,
    CudaError, MpiError, NcclError, DeadlockError, StoreError, PtcTimeoutError)}
_NAMES: Dict[int, str] = {code: c.name for code, c in _CLASSES.items()}

__all__ = ["Error", "PtcWarning"] + [c.__name__ for c in _CLASSES.values()]

# The names of 0.1.0 that shadowed built-ins: still answered, with a
# DeprecationWarning, by ptc.__getattr__ (and this module's).
DEPRECATED = {"IOError": "PtcIOError", "TimeoutError": "PtcTimeoutError"}


def deprecated(name, module):
    """The class a deprecated name stands for, after a DeprecationWarning; None
    for any other name."""
    new = DEPRECATED.get(name)
    if new is None:
        return None
    import warnings
    warnings.warn("%s.%s is deprecated (it shadows the built-in %s); use %s.%s"
                  % (module, name, name, module, new), DeprecationWarning, stacklevel=3)
    return globals()[new]


def __getattr__(name):
    cls = deprecated(name, "ptc")
    if cls is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return cls


def error_class(code: int) -> Type[Error]:
    """The exception class of a (negative) PTC_E_* code; Error for unknown codes."""
    return _CLASSES.get(code, Error)


def make_error(code: int, message: str) -> Error:
    """An exception instance for @p code with @p message."""
    cls = error_class(code)
    if cls is Error:
        return Error(message, code)
    return cls(message)
