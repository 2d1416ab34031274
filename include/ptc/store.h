/**
 * @file store.h
 * @brief The crash-safe embedded store: versions of tensor collections in a
 * local directory (LMDB metadata + per-rank pack files). See docs/format.md.
 *
 * A store holds numbered versions (1, 2, 3… in commit order). A version is
 * an ordered list of tensors (name, dtype, shape, placement text) and, per
 * (tensor, rank), the shard that rank holds: its local shape, its pieces
 * (ptc_piece) and where its bytes are (a pack file extent, checksummed and
 * optionally zstd-compressed per 1 MiB block), or an alias of another rank's
 * shard of the same version (a replica).
 *
 * Objects and thread safety:
 * - ptc_store: open once per process per directory (LMDB's rule). Readers
 *   and writers created from it may be used from any thread; the store
 *   itself must outlive them. ptc_store_close() is externally synchronised.
 * - ptc_store_reader: an immutable snapshot of one version; every reader
 *   function is safe from several threads at once.
 * - ptc_store_writer: add_tensor / import / commit / abort are externally
 *   synchronised (one thread). Shard functions for different ranks may run
 *   concurrently from different threads: one thread per rank at a time.
 */
#ifndef PTC_STORE_H
#define PTC_STORE_H

#include "ptc/box.h"
#include "ptc/dtype.h"
#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Raw bytes per checksummed / compressed block. */
#define PTC_STORE_BLOCK_SIZE ((uint64_t)1 << 20)
/** Longest tensor name in bytes. */
#define PTC_STORE_MAX_NAME 1024
/** Pass as a version to mean every committed version (verify, info). */
#define PTC_STORE_ALL_VERSIONS UINT64_MAX

/** Flags for ptc_store_open(). */
enum {
    PTC_STORE_CREATE = 1u << 0,   /**< create the store if it does not exist */
    PTC_STORE_READONLY = 1u << 1, /**< no writers, no gc */
    /** Check the page structure of meta/data.mdb before liblmdb reads it
     * (liblmdb trusts its pages and can crash on a damaged one): every page
     * reachable from the newest snapshot is read once (docs/format.md
     * §2.6). Done anyway when data.mdb is at most 16 MiB, or when
     * PTC_VERIFY_METADATA=1 is in the environment; the two meta pages are
     * checked at every open. */
    PTC_STORE_CHECK = 1u << 2,
};

/** Codecs of a shard (per block the writer keeps a block raw if zstd does
 * not make it smaller). */
enum { PTC_STORE_CODEC_NONE = 0, PTC_STORE_CODEC_ZSTD = 1 };

typedef struct ptc_store ptc_store;
typedef struct ptc_store_reader ptc_store_reader;
typedef struct ptc_store_writer ptc_store_writer;

/** How long a writer waits for the store's writer lock by default: 60 s. */
#define PTC_STORE_LOCK_TIMEOUT_DEFAULT_MS 60000
/** ptc_store_options.lock_timeout_ms: never wait (PTC_E_BUSY at once). */
#define PTC_STORE_LOCK_NOWAIT (-1)

/** Options of ptc_store_open_ex(). Zero-initialise, then set fields. */
typedef struct ptc_store_options {
    unsigned flags;    /**< PTC_STORE_CREATE / PTC_STORE_READONLY */
    uint64_t map_size; /**< LMDB map size in bytes; 0: 1 TiB (sparse) on 64-bit */
    /** How long a writer (version, dataset ingest, gc, version deletion) of
     * this handle waits for the store's writer lock while another process
     * holds it: > 0 at most this many milliseconds; PTC_STORE_LOCK_NOWAIT
     * not at all; 0 the default: PTC_LOCK_TIMEOUT from the environment
     * (seconds, e.g. "2.5"), else PTC_STORE_LOCK_TIMEOUT_DEFAULT_MS.
     * Writers queue: the first to wait is the next to hold it. */
    int64_t lock_timeout_ms;
} ptc_store_options;

/**
 * Open (or create) the store in directory @p dir.
 * @param out    receives the handle; NULL on failure
 * @param flags  PTC_STORE_CREATE, PTC_STORE_READONLY
 * @return PTC_OK; PTC_E_NOTFOUND ("no ptc store at 'DIR'…") when @p dir does
 *   not exist or is not a store and CREATE is not given; PTC_E_STORE when the
 *   format record is missing or of another format version; PTC_E_IO, PTC_E_NOMEM.
 */
PTC_API int ptc_store_open(ptc_store **out, const char *dir, unsigned flags);

/** ptc_store_open() with options (map size). */
PTC_API int ptc_store_open_ex(ptc_store **out, const char *dir,
                              const ptc_store_options *opts);

