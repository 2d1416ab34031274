/**
 * @file embedding.h
 * @brief Embedding lookup (token embedding rows gathered by id) and its
 * backward (scatter-add into the table gradient).
 *
 * Shapes (row-major): table, dtable [vocab, c] F32; ids [n] int32 with
 * n = B*T; out, dout [n, c] F32.
 *
 *   out[i][:]          = table[ids[i]][:]
 *   dtable[ids[i]][:] += dout[i][:]          (rows with equal ids sum up)
 *
 * A learned position embedding (GPT-2's wpe) is the same lookup with
 * ids[b*T + t] = t, added with the residual kernel.
 *
 * _ref is the spec; _cpu splits rows (forward) or columns (backward) over
 * threads, so each dtable element is summed in row order by one thread and
 * the result does not depend on the thread count; _cuda is also
 * deterministic (no atomics) and defined only with PTC_WITH_CUDA.
 *
 * @note Thread safety: stateless; calls on disjoint outputs may run
 *       concurrently.
 */
#ifndef PTC_KERNELS_EMBEDDING_H
#define PTC_KERNELS_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/**
 * Gather rows.
 * @param out   [n, c] written
 * @param ids   [n], each in [0, vocab)
 * @param table [vocab, c]
 * @return PTC_OK; PTC_E_INVAL for a NULL buffer of non-zero size;
 *         PTC_E_RANGE for a size overflow (_cuda: above INT_MAX) or, on the
 *         CPU paths, an id outside [0, vocab) (checked before anything is
 *         written; the message names the row). The _cuda version cannot
 *         report bad ids without a synchronisation: it writes a NaN row in
 *         the forward and skips the row in the backward.
 *         _cuda: PTC_E_CUDA when a launch fails.
 */
int ptc_embedding_forward_ref(float *out, const int32_t *ids,
                              const float *table, size_t n, size_t vocab,
                              size_t c);
/** Same contract as ptc_embedding_forward_ref(), threaded over rows. */
int ptc_embedding_forward_cpu(float *out, const int32_t *ids,
                              const float *table, size_t n, size_t vocab,
                              size_t c);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_embedding_forward_cuda(float *out, const int32_t *ids,
                               const float *table, size_t n, size_t vocab,
                               size_t c, struct CUstream_st *stream);

/**
 * Scatter-add, accumulating: dtable[ids[i]][j] += dout[i][j].
 * @param dtable [vocab, c]
 * @param dout   [n, c]
 * @param ids    [n]
 * @return as ptc_embedding_forward_ref().
 */
int ptc_embedding_backward_ref(float *dtable, const float *dout,
                               const int32_t *ids, size_t n, size_t vocab,
                               size_t c);
/** Same contract as ptc_embedding_backward_ref(), threaded over columns. */
int ptc_embedding_backward_cpu(float *dtable, const float *dout,
                               const int32_t *ids, size_t n, size_t vocab,
                               size_t c);
/** Same contract on device buffers, asynchronous on @p stream. */
int ptc_embedding_backward_cuda(float *dtable, const float *dout,
                                const int32_t *ids, size_t n, size_t vocab,
                                size_t c, struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif
#endif
