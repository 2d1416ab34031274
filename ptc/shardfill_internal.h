/* Sub-boxes of a piece that land in a local element range (ptc/shardfill.c).
 * Used by import (source: a mapped checkpoint) and by views and reshard
 * (source: the store). */
#ifndef PTC_SHARDFILL_INTERNAL_H
#define PTC_SHARDFILL_INTERNAL_H

#include "ptc/box.h"

/* Called once per sub-box: its elements go to local element index
 * local_off + sum_d (g[d] - sub->lo[d]) * strides[d]; all of them lie in the
 * range asked for. Return PTC_OK to continue or a negative code to stop. */
typedef int (*ptc_shardfill_fn)(const ptc_box *sub, int64_t local_off,
                                const int64_t *strides, void *user);

/* Visit the sub-boxes of piece @p p whose local indices lie in [a, b). Every
 * element of the piece in that range is visited exactly once. */
int ptc_shardfill_walk(const ptc_piece *p, int64_t a, int64_t b, ptc_shardfill_fn fn,
                       void *user);

#endif