/**
 * Set how long writers of @p s wait for the writer lock from now on
 * (ptc_store_options.lock_timeout_ms): @p ms milliseconds, 0 = not at all.
 * Externally synchronised with the writers of @p s.
 * @return PTC_OK, PTC_E_INVAL (negative).
 */
PTC_API int ptc_store_set_lock_timeout(ptc_store *s, int64_t ms);

/** Close the store. All readers and writers must be gone. NULL is a no-op. */
PTC_API void ptc_store_close(ptc_store *s);
/** @return the store directory as given to open (valid while open). */
PTC_API const char *ptc_store_dir(const ptc_store *s);
/** @return whether the store was opened read-only. */
PTC_API bool ptc_store_readonly(const ptc_store *s);

/** Release memory returned by ptc_store_* functions (JSON text, descriptor
 * buffers, version lists are freed with their own function). NULL: no-op. */
PTC_API void ptc_store_free(void *p);

/* ---- versions ----------------------------------------------------------- */

/** One committed version. Strings are NUL-terminated. */
typedef struct ptc_version_info {
    uint64_t version;
    uint64_t parent;          /**< version it was derived from; 0 = none */
    int64_t created_unix_ns;  /**< commit time */
    const char *step;         /**< step label ("" if none) */
    const char *config;       /**< parallel configuration text */
    const char *rules;        /**< placement rules text (canonical) */
    const char *metadata_json;/**< JSON object string→string ("{}" if none) */
    uint64_t tensor_count;
    uint64_t bytes;           /**< logical bytes of all tensors (volume × dtype size) */
    uint64_t stored_bytes;    /**< bytes this version wrote to its own pack files */
} ptc_version_info;

/**
 * List the committed versions in increasing order.
 * @param out  receives an array of @p n entries; release with
 *             ptc_store_versions_free(). NULL when n == 0.
 */
PTC_API int ptc_store_versions(ptc_store *s, ptc_version_info **out, size_t *n);
/** Free a list from ptc_store_versions(). */
PTC_API void ptc_store_versions_free(ptc_version_info *v, size_t n);

/** The store's on-disk format (docs/format.md): 2, or 1 for a store written
 * before metadata checksums (read unchecked; its next writer upgrades it).
 * @return PTC_OK, PTC_E_STORE. */
PTC_API int ptc_store_format(ptc_store *s, unsigned *out);

/** @return the newest committed version in @p out (0 if the store is empty). */
PTC_API int ptc_store_latest(ptc_store *s, uint64_t *out);

/**
 * Delete version @p version's metadata (tensors, shards, version record) in
 * one transaction; its pack files are removed by the next ptc_store_gc()
 * unless another version references them. Takes the writer lock.
 * @return PTC_OK, PTC_E_NOTFOUND, PTC_E_BUSY, PTC_E_INVAL (read-only).
 */
PTC_API int ptc_store_version_delete(ptc_store *s, uint64_t version);

/* ---- writer ------------------------------------------------------------- */

/** What a new version is and how to write it. Strings may be NULL (empty). */
typedef struct ptc_store_write_options {
    const char *step;    /**< step label */
    const char *config;  /**< parallel configuration text */
    const char *rules;   /**< canonical placement rules text */
    uint64_t parent;     /**< version this one derives from; 0 = none */
    uint32_t world_size; /**< ranks are 0 … world_size-1 (>= 1) */
    unsigned codec;      /**< PTC_STORE_CODEC_NONE / _ZSTD */
    int level;           /**< zstd level; 0 = zstd's default */
} ptc_store_write_options;

/**
 * Begin a new version: takes the store's writer lock (waiting for it up to
 * the store's lock timeout, ptc_store_options.lock_timeout_ms), allocates
 * the version number (newest committed + 1) and removes stale pack files of
 * that number.
 * @return PTC_OK; PTC_E_BUSY "store … is locked by another process (pid N);
 *   waited T s" when the lock stayed held for the whole timeout;
 *   PTC_E_INVAL (read-only store, world_size 0, unknown codec); PTC_E_IO.
 */
PTC_API int ptc_store_writer_begin(ptc_store_writer **out, ptc_store *s,
                                   const ptc_store_write_options *opts);

/**
 * Begin a pack-only writer for the multi-process executor: it writes the pack
 * files of @p ranks for version @p version (allocated by the committing
 * process's ptc_store_writer_begin() and sent over) and exports the shard
 * descriptors with ptc_store_writer_export(); it never commits and takes no
 * lock. The tensor list must be added in the same order as in the
 * committing writer. Rank sets of all writers of a version must be disjoint.
 * @return PTC_OK, PTC_E_INVAL, PTC_E_NOMEM.
 */
