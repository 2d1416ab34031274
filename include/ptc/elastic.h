/**
 * @file elastic.h
 * @brief `ptc elastic` as a library: the configuration rule
 *        (exec/model/elastic.c: which dp/tp/pp a job runs on the slots it
 *        has) and the supervisor (exec/model/elastic_supervisor.c) that
 *        keeps a `ptc train` job running under mpirun on them
 *        (docs/elastic.md).
 *
 * The rule, in order of preference:
 *  1. tensor parallelism stays within a host: a tp group is tp consecutive
 *     ranks, and mpirun fills each host's slots in rank order, so each host
 *     offers floor(slots / tp) * tp slots. Fixed tp (want->tp > 0) is kept;
 *     automatic tp (0) is the largest of 8, 4, 2, 1 that divides every
 *     host's slot count and the model's hidden width (when given) and
 *     leaves room for one replica (tp * fixed pp, or tp);
 *  2. pipeline parallelism divides the layers: fixed pp (want->pp > 0) is
 *     kept; automatic pp (0) is, among the p that divide the layers, are at
 *     most the micro-batches (when given) and leave room for one replica,
 *     the one that leaves the fewest slots idle (the larger on a tie);
 *  3. the rest is data parallelism: dp = floor(usable slots / (tp * pp)).
 * Slots beyond dp * tp * pp stay idle.
 *
 * @note Thread safety: the rule's functions are pure and safe; a supervisor
 *       (ptc_elastic) is externally synchronised, one per process (it
 *       forks mpirun and waits for its children).
 */
#ifndef PTC_ELASTIC_H
#define PTC_ELASTIC_H

#include "ptc/config.h"
#include "ptc/search.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What the job wants of a configuration (small value type). */
typedef struct ptc_elastic_want {
    int tp;           /**< tensor-parallel degree; 0: chosen by the rule */
    int pp;           /**< pipeline degree; 0: chosen by the rule */
    bool zero;        /**< zero=1 in every configuration picked */
    int layers;       /**< the model's layers (>= 1) */
    int hidden;       /**< the model's hidden width (automatic tp divides it; 0: any) */
    int microbatches; /**< per replica and step (automatic pp <= it; 0: any) */
    /* for ptc_elastic_search only: the rest of the demo model and its schedule */
    int vocab;        /**< vocabulary (0: the train default 32) */
    int tokens;       /**< tokens per sequence (0: the train default 8) */
    ptc_sched_kind_id schedule; /**< one stage per process kinds (default 1f1b) */
} ptc_elastic_want;

/** A host of an Open MPI hostfile (small value type). */
typedef struct ptc_elastic_host {
    char name[256]; /**< as the file spells it (mpirun names the host so) */
    int slots;      /**< slots=N, default 1 */
} ptc_elastic_host;

/**
 * Parse the text of an Open MPI hostfile, as `ptc elastic --hostfile` reads
 * it: one host per line, `NAME [slots=N] [max_slots=M]` separated by blanks,
 * `#` to the end of the line a comment, blank lines skipped; N and M are
 * decimal 0..PTC_CONFIG_MAX_WORLD (slots default 1; max_slots is checked and
 * not used). A NAME is 1..255 printable bytes without `=`; a host named twice
 * is an error.
 * @param hosts receives up to @p cap hosts in file order; *@p n their count
 * @return PTC_OK; PTC_E_INVAL with a one-line message "line L: ..." (an
 *   unknown word, a bad number, a bad or repeated name, more than @p cap
 *   hosts).
 */
PTC_API int ptc_elastic_hostfile_parse(const char *text, ptc_elastic_host *hosts, size_t cap,
                                       size_t *n);

/**
 * Pick the configuration for hosts with @p slots[i] free slots each.
 * @param out     receives the configuration (dp, tp, pp, zero; no layers=)
 * @param usable  may be NULL; else receives per host the slots the job may
 *                use (a multiple of tp; the ranks fill them in host order)
 * @return PTC_OK; PTC_E_INVAL (no hosts, a negative slot count, layers < 1,
 *   a negative degree); PTC_E_CONFIG "no configuration fits ..." (no slot at
 *   all, a fixed tp larger than every host, fewer usable slots than one
 *   replica of tp * pp, a fixed pp over the layers), naming the slots.
 */
PTC_API int ptc_elastic_pick(ptc_config *out, int *usable, const int *slots, size_t nhosts,
                             const ptc_elastic_want *want);

