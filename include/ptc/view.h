/**
 * @file view.h
 * @brief The mounted tree as a library: path parsing, resolved nodes, reads.
 *
 * The view answers the questions a filesystem asks — does this path exist,
 * is it a directory, how large is it, what are bytes [a, b) — for the tree
 * of DESIGN.md, without mounting anything:
 *
 *     /README.txt
 *     /models/<V>/info.json
 *     /models/<V>/model.safetensors
 *     /models/<V>/<CFG>/rank-<R>.safetensors
 *     /datasets/<NAME>/info.json
 *     /datasets/<NAME>/samples/<ID>
 *     /datasets/<NAME>/seed-<S>/epoch-<E>/batch-<B>/start-<X>/dp-<D>/rank-<R>/step-<K>
 *     /datasets/<NAME>/seed-<S>/epoch-<E>/batch-<B>/start-<X>/dp-<D>/rank-<R>/step-<K>.idx
 *     /datasets/<NAME>/seed-<S>/epoch-<E>/batch-<B>/start-<X>/dp-<D>/policy-<P>/rank-<R>/step-<K>[.idx]
 *
 * policy-<P> (P: drop-last, equal, drop-last+equal) serves the same epoch
 * order under a batch policy (ptc/batch.h); without it the rule is the
 * default one. The part below datasets/<NAME>/ is a step path, and a step
 * file holds the records of that step: both are the dataset module's
 * (ptc/step.h), which the view only uses.
 *
 * Datasets come from an abstract interface (ptc_view_dataset: N, record
 * length, record bytes) so any backing store plugs in; model files are only
 * parsed here and served by callbacks (ptc_view_ops model_*).
 *
 * Numbers in names are canonical decimal ("0" or no leading zero). A name
 * that is not a node of the tree — malformed, non-canonical, or out of the
 * data's range (rank >= D, a step past the end, an id >= N, an unknown
 * dataset) — is PTC_E_NOTFOUND (ENOENT). A number that does not fit the
 * field (more than 2^64 - 1, dp over PTC_VIEW_MAX_DP) is PTC_E_RANGE
 * (EINVAL). docs/dataset.md has the full grammar.
 *
 * A path may also be resolved once into a handle (ptc_view_node_resolve)
 * and read from that handle, with no parsing or cache search per read.
 *
 * @note Thread safety: ptc_view_parse is pure. A ptc_view is safe to use
 *       from any number of threads at once (the callbacks it calls must be
 *       too). Handles: see ptc_view_handle.
 */
#ifndef PTC_VIEW_H
#define PTC_VIEW_H

#include "ptc/config.h"
#include "ptc/error.h"
#include "ptc/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest path component (a dataset name, a CFG). */
#define PTC_VIEW_NAME_MAX 255
/** Largest data-parallel degree accepted in a dp-<D> component (that of
 * a step path). */
#define PTC_VIEW_MAX_DP PTC_DATASET_STEP_MAX_DP
/** Most records one step file may hold (a larger part is PTC_E_RANGE). */
#define PTC_VIEW_MAX_STEP_RECORDS ((uint64_t)1 << 22)
/** How many step files after the one being read the view hints
 * (ptc_view_dataset.record_prefetch_later). */
#define PTC_VIEW_LOOKAHEAD 4

