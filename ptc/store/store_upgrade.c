/* Upgrading a format-1 store (no record checksums) to format 2 inside the
 * write transaction of its next writer: every record is checked by its
 * decoder, rewritten sealed (docs/format.md §2.5), each version record gains
 * the digest of its records, and the summaries are written, all in that one
 * transaction, so the store is wholly format 1 or wholly format 2. The
 * records are read into memory first (metadata only: a one-time cost of the
 * order of the data.mdb size). */
#include <string.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

/* Every (key, value) of one database, copied. */
typedef struct kv_entry {
    size_t off; /* of the key in bytes; the value follows it */
    uint32_t klen, vlen;
} kv_entry;

typedef struct kv_list {
    ptc_buf bytes;
    kv_entry *e;
    size_t n, cap;
} kv_list;

static void kv_free(kv_list *l)
{
    ptc_buf_free(&l->bytes);
    ptc_free(l->e);
    memset(l, 0, sizeof *l);
}

static int kv_read(ptc_store *s, MDB_txn *txn, MDB_dbi dbi, kv_list *l)
{
    MDB_cursor *c;
    int mrc = mdb_cursor_open(txn, dbi, &c);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    int rc = PTC_OK;
    MDB_val k, v;
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0 && rc == PTC_OK;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if ((rc = ptc_store_val_check(s, &k, &v, "record")) < 0 ||
            (rc = ptc_grow((void **)&l->e, &l->cap, l->n + 1, sizeof *l->e)) < 0)
            break;
        if (v.mv_size > UINT32_MAX) {
            rc = ptc_error_set(PTC_E_STORE, "store %s: record of %zu bytes", s->dir, v.mv_size);
            break;
        }
        l->e[l->n] = (kv_entry){l->bytes.len, (uint32_t)k.mv_size, (uint32_t)v.mv_size};
        if ((rc = ptc_buf_put(&l->bytes, k.mv_data, k.mv_size)) < 0 ||
            (rc = ptc_buf_put(&l->bytes, v.mv_data, v.mv_size)) < 0)
            break;
        l->n++;
    }
    if (rc == PTC_OK && mrc != MDB_NOTFOUND)
        rc = ptc_store_mdb_error(mrc, s->dir);
    mdb_cursor_close(c);
    return rc;
}

static MDB_val kv_key(const kv_list *l, size_t i)
{
    return (MDB_val){l->e[i].klen, l->bytes.p + l->e[i].off};
}

static MDB_val kv_val(const kv_list *l, size_t i)
{
    return (MDB_val){l->e[i].vlen, l->bytes.p + l->e[i].off + l->e[i].klen};
}

static int put_buf(ptc_store *s, MDB_txn *txn, MDB_dbi dbi, const MDB_val *k, const ptc_buf *b)
{
    MDB_val v = {b->len, b->p};
    int mrc = mdb_put(txn, dbi, (MDB_val *)k, &v, 0);
    return mrc ? ptc_store_mdb_error(mrc, s->dir) : PTC_OK;
}

/* Seal the tensor or shard records [*i, …) of version @p ver (keys in
 * order), folding their sums into *digest. */
static int seal_records(ptc_store *s, MDB_txn *txn, MDB_dbi dbi, unsigned tag,
                        const kv_list *l, size_t *i, uint64_t ver, uint64_t *digest,
                        uint64_t *count)
{
    ptc_buf b = {0};
    int rc = PTC_OK;
    for (; *i < l->n && rc == PTC_OK; (*i)++) {
        MDB_val k = kv_key(l, *i), v = kv_val(l, *i);
        if (k.mv_size < 8 || ptc_key_get_u64(k.mv_data) != ver)
            break;
        /* the decoder checks what is sealed: a corrupt record is not blessed */
        if (tag == PTC_REC_TENSOR) {
            ptc_tensor_rec t;
            if ((rc = ptc_store_tensor_rec_get(s, 1, &k, &v, &t, NULL)) == PTC_OK)
                ptc_tensor_rec_free(&t);
        } else {
            ptc_shard_rec r;
            memset(&r, 0, sizeof r);
            if ((rc = ptc_store_shard_rec_get(s, 1, &k, &v, &r, NULL)) == PTC_OK)
                ptc_shard_rec_free(&r);
        }
        uint64_t sum;
        b.len = 0;
        if (rc < 0 || (rc = ptc_buf_put(&b, v.mv_data, v.mv_size)) < 0 ||
            (rc = ptc_rec_seal(&b, 0, tag, k.mv_data, k.mv_size, &sum)) < 0 ||
            (rc = put_buf(s, txn, dbi, &k, &b)) < 0)
            break;
        *digest = ptc_rec_fold(*digest, sum);
        (*count)++;
    }
    ptc_buf_free(&b);
    return rc;
}

