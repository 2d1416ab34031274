/* Validator: blocking execution with per-peer FIFO matching and
 * communication inference, over the dependency checks and deadlock reports
 * of sched_deps.c and the event engine of sched_sim.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

/* ---- blocking execution ---------------------------------------------------- */

typedef struct execst {
    const ptc_sched *s;
    ptc_sched_report *rep;
    uint8_t *fl; /* per cell: 1 F done, 2 B/I done, 4 act received, 8 grad received */
    size_t *pc;
    int *queue;
    bool *inq;
    size_t qh, qt;
    size_t messages;
} execst;

enum { C_F = 1, C_B = 2, C_ACT = 4, C_GRAD = 8 };

static void push(execst *x, int r)
{
    if (x->inq[r])
        return;
    x->inq[r] = true;
    x->queue[x->qt++ % (size_t)x->s->ranks] = r;
}

/* Match SEND (r, i) with RECV (q, j). */
static int match(execst *x, int r, int q)
{
    const ptc_sched *s = x->s;
    const ptc_sched_action *sa = &s->lists[r].a[x->pc[r]], *ra = &s->lists[q].a[x->pc[q]];
    char ts[48] = "", tr[48] = "";
    int gs = sched_gs(s, r, sa->chunk), gr = sched_gs(s, q, ra->chunk);
    int st = gs % s->stages;
    /* run_rank() has checked that the sender computed the tensor. */
    int want = sa->tensor == PTC_SCHED_ACT ? gs + 1 : gs - 1;
    bool edge = sa->tensor == PTC_SCHED_ACT ? st + 1 < s->stages : st > 0;
    int gr_st = gr % s->stages;
    size_t cr = (size_t)ra->mb * s->stages + gr_st;
    uint8_t bit = sa->tensor == PTC_SCHED_ACT ? C_ACT : C_GRAD;
    if (sa->tensor != ra->tensor || sa->mb != ra->mb || !edge || gr != want || (x->fl[cr] & bit)) {
        sched_tokname(sa, ts, sizeof ts);
        sched_tokname(ra, tr, sizeof tr);
    }
    if (sa->tensor != ra->tensor || sa->mb != ra->mb || !edge || gr != want)
        return sched_report_set(x->rep, PTC_E_INVAL, q, (int)x->pc[q],
                                "rank %d step %zu (%s) is matched with rank %d step %zu (%s): "
                                "not the tensor that stage expects",
                                q, x->pc[q], tr, r, x->pc[r], ts);
    if (x->fl[cr] & bit)
        return sched_report_set(x->rep, PTC_E_INVAL, q, (int)x->pc[q],
                                "rank %d step %zu (%s): tensor received twice", q, x->pc[q], tr);
    x->fl[cr] |= bit;
    x->pc[r]++;
    x->pc[q]++;
    x->messages++;
    push(x, q);
    push(x, r);
    return PTC_OK;
}

static int run_rank(execst *x, int r)
{
    const ptc_sched *s = x->s;
    const sched_list *l = &s->lists[r];
    while (x->pc[r] < l->n) {
        const ptc_sched_action *a = &l->a[x->pc[r]];
        if (a->op == PTC_SCHED_SEND || a->op == PTC_SCHED_RECV) {
            int q = a->peer;
            if (a->op == PTC_SCHED_SEND) {
                /* A send of data not yet computed is wrong whatever the peer does. */
                int g = sched_gs(s, r, a->chunk);
                size_t c = (size_t)a->mb * s->stages + g % s->stages;
                uint8_t need = a->tensor == PTC_SCHED_ACT ? C_F : C_B;
                if (!(x->fl[c] & need)) {
                    char t[48];
                    sched_tokname(a, t, sizeof t);
                    return sched_report_set(x->rep, PTC_E_INVAL, r, (int)x->pc[r],
                                            "rank %d step %zu (%s): sends %s before its %s", r,
                                            x->pc[r], t,
                                            need == C_F ? "an activation" : "a gradient",
                                            need == C_F ? "forward" : "backward");
                }
            }
            if (x->pc[q] >= s->lists[q].n)
                return PTC_OK;
            const ptc_sched_action *b = &s->lists[q].a[x->pc[q]];
            int want = a->op == PTC_SCHED_SEND ? PTC_SCHED_RECV : PTC_SCHED_SEND;
            if (b->op != want || b->peer != r)
                return PTC_OK; /* blocked until q gets here */
            PTC_TRY(a->op == PTC_SCHED_SEND ? match(x, r, q) : match(x, q, r));
            continue;
        }
        int g = sched_gs(s, r, a->chunk);
        int pipe = g / s->stages, st = g % s->stages;
        size_t c = (size_t)a->mb * s->stages + st;
        const char *missing = NULL;
        int from = -1;
        if (a->op == PTC_SCHED_F && st > 0) {
            from = s->place_rank[pipe * s->stages + st - 1];
            if (from == r ? !(x->fl[c - 1] & C_F) : !(x->fl[c] & C_ACT))
                missing = "activation";
        } else if ((a->op == PTC_SCHED_B || a->op == PTC_SCHED_I) && st + 1 < s->stages) {
            from = s->place_rank[pipe * s->stages + st + 1];
            if (from == r ? !(x->fl[c + 1] & C_B) : !(x->fl[c] & C_GRAD))
                missing = "gradient";
        }
        if (missing) {
            char t[48];
            sched_tokname(a, t, sizeof t);
            return sched_report_set(x->rep, PTC_E_INVAL, r, (int)x->pc[r],
                                    "rank %d step %zu (%s): runs before its input %s from rank %d "
                                    "%s",
                                    r, x->pc[r], t, missing, from,
                                    from == r ? "is computed" : "is received");
        }
        if (a->op == PTC_SCHED_F)
            x->fl[c] |= C_F;
        else if (a->op != PTC_SCHED_W)
            x->fl[c] |= C_B;
        x->pc[r]++;
    }
    return PTC_OK;
}

