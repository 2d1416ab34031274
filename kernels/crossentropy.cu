/* Softmax cross-entropy on the GPU: one block per row, block reductions for
 * the maximum and the sum of exponentials. A target outside the
 * vocabulary cannot be reported without a synchronisation, so it poisons
 * its row with NaN instead (documented in crossentropy.h). */
#include <math.h>

#include "kernels/crossentropy.h"
#include "kernels/cuda_internal.cuh"
#include "kernels/kernels_internal.h"

#define PTC_XENT_BLOCK 256

/* Row maximum and sum of exp(l - max), visible to every thread. */
__device__ static void ptc_xent_row_stats(const float *l, size_t v,
                                          float *scratch, float *mx_out,
                                          float *sum_out)
{
    float mx = -INFINITY;
    for (size_t j = threadIdx.x; j < v; j += blockDim.x)
        mx = fmaxf(mx, l[j]);
    mx = ptc_block_max(mx, scratch);
    float s = 0.0f;
    for (size_t j = threadIdx.x; j < v; j += blockDim.x)
        s += expf(l[j] - mx);
    *sum_out = ptc_block_sum(s, scratch);
    *mx_out = mx;
}

__global__ static void ptc_xent_forward_kernel(float *losses,
                                               const float *logits,
                                               const int32_t *targets, size_t v)
{
    __shared__ float scratch[32];
    size_t row = blockIdx.x;
    int32_t t = targets[row];
    if (t < 0) { /* uniform over the block: everyone leaves */
        if (threadIdx.x == 0)
            losses[row] = 0.0f;
        return;
    }
    if ((size_t)t >= v) {
        if (threadIdx.x == 0)
            losses[row] = NAN;
        return;
    }
    const float *l = logits + row * v;
    float mx, s;
    ptc_xent_row_stats(l, v, scratch, &mx, &s);
    if (threadIdx.x == 0)
        losses[row] = logf(s) - (l[t] - mx);
}

__global__ static void ptc_xent_backward_kernel(float *dlogits,
                                                const float *logits,
                                                const int32_t *targets,
                                                size_t v, float scale)
{
    __shared__ float scratch[32];
    size_t row = blockIdx.x;
    int32_t t = targets[row];
    if (t < 0)
        return;
    float *d = dlogits + row * v;
    if ((size_t)t >= v) {
        for (size_t j = threadIdx.x; j < v; j += blockDim.x)
            d[j] += NAN;
        return;
    }
    const float *l = logits + row * v;
    float mx, s;
    ptc_xent_row_stats(l, v, scratch, &mx, &s);
    float inv = 1.0f / s;
    for (size_t j = threadIdx.x; j < v; j += blockDim.x) {
        float p = expf(l[j] - mx) * inv;
        d[j] += scale * (p - (j == (size_t)t ? 1.0f : 0.0f));
    }
}

int ptc_crossentropy_forward_cuda(float *losses, const float *logits,
                                  const int32_t *targets, size_t n, size_t v,
                                  cudaStream_t stream)
{
    const char *op = "crossentropy_forward_cuda";
    PTC_TRY(ptc_crossentropy_check(op, losses, 1, logits, targets, n, v, false,
                                   true));
    if (n == 0)
        return PTC_OK;
    ptc_xent_forward_kernel<<<(unsigned)n, PTC_XENT_BLOCK, 0, stream>>>(
        losses, logits, targets, v);
    return ptc_cuda_check_launch(op);
}

int ptc_crossentropy_backward_cuda(float *dlogits, const float *logits,
                                   const int32_t *targets, size_t n, size_t v,
                                   float scale, cudaStream_t stream)
{
    const char *op = "crossentropy_backward_cuda";
    PTC_TRY(ptc_crossentropy_check(op, dlogits, v, logits, targets, n, v,
                                   false, true));
    if (n == 0)
        return PTC_OK;
    ptc_xent_backward_kernel<<<(unsigned)n, PTC_XENT_BLOCK, 0, stream>>>(
        dlogits, logits, targets, v, scale);
    return ptc_cuda_check_launch(op);
}
