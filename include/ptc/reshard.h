/**
 * @file reshard.h
 * @brief Resharding executors: the store executors (threads on one host,
 * MPI processes) and the in-memory executors for training loops (host
 * buffers over MPI, device buffers over NCCL), running plans of
 * ptc/plan.h. See docs/reshard.md.
 *
 * Communicators are MPI_Comm values, as everywhere in libptc.
 *
 * @note Thread safety: the store executors take the store's writer lock;
 * the in-memory executors are collective over their communicator and one
 * call runs at a time per communicator (MPI's rules); a ptc_reshard_nccl
 * context is externally synchronised.
 */
#ifndef PTC_RESHARD_H
#define PTC_RESHARD_H

#include <mpi.h>

#include "ptc/plan.h"
#include "ptc/store.h"
#include "ptc/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- store executors ---------------------------------------------------- */

/** Keep the stored dtype (ptc_reshard_options.dtype): PTC_DTYPE_KEEP. */
#define PTC_RESHARD_DTYPE_KEEP PTC_DTYPE_KEEP

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
 * The same over MPI: every process of @p comm calls it with the same arguments. Process p writes the target ranks
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
                                  MPI_Comm comm, const ptc_reshard_options *opts,
                                  ptc_reshard_result *res);


/* ---- a store spread over hosts (docs/checkpoint.md "Across hosts") ------- */

/* ptc/ckpt.h's types, declared here so that this header does not include it
 * (a module may use reshard without ptc/ckpt). */
struct ptc_ckpt_local;
struct ptc_ckpt_record;
struct ptc_ckpt_options;
struct ptc_ckpt_hosts_options;

/** Longest host name ptc_reshard_hosts_index() takes, NUL included. */
#define PTC_RESHARD_HOST_NAME_MAX 256

/**
 * Number the hosts of the processes of @p t: processes passing the same
 * @p name share a host; hosts are numbered 0..H-1 in the order of their
 * lowest process. Collective. @p name NULL: this machine's host name
 * (gethostname). Tests give processes of one machine different names, as
 * they would have on different hosts.
 * @return PTC_OK; PTC_E_INVAL (a name of PTC_RESHARD_HOST_NAME_MAX bytes or
 *   more, or empty; agreed); PTC_E_IO (no host name); the transport's error.
 */
PTC_API int ptc_reshard_hosts_index(const ptc_transport *t, const char *name, int *host,
                                    int *nhosts);

/** Source bytes a process of a load across hosts (ptc_reshard_hosts_load)
 * holds at once by default: 256 MiB. The environment variable
 * PTC_HOSTS_LOAD_BUDGET (bytes, or a number with K, M or G) sets it for
 * every load across hosts of the process (`ptc.load(across_hosts=True)`,
 * `ptc train --resume`, `ptc reshard --mpi --across-hosts`); the smallest
 * value among the processes counts. */
#define PTC_RESHARD_HOSTS_LOAD_BUDGET_DEFAULT ((uint64_t)256 << 20)

/** What a load of a version spread over hosts did (the same on every
 * process, the per-process fields aside). */
typedef struct ptc_reshard_hosts_result {
    uint64_t version;        /**< the version across hosts that was loaded */
    int hosts;               /**< hosts taking part */
    /** The plan's figures, hosts as the plan's hosts: plan.bytes_network are
     * the bytes moved between hosts, plan.bytes_network_lower_bound the
     * sum over hosts of the bytes a host's target ranks need and none of
     * the source ranks read on it holds. */
    ptc_plan_stats plan;
    uint64_t max_host_bytes; /**< the busiest host's network bytes: the most
                                  one host receives or sends (max over hosts
                                  of max(in, out)) */
    uint64_t bytes_read;     /**< bytes read from the hosts' own stores */
    double seconds;          /**< wall time of the call */
    double read_seconds;     /**< this process's reads of its host's part (from
                                  the second round on on a thread, beside the
                                  exchange: they overlap move_seconds) */
    double move_seconds;     /**< of which the rounds: the reads after the first
                                  round's and the plan's exchange (this process) */
    /** Rounds the load ran: the tensors, in their order, cut into groups
     * whose source bytes on every process fit half the budget
     * (PTC_RESHARD_HOSTS_LOAD_BUDGET_DEFAULT), one group a round (a tensor
     * over it alone; a tensor is never split). */
    uint64_t rounds;
    /** This process's source bytes held at once, at most (the shards it
     * read for other processes and itself, while they were moved): at most
     * max(budget, its largest tensor's source bytes), as group g + 1 is read
     * during round g only where both fit the budget. */
    uint64_t source_peak_bytes;
} ptc_reshard_hosts_result;

