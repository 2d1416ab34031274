/**
 * @file dataset.h
 * @brief Stored datasets: ingest into a store, served-record counting and the exactly-once audit (dataset/).
 *
 * The dataset module's other headers come with this one: ptc/order.h (epoch
 * order), ptc/batch.h (batch arithmetic), ptc/step.h (the records and path
 * of a step), ptc/ingest.h (ingest readers).
 *
 * @note Thread safety: a ptc_dataset_counter takes adds from any number of
 *       threads (see below); the other calls are safe on distinct stores and
 *       follow the store's rules (include/ptc/store.h) on one.
 */
#ifndef PTC_DATASET_H
#define PTC_DATASET_H

#include "ptc/batch.h"
#include "ptc/ingest.h"
#include "ptc/order.h"
#include "ptc/step.h"
#include "ptc/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Buffers "record served" events and adds them to the persistent count map
 * (per dataset, seed, epoch and record id) in the store's LMDB environment.
 * Opaque.
 * @note Thread safety: ptc_dataset_counter_add may be called from any
 *       number of threads at once, also concurrently with flush; destroy is
 *       externally synchronised.
 */
typedef struct ptc_dataset_counter ptc_dataset_counter;

/**
 * Create a counter writing into @p store (which must outlive it and not be
 * read-only).
 * @return PTC_OK, PTC_E_INVAL (read-only store), PTC_E_NOMEM, PTC_E_STORE.
 */
PTC_API int ptc_dataset_counter_create(ptc_dataset_counter **out, ptc_store *store);

/** Count one serving of record @p id of dataset @p name (its ingest
 * @p generation: the store's catalog id) in (seed, epoch). Counts of a
 * replaced dataset stay with their generation and never mix with the new
 * one's. Kept in memory until the next flush.
 * @return PTC_OK, PTC_E_INVAL (bad name), PTC_E_NOMEM. */
PTC_API int ptc_dataset_counter_add(ptc_dataset_counter *c, const char *name,
                                    uint64_t generation, uint64_t seed, uint64_t epoch,
                                    uint64_t id);

/** Add every buffered count to the store in one LMDB transaction (durable
 * when it returns). On failure the counts stay buffered for the next try.
 * @return PTC_OK or a store error. */
PTC_API int ptc_dataset_counter_flush(ptc_dataset_counter *c);

/** Flush (best effort) and free; NULL is a no-op. */
PTC_API void ptc_dataset_counter_destroy(ptc_dataset_counter *c);

/** The exactly-once audit of one (dataset, seed, epoch). */
typedef struct ptc_dataset_audit_result {
    uint64_t samples;  /**< N */
    uint64_t once;     /**< records served exactly once */
    uint64_t repeated; /**< records served more than once */
    uint64_t missing;  /**< records never served (dropped ones excluded) */
    uint64_t dropped;  /**< records never served that the batch policy drops
                            (0 without a policy) */
} ptc_dataset_audit_result;

/**
 * The batch policy an epoch was read under, for the audit: the policy
 * (ptc_batch_policy flags) with the global batch, start position and dp
 * degree of the step files (policy-<P> under batch-<B>/start-<X>/dp-<D>).
 */
typedef struct ptc_dataset_batch_policy {
    unsigned policy; /**< ptc_batch_policy flags */
    uint64_t batch;  /**< global batch B (>= 1) */
    uint64_t start;  /**< start position X */
    uint64_t dp;     /**< data-parallel degree D (>= 1) */
} ptc_dataset_batch_policy;

/**
 * Audit the count map of (@p name, @p generation, @p seed, @p epoch) for a
 * dataset of @p samples records.
 * @return PTC_OK; PTC_E_STORE if the map holds an id >= @p samples;
 *         PTC_E_INVAL (bad name); an LMDB error.
 */
PTC_API int ptc_dataset_audit_counts(ptc_store *store, const char *name,
                                     uint64_t generation, uint64_t seed,
                                     uint64_t epoch, uint64_t samples,
                                     ptc_dataset_audit_result *out);

/**
 * ptc_dataset_audit_counts for an epoch read under batch policy @p policy
 * (NULL: no policy, as ptc_dataset_audit_counts). A record that was never
 * served and whose epoch position the policy drops (ptc_batch_is_dropped)
 * counts as dropped, not missing; so an epoch read completely under the
 * policy audits as once = samples - dropped, missing = 0 and dropped =
 * ptc_batch_dropped(). Served records count as once/repeated whatever the
 * policy, so samples = once + repeated + missing + dropped.
 * @return as ptc_dataset_audit_counts; PTC_E_INVAL for a bad policy (unknown
 *         flags, batch or dp 0).
 */
PTC_API int ptc_dataset_audit_counts_policy(ptc_store *store, const char *name,
                                            uint64_t generation, uint64_t seed,
                                            uint64_t epoch, uint64_t samples,
                                            const ptc_dataset_batch_policy *policy,
                                            ptc_dataset_audit_result *out);

/* ---- stored datasets -------------------------------------------------------------- */

/** Options of ptc_dataset_ingest(). Zero-initialise, then set fields. */
typedef struct ptc_dataset_ingest_options {
    unsigned codec;           /**< PTC_STORE_CODEC_NONE (0) / _ZSTD (1) */
    int level;                /**< zstd level (0: default) */
    bool replace;             /**< replace an existing dataset of that name */
    ptc_progress_fn progress; /**< ("ingest", input bytes done, total) */
    void *progress_user;
} ptc_dataset_ingest_options;

/**
 * Ingest @p ninputs inputs of @p format (as ptc_ingest_open) into the store
 * as dataset @p name: records stream through the store's block engine into
 * the dataset's pack file, then the index, an fsync, and one catalog commit
 * (ptc_store_dataset_writer_*). A failure leaves the store as it was.
 * @param samples  receives N (may be NULL)
 * @return PTC_OK; the errors of ptc_ingest_open / ptc_ingest_next (naming
 *         the input and record) and of the dataset writer (PTC_E_EXISTS,
 *         PTC_E_BUSY, PTC_E_IO).
 */
PTC_API int ptc_dataset_ingest(ptc_store *store, const char *name, const char *format,
                               const char *const *inputs, size_t ninputs,
                               const ptc_dataset_ingest_options *opts, uint64_t *samples);

/**
 * The exactly-once audit of stored dataset @p name: ptc_dataset_audit_counts
 * with N taken from the catalog.
 * @return PTC_OK, PTC_E_NOTFOUND (no such dataset), the audit's errors.
 */
PTC_API int ptc_dataset_audit(ptc_store *store, const char *name, uint64_t seed,
                              uint64_t epoch, ptc_dataset_audit_result *out);

/**
 * ptc_dataset_audit under batch policy @p policy (NULL: no policy), as
 * ptc_dataset_audit_counts_policy with N taken from the catalog.
 * @return PTC_OK, PTC_E_NOTFOUND (no such dataset), PTC_E_RANGE (the
 *   policy's start is past the N records), the audit's errors.
 */
PTC_API int ptc_dataset_audit_policy(ptc_store *store, const char *name, uint64_t seed,
                                     uint64_t epoch, const ptc_dataset_batch_policy *policy,
                                     ptc_dataset_audit_result *out);

#ifdef __cplusplus
}
#endif
#endif