/** What a path names. */
typedef enum ptc_view_kind {
    PTC_VIEW_ROOT,          /**< / */
    PTC_VIEW_README,        /**< /README.txt */
    PTC_VIEW_MODELS,        /**< /models */
    PTC_VIEW_MODEL,         /**< /models/<V> */
    PTC_VIEW_MODEL_INFO,    /**< /models/<V>/info.json */
    PTC_VIEW_MODEL_FULL,    /**< /models/<V>/model.safetensors */
    PTC_VIEW_MODEL_CFG,     /**< /models/<V>/<CFG> */
    PTC_VIEW_MODEL_RANK,    /**< /models/<V>/<CFG>/rank-<R>.safetensors */
    PTC_VIEW_DATASETS,      /**< /datasets */
    PTC_VIEW_DATASET,       /**< /datasets/<NAME> */
    PTC_VIEW_DATASET_INFO,  /**< /datasets/<NAME>/info.json */
    PTC_VIEW_SAMPLES,       /**< .../samples */
    PTC_VIEW_SAMPLE,        /**< .../samples/<ID> */
    PTC_VIEW_SEED,          /**< .../seed-<S> */
    PTC_VIEW_EPOCH,         /**< .../epoch-<E> */
    PTC_VIEW_BATCH,         /**< .../batch-<B> */
    PTC_VIEW_START,         /**< .../start-<X> */
    PTC_VIEW_DP,            /**< .../dp-<D> */
    PTC_VIEW_RANK,          /**< .../rank-<R> */
    PTC_VIEW_STEP,          /**< .../step-<K> */
    PTC_VIEW_STEP_IDX,      /**< .../step-<K>.idx */
    PTC_VIEW_POLICY,        /**< .../dp-<D>/policy-<P> (then rank-, step- as under dp-<D>) */
} ptc_view_kind;

/** A parsed path. Fields not used by the kind are zero. */
typedef struct ptc_view_node {
    ptc_view_kind kind;
    char name[PTC_VIEW_NAME_MAX + 1]; /**< dataset name */
    uint64_t version;                 /**< model version V */
    ptc_config config;                /**< model <CFG> */
    uint64_t id;                      /**< sample id */
    uint64_t seed, epoch, batch, start, dp, rank, step; /**< rank: also model rank */
    unsigned policy;                  /**< batch policy (ptc_batch_policy flags);
                                           0 without a policy-<P> component */
} ptc_view_node;

/**
 * Parse an absolute path of the tree ("/" is the root; no trailing slash,
 * no empty, "." or ".." components). Checks everything that does not depend
 * on the data: grammar, canonical numbers, batch >= 1, 1 <= dp <=
 * PTC_VIEW_MAX_DP, rank < dp, version >= 1, a canonical path-form <CFG>
 * (ptc_config_format PATH style), model rank < world size.
 * @return PTC_OK, PTC_E_NOTFOUND, or PTC_E_RANGE (see the file comment).
 */
PTC_API int ptc_view_parse(const char *path, ptc_view_node *node);

/** @return true if nodes of @p kind are directories. */
PTC_API bool ptc_view_kind_is_dir(ptc_view_kind kind);

/** @return the errno a filesystem returns for a PTC_E_* code (0 for PTC_OK). */
PTC_API int ptc_view_errno(int rc);

/* ---- the abstract dataset ------------------------------------------------------- */

/**
 * An open dataset, filled by ptc_view_ops.dataset_open. The functions must
 * be safe to call from several threads at once.
 */
typedef struct ptc_view_dataset {
    uint64_t n;               /**< number of records N */
    uint64_t generation;      /**< which ingest of the name this is (the store's
                                   catalog id; 0 for in-memory datasets):
                                   served counts are kept per generation */
    const char *info_json;    /**< info.json text, or NULL for the default
                                   {"name":..,"samples":N}; owned by the
                                   provider until dataset_close */
    void *user;               /**< the provider's handle */
    /** Length in bytes of record @p id (< n). */
    int (*record_size)(void *user, uint64_t id, uint64_t *size);
    /** Copy bytes [off, off + len) of record @p id (inside the record). */
    int (*record_read)(void *user, uint64_t id, uint64_t off, void *buf, size_t len);
    /** Optional (may be NULL): bytes [off, off + len) of record @p id
     * (inside it, len > 0) in place, in memory that stays valid and
     * unchanged until dataset_close; *ptr NULL where they are not held so
     * (the view then copies them with record_read). */
    int (*record_map)(void *user, uint64_t id, uint64_t off, size_t len, const void **ptr);
    /** Optional (may be NULL): a hint that bytes [off, off + len) of record
     * @p id will be read next. A read of a step file gives it for every
     * record piece it covers before it reads any of them. */
    void (*record_prefetch)(void *user, uint64_t id, uint64_t off, size_t len);
    /** Optional (may be NULL): a weaker hint, that bytes [off, off + len)
     * of record @p id will be read after those given to record_prefetch.
     * The first read of a step file gives it for the records of the next
     * PTC_VIEW_LOOKAHEAD step files of its directory (the order a reader
     * of the directory takes). */
    void (*record_prefetch_later)(void *user, uint64_t id, uint64_t off, size_t len);
} ptc_view_dataset;