/**
 * Load version @p version of a store spread over hosts (written by
 * ptc_ckpt_hosts_save_over, one part per host, with replicas) into layout
 * @p dst, collectively over @p t. Every process passes its host's index
 * (ptc_reshard_hosts_index) and its host's store @p s (the same path on
 * every host, each host its own local disk; processes of one host may share
 * the handle only as ptc_ckpt_hosts_save_over allows). Each host lists the
 * source ranks its part holds (its own ranks' shards and the replicas of
 * other hosts'); each source rank is read from the disk of one process
 * whose host holds it — preferring the process running the same target
 * rank, then one on the target rank's host, then the least loaded — and the
 * minimal-movement plan (ptc_plan_create with the hosts so chosen) moves
 * every byte a process lacks from the process that read it, over @p t's
 * point-to-point exchange. Nothing is read from another host's disk. A
 * host whose store holds no part of the version (a fresh or replaced host
 * joining) takes part: the version's description (configuration, rules,
 * tensors) comes from the lowest process whose host holds a part, and the
 * plan sends it every byte it runs (for a version with an explicit layout,
 * the description carries the shard records of every host present).
 *
 * @param version  the version across hosts; 0: the one
 *                 ptc_reshard_hosts_pick() takes (the newest committed one
 *                 the hosts present hold whole). A nonzero @p version must
 *                 be committed (the caller ran the recovery).
 * @param dst      the target layout, the same on every process; its tensors
 *                 must be the version's, in its order, with its dtypes
 * @param ranks,nranks  the target ranks this process runs (together, the
 *                 processes run every rank of @p dst exactly once)
 * @param bufs     nranks x ntensors row-major local tensors, filled
 * @param res      may be NULL
 * @return PTC_OK; PTC_E_NOTFOUND (no committed version; no host present
 *   holds a part of the version; saved ranks
 *   whose shards no present host holds, naming them: "lost with every
 *   copy"); PTC_E_INVAL (@p dst does not match the version; a target rank
 *   no process runs); the errors of the recovery, the reads and the
 *   transport. Every failure is agreed: every process returns the same code
 *   and message.
 * @note Thread safety: collective over @p t, one call at a time per transport.
 */
PTC_API int ptc_reshard_hosts_load(const ptc_transport *t, int host, ptc_store *s,
                                   uint64_t version, const ptc_layout *dst, const int *ranks,
                                   size_t nranks, void *const *bufs,
                                   ptc_reshard_hosts_result *res);

/**
 * How many saved ranks of version @p version of a store spread over hosts
 * no host present holds (*@p missing, the same on every process): each
 * process lists what its host's part holds (its ranks and the replicas; a
 * rank with no bytes counts as held) and the lists are joined over @p t;
 * for a version saved with an explicit layout, whose parts know only their
 * own ranks' and replicas' shard records, the records of every host
 * present are joined and the saved ranks on no host count when some
 * tensor is then not covered. Every rank is missing (*@p missing >= 1)
 * when no host holds a part.
 * @return PTC_OK or the errors of the reads and the transport (agreed).
 * @note Thread safety: collective over @p t, one call at a time per transport.
 */
PTC_API int ptc_reshard_hosts_covered(const ptc_transport *t, ptc_store *s, uint64_t version,
                                      int *missing);

