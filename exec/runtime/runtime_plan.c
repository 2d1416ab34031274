/* A rank's plan: which boundary buffer each action reads, writes, hands
 * over, sends or frees, resolved once before the first step. */
#include <string.h>

#include "exec/runtime/runtime_internal.h"

void rt_plan_free(rt_plan *p)
{
    if (!p)
        return;
    ptc_free(p->ops);
    ptc_free(p->send_of);
    ptc_free(p->recvs);
    memset(p, 0, sizeof *p);
}

static int plan_err(int rank, size_t i, const ptc_sched_action *a, const char *what)
{
    char tok[48];
    ptc_sched_action_format(a, tok, sizeof tok);
    return ptc_error_set(PTC_E_INVAL, "rank %d step %zu (%s): %s", rank, i, tok, what);
}

/* The walk over a rank's list: which buffers are live, who filled each
 * (the RECV that fills an input, the compute whose output a SEND posts;
 * -1: a hand-over or not yet), and how many are live. */
typedef struct plan_walk {
    rt_plan *p;
    const ptc_sched *s;
    int rank, tag_ub, nch, M, S;
    unsigned char *live; /* [slot] */
    int *filler;         /* [slot] */
    int *producer;       /* [action]: a SEND's compute action, else -1 */
    int *last_bwd;       /* [chunk]: its last backward action, -1 none */
    size_t count;        /* live buffers */
    bool fifo_tags;      /* too many messages for unique tags */
} plan_walk;

/* Compute action @p i makes its output @p kind (RT_ACT_OUT or RT_GRAD_OUT)
 * for stage @p to of its pipe: handed over in place when this rank holds
 * that stage, else kept for the SEND. */
static int plan_output(plan_walk *w, size_t i, int pipe, int to, int kind, int in_kind,
                       const char *twice)
{
    rt_op *o = &w->p->ops[i];
    int c = o->a.chunk, m = o->a.mb;
    o->out = rt_slot(w->nch, w->M, c, m, kind);
    if (w->live[o->out])
        return plan_err(w->rank, i, &o->a, twice);
    w->live[o->out] = 1;
    w->filler[o->out] = -1;
    w->count++;
    int rr, cc;
    ptc_sched_rank_of(w->s, pipe, to, &rr, &cc);
    if (rr != w->rank) {
        w->filler[o->out] = (int)i; /* producer, for its SEND */
        return PTC_OK;
    }
    o->handoff = rt_slot(w->nch, w->M, cc, m, in_kind);
    if (w->live[o->handoff])
        return plan_err(w->rank, i, &o->a, "hand-over target already holds a buffer");
    w->live[o->out] = 0;
    w->live[o->handoff] = 1;
    w->filler[o->handoff] = -1;
    w->p->handoffs++;
    return PTC_OK;
}

/* Input @p slot of compute action @p i, which must be live (else @p what). */
static int plan_input(plan_walk *w, size_t i, int slot, const char *what)
{
    rt_op *o = &w->p->ops[i];
    if (!w->live[slot])
        return plan_err(w->rank, i, &o->a, what);
    o->in = slot;
    o->wait_recv = w->filler[slot];
    return PTC_OK;
}

static int plan_compute(plan_walk *w, size_t i, int pipe, int st)
{
    rt_op *o = &w->p->ops[i];
    const ptc_sched_action *a = &o->a;
    int c = a->chunk, m = a->mb, S = w->S;
    int act_in = rt_slot(w->nch, w->M, c, m, RT_ACT_IN);
    int grad_in = rt_slot(w->nch, w->M, c, m, RT_GRAD_IN);
    switch (a->op) {
    case PTC_SCHED_F:
        if (st > 0)
            PTC_TRY(plan_input(w, i, act_in, "forward input never received"));
        if (st < S - 1)
            PTC_TRY(plan_output(w, i, pipe, st + 1, RT_ACT_OUT, RT_ACT_IN,
                                "activation produced twice"));
        return PTC_OK;
    case PTC_SCHED_B:
    case PTC_SCHED_I:
        if (st < S - 1)
            PTC_TRY(plan_input(w, i, grad_in, "backward input gradient never received"));
        if (st > 0) {
            if (!w->live[act_in])
                return plan_err(w->rank, i, a, "backward before its forward");
            o->act = act_in;
            PTC_TRY(plan_output(w, i, pipe, st - 1, RT_GRAD_OUT, RT_GRAD_IN,
                                "gradient produced twice"));
        }
        o->free1 = o->in;
        if (a->op == PTC_SCHED_B) {
            o->free2 = o->act;
            w->last_bwd[c] = (int)i;
        }
        return PTC_OK;
    default: /* PTC_SCHED_W */
        if (st > 0) {
            if (!w->live[act_in])
                return plan_err(w->rank, i, a, "weight gradient without a live input");
            o->free1 = act_in;
        }
        w->last_bwd[c] = (int)i;
        return PTC_OK;
    }
}

