/**
 * @file export.h
 * @brief Import of safetensors checkpoints into a store, and safetensors
 * views of a stored version: the whole model or any rank of any
 * configuration, assembled on read from the stored pieces.
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
#ifndef PTC_EXPORT_H
#define PTC_EXPORT_H

#include "ptc/config.h"
#include "ptc/layout.h"
#include "ptc/rules.h"
#include "ptc/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Keep each tensor's stored dtype (for the @c dtype arguments below). */
#define PTC_DTYPE_KEEP PTC_DTYPE_COUNT

/** Options of ptc_import(). Zero-initialise, then set fields. */
typedef struct ptc_import_options {
    const char *step;        /**< step label (may be NULL) */
    unsigned codec;          /**< PTC_STORE_CODEC_NONE / _ZSTD */
    int level;               /**< zstd level (0: default) */
    ptc_progress_fn progress;/**< ("import", bytes done, bytes total) */
    void *progress_user;
} ptc_import_options;

/**
 * Import safetensors checkpoints (files, or `model.safetensors.index.json`
 * indexes) as a new version laid out for @p cfg under @p rules. Each
 * distinct shard is written once (replicas are aliases); data is streamed
 * from the mapped inputs in bounded chunks, never whole.
 * @param inputs  @p ninputs paths; tensors keep file order then data order
 * @param version receives the committed version (may be NULL)
 * @return PTC_OK; the errors of ptc_st_open / ptc_st_index_open (bad input,
 *   naming file and problem), ptc_layout_create (no rule, bad config, naming
 *   the tensor), ptc_store_writer_* (PTC_E_BUSY, PTC_E_IO); PTC_E_EXISTS for
 *   a tensor name present in two inputs. On failure nothing is committed and
 *   the store's committed versions are unchanged.
 */
PTC_API int ptc_import(ptc_store *s, const char *const *inputs, size_t ninputs,
                       const ptc_config *cfg, const ptc_rules *rules,
                       const ptc_import_options *opts, uint64_t *version);

/**
 * The layout of a stored version: its tensors under its rules and either
 * the configuration it was stored with (@p cfg NULL) or @p cfg.
 * @return PTC_OK or the errors of ptc_rules_parse / ptc_config_parse /
 *   ptc_layout_create (e.g. PTC_E_CONFIG: a layers= list that does not fit).
 */
PTC_API int ptc_layout_of_version(ptc_layout **out, const ptc_store_reader *r,
                                  const ptc_config *cfg);

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