/**
 * The version a load across hosts can take whole: @p newest (a committed
 * version, after ptc_ckpt_hosts_recover_over) when the hosts present hold
 * every saved rank of it (ptc_reshard_hosts_covered), else the newest older
 * version some host holds (ptc_ckpt_hosts_held: each host's committed parts
 * that --keep-local left) that they hold whole, else @p newest (whose load
 * then names the ranks lost). Under ptc_reshard_hosts_pick().
 * @param version  receives the version, the same on every process
 * @param missing  receives the saved ranks of @p newest no host holds
 * @return PTC_OK or the errors of ptc_reshard_hosts_covered (agreed).
 * @note Thread safety: collective over @p t, one call at a time per transport.
 */
PTC_API int ptc_reshard_hosts_whole(const ptc_transport *t, ptc_store *s, uint64_t newest,
                                    uint64_t *version, int *missing);

/**
 * The version every reader of a store spread over hosts takes (`ptc train
 * --resume`, `ptc reshard --mpi --across-hosts`, `ptc.load(across_hosts=
 * True)`, ptc_reshard_hosts_load() with version 0): the hosts first recover
 * (ptc_ckpt_hosts_recover_over); then @p version when given, which must be
 * committed, else ptc_reshard_hosts_whole() of the newest committed version:
 * that version when the hosts present hold a copy of each of its saved
 * ranks, else the newest older one they hold whole (a warning through the
 * library's log on process 0 names both), else the newest committed one,
 * whose load fails naming the saved ranks lost with every copy.
 * @param host    this process's host (ptc_reshard_hosts_index)
 * @param picked  receives the version, the same on every process
 * @return PTC_OK; PTC_E_NOTFOUND "the stores DIR hold no committed version G
 *   across hosts (newest: N)"; the errors of the recovery and of
 *   ptc_reshard_hosts_whole(); agreed.
 * @note Thread safety: collective over @p t, one call at a time per transport.
 */
PTC_API int ptc_reshard_hosts_pick(const ptc_transport *t, int host, ptc_store *s,
                                   uint64_t version, uint64_t *picked);


/** Options of ptc_reshard_hosts_store_mpi(). Zero-initialise. */
typedef struct ptc_reshard_hosts_options {
    /** NULL: write the new configuration as a new version across hosts into
     * the same stores (each host its part, with @ref replicas). Else a
     * directory on the host of process 0 (created if needed): an ordinary
     * single-directory store there receives the new version (the processes
     * of that host write it); nothing is written on the other hosts. */
    const char *out;
    /** Version across hosts: copies of each host's shards on other hosts
     * (ptc_ckpt_hosts_options.replicas; must be < hosts); negative: those
     * of the hosts' journals (the newest version's). */
    int replicas;
} ptc_reshard_hosts_options;

/**
 * Reshard version @p version (0: the newest committed, after a recovery) of
 * a store spread over hosts to configuration @p to, over MPI: every process
 * of @p comm calls it with its host's index (ptc_reshard_hosts_index) and
 * store. The target ranks are spread over the writing processes (every
 * process, or with opts->out those on process 0's host) in order,
 * ptc_reshard_hosts_load() fills them (each byte from a host that holds it,
 * by the minimal plan, over MPI), and the writers save them: a version
 * across hosts (ptc_ckpt_hosts_save_over) or a version of the store
 * opts->out (ptc_ckpt_save over the writers). The record is the source's,
 * its configuration @p to. Every target rank's state is in the writers'
 * memory at once (the state's bytes, spread over the writers).
 * @param written  receives the new version (across hosts, or of opts->out)
 * @param res      the load's figures (may be NULL)
 * @return PTC_OK; the errors of ptc_reshard_hosts_load(), of the layout of
 *   @p to (PTC_E_CONFIG, PTC_E_RULE), the save and MPI; agreed.
 * @note Thread safety: collective over @p comm.
 */
PTC_API int ptc_reshard_hosts_store_mpi(ptc_store *s, int host, uint64_t version,
                                        const ptc_config *to, MPI_Comm comm,
                                        const ptc_reshard_hosts_options *opts, uint64_t *written,
                                        ptc_reshard_hosts_result *res);