PTC_API int ptc_store_writer_begin_pack(ptc_store_writer **out, ptc_store *s,
                                        uint64_t version,
                                        const ptc_store_write_options *opts,
                                        const uint32_t *ranks, size_t nranks);

/** @return the version number this writer writes. */
PTC_API uint64_t ptc_store_writer_version(const ptc_store_writer *w);

/** Add a key/value of the checkpoint's global __metadata__ (last one wins).
 * Constant time per call (duplicates are resolved once, at commit).
 * @return PTC_OK; PTC_E_INVAL for a NULL or non-UTF-8 key or value;
 *   PTC_E_NOMEM. */
PTC_API int ptc_store_writer_set_metadata(ptc_store_writer *w, const char *key,
                                          const char *value);

/**
 * Append a tensor to the version's ordered list.
 * @param name       UTF-8, 1..PTC_STORE_MAX_NAME bytes (not NUL-terminated)
 * @param placement  placement text (may be NULL)
 * @param index      receives the tensor's index (0, 1, …) — may be NULL
 * @return PTC_OK; PTC_E_INVAL (bad name, ndim, shape, dtype); PTC_E_NOMEM.
 *   Duplicate names are reported by commit (PTC_E_EXISTS).
 */
PTC_API int ptc_store_writer_add_tensor(ptc_store_writer *w, const char *name,
                                        size_t name_len, ptc_dtype dtype, int ndim,
                                        const int64_t *shape, const char *placement,
                                        uint32_t *index);

/**
 * Start streaming the shard of (@p tensor, @p rank) into rank's pack file.
 * @param local_ndim,local_shape  the shard's local tensor
 * @param pieces     the global boxes it holds and where (validated: inside the
 *                   tensor and the local tensor, non-negative strides)
 * @return PTC_OK; PTC_E_INVAL (rank out of range or not this writer's, a shard
 *   of this rank already open, bad pieces); PTC_E_IO.
 */
PTC_API int ptc_store_shard_begin(ptc_store_writer *w, uint32_t tensor, uint32_t rank,
                                  int local_ndim, const int64_t *local_shape,
                                  const ptc_piece *pieces, size_t npieces);
/** Append @p n bytes (any size) to rank's open shard.
 * @return PTC_OK, PTC_E_INVAL (more than the local tensor holds), PTC_E_IO. */
PTC_API int ptc_store_shard_write(ptc_store_writer *w, uint32_t rank, const void *data,
                                  size_t n);
/** Finish rank's open shard.
 * @return PTC_OK, PTC_E_INVAL (fewer bytes than the local tensor), PTC_E_IO. */
PTC_API int ptc_store_shard_end(ptc_store_writer *w, uint32_t rank);

/** begin + write(all @p nbytes) + end in one call. */
PTC_API int ptc_store_shard_put(ptc_store_writer *w, uint32_t tensor, uint32_t rank,
                                int local_ndim, const int64_t *local_shape,
                                const ptc_piece *pieces, size_t npieces,
                                const void *data, size_t nbytes);

/**
 * Record that (@p tensor, @p rank) is a replica of (@p tensor, @p owner_rank)
 * of this version: nothing is stored; reads resolve to the owner's shard.
 * The owner's shard must exist at commit (possibly imported).
 */
PTC_API int ptc_store_shard_alias(ptc_store_writer *w, uint32_t tensor, uint32_t rank,
                                  uint32_t owner_rank);

/**
 * Reference an identical shard of an older version (nothing is copied): the
 * shard of (@p from_tensor, @p from_rank) in the snapshot @p from (of the same
 * store) becomes the shard of (@p tensor, @p rank) of this version. Dtype and
 * global shape must match. Every block of the referenced extent is read
 * first and checked against its XXH3-64 (decompressed where stored zstd),
 * so a version never points at a block that rotted since it was written;
 * the cost is one read of the extent.
 * @return PTC_OK, PTC_E_NOTFOUND (no such shard), PTC_E_INVAL,
 *   PTC_E_CHECKSUM / PTC_E_IO (the stored extent fails its check: write the
 *   shard instead).
 */
PTC_API int ptc_store_shard_reuse(ptc_store_writer *w, uint32_t tensor, uint32_t rank,
                                  const ptc_store_reader *from, size_t from_tensor,
                                  uint32_t from_rank);

