/* Reference strided copy: one element at a time, odometer over the indices.
 * This loop is the specification the optimized paths are tested against. */
#include <string.h>

#include "kernels/pack.h"

static void row_major(int ndim, const int64_t *ext, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= ext[d];
    }
}

int ptc_pack_copy_ref(void *dst, const int64_t *dst_strides, const void *src,
                      const int64_t *src_strides, const int64_t *extents, int ndim,
                      size_t elem_size)
{
    if (ndim < 0 || ndim > PTC_MAX_DIMS || elem_size == 0)
        return ptc_error_set(PTC_E_INVAL, "pack: bad ndim %d or element size %zu", ndim,
                             elem_size);
    int64_t ds[PTC_MAX_DIMS], ss[PTC_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (extents[d] < 0)
            return ptc_error_set(PTC_E_INVAL, "pack: negative extent in dim %d", d);
        if (extents[d] == 0)
            return PTC_OK;
    }
    row_major(ndim, extents, ds);
    row_major(ndim, extents, ss);
    if (dst_strides)
        memcpy(ds, dst_strides, sizeof(int64_t) * (size_t)ndim);
    if (src_strides)
        memcpy(ss, src_strides, sizeof(int64_t) * (size_t)ndim);

    int64_t idx[PTC_MAX_DIMS] = {0};
    for (;;) {
        int64_t so = 0, dof = 0;
        for (int d = 0; d < ndim; d++) {
            so += idx[d] * ss[d];
            dof += idx[d] * ds[d];
        }
        memcpy((char *)dst + dof * (int64_t)elem_size,
               (const char *)src + so * (int64_t)elem_size, elem_size);
        int d = ndim - 1;
        while (d >= 0 && ++idx[d] == extents[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    return PTC_OK;
}
