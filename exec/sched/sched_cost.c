/* Cost model of a parallel configuration: per-stage compute,
 * tensor-/data-/pipeline-parallel communication, the bubble and activations
 * of the simulated schedule (sched_cost_sim.c), memory per GPU, for a model
 * described in sched_cost_model.c. docs/search.md writes every formula
 * down; the comments here say why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_search_internal.h"

/* ---- per-tp aggregates ------------------------------------------------------------- */

static void agg_add(cost_agg *a, const cost_agg *b, double s)
{
    double *x = (double *)a;
    const double *y = (const double *)b;
    for (size_t i = 0; i < sizeof *a / sizeof(double); i++)
        x[i] += s * y[i];
}

/* Elements of the tp shard on the fullest rank (the split rule's first part). */
static double local_numel(const ptc_cost_tensor *t, int T)
{
    double n = 1;
    for (int d = 0; d < t->ndim; d++) {
        double e = (double)t->shape[d];
        if (d == t->tp_dim && T > 1) {
            double blocks = t->tp_blocks > 1 ? t->tp_blocks : 1;
            e = blocks * ceil(e / blocks / T);
        }
        n *= e;
    }
    return n;
}

/* Matrix-product bookkeeping of one group, for pairing column- with
 * row-parallel products. */
typedef struct pairing {
    int rows, cols;
    double row_w, col_in, col_out;
} pairing;

static void matmul(cost_agg *g, pairing *pr, const ptc_cost_tensor *t, int in_dim, int T,
                   double ln)
{
    g->flops_f += 2 * ln;
    g->flops_bw += 2 * ln;
    g->flops_bi += 2 * ln;
    if (T <= 1 || t->tp_dim < 0)
        return;
    double in_w = (double)t->shape[in_dim], out_w = (double)t->shape[1 - in_dim];
    if (t->tp_dim == in_dim) { /* contraction split: output is a partial sum */
        pr->rows++;
        pr->row_w += out_w;
    } else {
        pr->cols++;
        pr->col_in = fmax(pr->col_in, in_w);
        pr->col_out = fmax(pr->col_out, out_w);
    }
}

static void lookup(cost_agg *g, const ptc_cost_tensor *t, int T)
{
    if (T <= 1 || t->tp_dim < 0)
        return;
    double w = (double)t->shape[1 - t->in_dim];
    if (t->tp_dim == t->in_dim) { /* vocabulary split: partial sums of rows */
        g->ar_f_n += 1;
        g->ar_f_w += w;
    } else { /* width split: gather the output */
        g->ag_f_n += 1;
        g->ag_f_w += w;
    }
}

/* Pair column-parallel products with the row-parallel ones that close
 * them: each pair is one all-reduce forward (the row product's partial
 * sum) and one backward (the column products' input gradient). Column
 * products left without a partner keep their output split: the output
 * layer's vocabulary-parallel loss needs three small all-reduces (max,
 * sum of exponentials, target logit), anything else an all-gather. */
static void close_pairs(cost_agg *g, const pairing *pr, bool last)
{
    if (pr->rows > 0) {
        g->ar_f_n += pr->rows;
        g->ar_f_w += pr->row_w;
        g->ar_b_n += pr->rows;
        g->ar_b_w += pr->row_w;
    } else if (pr->cols > 0) {
        g->ar_b_n += 1;
        g->ar_b_w += pr->col_in;
        if (last) {
            g->small_f_n += 3;
        } else {
            g->ag_f_n += 1;
            g->ag_f_w += pr->col_out;
        }
    }
}

static void tp_free(cost_tp *t) { ptc_free(t->pre); }

