/* Fuzz the store's decoders of untrusted bytes: descriptor buffers (shipped
 * between processes) and the LMDB value records (a corrupt store). The first
 * input byte picks the decoder; the rest is its input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/store/store_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    const int64_t shape[3] = {1000, 1000, 1000};
    switch (data[0] % 4) {
    case 0: {
        uint64_t v;
        ptc_shard_rec *recs;
        size_t cnt;
        if (ptc_desc_decode(p, n, &v, &recs, &cnt) == PTC_OK) {
            for (size_t i = 0; i < cnt; i++) {
                ptc_shard_rec_check(&recs[i], recs[i].npieces ? recs[i].pieces[0].box.ndim : 0,
                                    shape, 4);
                ptc_shard_rec_free(&recs[i]);
            }
            free(recs);
        }
        break;
    }
    case 1: {
        ptc_shard_rec r;
        memset(&r, 0, sizeof r);
        if (ptc_shard_rec_decode(&r, p, n) == PTC_OK) {
            ptc_shard_rec_check(&r, 2, shape, 2);
            ptc_shard_rec_free(&r);
        }
        break;
    }
    case 2: {
        ptc_tensor_rec t;
        if (ptc_tensor_rec_decode(&t, p, n) == PTC_OK)
            ptc_tensor_rec_free(&t);
        break;
    }
    default: {
        ptc_version_rec v;
        if (ptc_version_rec_decode(&v, p, n) == PTC_OK)
            ptc_version_rec_free(&v);
        break;
    }
    }
    return 0;
}
