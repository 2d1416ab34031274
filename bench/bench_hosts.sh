#!/bin/bash
# A job over 3 hosts without a shared filesystem (ptc train --replicas,
# docs/checkpoint.md "Across hosts"), on hosts made of network namespaces
# with private disks (tests/net/lib_net.sh; needs root). Three runs, each:
#   step      one process per host, the demo MLP as dp=3,zero=1: mean step
#             time (ms) without saving, saving every step with --replicas 1,
#             and saving every step to one shared store (the single-store
#             path); ratios against no saving;
#   resume    host 2 lost (its disk wiped): load time of the resume on hosts
#             0 and 1 from the survivors' stores and replicas (the bytes the
#             plan moved between hosts and their lower bound) against the
#             resume of the same job from the shared store;
#   recovery  ptc elastic over 3 hosts of 2 slots (--tp 2), saving every
#             step; kill -9 of host 2's processes (its disk replaced by an
#             empty one on the node-local path) after step 6: the downtime
#             from the failure's detection to the first step of the relaunch
#             (the controller's reconfiguration event: detect, plan, load,
#             restart) and the steps lost, for node-local stores with
#             --replicas 1 and for one shared store; ratio shared / replicas.
# Saves are synchronous (each step waits for its commit). The "shared
# store" is a directory every namespace sees on this machine's disk, not a
# network filesystem: its loads cost what local loads cost.
# Usage: bench/bench_hosts.sh [--json] [--only steps|recovery] [BUILD_DIR]
# (BENCH_MODEL, BENCH_STEPS override the model and the steps of the step
# table). --json: one object per run.
set -eu
JSON=0 ONLY=""
while [ $# -gt 0 ]; do
    case $1 in
    --json) JSON=1 ;;
    --only) ONLY=$2; shift ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    *) break ;;
    esac
    shift
done
case "$ONLY" in "" | steps | recovery) ;; *) echo "bench_hosts: --only steps|recovery" >&2; exit 2 ;; esac
B=${1:-build}
export PTC PTC_SRC
PTC=$(cd "$B" && pwd)/ptc
PTC_SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$PTC_SRC/tests/net/lib_elastic_hosts.sh"
M=${BENCH_MODEL:-mlp:layers=8,hidden=256,vocab=512,tokens=16}
S=${BENCH_STEPS:-20}
C=(--config dp=3,zero=1 --schedule 1f1b --microbatches 2 --model "$M" --seed 1 --timeout 120)
mean_ms() { awk '/^step /{s+=$6; n++} END{printf "%.2f", s/n}' "$1"; }
load_ms() { sed -nE 's/^resumed from .* load ([0-9.]+) ms.*/\1/p' "$1"; }
printf '10.177.0.1 slots=2\n10.177.0.2 slots=1\n' >"$T/hosts2"
printf '10.177.0.1 slots=2\n10.177.0.2 slots=2\n10.177.0.3 slots=2\n' >"$T/hosts6"

