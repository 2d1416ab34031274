/* Filling a byte range of a shard's local tensor from its pieces.
 *
 * A piece maps the elements of a global box into the local buffer with
 * strides. Given a local element range [a, b), we need the sub-boxes of the
 * piece whose elements land inside [a, b), so that each can be fetched with
 * one box read (from a mapped checkpoint or from the store) straight into
 * its place. Walking the dimensions outermost first: the slices of a piece
 * along dimension d are ordered and do not interleave (every layout we
 * produce has strides at least as large as the span of the inner
 * dimensions), so the slices wholly inside [a, b) form one run, taken as a
 * single box, and at most two slices straddle an end; we recurse into those.
 * The result is at most 2·ndim boxes per piece and range. */
#include <string.h>

#include "ptc/shardfill_internal.h"
#include "ptc/util_internal.h"

struct walk {
    const ptc_piece *p;
    int64_t a, b;
    int64_t span[PTC_MAX_DIMS + 1]; /* span of one slice at dim d */
    ptc_shardfill_fn fn;
    void *user;
};

static int64_t floor_div(int64_t x, int64_t y)
{
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}

static int64_t ceil_div(int64_t x, int64_t y)
{
    return -floor_div(-x, y);
}

static int emit(const struct walk *w, ptc_box *cur, int d, int64_t ilo, int64_t ihi,
                int64_t off)
{
    const ptc_piece *p = w->p;
    ptc_box sub = *cur;
    sub.lo[d] = p->box.lo[d] + ilo;
    sub.hi[d] = p->box.lo[d] + ihi;
    for (int k = d + 1; k < p->box.ndim; k++) {
        sub.lo[k] = p->box.lo[k];
        sub.hi[k] = p->box.hi[k];
    }
    return w->fn(&sub, off + ilo * p->local_stride[d], p->local_stride, w->user);
}

static int walk_dim(const struct walk *w, ptc_box *cur, int d, int64_t off)
{
    const ptc_piece *p = w->p;
    int ndim = p->box.ndim;
    if (d == ndim) {
        if (off >= w->a && off < w->b)
            return w->fn(cur, off, p->local_stride, w->user);
        return PTC_OK;
    }
    int64_t ext = p->box.hi[d] - p->box.lo[d];
    int64_t s = p->local_stride[d];
    int64_t span = w->span[d + 1];
    if (ext == 1 || s == 0) {
        /* a single slice */
        if (off >= w->a && off + span <= w->b)
            return emit(w, cur, d, 0, 1, off);
        if (off + span <= w->a || off >= w->b)
            return PTC_OK;
        cur->lo[d] = p->box.lo[d];
        cur->hi[d] = p->box.lo[d] + 1;
        return walk_dim(w, cur, d + 1, off);
    }
    /* slices i in [0, ext) occupy [off + i*s, off + i*s + span) */
    int64_t full_lo = PTC_MAX(0, ceil_div(w->a - off, s));
    int64_t full_hi = PTC_MIN(ext - 1, floor_div(w->b - off - span, s)); /* inclusive */
    int64_t first = PTC_MAX(0, floor_div(w->a - off - span, s) + 1);   /* ends after a */
    int64_t last = PTC_MIN(ext - 1, ceil_div(w->b - off, s) - 1);      /* starts before b */
    if (first > last)
        return PTC_OK;
    if (full_lo <= full_hi) {
        for (int64_t i = first; i < full_lo; i++) {
            cur->lo[d] = p->box.lo[d] + i;
            cur->hi[d] = cur->lo[d] + 1;
            PTC_TRY(walk_dim(w, cur, d + 1, off + i * s));
        }
        PTC_TRY(emit(w, cur, d, full_lo, full_hi + 1, off));
        for (int64_t i = full_hi + 1; i <= last; i++) {
            cur->lo[d] = p->box.lo[d] + i;
            cur->hi[d] = cur->lo[d] + 1;
            PTC_TRY(walk_dim(w, cur, d + 1, off + i * s));
        }
        return PTC_OK;
    }
    for (int64_t i = first; i <= last; i++) {
        cur->lo[d] = p->box.lo[d] + i;
        cur->hi[d] = cur->lo[d] + 1;
        PTC_TRY(walk_dim(w, cur, d + 1, off + i * s));
    }
    return PTC_OK;
}

int ptc_shardfill_walk(const ptc_piece *p, int64_t a, int64_t b, ptc_shardfill_fn fn,
                       void *user)
{
    if (a >= b || ptc_box_is_empty(&p->box))
        return PTC_OK;
    struct walk w = {.p = p, .a = a, .b = b, .fn = fn, .user = user};
    int ndim = p->box.ndim;
    w.span[ndim] = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t ext = p->box.hi[d] - p->box.lo[d];
        w.span[d] = w.span[d + 1] + (ext - 1) * p->local_stride[d];
    }
    ptc_box cur = p->box;
    return walk_dim(&w, &cur, 0, p->local_offset);
}