/** Directory listing callback: return non-zero to stop. */
typedef int (*ptc_view_emit_fn)(void *ctx, const char *name, bool is_dir);

/**
 * What backs a view. Every member may be NULL: without dataset_open there
 * are no datasets, without model_stat no models. Callbacks are called from
 * any thread, concurrently.
 */
typedef struct ptc_view_ops {
    /** Open dataset @p name into @p ds; PTC_E_NOTFOUND if there is none. The
     * view keeps it open until ptc_view_destroy. */
    int (*dataset_open)(void *user, const char *name, ptc_view_dataset *ds);
    /** Release what dataset_open filled. */
    void (*dataset_close)(void *user, ptc_view_dataset *ds);
    /** Emit dataset names (a bounded number). */
    int (*dataset_list)(void *user, ptc_view_emit_fn emit, void *ctx);
    /** Record @p id of dataset @p name was served in a step file of
     * (seed, epoch): its last byte was read. */
    void (*served)(void *user, const char *name, uint64_t generation, uint64_t seed,
                   uint64_t epoch, uint64_t id);
    /** Does a model node exist (kinds MODEL, MODEL_INFO, MODEL_FULL,
     * MODEL_CFG, MODEL_RANK), and its size for files. PTC_E_NOTFOUND if not. */
    int (*model_stat)(void *user, const ptc_view_node *node, uint64_t *size);
    /** Open a model file node; *fh is passed to model_read/model_close. */
    int (*model_open)(void *user, const ptc_view_node *node, void **fh);
    /** Read up to @p len bytes at @p off; *got short only at end of file. */
    int (*model_read)(void *user, void *fh, uint64_t off, void *buf, size_t len,
                      size_t *got);
    /** Close what model_open opened. */
    void (*model_close)(void *user, void *fh);
    /** Emit model versions (directory names under /models). */
    int (*model_list)(void *user, ptc_view_emit_fn emit, void *ctx);
} ptc_view_ops;

/* ---- the view ----------------------------------------------------------------------- */

/** A view over a backing (datasets, models). Opaque. */
typedef struct ptc_view ptc_view;

/** What stat reports about a path. */
typedef struct ptc_view_stat {
    bool is_dir;
    uint64_t size; /**< bytes, for files */
} ptc_view_stat;

/**
 * Create a view. @p ops is copied; @p user is passed to every callback.
 * @return PTC_OK or PTC_E_NOMEM (*out NULL).
 */
PTC_API int ptc_view_create(ptc_view **out, const ptc_view_ops *ops, void *user);

/** Destroy a view (closes its datasets). No handle may be held. NULL:
 * no-op. */
PTC_API void ptc_view_destroy(ptc_view *v);

/**
 * Does @p path exist; directory or file, and its size.
 * @return PTC_OK, PTC_E_NOTFOUND, PTC_E_RANGE, or a backing error.
 */
PTC_API int ptc_view_stat_path(ptc_view *v, const char *path, ptc_view_stat *st);

/**
 * List a directory. Directories with unbounded children (samples/, seed-,
 * epoch-, batch-, start-, dp-, rank- and <CFG> levels beyond 1024 ranks)
 * list nothing or a bounded prefix; see docs/dataset.md.
 * @return PTC_OK, PTC_E_NOTFOUND, or an error of the backing.
 */
PTC_API int ptc_view_list(ptc_view *v, const char *path, ptc_view_emit_fn emit,
                          void *ctx);

/**
 * Read bytes [off, off + len) of the file at @p path, clipped to its size,
 * without an open handle: resolve (cached: datasets, step plans, model
 * files), read, release. For step files, every record whose last byte lies
 * in the range is reported to ops.served (a record of length 0 counts with
 * the byte before it, or with byte 0 when it starts the file; the records
 * of an empty step file count when it is first resolved in this view, as
 * ptc_view_node_resolve says). Allocates nothing for samples/<ID> and for
 * step files whose plan is cached (the view keeps the 64 most recent
 * plans).
 * @param got  bytes read (short only at end of file)
 * @return PTC_OK; PTC_E_NOTFOUND; PTC_E_RANGE; PTC_E_INVAL for a
 *         directory; PTC_E_NOMEM; a backing error (nothing is counted then).
 */