/**
 * The same choice asked of the configuration search's cost model
 * (include/ptc/search.h): among the configurations the rule allows — tp of
 * 1, 2, 4 or 8 dividing every host's slots and the hidden width (or the
 * fixed tp), pp dividing the layers and at most the micro-batches (or the
 * fixed pp), dp the rest — the one with the highest predicted throughput
 * (sequences per second: dp * microbatches over the predicted step time of
 * the demo model on @p cluster, whose gpus is set per candidate and whose
 * gpus_per_host is the largest host's slots) that fits in its memory. On a
 * tie the rule's order (larger tp, then larger pp) decides.
 * @param cluster NULL: ptc_search_cluster_init's figures
 * @param predicted may be NULL; else the chosen configuration's predicted
 *        step time in seconds
 * @return as ptc_elastic_pick; PTC_E_CONFIG "no configuration fits ..." also
 *   when the cost model rejects every candidate (memory, validity).
 */
PTC_API int ptc_elastic_search(ptc_config *out, int *usable, const int *slots, size_t nhosts,
                               const ptc_elastic_want *want, const ptc_search_cluster *cluster,
                               double *predicted);

/* ---- the supervisor ----------------------------------------------------------------- */

/** What the supervisor reports: its start, each reconfiguration (after the
 * new job's first step, or at once for an online resize) and its end. */
typedef enum ptc_elastic_event_kind {
    PTC_ELASTIC_START,       /**< before the first launch */
    PTC_ELASTIC_RECONFIGURE, /**< a restart or an in-memory resize took effect */
    PTC_ELASTIC_DONE,        /**< the newest version reached the total steps */
    PTC_ELASTIC_FALLBACK,    /**< node-local stores: every copy of some shards
                                  is lost; the next launch resumes from the
                                  persistent tier (@ref ptc_elastic_event.detail
                                  names the shards, .persist the tier) */
} ptc_elastic_event_kind;

/** One event (small value type; valid during the callback). Seconds are
 * wall-clock; a reconfiguration's downtime is the sum of its parts. */
typedef struct ptc_elastic_event {
    ptc_elastic_event_kind kind;
    char config[128];       /**< start: the first configuration; reconfigure:
                                 the new one; done: the last one (keys form) */
    int slots;              /**< start, reconfigure: the free slots */
    uint64_t version;       /**< start: the newest version (0: none); reconfigure
                                 (restart): the version resumed from; done: the
                                 newest */
    int64_t step;           /**< start: that version's step; reconfigure: the
                                 step the job was at; done: the newest step */
    int64_t total_steps;    /**< the job's total */
    /* reconfigure */
    char reason[32];        /**< failure, scale-in, scale-out, hosts-changed */
    char from[128];         /**< the old configuration */
    bool online;            /**< resized in memory (no restart) */
    int64_t resumed_step;   /**< the step the new job started from */
    int64_t steps_lost;     /**< steps run again */
    double downtime, detect, save, plan, move, load, restart;
    /* done */
    int reconfigurations, failures;
    /* node-local stores (@ref ptc_elastic_opts.replicas >= 0) */
    bool node_local;        /**< start: the version is the hosts' to decide (the
                                 controller cannot read their stores): version
                                 and step are 0 */
    bool from_persist;      /**< reconfigure: resumed from the persistent tier */
    char detail[512];       /**< fallback: the job's error naming the lost shards */
    const char *persist;    /**< fallback, reconfigure from it: the tier */
} ptc_elastic_event;

/** Called for each event; may be NULL. */
typedef void (*ptc_elastic_event_fn)(const ptc_elastic_event *ev, void *user);
/** Called with each line the job writes (without its newline; stderr when
 * @p is_stderr); may be NULL. The supervisor reads the lines it needs
 * (steps, resume, resize and stop reports, mpirun's notices) either way. */
typedef void (*ptc_elastic_output_fn)(const char *line, bool is_stderr, void *user);

/** Options of a supervisor. Initialise with ptc_elastic_opts_init(). The
 * strings and arrays are borrowed until ptc_elastic_destroy. */
