/**
 * @file sched.h
 * @brief Pipeline schedules: IR, text format, generators, validator,
 *        simulator and pictures.
 *
 * A schedule has `ranks` workers, `pipes` pipelines (1, or 2 for Chimera
 * and DualPipe) of `stages` stages each, and `microbatches` micro-batches;
 * micro-batch m flows through pipeline ptc_sched_mb_pipe(m). The placement maps each
 * (pipe, stage) to a (rank, chunk): chunk c of rank r is the c-th model
 * piece that r holds. Looped (interleaved: stage s on rank s mod P),
 * V-shaped (stage s and 2P-1-s on rank s) and bidirectional (Chimera: rank
 * i holds stage i of pipe 0 and stage P-1-i of pipe 1) layouts are all
 * placements.
 *
 * Every rank runs an ordered list of actions: compute (F, B, or its halves
 * I and W) on one of its chunks for one micro-batch, and SEND/RECV of an
 * activation (forward direction) or a gradient (backward direction). A
 * schedule may be written compute-only; ptc_sched_infer_comm() then adds
 * the SEND/RECV actions in an order that is deadlock-free under blocking
 * point-to-point with per-peer FIFO matching.
 *
 * Text format: docs/schedule-format.md; torch.distributed.pipelining's
 * action lists: ptc_sched_to_torch(), ptc_sched_from_torch(),
 * docs/pipelines.md.
 *
 * @note Thread safety: a ptc_sched or ptc_sched_sim is externally
 *       synchronised (one writer, or any number of readers); distinct
 *       objects may be used from different threads. All other functions
 *       are pure and safe.
 */
#ifndef PTC_SCHED_H
#define PTC_SCHED_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Limits enforced by create and parse (also bound untrusted input). */
#define PTC_SCHED_MAX_RANKS (1 << 14)
#define PTC_SCHED_MAX_STAGES (1 << 16)   /**< stages per pipeline */
#define PTC_SCHED_MAX_PIPES 16
#define PTC_SCHED_MAX_MICROBATCHES (1 << 20)
/** Largest pipes * stages * microbatches (bounds the validator's tables). */
#define PTC_SCHED_MAX_CELLS (1 << 22)
/** Largest number of actions over all ranks. */
#define PTC_SCHED_MAX_ACTIONS (1 << 25)

/** Action kinds. */
enum {
    PTC_SCHED_F = 0,    /**< forward of one micro-batch on one chunk */
    PTC_SCHED_B = 1,    /**< full backward (input and weight gradients) */
    PTC_SCHED_I = 2,    /**< input-gradient half of B */
    PTC_SCHED_W = 3,    /**< weight-gradient half of B */
    PTC_SCHED_SEND = 4, /**< send a tensor to `peer` */
    PTC_SCHED_RECV = 5, /**< receive a tensor from `peer` */
};

/** Tensor kinds carried by SEND/RECV. */
enum {
    PTC_SCHED_ACT = 0,  /**< activation: output of F on stage s, input of F on s+1 */
    PTC_SCHED_GRAD = 1, /**< gradient: output of B/I on stage s, input of B/I on s-1 */
};

/**
 * One action of a rank's list (small value type).
 * For SEND, `chunk` is the local chunk that produced the tensor; for RECV the
 * local chunk that consumes it. `mb` is the micro-batch.
 */
typedef struct ptc_sched_action {
    uint8_t op;     /**< PTC_SCHED_F ... PTC_SCHED_RECV */
    uint8_t tensor; /**< SEND/RECV: PTC_SCHED_ACT or PTC_SCHED_GRAD; else 0 */
    uint16_t chunk; /**< local chunk index on this rank */
    int32_t mb;     /**< micro-batch */
    int32_t peer;   /**< SEND/RECV: the other rank; compute: -1 */
} ptc_sched_action;

/** Opaque schedule. */
typedef struct ptc_sched ptc_sched;

/* ---- building and reading ------------------------------------------------ */