/**
 * ptc_ckpt_save_locals_over() into a store spread over hosts: every process
 * names its host (@p host_name, as ptc_reshard_hosts_index; NULL: this
 * machine's name) and passes its host's store; the processes' described
 * local tensors are collected into a layout and bound as
 * ptc_ckpt_bind_locals_over() does, and ptc_ckpt_hosts_save_over() writes
 * version G across hosts (each host its part, with @p hopts's replicas).
 * Process 0's record is every host's (the others may pass NULL). Host
 * memory only: streamed locals are refused.
 * @param version  receives G
 * @return PTC_OK, @p rc's agreed failure, the errors of the collection, the
 *   host numbering and ptc_ckpt_hosts_save_over(); agreed.
 */
PTC_API int ptc_reshard_hosts_save_locals(const ptc_transport *t, int rc, const char *host_name,
                                          ptc_store *s, const int *ranks, size_t nranks,
                                          const struct ptc_ckpt_local *locals, size_t n,
                                          const ptc_config *cfg, const ptc_rules *rules,
                                          const struct ptc_ckpt_record *rec,
                                          const struct ptc_ckpt_options *opts,
                                          const struct ptc_ckpt_hosts_options *hopts,
                                          uint64_t *version);

/**
 * ptc_ckpt_load_locals_over() from a store spread over hosts: the hosts
 * recover and take the version ptc_reshard_hosts_pick() takes (@p version,
 * which must be committed; 0: the newest committed one they hold whole),
 * the layout is the version's under @p cfg and @p rules (or, @p cfg NULL,
 * the one the locals describe; see ptc_ckpt_bind_locals_over), and
 * ptc_reshard_hosts_load() fills the local tensors: each source rank read
 * from one host holding it, every missing byte moved over @p t by the
 * minimal plan. A host whose store holds no part of the version (a fresh
 * host) takes part: the version's layout and record come from a host that
 * holds one (for a version with an explicit layout, the shard records of
 * every host present, joined).
 * Host memory only.
 * @param rec  receives the version's record (ptc_ckpt_record_free; may be NULL)
 * @param res  the load's figures, res->version the version loaded (may be NULL)
 * @return PTC_OK, @p rc's agreed failure, PTC_E_NOTFOUND (no committed
 *   version, or not @p version), the errors of ptc_reshard_hosts_load();
 *   agreed.
 */
PTC_API int ptc_reshard_hosts_load_locals(const ptc_transport *t, int rc, const char *host_name,
                                          ptc_store *s, uint64_t version, const int *ranks,
                                          size_t nranks, const struct ptc_ckpt_local *locals,
                                          size_t n,
                                          const ptc_config *cfg, const ptc_rules *rules,
                                          struct ptc_ckpt_record *rec,
                                          ptc_reshard_hosts_result *res);

/* ---- in-memory executors ------------------------------------------------ */

/**
 * Run a plan on host buffers over MPI. Every process of @p comm calls it;
 * process i acts as source rank i (if i < source world) and target rank i
 * (if i < target world); the communicator must have at least
 * max(source world, target world) processes (extra processes just return).
 * The plan must be identical on every process (same layouts and options).
 * @param src      per tensor, this rank's source local tensor (row-major,
 *                 the source dtype), NULL where the rank holds none
 * @param dst      per tensor, this rank's target local tensor, NULL where
 *                 it holds none; filled on return (reused shards are copied
 *                 from @p src unless src[t] == dst[t])
 * @return PTC_OK, PTC_E_MPI (naming the call), PTC_E_INVAL (comm too small),
 *   PTC_E_NOMEM. Collective: on error other processes may block.
 */
PTC_API int ptc_reshard_host(const ptc_plan *p, MPI_Comm comm, const void *const *src,
                             void *const *dst);

/**
 * ptc_reshard_host() for the target tensors [@p t_lo, @p t_hi) only: their
 * transfers, fan-outs and reused copies, nothing else. Running consecutive
 * ranges one after another moves the whole plan with message buffers no
 * larger than one range's bytes (the rounds of ptc_exec_resize_state()).
 * Every process must pass the same range.
 * @return as ptc_reshard_host().
 */
PTC_API int ptc_reshard_host_range(const ptc_plan *p, MPI_Comm comm, size_t t_lo, size_t t_hi,
                                   const void *const *src, void *const *dst);

