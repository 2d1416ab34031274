#!/bin/sh
# Runs every benchmark in the build directory; each prints its own baseline
# and the ratio. Figures go to stdout; set BENCH_QUICK=1 for short runs.
set -eu
build=${1:-build}
q=""
[ -n "${BENCH_QUICK:-}" ] && q="--quick"
for b in "$build"/bench_*; do
    [ -x "$b" ] || continue
    printf '\n== %s\n' "$(basename "$b")"
    "$b" $q
done
