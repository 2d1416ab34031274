#!/bin/sh
# Runs every benchmark in the build directory; each prints its own baseline
# measured in the same run and the ratio; the MPI ones run under mpirun, and
# bench/bench_train_data.sh times ptc train through a mount, bench/bench_startup.sh
# the start-up of light commands.
set -eu
build=${1:-build}
mpi_root=""
[ "$(id -u)" -eq 0 ] && mpi_root="--allow-run-as-root"
for b in "$build"/bench_*; do
    [ -x "$b" ] || continue
    name=$(basename "$b")
    printf '\n== %s\n' "$name"
    case "$name" in
    bench_exec | bench_ckpt | bench_resize)
        mpirun $mpi_root --oversubscribe -np 4 "$b" ;;
    *) (cd "$build" && "./$name") ;;
    esac
done
printf '\n== bench_train_data.sh\n'
bash "$(dirname "$0")/../bench/bench_train_data.sh" "$build/ptc"
# ptc elastic: one reconfiguration's downtime, online resize vs restart vs failure
printf '\n== bench_elastic.sh\n'
bash "$(dirname "$0")/../bench/bench_elastic.sh" "$build"
# start-up of light commands and the idle mount daemon against issue 17's goals
printf '\n== bench_startup.sh\n'
bash "$(dirname "$0")/../bench/bench_startup.sh" "$build"
