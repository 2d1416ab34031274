/* The store writer: pack files are written first (positioned writes, 1 MiB
 * blocks, XXH3-64 per block, optional zstd), fsynced, and only then is all
 * metadata committed in one LMDB transaction. Until that commit nothing of
 * the version is visible; its pack directory is debris for gc.
 *
 * Concurrency: each rank's state (pack file, open shard, finished records)
 * is touched only by calls for that rank, so different ranks may be written
 * from different threads without locks. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

typedef struct rank_state {
    bool mine;   /* this writer may write this rank */
    int fd;      /* pack file, -1 until the first shard */
    bool spare;  /* it was a spare (overwritten in place: its tail cut at the sync) */
    uint64_t off;
    char *path;  /* the pack file */
    bool open;   /* a shard is being streamed */
    ptc_shard_rec cur;
    uint64_t received;
    ptc_blob_out out; /* the block engine appending to the pack file */
    ptc_shard_rec *recs;
    size_t nrecs, cap;
} rank_state;

struct ptc_store_writer {
    ptc_store *s;
    uint64_t version;
    bool pack_only;
    bool committed, exported;
    atomic_bool failed;
    int lock_fd;
    char *step, *config, *rules;
    uint64_t parent;
    unsigned codec;
    int level;
    uint32_t world;
    rank_state *ranks;
    ptc_tensor_rec *tensors;
    size_t ntensors, tcap;
    /* metadata: "key\0value\0" entries appended in call order; a later
     * entry of a key replaces an earlier one when the commit sorts them */
    ptc_buf meta;
    size_t nmeta;
    ptc_shard_rec *imported;
    size_t nimported, impcap;
};

static int fail(ptc_store_writer *w, int rc)
{
    atomic_store(&w->failed, true);
    return rc;
}

static char *dup_opt(const char *s, bool *ok)
{
    char *r = ptc_strdup(s ? s : "");
    if (!r)
        *ok = false;
    return r;
}

static int writer_alloc(ptc_store_writer **out, ptc_store *s, const ptc_store_write_options *o)
{
    *out = NULL;
    if (!o || o->world_size == 0)
        return ptc_error_set(PTC_E_INVAL, "store writer: world size must be >= 1");
    if (o->codec > PTC_STORE_CODEC_ZSTD)
        return ptc_error_set(PTC_E_INVAL, "store writer: unknown codec %u", o->codec);
    if (o->codec == PTC_STORE_CODEC_ZSTD &&
        (o->level < ZSTD_minCLevel() || o->level > ZSTD_maxCLevel()))
        return ptc_error_set(PTC_E_INVAL, "store writer: zstd level %d out of range", o->level);
    if (s->readonly)
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", s->dir);
    ptc_store_writer *w = ptc_calloc(1, sizeof *w);
    if (!w)
        return PTC_E_NOMEM;
    w->s = s;
    w->lock_fd = -1;
    w->parent = o->parent;
    w->codec = o->codec;
    w->level = o->level;
    w->world = o->world_size;
    bool ok = true;
    w->step = dup_opt(o->step, &ok);
    w->config = dup_opt(o->config, &ok);
    w->rules = dup_opt(o->rules, &ok);
    w->ranks = ptc_calloc(w->world, sizeof *w->ranks);
    /* no pack file yet: destroy must not close descriptor 0 */
    for (uint32_t r = 0; w->ranks && r < w->world; r++)
        w->ranks[r].fd = -1;
    if (!ok || !w->ranks) {
        ptc_store_writer_destroy(w);
        return PTC_E_NOMEM;
    }
    *out = w;
    return PTC_OK;
}

int ptc_store_writer_begin(ptc_store_writer **out, ptc_store *s,
                           const ptc_store_write_options *opts)
{
    *out = NULL;
    ptc_store_writer *w;
    PTC_TRY(writer_alloc(&w, s, opts));
    int rc;
    if ((rc = ptc_store_lock(s, &w->lock_fd)) < 0)
        goto out_destroy;
    uint64_t issued;
    if ((rc = ptc_store_issued(s, &issued)) < 0)
        goto out_destroy;
    w->version = issued + 1;
    /* files of this number can only be debris: no committed version has it,
     * and versions reference only older packs */
    if ((rc = ptc_store_remove_vdir(s, w->version, NULL, NULL)) < 0)
        goto out_destroy;
    for (uint32_t r = 0; r < w->world; r++)
        w->ranks[r].mine = true;
    *out = w;
    return PTC_OK;
out_destroy:
    ptc_store_writer_destroy(w);
    *out = NULL;
    return rc;
}

int ptc_store_writer_begin_pack(ptc_store_writer **out, ptc_store *s, uint64_t version,
                                const ptc_store_write_options *opts, const uint32_t *ranks,
                                size_t nranks)
{
    *out = NULL;
    if (version == 0)
        return ptc_error_set(PTC_E_INVAL, "pack-only writer: version must be >= 1");
    ptc_store_writer *w;
    PTC_TRY(writer_alloc(&w, s, opts));
    w->version = version;
    w->pack_only = true;
    for (size_t i = 0; i < nranks; i++) {
        if (ranks[i] >= w->world) {
            ptc_store_writer_destroy(w);
            *out = NULL;
            return ptc_error_set(PTC_E_INVAL, "pack-only writer: rank %u outside world %u",
                                 ranks[i], w->world);
        }
        w->ranks[ranks[i]].mine = true;
    }
    *out = w;
    return PTC_OK;
}

