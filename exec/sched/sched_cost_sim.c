/* The simulations behind the cost model: schedules generated once per
 * kind and shape, their makespans (with and without communication) and the
 * activations their ranks hold at their peaks, cached per search.
 * docs/search.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_search_internal.h"

static uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* ---- simulations ---------------------------------------------------------------------- */

static uint64_t key_hash(const cost_sim_key *k)
{
    uint64_t h = 0x51ED270B27E1ull;
    h = mix64(h, (uint64_t)k->kind);
    h = mix64(h, (uint64_t)k->P);
    h = mix64(h, (uint64_t)k->M);
    h = mix64(h, (uint64_t)k->V);
    h = mix64(h, (uint64_t)k->k);
    h = mix64(h, dbits(k->f));
    h = mix64(h, dbits(k->b));
    h = mix64(h, dbits(k->w));
    h = mix64(h, dbits(k->lat));
    h = mix64(h, dbits(k->bw));
    return mix64(h, dbits(k->act));
}

static bool key_eq(const cost_sim *s, const cost_sim_key *k)
{
    return s->kind == k->kind && s->P == k->P && s->M == k->M && s->V == k->V && s->k == k->k &&
           s->f == k->f && s->b == k->b && s->w == k->w && s->lat == k->lat && s->tr == k->bw &&
           s->act_bytes == k->act;
}

#define GEN_MAX_ACTIONS ((size_t)1 << 24)

/* The schedule of k with M micro-batches, generated once. The greedy
 * generators order work by the cost ratios b/f and w/f, rounded to 1/16
 * so that configurations with nearly the same ratios share a schedule. */
static int gen_get(cost_ctx *x, const cost_sim_key *k, int M, const ptc_sched **out)
{
    bool greedy = sched_costs_order(k->kind);
    double rb = greedy && k->f > 0 ? nearbyint(k->b / k->f * 16) / 16 : 0;
    double rw = greedy && k->f > 0 ? nearbyint(k->w / k->f * 16) / 16 : 0;
    int kk = k->kind == PTC_SCHED_KFKB ? k->k : 1;
    for (size_t i = 0; i < x->gen_n; i++) {
        const cost_gen *g = &x->gens[i];
        if (g->kind == k->kind && g->P == k->P && g->M == M && g->V == k->V && g->k == kk &&
            g->rb == rb && g->rw == rw) {
            *out = g->s;
            return PTC_OK;
        }
    }
    if (x->gen_actions > GEN_MAX_ACTIONS) { /* bounded memory: start over */
        for (size_t i = 0; i < x->gen_n; i++)
            ptc_sched_destroy(x->gens[i].s);
        x->gen_n = 0;
        x->gen_actions = 0;
    }
    if (ptc_grow((void **)&x->gens, &x->gen_cap, x->gen_n + 1, sizeof *x->gens))
        return PTC_E_NOMEM;
    ptc_sched_gen g = {.kind = (ptc_sched_kind_id)k->kind, .ranks = k->P, .microbatches = M,
                       .chunks = k->V, .k = kk, .cost_f = greedy && rb > 0 ? 1 : 0,
                       .cost_b = rb, .cost_w = rw};
    ptc_sched *s;
    PTC_TRY(ptc_sched_generate(&s, &g));
    cost_gen *e = &x->gens[x->gen_n++];
    e->kind = k->kind, e->P = k->P, e->M = M, e->V = k->V, e->k = kk, e->rb = rb, e->rw = rw;
    e->s = s;
    e->actions = 0;
    for (int r = 0; r < k->P; r++) {
        size_t n;
        ptc_sched_actions(s, r, &n);
        e->actions += n;
    }
    x->gen_actions += e->actions;
    *out = s;
    return PTC_OK;
}

/* ---- activation peaks (cost_peaks) ---------------------------------------------------- */

void cost_peaks_free(cost_peaks *p)
{
    for (int r = 0; p->v && r < p->P; r++)
        ptc_free(p->v[r]);
    ptc_free(p->v);
    ptc_free(p->peak);
    ptc_free(p->stage);
    ptc_free(p->n);
    ptc_free(p->cap);
    memset(p, 0, sizeof *p);
}

static int peaks_init(cost_peaks *p, int P, int nch)
{
    memset(p, 0, sizeof *p);
    p->P = P;
    p->nch = nch;
    p->peak = ptc_calloc((size_t)P, sizeof *p->peak);
    p->stage = ptc_malloc((size_t)P * (size_t)nch * sizeof *p->stage);
    p->n = ptc_calloc((size_t)P, sizeof *p->n);
    p->cap = ptc_calloc((size_t)P, sizeof *p->cap);
    p->v = ptc_calloc((size_t)P, sizeof *p->v);
    if (!p->peak || !p->stage || !p->n || !p->cap || !p->v) {
        cost_peaks_free(p);
        return PTC_E_NOMEM;
    }
    for (int i = 0; i < P * nch; i++)
        p->stage[i] = -1;
    return PTC_OK;
}