/**
 * ptc_reshard_host_range() where a process may hold several ranks of a
 * layout, or none: @p src_owner[r] / @p dst_owner[r] is the process (rank
 * in @p comm) that holds source / target rank r, for every rank of the
 * plan's source / target world; @p src[r] / @p dst[r] is rank r's tensor
 * array (per tensor, as ptc_reshard_host's @p src / @p dst) on the process
 * that holds it, and is not read elsewhere (NULL there). Reused shards move
 * whole when their source and target ranks are on different processes. The
 * plan's transfer kinds and figures still assume rank r is one process for
 * both layouts. Every process must pass the same maps and range. @p p may
 * be the whole plan or this process's per-process plan
 * (ptc_plan_options: src_proc = @p src_owner, dst_proc = @p dst_owner,
 * proc = this process): only the transfers and reused shards the process
 * sends or receives are read.
 * @return as ptc_reshard_host(); PTC_E_INVAL for an owner outside @p comm.
 */
PTC_API int ptc_reshard_host_owned_range(const ptc_plan *p, MPI_Comm comm, size_t t_lo,
                                         size_t t_hi, const int *src_owner,
                                         const void *const *const *src, const int *dst_owner,
                                         void *const *const *dst);

/**
 * Cut tensors 0..nt-1 into rounds of consecutive tensors for an exchange in
 * bounded memory, the same cut on every process of @p comm (collective;
 * call it on every process, also after a failure agreed on beforehand).
 * Each process gives only its own bytes: @p bytes[t] is what it sends plus
 * receives of tensor t (from its per-process plan). With m[t] the most
 * any process moves of tensor t (one all-reduce), a round closes before
 * the tensor that would take the sum of m over the round past @p budget,
 * unless the round is empty: so no process moves more than @p budget in a
 * round, except in a round of one tensor over it.
 * @param starts  room for nt + 1 entries; receives nrounds + 1: round i is
 *                tensors [starts[i], starts[i+1]) (no round when nt is 0)
 * @param max_round_bytes  receives the most bytes one process moves in one
 *                round (may be NULL)
 * @param max_total_bytes  receives the most bytes one process moves in all
 *                (may be NULL)
 * @return PTC_OK; PTC_E_MPI; PTC_E_NOMEM (on any process: every process
 *   returns an error); PTC_E_RANGE (nt over 2^31 - 2).
 */
PTC_API int ptc_plan_rounds(MPI_Comm comm, const uint64_t *bytes, size_t nt, uint64_t budget,
                            size_t *starts, size_t *nrounds, uint64_t *max_round_bytes,
                            uint64_t *max_total_bytes);

/**
 * NCCL context for ptc_reshard_device(): a communicator over the processes
 * of an MPI communicator (ncclUniqueId broadcast over MPI), set up once and
 * reused for every reshard.
 */
typedef struct ptc_reshard_nccl ptc_reshard_nccl;

/** Create the NCCL context (collective over @p comm). The calling process
 * must have selected its CUDA device.
 * @return PTC_OK, PTC_E_MPI, PTC_E_NCCL, PTC_E_CUDA, PTC_E_NOMEM;
 *   PTC_E_UNSUPPORTED in a build without NCCL. */
PTC_API int ptc_reshard_nccl_create(ptc_reshard_nccl **out, MPI_Comm comm);

/** Destroy the context. NULL is a no-op. */
PTC_API void ptc_reshard_nccl_destroy(ptc_reshard_nccl *ctx);

/**
 * ptc_reshard_host() for device buffers: boxes are packed by CUDA kernels
 * into device staging buffers, exchanged with grouped ncclSend/ncclRecv and
 * unpacked by CUDA kernels. @p stream is a cudaStream_t (NULL: default);
 * returns after the stream has completed.
 * @return PTC_OK, PTC_E_NCCL, PTC_E_CUDA, PTC_E_INVAL, PTC_E_NOMEM;
 *   PTC_E_UNSUPPORTED in a build without NCCL.
 */
PTC_API int ptc_reshard_device(const ptc_plan *p, ptc_reshard_nccl *ctx,
                               const void *const *src, void *const *dst, void *stream);

#ifdef __cplusplus
}
#endif
#endif
