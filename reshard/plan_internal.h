/* Private parts of the planner (reshard/plan.c, plan_tensor.c,
 * plan_bound.c). Never installed. docs/reshard.md, "How the planner
 * scales", explains the structure. */
#ifndef PTC_PLAN_INTERNAL_H
#define PTC_PLAN_INTERNAL_H

#include "reshard/reshard_internal.h"

/* One distinct shard of a tensor in one layout: the ranks holding it are
 * the positions q (dp*T + tp inside a stage) with gq[q] == its index, on
 * every stage that holds the tensor. Groups are numbered by owner (their
 * lowest rank), as ptc_layout_groups numbers them. */
typedef struct pl_group {
    int owner;          /* lowest rank holding the shard */
    ptc_shard sh;       /* the owner's shard */
    int64_t vol;        /* elements of the local tensor */
    uint32_t p0, np;    /* its pieces: side.pc[p0 .. p0+np) */
    uint32_t h0, nh;    /* source side: its holders, side.hold[h0 .. h0+nh), increasing */
    uint32_t c0, nc;    /* target side: candidates of its pieces (see pl_work.cand) */
    bool cand_done;     /* target side: candidates computed */
    bool heap_done;     /* source side: side.heap[h0 .. h0+nh) is a heap */
} pl_group;

/* One layout's view of the tensor being planned. Arrays grow and are
 * reused from tensor to tensor. */
typedef struct pl_side {
    const ptc_layout *l;
    int D, T, P, per, W;   /* per = D*T ranks per stage */
    int *stg;              /* stages holding the tensor, increasing */
    int nstg;
    uint8_t *onstg;        /* per stage: holds the tensor */
    int *gq;               /* per position q < nq: group index (pl_gq) */
    int nq;                /* per when zero-sharded, else T: shards repeat over dp */
    pl_group *g;
    size_t ng, capg;
    ptc_piece *pc;         /* pieces of every group, group by group */
    uint32_t *pgrp;        /* group of each piece */
    size_t npc, cappc, cappgrp;
    int *hold;             /* source side: holders of every group */
    int *heap;             /* source side: per group, a heap of its holders */
    size_t caphold, capheap;
    bool implicit;         /* holders not listed (one host: owner, next_holder) */
    uint32_t *idx;         /* piece ids sorted by lo[kdim] (when indexed) */
    int kdim;              /* dimension of the index (-1: no dims) */
    int64_t maxlen;        /* longest piece along kdim */
} pl_side;

/* Group of position q (< per) of a stage holding the tensor. */
static inline int pl_gq(const pl_side *sd, int q)
{
    return sd->gq[sd->nq == sd->per ? q : q % sd->T];
}

/* A box received over the network into a host: where it landed. */
typedef struct pl_recv {
    ptc_piece at;          /* box and its place in the receiving rank's buffer */
    int rank;              /* receiving target rank */
    uint64_t xf;           /* index of the NETWORK transfer among all */
    uint64_t kept;         /* its index among the kept transfers, or UINT64_MAX */
    int64_t next;          /* next entry of the same host, -1 */
} pl_recv;

/* What a plan is made of and what it keeps (plan.c). */
struct ptc_plan {
    const ptc_layout *src, *dst;
    int ws, wt, nhosts;
    bool no_reuse;
    bool keep_all;         /* a whole plan with its transfers */
    bool per_proc;         /* keep what process `proc` sends or receives */
    int proc;
    int *src_host, *dst_host;  /* per rank */
    const int *src_proc, *dst_proc; /* during ptc_plan_create only */
    bool src_mono, dst_mono;   /* host maps non-decreasing in rank */
    int *src_first;        /* per host: lowest source rank on it (src_mono), or -1 */
    int *src_count;        /* per host: source ranks on it */
    ptc_transfer *xf;      /* kept transfers */
    size_t nxf, capxf;
    uint64_t *reused;      /* kept reused shards, keys t*wt + r, increasing */
    size_t nreused, capreused;
    ptc_plan_stats st;
    ptc_plan_host_stats *hs; /* per host */
};

/* Working state of ptc_plan_create, reused from tensor to tensor. */
typedef struct pl_work {
    pl_side s, d;          /* source, target */
    uint64_t *send_load;   /* per source rank: NETWORK bytes sent */
    uint64_t *recv_load;   /* per target rank: NETWORK bytes received */
    uint64_t nall;         /* transfers so far, kept or not */
    pl_recv *rv;           /* received boxes of this tensor */
    size_t nrv, caprv;
    int64_t *rv_head, *rv_tail; /* per host: first / last entry, -1 */
    int *touched;          /* hosts with entries this tensor */
    size_t ntouched, captouched;
    uint32_t *cand;        /* per target piece: overlapping source piece ids */
    size_t ncand, capcand;
    uint32_t *cand_off;    /* per target piece: [start, end) into cand */
    size_t capcand_off;
    uint32_t *qbuf;        /* scratch for an index query */
    size_t nq, capqbuf;
    bool one_host_proc;    /* a per-process plan with every rank on one host */
    int *own_src, *own_dst; /* its source and target ranks, increasing */
    size_t n_own_src, n_own_dst;
    int *rk;               /* target ranks to plan for the tensor */
    size_t nrk, caprk;
    ptc_box *wl, *tmp;     /* the work list of boxes still to provide */
    size_t nwl, capwl, captmp;
    void *lb;              /* the lower bound's scratch (plan_bound.c) */
} pl_work;

/* plan_tensor.c: load tensor t's groups and their pieces into @p sd, and
 * what @p what asks for. */
#define PL_HOLDERS 1u /* every group's holder list (and heap room) */
#define PL_INDEX 2u   /* the index of the pieces */
int pl_side_load(pl_side *sd, size_t t, unsigned what);
void pl_side_free(pl_side *sd);
int pl_plan_tensor(ptc_plan *p, pl_work *w, size_t t);

/* plan_bound.c: need, have and need - have of every host for tensor t
 * (the groups of both sides loaded). */
int pl_lower_bound(ptc_plan *p, pl_work *w, size_t t);
void pl_bound_free(pl_work *w);

/* Whether the plan keeps the transfers between these two processes' ranks
 * (plan.c). */
bool pl_keep(const ptc_plan *p, int kind, int src_rank, int dst_rank);

#endif