/**
 * Pack-only writers: fsync the pack files written and serialise every shard
 * descriptor of this writer into a flat buffer (docs/format.md, "descriptor
 * buffer"), to be passed to ptc_store_writer_import() of the committing
 * writer. Afterwards the writer can only be destroyed.
 * @param buf  receives the buffer; release with ptc_store_free()
 */
PTC_API int ptc_store_writer_export(ptc_store_writer *w, void **buf, size_t *len);

/**
 * Add the shard descriptors of a buffer from ptc_store_writer_export()
 * (untrusted input: every field is validated against this writer's tensors).
 * @return PTC_OK, PTC_E_FORMAT (malformed buffer, naming the problem),
 *   PTC_E_INVAL (other version, unknown tensor, rank out of range), PTC_E_NOMEM.
 */
PTC_API int ptc_store_writer_import(ptc_store_writer *w, const void *buf, size_t len);

/**
 * Commit: fsync every pack file written and the pack directory, then write
 * all metadata in one LMDB transaction; only then is the version visible.
 * Releases the writer lock. On failure nothing is visible; destroy the writer.
 * @param version  receives the committed version number (may be NULL)
 * @return PTC_OK; PTC_E_INVAL (a shard still open, an alias without owner);
 *   PTC_E_EXISTS (duplicate tensor name or shard); PTC_E_IO; PTC_E_STORE.
 */
PTC_API int ptc_store_writer_commit(ptc_store_writer *w, uint64_t *version);

/** Abort if not committed (removes this writer's pack files), release the
 * lock and free. NULL is a no-op. */
PTC_API void ptc_store_writer_destroy(ptc_store_writer *w);

/* ---- reader ------------------------------------------------------------- */

/** A tensor of a version. Pointers valid until the reader is closed. */
typedef struct ptc_store_tensor {
    const char *name; /**< NUL-terminated (the name itself contains no NUL) */
    size_t name_len;
    ptc_dtype dtype;
    int ndim;
    int64_t shape[PTC_MAX_DIMS];
    const char *placement; /**< "" if none */
    size_t nshards;        /**< ranks with a shard record (data or alias) */
} ptc_store_tensor;

/** A shard of (tensor, rank). Pointers valid until the reader is closed.
 * For an alias the data fields describe the owner's stored shard. */
typedef struct ptc_shard_info {
    uint32_t rank;
    bool alias;              /**< a replica; data stored by owner_rank */
    uint32_t owner_rank;     /**< == rank unless alias */
    uint64_t pack_version;   /**< pack file packs/v<pack_version>/rank-<pack_rank>.pack */
    uint32_t pack_rank;
    uint64_t offset;         /**< byte offset of the first block */
    uint64_t length;         /**< stored bytes (all blocks) */
    uint64_t raw_length;     /**< bytes of the local tensor */
    unsigned codec;          /**< PTC_STORE_CODEC_* the writer used */
    uint64_t nblocks;
    int local_ndim;
    int64_t local_shape[PTC_MAX_DIMS];
    const ptc_piece *pieces;
    size_t npieces;
} ptc_shard_info;

/**
 * Open version @p version (0 = newest) as a snapshot (metadata copied, and
 * every pack file its data records point to opened now and held until
 * close: a version deleted and collected by ptc gc meanwhile stays readable
 * through this reader).
 * @return PTC_OK; PTC_E_NOTFOUND "version V not found in store DIR" (or the
 *   store is empty, or the version was deleted before its files were open);
 *   PTC_E_STORE (corrupt metadata); PTC_E_IO (a pack file cannot be opened);
 *   PTC_E_NOMEM.
 */
PTC_API int ptc_store_reader_open(ptc_store_reader **out, ptc_store *s, uint64_t version);
/** Close a reader. NULL is a no-op. */
PTC_API void ptc_store_reader_close(ptc_store_reader *r);

/** The version record (strings valid until close). */
PTC_API const ptc_version_info *ptc_store_reader_version(const ptc_store_reader *r);
/** Value of @p key in the version's __metadata__, or NULL (valid until close). */
PTC_API const char *ptc_store_reader_metadata(const ptc_store_reader *r, const char *key);

/** @return the number of tensors. */
PTC_API size_t ptc_store_reader_tensor_count(const ptc_store_reader *r);
/** Tensor @p i (in the version's order). @return PTC_OK or PTC_E_RANGE. */
PTC_API int ptc_store_reader_tensor(const ptc_store_reader *r, size_t i,
                                    ptc_store_tensor *out);
/** Find a tensor by name. @return PTC_OK or PTC_E_NOTFOUND naming it. */
PTC_API int ptc_store_reader_find(const ptc_store_reader *r, const char *name,
                                  size_t name_len, size_t *index);

