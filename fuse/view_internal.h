/* What the view's files share (private to fuse/). The view is three files
 * in dependency order, none calling back into the one above it:
 *
 *   view.c       the stateful view: datasets, step-plan cache, resolved
 *                nodes, served counts, reads
 *   view_step.c  step plans and their arithmetic (.idx, record pieces,
 *                which records a byte range serves)
 *   view_path.c  the path grammar (ptc_view_parse) and errno mapping
 */
#ifndef PTC_VIEW_INTERNAL_H
#define PTC_VIEW_INTERNAL_H

#include "ptc/view.h"

/* PTC_E_NOTFOUND with the message "no such path in the view: <path>". */
int ptc_view_not_found(const char *path);

/* Called by ptc_view_step_pieces for each record piece of a byte range, in
 * file order: bytes [in, in + n) of record @p id, at file offset @p pos. */
typedef int (*ptc_view_piece_fn)(void *ctx, uint64_t id, uint64_t in, size_t n, uint64_t pos);

/* Call @p fn for each record piece of bytes [off, end) of step file @p s
 * (empty records have no piece). Stops at and returns the first error. */
int ptc_view_step_pieces(const ptc_view_step *s, uint64_t off, uint64_t end,
                         ptc_view_piece_fn fn, void *ctx);

/* The records a read of bytes [a, b) of step file @p s serves: indices
 * [*first, *end). A record is served by its last byte, an empty record by
 * the byte before it (byte 0 at the start of the file). */
void ptc_view_step_served(const ptc_view_step *s, uint64_t a, uint64_t b, uint64_t *first,
                          uint64_t *end);

#endif
