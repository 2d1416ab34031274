/* Store internals shared by ptc/store*.c and by other modules that keep
 * their own named databases in the store's LMDB environment (dataset state,
 * audit counts). Never installed. */
#ifndef PTC_STORE_INTERNAL_H
#define PTC_STORE_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>

#include "ptc/store.h"
#include "ptc/store/store_ranks.h"
#include "base/buf_internal.h"

/* Named database of the served-record count map (store_counts.c). */
#define PTC_STORE_DB_COUNTS "ptc.dataset.counts"

/* ---- accessors ----------------------------------------------------------- */

/* The LMDB environment (valid while the store is open). Named databases of
 * other modules must be opened with ptc_store_dbi_open(). */
MDB_env *ptc_store_env(ptc_store *s);

/* Open (create unless read-only) the named database @p name, once per store;
 * later calls return the cached handle. Thread-safe. It runs its own write
 * transaction the first time: never call it while this thread holds a write
 * transaction (LMDB would deadlock); open your databases up front. */
int ptc_store_dbi_open(ptc_store *s, const char *name, unsigned mdb_flags, MDB_dbi *out);

/* The named database @p name if it exists (PTC_E_NOTFOUND if not): never
 * creates it and never writes, whether the store is writable or not (a
 * reading operation works on a full disk). Cached like ptc_store_dbi_open. */
int ptc_store_dbi_find(ptc_store *s, const char *name, MDB_dbi *out);

/* Run @p fn inside one LMDB write transaction: committed if fn returns
 * PTC_OK, aborted otherwise (its code is returned). LMDB serialises write
 * transactions across threads and processes; @p fn must not start another
 * write transaction. Read transactions: mdb_txn_begin(ptc_store_env(s),
 * NULL, MDB_RDONLY, &txn) (the environment is opened with MDB_NOTLS, so a
 * thread may hold several). */
int ptc_store_write_txn(ptc_store *s, int (*fn)(MDB_txn *txn, void *user), void *user);

/* Map an LMDB return code to PTC_E_* with a message naming @p what. */
int ptc_store_mdb_error(int rc, const char *what);

/* ---- the store's own entries ----------------------------------------------
 * Every entry the store creates, writes or removes is reached from a handle
 * on the store's root directory, one component at a time with O_NOFOLLOW: a
 * symbolic link (or a device, a hard link, a file where a directory belongs)
 * planted inside the store is reported as foreign, never followed, so no
 * store operation changes anything outside the store's directory. */

/* Open the store directory @p rel ("packs", "packs/v7", "packs/datasets")
 * as a handle (O_DIRECTORY | O_NOFOLLOW for each component), creating the
 * missing components when @p create. PTC_E_NOTFOUND when a component is
 * missing and !create; PTC_E_STORE naming the entry when one is foreign. */
int ptc_store_subdir(const ptc_store *s, const char *rel, bool create, int *fd);
/* Create @p name in directory handle @p dfd (store path @p rel, for
 * messages) as a new regular file: O_CREAT | O_EXCL | O_NOFOLLOW with the
 * access mode in @p oflags. */
int ptc_store_create_file(const ptc_store *s, int dfd, const char *rel, const char *name,
                          int oflags, int *fd);
/* The spare pack files' directory, under packs/ (docs/format.md §7). */
#define PTC_STORE_SPARE_DIR "spare"
/* A rank's pack file @p name of version directory @p dfd (store path
 * @p rel) to write: a spare taken (*spare true: overwritten in place, its
 * tail to be cut), else made anew (ptc_store_create_file), held with a
 * shared flock while open so that a recycling gc leaves it alone. */
int ptc_store_create_pack(const ptc_store *s, int dfd, const char *rel, const char *name,
                          int *fd, bool *spare);
/* Remove the regular file @p name of directory handle @p dfd (store path
 * @p rel). A symbolic link or any other kind of entry is foreign: reported
 * (PTC_E_STORE), left alone. An absent entry is PTC_OK with *size 0.
 * @p size (may be NULL) gets the removed file's size. */
