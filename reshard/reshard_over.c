/* The in-memory executor over a transport (ptc_reshard_owned_over): the
 * processes of any ptc_transport (MPI, torch.distributed) hold the ranks an
 * owner map names; per phase each process packs what it provides to each
 * peer into one buffer in plan order, the transport's exchange carries one
 * message per pair of processes that have bytes for each other, and the
 * receiver unpacks in the same order. Phase 0: reused shards (whole, where
 * source and target rank sit on different processes) and the transfers from
 * source buffers; phase 1: the fan-outs from target buffers filled in
 * phase 0. Copies within a process need no message. */
#include <string.h>

#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

typedef struct ov {
    const ptc_plan *p;
    const ptc_transport *t;
    const int *so, *dso; /* process of each source / target rank */
    const void *const *const *sb;
    void *const *const *db;
    int ws, wt;
} ov;

static size_t es_of(const ov *o, size_t t)
{
    return ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(o->p), t)->dtype);
}

static size_t xbytes(const ov *o, const ptc_transfer *x)
{
    return (size_t)ptc_box_volume(&x->box) * es_of(o, x->tensor);
}

/* Bytes of target rank r's local tensor t. */
static size_t shard_bytes(const ov *o, size_t t, int r)
{
    ptc_shard sh;
    if (ptc_layout_shard(ptc_plan_target(o->p), t, r, &sh) < 0)
        return 0;
    int64_t v = 1;
    for (int d = 0; d < sh.ndim; d++)
        v *= sh.shape[d];
    return (size_t)v * es_of(o, t);
}

/* One item of a phase: a reused shard (x NULL; tensor t, rank r) or a
 * transfer. Its provider and receiver processes, bytes and source pointer. */
typedef struct item {
    const ptc_transfer *x;
    size_t t;
    int r;
} item;

static void item_ends(const ov *o, const item *it, bool fanout, int *from, int *to)
{
    if (!it->x) {
        *from = o->so[it->r];
        *to = o->dso[it->r];
    } else {
        *from = fanout ? o->dso[it->x->src_rank] : o->so[it->x->src_rank];
        *to = o->dso[it->x->dst_rank];
    }
}

static size_t item_bytes(const ov *o, const item *it)
{
    return it->x ? xbytes(o, it->x) : shard_bytes(o, it->t, it->r);
}

/* Copy item @p it from its provider's buffer: into @p packed (row-major)
 * or, with @p packed NULL, straight into its target buffer. */
static int item_out(const ov *o, const item *it, bool fanout, uint8_t *packed)
{
    if (!it->x) {
        size_t n = shard_bytes(o, it->t, it->r);
        const void *from = o->sb[it->r][it->t];
        void *to = packed ? (void *)packed : o->db[it->r][it->t];
        if (n && from != to)
            memcpy(to, from, n);
        return PTC_OK;
    }
    const ptc_transfer *x = it->x;
    const uint8_t *from = fanout ? o->db[x->src_rank][x->tensor] : o->sb[x->src_rank][x->tensor];
    uint8_t *tmp = NULL;
    if (!packed) { /* a copy within the process: through a packed box */
        tmp = ptc_malloc(xbytes(o, x) + 1);
        if (!tmp)
            return PTC_E_NOMEM;
    }
    int rc = ptc_reshard_pack_one(o->p, x, from, packed ? packed : tmp);
    if (rc == PTC_OK && tmp)
        rc = ptc_reshard_unpack_one(o->p, x, tmp, o->db[x->dst_rank][x->tensor]);
    ptc_free(tmp);
    return rc;
}

static int item_in(const ov *o, const item *it, const uint8_t *packed)
{
    if (!it->x) {
        size_t n = shard_bytes(o, it->t, it->r);
        if (n)
            memcpy(o->db[it->r][it->t], packed, n);
        return PTC_OK;
    }
    return ptc_reshard_unpack_one(o->p, it->x, packed, o->db[it->x->dst_rank][it->x->tensor]);
}

/* The items of phase @p fanout in plan order, into *out (ptc_free). */
static int items_of(const ov *o, bool fanout, item **out, size_t *n)
{
    size_t nx, cap = 0;
    const ptc_transfer *xf = ptc_plan_transfers(o->p, &nx);
    *out = NULL;
    *n = 0;
    size_t nt = ptc_layout_count(ptc_plan_target(o->p));
    int wb = o->ws < o->wt ? o->ws : o->wt;
    for (size_t t = 0; !fanout && t < nt; t++)
        for (int r = 0; r < wb; r++)
            if (ptc_plan_reused(o->p, t, r)) {
                PTC_TRY(ptc_grow((void **)out, &cap, *n + 1, sizeof **out));
                (*out)[(*n)++] = (item){NULL, t, r};
            }
    for (size_t i = 0; i < nx; i++)
        if ((xf[i].kind == PTC_TRANSFER_FANOUT) == fanout) {
            PTC_TRY(ptc_grow((void **)out, &cap, *n + 1, sizeof **out));
            (*out)[(*n)++] = (item){&xf[i], xf[i].tensor, 0};
        }
    return PTC_OK;
}

