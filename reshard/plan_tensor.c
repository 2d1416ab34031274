/* Planning one tensor (docs/reshard.md, "How the planner scales").
 *
 * The rules are those of the all-pairs planner it replaces, applied in the
 * same order, so the transfers and figures are the same; what changes is
 * how each step finds its candidates:
 *  - the distinct shards (groups) of each layout come from one stage's
 *    positions (the tp positions only, unless zero-sharded): a rank's
 *    group is gq[rank % (dp*tp)] on the stages that hold the tensor, so
 *    data-parallel replicas are never compared rank by rank;
 *  - target ranks are visited only on the stages holding the tensor, and
 *    a target shard's pieces are computed once per group;
 *  - the source pieces overlapping a target piece come from an index
 *    sorted along one dimension (once per group and piece, not per rank);
 *  - the lowest holder of a group on a host is a binary search in the
 *    group's increasing holder list (host maps non-decreasing in rank);
 *  - the least-loaded holder is the top of a heap per group, exact
 *    because within one tensor a rank belongs to one group only.
 * So a tensor costs O(ranks holding it + pieces x candidates), not
 * O(ranks x hosts). */
#include <stdlib.h>
#include <string.h>

#include "base/util_internal.h"
#include "reshard/plan_internal.h"

/* Whether two boxes of the same tensor share an element (what
 * ptc_box_intersect answers, without writing the intersection). */
static inline bool meets(const ptc_box *a, const ptc_box *b)
{
    for (int d = 0; d < a->ndim; d++) {
        int64_t lo = a->lo[d] > b->lo[d] ? a->lo[d] : b->lo[d];
        int64_t hi = a->hi[d] < b->hi[d] ? a->hi[d] : b->hi[d];
        if (lo >= hi)
            return false;
    }
    return true;
}

/* ---- boxes, shards, what a plan keeps ------------------------------------- */

size_t ptc_box_subtract(ptc_box *out, const ptc_box *b, const ptc_box *i)
{
    size_t n = 0;
    ptc_box cur = *b;
    for (int d = 0; d < b->ndim; d++) {
        if (cur.lo[d] < i->lo[d]) {
            out[n] = cur;
            out[n].hi[d] = i->lo[d];
            n++;
        }
        if (i->hi[d] < cur.hi[d]) {
            out[n] = cur;
            out[n].lo[d] = i->hi[d];
            n++;
        }
        cur.lo[d] = i->lo[d];
        cur.hi[d] = i->hi[d];
    }
    return n;
}

bool ptc_shard_same(const ptc_shard *a, const ptc_piece *pa, const ptc_shard *b,
                    const ptc_piece *pb)
{
    if (a->present != b->present || a->ndim != b->ndim || a->npieces != b->npieces)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    for (size_t i = 0; i < a->npieces; i++) {
        if (!ptc_box_equal(&pa[i].box, &pb[i].box) || pa[i].local_offset != pb[i].local_offset)
            return false;
        for (int d = 0; d < pa[i].box.ndim; d++)
            if (pa[i].box.hi[d] - pa[i].box.lo[d] > 1 &&
                pa[i].local_stride[d] != pb[i].local_stride[d])
                return false;
    }
    return true;
}

bool pl_keep(const ptc_plan *p, int kind, int src_rank, int dst_rank)
{
    if (p->keep_all)
        return true;
    if (!p->per_proc)
        return false;
    int from = kind == PTC_TRANSFER_FANOUT ? p->dst_proc[src_rank] : p->src_proc[src_rank];
    return from == p->proc || p->dst_proc[dst_rank] == p->proc;
}

/* ---- one layout's groups --------------------------------------------------- */

void pl_side_free(pl_side *sd)
{
    ptc_free(sd->stg);
    ptc_free(sd->onstg);
    ptc_free(sd->gq);
    ptc_free(sd->g);
    ptc_free(sd->pc);
    ptc_free(sd->pgrp);
    ptc_free(sd->hold);
    ptc_free(sd->heap);
    ptc_free(sd->idx);
    memset(sd, 0, sizeof *sd);
}

typedef struct idx_key {
    int64_t lo;
    uint32_t id;
} idx_key;