uint64_t ptc_store_writer_version(const ptc_store_writer *w)
{
    return w->version;
}

int ptc_store_writer_set_origin(ptc_store_writer *w, const char *step, uint64_t parent)
{
    if (step) {
        char *c = ptc_strdup(step);
        if (!c)
            return PTC_E_NOMEM;
        ptc_free(w->step);
        w->step = c;
    }
    w->parent = parent;
    return PTC_OK;
}

static bool utf8_valid(const unsigned char *s, size_t n);

int ptc_store_writer_set_metadata(ptc_store_writer *w, const char *key, const char *value)
{
    if (!key || !value)
        return ptc_error_set(PTC_E_INVAL, "metadata key and value must not be NULL");
    size_t kn = strlen(key), vn = strlen(value);
    char q[400];
    if (!utf8_valid((const unsigned char *)key, kn) ||
        !utf8_valid((const unsigned char *)value, vn)) {
        ptc_quote_name(q, sizeof q, key, kn);
        return ptc_error_set(PTC_E_INVAL, "metadata %s of key '%s': not valid UTF-8",
                             utf8_valid((const unsigned char *)key, kn) ? "value" : "name", q);
    }
    /* appended, not looked up: duplicates are resolved once, by the sort
     * at commit, so n keys cost O(n log n) in all */
    size_t mark = w->meta.len;
    int rc;
    if ((rc = ptc_buf_put(&w->meta, key, kn + 1)) < 0 ||
        (rc = ptc_buf_put(&w->meta, value, vn + 1)) < 0) {
        w->meta.len = mark;
        return rc;
    }
    w->nmeta++;
    return PTC_OK;
}

static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp;
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

int ptc_store_writer_add_tensor(ptc_store_writer *w, const char *name, size_t name_len,
                                ptc_dtype dtype, int ndim, const int64_t *shape,
                                const char *placement, uint32_t *index)
{
    if (!name || name_len == 0 || name_len > PTC_STORE_MAX_NAME ||
        !utf8_valid((const unsigned char *)name, name_len))
        return ptc_error_set(PTC_E_INVAL, "tensor name must be 1..%d bytes of UTF-8 without NUL",
                             PTC_STORE_MAX_NAME);
    if (ptc_dtype_size(dtype) == 0)
        return ptc_error_set(PTC_E_INVAL, "tensor '%.*s': invalid dtype %d", (int)name_len, name,
                             (int)dtype);
    if (ndim < 0 || ndim > PTC_MAX_DIMS)
        return ptc_error_set(PTC_E_INVAL, "tensor '%.*s': %d dimensions (at most %d)",
                             (int)name_len, name, ndim, PTC_MAX_DIMS);
    int64_t vol = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || ptc_mul_overflow_i64(vol, shape[d], &vol) ||
            ptc_mul_overflow_i64(vol, (int64_t)ptc_dtype_size(dtype), &(int64_t){0}))
            return ptc_error_set(PTC_E_INVAL, "tensor '%.*s': bad shape", (int)name_len, name);
    if (w->ntensors >= UINT32_MAX)
        return ptc_error_set(PTC_E_INVAL, "too many tensors");
    PTC_TRY(ptc_grow((void **)&w->tensors, &w->tcap, w->ntensors + 1, sizeof *w->tensors));
    ptc_tensor_rec *t = &w->tensors[w->ntensors];
    memset(t, 0, sizeof *t);
    t->name = ptc_strndup(name, name_len);
    t->placement = ptc_strdup(placement ? placement : "");
    if (!t->name || !t->placement) {
        ptc_tensor_rec_free(t);
        return PTC_E_NOMEM;
    }
    t->name_len = (uint32_t)name_len;
    t->dtype = (uint32_t)dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    if (index)
        *index = (uint32_t)w->ntensors;
    w->ntensors++;
    return PTC_OK;
}

static int check_rank(ptc_store_writer *w, uint32_t tensor, uint32_t rank)
{
    if (w->committed || w->exported)
        return ptc_error_set(PTC_E_INVAL, "store writer already finished");
    if (tensor >= w->ntensors)
        return ptc_error_set(PTC_E_INVAL, "tensor index %u out of range (%zu tensors)", tensor,
                             w->ntensors);
    if (rank >= w->world || !w->ranks[rank].mine)
        return ptc_error_set(PTC_E_INVAL, "rank %u is not written by this writer", rank);
    if (w->ranks[rank].open)
        return ptc_error_set(PTC_E_INVAL, "rank %u already has an open shard", rank);
    return PTC_OK;
}

static int push_rec(rank_state *rs, const ptc_shard_rec *rec)
{
    PTC_TRY(ptc_grow((void **)&rs->recs, &rs->cap, rs->nrecs + 1, sizeof *rs->recs));
    rs->recs[rs->nrecs++] = *rec;
    return PTC_OK;
}

