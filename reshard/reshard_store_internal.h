/* Private parts shared by the store resharder's two executors
 * (reshard_store.c: threads on one host; reshard_store_mpi.c: MPI processes).
 * Never installed. The MPI executor has a file of its own so that a program
 * that only reshards with threads links no MPI (the light `ptc`). */
#ifndef PTC_RESHARD_STORE_INTERNAL_H
#define PTC_RESHARD_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "ptc/layout.h"
#include "ptc/plan.h"
#include "ptc/reshard.h"
#include "ptc/store.h"


typedef struct rs_ctx {
    ptc_store *s;
    ptc_store_reader *rd;
    ptc_layout *ls, *lt;
    ptc_rules *rules;      /* the target layout's (ptc_layout_version_rules) */
    ptc_plan *plan;
    const ptc_transfer *xf;
    size_t nxf;
    ptc_dtype *out_dt;    /* per tensor */
    size_t nt;
    int ws, wt;
    ptc_reshard_options o;
    ptc_store_writer *w;
    const uint8_t **net;  /* MPI: per transfer, its received bytes (row-major box) */
    size_t t_lo, t_hi;    /* the tensors written in this pass (MPI: one round) */
    const int *my_ranks;  /* target ranks this process writes */
    size_t nmy;
    atomic_uint_fast64_t bytes_written, shards_written, shards_reused, shards_aliased;
    pthread_mutex_t err_lock; /* guards err and the first code stored in rc */
    atomic_int rc;            /* first failure; read without the lock to stop early */
    char err[512];
} rs_ctx;

double rs_now_s(void);
void rs_set_err(rs_ctx *c, int rc);
/* src_host/dst_host NULL: one host, the whole plan (threads); else the
 * process of every rank (MPI), and the plan keeps process @p me's part. */
int rs_ctx_open(rs_ctx *c, ptc_store *s, uint64_t version, const ptc_config *to,
                    const ptc_reshard_options *opts, const int *src_host, const int *dst_host,
                    int me);
void rs_ctx_close(rs_ctx *c);
/* Index of the first transfer into (tensor t, target rank r) or after it:
 * transfers [rs_first(t, r), rs_first(t, r + 1)) go to (t, r), and
 * [rs_first(t, 0), rs_first(t + 1, 0)) are tensor t's. */
size_t rs_first(const rs_ctx *c, size_t t, int r);
int rs_add_tensors(rs_ctx *c, bool metadata);
int rs_write_options(rs_ctx *c, ptc_store_write_options *wo, char *cfg, size_t cap);
int rs_run_pool(rs_ctx *c);
void rs_fill_result(rs_ctx *c, ptc_reshard_result *res, uint64_t version, double t0);
int rs_figures(rs_ctx *c, ptc_reshard_result *res);

#endif
