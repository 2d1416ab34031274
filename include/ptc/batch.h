/**
 * @file batch.h
 * @brief Batch arithmetic over the epoch order (dataset/order.c).
 *
 * Global batch k of size B from start position X covers positions
 * [X + k*B, X + (k+1)*B) clipped to N; data-parallel rank r of D gets its
 * part by the split rule (ptc_split).
 *
 * @note Thread safety: pure functions.
 */
#ifndef PTC_BATCH_H
#define PTC_BATCH_H

#include "ptc/order.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Number of global batches (steps) of size @p batch from start position
 * @p start of an epoch of @p n samples: ceil((n - start) / batch), 0 when
 * start >= n.
 * @return PTC_OK, or PTC_E_INVAL if @p batch is 0, PTC_E_RANGE if @p n is
 *         over PTC_DATASET_MAX_SAMPLES.
 */
PTC_API int ptc_batch_steps(uint64_t n, uint64_t batch, uint64_t start,
                            uint64_t *steps);

/**
 * Positions [*lo, *hi) of the epoch order that data-parallel rank @p rank
 * of @p dp reads at step @p step: global batch [start + step*batch,
 * start + (step+1)*batch) clipped to @p n, split over @p dp ranks by the
 * split rule. The part may be empty (*lo == *hi) for a step that exists.
 * Overflow-safe for any 64-bit inputs.
 * @return PTC_OK; PTC_E_NOTFOUND if the step does not exist (start +
 *         step*batch >= n); PTC_E_INVAL if @p batch or @p dp is 0 or
 *         @p rank >= @p dp; PTC_E_RANGE if @p n > PTC_DATASET_MAX_SAMPLES.
 */
PTC_API int ptc_batch_part(uint64_t n, uint64_t batch, uint64_t start,
                           uint64_t dp, uint64_t rank, uint64_t step,
                           uint64_t *lo, uint64_t *hi);

#ifdef __cplusplus
}
#endif
#endif
