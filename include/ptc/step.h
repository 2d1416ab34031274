/**
 * @file step.h
 * @brief Dataset steps: which records make step K of data-parallel rank R,
 *        and the path that names it (dataset/step.c).
 *
 * A step is named by the parameters of its path in the mounted tree
 * (DESIGN.md, "Dataset view"; docs/dataset.md, "Steps: the records and
 * the path"):
 *
 *     seed-<S>/epoch-<E>/batch-<B>/start-<X>/dp-<D>/[policy-<P>/]rank-<R>/step-<K>[.idx]
 *
 * Step K of rank R reads the positions of the epoch order (ptc/order.h,
 * seed S, epoch E) that ptc_batch_part_policy() gives: global batch
 * [X + K*B, X + (K+1)*B) clipped to N, split over D ranks by the split
 * rule, or as batch policy P says (ptc/batch.h). Everything follows from
 * N and these eight numbers; nothing is stored.
 *
 * These are the only functions that compute a step's records and that
 * write and read its path: the view (fuse/), `ptc train --data`, the
 * Python package and the benchmarks all go through them, so a step file
 * read through a mount and a step read from the store hold the same
 * records.
 *
 * @note Thread safety: pure functions; safe from any thread.
 */
#ifndef PTC_STEP_H
#define PTC_STEP_H

#include "ptc/batch.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest data-parallel degree a step path names (dp-<D>); a larger one
 * is PTC_E_RANGE. */
#define PTC_DATASET_STEP_MAX_DP ((uint64_t)1 << 20)

/** Room for the longest path ptc_dataset_step_format() writes (every
 * number at 20 digits, the longest policy name), with its NUL. */
#define PTC_DATASET_STEP_PATH_MAX 256

/**
 * One step of one data-parallel rank: the numbers of its path. A small
 * value type; zero-initialise, then set the fields.
 */
typedef struct ptc_dataset_step {
    uint64_t seed;   /**< seed S of the epoch order */
    uint64_t epoch;  /**< epoch E */
    uint64_t batch;  /**< global batch B (>= 1) */
    uint64_t start;  /**< start position X: the epoch position of step 0 */
    uint64_t dp;     /**< data-parallel degree D (>= 1; a path names at most
                          PTC_DATASET_STEP_MAX_DP) */
    uint64_t rank;   /**< data-parallel rank R (< D) */
    uint64_t step;   /**< step K */
    unsigned policy; /**< ptc_batch_policy flags; 0 (the split rule) has no
                          policy-<P> component */
} ptc_dataset_step;

/**
 * How deep a step path goes: each level is a directory of the mounted tree
 * below datasets/<NAME>/, but for the last two, which are files.
 */
typedef enum ptc_dataset_step_level {
    PTC_DATASET_STEP_LEVEL_SEED = 1, /**< seed-<S> */
    PTC_DATASET_STEP_LEVEL_EPOCH,    /**< .../epoch-<E> */
    PTC_DATASET_STEP_LEVEL_BATCH,    /**< .../batch-<B> */
    PTC_DATASET_STEP_LEVEL_START,    /**< .../start-<X> */
    PTC_DATASET_STEP_LEVEL_DP,       /**< .../dp-<D> */
    PTC_DATASET_STEP_LEVEL_POLICY,   /**< .../dp-<D>/policy-<P> (policy != 0) */
    PTC_DATASET_STEP_LEVEL_RANK,     /**< .../dp-<D>/[policy-<P>/]rank-<R> */
    PTC_DATASET_STEP_LEVEL_FILE,     /**< .../rank-<R>/step-<K>: the records */
    PTC_DATASET_STEP_LEVEL_INDEX,    /**< .../rank-<R>/step-<K>.idx: their offsets */
} ptc_dataset_step_level;

/**
 * The positions [*lo, *hi) of the epoch order that step @p s reads from a
 * dataset of @p n records (ptc_batch_part_policy with the fields of @p s).
 * The part may be empty (*lo == *hi) for a step that exists.
 * @return PTC_OK; PTC_E_NOTFOUND if the step does not exist (past the end
 *         of the epoch, or the partial last batch under drop-last);
 *         PTC_E_INVAL (batch or dp 0, rank >= dp, an unknown policy flag);
 *         PTC_E_RANGE (@p n over PTC_DATASET_MAX_SAMPLES).
 */
PTC_API int ptc_dataset_step_range(uint64_t n, const ptc_dataset_step *s, uint64_t *lo,
                                   uint64_t *hi);

/**
 * The sample ids of the records of step @p s, in epoch order: id i is the
 * sample at position lo + i of the order (n, seed, epoch), [lo, hi) as
 * ptc_dataset_step_range() gives them.
 * @param ids    receives *count ids
 * @param cap    room in @p ids
 * @param count  receives hi - lo (ptc_dataset_step_range), also when
 *               @p cap is too small
 * @return PTC_OK; the errors of ptc_dataset_step_range; PTC_E_RANGE if
 *         @p cap < *count (nothing is written).
 */
PTC_API int ptc_dataset_step_ids(uint64_t n, const ptc_dataset_step *s, uint64_t *ids,
                                 uint64_t cap, uint64_t *count);

/**
 * Write the path of step @p s down to @p level, relative to the dataset's
 * directory (no leading or trailing '/'), e.g.
 * "seed-7/epoch-0/batch-64/start-0/dp-2/policy-equal/rank-1/step-3.idx".
 * The policy-<P> component is written at level POLICY and the levels
 * below it when s->policy is not 0. The fields of the levels below
 * @p level are not read (the policy counts as a field of the levels below
 * dp-<D>). Numbers are canonical decimal, so ptc_dataset_step_parse()
 * gives back @p s.
 * @param cap  room in @p buf (PTC_DATASET_STEP_PATH_MAX always suffices)
 * @return PTC_OK; PTC_E_INVAL for an unknown level, a field the level
 *         names out of range (batch 0, dp 0, rank >= dp, an unknown policy
 *         flag), or level POLICY with policy 0; PTC_E_RANGE for dp over
 *         PTC_DATASET_STEP_MAX_DP or a path longer than @p cap - 1.
 */
PTC_API int ptc_dataset_step_format(const ptc_dataset_step *s, ptc_dataset_step_level level,
                                    char *buf, size_t cap);

/**
 * Parse a step path (the @p len bytes at @p path, no NUL needed) of any
 * level, relative to a dataset's directory, as ptc_dataset_step_format()
 * writes it: every number canonical decimal ("0" or no leading zero),
 * batch >= 1, 1 <= dp, rank < dp, a policy name other than "none" (a path
 * without a policy has no policy-<P> component), no empty, leading or
 * trailing component. Fields below the level are 0.
 * @param s      receives the fields
 * @param level  receives how deep the path goes
 * @return PTC_OK; PTC_E_INVAL for anything else (the message names the
 *         path); PTC_E_RANGE for a number over 2^64 - 1 or dp over
 *         PTC_DATASET_STEP_MAX_DP.
 */
PTC_API int ptc_dataset_step_parse(const char *path, size_t len, ptc_dataset_step *s,
                                   ptc_dataset_step_level *level);

#ifdef __cplusplus
}
#endif
#endif
