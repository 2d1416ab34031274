/* What a GPU test program does when it cannot run (tests/gpu/ programs). A test
 * that did not run is skipped, never passed: exit 77 (ctest's
 * SKIP_RETURN_CODE, cmake/tests.cmake). Two cases are failures instead:
 * PTC_REQUIRE_GPU=1 (the scripts set it when nvidia-smi lists a GPU) and
 * still no CUDA device usable — a broken driver must not read as "no GPU".
 * Fewer devices than the program needs (one per MPI rank: NCCL refuses two
 * ranks of one communicator on one device, `ncclCommInitRank: invalid
 * usage`) is a skip. */
#ifndef PTC_TESTS_GPU_SKIP_H
#define PTC_TESTS_GPU_SKIP_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_SKIP 77

/* 0 when @p need devices are there (one each); else the exit status, said
 * on stdout by @p say (rank 0 of a job, or the only process). */
static inline int gpu_skip_status(const char *prog, int need, bool say)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess)
        ndev = 0;
    const char *req = getenv("PTC_REQUIRE_GPU");
    if (ndev == 0 && req && !strcmp(req, "1")) {
        if (say)
            fprintf(stderr, "%s: PTC_REQUIRE_GPU=1 but no CUDA device is usable (%s)\n", prog,
                    e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 1;
    }
    if (ndev < need) {
        if (say)
            printf("%s: skipped: needs %d CUDA device%s (one per process), found %d%s%s\n", prog,
                   need, need > 1 ? "s" : "", ndev, e != cudaSuccess ? ": " : "",
                   e != cudaSuccess ? cudaGetErrorString(e) : "");
        return GPU_SKIP;
    }
    return 0;
}

#endif