static int cmp_key(const void *a, const void *b)
{
    const idx_key *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The index of the source pieces: sorted along the dimension where their
 * starts differ most. */
static int build_index(pl_side *sd, int ndim)
{
    sd->kdim = -1;
    sd->maxlen = 0;
    if (sd->npc == 0)
        return PTC_OK;
    if (ndim > 0) {
        int64_t *v = ptc_malloc(sizeof *v * sd->npc);
        if (!v)
            return PTC_E_NOMEM;
        size_t best = 0;
        for (int d = 0; d < ndim; d++) {
            for (size_t i = 0; i < sd->npc; i++)
                v[i] = sd->pc[i].box.lo[d];
            qsort(v, sd->npc, sizeof *v, cmp_i64);
            size_t distinct = 1;
            for (size_t i = 1; i < sd->npc; i++)
                distinct += v[i] != v[i - 1];
            if (sd->kdim < 0 || distinct > best) {
                best = distinct;
                sd->kdim = d;
            }
        }
        ptc_free(v);
    }
    for (size_t i = 0; i < sd->npc; i++) {
        sd->idx[i] = (uint32_t)i;
        if (sd->kdim >= 0)
            sd->maxlen = PTC_MAX(sd->maxlen,
                                 sd->pc[i].box.hi[sd->kdim] - sd->pc[i].box.lo[sd->kdim]);
    }
    if (sd->kdim < 0)
        return PTC_OK;
    idx_key *k = ptc_malloc(sizeof *k * sd->npc);
    if (!k)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < sd->npc; i++)
        k[i] = (idx_key){sd->pc[i].box.lo[sd->kdim], (uint32_t)i};
    qsort(k, sd->npc, sizeof *k, cmp_key);
    for (size_t i = 0; i < sd->npc; i++)
        sd->idx[i] = k[i].id;
    ptc_free(k);
    return PTC_OK;
}

/* Holders of every group, increasing: ranks of the holding stages, in rank
 * order, bucketed by group. */
static int load_holders(pl_side *sd)
{
    size_t n = (size_t)sd->nstg * (size_t)sd->per;
    PTC_TRY(ptc_grow((void **)&sd->hold, &sd->caphold, n + 1, sizeof(int)));
    PTC_TRY(ptc_grow((void **)&sd->heap, &sd->capheap, n + 1, sizeof(int)));
    for (size_t g = 0; g < sd->ng; g++)
        sd->g[g].nh = 0;
    for (int q = 0; q < sd->per; q++)
        sd->g[pl_gq(sd, q)].nh += (uint32_t)sd->nstg;
    uint32_t at = 0;
    for (size_t g = 0; g < sd->ng; g++) {
        sd->g[g].h0 = at;
        at += sd->g[g].nh;
        sd->g[g].nh = 0;
    }
    for (int i = 0; i < sd->nstg; i++)
        for (int q = 0; q < sd->per; q++) {
            pl_group *g = &sd->g[pl_gq(sd, q)];
            sd->hold[g->h0 + g->nh++] = sd->stg[i] * sd->per + q;
        }
    return PTC_OK;
}

