/* GELU on the CPU: float arithmetic, the array split over threads. The
 * grain keeps thread start-up (tens of microseconds) below a tenth of the
 * work of a chunk. */
#include "kernels/gelu.h"

#include <math.h>

#include "kernels/kernels_internal.h"

#define PTC_GELU_KF 0.7978845608f /* sqrt(2/pi) */
#define PTC_GELU_AF 0.044715f
#define PTC_GELU_GRAIN ((size_t)1 << 16)

struct ptc_gelu_ctx {
    float *out;
    const float *inp;
    const float *dout;
};

static void ptc_gelu_forward_range(void *arg, size_t b, size_t e)
{
    struct ptc_gelu_ctx *ctx = arg;
    float *out = ctx->out; /* may equal inp: no restrict */
    const float *inp = ctx->inp;
    for (size_t i = b; i < e; i++) {
        float x = inp[i];
        float u = PTC_GELU_KF * (x + PTC_GELU_AF * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

static void ptc_gelu_backward_range(void *arg, size_t b, size_t e)
{
    struct ptc_gelu_ctx *ctx = arg;
    float *restrict dinp = ctx->out;
    const float *restrict inp = ctx->inp;
    const float *restrict dout = ctx->dout;
    for (size_t i = b; i < e; i++) {
        float x = inp[i];
        float u = PTC_GELU_KF * (x + PTC_GELU_AF * x * x * x);
        float th = tanhf(u);
        float du = PTC_GELU_KF * (1.0f + 3.0f * PTC_GELU_AF * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
        dinp[i] += grad * dout[i];
    }
}

int ptc_gelu_forward_cpu(float *out, const float *inp, size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("gelu_forward_cpu", "out", out, n, 1));
    PTC_TRY(ptc_kernels_check_buf("gelu_forward_cpu", "inp", inp, n, 1));
    struct ptc_gelu_ctx ctx = {out, inp, NULL};
    ptc_kernels_parallel_for(n, PTC_GELU_GRAIN, ptc_gelu_forward_range, &ctx);
    return PTC_OK;
}

int ptc_gelu_backward_cpu(float *dinp, const float *inp, const float *dout,
                          size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("gelu_backward_cpu", "dinp", dinp, n, 1));
    PTC_TRY(ptc_kernels_check_buf("gelu_backward_cpu", "inp", inp, n, 1));
    PTC_TRY(ptc_kernels_check_buf("gelu_backward_cpu", "dout", dout, n, 1));
    struct ptc_gelu_ctx ctx = {dinp, inp, dout};
    ptc_kernels_parallel_for(n, PTC_GELU_GRAIN, ptc_gelu_backward_range, &ctx);
    return PTC_OK;
}
