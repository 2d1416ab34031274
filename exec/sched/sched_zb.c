/* Chimera and the zero-bubble family: ZB-H1, ZB-H2, ZB-V, interleaved zero
 * bubble (greedy list scheduling, sched_greedy.c) and DualPipe / DualPipeV
 * (DeepSeek's fixed phases), each planned for the costs it will run with.
 *
 * With free links a kind is the greedy's order, or for zb-v and
 * zb-interleaved the shorter of it and the published fixed order (ZB-V's,
 * ZB-1P's), and DualPipe's phases for dualpipe(v). With a link latency or a
 * bandwidth, more plans are made and the one the simulator finds shortest
 * under those links is kept: the free-links orders themselves (so planning
 * for links never loses against not planning), the greedy run with the
 * links (it sees inputs still in flight and fills the wait with other
 * work), variants that defer weight-gradient passes further or put forwards
 * first, and each of them compacted for the links (sched_compact). All keep
 * the kind's memory caps, so the activation peak per rank does not grow. */
#include <math.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

/* Costs the generators order work with: F, B and W of a whole stage. */
static void gen_costs(const ptc_sched_gen *g, double *f, double *b, double *w)
{
    *f = g->cost_f > 0 ? g->cost_f : 1;
    *b = g->cost_b > 0 ? g->cost_b : 2;
    *w = g->cost_w > 0 && g->cost_w < *b ? g->cost_w : *b / 2;
}

/* Move the action lists of @p from into the empty lists of @p to. */
static void take_lists(ptc_sched *to, ptc_sched *from)
{
    for (int r = 0; r < to->ranks; r++) {
        sched_list t = to->lists[r];
        to->lists[r] = from->lists[r];
        from->lists[r] = t;
    }
    size_t n = to->total;
    to->total = from->total;
    from->total = n;
}

/* Makespan of @p s under @p c; INFINITY if it cannot run. */
static int makespan(const ptc_sched *s, const ptc_sched_costs *c, double *out)
{
    sched_run run;
    int rc = sched_run_exec(s, c, &run);
    if (rc == PTC_E_DEADLOCK) {
        sched_run_free(s, &run);
        *out = INFINITY;
        return PTC_OK;
    }
    if (rc)
        return rc;
    *out = run.makespan;
    sched_run_free(s, &run);
    return PTC_OK;
}

/* The plans tried for a kind, the shortest kept. */
typedef struct planner {
    ptc_sched *s;            /* placed, empty: receives the best lists */
    ptc_sched_costs eval;    /* f, b, w and the links */
    bool costly;             /* the links cost something */
    ptc_sched *best;
    double best_t;
} planner;

/* Consider the lists of @p c (taken over by the planner), whose makespan
 * under the planner's costs is @p known if >= 0 (else simulated). */
static int consider_known(planner *pl, ptc_sched *c, double known)
{
    double t = known;
    int rc = known >= 0 ? PTC_OK : makespan(c, &pl->eval, &t);
    if (rc) {
        ptc_sched_destroy(c);
        return rc;
    }
    /* Strictly shorter by a relative margin: ties keep the earlier plan. */
    if (!pl->best || t < pl->best_t * (1 - 1e-12)) {
        ptc_sched_destroy(pl->best);
        pl->best = c;
        pl->best_t = t;
    } else {
        ptc_sched_destroy(c);
    }
    return PTC_OK;
}

static int consider(planner *pl, ptc_sched *c)
{
    return consider_known(pl, c, -1);
}

/* Consider @p c (makespan @p known, or -1), and under costly links also its
 * compaction for them. */
static int consider_both(planner *pl, ptc_sched *c, const sched_greedy *gr, double known)
{
    if (!pl->costly)
        return consider_known(pl, c, known);
    ptc_sched *b;
    int rc = ptc_sched_clone(&b, c);
    if (rc) {
        ptc_sched_destroy(c);
        return rc;
    }
    if ((rc = consider_known(pl, c, known))) {
        ptc_sched_destroy(b);
        return rc;
    }
    sched_greedy cg = *gr;
    cg.links = &pl->eval;
    if ((rc = sched_compact(b, &cg))) {
        ptc_sched_destroy(b);
        return rc == PTC_E_DEADLOCK ? PTC_OK : rc;
    }
    return consider(pl, b);
}

