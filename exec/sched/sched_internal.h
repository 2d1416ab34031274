/* Private parts of the schedule module (exec/sched*.c). Never installed. */
#ifndef PTC_SCHED_INTERNAL_H
#define PTC_SCHED_INTERNAL_H

#include "ptc/sched.h"
#include "base/buf_internal.h"
#include "base/util_internal.h"

typedef struct sched_list {
    ptc_sched_action *a;
    size_t n, cap;
} sched_list;

struct ptc_sched {
    int ranks, stages, pipes, mbs;
    char kind[32];
    int k;
    int *place_rank;  /* [pipes*stages] rank of (pipe, stage), -1 unplaced */
    int *place_chunk; /* [pipes*stages] */
    int **chunk_gs;   /* [ranks][nchunks] pipe*stages+stage, -1 unplaced */
    int *nchunks;     /* [ranks] */
    int *chunk_cap;   /* [ranks] */
    int *mb_pipe;     /* [mbs] */
    sched_list *lists; /* [ranks] */
    size_t total;      /* actions over all ranks */
};

static inline bool sched_is_compute(int op) { return op <= PTC_SCHED_W; }

/* Global stage id (pipe*stages+stage) of (rank, chunk), or -1. */
static inline int sched_gs(const ptc_sched *s, int rank, int chunk)
{
    if (chunk < 0 || chunk >= s->nchunks[rank])
        return -1;
    return s->chunk_gs[rank][chunk];
}

/* Result of a timing run over the compute actions (sched_sim.c). */
typedef struct sched_run {
    double **start, **end; /* [ranks][list index]; -1 for comm actions */
    double makespan;
    double *busy;          /* [ranks] */
    double *peak;          /* [ranks] whole-stage units */
    size_t messages;
    /* deadlock: per-rank index of the blocking action (n if finished) */
    size_t *stuck;
    bool deadlock;
} sched_run;

/* Run the compute actions of s with costs c; any SEND/RECV are skipped.
 * On PTC_E_DEADLOCK, r->stuck is filled and r->deadlock set. Free with
 * sched_run_free. Requires a checked placement and dependencies. */
int sched_run_exec(const ptc_sched *s, const ptc_sched_costs *c, sched_run *r);
void sched_run_free(const ptc_sched *s, sched_run *r);

/* The alpha-beta link model of the simulator (sched_sim.c), shared with the
 * latency-aware generators: a transfer leaves when its producer ends, takes
 * its directed link (FIFO) for act_bytes / bandwidth (or the trace) and
 * arrives `latency` later. Calls for one source must come in time order. */
typedef struct sched_links {
    const ptc_sched_costs *c; /* borrowed */
    int ranks;
    bool timed;               /* links have a transfer time (FIFO matters) */
    double transfer;          /* act_bytes / bandwidth without a trace */
    struct link **l;          /* [ranks] per-source links in use */
    size_t *n, *cap;
    int err;                  /* PTC_E_NOMEM once a link could not be added */
} sched_links;
int sched_links_init(sched_links *k, int ranks, const ptc_sched_costs *c);
void sched_links_free(sched_links *k);
/* Arrival time at @p dst of what @p src finished at @p t (t itself if the
 * same rank). */
double sched_links_arrival(sched_links *k, int src, int dst, double t);

/* The greedy list scheduler (sched_greedy.c): fills the compute-only lists
 * of @p s, whose placement and micro-batch pipes are set; @p makespan (may
 * be NULL): the end of its plan, which is the simulated makespan under the
 * greedy's own costs and links. */
typedef struct sched_greedy {
    const int *cap;      /* [pipes*stages] activations a stage may hold */
    const int *rank_cap; /* [ranks] chunk activations a rank may hold; NULL: none */
    const int *wmax;     /* [ranks] pending W a rank may keep before W goes first */
    bool split;          /* emit I + W instead of B */
    bool fwd_first;      /* F (within its caps) outranks B/I */
    bool fwd_oldest;     /* among F, the oldest micro-batch first (else later stage) */
    double f, b, w;      /* costs of a whole stage */
    const ptc_sched_costs *links; /* latency/bandwidth/act_bytes/trace; NULL: free */
} sched_greedy;
int sched_greedy_run(ptc_sched *s, const sched_greedy *gr, double *makespan);
/* Re-time the compute-only, valid order of @p s for gr's costs and links
 * (only f, b, w and links of @p gr are used): ranks start a later ready
 * action when the next one's input is in flight, within the order's own
 * activation peak per rank and keeping each chunk's F, B/I and W in order.
 * On failure @p s is unchanged. */
int sched_compact(ptc_sched *s, const sched_greedy *gr);

/* Kinds with two pipelines (each stage replicated on two ranks). */
static inline bool sched_two_pipes(int kind)
{
    return kind == PTC_SCHED_CHIMERA || kind == PTC_SCHED_DUALPIPE;
}

/* Kinds that split backwards into I and W. */
static inline bool sched_splits_backward(int kind)
{
    return kind == PTC_SCHED_ZBH1 || kind == PTC_SCHED_ZBV || kind == PTC_SCHED_ZBH2 ||
           kind == PTC_SCHED_ZBI || kind == PTC_SCHED_DUALPIPEV || kind == PTC_SCHED_DUALPIPE;
}

/* Kinds whose order depends on the cost ratios (the greedy ones). */
static inline bool sched_costs_order(int kind)
{
    return kind == PTC_SCHED_CHIMERA || kind == PTC_SCHED_ZBH1 || kind == PTC_SCHED_ZBV ||
           kind == PTC_SCHED_ZBH2 || kind == PTC_SCHED_ZBI;
}

/* Append compute action (op, mb, chunk) to @p rank's list. */
static inline int sched_add(ptc_sched *s, int rank, int op, int mb, int chunk)
{
    ptc_sched_action a = {(uint8_t)op, 0, (uint16_t)chunk, mb, -1};
    return ptc_sched_append(s, rank, a);
}

/* PTC_E_INVAL unless every link figure is finite and >= 0. */
int sched_links_check(const ptc_sched_costs *c);
/* ... and f, b, w finite and >= 0 with w <= b. */
int sched_costs_check(const ptc_sched_costs *c);
/* True when @p c (NULL allowed) costs nothing per message. */
bool sched_links_free_of_cost(const ptc_sched_costs *c);

/* Generators of sched_zb.c; @p s is placed (micro-batch pipes set) and has
 * no actions. Chimera and the zero-bubble greedy kinds; DualPipe(V). */
int sched_gen_greedy(ptc_sched *s, const ptc_sched_gen *g, const ptc_sched_costs *links);
int sched_gen_dualpipe(ptc_sched *s, const ptc_sched_gen *g, const ptc_sched_costs *links);

/* Dependency and count check (sched_check.c). */
int sched_check_deps(const ptc_sched *s, ptc_sched_report *rep);
/* Fill rep with a deadlock description and grid from per-rank positions. */
int sched_report_deadlock(const ptc_sched *s, const size_t *stuck, ptc_sched_report *rep,
                          bool compute_view);

/* Report helper: set code, position and message (also ptc_error_set). */
int sched_report_set(ptc_sched_report *rep, int code, int rank, int step,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));


/* An action's token ("F3", "SEND1") into buf; "" if it does not fit
 * (sched_deps.c). */
void sched_tokname(const ptc_sched_action *a, char *buf, size_t cap);

#endif
