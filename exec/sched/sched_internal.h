/* Private parts of the schedule module (exec/sched*.c). Never installed. */
#ifndef PTC_SCHED_INTERNAL_H
#define PTC_SCHED_INTERNAL_H

#include "ptc/sched.h"
#include "base/util_internal.h"

typedef struct sched_list {
    ptc_sched_action *a;
    size_t n, cap;
} sched_list;

struct ptc_sched {
    int ranks, stages, pipes, mbs;
    char kind[32];
    int k;
    int *place_rank;  /* [pipes*stages] rank of (pipe, stage), -1 unplaced */
    int *place_chunk; /* [pipes*stages] */
    int **chunk_gs;   /* [ranks][nchunks] pipe*stages+stage, -1 unplaced */
    int *nchunks;     /* [ranks] */
    int *chunk_cap;   /* [ranks] */
    int *mb_pipe;     /* [mbs] */
    sched_list *lists; /* [ranks] */
    size_t total;      /* actions over all ranks */
};

static inline bool sched_is_compute(int op) { return op <= PTC_SCHED_W; }

/* Global stage id (pipe*stages+stage) of (rank, chunk), or -1. */
static inline int sched_gs(const ptc_sched *s, int rank, int chunk)
{
    if (chunk < 0 || chunk >= s->nchunks[rank])
        return -1;
    return s->chunk_gs[rank][chunk];
}

/* Result of a timing run over the compute actions (sched_sim.c). */
typedef struct sched_run {
    double **start, **end; /* [ranks][list index]; -1 for comm actions */
    double makespan;
    double *busy;          /* [ranks] */
    double *peak;          /* [ranks] whole-stage units */
    size_t messages;
    /* deadlock: per-rank index of the blocking action (n if finished) */
    size_t *stuck;
    bool deadlock;
} sched_run;

/* Run the compute actions of s with costs c; any SEND/RECV are skipped.
 * On PTC_E_DEADLOCK, r->stuck is filled and r->deadlock set. Free with
 * sched_run_free. Requires a checked placement and dependencies. */
int sched_run_exec(const ptc_sched *s, const ptc_sched_costs *c, sched_run *r);
void sched_run_free(const ptc_sched *s, sched_run *r);

/* Dependency and count check (sched_check.c). */
int sched_check_deps(const ptc_sched *s, ptc_sched_report *rep);
/* Fill rep with a deadlock description and grid from per-rank positions. */
int sched_report_deadlock(const ptc_sched *s, const size_t *stuck, ptc_sched_report *rep,
                          bool compute_view);

/* Report helper: set code, position and message (also ptc_error_set). */
int sched_report_set(ptc_sched_report *rep, int code, int rank, int step,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Growable text buffer. */
typedef struct sched_buf {
    char *p;
    size_t n, cap;
    int err;
} sched_buf;
void sched_buf_printf(sched_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An action's token ("F3", "SEND1") into buf; "" if it does not fit
 * (sched_deps.c). */
void sched_tokname(const ptc_sched_action *a, char *buf, size_t cap);

#endif
