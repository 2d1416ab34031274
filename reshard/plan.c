/* The resharding planner: for every target piece, which provider gives which
 * box (docs/reshard.md). Pure: only the two layouts are consulted. This file
 * holds the options, the tensor loop, what a plan keeps and its queries;
 * plan_tensor.c plans one tensor, plan_bound.c computes the lower bound. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util_internal.h"
#include "reshard/plan_internal.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int check_same_tensors(const ptc_layout *a, const ptc_layout *b)
{
    size_t n = ptc_layout_count(a);
    if (n != ptc_layout_count(b))
        return ptc_error_set(PTC_E_INVAL, "layouts hold different numbers of tensors (%zu, %zu)",
                             n, ptc_layout_count(b));
    for (size_t t = 0; t < n; t++) {
        const ptc_tensor_info *x = ptc_layout_tensor(a, t), *y = ptc_layout_tensor(b, t);
        bool same = strcmp(x->name, y->name) == 0 && x->dtype == y->dtype && x->ndim == y->ndim;
        for (int d = 0; same && d < x->ndim; d++)
            same = x->shape[d] == y->shape[d];
        if (!same)
            return ptc_error_set(PTC_E_INVAL, "tensor %zu ('%s') differs between the layouts", t,
                                 x->name);
    }
    return PTC_OK;
}

/* Host of every rank from the options; nhosts grows to cover them. */
static int host_map(int *out, int n, const int *given, int per_host, const char *what,
                    int *nhosts, bool *mono)
{
    *mono = true;
    for (int r = 0; r < n; r++) {
        out[r] = given ? given[r] : (per_host > 0 ? r / per_host : 0);
        if (out[r] < 0)
            return ptc_error_set(PTC_E_INVAL, "%s rank %d has a negative host", what, r);
        if (out[r] >= *nhosts)
            *nhosts = out[r] + 1;
        if (r && out[r] < out[r - 1])
            *mono = false;
    }
    return PTC_OK;
}

static int check_procs(const ptc_plan_options *o, int ws, int wt)
{
    if (!o->src_proc != !o->dst_proc)
        return ptc_error_set(PTC_E_INVAL, "a per-process plan needs src_proc and dst_proc");
    if (!o->src_proc)
        return PTC_OK;
    if (o->figures_only)
        return ptc_error_set(PTC_E_INVAL, "a per-process plan keeps transfers: not figures_only");
    for (int r = 0; r < ws; r++)
        if (o->src_proc[r] < 0)
            return ptc_error_set(PTC_E_INVAL, "source rank %d has a negative process", r);
    for (int r = 0; r < wt; r++)
        if (o->dst_proc[r] < 0)
            return ptc_error_set(PTC_E_INVAL, "target rank %d has a negative process", r);
    return PTC_OK;
}

static int side_init(pl_side *sd, const ptc_layout *l)
{
    const ptc_config *c = ptc_layout_config(l);
    sd->l = l;
    sd->D = c->dp;
    sd->T = c->tp;
    sd->P = c->pp;
    sd->per = c->dp * c->tp;
    sd->W = ptc_config_world(c);
    sd->stg = ptc_malloc(sizeof(int) * (size_t)sd->P);
    sd->onstg = ptc_malloc((size_t)sd->P);
    sd->gq = ptc_malloc(sizeof(int) * (size_t)sd->per);
    return sd->stg && sd->onstg && sd->gq ? PTC_OK : PTC_E_NOMEM;
}

static void work_free(pl_work *w)
{
    pl_side_free(&w->s);
    pl_side_free(&w->d);
    pl_bound_free(w);
    ptc_free(w->send_load);
    ptc_free(w->recv_load);
    ptc_free(w->rv);
    ptc_free(w->rv_head);
    ptc_free(w->rv_tail);
    ptc_free(w->touched);
    ptc_free(w->cand);
    ptc_free(w->cand_off);
    ptc_free(w->qbuf);
    ptc_free(w->own_src);
    ptc_free(w->own_dst);
    ptc_free(w->rk);
    ptc_free(w->wl);
    ptc_free(w->tmp);
}

