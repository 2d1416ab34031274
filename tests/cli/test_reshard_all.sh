#!/usr/bin/env bash
# labels: slow
# test_reshard.sh over every configuration with dp*tp*pp <= 8.
PTC_TEST_FULL=1 exec bash "$(dirname "$0")/test_reshard.sh"
