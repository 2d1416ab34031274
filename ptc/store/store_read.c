/* The store reader: a version's metadata is copied into memory at open, so
 * the reader is an immutable snapshot and every call may run on any thread.
 * Payload reads use pread on pack files opened once per reader (under a
 * mutex) and per-call scratch for decoded blocks; each block a read touches
 * is read, decompressed and checked against its XXH3-64 exactly once per
 * call. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kernels/pack.h"
#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

typedef struct pack_fd {
    uint64_t version;
    uint32_t rank;
    int fd;
    const uint8_t *map; /* the whole file read-only, at the first mapped read; NULL before */
    uint64_t map_len;
} pack_fd;

struct ptc_store_reader {
    ptc_store *s;
    uint64_t version;
    unsigned fmt;    /* the store's format when opened (1: records unchecked) */
    uint64_t digest; /* its records' sums folded, as read (format 2) */
    ptc_version_rec vrec;
    ptc_version_info info;
    json_t *meta;
    ptc_tensor_rec *tensors;
    size_t nt;
    uint32_t *by_name;
    ptc_shard_rec *recs; /* sorted by (tensor, rank) */
    size_t nrecs;
    size_t *first; /* recs of tensor t: [first[t], first[t+1]) */
    pthread_mutex_t mu;
    pack_fd *fds;
    size_t nfds, fcap;
};

/* ---- open ----------------------------------------------------------------------- */

static int cmp_by_name(const void *a, const void *b, void *ctx)
{
    const ptc_store_reader *r = ctx;
    const ptc_tensor_rec *x = &r->tensors[*(const uint32_t *)a];
    const ptc_tensor_rec *y = &r->tensors[*(const uint32_t *)b];
    size_t n = PTC_MIN(x->name_len, y->name_len);
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static int load_tensors(ptc_store_reader *r, MDB_txn *txn)
{
    ptc_store *s = r->s;
    uint64_t n = r->vrec.tensor_count;
    if (n > UINT32_MAX)
        return ptc_error_set(PTC_E_STORE, "version %llu: bad tensor count",
                             (unsigned long long)r->version);
    r->tensors = ptc_calloc((size_t)(n ? n : 1), sizeof *r->tensors);
    r->by_name = ptc_calloc((size_t)(n ? n : 1), sizeof *r->by_name);
    r->first = ptc_calloc((size_t)n + 1, sizeof *r->first);
    if (!r->tensors || !r->by_name || !r->first)
        return PTC_E_NOMEM;
    MDB_cursor *c;
    int mrc = mdb_cursor_open(txn, s->dbi_tensors, &c);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    uint8_t key[12];
    ptc_key_tensor(key, r->version, 0);
    MDB_val k = {12, key}, v;
    int rc = PTC_OK;
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         mrc == 0 && k.mv_size == 12 && memcmp(k.mv_data, key, 8) == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        uint32_t idx = ptc_key_get_u32((const uint8_t *)k.mv_data + 8);
        if (idx != r->nt || r->nt >= n) {
            rc = ptc_error_set(PTC_E_STORE, "version %llu: tensor records out of order",
                               (unsigned long long)r->version);
            goto out_close;
        }
        uint64_t sum;
        if ((rc = ptc_store_tensor_rec_get(s, r->fmt, &k, &v, &r->tensors[r->nt], &sum)) < 0)
            goto out_close;
        r->digest = ptc_rec_fold(r->digest, sum);
        r->by_name[r->nt] = (uint32_t)r->nt;
        r->nt++;
    }
    if (mrc && mrc != MDB_NOTFOUND) {
        rc = ptc_store_mdb_error(mrc, s->dir);
        goto out_close;
    }
    if (r->nt != n)
        rc = ptc_error_set(PTC_E_STORE, "version %llu: %zu of %llu tensor records",
                           (unsigned long long)r->version, r->nt, (unsigned long long)n);
out_close:
    mdb_cursor_close(c);
    if (rc == PTC_OK)
        qsort_r(r->by_name, r->nt, sizeof *r->by_name, cmp_by_name, r);
    return rc;
}

static int add_block_offsets(ptc_shard_rec *rec)
{
    if (rec->kind != PTC_SHARD_DATA || rec->nblocks == 0)
        return PTC_OK;
    rec->block_off = ptc_malloc((size_t)rec->nblocks * sizeof *rec->block_off);
    if (!rec->block_off)
        return PTC_E_NOMEM;
    uint64_t off = rec->offset;
    for (uint64_t i = 0; i < rec->nblocks; i++) {
        rec->block_off[i] = off;
        off += rec->blocks[i].stored;
    }
    return PTC_OK;
}

