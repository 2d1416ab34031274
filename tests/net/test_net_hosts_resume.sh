#!/bin/bash
# A resume under another configuration across 3 hosts that share no
# filesystem (tests/net/lib_net.sh, NET_PRIVATE: each host sees only its own
# disk at the store's path): the bytes that cross the veth links equal the
# plan's network bytes, and no host reads another's disk. With
# PTC_TEST_FULL=1 (test_net_hosts_resume_all.sh, label slow) also pp=3 ->
# tp=3, tp=3 -> dp=3,zero=1 and dp=3,zero=1 -> pp=3.
#
# ptc train saves a state under tp=3 with --replicas 1 (each host its rank's
# shards and a copy of the previous host's), then resumes it under pp=3 on
# the same hosts: the plan moves what each pp stage lacks between hosts and
# the job prints "resume moved N bytes between hosts (lower bound M)".
#
# The links also carry what is not the state: the launch (mpirun's daemons),
# MPI's wire-up, the resumed step's traffic, the save after it, the agreement
# messages of the load. To isolate the state's bytes, the same resume runs
# first from a state saved under pp=3 itself (the plan moves nothing: every
# rank's shards are on its own host), and its link bytes are the baseline:
# the two resumes differ only in what the load moves. The check: (bytes
# sent on the 3 hosts' eth0 during the resume) − (the same during the
# baseline resume) equals N within 5 %. Every byte between two hosts leaves
# one host's eth0 once (the bridge forwards it to the other), so the sum of
# the hosts' tx counters counts it once; TCP/IP headers and acknowledgements
# are in it (a few tenths of a percent with the veth's segmentation offload).
. "$(dirname "$0")/lib_net.sh"
NET_PRIVATE=$T/store
net_setup 3
model=mlp:layers=6,hidden=256,vocab=512,tokens=4
common=(--schedule 1f1b --microbatches 2 --model "$model" --seed 5 --timeout 60)

# no host can open another's disk: the store's path is each host's own
# folder (its inode), and the folder holding the disks is an empty tmpfs
for h in 0 1 2; do
    [ "$("$T/agent" 10.177.0.$((h + 1)) "stat -c %i $T/store")" = "$(stat -c %i "$T/disks/h$h")" ] &&
        ok || bad "host $h's store path is not its own disk"
    [ "$("$T/agent" 10.177.0.$((h + 1)) "ls -A $T/disks | wc -l")" = 0 ] && ok ||
        bad "host $h sees the disks"
done

tx_sum() { local s=0 h; for h in 0 1 2; do s=$((s + $(net_bytes $h tx))); done; echo $s; }

# save under FROM into fresh disks, then resume under TO and count the
# bytes on the links during the resume; prints "LINK_BYTES MOVED LOWER"
run() {
    rm -rf "$T"/disks/h*/* "$T"/disks/h*/.[!.]* 2>/dev/null
    net_mpirun -np 3 "$PTC" train --config "$1" "${common[@]}" --steps 1 --store "$T/store" \
        --save-every 1 --replicas 1 >"$T/save.out" 2>"$T/save.err" ||
        { cat "$T/save.err" >&2; bad "the save under $1 failed"; return 1; }
    local a b
    a=$(tx_sum)
    net_mpirun -np 3 "$PTC" train --config "$2" "${common[@]}" --steps 1 --store "$T/store" \
        --replicas 1 --resume >"$T/resume.out" 2>"$T/resume.err" ||
        { cat "$T/resume.err" >&2; bad "the resume from $1 failed"; return 1; }
    b=$(tx_sum)
    sed -nE "s/^resume moved ([0-9]+) bytes between hosts \(lower bound ([0-9]+)\)/$((b - a)) \1 \2/p" \
        "$T/resume.out"
}
# FROM TO: the bytes of a resume from a FROM state under TO on the links
check() {
    local base moved0 link moved lower net
    read -r base moved0 _ < <(run "$2" "$2")
    read -r link moved lower < <(run "$1" "$2")
    echo "baseline resume under $2 (nothing to move): $base link bytes, plan $moved0"
    echo "resume $1 -> $2: $link link bytes, plan $moved (lower bound $lower)"
    [ "$moved0" = 0 ] && ok || bad "the baseline resume moved $moved0 bytes"
    [ -n "$moved" ] && [ "$moved" -gt 1000000 ] && ok || bad "the resume moved '$moved' bytes"
    [ "$moved" = "$lower" ] && ok || bad "the plan moved $moved bytes, its lower bound is $lower"
    net=$((link - base))
    echo "state's bytes on the links: $net (plan $moved, $(awk -v a=$net -v b=$moved 'BEGIN{printf "%+.2f", 100 * (a - b) / b}') %)"
    awk -v a=$net -v b=$moved 'BEGIN{exit !(a >= 0.95 * b && a <= 1.05 * b)}' && ok ||
        bad "$1 -> $2: the links carried $net bytes of state, the plan $moved (more than 5 % apart)"
}
check tp=3 pp=3
if [ "${PTC_TEST_FULL:-0}" = 1 ]; then # the slow variant: the other directions, ZeRO
    check pp=3 tp=3
    check tp=3 dp=3,zero=1
    check dp=3,zero=1 pp=3
fi
finish
