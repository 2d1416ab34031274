/* Configuration search: coordinate descent with restarts over (tp, pp,
 * micro-batch size, schedule, zero), or every valid configuration. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/sched/sched_search_internal.h"

struct ptc_search_result {
    ptc_search_entry *top, *rej;
    size_t ntop, nrej;
    ptc_search_entry closest;
    bool has_closest;
    ptc_search_stats st;
};

void ptc_search_opts_init(ptc_search_opts *o)
{
    memset(o, 0, sizeof *o);
    o->top = 5;
    o->rejected = 5;
    o->restarts = 6;
    o->seed = 1;
}

/* ---- evaluated configurations (memo) ------------------------------------------------- */

typedef struct memo {
    ptc_search_entry *e; /* evaluated, valid configurations */
    size_t n, cap;
    int32_t *slot;       /* open addressing over e: index+1, 0 empty */
    size_t nslot;
} memo;

static uint64_t cfg_hash(const ptc_search_config *c)
{
    uint64_t v[] = {(uint64_t)c->dp,     (uint64_t)c->tp,      (uint64_t)c->pp,
                    (uint64_t)c->zero,   (uint64_t)c->schedule, (uint64_t)c->microbatches,
                    (uint64_t)c->mb_size, (uint64_t)c->chunks, (uint64_t)c->k};
    uint64_t h = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < PTC_ARRAY_LEN(v); i++) {
        h ^= v[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
    }
    return h ^ (h >> 29);
}

static bool cfg_eq(const ptc_search_config *a, const ptc_search_config *b)
{
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->zero == b->zero &&
           a->schedule == b->schedule && a->microbatches == b->microbatches &&
           a->mb_size == b->mb_size && a->chunks == b->chunks && a->k == b->k;
}

/* Order of configurations for ties: smaller tp, pp, dp, zero, mb_size,
 * schedule, chunks, k. */
