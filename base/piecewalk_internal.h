/* Sub-boxes of a piece that land in a local element range (base/piecewalk.c):
 * how import, views and reshard fill a shard chunk by chunk without ever
 * materialising it whole. */
#ifndef PTC_PIECEWALK_INTERNAL_H
#define PTC_PIECEWALK_INTERNAL_H

#include "ptc/box.h"

/* The sub-boxes of piece @p p whose local elements fall in [a, b), in
 * increasing local order; calls fn(sub_piece, user) for each (a restriction
 * of p). The piece's local index must increase along its box's row-major
 * order (true of every piece the layout function makes).
 * Returns the first non-OK return of fn, or PTC_OK. */
int ptc_piece_walk_range(const ptc_piece *p, int64_t a, int64_t b,
                         int (*fn)(const ptc_piece *sub, void *user), void *user);

/* Whether the local indices of @p p increase along its box's row-major
 * order (the precondition of ptc_piece_walk_range). */
bool ptc_piece_is_monotone(const ptc_piece *p);

#endif
