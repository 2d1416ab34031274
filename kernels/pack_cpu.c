/* Optimized CPU strided copy: simplify the iteration space, then memcpy the
 * runs that are contiguous in both buffers. Must equal ptc_pack_copy_ref(). */
#include <string.h>

#include "kernels/pack.h"

int ptc_pack_simplify(int64_t *out_ext, int64_t *out_dst, int64_t *out_src, int *out_ndim,
                      bool *empty, const int64_t *dst_strides, const int64_t *src_strides,
                      const int64_t *extents, int ndim, size_t elem_size)
{
    if (ndim < 0 || ndim > PTC_MAX_DIMS || elem_size == 0)
        return ptc_error_set(PTC_E_INVAL, "pack: bad ndim %d or element size %zu", ndim,
                             elem_size);
    *empty = false;
    int64_t rm[PTC_MAX_DIMS];
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (extents[d] < 0)
            return ptc_error_set(PTC_E_INVAL, "pack: negative extent in dim %d", d);
        if (extents[d] == 0)
            *empty = true;
        rm[d] = s;
        s *= extents[d] ? extents[d] : 1;
    }
    int n = 0;
    for (int d = 0; d < ndim; d++) {
        if (extents[d] == 1)
            continue; /* a unit dimension never moves the index */
        int64_t ds = dst_strides ? dst_strides[d] : rm[d];
        int64_t ss = src_strides ? src_strides[d] : rm[d];
        if (n > 0 && out_dst[n - 1] == ds * extents[d] && out_src[n - 1] == ss * extents[d]) {
            /* previous (outer) dim steps exactly over this one in both buffers */
            out_ext[n - 1] *= extents[d];
            out_dst[n - 1] = ds;
            out_src[n - 1] = ss;
            continue;
        }
        out_ext[n] = extents[d];
        out_dst[n] = ds;
        out_src[n] = ss;
        n++;
    }
    *out_ndim = n;
    return PTC_OK;
}

/* Strided 1-d copy with a compile-time element size where it is common. */
static void copy_row(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, size_t es)
{
    switch (es) {
#define ROW(T)                                                             \
    for (int64_t i = 0; i < n; i++) {                                      \
        T v;                                                               \
        memcpy(&v, s + i * ss * (int64_t)sizeof(T), sizeof(T));            \
        memcpy(d + i * ds * (int64_t)sizeof(T), &v, sizeof(T));            \
    }                                                                      \
    break;
    case 1: ROW(uint8_t)
    case 2: ROW(uint16_t)
    case 4: ROW(uint32_t)
    case 8: ROW(uint64_t)
#undef ROW
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(d + i * ds * (int64_t)es, s + i * ss * (int64_t)es, es);
    }
}

int ptc_pack_copy(void *dst, const int64_t *dst_strides, const void *src,
                  const int64_t *src_strides, const int64_t *extents, int ndim,
                  size_t elem_size)
{
    int64_t ext[PTC_MAX_DIMS], ds[PTC_MAX_DIMS], ss[PTC_MAX_DIMS];
    int n;
    bool empty;
    int rc = ptc_pack_simplify(ext, ds, ss, &n, &empty, dst_strides, src_strides, extents,
                               ndim, elem_size);
    if (rc < 0 || empty)
        return rc;
    if (n == 0) {
        memcpy(dst, src, elem_size);
        return PTC_OK;
    }
    const int64_t es = (int64_t)elem_size;
    /* innermost dimension: one memcpy when contiguous in both buffers */
    const int64_t inner = ext[n - 1];
    const bool contiguous = ds[n - 1] == 1 && ss[n - 1] == 1;
    int64_t idx[PTC_MAX_DIMS] = {0};
    const char *sp = src;
    char *dp = dst;
    for (;;) {
        if (contiguous)
            memcpy(dp, sp, (size_t)(inner * es));
        else
            copy_row(dp, ds[n - 1], sp, ss[n - 1], inner, elem_size);
        int d = n - 2;
        while (d >= 0) {
            sp += ss[d] * es;
            dp += ds[d] * es;
            if (++idx[d] < ext[d])
                break;
            sp -= ss[d] * es * ext[d];
            dp -= ds[d] * es * ext[d];
            idx[d--] = 0;
        }
        if (d < 0)
            break;
    }
    return PTC_OK;
}
