/* Step files as arithmetic: a step file's plan (the step's records, from
 * the dataset step API of ptc/step.h, and their byte offsets), its .idx
 * bytes, the record pieces a byte range covers, and which records a byte
 * range serves. Stateless: everything follows from the dataset's sizes and
 * the epoch order. */
#include <string.h>

#include "base/util_internal.h"
#include "fuse/view_internal.h"

void ptc_view_step_destroy(ptc_view_step *s)
{
    if (!s)
        return;
    ptc_free(s->ids);
    ptc_free(s->offsets);
    ptc_free(s);
}

int ptc_view_step_plan(const ptc_view_dataset *ds, const ptc_dataset_step *st,
                       ptc_view_step **out)
{
    *out = NULL;
    uint64_t lo, hi;
    PTC_TRY(ptc_dataset_step_range(ds->n, st, &lo, &hi));
    uint64_t n = hi - lo;
    if (n > PTC_VIEW_MAX_STEP_RECORDS)
        return ptc_error_set(PTC_E_RANGE, "a step file of %llu records is over the limit of %llu",
                             (unsigned long long)n,
                             (unsigned long long)PTC_VIEW_MAX_STEP_RECORDS);
    ptc_view_step *s = ptc_calloc(1, sizeof *s);
    if (!s)
        return PTC_E_NOMEM;
    int rc = PTC_E_NOMEM;
    s->ids = ptc_malloc((size_t)(n ? n : 1) * sizeof *s->ids);
    s->offsets = ptc_malloc((size_t)(n + 1) * sizeof *s->offsets);
    if (!s->ids || !s->offsets)
        goto out_free;
    rc = ptc_dataset_step_ids(ds->n, st, s->ids, n, &s->n);
    if (rc < 0)
        goto out_free;
    s->offsets[0] = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t size;
        rc = ds->record_size(ds->user, s->ids[i], &size);
        if (rc < 0)
            goto out_free;
        if (__builtin_add_overflow(s->offsets[i], size, &s->offsets[i + 1]) ||
            s->offsets[i + 1] > (uint64_t)INT64_MAX) {
            rc = ptc_error_set(PTC_E_RANGE, "step file larger than 2^63 bytes");
            goto out_free;
        }
    }
    *out = s;
    return PTC_OK;
out_free:
    ptc_view_step_destroy(s);
    return rc;
}

uint64_t ptc_view_step_find(const ptc_view_step *s, uint64_t off)
{
    if (off >= s->offsets[s->n])
        return s->n;
    /* first u with offsets[u] > off; the record is u - 1 */
    uint64_t lo = 0, hi = s->n + 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (s->offsets[mid] <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

void ptc_view_step_idx_read(const ptc_view_step *s, uint64_t off, void *buf, size_t len,
                            size_t *got)
{
    uint64_t size = 8 * (s->n + 1);
    uint8_t *out = buf;
    size_t k = 0;
    for (uint64_t b = off; b < size && k < len; b++, k++)
        out[k] = (uint8_t)(s->offsets[b / 8] >> (8 * (b % 8)));
    *got = k;
}

/* The byte whose reading serves record i: its last byte, or for an empty
 * record the byte before it (byte 0 at the start of the file). */
static uint64_t trigger_byte(const ptc_view_step *s, uint64_t i)
{
    return s->offsets[i + 1] > 0 ? s->offsets[i + 1] - 1 : 0;
}

void ptc_view_step_served(const ptc_view_step *s, uint64_t a, uint64_t b, uint64_t *first,
                          uint64_t *end)
{
    /* first record whose trigger byte is >= a (triggers do not decrease) */
    uint64_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (trigger_byte(s, mid) < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t i = lo;
    while (i < s->n && trigger_byte(s, i) < b)
        i++;
    *first = lo;
    *end = i;
}

int ptc_view_step_pieces(const ptc_view_step *s, uint64_t off, uint64_t end,
                         ptc_view_piece_fn fn, void *ctx)
{
    uint64_t pos = off;
    for (uint64_t i = ptc_view_step_find(s, off); pos < end && i < s->n; i++) {
        uint64_t rlo = s->offsets[i], rhi = s->offsets[i + 1];
        if (rhi <= pos)
            continue; /* empty record */
        uint64_t n = PTC_MIN(end, rhi) - pos;
        PTC_TRY(fn(ctx, s->ids[i], pos - rlo, (size_t)n, pos));
        pos += n;
    }
    return PTC_OK;
}