int ptc_store_remove_file(const ptc_store *s, int dfd, const char *rel, const char *name,
                          uint64_t *size);
/* What entry @p name of @p dfd is, for a message; NULL if it is what the
 * store makes: a directory (PTC_ENTRY_DIR), a regular file (PTC_ENTRY_FILE),
 * a regular file with no other hard link (PTC_ENTRY_WRITABLE: one the store
 * writes to in place, so no other name may share it). */
enum { PTC_ENTRY_DIR, PTC_ENTRY_FILE, PTC_ENTRY_WRITABLE };
const char *ptc_store_entry_kind(int dfd, const char *name, int want);
/* "store DIR: REL/NAME is KIND, not an entry the store made; …" */
int ptc_store_foreign_error(const char *dir, const char *rel, const char *name,
                            const char *kind);
/* ptc_store_subdir() from a root handle (before the store handle exists). */
int ptc_store_subdir_at(int rootfd, const char *dir, const char *rel, bool create, int *out);
/* The error for entry @p name of directory handle @p dfd (store path
 * @p rel) that the store did not make: names what it is. */
int ptc_store_foreign(const ptc_store *s, int dfd, const char *rel, const char *name);

/* Writer lock (store_lock.c; the STORE/lock file): queue for it for at most
 * the store's lock timeout (PTC_E_BUSY naming the holder after that). */
int ptc_store_lock(ptc_store *s, int *fd);
void ptc_store_unlock(ptc_store *s, int fd);
/* Whether another writer is queued for the lock held through @p fd: a holder
 * working in slices hands the lock over (ptc_store_relock) when it is. */
bool ptc_store_lock_wanted(int fd);
/* Release the lock of *fd and queue for it again (behind every writer that
 * was waiting); *fd is the new descriptor, or -1 on failure. */
int ptc_store_relock(ptc_store *s, int *fd);
/* The wait of a store opened with option @p opt_ms (ptc_store_options). */
int64_t ptc_store_lock_timeout_resolve(int64_t opt_ms);

/* ---- records ------------------------------------------------------------- */

/* Store format 2: every record sealed with a checksum, summaries of the
 * version list and the dataset catalog (docs/format.md §2.5). Format 1
 * stores open unchecked and are upgraded by their next write. */
#define PTC_STORE_FORMAT_VERSION 2u
#define PTC_STORE_FORMAT_UNCHECKED 1u
#define PTC_STORE_MAGIC "PTCSTORE"
#define PTC_PACK_MAGIC "PTCPACK1"
#define PTC_PACK_HEADER_SIZE 64u
#define PTC_DESC_MAGIC "PTCDESC1"

#define PTC_DB_META "ptc.meta"
#define PTC_DB_VERSIONS "ptc.versions"
#define PTC_DB_TENSORS "ptc.tensors"
#define PTC_DB_SHARDS "ptc.shards"
#define PTC_DB_DATASETS "ptc.datasets" /* dataset catalog, docs/format.md §8 */

enum { PTC_SHARD_DATA = 1, PTC_SHARD_ALIAS = 2 };
enum { PTC_BLOCK_RAW = 0, PTC_BLOCK_ZSTD = 1 };

typedef struct ptc_block {
    uint64_t xxh3;   /* XXH3-64 (seed 0) of the raw block */
    uint32_t stored; /* bytes in the pack file */
    uint32_t codec;  /* PTC_BLOCK_RAW / PTC_BLOCK_ZSTD */
} ptc_block;

typedef struct ptc_shard_rec {
    uint32_t tensor, rank;
    uint32_t kind;       /* PTC_SHARD_DATA / PTC_SHARD_ALIAS */
    uint32_t alias_rank; /* alias: owner rank */
    uint64_t pack_version;
    uint32_t pack_rank;
    uint32_t codec;
    uint64_t offset, length, raw_length;
    int local_ndim;
    int64_t local_shape[PTC_MAX_DIMS];
    uint32_t npieces;
    ptc_piece *pieces;
    uint64_t nblocks;
    ptc_block *blocks;
    uint64_t *block_off; /* reader only: file offset of each block */
} ptc_shard_rec;