static int load_shards(ptc_store_reader *r, MDB_txn *txn)
{
    ptc_store *s = r->s;
    MDB_cursor *c;
    int mrc = mdb_cursor_open(txn, s->dbi_shards, &c);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    uint8_t key[16];
    ptc_key_shard(key, r->version, 0, 0);
    MDB_val k = {16, key}, v;
    size_t cap = 0;
    int rc = PTC_OK;
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
         mrc == 0 && k.mv_size == 16 && memcmp(k.mv_data, key, 8) == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if ((rc = ptc_grow((void **)&r->recs, &cap, r->nrecs + 1, sizeof *r->recs)) < 0)
            goto out_close;
        ptc_shard_rec *rec = &r->recs[r->nrecs];
        memset(rec, 0, sizeof *rec);
        uint64_t sum;
        if ((rc = ptc_store_shard_rec_get(s, r->fmt, &k, &v, rec, &sum)) < 0)
            goto out_close;
        r->nrecs++;
        r->digest = ptc_rec_fold(r->digest, sum);
        if (rec->tensor >= r->nt ||
            (r->nrecs > 1 && (rec[-1].tensor > rec->tensor ||
                              (rec[-1].tensor == rec->tensor && rec[-1].rank >= rec->rank)))) {
            rc = ptc_error_set(PTC_E_STORE, "version %llu: shard of unknown tensor %u or out of "
                               "order", (unsigned long long)r->version, rec->tensor);
            goto out_close;
        }
        const ptc_tensor_rec *t = &r->tensors[rec->tensor];
        if ((rc = ptc_shard_rec_check(rec, t->ndim, t->shape,
                                      ptc_dtype_size((ptc_dtype)t->dtype))) < 0) {
            rc = ptc_error_set(PTC_E_STORE, "store %s version %llu tensor '%s' rank %u: %s",
                               s->dir, (unsigned long long)r->version, t->name, rec->rank,
                               ptc_last_error());
            goto out_close;
        }
        if ((rc = add_block_offsets(rec)) < 0)
            goto out_close;
    }
    if (mrc && mrc != MDB_NOTFOUND)
        rc = ptc_store_mdb_error(mrc, s->dir);
out_close:
    mdb_cursor_close(c);
    if (rc < 0)
        return rc;
    /* keys sort by (tensor, rank), so records of a tensor are contiguous */
    size_t j = 0;
    for (size_t t = 0; t <= r->nt; t++) {
        while (j < r->nrecs && r->recs[j].tensor < t)
            j++;
        r->first[t] = j;
    }
    for (size_t i = 0; i < r->nrecs; i++) {
        const ptc_shard_rec *a = &r->recs[i];
        if (a->kind != PTC_SHARD_ALIAS)
            continue;
        const ptc_shard_rec *o;
        if (ptc_store_reader_rec(r, a->tensor, a->alias_rank, false, &o) < 0 ||
            o->kind != PTC_SHARD_DATA)
            return ptc_error_set(PTC_E_STORE,
                                 "version %llu tensor '%s' rank %u: alias of rank %u, which "
                                 "stores no data",
                                 (unsigned long long)r->version, r->tensors[a->tensor].name,
                                 a->rank, a->alias_rank);
    }
    return PTC_OK;
}

static int get_fd(ptc_store_reader *r, uint64_t v, uint32_t rank, int *fd);

/* Format 2: the records read are exactly those the version record sealed
 * (one that vanished, appeared or moved changes the digest). */
static int check_digest(ptc_store_reader *r)
{
    if (r->fmt < 2 || (r->nrecs == r->vrec.shard_count && r->digest == r->vrec.digest))
        return PTC_OK;
    return ptc_error_set(PTC_E_STORE,
                         "store %s: corrupt metadata: version %llu has %zu tensor and %zu shard "
                         "records, its version record sealed %llu and %llu%s; run ptc verify",
                         r->s->dir, (unsigned long long)r->version, r->nt, r->nrecs,
                         (unsigned long long)r->vrec.tensor_count,
                         (unsigned long long)r->vrec.shard_count,
                         r->nrecs == r->vrec.shard_count ? " with other checksums" : "");
}

/* Open every pack file the version's records point to, now: a reader holds
 * the whole version it saw, so ptc gc (another process) may delete the
 * version's files while it is open and its reads still get the right bytes
 * (the files live on while open). A file missing here belongs to a version
 * deleted (and collected) since the metadata was read: the version is gone,
 * never half there. */
static int open_packs(ptc_store_reader *r)
{
    for (size_t i = 0; i < r->nrecs; i++) {
        const ptc_shard_rec *rec = &r->recs[i];
        if (rec->kind != PTC_SHARD_DATA || rec->length == 0)
            continue;
        int fd, rc = get_fd(r, rec->pack_version, rec->pack_rank, &fd);
        if (rc == PTC_OK)
            continue;
        MDB_txn *txn;
        if (mdb_txn_begin(r->s->env, NULL, MDB_RDONLY, &txn) != 0)
            return rc;
        uint8_t key[8];
        ptc_key_version(key, r->version);
        MDB_val k = {8, key}, v;
        int mrc = mdb_get(txn, r->s->dbi_versions, &k, &v);
        mdb_txn_abort(txn);
        if (mrc == MDB_NOTFOUND)
            return ptc_error_set(PTC_E_NOTFOUND, "version %llu not found in store %s (deleted)",
                                 (unsigned long long)r->version, r->s->dir);
        return rc;
    }
    return PTC_OK;
}

