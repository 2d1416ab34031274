/**
 * @file box.h
 * @brief Boxes, pieces, the split rule and flat-range decomposition.
 *
 * A box is a half-open range per dimension of a global tensor. A shard is a
 * list of pieces; a piece is a box of the global tensor plus where its
 * elements live in the shard's local buffer: element g of the box (global
 * index vector) is at local element
 *   local_offset + sum_d (g[d] - box.lo[d]) * local_stride[d].
 * This covers both ordinary shards (local strides = the local tensor's
 * row-major strides) and zero-sharded flat shards (strides of the box itself,
 * so the box's elements are contiguous in the 1-D local tensor).
 *
 * @note Thread safety: pure functions on caller-owned values; safe.
 */
#ifndef PTC_BOX_H
#define PTC_BOX_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PTC_MAX_DIMS 8

/** Half-open box [lo, hi) per dimension. ndim 0 is a scalar (volume 1). */
typedef struct ptc_box {
    int ndim;
    int64_t lo[PTC_MAX_DIMS];
    int64_t hi[PTC_MAX_DIMS];
} ptc_box;

/** A box of the global tensor and its place in a shard's local buffer. */
typedef struct ptc_piece {
    ptc_box box;
    int64_t local_offset;               /**< elements */
    int64_t local_stride[PTC_MAX_DIMS]; /**< elements, per global dim */
} ptc_piece;

/** Part i of n of an extent S (torch.chunk): c = ceil(S/n),
 * [min(i*c,S), min((i+1)*c,S)). Requires n >= 1, 0 <= i < n, S >= 0. */
PTC_API void ptc_split(int64_t extent, int64_t n, int64_t i, int64_t *lo,
                       int64_t *hi);

/** The box covering a whole tensor of @p shape. */
PTC_API void ptc_box_full(ptc_box *out, int ndim, const int64_t *shape);

/** @return true if some dimension has lo >= hi (a scalar box is not empty). */
PTC_API bool ptc_box_is_empty(const ptc_box *b);

/** @return number of elements (0 if empty). Caller guarantees no overflow
 * (shapes are validated on input). */
PTC_API int64_t ptc_box_volume(const ptc_box *b);

/** Intersection of two boxes of the same rank.
 * @return true if the intersection is not empty. */
PTC_API bool ptc_box_intersect(ptc_box *out, const ptc_box *a, const ptc_box *b);

/** @return true if both boxes have the same rank and bounds. */
PTC_API bool ptc_box_equal(const ptc_box *a, const ptc_box *b);

/** Row-major element strides of @p shape into @p strides. */
PTC_API void ptc_strides_row_major(int ndim, const int64_t *shape,
                                   int64_t *strides);

/**
 * Decompose the flat row-major range [a, b) of a tensor of @p shape into the
 * minimal list of boxes covering it exactly, in increasing flat order. Each
 * box is contiguous in flat order. At most 2*ndim-1 boxes (1 for ndim 0).
 * @param out   room for at least 2*PTC_MAX_DIMS boxes
 * @param n     number of boxes written (0 if a == b)
 * @return PTC_OK, or PTC_E_RANGE if not 0 <= a <= b <= volume.
 */
PTC_API int ptc_flat_to_boxes(ptc_box *out, size_t *n, int ndim,
                              const int64_t *shape, int64_t a, int64_t b);

/** The local element index of global index @p g, which must lie in p->box. */
PTC_API int64_t ptc_piece_local_index(const ptc_piece *p, const int64_t *g);

/**
 * Restrict a piece to the sub-box @p sub (which must lie inside p->box):
 * the result has box == *sub and the matching local offset.
 */
PTC_API void ptc_piece_restrict(ptc_piece *out, const ptc_piece *p,
                                const ptc_box *sub);

/**
 * Check a piece (untrusted input) against a global tensor of @p ndim
 * dimensions and @p shape and a local tensor of @p local_volume elements:
 * its box lies inside the tensor (lo <= hi per dimension) and, unless the
 * box is empty, its offset and strides are non-negative and keep every
 * element of the box inside [0, local_volume).
 * @return PTC_OK, or PTC_E_INVAL with a one-line message naming the problem.
 */
PTC_API int ptc_piece_check(const ptc_piece *p, int ndim, const int64_t *shape,
                            int64_t local_volume);

#ifdef __cplusplus
}
#endif
#endif