/* Create the rank's pack file (with its header) on first use: a spare of
 * its name if there is one, else a new file. */
static int open_pack(ptc_store_writer *w, uint32_t rank)
{
    rank_state *rs = &w->ranks[rank];
    if (rs->fd >= 0)
        return PTC_OK;
    char rel[48], name[32], path[4096];
    PTC_TRY(ptc_store_pack_path(path, sizeof path, w->s->dir, w->version, rank));
    if (!rs->path && !(rs->path = ptc_strdup(path)))
        return PTC_E_NOMEM;
    snprintf(rel, sizeof rel, "packs/v%llu", (unsigned long long)w->version);
    snprintf(name, sizeof name, "rank-%u.pack", rank);
    int vfd, fd;
    PTC_TRY(ptc_store_subdir(w->s, rel, true, &vfd));
    int rc = ptc_store_create_pack(w->s, vfd, rel, name, &fd, &rs->spare);
    close(vfd);
    PTC_TRY(rc);
    uint8_t h[PTC_PACK_HEADER_SIZE] = {0};
    memcpy(h, PTC_PACK_MAGIC, 8);
    h[8] = 1; /* format version, u32 LE */
    for (int i = 0; i < 8; i++)
        h[16 + i] = (uint8_t)(w->version >> (8 * i));
    for (int i = 0; i < 4; i++)
        h[24 + i] = (uint8_t)(rank >> (8 * i));
    rs->fd = fd; /* set before writing so abort removes a partial file */
    PTC_TRY(ptc_pwrite_all(fd, h, sizeof h, 0, path));
    rs->off = PTC_PACK_HEADER_SIZE;
    ptc_blob_out_init(&rs->out, fd, rs->path, rs->off, w->codec, w->level);
    return PTC_OK;
}

int ptc_store_shard_begin(ptc_store_writer *w, uint32_t tensor, uint32_t rank, int local_ndim,
                          const int64_t *local_shape, const ptc_piece *pieces, size_t npieces)
{
    PTC_TRY(check_rank(w, tensor, rank));
    const ptc_tensor_rec *t = &w->tensors[tensor];
    rank_state *rs = &w->ranks[rank];
    ptc_shard_rec *c = &rs->cur;
    memset(c, 0, sizeof *c);
    if (local_ndim < 0 || local_ndim > PTC_MAX_DIMS || npieces > UINT32_MAX)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' rank %u: bad local ndim %d", t->name, rank,
                             local_ndim);
    size_t es = ptc_dtype_size((ptc_dtype)t->dtype);
    int64_t vol = 1, bytes;
    for (int d = 0; d < local_ndim; d++)
        if (local_shape[d] < 0 || ptc_mul_overflow_i64(vol, local_shape[d], &vol))
            return ptc_error_set(PTC_E_INVAL, "tensor '%s' rank %u: bad local shape", t->name,
                                 rank);
    if (ptc_mul_overflow_i64(vol, (int64_t)es, &bytes))
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' rank %u: local shape too large", t->name,
                             rank);
    c->tensor = tensor;
    c->rank = rank;
    c->kind = PTC_SHARD_DATA;
    c->pack_version = w->version;
    c->pack_rank = rank;
    c->codec = w->codec;
    c->raw_length = (uint64_t)bytes;
    c->local_ndim = local_ndim;
    for (int d = 0; d < local_ndim; d++)
        c->local_shape[d] = local_shape[d];
    c->npieces = (uint32_t)npieces;
    c->pieces = (ptc_piece *)pieces; /* checked before copying */
    int rc = ptc_shard_rec_check(c, t->ndim, t->shape, es);
    c->pieces = NULL;
    if (rc < 0)
        return ptc_error_set(rc, "tensor '%s' rank %u: %s", t->name, rank, ptc_last_error());
    if (npieces) {
        c->pieces = ptc_malloc(npieces * sizeof *pieces);
        if (!c->pieces)
            return PTC_E_NOMEM;
        memcpy(c->pieces, pieces, npieces * sizeof *pieces);
    }
    if ((rc = open_pack(w, rank)) < 0)
        goto out_free;
    if ((rc = ptc_blob_begin(&rs->out, c->raw_length)) < 0)
        goto out_free;
    rs->received = 0;
    rs->open = true;
    return PTC_OK;
out_free:
    ptc_shard_rec_free(c);
    return fail(w, rc);
}

int ptc_store_shard_write(ptc_store_writer *w, uint32_t rank, const void *data, size_t n)
{
    if (rank >= w->world || !w->ranks[rank].open)
        return ptc_error_set(PTC_E_INVAL, "rank %u has no open shard", rank);
    rank_state *rs = &w->ranks[rank];
    if (n > rs->cur.raw_length - rs->received)
        return fail(w, ptc_error_set(PTC_E_INVAL,
                                     "tensor '%s' rank %u: %zu bytes more than the shard holds",
                                     w->tensors[rs->cur.tensor].name, rank,
                                     (size_t)(n - (rs->cur.raw_length - rs->received))));
    int rc = ptc_blob_write(&rs->out, data, n);
    if (rc < 0)
        return fail(w, rc);
    rs->received += n;
    return PTC_OK;
}

