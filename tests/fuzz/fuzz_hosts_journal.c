/* Fuzz the two decoders of a host's journal (docs/format.md §10), both
 * untrusted bytes read from a store: the 56-byte record
 * (ptc_hosts_rec_decode) and the "ptc.hosts" metadata of a local version
 * (ptc_hosts_meta_parse). The first byte picks the decoder. Any input
 * decodes or fails cleanly with PTC_E_FORMAT; a decoded record encodes to
 * the same bytes, and parsed metadata formats to text that parses back to
 * the same fields. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/ckpt/ckpt_hosts.h"

static void check(bool ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    ptc_hosts_rec r, q;
    if (data[0] & 1) {
        int rc = ptc_hosts_rec_decode(data + 1, size - 1, &r);
        if (rc != PTC_OK) {
            check(rc == PTC_E_FORMAT);
            return 0;
        }
        uint8_t b[PTC_HOSTS_REC_SIZE];
        ptc_hosts_rec_encode(&r, b);
        check(memcmp(b, data + 1, sizeof b) == 0);
        check(r.host < r.hosts && r.replicas < r.hosts && r.version && r.local);
        return 0;
    }
    int rc = ptc_hosts_meta_parse((const char *)data + 1, size - 1, &r);
    if (rc != PTC_OK) {
        check(rc == PTC_E_FORMAT || rc == PTC_E_NOMEM);
        return 0;
    }
    char text[160];
    check(ptc_hosts_meta_format(&r, text, sizeof text) == PTC_OK);
    check(ptc_hosts_meta_parse(text, strlen(text), &q) == PTC_OK);
    check(q.host == r.host && q.hosts == r.hosts && q.replicas == r.replicas &&
          q.version == r.version && q.attempt == r.attempt);
    return 0;
}
