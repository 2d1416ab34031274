/* Reference residual add. */
#include "kernels/residual.h"

#include "kernels/kernels_internal.h"

int ptc_residual_forward_ref(float *out, const float *inp1, const float *inp2,
                             size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("residual_forward_ref", "out", out, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_forward_ref", "inp1", inp1, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_forward_ref", "inp2", inp2, n, 1));
    for (size_t i = 0; i < n; i++)
        out[i] = inp1[i] + inp2[i];
    return PTC_OK;
}

int ptc_residual_backward_ref(float *dinp1, float *dinp2, const float *dout,
                              size_t n)
{
    PTC_TRY(ptc_kernels_check_buf("residual_backward_ref", "dinp1", dinp1, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_backward_ref", "dinp2", dinp2, n, 1));
    PTC_TRY(ptc_kernels_check_buf("residual_backward_ref", "dout", dout, n, 1));
    for (size_t i = 0; i < n; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
    return PTC_OK;
}