/* Plan with @p gr and consider the plan (and its compaction). */
static int plan_greedy(planner *pl, const sched_greedy *gr)
{
    ptc_sched *a;
    PTC_TRY(ptc_sched_clone(&a, pl->s));
    double t;
    int rc = sched_greedy_run(a, gr, &t);
    if (rc) {
        ptc_sched_destroy(a);
        return rc;
    }
    /* The greedy's plan is its simulation when it ran with the same costs. */
    const ptc_sched_costs *e = &pl->eval;
    bool same = e->f == gr->f && e->b == gr->b && e->w == (gr->split ? gr->w : 0) &&
                (gr->links ? gr->links == e || (gr->links->latency == e->latency &&
                                                gr->links->bandwidth == e->bandwidth &&
                                                gr->links->act_bytes == e->act_bytes &&
                                                gr->links->trace == e->trace)
                           : sched_links_free_of_cost(e));
    return consider_both(pl, a, gr, same ? t : -1);
}

/* Consider the published fixed order @p fixed of the kind (and its compaction). */
static int plan_fixed(planner *pl, const sched_greedy *gr, int (*fixed)(ptc_sched *))
{
    ptc_sched *a;
    PTC_TRY(ptc_sched_clone(&a, pl->s));
    int rc = fixed(a);
    if (rc) {
        ptc_sched_destroy(a);
        return rc;
    }
    return consider_both(pl, a, gr, -1);
}

static void planner_init(planner *pl, ptc_sched *s, const sched_greedy *gr,
                         const ptc_sched_costs *links)
{
    memset(pl, 0, sizeof *pl);
    pl->s = s;
    if (links) { /* judged by the costs the schedule will be simulated with */
        pl->eval = *links;
    } else {
        ptc_sched_costs_init(&pl->eval);
        pl->eval.f = gr->f;
        pl->eval.b = gr->b;
        pl->eval.w = gr->split ? gr->w : 0;
    }
    pl->costly = !sched_links_free_of_cost(links);
    pl->best_t = INFINITY;
}

static int planner_finish(planner *pl, int rc)
{
    if (!rc && pl->best)
        take_lists(pl->s, pl->best);
    ptc_sched_destroy(pl->best);
    return rc;
}

/* The greedy with @p gr and the kind's published order @p fixed (NULL if
 * none): the shorter under free links, the shortest of all plans under
 * costly ones. */
static int plan_all(ptc_sched *s, sched_greedy gr, const ptc_sched_costs *links,
                    int (*fixed)(ptc_sched *))
{
    planner pl;
    planner_init(&pl, s, &gr, links);
    if (!pl.costly && !fixed) {
        gr.links = NULL;
        return sched_greedy_run(s, &gr, NULL);
    }
    int P = s->ranks;
    int *wall = ptc_malloc((size_t)P * sizeof(int));
    if (!wall)
        return PTC_E_NOMEM;
    for (int r = 0; r < P; r++)
        wall[r] = s->mbs * s->stages; /* W only when nothing else is ready */
    sched_greedy v[4];
    int nv = 0;
    v[nv] = gr; /* the free-links order (and its compaction) */
    v[nv++].links = NULL;
    if (pl.costly) {
        v[nv] = gr; /* planned for the links */
        v[nv++].links = links;
        if (gr.split) {
            v[nv] = gr; /* weight gradients deferred further */
            v[nv].links = links;
            v[nv++].wmax = wall;
            v[nv] = v[nv - 1]; /* ... and forwards first */
            v[nv++].fwd_first = true;
        }
    }
    int rc = PTC_OK;
    for (int i = 0; i < nv && !rc; i++)
        rc = plan_greedy(&pl, &v[i]);
    if (!rc && fixed)
        rc = plan_fixed(&pl, &gr, fixed);
    ptc_free(wall);
    return planner_finish(&pl, rc);
}

/* ZB-V's hand-crafted order (Qi et al., "Pipeline Parallelism with
 * Controllable Memory", 2024): on rank r, 2(P-r)-1 forwards of chunk 0, r
 * pairs F1 F0, P-r triples F1 I1 W1, the steady F0 I0 W0 F1 I1 W1, then the
 * input gradients and the weight gradients left. It is laid out for at
 * least 2P-1 micro-batches; with fewer, the missing ones are left out. */
