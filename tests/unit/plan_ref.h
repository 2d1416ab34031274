/* The resharding planner as it was before the linear planner (the
 * all-pairs reference): kept verbatim, renamed ref_*, on the test side only,
 * so tests/unit/test_plan_equiv.c can check that the library's planner
 * gives the same figures and the same transfers wherever this one finishes.
 * Header-only (each unit test is one source file); never shipped. Its cost
 * is quadratic in the ranks (every target rank is scanned for every host,
 * every group member for every target rank). */
#ifndef PTC_TEST_PLAN_REF_H
#define PTC_TEST_PLAN_REF_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util_internal.h"
#include "ptc/plan.h"
#include "reshard/reshard_internal.h"

typedef struct ref_plan ref_plan;
static void ref_plan_destroy(ref_plan *p);

struct ref_plan {
    const ptc_layout *src, *dst;
    int ws, wt, nhosts;
    bool no_reuse;
    int *src_host, *dst_host;  /* per rank */
    ptc_transfer *xf;
    size_t nxf, capxf;
    uint8_t *reused;           /* tensors * wt bits */
    ptc_plan_stats st;
    ptc_plan_host_stats *hs;   /* per host */
};

/* A box received over the network into a host: where it landed. */
typedef struct ref_recv_entry {
    ptc_piece at;  /* box and its place in the receiving target rank's buffer */
    int rank;      /* receiving target rank */
    uint64_t xf;   /* index of the NETWORK transfer */
} ref_recv_entry;

/* Per-tensor working state. */
typedef struct ref_plan_work {
    ptc_shard_group *groups;
    size_t ngroups;
    ptc_piece **gpieces;   /* pieces of each group's shard */
    size_t *gnpieces;
    int *group_of;         /* source rank -> group index or -1 */
    ref_recv_entry **recv;     /* per host */
    size_t *nrecv, *caprecv;
    ptc_box *wl;           /* work list of boxes still to provide */
    size_t nwl, capwl;
    ptc_box *tmp;
    size_t captmp;
    uint64_t *send_load;   /* per source rank */
    uint64_t *recv_load;   /* per target rank */
} ref_plan_work;

static double ref_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ref_emit(ref_plan *p, uint32_t t, int kind, int src_rank, int dst_rank, uint64_t via,
                const ptc_box *box, const ptc_piece *from, const ptc_piece *to)
{
    PTC_TRY(ptc_grow((void **)&p->xf, &p->capxf, p->nxf + 1, sizeof *p->xf));
    ptc_transfer *x = &p->xf[p->nxf++];
    memset(x, 0, sizeof *x);
    x->tensor = t;
    x->kind = kind;
    x->src_rank = src_rank;
    x->dst_rank = dst_rank;
    x->via = via;
    x->box = *box;
    x->src_offset = ptc_piece_local_index(from, box->lo);
    x->dst_offset = ptc_piece_local_index(to, box->lo);
    for (int d = 0; d < box->ndim; d++) {
        x->src_stride[d] = from->local_stride[d];
        x->dst_stride[d] = to->local_stride[d];
    }
    return PTC_OK;
}

/* Provide what @p from holds of the work list: one transfer per overlap,
 * the rest stays in the list. For NETWORK, @p on_net records the reception. */
typedef struct ref_take_ctx {
    ref_plan *p;
    ref_plan_work *w;
    uint32_t t;
    const ptc_piece *to;
    int dst_rank;
    int host;
    size_t esize;
} ref_take_ctx;

