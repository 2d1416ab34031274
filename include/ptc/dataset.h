/**
 * @file dataset.h
 * @brief Datasets: epoch order, batch arithmetic and ingest readers.
 *
 * - **Epoch order.** The order of epoch E with seed S is a keyed bijective
 *   pseudo-random permutation of [0, N): position p of the epoch holds sample
 *   ptc_order_sample(p); ptc_order_position() is the inverse. It is a
 *   balanced Feistel network over the smallest even-bit-width power-of-two
 *   domain >= N, XXH3-64 round function, PTC_ORDER_ROUNDS rounds and
 *   cycle-walking; O(1) memory. docs/dataset.md specifies it bit for bit.
 * - **Batch arithmetic.** Global batch k of size B from start position X
 *   covers positions [X + k*B, X + (k+1)*B) clipped to N; data-parallel rank
 *   r of D gets its part by the split rule (ptc_split).
 * - **Ingest readers.** Streaming record iterators over input files in the
 *   formats `lines`, `jsonl`, `files`, `tokens:u16:LEN`, `tokens:u32:LEN`,
 *   `npy`, `tfrecord`.
 *
 * @note Thread safety: ptc_order values are immutable after init and may be
 *       shared by any number of threads; the batch functions are pure. A
 *       ptc_ingest reader is externally synchronised (one thread at a time).
 */
#ifndef PTC_DATASET_H
#define PTC_DATASET_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- epoch order ------------------------------------------------------------ */

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

/* ---- batch arithmetic ----------------------------------------------------------- */

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

/* ---- ingest readers ------------------------------------------------------------ */

/** Largest record an ingest reader returns (1 GiB); larger is an error. */
#define PTC_INGEST_MAX_RECORD ((uint64_t)1 << 30)

/** A streaming record reader over the inputs of one ingest. Opaque. */
typedef struct ptc_ingest ptc_ingest;

/**
 * Open a reader of @p format over @p ninputs input paths, read in the given
 * order (for `files`, each INPUT is a directory walked recursively, or a
 * single file). Formats: `lines`, `jsonl`, `files`, `tokens:u16:LEN`,
 * `tokens:u32:LEN`, `npy`, `tfrecord` (see docs/dataset.md for the exact
 * record boundaries of each).
 * @param out   the reader; NULL on failure
 * @return PTC_OK; PTC_E_INVAL for an unknown or malformed format or no
 *         inputs; PTC_E_IO / PTC_E_NOTFOUND if an input cannot be opened;
 *         PTC_E_NOMEM. PTC_E_UNSUPPORTED for a format this build lacks.
 */
PTC_API int ptc_ingest_open(ptc_ingest **out, const char *format,
                            const char *const *inputs, size_t ninputs);

/**
 * Check that @p format is a valid ingest format text (as ptc_ingest_open
 * parses it), without opening anything.
 * @return PTC_OK; PTC_E_INVAL naming the problem (see ptc_last_error()).
 */
PTC_API int ptc_ingest_format_check(const char *format);

/**
 * Open a reader of @p format over an in-memory input of @p len bytes (as if
 * it were one input file; not valid for `files`). The buffer must outlive
 * the reader.
 * @return as ptc_ingest_open.
 */
PTC_API int ptc_ingest_open_buffer(ptc_ingest **out, const char *format,
                                   const void *data, size_t len);

/**
 * Read the next record.
 * @param data  set to the record's bytes, owned by the reader and valid
 *              until the next call on it or its destruction
 * @param len   set to the record's length
 * @param end   set to true (and *data NULL, *len 0) when no record is left
 * @return PTC_OK; PTC_E_FORMAT for malformed input (the detail names the
 *         input and the record or line); PTC_E_CHECKSUM for a tfrecord CRC
 *         mismatch (names the record index); PTC_E_IO; PTC_E_NOMEM. After
 *         an error the reader only returns that error again.
 */
PTC_API int ptc_ingest_next(ptc_ingest *r, const uint8_t **data, size_t *len,
                            bool *end);

/** Number of records returned so far. */
PTC_API uint64_t ptc_ingest_count(const ptc_ingest *r);

/**
 * Install a progress callback, called with ("ingest", bytes consumed, total
 * input bytes) at most every 16 MiB of input and once at the end.
 */
PTC_API void ptc_ingest_set_progress(ptc_ingest *r, ptc_progress_fn fn,
                                     void *user);

/** Close the reader; NULL is a no-op. */
PTC_API void ptc_ingest_destroy(ptc_ingest *r);

/**
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and
 * final xor 0xFFFFFFFF) of @p len bytes, continuing from @p crc (0 to start).
 */
PTC_API uint32_t ptc_crc32c(uint32_t crc, const void *data, size_t len);

/** TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
PTC_API uint32_t ptc_crc32c_mask(uint32_t crc);

/* ---- served counts (audit) ------------------------------------------------------ */

/** The store (include/ptc/store.h). */
typedef struct ptc_store ptc_store;

/** Name of the LMDB database of the count map inside the store. */
#define PTC_DATASET_DB_COUNTS "ptc.dataset.counts"

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
    uint64_t missing;  /**< records never served */
} ptc_dataset_audit_result;

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

#ifdef __cplusplus
}
#endif
#endif