int pl_side_load(pl_side *sd, size_t t, unsigned what)
{
    sd->ng = 0;
    sd->npc = 0;
    sd->nstg = 0;
    for (int s = 0; s < sd->P; s++) {
        sd->onstg[s] = ptc_layout_on_stage(sd->l, t, s);
        if (sd->onstg[s])
            sd->stg[sd->nstg++] = s;
    }
    if (!sd->nstg)
        return PTC_OK;
    int base = sd->stg[0] * sd->per;
    ptc_shard sh;
    PTC_TRY(ptc_layout_shard(sd->l, t, base, &sh));
    /* ordinary shards do not vary over dp: the tp positions decide (an
     * explicit layout has one stage and tp = its world: every rank is a
     * position of its own) */
    int nq = sh.flat ? sd->per : sd->T;
    int absent = -1; /* the group of the positions that lack the tensor */
    for (int q = 0; q < nq; q++) {
        int r = base + q;
        if (q)
            PTC_TRY(ptc_layout_shard(sd->l, t, r, &sh));
        if (!sh.present && absent >= 0) {
            /* only an explicit layout lacks a tensor on a stage holding it:
             * such ranks share one group without pieces, never a provider */
            sd->gq[q] = absent;
            continue;
        }
        if (sh.present && sh.owner != r) {
            /* the owner is the lowest identical rank, on the same stage */
            sd->gq[q] = sd->gq[sh.owner - base];
            continue;
        }
        PTC_TRY(ptc_grow((void **)&sd->g, &sd->capg, sd->ng + 1, sizeof *sd->g));
        size_t need = sd->npc + sh.npieces + 1;
        PTC_TRY(ptc_grow((void **)&sd->pc, &sd->cappc, need, sizeof *sd->pc));
        PTC_TRY(ptc_grow((void **)&sd->pgrp, &sd->cappgrp, need, sizeof *sd->pgrp));
        pl_group *g = &sd->g[sd->ng];
        memset(g, 0, sizeof *g);
        g->owner = r;
        g->sh = sh;
        if (!sh.present)
            absent = (int)sd->ng;
        g->vol = 1;
        for (int d = 0; d < sh.ndim; d++)
            g->vol *= sh.shape[d];
        g->p0 = (uint32_t)sd->npc;
        size_t np = 0;
        PTC_TRY(ptc_layout_pieces(sd->l, t, r, sd->pc + sd->npc, sd->cappc - sd->npc, &np));
        g->np = (uint32_t)np;
        for (size_t i = 0; i < np; i++)
            sd->pgrp[sd->npc + i] = (uint32_t)sd->ng;
        sd->npc += np;
        sd->gq[q] = (int)sd->ng++;
    }
    sd->nq = nq;
    sd->implicit = !(what & PL_HOLDERS);
    if (what & PL_HOLDERS)
        PTC_TRY(load_holders(sd));
    if (!(what & PL_INDEX))
        return PTC_OK;
    void *a = ptc_realloc(sd->idx, sizeof *sd->idx * (sd->npc + 1));
    if (!a)
        return PTC_E_NOMEM;
    sd->idx = a;
    return build_index(sd, ptc_layout_tensor(sd->l, t)->ndim);
}

/* Piece ids of side @p s overlapping @p b, increasing (that is, in group
 * order, then piece order), appended to *out. */
static int query_side(const pl_side *s, const ptc_box *b, uint32_t **out, size_t *n,
                      size_t *cap)
{
    size_t lo = 0, hi = s->npc;
    if (s->kdim >= 0) {
        /* a piece overlapping b starts after b.lo - maxlen and before b.hi */
        int64_t from = b->lo[s->kdim] - s->maxlen;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (s->pc[s->idx[mid]].box.lo[s->kdim] <= from)
                lo = mid + 1;
            else
                hi = mid;
        }
        hi = s->npc;
    }
    size_t n0 = *n;
    for (size_t i = lo; i < hi; i++) {
        uint32_t id = s->idx[i];
        if (s->kdim >= 0 && s->pc[id].box.lo[s->kdim] >= b->hi[s->kdim])
            break;
        if (!meets(b, &s->pc[id].box))
            continue;
        PTC_TRY(ptc_grow((void **)out, cap, *n + 1, sizeof **out));
        (*out)[(*n)++] = id;
    }
    if (*n > n0)
        qsort(*out + n0, *n - n0, sizeof **out, cmp_u32);
    return PTC_OK;
}

static int query(pl_work *w, const ptc_box *b)
{
    return query_side(&w->s, b, &w->cand, &w->ncand, &w->capcand);
}

/* Candidates of every piece of target group @p g (once per tensor). */
static int candidates(pl_work *w, pl_group *g)
{
    if (g->cand_done)
        return PTC_OK;
    for (uint32_t j = 0; j < g->np; j++) {
        size_t id = g->p0 + j;
        w->cand_off[2 * id] = (uint32_t)w->ncand;
        PTC_TRY(query(w, &w->d.pc[id].box));
        w->cand_off[2 * id + 1] = (uint32_t)w->ncand;
    }
    g->cand_done = true;
    return PTC_OK;
}

/* ---- the least-loaded holder: a heap per group ------------------------------- */

static bool lighter(const uint64_t *load, int a, int b)
{
    return load[a] < load[b] || (load[a] == load[b] && a < b);
}

