/* Datasets in the store: records go through the block engine into one pack
 * file per dataset (a data blob, then an index blob of N+1 u64 offsets);
 * the catalog (name → id, N, format, blobs) is one LMDB record, committed
 * last, so an ingest is crash-safe like a version (docs/format.md §8). */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "ptc/store/store_catalog.h"
#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

#define DS_PACK_MAGIC "PTCDPAK1"
/* indexes up to this many entries (64 MiB) are kept in memory when opened */
#define DS_INDEX_IN_MEMORY ((uint64_t)8 << 20)
#define DS_SCRATCH_POOL 64

/* ---- names, paths, catalog records ---------------------------------------------- */

bool ptc_store_dataset_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > PTC_STORE_DATASET_NAME_MAX || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int check_name(const char *name)
{
    if (!ptc_store_dataset_name_ok(name))
        return ptc_error_set(PTC_E_INVAL,
                             "bad dataset name '%.64s': 1-255 characters of [A-Za-z0-9._-], "
                             "not starting with '.'",
                             name ? name : "");
    return PTC_OK;
}

int ptc_store_dataset_pack_path(char *out, size_t cap, const char *dir, uint64_t id)
{
    if (snprintf(out, cap, "%s/packs/datasets/d%llu.pack", dir, (unsigned long long)id) >=
        (int)cap)
        return ptc_error_set(PTC_E_INVAL, "store path too long: %s", dir);
    return PTC_OK;
}

static void fill_info(ptc_store_dataset_info *o, const char *name, size_t nlen, const ds_rec *r)
{
    memset(o, 0, sizeof *o);
    memcpy(o->name, name, nlen);
    o->name[nlen] = 0;
    snprintf(o->format, sizeof o->format, "%s", r->format);
    o->id = r->id;
    o->samples = r->samples;
    o->bytes = r->data.raw_length;
    o->stored_bytes = r->data.length + r->index.length;
    o->created_unix_ns = r->created;
    o->codec = r->data.codec;
    o->data_offset = r->data.offset;
    o->data_raw = true;
    for (uint64_t i = 0; i < r->data.nblocks; i++)
        if (r->data.blocks[i].codec != PTC_BLOCK_RAW)
            o->data_raw = false;
}

/* The catalog database, never created by looking: a store that never held
 * a dataset has none (PTC_E_NOTFOUND, quietly), and listing it writes
 * nothing, so it works read-only and on a full disk. */
static int catalog_find(ptc_store *s, MDB_dbi *dbi)
{
    int rc = ptc_store_dbi_find(s, PTC_DB_DATASETS, dbi);
    if (rc == PTC_E_NOTFOUND)
        ptc_error_clear();
    return rc;
}

/* The record of @p name in a read transaction of its own; PTC_E_NOTFOUND
 * if none. (The database handle is looked up before the transaction
 * begins: a handle opened later is not valid in it.) */
static int catalog_get(ptc_store *s, const char *name, ds_rec *r)
{
    MDB_dbi dbi;
    int rc = catalog_find(s, &dbi);
    if (rc < 0 && rc != PTC_E_NOTFOUND)
        return rc;
    MDB_txn *txn;
    int mrc = mdb_txn_begin(ptc_store_env(s), NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, ptc_store_dir(s));
    MDB_val k = {strlen(name), (void *)name}, v;
    mrc = rc == PTC_OK ? mdb_get(txn, dbi, &k, &v) : MDB_NOTFOUND;
    unsigned fmt = 0;
    if (mrc == 0 && (rc = ptc_store_format_txn(s, txn, &fmt)) == PTC_OK)
        rc = ds_rec_get(s, fmt, &k, &v, name, r, NULL);
    mdb_txn_abort(txn);
    if (mrc == MDB_NOTFOUND)
        return ptc_error_set(PTC_E_NOTFOUND, "no dataset '%s' in store %s", name,
                             ptc_store_dir(s));
    if (mrc)
        return ptc_store_mdb_error(mrc, ptc_store_dir(s));
    return rc;
}

/* Run @p fn over every catalog record in one read transaction; format 2:
 * what was read must match the catalog's summary. */
