/* Residual add on the CPU: the reference loop, vectorizable, with the array
 * split over threads (the op is bound by memory bandwidth, which several
 * cores share better than one). */
#include "kernels/residual.h"

#include "kernels/kernels_internal.h"

#define PTC_RESIDUAL_GRAIN ((size_t)1 << 17)

struct ptc_residual_ctx {
    float *a, *b;
    const float *x, *y;
};

static void ptc_residual_forward_range(void *arg, size_t b, size_t e)
{
    const struct ptc_residual_ctx *c = arg;
    for (size_t i = b; i < e; i++) /* out may alias an input: no restrict */
        c->a[i] = c->x[i] + c->y[i];
}

static void ptc_residual_backward_range(void *arg, size_t b, size_t e)
{
    const struct ptc_residual_ctx *c = arg;
    float *restrict d1 = c->a, *restrict d2 = c->b;
    const float *restrict g = c->x;
    for (size_t i = b; i < e; i++) {
        d1[i] += g[i];
        d2[i] += g[i];
    }
}

int ptc_residual_forward_cpu(float *out, const float *inp1, const float *inp2,
                             size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("residual_forward_cpu", "out", out, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_forward_cpu", "inp1", inp1, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_forward_cpu", "inp2", inp2, n, 1));
    struct ptc_residual_ctx ctx = {out, NULL, inp1, inp2};
    ptc_kernels_parallel_for(n, PTC_RESIDUAL_GRAIN, ptc_residual_forward_range,
                             &ctx);
    return PTC_OK;
}

int ptc_residual_backward_cpu(float *dinp1, float *dinp2, const float *dout,
                              size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("residual_backward_cpu", "dinp1", dinp1, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_backward_cpu", "dinp2", dinp2, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_backward_cpu", "dout", dout, n, 1));
    struct ptc_residual_ctx ctx = {dinp1, dinp2, dout, NULL};
    ptc_kernels_parallel_for(n, PTC_RESIDUAL_GRAIN, ptc_residual_backward_range,
                             &ctx);
    return PTC_OK;
}
