/* Private parts of the training job (exec/model/train*.c). Never installed. */
#ifndef PTC_TRAIN_INTERNAL_H
#define PTC_TRAIN_INTERNAL_H

#include <pthread.h>

#include "ptc/ckpt.h"
#include "ptc/plan.h"
#include "ptc/store.h"
#include "ptc/train.h"
#include "base/mpi_internal.h"
#include "base/util_internal.h"

/* Where a job's tokens come from (train_data.c). */
enum train_data_kind {
    DATA_SYNTHETIC, /* from the seed */
    DATA_TOKENS,    /* windows of a raw u16 token file */
    DATA_DATASET,   /* a dataset of the job's store, by the epoch order */
    DATA_MOUNT,     /* the step files of a mounted dataset view */
};

/* The position of a job in its data: epoch E, the start X of the current
 * run of steps (a `start-X` of the view) and the steps taken since. */
typedef struct train_pos {
    uint64_t epoch, start, steps;
} train_pos;

typedef struct train_data {
    enum train_data_kind kind;
    int tokens, vocab;
    int64_t per_step;        /* global micro-batches per step (D * M) */
    int M, D, dp_rank;
    uint64_t seed;
    /* synthetic, tokens */
    uint16_t *tok;
    size_t ntok;
    /* dataset, mount: the epoch order's view of the data */
    char name[256];
    char dir[4096];          /* mount: MNT/datasets/NAME */
    uint64_t samples, gen;   /* N; the dataset's catalog id (counts) */
    bool bytes;              /* records are bytes (lines, jsonl, ...), not u16 tokens */
    ptc_store_dataset *ds;   /* dataset: open on the reading process */
    ptc_store_block_cache *blocks; /* its decoded zstd blocks (compressed only) */
    struct ptc_dataset_counter *counter;
    bool reader;             /* this process reads its replica's records */
    MPI_Comm group;          /* the processes of this data-parallel replica */
    train_pos pos;           /* of the step about to run (train_data_next) */
    uint64_t step_epoch, step_start, step_index; /* of the step being run */
    uint16_t *buf;           /* this step's records of this replica: M x (tokens+1) */
} train_data;

/* Parse --data ("synthetic", "tokens:FILE", "dataset:NAME", "mount:DIR"). */
int train_data_kind_parse(const char *spec, enum train_data_kind *kind);

/* Open the data source of a job. @p store: the job's store (dataset:).
 * Collective over @p world (the replica groups are split from it). */
int train_data_open(train_data *d, const ptc_train_opts *o, ptc_store *store, MPI_Comm world,
                    int dp_rank);
/* Load the records of the next step (every process of a replica calls it;
 * the replica's reader reads and broadcasts). Advances the epoch when the
 * next global batch would not fit in it (a partial last batch is dropped). */
int train_data_next(train_data *d);
/* The step ran: advance the position. */
void train_data_done(train_data *d);
/* Make the served counts durable (the store path; no-op otherwise). */
int train_data_flush(train_data *d);
void train_data_close(train_data *d);
/* The model's data callback over @p d. */
int train_data_fn(void *user, int64_t step, int64_t gmb, int32_t *ids, int32_t *targets, int n);

/* The layout a job saves under (train_ckpt.c): its model's tensors with
 * their AdamW moments, the preset ptc-mlp, dp = D x pipes, tp, pp = the
 * schedule's stages, zero. */
int train_ckpt_layout(const ptc_train_opts *o, const ptc_sched *s, ptc_layout **layout,
                      ptc_rules **rules);
/* This process's layout ranks (one per chunk) and their local buffers:
 * nranks x ntensors pointers into the model, NULL where a rank holds none.
 * Free both with ptc_free. */
int train_ckpt_buffers(const ptc_train_opts *o, const ptc_sched *s, const ptc_exec_model *m,
                       const ptc_layout *l, int pp_i, int dp_i, int tp_i, int **ranks,
                       size_t *nranks, void ***bufs);

/* ---- the job (train_prepare.c) ------------------------------------------------------- */