static int tp_build(const ptc_cost_model *m, int T, cost_tp *out)
{
    memset(out, 0, sizeof *out);
    out->tp = T;
    out->valid = true;
    const ptc_cost_model_info *in = &m->info;
    if (T > 1 && in->heads > 0 && (in->heads % T || in->kv_heads % T)) {
        out->valid = false;
        snprintf(out->why, sizeof out->why, "tp=%d does not divide %lld heads and %lld kv heads",
                 T, (long long)in->heads, (long long)in->kv_heads);
    }
    size_t L = (size_t)m->L;
    cost_agg *lay = ptc_calloc(L + 1, sizeof *lay);
    pairing *pr = ptc_calloc(L + 2, sizeof *pr);
    out->pre = ptc_calloc(L + 1, sizeof *out->pre);
    if (!lay || !pr || !out->pre) {
        ptc_free(lay);
        ptc_free(pr);
        tp_free(out);
        return PTC_E_NOMEM;
    }
    pairing *pfirst = &pr[L], *plast = &pr[L + 1];
    size_t gsz = ptc_dtype_size(in->grad_dtype);
    for (size_t i = 0; i < m->n; i++) {
        const ptc_cost_tensor *t = &m->t[i];
        if (T > 1 && out->valid && t->pp == PTC_COST_PP_LAYER && t->tp_dim >= 0) {
            int64_t blocks = t->tp_blocks > 1 ? t->tp_blocks : 1;
            if ((t->shape[t->tp_dim] / blocks) % T) {
                out->valid = false;
                char nb[32];
                snprintf(out->why, sizeof out->why, "tp=%d does not divide dimension %d (%lld) "
                         "of %.60s", T, t->tp_dim, (long long)(t->shape[t->tp_dim] / blocks),
                         cost_tensor_name(t, i, nb, sizeof nb));
            }
        }
        double ln = local_numel(t, T);
        cost_agg *mem;
        switch (t->pp) {
        case PTC_COST_PP_LAYER: mem = &lay[t->layer]; break;
        case PTC_COST_PP_FIRST: mem = &out->first; break;
        case PTC_COST_PP_LAST: mem = &out->last; break;
        case PTC_COST_PP_FIRST_LAST: mem = &out->fl_mem; break;
        default: mem = &out->all; break;
        }
        double dsz = (double)ptc_dtype_size(t->dtype);
        if (t->kind == PTC_COST_OPTIM) {
            mem->optim_b += ln * dsz;
            continue;
        }
        mem->param_b += ln * dsz;
        mem->grad_b += ln * (double)gsz;
        if (!m->has_optim)
            mem->optim_b += ln * in->optim_bytes_per_param;
        if (t->op == PTC_COST_OP_OTHER || t->pp == PTC_COST_PP_ALL)
            continue;
        /* Where the tensor computes. */
        bool on_first = t->pp == PTC_COST_PP_FIRST ||
                        (t->pp == PTC_COST_PP_FIRST_LAST && t->op != PTC_COST_OP_MATMUL);
        bool on_last = t->pp == PTC_COST_PP_LAST ||
                       (t->pp == PTC_COST_PP_FIRST_LAST && t->op != PTC_COST_OP_LOOKUP);
        cost_agg *g = t->pp == PTC_COST_PP_LAYER ? &lay[t->layer] : NULL;
        pairing *p = t->pp == PTC_COST_PP_LAYER ? &pr[t->layer] : NULL;
        if (t->op == PTC_COST_OP_MATMUL) {
            if (!g) {
                g = on_last ? &out->last : &out->first;
                p = on_last ? plast : pfirst;
            }
            matmul(g, p, t, t->in_dim, T, ln);
        } else if (t->op == PTC_COST_OP_LOOKUP) {
            lookup(g ? g : on_last && !on_first ? &out->last : &out->first, t, T);
        } else { /* tied: lookup first, output product last (contracting the width) */
            lookup(&out->first, t, T);
            matmul(&out->last, plast, t, 1 - t->in_dim, T, ln);
        }
    }
    for (size_t l = 0; l < L; l++) {
        close_pairs(&lay[l], &pr[l], false);
        double a = in->heads > 0 || in->attn_flops > 0 ? in->attn_flops / T : 0;
        lay[l].flops_f += a;
        lay[l].flops_bi += 2 * a + in->recompute_flops / T;
        lay[l].act += in->act_fixed + in->act_split / T;
        agg_add(&out->pre[l + 1], &out->pre[l], 1);
        agg_add(&out->pre[l + 1], &lay[l], 1);
    }
    close_pairs(&out->first, pfirst, false);
    close_pairs(&out->last, plast, true);
    out->first.act += in->act_first;
    out->last.act += in->act_last_split / T;
    ptc_free(lay);
    ptc_free(pr);
    return PTC_OK;
}

