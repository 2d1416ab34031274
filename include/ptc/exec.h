/**
 * @file exec.h
 * @brief Pipeline runtime: runs a schedule (ptc/sched.h) over MPI ranks with
 *        user compute callbacks; process groups; fake compute. The demo
 *        model used by `ptc train` is in ptc/exec_model.h.
 *
 * A training loop creates one ptc_exec per process with the schedule, the
 * parallel configuration, its stage callbacks and the size of the tensors
 * that cross stage boundaries, then calls ptc_exec_step() once per
 * optimizer step. The runtime posts receives ahead of need and sends as soon
 * as their producer is done (non-blocking MPI), keeps a pool of
 * preallocated boundary buffers, frees a micro-batch's buffers as soon as
 * its backward is done, reduces gradients over the data-parallel replicas
 * (and Chimera's replica pairs), calls the optimizer and records per-action
 * timings. docs/runtime.md is the long form.
 *
 * MPI must be initialised by the caller (the library never calls MPI_Init).
 *
 * @note Thread safety: a ptc_exec and a ptc_exec_fake are externally
 *       synchronised and must be used from the thread that initialised MPI.
 *       The group arithmetic functions are pure and safe.
 */
#ifndef PTC_EXEC_H
#define PTC_EXEC_H

#include <mpi.h>

#include "ptc/config.h"
#include "ptc/layout.h"
#include "ptc/error.h"
#include "ptc/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- process groups (pure arithmetic) -------------------------------------- */

/** Group kinds of a parallel configuration (rank = (pp_i*D + dp_i)*T + tp_i). */
typedef enum ptc_exec_group_kind {
    PTC_EXEC_GROUP_PIPE = 0, /**< same (dp_i, tp_i), ordered by pp_i */
    PTC_EXEC_GROUP_DP = 1,   /**< same (pp_i, tp_i), ordered by dp_i */
    PTC_EXEC_GROUP_TP = 2,   /**< same (pp_i, dp_i), ordered by tp_i */
    PTC_EXEC_GROUP_PAIR = 3, /**< Chimera replica pair: same tp_i and
                                  pp_i in {i, P-1-i}, all dp_i, ordered by
                                  (pp_i, dp_i) */
} ptc_exec_group_kind;

/**
 * Members of @p rank's group of kind @p kind, in group-rank order.
 * @param members receives up to @p cap world ranks
 * @param n       receives the group size
 * @param index   receives @p rank's position in the group (may be NULL)
 * @return PTC_OK, PTC_E_RANGE (rank outside the world, or @p cap too small)
 *         or PTC_E_INVAL (unknown kind).
 */
PTC_API int ptc_exec_group_members(const ptc_config *c, int rank,
                                   ptc_exec_group_kind kind, int *members,
                                   size_t cap, int *n, int *index);

/**
 * Colour and key for MPI_Comm_split that build @p kind's groups: ranks with
 * the same colour form one group, ordered by key (as ptc_exec_group_members).
 * @return PTC_OK, PTC_E_RANGE or PTC_E_INVAL.
 */
PTC_API int ptc_exec_group_color(const ptc_config *c, int rank,
                                 ptc_exec_group_kind kind, int *color, int *key);

/* ---- stage callbacks ------------------------------------------------------- */

/**
 * A rank's compute, one set of callbacks for all its chunks. Every callback
 * returns PTC_OK or a negative code (with ptc_error_set); a failure stops the
 * step with that code. Boundary buffers are `act_bytes` long (host memory,
 * or device memory in PTC_EXEC_DEVICE_CUDA mode):
 * - @p in: the chunk's input activation; NULL on the first stage of a
 *   pipeline. Valid until the micro-batch's B (or W) on this chunk returns.
 * - @p out: where F writes its output; NULL on the last stage.
 * - @p dout: gradient of the loss w.r.t. @p out; NULL on the last stage.
 *   Valid during the call.
 * - @p dinp: where B / I write the gradient w.r.t. @p in; NULL on the first
 *   stage. Written, not accumulated.
 */
typedef struct ptc_exec_stage {
    void *user;
    int (*forward)(void *user, int chunk, int mb, const void *in, void *out);
    /** Full backward; may be NULL if the schedule uses only I/W. */
    int (*backward)(void *user, int chunk, int mb, const void *dout, void *dinp);
    /** Input-gradient half (zero-bubble schedules); may be NULL otherwise. */
    int (*backward_input)(void *user, int chunk, int mb, const void *dout,
                          void *dinp);
    /** Weight-gradient half; may be NULL if the schedule has no W. */
    int (*backward_weight)(void *user, int chunk, int mb);
    /** The chunk's flat F32 gradient buffer, reduced (summed) over the
     * chunk's replicas after the last backward; NULL callback or *count 0:
     * nothing to reduce. The pointer must stay valid during the step. */
    int (*grads)(void *user, int chunk, float **grad, size_t *count);
    /** Called once per step after the reduction; may be NULL. */
    int (*optimizer_step)(void *user);
} ptc_exec_stage;