struct ptc_train {
    ptc_train_opts o;
    ptc_sched *sched;
};

/* Generate or read the schedule of @p o, then validate it against pp and
 * the micro-batches. No communication. */
int train_make_schedule(const ptc_train_opts *o, ptc_sched **out);

/* Every process agrees on @p rc: the same return everywhere, carrying the
 * failing process's message. Collective over @p comm. */
static inline int train_agree(MPI_Comm comm, int rc)
{
    return ptc_mpi_agree(comm, rc, "training");
}

/* ---- one configuration's running state (train_seg.c) ------------------------------------ */

/* The first world(cfg) processes of the world run it; the others wait for
 * process 0's word. Lives on the heap (train_seg_new): the model's data
 * callback holds &seg->ds, so a segment is never copied once open. */
typedef struct train_seg {
    ptc_config cfg;
    ptc_sched *sched;        /* owned */
    bool active;
    MPI_Comm comm;           /* the active processes; MPI_COMM_NULL when idle */
    int rank, pp_i, dp_i, tp_i, G;
    ptc_exec *e;
    ptc_exec_model *model;
    ptc_exec_model_cuda *gmodel;
    ptc_exec_fake *fake;
    ptc_sched_sim *sim;
    train_data ds;
    ptc_layout *layout;      /* the layout its state is saved and moved under */
    ptc_rules *rules;
    int *ranks;
    void **bufs;
    size_t nranks;
    double *losses, *all;
} train_seg;

train_seg *train_seg_new(void);
void train_seg_free(train_seg *g);
/* The model, data and runtime of configuration o->cfg with schedule
 * @p sched (taken). Collective over @p world; every process returns the
 * same code. @p state: build the layout and buffers of the job's state.
 * @p rc: an earlier failure of this process, carried into the agreement. */
int train_seg_open(train_seg *g, const ptc_train_opts *o, ptc_sched *sched, ptc_store *store,
                   MPI_Comm world, int wrank, bool state, int rc);

/* ---- step boundaries, the control file and resizes (train_resize.c) -------------------- */

/* What process 0 decides at a step boundary, sent to every process. */
enum { TRAIN_GO = 0, TRAIN_RESIZE = 1, TRAIN_STOP = 2, TRAIN_FINISH = 3 };
typedef struct train_decision {
    int32_t rc, action;
    int64_t step;
    char reason[16];
    char cfg[256];
} train_decision;

/* Process 0's look at the control file across boundaries: the last
 * problem it said (said once, not at every step). */
typedef struct train_control {
    char said[512];
} train_control;

/* Process 0, after step @p k - 1 ran (k < the last): a planned resize at
 * @p k (resize_step[@p next_resize]), a stop (o->stop), or the control
 * file's request; TRAIN_GO when none. A control file that holds no request
 * the job can carry out on its @p wsize processes (on @p hosts:
 * train_check_resize) is said (ptc_log) and ignored: the decision never
 * fails. */
void train_decide(const ptc_train_opts *o, int wsize, const char *hosts, int64_t k,
                  int next_resize, train_control *c, train_decision *d);
/* Parse a control file's complete text (NUL-terminated): one line, blanks
 * around it and a final CR allowed, `stop` (*@p action TRAIN_STOP) or
 * `resize CFG` (TRAIN_RESIZE, *@p cfg parsed by ptc_config_parse). PTC_OK;
 * PTC_E_INVAL or ptc_config_parse's code, with a one-line message that
 * quotes the line. */
int train_request_parse(const char *text, int *action, ptc_config *cfg);
/* Can the job of @p o move to configuration @p to on @p wsize processes?
 * Checked alone (no communication): the processes, the cuda model's limits,
 * the schedule, the model's stages and the layout of the state; with
 * --replicas K and @p hosts (each world process's host name,
 * TRAIN_HOST_NAME bytes apart; NULL: not checked), that the processes
 * running @p to (world ranks 0..W-1) are on more than K hosts, which every
 * later save needs. PTC_OK, or the reason (PTC_E_CONFIG, PTC_E_UNSUPPORTED,
 * the schedule's codes). */
