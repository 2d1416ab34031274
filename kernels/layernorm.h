/**
 * @file layernorm.h
 * @brief Layer normalization over the channel dimension, and its backward.
 *
 * Shapes (row-major F32): inp, out [n, c] with n = B*T rows; weight, bias [c];
 * mean, rstd [n] (saved by the forward for the backward).
 *
 *   mean_i = (1/c) sum_j x_ij
 *   var_i  = (1/c) sum_j (x_ij - mean_i)^2          (biased, as PyTorch)
 *   rstd_i = 1 / sqrt(var_i + eps)
 *   norm_ij = (x_ij - mean_i) rstd_i
 *   out_ij  = norm_ij weight_j + bias_j
 *
 * Backward (g = dout, accumulating):
 *   dbias_j   += sum_i g_ij
 *   dweight_j += sum_i g_ij norm_ij
 *   dinp_ij   += rstd_i (dn_ij - mean_j(dn_i.) - norm_ij mean_j(dn_i. norm_i.)),
 *                with dn_ij = g_ij weight_j
 *
 * _ref is the spec (double sums), _cpu threads over rows (and over columns
 * for the parameter gradients, so results do not depend on the thread
 * count), _cuda runs one warp per row (defined only with PTC_WITH_CUDA).
 *
 * @note Thread safety: stateless; calls on disjoint outputs may run
 *       concurrently.
 */
#ifndef PTC_KERNELS_LAYERNORM_H
#define PTC_KERNELS_LAYERNORM_H

#include <stddef.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/**
 * Forward.
 * @param out  [n, c] written
 * @param mean [n] written, or NULL (not saved)
 * @param rstd [n] written, or NULL (not saved)
 * @param inp  [n, c]
 * @param weight [c], @param bias [c]
 * @param eps  added to the variance (1e-5 in GPT-2); must be >= 0
 * @return PTC_OK; PTC_E_INVAL for a NULL required buffer or a negative or
 *         NaN eps; PTC_E_RANGE when a size overflows (_cuda: exceeds
 *         INT_MAX); _cuda: PTC_E_CUDA when a launch fails.
 */
int ptc_layernorm_forward_ref(float *out, float *mean, float *rstd,
                              const float *inp, const float *weight,
                              const float *bias, size_t n, size_t c, float eps);
/** Same contract as ptc_layernorm_forward_ref(), threaded over rows. */
int ptc_layernorm_forward_cpu(float *out, float *mean, float *rstd,
                              const float *inp, const float *weight,
                              const float *bias, size_t n, size_t c, float eps);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_layernorm_forward_cuda(float *out, float *mean, float *rstd,
                               const float *inp, const float *weight,
                               const float *bias, size_t n, size_t c, float eps,
                               struct CUstream_st *stream);

/**
 * Backward, accumulating into dinp [n, c], dweight [c] and dbias [c]; any of
 * the three may be NULL to skip it.
 * @param dout [n, c]; inp [n, c]; weight [c]; mean, rstd [n] from the forward
 * @return as ptc_layernorm_forward_ref() (no eps check).
 */
int ptc_layernorm_backward_ref(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp,
                               const float *weight, const float *mean,
                               const float *rstd, size_t n, size_t c);
/** Same contract as ptc_layernorm_backward_ref(), threaded. */
int ptc_layernorm_backward_cpu(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp,
                               const float *weight, const float *mean,
                               const float *rstd, size_t n, size_t c);
/** Same contract on device buffers, asynchronous on @p stream; dweight and
 * dbias come from a deterministic column reduction (no atomics). */
int ptc_layernorm_backward_cuda(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp,
                                const float *weight, const float *mean,
                                const float *rstd, size_t n, size_t c,
                                struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
