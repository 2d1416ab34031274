/**
 * @file plan.h
 * @brief The resharding planner: minimal data movement between two layouts
 * of the same tensors (reshard/plan.c). The executors are in ptc/reshard.h.
 * See docs/reshard.md.
 *
 * Model. Every source rank s holds its local tensors of the source layout,
 * every target rank r must end up holding its local tensors of the target
 * layout (replicas included). Ranks live on hosts (by default ranks packed
 * H per host in rank order, for source and target alike). For every target
 * piece the planner finds the source pieces holding the same elements and
 * chooses, per element, one provider:
 *  1. the same rank (a shard identical to the target shard is *reused*:
 *     nothing is copied; otherwise a *local* copy within the rank);
 *  2. another source rank of the same host (a *host* copy);
 *  3. a target rank of the same host that already received the element
 *     over the network (a *fan-out* copy);
 *  4. a source rank of another host (a *network* transfer): among the
 *     replicas holding the element, the one with the fewest bytes sent so
 *     far (ties: lowest rank).
 * So every element enters a host over the network at most once, and the
 * network bytes equal the lower bound sum_h bytes(need(h) - have(h)).
 * The plan is a deterministic function of its inputs.
 *
 * Cost: linear in the ranks that hold each tensor plus its pieces, never
 * rank against rank (docs/reshard.md, "How the planner scales"); a plan
 * with figures_only keeps no transfers, and a per-process plan only its
 * process's.
 *
 * @note Thread safety: a ptc_plan is immutable after creation; any number
 * of threads may query it concurrently.
 */
#ifndef PTC_PLAN_H
#define PTC_PLAN_H

#include "ptc/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A resharding plan (opaque). */
typedef struct ptc_plan ptc_plan;

/** Options of ptc_plan_create(). Zero-initialise, then set fields. */
typedef struct ptc_plan_options {
    /** Ranks per host, packed in rank order (source and target alike);
     * 0 = every rank on one host. */
    int hosts;
    /** Optional explicit host of every source rank (world of the source
     * layout entries; overrides @ref hosts for the source side). */
    const int *src_host;
    /** Optional explicit host of every target rank (overrides @ref hosts). */
    const int *dst_host;
    /** Do not reuse identical shards (e.g. when the executor converts the
     * dtype): every target byte is copied. */
    bool no_reuse;
    /** Keep no transfers, only the figures (what `ptc plan` prints):
     * memory stays O(tensors x pieces + ranks) however many transfers the
     * move has. ptc_plan_transfers() is then empty and ptc_plan_reused()
     * false. */
    bool figures_only;
    /** Per-process plan: the process of every source rank and of every
     * target rank (both or neither). The plan keeps only the transfers
     * process @ref proc sends (its source ranks provide them; for FANOUT its
     * target ranks) or receives, and the reused shards of its ranks, in the
     * whole plan's order; they equal the whole plan's transfers filtered so
     * (tested), except that a FANOUT transfer's `via` indexes the kept
     * transfers, or is UINT64_MAX where the NETWORK transfer it copies is
     * not kept. Its figures (ptc_plan_stats) count only what the process's
     * target ranks receive (bytes_total, bytes_reused, the copies and
     * network bytes, shards), `transfers` the kept transfers,
     * max_rank_send and max_rank_recv only its own ranks;
     * bytes_network_lower_bound and the per-host figures are 0. Cost: with
     * every rank on one host, O(the process's own pieces) plus the distinct
     * shards of each tensor; with several hosts the least-loaded rule makes
     * each network choice depend on all earlier ones, so the process
     * follows the whole plan (time of a whole plan, memory of its part). */
    const int *src_proc;
    /** @copydoc src_proc */
    const int *dst_proc;
    /** The process a per-process plan is for. */
    int proc;
} ptc_plan_options;

/** How a transfer's data gets to its target rank. */
typedef enum ptc_transfer_kind {
    PTC_TRANSFER_LOCAL = 0,   /**< from the same rank's source buffer */
    PTC_TRANSFER_HOST = 1,    /**< from another source rank of the same host */
    PTC_TRANSFER_FANOUT = 2,  /**< from a target rank of the same host that
                                   received it over the network (second phase) */
    PTC_TRANSFER_NETWORK = 3, /**< from a source rank of another host */
} ptc_transfer_kind;

/**
 * One box copied from a provider's local buffer into a target rank's local
 * buffer. Element g of @ref box is read at element
 * src_offset + sum_d (g[d]-box.lo[d]) * src_stride[d] of the provider's local
 * tensor (the source rank's, or for FANOUT the target rank @ref src_rank's)
 * and written at dst_offset + sum_d (g[d]-box.lo[d]) * dst_stride[d] of the
 * target rank's local tensor. Offsets and strides are in elements.
 */
