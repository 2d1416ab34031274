/* The in-memory executor over a transport (ptc_reshard_owned_over): the
 * processes of any ptc_transport (MPI, torch.distributed) hold the ranks an
 * owner map names; per phase the transport's exchange carries the items (a
 * transfer, or a reused shard whose ranks sit on two processes) in plan
 * order: a large one as a message of its own, sent straight from the source
 * buffer where its box is one run of memory there and received straight into
 * the target buffer where it is one there (else packed for itself, or staged
 * and unpacked); the small ones between two processes packed in one message.
 * Each message is unpacked as it arrives where the transport tells
 * (ptc_transport_exchange_each: MPI), else after the exchange.
 * Phase 0: reused shards (whole, where source and target rank sit on
 * different processes) and the transfers from source buffers; phase 1: the
 * fan-outs from target buffers filled in phase 0 (skipped, collectives and
 * all, where the plan has none). Copies within a process need no message:
 * they run on a thread of their own while the exchange moves the bytes.
 * A round (ptc_reshard_owned_round) runs both phases for a range of the
 * plan's tensors; each phase's outcome is agreed in the next exchange's
 * own round, the last one by the caller. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/pack.h"
#include "base/transport_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

typedef struct ov {
    const ptc_plan *p;
    const ptc_transport *t;
    const int *so, *dso; /* process of each source / target rank */
    const void *const *const *sb;
    void *const *const *db;
    int ws, wt;
    size_t t0, t1; /* the tensors of this round */
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

/* Item @p it's box is one run of memory at its provider (@p src) or its
 * receiver (decided from the plan alone, alike on every process). */
static bool is_run(const item *it, bool src)
{
    return !it->x || ptc_reshard_box_contiguous(&it->x->box, src ? it->x->src_stride
                                                                 : it->x->dst_stride);
}

/* Item @p it's bytes at its provider (@p src) or receiver — this process —
 * as one run of memory there, or NULL where the box is strided. */
static uint8_t *run_of(const ov *o, const item *it, bool fanout, bool src)
{
    if (!is_run(it, src))
        return NULL;
    if (!it->x)
        return src ? (uint8_t *)o->sb[it->r][it->t] : (uint8_t *)o->db[it->r][it->t];
    const ptc_transfer *x = it->x;
    size_t es = es_of(o, x->tensor);
    if (!src)
        return (uint8_t *)o->db[x->dst_rank][x->tensor] + (size_t)x->dst_offset * es;
    const void *base = fanout ? o->db[x->src_rank][x->tensor] : o->sb[x->src_rank][x->tensor];
    return (uint8_t *)base + (size_t)x->src_offset * es;
}

/* Item @p it within this process: straight from its source to its target. */
static int copy_here(const ov *o, const item *it, bool fanout)
{
    if (!it->x) {
        size_t n = shard_bytes(o, it->t, it->r);
        const void *from = o->sb[it->r][it->t];
        if (n && from != o->db[it->r][it->t])
            memcpy(o->db[it->r][it->t], from, n);
        return PTC_OK;
    }
    const ptc_transfer *x = it->x;
    size_t es = es_of(o, x->tensor);
    const uint8_t *from = fanout ? o->db[x->src_rank][x->tensor] : o->sb[x->src_rank][x->tensor];
    int64_t ext[PTC_MAX_DIMS] = {0};
    for (int d = 0; d < x->box.ndim; d++)
        ext[d] = x->box.hi[d] - x->box.lo[d];
    return ptc_pack_copy((uint8_t *)o->db[x->dst_rank][x->tensor] + (size_t)x->dst_offset * es,
                         x->dst_stride, from + (size_t)x->src_offset * es, x->src_stride, ext,
                         x->box.ndim, es);
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
    for (size_t t = o->t0; !fanout && t < o->t1 && t < nt; t++)
        for (int r = 0; r < wb; r++)
            if (ptc_plan_reused(o->p, t, r)) {
                PTC_TRY(ptc_grow((void **)out, &cap, *n + 1, sizeof **out));
                (*out)[(*n)++] = (item){NULL, t, r};
            }
    for (size_t i = 0; i < nx; i++)
        if ((xf[i].kind == PTC_TRANSFER_FANOUT) == fanout && xf[i].tensor >= o->t0 &&
            xf[i].tensor < o->t1) {
            PTC_TRY(ptc_grow((void **)out, &cap, *n + 1, sizeof **out));
            (*out)[(*n)++] = (item){&xf[i], xf[i].tensor, 0};
        }
    return PTC_OK;
}

