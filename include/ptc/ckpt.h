/**
 * @file ckpt.h
 * @brief Training-state checkpoints from a running job: every process saves
 * the local tensors of the ranks it runs into the store in parallel, one
 * process commits one version carrying a training-state record, and a job
 * under any parallel configuration loads its own ranks' local tensors back
 * (docs/checkpoint.md; the record is specified in docs/format.md §9).
 *
 * A job describes what it holds with a ptc_layout (ptc/layout.h): its
 * tensors — parameters and optimizer state such as `<param>.exp_avg` and
 * `<param>.exp_avg_sq` under rules with an `optim` line — under its
 * configuration (which may have zero=1). Each process passes the ranks it
 * runs and, per (rank, tensor), a pointer to that rank's local tensor: the
 * layout's local shape (ptc_layout_shard), row-major, the tensor's dtype,
 * little-endian. Buffer arrays are indexed `bufs[i * ntensors + t]` for
 * `ranks[i]` and tensor index t of the layout.
 *
 * Saving, as three non-collective steps (what ptc_ckpt_save_over runs over
 * a transport: MPI in C, torch.distributed in the Python package):
 *  1. one process: ptc_ckpt_begin() takes the store's writer lock and
 *     allocates the version number V;
 *  2. every process: ptc_ckpt_write_local() writes its ranks' shards into
 *     its own pack files of V and returns a descriptor buffer;
 *  3. the process of step 1: ptc_ckpt_commit() imports every descriptor and
 *     commits V with the record in one transaction — or ptc_ckpt_abort().
 *
 * What is stored: a shard is written once, by the layout's owner rank (the
 * lowest rank holding an identical shard); every other rank's shard of it
 * is an alias. A shard whose bytes equal the parent version's shard of the
 * same tensor with the same local shape and pieces (same rank first) is a
 * reference to the parent's stored bytes (nothing is written); equality is
 * decided by hashing the buffer per 1 MiB block with XXH3-64 against the
 * parent's stored block checksums.
 *
 * Loading reads, for each local piece, only the stored blocks it touches,
 * in parallel over a pool of threads; memory beyond the destination buffers
 * is about one block per thread. The saved configuration may differ from
 * the loader's in dp, tp, pp, zero and layers=.
 *
 * @note Thread safety: the functions are safe to call from several threads
 * at once for different transactions and buffers; a ptc_ckpt_txn is used by
 * one thread at a time (externally synchronised). Collective functions
 * follow MPI's rules: one collective call at a time per communicator, made
 * by every process of it. A ptc_store is opened once per process (LMDB's
 * rule); the store and the layout must outlive the calls that use them.
 */
#ifndef PTC_CKPT_H
#define PTC_CKPT_H

#include <mpi.h>

#include "ptc/error.h"
#include "ptc/layout.h"
#include "ptc/rules.h"
#include "ptc/store.h"
#include "ptc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Key of the training-state record in a version's metadata
 * (ptc_store_reader_metadata()); its value is the record's JSON text. */
#define PTC_CKPT_RECORD_KEY "ptc.train"
/** Format number of the record this library writes (the JSON `format`). */
#define PTC_CKPT_RECORD_FORMAT 1u
/** Longest JSON text of a record, bytes. */
#define PTC_CKPT_RECORD_MAX ((size_t)16 << 20)
/** Longest RNG state of a record, bytes (stored as hex: twice as long). */
#define PTC_CKPT_RNG_MAX ((size_t)4 << 20)
/** Most free-form key/values of a record. */
#define PTC_CKPT_EXTRA_MAX 4096
/** ptc_ckpt_options.parent: the newest committed version at begin time. */
#define PTC_CKPT_PARENT_LATEST UINT64_MAX

/** A free-form key/value of a record (UTF-8, no NUL; key not empty). */
typedef struct ptc_ckpt_kv {
    const char *key;
    const char *value;
} ptc_ckpt_kv;

/**
 * The training-state record of a version (docs/format.md §9).
 *
 * Ownership: a record the caller passes in (ptc_ckpt_commit, ptc_ckpt_save,
 * ptc_ckpt_record_to_json) is only read during the call. A record the
 * library fills (ptc_ckpt_load_local, ptc_ckpt_load, ptc_ckpt_read_record,
 * ptc_ckpt_record_from_json) owns every string and array it points to,
 * valid until ptc_ckpt_record_free(). Zero-initialise a record before use.
 * Strings may be NULL on input (stored as absent / empty).
 */
typedef struct ptc_ckpt_record {
    uint32_t format;         /**< out: 1 when filled from a stored record, 0 when
                                  the version has none; ignored on input */
    uint64_t step;           /**< optimizer steps completed (< 2^63) */
    const char *config;      /**< the job's configuration text; NULL on save:
                                  the layout's configuration */
    const char *schedule;    /**< pipeline schedule, free text (e.g. "1f1b") */
    uint64_t seed;           /**< data / init seed (any u64) */
    uint64_t epoch;          /**< current epoch (< 2^63) */
    uint64_t sample;         /**< next unseen sample position in the epoch
                                  order (< 2^63) */
    uint64_t global_batch;   /**< global batch size in samples (< 2^63) */
    const char *dataset;     /**< dataset name ("" / NULL: none) */
    bool has_loss;           /**< whether @ref loss is set */
    double loss;             /**< last loss (NaN and ±inf allowed) */
    const uint8_t *rng;      /**< RNG state, opaque bytes (may be NULL if 0) */
    size_t rng_len;          /**< bytes of @ref rng (<= PTC_CKPT_RNG_MAX) */
    const ptc_ckpt_kv *extra;/**< free-form key/values, keys distinct */
    size_t nextra;           /**< number of @ref extra (<= PTC_CKPT_EXTRA_MAX) */
} ptc_ckpt_record;

/** Default bytes of one pull or push of a streamed tensor (ptc_ckpt_stream). */
#define PTC_CKPT_STREAM_CHUNK ((size_t)8 << 20)