/* Add @p c (nch counts) to rank r's vectors unless one of them matches or
 * exceeds it in every chunk; drop those it exceeds. */
static int peaks_add(cost_peaks *p, int r, const double *c)
{
    int nch = p->nch, n = p->n[r], kept = 0;
    double *v = p->v[r];
    for (int i = 0; i < n; i++) {
        bool ge = true;
        for (int q = 0; q < nch && ge; q++)
            ge = v[(size_t)i * nch + q] >= c[q];
        if (ge)
            return PTC_OK;
    }
    for (int i = 0; i < n; i++) {
        bool le = true;
        for (int q = 0; q < nch && le; q++)
            le = v[(size_t)i * nch + q] <= c[q];
        if (!le) {
            if (kept != i)
                memcpy(v + (size_t)kept * nch, v + (size_t)i * nch, (size_t)nch * sizeof *v);
            kept++;
        }
    }
    if (ptc_grow((void **)&p->v[r], &p->cap[r], (size_t)kept + 1, (size_t)nch * sizeof *v))
        return PTC_E_NOMEM;
    memcpy(p->v[r] + (size_t)kept * nch, c, (size_t)nch * sizeof *c);
    p->n[r] = kept + 1;
    return PTC_OK;
}

/* The peaks of schedule @p s into @p p (initialised here). */
static int peaks_of(const ptc_sched *s, cost_peaks *p)
{
    int P = ptc_sched_ranks(s), nch = 1;
    for (int r = 0; r < P; r++)
        nch = PTC_MAX(nch, ptc_sched_chunks(s, r));
    if (nch > 64)
        return ptc_error_set(PTC_E_CONFIG, "at most 64 chunks");
    PTC_TRY(peaks_init(p, P, nch));
    double unit = (double)P / ptc_sched_stages(s), cur[64];
    for (int r = 0; r < P; r++) {
        for (int c = 0; c < ptc_sched_chunks(s, r); c++) {
            int pipe, st;
            if (ptc_sched_stage_of(s, r, c, &pipe, &st) == PTC_OK)
                p->stage[(size_t)r * nch + c] = st;
        }
        size_t n;
        const ptc_sched_action *a = ptc_sched_actions(s, r, &n);
        long tot = 0, best = 0;
        bool rising = false;
        for (int c = 0; c < nch; c++)
            cur[c] = 0;
        for (size_t i = 0; i <= n; i++) {
            bool release = i < n && (a[i].op == PTC_SCHED_B || a[i].op == PTC_SCHED_W);
            if ((i == n || release) && rising) { /* a local maximum */
                int rc = peaks_add(p, r, cur);
                if (rc) {
                    cost_peaks_free(p);
                    return rc;
                }
                rising = false;
            }
            if (i == n || a[i].chunk >= nch)
                continue;
            if (a[i].op == PTC_SCHED_F) {
                cur[a[i].chunk]++;
                tot++;
                rising = true;
            } else if (release) {
                cur[a[i].chunk]--;
                tot--;
            }
            best = tot > best ? tot : best;
        }
        p->peak[r] = (double)best * unit;
    }
    return PTC_OK;
}

/* Long runs: fold the peaks of the second point @p b into @p a, extended to
 * t (GPipe holds every micro-batch: linear in M; the others level off, so
 * their vectors are the union). */
static int peaks_extend(cost_peaks *a, const cost_peaks *b, bool linear, double t)
{
    for (int r = 0; r < a->P; r++) {
        if (linear && a->n[r] == 1 && b->n[r] == 1) {
            for (int q = 0; q < a->nch; q++)
                a->v[r][q] += t * (b->v[r][q] - a->v[r][q]);
            a->peak[r] += t * (b->peak[r] - a->peak[r]);
            continue;
        }
        for (int i = 0; i < b->n[r]; i++)
            PTC_TRY(peaks_add(a, r, b->v[r] + (size_t)i * b->nch));
        a->peak[r] = fmax(a->peak[r], b->peak[r]);
    }
    return PTC_OK;
}

/* Simulate one schedule exactly: its makespan with or without p2p costs,
 * and (if @p pk) the per-rank activation peaks, which depend only on the
 * lists. */
static int sim_point(cost_ctx *x, const cost_sim_key *k, int M, bool comm, double *mk,
                     cost_peaks *pk)
{
    const ptc_sched *s;
    PTC_TRY(gen_get(x, k, M, &s));
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.f = k->f;
    c.b = k->b;
    c.w = k->w;
    if (comm) {
        c.latency = k->lat;
        c.bandwidth = k->bw;
        c.act_bytes = k->act;
    }
    ptc_sched_sim *sim;
    int rc = ptc_sched_simulate(s, &c, &sim);
    x->simulations++;
    if (rc)
        return rc;
    *mk = ptc_sched_sim_makespan(sim);
    ptc_sched_sim_destroy(sim);
    /* Held until B or W: the weight gradient needs the layer inputs (the
     * simulator's own peak releases them at I). */
    return pk ? peaks_of(s, pk) : PTC_OK;
}