/**
 * Create an empty schedule (no placement, no actions; every micro-batch on
 * pipe 0).
 * @return PTC_OK, PTC_E_RANGE (a size is < 1 or over its limit) or
 *         PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_sched_create(ptc_sched **out, int ranks, int stages, int pipes,
                             int microbatches);

/** Free a schedule; NULL is a no-op. */
PTC_API void ptc_sched_destroy(ptc_sched *s);

/** Deep copy. @return PTC_OK or PTC_E_NOMEM (*out NULL). */
PTC_API int ptc_sched_clone(ptc_sched **out, const ptc_sched *s);

/**
 * Place (pipe, stage) as chunk @p chunk of @p rank. Each (pipe, stage) and
 * each (rank, chunk) may be placed once; chunks of a rank must end up
 * numbered 0..n-1 (checked by ptc_sched_check_placement()).
 * @return PTC_OK, PTC_E_RANGE or PTC_E_INVAL (placed twice).
 */
PTC_API int ptc_sched_place(ptc_sched *s, int pipe, int stage, int rank, int chunk);

/** Looped placement of pipe 0 (requires pipes == 1 and stages % ranks == 0):
 * stage s on rank s mod ranks as chunk s / ranks.
 * @return PTC_OK or PTC_E_INVAL. */
PTC_API int ptc_sched_place_looped(ptc_sched *s);

/** @return PTC_OK if every (pipe, stage) is placed and every rank's chunks
 * are 0..n-1 with n >= 1, else PTC_E_INVAL naming the gap. */
PTC_API int ptc_sched_check_placement(const ptc_sched *s);

/** Assign micro-batch @p mb to pipeline @p pipe. @return PTC_OK/PTC_E_RANGE. */
PTC_API int ptc_sched_set_mb_pipe(ptc_sched *s, int mb, int pipe);

/** Append an action to @p rank's list. Fields are range-checked.
 * @return PTC_OK, PTC_E_RANGE or PTC_E_NOMEM. */
PTC_API int ptc_sched_append(ptc_sched *s, int rank, ptc_sched_action a);

/** Set the informational kind label (<= 31 chars of [a-z0-9-]) and k
 * (0 = none). @return PTC_OK or PTC_E_INVAL. */
PTC_API int ptc_sched_set_kind(ptc_sched *s, const char *kind, int k);

PTC_API int ptc_sched_ranks(const ptc_sched *s);
PTC_API int ptc_sched_stages(const ptc_sched *s);       /**< per pipeline */
PTC_API int ptc_sched_pipes(const ptc_sched *s);
PTC_API int ptc_sched_microbatches(const ptc_sched *s);
/** @return the kind label ("" if none); valid while @p s lives. */
PTC_API const char *ptc_sched_kind(const ptc_sched *s);
/** @return k recorded by the kFkB generator, 0 if none. */
PTC_API int ptc_sched_k(const ptc_sched *s);
/** @return the pipeline of micro-batch @p mb (0 if out of range). */
PTC_API int ptc_sched_mb_pipe(const ptc_sched *s, int mb);
/** @return number of chunks placed on @p rank (0 if out of range). */
PTC_API int ptc_sched_chunks(const ptc_sched *s, int rank);

/** (pipe, stage) of chunk @p chunk of @p rank.
 * @return PTC_OK or PTC_E_RANGE if that chunk is not placed. */
PTC_API int ptc_sched_stage_of(const ptc_sched *s, int rank, int chunk, int *pipe,
                               int *stage);

/** (rank, chunk) of (pipe, stage). @return PTC_OK or PTC_E_RANGE. */
PTC_API int ptc_sched_rank_of(const ptc_sched *s, int pipe, int stage, int *rank,
                              int *chunk);

/**
 * The action list of @p rank: @p *n entries. The pointer is owned by @p s and
 * valid until the next change to @p s. NULL (and *n = 0) if out of range.
 */
PTC_API const ptc_sched_action *ptc_sched_actions(const ptc_sched *s, int rank,
                                                  size_t *n);

