#!/bin/bash
# Saving every step across hosts, against not saving, in one run (issue #30:
# step time with ÷ without saving <= 1.05 for >= 1 GiB of state over 4
# processes and a step of >= 1 s). Four hosts made of network namespaces
# (tests/net/lib_net.sh; needs root), one process each, each host's store
# on RAM of its own (the memory tier: a tmpfs at /dev/shm/NAME, as
# tests/net/test_net_hosts_mem.sh), the demo MLP as tp=4 so that the state
# (parameters and both AdamW moments, f32) is spread over the 4 processes.
# The same job runs twice with the same seed: without a store, and with
# --store --save-every 1 --save-async --replicas 1 --keep-local 2 (the
# snapshot, the replica exchange, writes and two-phase commit on a thread
# of the library, niced: PTC_SAVE_NICE, docs/checkpoint.md; the optimizer
# waits for the snapshot). The ranks' MPI waits back off to naps in both
# jobs (base/mpi.c), as does Open MPI between polls (lib_net.sh).
#
# Simulated compute: the model's own compute is kept small (4 tokens per
# microbatch); each of a process's 4 compute actions per step (1f1b, 2
# microbatches) sleeps a random 0..J ms first (--jitter J, seeded by --seed:
# both runs sleep the same sequence), so a step is ~2·J ms of a processor
# left idle, as a GPU's compute leaves the host's CPU.
#
# Step time: the wall time between consecutive "step K" lines of rank 0 (a
# step plus the step boundary, where a save's snapshot is taken and the
# previous save must have committed), the first 2 steps left out (warm-up:
# the first snapshot allocates its area): "ratio". "ratio_steady" leaves out
# the first 2 + 3 intervals too: the first --keep-local + 1 = 3 saves fill
# the store with RAM never used before (no version dropped yet, so no spare
# pack file to overwrite, docs/format.md §7), which this machine gives at
# ~2.5 GB/s a core; from the 4th save on each one overwrites the files of
# the version it dropped, the state a long job saving every step is in.
# Prints a line per job and the ratios; --json prints one JSON object
# instead.
# Usage: bench/bench_hosts_save.sh [--json] [BUILD_DIR]
#   BENCH_LAYERS, BENCH_HIDDEN (state size), BENCH_JITTER (J, ms),
#   BENCH_STEPS override the defaults (11, 1024, 600, 16: 92M parameters, 1.1 GB of state).
set -eu
json=0
if [ "${1:-}" = --json ]; then json=1; shift; fi
B=${1:-build}
export PTC PTC_SRC
PTC=$(cd "$B" && pwd)/ptc
PTC_SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$PTC_SRC/tests/net/lib_net.sh"
L=${BENCH_LAYERS:-11} H=${BENCH_HIDDEN:-1024} J=${BENCH_JITTER:-600} S=${BENCH_STEPS:-16}
shm=/dev/shm/ptc-bench-$$
mkdir -p "$T/disks" "$shm"
mount -t tmpfs -o size=12g ptc-bench "$T/disks"
cleanup_bench() { umount -l "$T/disks" 2>/dev/null || true; rmdir "$shm" 2>/dev/null || true; net_cleanup; }
trap cleanup_bench EXIT
NET_PRIVATE=$shm
net_setup 4
C=(--config tp=4 --schedule 1f1b --microbatches 2 --model "mlp:layers=$L,hidden=$H,vocab=64,tokens=4"
    --seed 3 --timeout 600 --jitter "$J" --steps "$S")
# rank 0's step lines, stamped as they come: the mean interval after step 2
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }
# interval_ms FILE FIRST: the mean interval of the steps after step FIRST
interval_ms() {
    awk -v f="$2" '$2 == "step" && $3 >= f {if (p) {s += $1 - p; n++} p = $1} END{printf "%.1f", n ? 1000 * s / n : 0}' "$1"
}
net_mpirun -np 4 "$PTC" train "${C[@]}" 2>"$T/plain.err" | stamp >"$T/plain.out" ||
    { cat "$T/plain.err" >&2; exit 1; }
net_mpirun -np 4 "$PTC" train "${C[@]}" --store "$shm" --save-every 1 --save-async --replicas 1 \
    --keep-local 2 2>"$T/save.err" | stamp >"$T/save.out" || { cat "$T/save.err" >&2; exit 1; }
plain=$(interval_ms "$T/plain.out" 2) save=$(interval_ms "$T/save.out" 2)
ratio=$(awk -v a="$save" -v b="$plain" 'BEGIN{printf "%.3f", a / b}')
plain_st=$(interval_ms "$T/plain.out" 5) save_st=$(interval_ms "$T/save.out" 5)
ratio_st=$(awk -v a="$save_st" -v b="$plain_st" 'BEGIN{printf "%.3f", a / b}')
# the state: the bytes of the collection a version holds (every tensor whole)
state=$("$PTC" versions --store "$T/disks/h0" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["versions"][-1]["bytes"])')
if [ $json = 1 ]; then
    printf '{"processes": 4, "hosts": 4, "model": "mlp:layers=%s,hidden=%s", "state_bytes": %s, "jitter_ms": %s, "steps": %s, "step_ms_without_saving": %s, "step_ms_saving_every_step": %s, "ratio": %s, "steady_step_ms_without_saving": %s, "steady_step_ms_saving_every_step": %s, "ratio_steady": %s}\n' \
        "$L" "$H" "$state" "$J" "$S" "$plain" "$save" "$ratio" "$plain_st" "$save_st" "$ratio_st"
else
    printf 'state %s bytes over 4 processes; step without saving %s ms, saving every step (--save-async --replicas 1, memory tier) %s ms; ratio %s\n' \
        "$state" "$plain" "$save" "$ratio"
    printf 'after the 3 saves that fill the store: without saving %s ms, saving every step %s ms; ratio_steady %s\n' \
        "$plain_st" "$save_st" "$ratio_st"
fi
grep -h "warn\|MPI_THREAD" "$T/save.err" >&2 || true