static int ref_take(ref_take_ctx *c, const ptc_piece *from, int kind, int src_rank, uint64_t via)
{
    ref_plan_work *w = c->w;
    size_t nout = 0;
    for (size_t k = 0; k < w->nwl; k++) {
        ptc_box inter;
        if (!ptc_box_intersect(&inter, &w->wl[k], &from->box)) {
            PTC_TRY(ptc_grow((void **)&w->tmp, &w->captmp, nout + 1, sizeof(ptc_box)));
            w->tmp[nout++] = w->wl[k];
            continue;
        }
        uint64_t bytes = (uint64_t)ptc_box_volume(&inter) * c->esize;
        uint64_t idx = c->p->nxf;
        PTC_TRY(ref_emit(c->p, c->t, kind, src_rank, c->dst_rank, via, &inter, from, c->to));
        if (kind == PTC_TRANSFER_NETWORK) {
            w->send_load[src_rank] += bytes;
            w->recv_load[c->dst_rank] += bytes;
            int h = c->host;
            PTC_TRY(ptc_grow((void **)&w->recv[h], &w->caprecv[h], w->nrecv[h] + 1,
                             sizeof(ref_recv_entry)));
            ref_recv_entry *e = &w->recv[h][w->nrecv[h]++];
            ptc_piece_restrict(&e->at, c->to, &inter);
            e->rank = c->dst_rank;
            e->xf = idx;
        }
        /* the remainder lies outside `from` (from ∩ box = inter) */
        PTC_TRY(ptc_grow((void **)&w->tmp, &w->captmp, nout + 2 * PTC_MAX_DIMS, sizeof(ptc_box)));
        nout += ptc_box_subtract(w->tmp + nout, &w->wl[k], &inter);
    }
    ptc_box *sw = w->wl;
    size_t swcap = w->capwl;
    w->wl = w->tmp;
    w->capwl = w->captmp;
    w->tmp = sw;
    w->captmp = swcap;
    w->nwl = nout;
    return PTC_OK;
}

static void ref_work_reset_tensor(ref_plan_work *w, int nhosts)
{
    for (size_t g = 0; w->gpieces && g < w->ngroups; g++) /* NULL if ref_load_groups ran out */
        ptc_free(w->gpieces[g]);
    ptc_free(w->gpieces);
    ptc_free(w->gnpieces);
    w->gpieces = NULL;
    w->gnpieces = NULL;
    ptc_layout_groups_free(w->groups);
    w->groups = NULL;
    w->ngroups = 0;
    for (int h = 0; h < nhosts; h++)
        w->nrecv[h] = 0;
}

static int ref_load_groups(ref_plan_work *w, const ptc_layout *src, size_t t, int ws)
{
    PTC_TRY(ptc_layout_groups(src, t, &w->groups, &w->ngroups));
    w->gpieces = ptc_calloc(w->ngroups + 1, sizeof *w->gpieces);
    w->gnpieces = ptc_calloc(w->ngroups + 1, sizeof *w->gnpieces);
    if (!w->gpieces || !w->gnpieces)
        return PTC_E_NOMEM;
    for (int r = 0; r < ws; r++)
        w->group_of[r] = -1;
    for (size_t g = 0; g < w->ngroups; g++) {
        size_t np = 0;
        int rc = ptc_layout_pieces(src, t, w->groups[g].owner, NULL, 0, &np);
        if (rc != PTC_OK && rc != PTC_E_RANGE)
            return rc;
        w->gpieces[g] = ptc_malloc(sizeof(ptc_piece) * (np + 1));
        if (!w->gpieces[g])
            return PTC_E_NOMEM;
        PTC_TRY(ptc_layout_pieces(src, t, w->groups[g].owner, w->gpieces[g], np,
                                  &w->gnpieces[g]));
        for (size_t i = 0; i < w->groups[g].nranks; i++)
            w->group_of[w->groups[g].ranks[i]] = (int)g;
    }
    return PTC_OK;
}

/* ---- the independent lower bound: coordinate-compressed grid ------------ */

static int ref_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

typedef struct ref_grid_box {
    ptc_box box;
    uint8_t bit; /* 1 need, 2 have */
} ref_grid_box;

