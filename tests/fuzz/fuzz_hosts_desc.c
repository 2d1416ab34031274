/* Fuzz the decoder of a version's description that a host holding a part
 * of a version across hosts sends to a host holding none
 * (ptc_reshard_hosts_desc_decode, reshard/reshard_hosts_version.c): any
 * input decodes or fails cleanly with PTC_E_FORMAT (or PTC_E_NOMEM); a
 * decoded description encodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf_internal.h"
#include "reshard/reshard_internal.h"

static void check(bool ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_reshard_hosts_desc d;
    int rc = ptc_reshard_hosts_desc_decode(data, size, &d);
    if (rc != PTC_OK) {
        check(rc == PTC_E_FORMAT || rc == PTC_E_NOMEM);
        return 0;
    }
    for (size_t i = 0; i < d.ntensors; i++)
        check(d.tensors[i].dtype < PTC_DTYPE_COUNT && d.tensors[i].ndim >= 0 &&
              d.tensors[i].ndim <= PTC_MAX_DIMS);
    for (size_t i = 0; i < d.nshards; i++) {
        const ptc_layout_explicit_shard *sh = &d.shards[i];
        check(sh->rank >= 0 && sh->ndim >= 0 && sh->ndim <= PTC_MAX_DIMS);
        for (int k = 0; k < sh->ndim; k++)
            check(sh->shape[k] >= 0);
        for (size_t k = 0; k < sh->npieces; k++)
            check(sh->pieces[k].box.ndim >= 0 && sh->pieces[k].box.ndim <= PTC_MAX_DIMS);
    }
    ptc_buf b = {0};
    check(ptc_reshard_hosts_desc_encode(&b, d.config, d.rules, d.record, d.tensors, d.ntensors,
                                        d.shards, d.nshards) == PTC_OK);
    check(b.len == size && memcmp(b.p, data, size) == 0);
    ptc_buf_free(&b);
    ptc_reshard_hosts_desc_free(&d);
    return 0;
}
