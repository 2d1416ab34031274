/* Discrete-event simulation of schedules, the link model, bandwidth traces. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

/* ---- bandwidth traces ------------------------------------------------------ */

struct ptc_sched_bw_trace {
    double *t, *bw;
    size_t n;
};

void ptc_sched_bw_trace_destroy(ptc_sched_bw_trace *t)
{
    if (!t)
        return;
    ptc_free(t->t);
    ptc_free(t->bw);
    ptc_free(t);
}

/* strtod on a bounded, non-terminated token. */
static bool tok_double(const char *p, size_t n, double *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, p, n);
    buf[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789.eE+-", buf[i]))
            return false;
    char *end;
    double v = strtod(buf, &end);
    if (*end || !isfinite(v))
        return false;
    *out = v;
    return true;
}

int ptc_sched_bw_trace_parse(ptc_sched_bw_trace **out, const char *text, size_t len)
{
    *out = NULL;
    ptc_sched_bw_trace *t = ptc_calloc(1, sizeof *t);
    if (!t)
        return PTC_E_NOMEM;
    size_t cap_t = 0, cap_b = 0;
    int line = 0, rc;
    const char *p = text, *end = text + len;
    while (p < end) {
        line++;
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e)
            e = end;
        const char *hash = memchr(p, '#', (size_t)(e - p));
        const char *ce = hash ? hash : e;
        const char *tk[3];
        size_t tn[3], nt = 0;
        for (const char *q = p; q < ce;) {
            if (*q == ' ' || *q == '\t' || *q == '\r') {
                q++;
                continue;
            }
            const char *b = q;
            while (q < ce && *q != ' ' && *q != '\t' && *q != '\r')
                q++;
            if (nt == 3) {
                nt++;
                break;
            }
            tk[nt] = b;
            tn[nt] = (size_t)(q - b);
            nt++;
        }
        p = e + 1;
        if (nt == 0)
            continue;
        double tv, bv;
        if (nt != 2 || !tok_double(tk[0], tn[0], &tv) || !tok_double(tk[1], tn[1], &bv)) {
            rc = ptc_error_set(PTC_E_FORMAT, "bandwidth trace line %d: expected 'TIME BANDWIDTH'",
                               line);
            goto out_destroy;
        }
        if (bv < 0 || (t->n == 0 && tv != 0) || (t->n > 0 && tv <= t->t[t->n - 1])) {
            rc = ptc_error_set(PTC_E_FORMAT, "bandwidth trace line %d: times must start at 0 "
                                             "and increase, bandwidths be >= 0", line);
            goto out_destroy;
        }
        if ((rc = ptc_grow((void **)&t->t, &cap_t, t->n + 1, sizeof(double))) ||
            (rc = ptc_grow((void **)&t->bw, &cap_b, t->n + 1, sizeof(double))))
            goto out_destroy;
        t->t[t->n] = tv;
        t->bw[t->n] = bv;
        t->n++;
    }
    if (t->n == 0 || t->bw[t->n - 1] <= 0) {
        rc = ptc_error_set(PTC_E_FORMAT, "bandwidth trace: empty, or last bandwidth not > 0");
        goto out_destroy;
    }
    *out = t;
    return PTC_OK;
out_destroy:
    ptc_sched_bw_trace_destroy(t);
    return rc;
}

/* Time to push @p bytes starting at @p t0 through the trace's bandwidth. */
static double trace_duration(const ptc_sched_bw_trace *tr, double t0, double bytes)
{
    size_t i = 0;
    while (i + 1 < tr->n && tr->t[i + 1] <= t0)
        i++;
    double t = t0, left = bytes;
    for (;; i++) {
        double seg_end = i + 1 < tr->n ? tr->t[i + 1] : INFINITY;
        double cap = tr->bw[i] * (seg_end - t);
        if (tr->bw[i] > 0 && cap >= left)
            return t + left / tr->bw[i] - t0;
        if (tr->bw[i] > 0)
            left -= cap;
        t = seg_end;
    }
}

void ptc_sched_costs_init(ptc_sched_costs *c)
{
    memset(c, 0, sizeof *c);
    c->f = 1;
    c->b = 2;
}

/* ---- the event loop ------------------------------------------------------- */

typedef struct ev {
    double t;
    uint64_t seq;
    int rank;
} ev;

typedef struct heap {
    ev *e;
    size_t n;
} heap;

static bool ev_less(const ev *a, const ev *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void heap_push(heap *h, ev x)
{
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&x, &h->e[p]))
            break;
        h->e[i] = h->e[p];
        i = p;
    }
    h->e[i] = x;
}