static int work_init(pl_work *w, const ptc_plan *p)
{
    memset(w, 0, sizeof *w);
    PTC_TRY(side_init(&w->s, p->src));
    PTC_TRY(side_init(&w->d, p->dst));
    w->send_load = ptc_calloc((size_t)p->ws + 1, sizeof *w->send_load);
    w->recv_load = ptc_calloc((size_t)p->wt + 1, sizeof *w->recv_load);
    w->rv_head = ptc_malloc(sizeof *w->rv_head * (size_t)p->nhosts);
    w->rv_tail = ptc_malloc(sizeof *w->rv_tail * (size_t)p->nhosts);
    if (!w->send_load || !w->recv_load || !w->rv_head || !w->rv_tail)
        return PTC_E_NOMEM;
    for (int h = 0; h < p->nhosts; h++)
        w->rv_head[h] = w->rv_tail[h] = -1;
    w->one_host_proc = p->per_proc && p->nhosts == 1;
    if (!w->one_host_proc)
        return PTC_OK;
    w->own_src = ptc_malloc(sizeof(int) * ((size_t)p->ws + 1));
    w->own_dst = ptc_malloc(sizeof(int) * ((size_t)p->wt + 1));
    if (!w->own_src || !w->own_dst)
        return PTC_E_NOMEM;
    for (int r = 0; r < p->ws; r++)
        if (p->src_proc[r] == p->proc)
            w->own_src[w->n_own_src++] = r;
    for (int r = 0; r < p->wt; r++)
        if (p->dst_proc[r] == p->proc)
            w->own_dst[w->n_own_dst++] = r;
    return PTC_OK;
}

/* Host tables: source ranks per host and, with a non-decreasing map, the
 * first source rank of each host. */
static int host_tables(ptc_plan *p)
{
    p->src_count = ptc_calloc((size_t)p->nhosts, sizeof *p->src_count);
    p->src_first = ptc_malloc(sizeof *p->src_first * (size_t)p->nhosts);
    p->hs = ptc_calloc((size_t)p->nhosts, sizeof *p->hs);
    if (!p->src_count || !p->src_first || !p->hs)
        return PTC_E_NOMEM;
    for (int h = 0; h < p->nhosts; h++)
        p->src_first[h] = -1;
    for (int r = p->ws - 1; r >= 0; r--) {
        p->src_count[p->src_host[r]]++;
        p->src_first[p->src_host[r]] = r;
    }
    return PTC_OK;
}

static int plan_all(ptc_plan *p)
{
    pl_work w;
    int rc = work_init(&w, p);
    size_t nt = ptc_layout_count(p->dst);
    /* a per-process plan on one host needs no holder lists (the owner
     * provides), but finds its receivers through the target pieces */
    unsigned sw = w.one_host_proc ? PL_INDEX : PL_HOLDERS | PL_INDEX;
    unsigned dw = w.one_host_proc ? PL_INDEX : 0;
    for (size_t t = 0; t < nt && rc == PTC_OK; t++) {
        rc = pl_side_load(&w.s, t, sw);
        if (rc == PTC_OK)
            rc = pl_side_load(&w.d, t, dw);
        if (rc == PTC_OK)
            rc = pl_plan_tensor(p, &w, t);
        p->st.tensors++;
    }
    for (int s = 0; rc == PTC_OK && s < p->ws; s++)
        if (!p->per_proc || p->src_proc[s] == p->proc)
            p->st.max_rank_send = PTC_MAX(p->st.max_rank_send, w.send_load[s]);
    for (int r = 0; rc == PTC_OK && r < p->wt; r++)
        if (!p->per_proc || p->dst_proc[r] == p->proc)
            p->st.max_rank_recv = PTC_MAX(p->st.max_rank_recv, w.recv_load[r]);
    p->st.transfers = p->per_proc ? p->nxf : w.nall;
    work_free(&w);
    return rc;
}

