/**
 * @file crossentropy.h
 * @brief Softmax cross-entropy from logits and integer targets, and its
 * backward (fused softmax + cross-entropy, as in llm.c).
 *
 * Shapes (row-major): logits, dlogits [n, v] F32 with n = B*T rows and v the
 * vocabulary size; targets [n] int32; losses [n] F32.
 *
 *   p_ij     = exp(l_ij - max_j l_ij) / sum_k exp(l_ik - max_j l_ij)
 *   losses_i = log sum_k exp(l_ik) - l_{i,t_i}        (= -log p_{i,t_i})
 *   dlogits_ij += scale * (p_ij - [j == t_i])
 *
 * A negative target marks a row to ignore (padding): its loss is 0 and its
 * dlogits row is left unchanged. The mean loss over the batch is the sum of
 * losses divided by the number of rows counted; pass scale = 1/(that count)
 * (1/(B*T) with no padding) so the backward is the gradient of the mean.
 *
 * _ref is the spec (double arithmetic), _cpu threads over rows, _cuda runs
 * one block per row (defined only with PTC_WITH_CUDA).
 *
 * @note Thread safety: stateless; calls on disjoint outputs may run
 *       concurrently.
 */
#ifndef PTC_KERNELS_CROSSENTROPY_H
#define PTC_KERNELS_CROSSENTROPY_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/**
 * Per-row loss.
 * @param losses  [n] written
 * @param logits  [n, v]
 * @param targets [n], each in [0, v) or negative (ignored)
 * @return PTC_OK; PTC_E_INVAL for a NULL buffer of non-zero size;
 *         PTC_E_RANGE for a size overflow (_cuda: above INT_MAX) or, on the
 *         CPU paths, a target >= v (checked before anything is written:
 *         the message names the row). The _cuda version cannot report bad
 *         targets without a synchronisation: it writes NaN as that row's
 *         loss (and adds NaN to that row's dlogits in the backward).
 *         _cuda: PTC_E_CUDA when a launch fails.
 */
int ptc_crossentropy_forward_ref(float *losses, const float *logits,
                                 const int32_t *targets, size_t n, size_t v);
/** Same contract as ptc_crossentropy_forward_ref(), threaded over rows. */
int ptc_crossentropy_forward_cpu(float *losses, const float *logits,
                                 const int32_t *targets, size_t n, size_t v);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_crossentropy_forward_cuda(float *losses, const float *logits,
                                  const int32_t *targets, size_t n, size_t v,
                                  struct CUstream_st *stream);

/**
 * Backward, accumulating: dlogits[i][j] += scale * (p_ij - [j == t_i]).
 * The softmax is recomputed from @p logits (nothing is saved by the forward).
 * @param dlogits [n, v]; must not overlap logits
 * @param scale   gradient of the loss with respect to each row's loss,
 *                typically 1/(B*T)
 * @return as ptc_crossentropy_forward_ref().
 */
int ptc_crossentropy_backward_ref(float *dlogits, const float *logits,
                                  const int32_t *targets, size_t n, size_t v,
                                  float scale);
/** Same contract as ptc_crossentropy_backward_ref(), threaded over rows. */
int ptc_crossentropy_backward_cpu(float *dlogits, const float *logits,
                                  const int32_t *targets, size_t n, size_t v,
                                  float scale);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_crossentropy_backward_cuda(float *dlogits, const float *logits,
                                   const int32_t *targets, size_t n, size_t v,
                                   float scale, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