typedef struct ptc_tensor_rec {
    char *name;
    uint32_t name_len;
    uint32_t dtype;
    int ndim;
    int64_t shape[PTC_MAX_DIMS];
    char *placement;
} ptc_tensor_rec;

typedef struct ptc_version_rec {
    uint32_t record_format; /* decoded: 1 (no digest) or 2 */
    uint32_t state; /* 1 = committed */
    uint64_t parent;
    int64_t created_unix_ns;
    uint64_t tensor_count, bytes, stored_bytes;
    char *step, *config, *rules, *metadata_json;
    uint64_t shard_count; /* format 2: shard records of the version */
    uint64_t digest;      /* format 2: its records' sums folded (§2.5) */
} ptc_version_rec;

/* ---- metadata integrity (store_meta.c, docs/format.md §2.5) ---------------- */

/* The seed tag of each kind of record's checksum. */
enum {
    PTC_REC_VERSION = 1,
    PTC_REC_TENSOR = 2,
    PTC_REC_SHARD = 3,
    PTC_REC_DATASET = 4,
    PTC_REC_SUMMARY = 5,
};
/* ptc.meta keys of the summaries. */
#define PTC_SUMMARY_VERSIONS "versions"
#define PTC_SUMMARY_DATASETS "datasets"

/* A summary: how many records, the newest version (versions only) and the
 * XOR of the records' sums. */
typedef struct ptc_store_summary {
    uint64_t count, newest, xsum;
} ptc_store_summary;

/* The structure of meta/data.mdb (store_mdbcheck.c, docs/format.md §2.6),
 * read with pread: ptc_store_mdb_metas checks the two meta pages (they
 * pair up, the newest one's trees start inside the file) and gives the
 * newest transaction id; ptc_store_mdb_walk checks every page reachable
 * from the meta page of transaction @p txnid (PTC_E_BUSY: that meta page
 * was rewritten since; read a newer snapshot). PTC_E_STORE names the page. */
int ptc_store_mdb_metas(int fd, const char *dir, uint64_t *txnid);
int ptc_store_mdb_walk(int fd, const char *dir, uint64_t txnid);
/* data.mdb up to this size is walked at every open. */
#define PTC_STORE_CHECK_AUTO ((uint64_t)16 << 20)

/* Find where liblmdb mapped data.mdb (after the environment is open). */
int ptc_store_map_find(ptc_store *s);
/* PTC_E_STORE unless @p k and @p v (either may be NULL), as liblmdb
 * returned them, lie inside the database file. */
int ptc_store_val_check(ptc_store *s, const MDB_val *k, const MDB_val *v, const char *what);
/* The store's format (1 or 2) as @p txn sees it. */
int ptc_store_format_txn(ptc_store *s, MDB_txn *txn, unsigned *fmt);
int ptc_store_format_put(ptc_store *s, MDB_txn *txn, unsigned fmt);
/* sum = XXH3-64(value, seed = XXH3-64(key, seed = tag)). */
uint64_t ptc_rec_sum(unsigned tag, const void *key, size_t klen, const void *val, size_t vlen);
/* digest <- XXH3-64(sum as u64 little-endian, seed = digest). */
uint64_t ptc_rec_fold(uint64_t digest, uint64_t sum);
/* Append the sum of bytes [start, len) of @p b under key @p key. */
int ptc_rec_seal(ptc_buf *b, size_t start, unsigned tag, const void *key, size_t klen,
                 uint64_t *sum);
/* A record read from LMDB: check where liblmdb put it and (format >= 2) its
 * sum; *body = the bytes before the sum. PTC_E_STORE naming the record. */
int ptc_store_rec_open(ptc_store *s, unsigned fmt, unsigned tag, const MDB_val *k,
                       const MDB_val *v, size_t *body, uint64_t *sum);
/* rec_open + decode (the decoders' errors become PTC_E_STORE naming the key).
 * @p sum (may be NULL) gets the record's sum (0 in format 1). */
int ptc_store_shard_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
                            ptc_shard_rec *r, uint64_t *sum);