/* An item that travels as a message of its own: large enough that a
 * message per item costs nothing next to its bytes, and one run of memory
 * at one end at least — sent straight from its source buffer where it is a
 * run there (else packed for itself), received straight into its target
 * buffer where it is a run there (else staged and unpacked). The others
 * between two processes go packed in one message. Both ends decide alike. */
#define OV_ALONE_MIN ((size_t)256 << 10)

static bool alone(const ov *o, const item *it)
{
    return item_bytes(o, it) >= OV_ALONE_MIN && (is_run(it, true) || is_run(it, false));
}

/* A phase's messages, in the order both ends give them: the items alone in
 * plan order, then one packed message per peer. */
typedef struct msgs {
    size_t ns, nr;
    int *to, *from;
    const void **sp;
    void **rp;
    size_t *sl, *rl;
    size_t *ritem;           /* per receive: its item alone, or SIZE_MAX (a peer's packed) */
    size_t *at;              /* per peer: packed bytes out, in; then cursors */
    size_t alone_in;         /* cursor of the staged items alone, after the peers' */
    uint8_t *spack, *rstage; /* the packed messages, peer after peer, then the items
                              * alone packed (sent) or staged (received) */
} msgs;

static void msgs_free(msgs *m)
{
    ptc_free(m->to);
    ptc_free(m->from);
    ptc_free(m->sp);
    ptc_free(m->rp);
    ptc_free(m->sl);
    ptc_free(m->rl);
    ptc_free(m->ritem);
    ptc_free(m->at);
    ptc_free(m->spack);
    ptc_free(m->rstage);
}

/* Item @p it's bytes at this process, its provider, into @p dst. */
static int pack_item(const ov *o, const item *it, bool fanout, uint8_t *dst)
{
    const uint8_t *run = run_of(o, it, fanout, true);
    if (run) {
        memcpy(dst, run, item_bytes(o, it));
        return PTC_OK;
    }
    /* not a run: a transfer (a reused shard is always whole) */
    const ptc_transfer *x = it->x;
    return ptc_reshard_pack_one(o->p, x, fanout ? o->db[x->src_rank][it->t]
                                                : o->sb[x->src_rank][it->t], dst);
}

/* Count the messages and the packed and staged bytes of this process. */
static void msgs_count(const ov *o, const item *it, size_t nit, bool fanout, msgs *m,
                       size_t *npack, size_t *nstage)
{
    int me = o->t->rank;
    size_t *out = m->at, *in = m->at + o->t->size;
    for (size_t i = 0; i < nit; i++) {
        int from, to;
        item_ends(o, &it[i], fanout, &from, &to);
        size_t b = item_bytes(o, &it[i]);
        if (from == to || !b || (from != me && to != me))
            continue;
        bool a = alone(o, &it[i]);
        if (from == me && a) {
            m->ns++;
            *npack += is_run(&it[i], true) ? 0 : b;
        } else if (from == me) {
            out[to] += b, *npack += b;
        }
        if (to == me && a) {
            m->nr++;
            *nstage += is_run(&it[i], false) ? 0 : b;
        } else if (to == me) {
            in[from] += b, *nstage += b;
        }
    }
}

/* Size and allocate the messages; fill the send side (packing) and the
 * receive side's places. Copies within the process are left to
 * copies_run, during the exchange. */
