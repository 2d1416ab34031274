/* The persistent count map of served records, kept in its own named LMDB
 * database of the store: key = name, 0x00, generation, seed, epoch, id (u64
 * big-endian, so one (name, generation, seed, epoch) is a contiguous key
 * range; the generation is the dataset's catalog id); value = u64 LE
 * count. Serving events are buffered in memory and added in one write
 * transaction per flush, so the FUSE read path never waits for LMDB. */
#include <lmdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/dataset.h"
#include "ptc/store_internal.h"
#include "ptc/util_internal.h"

#define COUNT_NAME_MAX 255

struct count_ev {
    uint32_t name; /* index into names */
    uint64_t gen, seed, epoch, id;
};

struct ptc_dataset_counter {
    ptc_store *store;
    MDB_dbi dbi;
    pthread_mutex_t lock;
    struct count_ev *ev;
    size_t nev, cap;
    char **names;
    size_t nnames, names_cap;
    pthread_mutex_t flush_lock; /* one flush at a time */
};

static int check_name(const char *name, size_t *len)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > COUNT_NAME_MAX)
        return ptc_error_set(PTC_E_INVAL, "bad dataset name");
    *len = n;
    return PTC_OK;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

#define KEY_TAIL 33 /* 0x00 + generation, seed, epoch, id */

/* key: name, 0, generation, seed, epoch, id; returns its length */
static size_t make_key(uint8_t *k, const char *name, size_t nlen, uint64_t gen, uint64_t seed,
                       uint64_t epoch, uint64_t id)
{
    memcpy(k, name, nlen);
    k[nlen] = 0;
    put_be64(k + nlen + 1, gen);
    put_be64(k + nlen + 9, seed);
    put_be64(k + nlen + 17, epoch);
    put_be64(k + nlen + 25, id);
    return nlen + KEY_TAIL;
}

int ptc_dataset_counter_create(ptc_dataset_counter **out, ptc_store *store)
{
    *out = NULL;
    if (ptc_store_readonly(store))
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", ptc_store_dir(store));
    ptc_dataset_counter *c = ptc_calloc(1, sizeof *c);
    if (!c)
        return PTC_E_NOMEM;
    int rc = ptc_store_dbi_open(store, PTC_DATASET_DB_COUNTS, 0, &c->dbi);
    if (rc < 0) {
        ptc_free(c);
        return rc;
    }
    c->store = store;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->flush_lock, NULL);
    *out = c;
    return PTC_OK;
}