int ptc_store_shard_end(ptc_store_writer *w, uint32_t rank)
{
    if (rank >= w->world || !w->ranks[rank].open)
        return ptc_error_set(PTC_E_INVAL, "rank %u has no open shard", rank);
    rank_state *rs = &w->ranks[rank];
    ptc_shard_rec *c = &rs->cur;
    int rc;
    if (rs->received != c->raw_length) {
        rc = ptc_error_set(PTC_E_INVAL, "tensor '%s' rank %u: got %llu of %llu bytes",
                           w->tensors[c->tensor].name, rank, (unsigned long long)rs->received,
                           (unsigned long long)c->raw_length);
        goto out_drop;
    }
    ptc_blob_rec blob;
    if ((rc = ptc_blob_end(&rs->out, &blob)) < 0)
        goto out_drop;
    c->offset = blob.offset;
    c->length = blob.length;
    c->nblocks = blob.nblocks;
    c->blocks = blob.blocks;
    rs->off = rs->out.off;
    if (c->nblocks != (c->raw_length + PTC_STORE_BLOCK_SIZE - 1) / PTC_STORE_BLOCK_SIZE) {
        rc = ptc_error_set(PTC_E_STORE, "internal: shard blocks incomplete");
        goto out_drop;
    }
    if ((rc = push_rec(rs, c)) < 0)
        goto out_drop;
    rs->open = false;
    memset(c, 0, sizeof *c);
    return PTC_OK;
out_drop:
    ptc_blob_abort(&rs->out);
    ptc_shard_rec_free(c);
    rs->open = false;
    return fail(w, rc);
}

int ptc_store_shard_put(ptc_store_writer *w, uint32_t tensor, uint32_t rank, int local_ndim,
                        const int64_t *local_shape, const ptc_piece *pieces, size_t npieces,
                        const void *data, size_t nbytes)
{
    PTC_TRY(ptc_store_shard_begin(w, tensor, rank, local_ndim, local_shape, pieces, npieces));
    int rc = ptc_store_shard_write(w, rank, data, nbytes);
    if (rc < 0) {
        ptc_blob_abort(&w->ranks[rank].out);
        ptc_shard_rec_free(&w->ranks[rank].cur);
        w->ranks[rank].open = false;
        return rc;
    }
    return ptc_store_shard_end(w, rank);
}

int ptc_store_shard_alias(ptc_store_writer *w, uint32_t tensor, uint32_t rank,
                          uint32_t owner_rank)
{
    PTC_TRY(check_rank(w, tensor, rank));
    if (owner_rank >= w->world || owner_rank == rank)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' rank %u: bad alias owner rank %u",
                             w->tensors[tensor].name, rank, owner_rank);
    ptc_shard_rec r;
    memset(&r, 0, sizeof r);
    r.tensor = tensor;
    r.rank = rank;
    r.kind = PTC_SHARD_ALIAS;
    r.alias_rank = owner_rank;
    return push_rec(&w->ranks[rank], &r);
}

/* Deep copy of a data record (pieces, blocks; not the reader's offsets). */
static int rec_copy(ptc_shard_rec *dst, const ptc_shard_rec *src)
{
    *dst = *src;
    dst->pieces = NULL;
    dst->blocks = NULL;
    dst->block_off = NULL;
    if (src->npieces) {
        dst->pieces = ptc_malloc(src->npieces * sizeof *src->pieces);
        if (!dst->pieces)
            return PTC_E_NOMEM;
        memcpy(dst->pieces, src->pieces, src->npieces * sizeof *src->pieces);
    }
    if (src->nblocks) {
        dst->blocks = ptc_malloc((size_t)src->nblocks * sizeof *src->blocks);
        if (!dst->blocks) {
            ptc_free(dst->pieces);
            dst->pieces = NULL;
            return PTC_E_NOMEM;
        }
        memcpy(dst->blocks, src->blocks, (size_t)src->nblocks * sizeof *src->blocks);
    }
    return PTC_OK;
}

int ptc_store_shard_reuse(ptc_store_writer *w, uint32_t tensor, uint32_t rank,
                          const ptc_store_reader *from, size_t from_tensor, uint32_t from_rank)
{
    PTC_TRY(check_rank(w, tensor, rank));
    if (ptc_store_reader_store(from) != w->s)
        return ptc_error_set(PTC_E_INVAL, "shard reuse: the reader belongs to another store");
    const ptc_tensor_rec *t = &w->tensors[tensor];
    const ptc_tensor_rec *ft = ptc_store_reader_trec(from, from_tensor);
    if (!ft)
        return ptc_error_set(PTC_E_RANGE, "shard reuse: tensor index %zu out of range",
                             from_tensor);
    bool same = ft->dtype == t->dtype && ft->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = ft->shape[d] == t->shape[d];
    if (!same)
        return ptc_error_set(PTC_E_INVAL,
                             "shard reuse: tensor '%s' differs in dtype or shape from '%s'",
                             t->name, ft->name);
    const ptc_shard_rec *src;
    PTC_TRY(ptc_store_reader_rec(from, from_tensor, from_rank, true, &src));
    /* the extent is read back and checked before a new version points at
     * it: a block that rotted since it was written is not carried forward */
    uint64_t done = 0;
    PTC_TRY(ptc_store_reader_verify_rec(from, from_tensor, src, NULL, NULL, &done, 0));
    ptc_shard_rec r;
    PTC_TRY(rec_copy(&r, src));
    r.tensor = tensor;
    r.rank = rank;
    r.kind = PTC_SHARD_DATA;
    r.alias_rank = 0;
    int rc = push_rec(&w->ranks[rank], &r);
    if (rc < 0)
        ptc_shard_rec_free(&r);
    return rc;
}