static int msgs_build(const ov *o, const item *it, size_t nit, bool fanout, msgs *m)
{
    int me = o->t->rank, np = o->t->size;
    size_t npack = 0, nstage = 0;
    if (!(m->at = ptc_calloc((size_t)np * 4, sizeof *m->at)))
        return PTC_E_NOMEM;
    size_t *out = m->at, *in = m->at + np, *cur_out = m->at + 2 * np, *cur_in = m->at + 3 * np;
    m->ns = m->nr = (size_t)np; /* room for the packed messages */
    msgs_count(o, it, nit, fanout, m, &npack, &nstage);
    size_t ns = m->ns, nr = m->nr;
    m->ns = m->nr = 0;
    if (!(m->to = ptc_malloc(sizeof(int) * ns)) || !(m->from = ptc_malloc(sizeof(int) * nr)) ||
        !(m->sp = ptc_malloc(sizeof *m->sp * ns)) || !(m->rp = ptc_malloc(sizeof *m->rp * nr)) ||
        !(m->sl = ptc_malloc(sizeof *m->sl * ns)) || !(m->rl = ptc_malloc(sizeof *m->rl * nr)) ||
        !(m->ritem = ptc_malloc(sizeof *m->ritem * nr)) ||
        !(m->spack = ptc_malloc(npack + 1)) || !(m->rstage = ptc_malloc(nstage + 1)))
        return ptc_error_set(PTC_E_NOMEM, "no memory for the exchange (%zu + %zu bytes packed)",
                             npack, nstage);
    size_t so = 0, si = 0;
    for (int q = 0; q < np; q++) { /* each peer's place in the packed buffers */
        cur_out[q] = so;
        cur_in[q] = si;
        so += out[q];
        si += in[q];
    }
    m->alone_in = si; /* the staged items alone follow, in plan order */
    for (size_t i = 0; i < nit; i++) {
        int from, to;
        item_ends(o, &it[i], fanout, &from, &to);
        size_t b = item_bytes(o, &it[i]);
        if (!b || from == to || (from != me && to != me))
            continue;
        bool a = alone(o, &it[i]);
        if (from == me && a) {
            uint8_t *run = run_of(o, &it[i], fanout, true);
            if (!run) { /* packed for itself */
                run = m->spack + so;
                so += b;
                PTC_TRY(pack_item(o, &it[i], fanout, run));
            }
            m->to[m->ns] = to, m->sp[m->ns] = run, m->sl[m->ns++] = b;
        } else if (from == me) {
            PTC_TRY(pack_item(o, &it[i], fanout, m->spack + cur_out[to]));
            cur_out[to] += b;
        }
        if (to == me && a) {
            uint8_t *run = run_of(o, &it[i], fanout, false);
            if (!run) { /* staged, unpacked after the exchange */
                run = m->rstage + si;
                si += b;
            }
            m->ritem[m->nr] = i;
            m->from[m->nr] = from, m->rp[m->nr] = run, m->rl[m->nr++] = b;
        }
    }
    for (int q = 0; q < np; q++) { /* the packed messages, after the items alone */
        if (out[q]) {
            m->to[m->ns] = q, m->sp[m->ns] = m->spack + cur_out[q] - out[q];
            m->sl[m->ns++] = out[q];
        }
        if (in[q]) {
            m->ritem[m->nr] = SIZE_MAX;
            m->from[m->nr] = q, m->rp[m->nr] = m->rstage + cur_in[q];
            m->rl[m->nr++] = in[q];
        }
    }
    return PTC_OK;
}

/* A phase's received messages, unpacked as each arrives. */
typedef struct arrivals {
    const ov *o;
    const item *it;
    size_t nit;
    bool fanout;
    const msgs *m;
    int rc; /* the first unpacking failure */
} arrivals;

/* Receive @p j has arrived: an item alone (nothing to do where it came
 * into its target in place; else unpacked from its stage), or a peer's
 * packed message, its items in plan order. */
static int unpack_msg(const arrivals *a, size_t j)
{
    const ov *o = a->o;
    const msgs *m = a->m;
    int me = o->t->rank;
    const uint8_t *src = m->rp[j];
    for (size_t i = m->ritem[j] == SIZE_MAX ? 0 : m->ritem[j]; i < a->nit; i++) {
        const item *it = &a->it[i];
        int from, to;
        item_ends(o, it, a->fanout, &from, &to);
        size_t b = item_bytes(o, it);
        bool alone_one = m->ritem[j] != SIZE_MAX;
        if (!alone_one && (to != me || from != m->from[j] || !b || alone(o, it)))
            continue;
        uint8_t *run = run_of(o, it, a->fanout, false);
        if (run && run != src)
            memcpy(run, src, b);
        else if (!run)
            PTC_TRY(ptc_reshard_unpack_one(o->p, it->x, src, o->db[it->x->dst_rank][it->t]));
        src += b;
        if (alone_one)
            break;
    }
    return PTC_OK;
}

static int arrived(void *user, size_t j)
{
    arrivals *a = user;
    return a->rc = unpack_msg(a, j);
}

/* The copies within this process of a phase, run beside the exchange (on a
 * thread of their own: they touch no buffer a message reads or fills). */
typedef struct copies {
    const ov *o;
    const item *it;
    size_t nit;
    bool fanout;
    int rc;
    char err[1024]; /* the thread's error message (ptc_error_set's is per thread) */
} copies;

static int copies_run(copies *c)
{
    int me = c->o->t->rank;
    for (size_t i = 0; i < c->nit; i++) {
        int from, to;
        item_ends(c->o, &c->it[i], c->fanout, &from, &to);
        if (from == me && to == me)
            PTC_TRY(copy_here(c->o, &c->it[i], c->fanout));
    }
    return PTC_OK;
}