int ptc_store_reader_open(ptc_store_reader **out, ptc_store *s, uint64_t version)
{
    *out = NULL;
    ptc_store_reader *r = ptc_calloc(1, sizeof *r);
    if (!r)
        return PTC_E_NOMEM;
    r->s = s;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        ptc_free(r);
        return ptc_error_set(PTC_E_NOMEM, "cannot create mutex");
    }
    MDB_txn *txn;
    int rc, mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (mrc) {
        rc = ptc_store_mdb_error(mrc, s->dir);
        goto out_close;
    }
    if (version == 0) {
        if ((rc = ptc_store_latest_txn(s, txn, &version)) < 0)
            goto out_abort;
        if (version == 0) {
            rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no versions", s->dir);
            goto out_abort;
        }
    }
    r->version = version;
    uint8_t key[8];
    ptc_key_version(key, version);
    MDB_val k = {8, key}, v;
    mrc = mdb_get(txn, s->dbi_versions, &k, &v);
    if (mrc == MDB_NOTFOUND) {
        rc = ptc_error_set(PTC_E_NOTFOUND, "version %llu not found in store %s",
                           (unsigned long long)version, s->dir);
        goto out_abort;
    }
    if (mrc) {
        rc = ptc_store_mdb_error(mrc, s->dir);
        goto out_abort;
    }
    if ((rc = ptc_store_format_txn(s, txn, &r->fmt)) < 0 ||
        (rc = ptc_store_version_rec_get(s, r->fmt, &k, &v, &r->vrec, NULL)) < 0)
        goto out_abort;
    if ((rc = load_tensors(r, txn)) < 0 || (rc = load_shards(r, txn)) < 0 ||
        (rc = check_digest(r)) < 0)
        goto out_abort;
    mdb_txn_abort(txn);
    if ((rc = open_packs(r)) < 0)
        goto out_close;
    r->meta = json_loads(r->vrec.metadata_json, 0, NULL);
    if (!json_is_object(r->meta)) {
        rc = ptc_error_set(PTC_E_STORE, "store %s version %llu: metadata is not a JSON object",
                           s->dir, (unsigned long long)version);
        goto out_close;
    }
    ptc_version_info *i = &r->info;
    i->version = version;
    i->parent = r->vrec.parent;
    i->created_unix_ns = r->vrec.created_unix_ns;
    i->step = r->vrec.step;
    i->config = r->vrec.config;
    i->rules = r->vrec.rules;
    i->metadata_json = r->vrec.metadata_json;
    i->tensor_count = r->vrec.tensor_count;
    i->bytes = r->vrec.bytes;
    i->stored_bytes = r->vrec.stored_bytes;
    *out = r;
    return PTC_OK;
out_abort:
    mdb_txn_abort(txn);
out_close:
    ptc_store_reader_close(r);
    return rc;
}

void ptc_store_reader_close(ptc_store_reader *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nfds; i++) {
        if (r->fds[i].map)
            munmap((void *)r->fds[i].map, (size_t)r->fds[i].map_len);
        close(r->fds[i].fd);
    }
    ptc_free(r->fds);
    for (size_t i = 0; i < r->nrecs; i++)
        ptc_shard_rec_free(&r->recs[i]);
    ptc_free(r->recs);
    for (size_t i = 0; i < r->nt; i++)
        ptc_tensor_rec_free(&r->tensors[i]);
    ptc_free(r->tensors);
    ptc_free(r->by_name);
    ptc_free(r->first);
    json_decref(r->meta);
    ptc_version_rec_free(&r->vrec);
    pthread_mutex_destroy(&r->mu);
    ptc_free(r);
}

/* ---- metadata access --------------------------------------------------------------- */

const ptc_version_info *ptc_store_reader_version(const ptc_store_reader *r)
{
    return &r->info;
}

const char *ptc_store_reader_metadata(const ptc_store_reader *r, const char *key)
{
    return json_string_value(json_object_get(r->meta, key));
}

size_t ptc_store_reader_tensor_count(const ptc_store_reader *r)
{
    return r->nt;
}

ptc_store *ptc_store_reader_store(const ptc_store_reader *r)
{
    return r->s;
}

const ptc_tensor_rec *ptc_store_reader_trec(const ptc_store_reader *r, size_t t)
{
    return t < r->nt ? &r->tensors[t] : NULL;
}