static int fixed_zbv(ptc_sched *s)
{
    int P = s->ranks, M = s->mbs, n = PTC_MAX(2 * P - 1, M);
    for (int r = 0; r < P; r++) {
        int f[2] = {0, 0}, b[2] = {0, 0}, w[2];
#define ZB(op, c, cnt)                                                       \
    do {                                                                     \
        int m_ = (cnt)++;                                                    \
        if (m_ < M)                                                          \
            PTC_TRY(sched_add(s, r, op, m_, c));                             \
    } while (0)
        for (int i = 0; i < 2 * (P - r) - 1; i++)
            ZB(PTC_SCHED_F, 0, f[0]);
        for (int i = 0; i < r; i++) {
            ZB(PTC_SCHED_F, 1, f[1]);
            ZB(PTC_SCHED_F, 0, f[0]);
        }
        for (int i = 0; i < P - r; i++) {
            ZB(PTC_SCHED_F, 1, f[1]);
            w[1] = b[1];
            ZB(PTC_SCHED_I, 1, b[1]);
            ZB(PTC_SCHED_W, 1, w[1]);
        }
        while (f[1] < f[0] || f[0] < n) {
            if (f[0] < n)
                ZB(PTC_SCHED_F, 0, f[0]);
            w[0] = b[0];
            ZB(PTC_SCHED_I, 0, b[0]);
            ZB(PTC_SCHED_W, 0, w[0]);
            ZB(PTC_SCHED_F, 1, f[1]);
            w[1] = b[1];
            ZB(PTC_SCHED_I, 1, b[1]);
            ZB(PTC_SCHED_W, 1, w[1]);
        }
        w[0] = b[0];
        w[1] = b[1];
        for (int i = 0; i < r; i++) {
            ZB(PTC_SCHED_I, 0, b[0]);
            ZB(PTC_SCHED_I, 1, b[1]);
        }
        for (int i = 0; i < P - r; i++) {
            ZB(PTC_SCHED_I, 0, b[0]);
            ZB(PTC_SCHED_W, 0, w[0]);
        }
        while (w[1] < b[1])
            ZB(PTC_SCHED_W, 1, w[1]);
        while (w[0] < b[0])
            ZB(PTC_SCHED_W, 0, w[0]);
#undef ZB
    }
    return PTC_OK;
}

/* Interleaved 1F1B split into I and W (the zero-bubble paper's ZB-1P over
 * looped chunks): micro-batches in groups of P, rank r warms up with
 * (V-1)P + P-1-r forwards, then alternates F and I, each W r backward
 * steps behind its I. Needs M a multiple of P. */
static int fixed_zbi(ptc_sched *s)
{
    int P = s->ranks, M = s->mbs, V = s->stages / P, total = M * V;
    if (M % P)
        return PTC_E_UNSUPPORTED;
    for (int r = 0; r < P; r++) {
        int warm = PTC_MIN((V - 1) * P + P - 1 - r, total), nw = 0;
#define FWD(k) sched_add(s, r, PTC_SCHED_F, (k) / (P * V) * P + (k) % P, (k) % (P * V) / P)
#define BWD(op, j) sched_add(s, r, op, (j) / (P * V) * P + (j) % P, V - 1 - (j) % (P * V) / P)
        for (int k = 0; k < warm; k++)
            PTC_TRY(FWD(k));
        for (int j = 0; j < total; j++) {
            if (j + warm < total)
                PTC_TRY(FWD(j + warm));
            PTC_TRY(BWD(PTC_SCHED_I, j));
            for (; nw <= j - r; nw++)
                PTC_TRY(BWD(PTC_SCHED_W, nw));
        }
        for (; nw < total; nw++)
            PTC_TRY(BWD(PTC_SCHED_W, nw));
#undef FWD
#undef BWD
    }
    return PTC_OK;
}

