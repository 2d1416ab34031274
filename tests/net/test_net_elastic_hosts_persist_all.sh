#!/usr/bin/env bash
# labels: slow
# test_net_elastic_hosts_persist.sh without --keep-local: after losing every
# copy of stage 2's shards of the newest version, the relaunch goes back to
# the newest older version the hosts present hold whole (saved on hosts 0
# and 1 before the scale-out) instead of the persistent tier.
GOBACK=1 exec bash "$(dirname "$0")/test_net_elastic_hosts_persist.sh"
