#!/bin/sh
# make bench-python: the checkpoint benchmark (DCP against ptc.save/ptc.load)
# with the package installed into the venv of `make deps` (or $PTC_VENV),
# bundling the libptc of build folder $1. Figures go to $1/bench_ckpt.json.
# The state is --state m (565 MiB), so that the whole run — save, async
# save, loads into 2 and 8 ranks with both destinations, cold and warm, both
# sides, the plain-I/O bounds — takes a few minutes on 2 cores; further
# arguments (BENCH_ARGS of the Makefile) are bench_ckpt.py's and win.
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${PTC_VENV:-$src/.venv}/bin/python
"$py" -m pip install -q --no-input --no-build-isolation --no-deps --force-reinstall \
    -C cmake.define.PTC_LIBRARY="$(cd "$build" && pwd)/libptc.so" "$src/python" </dev/null
exec "$py" "$src/bench/python/bench_ckpt.py" --json "$build/bench_ckpt.json" \
    --state m --load-worlds 2,8 --io-reps 2 "$@"
