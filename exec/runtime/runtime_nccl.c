/* Device buffers: NCCL communicators (ncclUniqueId broadcast over MPI) and
 * the device step. Built only with NCCL (file name *_nccl.c).
 *
 * NCCL point-to-point is stream-ordered and not tag-matched, so the device
 * step runs the list in order: each run of consecutive SEND/RECV actions is
 * one ncclGroupStart/End on the communication stream, completed before the
 * next compute. That is the blocking, per-peer-FIFO execution the validator
 * proves deadlock-free (a group only relaxes the order within the run). */
#include "base/nccl_internal.h"
#include "exec/runtime/runtime_internal.h"

int ptc_exec_nccl_comm_create(void **out, MPI_Comm comm)
{
    ncclComm_t c;
    int rc = ptc_nccl_comm_create(&c, comm);
    *out = rc == PTC_OK ? c : NULL;
    return rc;
}

void ptc_exec_nccl_comm_destroy(void *nccl_comm)
{
    if (nccl_comm)
        ncclCommDestroy((ncclComm_t)nccl_comm);
}

int rt_dev_open(ptc_exec *e)
{
    cudaStream_t st;
    cudaError_t ce = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (ce != cudaSuccess)
        return ptc_cuda_error(ce, "cudaStreamCreate");
    e->stream = st;
    /* Fixed order on every rank: pipeline, then the gradient group. */
    PTC_TRY(ptc_exec_nccl_comm_create(&e->nccl_pipe, e->pipe));
    MPI_Comm red = ptc_sched_pipes(e->sched) == 2 ? e->pair : e->dp;
    PTC_TRY(ptc_exec_nccl_comm_create(&e->nccl_red, red));
    return PTC_OK;
}

void rt_dev_close(ptc_exec *e)
{
    ptc_exec_nccl_comm_destroy(e->nccl_pipe);
    ptc_exec_nccl_comm_destroy(e->nccl_red);
    e->nccl_pipe = e->nccl_red = NULL;
    if (e->stream)
        cudaStreamDestroy((cudaStream_t)e->stream);
    e->stream = NULL;
}

/* Wait for the communication stream, with the watchdog. */
static int dev_wait(ptc_exec *e, size_t at, const char *what)
{
    for (;;) {
        cudaError_t ce = cudaStreamQuery((cudaStream_t)e->stream);
        if (ce == cudaSuccess) {
            e->last_progress = rt_now();
            return PTC_OK;
        }
        if (ce != cudaErrorNotReady)
            return ptc_cuda_error(ce, what);
        if (e->o.timeout > 0 && rt_now() - e->last_progress > e->o.timeout)
            return rt_timeout(e, at, what);
    }
}

int rt_dev_step(ptc_exec *e)
{
    ncclComm_t comm = (ncclComm_t)e->nccl_pipe;
    cudaStream_t st = (cudaStream_t)e->stream;
    size_t i = 0;
    while (i < e->plan.n) {
        if (sched_is_compute_op(e->plan.ops[i].a.op)) {
            PTC_TRY(rt_run_compute(e, i));
            i++;
            continue;
        }
        size_t j = i;
        ncclResult_t r = ncclGroupStart();
        for (; r == ncclSuccess && j < e->plan.n && !sched_is_compute_op(e->plan.ops[j].a.op);
             j++) {
            rt_op *o = &e->plan.ops[j];
            e->tm[j].start = rt_now() - e->t0;
            e->state[j] = 1;
            e->st.messages++;
            if (o->a.op == PTC_SCHED_RECV) {
                PTC_TRY(rt_pool_get(e, o->slot));
                r = ncclRecv(e->slots[o->slot], e->o.act_bytes, ncclChar, o->a.peer, comm, st);
            } else {
                r = ncclSend(e->slots[o->slot], e->o.act_bytes, ncclChar, o->a.peer, comm, st);
            }
        }
        ncclResult_t r2 = ncclGroupEnd();
        if (r != ncclSuccess || r2 != ncclSuccess)
            return ptc_nccl_error(r != ncclSuccess ? r : r2, "grouped send/recv");
        PTC_TRY(dev_wait(e, i, "in a grouped send/recv"));
        for (size_t k = i; k < j; k++) {
            e->state[k] = 2;
            e->tm[k].end = rt_now() - e->t0;
            if (e->plan.ops[k].a.op == PTC_SCHED_SEND)
                rt_pool_put(e, e->plan.ops[k].slot);
        }
        i = j;
    }
    /* Gradient reduction over the replicas, chunks in stage order. */
    int nch = e->plan.nchunks, size = 1;
    MPI_Comm_size(ptc_sched_pipes(e->sched) == 2 ? e->pair : e->dp, &size);
    if (ptc_sched_pipes(e->sched) == 2 && 2 * e->pp_i + 1 == e->cfg.pp)
        return ptc_error_set(PTC_E_UNSUPPORTED,
                             "chimera with an odd number of stages on device buffers");
    if (size == 1 || !e->fns.grads)
        return PTC_OK;
    int P = e->cfg.pp;
    bool lo = e->pp_i <= P - 1 - e->pp_i;
    for (int k = 0; k < nch; k++) {
        int c = ptc_sched_pipes(e->sched) == 2 ? (lo ? k : 1 - k) : k;
        float *g;
        size_t n;
        PTC_TRY(e->fns.grads(e->fns.user, c, &g, &n));
        if (!n)
            continue;
        ncclResult_t r = ncclAllReduce(g, g, n, ncclFloat, ncclSum, (ncclComm_t)e->nccl_red, st);
        if (r != ncclSuccess)
            return ptc_nccl_error(r, "ncclAllReduce of gradients");
    }
    return dev_wait(e, e->plan.n, "in the gradient reduction");
}