static void sift_down(int *h, size_t n, size_t i, const uint64_t *load)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && lighter(load, h[l], h[m]))
            m = l;
        if (l + 1 < n && lighter(load, h[l + 1], h[m]))
            m = l + 1;
        if (m == i)
            return;
        int x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

/* Position in the group's heap of the least-loaded holder not on host
 * @p h (ties: lowest rank), or -1. */
static long lightest(const ptc_plan *p, pl_work *w, pl_group *g, int h)
{
    int *hp = w->s.heap + g->h0;
    size_t n = g->nh;
    if (!g->heap_done) {
        memcpy(hp, w->s.hold + g->h0, sizeof(int) * n);
        for (size_t i = n / 2; i-- > 0;)
            sift_down(hp, n, i, w->send_load);
        g->heap_done = true;
    }
    if (n && p->src_host[hp[0]] != h)
        return 0;
    /* a holder on h would have provided it as a HOST copy already; kept
     * for completeness */
    long best = -1;
    for (size_t i = 0; i < n; i++)
        if (p->src_host[hp[i]] != h && (best < 0 || lighter(w->send_load, hp[i], hp[best])))
            best = (long)i;
    return best;
}

/* ---- transfers -------------------------------------------------------------------- */

typedef struct take_ctx {
    ptc_plan *p;
    pl_work *w;
    uint32_t t;
    const ptc_piece *to;
    int dst_rank;
    int host;
    size_t esize;
    bool count;    /* the figures count it (per-process plans: received here) */
} take_ctx;

/* Count one transfer, keep it if the plan keeps it. *all and *kept
 * receive its index among all transfers and among the kept ones. */
static int emit(take_ctx *c, int kind, int src_rank, uint64_t via, const ptc_box *box,
                const ptc_piece *from, uint64_t *all, uint64_t *kept)
{
    ptc_plan *p = c->p;
    uint64_t b = (uint64_t)ptc_box_volume(box) * c->esize;
    if (kind == PTC_TRANSFER_NETWORK) {
        c->w->send_load[src_rank] += b;
        c->w->recv_load[c->dst_rank] += b;
    }
    switch (c->count ? kind : -1) {
    case -1:
        break;
    case PTC_TRANSFER_NETWORK:
        p->st.bytes_network += b;
        if (!p->per_proc) {
            p->hs[c->host].bytes_in += b;
            p->hs[p->src_host[src_rank]].bytes_out += b;
        }
        break;
    case PTC_TRANSFER_HOST:
        p->st.bytes_host_copy += b;
        p->st.bytes_local_copy += b;
        if (!p->per_proc)
            p->hs[c->host].bytes_copy += b;
        break;
    case PTC_TRANSFER_FANOUT:
        p->st.bytes_fanout += b;
        p->st.bytes_local_copy += b;
        if (!p->per_proc)
            p->hs[c->host].bytes_copy += b;
        break;
    default:
        p->st.bytes_local_copy += b;
        break;
    }
    *all = c->w->nall++;
    *kept = UINT64_MAX;
    if (!pl_keep(p, kind, src_rank, c->dst_rank))
        return PTC_OK;
    PTC_TRY(ptc_grow((void **)&p->xf, &p->capxf, p->nxf + 1, sizeof *p->xf));
    ptc_transfer *x = &p->xf[p->nxf];
    memset(x, 0, sizeof *x);
    x->tensor = c->t;
    x->kind = kind;
    x->src_rank = src_rank;
    x->dst_rank = c->dst_rank;
    x->via = via;
    x->box = *box;
    x->src_offset = ptc_piece_local_index(from, box->lo);
    x->dst_offset = ptc_piece_local_index(c->to, box->lo);
    for (int d = 0; d < box->ndim; d++) {
        x->src_stride[d] = from->local_stride[d];
        x->dst_stride[d] = c->to->local_stride[d];
    }
    *kept = p->nxf++;
    return PTC_OK;
}