/** @return true if any list holds a SEND or RECV. */
PTC_API bool ptc_sched_has_comm(const ptc_sched *s);

/** @return true if both hold the same sizes, placement, micro-batch pipes,
 * kind, k and action lists. */
PTC_API bool ptc_sched_equal(const ptc_sched *a, const ptc_sched *b);

/* ---- text format ---------------------------------------------------------- */

/**
 * Parse the text format (docs/schedule-format.md) from @p len bytes.
 * Micro-batch pipes are inferred from the actions. The result is not
 * validated (call ptc_sched_validate()).
 * @return PTC_OK, PTC_E_FORMAT (detail names the line), PTC_E_RANGE or
 *         PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_sched_parse(ptc_sched **out, const char *text, size_t len);

/**
 * Print in the text format; ptc_sched_parse() of the text gives an equal
 * schedule. *out is NUL-terminated, *len excludes the NUL; release it with
 * ptc_sched_text_free().
 * @return PTC_OK, PTC_E_INVAL (placement incomplete) or PTC_E_NOMEM.
 */
PTC_API int ptc_sched_format(const ptc_sched *s, char **out, size_t *len);

/** Free text returned by this module; NULL is a no-op. */
PTC_API void ptc_sched_text_free(char *text);

/** Token of one action as in the text format ("F3", "B2.1", "SA3.1>2").
 * @return PTC_OK or PTC_E_RANGE if @p cap is too small (>= 40 always fits). */
PTC_API int ptc_sched_action_format(const ptc_sched_action *a, char *buf, size_t cap);

/* ---- costs and links --------------------------------------------------------- */

/** Piecewise-constant bandwidth over time (opaque). */
typedef struct ptc_sched_bw_trace ptc_sched_bw_trace;

/**
 * Parse a bandwidth trace: lines `TIME BANDWIDTH` (bytes per time unit),
 * `#` comments, times strictly increasing from 0, bandwidths >= 0 and the
 * last one > 0 (docs/schedule-format.md).
 * @return PTC_OK, PTC_E_FORMAT (detail names the line) or PTC_E_NOMEM.
 */
PTC_API int ptc_sched_bw_trace_parse(ptc_sched_bw_trace **out, const char *text,
                                     size_t len);
/** Free; NULL is a no-op. */
PTC_API void ptc_sched_bw_trace_destroy(ptc_sched_bw_trace *t);

/** Simulation costs. A stage's costs; an action on one of S stages of a
 * pipeline spread over P ranks costs (P/S) of them (1/V per chunk). */
typedef struct ptc_sched_costs {
    double f;          /**< forward of a whole stage (default 1) */
    double b;          /**< full backward of a whole stage (default 2) */
    double w;          /**< weight-gradient part of b (default 0); I = b - w */
    double latency;    /**< per message (default 0) */
    double bandwidth;  /**< bytes per time unit; 0 = infinite */
    double act_bytes;  /**< bytes per message (activation or gradient) */
    const ptc_sched_bw_trace *trace; /**< overrides bandwidth if set (borrowed) */
} ptc_sched_costs;

/** Fill the defaults (f=1, b=2, everything else 0). */
PTC_API void ptc_sched_costs_init(ptc_sched_costs *c);

/* ---- torch.distributed.pipelining action lists ---------------------------- */

/** Forms of torch's per-rank action lists (the CSV of its schedules). */
enum {
    /** Compute actions only (F, I, W, B): what
     * `_PipelineScheduleRuntime._load_csv(path)` reads and lowers itself. */
    PTC_SCHED_TORCH_COMPUTE = 0,
    /** Compute plus communication (SEND_F/RECV_F/SEND_B/RECV_B in the order
     * of ptc_sched_infer_comm(), WAIT_SEND_F/WAIT_SEND_B, REDUCE_GRAD and
     * WAIT_REDUCE_GRAD): `_load_csv(path, format="compute_comms")`. */
    PTC_SCHED_TORCH_COMMS = 1,
};

