#!/bin/bash
# A training job over 3 hosts made of network namespaces (tests/net/lib_net.sh)
# whose hosts share no filesystem: each host sees its own disk at the store's
# path (NET_PRIVATE: a bind mount in its mount namespace) and the others'
# disks not at all (a tmpfs over them). ptc train --replicas 1 saves every
# step, each host its rank's shards and a copy of the previous host's; then:
# 1. every host's store alone names the newest version it committed, and the
#    hosts agree;
# 2. host 2's processes are killed (kill -9) while the job runs and its disk
#    is wiped; the job resumes on hosts 0 and 1 (3 processes, the same
#    configuration) from the survivors' stores: the version every survivor
#    committed, at most one step lost (the one being saved), rank 2's state
#    (zero=1: its own AdamW moments) taken from host 0's copy over the
#    network, and the resumed steps' losses equal those of the same job run
#    without interruption, bit for bit;
# 3. --keep-local 2 leaves two versions on each disk, and the persistent
#    tier (--persist, every 4th version into one store all hosts reach) is an
#    ordinary store that verifies and resumes on a single host with the
#    uninterrupted run's losses;
# 4. where MPI has no MPI_THREAD_MULTIPLE, --save-async --replicas and the
#    persistent copy block instead (one notice): every step still saved.
# First, --replicas 3 on 3 hosts is refused before the first step.
. "$(dirname "$0")/lib_net.sh"
NET_PRIVATE=$T/store
net_setup 3
common=(--config dp=3,zero=1 --schedule 1f1b --microbatches 2 --model mlp:layers=4,hidden=8,vocab=16,tokens=4
    --seed 5 --timeout 60)
losses() { awk '/^step /{print $2, $4}' "$1"; }
wait_for() { # FILE REGEX: up to 60 s
    for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

# isolation: host 1 sees its own (empty) disk at the store's path, no other
[ "$("$T/agent" 10.177.0.2 "ls -A $T/disks | wc -l")" = 0 ] && ok || bad "host 1 sees the disks"
net_check_private "$T/store"

# the reference: the same job without interruption (no store)
net_mpirun -np 3 "$PTC" train "${common[@]}" --steps 40 >"$T/ref.out" 2>"$T/ref.err" ||
    { cat "$T/ref.err" >&2; bad "the reference run failed"; finish; }

# --replicas 3 on 3 hosts: refused before the first step (every save would fail)
if net_mpirun -np 3 "$PTC" train "${common[@]}" --steps 2 --store "$T/store" --save-every 1 \
    --replicas 3 >"$T/k.out" 2>"$T/k.err"; then bad "a job with --replicas 3 ran on 3 hosts"
else
    ! grep -q '^step ' "$T/k.out" &&
        grep -q 'ptc: error: .*--replicas 3 needs more than 3 hosts (there are 3)' "$T/k.err" &&
        ok || { cat "$T/k.out" "$T/k.err" >&2; bad "--replicas 3: no error before the first step"; }
fi

# 1. 40 steps saving every step, host 2 killed at step 8
net_mpirun -np 3 "$PTC" train "${common[@]}" --steps 40 --store "$T/store" --save-every 1 \
    --replicas 1 --keep-local 2 --persist "$T/persist" --persist-every 4 --jitter 30 \
    >"$T/a.out" 2>"$T/a.err" &
mpid=$!
if wait_for "$T/a.out" "^step 8 "; then ok; else cat "$T/a.out" "$T/a.err" >&2; bad "no step 8"; fi
for pid in $(ip netns pids "$NET-h2"); do
    case "$(cat /proc/$pid/comm 2>/dev/null)" in ptc*) kill -9 "$pid" ;; esac
done
wait $mpid && bad "the job went on without host 2" || ok
# mpirun is gone; its daemons end the survivors' processes a moment later
# (until then one may still hold its store's writer lock)
for _ in $(seq 100); do
    left=0
    for h in 0 1; do
        for pid in $(ip netns pids "$NET-h$h"); do
            case "$(cat /proc/$pid/comm 2>/dev/null)" in ptc* | orted) left=1 ;; esac
        done
    done
    [ $left = 0 ] && break
    sleep 0.1
done
[ $left = 0 ] && ok || bad "the survivors' processes outlived mpirun by 10 s"
last=$(awk '/^step /{s=$2} END{print s}' "$T/a.out")
# each survivor's store alone: its journal's newest committed version
# (docs/format.md §10.1: a 56-byte record, the version at offset 24)
newest() { python3 -c '
import struct, sys
print(struct.unpack_from("<Q", open(sys.argv[1], "rb").read(), 24)[0])' "$T/disks/h$1/hosts/committed"; }
n0=$(newest 0) n1=$(newest 1)
echo "killed after step $last: host 0 holds up to version $n0, host 1 up to $n1"
[ -n "$n0" ] && [ -n "$n1" ] && ok || bad "no versions on the survivors"

# --keep-local 2: two committed versions' parts on each disk, and at most
# two more: a kill between a host's local commit of the next version's part
# and the trim of the oldest leaves one (the next save's recovery settles
# the part in doubt; the trim follows the commit), and the version the
# persistent tier's copy is reading stays until the copy ends (pinned; on a
# loaded machine the copy of version 4k may still run at the kill)
for h in 0 1; do
    n=$("$PTC" versions --store "$T/disks/h$h" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))')
    [ "$n" -le 4 ] && [ "$n" -ge 1 ] && ok || bad "host $h keeps $n versions (--keep-local 2)"
