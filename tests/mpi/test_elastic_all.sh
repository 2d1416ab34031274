#!/usr/bin/env bash
# labels: slow
# test_elastic.sh with its kill -9 at three random steps (seeds 1-3), not one.
PTC_TEST_FULL=1 exec bash "$(dirname "$0")/test_elastic.sh"
