"""The exceptions of the package: one class per PTC_E_* code of libptc.

Every failure of a libptc call raises the subclass of :class:`Error` that
matches the C code, carrying the code (``e.code``, negative), its symbolic
name (``e.name``, e.g. ``"PTC_E_BUSY"``) and libptc's one-line message
(``e.message``, the text of ``ptc_last_error()``; ``ptc_strerror(code)``
when the library left none).
"""

import builtins


class Error(Exception):
    """A libptc failure (base class of every error this package raises)."""

    __module__ = "ptc"

    code = -1
    name = "PTC_E_INVAL"

    def __init__(self, message, code=None):
        if code is not None:
            self.code = code
            self.name = _NAMES.get(code, "PTC_E_%d" % -code)
        self.message = message
        super().__init__(message)

    def __str__(self):
        return self.message

    def __repr__(self):
        return "%s(%r, code=%d)" % (type(self).__name__, self.message, self.code)


def _make(cls_name, code, name, *bases, doc):
    cls = type(cls_name, (Error,) + bases,
               {"code": code, "name": name, "__doc__": doc, "__module__": "ptc"})
    return cls


InvalidError = _make("InvalidError", -1, "PTC_E_INVAL", builtins.ValueError,
                     doc="PTC_E_INVAL: an invalid argument or malformed text.")
NoMemoryError = _make("NoMemoryError", -2, "PTC_E_NOMEM", builtins.MemoryError,
                      doc="PTC_E_NOMEM: out of memory.")
IOError = _make("IOError", -3, "PTC_E_IO", builtins.OSError,
                doc="PTC_E_IO: an operating-system I/O call failed.")
FormatError = _make("FormatError", -4, "PTC_E_FORMAT", builtins.ValueError,
                    doc="PTC_E_FORMAT: a file violates its format.")
NotFoundError = _make("NotFoundError", -5, "PTC_E_NOTFOUND", builtins.LookupError,
                      doc="PTC_E_NOTFOUND: no such store, version, tensor, dataset or file.")
ExistsError = _make("ExistsError", -6, "PTC_E_EXISTS",
                    doc="PTC_E_EXISTS: already exists.")
ChecksumError = _make("ChecksumError", -7, "PTC_E_CHECKSUM",
                      doc="PTC_E_CHECKSUM: stored data does not match its checksum.")
UnsupportedError = _make("UnsupportedError", -8, "PTC_E_UNSUPPORTED",
                         doc="PTC_E_UNSUPPORTED: not built in or not supported.")
RangeError = _make("RangeError", -9, "PTC_E_RANGE", builtins.ValueError,
                   doc="PTC_E_RANGE: a number or box is out of range.")
BusyError = _make("BusyError", -10, "PTC_E_BUSY",
                  doc="PTC_E_BUSY: the store is locked by another writer.")
RuleError = _make("RuleError", -11, "PTC_E_RULE", builtins.ValueError,
                  doc="PTC_E_RULE: a placement rule is missing or inconsistent.")
ConfigError = _make("ConfigError", -12, "PTC_E_CONFIG", builtins.ValueError,
                    doc="PTC_E_CONFIG: a parallel configuration does not fit.")
CudaError = _make("CudaError", -13, "PTC_E_CUDA", doc="PTC_E_CUDA: a CUDA call failed.")
MpiError = _make("MpiError", -14, "PTC_E_MPI", doc="PTC_E_MPI: an MPI call failed.")
NcclError = _make("NcclError", -15, "PTC_E_NCCL", doc="PTC_E_NCCL: an NCCL call failed.")
DeadlockError = _make("DeadlockError", -16, "PTC_E_DEADLOCK",
                      doc="PTC_E_DEADLOCK: a schedule cannot complete.")
StoreError = _make("StoreError", -17, "PTC_E_STORE",
                   doc="PTC_E_STORE: the store's metadata is inconsistent.")
TimeoutError = _make("TimeoutError", -18, "PTC_E_TIMEOUT", builtins.TimeoutError,
                     doc="PTC_E_TIMEOUT: a watchdog fired.")

_CLASSES = {c.code: c for c in (
    InvalidError, NoMemoryError, IOError, FormatError, NotFoundError, ExistsError,
    ChecksumError, UnsupportedError, RangeError, BusyError, RuleError, ConfigError,
    CudaError, MpiError, NcclError, DeadlockError, StoreError, TimeoutError)}
_NAMES = {code: c.name for code, c in _CLASSES.items()}

__all__ = ["Error"] + [c.__name__ for c in _CLASSES.values()]


def error_class(code):
    """The exception class of a (negative) PTC_E_* code; Error for unknown codes."""
    return _CLASSES.get(code, Error)


def make_error(code, message):
    """An exception instance for @p code with @p message."""
    cls = error_class(code)
    if cls is Error:
        return Error(message, code)
    return cls(message)