/* ---- context and caches ------------------------------------------------------------ */

int cost_check_inputs(const ptc_search_cluster *c, const ptc_search_job *j)
{
    if (c->gpus < 1)
        return ptc_error_set(PTC_E_INVAL, "gpus must be >= 1, got %d", c->gpus);
    if (c->gpus_per_host < 1)
        return ptc_error_set(PTC_E_INVAL, "gpus per host must be >= 1");
    if (!(c->mem_bytes > 0) || !(c->flops > 0) || !(c->intra_bw > 0) || !(c->inter_bw > 0) ||
        !(c->intra_lat >= 0) || !(c->inter_lat >= 0) ||
        !isfinite(c->mem_bytes + c->flops + c->intra_bw + c->inter_bw + c->intra_lat +
                  c->inter_lat))
        return ptc_error_set(PTC_E_INVAL, "cluster: memory, FLOP/s and bandwidths must be > 0, "
                                          "latencies >= 0");
    if (j->global_batch < 1 || j->global_batch > (1ll << 40))
        return ptc_error_set(PTC_E_INVAL, "global batch must be 1..2^40, got %lld",
                             (long long)j->global_batch);
    if (j->max_mb_size < 0)
        return ptc_error_set(PTC_E_INVAL, "largest micro-batch size must be >= 0");
    return PTC_OK;
}

int cost_ctx_init(cost_ctx *x, const ptc_cost_model *m, const ptc_search_cluster *c,
                  const ptc_search_job *j)
{
    memset(x, 0, sizeof *x);
    PTC_TRY(cost_check_inputs(c, j));
    x->m = m;
    x->c = *c;
    x->j = *j;
    return PTC_OK;
}


void cost_ctx_free(cost_ctx *x)
{
    for (size_t i = 0; i < x->ntps; i++)
        tp_free(&x->tps[i]);
    ptc_free(x->tps);
    for (size_t i = 0; i < x->sim_cap; i++)
        cost_peaks_free(&x->sims[i].peaks);
    ptc_free(x->sims);
    ptc_free(x->topos);
    for (size_t i = 0; i < x->gen_n; i++)
        ptc_sched_destroy(x->gens[i].s);
    ptc_free(x->gens);
    memset(x, 0, sizeof *x);
}

const cost_tp *cost_tp_get(cost_ctx *x, int T)
{
    for (size_t i = 0; i < x->ntps; i++)
        if (x->tps[i].tp == T)
            return &x->tps[i];
    if (ptc_grow((void **)&x->tps, &x->cap_tps, x->ntps + 1, sizeof *x->tps))
        return NULL;
    if (tp_build(x->m, T, &x->tps[x->ntps]) != PTC_OK)
        return NULL;
    return &x->tps[x->ntps++];
}

/* ---- topology ------------------------------------------------------------------------ */

/* Host shape of the group {base + i*stride}, merged into *s as the worst
 * case seen so far (most hosts, fewest members on one host). */
