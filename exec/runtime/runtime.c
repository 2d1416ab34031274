/* The pipeline runtime on host buffers: non-blocking MPI point-to-point in
 * the order of the plan, a buffer pool, gradient reduction, a watchdog. */
#include <math.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "exec/runtime/runtime_internal.h"

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void rt_sleep(double sec)
{
    if (sec <= 0)
        return;
    struct timespec ts = {(time_t)sec, (long)((sec - floor(sec)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

void ptc_exec_opts_init(ptc_exec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = PTC_EXEC_DEVICE_HOST;
}

static int mpi_err(int mrc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(mrc, msg, &len);
    return ptc_error_set(PTC_E_MPI, "%s: %.*s", what, len, msg);
}

/* ---- buffer pool ------------------------------------------------------------ */

static int pool_alloc_one(ptc_exec *e, void **out)
{
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        return rt_dev_alloc(e, e->o.act_bytes, out);
    *out = ptc_malloc(e->o.act_bytes);
    if (!*out)
        return ptc_error_set(PTC_E_NOMEM, "boundary buffer of %zu bytes", e->o.act_bytes);
    return PTC_OK;
}

static void pool_free_one(ptc_exec *e, void *p)
{
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        rt_dev_free(e, p);
    else
        ptc_free(p);
}

static int pool_reserve(ptc_exec *e, size_t want)
{
    if (want > e->pool_cap) {
        void **np = ptc_realloc(e->pool, want * sizeof *np);
        if (!np)
            return ptc_error_set(PTC_E_NOMEM, "buffer pool of %zu", want);
        e->pool = np;
        e->pool_cap = want;
    }
    return PTC_OK;
}

int rt_pool_get(ptc_exec *e, int slot)
{
    void *b;
    if (e->npool > 0) {
        b = e->pool[--e->npool];
    } else {
        PTC_TRY(pool_reserve(e, e->allocated + 1));
        PTC_TRY(pool_alloc_one(e, &b));
        e->allocated++;
    }
    e->slots[slot] = b;
    if (++e->in_use > e->peak_in_use)
        e->peak_in_use = e->in_use;
    return PTC_OK;
}

void rt_pool_put(ptc_exec *e, int slot)
{
    if (slot < 0 || !e->slots[slot])
        return;
    e->pool[e->npool++] = e->slots[slot]; /* pool_cap >= allocated */
    e->slots[slot] = NULL;
    e->in_use--;
}

/* ---- create / destroy ------------------------------------------------------------ */

static int split(MPI_Comm world, const ptc_config *c, int rank, ptc_exec_group_kind k,
                 MPI_Comm *out)
{
    int color, key;
    PTC_TRY(ptc_exec_group_color(c, rank, k, &color, &key));
    int mrc = MPI_Comm_split(world, color, key, out);
    if (mrc != MPI_SUCCESS)
        return mpi_err(mrc, "MPI_Comm_split");
    return PTC_OK;
}

static void free_comm(MPI_Comm *c)
{
    if (*c != MPI_COMM_NULL)
        MPI_Comm_free(c);
    *c = MPI_COMM_NULL;
}

void ptc_exec_destroy(ptc_exec *e)
{
    if (!e)
        return;
    if (e->slots) {
        size_t ns = (size_t)e->plan.nchunks * (size_t)e->plan.mbs * RT_NSLOT;
        for (size_t i = 0; i < ns; i++)
            if (e->slots[i])
                pool_free_one(e, e->slots[i]);
    }
    for (size_t i = 0; i < e->npool; i++)
        pool_free_one(e, e->pool[i]);
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        rt_dev_close(e);
    free_comm(&e->pipe);
    free_comm(&e->dp);
    free_comm(&e->tp);
    free_comm(&e->pair);
    rt_plan_free(&e->plan);
    ptc_free(e->pool);
    ptc_free(e->slots);
    ptc_free(e->req);
    ptc_free(e->state);
    ptc_free(e->pending_sends);
    ptc_free(e->tm);
    ptc_free(e->chunk_bwd_left);
    ptc_free(e->red_req);
    ptc_free(e->red_posted);
    ptc_sched_destroy(e->sched);
    ptc_free(e);
}

int ptc_exec_create(ptc_exec **out, const ptc_sched *s, const ptc_config *c,
                    MPI_Comm world, const ptc_exec_stage *fns, const ptc_exec_opts *o)
{
    *out = NULL;
    int wsize = 0, wrank = 0, rc;
    MPI_Comm_size(world, &wsize);
    MPI_Comm_rank(world, &wrank);
    if (ptc_config_world(c) != wsize)
        return ptc_error_set(PTC_E_INVAL, "configuration needs %d processes, world has %d",
                             ptc_config_world(c), wsize);
    if (ptc_sched_ranks(s) != c->pp)
        return ptc_error_set(PTC_E_INVAL, "schedule has %d ranks, pp=%d",
                             ptc_sched_ranks(s), c->pp);
    if (!o || o->act_bytes == 0)
        return ptc_error_set(PTC_E_INVAL, "act_bytes must be > 0");
    if (o->act_bytes > (size_t)INT32_MAX)
        return ptc_error_set(PTC_E_RANGE, "act_bytes %zu over INT_MAX", o->act_bytes);
    if (!fns || !fns->forward)
        return ptc_error_set(PTC_E_INVAL, "the forward callback is required");
    ptc_exec *e = ptc_calloc(1, sizeof *e);
    if (!e)
        return ptc_error_set(PTC_E_NOMEM, "runtime");
    e->pipe = e->dp = e->tp = e->pair = MPI_COMM_NULL;
    e->cfg = *c;
    e->fns = *fns;
    e->o = *o;
    e->world = world;
    e->world_rank = wrank;
    ptc_config_coords(c, wrank, &e->pp_i, &e->dp_i, &e->tp_i);
    e->rng = o->jitter_seed * 0x9E3779B97F4A7C15ull + (uint64_t)wrank + 1;
    rc = ptc_sched_clone(&e->sched, s);
    if (rc != PTC_OK)
        goto out_destroy;
    rc = ptc_sched_infer_comm(e->sched);
    if (rc != PTC_OK)
        goto out_destroy;
    /* Communicators, always in this order on every rank. */
    if ((rc = split(world, c, wrank, PTC_EXEC_GROUP_PIPE, &e->pipe)) != PTC_OK ||
        (rc = split(world, c, wrank, PTC_EXEC_GROUP_DP, &e->dp)) != PTC_OK ||
        (rc = split(world, c, wrank, PTC_EXEC_GROUP_TP, &e->tp)) != PTC_OK ||
        (rc = split(world, c, wrank, PTC_EXEC_GROUP_PAIR, &e->pair)) != PTC_OK)
        goto out_destroy;
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(world, MPI_TAG_UB, &ub, &flag);
    rc = rt_plan_build(&e->plan, e->sched, e->pp_i, flag && ub ? *ub : 32767);
    if (rc != PTC_OK)
        goto out_destroy;
    /* Callbacks the list needs. */
    for (size_t i = 0; i < e->plan.n; i++) {
        int op = e->plan.ops[i].a.op;
        if ((op == PTC_SCHED_B && !fns->backward) ||
            (op == PTC_SCHED_I && !fns->backward_input) ||
            (op == PTC_SCHED_W && !fns->backward_weight)) {
            rc = ptc_error_set(PTC_E_INVAL, "the schedule needs the %s callback",
                               op == PTC_SCHED_B   ? "backward"
                               : op == PTC_SCHED_I ? "backward_input"
                                                   : "backward_weight");
            goto out_destroy;
        }
    }
    size_t n = e->plan.n ? e->plan.n : 1;
    size_t ns = (size_t)e->plan.nchunks * (size_t)e->plan.mbs * RT_NSLOT;
    int nch = e->plan.nchunks;
    e->slots = ptc_calloc(ns, sizeof *e->slots);
    e->req = ptc_malloc(n * sizeof *e->req);
    e->state = ptc_calloc(n, 1);
    e->pending_sends = ptc_malloc(n * sizeof *e->pending_sends);
    e->tm = ptc_calloc(n, sizeof *e->tm);
    e->chunk_bwd_left = ptc_calloc((size_t)nch, sizeof *e->chunk_bwd_left);
    e->red_req = ptc_malloc((size_t)nch * sizeof *e->red_req);
    e->red_posted = ptc_calloc((size_t)nch, sizeof *e->red_posted);
    if (!e->slots || !e->req || !e->state || !e->pending_sends || !e->tm ||
        !e->chunk_bwd_left || !e->red_req || !e->red_posted) {
        rc = ptc_error_set(PTC_E_NOMEM, "runtime tables");
        goto out_destroy;
    }
    if (o->device == PTC_EXEC_DEVICE_CUDA && (rc = rt_dev_open(e)) != PTC_OK)
        goto out_destroy;
    /* Preallocate what the dry run says is live at once. */
    rc = pool_reserve(e, e->plan.peak + 1);
    if (rc != PTC_OK)
        goto out_destroy;
    for (size_t i = 0; i < e->plan.peak; i++) {
        void *b;
        if ((rc = pool_alloc_one(e, &b)) != PTC_OK)
            goto out_destroy;
        e->pool[e->npool++] = b;
        e->allocated++;
    }
    *out = e;
    return PTC_OK;
out_destroy:
    ptc_exec_destroy(e);
    return rc;
}

/* ---- progress and the watchdog ---------------------------------------------------- */

int rt_timeout(ptc_exec *e, size_t at, const char *what)
{
    char tok[48] = "end";
    if (at < e->plan.n)
        ptc_sched_action_format(&e->plan.ops[at].a, tok, sizeof tok);
    ptc_log(PTC_LOG_ERROR,
            "watchdog: rank %d (pp %d dp %d tp %d): no progress for %.1f s at action %zu "
            "of %zu (%s), %s",
            e->world_rank, e->pp_i, e->dp_i, e->tp_i, rt_now() - e->last_progress, at,
            e->plan.n, tok, what);
    int shown = 0;
    for (size_t i = 0; i < e->plan.n; i++) {
        if (e->state[i] != 1)
            continue;
        if (shown++ >= 16)
            continue;
        char pt[48];
        ptc_sched_action_format(&e->plan.ops[i].a, pt, sizeof pt);
        ptc_log(PTC_LOG_ERROR, "watchdog: rank %d: pending %s (action %zu, %s)",
                e->world_rank, pt, i,
                e->plan.ops[i].a.op == PTC_SCHED_SEND ? "send posted" : "receive posted");
    }
    if (shown > 16)
        ptc_log(PTC_LOG_ERROR, "watchdog: rank %d: and %d more pending", e->world_rank,
                shown - 16);
    if (shown == 0)
        ptc_log(PTC_LOG_ERROR, "watchdog: rank %d: no transfer pending", e->world_rank);
    return ptc_error_set(PTC_E_TIMEOUT, "watchdog fired on rank %d at action %zu (%s)",
                         e->world_rank, at, tok);
}

static int test_sends(ptc_exec *e)
{
    size_t k = 0;
    for (size_t i = 0; i < e->npending; i++) {
        int j = e->pending_sends[i], flag = 0;
        int mrc = MPI_Test(&e->req[j], &flag, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS)
            return mpi_err(mrc, "MPI_Test (send)");
        if (flag) {
            e->state[j] = 2;
            e->tm[j].end = rt_now() - e->t0;
            rt_pool_put(e, e->plan.ops[j].slot);
            e->last_progress = rt_now();
        } else {
            e->pending_sends[k++] = j;
        }
    }
    e->npending = k;
    return PTC_OK;
}

/* Wait for *r while keeping sends moving; back off from spinning to short
 * sleeps so that oversubscribed ranks leave the cores to those computing. */
static int rt_wait(ptc_exec *e, MPI_Request *r, size_t at, const char *what)
{
    double start = rt_now();
    for (long spin = 0;; spin++) {
        int flag = 0;
        int mrc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS)
            return mpi_err(mrc, what);
        if (flag) {
            e->last_progress = rt_now();
            return PTC_OK;
        }
        PTC_TRY(test_sends(e));
        if (spin < 64)
            continue;
        double now = rt_now();
        if (e->o.timeout > 0 && now - e->last_progress > e->o.timeout)
            return rt_timeout(e, at, what);
        if (now - start > 50e-6)
            rt_sleep(20e-6);
        else
            sched_yield();
    }
}

static int post_recv(ptc_exec *e, size_t k)
{
    int j = e->plan.recvs[k];
    const rt_op *o = &e->plan.ops[j];
    PTC_TRY(rt_pool_get(e, o->slot));
    int mrc = MPI_Irecv(e->slots[o->slot], (int)e->o.act_bytes, MPI_BYTE, o->a.peer, o->tag,
                        e->pipe, &e->req[j]);
    if (mrc != MPI_SUCCESS)
        return mpi_err(mrc, "MPI_Irecv");
    e->state[j] = 1;
    e->tm[j].start = rt_now() - e->t0;
    e->st.messages++;
    return PTC_OK;
}

/* Post receives in list order up to the window, or at least up to list
 * index `need` (a consumer is about to wait for it). */
static int post_recvs(ptc_exec *e, int need)
{
    while (e->next_recv < e->plan.nrecv) {
        int j = e->plan.recvs[e->next_recv];
        size_t open = e->next_recv - e->recvs_consumed;
        bool window = e->o.prepost <= 0 || open < (size_t)e->o.prepost;
        if (!window && j > need)
            break;
        PTC_TRY(post_recv(e, e->next_recv));
        e->next_recv++;
    }
    return PTC_OK;
}

static int post_send(ptc_exec *e, int j)
{
    if (e->state[j] != 0)
        return PTC_OK;
    const rt_op *o = &e->plan.ops[j];
    e->tm[j].start = rt_now() - e->t0;
    e->st.messages++;
    e->sends_total++;
    if (e->drop_send > 0 && e->sends_total == e->drop_send) {
        /* Test hook: pretend it went; the receiver will wait forever. */
        ptc_log(PTC_LOG_WARN, "rank %d: dropping send %ld on purpose (debug)",
                e->world_rank, e->sends_total);
        e->state[j] = 2;
        rt_pool_put(e, o->slot);
        return PTC_OK;
    }
    int mrc = MPI_Isend(e->slots[o->slot], (int)e->o.act_bytes, MPI_BYTE, o->a.peer, o->tag,
                        e->pipe, &e->req[j]);
    if (mrc != MPI_SUCCESS)
        return mpi_err(mrc, "MPI_Isend");
    e->state[j] = 1;
    e->pending_sends[e->npending++] = j;
    return PTC_OK;
}

/* ---- gradient reduction ------------------------------------------------------------ */

static bool chimera(const ptc_exec *e) { return ptc_sched_pipes(e->sched) == 2; }

static MPI_Comm reduce_comm(const ptc_exec *e) { return chimera(e) ? e->pair : e->dp; }

static int chunk_grads(ptc_exec *e, int chunk, float **g, size_t *n)
{
    *g = NULL;
    *n = 0;
    if (!e->fns.grads)
        return PTC_OK;
    PTC_TRY(e->fns.grads(e->fns.user, chunk, g, n));
    if (*n > (size_t)INT32_MAX)
        return ptc_error_set(PTC_E_RANGE, "gradient of %zu floats over INT_MAX", *n);
    return PTC_OK;
}

static int post_reduce(ptc_exec *e, int chunk)
{
    float *g;
    size_t n;
    PTC_TRY(chunk_grads(e, chunk, &g, &n));
    int size = 1;
    MPI_Comm_size(reduce_comm(e), &size);
    e->red_posted[chunk] = true;
    e->red_req[chunk] = MPI_REQUEST_NULL;
    if (n == 0 || size == 1)
        return PTC_OK;
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, reduce_comm(e),
                             &e->red_req[chunk]);
    if (mrc != MPI_SUCCESS)
        return mpi_err(mrc, "MPI_Iallreduce");
    return PTC_OK;
}

/* Reduce every chunk's gradient over its replicas. Chimera: each rank of a
 * pair holds the same two stages (as chunks 0/1 in opposite roles); they
 * are reduced in stage order so both ranks issue the same collectives. */
static int reduce_all(ptc_exec *e)
{
    int nch = e->plan.nchunks;
    if (chimera(e)) {
        int P = e->cfg.pp, lo = e->pp_i < P - 1 - e->pp_i ? e->pp_i : P - 1 - e->pp_i;
        if (lo == P - 1 - lo && nch == 2) {
            /* Middle rank of odd P: both chunks are the same stage. */
            float *g0, *g1;
            size_t n0, n1;
            PTC_TRY(chunk_grads(e, 0, &g0, &n0));
            PTC_TRY(chunk_grads(e, 1, &g1, &n1));
            if (n0 != n1)
                return ptc_error_set(PTC_E_INVAL, "chimera replicas differ in size");
            for (size_t i = 0; i < n0; i++)
                g0[i] += g1[i];
            PTC_TRY(post_reduce(e, 0));
            PTC_TRY(rt_wait(e, &e->red_req[0], e->plan.n, "gradient reduction"));
            memcpy(g1, g0, n0 * sizeof *g0);
            return PTC_OK;
        }
        int order[2] = {e->pp_i == lo ? 0 : 1, e->pp_i == lo ? 1 : 0};
        for (int k = 0; k < nch && k < 2; k++) {
            PTC_TRY(post_reduce(e, order[k]));
            PTC_TRY(rt_wait(e, &e->red_req[order[k]], e->plan.n, "gradient reduction"));
        }
        return PTC_OK;
    }
    for (int c = 0; c < nch; c++)
        if (!e->red_posted[c])
            PTC_TRY(post_reduce(e, c));
    for (int c = 0; c < nch; c++)
        PTC_TRY(rt_wait(e, &e->red_req[c], e->plan.n, "gradient reduction"));
    return PTC_OK;
}

/* ---- the step ---------------------------------------------------------------------- */

static double jitter(ptc_exec *e)
{
    e->rng ^= e->rng << 13;
    e->rng ^= e->rng >> 7;
    e->rng ^= e->rng << 17;
    return e->o.jitter * (double)(e->rng >> 11) * 0x1.0p-53;
}

int rt_run_compute(ptc_exec *e, size_t i)
{
    rt_op *o = &e->plan.ops[i];
    const ptc_sched_action *a = &o->a;
    bool host = e->o.device == PTC_EXEC_DEVICE_HOST;
    if (o->wait_recv >= 0 && host) { /* device mode: received before, in list order */
        PTC_TRY(post_recvs(e, o->wait_recv));
        if (e->state[o->wait_recv] == 1) {
            PTC_TRY(rt_wait(e, &e->req[o->wait_recv], i, "waiting for its input"));
            e->state[o->wait_recv] = 2;
            e->tm[o->wait_recv].end = rt_now() - e->t0;
        }
        e->recvs_consumed++;
    }
    if (o->out >= 0)
        PTC_TRY(rt_pool_get(e, o->out));
    if (e->o.jitter > 0)
        rt_sleep(jitter(e));
    void *in = o->in >= 0 ? e->slots[o->in] : NULL;
    void *out = o->out >= 0 ? e->slots[o->out] : NULL;
    double t = rt_now();
    e->tm[i].start = t - e->t0;
    int rc;
    switch (a->op) {
    case PTC_SCHED_F:
        rc = e->fns.forward(e->fns.user, a->chunk, a->mb, in, out);
        break;
    case PTC_SCHED_B:
        rc = e->fns.backward(e->fns.user, a->chunk, a->mb, in, out);
        break;
    case PTC_SCHED_I:
        rc = e->fns.backward_input(e->fns.user, a->chunk, a->mb, in, out);
        break;
    default:
        rc = e->fns.backward_weight(e->fns.user, a->chunk, a->mb);
        break;
    }
    double t1 = rt_now();
    e->tm[i].end = t1 - e->t0;
    e->st.compute_seconds += t1 - t;
    e->last_progress = t1;
    if (rc != PTC_OK)
        return rc;
    if (o->handoff >= 0) {
        e->slots[o->handoff] = e->slots[o->out];
        e->slots[o->out] = NULL;
    }
    rt_pool_put(e, o->free1);
    rt_pool_put(e, o->free2);
    for (int k = 0; host && k < o->nsend; k++)
        PTC_TRY(post_send(e, e->plan.send_of[o->first_send + k]));
    if (host && o->last_bwd_of_chunk && e->o.overlap_reduce && !chimera(e))
        PTC_TRY(post_reduce(e, a->chunk));
    return PTC_OK;
}

static int step_host(ptc_exec *e)
{
    int rc;
    e->npending = 0;
    e->next_recv = 0;
    e->recvs_consumed = 0;
    memset(e->state, 0, e->plan.n ? e->plan.n : 1);
    for (int c = 0; c < e->plan.nchunks; c++)
        e->red_posted[c] = false;
    PTC_TRY(post_recvs(e, -1));
    for (size_t i = 0; i < e->plan.n; i++) {
        rt_op *o = &e->plan.ops[i];
        if (e->npending)
            PTC_TRY(test_sends(e));
        switch (o->a.op) {
        case PTC_SCHED_RECV:
            PTC_TRY(post_recvs(e, (int)i));
            break;
        case PTC_SCHED_SEND:
            PTC_TRY(post_send(e, (int)i));
            break;
        default:
            if ((rc = rt_run_compute(e, i)) != PTC_OK)
                return rc;
        }
    }
    while (e->npending) {
        int j = e->pending_sends[0];
        PTC_TRY(rt_wait(e, &e->req[j], e->plan.n, "waiting for its sends"));
        e->req[j] = MPI_REQUEST_NULL; /* completed; test_sends frees it */
        PTC_TRY(test_sends(e));
    }
    return PTC_OK;
}

/* After a failed step nothing may reuse the buffers of requests still in
 * flight: receives are cancelled and completed; sends (which Open MPI cannot
 * cancel) are released and their buffers given up (leaked, never reused);
 * gradient reductions are released. The executor refuses further steps. */
static void rt_abandon(ptc_exec *e)
{
    e->failed = true;
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        return;
    for (size_t j = 0; j < e->plan.n; j++) {
        if (e->state[j] != 1 || e->req[j] == MPI_REQUEST_NULL)
            continue;
        const rt_op *o = &e->plan.ops[j];
        if (o->a.op == PTC_SCHED_RECV) {
            MPI_Cancel(&e->req[j]);
            MPI_Wait(&e->req[j], MPI_STATUS_IGNORE);
        } else {
            MPI_Request_free(&e->req[j]);
            e->slots[o->slot] = NULL;
        }
        e->state[j] = 2;
    }
    for (int c = 0; c < e->plan.nchunks; c++)
        if (e->red_posted[c] && e->red_req[c] != MPI_REQUEST_NULL)
            MPI_Request_free(&e->red_req[c]);
    e->npending = 0;
}

static int step_once(ptc_exec *e);

int ptc_exec_step(ptc_exec *e)
{
    if (e->failed)
        return ptc_error_set(PTC_E_INVAL, "a previous step of this executor failed; "
                                          "destroy it (the job should stop)");
    int rc = step_once(e);
    if (rc != PTC_OK)
        rt_abandon(e);
    return rc;
}

static int step_once(ptc_exec *e)
{
    int rc = PTC_OK;
    memset(&e->st, 0, sizeof e->st);
    e->peak_in_use = e->in_use;
    e->npending = 0;
    memset(e->state, 0, e->plan.n ? e->plan.n : 1);
    MPI_Request bar;
    int mrc = MPI_Ibarrier(e->world, &bar);
    if (mrc != MPI_SUCCESS)
        return mpi_err(mrc, "MPI_Ibarrier");
    e->last_progress = rt_now();
    PTC_TRY(rt_wait(e, &bar, 0, "in the barrier opening the step"));
    e->t0 = rt_now();
    e->last_progress = e->t0;
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        rc = rt_dev_step(e);
    else
        rc = step_host(e);
    if (rc != PTC_OK)
        return rc;
    double t_act = rt_now();
    e->st.actions_seconds = t_act - e->t0;
    if (e->o.device != PTC_EXEC_DEVICE_CUDA)
        PTC_TRY(reduce_all(e));
    e->st.reduce_seconds = rt_now() - t_act;
    if (e->fns.optimizer_step)
        PTC_TRY(e->fns.optimizer_step(e->fns.user));
    e->st.step_seconds = rt_now() - e->t0;
    e->st.buffers = e->allocated;
    e->st.peak_buffers = e->peak_in_use;
    return PTC_OK;
}

const ptc_exec_timing *ptc_exec_timings(const ptc_exec *e, size_t *n)
{
    *n = e->plan.n;
    return e->tm;
}

const ptc_sched_action *ptc_exec_actions(const ptc_exec *e, size_t *n)
{
    return ptc_sched_actions(e->sched, e->pp_i, n);
}

void ptc_exec_get_stats(const ptc_exec *e, ptc_exec_stats *st) { *st = e->st; }

void ptc_exec_coords(const ptc_exec *e, int *pp_i, int *dp_i, int *tp_i)
{
    *pp_i = e->pp_i;
    *dp_i = e->dp_i;
    *tp_i = e->tp_i;
}

MPI_Comm ptc_exec_tp_comm(const ptc_exec *e) { return e->tp; }

MPI_Comm ptc_exec_pipe_comm(const ptc_exec *e) { return e->pipe; }

void ptc_exec_testing_drop_send(ptc_exec *e, long n)
{
    e->drop_send = n;
}