int ptc_store_tensor_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
                             ptc_tensor_rec *t, uint64_t *sum);
int ptc_store_version_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
                              ptc_version_rec *r, uint64_t *sum);
/* Summaries (format 2): a missing or corrupt one is PTC_E_STORE. */
int ptc_store_summary_get(ptc_store *s, MDB_txn *txn, const char *which, ptc_store_summary *out);
int ptc_store_summary_put(ptc_store *s, MDB_txn *txn, const char *which,
                          const ptc_store_summary *in);
/* The body of a summary record (its sum checked): PTC_OK or PTC_E_FORMAT. */
int ptc_store_summary_decode(const void *data, size_t len, ptc_store_summary *out);
/* PTC_OK if what was read (@p got) matches the summary (@p want). */
int ptc_store_summary_mismatch(ptc_store *s, const char *which, const ptc_store_summary *want,
                               const ptc_store_summary *got);
/* Upgrade a format-1 store to format 2 inside write transaction @p txn
 * (store_upgrade.c): every record sealed, digests and summaries written. A
 * no-op on format 2. Writers holding the writer lock call it first. */
int ptc_store_upgrade_txn(ptc_store *s, MDB_txn *txn);
/* The catalog's records (store_dataset.c) for the upgrade: check a format-1
 * catalog record and rewrite it as format 2 (sealed) into @p out. */
int ptc_store_dataset_rec_upgrade(const MDB_val *k, const MDB_val *v, ptc_buf *out,
                                  uint64_t *sum);

/* Big-endian keys. */
void ptc_key_version(uint8_t out[8], uint64_t v);
void ptc_key_tensor(uint8_t out[12], uint64_t v, uint32_t t);
void ptc_key_shard(uint8_t out[16], uint64_t v, uint32_t t, uint32_t rank);
uint64_t ptc_key_get_u64(const uint8_t *p);
uint32_t ptc_key_get_u32(const uint8_t *p);
/* A little-endian unsigned integer of @p n (1..8) bytes. */
uint64_t ptc_le_get(const uint8_t *p, int n);

/* Encoders append to @p b; decoders validate everything (untrusted bytes)
 * and return PTC_E_FORMAT naming the problem. Decoded records own their
 * arrays/strings; free with the *_free functions (which tolerate zeroed
 * records). */
int ptc_shard_rec_encode(ptc_buf *b, const ptc_shard_rec *r);
int ptc_shard_rec_decode(ptc_shard_rec *r, const void *data, size_t len);
void ptc_shard_rec_free(ptc_shard_rec *r);
int ptc_tensor_rec_encode(ptc_buf *b, const ptc_tensor_rec *r);
int ptc_tensor_rec_decode(ptc_tensor_rec *r, const void *data, size_t len);
void ptc_tensor_rec_free(ptc_tensor_rec *r);
int ptc_version_rec_encode(ptc_buf *b, const ptc_version_rec *r);
int ptc_version_rec_decode(ptc_version_rec *r, const void *data, size_t len);
void ptc_version_rec_free(ptc_version_rec *r);

/* Check that a shard's pieces fit its local tensor and the global tensor of
 * @p ndim / @p shape (and the block table its raw length). */
int ptc_shard_rec_check(const ptc_shard_rec *r, int ndim, const int64_t *shape,
                        size_t elem_size);

/* Descriptor buffers (pack-only writers → committing writer). */
int ptc_desc_encode(ptc_buf *b, uint64_t version, const ptc_shard_rec *const *recs,
                    size_t n);
/* Decodes into a new array of records (free each, then the array). */
int ptc_desc_decode(const void *data, size_t len, uint64_t *version, ptc_shard_rec **recs,
                    size_t *n);


/* ---- blobs: the block engine ---------------------------------------------------- */
/* A blob is a byte string of any length stored in a pack file as 1 MiB raw
 * blocks, each checksummed (XXH3-64 of the raw bytes) and optionally zstd
 * compressed (kept raw when zstd does not help). Tensor shards and datasets
 * both store their payload as blobs (docs/format.md §2.4, §8). */