int sched_gen_greedy(ptc_sched *s, const ptc_sched_gen *g, const ptc_sched_costs *links)
{
    int GS = s->pipes * s->stages, P = s->ranks, S = s->stages, V = S / P, rc;
    sched_greedy gr;
    memset(&gr, 0, sizeof gr);
    gr.split = g->kind != PTC_SCHED_CHIMERA;
    gr.fwd_first = gr.fwd_oldest = s->pipes == 2;
    gen_costs(g, &gr.f, &gr.b, &gr.w);
    int *cap = ptc_malloc((size_t)GS * sizeof(int));
    int *wmax = ptc_malloc((size_t)P * sizeof(int));
    int *rcap = ptc_malloc((size_t)P * sizeof(int));
    if (!cap || !wmax || !rcap) {
        rc = PTC_E_NOMEM;
        goto out_free;
    }
    for (int r = 0; r < P; r++) /* ZB-H2 defers W to the tail (a parallelogram) */
        wmax[r] = g->kind == PTC_SCHED_ZBH2 ? s->mbs * S : P;
    for (int x = 0; x < GS; x++) {
        int st = x % S;
        switch (g->kind) {
        case PTC_SCHED_CHIMERA: /* 1F1B's P-st, less one on the upper half */
            cap[x] = PTC_MAX(1, P - st - (2 * st <= P - 1));
            break;
        case PTC_SCHED_ZBH2: /* 2P-1 in flight on rank 0, one on the last */
            cap[x] = 2 * (P - st) - 1;
            break;
        case PTC_SCHED_ZBV: /* caps 2P-1-i and i+1 on rank i: P whole stages */
            cap[x] = st < P ? 2 * P - 1 - st : 2 * P - st;
            break;
        case PTC_SCHED_ZBI: /* the rank cap below */
            cap[x] = g->microbatches;
            break;
        default: /* ZB-H1: as 1F1B */
            cap[x] = P - st;
            break;
        }
    }
    if (g->kind == PTC_SCHED_ZBI) {
        /* Interleaved 1F1B's warm-up, one less hop per rank (as the zero
         * bubble's ZB-1P): rank i holds (V-1)P + P-i chunk activations. */
        for (int r = 0; r < P; r++)
            rcap[r] = (V - 1) * P + P - r;
        gr.rank_cap = rcap;
    }
    gr.cap = cap;
    gr.wmax = wmax;
    rc = plan_all(s, gr, links,
                  g->kind == PTC_SCHED_ZBV                           ? fixed_zbv
                  : g->kind == PTC_SCHED_ZBI && g->microbatches % P == 0 ? fixed_zbi
                                                                     : NULL);
out_free:
    ptc_free(cap);
    ptc_free(wmax);
    ptc_free(rcap);
    return rc;
}

/* ---- DualPipe and DualPipeV ------------------------------------------------
 * DeepSeek-V3 (arXiv 2412.19437) and its open-source DualPipe: a rank at
 * depth h of H half-ranks, with N micro-batches per direction, runs eight
 * phases over its two chunks ("phase 0" is the pipe in which it sits at
 * depth h, "phase 1" the other): F0 warm-up, F0 F1 pairs, zero-bubble
 * I1 W F1, the steady F0 B1 F1 B0 (overlapped pairs in DeepSeek's runtime),
 * B1 F1 B0, the B1 B0 drain whose second half splits into I + W, W B0 and
 * the last W. W passes run in the order of their I. DualPipeV is one half
 * of it folded into a V (H = P, N = M); DualPipe uses both halves with the
 * micro-batches of each direction on its own pipe. */

typedef struct dprank {
    ptc_sched *s;
    int rank;
    int chunk[2];      /* local chunk of phase 0/1 */
    int pipe[2];       /* pipe of phase 0/1 (DualPipe) */
    int nf[2], nb[2];  /* micro-batches started per phase */
    int *wq;           /* FIFO of pending W: phase * stride + index */
    size_t wh, wt, stride;
    bool two_pipes;
} dprank;

static int dp_mb(const dprank *d, int ph, int j)
{
    return d->two_pipes ? 2 * j + d->pipe[ph] : j;
}

static int dp_f(dprank *d, int ph)
{
    return sched_add(d->s, d->rank, PTC_SCHED_F, dp_mb(d, ph, d->nf[ph]++), d->chunk[ph]);
}