static int plan_message(plan_walk *w, size_t i, int pipe, int st)
{
    rt_op *o = &w->p->ops[i];
    const ptc_sched_action *a = &o->a;
    int c = a->chunk, m = a->mb, S = w->S;
    if (a->op == PTC_SCHED_SEND) {
        int kind = a->tensor == PTC_SCHED_ACT ? RT_ACT_OUT : RT_GRAD_OUT;
        o->slot = rt_slot(w->nch, w->M, c, m, kind);
        if (!w->live[o->slot] || w->filler[o->slot] < 0)
            return plan_err(w->rank, i, a, "send before the tensor is computed");
        w->producer[i] = w->filler[o->slot];
        w->live[o->slot] = 0;
        w->count--;
        int to = a->tensor == PTC_SCHED_ACT ? st + 1 : st - 1;
        o->tag = ptc_exec_tag(a->tensor, m, pipe * S + to, w->M, w->tag_ub);
        w->p->nsend++;
    } else {
        int kind = a->tensor == PTC_SCHED_ACT ? RT_ACT_IN : RT_GRAD_IN;
        o->slot = rt_slot(w->nch, w->M, c, m, kind);
        if (w->live[o->slot])
            return plan_err(w->rank, i, a, "receive into a buffer still in use");
        w->live[o->slot] = 1;
        w->filler[o->slot] = (int)i;
        w->count++;
        o->tag = ptc_exec_tag(a->tensor, m, pipe * S + st, w->M, w->tag_ub);
        w->p->recvs[w->p->nrecv++] = (int)i;
    }
    if (o->tag < 0)
        w->fifo_tags = true;
    return PTC_OK;
}

/* Action @p i of the list: its buffers, then the releases it makes. */
static int plan_action(plan_walk *w, size_t i)
{
    rt_plan *p = w->p;
    rt_op *o = &p->ops[i];
    const ptc_sched_action *a = &o->a;
    o->in = o->out = o->act = o->handoff = o->free1 = o->free2 = -1;
    o->wait_recv = o->wait_recv2 = o->slot = -1;
    o->first_send = 0;
    o->nsend = 0;
    w->producer[i] = -1;
    if (a->chunk >= w->nch || a->mb < 0 || a->mb >= w->M)
        return plan_err(w->rank, i, a, "chunk or micro-batch out of range");
    int pipe, st;
    ptc_sched_stage_of(w->s, w->rank, a->chunk, &pipe, &st);
    switch (a->op) {
    case PTC_SCHED_F:
    case PTC_SCHED_B:
    case PTC_SCHED_I:
    case PTC_SCHED_W:
        PTC_TRY(plan_compute(w, i, pipe, st));
        break;
    case PTC_SCHED_SEND:
    case PTC_SCHED_RECV:
        PTC_TRY(plan_message(w, i, pipe, st));
        break;
    default:
        return plan_err(w->rank, i, a, "unknown action");
    }
    if (w->count > p->peak)
        p->peak = w->count;
    if (o->free1 >= 0) {
        w->live[o->free1] = 0;
        w->count--;
    }
    if (o->free2 >= 0) {
        w->live[o->free2] = 0;
        w->count--;
    }
    return PTC_OK;
}

/* Group SENDs by producer so they can be posted as soon as it ends. With
 * FIFO tags (too many messages for unique tags) sends keep list order. */