/** Where boundary buffers live and how they travel. */
enum {
    PTC_EXEC_DEVICE_HOST = 0, /**< host memory, non-blocking MPI */
    PTC_EXEC_DEVICE_CUDA = 1, /**< device memory, NCCL grouped send/recv
                                   (needs PTC_WITH_NCCL) */
};

/** Runtime options. Initialise with ptc_exec_opts_init(). */
typedef struct ptc_exec_opts {
    size_t act_bytes;    /**< bytes of every activation / gradient message (> 0) */
    int device;          /**< PTC_EXEC_DEVICE_* */
    double timeout;      /**< watchdog: seconds without progress; <= 0: none */
    int prepost;         /**< receives posted ahead of need; 0 = all of a step */
    bool overlap_reduce; /**< start a chunk's gradient reduction as soon as
                              its last backward is done (else after all) */
    double jitter;       /**< extra random sleep before each compute, uniform
                              in [0, jitter) seconds; 0 = none */
    uint64_t jitter_seed;
} ptc_exec_opts;

/** Defaults: act_bytes 0 (must be set), host, no timeout, prepost all,
 * no overlap, no jitter. */
PTC_API void ptc_exec_opts_init(ptc_exec_opts *o);

/** Timing of one action of the last step (seconds from the step's start,
 * which is right after the step's opening barrier). SEND: posted..completed;
 * RECV: posted..completed; compute: start..end. */
typedef struct ptc_exec_timing {
    double start, end;
} ptc_exec_timing;

/** Opaque runtime. */
typedef struct ptc_exec ptc_exec;

/**
 * Create the runtime of this process (collective over @p world: every rank
 * calls it with the same schedule, configuration and options).
 * Splits @p world into the process groups in a fixed order (pipe, dp, tp,
 * pair), builds this rank's plan from @p s (communication is inferred if
 * @p s is compute-only) and preallocates its buffers.
 * @param s      a validated schedule with ptc_sched_ranks(s) == c->pp; for
 *               pipes == 2 (Chimera) the bidirectional placement
 * @param c      the configuration; ptc_config_world(c) must equal the size
 *               of @p world
 * @param fns    callbacks (copied)
 * @return PTC_OK, PTC_E_INVAL (schedule/config mismatch, missing callback),
 *         PTC_E_UNSUPPORTED (CUDA mode without NCCL), PTC_E_MPI,
 *         PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_exec_create(ptc_exec **out, const ptc_sched *s,
                            const ptc_config *c, MPI_Comm world,
                            const ptc_exec_stage *fns, const ptc_exec_opts *o);

/** Free; NULL is a no-op. Not collective (frees its communicators). */
PTC_API void ptc_exec_destroy(ptc_exec *e);

/**
 * Run one step: every action of this rank's list, the gradient reduction
 * and the optimizer. Collective over the world.
 * @return PTC_OK; a callback's code; PTC_E_MPI; PTC_E_TIMEOUT (the watchdog
 *         fired: the position in the list and the pending transfers were
 *         logged at PTC_LOG_ERROR, the communicators are unusable and the
 *         caller should exit); PTC_E_NCCL / PTC_E_CUDA in device mode;
 *         PTC_E_INVAL after an earlier failed step.
 * Any failure is final for the executor: receives still posted are
 * cancelled, send buffers still in flight are given up (never reused or
 * freed), and later steps are refused — destroy it and stop the job
 * (other ranks may be waiting on this one).
 */
PTC_API int ptc_exec_step(ptc_exec *e);

/**
 * Per-action timings of the last step: @p *n entries in list order (the
 * list of ptc_exec_actions()). Owned by @p e, valid until the next step.
 */
PTC_API const ptc_exec_timing *ptc_exec_timings(const ptc_exec *e, size_t *n);

/** This rank's action list with explicit communication (peers are
 * pipeline ranks). Owned by @p e, valid while it lives. */
PTC_API const ptc_sched_action *ptc_exec_actions(const ptc_exec *e, size_t *n);

