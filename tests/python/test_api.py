"""The package's surface: type hints and py.typed, the renamed exceptions and
their deprecated names, exceptions of a progress callback reaching the
caller, and a failing torch.distributed collective ending a collective save
with its exception as the cause."""

import inspect
import os
import sys
import types
import warnings

import pytest
import torch
from safetensors.torch import save_file

import ptc
import ptc.torch


def public_callables():
    """(qualified name, function) of every public function and method."""
    for name in ptc.__all__:
        obj = getattr(ptc, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and not issubclass(obj, BaseException):
            for m, f in vars(obj).items():
                if inspect.isfunction(f) and (not m.startswith("_") or m == "__init__"):
                    yield "%s.%s" % (name, m), f
                elif isinstance(f, (property, classmethod)):
                    g = f.fget if isinstance(f, property) else f.__func__
                    yield "%s.%s" % (name, m), g
    for cls in (ptc.torch.StepDataset, ptc.torch.StepLoader):
        for m, f in vars(cls).items():
            if inspect.isfunction(f) and (not m.startswith("_") or m == "__init__"):
                yield "ptc.torch.%s.%s" % (cls.__name__, m), f


def test_public_functions_are_annotated_and_the_package_says_so():
    missing = []
    for name, f in public_callables():
        sig = inspect.signature(f)
        params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
        if sig.return_annotation is inspect.Signature.empty or \
                any(p.annotation is inspect.Parameter.empty for p in params):
            missing.append(name)
    assert missing == []
    assert os.path.isfile(os.path.join(os.path.dirname(ptc.__file__), "py.typed"))


def test_renamed_exceptions_and_their_deprecated_names():
    assert issubclass(ptc.PtcIOError, OSError) and ptc.PtcIOError.code == -3
    assert issubclass(ptc.PtcTimeoutError, TimeoutError) and ptc.PtcTimeoutError.code == -18
    assert ptc._errors.make_error(-3, "x").__class__ is ptc.PtcIOError
    assert "IOError" not in ptc.__all__ and "TimeoutError" not in ptc.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the new names do not warn
        assert ptc.PtcIOError.__name__ == "PtcIOError"
    with pytest.warns(DeprecationWarning, match=r"ptc\.IOError is deprecated .* ptc\.PtcIOError"):
        assert ptc.IOError is ptc.PtcIOError
    with pytest.warns(DeprecationWarning, match=r"ptc\.TimeoutError .* ptc\.PtcTimeoutError"):
        from ptc import TimeoutError as T
    assert T is ptc.PtcTimeoutError
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ptc.nope


def test_a_progress_callback_exception_reaches_the_caller(tmp_path):
    save_file({"w": torch.arange(4096.0)}, str(tmp_path / "m.safetensors"))
    calls = []

    class Stop(Exception):
        pass

    def progress(what, done, total):
        calls.append((what, done, total))
        raise Stop("from the callback")

    with ptc.Store(tmp_path / "st", create=True) as st:
        with pytest.raises(Stop, match="from the callback"):
            st.import_safetensors(tmp_path / "m.safetensors", "dp=1", "none",
                                  progress=progress)
        # called once, then no more; libptc's work is not interrupted by it
        assert len(calls) == 1 and calls[0][0] == "import"
        assert [v["version"] for v in st.versions()] == [1]
        with pytest.raises(Stop):
            st.verify(progress=progress)
        with pytest.raises(KeyboardInterrupt):
            st.export(tmp_path / "out.safetensors",
                      progress=lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        ok = []
        st.verify(progress=lambda *a: ok.append(a))
        assert ok and ok[-1][1] == ok[-1][2]


class FailingGroup(types.ModuleType):
    """A torch.distributed stand-in: two processes, gloo, whose all-gather fails."""

    def __init__(self, exc):
        super().__init__("torch.distributed")
        self.exc = exc

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def get_world_size(self, group=None):
        return 2

    def get_rank(self, group=None):
        return 0

    def get_backend(self, group=None):
        return "gloo"

    def all_gather(self, *args, **kwargs):
        raise self.exc


def test_a_failing_collective_is_the_cause_of_the_error(tmp_path, monkeypatch):
    with ptc.Store(tmp_path / "st", create=True) as st:
        state = {"w": torch.ones(4)}
        kw = dict(config="dp=2", rules="none", rank=0)
        monkeypatch.setitem(sys.modules, "torch.distributed",
                            FailingGroup(RuntimeError("peer closed")))
        with pytest.raises(ptc.PtcIOError) as e:
            ptc.save(st, state, **kw)
        assert "torch.distributed all_gather: RuntimeError: peer closed" in e.value.message
        assert e.value.message.startswith("checkpoint save: ")
        assert isinstance(e.value.__cause__, RuntimeError)
        with pytest.raises(ptc.PtcIOError, match="all_gather: RuntimeError"):
            ptc.load(st, state, config="dp=2", rank=0)
        # an interrupt is raised as it is
        monkeypatch.setitem(sys.modules, "torch.distributed", FailingGroup(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            ptc.save(st, state, **kw)
        monkeypatch.undo()
        assert st.versions() == []
        assert ptc.save(st, state, config="dp=1", rules="none", rank=0) == 1
