/**
 * @file reshard.h
 * @brief Resharding: the planner (minimal data movement between two layouts
 * of the same tensors) and the in-memory executors for training loops
 * (host buffers over MPI, device buffers over NCCL), and the store
 * executors (threads on one host, MPI processes). See docs/reshard.md.
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
 * @note Thread safety: a ptc_plan is immutable after creation; any number
 * of threads may query it concurrently.
 */
#ifndef PTC_RESHARD_H
#define PTC_RESHARD_H

#include "ptc/build_config.h"
#include "ptc/layout.h"
#include "ptc/store.h"

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

/* ---- store executors ---------------------------------------------------- */

/** Keep the stored dtype (ptc_reshard_options.dtype). */
#define PTC_RESHARD_DTYPE_KEEP PTC_DTYPE_COUNT

/** Options of the store executors. Zero-initialise, then set fields. */
typedef struct ptc_reshard_options {
    const char *step;   /**< step label of the new version; NULL: the source's */
    int threads;        /**< worker threads (threaded executor); 0: online cores */
    ptc_dtype dtype;    /**< PTC_RESHARD_DTYPE_KEEP (ptc_reshard_options_init
                             sets it) or F32/BF16/F16: floating-point tensors
                             are converted on the way (then nothing is reused) */
    unsigned codec;     /**< PTC_STORE_CODEC_* of the shards written */
    int level;          /**< zstd level (0: default) */
    int hosts;          /**< plan figures: ranks per host (0: one host) */
    /** MPI executor: the most bytes one process sends plus receives over
     * the network in one round (0: @ref PTC_RESHARD_MPI_BUDGET). The target
     * tensors are cut into consecutive ranges within this budget for every
     * process (a tensor over the budget is a range of its own); each range
     * is exchanged, written and freed before the next. */
    uint64_t mpi_budget;
} ptc_reshard_options;

/** Default ptc_reshard_options.mpi_budget: 256 MiB. */
#define PTC_RESHARD_MPI_BUDGET ((uint64_t)256 << 20)

/** Initialise @p o with defaults (dtype kept, one thread per core). */
PTC_API void ptc_reshard_options_init(ptc_reshard_options *o);

/** What a store reshard did. */
typedef struct ptc_reshard_result {
    uint64_t version;        /**< the new version */
    uint64_t parent;         /**< the version it was made from */
    ptc_plan_stats plan;     /**< figures of the plan (with opts.hosts) */
    uint64_t bytes_written;  /**< raw bytes written to new pack files */
    uint64_t shards_written; /**< target shards written */
    uint64_t shards_reused;  /**< target shards referencing an older version's
                                  identical shard (any source rank) */
    uint64_t shards_aliased; /**< replicas recorded as aliases */
    double seconds;          /**< wall time, planning included */
    uint64_t rounds;         /**< MPI: exchange rounds (tensor ranges); 0 for threads */
    uint64_t max_round_bytes; /**< MPI: most network bytes one process sent plus
                                   received in one round (its exchange buffers) */
} ptc_reshard_result;

/**
 * Reshard stored version @p version (0: newest) to configuration @p to with
 * a pool of threads on this host: each thread writes its own target ranks'
 * pack files (positioned writes through the store writer), filling each
 * shard chunk by chunk from the stored source boxes (strided copies, no
 * whole tensor in memory); shards identical to a stored one are referenced,
 * replicas aliased; one commit at the end, so the new version appears only
 * when every byte is on disk and checksummed.
 * @param res  may be NULL
 * @return PTC_OK; PTC_E_NOTFOUND (no such version); PTC_E_CONFIG /
 *   PTC_E_RULE (the model cannot take @p to, e.g. a wrong layers=);
 *   PTC_E_BUSY (another writer holds the store's lock); PTC_E_IO,
 *   PTC_E_CHECKSUM, PTC_E_NOMEM. On failure no version is added.
 */
PTC_API int ptc_reshard_store(ptc_store *s, uint64_t version, const ptc_config *to,
                              const ptc_reshard_options *opts, ptc_reshard_result *res);

