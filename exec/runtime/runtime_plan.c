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

int rt_plan_build(rt_plan *p, const ptc_sched *s, int rank, int tag_ub)
{
    memset(p, 0, sizeof *p);
    size_t n = 0;
    const ptc_sched_action *list = ptc_sched_actions(s, rank, &n);
    int nch = ptc_sched_chunks(s, rank), M = ptc_sched_microbatches(s);
    int S = ptc_sched_stages(s);
    if (nch < 1)
        return ptc_error_set(PTC_E_INVAL, "rank %d holds no chunk", rank);
    size_t nslots = (size_t)nch * (size_t)M * RT_NSLOT;
    int rc = PTC_E_NOMEM;
    unsigned char *live = ptc_calloc(nslots, 1);
    int *filler = ptc_malloc(nslots * sizeof *filler);
    int *producer = ptc_malloc((n ? n : 1) * sizeof *producer);
    int *last_bwd = ptc_malloc((size_t)nch * sizeof *last_bwd);
    p->ops = ptc_calloc(n ? n : 1, sizeof *p->ops);
    p->send_of = ptc_malloc((n ? n : 1) * sizeof *p->send_of);
    p->recvs = ptc_malloc((n ? n : 1) * sizeof *p->recvs);
    if (!live || !filler || !producer || !last_bwd || !p->ops || !p->send_of || !p->recvs)
        goto out_free;
    p->n = n;
    p->nchunks = nch;
    p->mbs = M;
    for (int c = 0; c < nch; c++)
        last_bwd[c] = -1;
    bool fifo_tags = false;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        const ptc_sched_action *a = &list[i];
        rt_op *o = &p->ops[i];
        o->a = *a;
        o->in = o->out = o->act = o->handoff = o->free1 = o->free2 = -1;
        o->wait_recv = o->wait_recv2 = o->slot = -1;
        o->first_send = 0;
        o->nsend = 0;
        producer[i] = -1;
        int pipe, st, c = a->chunk, m = a->mb;
        rc = PTC_E_INVAL;
        if (c >= nch || m < 0 || m >= M) {
            plan_err(rank, i, a, "chunk or micro-batch out of range");
            goto out_free;
        }
        ptc_sched_stage_of(s, rank, c, &pipe, &st);
        int gs = pipe * S + st;
        int act_in = rt_slot(nch, M, c, m, RT_ACT_IN);
        int grad_in = rt_slot(nch, M, c, m, RT_GRAD_IN);
        switch (a->op) {
        case PTC_SCHED_F:
            if (st > 0) {
                if (!live[act_in]) {
                    plan_err(rank, i, a, "forward input never received");
                    goto out_free;
                }
                o->in = act_in;
                o->wait_recv = filler[act_in];
            }
            if (st < S - 1) {
                o->out = rt_slot(nch, M, c, m, RT_ACT_OUT);
                if (live[o->out]) {
                    plan_err(rank, i, a, "activation produced twice");
                    goto out_free;
                }
                live[o->out] = 1;
                filler[o->out] = -1;
                count++;
                int rr, cc;
                ptc_sched_rank_of(s, pipe, st + 1, &rr, &cc);
                if (rr == rank) {
                    o->handoff = rt_slot(nch, M, cc, m, RT_ACT_IN);
                    if (live[o->handoff]) {
                        plan_err(rank, i, a, "hand-over target already holds a buffer");
                        goto out_free;
                    }
                    live[o->out] = 0;
                    live[o->handoff] = 1;
                    filler[o->handoff] = -1;
                    p->handoffs++;
                } else {
                    filler[o->out] = (int)i; /* producer, for its SEND */
                }
            }
            break;
        case PTC_SCHED_B:
        case PTC_SCHED_I:
            if (st < S - 1) {
                if (!live[grad_in]) {
                    plan_err(rank, i, a, "backward input gradient never received");
                    goto out_free;
                }
                o->in = grad_in;
                o->wait_recv = filler[grad_in];
            }
            if (st > 0) {
                if (!live[act_in]) {
                    plan_err(rank, i, a, "backward before its forward");
                    goto out_free;
                }
                o->act = act_in;
                o->out = rt_slot(nch, M, c, m, RT_GRAD_OUT);
                if (live[o->out]) {
                    plan_err(rank, i, a, "gradient produced twice");
                    goto out_free;
                }
                live[o->out] = 1;
                count++;
                int rr, cc;
                ptc_sched_rank_of(s, pipe, st - 1, &rr, &cc);
                if (rr == rank) {
                    o->handoff = rt_slot(nch, M, cc, m, RT_GRAD_IN);
                    if (live[o->handoff]) {
                        plan_err(rank, i, a, "hand-over target already holds a buffer");
                        goto out_free;
                    }
                    live[o->out] = 0;
                    live[o->handoff] = 1;
                    filler[o->handoff] = -1;
                    p->handoffs++;
                } else {
                    filler[o->out] = (int)i;
                }
            }
            o->free1 = o->in;
            if (a->op == PTC_SCHED_B) {
                o->free2 = o->act;
                last_bwd[c] = (int)i;
            }
            break;
        case PTC_SCHED_W:
            if (st > 0) {
                if (!live[act_in]) {
                    plan_err(rank, i, a, "weight gradient without a live input");
                    goto out_free;
                }
                o->free1 = act_in;
            }
            last_bwd[c] = (int)i;
            break;
        case PTC_SCHED_SEND: {
            int kind = a->tensor == PTC_SCHED_ACT ? RT_ACT_OUT : RT_GRAD_OUT;
            o->slot = rt_slot(nch, M, c, m, kind);
            if (!live[o->slot] || filler[o->slot] < 0) {
                plan_err(rank, i, a, "send before the tensor is computed");
                goto out_free;
            }
            producer[i] = filler[o->slot];
            live[o->slot] = 0;
            count--;
            int to = a->tensor == PTC_SCHED_ACT ? st + 1 : st - 1;
            o->tag = ptc_exec_tag(a->tensor, m, pipe * S + to, M, tag_ub);
            if (o->tag < 0)
                fifo_tags = true;
            p->nsend++;
            break;
        }
        case PTC_SCHED_RECV: {
            o->slot = a->tensor == PTC_SCHED_ACT ? act_in : grad_in;
            if (live[o->slot]) {
                plan_err(rank, i, a, "receive into a buffer still in use");
                goto out_free;
            }
            live[o->slot] = 1;
            filler[o->slot] = (int)i;
            count++;
            o->tag = ptc_exec_tag(a->tensor, m, gs, M, tag_ub);
            if (o->tag < 0)
                fifo_tags = true;
            p->recvs[p->nrecv++] = (int)i;
            break;
        }
        default:
            plan_err(rank, i, a, "unknown action");
            goto out_free;
        }
        if (count > p->peak)
            p->peak = count;
        /* releases */
        if (o->free1 >= 0) {
            live[o->free1] = 0;
            count--;
        }
        if (o->free2 >= 0) {
            live[o->free2] = 0;
            count--;
        }
        if (count > p->peak)
            p->peak = count;
    }
    p->final = count;
    for (int c = 0; c < nch; c++)
        if (last_bwd[c] >= 0)
            p->ops[last_bwd[c]].last_bwd_of_chunk = 1;
    /* Group SENDs by producer so they can be posted as soon as it ends. With
     * FIFO tags (too many messages for unique tags) sends keep list order. */
    size_t k = 0;
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
    rc = PTC_OK;
out_free:
    ptc_free(live);
    ptc_free(filler);
    ptc_free(producer);
    ptc_free(last_bwd);
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