/** Shard record @p i (increasing rank) of tensor @p t. */
PTC_API int ptc_store_reader_shard_at(const ptc_store_reader *r, size_t t, size_t i,
                                      ptc_shard_info *out);
/** The shard of (@p t, @p rank), aliases resolved.
 * @return PTC_OK, PTC_E_NOTFOUND (no shard of that rank), PTC_E_RANGE. */
PTC_API int ptc_store_reader_shard(const ptc_store_reader *r, size_t t, uint32_t rank,
                                   ptc_shard_info *out);

/**
 * Read the whole stored local tensor of (@p t, @p rank) into @p buf
 * (@p len must equal its raw_length), verifying every block's checksum.
 * @return PTC_OK, PTC_E_NOTFOUND, PTC_E_INVAL (len), PTC_E_CHECKSUM (naming
 *   tensor, rank, pack file and byte offset), PTC_E_IO.
 */
PTC_API int ptc_store_reader_read_shard(const ptc_store_reader *r, size_t t, uint32_t rank,
                                        void *buf, size_t len);

/**
 * Read any box of tensor @p t into @p dst, from whichever stored shards cover
 * it; element g of the box goes to dst + size * sum_d (g[d]-box->lo[d]) *
 * dst_strides[d]. Reads, decompresses and verifies only the blocks the box
 * touches.
 * @param dst_strides  element strides (NULL: row-major of the box)
 * @return PTC_OK; PTC_E_RANGE (box outside the tensor); PTC_E_NOTFOUND (some
 *   part of the box is held by no shard); PTC_E_CHECKSUM; PTC_E_IO.
 */
PTC_API int ptc_store_reader_read_box(const ptc_store_reader *r, size_t t,
                                      const ptc_box *box, void *dst,
                                      const int64_t *dst_strides);

/* ---- datasets ------------------------------------------------------------- */

/** Longest dataset name in bytes (names are [A-Za-z0-9._-], not starting
 * with '.'). */
#define PTC_STORE_DATASET_NAME_MAX 255
/** Longest format text of a dataset. */
#define PTC_STORE_DATASET_FORMAT_MAX 63

/** A stored dataset (docs/format.md §8). Strings are NUL-terminated. */
typedef struct ptc_store_dataset_info {
    char name[PTC_STORE_DATASET_NAME_MAX + 1];
    char format[PTC_STORE_DATASET_FORMAT_MAX + 1]; /**< ingest format text */
    uint64_t id;             /**< pack file packs/datasets/d<id>.pack */
    uint64_t samples;        /**< number of records N */
    uint64_t bytes;          /**< Σ record lengths (raw) */
    uint64_t stored_bytes;   /**< bytes of its pack file's blobs (data + index) */
    int64_t created_unix_ns; /**< commit time */
    unsigned codec;          /**< PTC_STORE_CODEC_* the writer used */
    uint64_t data_offset;    /**< file offset of the data blob's first block */
    bool data_raw;           /**< every data block is stored raw (uncompressed):
                                  the records are bytes [data_offset,
                                  data_offset + bytes) of the pack file */
} ptc_store_dataset_info;

/** Most records a stored dataset holds (2^63 - 1): the epoch order's limit
 * (PTC_DATASET_MAX_SAMPLES of ptc/order.h has the same value). */
#define PTC_STORE_DATASET_MAX_RECORDS ((uint64_t)INT64_MAX)

/** @return true if @p name is a valid dataset name. */
PTC_API bool ptc_store_dataset_name_ok(const char *name);

/** Options of ptc_store_dataset_writer_begin(). Zero-initialise. */
typedef struct ptc_store_dataset_options {
    unsigned codec; /**< PTC_STORE_CODEC_NONE / _ZSTD */
    int level;      /**< zstd level (0: default) */
    bool replace;   /**< replace a dataset of that name (atomically, at commit) */
} ptc_store_dataset_options;

/** A dataset being written (opaque). Externally synchronised. */
typedef struct ptc_store_dataset_writer ptc_store_dataset_writer;

/**
 * Begin writing dataset @p name: takes the store's writer lock, allocates
 * its pack file. Records are appended with ptc_store_dataset_writer_append;
 * nothing is visible until commit.
 * @return PTC_OK; PTC_E_INVAL (bad name, codec, level, read-only store);
 *   PTC_E_EXISTS (the name exists and @p opts->replace is not set);
 *   PTC_E_BUSY (locked); PTC_E_IO.
 */
PTC_API int ptc_store_dataset_writer_begin(ptc_store_dataset_writer **out, ptc_store *s,
                                           const char *name,
                                           const ptc_store_dataset_options *opts);