# the step and resume table of one run: prints its fields
steps_run() {
    rm -rf "$T/disks"/h*/* "$T/shared"
    net_mpirun -np 3 "$PTC" train "${C[@]}" --steps "$S" >"$T/plain.out"
    net_mpirun -np 3 "$PTC" train "${C[@]}" --steps "$S" --store "$T/store" --save-every 1 \
        --replicas 1 >"$T/rep.out"
    net_mpirun -np 3 "$PTC" train "${C[@]}" --steps "$S" --store "$T/shared" --save-every 1 \
        >"$T/shared.out"
    rm -rf "$T/disks/h2"/*
    ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$T/hosts2" \
        --map-by slot --bind-to none "${NET_MPI_OPTS[@]}" -np 3 "$PTC" train "${C[@]}" --steps 1 \
        --store "$T/store" --replicas 1 --resume >"$T/rh.out"
    ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$T/hosts2" \
        --map-by slot --bind-to none "${NET_MPI_OPTS[@]}" -np 3 "$PTC" train "${C[@]}" --steps 1 \
        --store "$T/shared" --resume >"$T/rs.out"
    p=$(mean_ms "$T/plain.out") r=$(mean_ms "$T/rep.out") sh=$(mean_ms "$T/shared.out")
    mv=$(sed -nE 's/^resume moved ([0-9]+) bytes between hosts \(lower bound ([0-9]+)\)/\1 \2/p' "$T/rh.out")
    lh=$(load_ms "$T/rh.out") ls=$(load_ms "$T/rs.out")
}

# recovery PATH (replicas|shared): the elastic job, host 2 lost after step
# 6; sets dt (downtime s), lost (steps), parts (detect/plan/load/restart s)
recovery() {
    local st=$T/store args=(--replicas 1)
    rm -rf "$T/disks"/h*/* "$T/shared"
    if [ "$1" = shared ]; then st=$T/shared args=(); mkdir "$st"; fi
    "$PTC" elastic --store "$st" --hostfile "$T/hosts6" --mpirun "$T/mpirun" --tp 2 \
        --watchdog 120 --json -- ptc train --schedule 1f1b --microbatches 4 --model "$M" \
        --seed 1 --save-every 1 --steps 12 "${args[@]}" >"$T/rec.log" 2>"$T/rec.out" &
    local epid=$!
    wait_for "$T/rec.out" "^step 6 " || { cat "$T/rec.out" >&2; exit 1; }
    kill_host 2
    [ "$1" = shared ] || replace_disk 2
    wait $epid || { cat "$T/rec.log" "$T/rec.out" >&2; exit 1; }
    if ! grep -q '"reconfigure"' "$T/rec.log"; then # the kill came too late: no failure
        echo "bench_hosts: $1: no reconfiguration (the job's log follows)" >&2
        cat "$T/rec.log" >&2
        grep -v '^step ' "$T/rec.out" >&2
        dt=- lost=- parts=-
        return 0
    fi
    read -r dt lost parts <<<"$(python3 -c '
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if "\"reconfigure\"" in l][0]
print("%.3f %d %.3f/%.3f/%.3f/%.3f" % (e["downtime_s"], e["steps_lost"], e["detect_s"],
      e["plan_s"], e["load_s"], e["restart_s"]))' "$T/rec.log")"
}

[ $JSON = 1 ] || printf '%-4s %10s %14s %7s %10s %7s %11s %11s %20s %12s %12s %7s %5s\n' run plain_ms \
    replicas1_ms ratio shared_ms ratio load_hosts load_shared moved/bound rec_replicas rec_shared \
    ratio lost
for run in 1 2 3; do
    p=- r=- sh=- mv="- -" lh=- ls=- rdt=- sdt=- rl=- sl=- rparts=- sparts=-
    if [ "$ONLY" != recovery ]; then steps_run; fi
    if [ "$ONLY" != steps ]; then
        recovery replicas
        rdt=$dt rl=$lost rparts=$parts
        recovery shared
        sdt=$dt sl=$lost sparts=$parts
    fi
    ratio() { [ "$1" = - ] || [ "$2" = - ] && echo null || echo "$1 / $2" | bc -l | xargs printf '%.2f'; }
    read -r mvb mvl <<<"$mv"
    if [ $JSON = 1 ]; then
        printf '{"run":%d,"plain_ms":%s,"replicas_ms":%s,"shared_ms":%s,"load_hosts_ms":%s,"load_shared_ms":%s,"moved_bytes":%s,"moved_lower_bound":%s,"recovery_replicas_s":%s,"recovery_shared_s":%s,"recovery_ratio":%s,"steps_lost_replicas":%s,"steps_lost_shared":%s,"save_interval":1,"parts_replicas":"%s","parts_shared":"%s"}\n' \
            "$run" "${p/-/null}" "${r/-/null}" "${sh/-/null}" "${lh/-/null}" "${ls/-/null}" \
            "${mvb/-/null}" "${mvl/-/null}" "${rdt/-/null}" "${sdt/-/null}" "$(ratio "$sdt" "$rdt")" \
            "${rl/-/null}" "${sl/-/null}" "$rparts" "$sparts"
    else
        printf '%-4s %10s %14s %7s %10s %7s %11s %11s %20s %12s %12s %7s %5s\n' "$run" "$p" "$r" \
            "$(ratio "$r" "$p")" "$sh" "$(ratio "$sh" "$p")" "$lh" "$ls" "$mvb/$mvl" "$rdt" "$sdt" \
            "$(ratio "$sdt" "$rdt")" "$rl/$sl"
    fi
done
[ $JSON = 1 ] || echo "recovery parts (detect/plan/load/restart s), last run: replicas $rparts, shared $sparts"
trap - EXIT
net_cleanup
