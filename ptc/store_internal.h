/* Store internals shared by ptc/store*.c and by other modules that keep
 * their own named databases in the store's LMDB environment (dataset state,
 * audit counts). Never installed. */
#ifndef PTC_STORE_INTERNAL_H
#define PTC_STORE_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>

#include "ptc/store.h"

/* ---- accessors for other modules ---------------------------------------- */

/* The LMDB environment (valid while the store is open). Named databases of
 * other modules must be opened with ptc_store_dbi_open(). */
MDB_env *ptc_store_env(ptc_store *s);
/* The store directory as given to open (valid while open). */
const char *ptc_store_dir(const ptc_store *s);
/* Whether the store was opened read-only. */
bool ptc_store_readonly(const ptc_store *s);

/* Open (create unless read-only) the named database @p name, once per store;
 * later calls return the cached handle. Thread-safe. */
int ptc_store_dbi_open(ptc_store *s, const char *name, unsigned mdb_flags, MDB_dbi *out);

/* Run @p fn inside one LMDB write transaction: committed if fn returns
 * PTC_OK, aborted otherwise (its code is returned). LMDB serialises write
 * transactions across threads and processes. */
int ptc_store_write_txn(ptc_store *s, int (*fn)(MDB_txn *txn, void *user), void *user);

/* Map an LMDB return code to PTC_E_* with a message naming @p what. */
int ptc_store_mdb_error(int rc, const char *what);

/* Writer lock (the STORE/lock file, flock LOCK_EX|LOCK_NB). */
int ptc_store_lock(ptc_store *s, int *fd);
void ptc_store_unlock(int fd);

/* ---- records ------------------------------------------------------------- */

#define PTC_STORE_FORMAT_VERSION 1u
#define PTC_STORE_MAGIC "PTCSTORE"
#define PTC_PACK_MAGIC "PTCPACK1"
#define PTC_PACK_HEADER_SIZE 64u
#define PTC_DESC_MAGIC "PTCDESC1"

#define PTC_DB_META "ptc.meta"
#define PTC_DB_VERSIONS "ptc.versions"
#define PTC_DB_TENSORS "ptc.tensors"
#define PTC_DB_SHARDS "ptc.shards"

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
    uint32_t state; /* 1 = committed */
    uint64_t parent;
    int64_t created_unix_ns;
    uint64_t tensor_count, bytes, stored_bytes;
    char *step, *config, *rules, *metadata_json;
} ptc_version_rec;

/* Growable little-endian byte buffer (allocations through ptc_malloc). */
typedef struct ptc_buf {
    uint8_t *p;
    size_t len, cap;
} ptc_buf;

int ptc_buf_put(ptc_buf *b, const void *data, size_t n);
int ptc_buf_u32(ptc_buf *b, uint32_t v);
int ptc_buf_u64(ptc_buf *b, uint64_t v);
int ptc_buf_str(ptc_buf *b, const char *s, size_t n);

/* Big-endian keys. */
void ptc_key_version(uint8_t out[8], uint64_t v);
void ptc_key_tensor(uint8_t out[12], uint64_t v, uint32_t t);
void ptc_key_shard(uint8_t out[16], uint64_t v, uint32_t t, uint32_t rank);
uint64_t ptc_key_get_u64(const uint8_t *p);
uint32_t ptc_key_get_u32(const uint8_t *p);

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

/* Paths. */
int ptc_store_pack_path(char *out, size_t cap, const char *dir, uint64_t v, uint32_t rank);
int ptc_store_vdir_path(char *out, size_t cap, const char *dir, uint64_t v);

/* Remove the pack directory of version @p v (its rank-*.pack files, then the
 * directory if empty). Counts into @p files / @p bytes (may be NULL). */
int ptc_store_remove_vdir(const char *dir, uint64_t v, uint64_t *files, uint64_t *bytes);

/* The newest committed version inside @p txn (0 if none). */
int ptc_store_latest_txn(ptc_store *s, MDB_txn *txn, uint64_t *out);

/* Store internals for the store's own files. */
struct ptc_store {
    char *dir;
    MDB_env *env;
    bool readonly;
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
