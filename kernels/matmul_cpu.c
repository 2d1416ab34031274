/* Fully connected layer on the CPU through OpenBLAS: the GEMMs are
 * cblas_sgemm calls (OpenBLAS threads them itself); only the bias
 * broadcast and the bias-gradient column sums are plain loops. */
#include "kernels/matmul.h"

#include <cblas.h>
#include <string.h>

#include "kernels/kernels_internal.h"

int ptc_matmul_forward_cpu(float *out, const float *inp, const float *weight,
                           const float *bias, size_t n, size_t c, size_t oc)
{
    PTC_TRY(ptc_matmul_check_forward("matmul_forward_cpu", out, inp, weight, n,
                                     c, oc, true));
    if (n == 0 || oc == 0)
        return PTC_OK;
    /* Seed out with the bias (or zero) so one GEMM with beta = 1 finishes
     * the job; this also covers c == 0, where BLAS must not be called. */
    for (size_t i = 0; i < n; i++) {
        if (bias)
            memcpy(out + i * oc, bias, oc * sizeof(float));
        else
            memset(out + i * oc, 0, oc * sizeof(float));
    }
    if (c == 0)
        return PTC_OK;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n,
                (blasint)oc, (blasint)c, 1.0f, inp, (blasint)c, weight,
                (blasint)c, 1.0f, out, (blasint)oc);
    return PTC_OK;
}

int ptc_matmul_backward_cpu(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp,
                            const float *weight, size_t n, size_t c, size_t oc)
{
    PTC_TRY(ptc_matmul_check_backward("matmul_backward_cpu", dinp, dweight,
                                      dbias, dout, inp, weight, n, c, oc, true));
    bool gemm = n > 0 && c > 0 && oc > 0;
    if (dinp && gemm)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)n,
                    (blasint)c, (blasint)oc, 1.0f, dout, (blasint)oc, weight,
                    (blasint)c, 1.0f, dinp, (blasint)c);
    if (dweight && gemm)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)oc,
                    (blasint)c, (blasint)n, 1.0f, dout, (blasint)oc, inp,
                    (blasint)c, 1.0f, dweight, (blasint)c);
    if (dbias) {
        /* Row by row so the inner loop is contiguous and vectorizes. */
        for (size_t i = 0; i < n; i++) {
            const float *row = dout + i * oc;
            for (size_t o = 0; o < oc; o++)
                dbias[o] += row[o];
        }
    }
    return PTC_OK;
}
