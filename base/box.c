/* Boxes, pieces, the split rule, flat-range decomposition. */
#include <string.h>

#include "ptc/box.h"
#include "base/util_internal.h"

void ptc_split(int64_t extent, int64_t n, int64_t i, int64_t *lo, int64_t *hi)
{
    /* c = ceil(S/n) without overflow for S near INT64_MAX */
    int64_t c = extent / n + (extent % n != 0);
    int64_t a, b;
    a = (i > 0 && c > extent / i) ? extent : PTC_MIN(i * c, extent);
    b = (c > extent / (i + 1)) ? extent : PTC_MIN((i + 1) * c, extent);
    *lo = a;
    *hi = b;
}

void ptc_box_full(ptc_box *out, int ndim, const int64_t *shape)
{
    memset(out, 0, sizeof *out);
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        out->hi[d] = shape[d];
}

bool ptc_box_is_empty(const ptc_box *b)
{
    for (int d = 0; d < b->ndim; d++)
        if (b->lo[d] >= b->hi[d])
            return true;
    return false;
}

int64_t ptc_box_volume(const ptc_box *b)
{
    int64_t v = 1;
    for (int d = 0; d < b->ndim; d++) {
        if (b->lo[d] >= b->hi[d])
            return 0;
        v *= b->hi[d] - b->lo[d];
    }
    return v;
}

bool ptc_box_intersect(ptc_box *out, const ptc_box *a, const ptc_box *b)
{
    ptc_box r;
    memset(&r, 0, sizeof r);
    r.ndim = a->ndim;
    bool nonempty = a->ndim == b->ndim;
    for (int d = 0; d < a->ndim; d++) {
        r.lo[d] = a->lo[d] > b->lo[d] ? a->lo[d] : b->lo[d];
        r.hi[d] = a->hi[d] < b->hi[d] ? a->hi[d] : b->hi[d];
        if (r.lo[d] >= r.hi[d]) {
            nonempty = false;
            r.hi[d] = r.lo[d];
        }
    }
    *out = r;
    return nonempty;
}

bool ptc_box_equal(const ptc_box *a, const ptc_box *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d])
            return false;
    return true;
}

void ptc_strides_row_major(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
}

/*
 * Walk [a, b) from the front: at each step take the largest box that starts
 * at the current flat position p and stays inside [p, b): the deepest
 * dimension k at which p is aligned (all coordinates after k are zero) lets
 * us cover whole sub-blocks of size stride[k], as many as fit before b and
 * before dimension k wraps. This greedy cover is minimal: a box contiguous
 * in flat order must have this shape, and each step takes the longest one.
 */
int ptc_flat_to_boxes(ptc_box *out, size_t *n, int ndim, const int64_t *shape,
                      int64_t a, int64_t b)
{
    int64_t st[PTC_MAX_DIMS];
    ptc_strides_row_major(ndim, shape, st);
    int64_t vol = 1;
    for (int d = 0; d < ndim; d++)
        vol *= shape[d];
    *n = 0;
    if (a < 0 || b < a || b > vol)
        return ptc_error_set(PTC_E_RANGE, "flat range [%lld, %lld) outside volume %lld",
                             (long long)a, (long long)b, (long long)vol);
    if (a == b)
        return PTC_OK;
    if (ndim == 0) {
        memset(&out[0], 0, sizeof out[0]);
        *n = 1;
        return PTC_OK;
    }
    int64_t p = a;
    while (p < b) {
        int64_t idx[PTC_MAX_DIMS];
        int64_t r = p;
        for (int d = 0; d < ndim; d++) {
            idx[d] = r / st[d];
            r %= st[d];
        }
        /* deepest aligned level: smallest k such that idx[k+1..] are all 0 */
        int k = ndim - 1;
        while (k > 0 && idx[k] == 0)
            k--;
        /* try from the outermost aligned dimension inward */
        int kk;
        int64_t count = 0;
        for (kk = k; kk < ndim; kk++) {
            /* at level kk we can take whole blocks of st[kk] elements */
            int64_t avail = shape[kk] - idx[kk];
            int64_t fit = (b - p) / st[kk];
            count = avail < fit ? avail : fit;
            if (count > 0)
                break;
        }
        ptc_box *bx = &out[(*n)++];
        memset(bx, 0, sizeof *bx);
        bx->ndim = ndim;
        for (int d = 0; d < ndim; d++) {
            if (d < kk) {
                bx->lo[d] = idx[d];
                bx->hi[d] = idx[d] + 1;
            } else if (d == kk) {
                bx->lo[d] = idx[d];
                bx->hi[d] = idx[d] + count;
            } else {
                bx->lo[d] = 0;
                bx->hi[d] = shape[d];
            }
        }
        p += count * st[kk];
    }
    return PTC_OK;
}

int64_t ptc_piece_local_index(const ptc_piece *p, const int64_t *g)
{
    int64_t off = p->local_offset;
    for (int d = 0; d < p->box.ndim; d++)
        off += (g[d] - p->box.lo[d]) * p->local_stride[d];
    return off;
}

void ptc_piece_restrict(ptc_piece *out, const ptc_piece *p, const ptc_box *sub)
{
    ptc_piece r = *p;
    r.box = *sub;
    r.local_offset = ptc_piece_local_index(p, sub->lo);
    *out = r;
}

int ptc_piece_check(const ptc_piece *p, int ndim, const int64_t *shape, int64_t local_volume)
{
    if (p->box.ndim != ndim)
        return ptc_error_set(PTC_E_INVAL, "piece of %d dimensions, tensor of %d", p->box.ndim,
                             ndim);
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        if (p->box.lo[d] < 0 || p->box.lo[d] > p->box.hi[d] || p->box.hi[d] > shape[d])
            return ptc_error_set(PTC_E_INVAL, "piece box outside the tensor (dim %d: %lld:%lld "
                                 "of %lld)", d, (long long)p->box.lo[d],
                                 (long long)p->box.hi[d], (long long)shape[d]);
        empty |= p->box.lo[d] == p->box.hi[d];
    }
    if (empty)
        return PTC_OK;
    int64_t hi = p->local_offset;
    if (hi < 0)
        return ptc_error_set(PTC_E_INVAL, "piece has a negative local offset");
    for (int d = 0; d < ndim; d++) {
        int64_t t;
        if (p->local_stride[d] < 0 ||
            ptc_mul_overflow_i64(p->box.hi[d] - p->box.lo[d] - 1, p->local_stride[d], &t) ||
            ptc_add_overflow_i64(hi, t, &hi))
            return ptc_error_set(PTC_E_INVAL, "piece has bad local strides");
    }
    if (hi >= local_volume)
        return ptc_error_set(PTC_E_INVAL, "piece reaches local element %lld of %lld",
                             (long long)hi, (long long)local_volume);
    return PTC_OK;
}