typedef struct ptc_elastic_opts {
    const char *store;       /**< the job's store (a directory; the job makes
                                  the store at its first save) */
    int slots;               /**< slots available (-1: not given) */
    const char *slots_file;  /**< or a watched file holding that number */
    const char *hostfile;    /**< a watched Open MPI hostfile (NULL: every slot
                                  on this host, named localhost); the slots,
                                  when given, cap its total (hosts in order) */
    int min_slots;           /**< fail with fewer slots (default 1) */
    int max_slots;           /**< the most slots a launch may use (0: without a
                                  hostfile, 8 per CPU of this host and at
                                  least 64; with one, its capacity). More
                                  slots given is an error at create, a change
                                  said and ignored while the job runs */
    int max_restarts;        /**< failures tolerated (default 10) */
    double watchdog;         /**< seconds without a step, or to stop when
                                  asked, before the job is killed (120) */
    bool online;             /**< resize in memory when the running processes
                                  can take the new configuration */
    bool search;             /**< pick by ptc_elastic_search over @ref cluster
                                  instead of ptc_elastic_pick */
    ptc_search_cluster cluster;
    ptc_elastic_want want;   /**< the rule's inputs (layers, hidden, ...) */
    const char *mpirun;      /**< the launcher (default "mpirun") */
    const char *prog;        /**< the ptc executable the ranks run */
    const char *const *train_args; /**< ARGS of `ptc train` without --steps,
                                  --config, --store, --resume, --version,
                                  --control, --resize, --json */
    int ntrain_args;
    int64_t total_steps;     /**< the job's total steps (>= 1) */
    bool train_timeout;      /**< ARGS give --timeout (else the watchdog is) */
    /** -1 (the default): @ref store is one store every host opens (a shared
     * filesystem); the controller reads its newest version. >= 0: ARGS give
     * `--replicas K` (a store on each host at the path @ref store): the
     * controller reads no store; each launch runs `--until-step TOTAL
     * --resume --resume-any` and the hosts' recovery decides the version; it
     * learns the version and step from the job's lines (docs/elastic.md,
     * *Stores on each host*). */
    int replicas;
    /** With @ref replicas: ARGS' `--persist DIR` (NULL: none). A relaunch
     * that fails before its first step because every copy of some shards is
     * lost (the job's error names them) is relaunched once from this tier
     * (`--resume-from DIR`): a PTC_ELASTIC_FALLBACK event, then the
     * reconfiguration with from_persist. Without it that failure ends the
     * run (PTC_E_IO, the job's message). */
    const char *persist;
    volatile int *stop;      /**< non-zero (a signal handler may set it):
                                  stop the job (it saves) and return */
    ptc_elastic_event_fn on_event;
    ptc_elastic_output_fn on_output;
    void *user;              /**< for the callbacks */
} ptc_elastic_opts;

/** Defaults: slots -1, min_slots 1, max_restarts 10, watchdog 120 s, replicas -1,
 * mpirun "mpirun", the 1f1b schedule, ptc_search_cluster_init's cluster. */
PTC_API void ptc_elastic_opts_init(ptc_elastic_opts *o);

/** How a supervisor ended (ptc_elastic_run). */
typedef struct ptc_elastic_result {
    bool stopped;            /**< ended by @ref ptc_elastic_opts.stop */
    bool stopped_job;        /**< ... while a job ran (at_step is its step) */
    int64_t at_step;         /**< the step the stopped job was at */
    uint64_t version;        /**< the newest version at the end */
    int64_t step;            /**< its step */
    int reconfigurations, failures;
} ptc_elastic_result;

/** A supervisor (opaque). */
typedef struct ptc_elastic ptc_elastic;

/**
 * Read the slots and the hostfile and pick the first configuration.
 * Starts nothing.
 * @return PTC_OK; PTC_E_INVAL (no slots given, an unreadable or malformed
 *   slots file or hostfile, bad options); PTC_E_CONFIG (fewer slots than
 *   min_slots, no configuration fits: ptc_elastic_pick's message);
 *   PTC_E_NOMEM. A failed create leaves *@p out NULL.
 */
PTC_API int ptc_elastic_create(ptc_elastic **out, const ptc_elastic_opts *o);

/**
 * Run the job to its total steps: launch it under mpirun on the slots
 * (resuming from the store's newest version), restart it from the newest
 * version after a failure, and stop and relaunch it (or resize it in
 * memory, @ref ptc_elastic_opts.online) when the slots file or the hostfile
 * changes. Blocks; the control file and hostfile of the job live in a
 * directory made beside the store and removed at the end.
 * @param res may be NULL; else how it ended
 * @return PTC_OK (done, or stopped by @ref ptc_elastic_opts.stop: see
 *   @p res); PTC_E_IO (the store, the launch, the job failing before its
 *   first step or more than max_restarts times: the message says which);
 *   PTC_E_CONFIG (no configuration fits the slots left after a failure).
 */
PTC_API int ptc_elastic_run(ptc_elastic *e, ptc_elastic_result *res);

/** Free; NULL is a no-op. */
PTC_API void ptc_elastic_destroy(ptc_elastic *e);

#ifdef __cplusplus
}
#endif
#endif