/** Append one record of @p len bytes (ids count from 0).
 * @return PTC_OK, PTC_E_IO, PTC_E_NOMEM. */
PTC_API int ptc_store_dataset_writer_append(ptc_store_dataset_writer *w, const void *data,
                                            size_t len);
/**
 * Commit: write the index blob, fsync the pack file and its directories,
 * then put the catalog record in one LMDB transaction (replacing the old
 * one with opts->replace, and clearing its served-count map).
 * @param format  the format text recorded in the catalog
 * @param info    receives the committed dataset (may be NULL)
 * @return PTC_OK; PTC_E_EXISTS (created meanwhile); PTC_E_IO; PTC_E_STORE.
 */
PTC_API int ptc_store_dataset_writer_commit(ptc_store_dataset_writer *w, const char *format,
                                            ptc_store_dataset_info *info);
/** Abort unless committed (removes the pack file), release the lock, free.
 * NULL is a no-op. */
PTC_API void ptc_store_dataset_writer_destroy(ptc_store_dataset_writer *w);

/** List the datasets (sorted by name); free @p *out with ptc_store_free().
 * Writes nothing (a store that never held a dataset lists none, read-only
 * or not). @return PTC_OK, PTC_E_STORE (corrupt catalog), PTC_E_NOMEM. */
PTC_API int ptc_store_datasets(ptc_store *s, ptc_store_dataset_info **out, size_t *n);
/** Look up one dataset. @return PTC_OK, PTC_E_NOTFOUND ("no dataset 'x'…"). */
PTC_API int ptc_store_dataset_stat(ptc_store *s, const char *name,
                                   ptc_store_dataset_info *out);

/**
 * An open dataset: its catalog record (a snapshot), the pack file and the
 * index. Every function on it is safe from any number of threads at once.
 */
typedef struct ptc_store_dataset ptc_store_dataset;

/** Open dataset @p name. @return PTC_OK, PTC_E_NOTFOUND, PTC_E_STORE, PTC_E_IO,
 * PTC_E_CHECKSUM (its index). */
PTC_API int ptc_store_dataset_open(ptc_store_dataset **out, ptc_store *s, const char *name);
/** Close; NULL is a no-op. */
PTC_API void ptc_store_dataset_close(ptc_store_dataset *d);
/** Its catalog record (valid until close). */
PTC_API const ptc_store_dataset_info *ptc_store_dataset_get_info(const ptc_store_dataset *d);
/** Length of record @p id. @return PTC_OK, PTC_E_RANGE (id >= N), read errors. */
PTC_API int ptc_store_dataset_record_size(ptc_store_dataset *d, uint64_t id, uint64_t *size);
/** Copy bytes [off, off + len) of record @p id (inside it) to @p buf, reading,
 * decompressing and verifying only the blocks they touch (a raw block is
 * verified the first time this handle reads it; a compressed one is taken
 * from the handle's block cache, if it has one, or decompressed into it).
 * @return PTC_OK, PTC_E_RANGE, PTC_E_CHECKSUM, PTC_E_IO. */
PTC_API int ptc_store_dataset_record_read(ptc_store_dataset *d, uint64_t id, uint64_t off,
                                          void *buf, size_t len);
/** Bytes [off, off + len) of record @p id in place, without a copy: *out
 * points into the handle's read-only mapping of the pack file (valid until
 * close) when those bytes are stored uncompressed and the pack is mapped;
 * each block they touch is verified the first time, as a read does.
 * Otherwise (compressed, not mapped, len 0) *out is NULL: use
 * ptc_store_dataset_record_read.
 * @return PTC_OK, PTC_E_RANGE, PTC_E_CHECKSUM, PTC_E_IO. */
PTC_API int ptc_store_dataset_record_map(ptc_store_dataset *d, uint64_t id, uint64_t off,
                                         size_t len, const void **out);
/** A hint that bytes [off, off + len) of record @p id will be read soon:
 * the blocks they touch that this handle has not verified yet are asked
 * for from the disk now, so that the blocks of many records load at once
 * (a cold read in random order). Costs nothing once they are verified.
 * Errors are ignored (the read reports them). */
PTC_API void ptc_store_dataset_record_prefetch(ptc_store_dataset *d, uint64_t id, uint64_t off,
                                               size_t len);
/** A weaker hint: bytes [off, off + len) of record @p id will be read
 * after the records hinted with ptc_store_dataset_record_prefetch (e.g.
 * by the next step file). With a block cache (ptc_store_dataset_set_cache)
 * its compressed blocks are decoded ahead when the cache's workers have
 * nothing more urgent, while decoded-ahead blocks not read yet hold less
 * than a quarter of the cache; otherwise it does nothing. Errors are
 * ignored. */
