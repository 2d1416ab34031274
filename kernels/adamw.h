/**
 * @file adamw.h
 * @brief AdamW optimizer step over a flat F32 parameter array (decoupled
 * weight decay, as torch.optim.AdamW and llm.c).
 *
 * For each i < n, with step t >= 1 (the first step is t = 1):
 *   m_i = beta1 m_i + (1 - beta1) g_i
 *   v_i = beta2 v_i + (1 - beta2) g_i^2
 *   mhat = m_i / (1 - beta1^t),  vhat = v_i / (1 - beta2^t)
 *   p_i = p_i - lr (mhat / (sqrt(vhat) + eps) + weight_decay p_i)
 * (the decay term uses p_i before the update). params, m and v are updated
 * in place; m and v start at zero.
 *
 * _ref is the spec (double arithmetic per element, stored as float), _cpu
 * splits the array over threads, _cuda runs on a stream (defined only with
 * PTC_WITH_CUDA).
 *
 * @note Thread safety: stateless; calls on disjoint arrays may run
 *       concurrently.
 */
#ifndef PTC_KERNELS_ADAMW_H
#define PTC_KERNELS_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/** AdamW hyper-parameters (a small value type; GPT-2 training in llm.c uses
 * lr 3e-4, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0). */
typedef struct ptc_adamw_params {
    float lr;           /**< learning rate, finite */
    float beta1;        /**< first-moment decay, in [0, 1) */
    float beta2;        /**< second-moment decay, in [0, 1) */
    float eps;          /**< added to sqrt(vhat), >= 0 */
    float weight_decay; /**< decoupled decay coefficient, finite */
} ptc_adamw_params;

/**
 * One AdamW step.
 * @param params [n] updated in place
 * @param m      [n] first moments, updated in place
 * @param v      [n] second moments, updated in place
 * @param grads  [n] gradients (not modified; must not overlap the others)
 * @param n      element count
 * @param hp     hyper-parameters (host memory, read during the call)
 * @param t      step number, >= 1, for the bias corrections
 * @return PTC_OK; PTC_E_INVAL for a NULL buffer of non-zero size, NULL @p hp,
 *         t < 1 or a hyper-parameter outside its range; _cuda: PTC_E_RANGE
 *         when n exceeds 2^31 - 1, PTC_E_CUDA when the launch fails.
 */
int ptc_adamw_update_ref(float *params, float *m, float *v, const float *grads,
                         size_t n, const ptc_adamw_params *hp, int64_t t);
/** Same contract as ptc_adamw_update_ref(), float arithmetic, threaded. */
int ptc_adamw_update_cpu(float *params, float *m, float *v, const float *grads,
                         size_t n, const ptc_adamw_params *hp, int64_t t);
/** Same contract on device buffers (hp stays in host memory), asynchronous
 * on @p stream. */
int ptc_adamw_update_cuda(float *params, float *m, float *v,
                          const float *grads, size_t n,
                          const ptc_adamw_params *hp, int64_t t,
                          struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
