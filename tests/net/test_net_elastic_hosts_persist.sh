#!/bin/bash
# ptc elastic over hosts that share no filesystem (as
# tests/net/test_net_elastic_hosts.sh): a fresh host joins, then every copy
# of some shards is lost and the persistent tier takes over.
# 1. the job (--replicas 1, --persist every 2nd version) starts on hosts 0
#    and 1 (dp=1,tp=2,pp=2); host 2, its disk empty but for the dataset, is
#    added to the hostfile: the job stops at a step boundary (it saves) and
#    resumes as dp=1,tp=2,pp=3 on the 3 hosts, host 2 holding no part: its
#    bytes come over the network by the plan; after the next save its disk
#    holds its part (its journal names a committed version).
# 2. host 2 is lost (kill -9) with host 0's disk: stage 2's shards had their
#    copies on hosts 2 and 0. --keep-local 2 left host 1 no older version
#    (those before the scale-out, which it held whole): the relaunch on hosts
#    0 and 1 fails with one error naming the saved ranks (4, 5); the
#    controller says so (a fallback event) and resumes from the persistent
#    tier: at most 2 steps lost (the tier's interval), the losses within 1e-5
#    of an uninterrupted run.
# GOBACK=1 (test_net_elastic_hosts_persist_all.sh): without --keep-local,
# host 1 still holds the versions saved on hosts 0 and 1 before the
# scale-out, its own ranks and host 0's copies: the relaunch goes back to
# the newest of them (said on stderr), no fallback.
. "$(dirname "$0")/lib_elastic_hosts.sh"
keep=(--keep-local 2)
[ "${GOBACK:-0}" = 1 ] && keep=()
hostfile "$T/hosts" 2 2 0
reference 12 && ok || { cat "$T/ref.err" >&2; bad "the reference run failed"; finish; }

"$PTC" elastic --store "$T/store" --hostfile "$T/hosts" --mpirun "$T/mpirun" --tp 2 --watchdog 60 \
    --json -- "${train[@]}" --persist "$T/persist" --persist-every 2 "${keep[@]}" --steps 12 \
    >"$T/b.log" 2>"$T/b.out" &
epid=$!
if wait_for "$T/b.out" "^step 2 "; then ok; else cat "$T/b.log" "$T/b.out" >&2; bad "no step 2"; fi
hostfile "$T/hosts" 2 2 2
if wait_for "$T/b.out" "^step 7 "; then ok; else cat "$T/b.log" "$T/b.out" >&2; bad "no step 7"; fi
[ -s "$T/disks/h2/hosts/committed" ] && ok || bad "host 2 holds no committed part"
kill_host 2
replace_disk 2
replace_disk 0
if wait $epid; then ok; else cat "$T/b.log" "$T/b.out" >&2; bad "ptc elastic failed"; finish; fi
cat "$T/b.log"
if [ "${GOBACK:-0}" = 1 ]; then
    grep 'ptc: warning: version' "$T/b.out"
    grep -q 'ptc: warning: version [0-9]* has no copy of 2 saved ranks on the hosts present; taking version [0-9]*, the newest one they hold whole' "$T/b.out" &&
        ok || bad "no warning of the older version"
    python3 - "$T/b.log" <<'PY' && ok || bad "the events"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert [e["event"] for e in ev] == ["start", "reconfigure", "reconfigure", "done"], ev
out, back = ev[1], ev[2]
assert back["reason"] == "failure" and "from_persist" not in back, back
# the newest version saved on hosts 0 and 1: the scale-out's stop
assert back["resumed_step"] == out["resumed_step"] and back["version"] == out["version"], (out, back)
PY
    close_to_ref "$T/b.out" && ok || bad "losses differ from the uninterrupted run's"
    finish; exit $?
fi
grep -q 'ptc: error: .*the shards of 2 saved ranks (4, 5) are on no host present: lost with every copy' "$T/b.out" &&
    ok || { grep 'ptc: error' "$T/b.out" >&2; bad "no error naming the lost ranks 4 and 5"; }
# the scale-out's resume: host 2 joined with nothing, its bytes moved to it
grep -q '^resume moved [1-9][0-9]* bytes between hosts' "$T/b.out" && ok ||
    bad "the scale-out's resume moved nothing between hosts"
python3 - "$T/b.log" "$T/persist" <<'PY' && ok || bad "the events"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["event"] for e in ev]
assert kinds == ["start", "reconfigure", "fallback", "reconfigure", "done"], kinds
out, fb, rc, done = ev[1], ev[2], ev[3], ev[4]
assert out["reason"] == "scale-out" and out["to"] == "dp=1,tp=2,pp=3", out
assert out["steps_lost"] == 0 and "from_persist" not in out, out
assert "(4, 5)" in fb["detail"] and fb["persist"] == sys.argv[2], fb
assert rc["reason"] == "failure" and rc["from_persist"] == sys.argv[2], rc
assert rc["to"] == "dp=1,tp=2,pp=2", rc
assert rc["step"] - rc["resumed_step"] == rc["steps_lost"] <= 2, rc  # every 2nd version persisted
assert done["step"] == 12, done
PY
close_to_ref "$T/b.out" && ok || bad "losses differ from the uninterrupted run's"
finish
