/* Private parts of the pipeline runtime (exec/runtime/runtime*.c). Never installed. */
#ifndef PTC_RUNTIME_INTERNAL_H
#define PTC_RUNTIME_INTERNAL_H

#include "ptc/exec.h"
#include "base/mpi_internal.h"
#include "base/util_internal.h"
#include "ptc/build_config.h"

/* Boundary-buffer slots of (chunk, micro-batch): */
enum {
    RT_ACT_IN = 0,   /* input activation of F (received or handed over) */
    RT_ACT_OUT = 1,  /* output of F, until sent or handed over */
    RT_GRAD_IN = 2,  /* dout of B/I (received or handed over) */
    RT_GRAD_OUT = 3, /* dinp written by B/I, until sent or handed over */
    RT_NSLOT = 4,
};

/* One action of the rank's list, resolved. */
typedef struct rt_op {
    ptc_sched_action a;
    int in, out;        /* compute: input slot (F: ACT_IN, B/I: GRAD_IN) and
                           output slot (F: ACT_OUT, B/I: GRAD_OUT), -1 none */
    int act;            /* B/I: the ACT_IN slot (kept for W), -1 none */
    int handoff;        /* compute: slot its output moves to locally, -1 none */
    int free1, free2;   /* slots released after the action, -1 none */
    int wait_recv;      /* compute: RECV action filling `in`, -1 none */
    int wait_recv2;     /* compute: RECV action filling `act` (B/I), -1 none */
    int slot;           /* SEND/RECV: the slot moved */
    int tag;            /* SEND/RECV */
    int first_send, nsend; /* compute: its SEND actions, in send_of[] */
    int last_bwd_of_chunk; /* compute: 1 if the chunk's last B/W of the step */
} rt_op;

typedef struct rt_plan {
    rt_op *ops;
    size_t n;
    int *send_of;       /* SEND action indexes grouped by producer */
    int *recvs;         /* RECV action indexes in list order */
    size_t nrecv, nsend, handoffs;
    int nchunks, mbs;
    size_t peak, final;
} rt_plan;

/* Build the plan of `rank` of s (which must have explicit communication).
 * tag_ub: largest MPI tag (tags unique per message). */
int rt_plan_build(rt_plan *p, const ptc_sched *s, int rank, int tag_ub);
void rt_plan_free(rt_plan *p);

static inline bool sched_is_compute_op(int op) { return op <= PTC_SCHED_W; }

static inline int rt_slot(int nchunks, int mbs, int chunk, int mb, int kind)
{
    (void)nchunks;
    return ((chunk * mbs) + mb) * RT_NSLOT + kind;
}

struct ptc_exec {
    ptc_sched *sched;      /* owned copy with explicit communication */
    ptc_config cfg;
    ptc_exec_stage fns;
    ptc_exec_opts o;
    int world_rank, pp_i, dp_i, tp_i;
    MPI_Comm world, pipe, dp, tp, pair;
    rt_plan plan;
    void **slots;          /* [nchunks*mbs*4] buffer or NULL */
    void **pool;           /* free buffers */
    size_t npool, pool_cap, allocated, in_use, peak_in_use;
    MPI_Request *req;      /* [n] per SEND/RECV action */
    unsigned char *state;  /* [n] 0 idle, 1 posted, 2 done */
    int *pending_sends;
    size_t npending;
    size_t next_recv;      /* index into plan.recvs of the next to post */
    size_t recvs_consumed;
    ptc_exec_timing *tm;
    double t0, last_progress;
    uint64_t rng;
    int *chunk_bwd_left;   /* [nchunks] backward-weight actions left */
    MPI_Request *red_req;  /* [nchunks] */
    bool failed;           /* a step failed: requests abandoned, no more steps */
    bool *red_posted;
    ptc_exec_stats st;
    /* device mode */
    void *nccl_pipe, *nccl_red;
    void *stream;
};

double rt_now(void);
/* One boundary buffer (host or device) / free it. */
int rt_pool_alloc_one(ptc_exec *e, void **out);
void rt_pool_free_one(ptc_exec *e, void *p);
/* Room in the pool for @p want buffers. */
int rt_pool_reserve(ptc_exec *e, size_t want);
/* Take a pool buffer into `slot` / give the slot's buffer back. */
int rt_pool_get(ptc_exec *e, int slot);
void rt_pool_put(ptc_exec *e, int slot);
/* Run compute action i (host mode also waits for its input and posts its
 * sends). */
int rt_run_compute(ptc_exec *e, size_t i);
/* Log the watchdog report and return PTC_E_TIMEOUT. */
int rt_timeout(ptc_exec *e, size_t at, const char *what);
/* Wait for @p r with the watchdog (at: the action waited at). */
int rt_wait(ptc_exec *e, MPI_Request *r, size_t at, const char *what);
/* A step's actions on host buffers; the gradient reductions after them. */
int rt_step_host(ptc_exec *e);
int rt_reduce_all(ptc_exec *e);
/* After a failed step: release requests in flight; no further steps. */
void rt_abandon(ptc_exec *e);

#if PTC_WITH_NCCL
int rt_dev_open(ptc_exec *e);
void rt_dev_close(ptc_exec *e);
int rt_dev_alloc(ptc_exec *e, size_t bytes, void **out);
void rt_dev_free(ptc_exec *e, void *p);
int rt_dev_step(ptc_exec *e);
#else
static inline int rt_dev_open(ptc_exec *e)
{
    (void)e;
    return ptc_error_set(PTC_E_UNSUPPORTED, "device buffers need a build with nccl");
}
static inline void rt_dev_close(ptc_exec *e) { (void)e; }
static inline int rt_dev_alloc(ptc_exec *e, size_t bytes, void **out)
{
    (void)e;
    (void)bytes;
    *out = NULL;
    return ptc_error_set(PTC_E_UNSUPPORTED, "device buffers need a build with nccl");
}
static inline void rt_dev_free(ptc_exec *e, void *p)
{
    (void)e;
    (void)p;
}
static inline int rt_dev_step(ptc_exec *e)
{
    (void)e;
    return ptc_error_set(PTC_E_UNSUPPORTED, "device buffers need a build with nccl");
}
#endif

#endif
