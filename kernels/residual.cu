/* Residual add on the GPU: grid-stride element-wise kernels. */
#include "kernels/cuda_internal.cuh"
#include "kernels/kernels_internal.h"
#include "kernels/residual.h"

__global__ static void ptc_residual_forward_kernel(float *out, const float *a,
                                                   const float *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ static void ptc_residual_backward_kernel(float *d1, float *d2,
                                                    const float *g, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = g[i];
        d1[i] += v;
        d2[i] += v;
    }
}

int ptc_residual_forward_cuda(float *out, const float *inp1, const float *inp2,
                              size_t n, cudaStream_t stream)
{
    const char *op = "residual_forward_cuda";
    PTC_TRY(ptc_kernels_check_buf(op, "out", out, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "inp1", inp1, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "inp2", inp2, n, 1));
    PTC_TRY(ptc_kernels_check_int(op, n, 0, 0));
    if (n == 0)
        return PTC_OK;
    ptc_residual_forward_kernel<<<ptc_cuda_blocks(n), PTC_CUDA_BLOCK, 0,
                                  stream>>>(out, inp1, inp2, n);
    return ptc_cuda_check_launch(op);
}

int ptc_residual_backward_cuda(float *dinp1, float *dinp2, const float *dout,
                               size_t n, cudaStream_t stream)
{
    const char *op = "residual_backward_cuda";
    PTC_TRY(ptc_kernels_check_buf(op, "dinp1", dinp1, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "dinp2", dinp2, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "dout", dout, n, 1));
    PTC_TRY(ptc_kernels_check_int(op, n, 0, 0));
    if (n == 0)
        return PTC_OK;
    ptc_residual_backward_kernel<<<ptc_cuda_blocks(n), PTC_CUDA_BLOCK, 0,
                                   stream>>>(dinp1, dinp2, dout, n);
    return ptc_cuda_check_launch(op);
}