static void plan_group_sends(rt_plan *p, const int *producer, bool fifo_tags)
{
    size_t k = 0, n = p->n;
    for (size_t i = 0; i < n; i++) {
        if (sched_is_compute_op(p->ops[i].a.op)) {
            p->ops[i].first_send = (int)k;
            for (size_t j = i + 1; j < n && !fifo_tags; j++)
                if (p->ops[j].a.op == PTC_SCHED_SEND && producer[j] == (int)i)
                    p->send_of[k++] = (int)j;
            p->ops[i].nsend = (int)k - p->ops[i].first_send;
        }
        if (fifo_tags && (p->ops[i].a.op == PTC_SCHED_SEND || p->ops[i].a.op == PTC_SCHED_RECV))
            p->ops[i].tag = p->ops[i].a.tensor;
    }
}

int rt_plan_build(rt_plan *p, const ptc_sched *s, int rank, int tag_ub)
{
    memset(p, 0, sizeof *p);
    size_t n = 0;
    const ptc_sched_action *list = ptc_sched_actions(s, rank, &n);
    plan_walk w = {.p = p, .s = s, .rank = rank, .tag_ub = tag_ub,
                   .nch = ptc_sched_chunks(s, rank), .M = ptc_sched_microbatches(s),
                   .S = ptc_sched_stages(s)};
    if (w.nch < 1)
        return ptc_error_set(PTC_E_INVAL, "rank %d holds no chunk", rank);
    size_t nslots = (size_t)w.nch * (size_t)w.M * RT_NSLOT;
    int rc = PTC_E_NOMEM;
    w.live = ptc_calloc(nslots, 1);
    w.filler = ptc_malloc(nslots * sizeof *w.filler);
    w.producer = ptc_malloc((n ? n : 1) * sizeof *w.producer);
    w.last_bwd = ptc_malloc((size_t)w.nch * sizeof *w.last_bwd);
    p->ops = ptc_calloc(n ? n : 1, sizeof *p->ops);
    p->send_of = ptc_malloc((n ? n : 1) * sizeof *p->send_of);
    p->recvs = ptc_malloc((n ? n : 1) * sizeof *p->recvs);
    if (!w.live || !w.filler || !w.producer || !w.last_bwd || !p->ops || !p->send_of ||
        !p->recvs)
        goto out_free;
    p->n = n;
    p->nchunks = w.nch;
    p->mbs = w.M;
    for (int c = 0; c < w.nch; c++)
        w.last_bwd[c] = -1;
    for (size_t i = 0; i < n; i++) {
        p->ops[i].a = list[i];
        if ((rc = plan_action(&w, i)) != PTC_OK)
            goto out_free;
    }
    p->final = w.count;
    for (int c = 0; c < w.nch; c++)
        if (w.last_bwd[c] >= 0)
            p->ops[w.last_bwd[c]].last_bwd_of_chunk = 1;
    plan_group_sends(p, w.producer, w.fifo_tags);
    rc = PTC_OK;
out_free:
    ptc_free(w.live);
    ptc_free(w.filler);
    ptc_free(w.producer);
    ptc_free(w.last_bwd);
    if (rc != PTC_OK)
        rt_plan_free(p);
    return rc;
}

int ptc_exec_plan_inspect(const ptc_sched *s, int rank, ptc_exec_plan_info *info)
{
    memset(info, 0, sizeof *info);
    if (rank < 0 || rank >= ptc_sched_ranks(s))
        return ptc_error_set(PTC_E_RANGE, "rank %d outside the schedule", rank);
    ptc_sched *copy = NULL;
    PTC_TRY(ptc_sched_clone(&copy, s));
    int rc = ptc_sched_infer_comm(copy);
    if (rc != PTC_OK)
        goto out_destroy;
    rt_plan p;
    rc = rt_plan_build(&p, copy, rank, 1 << 30);
    if (rc != PTC_OK)
        goto out_destroy;
    info->actions = p.n;
    info->sends = p.nsend;
    info->recvs = p.nrecv;
    info->local_handoffs = p.handoffs;
    info->peak_buffers = p.peak;
    info->final_buffers = p.final;
    rt_plan_free(&p);
out_destroy:
    ptc_sched_destroy(copy);
    return rc;
}
