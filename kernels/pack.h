/**
 * @file pack.h
 * @brief Strided n-d copy ("pack/unpack"): the kernel behind every box read,
 * export and reshard.
 *
 * Copies an n-d box of @p extents elements from @p src to @p dst. Element
 * (i_0, ..., i_{n-1}) is read at src + elem_size * sum_d i_d * src_strides[d]
 * and written at dst + elem_size * sum_d i_d * dst_strides[d]. Strides are in
 * elements and may be any value (negative, zero on the source for broadcast);
 * the destination elements of distinct indices must not overlap and must not
 * overlap the source. ndim 0 copies one element. An extent of 0 copies
 * nothing.
 *
 * ptc_pack_copy_ref() is the specification (a plain loop per element);
 * ptc_pack_copy() must produce the same bytes: it drops unit dimensions,
 * merges dimensions that are contiguous in both buffers and memcpy()s the
 * contiguous runs. ptc_pack_copy_cuda() does the same on device buffers.
 *
 * @note Thread safety: pure functions on caller buffers; safe from any thread.
 */
#ifndef PTC_KERNELS_PACK_H
#define PTC_KERNELS_PACK_H

#include "ptc/box.h"
#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t is `struct CUstream_st *` */

/**
 * Reference strided copy (the spec).
 * @param dst          destination base pointer
 * @param dst_strides  @p ndim element strides of the destination (NULL: row-major of @p extents)
 * @param src          source base pointer
 * @param src_strides  @p ndim element strides of the source (NULL: row-major of @p extents)
 * @param extents      @p ndim extents (each >= 0)
 * @param ndim         0..PTC_MAX_DIMS
 * @param elem_size    bytes per element (>= 1)
 * @return PTC_OK, or PTC_E_INVAL (ndim out of range, elem_size 0, negative extent).
 */
PTC_API int ptc_pack_copy_ref(void *dst, const int64_t *dst_strides, const void *src,
                              const int64_t *src_strides, const int64_t *extents,
                              int ndim, size_t elem_size);

/** Optimized CPU strided copy; same contract and bytes as ptc_pack_copy_ref(). */
PTC_API int ptc_pack_copy(void *dst, const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides, const int64_t *extents, int ndim,
                          size_t elem_size);

/**
 * CUDA strided copy between device buffers (or any buffers the device can
 * address), enqueued on @p stream (NULL: the legacy default stream). Same
 * contract as ptc_pack_copy_ref(); strides arrays are host memory.
 * Defined only in builds with CUDA (PTC_WITH_CUDA in ptc/build_config.h);
 * callers guard their use with that macro.
 * @return PTC_OK, PTC_E_INVAL, or PTC_E_CUDA (launch failed; detail names the
 *         CUDA error). Asynchronous: errors of the kernel's execution show up
 *         at the next synchronisation.
 */
PTC_API int ptc_pack_copy_cuda(void *dst, const int64_t *dst_strides, const void *src,
                               const int64_t *src_strides, const int64_t *extents,
                               int ndim, size_t elem_size, struct CUstream_st *stream);

/**
 * Simplify a copy's iteration space (shared by the CPU and CUDA paths):
 * fill in row-major strides for NULL, drop unit extents and merge adjacent
 * dimensions that are contiguous in both buffers. Writes the reduced
 * extents/strides (room for PTC_MAX_DIMS) and returns the reduced ndim in
 * @p out_ndim (0 means a single element). @p empty is set when some extent
 * is 0.
 * @return PTC_OK or PTC_E_INVAL.
 */
PTC_API int ptc_pack_simplify(int64_t *out_ext, int64_t *out_dst, int64_t *out_src,
                              int *out_ndim, bool *empty, const int64_t *dst_strides,
                              const int64_t *src_strides, const int64_t *extents, int ndim,
                              size_t elem_size);

#ifdef __cplusplus
}
#endif
#endif
