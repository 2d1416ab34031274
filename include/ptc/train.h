/**
 * @file train.h
 * @brief The training job of `ptc train` as a library (exec/model/train*.c):
 *        the demo model (ptc/exec_model.h) or fake compute, driven by the
 *        pipeline runtime (ptc/exec.h) over MPI for a number of steps.
 *
 * A job is prepared alone on every process (options checked, schedule
 * generated or read and validated, the GPU chosen) before MPI is started,
 * so that every process of a bad job fails alike with nothing sent; then
 * run collectively. Process 0 receives one record per step.
 *
 * @note Thread safety: a ptc_train is externally synchronised and must run
 *       on the thread that initialised MPI.
 */
#ifndef PTC_TRAIN_H
#define PTC_TRAIN_H

#include <mpi.h>

#include "ptc/exec_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What process 0 learns of an online resize (or of a stop). */
typedef struct ptc_train_resize {
    int64_t step;            /**< the first step under the new configuration */
    char from[128], to[128]; /**< the configurations (keys form); to "" for a stop */
    const char *reason;      /**< "planned" (resize_step), "control" (the
                                  control file), "stop" */
    double plan_seconds;     /**< layouts and the plan */
    double move_seconds;     /**< the state moving between processes */
    double rebuild_seconds;  /**< new communicators, runtime, data source */
    uint64_t bytes_moved;    /**< bytes that crossed processes (all of them) */
    uint64_t max_process_bytes; /**< most bytes one process sent plus received */
    uint64_t peak_rss_bytes; /**< largest peak RSS of a process after the move */
    uint64_t version;        /**< a stop: the version saved (0: none) */
} ptc_train_resize;

/** Called on process 0 after each online resize and at a stop. */
typedef void (*ptc_train_resize_fn)(const ptc_train_resize *r, void *user);

/** Called from the job's watchdog thread (@ref ptc_train_opts.timeout) with
 * one line that says where this process waited without progress, e.g.
 * "watchdog: rank 0: no progress for 15.0 s while saving the state (step
 * 8)". The job cannot go on (its processes may be blocked in MPI or in
 * I/O): the callback should end the process (`ptc train` prints the line
 * and exits 1; mpirun then ends the others). Must not call the library. */
typedef void (*ptc_train_timeout_fn)(const char *where, void *user);

