/* Reference GELU (tanh approximation), evaluated in double. */
#include "kernels/gelu.h"

#include <math.h>

#include "kernels/kernels_internal.h"

#define PTC_GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define PTC_GELU_A 0.044715

int ptc_gelu_forward_ref(float *out, const float *inp, size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("gelu_forward_ref", "out", out, n, 1));
    PTC_TRY(ptc_kernels_check_buf("gelu_forward_ref", "inp", inp, n, 1));
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double u = PTC_GELU_K * (x + PTC_GELU_A * x * x * x);
        out[i] = (float)(0.5 * x * (1.0 + tanh(u)));
    }
    return PTC_OK;
}

int ptc_gelu_backward_ref(float *dinp, const float *inp, const float *dout,
                          size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("gelu_backward_ref", "dinp", dinp, n, 1));
    PTC_TRY(ptc_kernels_check_buf("gelu_backward_ref", "inp", inp, n, 1));
    PTC_TRY(ptc_kernels_check_buf("gelu_backward_ref", "dout", dout, n, 1));
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double u = PTC_GELU_K * (x + PTC_GELU_A * x * x * x);
        double th = tanh(u);
        double du = PTC_GELU_K * (1.0 + 3.0 * PTC_GELU_A * x * x);
        double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
        dinp[i] = (float)((double)dinp[i] + grad * (double)dout[i]);
    }
    return PTC_OK;
}
