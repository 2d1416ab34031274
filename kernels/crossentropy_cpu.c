/* Softmax cross-entropy on the CPU: float arithmetic, rows split over
 * threads. Targets are validated before any row is touched, so a bad
 * target leaves the outputs unchanged. */
#include "kernels/crossentropy.h"

#include <math.h>

#include "kernels/kernels_internal.h"

#define PTC_XENT_WORK_GRAIN ((size_t)1 << 15)

struct ptc_xent_ctx {
    float *out;
    const float *logits;
    const int32_t *targets;
    size_t v;
    float scale;
};

/* sum_k exp(l_k - max) of a row, and the max: kept apart so that huge
 * logits do not cancel in the loss. */
static float ptc_xent_sumexp(const float *l, size_t v, float *max_out)
{
    float mx = -INFINITY;
    for (size_t k = 0; k < v; k++)
        mx = l[k] > mx ? l[k] : mx;
    float s = 0.0f;
    for (size_t k = 0; k < v; k++)
        s += expf(l[k] - mx);
    *max_out = mx;
    return s;
}

static void ptc_xent_forward_rows(void *arg, size_t b, size_t e)
{
    struct ptc_xent_ctx *ctx = arg;
    for (size_t i = b; i < e; i++) {
        int32_t t = ctx->targets[i];
        if (t < 0) {
            ctx->out[i] = 0.0f;
            continue;
        }
        const float *l = ctx->logits + i * ctx->v;
        float mx;
        float s = ptc_xent_sumexp(l, ctx->v, &mx);
        ctx->out[i] = logf(s) - (l[t] - mx);
    }
}

static void ptc_xent_backward_rows(void *arg, size_t b, size_t e)
{
    struct ptc_xent_ctx *ctx = arg;
    size_t v = ctx->v;
    for (size_t i = b; i < e; i++) {
        int32_t t = ctx->targets[i];
        if (t < 0)
            continue;
        const float *l = ctx->logits + i * v;
        float *d = ctx->out + i * v;
        float mx;
        float inv = 1.0f / ptc_xent_sumexp(l, v, &mx);
        for (size_t j = 0; j < v; j++)
            d[j] += ctx->scale * (expf(l[j] - mx) * inv);
        d[t] -= ctx->scale;
    }
}

static size_t ptc_xent_grain(size_t v)
{
    size_t g = v > 0 ? PTC_XENT_WORK_GRAIN / v : PTC_XENT_WORK_GRAIN;
    return g > 0 ? g : 1;
}

int ptc_crossentropy_forward_cpu(float *losses, const float *logits,
                                 const int32_t *targets, size_t n, size_t v)
{
    PTC_TRY(ptc_crossentropy_check("crossentropy_forward_cpu", losses, 1, logits,
                                   targets, n, v, true, false));
    struct ptc_xent_ctx ctx = {losses, logits, targets, v, 0.0f};
    ptc_kernels_parallel_for(n, ptc_xent_grain(v), ptc_xent_forward_rows, &ctx);
    return PTC_OK;
}

int ptc_crossentropy_backward_cpu(float *dlogits, const float *logits,
                                  const int32_t *targets, size_t n, size_t v,
                                  float scale)
{
    PTC_TRY(ptc_crossentropy_check("crossentropy_backward_cpu", dlogits, v,
                                   logits, targets, n, v, true, false));
    struct ptc_xent_ctx ctx = {dlogits, logits, targets, v, scale};
    ptc_kernels_parallel_for(n, ptc_xent_grain(v), ptc_xent_backward_rows,
                             &ctx);
    return PTC_OK;
}