/* need/have/need-minus-have element counts of one tensor on one host. */
static int ref_grid_count(const ref_grid_box *gb, size_t n, int ndim, int64_t *need, int64_t *have,
                      int64_t *missing)
{
    *need = *have = *missing = 0;
    if (n == 0)
        return PTC_OK;
    if (ndim == 0) {
        uint8_t m = 0;
        for (size_t i = 0; i < n; i++)
            m |= gb[i].bit;
        *need = (m & 1) ? 1 : 0;
        *have = (m & 2) ? 1 : 0;
        *missing = (m == 1) ? 1 : 0;
        return PTC_OK;
    }
    int rc = PTC_E_NOMEM;
    int64_t *cuts[PTC_MAX_DIMS] = {0};
    size_t ncut[PTC_MAX_DIMS] = {0};
    uint8_t *mask = NULL;
    size_t cells = 1;
    for (int d = 0; d < ndim; d++) {
        cuts[d] = ptc_malloc(sizeof(int64_t) * 2 * n);
        if (!cuts[d])
            goto out_free;
        for (size_t i = 0; i < n; i++) {
            cuts[d][2 * i] = gb[i].box.lo[d];
            cuts[d][2 * i + 1] = gb[i].box.hi[d];
        }
        qsort(cuts[d], 2 * n, sizeof(int64_t), ref_cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < 2 * n; i++)
            if (u == 0 || cuts[d][u - 1] != cuts[d][i])
                cuts[d][u++] = cuts[d][i];
        ncut[d] = u;
        size_t intervals = u > 1 ? u - 1 : 1;
        if (cells > ((size_t)1 << 32) / intervals) {
            rc = ptc_error_set(PTC_E_RANGE, "lower bound grid too large");
            goto out_free;
        }
        cells *= intervals;
    }
    mask = ptc_calloc(cells, 1);
    if (!mask)
        goto out_free;
    for (size_t i = 0; i < n; i++) {
        size_t lo[PTC_MAX_DIMS], hi[PTC_MAX_DIMS];
        bool empty = false;
        for (int d = 0; d < ndim; d++) {
            int64_t *f = bsearch(&gb[i].box.lo[d], cuts[d], ncut[d], sizeof(int64_t), ref_cmp_i64);
            int64_t *e = bsearch(&gb[i].box.hi[d], cuts[d], ncut[d], sizeof(int64_t), ref_cmp_i64);
            lo[d] = (size_t)(f - cuts[d]);
            hi[d] = (size_t)(e - cuts[d]);
            if (lo[d] >= hi[d])
                empty = true;
        }
        if (empty)
            continue;
        size_t idx[PTC_MAX_DIMS];
        memcpy(idx, lo, sizeof idx);
        for (;;) {
            size_t c = 0;
            for (int d = 0; d < ndim; d++)
                c = c * (ncut[d] - 1) + idx[d];
            mask[c] |= gb[i].bit;
            int d = ndim - 1;
            while (d >= 0 && ++idx[d] == hi[d]) {
                idx[d] = lo[d];
                d--;
            }
            if (d < 0)
                break;
        }
    }
    size_t idx[PTC_MAX_DIMS] = {0};
    for (size_t c = 0; c < cells; c++) {
        if (mask[c]) {
            int64_t v = 1;
            for (int d = 0; d < ndim; d++)
                v *= cuts[d][idx[d] + 1] - cuts[d][idx[d]];
            if (mask[c] & 1)
                *need += v;
            if (mask[c] & 2)
                *have += v;
            if (mask[c] == 1)
                *missing += v;
        }
        int d = ndim - 1;
        while (d >= 0 && ++idx[d] == ncut[d] - 1) {
            idx[d] = 0;
            d--;
        }
    }
    rc = PTC_OK;
out_free:
    ptc_free(mask);
    for (int d = 0; d < ndim; d++)
        ptc_free(cuts[d]);
    return rc;
}

static int ref_lower_bound_tensor(ref_plan *p, size_t t, ref_plan_work *w, size_t esize)
{
    int rc = PTC_OK;
    const ptc_tensor_info *ti = ptc_layout_tensor(p->dst, t);
    ref_grid_box *gb = NULL;
    size_t ngb = 0, capgb = 0;
    ptc_piece *pc = NULL;
    size_t cappc = 0;
    for (int h = 0; h < p->nhosts; h++) {
        ngb = 0;
        for (int r = 0; r < p->wt; r++) {
            if (p->dst_host[r] != h)
                continue;
            size_t np = 0;
            rc = ptc_layout_pieces(p->dst, t, r, NULL, 0, &np);
            if (rc != PTC_OK && rc != PTC_E_RANGE)
                goto out_free;
            if ((rc = ptc_grow((void **)&pc, &cappc, np + 1, sizeof *pc)) != PTC_OK)
                goto out_free;
            if ((rc = ptc_layout_pieces(p->dst, t, r, pc, cappc, &np)) != PTC_OK)
                goto out_free;
            if ((rc = ptc_grow((void **)&gb, &capgb, ngb + np, sizeof *gb)) != PTC_OK)
                goto out_free;
            for (size_t i = 0; i < np; i++)
                gb[ngb++] = (ref_grid_box){pc[i].box, 1};
        }
        for (size_t g = 0; g < w->ngroups; g++) {
            bool on = false;
            for (size_t i = 0; i < w->groups[g].nranks; i++)
                if (p->src_host[w->groups[g].ranks[i]] == h)
                    on = true;
            if (!on)
                continue;
            if ((rc = ptc_grow((void **)&gb, &capgb, ngb + w->gnpieces[g], sizeof *gb)) != PTC_OK)
                goto out_free;
            for (size_t i = 0; i < w->gnpieces[g]; i++)
                gb[ngb++] = (ref_grid_box){w->gpieces[g][i].box, 2};
        }
        int64_t need, have, missing;
        if ((rc = ref_grid_count(gb, ngb, ti->ndim, &need, &have, &missing)) != PTC_OK)
            goto out_free;
        p->hs[h].bytes_need += (uint64_t)need * esize;
        p->hs[h].bytes_have += (uint64_t)have * esize;
        p->st.bytes_network_lower_bound += (uint64_t)missing * esize;
    }
out_free:
    ptc_free(gb);
    ptc_free(pc);
    return rc;
}