static void shape_merge(cost_shape *s, const int *r, int n, int G)
{
    int hosts = 0, kmin = n, run = 0, prev = -1;
    for (int i = 0; i < n; i++) {
        int h = r[i] / G;
        if (h != prev) {
            if (prev >= 0)
                kmin = PTC_MIN(kmin, run);
            hosts++;
            run = 0;
            prev = h;
        }
        run++;
    }
    kmin = PTC_MIN(kmin, run);
    s->n = n;
    s->h = PTC_MAX(s->h, hosts);
    s->k = s->k ? PTC_MIN(s->k, kmin) : kmin;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static const cost_topo *topo_get(cost_ctx *x, int D, int T, int P, int V, bool wrap,
                                 bool chimera)
{
    for (size_t i = 0; i < x->topo_n; i++) {
        const cost_topo *t = &x->topos[i];
        if (t->D == D && t->T == T && t->P == P && t->V == V && t->kind_wrap == wrap &&
            t->chimera == chimera)
            return t;
    }
    if (ptc_grow((void **)&x->topos, &x->topo_cap, x->topo_n + 1, sizeof *x->topos))
        return NULL;
    int G = x->c.gpus_per_host;
    int n = PTC_MAX(PTC_MAX(T, 2 * D), 2);
    int *r = ptc_malloc((size_t)n * sizeof *r);
    if (!r)
        return NULL;
    cost_topo *t = &x->topos[x->topo_n];
    memset(t, 0, sizeof *t);
    t->D = D, t->T = T, t->P = P, t->V = V, t->kind_wrap = wrap, t->chimera = chimera;
#define RANK(pp, dp, tp) (((pp) * D + (dp)) * T + (tp))
    for (int pp = 0; pp < P; pp++)
        for (int dp = 0; dp < D; dp++) {
            for (int i = 0; i < T; i++)
                r[i] = RANK(pp, dp, i);
            shape_merge(&t->tp, r, T, G);
        }
    for (int pp = 0; pp < P; pp++)
        for (int tp = 0; tp < T; tp++) {
            int m = 0;
            /* Chimera reduces over the replica pair {pp, P-1-pp}. */
            int other = chimera ? P - 1 - pp : pp;
            for (int dp = 0; dp < D; dp++) {
                r[m++] = RANK(pp, dp, tp);
                if (other != pp)
                    r[m++] = RANK(other, dp, tp);
            }
            qsort(r, (size_t)m, sizeof *r, cmp_int);
            shape_merge(&t->dp, r, m, G);
        }
    for (int pp = 0; pp + 1 < P && !t->pp_inter; pp++)
        for (int i = 0; i < D * T && !t->pp_inter; i++)
            t->pp_inter = RANK(pp, 0, i) / G != RANK(pp + 1, 0, i) / G;
    for (int i = 0; wrap && P > 1 && i < D * T && !t->pp_inter; i++)
        t->pp_inter = RANK(P - 1, 0, i) / G != RANK(0, 0, i) / G;
#undef RANK
    ptc_free(r);
    t->used = true;
    return &x->topos[x->topo_n++];
}

/* Ring all-reduce of @p bytes over a group; hierarchical (reduce-scatter
 * inside each host, all-reduce of a 1/k share between hosts, all-gather
 * inside) when the group has k > 1 members on each of h > 1 hosts. */
static double t_allreduce(const ptc_search_cluster *c, const cost_shape *s, double bytes)
{
    double n = s->n, k = s->k, h = s->h;
    if (n <= 1 || bytes < 0)
        return 0;
    if (h <= 1)
        return 2 * (n - 1) * c->intra_lat + 2 * (n - 1) / n * bytes / c->intra_bw;
    if (k <= 1)
        return 2 * (n - 1) * c->inter_lat + 2 * (n - 1) / n * bytes / c->inter_bw;
    return 2 * ((k - 1) * c->intra_lat + (k - 1) / k * bytes / c->intra_bw) +
           2 * (h - 1) * c->inter_lat + 2 * (h - 1) / h * bytes / k / c->inter_bw;
}

/* Reduce-scatter or all-gather: half an all-reduce in every case. */
static double t_half(const ptc_search_cluster *c, const cost_shape *s, double bytes)
{
    return t_allreduce(c, s, bytes) / 2;
}

/* ---- evaluation ---------------------------------------------------------------------- */

static bool kind_allowed(const ptc_search_job *j, ptc_sched_kind_id k)
{
    return !j->kinds || (j->kinds & (1u << k));
}

static int stages_of(const ptc_search_config *cfg)
{
    switch (cfg->schedule) {
    case PTC_SCHED_INTERLEAVED:
    case PTC_SCHED_ZBI:
    case PTC_SCHED_LOOPED_BFS: return cfg->pp * cfg->chunks;
    case PTC_SCHED_ZBV:
    case PTC_SCHED_DUALPIPEV: return 2 * cfg->pp;
    default: return cfg->pp;
    }
}

int cost_check_config(cost_ctx *x, const ptc_search_config *g)
{
    const ptc_search_cluster *c = &x->c;
    int64_t B = x->j.global_batch;
    if (g->dp < 1 || g->tp < 1 || g->pp < 1 || g->microbatches < 1 || g->mb_size < 1)
        return ptc_error_set(PTC_E_CONFIG, "dp, tp, pp, microbatches and mb_size must be >= 1");
    if ((int64_t)g->dp * g->tp * g->pp != c->gpus)
        return ptc_error_set(PTC_E_CONFIG, "dp*tp*pp = %lld, not the %d GPUs",
                             (long long)g->dp * g->tp * g->pp, c->gpus);
    if ((int64_t)g->dp * g->microbatches * g->mb_size != B)
        return ptc_error_set(PTC_E_CONFIG, "dp*microbatches*mb_size = %lld, not the global "
                             "batch %lld", (long long)g->dp * g->microbatches * g->mb_size,
                             (long long)B);
    if (x->j.max_mb_size && g->mb_size > x->j.max_mb_size)
        return ptc_error_set(PTC_E_CONFIG, "micro-batch size %d over the limit %lld", g->mb_size,
                             (long long)x->j.max_mb_size);
    if (g->zero != 0 && g->zero != 1)
        return ptc_error_set(PTC_E_CONFIG, "zero must be 0 or 1");
    if (g->zero && x->j.no_zero)
        return ptc_error_set(PTC_E_CONFIG, "zero=1 is not allowed");
    if (g->pp > PTC_SCHED_MAX_RANKS || g->microbatches > PTC_SCHED_MAX_MICROBATCHES)
        return ptc_error_set(PTC_E_CONFIG, "pp or microbatches over the simulator's limits");
    if ((unsigned)g->schedule > PTC_SCHED_DUALPIPE)
        return ptc_error_set(PTC_E_CONFIG, "unknown schedule kind");
    const cost_tp *t = cost_tp_get(x, g->tp);
    if (!t)
        return PTC_E_NOMEM;
    if (!t->valid)
        return ptc_error_set(PTC_E_CONFIG, "%s", t->why);
    int P = g->pp, M = g->microbatches;
    if (P == 1) {
        if (g->schedule != PTC_SCHED_1F1B || g->chunks != 1 || g->k != 0)
            return ptc_error_set(PTC_E_CONFIG, "pp=1 is written schedule 1f1b, chunks 1, k 0");
        return PTC_OK;
    }
    if (!kind_allowed(&x->j, g->schedule))
        return ptc_error_set(PTC_E_CONFIG, "schedule %s is not allowed",
                             ptc_sched_kind_name(g->schedule));
    switch (g->schedule) {
    case PTC_SCHED_INTERLEAVED:
        if (g->chunks < 2 || M % P)
            return ptc_error_set(PTC_E_CONFIG, "interleaved needs chunks >= 2 and microbatches "
                                               "a multiple of pp");
        break;
    case PTC_SCHED_ZBI:
    case PTC_SCHED_LOOPED_BFS:
        if (g->chunks < 2)
            return ptc_error_set(PTC_E_CONFIG, "%s needs chunks >= 2",
                                 ptc_sched_kind_name(g->schedule));
        break;
    case PTC_SCHED_ZBV:
    case PTC_SCHED_DUALPIPEV:
        if (g->chunks != 2)
            return ptc_error_set(PTC_E_CONFIG, "%s has 2 chunks",
                                 ptc_sched_kind_name(g->schedule));
        if (g->schedule == PTC_SCHED_DUALPIPEV && M < 2 * P)
            return ptc_error_set(PTC_E_CONFIG, "dualpipev needs microbatches >= 2*pp");
        break;
    case PTC_SCHED_DUALPIPE:
        if (g->chunks != 1 || P % 2 || M % 2 || M < 2 * P)
            return ptc_error_set(PTC_E_CONFIG, "dualpipe has 1 chunk and needs an even pp and "
                                               "an even number of microbatches >= 2*pp");
        break;
    default:
        if (g->chunks != 1)
            return ptc_error_set(PTC_E_CONFIG, "%s has 1 chunk", ptc_sched_kind_name(g->schedule));
    }
    if (g->chunks > 64)
        return ptc_error_set(PTC_E_CONFIG, "at most 64 chunks");
    if (g->schedule == PTC_SCHED_KFKB ? (g->k < 1 || g->k > M) : g->k != 0)
        return ptc_error_set(PTC_E_CONFIG, "k applies to kfkb only, 1 <= k <= microbatches");
    int S = stages_of(g);
    if (S > x->m->L)
        return ptc_error_set(PTC_E_CONFIG, "%d stages for %lld layers", S, (long long)x->m->L);
    return PTC_OK;
}

/* Sum of the groups on stage s of S (DESIGN's layer rule). */
static void stage_agg(const ptc_cost_model *m, const cost_tp *t, int s, int S, cost_agg *a)
{
    int64_t L = m->L, l0 = (int64_t)s * L / S, l1 = (int64_t)(s + 1) * L / S;
    memset(a, 0, sizeof *a);
    agg_add(a, &t->pre[l1], 1);
    agg_add(a, &t->pre[l0], -1);
    if (s == 0)
        agg_add(a, &t->first, 1);
    if (s == S - 1)
        agg_add(a, &t->last, 1);
    if (s == 0 || s == S - 1)
        agg_add(a, &t->fl_mem, 1);
    a->act += m->info.act_stage;
}

/* Stage indices held by pipeline rank r, per chunk. */
static int rank_stages(const ptc_search_config *g, int r, int *st)
{
    int P = g->pp;
    switch (g->schedule) {
    case PTC_SCHED_ZBV:
    case PTC_SCHED_DUALPIPEV:
        st[0] = r;
        st[1] = 2 * P - 1 - r;
        return 2;
    case PTC_SCHED_CHIMERA:
    case PTC_SCHED_DUALPIPE:
        st[0] = r;
        st[1] = P - 1 - r;
        return 2;
    case PTC_SCHED_INTERLEAVED:
    case PTC_SCHED_ZBI:
    case PTC_SCHED_LOOPED_BFS:
        for (int c = 0; c < g->chunks; c++)
            st[c] = r + c * P;
        return g->chunks;
    default:
        st[0] = r;
        return 1;
    }
}

typedef struct stage_cost {
    double fc, bc, wc, tf, tb; /* compute f, b, w; tp comm forward, backward */
} stage_cost;

static stage_cost stage_time(const cost_ctx *x, const cost_agg *a, double tokens, double asz,
                             const cost_shape *tp)
{
    const ptc_search_cluster *c = &x->c;
    stage_cost s;
    s.fc = a->flops_f * tokens / c->flops;
    s.wc = a->flops_bw * tokens / c->flops;
    s.bc = s.wc + a->flops_bi * tokens / c->flops;
    /* Collectives cost alpha per call and beta per byte, so a group's
     * count and summed widths give its total time. */
    double one = t_allreduce(c, tp, 0), per_b = t_allreduce(c, tp, 1) - one;
    double g1 = t_half(c, tp, 0), g_b = t_half(c, tp, 1) - g1;
    s.tf = a->ar_f_n * one + a->ar_f_w * tokens * asz * per_b + a->ag_f_n * g1 +
           a->ag_f_w * tokens * asz * g_b + a->small_f_n * (one + 4 * tokens * per_b);
    s.tb = a->ar_b_n * one + a->ar_b_w * tokens * asz * per_b;
    return s;
}

int cost_eval(cost_ctx *x, const ptc_search_config *g, bool breakdown, ptc_cost_result *out)
{
    memset(out, 0, sizeof *out);
    PTC_TRY(cost_check_config(x, g));
    const ptc_cost_model *m = x->m;
    const ptc_search_cluster *c = &x->c;
    const cost_tp *t = cost_tp_get(x, g->tp);
    int P = g->pp, D = g->dp, S = stages_of(g), M = g->microbatches;
    bool chim = sched_two_pipes(g->schedule) && P > 1;
    bool wrap = g->schedule == PTC_SCHED_INTERLEAVED || g->schedule == PTC_SCHED_ZBI ||
                g->schedule == PTC_SCHED_LOOPED_BFS;
    const cost_topo *tp = topo_get(x, D, g->tp, P, g->chunks, wrap, chim);
    if (!tp)
        return PTC_E_NOMEM;
    double tokens = (double)g->mb_size * (double)m->info.seq;
    double asz = (double)ptc_dtype_size(m->info.act_dtype);
    /* Stages are costed alike by the simulator: use the busiest one. */
    int nst = chim ? P : S;
    stage_cost best = {0};
    double best_t = -1;
    for (int s = 0; s < nst; s++) {
        cost_agg a;
        stage_agg(m, t, s, nst, &a);
        stage_cost sc = stage_time(x, &a, tokens, asz, &tp->tp);
        double tt = sc.fc + sc.bc + sc.tf + sc.tb;
        if (tt > best_t) {
            best_t = tt;
            best = sc;
        }
    }
    double f = best.fc + best.tf, b = best.bc + best.tb, w = best.wc;
    bool zb = sched_splits_backward(g->schedule);
    /* The simulator charges a chunk (P/S) of a whole-stage cost. */
    double scale = chim ? 1 : (double)S / P;
    double lat = 0, bw = 0, act = 0;
    if (P > 1) {
        lat = tp->pp_inter ? c->inter_lat : c->intra_lat;
        bw = tp->pp_inter ? c->inter_bw : c->intra_bw;
        act = tokens * (double)m->info.hidden * asz;
    }
    cost_sim_key k = {g->schedule, P, M, g->chunks, g->schedule == PTC_SCHED_KFKB ? g->k : 0,
                 f * scale, b * scale, zb ? fmin(w, b) * scale : 0, lat, bw, act};
    const cost_sim *sim;
    int rc = cost_sim_get(x, &k, breakdown, &sim);
    if (rc)
        return rc;
    /* Memory and gradient reduction per pipeline rank. */
    cost_shape dpg = tp->dp;
    int st[66];
    double mem_best = -1, dp_max = 0;
    for (int r = 0; r < P; r++) {
        int nc = P == 1 ? 1 : rank_stages(g, r, st);
        if (P == 1)
            st[0] = 0;
        double pb = t->all.param_b, gb = t->all.grad_b, ob = t->all.optim_b, dpt = 0;
        for (int ci = 0; ci < nc; ci++) {
            cost_agg a;
            stage_agg(m, t, st[ci], nst, &a);
            pb += a.param_b;
            gb += a.grad_b;
            ob += a.optim_b;
            if (g->zero)
                dpt += t_half(c, &dpg, a.grad_b) + t_half(c, &dpg, a.param_b);
            else
                dpt += t_allreduce(c, &dpg, a.grad_b);
        }
        if (g->zero && dpg.n > 1)
            ob /= dpg.n;
        if (x->j.dp_overlap && dpt > 0) {
            /* Layer by layer behind the rank's last backward (whole-stage b
             * covers the chunks a micro-batch visits); the last layer's
             * share cannot hide. */
            double layers = 0;
            for (int ci = 0; ci < nc; ci++) {
                int ns = nst;
                layers += (double)((int64_t)(st[ci] + 1) * m->L / ns - (int64_t)st[ci] * m->L / ns);
            }
            double window = chim ? b : b * (double)S / P;
            dpt = fmax(dpt - window, dpt / fmax(layers, 1));
        }
        /* The rank's activations at its fullest: each chunk's held
         * micro-batches times that chunk's bytes. */
        const cost_peaks *pk = &sim->peaks;
        double cb[64], am = 0;
        for (int q = 0; q < pk->nch && q < 64; q++) {
            int sq = pk->stage[(size_t)r * pk->nch + q];
            cb[q] = 0;
            if (sq >= 0) {
                cost_agg a;
                stage_agg(m, t, sq, nst, &a);
                cb[q] = a.act * tokens;
            }
        }
        for (int i = 0; i < pk->n[r]; i++) {
            const double *v = pk->v[r] + (size_t)i * pk->nch;
            double sum = 0;
            for (int q = 0; q < pk->nch && q < 64; q++)
                sum += v[q] * cb[q];
            am = fmax(am, sum);
        }
        double mem = pb + gb + ob + am;
        if (mem > mem_best) {
            mem_best = mem;
            out->mem_params = pb;
            out->mem_grads = gb;
            out->mem_optim = ob;
            out->mem_act = am;
            out->mem_rank = r;
        }
        dp_max = fmax(dp_max, dpt);
        out->peak_activations = fmax(out->peak_activations, pk->peak[r]);
    }
    double per_mb = chim ? 1 : (double)S / P; /* chunks a micro-batch visits per rank */
    out->stage_f = k.f;
    out->stage_b = k.b;
    out->stage_w = k.w;
    out->makespan = sim->makespan;
    out->compute = M * per_mb * (best.fc + best.bc);
    out->tp_comm = M * per_mb * (best.tf + best.tb);
    double busy = out->compute + out->tp_comm;
    /* Differences of sums: what is below rounding is zero. */
    double eps = 1e-9 * sim->makespan;
    if (breakdown) {
        out->bubble = sim->makespan0 - busy > eps ? sim->makespan0 - busy : 0;
        out->pp_comm = sim->makespan - (busy + out->bubble);
        if (fabs(out->pp_comm) <= eps)
            out->pp_comm = 0;
    } else { /* bubble and p2p together, until the breakdown is asked for */
        out->bubble = sim->makespan - busy > eps ? sim->makespan - busy : 0;
    }
    out->dp_comm = dp_max;
    out->step_time = sim->makespan + dp_max;
    out->mem = mem_best;
    out->fits = mem_best <= c->mem_bytes;
    out->shortfall = out->fits ? 0 : mem_best - c->mem_bytes;
    out->pp_inter = P > 1 && tp->pp_inter;
    out->tp_inter = tp->tp.h > 1;
    out->dp_inter = dpg.n > 1 && dpg.h > 1;
    return PTC_OK;
}

int ptc_cost_evaluate(const ptc_cost_model *m, const ptc_search_cluster *c,
                      const ptc_search_job *j, const ptc_search_config *cfg,
                      ptc_cost_result *out)
{
    memset(out, 0, sizeof *out);
    cost_ctx x;
    PTC_TRY(cost_ctx_init(&x, m, c, j));
    int rc = cost_eval(&x, cfg, true, out);
    cost_ctx_free(&x);
    return rc;
}

/* ---- small helpers of the public API ------------------------------------------------- */

void ptc_search_cluster_init(ptc_search_cluster *c)
{
    memset(c, 0, sizeof *c);
    c->gpus = 8;
    c->gpus_per_host = 8;
    c->mem_bytes = 80.0 * (1ull << 30);
    c->flops = 150e12;
    c->intra_bw = 300e9;
    c->intra_lat = 2e-6;
    c->inter_bw = 25e9;
    c->inter_lat = 5e-6;
}

void ptc_search_job_init(ptc_search_job *j)
{
    memset(j, 0, sizeof *j);
    j->global_batch = 1;
}

int ptc_search_config_format(const ptc_search_config *c, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "dp=%d,tp=%d,pp=%d,zero=%d schedule=%s microbatches=%d mb_size=%d",
                     c->dp, c->tp, c->pp, c->zero, ptc_sched_kind_name(c->schedule),
                     c->microbatches, c->mb_size);
    if (n >= 0 && (size_t)n < cap &&
        (c->schedule == PTC_SCHED_INTERLEAVED || c->schedule == PTC_SCHED_ZBI ||
         c->schedule == PTC_SCHED_LOOPED_BFS))
        n += snprintf(buf + n, cap - (size_t)n, " chunks=%d", c->chunks);
    if (n >= 0 && (size_t)n < cap && c->schedule == PTC_SCHED_KFKB)
        n += snprintf(buf + n, cap - (size_t)n, " k=%d", c->k);
    if (n < 0 || (size_t)n >= cap)
        return ptc_error_set(PTC_E_RANGE, "configuration text needs more than %zu bytes", cap);
    return PTC_OK;
}
