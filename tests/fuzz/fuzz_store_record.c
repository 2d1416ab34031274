/* Fuzz the store's metadata records as a corrupt data.mdb hands them out
 * (docs/format.md §2, §2.5): byte 0 picks the kind (version, tensor, shard,
 * summary), byte 1 the key length; then the key, then the value. Each is
 * decoded as a format-1 record (no checksum), then sealed with its sum and
 * decoded as a format-2 record (the checksum path), and checked unsealed
 * against the sum of another key (it must be refused). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/store/store_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode(ptc_store *s, unsigned fmt, unsigned tag, const MDB_val *k, const MDB_val *v)
{
    if (tag == PTC_REC_VERSION) {
        ptc_version_rec r;
        if (ptc_store_version_rec_get(s, fmt, k, v, &r, NULL) == PTC_OK)
            ptc_version_rec_free(&r);
    } else if (tag == PTC_REC_TENSOR) {
        ptc_tensor_rec t;
        if (ptc_store_tensor_rec_get(s, fmt, k, v, &t, NULL) == PTC_OK)
            ptc_tensor_rec_free(&t);
    } else if (tag == PTC_REC_SHARD) {
        ptc_shard_rec r;
        memset(&r, 0, sizeof r);
        if (ptc_store_shard_rec_get(s, fmt, k, v, &r, NULL) == PTC_OK)
            ptc_shard_rec_free(&r);
    } else {
        size_t n;
        ptc_store_summary sm;
        if (ptc_store_rec_open(s, fmt, PTC_REC_SUMMARY, k, v, &n, NULL) == PTC_OK)
            ptc_store_summary_decode(v->mv_data, n, &sm);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned tag = 1 + data[0] % 4;
    if (tag == 4)
        tag = PTC_REC_SUMMARY;
    size_t klen = data[1];
    if (size - 2 < klen)
        return 0;
    /* a store handle that only names itself: values lie outside any map */
    static ptc_store s;
    s.dir = "fuzz";
    MDB_val k = {klen, (void *)(data + 2)};
    MDB_val v = {size - 2 - klen, (void *)(data + 2 + klen)};
    decode(&s, 1, tag, &k, &v);
    ptc_buf b = {0};
    if (ptc_buf_put(&b, v.mv_data, v.mv_size) == PTC_OK &&
        ptc_rec_seal(&b, 0, tag, k.mv_data, k.mv_size, NULL) == PTC_OK) {
        MDB_val sealed = {b.len, b.p};
        decode(&s, 2, tag, &k, &sealed);
        /* the same record under another key: its sum no longer matches */
        uint8_t other[256];
        memcpy(other, k.mv_data, k.mv_size);
        other[0] ^= 1;
        MDB_val k2 = {k.mv_size, other};
        size_t n;
        if (k.mv_size && ptc_store_rec_open(&s, 2, tag, &k2, &sealed, &n, NULL) == PTC_OK)
            abort();
    }
    ptc_buf_free(&b);
    return 0;
}