/* A finished blob: where it is and its block table. */
typedef struct ptc_blob_rec {
    uint64_t offset;     /* byte offset of the first block in the pack file */
    uint64_t length;     /* stored bytes (Σ block stored) */
    uint64_t raw_length; /* bytes of the blob */
    uint32_t codec;      /* PTC_STORE_CODEC_* the writer used */
    uint64_t nblocks;    /* ceil(raw_length / PTC_STORE_BLOCK_SIZE) */
    ptc_block *blocks;
} ptc_blob_rec;

void ptc_blob_rec_free(ptc_blob_rec *b);
/* Encoded blob record (docs/format.md §8.2): u64 offset, u64 length,
 * u64 raw_length, u32 codec, u32 reserved, u64 nblocks, block[nblocks]. */
int ptc_blob_rec_encode(ptc_buf *b, const ptc_blob_rec *r);
/* Decode from @p *data (advanced past the record, @p *len reduced);
 * validates block count, codes and lengths (untrusted bytes). */
int ptc_blob_rec_decode(ptc_blob_rec *r, const uint8_t **data, size_t *len);
/* Check a block table against raw_length and length (as decoders do). */
int ptc_blob_check_blocks(uint64_t raw_length, uint64_t length, uint64_t nblocks,
                          const ptc_block *blocks);
/* Raw bytes of block @p k of a blob of @p raw_length bytes. */
uint64_t ptc_blob_block_raw(uint64_t raw_length, uint64_t nblocks, uint64_t k);

/* Appending blobs to one pack file. One thread at a time per ptc_blob_out;
 * one blob open at a time. Buffers are allocated on first use and reused. */
typedef struct ptc_blob_out {
    int fd;           /* the pack file (not owned) */
    const char *path; /* for messages (not owned) */
    uint64_t off;     /* next write position */
    uint64_t flushed; /* writeback was started for [.., flushed) */
    unsigned codec;
    int level;
    bool open;
    ptc_blob_rec cur;
    size_t bcap;      /* capacity of cur.blocks */
    uint8_t *raw;     /* PTC_STORE_BLOCK_SIZE staging */
    size_t fill;
    uint8_t *cbuf;
    size_t ccap;
    void *cctx;       /* ZSTD_CCtx */
} ptc_blob_out;

/* Set up appending at @p off of @p fd. */
void ptc_blob_out_init(ptc_blob_out *o, int fd, const char *path, uint64_t off, unsigned codec,
                       int level);
/* Start a blob at the current position. @p expect: its raw length if known
 * (sizes the block table once), else 0. */
int ptc_blob_begin(ptc_blob_out *o, uint64_t expect);
/* Append @p n bytes (any size; whole blocks go straight from @p data). */
int ptc_blob_write(ptc_blob_out *o, const void *data, size_t n);
/* Flush the partial last block and hand the record to @p out (owns blocks). */
int ptc_blob_end(ptc_blob_out *o, ptc_blob_rec *out);
/* Drop an open blob (its bytes stay in the file as debris). */
void ptc_blob_abort(ptc_blob_out *o);
/* Free the buffers (not the fd). */
void ptc_blob_out_free(ptc_blob_out *o);

/* A blob to read: its block table, where its blocks are and the open pack
 * file. verified (optional, nblocks bytes, shared by threads): raw blocks
 * whose checksum was already checked in this process; their partial reads
 * then pread only the bytes asked for. */
typedef struct ptc_blob_ref {
    uint64_t raw_length, nblocks;
    const ptc_block *blocks;
    const uint64_t *block_off; /* file offset of each block */
    int fd;
    const char *path;          /* pack file, for messages */
    const char *what;          /* "tensor 'x' rank 3", for messages */
    unsigned char *verified;   /* may be NULL; accessed atomically */
    const uint8_t *map;        /* may be NULL: the pack file mapped read-only
                                  (map_len bytes); raw blocks are then hashed
                                  and copied from it, no read calls */
    uint64_t map_len;
} ptc_blob_ref;

