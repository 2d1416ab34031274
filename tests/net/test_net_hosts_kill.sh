#!/bin/bash
# Kill -9 inside a cross-host commit (issue #30, test (c)), fast tier: three
# namespace hosts with private disks, one host's process killed by the test
# build's hook (PTC_FAULT_KILL) in each of the commit's three outcomes —
# before its prepare record (its part written, not committed locally), in
# doubt (prepared, before the vote), after its commit record — each on
# another host and at another version, once on the background thread of
# --save-async, and once in the persistent tier's background copy (the
# persistent store keeps its previous version whole); after every kill the hosts agree on the newest committed
# version, it loads with the uninterrupted run's loss, verify passes on
# every disk and the next save commits everywhere (tests/net/lib_hosts_kill.sh).
# The 20 random kills and the other steps are test_net_hosts_kill_random.sh
# (slow).
. "$(dirname "$0")/lib_net.sh"
. "$(dirname "$0")/lib_hosts_kill.sh"
kill_trial written 0 hosts.written:3
kill_trial marked 1 hosts.marked:4
# the same protocol on the background thread of --save-async
KILL_EXTRA=--save-async KILL_SLACK=1 kill_trial async-prepared 2 hosts.prepared:5
# the persistent tier's copy (--persist, in the background) killed after
# writing its second version (step 4), before committing it: the persistent
# store keeps the first (step 2), whole
KILL_EXTRA="--persist $T/persist --persist-every 2" kill_trial persist 0 persist.written:2
pv=$("$PTC" versions --store "$T/persist" --json |
    python3 -c 'import json,sys; print(" ".join("%s:%s" % (v["version"], v["step"]) for v in json.load(sys.stdin)["versions"]))')
[ "$pv" = 1:2 ] && ok || bad "the persistent store holds versions '$pv' (version:step) after a kill in its second copy (want 1:2)"
"$PTC" verify --store "$T/persist" >/dev/null && ok || bad "ptc verify of the persistent store after the kill"
echo "phases hit: $(kill_summary)"
finish
