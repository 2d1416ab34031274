#!/bin/bash
# labels: slow
# ptc elastic --online over 3 hosts that share no filesystem (stores on each
# host, --replicas 1; tests/net/lib_elastic_hosts.sh), 2 slots each: the job
# runs dp=1,tp=2,pp=3 (a stage per host); host 2 leaves the hostfile after
# step 2: the controller resizes the running job in memory to dp=1,tp=2,pp=2
# on hosts 0 and 1 (no relaunch, no step lost; host 2's processes idle) and
# the job saves on across hosts 0 and 1 to the end: every loss within 1e-5 of
# an uninterrupted run, the versions after the resize committed on hosts 0
# and 1 and not on host 2. (Slow: ~70 s; its fast twin for the job's side
# is test_net_hosts_resize.sh, the controller's online path without
# --replicas is tests/mpi/test_elastic.sh.)
. "$(dirname "$0")/lib_elastic_hosts.sh"
hostfile "$T/hosts" 2 2 2
reference 8 && ok || { cat "$T/ref.err" >&2; bad "the reference run failed"; finish; }

"$PTC" elastic --store "$T/store" --hostfile "$T/hosts" --mpirun "$T/mpirun" --tp 2 --watchdog 60 \
    --online -- "${train[@]}" --steps 8 >"$T/a.out" 2>"$T/a.err" &
epid=$!
if wait_for "$T/a.out" "^step 2 "; then ok; else cat "$T/a.out" "$T/a.err" >&2; bad "no step 2"; fi
hostfile "$T/hosts" 2 2 0
if wait $epid; then ok; else cat "$T/a.out" "$T/a.err" >&2; bad "ptc elastic failed"; finish; fi
grep '^elastic: ' "$T/a.out"
line=$(grep '^elastic: scale-in at step ' "$T/a.out") || bad "no scale-in line"
echo "$line" | grep -q ': dp=1,tp=2,pp=3 -> dp=1,tp=2,pp=2 on 4 slots, online (in memory), 0 steps lost' &&
    ok || bad "not resized in memory: $line"
[ "$(grep -c '^elastic: ' "$T/a.out")" = 3 ] && ok || bad "a relaunch (start, scale-in, done expected)"
grep -q '^elastic: done: step 8, ' "$T/a.out" && ok || bad "no done line"
close_to_ref "$T/a.out" && ok || bad "losses differ from the uninterrupted run's"
nv() { "$PTC" versions --store "$T/disks/h$1" --json |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["versions"]))'; }
n0=$(nv 0) n1=$(nv 1) n2=$(nv 2)
[ "$n0" = 8 ] && [ "$n1" = 8 ] && [ "$n2" -ge 2 ] && [ "$n2" -lt 8 ] && ok ||
    bad "versions per host: $n0 $n1 $n2 (8, 8 and those before the resize on host 2)"
finish