/* ---- planning one tensor ------------------------------------------------ */

static int ref_plan_tensor(ref_plan *p, size_t t, ref_plan_work *w, ptc_piece **tp, size_t *captp,
                       ptc_piece **sp, size_t *capsp)
{
    const ptc_tensor_info *ti = ptc_layout_tensor(p->dst, t);
    size_t esize = ptc_dtype_size(ti->dtype);
    PTC_TRY(ref_load_groups(w, p->src, t, p->ws));
    for (int r = 0; r < p->wt; r++) {
        ptc_shard sh;
        PTC_TRY(ptc_layout_shard(p->dst, t, r, &sh));
        if (!sh.present || sh.npieces == 0)
            continue;
        PTC_TRY(ptc_grow((void **)tp, captp, sh.npieces, sizeof(ptc_piece)));
        size_t ntp;
        PTC_TRY(ptc_layout_pieces(p->dst, t, r, *tp, *captp, &ntp));
        int64_t vol = 1;
        for (int d = 0; d < sh.ndim; d++)
            vol *= sh.shape[d];
        p->st.shards++;
        p->st.bytes_total += (uint64_t)vol * esize;
        int h = p->dst_host[r];
        /* the same rank's source shard */
        ptc_shard ss = {0};
        size_t nsp = 0;
        if (r < p->ws) {
            PTC_TRY(ptc_layout_shard(p->src, t, r, &ss));
            if (ss.present && ss.npieces) {
                PTC_TRY(ptc_grow((void **)sp, capsp, ss.npieces, sizeof(ptc_piece)));
                PTC_TRY(ptc_layout_pieces(p->src, t, r, *sp, *capsp, &nsp));
            }
        }
        if (!p->no_reuse && r < p->ws && p->src_host[r] == h && ss.present &&
            ptc_shard_same(&sh, *tp, &ss, *sp)) {
            size_t bit = t * (size_t)p->wt + (size_t)r;
            p->reused[bit / 8] |= (uint8_t)(1u << (bit % 8));
            p->st.bytes_reused += (uint64_t)vol * esize;
            p->st.shards_reused++;
            continue;
        }
        for (size_t ip = 0; ip < ntp; ip++) {
            const ptc_piece *to = &(*tp)[ip];
            ref_take_ctx c = {p, w, (uint32_t)t, to, r, h, esize};
            w->nwl = 0;
            PTC_TRY(ptc_grow((void **)&w->wl, &w->capwl, 1, sizeof(ptc_box)));
            w->wl[w->nwl++] = to->box;
            uint64_t before = p->nxf;
            /* 1. the same rank */
            if (r < p->ws && p->src_host[r] == h)
                for (size_t i = 0; i < nsp && w->nwl; i++)
                    PTC_TRY(ref_take(&c, &(*sp)[i], PTC_TRANSFER_LOCAL, r, UINT64_MAX));
            /* 2. another source rank of the host (lowest holder on h) */
            for (size_t g = 0; g < w->ngroups && w->nwl; g++) {
                int holder = -1;
                for (size_t i = 0; i < w->groups[g].nranks; i++) {
                    int s = w->groups[g].ranks[i];
                    if (p->src_host[s] == h && s != r) {
                        holder = s;
                        break;
                    }
                }
                if (holder < 0)
                    continue;
                for (size_t i = 0; i < w->gnpieces[g] && w->nwl; i++)
                    PTC_TRY(ref_take(&c, &w->gpieces[g][i], PTC_TRANSFER_HOST, holder, UINT64_MAX));
            }
            /* 3. fan-out from a target rank of the host that received it */
            for (size_t i = 0; i < w->nrecv[h] && w->nwl; i++) {
                ref_recv_entry e = w->recv[h][i];
                PTC_TRY(ref_take(&c, &e.at, PTC_TRANSFER_FANOUT, e.rank, e.xf));
            }
            /* 4. the network: least-loaded holder on another host */
            for (size_t g = 0; g < w->ngroups && w->nwl; g++) {
                for (size_t i = 0; i < w->gnpieces[g] && w->nwl; i++) {
                    const ptc_piece *from = &w->gpieces[g][i];
                    bool hit = false;
                    for (size_t k = 0; k < w->nwl && !hit; k++) {
                        ptc_box inter;
                        hit = ptc_box_intersect(&inter, &w->wl[k], &from->box);
                    }
                    if (!hit)
                        continue;
                    int best = -1;
                    for (size_t j = 0; j < w->groups[g].nranks; j++) {
                        int s = w->groups[g].ranks[j];
                        if (p->src_host[s] == h)
                            continue;
                        if (best < 0 || w->send_load[s] < w->send_load[best])
                            best = s;
                    }
                    if (best < 0)
                        continue;
                    PTC_TRY(ref_take(&c, from, PTC_TRANSFER_NETWORK, best, UINT64_MAX));
                }
            }
            if (w->nwl)
                return ptc_error_set(PTC_E_NOTFOUND,
                                     "tensor '%s': no source rank holds part of target rank "
                                     "%d's shard",
                                     ti->name, r);
            for (uint64_t x = before; x < p->nxf; x++) {
                uint64_t b = (uint64_t)ptc_box_volume(&p->xf[x].box) * esize;
                switch (p->xf[x].kind) {
                case PTC_TRANSFER_NETWORK:
                    p->st.bytes_network += b;
                    p->hs[h].bytes_in += b;
                    p->hs[p->src_host[p->xf[x].src_rank]].bytes_out += b;
                    break;
                case PTC_TRANSFER_HOST:
                    p->st.bytes_host_copy += b;
                    p->st.bytes_local_copy += b;
                    break;
                case PTC_TRANSFER_FANOUT:
                    p->st.bytes_fanout += b;
                    p->st.bytes_local_copy += b;
                    break;
                default:
                    p->st.bytes_local_copy += b;
                    break;
                }
            }
        }
    }
    return ref_lower_bound_tensor(p, t, w, esize);
}