/* Remember a box received over the network into host c->host. */
static int add_recv(take_ctx *c, const ptc_box *inter, uint64_t all, uint64_t kept)
{
    pl_work *w = c->w;
    int h = c->host;
    PTC_TRY(ptc_grow((void **)&w->rv, &w->caprv, w->nrv + 1, sizeof *w->rv));
    pl_recv *e = &w->rv[w->nrv];
    ptc_piece_restrict(&e->at, c->to, inter);
    e->rank = c->dst_rank;
    e->xf = all;
    e->kept = kept;
    e->next = -1;
    if (w->rv_head[h] < 0) {
        PTC_TRY(ptc_grow((void **)&w->touched, &w->captouched, w->ntouched + 1, sizeof(int)));
        w->touched[w->ntouched++] = h;
        w->rv_head[h] = (int64_t)w->nrv;
    } else {
        w->rv[w->rv_tail[h]].next = (int64_t)w->nrv;
    }
    w->rv_tail[h] = (int64_t)w->nrv;
    w->nrv++;
    return PTC_OK;
}

static bool wl_hits(const pl_work *w, const ptc_box *b)
{
    for (size_t k = 0; k < w->nwl; k++)
        if (meets(&w->wl[k], b))
            return true;
    return false;
}

/* Provide what @p from holds of the work list: one transfer per overlap;
 * the rest stays in the list, in order. */