int ptc_store_reader_tensor(const ptc_store_reader *r, size_t i, ptc_store_tensor *out)
{
    if (i >= r->nt)
        return ptc_error_set(PTC_E_RANGE, "tensor index %zu out of range (%zu tensors)", i,
                             r->nt);
    const ptc_tensor_rec *t = &r->tensors[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->name_len = t->name_len;
    out->dtype = (ptc_dtype)t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->placement = t->placement;
    out->nshards = r->first[i + 1] - r->first[i];
    return PTC_OK;
}

int ptc_store_reader_find(const ptc_store_reader *r, const char *name, size_t name_len,
                          size_t *index)
{
    size_t lo = 0, hi = r->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptc_tensor_rec *t = &r->tensors[r->by_name[mid]];
        size_t n = PTC_MIN(t->name_len, name_len);
        int c = memcmp(t->name, name, n);
        if (c == 0)
            c = (t->name_len > name_len) - (t->name_len < name_len);
        if (c == 0) {
            *index = r->by_name[mid];
            return PTC_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return ptc_error_set(PTC_E_NOTFOUND, "no tensor '%.*s' in version %llu",
                         (int)PTC_MIN(name_len, 200), name, (unsigned long long)r->version);
}

void ptc_store_reader_recs(const ptc_store_reader *r, size_t t, const ptc_shard_rec **recs,
                           size_t *n)
{
    *recs = &r->recs[r->first[t]];
    *n = r->first[t + 1] - r->first[t];
}

int ptc_store_reader_rec(const ptc_store_reader *r, size_t t, uint32_t rank, bool resolve,
                         const ptc_shard_rec **out)
{
    if (t >= r->nt)
        return ptc_error_set(PTC_E_RANGE, "tensor index %zu out of range", t);
    size_t lo = r->first[t], hi = r->first[t + 1];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->recs[mid].rank == rank) {
            const ptc_shard_rec *rec = &r->recs[mid];
            if (resolve && rec->kind == PTC_SHARD_ALIAS)
                return ptc_store_reader_rec(r, t, rec->alias_rank, false, out);
            *out = rec;
            return PTC_OK;
        }
        if (r->recs[mid].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return ptc_error_set(PTC_E_NOTFOUND, "tensor '%s' has no shard for rank %u in version %llu",
                         r->tensors[t].name, rank, (unsigned long long)r->version);
}

static void fill_shard_info(ptc_shard_info *o, const ptc_shard_rec *rec, const ptc_shard_rec *d)
{
    memset(o, 0, sizeof *o);
    o->rank = rec->rank;
    o->alias = rec->kind == PTC_SHARD_ALIAS;
    o->owner_rank = o->alias ? rec->alias_rank : rec->rank;
    o->pack_version = d->pack_version;
    o->pack_rank = d->pack_rank;
    o->offset = d->offset;
    o->length = d->length;
    o->raw_length = d->raw_length;
    o->codec = d->codec;
    o->nblocks = d->nblocks;
    o->local_ndim = d->local_ndim;
    memcpy(o->local_shape, d->local_shape, sizeof o->local_shape);
    o->pieces = d->pieces;
    o->npieces = d->npieces;
}

int ptc_store_reader_shard_at(const ptc_store_reader *r, size_t t, size_t i,
                              ptc_shard_info *out)
{
    if (t >= r->nt || i >= r->first[t + 1] - r->first[t])
        return ptc_error_set(PTC_E_RANGE, "shard %zu of tensor %zu out of range", i, t);
    const ptc_shard_rec *rec = &r->recs[r->first[t] + i], *d = rec;
    if (rec->kind == PTC_SHARD_ALIAS)
        PTC_TRY(ptc_store_reader_rec(r, t, rec->alias_rank, false, &d));
    fill_shard_info(out, rec, d);
    return PTC_OK;
}

int ptc_store_reader_shard(const ptc_store_reader *r, size_t t, uint32_t rank,
                           ptc_shard_info *out)
{
    const ptc_shard_rec *rec, *d;
    PTC_TRY(ptc_store_reader_rec(r, t, rank, false, &rec));
    d = rec;
    if (rec->kind == PTC_SHARD_ALIAS)
        PTC_TRY(ptc_store_reader_rec(r, t, rec->alias_rank, false, &d));
    fill_shard_info(out, rec, d);
    return PTC_OK;
}

/* ---- block access -------------------------------------------------------------------- */

/* Take the shared flock of pack file @p f (entry @p name of @p dfd) and
 * check that the entry is still @p f: 0, or ENOENT when a recycling gc
 * holds it (it is moving it away) or moved it, or another errno. Never
 * waits: only gc's move takes the flock exclusively. */
static int still_in_place(int dfd, const char *name, int f)
{
    int rc;
    while ((rc = flock(f, LOCK_SH | LOCK_NB)) != 0 && errno == EINTR)
        ;
    if (rc != 0)
        /* no flock here (ENOLCK, EINVAL): no recycling gc beside it either */
        return errno == EWOULDBLOCK ? ENOENT : 0;
    struct stat a, b;
    if (fstat(f, &a) != 0)
        return errno;
    if (fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) != 0)
        return errno;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino ? 0 : ENOENT;
}

static int get_fd(ptc_store_reader *r, uint64_t v, uint32_t rank, int *fd)
{
    int rc = PTC_OK;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nfds; i++)
        if (r->fds[i].version == v && r->fds[i].rank == rank) {
            *fd = r->fds[i].fd;
            goto out_unlock;
        }
    if ((rc = ptc_grow((void **)&r->fds, &r->fcap, r->nfds + 1, sizeof *r->fds)) < 0)
        goto out_unlock;
    /* by the store's directory handles, no link followed: a pack read never
     * leaves the store (a link in its place is named, not read through) */
    char rel[48], name[32];
    snprintf(rel, sizeof rel, "packs/v%llu", (unsigned long long)v);
    snprintf(name, sizeof name, "rank-%u.pack", rank);
    int dfd;
    if ((rc = ptc_store_subdir(r->s, rel, false, &dfd)) < 0)
        goto out_unlock;
    int f = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    /* held shared while open: a recycling gc moves a file away to be
     * overwritten only when it gets it exclusively (store_maint.c), so a
     * file still in place once held is this version's for as long as the
     * reader has it; one moved meanwhile is missing, as if removed. A file
     * system without flock has no recycling gc beside it (a local store). */
    int moved = f >= 0 ? still_in_place(dfd, name, f) : 0;
    if (moved) {
        close(f);
        f = -1;
        errno = moved;
    }
    if (f < 0) {
        int e = errno;
        if (e == ELOOP)
            rc = ptc_store_foreign(r->s, dfd, rel, name);
        else {
            errno = e;
            rc = ptc_error_sys(PTC_E_IO, "open %s/%s/%s", r->s->dir, rel, name);
        }
        close(dfd);
        goto out_unlock;
    }
    close(dfd);
    r->fds[r->nfds++] = (pack_fd){v, rank, f, NULL, 0};
    *fd = f;
out_unlock:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Per-call scratch of the block engine (one decoded block cached). */
typedef struct blk_ctx {
    ptc_store_reader *r;
    ptc_blob_scratch sc;
} blk_ctx;

static void blk_ctx_free(blk_ctx *c)
{
    ptc_blob_scratch_free(&c->sc);
}

static uint64_t blk_raw_len(const ptc_shard_rec *rec, uint64_t k)
{
    return ptc_blob_block_raw(rec->raw_length, rec->nblocks, k);
}

/* The blob of a data record, for the block engine. */
typedef struct rec_blob {
    ptc_blob_ref ref;
    char path[4096];
    char what[1200];
} rec_blob;

static int rec_blob_init(blk_ctx *c, const ptc_shard_rec *rec, rec_blob *b)
{
    ptc_store_reader *r = c->r;
    int fd = -1;
    PTC_TRY(get_fd(r, rec->pack_version, rec->pack_rank, &fd));
    ptc_store_pack_path(b->path, sizeof b->path, r->s->dir, rec->pack_version, rec->pack_rank);
    snprintf(b->what, sizeof b->what, "tensor '%s' rank %u", r->tensors[rec->tensor].name,
             rec->rank);
    b->ref = (ptc_blob_ref){.raw_length = rec->raw_length,
                            .nblocks = rec->nblocks,
                            .blocks = rec->blocks,
                            .block_off = rec->block_off,
                            .fd = fd,
                            .path = b->path,
                            .what = b->what};
    return PTC_OK;
}

/* Read block @p k of @p rec into @p dst (raw_len bytes) and verify it. */
static int read_block_into(blk_ctx *c, const ptc_shard_rec *rec, uint64_t k, uint8_t *dst)
{
    rec_blob b;
    PTC_TRY(rec_blob_init(c, rec, &b));
    return ptc_blob_read_block(&c->sc, &b.ref, k, dst);
}

static int get_block(blk_ctx *c, const ptc_shard_rec *rec, uint64_t k, const uint8_t **out)
{
    if (c->sc.valid && c->sc.key == rec && c->sc.blk == k) {
        *out = c->sc.raw;
        return PTC_OK;
    }
    rec_blob b;
    PTC_TRY(rec_blob_init(c, rec, &b));
    return ptc_blob_get_block(&c->sc, &b.ref, rec, k, out);
}

/* Copy @p n elements: local elements e0 + i*ss of @p rec to dst + i*ds
 * (elements). Splits the row at block boundaries (an element never straddles
 * one: element sizes divide the block size). */
static int copy_row(blk_ctx *c, const ptc_shard_rec *rec, int64_t e0, int64_t ss, uint8_t *dst,
                    int64_t ds, int64_t n, size_t es)
{
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    int64_t i = 0;
    while (i < n) {
        uint64_t byte = (uint64_t)(e0 + i * ss) * es;
        uint64_t k = byte / BS, in = byte - k * BS;
        int64_t m = n - i;
        if (ss > 0) {
            int64_t fit = (int64_t)((BS - in - 1) / ((uint64_t)ss * es)) + 1;
            m = PTC_MIN(m, fit);
        }
        uint8_t *d = dst + i * ds * (int64_t)es;
        if (ss == 1 && ds == 1 && in == 0 && (uint64_t)m * es == blk_raw_len(rec, k) &&
            !(c->sc.valid && c->sc.key == rec && c->sc.blk == k)) {
            /* a whole block into a contiguous destination: read or
             * decompress straight into it, no staging copy */
            PTC_TRY(read_block_into(c, rec, k, d));
        } else {
            const uint8_t *b;
            PTC_TRY(get_block(c, rec, k, &b));
            if (ss == 1 && ds == 1) /* a run of a row: no strided copy to plan */
                memcpy(d, b + in, (size_t)m * es);
            else
                PTC_TRY(ptc_pack_copy(d, &ds, b + in, &ss, &m, 1, es));
        }
        i += m;
    }
    return PTC_OK;
}

/* The mapping of pack file (v, rank), made at its first use (NULL when it
 * cannot be mapped: the caller reads instead). Safe while the reader is
 * open: its shared flock keeps the file from being recycled (truncated,
 * overwritten), and a removed file lives on while mapped. */
static const uint8_t *get_map(ptc_store_reader *r, uint64_t v, uint32_t rank, uint64_t *len)
{
    int fd;
    if (get_fd(r, v, rank, &fd) < 0)
        return NULL;
    const uint8_t *m = NULL;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nfds; i++) {
        pack_fd *p = &r->fds[i];
        if (p->version != v || p->rank != rank)
            continue;
        if (!p->map)
            p->map = ptc_blob_map_file(p->fd, &p->map_len);
        m = p->map;
        *len = p->map_len;
        break;
    }
    pthread_mutex_unlock(&r->mu);
    return m;
}

