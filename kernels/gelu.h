/**
 * @file gelu.h
 * @brief GELU activation, tanh approximation (GPT-2), and its backward.
 *
 *   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 *   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 *
 * Element-wise over @p n F32 values (n = B*T*C). _ref is the spec (double
 * arithmetic), _cpu splits the array over threads, _cuda runs on a stream
 * (defined only with PTC_WITH_CUDA). The backward accumulates into dinp.
 * out may equal inp (in place); dinp must not overlap inp or dout.
 *
 * @note Thread safety: stateless; calls on disjoint outputs may run
 *       concurrently.
 */
#ifndef PTC_KERNELS_GELU_H
#define PTC_KERNELS_GELU_H

#include <stddef.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/**
 * out[i] = gelu(inp[i]) for i < n.
 * @return PTC_OK, or PTC_E_INVAL for a NULL buffer when n > 0;
 *         _cuda: PTC_E_RANGE when n exceeds what one launch covers
 *         (2^31 - 1 elements), PTC_E_CUDA when the launch fails.
 */
int ptc_gelu_forward_ref(float *out, const float *inp, size_t n);
/** Same contract as ptc_gelu_forward_ref(), threaded. */
int ptc_gelu_forward_cpu(float *out, const float *inp, size_t n);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_gelu_forward_cuda(float *out, const float *inp, size_t n,
                          struct CUstream_st *stream);

/**
 * dinp[i] += gelu'(inp[i]) * dout[i] for i < n.
 * @return as ptc_gelu_forward_ref().
 */
int ptc_gelu_backward_ref(float *dinp, const float *inp, const float *dout,
                          size_t n);
/** Same contract as ptc_gelu_backward_ref(), threaded. */
int ptc_gelu_backward_cpu(float *dinp, const float *inp, const float *dout,
                          size_t n);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_gelu_backward_cuda(float *dinp, const float *inp, const float *dout,
                           size_t n, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