int train_check_resize(const ptc_train_opts *o, const ptc_config *to, int wsize,
                       const char *hosts);
/* Process 0: send @p d to the waiting processes (world ranks nactive..). */
int train_tell_waiting(MPI_Comm world, int nactive, const train_decision *d);
/* A waiting process: sleep until process 0 says what comes next. */
int train_wait_word(MPI_Comm world, train_decision *d);
/* Move the job from segment *@p gp to configuration @p to: the new
 * segment's model is built, the state moves by the minimal plan between the
 * old and the new layout, the old segment is closed; *@p jo becomes the new
 * running options. @p rep (process 0) receives the figures. Collective over
 * @p world. */
int train_resize(ptc_train_opts *jo, train_seg **gp, const ptc_config *to, ptc_store *store,
                 MPI_Comm world, int wrank, ptc_train_resize *rep);

/* ---- the watchdog outside the runtime's step (train_watch.c) ---------------------------- */

/* A thread that calls @p fn (or logs) when a phase entered with
 * train_watch_enter lasts longer than @p timeout seconds (once). NULL (and
 * PTC_OK) when @p timeout <= 0; every call below takes NULL. */
typedef struct train_watch train_watch;
int train_watch_start(train_watch **out, double timeout, int wrank, ptc_train_timeout_fn fn,
                      void *user);
/* A wait begins: @p phase (static text, "saving the state") at @p step. */
void train_watch_enter(train_watch *w, const char *phase, int64_t step);
/* No wait to watch (the runtime's step watches itself; a waiting process
 * waits as long as the others train). */
void train_watch_leave(train_watch *w);
void train_watch_stop(train_watch *w);

/* ---- the job's state in its store (train_ckpt.c) ---------------------------------------- */

/* Open the job's store on every process (process 0 first, making it when
 * @p create, then the others). Collective; the same code everywhere. */
/* ---- a store on each host (train_hosts.c; ptc train --replicas) ------------------------- */

/* This process's host among the processes of @p comm (by MPI processor
 * name; hosts numbered in the order of their lowest process). Collective. */
int train_hosts_index(MPI_Comm comm, int *host, int *nhosts);
/* Bytes per host name in train_hosts_names' table (a NUL-terminated MPI
 * processor name). */
#define TRAIN_HOST_NAME (MPI_MAX_PROCESSOR_NAME + 1)
/* The MPI processor name of every process of @p comm into a fresh *@p names
 * (size x TRAIN_HOST_NAME bytes, ptc_free). Collective; agreed. */
int train_hosts_names(MPI_Comm comm, char **names);
/* How many distinct hosts the first @p n names of @p names (as above) are,
 * and the first of them as text ("a, b, c" or "a, b, ... (5 hosts)") into
 * @p buf. */
int train_hosts_count(const char *names, int n, char *buf, size_t cap);
/* Load version @p version (across hosts) into the ranks' buffers (table
 * nranks x ntensors of @p dst): each source rank read from one host whose
 * store holds it (its own part or a replica), the bytes moved by the
 * minimal plan between the hosts (figures into @p stats, may be NULL).
 * Collective over @p comm; every process returns the same code. */
int train_hosts_load(MPI_Comm comm, ptc_store *s, uint64_t version, const ptc_layout *dst,
                     const int *ranks, size_t nranks, void *const *bufs, ptc_plan_stats *stats);

int train_state_open(const ptc_train_opts *o, bool create, MPI_Comm world, int wrank,
                     ptc_store **out);
/* Resolve the version to resume from (process 0: the newest unless given)
 * and read its record on every process, checking that it holds this job's
 * model. Collective. @p rc: an earlier failure of this process. */
int train_state_resume_record(ptc_store *store, const ptc_train_opts *o, MPI_Comm world,
                              int wrank, int rc, ptc_ckpt_record *rec, uint64_t *from);
/* Save the state of segment @p g after @p steps steps as a new version.
 * Collective over the active processes. */
