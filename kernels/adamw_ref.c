/* Reference AdamW step: each element's update is evaluated in double and
 * stored as float. */
#include "kernels/adamw.h"

#include <math.h>

#include "kernels/kernels_internal.h"

int ptc_adamw_check(const char *op, const float *params, const float *m,
                    const float *v, const float *grads, size_t n,
                    const struct ptc_adamw_params *hp, int64_t t,
                    bool int_sizes)
{
    PTC_TRY(ptc_kernels_check_buf(op, "params", params, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "m", m, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "v", v, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "grads", grads, n, 1));
    if (!hp)
        return ptc_error_set(PTC_E_INVAL, "%s: hyper-parameters are null", op);
    if (t < 1)
        return ptc_error_set(PTC_E_INVAL, "%s: step %lld must be >= 1", op,
                             (long long)t);
    if (!(hp->beta1 >= 0.0f && hp->beta1 < 1.0f) ||
        !(hp->beta2 >= 0.0f && hp->beta2 < 1.0f))
        return ptc_error_set(PTC_E_INVAL,
                             "%s: betas %g, %g must lie in [0, 1)", op,
                             (double)hp->beta1, (double)hp->beta2);
    if (!(hp->eps >= 0.0f) || !isfinite(hp->eps) || !isfinite(hp->lr) ||
        !isfinite(hp->weight_decay))
        return ptc_error_set(PTC_E_INVAL,
                             "%s: lr %g, eps %g, weight decay %g must be finite "
                             "(eps >= 0)",
                             op, (double)hp->lr, (double)hp->eps,
                             (double)hp->weight_decay);
    return int_sizes ? ptc_kernels_check_int(op, n, 0, 0) : PTC_OK;
}

int ptc_adamw_update_ref(float *params, float *m, float *v, const float *grads,
                         size_t n, const ptc_adamw_params *hp, int64_t t)
{
    PTC_TRY(ptc_adamw_check("adamw_update_ref", params, m, v, grads, n, hp, t,
                            false));
    double b1 = hp->beta1, b2 = hp->beta2;
    double bc1 = 1.0 - pow(b1, (double)t);
    double bc2 = 1.0 - pow(b2, (double)t);
    for (size_t i = 0; i < n; i++) {
        double g = grads[i];
        double mi = b1 * m[i] + (1.0 - b1) * g;
        double vi = b2 * v[i] + (1.0 - b2) * g * g;
        double mhat = mi / bc1, vhat = vi / bc2;
        double p = params[i];
        p -= (double)hp->lr *
             (mhat / (sqrt(vhat) + (double)hp->eps) +
              (double)hp->weight_decay * p);
        m[i] = (float)mi;
        v[i] = (float)vi;
        params[i] = (float)p;
    }
    return PTC_OK;
}