static int catalog_each(ptc_store *s, int (*fn)(void *, const char *, size_t, const ds_rec *),
                        void *user)
{
    MDB_dbi dbi;
    int rc = catalog_find(s, &dbi);
    bool none = rc == PTC_E_NOTFOUND;
    if (rc < 0 && !none)
        return rc;
    MDB_txn *txn;
    int mrc = mdb_txn_begin(ptc_store_env(s), NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, ptc_store_dir(s));
    unsigned fmt;
    MDB_cursor *c = NULL;
    ptc_store_summary got = {0}, want;
    if ((rc = ptc_store_format_txn(s, txn, &fmt)) < 0)
        goto out_abort;
    if (!none && (mrc = mdb_cursor_open(txn, dbi, &c))) {
        rc = ptc_store_mdb_error(mrc, ptc_store_dir(s));
        goto out_abort;
    }
    MDB_val k, v;
    for (mrc = none ? MDB_NOTFOUND : mdb_cursor_get(c, &k, &v, MDB_FIRST);
         mrc == 0 && rc == PTC_OK; mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        char name[PTC_STORE_DATASET_NAME_MAX + 1];
        size_t n = k.mv_size;
        if ((rc = ptc_store_val_check(s, &k, NULL, "dataset catalog key")) < 0)
            break;
        if (n == 0 || n > PTC_STORE_DATASET_NAME_MAX) {
            rc = ptc_error_set(PTC_E_STORE, "dataset catalog: key of %zu bytes", n);
            break;
        }
        memcpy(name, k.mv_data, n);
        name[n] = 0;
        ds_rec r;
        uint64_t sum;
        if ((rc = ds_rec_get(s, fmt, &k, &v, name, &r, &sum)) < 0)
            break;
        got.count++;
        got.xsum ^= sum;
        rc = fn(user, name, n, &r);
        ds_rec_free(&r);
    }
    if (rc == PTC_OK && mrc && mrc != MDB_NOTFOUND)
        rc = ptc_store_mdb_error(mrc, ptc_store_dir(s));
    if (rc == PTC_OK && fmt >= 2 &&
        (rc = ptc_store_summary_get(s, txn, PTC_SUMMARY_DATASETS, &want)) == PTC_OK)
        rc = ptc_store_summary_mismatch(s, "dataset catalog records", &want, &got);
    if (c)
        mdb_cursor_close(c);
out_abort:
    mdb_txn_abort(txn);
    return rc;
}

struct list_ctx {
    ptc_store_dataset_info *v;
    size_t n, cap;
};

