#!/bin/bash
# In-memory reshard of host buffers over MPI (ptc_reshard_host): every pair
# of a list of configurations that fits the world, three host sizes, every
# byte of every target rank checked (tests/unit/test_reshard_host.c).
set -eu
bin="${PTC_BUILD:?PTC_BUILD must name the build directory}/test_reshard_host"
mpirun --allow-run-as-root -np 2 "$bin"
mpirun --allow-run-as-root --oversubscribe -np 4 "$bin"