static int upgrade_versions(ptc_store *s, MDB_txn *txn)
{
    kv_list vs = {0}, ts = {0}, ss = {0};
    ptc_store_summary sm = {0};
    ptc_buf b = {0};
    int rc;
    if ((rc = kv_read(s, txn, s->dbi_versions, &vs)) < 0 ||
        (rc = kv_read(s, txn, s->dbi_tensors, &ts)) < 0 ||
        (rc = kv_read(s, txn, s->dbi_shards, &ss)) < 0)
        goto out_free;
    size_t ti = 0, si = 0;
    for (size_t i = 0; i < vs.n && rc == PTC_OK; i++) {
        MDB_val k = kv_key(&vs, i), v = kv_val(&vs, i);
        ptc_version_rec r;
        if ((rc = ptc_store_version_rec_get(s, 1, &k, &v, &r, NULL)) < 0)
            break;
        uint64_t ver = ptc_key_get_u64(k.mv_data), nt = 0, digest = 0;
        /* records of versions without a version record (none should exist)
         * stay as they are: no reader reaches them */
        while (ti < ts.n && ptc_key_get_u64(kv_key(&ts, ti).mv_data) < ver)
            ti++;
        while (si < ss.n && ptc_key_get_u64(kv_key(&ss, si).mv_data) < ver)
            si++;
        r.shard_count = 0;
        if ((rc = seal_records(s, txn, s->dbi_tensors, PTC_REC_TENSOR, &ts, &ti, ver, &digest,
                               &nt)) == PTC_OK)
            rc = seal_records(s, txn, s->dbi_shards, PTC_REC_SHARD, &ss, &si, ver, &digest,
                              &r.shard_count);
        uint64_t sum = 0;
        r.digest = digest;
        b.len = 0;
        if (rc == PTC_OK && nt != r.tensor_count)
            rc = ptc_error_set(PTC_E_STORE, "store %s: version %llu has %llu of %llu tensor "
                               "records; not upgraded", s->dir, (unsigned long long)ver,
                               (unsigned long long)nt, (unsigned long long)r.tensor_count);
        if (rc == PTC_OK && (rc = ptc_version_rec_encode(&b, &r)) == PTC_OK &&
            (rc = ptc_rec_seal(&b, 0, PTC_REC_VERSION, k.mv_data, k.mv_size, &sum)) == PTC_OK)
            rc = put_buf(s, txn, s->dbi_versions, &k, &b);
        ptc_version_rec_free(&r);
        sm.count++;
        sm.newest = ver;
        sm.xsum ^= sum;
    }
    if (rc == PTC_OK)
        rc = ptc_store_summary_put(s, txn, PTC_SUMMARY_VERSIONS, &sm);
out_free:
    ptc_buf_free(&b);
    kv_free(&vs);
    kv_free(&ts);
    kv_free(&ss);
    return rc;
}

static int upgrade_catalog(ptc_store *s, MDB_txn *txn)
{
    ptc_store_summary sm = {0};
    MDB_dbi dbi;
    int rc = PTC_OK, mrc = mdb_dbi_open(txn, PTC_DB_DATASETS, 0, &dbi);
    if (mrc && mrc != MDB_NOTFOUND)
        return ptc_store_mdb_error(mrc, s->dir);
    if (mrc == 0) {
        kv_list l = {0};
        ptc_buf b = {0};
        rc = kv_read(s, txn, dbi, &l);
        for (size_t i = 0; i < l.n && rc == PTC_OK; i++) {
            MDB_val k = kv_key(&l, i), v = kv_val(&l, i);
            uint64_t sum;
            b.len = 0;
            if ((rc = ptc_store_dataset_rec_upgrade(&k, &v, &b, &sum)) == PTC_OK &&
                (rc = put_buf(s, txn, dbi, &k, &b)) == PTC_OK) {
                sm.count++;
                sm.xsum ^= sum;
            }
        }
        ptc_buf_free(&b);
        kv_free(&l);
    }
    return rc == PTC_OK ? ptc_store_summary_put(s, txn, PTC_SUMMARY_DATASETS, &sm) : rc;
}

int ptc_store_upgrade_txn(ptc_store *s, MDB_txn *txn)
{
    unsigned fmt;
    PTC_TRY(ptc_store_format_txn(s, txn, &fmt));
    if (fmt >= PTC_STORE_FORMAT_VERSION)
        return PTC_OK;
    int rc;
    if ((rc = upgrade_versions(s, txn)) < 0 || (rc = upgrade_catalog(s, txn)) < 0)
        return ptc_error_set(rc, "upgrading store %s to format %u: %s", s->dir,
                             PTC_STORE_FORMAT_VERSION, ptc_last_error());
    ptc_log(PTC_LOG_INFO, "store %s upgraded to format %u (metadata checksums)", s->dir,
            PTC_STORE_FORMAT_VERSION);
    return ptc_store_format_put(s, txn, PTC_STORE_FORMAT_VERSION);
}
