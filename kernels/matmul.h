/**
 * @file matmul.h
 * @brief Fully connected layer: out = inp @ weight^T + bias, and its backward.
 *
 * Shapes (llm.c convention, row-major F32): @p n rows (B*T), @p c input
 * channels, @p oc output channels.
 *   inp [n, c], weight [oc, c], bias [oc] (may be NULL), out [n, oc].
 *
 * Three implementations with one signature:
 *   - ptc_matmul_*_ref  plain loops with double accumulation: the spec;
 *   - ptc_matmul_*_cpu  OpenBLAS cblas_sgemm (sizes must fit a BLAS int);
 *   - ptc_matmul_*_cuda cuBLAS (FP32 math) plus small kernels, asynchronous
 *                       on @p stream; defined only in builds with
 *                       PTC_WITH_CUDA (see ptc/build_config.h).
 *
 * Backward passes accumulate (+=) into every gradient buffer, as a training
 * step sums contributions; zero them before the first micro-batch.
 * Output buffers must not overlap inputs.
 *
 * @note Thread safety: the functions keep no state; calls on disjoint
 *       outputs may run concurrently. A cuBLAS handle is externally
 *       synchronised: the _cuda functions bind it to @p stream
 *       (cublasSetStream) and launch on it.
 */
#ifndef PTC_KERNELS_MATMUL_H
#define PTC_KERNELS_MATMUL_H

#include <stddef.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;   /* cudaStream_t is struct CUstream_st * */
struct cublasContext; /* cublasHandle_t is struct cublasContext * */

/**
 * Forward: out[i][o] = bias[o] + sum_k inp[i][k] * weight[o][k].
 * @param out    [n, oc] written (not accumulated)
 * @param inp    [n, c]
 * @param weight [oc, c]
 * @param bias   [oc] or NULL for no bias
 * @return PTC_OK; PTC_E_INVAL for a NULL buffer of non-zero size;
 *         PTC_E_RANGE when a size overflows (or, _cpu/_cuda, exceeds INT_MAX);
 *         _cuda: PTC_E_CUDA when cuBLAS or a launch fails.
 */
int ptc_matmul_forward_ref(float *out, const float *inp, const float *weight,
                           const float *bias, size_t n, size_t c, size_t oc);
/** Same contract as ptc_matmul_forward_ref(), through cblas_sgemm. */
int ptc_matmul_forward_cpu(float *out, const float *inp, const float *weight,
                           const float *bias, size_t n, size_t c, size_t oc);
/** Same contract on device buffers, asynchronous on @p stream, via
 * cublasSgemm on @p cublas (bound to @p stream by this call). */
int ptc_matmul_forward_cuda(float *out, const float *inp, const float *weight,
                            const float *bias, size_t n, size_t c, size_t oc,
                            struct cublasContext *cublas,
                            struct CUstream_st *stream);

/**
 * Backward, accumulating:
 *   dinp    [n, c]  += dout @ weight
 *   dweight [oc, c] += dout^T @ inp
 *   dbias   [oc]    += column sums of dout
 * Any of dinp, dweight, dbias may be NULL to skip that gradient.
 * @param dout [n, oc] gradient of the loss with respect to out
 * @return as ptc_matmul_forward_ref().
 */
int ptc_matmul_backward_ref(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp,
                            const float *weight, size_t n, size_t c, size_t oc);
/** Same contract as ptc_matmul_backward_ref(), through cblas_sgemm. */
int ptc_matmul_backward_cpu(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp,
                            const float *weight, size_t n, size_t c, size_t oc);
/** Same contract on device buffers (cublasSgemm with beta = 1; dbias by a
 * deterministic column reduction), asynchronous on @p stream. */
int ptc_matmul_backward_cuda(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp,
                             const float *weight, size_t n, size_t c, size_t oc,
                             struct cublasContext *cublas,
                             struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
