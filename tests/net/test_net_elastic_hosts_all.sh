#!/usr/bin/env bash
# labels: slow
# test_net_elastic_hosts.sh with host 2 lost after steps 1, 3 and 6 (and
# its disk replaced), not after step 4 only: each resume from the replicas
# loses at most one step, the losses equal the uninterrupted run's and the
# audit is exact.
for k in 1 3 6; do
    KILL_AT=$k bash "$(dirname "$0")/test_net_elastic_hosts.sh" || exit 1
done