static int exec_blocking(const ptc_sched *s, ptc_sched_report *rep, size_t *messages)
{
    execst x;
    memset(&x, 0, sizeof x);
    x.s = s;
    x.rep = rep;
    size_t cells = (size_t)s->mbs * s->stages;
    int rc = PTC_E_NOMEM;
    x.fl = ptc_calloc(cells, 1);
    x.pc = ptc_calloc((size_t)s->ranks, sizeof(size_t));
    x.queue = ptc_calloc((size_t)s->ranks, sizeof(int));
    x.inq = ptc_calloc((size_t)s->ranks, sizeof(bool));
    if (!x.fl || !x.pc || !x.queue || !x.inq)
        goto out_free;
    for (int r = 0; r < s->ranks; r++)
        push(&x, r);
    while (x.qh != x.qt) {
        int r = x.queue[x.qh++ % (size_t)s->ranks];
        x.inq[r] = false;
        if ((rc = run_rank(&x, r)))
            goto out_free;
    }
    rc = PTC_OK;
    for (int r = 0; r < s->ranks; r++)
        if (x.pc[r] < s->lists[r].n) {
            rc = sched_report_deadlock(s, x.pc, rep, false);
            break;
        }
    *messages = x.messages;
out_free:
    ptc_free(x.fl);
    ptc_free(x.pc);
    ptc_free(x.queue);
    ptc_free(x.inq);
    return rc;
}

/* ---- communication inference ---------------------------------------------- */

typedef struct xfer {
    double t;
    int src, dst;
    size_t prod, cons; /* list indices of producer (src) and consumer (dst) */
    ptc_sched_action send, recv;
} xfer;

static int xfer_cmp(const void *pa, const void *pb)
{
    const xfer *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    if (a->src != b->src)
        return a->src - b->src;
    if (a->dst != b->dst)
        return a->dst - b->dst;
    return a->prod < b->prod ? -1 : a->prod > b->prod;
}

