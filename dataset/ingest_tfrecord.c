/* TFRecord framing: u64 LE length, u32 LE masked CRC32C of the 8 length
 * bytes, the data, u32 LE masked CRC32C of the data. */
#include <string.h>

#include "dataset/ingest_internal.h"
#include "ptc/crc32c.h"
#include "base/util_internal.h"

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t get_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ptc_ingest_tfrecord_next(ptc_ingest *r, const uint8_t **data, size_t *len, bool *got)
{
    struct ingest_src *s = &r->src;
    unsigned long long idx = (unsigned long long)r->in_record;
    unsigned long long at = (unsigned long long)(s->base + s->pos);
    PTC_TRY(ptc_ingest_src_fill(s, 12));
    size_t avail = s->end - s->pos;
    if (avail == 0) {
        *got = false;
        return PTC_OK;
    }
    if (avail < 12)
        return ptc_error_set(PTC_E_FORMAT, "%s: record %llu at byte %llu: truncated header",
                             s->name, idx, at);
    const uint8_t *h = s->data + s->pos;
    if (ptc_crc32c_mask(ptc_crc32c(0, h, 8)) != get_u32le(h + 8))
        return ptc_error_set(PTC_E_CHECKSUM, "%s: record %llu at byte %llu: length crc mismatch",
                             s->name, idx, at);
    uint64_t n = get_u64le(h);
    if (n > PTC_INGEST_MAX_RECORD)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: record %llu at byte %llu: length %llu is over %llu bytes",
                             s->name, idx, at, (unsigned long long)n,
                             (unsigned long long)PTC_INGEST_MAX_RECORD);
    size_t frame = 12 + (size_t)n + 4;
    PTC_TRY(ptc_ingest_src_fill(s, frame));
    if (s->end - s->pos < frame)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: record %llu at byte %llu: truncated (%llu data bytes expected)",
                             s->name, idx, at, (unsigned long long)n);
    const uint8_t *d = s->data + s->pos + 12;
    if (ptc_crc32c_mask(ptc_crc32c(0, d, (size_t)n)) != get_u32le(d + n))
        return ptc_error_set(PTC_E_CHECKSUM, "%s: record %llu at byte %llu: data crc mismatch",
                             s->name, idx, at);
    *data = d;
    *len = (size_t)n;
    s->pos += frame;
    *got = true;
    return PTC_OK;
}