/* Long runs are simulated at two micro-batch counts past the warm-up (m1,
 * m2: multiples of the schedule's period) and extended: the time beyond
 * the busy time is constant once the schedule repeats itself (exact for
 * 1F1B, GPipe, kFkB and interleaved without link limits; the unit test
 * bounds the error of the others against full simulations). */
static void extrapolation_points(const cost_sim_key *k, int *m1, int *m2)
{
    int u = k->kind == PTC_SCHED_INTERLEAVED || k->kind == PTC_SCHED_ZBI ? k->P
          : k->kind == PTC_SCHED_KFKB                                     ? k->k
          : sched_two_pipes(k->kind)                                      ? 2
                                                                          : 1;
    int lo = PTC_MAX(2 * k->P, 8);
    *m1 = u * ((lo + u - 1) / u);
    *m2 = *m1 + u * ((PTC_MAX(k->P, 4) + u - 1) / u);
}

static double extend(double o1, double o2, double t)
{
    return o2 >= o1 ? o1 + t * (o2 - o1) : o1;
}

/* The makespan of k (with or without p2p costs), simulated or extended
 * from two shorter runs; the activation peaks too when @p pk. */
static int sim_makespan(cost_ctx *x, const cost_sim_key *k, bool comm, double *mk,
                        cost_peaks *pk)
{
    int m1, m2;
    extrapolation_points(k, &m1, &m2);
    if (k->M <= m2)
        return sim_point(x, k, k->M, comm, mk, pk);
    double a, b;
    cost_peaks p2;
    PTC_TRY(sim_point(x, k, m1, comm, &a, pk));
    int rc = sim_point(x, k, m2, comm, &b, pk ? &p2 : NULL);
    if (rc) {
        if (pk)
            cost_peaks_free(pk);
        return rc;
    }
    /* Extend the overhead over the busy time (f + b per micro-batch on
     * every rank): constant once the schedule has settled, growing
     * linearly when the links cannot keep up. */
    double t = (double)(k->M - m1) / (double)(m2 - m1), busy = k->f + k->b;
    *mk = k->M * busy + extend(a - m1 * busy, b - m2 * busy, t);
    if (pk) {
        rc = peaks_extend(pk, &p2,
                          k->kind == PTC_SCHED_GPIPE || k->kind == PTC_SCHED_LOOPED_BFS, t);
        cost_peaks_free(&p2);
        if (rc)
            cost_peaks_free(pk);
    }
    return rc;
}

/* The cached simulation of k; the makespan without p2p costs only when
 * @p need0 (the breakdown of the configurations reported). */
int cost_sim_get(cost_ctx *x, const cost_sim_key *k, bool need0, const cost_sim **out)
{
    if (x->sim_n * 2 + 2 > x->sim_cap) { /* grow and rehash */
        size_t nc = x->sim_cap ? x->sim_cap * 2 : 256;
        cost_sim *ns = ptc_calloc(nc, sizeof *ns);
        if (!ns)
            return PTC_E_NOMEM;
        for (size_t i = 0; i < x->sim_cap; i++) {
            if (!x->sims[i].used)
                continue;
            cost_sim_key kk = {x->sims[i].kind, x->sims[i].P, x->sims[i].M, x->sims[i].V,
                          x->sims[i].k, x->sims[i].f, x->sims[i].b, x->sims[i].w,
                          x->sims[i].lat, x->sims[i].tr, x->sims[i].act_bytes};
            size_t j = key_hash(&kk) & (nc - 1);
            while (ns[j].used)
                j = (j + 1) & (nc - 1);
            ns[j] = x->sims[i];
        }
        ptc_free(x->sims);
        x->sims = ns;
        x->sim_cap = nc;
    }
    size_t j = key_hash(k) & (x->sim_cap - 1);
    cost_sim *e = NULL;
    while (x->sims[j].used) {
        if (key_eq(&x->sims[j], k)) {
            e = &x->sims[j];
            break;
        }
        j = (j + 1) & (x->sim_cap - 1);
    }
    if (!e) {
        cost_sim n;
        memset(&n, 0, sizeof n);
        n.kind = k->kind, n.P = k->P, n.M = k->M, n.V = k->V, n.k = k->k;
        n.f = k->f, n.b = k->b, n.w = k->w, n.lat = k->lat, n.tr = k->bw, n.act_bytes = k->act;
        PTC_TRY(sim_makespan(x, k, true, &n.makespan, &n.peaks));
        n.have0 = k->lat == 0 && (k->bw == 0 || k->act == 0);
        n.makespan0 = n.makespan;
        n.used = true;
        x->sims[j] = n;
        x->sim_n++;
        e = &x->sims[j];
    }
    if (need0 && !e->have0) {
        PTC_TRY(sim_makespan(x, k, false, &e->makespan0, NULL));
        e->have0 = true;
    }
    *out = e;
    return PTC_OK;
}