PTC_API int ptc_view_pread(ptc_view *v, const char *path, uint64_t off, void *buf, size_t len,
                           size_t *got);

/** One piece of a read: @p len bytes at @p ptr. */
typedef struct ptc_view_seg {
    const void *ptr;
    size_t len;
} ptc_view_seg;

/* ---- resolved nodes ------------------------------------------------------------------- */

/**
 * A resolved node: a path of the view found once — parsed, checked against
 * the data, and holding what its reads need (the dataset, the step plan,
 * the open model file, the info.json text) — so that reads neither parse
 * nor search, the way a filesystem reads from an inode rather than from a
 * name. Refcounted; opaque.
 *
 * @note Lifetime: a handle holds references (a step plan, an open model
 *       file) until its last ptc_view_node_release, and must be released
 *       before ptc_view_destroy. Datasets stay those the view opened: a
 *       dataset replaced in the backing after the view opened it is read
 *       and counted as the generation the view holds, by handles and paths
 *       alike.
 * @note Thread safety: a handle may be read, retained and released from
 *       any number of threads at once; reads take none of the view's locks
 *       (the dataset callbacks and ops.served it calls must be thread-safe,
 *       as for the view). The release of the last reference must not race
 *       with another use of the handle (the caller's references order it).
 */
typedef struct ptc_view_handle ptc_view_handle;

/**
 * Resolve @p path once. Checks what ptc_view_stat_path checks; for files
 * also opens what reads need (model files through ops.model_open). A
 * resolve counts as an open, or as the lookup of a filesystem that skips
 * opens: the records of an empty step file are reported to ops.served
 * the first time it is resolved, opened or looked up in this view (once
 * per view: a repeated resolve of the same empty step file counts
 * nothing). Directories resolve too (they are not readable).
 * @param out  a new handle holding one reference; NULL on failure
 * @return PTC_OK; PTC_E_NOTFOUND; PTC_E_RANGE; PTC_E_NOMEM; a backing error.
 */
PTC_API int ptc_view_node_resolve(ptc_view *v, const char *path, ptc_view_handle **out);

/** Add a reference to @p h. @return @p h. */
PTC_API ptc_view_handle *ptc_view_node_retain(ptc_view_handle *h);

/** Drop a reference; the last one frees the handle and what it holds.
 * NULL is a no-op. */
PTC_API void ptc_view_node_release(ptc_view_handle *h);

/** Directory or file, and the size of a file (fixed at resolve). */
PTC_API void ptc_view_node_stat(const ptc_view_handle *h, ptc_view_stat *st);

/** @return what the resolved path names. */
PTC_API ptc_view_kind ptc_view_node_kind(const ptc_view_handle *h);

/**
 * Read bytes [off, off + len) of a resolved file, clipped to its size:
 * the bytes, and the served counts of step-file records, are those of
 * ptc_view_pread on its path.
 * @param got  bytes read (short only at end of file)
 * @return PTC_OK; PTC_E_INVAL for a directory; a backing error (nothing is
 *         counted then).
 */
PTC_API int ptc_view_node_pread(ptc_view_handle *h, uint64_t off, void *buf, size_t len,
                                size_t *got);

/**
 * ptc_view_node_pread without copying what the dataset holds in place
 * (ptc_view_dataset.record_map): the bytes read are the concatenation of
 * @p segs. Pieces point either into the dataset's memory (valid while the
 * view lives) or into @p scratch, where everything that had to be copied
 * or computed goes. Reads and counts exactly as ptc_view_node_pread.
 * @param scratch  at least @p len bytes
 * @param segs     room for *nseg pieces (at least 2)
 * @param nseg     in: the room; out: the pieces used
 * @param got      bytes read (short only at end of file)
 * @return as ptc_view_node_pread; PTC_E_INVAL if *nseg < 2.
 */
