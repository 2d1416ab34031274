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
#include "ptc/plan.h"
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

/**
 * The tensors of stored version @p version (0 = newest) of @p s, with its
 * placement rules: shapes and dtypes only, no data is read.
 * @return PTC_OK; PTC_E_NOTFOUND (no such version); store and rules errors;
 *         PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_search_tensors_from_store(ptc_search_tensors **out, ptc_store *s,
                                          uint64_t version);

/** Free; NULL is a no-op. */
PTC_API void ptc_search_tensors_destroy(ptc_search_tensors *t);

/** The tensors (owned by @p t, valid while it lives); *n receives the count. */
PTC_API const ptc_tensor_info *ptc_search_tensors_list(const ptc_search_tensors *t, size_t *n);

/** Their placement rules (owned by @p t). */
PTC_API const ptc_rules *ptc_search_tensors_rules(const ptc_search_tensors *t);

/* ---- what a move costs ---------------------------------------------------------- */

/**
 * Set the links of @p c from `intra-bw=GBPS,inter-bw=GBPS,intra-lat=US,
 * inter-lat=US` (any subset, any order; GB/s = 1e9 bytes/s per GPU, as
 * `ptc suggest --intra-bw`). @p c is changed only on success.
 * @return PTC_OK or PTC_E_INVAL naming the bad key or value (bandwidths
 *         > 0, latencies >= 0, each at most 1e12).
 */
PTC_API int ptc_search_net_parse(ptc_search_cluster *c, const char *text);

/** The link model's prediction of a move. */
typedef struct ptc_search_move {
    double seconds;         /**< network_seconds + copy_seconds */
    double network_seconds; /**< the busiest host: max(bytes in, bytes out) over
                                 inter_bw per GPU times its GPUs, plus inter_lat
                                 (0 when no byte crosses hosts) */
    double copy_seconds;    /**< the host with most HOST and FANOUT bytes: those
                                 over intra_bw per GPU times its GPUs, plus
                                 intra_lat (0 without such copies) */
    int busiest_host;       /**< the host of network_seconds, -1 if none */
    uint64_t busiest_bytes; /**< its max(bytes in, bytes out) */
} ptc_search_move;

/**
 * Predict how long the move planned by @p p takes on @p c's links: the
 * executors first move what crosses hosts, then copy inside hosts, and a
 * host's links carry its GPUs' traffic in parallel, so each phase lasts
 * as long as its busiest host (docs/search.md, "Moving there"). A host's
 * GPUs are the most ranks one layout places on it. Copies within a rank
 * (LOCAL) are not charged. Uses the plan's per-host figures: a
 * figures-only plan is enough.
 * @return PTC_OK, PTC_E_INVAL (a bandwidth <= 0), PTC_E_NOMEM.
 */
PTC_API int ptc_search_move_time(const ptc_plan *p, const ptc_search_cluster *c,
                                 ptc_search_move *out);

/** A configuration of the search with the move to it. */
typedef struct ptc_search_moved {
    ptc_search_entry entry;      /**< the search's configuration and prediction */
    ptc_search_move move;        /**< moving the job there */
    uint64_t move_bytes_network; /**< the plan's network bytes */
    double score;                /**< entry.cost.step_time + move.seconds / amortize */
    size_t order;                /**< its place in the search's own ranking */
} ptc_search_moved;

/**
 * Rank the fitting configurations of @p r by step time plus the move from
 * @p from amortised over @p amortize_steps steps (score, then the search's
 * order). Each move is planned from shapes alone (figures only, ranks
 * packed c->gpus_per_host per host for both configurations) with the
 * tensors @p t (with optimizer state, to move a training job's whole
 * state); entries differing only in schedule or micro-batches share one
 * plan. A configuration the tensors cannot be laid out in (a rule or
 * layers error) is left out.
 * @param out  receives *nout entries, best first; free with
 *             ptc_search_moves_free()
 * @return PTC_OK; PTC_E_INVAL (@p amortize_steps < 1, or @p from does not
 *         fit the tensors: then the layout's error); planner errors;
 *         PTC_E_NOMEM.
 */
PTC_API int ptc_search_rank_moves(const ptc_search_result *r, const ptc_search_tensors *t,
                                  const ptc_config *from, const ptc_search_cluster *c,
                                  double amortize_steps, ptc_search_moved **out, size_t *nout);

/** Free what ptc_search_rank_moves() returned; NULL is a no-op. */
PTC_API void ptc_search_moves_free(ptc_search_moved *m);

#ifdef __cplusplus
}
#endif
#endif
