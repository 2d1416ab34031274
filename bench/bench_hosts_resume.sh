#!/bin/bash
# Cross-host resume against the link (issue #30's "time / (busiest host's
# bytes / measured link bandwidth) <= 1.5"), on 3 hosts made of network
# namespaces with private disks (tests/net/lib_net.sh; needs root). Each run:
# ptc train saves the demo MLP under tp=3 with --replicas 1 (one process per
# host), then bench_hosts_resume (bench/bench_hosts_resume.c) loads the
# newest version across hosts under pp=3 on the same hosts (recovery, reads
# from each host's own disk — in its page cache, just written — the plan's
# exchange over MPI/TCP on the veth links) and, in the same job, times a
# plain MPI_Send of the busiest host's bytes between two hosts: ratio =
# load seconds / send seconds (and ratio_alltoall: / an MPI all-to-all of
# the same bytes from every host at once). Three runs; one line each.
# The state: the demo MLP of 6 layers of hidden width BENCH_HIDDEN (default
# 1024: 680 MB of parameters and optimizer state over the hosts, state_bytes
# in the line, 134 MB from the busiest host; a run takes about 20 s), so
# that the bytes, not the load's fixed collective rounds (a few ms each),
# set its time; BENCH_HIDDEN=512 is the quick one (189 MB, 34 MB).
# After each run's line, each process's peak resident memory (that of the
# load's process: its destination tensors, the source shards it held at
# once — PTC_HOSTS_LOAD_BUDGET bounds them, passed on when set — and MPI's).
# Usage: bench/bench_hosts_resume.sh [BUILD_DIR] (BENCH_MODEL overrides the
# model, BENCH_RUNS the number of runs).
set -eu
B=${1:-build}
export PTC PTC_SRC
PTC=$(cd "$B" && pwd)/ptc
BENCH=$(cd "$B" && pwd)/bench_hosts_resume
PTC_SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$PTC_SRC/tests/net/lib_net.sh"
NET_PRIVATE=$T/store
net_setup 3
M=${BENCH_MODEL:-mlp:layers=6,hidden=${BENCH_HIDDEN:-1024},vocab=1024,tokens=4}
C=(--schedule 1f1b --microbatches 2 --model "$M" --seed 1 --timeout 120)
# the load's process under /usr/bin/time: its peak RSS (KiB) into $T/rss.RANK
printf '#!/bin/sh\nexec /usr/bin/time -o "%s/rss.$OMPI_COMM_WORLD_RANK" -f %%M "$@"\n' "$T" \
    >"$T/rss.sh"
chmod +x "$T/rss.sh"
BUDGET=()
[ -n "${PTC_HOSTS_LOAD_BUDGET:-}" ] && BUDGET=(-x PTC_HOSTS_LOAD_BUDGET)
for run in $(seq ${BENCH_RUNS:-3}); do
    rm -rf "$T/disks"/h*/*
    net_mpirun -np 3 "$PTC" train --config tp=3 "${C[@]}" --steps 1 --store "$T/store" \
        --save-every 1 --replicas 1 >"$T/save.out"
    printf 'run %s ' "$run"
    rm -f "$T"/rss.[0-9]*
    net_mpirun -np 3 "${BUDGET[@]}" ${BENCH_WRAP:-} "$T/rss.sh" "$BENCH" --store "$T/store" \
        --to pp=3
    printf 'run %s peak_rss_MB' "$run"
    for p in 0 1 2; do printf ' %s' $(($(cat "$T/rss.$p") / 1024)); done
    echo
done
trap - EXIT
net_cleanup
