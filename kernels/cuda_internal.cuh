/**
 * @file cuda_internal.cuh
 * @brief Private helpers of the CUDA kernels (included by kernels/ *.cu only):
 * launch checks, warp and block reductions, a deterministic column
 * reduction.
 */
#ifndef PTC_KERNELS_CUDA_INTERNAL_CUH
#define PTC_KERNELS_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>

#include "ptc/error.h"

/** Threads per block of the element-wise kernels. */
#define PTC_CUDA_BLOCK 256

/** @return PTC_OK, or PTC_E_CUDA naming @p op when the last launch failed
 * (cudaGetLastError also clears a sticky launch error for the caller). */
static inline int ptc_cuda_check_launch(const char *op)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return ptc_error_set(PTC_E_CUDA, "%s: kernel launch failed: %s", op,
                             cudaGetErrorString(e));
    return PTC_OK;
}

/** Blocks for a grid-stride loop over @p n elements (at least 1). */
static inline unsigned ptc_cuda_blocks(size_t n)
{
    size_t b = (n + PTC_CUDA_BLOCK - 1) / PTC_CUDA_BLOCK;
    if (b > 65535u * 16u)
        b = 65535u * 16u; /* grid-stride loops cover the rest */
    return b > 0 ? (unsigned)b : 1u;
}

__device__ __forceinline__ float ptc_warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float ptc_warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/** Sum over a block whose size is a multiple of 32 (at most 1024); every
 * thread gets the result. @p scratch: 32 floats of shared memory, free for
 * reuse after the call returns. */
__device__ __forceinline__ float ptc_block_sum(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nwarps = blockDim.x >> 5;
    v = ptc_warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return ptc_warp_sum(v);
}

/** Maximum over a block, as ptc_block_sum(). */
__device__ __forceinline__ float ptc_block_max(float v, float *scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nwarps = blockDim.x >> 5;
    v = ptc_warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    return ptc_warp_max(v);
}

/* Column reduction: out[j] += sum_i f(i, j) for i < n, j < c, with a fixed
 * summation order (no atomics), so results are reproducible bit for bit.
 * Block (32, 8): 32 adjacent columns (coalesced reads), 8 row strides. */
#define PTC_COLRED_ROWS 8

template <typename F>
__global__ void ptc_colreduce_kernel(float *out, size_t n, size_t c, F f)
{
    __shared__ float part[PTC_COLRED_ROWS][32];
    size_t j = (size_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (j < c)
        for (size_t i = threadIdx.y; i < n; i += PTC_COLRED_ROWS)
            acc += f(i, j);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < c) {
        float s = 0.0f;
        for (int k = 0; k < PTC_COLRED_ROWS; k++)
            s += part[k][threadIdx.x];
        out[j] += s;
    }
}

template <typename F>
static inline void ptc_colreduce(float *out, size_t n, size_t c, F f,
                                 cudaStream_t stream)
{
    if (n == 0 || c == 0)
        return; /* nothing to add; an empty grid would be a launch error */
    dim3 block(32, PTC_COLRED_ROWS);
    unsigned grid = (unsigned)((c + 31) / 32);
    ptc_colreduce_kernel<<<grid, block, 0, stream>>>(out, n, c, f);
}

#endif