/**
 * Local tensors whose bytes are not in host memory (device memory): a save
 * pulls a streamed tensor's bytes chunk by chunk and a load pushes them, so
 * that the caller copies each chunk between its memory and a host buffer of
 * its own (the Python package: a bounded ring of pinned buffers, CUDA
 * copies on a side stream). libptc never touches the device.
 *
 * A streamed tensor is a ptc_ckpt_local with @c streamed set: its @c data is
 * a token handed back to the callbacks, never dereferenced. A range is
 * [off, off + n) in bytes of the tensor's row-major local buffer; @p off is
 * a multiple of the chunk and @p n the chunk (less at the tensor's end).
 *
 * Saving, for each owned shard of a streamed tensor: pull(0), release(0),
 * pull(chunk), release(chunk), ... in order. Where the parent version holds
 * a shard of the same place, the block checksums of the pulled bytes are
 * compared with it and nothing is written while they are equal: equal to the
 * end, the shard references the parent's bytes; at the first difference the
 * shard is written from its start, pulling the equal ranges again. So a
 * range may be pulled more than once, and the order of plan() is the usual
 * order, not a promise.
 *
 * Loading, for each window of a streamed destination: acquire() a host
 * buffer of the range, the library reads and verifies the stored blocks into
 * it, then push() (the bytes are the caller's to copy into the tensor) — or
 * release() when the load fails before the window is filled.
 *
 * @note Thread safety: the library calls the callbacks from several of its
 * threads at once (different ranges): they must be thread-safe. A callback
 * returns PTC_OK or a PTC_E_* code with its message set (ptc_error_set),
 * which fails the save or load on every process.
 */
typedef struct ptc_ckpt_stream {
    /** Bytes per range (0: PTC_CKPT_STREAM_CHUNK); a save rounds it up to
     * a multiple of the store's block size (1 MiB). */
    size_t chunk;
    /** Optional, save: called once per process before the first pull, with
     * the streamed tensors in the order their shards will be written (their
     * @p n tokens and byte counts), so that the caller can copy ahead. */
    int (*plan)(void *user, void *const *tokens, const uint64_t *bytes, size_t n);
    /** save: bytes [off, off + n) of the tensor at *data (host memory),
     * valid until the matching release. */
    int (*pull)(void *user, void *token, uint64_t off, size_t n, const void **data);
    /** save and load: the library is done with the range's host buffer. */
    void (*release)(void *user, void *token, uint64_t off, size_t n);
    /** load: a host buffer of @p n bytes for the range into *buf. */
    int (*acquire)(void *user, void *token, uint64_t off, size_t n, void **buf);
    /** load: the buffer of the range holds its bytes, read and verified;
     * it is the caller's again, whatever push returns (copy it into the
     * tensor). */
    int (*push)(void *user, void *token, uint64_t off, size_t n);
    void *user; /**< passed to the callbacks */
} ptc_ckpt_stream;

/** Options of saving and loading. Initialise with ptc_ckpt_options_init(). */
typedef struct ptc_ckpt_options {
    /** save: version the new one derives from and whose unchanged shards it
     * references; 0: none (write everything); PTC_CKPT_PARENT_LATEST
     * (the default): the newest committed version when the save begins. */
    uint64_t parent;
    /** save: PTC_STORE_CODEC_NONE (default) or PTC_STORE_CODEC_ZSTD. */
    unsigned codec;
    /** save: zstd level (0: zstd's default). */
    int level;
    /** save: never reference the parent's shards (always write). */
    bool no_reuse;
    /** load: the version may hold tensors the layout does not have (they are
     * not read); default false: such a version is an error. */
    bool ignore_extra;
    /** save and load: threads per process (0: the online CPUs, at most 16,
     * and for a load at least 8, as its threads mostly wait on reads; with
     * several processes per host give each its share). */
    int threads;
    /** save and load of described tensors: the callbacks of the streamed
     * ones (ptc_ckpt_local.streamed); NULL: none may be streamed. Read
     * during the call only. */
    const ptc_ckpt_stream *stream;
    /** ptc_ckpt_save_async: run the collective steps on the calling thread
     * (the begin inside ptc_ckpt_save_async, the commit inside
     * ptc_ckpt_async_wait) and only the writes in the background, for a
     * transport that must not be used from another thread (MPI below
     * MPI_THREAD_MULTIPLE). Default false: all of it in the background. */
    bool collectives_in_caller;
    /** ptc_ckpt_load_locals_over with a configuration: the rules of the
     * target layout; NULL (the default): the version's
     * (ptc_layout_version_rules). Not referenced after the call. */
    const ptc_rules *rules;
} ptc_ckpt_options;

/** Defaults: parent PTC_CKPT_PARENT_LATEST, no compression, reuse on,
 * extra tensors refused, threads 0, no stream, collectives in the
 * background. */
PTC_API void ptc_ckpt_options_init(ptc_ckpt_options *o);

/* ---- records -------------------------------------------------------------- */

/**
 * Free what the library allocated in @p rec and zero it. Only for records
 * the library filled; NULL and zeroed records are no-ops.
 */
PTC_API void ptc_ckpt_record_free(ptc_ckpt_record *rec);

/**
 * The record as the JSON text stored under PTC_CKPT_RECORD_KEY
 * (docs/format.md §9; compact, keys sorted).
 * @param json  receives NUL-terminated text; release with ptc_store_free()
 * @return PTC_OK; PTC_E_RANGE (a counter >= 2^63, rng or extras too long,
 *   text longer than PTC_CKPT_RECORD_MAX); PTC_E_INVAL (a string that is not
 *   UTF-8, an empty or repeated extra key, rng NULL with rng_len > 0);
 *   PTC_E_NOMEM.
 */
PTC_API int ptc_ckpt_record_to_json(const ptc_ckpt_record *rec, char **json);

/**
 * Parse a record's JSON text strictly (untrusted input).
 * @param text  @p len bytes (need not be NUL-terminated)
 * @param rec   receives the record (owned; ptc_ckpt_record_free()); zeroed
 *              on failure
 * @return PTC_OK; PTC_E_FORMAT naming the problem: not JSON, not an object,
 *   duplicate keys, an unknown key, a missing `format` or `step`, an unknown
 *   format, a wrong type, a negative or too large number, bad hex, a seed
 *   that is not a decimal u64, text over PTC_CKPT_RECORD_MAX; PTC_E_NOMEM.
 */
PTC_API int ptc_ckpt_record_from_json(const char *text, size_t len, ptc_ckpt_record *rec);

/**
 * Read the training-state record of a version.
 * @param version  0: the newest
 * @param rec      receives the record (ptc_ckpt_record_free())
 * @return PTC_OK; PTC_E_NOTFOUND (no such version, or it has no record);
 *   PTC_E_FORMAT (a malformed record, naming the version); PTC_E_STORE;
 *   PTC_E_NOMEM.
 */
PTC_API int ptc_ckpt_read_record(ptc_store *s, uint64_t version, ptc_ckpt_record *rec);