/**
 * Write @p s as torch's action lists: one line per rank, comma-separated
 * cells `<stage><type><micro-batch>` (stage = the global stage index, type
 * F, B, I or W, ...); docs/schedule-format.md. *out is NUL-terminated,
 * *len excludes the NUL; release it with ptc_sched_text_free().
 * @return PTC_OK, PTC_E_UNSUPPORTED (two pipelines, as chimera and
 *         dualpipe: torch runs one), PTC_E_INVAL (unknown form, or a
 *         dependency error), PTC_E_DEADLOCK or PTC_E_NOMEM.
 */
PTC_API int ptc_sched_to_torch(const ptc_sched *s, int form, char **out, size_t *len);

/**
 * Read torch's action lists (either form; rows are ranks, empty cells idle
 * steps, `(A;B)OVERLAP_F_B` groups run A then B). Compute actions become
 * the schedule; communication and memory actions (SEND_*, RECV_*, WAIT_*,
 * UNSHARD, RESHARD, REDUCE_GRAD) are counted in @p skipped and left out:
 * the compute order determines the communication (ptc_sched_infer_comm).
 * Stage s is placed on the rank whose actions name it, as chunk k when it
 * is that rank's k-th stage. @p microbatches 0 infers M from the largest
 * micro-batch. The result is not validated (ptc_sched_validate()).
 * @return PTC_OK, PTC_E_FORMAT (detail names the line, rank, cell and
 *         problem), PTC_E_RANGE or PTC_E_NOMEM; *out NULL on failure.
 */
PTC_API int ptc_sched_from_torch(ptc_sched **out, const char *text, size_t len,
                                 int microbatches, size_t *skipped);

/* ---- generators ------------------------------------------------------------ */

/** Generator kinds. */
typedef enum ptc_sched_kind_id {
    PTC_SCHED_GPIPE = 0,
    PTC_SCHED_1F1B,
    PTC_SCHED_INTERLEAVED,
    PTC_SCHED_KFKB,
    PTC_SCHED_CHIMERA,
    PTC_SCHED_ZBH1,
    PTC_SCHED_ZBV,
    PTC_SCHED_ZBH2,        /**< ZB-H2: zero bubble with up to 2P-1 in flight */
    PTC_SCHED_ZBI,         /**< interleaved zero bubble, any chunks per rank */
    PTC_SCHED_LOOPED_BFS,  /**< breadth-first over looped chunks */
    PTC_SCHED_DUALPIPEV,   /**< DeepSeek's DualPipeV (V placement) */
    PTC_SCHED_DUALPIPE,    /**< DeepSeek's DualPipe (two pipes, even P) */
} ptc_sched_kind_id;

/** Generator parameters. */
typedef struct ptc_sched_gen {
    ptc_sched_kind_id kind;
    int ranks;        /**< P (the `--stages` of the command): pipeline ranks */
    int microbatches; /**< M */
    int chunks;       /**< V for interleaved, zb-interleaved and looped-bfs (>= 1;
                           the others ignore it) */
    int k;            /**< kFkB group size, 1..M */
    double cost_f, cost_b, cost_w; /**< costs the greedy generators (chimera,
                                        zb-h1, zb-h2, zb-v, zb-interleaved)
                                        order work with, and by which
                                        ptc_sched_generate() picks among a
                                        kind's plans; <= 0 means the
                                        defaults 1, 2, B/2 */
} ptc_sched_gen;

/** Parse a kind name ("gpipe", "1f1b", "interleaved", "kfkb", "chimera",
 * "zb-h1", "zb-v", "zb-h2", "zb-interleaved", "looped-bfs", "dualpipev",
 * "dualpipe"). @return PTC_OK or PTC_E_INVAL. */
PTC_API int ptc_sched_kind_parse(const char *name, ptc_sched_kind_id *out);

/** @return the kind's name (static). */
PTC_API const char *ptc_sched_kind_name(ptc_sched_kind_id kind);