static int ref_check_same_tensors(const ptc_layout *a, const ptc_layout *b)
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

static int ref_plan_create(ref_plan **out, const ptc_layout *src, const ptc_layout *dst,
                    const ptc_plan_options *opts)
{
    double t0 = ref_now_seconds();
    *out = NULL;
    if (!src || !dst)
        return ptc_error_set(PTC_E_INVAL, "plan needs two layouts");
    PTC_TRY(ref_check_same_tensors(src, dst));
    ptc_plan_options o = {0};
    if (opts)
        o = *opts;
    if (o.hosts < 0)
        return ptc_error_set(PTC_E_INVAL, "hosts must be >= 1 (got %d)", o.hosts);
    int rc = PTC_E_NOMEM;
    ref_plan *p = ptc_calloc(1, sizeof *p);
    if (!p)
        return PTC_E_NOMEM;
    p->src = src;
    p->dst = dst;
    p->no_reuse = o.no_reuse;
    p->ws = ptc_config_world(ptc_layout_config(src));
    p->wt = ptc_config_world(ptc_layout_config(dst));
    p->src_host = ptc_malloc(sizeof(int) * (size_t)p->ws);
    p->dst_host = ptc_malloc(sizeof(int) * (size_t)p->wt);
    size_t nt = ptc_layout_count(dst);
    p->reused = ptc_calloc(nt * (size_t)p->wt / 8 + 1, 1);
    if (!p->src_host || !p->dst_host || !p->reused)
        goto out_destroy;
    for (int r = 0; r < p->ws; r++) {
        p->src_host[r] = o.src_host ? o.src_host[r] : (o.hosts > 0 ? r / o.hosts : 0);
        if (p->src_host[r] < 0) {
            rc = ptc_error_set(PTC_E_INVAL, "source rank %d has a negative host", r);
            goto out_destroy;
        }
        if (p->src_host[r] >= p->nhosts)
            p->nhosts = p->src_host[r] + 1;
    }
    for (int r = 0; r < p->wt; r++) {
        p->dst_host[r] = o.dst_host ? o.dst_host[r] : (o.hosts > 0 ? r / o.hosts : 0);
        if (p->dst_host[r] < 0) {
            rc = ptc_error_set(PTC_E_INVAL, "target rank %d has a negative host", r);
            goto out_destroy;
        }
        if (p->dst_host[r] >= p->nhosts)
            p->nhosts = p->dst_host[r] + 1;
    }
    p->hs = ptc_calloc((size_t)p->nhosts, sizeof *p->hs);
    ref_plan_work w = {0};
    w.group_of = ptc_malloc(sizeof(int) * (size_t)p->ws);
    w.recv = ptc_calloc((size_t)p->nhosts, sizeof *w.recv);
    w.nrecv = ptc_calloc((size_t)p->nhosts, sizeof *w.nrecv);
    w.caprecv = ptc_calloc((size_t)p->nhosts, sizeof *w.caprecv);
    w.send_load = ptc_calloc((size_t)p->ws, sizeof *w.send_load);
    w.recv_load = ptc_calloc((size_t)p->wt, sizeof *w.recv_load);
    ptc_piece *tp = NULL, *sp = NULL;
    size_t captp = 0, capsp = 0;
    if (!p->hs || !w.group_of || !w.recv || !w.nrecv || !w.caprecv || !w.send_load ||
        !w.recv_load)
        goto out_free_work;
    for (size_t t = 0; t < nt; t++) {
        rc = ref_plan_tensor(p, t, &w, &tp, &captp, &sp, &capsp);
        ref_work_reset_tensor(&w, p->nhosts);
        if (rc != PTC_OK)
            goto out_free_work;
        p->st.tensors++;
    }
    for (int s = 0; s < p->ws; s++)
        if (w.send_load[s] > p->st.max_rank_send)
            p->st.max_rank_send = w.send_load[s];
    for (int r = 0; r < p->wt; r++)
        if (w.recv_load[r] > p->st.max_rank_recv)
            p->st.max_rank_recv = w.recv_load[r];
    p->st.transfers = p->nxf;
    p->st.hosts = p->nhosts;
    rc = PTC_OK;
out_free_work:
    ref_work_reset_tensor(&w, 0);
    for (int h = 0; w.recv && h < p->nhosts; h++)
        ptc_free(w.recv[h]);
    ptc_free(w.recv);
    ptc_free(w.nrecv);
    ptc_free(w.caprecv);
    ptc_free(w.send_load);
    ptc_free(w.recv_load);
    ptc_free(w.group_of);
    ptc_free(w.wl);
    ptc_free(w.tmp);
    ptc_free(tp);
    ptc_free(sp);
    if (rc != PTC_OK)
        goto out_destroy;
    p->st.plan_seconds = ref_now_seconds() - t0;
    *out = p;
    return PTC_OK;
out_destroy:
    if (rc == PTC_E_NOMEM)
        ptc_error_set(PTC_E_NOMEM, "out of memory while planning");
    ref_plan_destroy(p);
    return rc;
}

static void ref_plan_destroy(ref_plan *p)
{
    if (!p)
        return;
    ptc_free(p->src_host);
    ptc_free(p->dst_host);
    ptc_free(p->xf);
    ptc_free(p->reused);
    ptc_free(p->hs);
    ptc_free(p);
}


static inline void ref_plan_stats_get(const ref_plan *p, ptc_plan_stats *out) { *out = p->st; }

static inline int ref_plan_host_stats_get(const ref_plan *p, int host, ptc_plan_host_stats *out)
{
    if (host < 0 || host >= p->nhosts)
        return ptc_error_set(PTC_E_RANGE, "host %d out of range (%d hosts)", host, p->nhosts);
    *out = p->hs[host];
    return PTC_OK;
}

static inline const ptc_transfer *ref_plan_transfers(const ref_plan *p, size_t *n)
{
    *n = p->nxf;
    return p->xf;
}

static inline bool ref_plan_reused(const ref_plan *p, size_t tensor, int rank)
{
    if (tensor >= ptc_layout_count(p->dst) || rank < 0 || rank >= p->wt)
        return false;
    size_t bit = tensor * (size_t)p->wt + (size_t)rank;
    return (p->reused[bit / 8] >> (bit % 8)) & 1;
}

#endif
