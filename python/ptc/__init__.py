"""ptc: Python bindings of libptc — parallelizable tensor collections.

A thin layer over the C library (ctypes, ABI mode): nothing is
reimplemented here. See docs/python.md.

    import ptc
    with ptc.Store("st", create=True) as st:
        v = st.import_safetensors(["model.safetensors"], config="tp=2", rules="llama")
        st.export("ranks", config="tp=4")

``ptc.torch`` (imported on demand) holds the PyTorch parts: StepDataset.
``ptc.schedule(stages, n_microbatches, kind=...)`` runs PTC's pipeline
schedules in torch.distributed.pipelining (ptc.pipelining; torch is imported
only when it is called).
"""

from typing import Any

from ._errors import (BusyError, ChecksumError, ConfigError, CudaError, DeadlockError, Error,
                      ExistsError, FormatError, InvalidError, MpiError, NcclError, NoMemoryError,
                      NotFoundError, PtcIOError, PtcTimeoutError, PtcWarning, RangeError,
                      RuleError, StoreError, UnsupportedError)
from ._errors import deprecated as _deprecated
from ._arrays import dtype_name
from ._lib import Rules, hf_params, library_path
from ._async import AsyncSave, async_save
from .checkpoint import load, read_record, save
from .layout import Layout, Piece, Shard, layout
from .pipelining import Schedule, schedule
from .store import Store

__version__ = "0.1.0"


def lib_version() -> str:
    """The version string of the loaded libptc (ptc_version())."""
    from ._lib import lib
    return lib().ptc_version().decode()


def __getattr__(name: str) -> Any:
    if name == "torch":   # ptc.torch needs torch: load it only when asked for
        import importlib
        return importlib.import_module(".torch", __name__)
    cls = _deprecated(name, "ptc")   # IOError, TimeoutError: renamed, with a warning
    if cls is not None:
        return cls
    raise AttributeError("module 'ptc' has no attribute %r" % name)


__all__ = ["Store", "Layout", "Shard", "Piece", "Rules", "hf_params", "layout", "save", "load",
           "read_record", "async_save", "AsyncSave", "Schedule", "schedule",
           "dtype_name", "library_path", "lib_version", "Error", "InvalidError",
           "NoMemoryError", "PtcIOError", "FormatError", "NotFoundError", "ExistsError",
           "ChecksumError", "UnsupportedError", "RangeError", "BusyError", "RuleError",
           "ConfigError", "CudaError", "MpiError", "NcclError", "DeadlockError", "StoreError",
           "PtcTimeoutError", "PtcWarning"]
