/* The pipeline runtime's engine on host buffers: non-blocking MPI
 * point-to-point in the order of the plan, a buffer pool, gradient
 * reduction, a watchdog. The API face (create, step, destroy) is
 * runtime_create.c; device buffers are runtime_nccl.c. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "exec/runtime/runtime_internal.h"

double rt_now(void)
{
    return ptc_mpi_clock(); /* the clock of the waits' back-off */
}

static void rt_sleep(double sec)
{
    if (sec <= 0)
        return;
    struct timespec ts = {(time_t)sec, (long)((sec - floor(sec)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ---- buffer pool ------------------------------------------------------------ */

int rt_pool_alloc_one(ptc_exec *e, void **out)
{
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        return rt_dev_alloc(e, e->o.act_bytes, out);
    *out = ptc_malloc(e->o.act_bytes);
    if (!*out)
        return ptc_error_set(PTC_E_NOMEM, "boundary buffer of %zu bytes", e->o.act_bytes);
    return PTC_OK;
}

void rt_pool_free_one(ptc_exec *e, void *p)
{
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        rt_dev_free(e, p);
    else
        ptc_free(p);
}

int rt_pool_reserve(ptc_exec *e, size_t want)
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
        PTC_TRY(rt_pool_reserve(e, e->allocated + 1));
        PTC_TRY(rt_pool_alloc_one(e, &b));
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
            return ptc_mpi_error(mrc, "MPI_Test (send)");
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
 * sleeps (ptc_mpi_idle) so that oversubscribed ranks leave the cores to
 * those computing. */
int rt_wait(ptc_exec *e, MPI_Request *r, size_t at, const char *what)
{
    double start = rt_now();
    for (long spin = 0;; spin++) {
        int flag = 0;
        int mrc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS)
            return ptc_mpi_error(mrc, what);
        if (flag) {
            e->last_progress = rt_now();
            return PTC_OK;
        }
        PTC_TRY(test_sends(e));
        if (spin < PTC_MPI_SPINS)
            continue;
        if (e->o.timeout > 0 && rt_now() - e->last_progress > e->o.timeout)
            return rt_timeout(e, at, what);
        ptc_mpi_idle(spin, start);
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
        return ptc_mpi_error(mrc, "MPI_Irecv");
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
    if (ptc_fault_send_hit()) {
        /* fault injection (test build): pretend it went; the receiver waits */
        ptc_log(PTC_LOG_WARN, "rank %d: dropping a send on purpose (fault injection)",
                e->world_rank);
        e->state[j] = 2;
        rt_pool_put(e, o->slot);
        return PTC_OK;
    }
    int mrc = MPI_Isend(e->slots[o->slot], (int)e->o.act_bytes, MPI_BYTE, o->a.peer, o->tag,
                        e->pipe, &e->req[j]);
    if (mrc != MPI_SUCCESS)
        return ptc_mpi_error(mrc, "MPI_Isend");
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
        return ptc_mpi_error(mrc, "MPI_Iallreduce");
    return PTC_OK;
}

/* Reduce every chunk's gradient over its replicas. Chimera: each rank of a
 * pair holds the same two stages (as chunks 0/1 in opposite roles); they
 * are reduced in stage order so both ranks issue the same collectives. */
int rt_reduce_all(ptc_exec *e)
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

int rt_step_host(ptc_exec *e)
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
void rt_abandon(ptc_exec *e)
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
