#!/usr/bin/env bash
# labels: slow
# test_train_state.sh over the whole configuration matrix (56, not a pairwise subset).
PTC_TEST_FULL=1 exec bash "$(dirname "$0")/test_train_state.sh"