done
# the files of the versions it deleted are kept as spares for the next save
# to overwrite (docs/format.md §7): a killed job leaves them (or, killed
# inside a save that had taken them, that save's debris); the disk verifies
"$PTC" verify --store "$T/disks/h0" >/dev/null && ok || bad "ptc verify of host 0's disk after the kill"

# 2. host 2 and its disk are gone: resume on hosts 0 and 1
rm -rf "$T/disks/h2"
printf '10.177.0.1 slots=2\n10.177.0.2 slots=1\n' >"$T/hosts2"
if ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$T/hosts2" --map-by slot \
    --bind-to none "${NET_MPI_OPTS[@]}" -np 3 "$PTC" train "${common[@]}" --steps 4 \
    --store "$T/store" --save-every 1 --replicas 1 --resume >"$T/b.out" 2>"$T/b.err"; then ok
else cat "$T/b.out" "$T/b.err" >&2; bad "the resume on 2 hosts failed"; finish; fi
# ranks 0, 1 on host 0 and rank 2 on host 1 now: rank 1's AdamW moments
# (zero=1: its own) come from host 1, rank 2's from host 0's copy
moved=$(sed -nE 's/^resume moved ([0-9]+) bytes between hosts.*/\1/p' "$T/b.out")
[ -n "$moved" ] && [ "$moved" -gt 0 ] && ok || bad "the resume moved no bytes between hosts"
grep -E '^resume' "$T/b.out"
S=$(sed -nE 's/^resumed from version ([0-9]+) at step ([0-9]+).*/\2/p' "$T/b.out")
V=$(sed -nE 's/^resumed from version ([0-9]+) at step.*/\1/p' "$T/b.out")
[ "$V" = "$(( n0 < n1 ? n0 : n1 ))" ] || [ "$V" = "$(( n0 > n1 ? n0 : n1 ))" ] && ok ||
    bad "resumed version $V, survivors hold $n0 and $n1"
[ -n "$S" ] && [ "$S" -ge "$last" ] && ok || bad "resumed at step $S, the job had printed step $last"
if [ "$(losses "$T/b.out")" = "$(losses "$T/ref.out" | awk -v s="$S" '$1 >= s && $1 < s + 4')" ]; then ok
else bad "resumed losses differ: $(losses "$T/b.out" | tr '\n' ' ') vs the uninterrupted run's"; fi

# 3. the persistent tier (every 4th version, one store all hosts reach)
# loads on a fresh single host: an ordinary store, verified, resumed
"$PTC" verify --store "$T/persist" >/dev/null && ok || bad "ptc verify of the persistent tier"
if mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$PTC" train "${common[@]}" \
    --steps 2 --store "$T/persist" --resume >"$T/c.out" 2>"$T/c.err"; then ok
else cat "$T/c.err" >&2; bad "resume from the persistent tier failed"; fi
P=$(sed -nE 's/^resumed from version [0-9]+ at step ([0-9]+).*/\1/p' "$T/c.out")
[ -n "$P" ] && [ $((P % 4)) = 0 ] && [ "$P" -le "$last" ] && ok ||
    bad "the persistent tier resumed at step $P (every 4th, at most $last)"
if [ "$(losses "$T/c.out")" = "$(losses "$T/ref.out" | awk -v s="$P" '$1 >= s && $1 < s + 2')" ]; then ok
else bad "losses after the persistent tier's version differ from the uninterrupted run's"; fi

# 4. an MPI without MPI_THREAD_MULTIPLE (the test build's
# PTC_FAULT_MPI_SINGLE=1 acts as one): --save-async with --replicas and the
# persistent tier's copy run on the job's thread, with one notice; every
# step saved on hosts 0 and 1, the same losses, the persistent copy verifies
rm -rf "$T/disks/h0/"* "$T/disks/h1/"* "$T/persist"
if ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$T/hosts2" --map-by slot \
    --bind-to none "${NET_MPI_OPTS[@]}" -x PTC_FAULT_MPI_SINGLE=1 -np 3 "$PTC" train "${common[@]}" \
    --steps 6 --store "$T/store" --save-every 1 --save-async --replicas 1 --persist "$T/persist" \
    --persist-every 2 --keep-local 3 >"$T/d.out" 2>"$T/d.err"; then ok
else cat "$T/d.out" "$T/d.err" >&2; bad "the job without MPI_THREAD_MULTIPLE failed"; fi
[ "$(grep -c 'needs MPI_THREAD_MULTIPLE' "$T/d.err")" = 1 ] && ok ||
    { cat "$T/d.err" >&2; bad "not one notice that the saves block"; }
[ "$(losses "$T/d.out")" = "$(losses "$T/ref.out" | head -n 6)" ] && ok ||
    bad "losses without MPI_THREAD_MULTIPLE differ from the uninterrupted run's"
n0=$(newest 0) n1=$(newest 1)
[ "$n0" = 6 ] && [ "$n1" = 6 ] && ok || bad "hosts 0 and 1 committed up to $n0 and $n1 (want 6)"
# a job that ended: its last save removed the spares with the versions it dropped
for h in 0 1; do
    n=$("$PTC" versions --store "$T/disks/h$h" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))')
    [ "$n" = 3 ] && [ ! -e "$T/disks/h$h/packs/spare" ] && ok ||
        bad "host $h: $n versions (--keep-local 3), spares: $(ls "$T/disks/h$h/packs/spare" 2>&1)"
done
"$PTC" verify --store "$T/persist" >/dev/null && ok || bad "ptc verify of the persistent copy"
finish
