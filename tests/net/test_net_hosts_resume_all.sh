#!/usr/bin/env bash
# labels: slow
# test_net_hosts_resume.sh over more pairs of configurations (both directions, ZeRO).
PTC_TEST_FULL=1 exec bash "$(dirname "$0")/test_net_hosts_resume.sh"