static int take(take_ctx *c, const ptc_piece *from, int kind, int src_rank, uint64_t via)
{
    pl_work *w = c->w;
    if (!wl_hits(w, &from->box))
        return PTC_OK;
    size_t nout = 0;
    for (size_t k = 0; k < w->nwl; k++) {
        ptc_box inter;
        if (!meets(&w->wl[k], &from->box) || !ptc_box_intersect(&inter, &w->wl[k], &from->box)) {
            PTC_TRY(ptc_grow((void **)&w->tmp, &w->captmp, nout + 1, sizeof(ptc_box)));
            w->tmp[nout++] = w->wl[k];
            continue;
        }
        uint64_t all, kept;
        PTC_TRY(emit(c, kind, src_rank, via, &inter, from, &all, &kept));
        if (kind == PTC_TRANSFER_NETWORK)
            PTC_TRY(add_recv(c, &inter, all, kept));
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

/* The second lowest holder of group @p g, or -1 (holders not listed): the
 * next position of the owner's stage in the same group, else the owner's
 * position on the next stage holding the tensor. */
static int next_holder(const pl_side *s, const pl_group *g)
{
    int base = s->stg[0] * s->per, q0 = g->owner - base, gi = pl_gq(s, q0);
    for (int q = q0 + 1; q < s->per; q++)
        if (pl_gq(s, q) == gi)
            return base + q;
    return s->nstg > 1 ? s->stg[1] * s->per + q0 : -1;
}

/* Lowest holder of group @p g on host @p h other than rank @p r, or -1. */
static int host_holder(const ptc_plan *p, const pl_side *s, const pl_group *g, int h, int r)
{
    if (s->implicit) /* one host holds every rank: the owner, or the next holder */
        return g->owner != r ? g->owner : next_holder(s, g);
    const int *hd = s->hold + g->h0;
    size_t n = g->nh, i = 0;
    if (p->src_mono) {
        int lo = p->src_first[h];
        size_t a = 0, b = n;
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if (hd[mid] < lo)
                a = mid + 1;
            else
                b = mid;
        }
        for (i = a; i < n && p->src_host[hd[i]] == h; i++)
            if (hd[i] != r)
                return hd[i];
        return -1;
    }
    for (; i < n; i++)
        if (p->src_host[hd[i]] == h && hd[i] != r)
            return hd[i];
    return -1;
}

/* ---- one target rank ----------------------------------------------------------- */

/* Group of source rank @p r's shard of the tensor, or -1. */
static int src_group(const ptc_plan *p, const pl_side *s, int r)
{
    if (r >= p->ws)
        return -1;
    int st = r / s->per;
    return s->onstg[st] ? pl_gq(s, r % s->per) : -1;
}

/* Fill target piece @p to of rank r (group tg), the reference's four steps. */
static int plan_piece(take_ctx *c, size_t id, int sg, bool local)
{
    ptc_plan *p = c->p;
    pl_work *w = c->w;
    pl_side *s = &w->s;
    int r = c->dst_rank, h = c->host;
    w->nwl = 0;
    PTC_TRY(ptc_grow((void **)&w->wl, &w->capwl, 1, sizeof(ptc_box)));
    w->wl[w->nwl++] = c->to->box;
    const uint32_t *cb = w->cand + w->cand_off[2 * id], *ce = w->cand + w->cand_off[2 * id + 1];
    /* 1. the same rank */
    if (local && sg >= 0) {
        const pl_group *g = &s->g[sg];
        for (uint32_t i = 0; i < g->np && w->nwl; i++)
            PTC_TRY(take(c, &s->pc[g->p0 + i], PTC_TRANSFER_LOCAL, r, UINT64_MAX));
    }
    /* 2. another source rank of the host (lowest holder on h) */
    if (p->src_count[h] > 0)
        for (const uint32_t *k = cb; k < ce && w->nwl;) {
            uint32_t gi = s->pgrp[*k];
            const uint32_t *e = k;
            bool hit = false;
            for (; e < ce && s->pgrp[*e] == gi; e++)
                hit = hit || wl_hits(w, &s->pc[*e].box);
            int holder = hit ? host_holder(p, s, &s->g[gi], h, r) : -1;
            for (; holder >= 0 && k < e && w->nwl; k++)
                PTC_TRY(take(c, &s->pc[*k], PTC_TRANSFER_HOST, holder, UINT64_MAX));
            k = e;
        }
    /* 3. fan-out from a target rank of the host that received it */
    for (int64_t e = w->rv_head[h]; e >= 0 && w->nwl; e = w->rv[e].next) {
        pl_recv rv = w->rv[e]; /* take() may move the array */
        PTC_TRY(take(c, &rv.at, PTC_TRANSFER_FANOUT, rv.rank, rv.kept));
    }
    /* 4. the network: least-loaded holder on another host */
    for (const uint32_t *k = cb; k < ce && w->nwl; k++) {
        const ptc_piece *from = &s->pc[*k];
        if (!wl_hits(w, &from->box))
            continue;
        pl_group *g = &s->g[s->pgrp[*k]];
        long at = lightest(p, w, g, h);
        if (at < 0)
            continue;
        int *hp = s->heap + g->h0;
        PTC_TRY(take(c, from, PTC_TRANSFER_NETWORK, hp[at], UINT64_MAX));
        sift_down(hp, g->nh, (size_t)at, w->send_load);
    }
    if (w->nwl)
        return ptc_error_set(PTC_E_NOTFOUND,
                             "tensor '%s': no source rank holds part of target rank %d's shard",
                             ptc_layout_tensor(p->dst, c->t)->name, r);
    return PTC_OK;
}

static int keep_reused(ptc_plan *p, size_t t, int r)
{
    if (!pl_keep(p, PTC_TRANSFER_LOCAL, r, r))
        return PTC_OK;
    PTC_TRY(ptc_grow((void **)&p->reused, &p->capreused, p->nreused + 1, sizeof *p->reused));
    p->reused[p->nreused++] = (uint64_t)t * (uint64_t)p->wt + (uint64_t)r;
    return PTC_OK;
}

static int plan_rank(ptc_plan *p, pl_work *w, size_t t, size_t es, int r, pl_group *tg)
{
    if (tg->np == 0)
        return PTC_OK;
    pl_side *s = &w->s;
    uint64_t bytes = (uint64_t)tg->vol * es;
    bool count = !p->per_proc || p->dst_proc[r] == p->proc;
    if (count) {
        p->st.shards++;
        p->st.bytes_total += bytes;
    }
    int h = p->dst_host[r];
    int sg = src_group(p, s, r);
    bool local = r < p->ws && p->src_host[r] == h;
    if (!p->no_reuse && local && sg >= 0 &&
        ptc_shard_same(&tg->sh, w->d.pc + tg->p0, &s->g[sg].sh, s->pc + s->g[sg].p0)) {
        if (count) {
            p->st.bytes_reused += bytes;
            p->st.shards_reused++;
        }
        return keep_reused(p, t, r);
    }
    PTC_TRY(candidates(w, tg));
    for (uint32_t j = 0; j < tg->np; j++) {
        size_t id = tg->p0 + j;
        take_ctx c = {p, w, (uint32_t)t, &w->d.pc[id], r, h, es, count};
        PTC_TRY(plan_piece(&c, id, sg, local));
    }
    return PTC_OK;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int add_rank(pl_work *w, int r)
{
    PTC_TRY(ptc_grow((void **)&w->rk, &w->caprk, w->nrk + 1, sizeof *w->rk));
    w->rk[w->nrk++] = r;
    return PTC_OK;
}

/* The target ranks that hold the tensor in target group @p c. */
static int add_group_ranks(pl_work *w, int c)
{
    const pl_side *d = &w->d;
    bool flat = d->g[c].sh.flat;
    for (int i = 0; i < d->nstg; i++) {
        int base = d->stg[i] * d->per;
        if (flat) {
            for (int q = 0; q < d->per; q++)
                if (pl_gq(d, q) == c)
                    PTC_TRY(add_rank(w, base + q));
            continue;
        }
        for (int dp = 0; dp < d->D; dp++)
            for (int tp = 0; tp < d->T; tp++)
                if (d->gq[tp] == c)
                    PTC_TRY(add_rank(w, base + dp * d->T + tp));
    }
    return PTC_OK;
}

/* Target ranks that source group @p g's owner provides HOST copies to
 * (on one host the owner is everyone's lowest holder but its own): those
 * whose shard overlaps the group's. */
static int add_receivers(pl_work *w, const pl_group *g)
{
    size_t n0 = w->nq;
    for (uint32_t i = 0; i < g->np; i++)
        PTC_TRY(query_side(&w->d, &w->s.pc[g->p0 + i].box, &w->qbuf, &w->nq, &w->capqbuf));
    int last = -1;
    for (size_t i = n0; i < w->nq; i++) {
        int c = (int)w->d.pgrp[w->qbuf[i]];
        if (c != last) /* piece ids are sorted per query; groups repeat rarely */
            PTC_TRY(add_group_ranks(w, c));
        last = c;
    }
    w->nq = n0;
    return PTC_OK;
}

/* A per-process plan on one host: every target rank's transfers depend on
 * that rank alone, so only the ranks the process receives for or provides
 * to are planned: its own target ranks, its source ranks (LOCAL copies),
 * and the receivers of the groups its source ranks own (HOST copies: the
 * owner is the lowest holder of every other rank). */
static int plan_own(ptc_plan *p, pl_work *w, size_t t, size_t es)
{
    pl_side *s = &w->s, *d = &w->d;
    w->nrk = 0;
    w->nq = 0;
    for (size_t i = 0; i < w->n_own_dst; i++) {
        int r = w->own_dst[i];
        if (d->onstg[r / d->per])
            PTC_TRY(add_rank(w, r));
    }
    for (size_t i = 0; i < w->n_own_src; i++) {
        int r = w->own_src[i];
        if (r < p->wt && d->onstg[r / d->per])
            PTC_TRY(add_rank(w, r));
        if (!s->onstg[r / s->per])
            continue;
        const pl_group *g = &s->g[pl_gq(s, r % s->per)];
        if (g->owner == r && g->np)
            PTC_TRY(add_receivers(w, g));
    }
    if (w->nrk) /* rk is NULL until a rank is added */
        qsort(w->rk, w->nrk, sizeof *w->rk, cmp_int);
    for (size_t i = 0; i < w->nrk; i++) {
        int r = w->rk[i];
        if (i && r == w->rk[i - 1])
            continue;
        PTC_TRY(plan_rank(p, w, t, es, r, &d->g[pl_gq(d, r % d->per)]));
    }
    return PTC_OK;
}

int pl_plan_tensor(ptc_plan *p, pl_work *w, size_t t)
{
    size_t es = ptc_dtype_size(ptc_layout_tensor(p->dst, t)->dtype);
    pl_side *d = &w->d;
    w->ncand = 0;
    w->nrv = 0;
    for (size_t i = 0; i < w->ntouched; i++)
        w->rv_head[w->touched[i]] = -1;
    w->ntouched = 0;
    PTC_TRY(ptc_grow((void **)&w->cand_off, &w->capcand_off, 2 * d->npc + 2, sizeof(uint32_t)));
    if (w->one_host_proc)
        return plan_own(p, w, t, es);
    for (int i = 0; i < d->nstg; i++) {
        int base = d->stg[i] * d->per;
        for (int q = 0; q < d->per; q++)
            PTC_TRY(plan_rank(p, w, t, es, base + q, &d->g[pl_gq(d, q)]));
    }
    return p->per_proc ? PTC_OK : pl_lower_bound(p, w, t);
}
