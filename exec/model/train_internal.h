/* Private parts of the training job (exec/model/train*.c). Never installed. */
#ifndef PTC_TRAIN_INTERNAL_H
#define PTC_TRAIN_INTERNAL_H

#include "ptc/store.h"
#include "ptc/train.h"
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

#endif
