/**
 * @file kernels_internal.h
 * @brief Private helpers shared by the training kernels (never installed):
 * size checks and a small fork-join loop over pthreads for the optimized
 * CPU paths.
 * @note Thread safety: every function here is safe from any thread.
 */
#ifndef PTC_KERNELS_INTERNAL_H
#define PTC_KERNELS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Body of a parallel loop: handle indices [begin, end). */
typedef void (*ptc_kernels_range_fn)(void *ctx, size_t begin, size_t end);

/**
 * Run @p fn over [0, n) split into contiguous chunks of at least @p grain
 * indices, on up to ptc_kernels_threads() threads (the caller runs one
 * chunk). Small loops run inline. If a thread cannot be started its chunk
 * runs on the caller, so this never fails.
 */
void ptc_kernels_parallel_for(size_t n, size_t grain, ptc_kernels_range_fn fn,
                              void *ctx);

/** @return the number of threads the CPU kernels use (>= 1): the value set
 * with ptc_kernels_set_threads(), else the online CPUs capped at 16. */
int ptc_kernels_threads(void);

/** Set the thread count of the CPU kernels; 0 restores the default.
 * Process-wide; meant for tests and benchmarks. */
void ptc_kernels_set_threads(int n);

/** @return true and *out = a*b when the product fits a size_t. */
static inline bool ptc_kernels_mul(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/**
 * Check that the element count a*b of an operand fits in size_t and that the
 * operand pointer is set when the count is non-zero.
 * @return PTC_OK, PTC_E_RANGE (overflow) or PTC_E_INVAL (NULL pointer),
 *         with a message naming @p op and @p arg.
 */
int ptc_kernels_check_buf(const char *op, const char *arg, const void *p,
                          size_t a, size_t b);


/** @return PTC_OK when a, b and c all fit an int, else PTC_E_RANGE naming
 * @p op (BLAS and CUDA launch sizes are int). */
int ptc_kernels_check_int(const char *op, size_t a, size_t b, size_t c);

/**
 * Argument checks shared by the three implementations of an op (the _ref,
 * _cpu and _cuda functions accept exactly the same arguments). Each returns
 * PTC_OK or the op's documented error with a message naming @p op.
 * @p int_sizes: also require every size to fit an int (BLAS, CUDA grids).
 */
int ptc_matmul_check_forward(const char *op, const float *out, const float *inp,
                             const float *weight, size_t n, size_t c, size_t oc,
                             bool int_sizes);
int ptc_matmul_check_backward(const char *op, const float *dinp,
                              const float *dweight, const float *dbias,
                              const float *dout, const float *inp,
                              const float *weight, size_t n, size_t c,
                              size_t oc, bool int_sizes);
int ptc_layernorm_check_forward(const char *op, const float *out,
                                const float *inp, const float *weight,
                                const float *bias, size_t n, size_t c,
                                float eps, bool int_sizes);
int ptc_layernorm_check_backward(const char *op, const float *dinp,
                                 const float *dweight, const float *dbias,
                                 const float *dout, const float *inp,
                                 const float *weight, const float *mean,
                                 const float *rstd, size_t n, size_t c,
                                 bool int_sizes);
int ptc_crossentropy_check(const char *op, const float *out,
                           size_t out_cols, const float *logits,
                           const int32_t *targets, size_t n, size_t v,
                           bool check_targets, bool int_sizes);
struct ptc_adamw_params;
int ptc_adamw_check(const char *op, const float *params, const float *m,
                    const float *v, const float *grads, size_t n,
                    const struct ptc_adamw_params *hp, int64_t t,
                    bool int_sizes);
int ptc_embedding_check(const char *op, const float *rows, const int32_t *ids,
                        const float *table, size_t n, size_t vocab, size_t c,
                        bool check_ids, bool int_sizes);

#ifdef __cplusplus
}
#endif
#endif