/* File offset of every block (offset + Σ stored before it); NULL if none. */
int ptc_blob_block_offsets(const ptc_blob_rec *b, uint64_t **out);

/* Per-thread scratch of blob reads: one decoded block kept. Zero-initialise;
 * free with ptc_blob_scratch_free. Never shared by two threads at once. */
typedef struct ptc_blob_scratch {
    uint8_t *raw, *cbuf;
    void *dctx; /* ZSTD_DCtx */
    const void *key;
    uint64_t blk;
    bool valid;
} ptc_blob_scratch;

void ptc_blob_scratch_free(ptc_blob_scratch *sc);
/* Read block @p k into @p dst (its raw size), decompressing and verifying. */
int ptc_blob_read_block(ptc_blob_scratch *sc, const ptc_blob_ref *b, uint64_t k, uint8_t *dst);
struct iovec;
/* Read raw block @p k straight into the @p n segments @p seg (in block order,
 * their lengths adding up to its raw size) and verify it over them, with no
 * staging copy; @p tmp: room for @p n segments. PTC_E_INVAL for a compressed
 * block (the caller stages it). */
int ptc_blob_read_block_iov(const ptc_blob_ref *b, uint64_t k, const struct iovec *seg, int n,
                            struct iovec *tmp);
/* Block @p k decoded and verified in the scratch (kept for the next call
 * with the same @p key, which identifies the blob). */
int ptc_blob_get_block(ptc_blob_scratch *sc, const ptc_blob_ref *b, const void *key, uint64_t k,
                       const uint8_t **out);
/* Read bytes [off, off + len) of the blob (inside it) into @p dst, reading,
 * decompressing and verifying only the blocks they touch. Thread-safe for
 * distinct scratches. */
int ptc_blob_read(ptc_blob_scratch *sc, const ptc_blob_ref *b, const void *key, uint64_t off,
                  void *dst, size_t len);
/* Bytes [off, off + len) of the blob (inside it, len > 0) in place: *out
 * points into the pack file's mapping when every block they touch is raw
 * and mapped (each verified once, as ptc_blob_read does); otherwise *out
 * is NULL and the caller copies with ptc_blob_read. Thread-safe. */
int ptc_blob_map(const ptc_blob_ref *b, uint64_t off, size_t len, const uint8_t **out);
/* The whole pack file @p fd mapped read-only (its length in *len), for
 * ptc_blob_ref.map; NULL when it is empty or cannot be mapped (then read). */
const uint8_t *ptc_blob_map_file(int fd, uint64_t *len);
/* Hint that bytes [off, off + len) will be read soon: the blocks they touch
 * that this handle has not verified yet are asked for from the disk now
 * (madvise / posix_fadvise WILLNEED), so many of them load at once. */
void ptc_blob_prefetch(const ptc_blob_ref *b, uint64_t off, size_t len);

/* The decoded-block cache (store_blockcache.c; include/ptc/store.h). An
 * entry is one decoded, verified block, pinned while a reader copies out
 * of it. */
typedef struct ptc_block_entry ptc_block_entry;
/* Block @p k of blob @p b, whose handle is @p owner (an id unique in the
 * process): from the cache, or decoded into it with @p sc's buffers.
 * *out is the pinned entry (release with ptc_block_cache_put), or NULL
 * with PTC_OK when the cache has no room: the caller decodes it itself.
 * @return PTC_OK or the errors of ptc_blob_read_block. */
int ptc_block_cache_get(ptc_store_block_cache *c, uint64_t owner, ptc_blob_scratch *sc,
                        const ptc_blob_ref *b, uint64_t k, ptc_block_entry **out);
/* The decoded bytes of a pinned entry (its block's raw size). */
const uint8_t *ptc_block_cache_data(const ptc_block_entry *e);
/* Unpin an entry of ptc_block_cache_get. */
void ptc_block_cache_put(ptc_store_block_cache *c, ptc_block_entry *e);
/* Decode block @p k of @p owner ahead of its reader, on the cache's
 * readahead workers (started here the first time), unless it is cached or
 * being decoded already; @p b must stay valid until drop_owner. Best
 * effort: dropped when the queue is full. */