typedef struct ptc_transfer {
    uint32_t tensor;     /**< tensor index (same in both layouts) */
    int kind;            /**< ptc_transfer_kind */
    int src_rank;        /**< providing rank (a target rank for FANOUT) */
    int dst_rank;        /**< receiving target rank */
    uint64_t via;        /**< FANOUT: index of the NETWORK transfer (in
                              ptc_plan_transfers order) whose box holds this
                              one's; else UINT64_MAX */
    ptc_box box;         /**< global box */
    int64_t src_offset;
    int64_t src_stride[PTC_MAX_DIMS];
    int64_t dst_offset;
    int64_t dst_stride[PTC_MAX_DIMS];
} ptc_transfer;

/** Figures of a plan (docs/reshard.md defines each exactly). */
typedef struct ptc_plan_stats {
    uint64_t bytes_total;        /**< bytes of every target rank's local tensors */
    uint64_t bytes_reused;       /**< target shards identical to the same rank's source shard */
    uint64_t bytes_local_copy;   /**< LOCAL + HOST + FANOUT transfer bytes */
    uint64_t bytes_network;      /**< NETWORK transfer bytes */
    uint64_t bytes_network_lower_bound; /**< sum_h bytes(need(h) - have(h)), computed
                                             independently of the transfers */
    uint64_t max_rank_send;      /**< most NETWORK bytes sent by one source rank */
    uint64_t max_rank_recv;      /**< most NETWORK bytes received by one target rank */
    uint64_t bytes_host_copy;    /**< HOST part of bytes_local_copy */
    uint64_t bytes_fanout;       /**< FANOUT part of bytes_local_copy */
    uint64_t tensors;            /**< tensors */
    uint64_t shards;             /**< non-empty target (tensor, rank) shards */
    uint64_t shards_reused;      /**< of which reused */
    uint64_t transfers;          /**< transfers */
    int hosts;                   /**< number of hosts */
    double plan_seconds;         /**< wall time ptc_plan_create took */
} ptc_plan_stats;

/** Per-host figures. */
typedef struct ptc_plan_host_stats {
    uint64_t bytes_in;   /**< NETWORK bytes into the host */
    uint64_t bytes_out;  /**< NETWORK bytes out of the host */
    uint64_t bytes_need; /**< bytes of the distinct elements the host's target ranks hold */
    uint64_t bytes_have; /**< bytes of the distinct elements the host's source ranks hold */
    uint64_t bytes_copy; /**< HOST and FANOUT bytes into the host's target ranks: copies
                              between its GPUs (what the link model charges to the
                              links inside the host) */
} ptc_plan_host_stats;

/**
 * Plan the move from layout @p src to layout @p dst. Both must list the
 * same tensors (names, dtypes, shapes) in the same order; only the
 * configuration (and so the placement) may differ.
 * @param opts  may be NULL (all ranks on one host)
 * @return PTC_OK; PTC_E_INVAL (tensor lists differ, naming the tensor; bad
 *   hosts); PTC_E_NOTFOUND (an element no source rank holds); PTC_E_NOMEM.
 */
PTC_API int ptc_plan_create(ptc_plan **out, const ptc_layout *src, const ptc_layout *dst,
                            const ptc_plan_options *opts);

/** Free a plan. NULL is a no-op. */
PTC_API void ptc_plan_destroy(ptc_plan *p);

/** The layouts the plan was made for (borrowed; they must outlive the plan). */
PTC_API const ptc_layout *ptc_plan_source(const ptc_plan *p);
/** @copydoc ptc_plan_source */
PTC_API const ptc_layout *ptc_plan_target(const ptc_plan *p);

/** The plan's figures. */
PTC_API void ptc_plan_stats_get(const ptc_plan *p, ptc_plan_stats *out);

/** Figures of host @p host (< stats.hosts). @return PTC_OK or PTC_E_RANGE. */
PTC_API int ptc_plan_host_stats_get(const ptc_plan *p, int host, ptc_plan_host_stats *out);

/** Host of source rank @p rank (-1 if out of range). */
PTC_API int ptc_plan_src_host(const ptc_plan *p, int rank);
/** Host of target rank @p rank (-1 if out of range). */
PTC_API int ptc_plan_dst_host(const ptc_plan *p, int rank);

/**
 * All transfers, grouped by tensor, then target rank, in a fixed order
 * (every NETWORK transfer precedes the FANOUT transfers that use it).
 * @param n  receives the count
 * @return the array, owned by the plan (valid until destroy)
 */
PTC_API const ptc_transfer *ptc_plan_transfers(const ptc_plan *p, size_t *n);

/** Whether target shard (@p tensor, @p rank) is reused unchanged from the
 * same source rank (then it has no transfers). */
PTC_API bool ptc_plan_reused(const ptc_plan *p, size_t tensor, int rank);

#ifdef __cplusplus
}
#endif
#endif