int ptc_store_reader_map_shard(const ptc_store_reader *r, size_t t, uint32_t rank,
                               const void **out)
{
    *out = NULL;
    const ptc_shard_rec *rec;
    PTC_TRY(ptc_store_reader_rec(r, t, rank, true, &rec));
    if (rec->kind != PTC_SHARD_DATA || rec->raw_length == 0 || ptc_fault_no_map())
        return PTC_OK;
    for (uint64_t k = 0; k < rec->nblocks; k++)
        if (rec->blocks[k].codec != PTC_BLOCK_RAW)
            return PTC_OK;
    ptc_store_reader *w = (ptc_store_reader *)r; /* the fd table only */
    uint64_t len = 0;
    const uint8_t *map = get_map(w, rec->pack_version, rec->pack_rank, &len);
    if (!map) {
        ptc_error_clear(); /* the read reports it */
        return PTC_OK;
    }
    /* its pages faulted in now, where a disk error is an error code, not a
     * SIGBUS at the first touch: then (or on a kernel without
     * MADV_POPULATE_READ) the read path takes it and reports the error */
    if (rec->offset > len || rec->length > len - rec->offset)
        return PTC_OK; /* the read names the short file */
    uintptr_t lo = (uintptr_t)(map + rec->offset) & ~(uintptr_t)4095;
    if (madvise((void *)lo, (size_t)((uintptr_t)(map + rec->offset + rec->length) - lo),
                MADV_POPULATE_READ) != 0)
        return PTC_OK;
    blk_ctx c = {.r = w};
    rec_blob b;
    PTC_TRY(rec_blob_init(&c, rec, &b));
    b.ref.map = map;
    b.ref.map_len = len;
    const uint8_t *p;
    PTC_TRY(ptc_blob_map(&b.ref, 0, (size_t)rec->raw_length, &p));
    *out = p;
    return PTC_OK;
}