/** Step figures of this rank for the last step. */
typedef struct ptc_exec_stats {
    double step_seconds;    /**< barrier to end of the optimizer */
    double actions_seconds; /**< barrier to end of the last action */
    double compute_seconds; /**< time inside compute callbacks */
    double reduce_seconds;  /**< waiting for the gradient reduction */
    size_t buffers;         /**< boundary buffers allocated (pool size) */
    size_t peak_buffers;    /**< largest number in use at once */
    size_t messages;        /**< sends + receives this step */
} ptc_exec_stats;

/** Figures of the last step. */
PTC_API void ptc_exec_get_stats(const ptc_exec *e, ptc_exec_stats *st);

/** This process's pipeline rank (pp_i), data-parallel and tensor-parallel
 * indices. */
PTC_API void ptc_exec_coords(const ptc_exec *e, int *pp_i, int *dp_i, int *tp_i);

/** The tensor-parallel communicator, for callbacks that want one. Owned by
 * @p e (valid while it lives). */
PTC_API MPI_Comm ptc_exec_tp_comm(const ptc_exec *e);

/** The pipeline communicator (ranks = pipeline ranks of the schedule). */
PTC_API MPI_Comm ptc_exec_pipe_comm(const ptc_exec *e);

/** The communicator gradients are reduced over: the data-parallel group, or
 * for a two-pipe (Chimera) schedule the replica-pair group (same tp_i,
 * pp_i in {i, P-1-i}, all dp_i, ordered by (pp_i, dp_i)). */
PTC_API MPI_Comm ptc_exec_reduce_comm(const ptc_exec *e);

/* ---- plan (one process, testable) ------------------------------------------ */

/** Figures of a rank's plan, from a dry run of its list in order (a send's
 * buffer is counted until its SEND action). */
typedef struct ptc_exec_plan_info {
    size_t actions, sends, recvs, local_handoffs;
    size_t peak_buffers;   /**< boundary buffers live at once, at most */
    size_t final_buffers;  /**< live after the last action (0 if the list
                                frees everything it allocates) */
} ptc_exec_plan_info;

/**
 * Dry-run @p rank's list of @p s (communication inferred on a copy if
 * needed) and report its buffer lifetimes.
 * @return PTC_OK, PTC_E_INVAL (an input that is never produced, a buffer
 *         produced twice) or PTC_E_NOMEM.
 */
PTC_API int ptc_exec_plan_inspect(const ptc_sched *s, int rank,
                                  ptc_exec_plan_info *info);

/** Message tag of a transfer (unique per (kind, micro-batch, receiving
 * global stage)); tags fit in @p tag_ub or the function returns -1. */
PTC_API int ptc_exec_tag(int tensor, int mb, int gstage, int microbatches,
                         int tag_ub);

/* ---- fake compute ------------------------------------------------------------ */

/** Opaque fake-compute state. */
typedef struct ptc_exec_fake ptc_exec_fake;

/**
 * Callbacks that sleep for the simulator's costs (F, B, I = B - W, W,
 * scaled by P/S per chunk as in ptc_sched_simulate) times @p unit seconds,
 * write a pattern naming (pipe, stage, micro-batch, kind) into every output
 * buffer and check the pattern of every input: a message delivered to the
 * wrong place fails the step with PTC_E_INVAL.
 * @param s    the schedule (borrowed; must outlive the fake)
 * @param rank pipeline rank
 * @return PTC_OK, PTC_E_INVAL (act_bytes < 32) or PTC_E_NOMEM.
 */
PTC_API int ptc_exec_fake_create(ptc_exec_fake **out, const ptc_sched *s,
                                 int rank, const ptc_sched_costs *c,
                                 double unit, size_t act_bytes);
/** Free; NULL is a no-op. */
PTC_API void ptc_exec_fake_destroy(ptc_exec_fake *f);
/** The callbacks (user = @p f). */
PTC_API void ptc_exec_fake_stage(ptc_exec_fake *f, ptc_exec_stage *out);
/** Number of inputs whose pattern was checked so far. */
PTC_API size_t ptc_exec_fake_checked(const ptc_exec_fake *f);

/* ---- NCCL (device buffers) ------------------------------------------------------- */

/**
 * Create an NCCL communicator over @p comm (collective): rank 0 makes the
 * ncclUniqueId, the ranks agree that it did (a failure there is every rank's
 * PTC_E_NCCL), and it is broadcast over MPI. *out is an ncclComm_t.
 * @return PTC_OK, PTC_E_MPI, PTC_E_NCCL; PTC_E_UNSUPPORTED in a build
 *         without NCCL.
 */
