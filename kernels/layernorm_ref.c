/* Reference layer normalization: two-pass mean and variance, every sum in
 * double, so the reference error is negligible next to the tolerances. */
#include "kernels/layernorm.h"

#include <math.h>

#include "kernels/kernels_internal.h"

int ptc_layernorm_check_forward(const char *op, const float *out,
                                const float *inp, const float *weight,
                                const float *bias, size_t n, size_t c,
                                float eps, bool int_sizes)
{
    PTC_TRY(ptc_kernels_check_buf(op, "out", out, n, c));
    PTC_TRY(ptc_kernels_check_buf(op, "inp", inp, n, c));
    size_t rows = n > 0 ? 1 : 0; /* parameters matter only if rows exist */
    PTC_TRY(ptc_kernels_check_buf(op, "weight", weight, rows, c));
    PTC_TRY(ptc_kernels_check_buf(op, "bias", bias, rows, c));
    if (!(eps >= 0.0f))
        return ptc_error_set(PTC_E_INVAL, "%s: eps %g must be >= 0", op,
                             (double)eps);
    return int_sizes ? ptc_kernels_check_int(op, n, c, 0) : PTC_OK;
}

int ptc_layernorm_check_backward(const char *op, const float *dinp,
                                 const float *dweight, const float *dbias,
                                 const float *dout, const float *inp,
                                 const float *weight, const float *mean,
                                 const float *rstd, size_t n, size_t c,
                                 bool int_sizes)
{
    size_t unused;
    if (!ptc_kernels_mul(n, c, &unused))
        return ptc_error_set(PTC_E_RANGE, "%s: size %zu x %zu overflows", op,
                             n, c);
    if (!dinp && !dweight && !dbias)
        return int_sizes ? ptc_kernels_check_int(op, n, c, 0) : PTC_OK;
    PTC_TRY(ptc_kernels_check_buf(op, "dout", dout, n, c));
    if (dinp || dweight) {
        PTC_TRY(ptc_kernels_check_buf(op, "inp", inp, n, c));
        PTC_TRY(ptc_kernels_check_buf(op, "mean", mean, n, c > 0));
        PTC_TRY(ptc_kernels_check_buf(op, "rstd", rstd, n, c > 0));
    }
    if (dinp)
        PTC_TRY(ptc_kernels_check_buf(op, "weight", weight, n > 0, c));
    return int_sizes ? ptc_kernels_check_int(op, n, c, 0) : PTC_OK;
}

int ptc_layernorm_forward_ref(float *out, float *mean, float *rstd,
                              const float *inp, const float *weight,
                              const float *bias, size_t n, size_t c, float eps)
{
    PTC_TRY(ptc_layernorm_check_forward("layernorm_forward_ref", out, inp,
                                        weight, bias, n, c, eps, false));
    for (size_t i = 0; i < n; i++) {
        const float *x = inp + i * c;
        double m = 0.0;
        for (size_t j = 0; j < c; j++)
            m += x[j];
        m = c > 0 ? m / (double)c : 0.0;
        double var = 0.0;
        for (size_t j = 0; j < c; j++)
            var += ((double)x[j] - m) * ((double)x[j] - m);
        var = c > 0 ? var / (double)c : 0.0;
        double s = 1.0 / sqrt(var + (double)eps);
        for (size_t j = 0; j < c; j++)
            out[i * c + j] =
                (float)(((double)x[j] - m) * s * weight[j] + bias[j]);
        if (mean)
            mean[i] = (float)m;
        if (rstd)
            rstd[i] = (float)s;
    }
    return PTC_OK;
}

int ptc_layernorm_backward_ref(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp,
                               const float *weight, const float *mean,
                               const float *rstd, size_t n, size_t c)
{
    PTC_TRY(ptc_layernorm_check_backward("layernorm_backward_ref", dinp,
                                         dweight, dbias, dout, inp, weight,
                                         mean, rstd, n, c, false));
    if (c == 0)
        return PTC_OK;
    /* Parameter gradients: one double sum per column over all rows. */
    for (size_t j = 0; (dweight || dbias) && j < c; j++) {
        double sw = 0.0, sb = 0.0;
        for (size_t i = 0; i < n; i++) {
            double g = dout[i * c + j];
            sb += g;
            if (dweight)
                sw += g * ((double)inp[i * c + j] - mean[i]) * rstd[i];
        }
        if (dweight)
            dweight[j] += (float)sw;
        if (dbias)
            dbias[j] += (float)sb;
    }
    for (size_t i = 0; dinp && i < n; i++) {
        const float *g = dout + i * c;
        const float *x = inp + i * c;
        double m = mean[i], s = rstd[i];
        double dn_mean = 0.0, dn_norm_mean = 0.0;
        for (size_t j = 0; j < c; j++) {
            double dn = (double)g[j] * weight[j];
            dn_mean += dn;
            dn_norm_mean += dn * ((double)x[j] - m) * s;
        }
        dn_mean /= (double)c;
        dn_norm_mean /= (double)c;
        for (size_t j = 0; j < c; j++) {
            double norm = ((double)x[j] - m) * s;
            double dn = (double)g[j] * weight[j];
            dinp[i * c + j] +=
                (float)(s * (dn - dn_mean - norm * dn_norm_mean));
        }
    }
    return PTC_OK;
}
