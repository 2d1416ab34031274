#!/bin/bash
# CUDA cast kernel against the C reference, bit for bit (needs a GPU: the
# gpu label is excluded from CI). Fails if no device is usable.
set -euo pipefail
exec env PTC_REQUIRE_GPU=1 "$PTC_BUILD/test_cast"