static int infer(ptc_sched *s, ptc_sched_report *rep)
{
    PTC_TRY(sched_check_deps(s, rep));
    if (ptc_sched_has_comm(s))
        return PTC_OK;
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.w = 1; /* I = W = 1: every action takes positive time */
    sched_run run;
    int rc = sched_run_exec(s, &c, &run);
    if (rc == PTC_E_DEADLOCK) {
        rc = sched_report_deadlock(s, run.stuck, rep, true);
        sched_run_free(s, &run);
        return rc;
    }
    if (rc)
        return rc;
    size_t cells = (size_t)s->mbs * s->stages;
    size_t *fpos = ptc_malloc(cells * sizeof(size_t)), *bpos = ptc_malloc(cells * sizeof(size_t));
    xfer *xs = NULL;
    size_t nx = 0, capx = 0, *cnt = NULL, *off = NULL, *order = NULL;
    sched_list *nl = ptc_calloc((size_t)s->ranks, sizeof(sched_list));
    rc = PTC_E_NOMEM;
    if (!fpos || !bpos || !nl)
        goto out_free;
    for (int r = 0; r < s->ranks; r++)
        for (size_t i = 0; i < s->lists[r].n; i++) {
            const ptc_sched_action *a = &s->lists[r].a[i];
            size_t cell = (size_t)a->mb * s->stages + sched_gs(s, r, a->chunk) % s->stages;
            if (a->op == PTC_SCHED_F)
                fpos[cell] = i;
            else if (a->op == PTC_SCHED_B || a->op == PTC_SCHED_I)
                bpos[cell] = i;
        }
    for (int r = 0; r < s->ranks; r++)
        for (size_t i = 0; i < s->lists[r].n; i++) {
            const ptc_sched_action *a = &s->lists[r].a[i];
            int g = sched_gs(s, r, a->chunk), pipe = g / s->stages, st = g % s->stages;
            int ng;
            uint8_t tensor;
            if (a->op == PTC_SCHED_F && st + 1 < s->stages) {
                ng = g + 1;
                tensor = PTC_SCHED_ACT;
            } else if ((a->op == PTC_SCHED_B || a->op == PTC_SCHED_I) && st > 0) {
                ng = g - 1;
                tensor = PTC_SCHED_GRAD;
            } else {
                continue;
            }
            int q = s->place_rank[ng];
            if (q == r)
                continue;
            if (nx == capx && ptc_grow((void **)&xs, &capx, nx + 1, sizeof *xs))
                goto out_free;
            size_t ncell = (size_t)a->mb * s->stages + (size_t)(ng - pipe * s->stages);
            xfer *x = &xs[nx++];
            x->t = run.end[r][i];
            x->src = r;
            x->dst = q;
            x->prod = i;
            x->cons = tensor == PTC_SCHED_ACT ? fpos[ncell] : bpos[ncell];
            x->send = (ptc_sched_action){PTC_SCHED_SEND, tensor, a->chunk, a->mb, q};
            x->recv = (ptc_sched_action){PTC_SCHED_RECV, tensor,
                                         (uint16_t)s->place_chunk[ng], a->mb, r};
        }
    if (nx)
        qsort(xs, nx, sizeof *xs, xfer_cmp);
    /* Per-rank event lists in global order (two entries per transfer). */
    cnt = ptc_calloc((size_t)s->ranks + 1, sizeof(size_t));
    off = ptc_calloc((size_t)s->ranks + 1, sizeof(size_t));
    order = ptc_malloc((2 * nx + 1) * sizeof(size_t));
    if (!cnt || !off || !order)
        goto out_free;
    for (size_t i = 0; i < nx; i++) {
        cnt[xs[i].src]++;
        cnt[xs[i].dst]++;
    }
    for (int r = 0; r < s->ranks; r++)
        off[r + 1] = off[r] + cnt[r];
    memset(cnt, 0, ((size_t)s->ranks + 1) * sizeof(size_t));
    for (size_t i = 0; i < nx; i++) {
        order[off[xs[i].src] + cnt[xs[i].src]++] = i * 2;     /* send */
        order[off[xs[i].dst] + cnt[xs[i].dst]++] = i * 2 + 1; /* recv */
    }
    for (int r = 0; r < s->ranks; r++) {
        const sched_list *ol = &s->lists[r];
        size_t n = ol->n + (off[r + 1] - off[r]);
        nl[r].a = ptc_malloc((n ? n : 1) * sizeof(ptc_sched_action));
        if (!nl[r].a)
            goto out_free;
        nl[r].cap = n ? n : 1;
        size_t ci = 0;
        for (size_t k = off[r]; k < off[r + 1]; k++) {
            const xfer *x = &xs[order[k] / 2];
            if (order[k] % 2 == 0) {
                while (ci <= x->prod)
                    nl[r].a[nl[r].n++] = ol->a[ci++];
                nl[r].a[nl[r].n++] = x->send;
            } else {
                if (x->cons < ci) { /* cannot happen: see ptc_sched_infer_comm() */
                    rc = ptc_error_set(PTC_E_INVAL, "internal: inconsistent message order");
                    goto out_free;
                }
                nl[r].a[nl[r].n++] = x->recv;
            }
        }
        while (ci < ol->n)
            nl[r].a[nl[r].n++] = ol->a[ci++];
    }
    for (int r = 0; r < s->ranks; r++) {
        ptc_free(s->lists[r].a);
        s->total += nl[r].n - s->lists[r].n;
        s->lists[r] = nl[r];
        nl[r].a = NULL;
    }
    rc = PTC_OK;
out_free:
    if (nl)
        for (int r = 0; r < s->ranks; r++)
            ptc_free(nl[r].a);
    ptc_free(nl);
    ptc_free(fpos);
    ptc_free(bpos);
    ptc_free(xs);
    ptc_free(cnt);
    ptc_free(off);
    ptc_free(order);
    sched_run_free(s, &run);
    return rc;
}

int ptc_sched_infer_comm(ptc_sched *s)
{
    return infer(s, NULL);
}

int ptc_sched_validate(const ptc_sched *s, ptc_sched_report *rep)
{
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->rank = rep->step = -1;
    }
    int rc = sched_check_deps(s, rep);
    if (rc)
        return rc;
    size_t messages = 0;
    if (ptc_sched_has_comm(s)) {
        rc = exec_blocking(s, rep, &messages);
    } else {
        ptc_sched *c;
        PTC_TRY(ptc_sched_clone(&c, s));
        rc = infer(c, rep);
        if (!rc)
            rc = exec_blocking(c, rep, &messages);
        ptc_sched_destroy(c);
    }
    if (!rc && rep)
        rep->messages = messages;
    return rc;
}