static int dp_b(dprank *d, int ph, bool zb)
{
    int j = d->nb[ph]++;
    if (zb)
        d->wq[d->wt++] = (int)((size_t)ph * d->stride + (size_t)j);
    return sched_add(d->s, d->rank, zb ? PTC_SCHED_I : PTC_SCHED_B, dp_mb(d, ph, j),
                     d->chunk[ph]);
}

static int dp_w(dprank *d)
{
    if (d->wh == d->wt)
        return PTC_OK;
    int x = d->wq[d->wh++], ph = (int)((size_t)x / d->stride);
    int j = (int)((size_t)x % d->stride);
    return sched_add(d->s, d->rank, PTC_SCHED_W, dp_mb(d, ph, j), d->chunk[ph]);
}

static int dp_phases(dprank *d, int h, int H, int N)
{
    for (int i = 0; i < 2 * (H - h - 1); i++)
        PTC_TRY(dp_f(d, 0));
    for (int i = 0; i < h + 1; i++) {
        PTC_TRY(dp_f(d, 0));
        PTC_TRY(dp_f(d, 1));
    }
    for (int i = 0; i < H - h - 1; i++) {
        PTC_TRY(dp_b(d, 1, true));
        PTC_TRY(dp_w(d));
        PTC_TRY(dp_f(d, 1));
    }
    for (int i = 0; i < N - 2 * H + h + 1; i++) {
        PTC_TRY(dp_f(d, 0));
        PTC_TRY(dp_b(d, 1, false));
        PTC_TRY(dp_f(d, 1));
        PTC_TRY(dp_b(d, 0, false));
    }
    for (int i = 0; i < H - h - 1; i++) {
        PTC_TRY(dp_b(d, 1, false));
        PTC_TRY(dp_f(d, 1));
        PTC_TRY(dp_b(d, 0, false));
    }
    bool zb = false;
    for (int i = 0; i < h + 1; i++) {
        if (i == (h + 1) / 2 && h % 2 == 1)
            zb = true;
        PTC_TRY(dp_b(d, 1, zb));
        if (i == (h + 1) / 2 && h % 2 == 0)
            zb = true;
        PTC_TRY(dp_b(d, 0, zb));
    }
    for (int i = 0; i < H - h - 1; i++) {
        PTC_TRY(dp_w(d));
        PTC_TRY(dp_b(d, 0, true));
    }
    while (d->wh < d->wt)
        PTC_TRY(dp_w(d));
    return PTC_OK;
}

static int dp_fixed(ptc_sched *s)
{
    int P = s->ranks;
    bool two = s->pipes == 2;
    int H = two ? P / 2 : P, N = two ? s->mbs / 2 : s->mbs;
    dprank d;
    memset(&d, 0, sizeof d);
    d.s = s;
    d.two_pipes = two;
    d.stride = (size_t)N;
    d.wq = ptc_malloc(2 * (size_t)N * sizeof(int));
    if (!d.wq)
        return PTC_E_NOMEM;
    int rc = PTC_OK;
    for (int r = 0; r < P && !rc; r++) {
        bool upper = two && r >= H;
        int h = upper ? P - 1 - r : r;
        d.rank = r;
        d.nf[0] = d.nf[1] = d.nb[0] = d.nb[1] = 0;
        d.wh = d.wt = 0;
        /* chunk 0 holds pipe 0 (or the V's first leg), chunk 1 the other */
        d.chunk[0] = upper ? 1 : 0;
        d.chunk[1] = upper ? 0 : 1;
        d.pipe[0] = upper ? 1 : 0;
        d.pipe[1] = upper ? 0 : 1;
        rc = dp_phases(&d, h, H, N);
    }
    ptc_free(d.wq);
    return rc;
}

int sched_gen_dualpipe(ptc_sched *s, const ptc_sched_gen *g, const ptc_sched_costs *links)
{
    if (sched_links_free_of_cost(links))
        return dp_fixed(s);
    /* Under costly links: the fixed order or its compaction, whichever the
     * simulator finds shorter. */
    sched_greedy gr;
    memset(&gr, 0, sizeof gr);
    gr.split = true;
    gen_costs(g, &gr.f, &gr.b, &gr.w);
    planner pl;
    planner_init(&pl, s, &gr, links);
    return planner_finish(&pl, plan_fixed(&pl, &gr, dp_fixed));
}
