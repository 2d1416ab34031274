/* Layer normalization on the GPU: one warp per row (llm.c's layout) for the
 * forward and the input gradient; the parameter gradients use the
 * deterministic column reduction, so repeated runs give the same bits. */
#include "kernels/cuda_internal.cuh"
#include "kernels/kernels_internal.h"
#include "kernels/layernorm.h"

#define PTC_LN_WARPS 8 /* rows per block */

__global__ static void ptc_ln_forward_kernel(float *out, float *mean,
                                             float *rstd, const float *inp,
                                             const float *w, const float *b,
                                             size_t n, size_t c, float eps)
{
    size_t row = (size_t)blockIdx.x * PTC_LN_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= n)
        return; /* whole warps leave together: shuffles stay full */
    const float *x = inp + row * c;
    float s = 0.0f;
    for (size_t j = lane; j < c; j += 32)
        s += x[j];
    float m = ptc_warp_sum(s) / (float)c;
    float q = 0.0f;
    for (size_t j = lane; j < c; j += 32)
        q += (x[j] - m) * (x[j] - m);
    float r = rsqrtf(ptc_warp_sum(q) / (float)c + eps);
    float *o = out + row * c;
    for (size_t j = lane; j < c; j += 32)
        o[j] = (x[j] - m) * r * w[j] + b[j];
    if (lane == 0) {
        if (mean)
            mean[row] = m;
        if (rstd)
            rstd[row] = r;
    }
}

__global__ static void ptc_ln_dinp_kernel(float *dinp, const float *dout,
                                          const float *inp, const float *w,
                                          const float *mean, const float *rstd,
                                          size_t n, size_t c)
{
    size_t row = (size_t)blockIdx.x * PTC_LN_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= n)
        return;
    const float *g = dout + row * c, *x = inp + row * c;
    float m = mean[row], r = rstd[row];
    float a = 0.0f, bb = 0.0f;
    for (size_t j = lane; j < c; j += 32) {
        float dn = g[j] * w[j];
        a += dn;
        bb += dn * (x[j] - m) * r;
    }
    float dn_mean = ptc_warp_sum(a) / (float)c;
    float dn_norm_mean = ptc_warp_sum(bb) / (float)c;
    float *dx = dinp + row * c;
    for (size_t j = lane; j < c; j += 32) {
        float norm = (x[j] - m) * r;
        dx[j] += r * (g[j] * w[j] - dn_mean - norm * dn_norm_mean);
    }
}

struct ptc_ln_dbias_term {
    const float *dout;
    size_t c;
    __device__ float operator()(size_t i, size_t j) const
    {
        return dout[i * c + j];
    }
};

struct ptc_ln_dweight_term {
    const float *dout, *inp, *mean, *rstd;
    size_t c;
    __device__ float operator()(size_t i, size_t j) const
    {
        return dout[i * c + j] * ((inp[i * c + j] - mean[i]) * rstd[i]);
    }
};

__global__ static void ptc_ln_empty_stats(float *mean, float *rstd, size_t n,
                                          float eps)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (mean)
            mean[i] = 0.0f;
        if (rstd)
            rstd[i] = 1.0f / sqrtf(eps);
    }
}

int ptc_layernorm_forward_cuda(float *out, float *mean, float *rstd,
                               const float *inp, const float *weight,
                               const float *bias, size_t n, size_t c, float eps,
                               cudaStream_t stream)
{
    const char *op = "layernorm_forward_cuda";
    PTC_TRY(ptc_layernorm_check_forward(op, out, inp, weight, bias, n, c, eps,
                                        true));
    if (n == 0)
        return PTC_OK;
    if (c == 0) {
        ptc_ln_empty_stats<<<ptc_cuda_blocks(n), PTC_CUDA_BLOCK, 0, stream>>>(
            mean, rstd, n, eps);
        return ptc_cuda_check_launch(op);
    }
    unsigned grid = (unsigned)((n + PTC_LN_WARPS - 1) / PTC_LN_WARPS);
    ptc_ln_forward_kernel<<<grid, 32 * PTC_LN_WARPS, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, n, c, eps);
    return ptc_cuda_check_launch(op);
}

int ptc_layernorm_backward_cuda(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp,
                                const float *weight, const float *mean,
                                const float *rstd, size_t n, size_t c,
                                cudaStream_t stream)
{
    const char *op = "layernorm_backward_cuda";
    PTC_TRY(ptc_layernorm_check_backward(op, dinp, dweight, dbias, dout, inp,
                                         weight, mean, rstd, n, c, true));
    if (n == 0 || c == 0)
        return PTC_OK;
    if (dbias) {
        ptc_colreduce(dbias, n, c, ptc_ln_dbias_term{dout, c}, stream);
        PTC_TRY(ptc_cuda_check_launch(op));
    }
    if (dweight) {
        ptc_colreduce(dweight, n, c,
                      ptc_ln_dweight_term{dout, inp, mean, rstd, c}, stream);
        PTC_TRY(ptc_cuda_check_launch(op));
    }
    if (dinp) {
        unsigned grid = (unsigned)((n + PTC_LN_WARPS - 1) / PTC_LN_WARPS);
        ptc_ln_dinp_kernel<<<grid, 32 * PTC_LN_WARPS, 0, stream>>>(
            dinp, dout, inp, weight, mean, rstd, n, c);
        PTC_TRY(ptc_cuda_check_launch(op));
    }
    return PTC_OK;
}