int ptc_store_reader_read_shard(const ptc_store_reader *r, size_t t, uint32_t rank, void *buf,
                                size_t len)
{
    const ptc_shard_rec *rec;
    PTC_TRY(ptc_store_reader_rec(r, t, rank, true, &rec));
    if (len != rec->raw_length)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' rank %u: buffer of %zu bytes, shard has %llu",
                             r->tensors[t].name, rank, len, (unsigned long long)rec->raw_length);
    blk_ctx c = {.r = (ptc_store_reader *)r};
    int rc = copy_row(&c, rec, 0, 1, buf, 1, (int64_t)len, 1);
    blk_ctx_free(&c);
    return rc;
}

/* ---- box reads --------------------------------------------------------------------- */

typedef struct box_list {
    ptc_box *b;
    size_t n, cap;
} box_list;

static int box_push(box_list *l, const ptc_box *b)
{
    PTC_TRY(ptc_grow((void **)&l->b, &l->cap, l->n + 1, sizeof *l->b));
    l->b[l->n++] = *b;
    return PTC_OK;
}

/* Append a − b (at most 2·ndim disjoint boxes) to @p out. */
static int box_subtract(box_list *out, const ptc_box *a, const ptc_box *b)
{
    ptc_box x;
    if (!ptc_box_intersect(&x, a, b))
        return box_push(out, a);
    ptc_box rest = *a;
    for (int d = 0; d < a->ndim; d++) {
        if (rest.lo[d] < x.lo[d]) {
            ptc_box p = rest;
            p.hi[d] = x.lo[d];
            PTC_TRY(box_push(out, &p));
        }
        if (x.hi[d] < rest.hi[d]) {
            ptc_box p = rest;
            p.lo[d] = x.hi[d];
            PTC_TRY(box_push(out, &p));
        }
        rest.lo[d] = x.lo[d];
        rest.hi[d] = x.hi[d];
    }
    return PTC_OK;
}

/* Rows shorter than this go through the scratch block: a read call per
 * short segment would cost more than the copy it saves. */
#define SCATTER_ROW_MIN ((uint64_t)1024)
/* Most segments of one block in the scatter path (rows of SCATTER_ROW_MIN,
 * plus a partial one at each end). */
