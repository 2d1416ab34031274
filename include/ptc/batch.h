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

/* ---- batch policies ------------------------------------------------------------- */

/**
 * Batch policies (flags, combinable). The default (NONE) is the rule above.
 * A policy never changes the epoch order or which global batch a position
 * belongs to; it only leaves positions out (drops them):
 *
 * - DROP_LAST: the final global batch, when partial (n - start not a
 *   multiple of batch), has no step; its positions are dropped.
 * - EQUAL: in global batch k of B_k positions every rank gets
 *   q = floor(B_k / dp) consecutive positions: rank r reads
 *   [g + r*q, g + (r+1)*q), g the batch's first position; the last
 *   B_k mod dp positions of each global batch are dropped. (With B_k
 *   divisible by dp this equals the split rule.)
 *
 * Path names (docs/dataset.md): "drop-last", "equal", "drop-last+equal".
 */
typedef enum ptc_batch_policy {
    PTC_BATCH_POLICY_NONE = 0,      /**< the split rule, last batch partial */
    PTC_BATCH_POLICY_DROP_LAST = 1, /**< no step for a partial final batch */
    PTC_BATCH_POLICY_EQUAL = 2,     /**< floor(B_k / dp) records per rank */
} ptc_batch_policy;

/** Every valid policy flag. */
#define PTC_BATCH_POLICY_ALL (PTC_BATCH_POLICY_DROP_LAST | PTC_BATCH_POLICY_EQUAL)

/** Longest policy name written by ptc_batch_policy_name, with its NUL. */
#define PTC_BATCH_POLICY_NAME_MAX 16

/**
 * Parse a policy name: "none", "drop-last", "equal" or "drop-last+equal"
 * (exactly these spellings: one name per policy).
 * @return PTC_OK, or PTC_E_INVAL (message names the text) for anything else.
 */
PTC_API int ptc_batch_policy_parse(const char *text, unsigned *policy);

/**
 * The canonical name of @p policy ("none", "drop-last", "equal",
 * "drop-last+equal").
 * @return a static string, or NULL if @p policy has flags outside
 *         PTC_BATCH_POLICY_ALL.
 */
PTC_API const char *ptc_batch_policy_name(unsigned policy);

/**
 * ptc_batch_steps under @p policy: with DROP_LAST, floor((n - start) /
 * batch); otherwise as ptc_batch_steps.
 * @return PTC_OK; PTC_E_INVAL for batch 0 or an unknown policy flag;
 *         PTC_E_RANGE as ptc_batch_steps.
 */
PTC_API int ptc_batch_steps_policy(uint64_t n, uint64_t batch, uint64_t start,
                                   unsigned policy, uint64_t *steps);

/**
 * ptc_batch_part under @p policy (see ptc_batch_policy). With policy NONE
 * it is ptc_batch_part exactly.
 * @return PTC_OK; PTC_E_NOTFOUND if the step does not exist under the
 *         policy; PTC_E_INVAL (as ptc_batch_part, or an unknown policy
 *         flag); PTC_E_RANGE as ptc_batch_part.
 */
PTC_API int ptc_batch_part_policy(uint64_t n, uint64_t batch, uint64_t start,
                                  uint64_t dp, uint64_t rank, uint64_t step,
                                  unsigned policy, uint64_t *lo, uint64_t *hi);

/**
 * How many positions of [start, n) the policy drops (no step file of any
 * rank holds them) for global batch @p batch over @p dp ranks. Positions
 * before @p start are never dropped.
 * @return PTC_OK; PTC_E_INVAL (batch or dp 0, unknown flag); PTC_E_RANGE
 *         (n > PTC_DATASET_MAX_SAMPLES).
 */
PTC_API int ptc_batch_dropped(uint64_t n, uint64_t batch, uint64_t start, uint64_t dp,
                              unsigned policy, uint64_t *count);

/**
 * Is epoch position @p pos (< n) dropped by the policy (as
 * ptc_batch_dropped counts)?
 * @return PTC_OK; PTC_E_INVAL as ptc_batch_dropped; PTC_E_RANGE if
 *         @p pos >= n or n is too large.
 */
PTC_API int ptc_batch_is_dropped(uint64_t n, uint64_t batch, uint64_t start, uint64_t dp,
                                 unsigned policy, uint64_t pos, bool *dropped);

#ifdef __cplusplus
}
#endif
#endif
