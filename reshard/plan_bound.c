/* The network lower bound, computed independently of the transfers:
 * need(h) - have(h) per host by a coordinate-compressed grid over the
 * distinct shards the host holds. A host is described by the set of
 * distinct target shards its target ranks hold and distinct source shards
 * its source ranks hold; hosts with the same sets (the data-parallel
 * replicas of a stage, typically) share one grid, so a tensor costs
 * O(ranks holding it) plus one grid per distinct host content. */
#include <stdlib.h>
#include <string.h>

#include "base/util_internal.h"
#include "reshard/plan_internal.h"

typedef struct hk {
    int host;
    uint32_t tag; /* target group, or ng_target + source group */
} hk;

typedef struct memo {
    uint64_t hash;
    size_t t0, nt;          /* its tags in lb.pool */
    int64_t need, have, missing;
} memo;

typedef struct grid_box {
    ptc_box box;
    uint8_t bit; /* 1 need, 2 have */
} grid_box;

typedef struct lb {
    hk *e, *f;
    size_t cape, capf;
    uint32_t *stamp;        /* per tag: segment + 1 that saw it last */
    size_t capstamp;
    uint32_t *tags;
    size_t captags;
    memo *m;
    size_t nm, capm;
    uint32_t *pool;
    size_t npool, cappool;
    int64_t *tab;           /* open addressing over m, -1 empty */
    size_t captab, ntab;    /* allocated, in use (a power of two) */
    grid_box *gb;
    size_t capgb;
} lb;