/* With a store on each host, @p pin is the version a background copy to
 * the persistent tier reads (--keep-local keeps it; 0: none), and @p last
 * says the job ends or stops after it (no spare pack files left). */
int train_state_save(const ptc_train_opts *o, ptc_store *store, uint64_t pin, const train_seg *g,
                     int64_t steps, bool has_loss, double loss, bool last, uint64_t *version);
/* Load version @p from into segment @p g (its active processes) and push it
 * to the device. Collective over @p world. */
/* @p moved (may be NULL): with a store on each host, the figures of the
 * plan that moved the bytes between them (zeroed otherwise). */
int train_state_load(const ptc_train_opts *o, ptc_store *store, uint64_t from, train_seg *g,
                     MPI_Comm world, ptc_plan_stats *moved);

/* A save of the state in the background (--save-async): begun at a step
 * boundary on the job's communicator, its collective steps on the job's
 * thread (ptc_ckpt_options.collectives_in_caller, whatever the MPI thread
 * level), the writes on the library's thread. With a store on each host
 * (--replicas) the whole cross-host protocol runs on the library's thread
 * over a duplicate of the communicator (@c bg), which needs
 * MPI_THREAD_MULTIPLE (train_mpi_threads; without it the saves block).
 * Zero-initialise, bg = MPI_COMM_NULL. */
typedef struct train_async {
    ptc_ckpt_async *a;      /* the save in flight, NULL: none */
    ptc_ckpt_stage *stage;  /* the snapshot memory, kept for the next */
    ptc_transport t;        /* over the segment's communicator, or bg */
    MPI_Comm bg;            /* --replicas: the background save's own */
    int host;               /* --replicas: this process's host index */
    bool ready;             /* --replicas: host, bg, stage and t are set */
} train_async;

/* Whether MPI runs with MPI_THREAD_MULTIPLE (a thread of the library may
 * call MPI while the job's thread does). */
bool train_mpi_threads(void);

/* Begin saving segment @p g's state after @p steps steps in the background
 * (into @p as, which holds none); returns once the state is copied (with
 * --replicas and the CPU model: at once, the model's next optimizer step
 * waiting for the copy);
 * @p pin as train_state_save's. Collective over the active processes. */
int train_state_save_async(const ptc_train_opts *o, ptc_store *store, uint64_t pin,
                           const train_seg *g, int64_t steps, bool has_loss, double loss,
                           train_async *as);
/* Commit the save in flight: at once (@p wait) or only where every active
 * process's writes are done (one MPI_Allreduce); *version is the committed
 * version, 0 when none was committed. Collective over the active
 * processes. */
int train_state_finish(train_async *as, MPI_Comm comm, bool wait, uint64_t *version);
/* Drop a save in flight without its commit and free @p as (not collective:
 * a job ending on an error). */
void train_state_drop(train_async *as);

/* ---- the persistent tier in the background (train_persist.c; --persist) ------------------ */

/* A copy of a committed version across hosts into the persistent store
 * (ptc_ckpt_hosts_persist_over) on a thread of its own, over a duplicate
 * of the segment's communicator; without MPI_THREAD_MULTIPLE it runs on
 * the job's thread instead. Zero-initialise, comm = MPI_COMM_NULL. */
typedef struct train_persist {
    pthread_t th;
    bool running;           /* th runs: join in train_persist_wait */
    MPI_Comm comm;
    ptc_transport t;
    ptc_store *local, *persist;
    const train_seg *g;
    uint64_t version;       /* in flight (--keep-local keeps it), 0: none */
    int rc;
    char msg[1024];
} train_persist;

/* Copy version @p version into @p persist after the previous copy ends
 * (its failure is returned instead, and nothing starts). Collective over
 * the active processes of @p g. */
int train_persist_start(train_persist *p, ptc_store *local, ptc_store *persist,
                        const train_seg *g, uint64_t version);
/* Wait for the copy in flight (none: PTC_OK); its agreed outcome. */
int train_persist_wait(train_persist *p);
/* Wait, then free the communicator. */
void train_persist_free(train_persist *p);

#endif