static int list_one(void *user, const char *name, size_t nlen, const ds_rec *r)
{
    struct list_ctx *l = user;
    PTC_TRY(ptc_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    fill_info(&l->v[l->n++], name, nlen, r);
    return PTC_OK;
}

int ptc_store_datasets(ptc_store *s, ptc_store_dataset_info **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    struct list_ctx l = {0};
    int rc = catalog_each(s, list_one, &l);
    if (rc < 0) {
        ptc_free(l.v);
        return rc;
    }
    *out = l.v;
    *n = l.n;
    return PTC_OK;
}

static int ids_one(void *user, const char *name, size_t nlen, const ds_rec *r)
{
    (void)name;
    (void)nlen;
    uint64_t *max = user;
    if (r->id > *max)
        *max = r->id;
    return PTC_OK;
}

struct ref_ctx {
    uint64_t *ids;
    size_t n, cap;
};

static int ref_one(void *user, const char *name, size_t nlen, const ds_rec *r)
{
    (void)name;
    (void)nlen;
    struct ref_ctx *c = user;
    PTC_TRY(ptc_grow((void **)&c->ids, &c->cap, c->n + 1, sizeof *c->ids));
    c->ids[c->n++] = r->id;
    return PTC_OK;
}

int ptc_store_dataset_ids(ptc_store *s, uint64_t **ids, size_t *n)
{
    struct ref_ctx c = {0};
    int rc = catalog_each(s, ref_one, &c);
    if (rc < 0) {
        ptc_free(c.ids);
        return rc;
    }
    *ids = c.ids;
    *n = c.n;
    return PTC_OK;
}

int ptc_store_dataset_stat(ptc_store *s, const char *name, ptc_store_dataset_info *out)
{
    PTC_TRY(check_name(name));
    ds_rec r;
    PTC_TRY(catalog_get(s, name, &r));
    fill_info(out, name, strlen(name), &r);
    ds_rec_free(&r);
    return PTC_OK;
}

/* ---- writer ---------------------------------------------------------------------- */

struct ptc_store_dataset_writer {
    ptc_store *s;
    char name[PTC_STORE_DATASET_NAME_MAX + 1];
    bool replace, committed;
    int lock_fd, fd;
    int dfd; /* packs/datasets */
    uint64_t id;
    char path[4096];
    char file[32]; /* d<id>.pack */
    ptc_blob_out out;
    uint64_t *offsets; /* N + 1 */
    size_t n, cap;
    MDB_dbi dbi, counts;
};

int ptc_store_dataset_writer_begin(ptc_store_dataset_writer **out, ptc_store *s,
                                   const char *name, const ptc_store_dataset_options *opts)
{
    static const ptc_store_dataset_options none;
    *out = NULL;
    if (!opts)
        opts = &none;
    PTC_TRY(check_name(name));
    if (opts->codec > PTC_STORE_CODEC_ZSTD)
        return ptc_error_set(PTC_E_INVAL, "dataset writer: unknown codec %u", opts->codec);
    if (opts->codec == PTC_STORE_CODEC_ZSTD &&
        (opts->level < ZSTD_minCLevel() || opts->level > ZSTD_maxCLevel()))
        return ptc_error_set(PTC_E_INVAL, "dataset writer: zstd level %d out of range",
                             opts->level);
    if (ptc_store_readonly(s))
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", ptc_store_dir(s));
    ptc_store_dataset_writer *w = ptc_calloc(1, sizeof *w);
    if (!w)
        return PTC_E_NOMEM;
    w->s = s;
    w->lock_fd = w->fd = w->dfd = -1;
    w->replace = opts->replace;
    snprintf(w->name, sizeof w->name, "%s", name);
    int rc;
    /* databases first: opening one runs its own write transaction */
    if ((rc = ptc_store_dbi_open(s, PTC_DB_DATASETS, 0, &w->dbi)) < 0 ||
        (rc = ptc_store_dbi_open(s, PTC_STORE_DB_COUNTS, 0, &w->counts)) < 0 ||
        (rc = ptc_store_lock(s, &w->lock_fd)) < 0)
        goto out_destroy;
    ptc_store_dataset_info old;
    rc = ptc_store_dataset_stat(s, name, &old);
    if (rc == PTC_OK && !w->replace) {
        rc = ptc_error_set(PTC_E_EXISTS, "dataset '%s' already exists in store %s (use --replace)",
                           name, ptc_store_dir(s));
        goto out_destroy;
    }
    if (rc < 0 && rc != PTC_E_NOTFOUND)
        goto out_destroy;
    uint64_t max = 0;
    if ((rc = catalog_each(s, ids_one, &max)) < 0)
        goto out_destroy;
    w->id = max + 1; /* a file of this id can only be debris: nothing references it */
    snprintf(w->file, sizeof w->file, "d%llu.pack", (unsigned long long)w->id);
    /* the file is reached by handle with no link followed; debris of an
     * aborted ingest goes first (a foreign entry there is reported) */
    int fd;
    if ((rc = ptc_store_dataset_pack_path(w->path, sizeof w->path, ptc_store_dir(s), w->id)) < 0 ||
        (rc = ptc_store_subdir(s, "packs/datasets", true, &w->dfd)) < 0 ||
        (rc = ptc_store_remove_file(s, w->dfd, "packs/datasets", w->file, NULL)) < 0 ||
        (rc = ptc_store_create_file(s, w->dfd, "packs/datasets", w->file, O_RDWR, &fd)) < 0)
        goto out_destroy;
    w->fd = fd;
    uint8_t h[PTC_PACK_HEADER_SIZE] = {0};
    memcpy(h, DS_PACK_MAGIC, 8);
    h[8] = 1;
    for (int i = 0; i < 8; i++)
        h[16 + i] = (uint8_t)(w->id >> (8 * i));
    if ((rc = ptc_pwrite_all(w->fd, h, sizeof h, 0, w->path)) < 0)
        goto out_destroy;
    ptc_blob_out_init(&w->out, w->fd, w->path, PTC_PACK_HEADER_SIZE, opts->codec, opts->level);
    if ((rc = ptc_blob_begin(&w->out, 0)) < 0 ||
        (rc = ptc_grow((void **)&w->offsets, &w->cap, 1, sizeof *w->offsets)) < 0)
        goto out_destroy;
    w->offsets[0] = 0;
    *out = w;
    return PTC_OK;
out_destroy:
    ptc_store_dataset_writer_destroy(w);
    return rc;
}

int ptc_store_dataset_writer_append(ptc_store_dataset_writer *w, const void *data, size_t len)
{
    if (w->committed || !w->out.open)
        return ptc_error_set(PTC_E_INVAL, "dataset writer already finished");
    if (w->n >= PTC_STORE_DATASET_MAX_RECORDS - 1)
        return ptc_error_set(PTC_E_RANGE, "dataset '%s': too many records", w->name);
    PTC_TRY(ptc_grow((void **)&w->offsets, &w->cap, w->n + 2, sizeof *w->offsets));
    uint64_t end = w->offsets[w->n] + len;
    if (end > INT64_MAX)
        return ptc_error_set(PTC_E_RANGE, "dataset '%s': more than 2^63 bytes", w->name);
    PTC_TRY(ptc_blob_write(&w->out, data, len));
    w->offsets[++w->n] = end;
    return PTC_OK;
}

typedef struct commit_ctx {
    ptc_store_dataset_writer *w;
    const ptc_buf *val;
    uint64_t sum; /* the sealed record's */
} commit_ctx;

static int commit_txn(MDB_txn *txn, void *user)
{
    commit_ctx *c = user;
    ptc_store_dataset_writer *w = c->w;
    ptc_store *s = w->s;
    PTC_TRY(ptc_store_upgrade_txn(s, txn));
    size_t nlen = strlen(w->name);
    /* the summary: the replaced record's sum out (it must be intact), ours in */
    ptc_store_summary sm;
    PTC_TRY(ptc_store_summary_get(s, txn, PTC_SUMMARY_DATASETS, &sm));
    MDB_val k = {nlen, w->name}, v;
    int mrc = mdb_get(txn, w->dbi, &k, &v);
    if (mrc == 0) {
        if (!w->replace)
            return ptc_error_set(PTC_E_EXISTS, "dataset '%s' already exists", w->name);
        size_t body;
        uint64_t old;
        PTC_TRY(ptc_store_rec_open(s, PTC_STORE_FORMAT_VERSION, PTC_REC_DATASET, &k, &v, &body,
                                   &old));
        sm.count--;
        sm.xsum ^= old;
    } else if (mrc != MDB_NOTFOUND) {
        return ptc_store_mdb_error(mrc, "dataset catalog");
    }
    sm.count++;
    sm.xsum ^= c->sum;
    v = (MDB_val){c->val->len, c->val->p};
    if ((mrc = mdb_put(txn, w->dbi, &k, &v, 0)))
        return ptc_store_mdb_error(mrc, "dataset catalog");
    PTC_TRY(ptc_store_summary_put(s, txn, PTC_SUMMARY_DATASETS, &sm));
    if (!w->replace)
        return PTC_OK;
    /* the old records' served counts mean nothing for the new ones */
    MDB_cursor *cur;
    if ((mrc = mdb_cursor_open(txn, w->counts, &cur)))
        return ptc_store_mdb_error(mrc, "dataset counts");
    uint8_t prefix[PTC_STORE_DATASET_NAME_MAX + 1];
    memcpy(prefix, w->name, nlen);
    prefix[nlen] = 0;
    MDB_val ck = {nlen + 1, prefix}, cv;
    for (mrc = mdb_cursor_get(cur, &ck, &cv, MDB_SET_RANGE);
         mrc == 0 && ck.mv_size > nlen && memcmp(ck.mv_data, prefix, nlen + 1) == 0;
         mrc = mdb_cursor_get(cur, &ck, &cv, MDB_NEXT)) {
        if ((mrc = mdb_cursor_del(cur, 0)))
            break;
    }
    mdb_cursor_close(cur);
    if (mrc && mrc != MDB_NOTFOUND)
        return ptc_store_mdb_error(mrc, "dataset counts");
    return PTC_OK;
}

int ptc_store_dataset_writer_commit(ptc_store_dataset_writer *w, const char *format,
                                    ptc_store_dataset_info *info)
{
    if (w->committed || !w->out.open)
        return ptc_error_set(PTC_E_INVAL, "dataset writer already finished");
    if (!format || strlen(format) > PTC_STORE_DATASET_FORMAT_MAX)
        return ptc_error_set(PTC_E_INVAL, "dataset format text too long");
    ds_rec r;
    memset(&r, 0, sizeof r);
    ptc_buf b = {0};
    int rc;
    if ((rc = ptc_blob_end(&w->out, &r.data)) < 0)
        goto out_free;
    /* the index: N + 1 little-endian u64 offsets, written in bounded chunks */
    if ((rc = ptc_blob_begin(&w->out, 8 * ((uint64_t)w->n + 1))) < 0)
        goto out_free;
    uint8_t chunk[8192];
    size_t fill = 0;
    for (size_t i = 0; i <= w->n && rc == PTC_OK; i++) {
        for (int j = 0; j < 8; j++)
            chunk[fill + (size_t)j] = (uint8_t)(w->offsets[i] >> (8 * j));
        fill += 8;
        if (fill == sizeof chunk || i == w->n) {
            rc = ptc_blob_write(&w->out, chunk, fill);
            fill = 0;
        }
    }
    if (rc < 0 || (rc = ptc_blob_end(&w->out, &r.index)) < 0)
        goto out_free;
    int pfd;
    if ((rc = ptc_fsync(w->fd, w->path)) < 0 ||
        (rc = ptc_fsync(w->dfd, "packs/datasets")) < 0 ||
        (rc = ptc_store_subdir(w->s, "packs", false, &pfd)) < 0)
        goto out_free;
    rc = ptc_fsync(pfd, "packs");
    close(pfd);
    if (rc < 0)
        goto out_free;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r.id = w->id;
    r.samples = w->n;
    r.created = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    snprintf(r.format, sizeof r.format, "%s", format);
    commit_ctx c = {w, &b, 0};
    if ((rc = ds_rec_encode(&b, w->name, &r, &c.sum)) < 0)
        goto out_free;
    if ((rc = ptc_store_write_txn(w->s, commit_txn, &c)) < 0)
        goto out_free;
    w->committed = true;
    ptc_store_unlock(w->s, w->lock_fd);
    w->lock_fd = -1;
    if (info)
        fill_info(info, w->name, strlen(w->name), &r);
out_free:
    ptc_free(b.p);
    ds_rec_free(&r);
    return rc;
}

void ptc_store_dataset_writer_destroy(ptc_store_dataset_writer *w)
{
    if (!w)
        return;
    ptc_blob_out_free(&w->out);
    if (w->fd >= 0) {
        close(w->fd);
        if (!w->committed)
            unlinkat(w->dfd, w->file, 0); /* a link in its place: only the link goes */
    }
    if (w->dfd >= 0)
        close(w->dfd);
    ptc_free(w->offsets);
    ptc_store_unlock(w->s, w->lock_fd);
    ptc_free(w);
}

/* ---- reading -------------------------------------------------------------------------- */

struct ptc_store_dataset {
    ptc_store_dataset_info info;
    ds_rec rec;
    char path[4096];
    char what[PTC_STORE_DATASET_NAME_MAX + 16];
    int fd;
    void *map; /* the pack file mapped read-only (NULL: pread) */
    size_t map_len;
    uint64_t *data_off, *index_off; /* block file offsets */
    unsigned char *data_ok, *index_ok; /* verified raw blocks */
    ptc_blob_ref data, index;
    uint64_t *offsets; /* the whole index when small, else NULL */
    pthread_mutex_t lock;
    ptc_blob_scratch *pool[DS_SCRATCH_POOL];
    int npool;
    ptc_store_block_cache *cache; /* decoded compressed blocks; may be NULL */
    uint64_t serial;              /* this handle in the cache's keys */
};

static _Atomic uint64_t ds_serials;

static ptc_blob_scratch *scratch_take(ptc_store_dataset *d)
{
    ptc_blob_scratch *sc = NULL;
    pthread_mutex_lock(&d->lock);
    if (d->npool > 0)
        sc = d->pool[--d->npool];
    pthread_mutex_unlock(&d->lock);
    return sc ? sc : ptc_calloc(1, sizeof *sc);
}

static void scratch_put(ptc_store_dataset *d, ptc_blob_scratch *sc)
{
    if (!sc)
        return;
    pthread_mutex_lock(&d->lock);
    if (d->npool < DS_SCRATCH_POOL) {
        d->pool[d->npool++] = sc;
        sc = NULL;
    }
    pthread_mutex_unlock(&d->lock);
    if (sc) {
        ptc_blob_scratch_free(sc);
        ptc_free(sc);
    }
}

static int read_index(ptc_store_dataset *d, uint64_t id, uint64_t *lo, uint64_t *hi)
{
    if (id >= d->rec.samples)
        return ptc_error_set(PTC_E_RANGE, "dataset '%s': record %llu of %llu", d->info.name,
                             (unsigned long long)id, (unsigned long long)d->rec.samples);
    if (d->offsets) {
        *lo = d->offsets[id];
        *hi = d->offsets[id + 1];
        return PTC_OK;
    }
    uint8_t b[16];
    ptc_blob_scratch *sc = scratch_take(d);
    if (!sc)
        return PTC_E_NOMEM;
    int rc = ptc_blob_read(sc, &d->index, &d->index, 8 * id, b, 16);
    scratch_put(d, sc);
    PTC_TRY(rc);
    *lo = ptc_le_get(b, 8);
    *hi = ptc_le_get(b + 8, 8);
    if (*lo > *hi || *hi > d->rec.data.raw_length)
        return ptc_error_set(PTC_E_STORE, "dataset '%s': corrupt index at record %llu",
                             d->info.name, (unsigned long long)id);
    return PTC_OK;
}

int ptc_store_dataset_open(ptc_store_dataset **out, ptc_store *s, const char *name)
{
    *out = NULL;
    PTC_TRY(check_name(name));
    ptc_store_dataset *d = ptc_calloc(1, sizeof *d);
    if (!d)
        return PTC_E_NOMEM;
    d->fd = -1;
    d->serial = atomic_fetch_add(&ds_serials, 1) + 1;
    pthread_mutex_init(&d->lock, NULL);
    int rc = catalog_get(s, name, &d->rec);
    if (rc < 0)
        goto out_close;
    fill_info(&d->info, name, strlen(name), &d->rec);
    snprintf(d->what, sizeof d->what, "dataset '%s'", name);
    if ((rc = ptc_store_dataset_pack_path(d->path, sizeof d->path, ptc_store_dir(s),
                                          d->rec.id)) < 0)
        goto out_close;
    d->fd = open(d->path, O_RDONLY | O_CLOEXEC);
    if (d->fd < 0) {
        rc = ptc_error_sys(PTC_E_IO, "open %s", d->path);
        goto out_close;
    }
    /* pack files never change once committed: map it, so reads of verified
     * raw blocks are plain copies from the page cache, no system calls */
    uint64_t len;
    d->map = (void *)ptc_blob_map_file(d->fd, &len);
    d->map_len = (size_t)len;
    if ((rc = ptc_blob_block_offsets(&d->rec.data, &d->data_off)) < 0 ||
        (rc = ptc_blob_block_offsets(&d->rec.index, &d->index_off)) < 0)
        goto out_close;
    d->data_ok = ptc_calloc((size_t)d->rec.data.nblocks + 1, 1);
    d->index_ok = ptc_calloc((size_t)d->rec.index.nblocks + 1, 1);
    if (!d->data_ok || !d->index_ok) {
        rc = PTC_E_NOMEM;
        goto out_close;
    }
    d->data = (ptc_blob_ref){d->rec.data.raw_length, d->rec.data.nblocks, d->rec.data.blocks,
                             d->data_off, d->fd, d->path, d->what, d->data_ok, d->map,
                             d->map_len};
    d->index = (ptc_blob_ref){d->rec.index.raw_length, d->rec.index.nblocks, d->rec.index.blocks,
                              d->index_off, d->fd, d->path, d->what, d->index_ok, d->map,
                              d->map_len};
    uint64_t n = d->rec.samples;
    if (n + 1 <= DS_INDEX_IN_MEMORY) {
        d->offsets = ptc_malloc((size_t)(n + 1) * sizeof *d->offsets);
        uint8_t *raw = ptc_malloc((size_t)(n + 1) * 8);
        ptc_blob_scratch sc = {0};
        if (!d->offsets || !raw)
            rc = PTC_E_NOMEM;
        else
            rc = ptc_blob_read(&sc, &d->index, &d->index, 0, raw, (size_t)(n + 1) * 8);
        ptc_blob_scratch_free(&sc);
        for (uint64_t i = 0; rc == PTC_OK && i <= n; i++) {
            d->offsets[i] = ptc_le_get(raw + 8 * i, 8);
            if ((i == 0 && d->offsets[0] != 0) || (i > 0 && d->offsets[i] < d->offsets[i - 1]) ||
                (i == n && d->offsets[n] != d->rec.data.raw_length))
                rc = ptc_error_set(PTC_E_STORE, "dataset '%s': corrupt index at record %llu",
                                   name, (unsigned long long)i);
        }
        ptc_free(raw);
        if (rc < 0)
            goto out_close;
    }
    *out = d;
    return PTC_OK;
out_close:
    ptc_store_dataset_close(d);
    return rc;
}

void ptc_store_dataset_close(ptc_store_dataset *d)
{
    if (!d)
        return;
    if (d->cache)
        ptc_block_cache_drop_owner(d->cache, d->serial);
    for (int i = 0; i < d->npool; i++) {
        ptc_blob_scratch_free(d->pool[i]);
        ptc_free(d->pool[i]);
    }
    if (d->map)
        munmap(d->map, d->map_len);
    if (d->fd >= 0)
        close(d->fd);
    ds_rec_free(&d->rec);
    ptc_free(d->data_off);
    ptc_free(d->index_off);
    ptc_free(d->data_ok);
    ptc_free(d->index_ok);
    ptc_free(d->offsets);
    pthread_mutex_destroy(&d->lock);
    ptc_free(d);
}

const ptc_store_dataset_info *ptc_store_dataset_get_info(const ptc_store_dataset *d)
{
    return &d->info;
}

int ptc_store_dataset_record_size(ptc_store_dataset *d, uint64_t id, uint64_t *size)
{
    uint64_t lo, hi;
    PTC_TRY(read_index(d, id, &lo, &hi));
    *size = hi - lo;
    return PTC_OK;
}

/* Where bytes [off, off + len) of record @p id start in the data blob. */
static int record_range(ptc_store_dataset *d, uint64_t id, uint64_t off, size_t len,
                        uint64_t *start)
{
    uint64_t lo, hi;
    PTC_TRY(read_index(d, id, &lo, &hi));
    if (off > hi - lo || len > hi - lo - off)
        return ptc_error_set(PTC_E_RANGE, "dataset '%s': bytes past the end of record %llu",
                             d->info.name, (unsigned long long)id);
    *start = lo + off;
    return PTC_OK;
}

/* Bytes [off, off + len) of the data blob: compressed blocks through the
 * handle's cache (decoded once while cached, whatever the record order),
 * raw ones as ptc_blob_read reads them. */
static int read_cached(ptc_store_dataset *d, ptc_blob_scratch *sc, uint64_t off, uint8_t *dst,
                       size_t len)
{
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    while (len > 0) {
        uint64_t k = off / BS, in = off - k * BS;
        uint64_t raw = ptc_blob_block_raw(d->data.raw_length, d->data.nblocks, k);
        size_t n = (size_t)PTC_MIN((uint64_t)len, raw - in);
        ptc_block_entry *e = NULL;
        if (d->data.blocks[k].codec != PTC_BLOCK_RAW)
            PTC_TRY(ptc_block_cache_get(d->cache, d->serial, sc, &d->data, k, &e));
        if (e) {
            memcpy(dst, ptc_block_cache_data(e) + in, n);
            ptc_block_cache_put(d->cache, e);
        } else {
            /* raw, or no room in the cache: the scratch keeps the block */
            PTC_TRY(ptc_blob_read(sc, &d->data, &d->data, off, dst, n));
        }
        dst += n;
        off += n;
        len -= n;
    }
    return PTC_OK;
}

int ptc_store_dataset_record_read(ptc_store_dataset *d, uint64_t id, uint64_t off, void *buf,
                                  size_t len)
{
    uint64_t start = 0;
    PTC_TRY(record_range(d, id, off, len, &start));
    if (len == 0)
        return PTC_OK;
    ptc_blob_scratch *sc = scratch_take(d);
    if (!sc)
        return PTC_E_NOMEM;
    int rc = d->cache ? read_cached(d, sc, start, buf, len)
                      : ptc_blob_read(sc, &d->data, &d->data, start, buf, len);
    scratch_put(d, sc);
    return rc;
}

void ptc_store_dataset_set_cache(ptc_store_dataset *d, ptc_store_block_cache *c)
{
    if (d->cache && d->cache != c)
        ptc_block_cache_drop_owner(d->cache, d->serial);
    d->cache = c;
}

int ptc_store_dataset_record_map(ptc_store_dataset *d, uint64_t id, uint64_t off, size_t len,
                                 const void **out)
{
    *out = NULL;
    uint64_t start = 0;
    PTC_TRY(record_range(d, id, off, len, &start));
    if (len == 0)
        return PTC_OK;
    const uint8_t *p;
    PTC_TRY(ptc_blob_map(&d->data, start, len, &p));
    *out = p;
    return PTC_OK;
}

void ptc_store_dataset_record_prefetch(ptc_store_dataset *d, uint64_t id, uint64_t off,
                                       size_t len)
{
    uint64_t start = 0;
    if (record_range(d, id, off, len, &start) != PTC_OK || len == 0)
        return;
    if (!d->cache) {
        ptc_blob_prefetch(&d->data, start, len);
        return;
    }
    /* compressed blocks: decoded ahead on the cache's workers, in
     * parallel with the reader that asked (they read the frame from the
     * mapping); raw ones: asked for from the disk */
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    for (uint64_t k = start / BS; k <= (start + len - 1) / BS; k++) {
        uint64_t a = PTC_MAX(start, k * BS), b = PTC_MIN(start + len, (k + 1) * BS);
        if (d->data.blocks[k].codec != PTC_BLOCK_RAW)
            ptc_block_cache_prefetch(d->cache, d->serial, &d->data, k);
        else
            ptc_blob_prefetch(&d->data, a, (size_t)(b - a));
    }
}

void ptc_store_dataset_record_prefetch_later(ptc_store_dataset *d, uint64_t id, uint64_t off,
                                             size_t len)
{
    uint64_t start = 0;
    if (!d->cache || record_range(d, id, off, len, &start) != PTC_OK || len == 0)
        return;
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    for (uint64_t k = start / BS; k <= (start + len - 1) / BS; k++)
        if (d->data.blocks[k].codec != PTC_BLOCK_RAW)
            ptc_block_cache_prefetch_later(d->cache, d->serial, &d->data, k);
}

/* ---- verify ------------------------------------------------------------------------------ */

/* Every block of @p b read, decompressed and checked; the index blob's
 * offsets (when @p index) checked to rise from 0 to @p data_len. */
static int verify_blob(ptc_store_dataset *d, const ptc_blob_ref *b, bool index,
                       uint64_t data_len, ptc_progress_fn fn, void *user, uint64_t *done,
                       uint64_t total)
{
    ptc_blob_scratch sc = {0};
    int rc = PTC_OK;
    uint64_t prev = 0, at = 0;
    for (uint64_t k = 0; k < b->nblocks && rc == PTC_OK; k++) {
        const uint8_t *blk;
        sc.valid = false;
        if ((rc = ptc_blob_get_block(&sc, b, b, k, &blk)) < 0)
            break;
        uint64_t raw = ptc_blob_block_raw(b->raw_length, b->nblocks, k);
        for (uint64_t i = 0; index && i + 8 <= raw; i += 8, at++) {
            uint64_t o = ptc_le_get(blk + i, 8);
            if ((at == 0 && o != 0) || o < prev || o > data_len) {
                rc = ptc_error_set(PTC_E_STORE, "dataset '%s': corrupt index at record %llu",
                                   d->info.name, (unsigned long long)at);
                break;
            }
            prev = o;
        }
        *done += raw;
        if (fn)
            fn("verify", *done, total, user);
    }
    if (rc == PTC_OK && index && prev != data_len)
        rc = ptc_error_set(PTC_E_STORE, "dataset '%s': its index ends at byte %llu of %llu",
                           d->info.name, (unsigned long long)prev,
                           (unsigned long long)data_len);
    ptc_blob_scratch_free(&sc);
    return rc;
}

int ptc_store_dataset_verify_blocks(ptc_store *s, const char *name, ptc_progress_fn fn,
                                    void *user, uint64_t *done, uint64_t total)
{
    ptc_store_dataset *d;
    PTC_TRY(ptc_store_dataset_open(&d, s, name));
    int rc = verify_blob(d, &d->data, false, 0, fn, user, done, total);
    if (rc == PTC_OK)
        rc = verify_blob(d, &d->index, true, d->rec.data.raw_length, fn, user, done, total);
    ptc_store_dataset_close(d);
    return rc;
}

int ptc_store_dataset_verify(ptc_store *s, const char *name, ptc_progress_fn progress,
                             void *user)
{
    ptc_store_dataset_info i;
    PTC_TRY(ptc_store_dataset_stat(s, name, &i));
    uint64_t done = 0, total = i.bytes + 8 * (i.samples + 1);
    return ptc_store_dataset_verify_blocks(s, name, progress, user, &done, total);
}
