/**
 * @file import.h
 * @brief Import of safetensors checkpoints (files or
 * `model.safetensors.index.json` indexes) into a store as a new version.
 *
 * @note Thread safety: ptc_import writes one version of one store; the
 * store's writer lock serialises it against every other writer (also in
 * other processes).
 */
#ifndef PTC_IMPORT_H
#define PTC_IMPORT_H

#include "ptc/config.h"
#include "ptc/rules.h"
#include "ptc/store.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
