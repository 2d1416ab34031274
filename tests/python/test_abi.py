"""The ctypes struct layouts of ptc._lib against the C headers: a C program
compiled against include/ptc prints every size and field offset."""

import ctypes
import os
import shutil
import subprocess

import pytest

from ptc import _lib as L
from conftest import SRC


def test_struct_layouts_match_headers(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    inc = os.path.join(SRC, "include")
    build_inc = os.path.join(os.environ.get("PTC_BUILD") or os.path.join(SRC, "build"),
                             "include")
    if not cc or not os.path.isdir(inc) or not os.path.isdir(build_inc):
        pytest.skip("needs a C compiler and a configured build tree")
    hdir = os.path.join(inc, "ptc")
    # every public header (some include <mpi.h>: MPI's flags from pkg-config)
    headers = sorted(f for f in os.listdir(hdir) if f.endswith(".h"))
    mpi = subprocess.run(["pkg-config", "--cflags", "ompi-c"], capture_output=True, text=True)
    if mpi.returncode != 0:
        pytest.skip("needs pkg-config's flags of Open MPI (ompi-c)")
    mpi_flags = mpi.stdout.split()
    lines = ["#include <stddef.h>", "#include <stdio.h>"]
    lines += ['#include "ptc/%s"' % h for h in headers]
    lines.append("int main(void) {")
    for py, c in L.STRUCTS.items():
        lines.append('printf("%s size %%zu\\n", sizeof(%s));' % (py, c))
        for f in getattr(L, py)._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (py, f[0], c, f[0]))
    lines.append("return 0; }")
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "abi"
    r = subprocess.run([cc, "-D_GNU_SOURCE", "-I", inc, "-I", build_inc, *mpi_flags, str(src),
                        "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = dict(line.rsplit(" ", 1) for line in
               subprocess.run([str(exe)], capture_output=True, text=True,
                              check=True).stdout.splitlines())
    want = {}
    for py in L.STRUCTS:
        cls = getattr(L, py)
        want["%s size" % py] = str(ctypes.sizeof(cls))
        for f in cls._fields_:
            want["%s.%s" % (py, f[0])] = str(getattr(cls, f[0]).offset)
    bad = {k: (want[k], got.get(k)) for k in want if got.get(k) != want[k]}
    assert not bad, "ctypes (python) vs C (header) differ: %s" % bad


def test_dtype_enum_matches_library():
    from ptc import _arrays
    lib = L.lib()
    for name, (value, size) in _arrays.DTYPES.items():
        assert lib.ptc_dtype_name(value).decode() == name
        assert lib.ptc_dtype_size(value) == size
    assert lib.ptc_dtype_name(L.DTYPE_COUNT) == b"?"


def test_every_code_has_its_class():
    import ptc
    lib = L.lib()
    for code in range(-1, -19, -1):
        cls = ptc._errors.error_class(code)
        assert cls is not ptc.Error and cls.code == code
        assert lib.ptc_strerror(code)


def test_library_is_the_bundled_copy():
    if os.environ.get("PTC_EXPECT_BUNDLED") != "1":
        pytest.skip("run through tests/python/run.sh")
    import ptc
    path = ptc.library_path()
    assert os.path.dirname(path) == os.path.dirname(os.path.abspath(ptc.__file__)), path
