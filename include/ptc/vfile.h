/**
 * @file vfile.h
 * @brief Safetensors views of a stored version: the whole model or any rank
 * of any configuration, assembled on read from the stored pieces.
 *
 * A view (ptc_vfile) is a virtual safetensors file: its header is computed
 * from the layout, and a read of bytes [a, b) reads only the stored blocks
 * that those bytes come from. `ptc export` writes views to disk; the FUSE
 * filesystem serves them; both give the same bytes.
 *
 * Rank files carry their placement in `__metadata__` (docs/format.md,
 * "Per-rank files"): `ptc.format`, `ptc.config`, `ptc.rank`, `ptc.coords` and
 * `ptc.layout` (JSON: per tensor its global shape, placement and pieces),
 * plus the checkpoint's own metadata.
 *
 * @note Thread safety: a ptc_vfile is immutable after creation;
 * ptc_vfile_read may be called from many threads at once (the reader it was
 * made from must stay open).
 */
#ifndef PTC_VFILE_H
#define PTC_VFILE_H

#include "ptc/layout.h"
#include "ptc/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A virtual safetensors file (opaque). */
typedef struct ptc_vfile ptc_vfile;

/**
 * The whole model of a version: global tensors in stored order and the
 * checkpoint's own `__metadata__`. For a checkpoint written by the canonical
 * writer this is byte-identical to the imported file.
 * @param dtype  PTC_DTYPE_KEEP, or F32/BF16/F16: floating-point tensors are
 *               converted, others kept
 */
PTC_API int ptc_vfile_whole(ptc_vfile **out, const ptc_store_reader *r, ptc_dtype dtype);

/**
 * Part of the whole model: the tensors @p tensors (indices in the reader's
 * order; NULL means 0..n-1), in that order, with global shapes and the
 * checkpoint's own `__metadata__` (a shard of a sharded export).
 * @param dtype  as ptc_vfile_whole
 * @return PTC_OK; PTC_E_RANGE (an index out of range); PTC_E_NOMEM.
 */
PTC_API int ptc_vfile_subset(ptc_vfile **out, const ptc_store_reader *r, const size_t *tensors,
                             size_t n, ptc_dtype dtype);

/**
 * Rank @p rank's file under layout @p l (made with ptc_layout_of_version from
 * the same reader): every tensor the rank's pipeline stage holds, in stored
 * order, with local shapes (empty split parts included, zero-sharded
 * tensors 1-D) and the placement metadata.
 * @return PTC_OK; PTC_E_RANGE (rank outside the world); PTC_E_NOMEM.
 */
PTC_API int ptc_vfile_rank(ptc_vfile **out, const ptc_store_reader *r, const ptc_layout *l,
                           int rank, ptc_dtype dtype);

/** Free a view. NULL is a no-op. */
PTC_API void ptc_vfile_destroy(ptc_vfile *f);

/** @return the size of the file in bytes. */
PTC_API uint64_t ptc_vfile_size(const ptc_vfile *f);

/**
 * Read @p len bytes at @p off (clipped to the size) into @p buf.
 * @param got  receives the number of bytes read (0 at or past the end)
 * @return PTC_OK, PTC_E_CHECKSUM, PTC_E_IO, PTC_E_NOMEM.
 */
PTC_API int ptc_vfile_read(const ptc_vfile *f, void *buf, uint64_t off, size_t len,
                           size_t *got);

/**
 * Write the view to @p path atomically (temporary file, fsync, rename),
 * streaming in bounded chunks.
 * @param progress ("export", bytes done, bytes total); may be NULL
 */
PTC_API int ptc_vfile_write(const ptc_vfile *f, const char *path, ptc_progress_fn progress,
                            void *user);

#ifdef __cplusplus
}
#endif
#endif