/**
 * Bytes of the local tensor of (@p t, @p rank): local volume times the
 * dtype size; 0 where the rank holds none.
 * @return PTC_OK or PTC_E_RANGE (bad tensor index or rank).
 */
PTC_API int ptc_ckpt_local_bytes(const ptc_layout *l, size_t t, int rank, size_t *bytes);

/* ---- saving: the non-collective steps --------------------------------------- */

/** A checkpoint being saved, held by the committing process (opaque). */
typedef struct ptc_ckpt_txn ptc_ckpt_txn;

/**
 * Begin a checkpoint (the committing process only): take the store's writer
 * lock (non-blocking), allocate the new version number and resolve the
 * parent. Nothing is visible until ptc_ckpt_commit().
 * @param out    receives the transaction; NULL on failure
 * @param l      the job's layout (tensors and configuration); referenced by
 *               the transaction: keep it alive until commit or abort
 * @param rules  the rules @p l was created with; their canonical text is
 *               stored with the version (not referenced after return). For
 *               an explicit layout (ptc_layout_create_explicit) optional:
 *               rules that place every tensor, stored as the rules the
 *               version is viewed with under a configuration; NULL: none
 * @param opts   parent, codec, level (NULL: defaults)
 * @return PTC_OK; PTC_E_BUSY "store … is locked by another process (pid N)";
 *   PTC_E_RULE (@p rules place a tensor otherwise than @p l does, naming
 *   it); PTC_E_NOTFOUND (@p opts->parent is not a committed version);
 *   PTC_E_INVAL (read-only store, bad codec or level); PTC_E_IO; PTC_E_NOMEM.
 */
PTC_API int ptc_ckpt_begin(ptc_ckpt_txn **out, ptc_store *s, const ptc_layout *l,
                           const ptc_rules *rules, const ptc_ckpt_options *opts);

/** The version number the transaction will commit (send it to every process). */
PTC_API uint64_t ptc_ckpt_txn_version(const ptc_ckpt_txn *txn);

/** The resolved parent version (0: none; send it to every process). */
PTC_API uint64_t ptc_ckpt_txn_parent(const ptc_ckpt_txn *txn);

/**
 * Write this process's shards of version @p version into its own pack files
 * (every process, after begin). Each owned shard goes from its buffer to
 * the pack file block by block (no copy of a whole shard); a shard whose
 * owner is another rank is recorded as an alias; an unchanged shard of
 * @p parent is referenced (unless opts->no_reuse). Ranks are written in
 * parallel (opts->threads).
 * @param version  from ptc_ckpt_txn_version() of the committing process
 * @param parent   from ptc_ckpt_txn_parent() (0: no reuse)
 * @param l        a layout equal to the committing process's (same tensors,
 *                 order and configuration)
 * @param ranks    the @p nranks distinct ranks this process runs; the rank
 *                 sets of all processes must be disjoint and cover the world
 * @param bufs     nranks × ntensors local buffers, read only; NULL where the
 *                 rank holds no elements of the tensor
 * @param opts     codec, level, no_reuse, threads (NULL: defaults)
 * @param desc     receives the descriptor buffer for ptc_ckpt_commit();
 *                 release with ptc_store_free()
 * @return PTC_OK; PTC_E_INVAL (rank out of range or repeated, NULL buffer
 *   of a rank that holds elements, naming tensor and rank); PTC_E_NOTFOUND
 *   (@p parent does not exist); PTC_E_IO (naming the pack file); PTC_E_NOMEM.
 *   On failure this process's pack files of @p version are removed.
 */
PTC_API int ptc_ckpt_write_local(ptc_store *s, uint64_t version, uint64_t parent,
                                 const ptc_layout *l, const int *ranks, size_t nranks,
                                 const void *const *bufs, const ptc_ckpt_options *opts,
                                 void **desc, size_t *desc_len);

/**
 * Commit (the process that began): import the @p n descriptor buffers (one
 * per process, in any order), check that every (tensor, rank) the layout
 * places has its shard, store @p rec under PTC_CKPT_RECORD_KEY (the step
 * label of the version is rec->step in decimal) and commit one version.
 * Call it after every process's ptc_ckpt_write_local() returned.
 * Consumes @p txn whatever the outcome: on failure nothing becomes visible
 * and the pack files of the version are removed.
 * @param rec      the training-state record (rec->config NULL: the layout's
 *                 configuration); NULL: the version gets no record
 * @param version  receives the committed version (may be NULL)
 * @return PTC_OK; PTC_E_FORMAT / PTC_E_INVAL (a malformed descriptor);
 *   PTC_E_INVAL ("rank R's shard of tensor 'x' is missing": no process
 *   wrote it; a bad record); PTC_E_EXISTS (a shard written twice);
 *   PTC_E_RANGE (record limits); PTC_E_IO; PTC_E_STORE; PTC_E_NOMEM.
 */
PTC_API int ptc_ckpt_commit(ptc_ckpt_txn *txn, const void *const *descs, const size_t *lens,
                            size_t n, const ptc_ckpt_record *rec, uint64_t *version);

/**
 * Abandon a checkpoint: remove the version's pack files (of every process:
 * call it after every process's write returned), release the lock, free.
 * NULL is a no-op.
 */
PTC_API void ptc_ckpt_abort(ptc_ckpt_txn *txn);

/* ---- loading: non-collective -------------------------------------------------- */

/**
 * Fill this process's local buffers for the configuration of @p l from a
 * stored version, whatever configuration saved it: each local piece is read
 * from the stored shards that hold it, reading, decompressing and verifying
 * only the blocks it touches, in parallel over opts->threads threads.
 * Ranks of this process holding an identical shard are read once and
 * copied. Memory: the destination buffers plus about one block (1 MiB) per
 * thread.
 * @param version  0: the newest
 * @param l        the loader's layout (its tensors must match the version's
 *                 by name, dtype and global shape)
 * @param ranks    the @p nranks distinct ranks this process runs
 * @param bufs     nranks × ntensors destination buffers (local shape,
 *                 row-major); NULL where the rank holds no elements
 * @param opts     ignore_extra, threads (NULL: defaults)
 * @param rec      receives the version's record (may be NULL); a version
 *                 without one (e.g. from `ptc import`) gives a zeroed record
 *                 with format 0
 * @param loaded   receives the version read (may be NULL)
 * @return PTC_OK; PTC_E_NOTFOUND ("version V not found …"; "tensor 'x' …
 *   is not in version V"); PTC_E_INVAL (shape or dtype mismatch naming the
 *   tensor and both; a tensor of the version the layout lacks, unless
 *   ignore_extra; a bad rank or NULL buffer); PTC_E_FORMAT (a malformed
 *   record); PTC_E_CHECKSUM; PTC_E_IO; PTC_E_NOMEM. On failure the buffers
 *   hold unspecified bytes and @p rec is zeroed.
 */