#define SCATTER_SEG_MAX ((int)(PTC_STORE_BLOCK_SIZE / SCATTER_ROW_MIN) + 2)

/* The region's source is the contiguous element range [src0, src0 + vol) of
 * @p rec, its rows (@p e[n-1] elements) go to destination rows of strides
 * @p ds: each raw block is read with one preadv, the bytes of the range
 * straight into the destination rows and, where the range covers only part
 * of the block, the rest of the block into the scratch, and verified over
 * both (every destination byte copied once, as a plain read; the bytes
 * outside the range are read only for the checksum). Compressed blocks and a
 * block already in the scratch are copied from the scratch. */
static int copy_scatter(blk_ctx *c, const ptc_shard_rec *rec, int64_t src0, const int64_t *e,
                        const int64_t *ds, int n, uint8_t *dst, size_t es)
{
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    const int cap = SCATTER_SEG_MAX + 2; /* the rows, and the scratch at each end */
    uint64_t row = (uint64_t)e[n - 1] * es, s0 = (uint64_t)src0 * es, vol = row;
    for (int d = 0; d < n - 1; d++)
        vol *= (uint64_t)e[d];
    struct iovec *seg = ptc_malloc(sizeof *seg * 2 * (size_t)cap);
    if (!seg)
        return PTC_E_NOMEM;
    rec_blob b;
    int rc = rec_blob_init(c, rec, &b);
    for (uint64_t k = s0 / BS; rc == PTC_OK && k * BS < s0 + vol; k++) {
        uint64_t a = PTC_MAX(s0, k * BS), z = PTC_MIN(s0 + vol, (k + 1) * BS);
        int nseg = 1; /* seg[0]: the scratch before a */
        for (uint64_t u = a; u < z;) {
            uint64_t r = (u - s0) / row, in = (u - s0) - r * row, len = PTC_MIN(row - in, z - u);
            int64_t off = 0;
            for (int d = n - 2; d >= 0; d--) { /* the row's place in the destination */
                off += (int64_t)(r % (uint64_t)e[d]) * ds[d];
                r /= (uint64_t)e[d];
            }
            seg[nseg++] = (struct iovec){dst + off * (int64_t)es + in, (size_t)len};
            u += len;
        }
        uint64_t raw = blk_raw_len(rec, k), head = a - k * BS, tail = k * BS + raw - z;
        bool cached = c->sc.valid && c->sc.key == rec && c->sc.blk == k;
        if (!cached && rec->blocks[k].codec == PTC_BLOCK_RAW) {
            if ((head || tail) && !c->sc.raw && !(c->sc.raw = ptc_malloc(BS))) {
                rc = PTC_E_NOMEM;
                break;
            }
            if (head || tail)
                c->sc.valid = false; /* it holds the block's ends only */
            seg[0] = (struct iovec){c->sc.raw, (size_t)head};
            if (tail)
                seg[nseg++] = (struct iovec){c->sc.raw + (z - k * BS), (size_t)tail};
            rc = ptc_blob_read_block_iov(&b.ref, k, seg + (head ? 0 : 1), nseg - (head ? 0 : 1),
                                         seg + cap);
            continue;
        }
        const uint8_t *blk;
        if ((rc = get_block(c, rec, k, &blk)) < 0)
            break;
        for (int i = 1; i < nseg; i++) {
            memcpy(seg[i].iov_base, blk + (a - k * BS), seg[i].iov_len);
            a += seg[i].iov_len;
        }
    }
    ptc_free(seg);
    return rc;
}

