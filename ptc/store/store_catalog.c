/* The dataset catalog record: encoding (record format 2, sealed), decoding
 * of both record formats (untrusted bytes), and the rewrite of a format-1
 * record when a store is upgraded. */
#include <string.h>

#include "ptc/store/store_catalog.h"
#include "base/util_internal.h"

/* Record format 1 (store format 1: no checksum) and 2 (sealed, docs/format.md
 * §2.5); writers write 2. */
#define DS_RECORD_FORMAT 2u

void ds_rec_free(ds_rec *r)
{
    ptc_blob_rec_free(&r->data);
    ptc_blob_rec_free(&r->index);
}

int ds_rec_encode(ptc_buf *b, const char *name, const ds_rec *r, uint64_t *sum)
{
    size_t start = b->len;
    PTC_TRY(ptc_buf_u32(b, DS_RECORD_FORMAT));
    PTC_TRY(ptc_buf_u32(b, 0));
    PTC_TRY(ptc_buf_u64(b, r->id));
    PTC_TRY(ptc_buf_u64(b, r->samples));
    PTC_TRY(ptc_buf_u64(b, (uint64_t)r->created));
    PTC_TRY(ptc_buf_str(b, r->format, strlen(r->format)));
    PTC_TRY(ptc_blob_rec_encode(b, &r->data));
    PTC_TRY(ptc_blob_rec_encode(b, &r->index));
    return ptc_rec_seal(b, start, PTC_REC_DATASET, name, strlen(name), sum);
}

static int ds_fail(const char *name, const char *what)
{
    return ptc_error_set(PTC_E_STORE, "dataset '%s': corrupt catalog record (%s)", name, what);
}

/* The fields of a catalog record (its sum, if any, already checked);
 * @p fmt: the record format the store's format implies (0: either). */
static int ds_rec_decode(ds_rec *r, const char *name, unsigned fmt, const void *data, size_t len)
{
    memset(r, 0, sizeof *r);
    const uint8_t *p = data;
    if (len < 36)
        return ds_fail(name, "truncated");
    uint64_t rf = ptc_le_get(p, 4);
    if ((rf != 1 && rf != DS_RECORD_FORMAT) || (fmt && rf != fmt) || ptc_le_get(p + 4, 4) != 0)
        return ds_fail(name, "unknown record format");
    r->id = ptc_le_get(p + 8, 8);
    r->samples = ptc_le_get(p + 16, 8);
    r->created = (int64_t)ptc_le_get(p + 24, 8);
    uint64_t flen = ptc_le_get(p + 32, 4);
    p += 36;
    len -= 36;
    if (flen > PTC_STORE_DATASET_FORMAT_MAX || flen > len)
        return ds_fail(name, "format text");
    memcpy(r->format, p, (size_t)flen);
    r->format[flen] = 0;
    if (memchr(r->format, 0, (size_t)flen))
        return ds_fail(name, "format text");
    p += flen;
    len -= (size_t)flen;
    int rc;
    if ((rc = ptc_blob_rec_decode(&r->data, &p, &len)) < 0 ||
        (rc = ptc_blob_rec_decode(&r->index, &p, &len)) < 0) {
        ds_rec_free(r);
        return ds_fail(name, ptc_last_error());
    }
    if (len != 0 || r->id == 0 || r->samples > PTC_STORE_DATASET_MAX_RECORDS ||
        r->samples >= UINT64_MAX / 8 || /* the index holds 8 (samples + 1) bytes */
        r->index.raw_length != 8 * (r->samples + 1)) {
        ds_rec_free(r);
        return ds_fail(name, len ? "trailing bytes" : "id, samples or index length");
    }
    return PTC_OK;
}

int ptc_store_dataset_rec_check(const void *data, size_t len)
{
    ds_rec r;
    PTC_TRY(ds_rec_decode(&r, "fuzz", 0, data, len));
    ds_rec_free(&r);
    return PTC_OK;
}

int ds_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
               const char *name, ds_rec *r, uint64_t *sum)
{
    size_t n;
    PTC_TRY(ptc_store_rec_open(s, fmt, PTC_REC_DATASET, k, v, &n, sum));
    return ds_rec_decode(r, name, fmt >= 2 ? 2 : 1, v->mv_data, n);
}

int ptc_store_dataset_rec_upgrade(const MDB_val *k, const MDB_val *v, ptc_buf *out,
                                  uint64_t *sum)
{
    char name[PTC_STORE_DATASET_NAME_MAX + 1];
    if (k->mv_size == 0 || k->mv_size > PTC_STORE_DATASET_NAME_MAX)
        return ptc_error_set(PTC_E_STORE, "dataset catalog: key of %zu bytes", k->mv_size);
    memcpy(name, k->mv_data, k->mv_size);
    name[k->mv_size] = 0;
    ds_rec r;
    PTC_TRY(ds_rec_decode(&r, name, 1, v->mv_data, v->mv_size));
    int rc = ds_rec_encode(out, name, &r, sum);
    ds_rec_free(&r);
    return rc;
}