PTC_API int ptc_ckpt_load_local(ptc_store *s, uint64_t version, const ptc_layout *l,
                                const int *ranks, size_t nranks, void *const *bufs,
                                const ptc_ckpt_options *opts, ptc_ckpt_record *rec,
                                uint64_t *loaded);

/* ---- collective: the protocol over a transport ------------------------------------ */

/**
 * Save collectively over a transport (include/ptc/transport.h): process 0
 * begins and sends the version number, every process writes its ranks'
 * shards, the descriptors are gathered to process 0, which commits; every
 * process returns the same outcome. A failure on any process makes every
 * process return an error whose message names the failing process and
 * carries its message ("checkpoint save failed on process P: ..."); then no
 * version becomes visible and the version's pack files are removed.
 * @param rules   used on process 0 (others may pass NULL)
 * @param rec     used on process 0 (others may pass NULL); checked before
 *                any process writes; NULL on process 0: no record
 * @param version receives the committed version on every process (may be NULL)
 * @return PTC_OK, the errors of begin / write_local / commit, or the
 *   transport's (PTC_E_MPI over MPI).
 */
PTC_API int ptc_ckpt_save_over(const ptc_transport *t, ptc_store *s, const ptc_layout *l,
                               const ptc_rules *rules, const int *ranks, size_t nranks,
                               const void *const *bufs, const ptc_ckpt_record *rec,
                               const ptc_ckpt_options *opts, uint64_t *version);

/**
 * Load collectively over a transport: process 0 resolves @p version (0: the
 * newest) so that every process reads the same one, every process runs
 * ptc_ckpt_load_local() for its ranks, and all agree: a failure anywhere
 * makes every process return an error naming the failing process and its
 * message.
 * @return PTC_OK, the errors of ptc_ckpt_load_local(), or the transport's.
 */
PTC_API int ptc_ckpt_load_over(const ptc_transport *t, ptc_store *s, uint64_t version,
                               const ptc_layout *l, const int *ranks, size_t nranks,
                               void *const *bufs, const ptc_ckpt_options *opts,
                               ptc_ckpt_record *rec, uint64_t *loaded);

/* ---- collective: described local tensors ---------------------------------------- */

/**
 * One local tensor of a process as it describes it: layout rank @p rank's
 * part of global tensor @p name. A job that does not build the layout of its
 * whole collection itself (the Python package: a process knows its own
 * tensors only) describes what it holds and lets the group agree on the
 * layout (ptc_ckpt_collect_over), then saves or loads the described buffers
 * (ptc_ckpt_save_locals_over, ptc_ckpt_load_locals_over). Zero-initialise,
 * then fill.
 */
typedef struct ptc_ckpt_local {
    const char *name;     /**< global tensor name (NUL-terminated, not empty) */
    int rank;             /**< the layout rank whose local tensor this is: one of
                               the process's ranks */
    ptc_dtype dtype;      /**< element type of @ref data */
    int ndim;             /**< local dimensions, 0..PTC_MAX_DIMS */
    int64_t shape[PTC_MAX_DIMS];   /**< local shape (row-major buffer) */
    bool has_global;      /**< @ref global_shape is known here; a tensor whose
                               global shape no process knows is taken to be
                               replicated (local shape = global shape) and is
                               refused where the rules split it */
    int global_ndim;      /**< global dimensions, 0..PTC_MAX_DIMS (has_global) */
    int64_t global_shape[PTC_MAX_DIMS]; /**< global shape (has_global) */
    bool has_box;         /**< @ref box is known: the buffer holds exactly that
                               box of the global tensor (a DTensor's shard);
                               checked against the layout's piece */
    ptc_box box;          /**< the global box the buffer holds (has_box) */
    void *data;           /**< the local tensor, row-major: read by a save,
                               filled by a load; NULL if it has no elements;
                               where @ref streamed: the tensor's token */
    bool streamed;        /**< the bytes are not host memory: they go through
                               ptc_ckpt_options.stream (ptc_ckpt_stream) */
    const ptc_piece *pieces; /**< where @ref npieces > 0: the pieces of the
                               global tensor the buffer holds, each a box and
                               its place in the buffer (a DTensor's strided
                               shard holds several; docs/checkpoint.md);
                               @ref box is then not read. Only read during the
                               call. */
    size_t npieces;       /**< number of @ref pieces (0: none given) */
} ptc_ckpt_local;

/**
 * Agree on the layout of a collection that every process describes in part
 * (the first step of ptc_ckpt_save_locals_over): the group exchanges what
 * each process holds — configuration, rules, ranks, and per local tensor its
 * name, rank, dtype, local and (where known) global shape — and every
 * process builds the same layout: the tensors in the order first seen
 * (process 0's first, each in its given order), each with the dtype all
 * give and the global shape some process gives (or, for a replicated
 * tensor, its local shape).
 *
 * With @p cfg NULL the layout is explicit (ptc_layout_create_explicit): the
 * world is the ranks the processes run (together exactly 0..W-1) and each
 * local tensor is placed where it says it is: its @ref ptc_ckpt_local.pieces,
 * else its box (one piece, the buffer row-major), else the whole tensor (a
 * plain tensor: its local shape is its global shape). The exchange then
 * carries each local tensor's pieces, and the checks add a piece outside
 * the tensor or the buffer, and pieces that do not fill the buffer
 * (PTC_E_INVAL naming the tensor and rank). @p rules may then be NULL.
 *
 * Checks, in this order. Of this process's description, agreed so that
 * every process fails with "checkpoint collect failed on process P: ...":
 * a rank given twice or negative ("rank R given twice"), a local tensor of a
 * rank not in @p ranks, a name given twice for one rank, a bad dtype or
 * shape. Of the exchanged descriptions, computed alike by every process and
 * returned without naming a process: another configuration or rules text
 * than process 0's ("process P saves with config 'X', process 0 with 'Y'"),
 * a rank outside the world, run twice or by no process ("no process runs
 * rank R of CFG (N processes run M of W ranks)"), a tensor of two dtypes
 * ("tensor 'x' is F32 on rank 0 and F16 on rank 1") or two global shapes,
 * a tensor whose global shape is unknown and that the rules do not
 * replicate, and the errors of ptc_layout_create (PTC_E_RULE naming the
 * tensor, PTC_E_CONFIG).
 *
 * @param ranks,nranks  the distinct layout ranks this process runs (a rank
 *                      may hold no tensor)
 * @param locals,n      this process's local tensors (only the descriptions
 *                      are read, not the buffers)
 * @param cfg,rules     the configuration and rules (equal on every process);
 *                      @p cfg NULL: an explicit layout (rules optional)
 * @param out           receives the layout (ptc_layout_destroy); NULL on failure
 * @return PTC_OK; PTC_E_INVAL; PTC_E_RULE; PTC_E_CONFIG; PTC_E_NOMEM; the
 *   transport's error.
 */