static int cfg_cmp(const ptc_search_config *a, const ptc_search_config *b)
{
    int x[] = {a->tp, a->pp, a->dp, a->zero, a->mb_size, (int)a->schedule, a->chunks, a->k};
    int y[] = {b->tp, b->pp, b->dp, b->zero, b->mb_size, (int)b->schedule, b->chunks, b->k};
    for (size_t i = 0; i < PTC_ARRAY_LEN(x); i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* Times and sizes compared to about 9 significant digits, so that sums
 * of the same work in another order tie (and ties go to memory, then to
 * the configuration's order). A function of one value: still transitive. */
static double q(double v)
{
    int e;
    double m = frexp(v, &e);
    return ldexp(nearbyint(m * 0x1p30), e - 30);
}

/* The search's order: fitting before not fitting; fitting by step time,
 * then memory; not fitting by shortfall, then step time; then cfg_cmp. */
static bool better(const ptc_search_entry *a, const ptc_search_entry *b)
{
    if (a->cost.fits != b->cost.fits)
        return a->cost.fits;
    double x1 = q(a->cost.fits ? a->cost.step_time : a->cost.shortfall);
    double y1 = q(b->cost.fits ? b->cost.step_time : b->cost.shortfall);
    if (x1 != y1)
        return x1 < y1;
    double x2 = q(a->cost.fits ? a->cost.mem : a->cost.step_time);
    double y2 = q(b->cost.fits ? b->cost.mem : b->cost.step_time);
    if (x2 != y2)
        return x2 < y2;
    return cfg_cmp(&a->config, &b->config) < 0;
}

static int by_better(const void *a, const void *b)
{
    const ptc_search_entry *x = a, *y = b;
    return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

/* By step time only (rejected list). */
static int by_time(const void *a, const void *b)
{
    const ptc_search_entry *x = a, *y = b;
    if (q(x->cost.step_time) != q(y->cost.step_time))
        return q(x->cost.step_time) < q(y->cost.step_time) ? -1 : 1;
    return cfg_cmp(&x->config, &y->config);
}

static void memo_free(memo *m)
{
    ptc_free(m->e);
    ptc_free(m->slot);
    memset(m, 0, sizeof *m);
}

static int memo_rehash(memo *m, size_t ns)
{
    int32_t *s = ptc_calloc(ns, sizeof *s);
    if (!s)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = cfg_hash(&m->e[i].config) & (ns - 1);
        while (s[j])
            j = (j + 1) & (ns - 1);
        s[j] = (int32_t)i + 1;
    }
    ptc_free(m->slot);
    m->slot = s;
    m->nslot = ns;
    return PTC_OK;
}

/* ---- the search state ------------------------------------------------------------------ */

typedef struct search {
    cost_ctx x;
    memo mm;
    int N, G;
    int64_t B, L;
    int *tps;    /* valid tp degrees */
    int ntps;
    char why[256]; /* last reason a configuration was invalid */
    uint64_t rng;
} search;

/* Evaluate (memoised). *e NULL when the configuration is invalid. */
static int eval(search *s, const ptc_search_config *c, const ptc_search_entry **e)
{
    *e = NULL;
    memo *m = &s->mm;
    if (m->nslot) {
        size_t j = cfg_hash(c) & (m->nslot - 1);
        while (m->slot[j]) {
            const ptc_search_entry *q = &m->e[m->slot[j] - 1];
            if (cfg_eq(&q->config, c)) {
                *e = q;
                return PTC_OK;
            }
            j = (j + 1) & (m->nslot - 1);
        }
    }
    ptc_cost_result r;
    int rc = cost_eval(&s->x, c, false, &r);
    if (rc == PTC_E_CONFIG) {
        snprintf(s->why, sizeof s->why, "%s", ptc_last_error());
        return PTC_OK;
    }
    if (rc)
        return rc;
    if (ptc_grow((void **)&m->e, &m->cap, m->n + 1, sizeof *m->e))
        return PTC_E_NOMEM;
    if ((m->n + 1) * 2 > m->nslot && memo_rehash(m, m->nslot ? m->nslot * 2 : 1024))
        return PTC_E_NOMEM;
    m->e[m->n].config = *c;
    m->e[m->n].cost = r;
    size_t j = cfg_hash(c) & (m->nslot - 1);
    while (m->slot[j])
        j = (j + 1) & (m->nslot - 1);
    m->slot[j] = (int32_t)m->n + 1;
    *e = &m->e[m->n++];
    return PTC_OK;
}

/* Schedule options for P stages and M micro-batches (P > 1). */
typedef struct sopt {
    ptc_sched_kind_id kind;
    int V, k;
} sopt;

static int sched_options(const search *s, int P, int M, sopt *o)
{
    int n = 0;
    unsigned kinds = s->x.j.kinds;
#define OK_KIND(k) (!kinds || (kinds & (1u << (k))))
    if (P == 1) {
        o[n++] = (sopt){PTC_SCHED_1F1B, 1, 0};
        return n;
    }
    if (OK_KIND(PTC_SCHED_1F1B))
        o[n++] = (sopt){PTC_SCHED_1F1B, 1, 0};
    if (OK_KIND(PTC_SCHED_GPIPE))
        o[n++] = (sopt){PTC_SCHED_GPIPE, 1, 0};
    for (int V = 2; V <= 4 && OK_KIND(PTC_SCHED_INTERLEAVED); V *= 2)
        if (M % P == 0 && (int64_t)P * V <= s->L)
            o[n++] = (sopt){PTC_SCHED_INTERLEAVED, V, 0};
    for (int k = 2; k <= 4 && OK_KIND(PTC_SCHED_KFKB); k *= 2)
        if (k < M)
            o[n++] = (sopt){PTC_SCHED_KFKB, 1, k};
    if (OK_KIND(PTC_SCHED_ZBH1))
        o[n++] = (sopt){PTC_SCHED_ZBH1, 1, 0};
    if (OK_KIND(PTC_SCHED_ZBV) && 2 * (int64_t)P <= s->L)
        o[n++] = (sopt){PTC_SCHED_ZBV, 2, 0};
    if (OK_KIND(PTC_SCHED_CHIMERA))
        o[n++] = (sopt){PTC_SCHED_CHIMERA, 1, 0};
    if (OK_KIND(PTC_SCHED_ZBH2))
        o[n++] = (sopt){PTC_SCHED_ZBH2, 1, 0};
    if (OK_KIND(PTC_SCHED_ZBI) && 2 * (int64_t)P <= s->L)
        o[n++] = (sopt){PTC_SCHED_ZBI, 2, 0};
    if (OK_KIND(PTC_SCHED_LOOPED_BFS) && 2 * (int64_t)P <= s->L)
        o[n++] = (sopt){PTC_SCHED_LOOPED_BFS, 2, 0};
    if (OK_KIND(PTC_SCHED_DUALPIPEV) && M >= 2 * P && 2 * (int64_t)P <= s->L)
        o[n++] = (sopt){PTC_SCHED_DUALPIPEV, 2, 0};
    if (OK_KIND(PTC_SCHED_DUALPIPE) && P % 2 == 0 && M % 2 == 0 && M >= 2 * P)
        o[n++] = (sopt){PTC_SCHED_DUALPIPE, 1, 0};
#undef OK_KIND
    return n;
}

#define MAX_SOPT 16

/* A point of the descent: the coordinates, from which a valid
 * configuration is made by repairing what no longer fits. */
typedef struct point {
    int tp, pp, mb;
    sopt so;
    int zero;
} point;

static int64_t largest_divisor_le(int64_t n, int64_t cap)
{
    for (int64_t d = PTC_MIN(n, cap); d >= 1; d--)
        if (n % d == 0)
            return d;
    return 1;
}

/* Make a configuration from p; false if none (dp does not divide the batch,
 * tp*pp does not divide the GPUs, ...). */
static bool make(const search *s, const point *p, ptc_search_config *c)
{
    if (p->tp < 1 || p->pp < 1 || s->N % (p->tp * p->pp) || p->pp > s->L)
        return false;
    int D = s->N / (p->tp * p->pp);
    if (s->B % D)
        return false;
    int64_t per = s->B / D, cap = s->x.j.max_mb_size ? s->x.j.max_mb_size : per;
    int64_t mb = largest_divisor_le(per, PTC_MIN(PTC_MAX(p->mb, 1), cap));
    int64_t M = per / mb;
    if (M > PTC_SCHED_MAX_MICROBATCHES)
        return false;
    memset(c, 0, sizeof *c);
    c->dp = D;
    c->tp = p->tp;
    c->pp = p->pp;
    c->mb_size = (int)mb;
    c->microbatches = (int)M;
    sopt o[MAX_SOPT];
    int n = sched_options(s, p->pp, (int)M, o);
    if (n == 0)
        return false;
    sopt pick = o[0];
    bool exact = false, same_kind = false;
    for (int i = 0; i < n; i++) {
        if (o[i].kind == p->so.kind && o[i].V == p->so.V && o[i].k == p->so.k) {
            pick = o[i];
            exact = true;
        } else if (!exact && !same_kind && o[i].kind == p->so.kind) {
            pick = o[i];
            same_kind = true;
        }
    }
    c->schedule = pick.kind;
    c->chunks = pick.V;
    c->k = pick.k;
    bool group = D > 1 || (sched_two_pipes(c->schedule) && p->pp > 1);
    c->zero = group && !s->x.j.no_zero ? p->zero : 0;
    return true;
}

static point point_of(const ptc_search_config *c)
{
    point p = {c->tp, c->pp, c->mb_size, {c->schedule, c->chunks, c->k}, c->zero};
    return p;
}

/* Every valid configuration. */
static int exhaustive(search *s)
{
    for (int ti = 0; ti < s->ntps; ti++) {
        int T = s->tps[ti];
        for (int P = 1; P <= s->N / T; P++) {
            if ((s->N / T) % P || P > s->L)
                continue;
            int D = s->N / T / P;
            if (s->B % D)
                continue;
            int64_t per = s->B / D;
            for (int64_t mb = 1; mb <= per; mb++) {
                if (per % mb || (s->x.j.max_mb_size && mb > s->x.j.max_mb_size))
                    continue;
                if (per / mb > PTC_SCHED_MAX_MICROBATCHES)
                    continue;
                sopt o[MAX_SOPT];
                int n = sched_options(s, P, (int)(per / mb), o);
                for (int i = 0; i < n; i++)
                    for (int z = 0; z <= 1; z++) {
                        ptc_search_config c = {D, T, P, z, o[i].kind, (int)(per / mb), (int)mb,
                                               o[i].V, o[i].k};
                        if (z && ((D == 1 && !(sched_two_pipes(c.schedule) && P > 1)) ||
                                  s->x.j.no_zero))
                            continue;
                        const ptc_search_entry *e;
                        PTC_TRY(eval(s, &c, &e));
                    }
            }
        }
    }
    return PTC_OK;
}

/* Candidates along one direction from p. Directions: (tp, pp) together
 * (dp follows: moving one of them alone would change dp, which the batch
 * often forbids); the micro-batch size; the schedule; zero; and the
 * micro-batch size with the schedule (the schedules allowed depend on the
 * micro-batch count). */
enum { DIM_TPPP, DIM_MB, DIM_SCHED, DIM_ZERO, DIM_MB_SCHED, NDIMS };

static int candidates(const search *s, const point *p, int dim, point *out, int cap)
{
    int n = 0;
    switch (dim) {
    case DIM_TPPP:
        for (int i = 0; i < s->ntps; i++)
            for (int P = 1; P <= s->N / s->tps[i] && P <= s->L && n < cap; P++)
                if ((s->N / s->tps[i]) % P == 0) {
                    point q = *p;
                    q.tp = s->tps[i];
                    q.pp = P;
                    out[n++] = q;
                }
        break;
    case DIM_MB:
    case DIM_MB_SCHED: {
        if (s->N % (p->tp * p->pp))
            break;
        int D = s->N / (p->tp * p->pp);
        if (s->B % D)
            break;
        int64_t per = s->B / D;
        for (int64_t mb = 1; mb <= per && n < cap; mb++) {
            if (per % mb || (s->x.j.max_mb_size && mb > s->x.j.max_mb_size))
                continue;
            point q = *p;
            q.mb = (int)mb;
            if (dim == DIM_MB) {
                out[n++] = q;
                continue;
            }
            sopt o[MAX_SOPT];
            int k = sched_options(s, p->pp, (int)(per / mb), o);
            for (int i = 0; i < k && n < cap; i++) {
                q.so = o[i];
                out[n++] = q;
            }
        }
        break;
    }
    case DIM_SCHED: {
        ptc_search_config c;
        if (!make(s, p, &c))
            break;
        sopt o[MAX_SOPT];
        int k = sched_options(s, c.pp, c.microbatches, o);
        for (int i = 0; i < k && n < cap; i++) {
            point q = *p;
            q.so = o[i];
            out[n++] = q;
        }
        break;
    }
    default: /* zero */
        for (int z = 0; z <= 1 && n < cap; z++) {
            point q = *p;
            q.zero = z;
            out[n++] = q;
        }
    }
    return n;
}

#define MAX_CAND 16384

/* Descend from p: sweep the coordinates, moving to the best value of each,
 * until a whole sweep changes nothing. *best receives the end point's
 * entry (*found false if p and all its neighbours are invalid). */
static int descend(search *s, point p, point *cand, ptc_search_entry *best, bool *found)
{
    /* Entries are copied: evaluating may move the memo's array. */
    ptc_search_config c;
    ptc_search_entry cur;
    bool have = false;
    const ptc_search_entry *e;
    if (make(s, &p, &c)) {
        PTC_TRY(eval(s, &c, &e));
        if (e) {
            cur = *e;
            have = true;
        }
    }
    for (int sweep = 0; sweep < 64; sweep++) {
        bool moved = false;
        for (int dim = 0; dim < NDIMS; dim++) {
            int n = candidates(s, &p, dim, cand, MAX_CAND);
            for (int i = 0; i < n; i++) {
                if (!make(s, &cand[i], &c))
                    continue;
                PTC_TRY(eval(s, &c, &e));
                if (e && (!have || better(e, &cur))) {
                    cur = *e;
                    have = true;
                    p = point_of(&cur.config);
                    moved = true;
                }
            }
        }
        if (!moved)
            break;
    }
    *found = have;
    if (have)
        *best = cur;
    return PTC_OK;
}

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int descent(search *s, const ptc_search_opts *o)
{
    point *cand = ptc_malloc(MAX_CAND * sizeof *cand);
    if (!cand)
        return PTC_E_NOMEM;
    int tmax = 1;
    for (int i = 0; i < s->ntps; i++)
        if (s->tps[i] <= s->G)
            tmax = s->tps[i];
    int rc = PTC_OK;
    sopt f1b = {PTC_SCHED_1F1B, 1, 0};
    for (int r = 0; r < PTC_MAX(o->restarts, 1) && !rc; r++) {
        point p = {1, 1, 1, f1b, 0};
        if (r == 1) { /* tensor parallel inside a host, ZeRO */
            p.tp = tmax;
            p.zero = 1;
        } else if (r == 2) { /* plus the deepest pipeline */
            p.tp = tmax;
            p.pp = (int)largest_divisor_le(s->N / tmax, s->L);
        } else if (r == 3) { /* one large micro-batch: no pipeline, memory to spare */
            p.tp = tmax;
            p.mb = INT32_MAX;
        } else if (r >= 4) {
            p.tp = s->tps[next_rand(&s->rng) % (uint64_t)s->ntps];
            int nd = 0, div[64];
            for (int P = 1; P <= s->N / p.tp && P <= s->L; P++)
                if ((s->N / p.tp) % P == 0 && nd < 64)
                    div[nd++] = P;
            p.pp = nd ? div[next_rand(&s->rng) % (uint64_t)nd] : 1;
            p.mb = 1 << (next_rand(&s->rng) % 4);
            p.zero = (int)(next_rand(&s->rng) & 1);
        }
        ptc_search_entry e;
        bool found;
        rc = descend(s, p, cand, &e, &found);
    }
    ptc_free(cand);
    return rc;
}

/* ---- result ------------------------------------------------------------------------------ */

void ptc_search_result_destroy(ptc_search_result *r)
{
    if (!r)
        return;
    ptc_free(r->top);
    ptc_free(r->rej);
    ptc_free(r);
}

size_t ptc_search_result_count(const ptc_search_result *r) { return r->ntop; }

const ptc_search_entry *ptc_search_result_entry(const ptc_search_result *r, size_t i)
{
    return i < r->ntop ? &r->top[i] : NULL;
}

size_t ptc_search_result_rejected_count(const ptc_search_result *r) { return r->nrej; }

const ptc_search_entry *ptc_search_result_rejected(const ptc_search_result *r, size_t i)
{
    return i < r->nrej ? &r->rej[i] : NULL;
}

const ptc_search_entry *ptc_search_result_closest(const ptc_search_result *r)
{
    return r->has_closest ? &r->closest : NULL;
}

void ptc_search_result_stats(const ptc_search_result *r, ptc_search_stats *st) { *st = r->st; }

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int collect(search *s, const ptc_search_opts *o, ptc_search_result *r)
{
    memo *m = &s->mm;
    qsort(m->e, m->n, sizeof *m->e, by_better);
    size_t fit = 0;
    while (fit < m->n && m->e[fit].cost.fits)
        fit++;
    r->st.evaluated = m->n;
    r->st.fitting = fit;
    r->st.rejected = m->n - fit;
    size_t keep = PTC_MIN(fit, (size_t)PTC_MAX(o->top, 1));
    r->top = ptc_malloc((keep ? keep : 1) * sizeof *r->top);
    if (!r->top)
        return PTC_E_NOMEM;
    memcpy(r->top, m->e, keep * sizeof *r->top);
    r->ntop = keep;
    for (size_t i = 0; i < keep; i++)
        PTC_TRY(cost_eval(&s->x, &r->top[i].config, true, &r->top[i].cost));
    if (fit == 0 && m->n) {
        r->closest = m->e[0]; /* smallest shortfall comes first */
        r->has_closest = true;
    }
    /* Rejected: those faster than the best that fits (all when none fits). */
    size_t nr = m->n - fit;
    qsort(m->e + fit, nr, sizeof *m->e, by_time);
    size_t kr = 0;
    while (kr < nr && kr < (size_t)PTC_MAX(o->rejected, 0) &&
           (fit == 0 || q(m->e[fit + kr].cost.step_time) < q(m->e[0].cost.step_time)))
        kr++;
    r->rej = ptc_malloc((kr ? kr : 1) * sizeof *r->rej);
    if (!r->rej)
        return PTC_E_NOMEM;
    memcpy(r->rej, m->e + fit, kr * sizeof *r->rej);
    r->nrej = kr;
    for (size_t i = 0; i < kr; i++)
        PTC_TRY(cost_eval(&s->x, &r->rej[i].config, true, &r->rej[i].cost));
    if (r->has_closest)
        PTC_TRY(cost_eval(&s->x, &r->closest.config, true, &r->closest.cost));
    m->nslot = 0; /* the order changed: the hash is stale */
    return PTC_OK;
}

int ptc_search_run(ptc_search_result **out, const ptc_cost_model *m,
                   const ptc_search_cluster *c, const ptc_search_job *j,
                   const ptc_search_opts *o)
{
    *out = NULL;
    double t0 = now();
    ptc_search_opts def;
    if (!o) {
        ptc_search_opts_init(&def);
        o = &def;
    }
    search s;
    memset(&s, 0, sizeof s);
    PTC_TRY(cost_ctx_init(&s.x, m, c, j));
    s.N = c->gpus;
    s.G = c->gpus_per_host;
    s.B = j->global_batch;
    s.L = ptc_cost_model_layers(m);
    s.rng = o->seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    if (!s.rng)
        s.rng = 1;
    ptc_search_result *r = ptc_calloc(1, sizeof *r);
    s.tps = ptc_malloc((size_t)s.N * sizeof *s.tps);
    int rc = r && s.tps ? PTC_OK : PTC_E_NOMEM;
    for (int T = 1; T <= s.N && !rc; T++) {
        if (s.N % T)
            continue;
        const cost_tp *t = cost_tp_get(&s.x, T);
        if (!t)
            rc = PTC_E_NOMEM;
        else if (t->valid)
            s.tps[s.ntps++] = T;
        else
            snprintf(s.why, sizeof s.why, "%s", t->why);
    }
    if (!rc && o->exhaustive) {
        rc = exhaustive(&s);
        r->st.exhaustive = true;
    } else if (!rc) {
        rc = descent(&s, o);
        bool any_fit = false;
        for (size_t i = 0; i < s.mm.n; i++)
            any_fit |= s.mm.e[i].cost.fits;
        if (!rc && !any_fit) { /* make sure before answering that nothing fits */
            rc = exhaustive(&s);
            r->st.exhaustive = true;
        }
    }
    if (!rc && s.mm.n == 0)
        rc = ptc_error_set(PTC_E_CONFIG, "no valid configuration of %d GPUs for global batch "
                           "%lld (%s)", s.N, (long long)s.B,
                           s.why[0] ? s.why : "dp must divide the batch");
    if (!rc)
        rc = collect(&s, o, r);
    if (r)
        r->st.simulations = s.x.simulations;
    memo_free(&s.mm);
    ptc_free(s.tps);
    cost_ctx_free(&s.x);
    if (rc) {
        ptc_search_result_destroy(r);
        return rc;
    }
    r->st.seconds = now() - t0;
    *out = r;
    return PTC_OK;
}
