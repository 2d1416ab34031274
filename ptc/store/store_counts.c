/* The persistent count map of served dataset records, kept in its own named
 * LMDB database of the store ("ptc.dataset.counts"): key = name, 0x00,
 * generation, seed, epoch, id (u64 big-endian, so one (name, generation,
 * seed, epoch) is a contiguous key range; the generation is the dataset's
 * catalog id); value = u64 LE count (docs/format.md). Callers buffer
 * serving events and add them in one write transaction per batch, so a
 * read path never waits for LMDB. */
#include <lmdb.h>
#include <string.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

#define KEY_TAIL 33 /* 0x00 + generation, seed, epoch, id */
#define NAME_MAX_LEN 255

static int check_name(const char *name, size_t *len)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > NAME_MAX_LEN)
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

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | p[b];
    return v;
}

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

int ptc_store_dataset_counts_open(ptc_store *s)
{
    /* nothing is written here: the map is made by the first counts_add, so
     * a mount that serves no dataset record never writes the database (it
     * may be on a full disk) */
    MDB_dbi dbi;
    int rc = ptc_store_dbi_find(s, PTC_STORE_DB_COUNTS, &dbi);
    if (rc == PTC_E_NOTFOUND && !ptc_store_readonly(s)) {
        ptc_error_clear();
        return PTC_OK;
    }
    return rc;
}

struct add_job {
    ptc_store *s;
    MDB_dbi dbi;
    const char *const *names;
    const ptc_store_dataset_count *ev;
    size_t n;
};

static int add_txn(MDB_txn *txn, void *user)
{
    struct add_job *j = user;
    uint8_t k[NAME_MAX_LEN + KEY_TAIL];
    for (size_t i = 0; i < j->n; i++) {
        const ptc_store_dataset_count *e = &j->ev[i];
        const char *name = j->names[e->name];
        size_t nlen = 0;
        PTC_TRY(check_name(name, &nlen));
        MDB_val key = {make_key(k, name, nlen, e->gen, e->seed, e->epoch, e->id), k};
        MDB_val val;
        uint64_t count = 0;
        int mrc = mdb_get(txn, j->dbi, &key, &val);
        if (mrc == 0)
            PTC_TRY(ptc_store_val_check(j->s, NULL, &val, "dataset count"));
        if (mrc == 0 && val.mv_size == 8)
            count = get_le64(val.mv_data);
        else if (mrc == 0 || mrc != MDB_NOTFOUND)
            return mrc ? ptc_store_mdb_error(mrc, "dataset counts")
                       : ptc_error_set(PTC_E_STORE, "dataset counts: bad value size %zu",
                                       val.mv_size);
        count += e->count;
        uint8_t out[8];
        for (int b = 0; b < 8; b++)
            out[b] = (uint8_t)(count >> (8 * b));
        val.mv_size = 8;
        val.mv_data = out;
        mrc = mdb_put(txn, j->dbi, &key, &val, 0);
        if (mrc)
            return ptc_store_mdb_error(mrc, "dataset counts");
    }
    return PTC_OK;
}

int ptc_store_dataset_counts_add(ptc_store *s, const char *const *names,
                                 const ptc_store_dataset_count *ev, size_t n)
{
    if (n == 0)
        return PTC_OK;
    if (ptc_store_readonly(s))
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", ptc_store_dir(s));
    struct add_job j = {s, 0, names, ev, n};
    PTC_TRY(ptc_store_dbi_open(s, PTC_STORE_DB_COUNTS, 0, &j.dbi));
    return ptc_store_write_txn(s, add_txn, &j);
}

int ptc_store_dataset_counts_each(ptc_store *s, const char *name, uint64_t gen, uint64_t seed,
                                  uint64_t epoch,
                                  int (*fn)(uint64_t id, uint64_t count, void *user),
                                  void *user)
{
    size_t nlen = 0;
    PTC_TRY(check_name(name, &nlen));
    MDB_dbi dbi;
    int rc = ptc_store_dbi_find(s, PTC_STORE_DB_COUNTS, &dbi);
    if (rc == PTC_E_NOTFOUND) { /* a store that never counted */
        ptc_error_clear();
        return PTC_OK;
    }
    PTC_TRY(rc);
    MDB_txn *txn;
    int mrc = mdb_txn_begin(ptc_store_env(s), NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, "dataset counts");
    MDB_cursor *cur;
    mrc = mdb_cursor_open(txn, dbi, &cur);
    if (mrc) {
        mdb_txn_abort(txn);
        return ptc_store_mdb_error(mrc, "dataset counts");
    }
    uint8_t k[NAME_MAX_LEN + KEY_TAIL];
    size_t klen = make_key(k, name, nlen, gen, seed, epoch, 0), plen = klen - 8;
    MDB_val key = {klen, k}, val;
    for (mrc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); mrc == 0;
         mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if ((rc = ptc_store_val_check(s, &key, &val, "dataset count")) < 0)
            break;
        if (key.mv_size != klen || memcmp(key.mv_data, k, plen) != 0)
            break;
        if (val.mv_size != 8) {
            rc = ptc_error_set(PTC_E_STORE, "dataset counts: bad value size %zu", val.mv_size);
            break;
        }
        rc = fn(get_be64((const uint8_t *)key.mv_data + plen), get_le64(val.mv_data), user);
        if (rc != PTC_OK)
            break;
    }
    if (rc == PTC_OK && mrc != 0 && mrc != MDB_NOTFOUND)
        rc = ptc_store_mdb_error(mrc, "dataset counts");
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return rc;
}