PTC_API int ptc_ckpt_collect_over(const ptc_transport *t, const int *ranks, size_t nranks,
                                  const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                                  const ptc_rules *rules, ptc_layout **out);

/**
 * Save described local tensors collectively: agree on this process's
 * outcome so far (@p rc), collect the layout (ptc_ckpt_collect_over), check
 * every local tensor against it — the rank must hold the tensor, with the
 * same dtype and local shape (and box, where given), and every tensor a rank
 * holds elements of must be given — then run ptc_ckpt_save_over() with the
 * buffers. The check and process 0's begin end in one agreement.
 *
 * A fault in this process's description is agreed as "checkpoint save
 * failed on process P: ..." (ptc_ckpt_collect_over names the step "checkpoint
 * collect").
 *
 * With @p cfg NULL the layout is explicit (see ptc_ckpt_collect_over): the
 * version records each rank's pieces (its configuration text is
 * "explicit:W", docs/format.md §2.2) and loads into any other layout; every
 * tensor's distinct shards must then hold each of its elements exactly once
 * (ptc_layout_check_cover). @p rules, if given, must place every tensor:
 * they are stored as the rules the version is viewed with under a
 * configuration (ptc_layout_version_rules); NULL: none stored.
 *
 * @param rc   this process's outcome before the call: PTC_OK, or a PTC_E_*
 *             code with its message set (ptc_error_set): then every process
 *             returns "checkpoint save failed on process P: its message",
 *             nothing is written, and this process's other arguments are
 *             not used (they may be NULL)
 * @param rec  used on process 0 only (others may pass NULL)
 * @return PTC_OK, @p rc's agreed failure, the errors of
 *   ptc_ckpt_collect_over() and ptc_ckpt_save_over(); a local tensor that
 *   does not match the layout: PTC_E_INVAL ("tensor 'x' on rank R: local
 *   shape [A], but the layout of CFG gives [B]"; "rank R holds tensor 'x'
 *   (local shape [B] under CFG), but the state has no tensor of that name").
 */
PTC_API int ptc_ckpt_save_locals_over(const ptc_transport *t, int rc, ptc_store *s,
                                      const int *ranks, size_t nranks,
                                      const ptc_ckpt_local *locals, size_t n,
                                      const ptc_config *cfg, const ptc_rules *rules,
                                      const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                                      uint64_t *version);

/**
 * Load described local tensors collectively: agree on @p rc (as for a save),
 * process 0 resolves @p version (0: the newest) for all, every process
 * builds the layout of that version under @p cfg (ptc_layout_of_version;
 * with opts->rules, those rules instead of the version's) — or, with
 * @p cfg NULL, the explicit layout the processes' local tensors describe
 * (ptc_ckpt_collect_over; a tensor's dtype is the version's where its
 * buffer takes it as raw bits) —
 * checks its local tensors against it as a save does — except that a buffer
 * of an integer dtype of the same size may receive BF16 or FP8 elements as
 * raw bits, and names the version ("tensor 'x' is not in version V";
 * "tensor 'x' on rank R has dtype F64; version V has F32") — and fills them
 * (ptc_ckpt_load_local); all agree on the outcome.
 * @return PTC_OK, @p rc's agreed failure, the errors above and those of
 *   ptc_ckpt_load_over(), each as "checkpoint load failed on process P: ...".
 */
PTC_API int ptc_ckpt_load_locals_over(const ptc_transport *t, int rc, ptc_store *s,
                                      uint64_t version, const int *ranks, size_t nranks,
                                      const ptc_ckpt_local *locals, size_t n,
                                      const ptc_config *cfg, const ptc_ckpt_options *opts,
                                      ptc_ckpt_record *rec, uint64_t *loaded);

/**
 * The layout and buffer table of described local tensors, agreed, without
 * reading or writing any tensor: the first half of
 * ptc_ckpt_save_locals_over() (@p save; @p s and @p version unused) or of
 * ptc_ckpt_load_locals_over() (the layout of stored version @p version under
 * @p cfg and @p rules — NULL: the version's rules — or, @p cfg NULL, the
 * explicit layout the processes describe), with the same checks and
 * messages, for a caller that moves the bytes itself (loads and saves of a
 * store spread over hosts, ptc/reshard.h). Streamed locals are refused
 * (PTC_E_UNSUPPORTED naming the tensor).
 * @param layout  receives the layout (ptc_layout_destroy)
 * @param bufs    receives nranks x ntensors pointers into the locals' data
 *                (NULL where a rank holds none of a tensor); release the
 *                table with ptc_store_free
 * @return PTC_OK, @p rc's agreed failure, the errors of the two calls'
 *   first steps; agreed on every process.
 */
PTC_API int ptc_ckpt_bind_locals_over(const ptc_transport *t, int rc, ptc_store *s,
                                      uint64_t version, bool save, const int *ranks,
                                      size_t nranks, const ptc_ckpt_local *locals, size_t n,
                                      const ptc_config *cfg, const ptc_rules *rules,
                                      ptc_layout **layout, void ***bufs);

/**
 * The layout and buffer table of described local tensors for a load from a
 * version the caller describes by a layout @p l (e.g. rebuilt from the
 * version's description on a process whose store lacks the version:
 * ptc/reshard.h's loads across hosts), checked as
 * ptc_ckpt_bind_locals_over() checks a load's (BF16 and FP8 also into
 * integer buffers of their size; streamed locals refused), with @p rc,
 * agreed. Without @p collect, @p l is the layout loaded into (the version's
 * under a configuration) and *@p layout is NULL; with @p collect, the layout
 * loaded into is the one the processes' local tensors describe (as
 * ptc_ckpt_bind_locals_over() without a configuration), @p l the version's
 * own layout, whose dtypes raw-bit buffers take; *@p layout receives it.
 * @param layout  receives the collected layout (ptc_layout_destroy) or NULL
 * @param bufs    receives nranks x ntensors pointers into the locals' data
 *                (NULL where a rank holds none of a tensor); release the
 *                table with ptc_store_free
 * @return PTC_OK, @p rc's agreed failure or the check's; agreed.
 * @note Thread safety: collective over @p t, one call at a time per transport.
 */
