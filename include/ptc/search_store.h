/**
 * @file search_store.h
 * @brief The configuration search's model description from a stored
 *        version: tensors, shapes, dtypes and placements (ptc/store.h)
 *        turned into a ptc_cost_model (ptc/search.h).
 *
 * Kept apart from search.h because it reads the store: the cost model and
 * the search use only the schedule module, this adapter sits above the
 * store.
 *
 * @note Thread safety: ptc_search_store_model() may be called from any
 *       thread with its own store handle (the store's own rules apply).
 */
#ifndef PTC_SEARCH_STORE_H
#define PTC_SEARCH_STORE_H

#include "ptc/layout.h"
#include "ptc/search.h"
#include "ptc/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What the adapter found or had to assume. */
typedef struct ptc_search_store_info {
    uint64_t version;    /**< the version read */
    size_t tensors;      /**< tensors described */
    size_t optim_tensors;/**< of those, optimizer state (kind=optim) */
    int64_t hidden;      /**< width of the stage activations (the
                              embedding's width, else the most common
                              length of 1-D layer tensors) */
    int64_t seq;         /**< sequence length used */
    bool seq_assumed;    /**< no position table: seq is the default 2048 */
    bool attention;      /**< layer tensors named like attention were found */
} ptc_search_store_info;

/**
 * Describe version @p version (0 = newest) of @p s for the cost model.
 * Each tensor keeps its stored shape, dtype and placement (tp split and
 * blocks, pp, layer, kind). What a parameter does is read from its shape,
 * placement and name: 2-D tensors on the first stage are embedding lookups
 * (a first+last tensor is a tied embedding), other 2-D `*.weight` tensors
 * are matrix products, with the input features in dimension 0 for GPT-2's
 * Conv1D modules (`c_attn`, `c_proj`, `c_fc`) and in dimension 1
 * otherwise (torch.nn.Linear); the rest is element-wise. Activations follow
 * the GPT formula with selective recomputation (docs/search.md) at the
 * parameters' dtype; gradients have the parameters' dtype; without stored
 * optimizer state, Adam is assumed (12 bytes per 16-bit parameter, 8 per
 * 32-bit one).
 * @param info may be NULL
 * @return PTC_OK; PTC_E_NOTFOUND (no such version); PTC_E_INVAL (a tensor
 *         without a placement, no layer tensors); store errors;
 *         PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_search_store_model(ptc_cost_model **out, ptc_store *s, uint64_t version,
                                   ptc_search_store_info *info);

/* ---- the tensors of a description, for the resharding planner ------------ */

/** The tensors a model description stands for (opaque, immutable). */
typedef struct ptc_search_tensors ptc_search_tensors;

/**
 * The tensors of @p m as a stored copy of the model would hold them, with
 * placement rules that give each its description's placement: layer
 * tensors are named `layers.<L>.<name>` (rule `layer layers.{L}.`), the
 * others keep their name; `tp_dim` < 0 is `tp=replicate`, else
 * `tp=split(tp_dim)` (with `blocks=tp_blocks` when > 1); pp as described.
 * With @p optim and no optimizer state in @p m, each parameter gets
 * round(optim_bytes_per_param / 4) (at most 3) F32 tensors of its shape,
 * `<name>.exp_avg`, `.exp_avg_sq`, `.master` in that order (`optim` rule:
 * they take their parameter's placement, kind=optim, so zero=1 shards
 * them). Used by `ptc plan --model` and `ptc suggest --from`.
 * @return PTC_OK or PTC_E_NOMEM (on failure *out is NULL).
 */
PTC_API int ptc_search_tensors_create(ptc_search_tensors **out, const ptc_cost_model *m,
                                      bool optim);

/** Free; NULL is a no-op. */
PTC_API void ptc_search_tensors_destroy(ptc_search_tensors *t);

/** The tensors (owned by @p t, valid while it lives); *n receives the count. */
PTC_API const ptc_tensor_info *ptc_search_tensors_list(const ptc_search_tensors *t, size_t *n);

/** Their placement rules (owned by @p t). */
PTC_API const ptc_rules *ptc_search_tensors_rules(const ptc_search_tensors *t);

#ifdef __cplusplus
}
#endif
#endif