PTC_API int ptc_view_node_pread_segs(ptc_view_handle *h, uint64_t off, size_t len,
                                     void *scratch, ptc_view_seg *segs, size_t *nseg,
                                     size_t *got);

/* ---- the view of a store ------------------------------------------------------------- */

/** The store (include/ptc/store.h). */
typedef struct ptc_store ptc_store;

/**
 * A view backed by a store: datasets/<NAME> are the store's datasets
 * (records read through the block engine), models/<V> its versions
 * (info.json, model.safetensors = ptc_vfile_whole, <CFG>/rank-R.safetensors
 * = ptc_vfile_rank under that configuration, byte-identical to `ptc export
 * --config`), and served step-file records go to the store's count map.
 * Readers, layouts and model files are cached (model files in a bounded
 * LRU). Opaque.
 * @note Thread safety: the view it owns is safe from any number of threads;
 *       create/attach/destroy are externally synchronised; flush may run
 *       concurrently with reads.
 */
typedef struct ptc_view_store ptc_view_store;

/** Options of ptc_view_store_create(). Zero-initialise. */
typedef struct ptc_view_store_options {
    size_t vfile_cache; /**< model files kept (LRU); 0: 64 */
    /** Bytes of decompressed blocks kept for the compressed datasets of
     * the view, shared by all of them and by every reading thread
     * (ptc_store_block_cache); 0: PTC_STORE_BLOCK_CACHE_DEFAULT (256 MiB);
     * less than one block (1 MiB, e.g. 1) keeps none. */
    uint64_t block_cache;
    /** Where the model files of version V of the store are read from; NULL:
     * the store's version V itself. Called (from any serving thread, not
     * concurrently for one version) when V is opened, which may take long:
     * `ptc mount --across-hosts` gathers a part of a store spread over hosts
     * into a whole version of another store first. @p store is the view's
     * own. Sets *@p from (not owned; outliving the view) and *@p as, the
     * version in it; returns PTC_OK or an error, which the read that opened
     * V returns. */
    int (*source)(void *user, ptc_store *store, uint64_t version, ptc_store **from,
                  uint64_t *as);
    void *source_user; /**< its @p user */
} ptc_view_store_options;

/**
 * Create a store view over the store in directory @p store_dir, opened
 * later by ptc_view_store_attach (after a fork: an LMDB environment must
 * not cross one). @p store_dir may be NULL when attach is given a store.
 * @param opts  may be NULL
 * @return PTC_OK or PTC_E_NOMEM (*out NULL).
 */
PTC_API int ptc_view_store_create(ptc_view_store **out, const char *store_dir,
                                  const ptc_view_store_options *opts);

/** The view (owned by @p vs, valid until ptc_view_store_destroy). Until
 * attach, dataset and model nodes fail with PTC_E_INVAL. */
PTC_API ptc_view *ptc_view_store_view(ptc_view_store *vs);

/**
 * Open the store: @p store (not owned; must outlive @p vs) or, when NULL,
 * the directory given to create (owned, closed by destroy). With @p count,
 * served step-file records are counted into the store's count map
 * (buffered; see ptc_view_store_flush).
 * @return PTC_OK; the errors of ptc_store_open; PTC_E_INVAL (read-only
 *         store with @p count, already attached).
 */
PTC_API int ptc_view_store_attach(ptc_view_store *vs, ptc_store *store, bool count);

/** Make the buffered served counts durable (one LMDB transaction).
 * @return PTC_OK or a store error (the counts stay buffered). */
PTC_API int ptc_view_store_flush(ptc_view_store *vs);

struct ptc_store_block_cache_stats; /* include/ptc/store.h */

/** What the view's decoded-block cache of compressed datasets holds and
 * did (ptc_store_block_cache_get_stats; the struct is in ptc/store.h).
 * Safe from any thread. */
PTC_API void ptc_view_store_block_cache_stats(const ptc_view_store *vs,
                                              struct ptc_store_block_cache_stats *out);

/** Flush the counts (best effort), destroy the view, close what attach
 * opened. No view file may be open. NULL is a no-op. */
PTC_API void ptc_view_store_destroy(ptc_view_store *vs);

#ifdef __cplusplus
}
#endif
#endif
