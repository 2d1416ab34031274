#!/bin/bash
# CUDA cast kernel against the C reference, bit for bit (label gpu). Skipped
# (77) without a CUDA build or a GPU listed by nvidia-smi; with one, no usable
# device is a failure (PTC_REQUIRE_GPU=1).
. "$(dirname "$0")/lib_gpu.sh"
need_gpu
exec "$PTC_BUILD/test_cast"
