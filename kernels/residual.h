/**
 * @file residual.h
 * @brief Residual connection: out = inp1 + inp2, and its backward.
 *
 * Element-wise over @p n F32 values (n = B*T*C). The backward adds dout to
 * both input gradients (accumulating). out may equal inp1 or inp2;
 * dinp1 and dinp2 must differ from each other and from dout.
 * _ref is the spec, _cpu splits the array over threads, _cuda runs on a
 * stream (defined only with PTC_WITH_CUDA).
 *
 * @note Thread safety: stateless; calls on disjoint outputs may run
 *       concurrently.
 */
#ifndef PTC_KERNELS_RESIDUAL_H
#define PTC_KERNELS_RESIDUAL_H

#include <stddef.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/**
 * out[i] = inp1[i] + inp2[i] for i < n.
 * @return PTC_OK, or PTC_E_INVAL for a NULL buffer when n > 0;
 *         _cuda: PTC_E_RANGE when n exceeds 2^31 - 1, PTC_E_CUDA when the
 *         launch fails.
 */
int ptc_residual_forward_ref(float *out, const float *inp1, const float *inp2,
                             size_t n);
/** Same contract as ptc_residual_forward_ref(), threaded. */
int ptc_residual_forward_cpu(float *out, const float *inp1, const float *inp2,
                             size_t n);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_residual_forward_cuda(float *out, const float *inp1,
                              const float *inp2, size_t n,
                              struct CUstream_st *stream);

/**
 * dinp1[i] += dout[i] and dinp2[i] += dout[i] for i < n.
 * @return as ptc_residual_forward_ref().
 */
int ptc_residual_backward_ref(float *dinp1, float *dinp2, const float *dout,
                              size_t n);
/** Same contract as ptc_residual_backward_ref(), threaded. */
int ptc_residual_backward_cpu(float *dinp1, float *dinp2, const float *dout,
                              size_t n);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_residual_backward_cuda(float *dinp1, float *dinp2, const float *dout,
                               size_t n, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