PTC_API void ptc_store_dataset_record_prefetch_later(ptc_store_dataset *d, uint64_t id,
                                                     uint64_t off, size_t len);

/* ---- decoded blocks of compressed datasets ------------------------------ */

/**
 * A cache of decompressed, verified blocks of compressed datasets, shared
 * by every dataset handle it is attached to (ptc_store_dataset_set_cache)
 * and by any number of threads. A zstd block is decompressed once while it
 * stays cached, however many records and readers touch it (without a
 * cache, a read decompresses every block it touches, once per record).
 * Least recently used blocks go first; two threads that want the same
 * block decompress it once (the second waits).
 *
 * Memory is bounded: the decoded blocks it holds — cached, or pinned by a
 * read that is copying out of them — never exceed @p max_bytes. The bound
 * is split evenly over up to 16 shards (each with its own lock), each
 * holding whole blocks (1 MiB), so the usable size is max_bytes rounded
 * down to a whole number of blocks per shard; a cache of less than one
 * block caches nothing. When a shard has no room (every block in it pinned
 * by other readers), a read decompresses into its own scratch instead,
 * as without a cache. Raw (uncompressed) blocks are never cached: they
 * are read from the pack file's mapping.
 *
 * @note Thread safety: every function is safe from any number of threads;
 *       the cache must outlive the dataset handles attached to it.
 */
typedef struct ptc_store_block_cache ptc_store_block_cache;

/** What a block cache holds and did (ptc_store_block_cache_get_stats). */
typedef struct ptc_store_block_cache_stats {
    uint64_t max_bytes;  /**< the bound given to create */
    uint64_t bytes;      /**< decoded bytes held now (cached or pinned) */
    uint64_t peak_bytes; /**< the most ever held at once (≤ max_bytes) */
    uint64_t hits;       /**< block lookups answered from the cache */
    uint64_t decodes;    /**< blocks decompressed into the cache */
    uint64_t bypassed;   /**< blocks decompressed outside it (no room) */
    uint64_t decoded_ahead; /**< of decodes, those done by readahead workers */
} ptc_store_block_cache_stats;

/** The default bound of the cache a store view gives its datasets. */
#define PTC_STORE_BLOCK_CACHE_DEFAULT ((uint64_t)256 << 20)

/** Create a cache of at most @p max_bytes of decoded blocks.
 * @return PTC_OK or PTC_E_NOMEM (*out NULL). */
PTC_API int ptc_store_block_cache_create(ptc_store_block_cache **out, uint64_t max_bytes);
/** Free the cache and its blocks; no handle may still use it. NULL is a
 * no-op. */
PTC_API void ptc_store_block_cache_destroy(ptc_store_block_cache *c);
/** Counters and the bytes held (a consistent-enough snapshot). */
PTC_API void ptc_store_block_cache_get_stats(const ptc_store_block_cache *c,
                                             ptc_store_block_cache_stats *out);
/** Read the compressed blocks of @p d through cache @p c (NULL: no cache,
 * the default). Call before reading @p d from other threads; @p c must
 * outlive @p d, whose blocks it drops when @p d is closed. */
PTC_API void ptc_store_dataset_set_cache(ptc_store_dataset *d, ptc_store_block_cache *c);

/* ---- served-record counts (the exactly-once audit) ---------------------- */

/** A number of servings of one record of one (dataset, generation, seed,
 * epoch); @ref name indexes the names array passed with it. */
typedef struct ptc_store_dataset_count {
    uint32_t name;   /**< index into the names array */
    uint64_t gen;    /**< the dataset's catalog id (ptc_store_dataset_info.id) */
    uint64_t seed, epoch, id;
    uint64_t count;  /**< servings to add (>= 1) */
} ptc_store_dataset_count;

/** Check that counts can be kept: nothing is written (the count map is
 * made by the first ptc_store_dataset_counts_add, so a mount that serves no
 * step file never writes the database, e.g. on a full disk).
 * @return PTC_OK, PTC_E_NOTFOUND (read-only store without counts), PTC_E_STORE. */
PTC_API int ptc_store_dataset_counts_open(ptc_store *s);
/** Add @p n counts in one write transaction (all or none). Safe from any
 * thread; LMDB serialises writers across processes.
 * @return PTC_OK, PTC_E_INVAL (read-only store, bad name), PTC_E_STORE. */
PTC_API int ptc_store_dataset_counts_add(ptc_store *s, const char *const *names,
                                         const ptc_store_dataset_count *ev, size_t n);