int ptc_dataset_counter_add(ptc_dataset_counter *c, const char *name, uint64_t gen,
                            uint64_t seed, uint64_t epoch, uint64_t id)
{
    size_t nlen = 0;
    PTC_TRY(check_name(name, &nlen));
    int rc = PTC_OK;
    pthread_mutex_lock(&c->lock);
    size_t ni = 0;
    while (ni < c->nnames && strcmp(c->names[ni], name) != 0)
        ni++;
    if (ni == c->nnames) {
        rc = ptc_grow((void **)&c->names, &c->names_cap, ni + 1, sizeof *c->names);
        char *copy = rc == PTC_OK ? ptc_strdup(name) : NULL;
        if (!copy) {
            rc = PTC_E_NOMEM;
            goto out_unlock;
        }
        c->names[c->nnames++] = copy;
    }
    rc = ptc_grow((void **)&c->ev, &c->cap, c->nev + 1, sizeof *c->ev);
    if (rc == PTC_OK)
        c->ev[c->nev++] = (struct count_ev){(uint32_t)ni, gen, seed, epoch, id};
out_unlock:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int cmp_ev(const void *pa, const void *pb)
{
    const struct count_ev *a = pa, *b = pb;
    if (a->name != b->name)
        return a->name < b->name ? -1 : 1;
    if (a->gen != b->gen)
        return a->gen < b->gen ? -1 : 1;
    if (a->seed != b->seed)
        return a->seed < b->seed ? -1 : 1;
    if (a->epoch != b->epoch)
        return a->epoch < b->epoch ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

struct flush_job {
    ptc_dataset_counter *c;
    struct count_ev *ev;
    size_t n;
    char **names;
};

static int flush_txn(MDB_txn *txn, void *user)
{
    struct flush_job *j = user;
    uint8_t k[COUNT_NAME_MAX + KEY_TAIL];
    for (size_t i = 0; i < j->n;) {
        size_t e = i + 1;
        while (e < j->n && cmp_ev(&j->ev[i], &j->ev[e]) == 0)
            e++;
        const char *name = j->names[j->ev[i].name];
        MDB_val key = {make_key(k, name, strlen(name), j->ev[i].gen, j->ev[i].seed,
                                j->ev[i].epoch, j->ev[i].id), k};
        MDB_val val;
        uint64_t count = 0;
        int mrc = mdb_get(txn, j->c->dbi, &key, &val);
        if (mrc == 0 && val.mv_size == 8) {
            const uint8_t *v = val.mv_data;
            for (int b = 7; b >= 0; b--)
                count = count << 8 | v[b];
        } else if (mrc == 0 || mrc != MDB_NOTFOUND) {
            return mrc ? ptc_store_mdb_error(mrc, "dataset counts")
                       : ptc_error_set(PTC_E_STORE, "dataset counts: bad value size %zu",
                                       val.mv_size);
        }
        count += e - i;
        uint8_t out[8];
        for (int b = 0; b < 8; b++)
            out[b] = (uint8_t)(count >> (8 * b));
        val.mv_size = 8;
        val.mv_data = out;
        mrc = mdb_put(txn, j->c->dbi, &key, &val, 0);
        if (mrc)
            return ptc_store_mdb_error(mrc, "dataset counts");
        i = e;
    }
    return PTC_OK;
}

int ptc_dataset_counter_flush(ptc_dataset_counter *c)
{
    pthread_mutex_lock(&c->flush_lock);
    pthread_mutex_lock(&c->lock);
    struct flush_job j = {c, c->ev, c->nev, NULL};
    /* the name strings live until destroy; the array may grow meanwhile,
     * so the transaction works on a copy of it */
    j.names = ptc_malloc((c->nnames ? c->nnames : 1) * sizeof *j.names);
    if (!j.names) {
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_unlock(&c->flush_lock);
        return PTC_E_NOMEM;
    }
    if (c->nnames)
        memcpy(j.names, c->names, c->nnames * sizeof *j.names);
    c->ev = NULL;
    c->nev = c->cap = 0;
    pthread_mutex_unlock(&c->lock);
    int rc = PTC_OK;
    if (j.n > 0) {
        qsort(j.ev, j.n, sizeof *j.ev, cmp_ev);
        rc = ptc_store_write_txn(c->store, flush_txn, &j);
    }
    if (rc < 0) {
        /* keep the counts for the next flush, ahead of newer ones */
        pthread_mutex_lock(&c->lock);
        struct count_ev *m = ptc_malloc((j.n + c->nev) * sizeof *m);
        if (m) {
            memcpy(m, j.ev, j.n * sizeof *m);
            if (c->nev)
                memcpy(m + j.n, c->ev, c->nev * sizeof *m);
            ptc_free(c->ev);
            c->ev = m;
            c->nev += j.n;
            c->cap = c->nev;
        } else {
            ptc_log(PTC_LOG_ERROR, "lost %zu dataset counts", j.n);
        }
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&c->flush_lock);
    ptc_free(j.ev);
    ptc_free(j.names);
    return rc;
}

void ptc_dataset_counter_destroy(ptc_dataset_counter *c)
{
    if (!c)
        return;
    int rc = ptc_dataset_counter_flush(c);
    if (rc < 0)
        ptc_log(PTC_LOG_ERROR, "dataset counts not saved: %s", ptc_last_error());
    ptc_free(c->ev);
    for (size_t i = 0; i < c->nnames; i++)
        ptc_free(c->names[i]);
    ptc_free(c->names);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->flush_lock);
    ptc_free(c);
}

int ptc_dataset_audit_counts(ptc_store *store, const char *name, uint64_t gen, uint64_t seed,
                             uint64_t epoch, uint64_t samples, ptc_dataset_audit_result *out)
{
    size_t nlen = 0;
    PTC_TRY(check_name(name, &nlen));
    memset(out, 0, sizeof *out);
    out->samples = samples;
    MDB_dbi dbi;
    int rc = ptc_store_dbi_open(store, PTC_DATASET_DB_COUNTS, 0, &dbi);
    if (rc == PTC_E_NOTFOUND) { /* read-only store that never counted */
        out->missing = samples;
        return PTC_OK;
    }
    PTC_TRY(rc);
    MDB_txn *txn;
    int mrc = mdb_txn_begin(ptc_store_env(store), NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, "dataset counts");
    MDB_cursor *cur;
    mrc = mdb_cursor_open(txn, dbi, &cur);
    if (mrc) {
        mdb_txn_abort(txn);
        return ptc_store_mdb_error(mrc, "dataset counts");
    }
    uint8_t k[COUNT_NAME_MAX + KEY_TAIL];
    size_t klen = make_key(k, name, nlen, gen, seed, epoch, 0), plen = klen - 8;
    MDB_val key = {klen, k}, val;
    for (mrc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); mrc == 0;
         mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (key.mv_size != klen || memcmp(key.mv_data, k, plen) != 0)
            break;
        uint64_t id = get_be64((const uint8_t *)key.mv_data + plen), count = 0;
        if (val.mv_size != 8 || id >= samples) {
            rc = ptc_error_set(PTC_E_STORE,
                               "dataset counts of '%s' hold record %llu of a dataset of %llu",
                               name, (unsigned long long)id, (unsigned long long)samples);
            break;
        }
        for (int b = 7; b >= 0; b--)
            count = count << 8 | ((const uint8_t *)val.mv_data)[b];
        if (count == 1)
            out->once++;
        else if (count > 1)
            out->repeated++;
    }
    if (rc == PTC_OK && mrc != 0 && mrc != MDB_NOTFOUND)
        rc = ptc_store_mdb_error(mrc, "dataset counts");
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (rc == PTC_OK)
        out->missing = samples - out->once - out->repeated;
    return rc;
}
