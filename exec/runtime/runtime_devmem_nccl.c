/* Device memory of the boundary-buffer pool (device mode, built with
 * NCCL), apart from runtime_nccl.c's device step so that the pool
 * (runtime.c) and the device step do not call each other. */
#include <cuda_runtime.h>

#include "exec/runtime/runtime_internal.h"

int rt_dev_alloc(ptc_exec *e, size_t bytes, void **out)
{
    (void)e;
    cudaError_t ce = cudaMalloc(out, bytes);
    if (ce != cudaSuccess) {
        *out = NULL;
        return ptc_error_set(PTC_E_CUDA, "cudaMalloc of a boundary buffer: %s",
                             cudaGetErrorString(ce));
    }
    return PTC_OK;
}

void rt_dev_free(ptc_exec *e, void *p)
{
    (void)e;
    cudaFree(p);
}