PTC_API int ptc_ckpt_bind_locals_to(const ptc_transport *t, int rc, const ptc_layout *l,
                                    bool collect, const int *ranks, size_t nranks,
                                    const ptc_ckpt_local *locals, size_t n,
                                    ptc_layout **layout, void ***bufs);

/* ---- asynchronous saves ------------------------------------------------------------ */

/**
 * A reusable snapshot area (opaque): host memory that an asynchronous save
 * copies the state into before it returns. It grows to the largest state
 * saved through it and is reused, never shrunk, by later saves; one save at
 * a time uses it.
 */
typedef struct ptc_ckpt_stage ptc_ckpt_stage;

/** A save running in the background (opaque); ptc_ckpt_async_wait() ends it. */
typedef struct ptc_ckpt_async ptc_ckpt_async;

/** A new, empty snapshot area. @return PTC_OK or PTC_E_NOMEM. */
PTC_API int ptc_ckpt_stage_create(ptc_ckpt_stage **out);

/** Bytes the area holds now (its memory): the snapshot, and the replica
 * copies a save across hosts received through it. */
PTC_API size_t ptc_ckpt_stage_bytes(const ptc_ckpt_stage *st);

/**
 * Deferred snapshots (default off): a save across hosts through @p st
 * (ptc_ckpt_hosts_save_async()) returns before copying the buffers; its
 * thread copies them first, then runs the save. The caller keeps the
 * buffers unchanged until ptc_ckpt_async_snapshot_wait() returns (or the
 * wait), and may compute meanwhile: a training job waits just before its
 * optimizer writes the state, so the copy overlaps the next step's forward
 * and backward instead of stalling the step boundary. Other saves through
 * @p st copy before they return, as without it. NULL: no-op.
 * @note Thread safety: not while a save uses @p st.
 */
PTC_API void ptc_ckpt_stage_defer(ptc_ckpt_stage *st, bool on);

/** Free the area (NULL: no-op). Not while a save uses it. */
PTC_API void ptc_ckpt_stage_destroy(ptc_ckpt_stage *st);

/**
 * Save collectively in the background: the call returns once this process's
 * state is snapshotted — its buffers copied into @p stage (in parallel over
 * opts->threads; streamed tensors pulled through opts->stream) — and the
 * save of ptc_ckpt_save_over() continues on a thread of its own: the
 * buffers may change as soon as the call returns. ptc_ckpt_async_wait()
 * gives its outcome. A crash meanwhile leaves the store as it was: no
 * version is visible until the commit, and the next save removes the
 * partial pack files.
 *
 * The collective steps run on the background thread over @p t, unless
 * opts->collectives_in_caller: then the begin runs here and the commit in
 * ptc_ckpt_async_wait(), and the thread only writes. Over MPI, a transport
 * used from the background thread needs a communicator of its own
 * (MPI_Comm_dup) and MPI_THREAD_MULTIPLE when the caller's thread makes MPI
 * calls meanwhile; with less, set collectives_in_caller.
 *
 * @param out    receives the save; NULL on failure
 * @param t,s,l,rules,ranks,nranks,rec,opts  as ptc_ckpt_save_over(); the
 *               record and options are copied; @p t (the struct and what its
 *               user points to), @p s, @p l and @p rules must stay alive
 *               until ptc_ckpt_async_wait() returns
 * @param bufs   read during the call only
 * @param stage  the snapshot area; where the background part of an earlier
 *               save still uses it, the call first waits for that part to
 *               end (so a save through the same area never overlaps the
 *               previous one, nor its use of @p t). NULL: no copy — the
 *               buffers are the caller's own snapshot and must stay
 *               unchanged until ptc_ckpt_async_wait() returns
 * @return PTC_OK, and the save's outcome at ptc_ckpt_async_wait(): a
 *   failure of this process's snapshot (PTC_E_NOMEM, PTC_E_INVAL, a stream
 *   callback's) is this process's part of the protocol's first agreement,
 *   so that every process fails alike. PTC_E_INVAL (no transport or
 *   layout) or PTC_E_NOMEM (no handle) at once; with
 *   collectives_in_caller, the errors of the begin as ptc_ckpt_save_over()
 *   gives them, on every process. Nothing runs in the background then.
 */
PTC_API int ptc_ckpt_save_async(ptc_ckpt_async **out, const ptc_transport *t, ptc_store *s,
                                const ptc_layout *l, const ptc_rules *rules, const int *ranks,
                                size_t nranks, const void *const *bufs,
                                const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                                ptc_ckpt_stage *stage);

/**
 * ptc_ckpt_save_locals_over() in the background, as ptc_ckpt_save_async():
 * the local tensors' bytes are copied into @p stage before the call returns
 * (NULL: not copied, as there; streamed tensors need a stage); their
 * descriptions (names and pieces included), @p cfg and the record are
 * copied; the collection of the layout runs with the rest of the protocol.
 * @p cfg NULL: the explicit layout the described tensors have, as in
 * ptc_ckpt_save_locals_over() (a DTensor state saved as it is placed).
 * @p rc, as in ptc_ckpt_save_locals_over(), is agreed there. @p rules must
 * stay alive until the wait.
 */
PTC_API int ptc_ckpt_save_locals_async(ptc_ckpt_async **out, const ptc_transport *t, int rc,
                                       ptc_store *s, const int *ranks, size_t nranks,
                                       const ptc_ckpt_local *locals, size_t n,
                                       const ptc_config *cfg, const ptc_rules *rules,
                                       const ptc_ckpt_record *rec,
                                       const ptc_ckpt_options *opts, ptc_ckpt_stage *stage);

/**
 * Wait until the save's snapshot is taken (at once for a save that copied
 * before returning; a deferred one, ptc_ckpt_stage_defer(), once its thread
 * has copied the buffers or failed to): then the caller may change them.
 * A failure of the copy is the save's outcome at ptc_ckpt_async_wait().
 * NULL: returns at once.
 * @note Thread safety: any thread, while @p a is not freed.
 */
PTC_API void ptc_ckpt_async_snapshot_wait(ptc_ckpt_async *a);

/**
 * Whether the background part has finished (committed or failed; with
 * collectives_in_caller: written, the commit left to the wait). Never
 * blocks.
 */
