#!/bin/bash
# labels: slow
# ptc elastic --replicas K refusing to go on mid-run (tests/net/
# lib_elastic_hosts.sh: 3 hosts with private disks, 2 slots each). The job
# (--tp 2, pp by the rule: dp=1,tp=2,pp=3, a stage per host) saves every
# step with --replicas 2: each host's shards also on both others. The one
# configuration left after host 2 goes, dp=1,tp=2,pp=2 on hosts 0 and 1,
# runs on 2 hosts, where --replicas 2 needs 3 or more:
# 1. host 2 leaves the hostfile after step 2: the controller stops the job,
#    which saves at the step it stops at (committed on every host), and
#    ends with exit 1 and one line naming the reason, that step, the
#    configuration, the hosts and K; nothing is relaunched;
# 2. the hostfile whole again, the job resumes from there; kill -9 of host
#    2's processes after its first step: the same refusal after the failure.
# The step named is the controller's count of steps done (the last `step K`
# line seen + 1: the stop's step in 1).
# (The refusal at the start: test_net_elastic_hosts.sh.)
. "$(dirname "$0")/lib_elastic_hosts.sh"
hostfile "$T/hosts" 2 2 2
k=("${train[@]}")
for i in "${!k[@]}"; do [ "${k[$i]}" = --replicas ] && k[$((i + 1))]=2; done
elastic() { # OUT: the job to step 8 in the background (pid in epid)
    "$PTC" elastic --store "$T/store" --hostfile "$T/hosts" --mpirun "$T/mpirun" --tp 2 \
        --watchdog 60 -- "${k[@]}" --steps 8 >"$T/$1.out" 2>"$T/$1.err" &
    epid=$!
}
# refused OUT REASON STEP: exit status 1 (rc), and the controller's one
# error line names REASON, STEP, the configuration, the hosts and K
refused() {
    local want="ptc: error: cannot go on after $2 at step $3: dp=1,tp=2,pp=2 runs on 2 hosts (10.177.0.1, 10.177.0.2), and --replicas 2 needs 3 or more"
    [ "$rc" = 1 ] && [ "$(grep -c '^ptc: error:' "$T/$1.err")" = 1 ] && grep -qxF "$want" "$T/$1.err" ||
        { cat "$T/$1.out" "$T/$1.err" >&2; bad "$1: exit $rc, not the line '$want'"; return 0; }
    [ "$(grep -c '^elastic: ' "$T/$1.out")" = 1 ] && ok || bad "$1: relaunched: $(grep '^elastic: ' "$T/$1.out")"
}
newest_step() { "$PTC" versions --store "$T/disks/h$1" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["versions"][-1]["step"])'; }

# 1. a hostfile change
elastic a
if wait_for "$T/a.out" "^step 2 "; then ok; else cat "$T/a.out" "$T/a.err" >&2; bad "no step 2"; fi
hostfile "$T/hosts" 2 2 0
set +e
wait $epid
rc=$?
set -e
S=$(sed -nE 's/^stopped at step ([0-9]+) \(dp=1,tp=2,pp=3\), saved version [0-9]+$/\1/p' "$T/a.out")
last() { echo $(($(sed -nE 's/^step ([0-9]+) .*/\1/p' "$T/$1.out" | tail -1) + 1)); }
[ -n "$S" ] && [ "$S" -ge 3 ] && [ "$S" = "$(last a)" ] && ok || bad "no stop after step 2: $(cat "$T/a.out")"
refused a scale-in "$S"
[ "$(newest_step 0)" = "$S" ] && [ "$(newest_step 1)" = "$S" ] && [ "$(newest_step 2)" = "$S" ] &&
    ok || bad "the stop's save (step $S) is not the newest version on every host"

# 2. a host lost
hostfile "$T/hosts" 2 2 2
elastic b
if wait_for "$T/b.out" "^step $S "; then ok; else cat "$T/b.out" "$T/b.err" >&2; bad "no step $S"; fi
kill_host 2
set +e
wait $epid
rc=$?
set -e
F=$(last b)
[ "$F" -gt "$S" ] && ok || bad "no step after the resume at $S: $(cat "$T/b.out")"
refused b failure "$F"
finish