/**
 * Generate a compute-only schedule (call ptc_sched_infer_comm() for the
 * explicit SEND/RECV form). Requirements: ranks >= 1, microbatches >= 1;
 * interleaved: microbatches % ranks == 0; kfkb: 1 <= k <= M; chimera:
 * ranks >= 2; dualpipev: M >= 2 * ranks; dualpipe: ranks and M even,
 * M >= 2 * ranks. Every stage runs its backwards in increasing
 * micro-batch order. Details per kind: docs/schedule-format.md.
 * @return PTC_OK, PTC_E_INVAL (detail says which requirement), PTC_E_RANGE
 *         or PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_sched_generate(ptc_sched **out, const ptc_sched_gen *g);

/**
 * ptc_sched_generate() for the costs the schedule will be simulated or run
 * with. The zero-bubble family (zb-h1, zb-h2, zb-v, zb-interleaved) and
 * DualPipe(V), and chimera, make several plans and keep the one with the
 * smallest simulated makespan under @p costs (f, b, w and the links:
 * latency, bandwidth with act_bytes, a bandwidth trace): their published
 * fixed order where there is one, the greedy scheduler of
 * docs/schedule-format.md, and under costly links also the greedy planned
 * for them (a rank fills the time an input is in flight with other work)
 * and each plan compacted for them. Every plan keeps the kind's activation
 * caps. The greedy orders its work with the costs of @p g. NULL @p costs is
 * ptc_sched_generate(): plans judged by @p g's costs with free links.
 * @return as ptc_sched_generate(), or PTC_E_INVAL for bad costs.
 */
PTC_API int ptc_sched_generate_costed(ptc_sched **out, const ptc_sched_gen *g,
                                      const ptc_sched_costs *costs);

/* ---- validation and communication ----------------------------------------- */

/** Outcome of ptc_sched_validate(). Clear with ptc_sched_report_clear(). */
typedef struct ptc_sched_report {
    int code;          /**< PTC_OK, PTC_E_INVAL (dependency/placement/count
                            error) or PTC_E_DEADLOCK */
    int rank, step;    /**< first offending action (-1 if none) */
    char message[320]; /**< one lower-case line; "" if valid */
    char *grid;        /**< deadlock: rank x step picture around the stuck
                            point (several lines), owned by the report; or NULL */
    size_t messages;   /**< valid: number of SEND/RECV pairs executed */
} ptc_sched_report;

/**
 * Check a schedule: placement; every micro-batch's F once per stage of its
 * pipeline on the placed rank, and either one B or one I and one W; F before
 * B/I and I before W in the owning rank's order; then execute it with
 * blocking SEND/RECV matched per peer in FIFO order (a compute-only schedule
 * is first given its inferred communication). Mismatched pairs, a compute
 * whose input has not been received, and a state where no rank can move
 * are reported.
 * @param rep may be NULL; else filled (call ptc_sched_report_clear() after).
 * @return PTC_OK, PTC_E_INVAL, PTC_E_DEADLOCK or PTC_E_NOMEM; the message is
 *         also the thread's ptc_last_error().
 */
PTC_API int ptc_sched_validate(const ptc_sched *s, ptc_sched_report *rep);

/** Free the grid of a report and reset it; NULL is a no-op. */
PTC_API void ptc_sched_report_clear(ptc_sched_report *rep);

/**
 * Add SEND/RECV actions to a compute-only schedule. Each cross-rank
 * dependency becomes one SEND right after its producer and one RECV before
 * its consumer; all ranks see their messages in one global order (that of a
 * reference run with F=1, B=2, I=W=1), so blocking execution cannot
 * deadlock. A schedule that already has communication is left unchanged.
 * @return PTC_OK, PTC_E_INVAL (dependency error), PTC_E_DEADLOCK (the
 *         compute order itself cannot complete) or PTC_E_NOMEM; on failure
 *         @p s is unchanged.
 */
