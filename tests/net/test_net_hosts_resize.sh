#!/bin/bash
# Online resize of a job whose hosts share no filesystem (ptc train --replicas
# K --resize), on 3 hosts with private disks (tests/net/lib_net.sh,
# NET_PRIVATE): tp=3 over the 3 hosts, saving every step with --replicas 1
# (in the background: --save-async) and resized in memory to tp=2 at step 2
# (host 2's process stays idle); then
# 1. every loss equals the same job's without a store, bit for bit, and the
#    versions after the resize are saved across hosts 0 and 1 (host 2's
#    store keeps the versions before it);
# 2. a resume under tp=2 on hosts 0 and 1 continues from the step-4 version
#    with the losses of the uninterrupted 6-step job;
# 3. host 1's disk lost: the resume on hosts 0 and 2 reads host 1's ranks
#    from the replica saved after the resize on host 0, host 2 (whose store
#    lacks the version) receives its ranks over the network, same losses;
# 4. with --replicas 2 a resize to tp=2 (hosts 0 and 1) leaves too few hosts
#    for the copies: a planned one (--resize) fails the job at its start, one
#    from the control file is said and ignored, the job going on under tp=3
#    and saving across the 3 hosts; both messages name the hosts and K.
. "$(dirname "$0")/lib_net.sh"
NET_PRIVATE=$T/private
net_setup 3
S=$T/private/store
job=(--schedule 1f1b --microbatches 2 --model mlp:layers=6,hidden=24,vocab=32,tokens=4
    --seed 5 --timeout 60)
losses() { awk '/^step /{print $2, $4}' "$1"; }
hosts() { # hosts I J...: a hostfile of those hosts, one slot each
    local f=$T/hosts.$(echo "$@" | tr ' ' _) i
    : >"$f"
    for i in "$@"; do echo "10.177.0.$((i + 1)) slots=1" >>"$f"; done
    echo "$f"
}
on() { # on HOSTFILE ARGS...: mpirun of one process per host of HOSTFILE
    local hf=$1
    shift
    ip netns exec "$NET-l" mpirun --allow-run-as-root --hostfile "$hf" --map-by slot \
        --bind-to none "${NET_MPI_OPTS[@]}" -np "$(wc -l <"$hf")" "$@"
}

# the reference: no store, the same resize, 6 steps
net_mpirun -np 3 "$PTC" train --config tp=3 "${job[@]}" --steps 6 --resize 2:tp=2 \
    >"$T/ref.out" 2>"$T/ref.err" || { cat "$T/ref.err" >&2; bad "the reference run"; finish; }

# 1. with stores on each host
if net_mpirun -np 3 "$PTC" train --config tp=3 "${job[@]}" --steps 4 --resize 2:tp=2 \
    --store "$S" --save-every 1 --replicas 1 --save-async >"$T/a.out" 2>"$T/a.err"; then ok
else cat "$T/a.err" >&2; bad "the job with --replicas and --resize failed"; finish; fi
grep -q '^resize at step 2 (planned): dp=1,tp=3,pp=1 -> dp=1,tp=2,pp=1' "$T/a.out" && ok ||
    bad "no resize reported: $(cat "$T/a.out")"
[ "$(losses "$T/a.out")" = "$(losses "$T/ref.out" | head -4)" ] && [ -n "$(losses "$T/a.out")" ] &&
    ok || bad "losses differ from the job without a store: $(losses "$T/a.out" | tr '\n' ' ')"
grep -q '^saved version 4 (step 4)' "$T/a.out" && ok || bad "no version 4 at step 4: $(cat "$T/a.out")"
nv() { "$PTC" versions --store "$T/disks/h$1/store" --json |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))'; }
[ "$(nv 0)" = 4 ] && [ "$(nv 1)" = 4 ] && [ "$(nv 2)" -lt 4 ] && ok ||
    bad "versions per host: $(nv 0) $(nv 1) $(nv 2) (host 2 idle after the resize)"

# 2. resume under tp=2 on hosts 0 and 1
H01=$(hosts 0 1)
on "$H01" "$PTC" train --config tp=2 "${job[@]}" --steps 2 --store "$S" --replicas 1 --resume \
    >"$T/b.out" 2>"$T/b.err" || { cat "$T/b.err" >&2; bad "the resume on hosts 0 and 1"; }
grep -q '^resumed from version 4 at step 4' "$T/b.out" && ok || bad "resume: $(cat "$T/b.out")"
[ "$(losses "$T/b.out")" = "$(losses "$T/ref.out" | tail -2)" ] && ok ||
    bad "losses after the resume differ: $(losses "$T/b.out" | tr '\n' ' ')"

# 3. host 1's disk lost: hosts 0 and 2 (host 2 holds no part of version 4)
rm -rf "$T/disks/h1"/*
H02=$(hosts 0 2)
on "$H02" "$PTC" train --config tp=2 "${job[@]}" --steps 2 --store "$S" --replicas 1 --resume \
    >"$T/c.out" 2>"$T/c.err" || { cat "$T/c.err" >&2; bad "the resume on hosts 0 and 2"; }
grep -q '^resumed from version 4 at step 4' "$T/c.out" && ok || bad "resume: $(cat "$T/c.out")"
[ "$(losses "$T/c.out")" = "$(losses "$T/ref.out" | tail -2)" ] && ok ||
    bad "losses after the resume on hosts 0 and 2 differ: $(losses "$T/c.out" | tr '\n' ' ')"

# 4. --replicas 2: every later save needs 3 hosts; tp=2 runs on 2
few="resize to dp=1,tp=2,pp=1: its 2 processes run on 2 hosts ($NET-h0, $NET-h1), and --replicas 2 needs 3 or more"
if net_mpirun -np 3 "$PTC" train --config tp=3 "${job[@]}" --steps 3 --resize 1:tp=2 \
    --store "$T/private/s4" --save-every 1 --replicas 2 >"$T/d.out" 2>"$T/d.err"; then
    bad "a planned resize to 2 hosts with --replicas 2 ran: $(cat "$T/d.out")"
else
    grep -qxF "ptc: error: --resize at step 1: $few" "$T/d.err" && ok ||
        bad "planned resize refused with: $(cat "$T/d.err")"
fi
echo "resize tp=2" >"$T/ctl"
net_mpirun -np 3 "$PTC" train --config tp=3 "${job[@]}" --steps 2 --control "$T/ctl" \
    --store "$T/private/s5" --save-every 1 --replicas 2 >"$T/e.out" 2>"$T/e.err" ||
    { cat "$T/e.err" >&2; bad "the job told to resize to 2 hosts with --replicas 2 failed"; }
grep -qxF "ptc: warning: control file $T/ctl: $few; ignored, the job goes on" "$T/e.err" && ok ||
    bad "control-file resize refused with: $(cat "$T/e.err")"
# steps 0 and 1 under tp=3: the reference's before its resize at step 2
! grep -q '^resize at step' "$T/e.out" && grep -q '^saved version 2 (step 2)' "$T/e.out" &&
    [ "$(losses "$T/e.out")" = "$(losses "$T/ref.out" | head -2)" ] && ok ||
    bad "the job did not go on under tp=3: $(cat "$T/e.out")"
nv5() { "$PTC" versions --store "$T/disks/h$1/s5" --json |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))'; }
[ "$(nv5 0) $(nv5 1) $(nv5 2)" = "2 2 2" ] && ok || bad "versions per host: $(nv5 0) $(nv5 1) $(nv5 2)"
finish