/* fsync every pack file this writer wrote, then their directories. */
static int sync_packs(ptc_store_writer *w)
{
    bool any = false;
    int rc;
    for (uint32_t r = 0; r < w->world; r++) {
        rank_state *rs = &w->ranks[r];
        if (rs->open)
            return ptc_error_set(PTC_E_INVAL, "rank %u still has an open shard", r);
        if (rs->fd < 0)
            continue;
        char path[4096];
        PTC_TRY(ptc_store_pack_path(path, sizeof path, w->s->dir, w->version, r));
        if (rs->spare && ftruncate(rs->fd, (off_t)rs->off) != 0)
            return ptc_error_sys(PTC_E_IO, "truncate %s", path);
        PTC_TRY(ptc_fsync(rs->fd, path));
        any = true;
    }
    if (!any)
        return PTC_OK;
    char rel[48];
    snprintf(rel, sizeof rel, "packs/v%llu", (unsigned long long)w->version);
    int fd;
    PTC_TRY(ptc_store_subdir(w->s, rel, false, &fd));
    rc = ptc_fsync(fd, rel);
    close(fd);
    PTC_TRY(rc);
    PTC_TRY(ptc_store_subdir(w->s, "packs", false, &fd));
    rc = ptc_fsync(fd, "packs");
    close(fd);
    return rc;
}

static size_t count_recs(const ptc_store_writer *w)
{
    size_t n = w->nimported;
    for (uint32_t r = 0; r < w->world; r++)
        n += w->ranks[r].nrecs;
    return n;
}

int ptc_store_writer_export(ptc_store_writer *w, void **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    if (w->committed || w->exported)
        return ptc_error_set(PTC_E_INVAL, "store writer already finished");
    if (atomic_load(&w->failed))
        return ptc_error_set(PTC_E_INVAL, "store writer: an earlier write failed");
    PTC_TRY(sync_packs(w));
    size_t n = count_recs(w);
    const ptc_shard_rec **recs = ptc_malloc((n ? n : 1) * sizeof *recs);
    if (!recs)
        return PTC_E_NOMEM;
    size_t k = 0;
    for (uint32_t r = 0; r < w->world; r++)
        for (size_t i = 0; i < w->ranks[r].nrecs; i++)
            recs[k++] = &w->ranks[r].recs[i];
    for (size_t i = 0; i < w->nimported; i++)
        recs[k++] = &w->imported[i];
    ptc_buf b = {0};
    int rc = ptc_desc_encode(&b, w->version, recs, n);
    ptc_free(recs);
    if (rc < 0) {
        ptc_free(b.p);
        return rc;
    }
    w->exported = true;
    *buf = b.p;
    *len = b.len;
    return PTC_OK;
}

int ptc_store_writer_import(ptc_store_writer *w, const void *buf, size_t len)
{
    if (w->committed || w->exported)
        return ptc_error_set(PTC_E_INVAL, "store writer already finished");
    uint64_t version;
    ptc_shard_rec *recs;
    size_t n;
    PTC_TRY(ptc_desc_decode(buf, len, &version, &recs, &n));
    int rc = PTC_OK;
    size_t i = 0;
    if (version != w->version) {
        rc = ptc_error_set(PTC_E_INVAL, "descriptor buffer is for version %llu, not %llu",
                           (unsigned long long)version, (unsigned long long)w->version);
        goto out_free;
    }
    for (size_t k = 0; k < n; k++) {
        const ptc_shard_rec *r = &recs[k];
        if (r->tensor >= w->ntensors || r->rank >= w->world ||
            (r->kind == PTC_SHARD_ALIAS && r->alias_rank >= w->world) ||
            (r->kind == PTC_SHARD_DATA && r->pack_version > w->version)) {
            rc = ptc_error_set(PTC_E_INVAL,
                               "descriptor %zu: tensor %u / rank %u / pack version out of range",
                               k, r->tensor, r->rank);
            goto out_free;
        }
        const ptc_tensor_rec *t = &w->tensors[r->tensor];
        if ((rc = ptc_shard_rec_check(r, t->ndim, t->shape,
                                      ptc_dtype_size((ptc_dtype)t->dtype))) < 0) {
            rc = ptc_error_set(rc, "descriptor for tensor '%s' rank %u: %s", t->name, r->rank,
                               ptc_last_error());
            goto out_free;
        }
    }
    size_t cap = w->impcap;
    if ((rc = ptc_grow((void **)&w->imported, &cap, w->nimported + n, sizeof *recs)) < 0)
        goto out_free;
    w->impcap = cap;
    if (n) /* an empty descriptor (a process that holds nothing): recs is NULL */
        memcpy(w->imported + w->nimported, recs, n * sizeof *recs);
    w->nimported += n;
    ptc_free(recs);
    return PTC_OK;
out_free:
    for (; i < n; i++)
        ptc_shard_rec_free(&recs[i]);
    ptc_free(recs);
    return rc;
}