PTC_API int ptc_sched_infer_comm(ptc_sched *s);

/* ---- simulation -------------------------------------------------------------- */

/** Opaque simulation result. */
typedef struct ptc_sched_sim ptc_sched_sim;

/**
 * Discrete-event simulation: each rank runs its compute actions in order
 * on one stream; a compute starts when the rank is free and its inputs have
 * arrived. A transfer leaves when its producer ends, occupies its directed
 * link (FIFO) for act_bytes/bandwidth and arrives `latency` later; same-rank
 * hand-offs are free. Explicit SEND/RECV actions are not timed: transfers
 * are modelled as non-blocking operations posted at once. Activations: a micro-batch's
 * activation on a chunk (weight P/S) is held from the start of its F to the
 * end of its B or I.
 * @return PTC_OK, PTC_E_INVAL (bad costs or schedule), PTC_E_DEADLOCK (the
 *         compute order cannot complete) or PTC_E_NOMEM. *out NULL on failure.
 */
PTC_API int ptc_sched_simulate(const ptc_sched *s, const ptc_sched_costs *c,
                               ptc_sched_sim **out);

/** Free; NULL is a no-op. */
PTC_API void ptc_sched_sim_destroy(ptc_sched_sim *sim);

PTC_API double ptc_sched_sim_makespan(const ptc_sched_sim *sim);
/** 1 - sum of busy time / (ranks * makespan). */
PTC_API double ptc_sched_sim_bubble(const ptc_sched_sim *sim);
/** Busy (compute) time of @p rank. */
PTC_API double ptc_sched_sim_busy(const ptc_sched_sim *sim, int rank);
/** Largest activation count held at once on @p rank (in whole-stage units). */
PTC_API double ptc_sched_sim_peak(const ptc_sched_sim *sim, int rank);
/** Number of cross-rank transfers modelled. */
PTC_API size_t ptc_sched_sim_messages(const ptc_sched_sim *sim);
/** Start and end of action @p i of @p rank's list (SEND/RECV: both -1).
 * @return PTC_OK or PTC_E_RANGE. */
PTC_API int ptc_sched_sim_timing(const ptc_sched_sim *sim, int rank, size_t i,
                                 double *start, double *end);

/** Adaptive kFkB request/answer. */
typedef struct ptc_sched_adaptive {
    int ranks, microbatches;
    double mem_limit;  /**< largest allowed peak activations; <= 0: none */
    int chosen_k;      /**< out */
    double makespan;   /**< out: of the chosen k */
    int candidates;    /**< out: number of k tried */
} ptc_sched_adaptive;

/**
 * Pick k for kFkB by simulation: tries k = 1..8, powers of two and M, keeps
 * those whose worst peak fits mem_limit, and returns the smallest makespan
 * (ties: smaller k). Writes the chosen schedule to *out.
 * @return PTC_OK, PTC_E_RANGE (no k fits the memory limit), or as
 *         ptc_sched_generate / ptc_sched_simulate.
 */
PTC_API int ptc_sched_adapt_kfkb(ptc_sched **out, ptc_sched_adaptive *a,
                                 const ptc_sched_costs *c);

/* ---- pictures ------------------------------------------------------------------ */

/** SVG timeline of a simulation (ranks as rows; F/B/I/W coloured, micro-batch
 * numbers, idle time left blank). Release with ptc_sched_text_free().
 * @return PTC_OK or PTC_E_NOMEM. */
PTC_API int ptc_sched_svg(const ptc_sched *s, const ptc_sched_sim *sim, char **out);

/** Chrome / Perfetto trace-event JSON (one "X" event per compute, one
 * thread per rank, 1 time unit = 1 ms). Release with ptc_sched_text_free().
 * @return PTC_OK or PTC_E_NOMEM. */
PTC_API int ptc_sched_trace_json(const ptc_sched *s, const ptc_sched_sim *sim,
                                 char **out);

#ifdef __cplusplus
}
#endif
#endif