/* One phase: pack, exchange, unpack. Collective; failures agreed. */
static int phase(const ov *o, bool fanout)
{
    const ptc_transport *t = o->t;
    int me = t->rank, np = t->size;
    item *it = NULL;
    size_t nit = 0;
    size_t *len = ptc_calloc((size_t)np * 4, sizeof *len);
    uint8_t **buf = ptc_calloc((size_t)np * 2, sizeof *buf);
    int *peer = ptc_malloc(sizeof(int) * (size_t)np * 2);
    const void **sp = ptc_malloc(sizeof *sp * (size_t)np);
    void **rp = ptc_malloc(sizeof *rp * (size_t)np);
    size_t *sl = ptc_malloc(sizeof *sl * (size_t)np * 2);
    int rc = len && buf && peer && sp && rp && sl ? items_of(o, fanout, &it, &nit) : PTC_E_NOMEM;
    size_t *out_len = len, *in_len = len ? len + np : NULL, *at_out = len ? len + 2 * np : NULL,
           *at_in = len ? len + 3 * np : NULL;
    for (size_t i = 0; rc == PTC_OK && i < nit; i++) {
        int from, to;
        item_ends(o, &it[i], fanout, &from, &to);
        if (from == to)
            continue;
        if (from == me)
            out_len[to] += item_bytes(o, &it[i]);
        if (to == me)
            in_len[from] += item_bytes(o, &it[i]);
    }
    for (int q = 0; rc == PTC_OK && q < np; q++)
        if ((out_len[q] && !(buf[q] = ptc_malloc(out_len[q]))) ||
            (in_len[q] && !(buf[np + q] = ptc_malloc(in_len[q]))))
            rc = ptc_error_set(PTC_E_NOMEM, "no memory for the exchange with process %d", q);
    /* what this process provides: copied here, or packed per peer */
    for (size_t i = 0; rc == PTC_OK && i < nit; i++) {
        int from, to;
        item_ends(o, &it[i], fanout, &from, &to);
        if (from != me)
            continue;
        rc = item_out(o, &it[i], fanout, to == me ? NULL : buf[to] + at_out[to]);
        if (to != me)
            at_out[to] += item_bytes(o, &it[i]);
    }
    rc = ptc_transport_agree(t, rc, "reshard exchange");
    if (rc < 0)
        goto out_free;
    size_t ns = 0, nr = 0;
    int *to_p = peer, *from_p = peer + np;
    size_t *rl = sl + np;
    for (int q = 0; q < np; q++) {
        if (q != me && out_len[q]) {
            to_p[ns] = q, sp[ns] = buf[q], sl[ns++] = out_len[q];
        }
        if (q != me && in_len[q]) {
            from_p[nr] = q, rp[nr] = buf[np + q], rl[nr++] = in_len[q];
        }
    }
    rc = ptc_transport_exchange(t, ns, to_p, sp, sl, nr, from_p, rp, rl);
    for (size_t i = 0; rc == PTC_OK && i < nit; i++) {
        int from, to;
        item_ends(o, &it[i], fanout, &from, &to);
        if (to != me || from == me)
            continue;
        rc = item_in(o, &it[i], buf[np + from] + at_in[from]);
        at_in[from] += item_bytes(o, &it[i]);
    }
    rc = ptc_transport_agree(t, rc, "reshard exchange");
out_free:
    for (int q = 0; buf && q < 2 * np; q++)
        ptc_free(buf[q]);
    ptc_free(buf);
    ptc_free(len);
    ptc_free(peer);
    ptc_free(sp);
    ptc_free(rp);
    ptc_free(sl);
    ptc_free(it);
    return rc;
}

int ptc_reshard_owned_over(const ptc_plan *p, const ptc_transport *t, const int *src_owner,
                           const void *const *const *src, const int *dst_owner,
                           void *const *const *dst)
{
    ov o = {p, t, src_owner, dst_owner, src, dst,
            ptc_config_world(ptc_layout_config(ptc_plan_source(p))),
            ptc_config_world(ptc_layout_config(ptc_plan_target(p)))};
    int rc = PTC_OK;
    for (int r = 0; r < o.ws && rc == PTC_OK; r++)
        if (src_owner[r] < 0 || src_owner[r] >= t->size)
            rc = ptc_error_set(PTC_E_INVAL, "source rank %d: process %d of %d", r,
                               src_owner[r], t->size);
    for (int r = 0; r < o.wt && rc == PTC_OK; r++)
        if (dst_owner[r] < 0 || dst_owner[r] >= t->size)
            rc = ptc_error_set(PTC_E_INVAL, "target rank %d: process %d of %d", r,
                               dst_owner[r], t->size);
    PTC_TRY(ptc_transport_agree(t, rc, "reshard exchange"));
    PTC_TRY(phase(&o, false));
    return phase(&o, true);
}
