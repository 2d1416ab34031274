/* Layer normalization on the CPU: float arithmetic, rows split over
 * threads. Sums use eight independent lanes so the compiler can vectorize
 * them without reassociation flags. The parameter gradients are split by
 * column instead, so each output element is summed by one thread in row
 * order and the result does not depend on the thread count. */
#include "kernels/layernorm.h"

#include <math.h>

#include "kernels/kernels_internal.h"

#define PTC_LN_WORK_GRAIN ((size_t)1 << 15) /* elements per thread, at least */

static size_t ptc_ln_grain(size_t width)
{
    size_t g = width > 0 ? PTC_LN_WORK_GRAIN / width : PTC_LN_WORK_GRAIN;
    return g > 0 ? g : 1;
}

static float ptc_ln_sum(const float *x, size_t c)
{
    float lane[8] = {0};
    size_t j = 0;
    for (; j + 8 <= c; j += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += x[j + k];
    float s = 0.0f;
    for (; j < c; j++)
        s += x[j];
    return s + ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static float ptc_ln_sqdev(const float *x, size_t c, float m)
{
    float lane[8] = {0};
    size_t j = 0;
    for (; j + 8 <= c; j += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += (x[j + k] - m) * (x[j + k] - m);
    float s = 0.0f;
    for (; j < c; j++)
        s += (x[j] - m) * (x[j] - m);
    return s + ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

struct ptc_ln_ctx {
    float *out, *mean, *rstd;          /* forward */
    float *dinp, *dweight, *dbias;     /* backward */
    const float *inp, *weight, *bias, *dout;
    const float *smean, *srstd;        /* saved statistics (backward) */
    size_t n, c;
    float eps;
};

static void ptc_ln_forward_rows(void *arg, size_t b, size_t e)
{
    struct ptc_ln_ctx *ctx = arg;
    size_t c = ctx->c;
    for (size_t i = b; i < e; i++) {
        const float *x = ctx->inp + i * c;
        float *o = ctx->out + i * c;
        float m = ptc_ln_sum(x, c) / (float)c;
        float s = 1.0f / sqrtf(ptc_ln_sqdev(x, c, m) / (float)c + ctx->eps);
        for (size_t j = 0; j < c; j++)
            o[j] = (x[j] - m) * s * ctx->weight[j] + ctx->bias[j];
        if (ctx->mean)
            ctx->mean[i] = m;
        if (ctx->rstd)
            ctx->rstd[i] = s;
    }
}

int ptc_layernorm_forward_cpu(float *out, float *mean, float *rstd,
                              const float *inp, const float *weight,
                              const float *bias, size_t n, size_t c, float eps)
{
    PTC_TRY(ptc_layernorm_check_forward("layernorm_forward_cpu", out, inp,
                                        weight, bias, n, c, eps, false));
    if (c == 0) {
        /* Empty rows: statistics of nothing, as the reference gives. */
        for (size_t i = 0; i < n; i++) {
            if (mean)
                mean[i] = 0.0f;
            if (rstd)
                rstd[i] = 1.0f / sqrtf(eps);
        }
        return PTC_OK;
    }
    struct ptc_ln_ctx ctx = {.out = out, .mean = mean, .rstd = rstd,
                             .inp = inp, .weight = weight, .bias = bias,
                             .n = n, .c = c, .eps = eps};
    ptc_kernels_parallel_for(n, ptc_ln_grain(c), ptc_ln_forward_rows, &ctx);
    return PTC_OK;
}

static void ptc_ln_backward_rows(void *arg, size_t b, size_t e)
{
    struct ptc_ln_ctx *ctx = arg;
    size_t c = ctx->c;
    const float *w = ctx->weight;
    for (size_t i = b; i < e; i++) {
        const float *g = ctx->dout + i * c;
        const float *x = ctx->inp + i * c;
        float *dx = ctx->dinp + i * c;
        float m = ctx->smean[i], s = ctx->srstd[i];
        float l1[8] = {0}, l2[8] = {0};
        size_t j = 0;
        for (; j + 8 <= c; j += 8) {
            for (int k = 0; k < 8; k++) {
                float dn = g[j + k] * w[j + k];
                l1[k] += dn;
                l2[k] += dn * (x[j + k] - m) * s;
            }
        }
        float a = 0.0f, bb = 0.0f;
        for (; j < c; j++) {
            float dn = g[j] * w[j];
            a += dn;
            bb += dn * (x[j] - m) * s;
        }
        for (int k = 0; k < 8; k++) {
            a += l1[k];
            bb += l2[k];
        }
        float dn_mean = a / (float)c, dn_norm_mean = bb / (float)c;
        for (j = 0; j < c; j++) {
            float norm = (x[j] - m) * s;
            dx[j] += s * (g[j] * w[j] - dn_mean - norm * dn_norm_mean);
        }
    }
}

static void ptc_ln_backward_cols(void *arg, size_t b, size_t e)
{
    struct ptc_ln_ctx *ctx = arg;
    size_t c = ctx->c;
    for (size_t i = 0; i < ctx->n; i++) {
        const float *g = ctx->dout + i * c;
        if (ctx->dbias)
            for (size_t j = b; j < e; j++)
                ctx->dbias[j] += g[j];
        if (ctx->dweight) {
            const float *x = ctx->inp + i * c;
            float m = ctx->smean[i], s = ctx->srstd[i];
            for (size_t j = b; j < e; j++)
                ctx->dweight[j] += g[j] * ((x[j] - m) * s);
        }
    }
}

int ptc_layernorm_backward_cpu(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp,
                               const float *weight, const float *mean,
                               const float *rstd, size_t n, size_t c)
{
    PTC_TRY(ptc_layernorm_check_backward("layernorm_backward_cpu", dinp,
                                         dweight, dbias, dout, inp, weight,
                                         mean, rstd, n, c, false));
    if (c == 0 || n == 0)
        return PTC_OK;
    struct ptc_ln_ctx ctx = {.dinp = dinp, .dweight = dweight, .dbias = dbias,
                             .inp = inp, .weight = weight, .dout = dout,
                             .smean = mean, .srstd = rstd, .n = n, .c = c};
    if (dweight || dbias)
        ptc_kernels_parallel_for(c, ptc_ln_grain(n), ptc_ln_backward_cols,
                                 &ctx);
    if (dinp)
        ptc_kernels_parallel_for(n, ptc_ln_grain(c), ptc_ln_backward_rows,
                                 &ctx);
    return PTC_OK;
}
