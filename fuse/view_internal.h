/* What the view's files share (private to fuse/; the unit tests see it
 * too). The view is three files in dependency order, none calling back
 * into the one above it:
 *
 *   view.c       the stateful view: datasets, step-plan cache, resolved
 *                nodes, served counts, reads
 *   view_step.c  step plans (a step's records, from ptc/step.h, and their
 *                byte offsets) and their arithmetic (.idx, record pieces,
 *                which records a byte range serves)
 *   view_path.c  the path grammar (ptc_view_parse; the step levels are
 *                ptc_dataset_step_parse's) and errno mapping
 *
 * Also here: the reads by open file and by path into pieces, which only
 * the unit tests call (the mount reads resolved nodes, ptc/view.h). They
 * read and count exactly as the node reads do.
 */
#ifndef PTC_VIEW_INTERNAL_H
#define PTC_VIEW_INTERNAL_H

#include "ptc/step.h"
#include "ptc/view.h"

/* PTC_E_NOTFOUND with the message "no such path in the view: <path>". */
int ptc_view_not_found(const char *path);

/* ---- step plans ----------------------------------------------------------------- */

/* The records of one step file: ids in order and n+1 byte offsets. */
typedef struct ptc_view_step {
    uint64_t n;        /* number of records (may be 0) */
    uint64_t *ids;     /* n sample ids, in epoch order */
    uint64_t *offsets; /* n + 1 offsets; offsets[n] is the file size */
} ptc_view_step;

/* The step file of step @p st of dataset @p ds: its records
 * (ptc_dataset_step_ids) and their offsets (record_size).
 * @param out  a new plan; free with ptc_view_step_destroy; NULL on failure
 * @return PTC_OK; the errors of ptc_dataset_step_range (PTC_E_NOTFOUND: no
 *         such step); PTC_E_RANGE if the step has more than
 *         PTC_VIEW_MAX_STEP_RECORDS records or the file would exceed 2^63
 *         bytes; a record_size error; PTC_E_NOMEM. */
int ptc_view_step_plan(const ptc_view_dataset *ds, const ptc_dataset_step *st,
                       ptc_view_step **out);

/* Free a plan; NULL is a no-op. */
void ptc_view_step_destroy(ptc_view_step *s);

/* Index i of the record holding byte @p off (offsets[i] <= off <
 * offsets[i+1], skipping empty records); n if off >= the file size. */
uint64_t ptc_view_step_find(const ptc_view_step *s, uint64_t off);

/* Write bytes [off, off + len) of the step file's .idx (n+1 little-endian
 * u64 offsets) into @p buf, clipped to its size 8(n+1); *got: bytes
 * written. */
void ptc_view_step_idx_read(const ptc_view_step *s, uint64_t off, void *buf, size_t len,
                            size_t *got);

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

/* ---- reads by open file and by path (the unit tests' entry points) ------------ */

/* An open file of the view: a resolved node of its own. May be read by
 * several threads at once; close it once, before ptc_view_destroy. */
typedef struct ptc_view_file ptc_view_file;

/* Open a file of the view (a directory is PTC_E_INVAL): as
 * ptc_view_node_resolve, which counts the records of an empty step file.
 * @param out  the file; NULL on failure */
int ptc_view_open(ptc_view *v, const char *path, ptc_view_file **out);

/* Size of an open file in bytes. */
uint64_t ptc_view_file_size(const ptc_view_file *f);

/* Read bytes [off, off + len) clipped to the file size, counting as
 * ptc_view_node_pread. @return PTC_OK or a backing error (nothing is
 * counted then). */
int ptc_view_read(ptc_view_file *f, uint64_t off, void *buf, size_t len, size_t *got);

/* Close an open file; NULL is a no-op. */
void ptc_view_close(ptc_view_file *f);

/* For a filesystem that skips opens: stat @p path as ptc_view_stat_path
 * does and, because no open will follow, count the records of an empty
 * step file as ptc_view_open would (once per view: a repeated lookup or
 * open of the same empty step file counts nothing).
 * @return as ptc_view_stat_path. */
int ptc_view_lookup(ptc_view *v, const char *path, ptc_view_stat *st);

/* ptc_view_pread into pieces, as ptc_view_node_pread_segs reads a
 * resolved node: the same bytes and counts.
 * @return as ptc_view_pread; PTC_E_INVAL if *nseg < 2. */
int ptc_view_pread_segs(ptc_view *v, const char *path, uint64_t off, size_t len,
                        void *scratch, ptc_view_seg *segs, size_t *nseg, size_t *got);

#endif
