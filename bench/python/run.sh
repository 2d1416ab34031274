#!/bin/sh
# make bench-python: the checkpoint benchmark (DCP against ptc.save/ptc.load)
# with the package installed into the venv of `make deps`, bundling the
# libptc of build folder $1. Figures go to $1/bench_ckpt.json.
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${PTC_VENV:-$src/.venv}/bin/python
"$py" -m pip install -q --no-input --no-build-isolation --no-deps --force-reinstall \
    -C cmake.define.PTC_LIBRARY="$(cd "$build" && pwd)/libptc.so" "$src/python" </dev/null
exec "$py" "$src/bench/python/bench_ckpt.py" --json "$build/bench_ckpt.json"
