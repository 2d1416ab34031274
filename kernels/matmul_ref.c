/* Reference fully connected layer: the spec the BLAS and cuBLAS paths are
 * tested against. Sums run in double so that the reference error is far
 * below the tolerance given to the float implementations. */
#include "kernels/matmul.h"

#include "kernels/kernels_internal.h"

int ptc_matmul_check_forward(const char *op, const float *out, const float *inp,
                             const float *weight, size_t n, size_t c, size_t oc,
                             bool int_sizes)
{
    PTC_TRY(ptc_kernels_check_buf(op, "out", out, n, oc));
    PTC_TRY(ptc_kernels_check_buf(op, "inp", inp, n, c));
    PTC_TRY(ptc_kernels_check_buf(op, "weight", weight, oc, c));
    return int_sizes ? ptc_kernels_check_int(op, n, c, oc) : PTC_OK;
}

int ptc_matmul_check_backward(const char *op, const float *dinp,
                              const float *dweight, const float *dbias,
                              const float *dout, const float *inp,
                              const float *weight, size_t n, size_t c,
                              size_t oc, bool int_sizes)
{
    size_t unused;
    /* Sizes of skipped gradients still must not overflow. */
    if (!ptc_kernels_mul(n, c, &unused) || !ptc_kernels_mul(oc, c, &unused))
        return ptc_error_set(PTC_E_RANGE, "%s: sizes n=%zu c=%zu oc=%zu overflow",
                             op, n, c, oc);
    PTC_TRY(ptc_kernels_check_buf(op, "dout", dout, n, oc));
    if (dinp)
        PTC_TRY(ptc_kernels_check_buf(op, "weight", weight, oc, c));
    if (dweight)
        PTC_TRY(ptc_kernels_check_buf(op, "inp", inp, n, c));
    (void)dbias;
    return int_sizes ? ptc_kernels_check_int(op, n, c, oc) : PTC_OK;
}

int ptc_matmul_forward_ref(float *out, const float *inp, const float *weight,
                           const float *bias, size_t n, size_t c, size_t oc)
{
    PTC_TRY(ptc_matmul_check_forward("matmul_forward_ref", out, inp, weight, n,
                                     c, oc, false));
    for (size_t i = 0; i < n; i++) {
        for (size_t o = 0; o < oc; o++) {
            double acc = bias ? (double)bias[o] : 0.0;
            for (size_t k = 0; k < c; k++)
                acc += (double)inp[i * c + k] * (double)weight[o * c + k];
            out[i * oc + o] = (float)acc;
        }
    }
    return PTC_OK;
}

int ptc_matmul_backward_ref(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp,
                            const float *weight, size_t n, size_t c, size_t oc)
{
    PTC_TRY(ptc_matmul_check_backward("matmul_backward_ref", dinp, dweight,
                                      dbias, dout, inp, weight, n, c, oc, false));
    if (dinp) {
        for (size_t i = 0; i < n; i++) {
            for (size_t k = 0; k < c; k++) {
                double acc = 0.0;
                for (size_t o = 0; o < oc; o++)
                    acc += (double)dout[i * oc + o] * (double)weight[o * c + k];
                dinp[i * c + k] += (float)acc;
            }
        }
    }
    if (dweight) {
        for (size_t o = 0; o < oc; o++) {
            for (size_t k = 0; k < c; k++) {
                double acc = 0.0;
                for (size_t i = 0; i < n; i++)
                    acc += (double)dout[i * oc + o] * (double)inp[i * c + k];
                dweight[o * c + k] += (float)acc;
            }
        }
    }
    if (dbias) {
        for (size_t o = 0; o < oc; o++) {
            double acc = 0.0;
            for (size_t i = 0; i < n; i++)
                acc += (double)dout[i * oc + o];
            dbias[o] += (float)acc;
        }
    }
    return PTC_OK;
}