/** Options of a training job. Initialise with ptc_train_opts_init(). */
typedef struct ptc_train_opts {
    ptc_config cfg;          /**< dp, tp, pp (the demo model has tp = 1) */
    const char *schedule;    /**< a kind (ptc_sched_kind_parse) or a schedule
                                  text file (docs/schedule-format.md) */
    int microbatches;        /**< per data-parallel replica and step */
    int steps;               /**< optimizer steps to run */
    int chunks, k;           /**< generator parameters (interleaved, kFkB) */
    ptc_exec_model_cfg model;/**< the demo model */
    const char *data;        /**< "synthetic" (from data_seed), "tokens:FILE"
                                  (little-endian u16 tokens, windows of
                                  tokens + 1), "dataset:NAME" (a dataset of
                                  @ref store, read by the epoch order) or
                                  "mount:MNT/datasets/NAME" (the step files of
                                  a mounted view of it) */
    uint64_t data_seed;      /**< seed of the data: synthetic tokens, or the
                                  epoch order of a dataset */
    uint64_t data_epoch;     /**< dataset: the epoch to start in */
    uint64_t data_position;  /**< dataset: the sample position to start at in
                                  that epoch's order (a `start-X`) */
    const char *store;       /**< the job's store: its datasets, checkpoints and
                                  the version a resume starts from (NULL: none) */
    int save_every;          /**< with @ref store: save the whole training state
                                  (parameters, AdamW moments, the record) every
                                  N steps and after the last; 0: after the last
                                  only; -1 (the default): never. The final
                                  parameters as one safetensors file: save_every
                                  0, then `ptc export --store DIR --out FILE
                                  --params-only` */
    bool save_async;         /**< the saves of @ref save_every before the last in
                                  the background (ptc_ckpt_save_async): the step
                                  waits for a copy of the state only; the
                                  version commits at the first step boundary
                                  after its writes (at the latest before the
                                  next save, a resize or the end) */
    /** Online resizes: at the start of step resize_step[i] the job moves to
     * resize_cfg[i] (its state moves between the processes in memory, by
     * the minimal plan; ptc_reshard_host). The world must hold the largest
     * configuration; processes outside the current one wait. Steps
     * increasing, @ref nresize of them. Borrowed. */
    const int64_t *resize_step;
    const ptc_config *resize_cfg;
    int nresize;
    /** A file process 0 reads at every step boundary (NULL: none): a line
     * `resize CFG` moves the job online to CFG, `stop` saves (with a store)
     * and ends the job; the file is removed once read. */
    const char *control;
    /** Checked at every step boundary on process 0: non-zero saves (with a
     * store) and ends the job, as `stop` does. A signal handler may set it
     * (volatile sig_atomic_t). NULL: none. */
    volatile int *stop;
    bool resume;             /**< start from @ref resume_version of @ref store,
                                  whatever configuration saved it: parameters,
                                  moments, step, data seed and position */
    uint64_t resume_version; /**< 0: the newest */
    /** -1 (the default): @ref store is one store that every process opens
     * (a shared filesystem across hosts). >= 0: @ref store names a store on
     * each host (the same path, a local disk on each), the job's versions
     * spread over them (docs/format.md §10) with this many copies of each
     * host's shards on the next hosts; a resume takes what a host lacks from
     * the others over MPI. Not with resizes or a control file. */
    int replicas;
    /** With @ref replicas: a store every process can open (a shared or
     * persistent filesystem; NULL: none) that receives a copy of every
     * @ref persist_every -th version as an ordinary single store (the
     * processes write their ranks' shards in parallel, process 0 commits),
     * in the save, before the job goes on. */
    const char *persist;
    int persist_every;       /**< >= 1 (default 1) */
    /** With @ref replicas: each host keeps its parts of the newest
     * @ref keep_local versions and deletes older ones (0, the default:
     * all). */
    int keep_local;
    bool cuda;               /**< model and boundary buffers on a GPU */
    bool fake;               /**< fake compute instead of the model */
    double unit_ms;          /**< fake compute: ms per unit of cost */
    double cost_f, cost_b, cost_w; /**< simulator costs (generators, fake) */
    size_t act_bytes;        /**< fake compute: boundary message bytes */
    /** Watchdog seconds (<= 0: none): every wait of the job is bounded by
     * it. Inside a step the runtime reports a rank whose transfers make no
     * progress for that long (PTC_E_TIMEOUT); outside, a thread sees a wait
     * that does not end — the step's data, its figures, the decision at a
     * step boundary, a save, a resize, the store and the resume at the
     * start — and calls @ref on_timeout. Set it above the longest save or
     * load. */
    double timeout;
    ptc_train_timeout_fn on_timeout; /**< see ptc_train_timeout_fn (user:
                                          ptc_train_run's); NULL: logged only */
    double jitter_ms;        /**< random sleep before each compute action */
    int prepost;             /**< receives posted ahead (0: all of a step) */
    bool overlap_reduce;     /**< start reductions as chunks finish */
    ptc_train_resize_fn on_resize; /**< process 0, after each resize or stop
                                        (user: ptc_train_run's); may be NULL */
    /** With @ref resume: stores that hold no committed version yet are no
     * error, the job starts at step 0 (`ptc elastic` with stores on each
     * host, which it cannot look into, resumes every launch this way). */
    bool resume_any;
    /** NULL, or an ordinary store every process opens (the persistent tier
     * of @ref persist) to resume from instead of @ref store: its newest
     * version (or @ref resume_version) is loaded, and the job goes on saving
     * into @ref store. Implies @ref resume. */
    const char *resume_from;
    /** > 0: run until the step count reaches until_step (@ref steps is then
     * only its bound): a job resuming at step S runs until_step - S steps,
     * none when S is there already. */
    int64_t until_step;
} ptc_train_opts;

/** Defaults: 4-layer model (hidden 16, vocab 32, tokens 8, lr 1e-3),
 * synthetic data, CPU, chunks 2, k 2, costs F 1 B 2 W 0, fake unit 1 ms and
 * 1024-byte messages; cfg, schedule, microbatches and steps must be set. */