void ptc_block_cache_prefetch(ptc_store_block_cache *c, uint64_t owner, const ptc_blob_ref *b,
                              uint64_t k);
/* The same for a read that comes after the current ones (the next step
 * files): queued behind every ptc_block_cache_prefetch block, and only
 * while the blocks decoded ahead and not read yet hold less than a
 * quarter of the cache (so they never push out the current reads'). */
void ptc_block_cache_prefetch_later(ptc_store_block_cache *c, uint64_t owner,
                                    const ptc_blob_ref *b, uint64_t k);
/* Forget @p owner's queued readahead, wait for its running one, and free
 * its unpinned blocks (its handle is closing). */
void ptc_block_cache_drop_owner(ptc_store_block_cache *c, uint64_t owner);

/* Datasets (store_dataset.c): the pack file of dataset @p id, and the ids
 * every catalog record references (for gc; array freed with ptc_free). */
int ptc_store_dataset_pack_path(char *out, size_t cap, const char *dir, uint64_t id);
int ptc_store_dataset_ids(ptc_store *s, uint64_t **ids, size_t *n);
/* Verify every block of dataset @p name (its data and index blobs) and its
 * index, advancing @p done by raw bytes (ptc_store_verify). */
int ptc_store_dataset_verify_blocks(ptc_store *s, const char *name, ptc_progress_fn fn,
                                    void *user, uint64_t *done, uint64_t total);
/* Decode (and drop) one catalog record: PTC_OK or PTC_E_STORE (fuzzing). */
int ptc_store_dataset_rec_check(const void *data, size_t len);

/* Paths. */
int ptc_store_pack_path(char *out, size_t cap, const char *dir, uint64_t v, uint32_t rank);

/* The newest committed version inside @p txn (0 if none). */
int ptc_store_latest_txn(ptc_store *s, MDB_txn *txn, uint64_t *out);
/* The highest version number ever committed (deleted ones included). */
int ptc_store_issued_txn(ptc_store *s, MDB_txn *txn, uint64_t *out);
int ptc_store_issued(ptc_store *s, uint64_t *out);
/* Record @p version as the highest number committed (inside the commit). */
int ptc_store_issued_put(ptc_store *s, MDB_txn *txn, uint64_t version);

/* Store internals for the store's own files. */
struct ptc_store {
    char *dir;
    int rootfd; /* the store directory, opened once: the base of every entry */
    MDB_env *env;
    bool readonly;
    int64_t lock_wait_ms; /* writer-lock wait (0: fail at once) */
    atomic_int locks_held; /* writer locks this handle holds (0 or 1) */
    const uint8_t *map_lo;   /* where liblmdb mapped data.mdb (NULL: unknown) */
    uint64_t map_len;        /* the map's length */
    _Atomic uint64_t map_file; /* data.mdb's size last seen */
    MDB_dbi dbi_meta, dbi_versions, dbi_tensors, dbi_shards;
    pthread_mutex_t mu; /* other modules' dbi cache */
    struct {
        char *name;
        MDB_dbi dbi;
    } extra[32];
    int nextra;
};

/* Reader internals used by the writer (reuse) and by verify/info. */
int ptc_store_reader_rec(const ptc_store_reader *r, size_t t, uint32_t rank, bool resolve,
                         const ptc_shard_rec **out);
const ptc_tensor_rec *ptc_store_reader_trec(const ptc_store_reader *r, size_t t);
ptc_store *ptc_store_reader_store(const ptc_store_reader *r);
/* All records of tensor @p t (sorted by rank). */
void ptc_store_reader_recs(const ptc_store_reader *r, size_t t, const ptc_shard_rec **recs,
                           size_t *n);
/* Verify every block of one data record; @p done is advanced by raw bytes. */
int ptc_store_reader_verify_rec(const ptc_store_reader *r, size_t t,
                                const ptc_shard_rec *rec, ptc_progress_fn fn, void *user,
                                uint64_t *done, uint64_t total);

#endif