int ptc_plan_create(ptc_plan **out, const ptc_layout *src, const ptc_layout *dst,
                    const ptc_plan_options *opts)
{
    double t0 = now_seconds();
    *out = NULL;
    if (!src || !dst)
        return ptc_error_set(PTC_E_INVAL, "plan needs two layouts");
    PTC_TRY(check_same_tensors(src, dst));
    ptc_plan_options o = {0};
    if (opts)
        o = *opts;
    if (o.hosts < 0)
        return ptc_error_set(PTC_E_INVAL, "hosts must be >= 1 (got %d)", o.hosts);
    int ws = ptc_config_world(ptc_layout_config(src));
    int wt = ptc_config_world(ptc_layout_config(dst));
    PTC_TRY(check_procs(&o, ws, wt));
    int rc = PTC_E_NOMEM;
    ptc_plan *p = ptc_calloc(1, sizeof *p);
    if (!p)
        return PTC_E_NOMEM;
    p->src = src;
    p->dst = dst;
    p->no_reuse = o.no_reuse;
    p->ws = ws;
    p->wt = wt;
    p->per_proc = o.src_proc != NULL;
    p->keep_all = !o.figures_only && !p->per_proc;
    p->proc = o.proc;
    p->src_proc = o.src_proc;
    p->dst_proc = o.dst_proc;
    p->src_host = ptc_malloc(sizeof(int) * (size_t)ws);
    p->dst_host = ptc_malloc(sizeof(int) * (size_t)wt);
    if (!p->src_host || !p->dst_host)
        goto out_destroy;
    if ((rc = host_map(p->src_host, ws, o.src_host, o.hosts, "source", &p->nhosts,
                       &p->src_mono)) != PTC_OK ||
        (rc = host_map(p->dst_host, wt, o.dst_host, o.hosts, "target", &p->nhosts,
                       &p->dst_mono)) != PTC_OK)
        goto out_destroy;
    if ((rc = host_tables(p)) != PTC_OK || (rc = plan_all(p)) != PTC_OK)
        goto out_destroy;
    p->src_proc = p->dst_proc = NULL;
    p->st.hosts = p->nhosts;
    p->st.plan_seconds = now_seconds() - t0;
    *out = p;
    return PTC_OK;
out_destroy:
    if (rc == PTC_E_NOMEM)
        ptc_error_set(PTC_E_NOMEM, "out of memory while planning");
    ptc_plan_destroy(p);
    return rc;
}

void ptc_plan_destroy(ptc_plan *p)
{
    if (!p)
        return;
    ptc_free(p->src_host);
    ptc_free(p->dst_host);
    ptc_free(p->src_first);
    ptc_free(p->src_count);
    ptc_free(p->xf);
    ptc_free(p->reused);
    ptc_free(p->hs);
    ptc_free(p);
}

const ptc_layout *ptc_plan_source(const ptc_plan *p) { return p->src; }
const ptc_layout *ptc_plan_target(const ptc_plan *p) { return p->dst; }

void ptc_plan_stats_get(const ptc_plan *p, ptc_plan_stats *out) { *out = p->st; }

int ptc_plan_host_stats_get(const ptc_plan *p, int host, ptc_plan_host_stats *out)
{
    if (host < 0 || host >= p->nhosts)
        return ptc_error_set(PTC_E_RANGE, "host %d out of range (%d hosts)", host, p->nhosts);
    *out = p->hs[host];
    return PTC_OK;
}

int ptc_plan_src_host(const ptc_plan *p, int rank)
{
    return rank >= 0 && rank < p->ws ? p->src_host[rank] : -1;
}

int ptc_plan_dst_host(const ptc_plan *p, int rank)
{
    return rank >= 0 && rank < p->wt ? p->dst_host[rank] : -1;
}

const ptc_transfer *ptc_plan_transfers(const ptc_plan *p, size_t *n)
{
    *n = p->nxf;
    return p->xf;
}

bool ptc_plan_reused(const ptc_plan *p, size_t tensor, int rank)
{
    if (tensor >= ptc_layout_count(p->dst) || rank < 0 || rank >= p->wt)
        return false;
    uint64_t key = (uint64_t)tensor * (uint64_t)p->wt + (uint64_t)rank;
    size_t lo = 0, hi = p->nreused;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->reused[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nreused && p->reused[lo] == key;
}
