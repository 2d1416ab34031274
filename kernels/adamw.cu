/* AdamW on the GPU: one grid-stride element-wise kernel; the bias
 * corrections are computed once on the host, in double. */
#include <math.h>

#include "kernels/adamw.h"
#include "kernels/cuda_internal.cuh"
#include "kernels/kernels_internal.h"

__global__ static void ptc_adamw_kernel(float *p, float *m, float *v,
                                        const float *g, size_t n, float lr,
                                        float b1, float b2, float eps, float wd,
                                        float inv_bc1, float inv_bc2)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
        float pi = p[i];
        p[i] = pi - lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
    }
}

int ptc_adamw_update_cuda(float *params, float *m, float *v,
                          const float *grads, size_t n,
                          const ptc_adamw_params *hp, int64_t t,
                          cudaStream_t stream)
{
    const char *op = "adamw_update_cuda";
    PTC_TRY(ptc_adamw_check(op, params, m, v, grads, n, hp, t, true));
    if (n == 0)
        return PTC_OK;
    float inv_bc1 = (float)(1.0 / (1.0 - pow((double)hp->beta1, (double)t)));
    float inv_bc2 = (float)(1.0 / (1.0 - pow((double)hp->beta2, (double)t)));
    ptc_adamw_kernel<<<ptc_cuda_blocks(n), PTC_CUDA_BLOCK, 0, stream>>>(
        params, m, v, grads, n, hp->lr, hp->beta1, hp->beta2, hp->eps,
        hp->weight_decay, inv_bc1, inv_bc2);
    return ptc_cuda_check_launch(op);
}