/* ---- commit --------------------------------------------------------------------- */

static int cmp_rec(const void *a, const void *b)
{
    const ptc_shard_rec *x = *(const ptc_shard_rec *const *)a;
    const ptc_shard_rec *y = *(const ptc_shard_rec *const *)b;
    if (x->tensor != y->tensor)
        return x->tensor < y->tensor ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int cmp_name(const void *a, const void *b)
{
    const ptc_tensor_rec *x = *(const ptc_tensor_rec *const *)a;
    const ptc_tensor_rec *y = *(const ptc_tensor_rec *const *)b;
    size_t n = PTC_MIN(x->name_len, y->name_len);
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

typedef struct commit_ctx {
    ptc_store_writer *w;
    const ptc_shard_rec **recs;
    size_t n;
    ptc_version_rec vrec;
} commit_ctx;

static int put(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t klen, const ptc_buf *b,
               unsigned flags, const char *what)
{
    MDB_val k = {klen, (void *)key}, v = {b->len, b->p};
    int mrc = mdb_put(txn, dbi, &k, &v, flags);
    if (mrc == MDB_KEYEXIST)
        return ptc_error_set(PTC_E_EXISTS, "%s already exists", what);
    if (mrc)
        return ptc_store_mdb_error(mrc, what);
    return PTC_OK;
}

static int commit_txn(MDB_txn *txn, void *user)
{
    commit_ctx *c = user;
    ptc_store_writer *w = c->w;
    ptc_store *s = w->s;
    PTC_TRY(ptc_store_upgrade_txn(s, txn));
    uint64_t latest;
    PTC_TRY(ptc_store_issued_txn(s, txn, &latest));
    if (latest >= w->version)
        return ptc_error_set(PTC_E_STORE, "version %llu was committed by someone else",
                             (unsigned long long)w->version);
    ptc_store_summary sm;
    PTC_TRY(ptc_store_summary_get(s, txn, PTC_SUMMARY_VERSIONS, &sm));
    /* tensor and shard records first, each sealed with its sum; the version
     * record then carries their digest (in key order: tensors, then shards
     * sorted by tensor and rank) */
    ptc_buf b = {0};
    int rc = PTC_OK;
    uint8_t key[16];
    uint64_t sum, digest = 0;
    for (size_t i = 0; i < w->ntensors && rc == PTC_OK; i++) {
        b.len = 0;
        ptc_key_tensor(key, w->version, (uint32_t)i);
        if ((rc = ptc_tensor_rec_encode(&b, &w->tensors[i])) < 0 ||
            (rc = ptc_rec_seal(&b, 0, PTC_REC_TENSOR, key, 12, &sum)) < 0 ||
            (rc = put(txn, s->dbi_tensors, key, 12, &b, 0, "tensor record")) < 0)
            break;
        digest = ptc_rec_fold(digest, sum);
    }
    for (size_t i = 0; i < c->n && rc == PTC_OK; i++) {
        b.len = 0;
        ptc_key_shard(key, w->version, c->recs[i]->tensor, c->recs[i]->rank);
        if ((rc = ptc_shard_rec_encode(&b, c->recs[i])) < 0 ||
            (rc = ptc_rec_seal(&b, 0, PTC_REC_SHARD, key, 16, &sum)) < 0 ||
            (rc = put(txn, s->dbi_shards, key, 16, &b, 0, "shard record")) < 0)
            break;
        digest = ptc_rec_fold(digest, sum);
    }
    c->vrec.shard_count = c->n;
    c->vrec.digest = digest;
    b.len = 0;
    ptc_key_version(key, w->version);
    if (rc == PTC_OK && (rc = ptc_version_rec_encode(&b, &c->vrec)) == PTC_OK &&
        (rc = ptc_rec_seal(&b, 0, PTC_REC_VERSION, key, 8, &sum)) == PTC_OK &&
        (rc = put(txn, s->dbi_versions, key, 8, &b, MDB_NOOVERWRITE, "version record")) ==
            PTC_OK &&
        (rc = ptc_store_issued_put(s, txn, w->version)) == PTC_OK) {
        sm.count++;
        sm.newest = w->version;
        sm.xsum ^= sum;
        rc = ptc_store_summary_put(s, txn, PTC_SUMMARY_VERSIONS, &sm);
    }
    ptc_free(b.p);
    return rc;
}

/* A metadata key for sorting: its first 8 bytes big-endian (zero after the
 * end), so most comparisons read the array alone, not the keys. */
typedef struct meta_key {
    uint64_t prefix;
    const char *key;
} meta_key;

static uint64_t key_prefix(const char *k)
{
    uint64_t v = 0;
    int i = 0;
    for (; i < 8 && k[i]; i++)
        v = v << 8 | (unsigned char)k[i];
    return i == 0 ? 0 : i == 8 ? v : v << (8 * (8 - i));
}

/* Metadata keys in byte order; of equal keys the one set last (higher in
 * the append buffer) comes last. */
static int cmp_meta(const void *a, const void *b)
{
    const meta_key *x = a, *y = b;
    if (x->prefix != y->prefix)
        return x->prefix < y->prefix ? -1 : 1;
    int c = (x->prefix & 0xff) ? strcmp(x->key + 8, y->key + 8) : 0;
    return c ? c : (x->key > y->key) - (x->key < y->key);
}

/* Append @p s as a JSON string (jansson's escaping). */
static int put_json_string(ptc_buf *b, const char *s)
{
    size_t len = 0;
    while (s[len] >= 0x20 && s[len] < 0x7f && s[len] != '"' && s[len] != '\\')
        len++;
    if (s[len] == '\0') { /* printable ASCII: jansson writes it as it is */
        int rc;
        if ((rc = ptc_buf_put(b, "\"", 1)) < 0 || (rc = ptc_buf_put(b, s, len)) < 0)
            return rc;
        return ptc_buf_put(b, "\"", 1);
    }
    json_t *j = json_string_nocheck(s);
    char small[256];
    size_t n = j ? json_dumpb(j, small, sizeof small, JSON_ENCODE_ANY | JSON_COMPACT) : 0;
    int rc = PTC_OK;
    if (n == 0) {
        rc = ptc_error_set(PTC_E_NOMEM, "cannot serialise metadata json");
    } else if (n <= sizeof small) {
        rc = ptc_buf_put(b, small, n);
    } else {
        char *big = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
        rc = big ? ptc_buf_put(b, big, n) : ptc_error_set(PTC_E_NOMEM, "cannot serialise "
                                                                        "metadata json");
        free(big);
    }
    json_decref(j);
    return rc;
}

/* The version's metadata text: a compact JSON object, keys sorted. */
static int metadata_json(ptc_store_writer *w, char **out)
{
    *out = NULL;
    meta_key *keys = ptc_malloc((w->nmeta ? w->nmeta : 1) * sizeof *keys);
    if (!keys)
        return PTC_E_NOMEM;
    const char *p = (const char *)w->meta.p;
    for (size_t i = 0; i < w->nmeta; i++) {
        keys[i] = (meta_key){key_prefix(p), p};
        p += strlen(p) + 1;
        p += strlen(p) + 1;
    }
    qsort(keys, w->nmeta, sizeof *keys, cmp_meta);
    ptc_buf b = {0};
    int rc = ptc_buf_put(&b, "{", 1);
    bool first = true;
    for (size_t i = 0; i < w->nmeta && rc == PTC_OK; i++) {
        const char *k = keys[i].key;
        if (i + 1 < w->nmeta && keys[i].prefix == keys[i + 1].prefix &&
            strcmp(k, keys[i + 1].key) == 0)
            continue; /* a later value of this key follows */
        if ((!first && (rc = ptc_buf_put(&b, ",", 1)) < 0) ||
            (rc = put_json_string(&b, k)) < 0 || (rc = ptc_buf_put(&b, ":", 1)) < 0 ||
            (rc = put_json_string(&b, k + strlen(k) + 1)) < 0)
            break;
        first = false;
    }
    if (rc == PTC_OK)
        rc = ptc_buf_put(&b, "}", 2); /* with the terminating NUL */
    ptc_free(keys);
    if (rc < 0) {
        ptc_free(b.p);
        return rc;
    }
    *out = (char *)b.p;
    return PTC_OK;
}

int ptc_store_writer_commit(ptc_store_writer *w, uint64_t *version)
{
    if (w->pack_only)
        return ptc_error_set(PTC_E_INVAL, "a pack-only writer cannot commit; export instead");
    if (w->committed || w->exported)
        return ptc_error_set(PTC_E_INVAL, "store writer already finished");
    if (atomic_load(&w->failed))
        return ptc_error_set(PTC_E_INVAL, "store writer: an earlier write failed");
    PTC_TRY(sync_packs(w));

    commit_ctx c;
    memset(&c, 0, sizeof c);
    c.w = w;
    c.n = count_recs(w);
    c.recs = ptc_malloc((c.n ? c.n : 1) * sizeof *c.recs);
    const ptc_tensor_rec **names = ptc_malloc((w->ntensors ? w->ntensors : 1) * sizeof *names);
    int rc = PTC_OK;
    if (!c.recs || !names) {
        rc = PTC_E_NOMEM;
        goto out_free;
    }
    size_t k = 0;
    for (uint32_t r = 0; r < w->world; r++)
        for (size_t i = 0; i < w->ranks[r].nrecs; i++)
            c.recs[k++] = &w->ranks[r].recs[i];
    for (size_t i = 0; i < w->nimported; i++)
        c.recs[k++] = &w->imported[i];
    qsort(c.recs, c.n, sizeof *c.recs, cmp_rec);
    for (size_t i = 0; i < c.n; i++) {
        const ptc_shard_rec *r = c.recs[i];
        if (i > 0 && cmp_rec(&c.recs[i - 1], &c.recs[i]) == 0) {
            rc = ptc_error_set(PTC_E_EXISTS, "tensor '%s' rank %u has two shards",
                               w->tensors[r->tensor].name, r->rank);
            goto out_free;
        }
        if (r->kind == PTC_SHARD_ALIAS) {
            ptc_shard_rec key = {.tensor = r->tensor, .rank = r->alias_rank};
            const ptc_shard_rec *kp = &key;
            const ptc_shard_rec **o = bsearch(&kp, c.recs, c.n, sizeof *c.recs, cmp_rec);
            if (!o || (*o)->kind != PTC_SHARD_DATA) {
                rc = ptc_error_set(PTC_E_INVAL,
                                   "tensor '%s' rank %u: alias of rank %u, which stores no data",
                                   w->tensors[r->tensor].name, r->rank, r->alias_rank);
                goto out_free;
            }
        } else if (r->pack_version == w->version) {
            c.vrec.stored_bytes += r->length;
        }
    }
    for (size_t i = 0; i < w->ntensors; i++)
        names[i] = &w->tensors[i];
    qsort(names, w->ntensors, sizeof *names, cmp_name);
    for (size_t i = 1; i < w->ntensors; i++)
        if (cmp_name(&names[i - 1], &names[i]) == 0) {
            rc = ptc_error_set(PTC_E_EXISTS, "tensor '%s' added twice", names[i]->name);
            goto out_free;
        }
    for (size_t i = 0; i < w->ntensors; i++) {
        const ptc_tensor_rec *t = &w->tensors[i];
        uint64_t vol = 1;
        for (int d = 0; d < t->ndim; d++)
            vol *= (uint64_t)t->shape[d];
        c.vrec.bytes += vol * ptc_dtype_size((ptc_dtype)t->dtype);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c.vrec.state = 1;
    c.vrec.parent = w->parent;
    c.vrec.created_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    c.vrec.tensor_count = w->ntensors;
    c.vrec.step = w->step;
    c.vrec.config = w->config;
    c.vrec.rules = w->rules;
    if ((rc = metadata_json(w, &c.vrec.metadata_json)) < 0)
        goto out_free;
    if ((rc = ptc_store_write_txn(w->s, commit_txn, &c)) < 0)
        goto out_free;
    w->committed = true;
    ptc_store_unlock(w->s, w->lock_fd);
    w->lock_fd = -1;
    if (version)
        *version = w->version;
out_free:
    ptc_free(c.vrec.metadata_json);
    ptc_free(c.recs);
    ptc_free(names);
    if (rc < 0)
        atomic_store(&w->failed, true);
    return rc;
}

void ptc_store_writer_destroy(ptc_store_writer *w)
{
    if (!w)
        return;
    bool keep = w->committed || w->exported;
    /* the directories by handle, no link followed; quietly (the caller
     * may be about to report the error that brought us here) */
    char vname[32];
    snprintf(vname, sizeof vname, "v%llu", (unsigned long long)w->version);
    const int dflags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int pfd = !keep && w->version ? openat(w->s->rootfd, "packs", dflags) : -1;
    int vfd = pfd >= 0 ? openat(pfd, vname, dflags) : -1;
    for (uint32_t r = 0; w->ranks && r < w->world; r++) {
        rank_state *rs = &w->ranks[r];
        if (rs->fd >= 0) {
            close(rs->fd);
            if (vfd >= 0) {
                char name[32];
                snprintf(name, sizeof name, "rank-%u.pack", r);
                unlinkat(vfd, name, 0); /* a link in its place: only the link goes */
            }
        }
        if (rs->open)
            ptc_shard_rec_free(&rs->cur);
        for (size_t i = 0; i < rs->nrecs; i++)
            ptc_shard_rec_free(&rs->recs[i]);
        ptc_free(rs->recs);
        ptc_blob_out_free(&rs->out);
        ptc_free(rs->path);
    }
    if (vfd >= 0) {
        close(vfd);
        unlinkat(pfd, vname, AT_REMOVEDIR); /* only if empty: other processes' packs stay for gc */
    }
    if (pfd >= 0)
        close(pfd);
    ptc_free(w->ranks);
    for (size_t i = 0; i < w->ntensors; i++)
        ptc_tensor_rec_free(&w->tensors[i]);
    ptc_free(w->tensors);
    ptc_free(w->meta.p);
    for (size_t i = 0; i < w->nimported; i++)
        ptc_shard_rec_free(&w->imported[i]);
    ptc_free(w->imported);
    ptc_free(w->step);
    ptc_free(w->config);
    ptc_free(w->rules);
    ptc_store_unlock(w->s, w->lock_fd);
    ptc_free(w);
}