/**
 * The same over MPI: every process of @p comm (a pointer to an MPI_Comm)
 * calls it with the same arguments. Process p writes the target ranks
 * r with floor(r*N/W) == p (N processes, W target ranks) with a pack-only
 * writer, reads from the store only the boxes the plan assigns to it (its
 * source ranks s with floor(s*N/W_src) == p), exchanges the rest with MPI
 * messages, and process 0 commits after gathering the shard descriptors.
 * The exchange runs in rounds, one per range of tensors whose network
 * bytes fit every process's opts->mpi_budget: exchange, write, free.
 * The result (and the return code) is the same on every process.
 * @return as ptc_reshard_store(), and PTC_E_MPI.
 */
PTC_API int ptc_reshard_store_mpi(ptc_store *s, uint64_t version, const ptc_config *to,
                                  const void *comm, const ptc_reshard_options *opts,
                                  ptc_reshard_result *res);

/* ---- in-memory executors ------------------------------------------------ */

/**
 * Run a plan on host buffers over MPI. Every process of @p comm calls it;
 * process i acts as source rank i (if i < source world) and target rank i
 * (if i < target world); the communicator must have at least
 * max(source world, target world) processes (extra processes just return).
 * The plan must be identical on every process (same layouts and options).
 * @param comm     an MPI_Comm, passed as a pointer to it (`&comm`) so this
 *                 header does not need mpi.h
 * @param src      per tensor, this rank's source local tensor (row-major,
 *                 the source dtype), NULL where the rank holds none
 * @param dst      per tensor, this rank's target local tensor, NULL where
 *                 it holds none; filled on return (reused shards are copied
 *                 from @p src unless src[t] == dst[t])
 * @return PTC_OK, PTC_E_MPI (naming the call), PTC_E_INVAL (comm too small),
 *   PTC_E_NOMEM. Collective: on error other processes may block.
 */
PTC_API int ptc_reshard_host(const ptc_plan *p, const void *comm, const void *const *src,
                             void *const *dst);

#if PTC_WITH_NCCL
/**
 * NCCL context for ptc_reshard_device(): a communicator over the processes
 * of an MPI communicator (ncclUniqueId broadcast over MPI), set up once and
 * reused for every reshard.
 */
typedef struct ptc_reshard_nccl ptc_reshard_nccl;

/** Create the NCCL context (collective over @p comm, a pointer to an
 * MPI_Comm). The calling process must have selected its CUDA device.
 * @return PTC_OK, PTC_E_MPI, PTC_E_NCCL, PTC_E_CUDA, PTC_E_NOMEM. */
PTC_API int ptc_reshard_nccl_create(ptc_reshard_nccl **out, const void *comm);

/** Destroy the context. NULL is a no-op. */
PTC_API void ptc_reshard_nccl_destroy(ptc_reshard_nccl *ctx);

/**
 * ptc_reshard_host() for device buffers: boxes are packed by CUDA kernels
 * into device staging buffers, exchanged with grouped ncclSend/ncclRecv and
 * unpacked by CUDA kernels. @p stream is a cudaStream_t (NULL: default);
 * returns after the stream has completed.
 * @return PTC_OK, PTC_E_NCCL, PTC_E_CUDA, PTC_E_INVAL, PTC_E_NOMEM.
 */
PTC_API int ptc_reshard_device(const ptc_plan *p, ptc_reshard_nccl *ctx,
                               const void *const *src, void *const *dst, void *stream);
#else
typedef struct ptc_reshard_nccl ptc_reshard_nccl;
/** Stub: this build has no NCCL. @return PTC_E_UNSUPPORTED. */
static inline int ptc_reshard_nccl_create(ptc_reshard_nccl **out, const void *comm)
{
    (void)comm;
    if (out)
        *out = NULL;
    return ptc_error_set(PTC_E_UNSUPPORTED, "ptc was built without NCCL");
}
/** Stub: no-op. */
static inline void ptc_reshard_nccl_destroy(ptc_reshard_nccl *ctx) { (void)ctx; }
/** Stub: this build has no NCCL. @return PTC_E_UNSUPPORTED. */
static inline int ptc_reshard_device(const ptc_plan *p, ptc_reshard_nccl *ctx,
                                     const void *const *src, void *const *dst, void *stream)
{
    (void)p, (void)ctx, (void)src, (void)dst, (void)stream;
    return ptc_error_set(PTC_E_UNSUPPORTED, "ptc was built without NCCL");
}
#endif

#ifdef __cplusplus
}
#endif
#endif
