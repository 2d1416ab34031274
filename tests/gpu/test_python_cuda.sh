#!/bin/bash
# The Python package's CUDA paths for real (tests/python/test_device.py's
# tests selected by -k cuda: CUDA tensors saved and loaded under other
# configurations through the pinned ring, byte-exact; async_save of CUDA
# tensors is a snapshot; a DTensor state of CUDA local tensors saved,
# async-saved and loaded without a config; CUDA tensors saved and loaded
# across hosts through host copies): pytest with the package from the source tree and this build's
# libptc. Needs a Python with torch that sees a GPU (PY, default python3, or
# PTC_VENV's); without one it prints 'skipped: ...' and exits 77.
set -u
: "${PTC_SRC:?PTC_SRC must name the source tree}"
: "${PTC_BUILD:?PTC_BUILD must name the build folder}"
PY=${PY:-python3}
[ -n "${PTC_VENV:-}" ] && [ -x "$PTC_VENV/bin/python" ] && PY=$PTC_VENV/bin/python
if ! "$PY" -c 'import torch, pytest, numpy; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "skipped: $PY has no torch with a CUDA device (or no pytest)"
    exit 77
fi
cd "$PTC_SRC/tests/python" || exit 1
PTC_LIB="$PTC_BUILD/libptc.so" PYTHONPATH="$PTC_SRC/python${PYTHONPATH:+:$PYTHONPATH}" \
    exec "$PY" -m pytest -p no:cacheprovider -v -ra -o faulthandler_timeout=60 -k cuda test_device.py