/** Call @p fn(id, count, user) for every counted record of (name, gen, seed,
 * epoch) in increasing id order, in one read transaction; stops at the first
 * non-OK return of fn and returns it. A store that never counted calls fn
 * never. @return PTC_OK, fn's code, PTC_E_INVAL, PTC_E_STORE. */
PTC_API int ptc_store_dataset_counts_each(ptc_store *s, const char *name, uint64_t gen,
                                          uint64_t seed, uint64_t epoch,
                                          int (*fn)(uint64_t id, uint64_t count, void *user),
                                          void *user);

/* ---- maintenance -------------------------------------------------------- */

/**
 * Re-check every block checksum of every shard @p version references
 * (0 = newest, PTC_STORE_ALL_VERSIONS = all; shared extents once), with the
 * metadata records on the way (their checksums, digests and summaries,
 * docs/format.md §2.5). PTC_STORE_ALL_VERSIONS also verifies every dataset
 * (ptc_store_dataset_verify) and works on a store that holds datasets only
 * (or nothing).
 * @param progress  called with ("verify", bytes done, bytes total); may be NULL
 * @return PTC_OK, or the first failure: PTC_E_CHECKSUM (tensor or dataset,
 *   rank, pack file, byte offset), PTC_E_STORE (corrupt metadata), PTC_E_IO,
 *   PTC_E_NOTFOUND.
 */
PTC_API int ptc_store_verify(ptc_store *s, uint64_t version, ptc_progress_fn progress,
                             void *user);

/**
 * Re-check dataset @p name: its catalog record, every block of its records
 * and of its index (read, decompressed, compared with its XXH3-64), and that
 * the index's offsets rise from 0 to the records' length.
 * @param progress  called with ("verify", bytes done, bytes total); may be NULL
 * @return PTC_OK, PTC_E_NOTFOUND, PTC_E_CHECKSUM (dataset, pack file, block,
 *   byte offset), PTC_E_STORE (corrupt catalog record or index), PTC_E_IO.
 */
PTC_API int ptc_store_dataset_verify(ptc_store *s, const char *name, ptc_progress_fn progress,
                                     void *user);

/** What ptc_store_gc() removed. */
typedef struct ptc_store_gc_stats {
    uint64_t files_removed;
    uint64_t bytes_removed;
    uint64_t dirs_removed;
} ptc_store_gc_stats;

/**
 * Delete every pack file and version directory that no committed version
 * references (debris of aborted or crashed writers, files of deleted
 * versions), and every dataset pack file no catalog record references
 * (replaced datasets, aborted ingests). Never removes a file a committed
 * version or dataset references (own data, aliases and cross-version
 * references). Takes the writer lock in slices: before each removal it
 * hands the lock to a writer queued for it and queues again, so a save
 * beside gc waits for one removal, not for the whole gc (docs/format.md §7).
 * @param stats  may be NULL
 * @return PTC_OK, PTC_E_BUSY, PTC_E_INVAL (read-only), PTC_E_IO.
 */
PTC_API int ptc_store_gc(ptc_store *s, ptc_store_gc_stats *stats);

/**
 * Remove the store in @p dir if it holds nothing — no version was ever
 * committed and no dataset exists — as a PTC_STORE_CREATE open followed by a
 * failed first import leaves it: its LMDB files, `meta`, `packs` (holding at
 * most empty directories) and `lock`, then @p dir itself when @p remove_dir
 * and it is empty then. Anything else in `packs` keeps the store whole.
 * Takes the writer lock; the store must not be open in this process.
 * @return PTC_OK (removed); PTC_E_EXISTS (not empty: left as it is);
 *   PTC_E_NOTFOUND (no store there), PTC_E_BUSY, PTC_E_IO, PTC_E_STORE.
 */
PTC_API int ptc_store_remove_empty(const char *dir, bool remove_dir);

/** Flags of ptc_store_info_json(). */
enum { PTC_STORE_INFO_BLOCKS = 1u << 0 /**< include per-block tables */ };

/**
 * Describe the store as one JSON object (for `ptc info --json`): format,
 * versions with their records, tensors (name, dtype, shape, placement) and
 * shards (rank, alias, pack, offset, length, raw_length, codec, local shape,
 * pieces, and with PTC_STORE_INFO_BLOCKS the blocks: stored length, codec,
 * xxh3 as 16 hex digits). @p version: 0 = newest, ALL_VERSIONS = all.
 * @param json  receives NUL-terminated text; release with ptc_store_free()
 */
PTC_API int ptc_store_info_json(ptc_store *s, uint64_t version, unsigned flags,
                                char **json);

#ifdef __cplusplus
}
#endif
#endif