PTC_API bool ptc_ckpt_async_done(const ptc_ckpt_async *a);

/**
 * Wait for the save to end and free @p a (collective when the save runs its
 * collective steps on the caller's thread): the outcome of the whole save
 * as ptc_ckpt_save_over() gives it, with its message set on this thread.
 * The stage is free again on return. NULL: PTC_OK.
 * @param version  receives the committed version (may be NULL)
 */
PTC_API int ptc_ckpt_async_wait(ptc_ckpt_async *a, uint64_t *version);

/**
 * Give up a save without its commit and free @p a — not collective, for a
 * job that stops on an error: waits for the background thread, then (with
 * collectives_in_caller, on the process that began) aborts the version, so
 * no process may still be writing it: call it where every process has left
 * the job's collectives. A save running its collectives in the background
 * ends on its own first (it may commit). NULL: no-op.
 */
PTC_API void ptc_ckpt_async_cancel(ptc_ckpt_async *a);

/** ptc_ckpt_save_over() over the MPI communicator @p comm. */
PTC_API int ptc_ckpt_save(ptc_store *s, const ptc_layout *l, const ptc_rules *rules,
                          const int *ranks, size_t nranks, const void *const *bufs,
                          const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                          MPI_Comm comm, uint64_t *version);

/** ptc_ckpt_load_over() over the MPI communicator @p comm. */
PTC_API int ptc_ckpt_load(ptc_store *s, uint64_t version, const ptc_layout *l,
                          const int *ranks, size_t nranks, void *const *bufs,
                          const ptc_ckpt_options *opts, MPI_Comm comm, ptc_ckpt_record *rec,
                          uint64_t *loaded);


/* ---- versions spread over hosts (no shared filesystem) ---------------------------- */

/**
 * What one host's store alone says about the versions spread over hosts
 * (its journal, docs/format.md §10). Versions across hosts are numbered
 * 1, 2, 3... by the protocol; each host's part of version G is a version
 * of its own store (@c committed_local, @c prepared_local) holding its
 * ranks' shards.
 *
 * @c committed is committed on every host that took part in it. When
 * @c prepared == @c committed + 1 that version is in doubt: this host's
 * part is durable, and whether the version committed is decided only with
 * the other hosts (ptc_ckpt_hosts_recover_over); the newest committed
 * version across hosts is then @c committed or @c prepared, nothing else.
 */
typedef struct ptc_ckpt_host_state {
    uint64_t committed;       /**< newest version known committed (0: none) */
    uint64_t committed_local; /**< its version in this store */
    uint64_t prepared;        /**< newest version prepared here (>= committed) */
    uint64_t prepared_local;  /**< its version in this store */
    uint32_t host;            /**< this host's index in the newest prepared version */
    uint32_t hosts;           /**< hosts of the newest prepared version (0: none) */
    uint32_t replicas;        /**< replicas of each host's shards in it */
} ptc_ckpt_host_state;

/** Options of a save spread over hosts (ptc_ckpt_hosts_options_init). */
typedef struct ptc_ckpt_hosts_options {
    /** Copies of each host's shards on other hosts: host h's shards also go
     * to hosts h+1, ..., h+replicas (mod H). 0 (the default here; the
     * command's default is 1): none. Must be < H. */
    int replicas;
    /** After a save commits version G, each host keeps the parts of the
     * newest @c keep versions (G-keep+1..G) and deletes older ones from its
     * store, then collects their files (see @c last); 0 (the default):
     * keep every version. */
    int keep;
    /** A version across hosts that @c keep never deletes (its parts stay
     * until a later save trims them): the one a background copy to the
     * persistent tier reads (ptc_ckpt_hosts_persist_over); 0: none. */
    uint64_t pin;
    /** The job's last save (before it ends or stops): the files of the
     * versions @c keep deletes are removed, and the spare pack files of
     * earlier saves with them. Otherwise (false, the default) those files
     * are kept as spares that the next save overwrites in place instead of
     * allocating the same RAM or disk blocks again (docs/format.md §7). */
    bool last;
} ptc_ckpt_hosts_options;

/** Defaults: no replicas. */
PTC_API void ptc_ckpt_hosts_options_init(ptc_ckpt_hosts_options *o);

/**
 * The replica placement rule: the hosts that hold copies of host @p host's
 * shards, out of @p nhosts, with @p replicas copies: hosts host+1, ...,
 * host+replicas, modulo @p nhosts, in that order into @p out (room for
 * @p replicas ints). So no host holds a copy of its own shards and any
 * @p replicas hosts can be lost without losing a shard.
 * @return PTC_OK; PTC_E_INVAL when @p host is outside [0, nhosts), or
 *   replicas < 0, or replicas >= nhosts ("--replicas K needs more than K hosts").
 */
PTC_API int ptc_ckpt_hosts_replica_hosts(int host, int nhosts, int replicas, int *out);

/**
 * Read the journal of the store @p s (non-collective).
 * @return PTC_OK (a store with no journal: all zero), PTC_E_FORMAT (a
 *   journal file is damaged: its path named), PTC_E_IO.
 */
PTC_API int ptc_ckpt_host_state_read(ptc_store *s, ptc_ckpt_host_state *st);

/**
 * Save a version spread over hosts, collectively: every process of @p t
 * passes the index of its host (0..H-1, every index used by some process;
 * the lowest process of a host is its leader) and the store of its host
 * (the same directory on every host, each host its own local disk). Each
 * process writes its ranks' shards into its host's store; each host's
 * leader commits its host's part as a version of its store and records it
 * as prepared in its journal; when every host has prepared (an agreement),
 * each leader records the version as committed, and the call returns after
 * every host has. An in-doubt version left by an earlier crash is resolved
 * first, as ptc_ckpt_hosts_recover_over() does. Layouts, records and
 * options are those of ptc_ckpt_save_over().
 * @param version receives the version number across hosts
 * @return PTC_OK; agreed failures as "checkpoint save failed on process P:
 *   ...". An agreed failure before the vote (every host prepared) means the
 *   version is not committed on any host and each host's part is removed.
 *   One after the vote may come with the version committed: a host that
 *   failed to write its committed record leaves the version in doubt on
 *   its host only, and ptc_ckpt_hosts_recover_over() (or the next save)
 *   rolls it forward there since another host recorded it committed; with
 *   hopts->keep, a failure removing old versions is reported after the
 *   commit (*version is then set and the version stands). A failure of the
 *   transport after a host prepared leaves its part in doubt, for
 *   ptc_ckpt_hosts_recover_over().
 * @note Thread safety: collective over @p t (one collective call at a time
 *   per transport); the store handle may be shared by the processes of one
 *   host that are threads of one program, as for ptc_ckpt_save_over().
 */
