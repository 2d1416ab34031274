/* AdamW on the CPU: float arithmetic (as the GPU does), the array split
 * over threads. The bias corrections are computed once, in double. */
#include "kernels/adamw.h"

#include <math.h>

#include "kernels/kernels_internal.h"

#define PTC_ADAMW_GRAIN ((size_t)1 << 16)

struct ptc_adamw_ctx {
    float *params, *m, *v;
    const float *grads;
    float lr, b1, b2, eps, wd, inv_bc1, inv_bc2;
};

static void ptc_adamw_range(void *arg, size_t b, size_t e)
{
    const struct ptc_adamw_ctx *c = arg;
    float *restrict p = c->params, *restrict m = c->m, *restrict v = c->v;
    const float *restrict g = c->grads;
    for (size_t i = b; i < e; i++) {
        float mi = c->b1 * m[i] + (1.0f - c->b1) * g[i];
        float vi = c->b2 * v[i] + (1.0f - c->b2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * c->inv_bc1, vhat = vi * c->inv_bc2;
        p[i] -= c->lr * (mhat / (sqrtf(vhat) + c->eps) + c->wd * p[i]);
    }
}

int ptc_adamw_update_cpu(float *params, float *m, float *v, const float *grads,
                         size_t n, const ptc_adamw_params *hp, int64_t t)
{
    PTC_TRY(ptc_adamw_check("adamw_update_cpu", params, m, v, grads, n, hp, t,
                            false));
    struct ptc_adamw_ctx ctx = {
        .params = params, .m = m, .v = v, .grads = grads, .lr = hp->lr,
        .b1 = hp->beta1, .b2 = hp->beta2, .eps = hp->eps,
        .wd = hp->weight_decay,
        .inv_bc1 = (float)(1.0 / (1.0 - pow(hp->beta1, (double)t))),
        .inv_bc2 = (float)(1.0 / (1.0 - pow(hp->beta2, (double)t)))};
    ptc_kernels_parallel_for(n, PTC_ADAMW_GRAIN, ptc_adamw_range, &ctx);
    return PTC_OK;
}
