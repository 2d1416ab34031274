/* Sub-boxes of a piece that land in a local element range: how executors
 * fill a target shard chunk by chunk without materialising it whole. */
#include "base/piecewalk_internal.h"
#include "base/util_internal.h"

static int64_t local_at(const ptc_piece *p, const int64_t *ext, int64_t k)
{
    int64_t off = p->local_offset;
    for (int d = p->box.ndim - 1; d >= 0; d--) {
        int64_t e = ext[d];
        off += (k % e) * p->local_stride[d];
        k /= e;
    }
    return off;
}

/* first box-order index k in [0, vol] with local(k) >= x */
static int64_t lower(const ptc_piece *p, const int64_t *ext, int64_t vol, int64_t x)
{
    int64_t lo = 0, hi = vol;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (local_at(p, ext, mid) < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool ptc_piece_is_monotone(const ptc_piece *p)
{
    /* local(k+1) > local(k) for all k iff, for every dimension d with
     * extent > 1, stride[d] exceeds the span of the dimensions after it */
    int64_t span = 0;
    for (int d = p->box.ndim - 1; d >= 0; d--) {
        int64_t e = p->box.hi[d] - p->box.lo[d];
        if (e <= 1)
            continue;
        if (p->local_stride[d] <= span)
            return false;
        span += (e - 1) * p->local_stride[d];
    }
    return true;
}

int ptc_piece_walk_range(const ptc_piece *p, int64_t a, int64_t b,
                         int (*fn)(const ptc_piece *sub, void *user), void *user)
{
    int nd = p->box.ndim;
    int64_t ext[PTC_MAX_DIMS];
    int64_t vol = ptc_box_volume(&p->box);
    for (int d = 0; d < nd; d++)
        ext[d] = p->box.hi[d] - p->box.lo[d];
    if (vol == 0 || b <= a)
        return PTC_OK;
    int64_t k0 = lower(p, ext, vol, a), k1 = lower(p, ext, vol, b);
    if (k0 >= k1)
        return PTC_OK;
    ptc_box rel[2 * PTC_MAX_DIMS];
    size_t n = 0;
    PTC_TRY(ptc_flat_to_boxes(rel, &n, nd, ext, k0, k1));
    for (size_t i = 0; i < n; i++) {
        ptc_box g = rel[i];
        for (int d = 0; d < nd; d++) {
            g.lo[d] += p->box.lo[d];
            g.hi[d] += p->box.lo[d];
        }
        ptc_piece sub;
        ptc_piece_restrict(&sub, p, &g);
        PTC_TRY(fn(&sub, user));
    }
    return PTC_OK;
}
