/**
 * @file order.h
 * @brief The epoch order of a dataset (dataset/order.c).
 *
 * The order of epoch E with seed S is a keyed bijective pseudo-random
 * permutation of [0, N): position p of the epoch holds sample
 * ptc_order_sample(p); ptc_order_position() is the inverse. It is a balanced
 * Feistel network over the smallest even-bit-width power-of-two domain >= N,
 * XXH3-64 round function, PTC_ORDER_ROUNDS rounds and cycle-walking; O(1)
 * memory. docs/dataset.md specifies it bit for bit.
 *
 * @note Thread safety: a ptc_order is immutable after init and may be shared
 *       by any number of threads.
 */
#ifndef PTC_ORDER_H
#define PTC_ORDER_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Number of Feistel rounds of the epoch order (part of the format). */
#define PTC_ORDER_ROUNDS 6

/** Largest dataset size the order and batch functions accept (2^63 - 1). */
#define PTC_DATASET_MAX_SAMPLES ((uint64_t)INT64_MAX)

/**
 * The epoch order of one (N, seed, epoch): a small value type. Fill it with
 * ptc_order_init(); treat the fields as private.
 */
typedef struct ptc_order {
    uint64_t n;      /**< number of samples N */
    uint64_t seed;   /**< the seed S */
    uint64_t epoch;  /**< the epoch E */
    uint32_t half;   /**< half width h in bits: domain is 2^(2h) */
    uint64_t mask;   /**< 2^h - 1 */
} ptc_order;

/**
 * Set up the order of epoch @p epoch with seed @p seed over @p n samples.
 * @return PTC_OK, or PTC_E_RANGE if @p n > PTC_DATASET_MAX_SAMPLES.
 */
PTC_API int ptc_order_init(ptc_order *o, uint64_t n, uint64_t seed,
                           uint64_t epoch);

/**
 * The sample id at position @p pos of the epoch.
 * @return PTC_OK, or PTC_E_RANGE if @p pos >= N (always for N = 0).
 */
PTC_API int ptc_order_sample(const ptc_order *o, uint64_t pos, uint64_t *id);

/**
 * The position of sample @p id in the epoch (inverse of ptc_order_sample).
 * @return PTC_OK, or PTC_E_RANGE if @p id >= N.
 */
PTC_API int ptc_order_position(const ptc_order *o, uint64_t id, uint64_t *pos);

#ifdef __cplusplus
}
#endif
#endif