static ev heap_pop(heap *h)
{
    ev top = h->e[0], x = h->e[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const ev *best = &x;
        if (l < h->n && ev_less(&h->e[l], best)) {
            m = l;
            best = &h->e[l];
        }
        if (l + 1 < h->n && ev_less(&h->e[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        h->e[i] = h->e[m];
        i = m;
    }
    if (h->n)
        h->e[i] = x;
    return top;
}

typedef struct link {
    int dst;
    double free;
} link;

int sched_links_init(sched_links *k, int ranks, const ptc_sched_costs *c)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    k->ranks = ranks;
    if (c->bandwidth > 0 && c->act_bytes > 0)
        k->transfer = c->act_bytes / c->bandwidth;
    k->timed = (c->trace && c->act_bytes > 0) || k->transfer > 0;
    if (!k->timed)
        return PTC_OK;
    k->l = ptc_calloc((size_t)ranks, sizeof(link *));
    k->n = ptc_calloc((size_t)ranks, sizeof(size_t));
    k->cap = ptc_calloc((size_t)ranks, sizeof(size_t));
    if (!k->l || !k->n || !k->cap) {
        sched_links_free(k);
        return PTC_E_NOMEM;
    }
    return PTC_OK;
}

void sched_links_free(sched_links *k)
{
    if (k->l)
        for (int i = 0; i < k->ranks; i++)
            ptc_free(k->l[i]);
    ptc_free(k->l);
    ptc_free(k->n);
    ptc_free(k->cap);
    k->l = NULL;
    k->n = k->cap = NULL;
}

double sched_links_arrival(sched_links *k, int src, int dst, double t)
{
    const ptc_sched_costs *c = k->c;
    if (src == dst)
        return t;
    if (!k->timed)
        return t + c->latency;
    link *l = NULL;
    for (size_t i = 0; i < k->n[src]; i++)
        if (k->l[src][i].dst == dst)
            l = &k->l[src][i];
    if (!l) {
        if (ptc_grow((void **)&k->l[src], &k->cap[src], k->n[src] + 1, sizeof(link))) {
            k->err = PTC_E_NOMEM;
            return t;
        }
        l = &k->l[src][k->n[src]++];
        l->dst = dst;
        l->free = 0;
    }
    double begin = t > l->free ? t : l->free;
    double d = c->trace ? trace_duration(c->trace, begin, c->act_bytes) : k->transfer;
    l->free = begin + d;
    return begin + d + c->latency;
}

typedef struct runner {
    const ptc_sched *s;
    const ptc_sched_costs *c;
    sched_run *r;
    double *avail_f, *avail_b, *f_end, *i_end;
    size_t *pc;
    bool *running;
    double *free_at;
    sched_links links;
    heap h;
    uint64_t seq;
    double scale;
} runner;

static double arrival(runner *u, int src, int dst, double t)
{
    if (src == dst)
        return t;
    u->r->messages++;
    return sched_links_arrival(&u->links, src, dst, t);
}

static void try_start(runner *u, int rank)
{
    const ptc_sched *s = u->s;
    if (u->running[rank])
        return;
    const sched_list *l = &s->lists[rank];
    while (u->pc[rank] < l->n && !sched_is_compute(l->a[u->pc[rank]].op)) {
        u->r->start[rank][u->pc[rank]] = u->r->end[rank][u->pc[rank]] = -1;
        u->pc[rank]++;
    }
    if (u->pc[rank] >= l->n)
        return;
    const ptc_sched_action *a = &l->a[u->pc[rank]];
    int g = sched_gs(s, rank, a->chunk);
    int st = g % s->stages;
    size_t idx = (size_t)a->mb * s->stages + st;
    double ready = u->free_at[rank], cost;
    switch (a->op) {
    case PTC_SCHED_F:
        if (st > 0) {
            if (isinf(u->avail_f[idx - 1]))
                return;
            ready = fmax(ready, u->avail_f[idx - 1]);
        }
        cost = u->c->f;
        break;
    case PTC_SCHED_B:
    case PTC_SCHED_I:
        if (isinf(u->f_end[idx]))
            return;
        ready = fmax(ready, u->f_end[idx]);
        if (st < s->stages - 1) {
            if (isinf(u->avail_b[idx + 1]))
                return;
            ready = fmax(ready, u->avail_b[idx + 1]);
        }
        cost = a->op == PTC_SCHED_B ? u->c->b : u->c->b - u->c->w;
        break;
    default: /* W */
        if (isinf(u->i_end[idx]))
            return;
        ready = fmax(ready, u->i_end[idx]);
        cost = u->c->w;
        break;
    }
    double end = ready + cost * u->scale;
    u->r->start[rank][u->pc[rank]] = ready;
    u->r->end[rank][u->pc[rank]] = end;
    u->r->busy[rank] += end - ready;
    u->running[rank] = true;
    heap_push(&u->h, (ev){end, u->seq++, rank});
}

static void finish(runner *u, int rank, double t)
{
    const ptc_sched *s = u->s;
    const ptc_sched_action *a = &s->lists[rank].a[u->pc[rank]];
    int g = sched_gs(s, rank, a->chunk);
    int pipe = g / s->stages, st = g % s->stages;
    size_t idx = (size_t)a->mb * s->stages + st;
    u->running[rank] = false;
    u->free_at[rank] = t;
    u->pc[rank]++;
    if (t > u->r->makespan)
        u->r->makespan = t;
    int wake = -1;
    if (a->op == PTC_SCHED_F) {
        u->f_end[idx] = t;
        if (st + 1 < s->stages) {
            wake = s->place_rank[pipe * s->stages + st + 1];
            u->avail_f[idx] = arrival(u, rank, wake, t);
        }
    } else if (a->op == PTC_SCHED_B || a->op == PTC_SCHED_I) {
        u->i_end[idx] = t;
        if (st > 0) {
            wake = s->place_rank[pipe * s->stages + st - 1];
            u->avail_b[idx] = arrival(u, rank, wake, t);
        }
    }
    try_start(u, rank);
    if (wake >= 0 && wake != rank)
        try_start(u, wake);
}

void sched_run_free(const ptc_sched *s, sched_run *r)
{
    if (r->start)
        for (int i = 0; i < s->ranks; i++)
            ptc_free(r->start[i]);
    if (r->end)
        for (int i = 0; i < s->ranks; i++)
            ptc_free(r->end[i]);
    ptc_free(r->start);
    ptc_free(r->end);
    ptc_free(r->busy);
    ptc_free(r->peak);
    ptc_free(r->stuck);
    memset(r, 0, sizeof *r);
}

int sched_run_exec(const ptc_sched *s, const ptc_sched_costs *c, sched_run *r)
{
    memset(r, 0, sizeof *r);
    runner u;
    memset(&u, 0, sizeof u);
    u.s = s;
    u.c = c;
    u.r = r;
    u.scale = (double)s->ranks / s->stages;
    size_t cells = (size_t)s->mbs * s->stages, P = (size_t)s->ranks;
    int rc = PTC_E_NOMEM;
    r->start = ptc_calloc(P, sizeof(double *));
    r->end = ptc_calloc(P, sizeof(double *));
    r->busy = ptc_calloc(P, sizeof(double));
    r->peak = ptc_calloc(P, sizeof(double));
    r->stuck = ptc_calloc(P, sizeof(size_t));
    u.avail_f = ptc_malloc(cells * sizeof(double));
    u.avail_b = ptc_malloc(cells * sizeof(double));
    u.f_end = ptc_malloc(cells * sizeof(double));
    u.i_end = ptc_malloc(cells * sizeof(double));
    u.pc = ptc_calloc(P, sizeof(size_t));
    u.running = ptc_calloc(P, sizeof(bool));
    u.free_at = ptc_calloc(P, sizeof(double));
    u.h.e = ptc_malloc(P * sizeof(ev));
    if (!r->start || !r->end || !r->busy || !r->peak || !r->stuck || !u.avail_f ||
        !u.avail_b || !u.f_end || !u.i_end || !u.pc || !u.running || !u.free_at || !u.h.e ||
        sched_links_init(&u.links, s->ranks, c))
        goto out_free;
    for (size_t i = 0; i < P; i++) {
        size_t n = s->lists[i].n ? s->lists[i].n : 1;
        r->start[i] = ptc_malloc(n * sizeof(double));
        r->end[i] = ptc_malloc(n * sizeof(double));
        if (!r->start[i] || !r->end[i])
            goto out_free;
    }
    for (size_t i = 0; i < cells; i++)
        u.avail_f[i] = u.avail_b[i] = u.f_end[i] = u.i_end[i] = INFINITY;
    for (int i = 0; i < s->ranks; i++)
        try_start(&u, i);
    while (u.h.n && !u.links.err) {
        ev e = heap_pop(&u.h);
        finish(&u, e.rank, e.t);
    }
    if (u.links.err) {
        rc = u.links.err;
        goto out_free;
    }
    rc = PTC_OK;
    for (int i = 0; i < s->ranks; i++) {
        r->stuck[i] = u.pc[i];
        if (u.pc[i] < s->lists[i].n) {
            r->deadlock = true;
            rc = PTC_E_DEADLOCK;
        }
        /* Activation peak from the rank's own order, in chunk units. */
        long cur = 0, best = 0;
        for (size_t k = 0; k < s->lists[i].n; k++) {
            int op = s->lists[i].a[k].op;
            if (op == PTC_SCHED_F)
                cur++;
            else if (op == PTC_SCHED_B || op == PTC_SCHED_I)
                cur--;
            if (cur > best)
                best = cur;
        }
        r->peak[i] = (double)best * s->ranks / s->stages;
    }
out_free:
    ptc_free(u.avail_f);
    ptc_free(u.avail_b);
    ptc_free(u.f_end);
    ptc_free(u.i_end);
    ptc_free(u.pc);
    ptc_free(u.running);
    ptc_free(u.free_at);
    sched_links_free(&u.links);
    ptc_free(u.h.e);
    if (rc && rc != PTC_E_DEADLOCK)
        sched_run_free(s, r);
    return rc;
}

/* ---- public simulation API ----------------------------------------------------- */

struct ptc_sched_sim {
    int ranks;
    sched_run run;
    size_t *n;
};

int sched_links_check(const ptc_sched_costs *c)
{
    if (!(c->latency >= 0) || !(c->bandwidth >= 0) || !(c->act_bytes >= 0) ||
        !isfinite(c->latency + c->bandwidth + c->act_bytes))
        return ptc_error_set(PTC_E_INVAL, "link latency, bandwidth and bytes must be finite "
                                          "and >= 0");
    return PTC_OK;
}

bool sched_links_free_of_cost(const ptc_sched_costs *c)
{
    return !c || (c->latency == 0 && !(c->act_bytes > 0 && (c->bandwidth > 0 || c->trace)));
}

int sched_costs_check(const ptc_sched_costs *c)
{
    if (!(c->f >= 0) || !(c->b >= 0) || !(c->w >= 0) || c->w > c->b ||
        !isfinite(c->f + c->b + c->w))
        return ptc_error_set(PTC_E_INVAL, "costs must be finite and >= 0, with w <= b");
    return sched_links_check(c);
}

int ptc_sched_simulate(const ptc_sched *s, const ptc_sched_costs *c, ptc_sched_sim **out)
{
    *out = NULL;
    PTC_TRY(sched_costs_check(c));
    PTC_TRY(ptc_sched_check_placement(s));
    PTC_TRY(sched_check_deps(s, NULL));
    ptc_sched_sim *sim = ptc_calloc(1, sizeof *sim);
    if (!sim)
        return PTC_E_NOMEM;
    sim->ranks = s->ranks;
    sim->n = ptc_malloc((size_t)s->ranks * sizeof(size_t));
    if (!sim->n) {
        ptc_free(sim);
        return PTC_E_NOMEM;
    }
    for (int r = 0; r < s->ranks; r++)
        sim->n[r] = s->lists[r].n;
    int rc = sched_run_exec(s, c, &sim->run);
    if (rc == PTC_E_DEADLOCK) {
        sched_report_deadlock(s, sim->run.stuck, NULL, !ptc_sched_has_comm(s));
        sched_run_free(s, &sim->run);
    }
    if (rc) {
        ptc_free(sim->n);
        ptc_free(sim);
        return rc;
    }
    *out = sim;
    return PTC_OK;
}

void ptc_sched_sim_destroy(ptc_sched_sim *sim)
{
    if (!sim)
        return;
    /* sched_run_free needs only the rank count. */
    ptc_sched fake;
    memset(&fake, 0, sizeof fake);
    fake.ranks = sim->ranks;
    sched_run_free(&fake, &sim->run);
    ptc_free(sim->n);
    ptc_free(sim);
}

double ptc_sched_sim_makespan(const ptc_sched_sim *sim) { return sim->run.makespan; }

double ptc_sched_sim_bubble(const ptc_sched_sim *sim)
{
    if (sim->run.makespan <= 0)
        return 0;
    double busy = 0;
    for (int r = 0; r < sim->ranks; r++)
        busy += sim->run.busy[r];
    return 1.0 - busy / (sim->ranks * sim->run.makespan);
}

double ptc_sched_sim_busy(const ptc_sched_sim *sim, int rank)
{
    return rank >= 0 && rank < sim->ranks ? sim->run.busy[rank] : 0;
}

double ptc_sched_sim_peak(const ptc_sched_sim *sim, int rank)
{
    return rank >= 0 && rank < sim->ranks ? sim->run.peak[rank] : 0;
}

size_t ptc_sched_sim_messages(const ptc_sched_sim *sim) { return sim->run.messages; }

int ptc_sched_sim_timing(const ptc_sched_sim *sim, int rank, size_t i, double *start,
                         double *end)
{
    if (rank < 0 || rank >= sim->ranks || i >= sim->n[rank])
        return ptc_error_set(PTC_E_RANGE, "no action %zu on rank %d", i, rank);
    *start = sim->run.start[rank][i];
    *end = sim->run.end[rank][i];
    return PTC_OK;
}