PTC_API int ptc_exec_nccl_comm_create(void **out, MPI_Comm comm);
/** Destroy an NCCL communicator; NULL is a no-op. */
PTC_API void ptc_exec_nccl_comm_destroy(void *nccl_comm);

/* ---- elastic resize: a live job's state and groups under a new configuration ---- */

/** The process groups of a configuration within a world (every process of
 * the world holds one, MPI_COMM_NULL where it is not a member). */
typedef struct ptc_exec_groups {
    ptc_config cfg;
    bool active;       /**< this process runs a rank of @ref cfg (world rank < its world) */
    int rank;          /**< that rank (the world rank), -1 when not active */
    MPI_Comm active_comm; /**< the active processes, ranked as the configuration */
    MPI_Comm pipe, dp, tp; /**< this rank's groups (PTC_EXEC_GROUP_*) */
} ptc_exec_groups;

/** Build the groups of @p c over @p world (collective): the first
 * world(c) processes are active. @return PTC_OK, PTC_E_CONFIG (c needs more
 * processes than @p world has), PTC_E_MPI. */
PTC_API int ptc_exec_groups_create(ptc_exec_groups *g, const ptc_config *c, MPI_Comm world);
/** Free the communicators of @p g (collective as MPI_Comm_free). */
PTC_API void ptc_exec_groups_free(ptc_exec_groups *g);

/** Options of ptc_exec_resize(). Zero-initialise. */
typedef struct ptc_exec_resize_options {
    /** Most bytes one process sends plus receives in one round (0: 256 MiB).
     * Tensors move in rounds of consecutive tensors within this budget (a
     * tensor over it is a round of its own), so the extra memory of the
     * move is one round's message buffers, not a copy of the state. */
    uint64_t budget;
    int hosts;         /**< ranks per host for the plan's figures (0: one host) */
} ptc_exec_resize_options;

/** What a resize did. */
typedef struct ptc_exec_resize_stats {
    double plan_seconds;     /**< the plan (and its rounds) */
    double move_seconds;     /**< the exchange */
    double groups_seconds;   /**< the new groups */
    uint64_t bytes_total;    /**< bytes of the target layout */
    uint64_t bytes_moved;    /**< bytes that crossed processes */
    uint64_t max_process_bytes; /**< most bytes one process sent plus received */
    uint64_t rounds;         /**< exchange rounds */
    uint64_t max_round_bytes;/**< most bytes one process sent plus received in a round */
} ptc_exec_resize_stats;

/**
 * Move a live job's state from layout @p from to layout @p to between the
 * processes of @p world, in memory, by the minimal plan (ptc_plan_create;
 * ptc_reshard_host_range per round), and build the groups of @p to's
 * configuration. Process i of @p world is rank i of both layouts (a
 * process outside a layout's world passes NULLs for it). Collective over
 * @p world; every process returns the same code.
 * @param src  per tensor of @p from, this process's local tensor (NULL where
 *             it holds none, or when it is no rank of @p from)
 * @param dst  per tensor of @p to, this process's destination (allocated by
 *             the caller in @p to's local shapes; NULL where none)
 * @param groups receives the new groups (may be NULL: none built)
 * @param stats  may be NULL
 * @return PTC_OK; PTC_E_CONFIG (a layout needs more processes than @p
 *   world); the errors of ptc_plan_create and ptc_reshard_host; PTC_E_MPI.
 */
PTC_API int ptc_exec_resize(const ptc_layout *from, const void *const *src,
                            const ptc_layout *to, void *const *dst, MPI_Comm world,
                            const ptc_exec_resize_options *opts, ptc_exec_groups *groups,
                            ptc_exec_resize_stats *stats);

/**
 * ptc_exec_resize() where a process may hold several ranks of a layout, or
 * none (a pipeline schedule with several chunks per process stores each
 * chunk as a rank of its own: interleaved, V-shaped, Chimera):
 * @p from_owner[r] / @p to_owner[r] is the process of @p world that holds
 * rank r of @p from / @p to (every rank of each layout's world), and
 * @p src[r] / @p dst[r] that rank's tensor array (as ptc_exec_resize's
 * @p src / @p dst) on that process (NULL elsewhere). Builds no groups.
 * Collective over @p world; every process returns the same code.
 * @return as ptc_exec_resize(); PTC_E_CONFIG for an owner outside @p world.
 */
PTC_API int ptc_exec_resize_owned(const ptc_layout *from, const int *from_owner,
                                  const void *const *const *src, const ptc_layout *to,
                                  const int *to_owner, void *const *const *dst, MPI_Comm world,
                                  const ptc_exec_resize_options *opts,
                                  ptc_exec_resize_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