PTC_API void ptc_train_opts_init(ptc_train_opts *o);

/** What process 0 learns after each step. Times are the largest over the
 * processes, compute the sum; messages are summed. */
typedef struct ptc_train_step {
    int64_t step;
    bool has_loss;           /**< false with fake compute */
    double loss;             /**< mean over the step's micro-batches */
    double step_ms, actions_ms, reduce_ms, compute_ms;
    double predicted_ms;     /**< fake compute: the simulator's makespan; else 0 */
    long messages, peak_buffers;
} ptc_train_step;

/** Called on process 0 after each step; a non-OK return stops the job
 * (every process returns that code after the step). */
typedef int (*ptc_train_step_fn)(const ptc_train_step *rec, void *user);

/** A prepared job (opaque). */
typedef struct ptc_train ptc_train;

/**
 * Check @p o, build and validate the schedule, and (cuda) bind this process
 * to GPU local-rank mod count, the local rank read from the launcher's
 * environment (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID).
 * Sends nothing: call it before MPI_Init so that a bad job fails alike on
 * every process. The options' strings are borrowed until destroy.
 * @return PTC_OK; PTC_E_INVAL (bad options, naming the option); PTC_E_FORMAT
 *   (a schedule file that does not parse, or that the validator rejects,
 *   with its message); PTC_E_CONFIG (a schedule whose ranks or micro-batches
 *   do not match pp and microbatches); PTC_E_IO; PTC_E_UNSUPPORTED (cuda in a
 *   build without CUDA or NCCL); PTC_E_CUDA.
 */
PTC_API int ptc_train_prepare(ptc_train **out, const ptc_train_opts *o);

/** The validated schedule (owned by @p t). */
PTC_API const ptc_sched *ptc_train_schedule(const ptc_train *t);

/** Figures of a finished job. */
typedef struct ptc_train_result {
    size_t actions_rank0;    /**< actions in process 0's list per step */
    uint64_t resumed_from;   /**< the version a resume loaded (0: none) */
    double load_seconds;     /**< a resume: seconds to load that version (all
                                  processes, until they agree); set before the
                                  first step, so on_step may read it */
    /** A resume with a store on each host (@ref ptc_train_opts.replicas):
     * the bytes its plan moved between hosts and the least any plan could
     * (bytes_network_lower_bound); 0 otherwise. */
    uint64_t load_bytes_network, load_bytes_network_lower_bound;
    int64_t first_step;      /**< the first step this run took */
    uint64_t last_version;   /**< the last version this run saved (0: none) */
    size_t saves;            /**< versions saved */
    bool stopped;            /**< ended early by `stop` or @ref ptc_train_opts.stop */
    int64_t last_step;       /**< the steps completed when the run ended */
    unsigned long fake_checked; /**< fake compute: inputs checked, all processes */
    int64_t failed_step;     /**< the step that failed on this process (its
                                  error returned, other processes possibly
                                  blocked), or -1 */
} ptc_train_result;

/**
 * Run the job: collective over @p world, which must have exactly
 * dp * tp * pp processes (at least those of the largest configuration when
 * the job resizes online; the others wait). A bad world size or a failure before the first
 * step returns the same code on every process; a step that fails returns
 * its error on the process where it failed, while others may stay blocked
 * in MPI: the caller then aborts the job (MPI_Abort), as `ptc train` does.
 * @param on_step  called on process 0 after each step (may be NULL)
 * @param res      figures, valid on process 0 (failed_step on every
 *                 process); may be NULL
 * @return PTC_OK; PTC_E_CONFIG (world size); the runtime's and model's
 *   errors (PTC_E_TIMEOUT from the watchdog, PTC_E_MPI, PTC_E_RANGE for a
 *   token outside the vocabulary, PTC_E_IO, PTC_E_NOMEM); on_step's code.
 *   After PTC_E_TIMEOUT or PTC_E_MPI the communicator may hold pending
 *   messages: abort the job.
 */
PTC_API int ptc_train_run(ptc_train *t, MPI_Comm world, ptc_train_step_fn on_step, void *user,
                          ptc_train_result *res);

/** Free; NULL is a no-op. */
PTC_API void ptc_train_destroy(ptc_train *t);

#ifdef __cplusplus
}
#endif
#endif