static void *copies_main(void *arg)
{
    copies *c = arg;
    if ((c->rc = copies_run(c)) < 0)
        snprintf(c->err, sizeof c->err, "%s", ptc_last_error());
    return NULL;
}

/* One phase: pack, then the copies within the process on a thread beside
 * the exchange (the caller's thread: the transport may need it), unpack.
 * @p rc: the outcome so far (nothing is built where it failed), agreed in
 * the exchange's round (*@p gone: it failed there, alike on every process).
 * Collective; returns this process's outcome after the unpack, not agreed
 * (the next exchange's round or the caller agrees it). */
static int phase(const ov *o, bool fanout, int rc, bool *gone)
{
    const ptc_transport *t = o->t;
    item *it = NULL;
    size_t nit = 0;
    msgs m;
    memset(&m, 0, sizeof m);
    if (rc == PTC_OK)
        rc = items_of(o, fanout, &it, &nit);
    if (rc == PTC_OK)
        rc = msgs_build(o, it, nit, fanout, &m);
    copies c = {.o = o, .it = it, .nit = nit, .fanout = fanout};
    pthread_t th;
    bool side = rc == PTC_OK && pthread_create(&th, NULL, copies_main, &c) == 0;
    if (rc == PTC_OK && !side) /* no thread: before the exchange */
        rc = copies_run(&c);
    /* the build's outcome agreed in the exchange's own round; each message
     * unpacked as it arrives (the copies' thread writes other boxes of the
     * targets meanwhile) */
    arrivals ar = {o, it, nit, fanout, &m, PTC_OK};
    rc = ptc_transport_exchange_each(t, rc, "reshard exchange", m.ns, m.to, m.sp, m.sl, m.nr,
                                     m.from, m.rp, m.rl, arrived, &ar);
    *gone = rc < 0 && ar.rc == PTC_OK; /* not this process's unpacking: alike everywhere */
    if (side) {
        pthread_join(th, NULL);
        if (c.rc < 0 && rc == PTC_OK)
            rc = ptc_error_set(c.rc, "%s", c.err);
    }
    msgs_free(&m);
    ptc_free(it);
    return rc;
}

int ptc_reshard_owned_round(int rc, const ptc_plan *p, const ptc_transport *t,
                            const int *src_owner, const void *const *const *src,
                            const int *dst_owner, void *const *const *dst, size_t t0, size_t t1,
                            bool *gone)
{
    ov o = {p, t, src_owner, dst_owner, src, dst, 0, 0, t0, t1};
    if (rc == PTC_OK) {
        o.ws = ptc_config_world(ptc_layout_config(ptc_plan_source(p)));
        o.wt = ptc_config_world(ptc_layout_config(ptc_plan_target(p)));
    }
    for (int r = 0; r < o.ws && rc == PTC_OK; r++)
        if (src_owner[r] < 0 || src_owner[r] >= t->size)
            rc = ptc_error_set(PTC_E_INVAL, "source rank %d: process %d of %d", r,
                               src_owner[r], t->size);
    for (int r = 0; r < o.wt && rc == PTC_OK; r++)
        if (dst_owner[r] < 0 || dst_owner[r] >= t->size)
            rc = ptc_error_set(PTC_E_INVAL, "target rank %d: process %d of %d", r,
                               dst_owner[r], t->size);
    /* the checks and the caller's outcome agreed in the first phase's round;
     * a failure there is every process's: return it as is */
    *gone = false;
    rc = phase(&o, false, rc, gone);
    if (*gone)
        return rc;
    /* no fan-outs among the round's tensors (alike on every process): the
     * second phase's collectives would carry nothing */
    size_t nx;
    const ptc_transfer *xf = ptc_plan_transfers(p, &nx);
    bool fanouts = false;
    for (size_t i = 0; i < nx && !fanouts; i++)
        fanouts = xf[i].kind == PTC_TRANSFER_FANOUT && xf[i].tensor >= t0 && xf[i].tensor < t1;
    /* phase 0's outcome agreed in phase 1's round */
    return fanouts ? phase(&o, true, rc, gone) : rc;
}

int ptc_reshard_owned_over(int rc, const ptc_plan *p, const ptc_transport *t,
                           const int *src_owner, const void *const *const *src,
                           const int *dst_owner, void *const *const *dst)
{
    size_t nt = rc == PTC_OK ? ptc_layout_count(ptc_plan_target(p)) : 0;
    bool gone;
    rc = ptc_reshard_owned_round(rc, p, t, src_owner, src, dst_owner, dst, 0, nt, &gone);
    return gone ? rc : ptc_transport_agree(t, rc, "reshard exchange");
}
