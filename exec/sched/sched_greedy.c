/* The greedy list scheduler behind chimera and the zero-bubble generators.
 *
 * It simulates the pipeline with the given costs and link model and,
 * whenever a rank is idle, starts its most urgent ready action: B/I (oldest
 * micro-batch, later stage first), then F (later stage first, then oldest)
 * if the stage and the rank hold fewer activations than their caps, then W.
 * W also goes first once a rank has `wmax` of them pending. Chimera puts F
 * (oldest micro-batch first, within the caps) before B: the two pipelines
 * then fill each other's bubbles. Micro-batches pass each stage in
 * increasing order.
 *
 * An input is ready when it has arrived: a result computed on another rank
 * arrives by the link model of the simulator (sched_links), so with slow
 * links a rank fills the wait with other work instead of idling behind an
 * action whose input is still in flight. */
#include <math.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

/* Min-heap of future arrival times: the scheduler wakes up at each. */
typedef struct theap {
    double *t;
    size_t n, cap;
} theap;

static int theap_push(theap *h, double x)
{
    if (h->n == h->cap && ptc_grow((void **)&h->t, &h->cap, h->n + 1, sizeof(double)))
        return PTC_E_NOMEM;
    size_t i = h->n++;
    while (i > 0 && h->t[(i - 1) / 2] > x) {
        h->t[i] = h->t[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->t[i] = x;
    return PTC_OK;
}

static void theap_pop(theap *h)
{
    double x = h->t[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        double best = x;
        if (l < h->n && h->t[l] < best) {
            m = l;
            best = h->t[l];
        }
        if (l + 1 < h->n && h->t[l + 1] < best)
            m = l + 1;
        if (m == i)
            break;
        h->t[i] = h->t[m];
        i = m;
    }
    if (h->n)
        h->t[i] = x;
}

typedef struct gstate {
    int *list, *lcount, *loff;  /* micro-batches per pipe, in order */
    int *fn, *bn, *wn, *held;   /* per global stage: next F/B/W index, held acts */
    double *f_end, *b_end;      /* per cell: local end of F, of B/I */
    double *f_avail, *b_avail;  /* per cell: arrival of F's output at the next
                                   stage's rank, of B/I's at the previous one */
    double *free_at;
    bool *running;
    int *wpend;
    theap arrivals;
    sched_links links;
} gstate;

static void gstate_free(gstate *z)
{
    ptc_free(z->list);
    ptc_free(z->lcount);
    ptc_free(z->loff);
    ptc_free(z->fn);
    ptc_free(z->bn);
    ptc_free(z->wn);
    ptc_free(z->held);
    ptc_free(z->f_end);
    ptc_free(z->b_end);
    ptc_free(z->f_avail);
    ptc_free(z->b_avail);
    ptc_free(z->free_at);
    ptc_free(z->running);
    ptc_free(z->wpend);
    ptc_free(z->arrivals.t);
    sched_links_free(&z->links);
}

static int gstate_init(gstate *z, const ptc_sched *s, const ptc_sched_costs *links)
{
    int P = s->ranks, GS = s->pipes * s->stages;
    size_t cells = (size_t)s->mbs * s->stages;
    memset(z, 0, sizeof *z);
    z->list = ptc_malloc((size_t)s->mbs * sizeof(int));
    z->lcount = ptc_calloc((size_t)s->pipes, sizeof(int));
    z->loff = ptc_calloc((size_t)s->pipes + 1, sizeof(int));
    z->fn = ptc_calloc((size_t)GS, sizeof(int));
    z->bn = ptc_calloc((size_t)GS, sizeof(int));
    z->wn = ptc_calloc((size_t)GS, sizeof(int));
    z->held = ptc_calloc((size_t)GS, sizeof(int));
    z->f_end = ptc_malloc(cells * sizeof(double));
    z->b_end = ptc_malloc(cells * sizeof(double));
    z->f_avail = ptc_malloc(cells * sizeof(double));
    z->b_avail = ptc_malloc(cells * sizeof(double));
    z->free_at = ptc_calloc((size_t)P, sizeof(double));
    z->running = ptc_calloc((size_t)P, sizeof(bool));
    z->wpend = ptc_calloc((size_t)P, sizeof(int));
    if (!z->list || !z->lcount || !z->loff || !z->fn || !z->bn || !z->wn || !z->held ||
        !z->f_end || !z->b_end || !z->f_avail || !z->b_avail || !z->free_at ||
        !z->running || !z->wpend || sched_links_init(&z->links, P, links)) {
        gstate_free(z);
        return PTC_E_NOMEM;
    }
    for (int m = 0; m < s->mbs; m++)
        z->lcount[s->mb_pipe[m]]++;
    for (int p = 0; p < s->pipes; p++)
        z->loff[p + 1] = z->loff[p] + z->lcount[p];
    memset(z->lcount, 0, (size_t)s->pipes * sizeof(int));
    for (int m = 0; m < s->mbs; m++) {
        int p = s->mb_pipe[m];
        z->list[z->loff[p] + z->lcount[p]++] = m;
    }
    for (size_t i = 0; i < cells; i++)
        z->f_end[i] = z->b_end[i] = z->f_avail[i] = z->b_avail[i] = INFINITY;
    return PTC_OK;
}

/* May rank @p r start an F on its chunk @p c under its rank cap? Chunks
 * 0..c' together keep room for one activation of every later chunk, so the
 * oldest micro-batch can always go on (it holds nothing past its current
 * chunk) and the greedy cannot fill a rank with early chunks and stall. */
static bool rank_room(const sched_greedy *gr, const ptc_sched *s, const gstate *z, int r, int c)
{
    if (!gr->rank_cap)
        return true;
    int n = s->nchunks[r], pre = 0;
    for (int x = 0; x < n; x++) {
        pre += z->held[s->chunk_gs[r][x]];
        if (x >= c && pre + 1 > gr->rank_cap[r] - (n - 1 - x))
            return false;
    }
    return true;
}

typedef struct pick {
    int op, g, mb, rankv;
} pick;

/* The most urgent ready action of idle rank @p r at time @p now, or op -1. */
static pick choose(const sched_greedy *gr, const ptc_sched *s, const gstate *z, int r,
                   double now)
{
    int S = s->stages;
    pick best = {-1, -1, 0, 99};
    for (int c = 0; c < s->nchunks[r]; c++) {
        int g = s->chunk_gs[r][c], p = g / S, st = g % S, n = z->lcount[p];
        const int *L = z->list + z->loff[p];
        pick cand = {-1, g, 0, 99};
        if (z->bn[g] < z->fn[g]) {
            int m = L[z->bn[g]];
            size_t cl = (size_t)m * S + st;
            if (z->f_end[cl] <= now && (st == S - 1 || z->b_avail[cl + 1] <= now)) {
                cand.op = gr->split ? PTC_SCHED_I : PTC_SCHED_B;
                cand.mb = m;
                cand.rankv = gr->fwd_first ? 2 : 1;
            }
        }
        if (gr->split && z->wn[g] < z->bn[g] && z->wpend[r] >= gr->wmax[r]) {
            int m = L[z->wn[g]];
            if (z->b_end[(size_t)m * S + st] <= now) {
                cand.op = PTC_SCHED_W;
                cand.mb = m;
                cand.rankv = 0;
            }
        }
        if ((cand.op < 0 || gr->fwd_first) && z->fn[g] < n && z->held[g] < gr->cap[g] &&
            rank_room(gr, s, z, r, c)) {
            int m = L[z->fn[g]];
            if (st == 0 || z->f_avail[(size_t)m * S + st - 1] <= now) {
                cand.op = PTC_SCHED_F;
                cand.mb = m;
                cand.rankv = gr->fwd_first ? 1 : 2;
            }
        }
        if (cand.op < 0 && gr->split && z->wn[g] < z->bn[g]) {
            int m = L[z->wn[g]];
            if (z->b_end[(size_t)m * S + st] <= now) {
                cand.op = PTC_SCHED_W;
                cand.mb = m;
                cand.rankv = 3;
            }
        }
        if (cand.op < 0)
            continue;
        /* lower rankv wins; then, for B/I and W the older micro-batch, for F
         * the later stage; remaining ties: later stage. */
        bool better = cand.rankv < best.rankv;
        if (cand.rankv == best.rankv) {
            if (cand.op == PTC_SCHED_F && !gr->fwd_oldest)
                better = g > best.g || (g == best.g && cand.mb < best.mb);
            else
                better = cand.mb < best.mb || (cand.mb == best.mb && g > best.g);
        }
        if (better)
            best = cand;
    }
    return best;
}

/* Start @p k on rank @p r at @p now: bookkeeping, arrivals, the action. */
static int start(const sched_greedy *gr, ptc_sched *s, gstate *z, int r, pick k, double now)
{
    int S = s->stages, st = k.g % S, pipe = k.g / S;
    size_t cl = (size_t)k.mb * S + st;
    double cost;
    switch (k.op) {
    case PTC_SCHED_F:
        cost = gr->f;
        z->fn[k.g]++;
        z->held[k.g]++;
        break;
    case PTC_SCHED_W:
        cost = gr->w;
        z->wn[k.g]++;
        z->wpend[r]--;
        break;
    default:
        cost = k.op == PTC_SCHED_B ? gr->b : gr->b - gr->w;
        z->bn[k.g]++;
        if (k.op == PTC_SCHED_I)
            z->wpend[r]++;
        /* freed at its end: count it now, the rank is busy until then */
        z->held[k.g]--;
        break;
    }
    double scale = (double)s->ranks / S; /* as the simulator */
    double end = now + cost * scale;
    int next = -1;
    if (k.op == PTC_SCHED_F) {
        z->f_end[cl] = end;
        if (st + 1 < S) {
            next = s->place_rank[pipe * S + st + 1];
            z->f_avail[cl] = sched_links_arrival(&z->links, r, next, end);
        }
    } else if (k.op != PTC_SCHED_W) {
        z->b_end[cl] = end;
        if (st > 0) {
            next = s->place_rank[pipe * S + st - 1];
            z->b_avail[cl] = sched_links_arrival(&z->links, r, next, end);
        }
    }
    if (z->links.err)
        return z->links.err;
    if (next >= 0 && next != r) { /* wake up when it arrives (at `end`: anyway) */
        double t = k.op == PTC_SCHED_F ? z->f_avail[cl] : z->b_avail[cl];
        if (t > end)
            PTC_TRY(theap_push(&z->arrivals, t));
    }
    z->free_at[r] = end;
    z->running[r] = true;
    ptc_sched_action a = {(uint8_t)k.op, 0, (uint16_t)s->place_chunk[k.g], k.mb, -1};
    return ptc_sched_append(s, r, a);
}

/* Whether rank r is still running its action at `now` (its end time
 * then bounds the next event). */
static bool rank_busy(gstate *z, int r, double now, double *next)
{
    if (z->running[r] && z->free_at[r] <= now)
        z->running[r] = false;
    if (z->running[r])
        *next = fmin(*next, z->free_at[r]);
    return z->running[r];
}

/* The time of the next event after `now`: the earliest of `next` (the end
 * of a running action) and the next arrival still in flight; INFINITY when
 * nothing is pending. Arrivals up to `now` are dropped. */
static double next_event(gstate *z, double now, double next)
{
    while (z->arrivals.n && z->arrivals.t[0] <= now)
        theap_pop(&z->arrivals);
    if (z->arrivals.n)
        next = fmin(next, z->arrivals.t[0]);
    return next;
}

int sched_greedy_run(ptc_sched *s, const sched_greedy *gr, double *makespan)
{
    ptc_sched_costs free_links;
    ptc_sched_costs_init(&free_links);
    gstate z;
    PTC_TRY(gstate_init(&z, s, gr->links ? gr->links : &free_links));
    int P = s->ranks, rc;
    double now = 0;
    size_t left = (size_t)s->mbs * s->stages * (gr->split ? 3 : 2);
    while (left) {
        double next = INFINITY;
        for (int r = 0; r < P; r++) {
            if (rank_busy(&z, r, now, &next))
                continue;
            pick k = choose(gr, s, &z, r, now);
            if (k.op < 0)
                continue;
            if ((rc = start(gr, s, &z, r, k, now)))
                goto out_free;
            left--;
            next = fmin(next, z.free_at[r]);
        }
        if (!left)
            break;
        next = next_event(&z, now, next);
        if (isinf(next)) {
            rc = ptc_error_set(PTC_E_INVAL, "internal: greedy scheduler stalled");
            goto out_free;
        }
        /* Zero-length actions end at `now`: loop again at the same time. */
        now = next;
    }
    rc = PTC_OK;
    if (makespan) {
        *makespan = 0;
        for (int r = 0; r < P; r++)
            *makespan = fmax(*makespan, z.free_at[r]);
    }
out_free:
    gstate_free(&z);
    return rc;
}

/* ---- compaction: a given order re-timed for the links ----------------------
 *
 * Each rank keeps its given order as its preference, and when the next
 * action's input is still in flight it may start a later one that is ready:
 * the first ready action in its order that passes no earlier action of the
 * same kind (F, B/I or W) on the same chunk (so every stage still sees its
 * micro-batches, and sums their weight gradients, in the given order), and
 * that keeps the rank's activations within the given order's own peak
 * whatever the rest of the order does. Doing work earlier only makes inputs
 * arrive earlier, and the memory rule keeps the rest of the given order
 * feasible, so the result cannot deadlock when the given order does not. */

typedef struct corder {
    const ptc_sched_action *a; /* the given compute order (borrowed) */
    size_t n, head;            /* first action not started */
    bool *done;
    int cap;                   /* the given order's peak, chunk activations */
} corder;

static int delta(int op)
{
    return op == PTC_SCHED_F ? 1 : op == PTC_SCHED_B || op == PTC_SCHED_I ? -1 : 0;
}

static int kind_class(int op)
{
    return op == PTC_SCHED_F ? 0 : op == PTC_SCHED_W ? 2 : 1;
}

static bool ready(const ptc_sched *s, const gstate *z, int r, const ptc_sched_action *a,
                  double now)
{
    int S = s->stages, st = sched_gs(s, r, a->chunk) % S;
    size_t cl = (size_t)a->mb * S + st;
    switch (a->op) {
    case PTC_SCHED_F:
        return st == 0 || z->f_avail[cl - 1] <= now;
    case PTC_SCHED_W:
        return z->b_end[cl] <= now;
    default:
        return z->f_end[cl] <= now && (st == S - 1 || z->b_avail[cl + 1] <= now);
    }
}

/* Index in @p o of the action rank @p r starts now, or (size_t)-1. */
static size_t compact_choose(const ptc_sched *s, const gstate *z, int r, corder *o,
                             double now, uint8_t *blocked)
{
    int nch = s->nchunks[r];
    memset(blocked, 0, (size_t)nch * 3);
    long run = 0;
    for (int c = 0; c < nch; c++)
        run += z->held[s->chunk_gs[r][c]];
    long mx = run; /* an F started now holds its activation from now on */
    size_t end = PTC_MIN(o->n, o->head + 16 + 4 * (size_t)s->ranks * (size_t)nch);
    for (size_t j = o->head; j < end; j++) {
        if (o->done[j])
            continue;
        const ptc_sched_action *a = &o->a[j];
        uint8_t *b = &blocked[a->chunk * 3 + kind_class(a->op)];
        bool fits = a->op != PTC_SCHED_F || mx + 1 <= o->cap;
        if (!*b && fits && ready(s, z, r, a, now))
            return j;
        *b = 1;
        run += delta(a->op);
        mx = PTC_MAX(mx, run);
    }
    return (size_t)-1;
}

int sched_compact(ptc_sched *s, const sched_greedy *gr)
{
    int P = s->ranks, rc = PTC_E_NOMEM;
    ptc_sched_costs free_links;
    ptc_sched_costs_init(&free_links);
    corder *o = ptc_calloc((size_t)P, sizeof *o);
    sched_list *given = ptc_calloc((size_t)P, sizeof *given);
    uint8_t *blocked = NULL;
    int maxch = 1;
    gstate z;
    if (!o || !given) {
        ptc_free(o);
        ptc_free(given);
        return PTC_E_NOMEM;
    }
    if ((rc = gstate_init(&z, s, gr->links ? gr->links : &free_links))) {
        ptc_free(o);
        ptc_free(given);
        return rc;
    }
    rc = PTC_E_NOMEM;
    /* Take the lists out of s: the re-timed order is appended anew. */
    for (int r = 0; r < P; r++) {
        given[r] = s->lists[r];
        s->total -= given[r].n;
        memset(&s->lists[r], 0, sizeof s->lists[r]);
        o[r].a = given[r].a;
        o[r].n = given[r].n;
        o[r].done = ptc_calloc(given[r].n + 1, sizeof(bool));
        if (!o[r].done)
            goto out_free;
        long cur = 0, best = 0;
        for (size_t i = 0; i < o[r].n; i++) {
            cur += delta(o[r].a[i].op);
            best = PTC_MAX(best, cur);
        }
        o[r].cap = (int)best;
        maxch = PTC_MAX(maxch, s->nchunks[r]);
    }
    blocked = ptc_malloc((size_t)maxch * 3);
    if (!blocked)
        goto out_free;
    size_t left = 0;
    for (int r = 0; r < P; r++)
        left += o[r].n;
    double now = 0;
    while (left) {
        double next = INFINITY;
        for (int r = 0; r < P; r++) {
            if (rank_busy(&z, r, now, &next))
                continue;
            size_t j = compact_choose(s, &z, r, &o[r], now, blocked);
            if (j == (size_t)-1)
                continue;
            const ptc_sched_action *a = &o[r].a[j];
            pick k = {a->op, sched_gs(s, r, a->chunk), a->mb, 0};
            if ((rc = start(gr, s, &z, r, k, now)))
                goto out_free;
            o[r].done[j] = true;
            while (o[r].head < o[r].n && o[r].done[o[r].head])
                o[r].head++;
            left--;
            next = fmin(next, z.free_at[r]);
        }
        if (!left)
            break;
        next = next_event(&z, now, next);
        if (isinf(next)) {
            rc = ptc_error_set(PTC_E_DEADLOCK, "compaction: the given order cannot complete");
            goto out_free;
        }
        now = next;
    }
    rc = PTC_OK;
out_free:
    if (rc) { /* put the given order back */
        for (int r = 0; r < P; r++) {
            ptc_free(s->lists[r].a);
            s->total -= s->lists[r].n;
            s->lists[r] = given[r];
            s->total += given[r].n;
            given[r].a = NULL;
        }
    }
    for (int r = 0; r < P; r++) {
        ptc_free(o[r].done);
        ptc_free(given[r].a);
    }
    ptc_free(o);
    ptc_free(given);
    ptc_free(blocked);
    gstate_free(&z);
    return rc;
}
