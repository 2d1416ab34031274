#!/usr/bin/env bash
# labels: slow
# test_train_faults.sh over the whole matrix of its jitter runs (45, not a pairwise subset).
PTC_TEST_FULL=1 exec bash "$(dirname "$0")/test_train_faults.sh"
