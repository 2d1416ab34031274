/* Private parts of the cost model and the configuration search
 * (exec/sched/sched_cost_model.c: the model; sched_cost_sim.c: the
 * simulations; sched_cost.c: the evaluation; sched_search.c: the search).
 * Never installed. */
#ifndef PTC_SCHED_SEARCH_INTERNAL_H
#define PTC_SCHED_SEARCH_INTERNAL_H

#include "ptc/search.h"
#include "base/util_internal.h"
#include "exec/sched/sched_internal.h"

struct ptc_cost_model {
    ptc_cost_model_info info;
    ptc_cost_tensor *t;
    size_t n;
    int64_t L;
    bool has_optim;
    double params;
};

/* A tensor's name for messages: its own, else "#I" written into @p buf. */
const char *cost_tensor_name(const ptc_cost_tensor *t, size_t i, char *buf, size_t cap);

/* Aggregates of one group of tensors (a layer, the first-stage tensors, ...)
 * for one tensor-parallel degree. Per-token figures are multiplied by the
 * micro-batch's tokens. */
typedef struct cost_agg {
    double param_b, grad_b, optim_b; /* bytes on the fullest tp rank */
    double flops_f, flops_bw, flops_bi; /* per token: forward, weight grad, input grad */
    double ar_f_n, ar_f_w; /* forward all-reduces: count, widths (elements per token) */
    double ag_f_n, ag_f_w; /* forward all-gathers */
    double ar_b_n, ar_b_w; /* backward all-reduces */
    double small_f_n;      /* forward all-reduces of one fp32 per token */
    double act;            /* activation bytes per token held per micro-batch */
} cost_agg;

/* Per-tp aggregates: groups 0..L-1 as prefix sums over layers
 * (pre[l] = sum of layers < l, L+1 entries), then the first-stage,
 * last-stage, first+last memory and every-rank groups. */
typedef struct cost_tp {
    int tp;
    bool valid;
    char why[160]; /* when !valid */
    cost_agg *pre;  /* [L+1] */
    cost_agg first, last, fl_mem, all;
} cost_tp;

/* The activations a schedule's ranks hold at their peaks. A micro-batch's
 * activations on a chunk are held from its F until its backward is
 * complete (B, or W). Per rank: the counts held per local chunk at every
 * local maximum of the total, without the vectors that another one
 * matches or exceeds in every chunk. The rank's activation bytes are the
 * largest sum of count x the chunk's bytes over them (exact for any
 * per-chunk sizes). */
typedef struct cost_peaks {
    int P, nch;      /* ranks; chunks per rank (the most of any rank) */
    double *peak;    /* [P] the largest total, in whole-stage units */
    int *stage;      /* [P * nch] stage of chunk c of rank r; -1: none */
    int *n;          /* [P] vectors of rank r */
    size_t *cap;     /* [P] room in v[r], in vectors */
    double **v;      /* [P] n[r] x nch counts */
} cost_peaks;

/* One simulated schedule: makespans and per-rank peaks. */
typedef struct cost_sim {
    int kind, P, M, V, k;
    double f, b, w, lat, tr; /* simulator costs (tr = act_bytes/bandwidth) */
    double act_bytes;
    double makespan, makespan0;
    cost_peaks peaks;
    bool have0;   /* makespan0 computed */
    bool used;
} cost_sim;

/* A generated schedule, kept for reuse (greedy generators are costly). */
typedef struct cost_gen {
    int kind, P, M, V, k;
    double rb, rw; /* b/f and w/f the greedy generators ordered work by */
    ptc_sched *s;
    size_t actions;
} cost_gen;

/* Host shape of a group of ranks: n members, at least k of them on every
 * host it touches, h hosts. */
typedef struct cost_shape {
    int n, k, h;
} cost_shape;

typedef struct cost_topo {
    int D, T, P, V;
    int kind_wrap;   /* 1: looped placement wraps P-1 -> 0 */
    bool chimera;
    cost_shape tp, dp;
    bool pp_inter;
    bool used;
} cost_topo;

/* Evaluation context: the inputs and the caches of one search (or one
 * evaluation). Not shared between threads. */
typedef struct cost_ctx {
    const ptc_cost_model *m;
    ptc_search_cluster c;
    ptc_search_job j;
    cost_tp *tps;
    size_t ntps, cap_tps;
    cost_sim *sims; /* open addressing */
    size_t sim_cap, sim_n;
    cost_topo *topos;
    size_t topo_cap, topo_n;
    cost_gen *gens;
    size_t gen_n, gen_cap, gen_actions;
    size_t simulations;
} cost_ctx;

/* The simulation a configuration needs: kind, ranks, micro-batches, chunks,
 * k, and the simulator's costs. */
typedef struct cost_sim_key {
    int kind, P, M, V, k;
    double f, b, w, lat, bw, act;
} cost_sim_key;

/* The simulation of @p k, run once per context (makespan0, the makespan
 * without communication, too when @p need0). */
int cost_sim_get(cost_ctx *x, const cost_sim_key *k, bool need0, const cost_sim **out);

/* Free what a cost_peaks holds. */
void cost_peaks_free(cost_peaks *p);

int cost_ctx_init(cost_ctx *x, const ptc_cost_model *m, const ptc_search_cluster *c,
                  const ptc_search_job *j);
void cost_ctx_free(cost_ctx *x);

/* Check the cluster and job figures. PTC_OK or PTC_E_INVAL. */
int cost_check_inputs(const ptc_search_cluster *c, const ptc_search_job *j);

/* The tp aggregates for T (computed once). NULL on allocation failure
 * (PTC_E_NOMEM set); check ->valid. */
const cost_tp *cost_tp_get(cost_ctx *x, int T);

/* Evaluate; PTC_E_CONFIG (message set) when the configuration is invalid.
 * Without @p breakdown the bubble holds bubble + p2p and pp_comm is 0
 * (one simulation instead of two). */
int cost_eval(cost_ctx *x, const ptc_search_config *cfg, bool breakdown, ptc_cost_result *out);

/* Structural checks of a configuration that need no simulation (sizes,
 * divisibility, schedule requirements). PTC_OK or PTC_E_CONFIG. */
int cost_check_config(cost_ctx *x, const ptc_search_config *cfg);

#endif
