/* Reference softmax cross-entropy, evaluated in double. */
#include "kernels/crossentropy.h"

#include <math.h>

#include "kernels/kernels_internal.h"

int ptc_crossentropy_check(const char *op, const float *out,
                           size_t out_cols, const float *logits,
                           const int32_t *targets, size_t n, size_t v,
                           bool check_targets, bool int_sizes)
{
    PTC_TRY(ptc_kernels_check_buf(op, "logits", logits, n, v));
    PTC_TRY(ptc_kernels_check_buf(op, "targets", targets, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "output", out, n, out_cols));
    if (int_sizes)
        PTC_TRY(ptc_kernels_check_int(op, n, v, 0));
    for (size_t i = 0; check_targets && i < n; i++)
        if (targets[i] >= 0 && (size_t)targets[i] >= v)
            return ptc_error_set(PTC_E_RANGE,
                                 "%s: target %d of row %zu is outside the "
                                 "vocabulary of %zu",
                                 op, (int)targets[i], i, v);
    return PTC_OK;
}

/* log sum_k exp(l_k - max): shifted by the maximum, so nothing overflows,
 * and kept apart from the maximum, so that huge logits do not cancel. */
static double ptc_xent_logsumexp(const float *l, size_t v, double *max_out)
{
    double mx = -INFINITY;
    for (size_t k = 0; k < v; k++)
        if (l[k] > mx)
            mx = l[k];
    double s = 0.0;
    for (size_t k = 0; k < v; k++)
        s += exp((double)l[k] - mx);
    *max_out = mx;
    return log(s);
}

int ptc_crossentropy_forward_ref(float *losses, const float *logits,
                                 const int32_t *targets, size_t n, size_t v)
{
    PTC_TRY(ptc_crossentropy_check("crossentropy_forward_ref", losses, 1, logits,
                                   targets, n, v, true, false));
    for (size_t i = 0; i < n; i++) {
        if (targets[i] < 0) {
            losses[i] = 0.0f;
            continue;
        }
        const float *l = logits + i * v;
        double mx;
        double lse = ptc_xent_logsumexp(l, v, &mx);
        losses[i] = (float)(lse - ((double)l[targets[i]] - mx));
    }
    return PTC_OK;
}

int ptc_crossentropy_backward_ref(float *dlogits, const float *logits,
                                  const int32_t *targets, size_t n, size_t v,
                                  float scale)
{
    PTC_TRY(ptc_crossentropy_check("crossentropy_backward_ref", dlogits, v,
                                   logits, targets, n, v, true, false));
    for (size_t i = 0; i < n; i++) {
        if (targets[i] < 0)
            continue;
        const float *l = logits + i * v;
        double mx;
        double lse = ptc_xent_logsumexp(l, v, &mx);
        for (size_t j = 0; j < v; j++) {
            double p = exp((double)l[j] - mx - lse);
            double ind = (size_t)targets[i] == j ? 1.0 : 0.0;
            dlogits[i * v + j] += (float)((double)scale * (p - ind));
        }
    }
    return PTC_OK;
}
