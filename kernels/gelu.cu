/* GELU (tanh approximation) on the GPU: grid-stride element-wise kernels. */
#include "kernels/cuda_internal.cuh"
#include "kernels/gelu.h"
#include "kernels/kernels_internal.h"

#define PTC_GELU_KF 0.7978845608f /* sqrt(2/pi) */
#define PTC_GELU_AF 0.044715f

__global__ static void ptc_gelu_forward_kernel(float *out, const float *inp,
                                               size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float u = PTC_GELU_KF * (x + PTC_GELU_AF * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

__global__ static void ptc_gelu_backward_kernel(float *dinp, const float *inp,
                                                const float *dout, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float u = PTC_GELU_KF * (x + PTC_GELU_AF * x * x * x);
        float th = tanhf(u);
        float du = PTC_GELU_KF * (1.0f + 3.0f * PTC_GELU_AF * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
        dinp[i] += grad * dout[i];
    }
}

int ptc_gelu_forward_cuda(float *out, const float *inp, size_t n,
                          cudaStream_t stream)
{
    const char *op = "gelu_forward_cuda";
    PTC_TRY(ptc_kernels_check_buf(op, "out", out, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "inp", inp, n, 1));
    PTC_TRY(ptc_kernels_check_int(op, n, 0, 0));
    if (n == 0)
        return PTC_OK;
    ptc_gelu_forward_kernel<<<ptc_cuda_blocks(n), PTC_CUDA_BLOCK, 0, stream>>>(
        out, inp, n);
    return ptc_cuda_check_launch(op);
}

int ptc_gelu_backward_cuda(float *dinp, const float *inp, const float *dout,
                           size_t n, cudaStream_t stream)
{
    const char *op = "gelu_backward_cuda";
    PTC_TRY(ptc_kernels_check_buf(op, "dinp", dinp, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "inp", inp, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "dout", dout, n, 1));
    PTC_TRY(ptc_kernels_check_int(op, n, 0, 0));
    if (n == 0)
        return PTC_OK;
    ptc_gelu_backward_kernel<<<ptc_cuda_blocks(n), PTC_CUDA_BLOCK, 0, stream>>>(
        dinp, inp, dout, n);
    return ptc_cuda_check_launch(op);
}