/* Copy the part @p J (inside piece @p p of @p rec) of the requested box. */
static int copy_region(blk_ctx *c, const ptc_shard_rec *rec, const ptc_piece *p,
                       const ptc_box *J, const ptc_box *box, uint8_t *dst,
                       const int64_t *dst_strides, size_t es)
{
    int nd = J->ndim;
    int64_t ext[PTC_MAX_DIMS], e[PTC_MAX_DIMS], ds[PTC_MAX_DIMS], ss[PTC_MAX_DIMS];
    int64_t src0 = ptc_piece_local_index(p, J->lo), dst0 = 0;
    for (int d = 0; d < nd; d++) {
        ext[d] = J->hi[d] - J->lo[d];
        dst0 += (J->lo[d] - box->lo[d]) * dst_strides[d];
    }
    int n;
    bool empty;
    PTC_TRY(ptc_pack_simplify(e, ds, ss, &n, &empty, dst_strides, p->local_stride, ext, nd, es));
    if (empty)
        return PTC_OK;
    if (n == 0) {
        e[0] = 1;
        ds[0] = ss[0] = 1;
        n = 1;
    }
    /* rows of a contiguous source range into rows of the destination, or
     * one contiguous run (of any length) into a contiguous destination */
    bool dense = ss[n - 1] == 1 && ds[n - 1] == 1 &&
                 (n == 1 || (uint64_t)e[n - 1] * es >= SCATTER_ROW_MIN);
    for (int d = n - 2; dense && d >= 0; d--)
        dense = ss[d] == ss[d + 1] * e[d + 1];
    if (dense)
        return copy_scatter(c, rec, src0, e, ds, n, dst + dst0 * (int64_t)es, es);
    int64_t idx[PTC_MAX_DIMS] = {0};
    for (;;) {
        int64_t so = src0, dof = dst0;
        for (int d = 0; d < n - 1; d++) {
            so += idx[d] * ss[d];
            dof += idx[d] * ds[d];
        }
        PTC_TRY(copy_row(c, rec, so, ss[n - 1], dst + dof * (int64_t)es, ds[n - 1], e[n - 1],
                         es));
        int d = n - 2;
        while (d >= 0 && ++idx[d] == e[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    return PTC_OK;
}

int ptc_store_reader_read_box(const ptc_store_reader *r, size_t t, const ptc_box *box,
                              void *dst, const int64_t *dst_strides)
{
    if (t >= r->nt)
        return ptc_error_set(PTC_E_RANGE, "tensor index %zu out of range", t);
    const ptc_tensor_rec *tr = &r->tensors[t];
    if (box->ndim != tr->ndim)
        return ptc_error_set(PTC_E_RANGE, "tensor '%s': box has %d dims, tensor %d", tr->name,
                             box->ndim, tr->ndim);
    for (int d = 0; d < tr->ndim; d++)
        if (box->lo[d] < 0 || box->lo[d] > box->hi[d] || box->hi[d] > tr->shape[d])
            return ptc_error_set(PTC_E_RANGE, "tensor '%s': box [%lld, %lld) outside dim %d of %lld",
                                 tr->name, (long long)box->lo[d], (long long)box->hi[d], d,
                                 (long long)tr->shape[d]);
    int64_t want = ptc_box_volume(box);
    if (want == 0)
        return PTC_OK;
    size_t es = ptc_dtype_size((ptc_dtype)tr->dtype);
    int64_t rm[PTC_MAX_DIMS];
    if (!dst_strides) {
        int64_t ext[PTC_MAX_DIMS];
        for (int d = 0; d < box->ndim; d++)
            ext[d] = box->hi[d] - box->lo[d];
        ptc_strides_row_major(box->ndim, ext, rm);
        dst_strides = rm;
    }
    blk_ctx c = {.r = (ptc_store_reader *)r};
    box_list covered = {0}, pend = {0}, next = {0};
    int64_t got = 0;
    int rc = PTC_OK;
    for (size_t i = r->first[t]; i < r->first[t + 1] && got < want; i++) {
        const ptc_shard_rec *rec = &r->recs[i];
        if (rec->kind != PTC_SHARD_DATA)
            continue; /* a replica: its owner is in the list too */
        for (uint32_t k = 0; k < rec->npieces && got < want; k++) {
            const ptc_piece *p = &rec->pieces[k];
            ptc_box I;
            if (!ptc_box_intersect(&I, box, &p->box))
                continue;
            /* only what no earlier piece supplied */
            pend.n = 0;
            if ((rc = box_push(&pend, &I)) < 0)
                goto out_free;
            for (size_t j = 0; j < covered.n && pend.n; j++) {
                next.n = 0;
                for (size_t q = 0; q < pend.n; q++)
                    if ((rc = box_subtract(&next, &pend.b[q], &covered.b[j])) < 0)
                        goto out_free;
                box_list tmp = pend;
                pend = next;
                next = tmp;
            }
            for (size_t q = 0; q < pend.n; q++) {
                if (ptc_box_is_empty(&pend.b[q]))
                    continue;
                if ((rc = copy_region(&c, rec, p, &pend.b[q], box, dst, dst_strides, es)) < 0 ||
                    (rc = box_push(&covered, &pend.b[q])) < 0)
                    goto out_free;
                got += ptc_box_volume(&pend.b[q]);
            }
        }
    }
    if (got != want)
        rc = ptc_error_set(PTC_E_NOTFOUND,
                           "tensor '%s' version %llu: %lld of %lld requested elements are held "
                           "by no stored shard",
                           tr->name, (unsigned long long)r->version, (long long)(want - got),
                           (long long)want);
out_free:
    ptc_free(covered.b);
    ptc_free(pend.b);
    ptc_free(next.b);
    blk_ctx_free(&c);
    return rc;
}

int ptc_store_reader_verify_rec(const ptc_store_reader *r, size_t t, const ptc_shard_rec *rec,
                                ptc_progress_fn fn, void *user, uint64_t *done, uint64_t total)
{
    (void)t;
    if (rec->kind != PTC_SHARD_DATA)
        return PTC_OK;
    blk_ctx c = {.r = (ptc_store_reader *)r};
    int rc = PTC_OK;
    for (uint64_t k = 0; k < rec->nblocks; k++) {
        const uint8_t *b;
        c.sc.valid = false;
        if ((rc = get_block(&c, rec, k, &b)) < 0)
            break;
        *done += blk_raw_len(rec, k);
        if (fn)
            fn("verify", *done, total, user);
    }
    blk_ctx_free(&c);
    return rc;
}