PTC_API int ptc_ckpt_hosts_save_over(const ptc_transport *t, int host, ptc_store *s,
                                     const ptc_layout *l, const ptc_rules *rules,
                                     const int *ranks, size_t nranks, const void *const *bufs,
                                     const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                                     const ptc_ckpt_hosts_options *hopts, uint64_t *version);

/**
 * ptc_ckpt_hosts_save_over() in the background: the buffers are copied into
 * @p stage (as ptc_ckpt_save_async()) on the calling thread, then a thread
 * of its own runs the whole save — the replica exchange, the writes and
 * the two-phase commit — over @p t, and ptc_ckpt_async_wait() returns its
 * outcome (the committed version on every process, or the agreed failure).
 * A failure of the snapshot on one process is that process's outcome in
 * the save's first agreement: every process fails alike.
 * @param t  a transport nothing else uses until the wait returns (over MPI:
 *           a communicator of its own, and MPI_THREAD_MULTIPLE where the
 *           caller keeps using MPI meanwhile)
 * @param stage  the snapshot area (required); its previous save's
 *           background part ends first. The replicas this process receives
 *           go into a second area of it, kept for the next save. With
 *           ptc_ckpt_stage_defer(), the copy runs on the save's thread:
 *           @p bufs' bytes stay unchanged until
 *           ptc_ckpt_async_snapshot_wait() returns (the array itself is
 *           read during the call only)
 * @param rec  used on every host's lowest process (copied)
 * @return PTC_OK with *out to wait for; PTC_E_INVAL (no transport, layout
 *   or stage), PTC_E_NOMEM. The save's own errors come from the wait.
 * @note Thread safety: as ptc_ckpt_save_async().
 */
PTC_API int ptc_ckpt_hosts_save_async(ptc_ckpt_async **out, const ptc_transport *t, int host,
                                      ptc_store *s, const ptc_layout *l, const ptc_rules *rules,
                                      const int *ranks, size_t nranks, const void *const *bufs,
                                      const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                                      const ptc_ckpt_hosts_options *hopts,
                                      ptc_ckpt_stage *stage);

/**
 * Copy committed version @p version across hosts into @p persist, an
 * ordinary single-directory store every process reaches (the persistent
 * tier), as its next version (collective over @p t): every process reads
 * its @p ranks' shards from its own host's part of @p version in @p local
 * (ptc_ckpt_load_local; nothing crosses hosts), then the processes save
 * them as ptc_ckpt_save_over() does, with the part's training-state
 * record. A failure or a crash before the commit leaves @p persist's
 * previous versions as they were (the save's own guarantee).
 * @param l,rules  the layout the version was saved under (the job's)
 * @param persisted receives the version of @p persist (may be NULL)
 * @return PTC_OK; PTC_E_NOTFOUND (no part of @p version here), the errors
 *   of ptc_ckpt_load_local() and ptc_ckpt_save_over(); agreed.
 * @note Thread safety: collective over @p t; it may run on a thread of its
 *   own while the caller saves the next versions into @p local, provided
 *   those saves keep @p version (ptc_ckpt_hosts_options.pin).
 */
PTC_API int ptc_ckpt_hosts_persist_over(const ptc_transport *t, ptc_store *local,
                                        uint64_t version, ptc_store *persist,
                                        const ptc_layout *l, const ptc_rules *rules,
                                        const int *ranks, size_t nranks,
                                        const ptc_ckpt_options *opts, uint64_t *persisted);

/**
 * Agree on the newest committed version across the hosts of @p t
 * (collective; @p host and @p s as in ptc_ckpt_hosts_save_over). A version
 * is committed when any host's journal records it committed: hosts that
 * hold it prepared record it committed (roll forward); a version prepared
 * on some hosts and committed on none is aborted everywhere (its parts
 * removed), and so is a prepared version of another attempt than the
 * committed one (a host that missed a recovery); local versions carrying
 * ptc.hosts newer than the committed one that no journal names (a crash
 * between a host's local commit and its prepare record) are removed;
 * ordinary versions of the store are never touched. Afterwards every leader's journal names the same committed
 * version (a host whose store holds no part of it — a fresh or replaced
 * store — keeps its journal as it is).
 * @param newest receives it (0: none)
 * @return PTC_OK; PTC_E_STORE when a journal contradicts the protocol (a
 *   host prepared more than one version past the newest committed) or two
 *   hosts record different attempts at it committed (naming the host);
 *   PTC_E_BUSY when another save or recovery across hosts holds a host's
 *   journal lock (STORE/hosts/lock); journal, store and transport errors.
 *   Every failure is agreed.
 * @note Thread safety: collective over @p t, as ptc_ckpt_hosts_save_over().
 */
PTC_API int ptc_ckpt_hosts_recover_over(const ptc_transport *t, int host, ptc_store *s,
                                        uint64_t *newest);

/**
 * The version of store @p s holding this host's part of version @p version
 * across hosts (non-collective: the journal, else the versions' metadata).
 * @return PTC_OK, PTC_E_INVAL (@p version 0: versions across hosts start
 *   at 1) or PTC_E_NOTFOUND ("store DIR holds no part of version G").
 */
PTC_API int ptc_ckpt_hosts_local_version(ptc_store *s, uint64_t version, uint64_t *local);

/**
 * The version across hosts that local version @p info (of ptc_store_versions
 * or ptc_store_reader_version) is this host's part of, from its metadata
 * (`ptc.hosts`); 0 for an ordinary version. Whether that version was
 * committed across hosts is the journal's to say (ptc_ckpt_host_state_read).
 */
PTC_API uint64_t ptc_ckpt_hosts_part_of(const ptc_version_info *info);

/**
 * The newest version across hosts older than @p below whose committed part
 * store @p s holds (*@p version 0: none), read from the journal and the
 * versions' metadata (non-collective). A resume that cannot read the newest
 * version (every copy of a saved rank lost) looks for an older one that
 * the hosts present cover (`ptc train --replicas`, docs/elastic.md).
 * @return PTC_OK or the store's errors.
 * @note Thread safety: as ptc_ckpt_hosts_local_version().
 */
PTC_API int ptc_ckpt_hosts_held(ptc_store *s, uint64_t below, uint64_t *version);

#ifdef __cplusplus
}
#endif
#endif
