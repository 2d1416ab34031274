#!/bin/bash
# Kill -9 inside a cross-host commit (issue #30, test (c)), fast tier: three
# namespace hosts with private disks, one host's process killed by the test
# build's hook (PTC_FAULT_KILL) in each of the commit's three outcomes —
# before its prepare record (its part written, not committed locally), in
# doubt (prepared, before the vote), after its commit record — each on
# another host and at another version; after every kill the hosts agree on the newest committed
# version, it loads with the uninterrupted run's loss, verify passes on
# every disk and the next save commits everywhere (tests/net/lib_hosts_kill.sh).
# The 20 random kills and the other steps are test_net_hosts_kill_random.sh
# (slow).
. "$(dirname "$0")/lib_net.sh"
. "$(dirname "$0")/lib_hosts_kill.sh"
kill_trial written 0 hosts.written:3
kill_trial prepared 2 hosts.prepared:5
kill_trial marked 1 hosts.marked:4
echo "phases hit: $(kill_summary)"
finish