void pl_bound_free(pl_work *w)
{
    lb *b = w->lb;
    if (!b)
        return;
    ptc_free(b->e);
    ptc_free(b->f);
    ptc_free(b->stamp);
    ptc_free(b->tags);
    ptc_free(b->m);
    ptc_free(b->pool);
    ptc_free(b->tab);
    ptc_free(b->gb);
    ptc_free(b);
    w->lb = NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_hk(const void *a, const void *b)
{
    const hk *x = a, *y = b;
    if (x->host != y->host)
        return x->host < y->host ? -1 : 1;
    return (x->tag > y->tag) - (x->tag < y->tag);
}

/* need/have/need-minus-have element counts of the union of the boxes. */
static int grid_count(const grid_box *gb, size_t n, int ndim, int64_t *need, int64_t *have,
                      int64_t *missing)
{
    *need = *have = *missing = 0;
    if (n == 0)
        return PTC_OK;
    int64_t *cuts[PTC_MAX_DIMS] = {0};
    size_t ncut[PTC_MAX_DIMS] = {0};
    int rc = PTC_E_NOMEM;
    size_t cells = 1;
    uint8_t *mask = NULL;
    for (int d = 0; d < ndim; d++) {
        cuts[d] = ptc_malloc(sizeof(int64_t) * 2 * n);
        if (!cuts[d])
            goto out_free;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            cuts[d][k++] = gb[i].box.lo[d];
            cuts[d][k++] = gb[i].box.hi[d];
        }
        qsort(cuts[d], k, sizeof(int64_t), cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < k; i++)
            if (u == 0 || cuts[d][i] != cuts[d][u - 1])
                cuts[d][u++] = cuts[d][i];
        ncut[d] = u;
        if (u < 2) {
            rc = PTC_OK; /* empty extent: no elements */
            goto out_free;
        }
        cells *= u - 1;
    }
    mask = ptc_calloc(cells, 1);
    if (!mask)
        goto out_free;
    for (size_t i = 0; i < n; i++) {
        size_t lo[PTC_MAX_DIMS], hi[PTC_MAX_DIMS];
        bool empty = false;
        for (int d = 0; d < ndim; d++) {
            int64_t *f = bsearch(&gb[i].box.lo[d], cuts[d], ncut[d], sizeof(int64_t), cmp_i64);
            int64_t *e = bsearch(&gb[i].box.hi[d], cuts[d], ncut[d], sizeof(int64_t), cmp_i64);
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

/* (host, tag) of every rank holding the tensor, sorted by host: target
 * ranks, then source ranks, each in rank order (so in host order when the
 * host maps are non-decreasing), merged. Groups without pieces are left
 * out: they add nothing. */
static int host_entries(const ptc_plan *p, pl_work *w, lb *b, size_t *n_out)
{
    const pl_side *d = &w->d, *s = &w->s;
    size_t nd = (size_t)d->nstg * (size_t)d->per, ns = (size_t)s->nstg * (size_t)s->per;
    PTC_TRY(ptc_grow((void **)&b->e, &b->cape, nd + ns + 1, sizeof *b->e));
    PTC_TRY(ptc_grow((void **)&b->f, &b->capf, nd + ns + 1, sizeof *b->f));
    size_t n = 0;
    for (int i = 0; i < d->nstg; i++)
        for (int q = 0; q < d->per; q++)
            if (d->g[pl_gq(d, q)].np)
                b->f[n++] = (hk){p->dst_host[d->stg[i] * d->per + q], (uint32_t)pl_gq(d, q)};
    size_t n1 = n;
    for (int i = 0; i < s->nstg; i++)
        for (int q = 0; q < s->per; q++)
            if (s->g[pl_gq(s, q)].np)
                b->f[n++] = (hk){p->src_host[s->stg[i] * s->per + q],
                                 (uint32_t)(d->ng + (size_t)pl_gq(s, q))};
    if (!p->src_mono || !p->dst_mono) {
        qsort(b->f, n, sizeof *b->f, cmp_hk);
        memcpy(b->e, b->f, sizeof *b->e * n);
    } else {
        size_t i = 0, j = n1, k = 0;
        while (i < n1 || j < n)
            b->e[k++] = (j >= n || (i < n1 && b->f[i].host <= b->f[j].host)) ? b->f[i++]
                                                                              : b->f[j++];
    }
    *n_out = n;
    return PTC_OK;
}

static uint64_t hash_tags(const uint32_t *t, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= t[i];
        h *= 1099511628211ull;
    }
    return h ^ n;
}

/* The memo entry of the host holding tags t[0..n) (sorted), computing its
 * grid on first sight. */
static int host_figures(pl_work *w, lb *b, int ndim, const uint32_t *t, size_t n, const memo **out)
{
    uint64_t hv = hash_tags(t, n);
    size_t mask = b->ntab - 1, slot = (size_t)hv & mask;
    for (; b->tab[slot] >= 0; slot = (slot + 1) & mask) {
        const memo *m = &b->m[b->tab[slot]];
        if (m->hash == hv && m->nt == n && !memcmp(b->pool + m->t0, t, sizeof *t * n)) {
            *out = m;
            return PTC_OK;
        }
    }
    size_t ngb = 0;
    for (size_t i = 0; i < n; i++) {
        bool tgt = t[i] < w->d.ng;
        const pl_side *sd = tgt ? &w->d : &w->s;
        const pl_group *g = &sd->g[tgt ? t[i] : t[i] - w->d.ng];
        PTC_TRY(ptc_grow((void **)&b->gb, &b->capgb, ngb + g->np + 1, sizeof *b->gb));
        for (uint32_t k = 0; k < g->np; k++)
            b->gb[ngb++] = (grid_box){sd->pc[g->p0 + k].box, tgt ? 1 : 2};
    }
    PTC_TRY(ptc_grow((void **)&b->m, &b->capm, b->nm + 1, sizeof *b->m));
    PTC_TRY(ptc_grow((void **)&b->pool, &b->cappool, b->npool + n + 1, sizeof *b->pool));
    memo *m = &b->m[b->nm];
    m->hash = hv;
    m->t0 = b->npool;
    m->nt = n;
    memcpy(b->pool + b->npool, t, sizeof *t * n);
    b->npool += n;
    PTC_TRY(grid_count(b->gb, ngb, ndim, &m->need, &m->have, &m->missing));
    b->tab[slot] = (int64_t)b->nm++;
    *out = m;
    return PTC_OK;
}

int pl_lower_bound(ptc_plan *p, pl_work *w, size_t t)
{
    if (!w->lb && !(w->lb = ptc_calloc(1, sizeof(lb))))
        return PTC_E_NOMEM;
    lb *b = w->lb;
    const ptc_tensor_info *ti = ptc_layout_tensor(p->dst, t);
    size_t es = ptc_dtype_size(ti->dtype), n = 0, ntag = w->d.ng + w->s.ng;
    PTC_TRY(host_entries(p, w, b, &n));
    PTC_TRY(ptc_grow((void **)&b->stamp, &b->capstamp, ntag + 1, sizeof *b->stamp));
    PTC_TRY(ptc_grow((void **)&b->tags, &b->captags, ntag + 1, sizeof *b->tags));
    memset(b->stamp, 0, sizeof *b->stamp * (ntag + 1));
    size_t tab = 16;
    while (tab < 2 * n + 2)
        tab *= 2;
    PTC_TRY(ptc_grow((void **)&b->tab, &b->captab, tab, sizeof *b->tab));
    b->ntab = tab;
    for (size_t i = 0; i < tab; i++)
        b->tab[i] = -1;
    b->nm = 0;
    b->npool = 0;
    uint32_t seg = 0;
    for (size_t i = 0; i < n;) {
        int h = b->e[i].host;
        size_t nt = 0;
        seg++;
        for (; i < n && b->e[i].host == h; i++) {
            uint32_t tag = b->e[i].tag;
            if (b->stamp[tag] != seg) {
                b->stamp[tag] = seg;
                b->tags[nt++] = tag;
            }
        }
        qsort(b->tags, nt, sizeof *b->tags, cmp_u32);
        const memo *m;
        PTC_TRY(host_figures(w, b, ti->ndim, b->tags, nt, &m));
        p->hs[h].bytes_need += (uint64_t)m->need * es;
        p->hs[h].bytes_have += (uint64_t)m->have * es;
        p->st.bytes_network_lower_bound += (uint64_t)m->missing * es;
    }
    return PTC_OK;
}
