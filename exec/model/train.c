/* The training job of `ptc train`: options, schedule, data, the step loop
 * and the gathered save. Printing is the caller's (cli/cmd_train.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "exec/model/train_internal.h"
#include "ptc/ckpt.h"
#include "ptc/safetensors.h"
#include "base/mpi_internal.h"

#define SCHED_FILE_MAX ((size_t)256 << 20)
#define TAG_SAVE 7001

struct ptc_train {
    ptc_train_opts o;
    ptc_sched *sched;
};

void ptc_train_opts_init(ptc_train_opts *o)
{
    memset(o, 0, sizeof *o);
    ptc_config_init(&o->cfg);
    o->data = "synthetic";
    o->chunks = 2;
    o->k = 2;
    o->unit_ms = 1;
    o->cost_f = 1;
    o->cost_b = 2;
    o->act_bytes = 1024;
    o->model = (ptc_exec_model_cfg){.layers = 4, .hidden = 16, .vocab = 32, .tokens = 8,
                                    .lr = 1e-3f, .seed = 0};
    o->data_seed = 0;
    o->save_every = -1;
}

/* ---- schedule ----------------------------------------------------------------- */

static int read_small_file(const char *path, char **out, size_t *len)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ptc_error_set(PTC_E_IO, "%s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > SCHED_FILE_MAX) {
        close(fd);
        return ptc_error_set(PTC_E_RANGE, "%s: larger than %zu MiB", path, SCHED_FILE_MAX >> 20);
    }
    char *buf = ptc_malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return PTC_E_NOMEM;
    }
    int rc = ptc_pread_all(fd, buf, (size_t)st.st_size, 0, path);
    close(fd);
    if (rc != PTC_OK) {
        ptc_free(buf);
        return rc;
    }
    *out = buf;
    *len = (size_t)st.st_size;
    return PTC_OK;
}

/* Generate or read the schedule, then validate it. No communication. */
static int make_schedule(const ptc_train_opts *o, ptc_sched **out)
{
    *out = NULL;
    ptc_sched *s = NULL;
    ptc_sched_kind_id kind;
    if (ptc_sched_kind_parse(o->schedule, &kind) == PTC_OK) {
        ptc_sched_gen g = {.kind = kind, .ranks = o->cfg.pp, .microbatches = o->microbatches,
                           .chunks = o->chunks, .k = o->k, .cost_f = o->cost_f,
                           .cost_b = o->cost_b, .cost_w = o->cost_w};
        PTC_TRY(ptc_sched_generate(&s, &g));
    } else {
        char *buf = NULL;
        size_t len = 0;
        int rc = read_small_file(o->schedule, &buf, &len);
        if (rc == PTC_E_NOTFOUND)
            return ptc_error_set(PTC_E_INVAL, "--schedule: '%s' is neither a kind nor a "
                                              "readable file", o->schedule);
        PTC_TRY(rc);
        rc = ptc_sched_parse(&s, buf, len);
        ptc_free(buf);
        if (rc != PTC_OK)
            return ptc_error_set(rc, "%s: %s", o->schedule, ptc_last_error());
    }
    ptc_sched_report rep;
    int rc = ptc_sched_validate(s, &rep);
    if (rc != PTC_OK) {
        rc = ptc_error_set(PTC_E_FORMAT, "schedule rejected: %s", rep.message);
        ptc_sched_report_clear(&rep);
        ptc_sched_destroy(s);
        return rc;
    }
    ptc_sched_report_clear(&rep);
    if (ptc_sched_ranks(s) != o->cfg.pp || ptc_sched_microbatches(s) != o->microbatches) {
        rc = ptc_error_set(PTC_E_CONFIG,
                           "schedule has %d ranks and %d micro-batches, expected pp=%d and %d",
                           ptc_sched_ranks(s), ptc_sched_microbatches(s), o->cfg.pp,
                           o->microbatches);
        ptc_sched_destroy(s);
        return rc;
    }
    *out = s;
    return PTC_OK;
}

/* ---- the GPU: local rank from the launcher -------------------------------------- */

static bool env_int(const char *name, int lo, int *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return false;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > (1 << 20))
        return false;
    *out = (int)x;
    return true;
}

static int select_gpu(void)
{
    unsigned have = ptc_features();
    if (!(have & PTC_FEATURE_CUDA) || !(have & PTC_FEATURE_NCCL))
        return ptc_error_set(PTC_E_UNSUPPORTED,
                             "--device cuda: this build has no %s (use --device cpu)",
                             !(have & PTC_FEATURE_CUDA) ? "cuda" : "nccl");
    static const char *rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                      "SLURM_LOCALID"};
    static const char *size_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                      "SLURM_NTASKS_PER_NODE"};
    int local = 0, size = 0; /* alone: rank 0 of an unknown count */
    for (size_t i = 0; i < PTC_ARRAY_LEN(rank_vars); i++) {
        if (env_int(rank_vars[i], 0, &local)) {
            if (!env_int(size_vars[i], 1, &size))
                size = 0;
            break;
        }
        local = 0;
    }
    int dev;
    int rc = ptc_exec_cuda_select_device(local, size, &dev);
    if (rc != PTC_OK)
        return ptc_error_set(rc, "--device cuda: %s", ptc_last_error());
    return PTC_OK;
}

int ptc_train_prepare(ptc_train **out, const ptc_train_opts *o)
{
    *out = NULL;
    if (!o->schedule || o->microbatches < 1 || o->steps < 1)
        return ptc_error_set(PTC_E_INVAL, "train: --config, --schedule, --microbatches and "
                                          "--steps are required");
    if (o->cost_w > o->cost_b)
        return ptc_error_set(PTC_E_INVAL, "--cost-w must not exceed --cost-b");
    if (o->cuda && o->fake)
        return ptc_error_set(PTC_E_INVAL, "--fake-compute runs on the host: use --device cpu");
    enum train_data_kind kind;
    PTC_TRY(train_data_kind_parse(o->data, &kind));
    if (kind == DATA_DATASET && !o->store)
        return ptc_error_set(PTC_E_INVAL, "--data %s needs --store (the store that holds the "
                                          "dataset)", o->data);
    if ((o->save_every >= 0 || o->resume) && !o->store)
        return ptc_error_set(PTC_E_INVAL, "--save-every and --resume need --store");
    if ((o->save_every >= 0 || o->resume) && o->fake)
        return ptc_error_set(PTC_E_INVAL, "--save-every and --resume need a model (not "
                                          "--fake-compute)");
    if ((o->nresize > 0 || o->control) && o->fake)
        return ptc_error_set(PTC_E_UNSUPPORTED, "--resize and --control need a model (not "
                                                "--fake-compute)");
    for (int i = 0; o->cuda && i < o->nresize; i++)
        if (o->resize_cfg[i].tp > 1 || o->resize_cfg[i].zero)
            return ptc_error_set(PTC_E_UNSUPPORTED, "--resize to tp=%d%s: the cuda model runs "
                                                    "tp=1 and zero=0 (--device cpu runs both)",
                                 o->resize_cfg[i].tp, o->resize_cfg[i].zero ? ",zero=1" : "");
    if (kind >= DATA_DATASET && o->fake)
        return ptc_error_set(PTC_E_INVAL, "--fake-compute reads no data: use --data synthetic");
    ptc_train *t = ptc_calloc(1, sizeof *t);
    if (!t)
        return PTC_E_NOMEM;
    t->o = *o;
    if (!o->fake)
        t->o.act_bytes = ptc_exec_model_act_bytes(&o->model);
    int rc = make_schedule(&t->o, &t->sched);
    if (rc == PTC_OK && o->cuda)
        rc = select_gpu();
    if (rc != PTC_OK) {
        ptc_train_destroy(t);
        return rc;
    }
    *out = t;
    return PTC_OK;
}

const ptc_sched *ptc_train_schedule(const ptc_train *t)
{
    return t->sched;
}

void ptc_train_destroy(ptc_train *t)
{
    if (!t)
        return;
    ptc_sched_destroy(t->sched);
    ptc_free(t);
}

/* ---- the gathered save --------------------------------------------------------------
 * Process 0 writes the parameters of replica 0 (global names, F32) to one
 * safetensors file. Every other process of replica 0 that holds a stage of
 * pipe 0 sends its local blocks in one message: u32 count, then per tensor
 * u32 name length, the name, u32 ndim, i64 global shape[2], i64 local
 * shape[2], i64 offset[2] (where the block starts: row, column), the F32
 * data. Process 0 assembles the tensor-parallel blocks into whole tensors. */

typedef struct saved {
    char *name;
    int ndim;
    int64_t shape[2];
    float *data;
    size_t count;
} saved;

typedef struct block_hdr {
    int64_t gshape[2], lshape[2], off[2];
} block_hdr;

static size_t numel2(int ndim, const int64_t *shape)
{
    return (size_t)shape[0] * (size_t)(ndim > 1 ? shape[1] : 1);
}

static int pack_params(const ptc_exec_param *p, size_t np, char **out, size_t *out_len)
{
    size_t len = 4;
    uint32_t cnt = 0;
    for (size_t i = 0; i < np; i++) {
        if (p[i].pipe != 0)
            continue;
        len += 4 + strlen(p[i].name) + 4 + sizeof(block_hdr) + numel2(p[i].ndim, p[i].shape) * 4;
        cnt++;
    }
    if (len > (size_t)INT32_MAX)
        return ptc_error_set(PTC_E_RANGE, "--save: a stage's parameters exceed 2 GiB");
    char *b = ptc_malloc(len), *q = b;
    if (!b)
        return PTC_E_NOMEM;
    memcpy(q, &cnt, 4), q += 4;
    for (size_t i = 0; i < np; i++) {
        if (p[i].pipe != 0)
            continue;
        uint32_t nl = (uint32_t)strlen(p[i].name), nd = (uint32_t)p[i].ndim;
        block_hdr h = {{p[i].global_shape[0], p[i].global_shape[1]},
                       {p[i].shape[0], p[i].shape[1]},
                       {p[i].global_offset[0], p[i].global_offset[1]}};
        size_t c = numel2(p[i].ndim, p[i].shape);
        memcpy(q, &nl, 4), q += 4;
        memcpy(q, p[i].name, nl), q += nl;
        memcpy(q, &nd, 4), q += 4;
        memcpy(q, &h, sizeof h), q += sizeof h;
        memcpy(q, p[i].data, c * 4), q += c * 4;
    }
    *out = b;
    *out_len = len;
    return PTC_OK;
}

static void saved_free(saved *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ptc_free(list[i].name);
        ptc_free(list[i].data);
    }
    ptc_free(list);
}

/* The whole tensor @p name (made on first sight), checking its shape. */
static int saved_get(saved **list, size_t *n, size_t *cap, const char *name, size_t nl, int ndim,
                     const int64_t *gshape, int from, saved **out)
{
    for (size_t i = 0; i < *n; i++) {
        saved *s = &(*list)[i];
        if (strlen(s->name) == nl && !memcmp(s->name, name, nl)) {
            if (s->ndim != ndim || s->shape[0] != gshape[0] ||
                (ndim > 1 && s->shape[1] != gshape[1]))
                return ptc_error_set(PTC_E_FORMAT, "--save: rank %d sent %.*s with another "
                                                   "shape", from, (int)nl, name);
            *out = s;
            return PTC_OK;
        }
    }
    PTC_TRY(ptc_grow((void **)list, cap, *n + 1, sizeof **list));
    saved s = {.ndim = ndim, .shape = {gshape[0], ndim > 1 ? gshape[1] : 0}};
    s.count = numel2(ndim, gshape);
    s.name = ptc_strndup(name, nl);
    s.data = ptc_calloc(s.count ? s.count : 1, 4);
    if (!s.name || !s.data) {
        ptc_free(s.name);
        ptc_free(s.data);
        return PTC_E_NOMEM;
    }
    (*list)[*n] = s;
    *out = &(*list)[(*n)++];
    return PTC_OK;
}

/* Place the blocks of one message into the whole tensors of *list. */
static int unpack_params(const char *b, size_t len, int from, saved **list, size_t *n,
                         size_t *cap)
{
    const char *q = b, *end = b + len;
    uint32_t cnt;
#define NEED(k)                                                                            \
    do {                                                                                   \
        if ((size_t)(end - q) < (size_t)(k))                                               \
            return ptc_error_set(PTC_E_FORMAT, "--save: truncated message from rank %d", \
                                 from);                                                    \
    } while (0)
    NEED(4);
    memcpy(&cnt, q, 4), q += 4;
    for (uint32_t i = 0; i < cnt; i++) {
        uint32_t nl, nd;
        block_hdr h;
        NEED(4);
        memcpy(&nl, q, 4), q += 4;
        NEED((size_t)nl + 4 + sizeof h);
        const char *name = q;
        q += nl;
        memcpy(&nd, q, 4), q += 4;
        memcpy(&h, q, sizeof h), q += sizeof h;
        int64_t cols = nd > 1 ? h.lshape[1] : 1, gcols = nd > 1 ? h.gshape[1] : 1;
        if (nd < 1 || nd > 2 || h.lshape[0] < 0 || cols < 0 || h.off[0] < 0 || h.off[1] < 0 ||
            h.off[0] + h.lshape[0] > h.gshape[0] || h.off[1] + cols > gcols ||
            (nd == 1 && h.off[1] != 0))
            return ptc_error_set(PTC_E_FORMAT, "--save: bad tensor in message from rank %d",
                                 from);
        size_t c = numel2((int)nd, h.lshape);
        NEED(c * 4);
        saved *s = NULL;
        PTC_TRY(saved_get(list, n, cap, name, nl, (int)nd, h.gshape, from, &s));
        for (int64_t r = 0; r < h.lshape[0]; r++)
            memcpy(s->data + (h.off[0] + r) * gcols + h.off[1], q + (size_t)(r * cols) * 4,
                   (size_t)cols * 4);
        q += c * 4;
    }
#undef NEED
    if (q != end)
        return ptc_error_set(PTC_E_FORMAT, "--save: trailing bytes in message from rank %d",
                             from);
    return PTC_OK;
}

static int cmp_saved(const void *a, const void *b)
{
    return strcmp(((const saved *)a)->name, ((const saved *)b)->name);
}

static int write_saved(const char *path, saved *list, size_t n)
{
    qsort(list, n, sizeof *list, cmp_saved);
    ptc_st_tensor *t = ptc_calloc(n ? n : 1, sizeof *t);
    if (!t)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < n; i++) {
        t[i].name = list[i].name;
        t[i].dtype = PTC_DTYPE_F32;
        t[i].ndim = list[i].ndim;
        t[i].shape[0] = list[i].shape[0];
        t[i].shape[1] = list[i].shape[1];
    }
    ptc_st_kv meta[] = {{"format", "pt"}};
    ptc_st_writer *w = NULL;
    int rc = ptc_st_writer_create(&w, path, t, n, meta, 1);
    for (size_t i = 0; rc == PTC_OK && i < n; i++)
        rc = ptc_st_writer_write(w, list[i].data, list[i].count * 4);
    if (rc == PTC_OK)
        rc = ptc_st_writer_finish(w);
    else
        ptc_st_writer_abort(w);
    ptc_free(t);
    return rc;
}

static int mpi_fail(int mrc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mrc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error %d", mrc);
    return ptc_error_set(PTC_E_MPI, "%s: %s", what, msg);
}

/* Whether pipeline rank r holds a stage of pipe 0. */
static bool holds_pipe0(const ptc_sched *s, int r)
{
    for (int c = 0; c < ptc_sched_chunks(s, r); c++) {
        int pipe, st;
        ptc_sched_stage_of(s, r, c, &pipe, &st);
        if (pipe == 0)
            return true;
    }
    return false;
}

static int save_gathered(const ptc_train *t, MPI_Comm world, const ptc_exec_param *p,
                         size_t np, int wrank, int pp_i, int dp_i)
{
    const ptc_train_opts *o = &t->o;
    char *b = NULL;
    size_t len = 0;
    int rc;
    if (wrank != 0) {
        if (dp_i != 0 || !holds_pipe0(t->sched, pp_i))
            return PTC_OK;
        PTC_TRY(pack_params(p, np, &b, &len));
        int mrc = MPI_Send(b, (int)len, MPI_BYTE, 0, TAG_SAVE, world);
        ptc_free(b);
        return mrc == MPI_SUCCESS ? PTC_OK : mpi_fail(mrc, "--save: MPI_Send");
    }
    saved *list = NULL;
    size_t n = 0, cap = 0;
    rc = pack_params(p, np, &b, &len);
    if (rc == PTC_OK)
        rc = unpack_params(b, len, 0, &list, &n, &cap);
    ptc_free(b);
    for (int r = 0; rc == PTC_OK && r < o->cfg.pp; r++) {
        if (!holds_pipe0(t->sched, r))
            continue;
        for (int ti = 0; rc == PTC_OK && ti < o->cfg.tp; ti++) {
            int src = ptc_config_rank(&o->cfg, r, 0, ti), cnt = 0;
            if (src == 0)
                continue;
            MPI_Status st;
            int mrc = MPI_Probe(src, TAG_SAVE, world, &st);
            if (mrc == MPI_SUCCESS)
                mrc = MPI_Get_count(&st, MPI_BYTE, &cnt);
            if (mrc != MPI_SUCCESS) {
                rc = mpi_fail(mrc, "--save: MPI_Probe");
                break;
            }
            char *rb = ptc_malloc((size_t)cnt + 1);
            if (!rb) {
                rc = PTC_E_NOMEM;
                break;
            }
            mrc = MPI_Recv(rb, cnt, MPI_BYTE, src, TAG_SAVE, world, MPI_STATUS_IGNORE);
            rc = mrc == MPI_SUCCESS ? unpack_params(rb, (size_t)cnt, src, &list, &n, &cap)
                                    : mpi_fail(mrc, "--save: MPI_Recv");
            ptc_free(rb);
        }
    }
    if (rc == PTC_OK)
        rc = write_saved(o->save, list, n);
    saved_free(list, n);
    return rc;
}

/* ---- the job's state in the store ------------------------------------------------- */

static void model_spec(const ptc_exec_model_cfg *m, char *buf, size_t cap)
{
    snprintf(buf, cap, "mlp:layers=%d,hidden=%d,vocab=%d,tokens=%d", m->layers, m->hidden,
             m->vocab, m->tokens);
}

/* Resolve the version to resume from (process 0: the newest unless given)
 * and read its record on every process. Collective. */
static int resume_record(ptc_store *store, const ptc_train_opts *o, MPI_Comm world, int wrank,
                         int rc, ptc_ckpt_record *rec, uint64_t *from)
{
    uint64_t v = o->resume_version;
    if (wrank == 0 && rc == PTC_OK && v == 0) {
        rc = ptc_store_latest(store, &v);
        if (rc == PTC_OK && v == 0)
            rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no version to resume from",
                               o->store);
    }
    int64_t msg[2] = {rc, (int64_t)v};
    if (MPI_Bcast(msg, 2, MPI_INT64_T, 0, world) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Bcast failed");
    if (rc == PTC_OK && msg[0] != PTC_OK)
        rc = ptc_error_set((int)msg[0], "resolving the version to resume from failed on "
                                        "process 0");
    *from = (uint64_t)msg[1];
    if (rc != PTC_OK)
        return rc;
    PTC_TRY(ptc_ckpt_read_record(store, *from, rec));
    if (rec->format == 0)
        return ptc_error_set(PTC_E_FORMAT, "version %llu of %s has no training-state record "
                                           "(it was not saved by a training job)",
                             (unsigned long long)*from, o->store);
    char want[160];
    model_spec(&o->model, want, sizeof want);
    for (size_t i = 0; i < rec->nextra; i++)
        if (!strcmp(rec->extra[i].key, "model") && strcmp(rec->extra[i].value, want))
            return ptc_error_set(PTC_E_CONFIG, "version %llu holds the model %s, this job "
                                               "trains %s", (unsigned long long)*from,
                                 rec->extra[i].value, want);
    return PTC_OK;
}

/* Save the state after @p steps steps. Collective. */
static int save_state(ptc_train *t, ptc_store *store, const ptc_layout *l, const ptc_rules *r,
                      const int *ranks, size_t nranks, void *const *bufs, const train_data *ds,
                      int64_t steps, bool has_loss, double loss, MPI_Comm world,
                      uint64_t *version)
{
    const ptc_train_opts *o = &t->o;
    char cfg[256], model[160], lr[32];
    ptc_config_format(&o->cfg, PTC_CONFIG_STYLE_KEYS, cfg, sizeof cfg);
    model_spec(&o->model, model, sizeof model);
    snprintf(lr, sizeof lr, "%.9g", (double)o->model.lr);
    ptc_ckpt_kv extra[] = {{"model", model}, {"lr", lr}, {"data", o->data}};
    ptc_ckpt_record rec = {.step = (uint64_t)steps, .config = cfg,
                           .schedule = ptc_sched_kind(t->sched), .seed = ds->seed,
                           .epoch = ds->pos.epoch,
                           .sample = ds->pos.start + ds->pos.steps * (uint64_t)ds->per_step,
                           .global_batch = (uint64_t)ds->per_step,
                           .dataset = ds->kind >= DATA_DATASET ? ds->name : NULL,
                           .has_loss = has_loss, .loss = loss, .extra = extra,
                           .nextra = PTC_ARRAY_LEN(extra)};
    ptc_ckpt_options co;
    ptc_ckpt_options_init(&co);
    return ptc_ckpt_save(store, l, r, ranks, nranks, (const void *const *)bufs, &rec, &co,
                         world, version);
}

/* ---- the run ---------------------------------------------------------------------- */

/* Every process agrees on rc: the same return everywhere, carrying the
 * failing process's message. */
static int agree(MPI_Comm comm, int rc)
{
    return ptc_mpi_agree(comm, rc, "training");
}

/* One configuration's running state. The first world(cfg) processes of the
 * world run it; the others wait for process 0's word. */
typedef struct seg {
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
} seg;

static void seg_close(seg *g)
{
    ptc_free(g->losses);
    ptc_free(g->all);
    train_data_close(&g->ds);
    ptc_free(g->ranks);
    ptc_free(g->bufs);
    ptc_layout_destroy(g->layout);
    ptc_rules_destroy(g->rules);
    ptc_exec_destroy(g->e);
    ptc_exec_model_destroy(g->model);
    ptc_exec_model_cuda_destroy(g->gmodel);
    ptc_exec_fake_destroy(g->fake);
    ptc_sched_sim_destroy(g->sim);
    ptc_sched_destroy(g->sched);
    if (g->comm != MPI_COMM_NULL)
        MPI_Comm_free(&g->comm);
    memset(g, 0, sizeof *g);
    g->comm = MPI_COMM_NULL;
    g->ds.group = MPI_COMM_NULL;
}

/* A segment on the heap (seg_open fills it): the model's data callback holds
 * &seg->ds, so a segment is never copied once open. */
static seg *seg_new(void)
{
    seg *g = ptc_calloc(1, sizeof *g);
    if (g) {
        g->comm = MPI_COMM_NULL;
        g->ds.group = MPI_COMM_NULL;
    }
    return g;
}

static void seg_free(seg *g)
{
    if (!g)
        return;
    seg_close(g);
    ptc_free(g);
}

/* The model, data and runtime of configuration o->cfg with schedule
 * @p sched (taken). Collective over @p world; every process returns the
 * same code. @p state: build the layout and buffers of the job's state. */
static int seg_open(seg *g, const ptc_train_opts *o, ptc_sched *sched, ptc_store *store,
                    MPI_Comm world, int wrank, bool state, int rc)
{
    memset(g, 0, sizeof *g);
    g->comm = MPI_COMM_NULL;
    g->ds.group = MPI_COMM_NULL;
    g->cfg = o->cfg;
    g->sched = sched;
    g->active = wrank < ptc_config_world(&o->cfg);
    if (MPI_Comm_split(world, g->active ? 0 : MPI_UNDEFINED, wrank, &g->comm) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_split of the active processes failed");
    if (g->active) {
        g->rank = wrank;
        ptc_config_coords(&o->cfg, wrank, &g->pp_i, &g->dp_i, &g->tp_i);
        g->G = o->microbatches * o->cfg.dp;
        g->losses = ptc_calloc((size_t)g->G, sizeof *g->losses);
        g->all = ptc_calloc((size_t)g->G, sizeof *g->all);
        if (rc == PTC_OK && (!g->losses || !g->all))
            rc = PTC_E_NOMEM;
        ptc_exec_stage fns;
        memset(&fns, 0, sizeof fns);
        if (o->fake) {
            ptc_sched_costs costs;
            ptc_sched_costs_init(&costs);
            costs.f = o->cost_f;
            costs.b = o->cost_b;
            costs.w = o->cost_w;
            if (rc == PTC_OK)
                rc = ptc_exec_fake_create(&g->fake, sched, g->pp_i, &costs, o->unit_ms * 1e-3,
                                          o->act_bytes);
            if (rc == PTC_OK)
                rc = ptc_sched_simulate(sched, &costs, &g->sim);
            if (rc == PTC_OK)
                ptc_exec_fake_stage(g->fake, &fns);
        } else {
            /* collective over the active processes (the replicas' data groups) */
            int drc = train_data_open(&g->ds, o, store, g->comm, g->dp_i);
            rc = agree(g->comm, rc == PTC_OK ? drc : rc);
            ptc_exec_model_cfg mc = o->model;
            mc.tp = o->cfg.tp;
            mc.tp_rank = g->tp_i;
            mc.zero = o->cfg.zero;
            mc.dp = o->cfg.dp;
            mc.dp_rank = g->dp_i;
            mc.stage_layers = o->cfg.layers;
            mc.nstage_layers = o->cfg.nlayers;
            int64_t base = (int64_t)g->dp_i * o->microbatches;
            if (rc == PTC_OK && o->cuda)
                rc = ptc_exec_model_cuda_create(&g->gmodel, &mc, sched, g->pp_i, base, g->G,
                                                train_data_fn, &g->ds);
            else if (rc == PTC_OK)
                rc = ptc_exec_model_create(&g->model, &mc, sched, g->pp_i, base, g->G,
                                           train_data_fn, &g->ds);
            if (rc == PTC_OK && o->cuda)
                ptc_exec_model_cuda_stage(g->gmodel, &fns);
            else if (rc == PTC_OK)
                ptc_exec_model_stage(g->model, &fns);
        }
        rc = agree(g->comm, rc); /* ptc_exec_create is collective: all or none */
        if (rc == PTC_OK) {
            ptc_exec_opts eo;
            ptc_exec_opts_init(&eo);
            eo.act_bytes = o->fake ? o->act_bytes : ptc_exec_model_act_bytes(&o->model);
            eo.device = o->cuda ? PTC_EXEC_DEVICE_CUDA : PTC_EXEC_DEVICE_HOST;
            eo.timeout = o->timeout;
            eo.jitter = o->jitter_ms * 1e-3;
            eo.jitter_seed = o->model.seed;
            eo.prepost = o->prepost;
            eo.overlap_reduce = o->overlap_reduce;
            rc = ptc_exec_create(&g->e, sched, &o->cfg, g->comm, &fns, &eo);
            if (rc == PTC_OK && g->model)
                rc = ptc_exec_model_set_comms(g->model, ptc_exec_tp_comm(g->e),
                                              ptc_exec_reduce_comm(g->e));
        }
    }
    if (rc == PTC_OK && state)
        rc = train_ckpt_layout(o, sched, &g->layout, &g->rules);
    /* the state's buffers are host arrays: the CPU model's own, or the host
     * mirror of the CUDA model (pulled from and pushed to the device around
     * a save, a load and a move) */
    if (rc == PTC_OK && state && (g->model || g->gmodel))
        rc = train_ckpt_buffers(o, sched, g->model ? g->model : ptc_exec_model_cuda_host(g->gmodel),
                                g->layout, g->pp_i, g->dp_i, g->tp_i, &g->ranks, &g->nranks,
                                &g->bufs);
    return agree(world, rc);
}

/* What process 0 decides at a step boundary, sent to every process. */
enum { ACT_GO = 0, ACT_RESIZE = 1, ACT_STOP = 2, ACT_FINISH = 3 };
typedef struct decision {
    int32_t rc, action;
    int64_t step;
    char reason[16];
    char cfg[256];
} decision;
#define TAG_DECISION 7002

/* Process 0: the control file's request, if any (the file is removed). */
static int read_control(const char *path, decision *d)
{
    char *txt = NULL;
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return PTC_OK; /* no request */
    close(fd);
    PTC_TRY(read_small_file(path, &txt, &len));
    unlink(path);
    char *p = txt;
    while (*p == ' ' || *p == '\t')
        p++;
    char *end = p + strcspn(p, "\r\n");
    *end = 0;
    int rc = PTC_OK;
    if (!strncmp(p, "resize ", 7)) {
        ptc_config c;
        rc = ptc_config_parse(&c, p + 7);
        if (rc == PTC_OK) {
            d->action = ACT_RESIZE;
            snprintf(d->reason, sizeof d->reason, "control");
            ptc_config_format(&c, PTC_CONFIG_STYLE_KEYS, d->cfg, sizeof d->cfg);
        }
    } else if (!strcmp(p, "stop")) {
        d->action = ACT_STOP;
        snprintf(d->reason, sizeof d->reason, "stop");
    } else {
        rc = ptc_error_set(PTC_E_INVAL, "control file %s: expected 'resize CFG' or 'stop', "
                                        "got '%.64s'", path, p);
    }
    ptc_free(txt);
    return rc;
}

/* Process 0: tell the waiting processes (those outside the active set). */
static int tell_waiting(MPI_Comm world, int nactive, const decision *d)
{
    int n;
    MPI_Comm_size(world, &n);
    for (int r = nactive; r < n; r++)
        if (MPI_Send(d, (int)sizeof *d, MPI_BYTE, r, TAG_DECISION, world) != MPI_SUCCESS)
            return ptc_error_set(PTC_E_MPI, "MPI_Send of a decision to process %d failed", r);
    return PTC_OK;
}

/* A waiting process: sleep until process 0 says what comes next (without
 * spinning a core: test, then nap). */
static int wait_word(MPI_Comm world, decision *d)
{
    MPI_Request rq;
    if (MPI_Irecv(d, (int)sizeof *d, MPI_BYTE, 0, TAG_DECISION, world, &rq) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Irecv of a decision failed");
    for (;;) {
        int done = 0;
        if (MPI_Test(&rq, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return ptc_error_set(PTC_E_MPI, "MPI_Test failed");
        if (done)
            return PTC_OK;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Who holds each rank of a segment's layout: the world rank of the process
 * of each chunk, and that chunk's tensor array on this process. */
typedef struct seg_owners {
    int *owner;
    void ***bufs;
} seg_owners;

static void seg_owners_free(seg_owners *o)
{
    ptc_free(o->owner);
    ptc_free(o->bufs);
    memset(o, 0, sizeof *o);
}

static int seg_owners_get(const seg *g, MPI_Comm world, int wrank, seg_owners *o)
{
    memset(o, 0, sizeof *o);
    int w = ptc_config_world(ptc_layout_config(g->layout));
    size_t nt = ptc_layout_count(g->layout);
    o->owner = ptc_malloc((size_t)w * sizeof *o->owner);
    o->bufs = ptc_calloc((size_t)w, sizeof *o->bufs);
    int rc = o->owner && o->bufs ? PTC_OK : PTC_E_NOMEM;
    for (int r = 0; o->owner && r < w; r++)
        o->owner[r] = -1;
    for (size_t k = 0; rc == PTC_OK && k < g->nranks; k++) {
        int r = g->ranks[k];
        if (r < 0 || r >= w)
            rc = ptc_error_set(PTC_E_INVAL, "chunk rank %d outside the layout's %d", r, w);
        else {
            o->owner[r] = wrank;
            o->bufs[r] = g->bufs + k * nt;
        }
    }
    /* every process learns the others' ranks (same code on all: collective) */
    int bad = rc != PTC_OK;
    if (MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, world) != MPI_SUCCESS)
        bad = 1, rc = rc != PTC_OK ? rc : ptc_error_set(PTC_E_MPI, "MPI_Allreduce failed");
    if (!bad && MPI_Allreduce(MPI_IN_PLACE, o->owner, w, MPI_INT, MPI_MAX, world) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Allreduce failed");
    else if (bad && rc == PTC_OK)
        rc = ptc_error_set(PTC_E_INVAL, "the layout ranks failed on another process");
    for (int r = 0; rc == PTC_OK && r < w; r++)
        if (o->owner[r] < 0)
            rc = ptc_error_set(PTC_E_INVAL, "layout rank %d is held by no process", r);
    if (rc != PTC_OK)
        seg_owners_free(o);
    return rc;
}

/* Move the job from segment @p g to configuration @p to at step @p step:
 * the new segment's model is built, the state moves by the minimal plan
 * between the old and the new layout (ptc_reshard_host over the world),
 * the old segment is closed. Collective over @p world. */
static int resize(ptc_train *t, ptc_train_opts *jo, seg **gp, const ptc_config *to,
                  ptc_store *store, MPI_Comm world, int wrank, ptc_train_resize *rep)
{
    seg *g = *gp;
    double t0 = now_s();
    ptc_train_opts no = *jo;
    no.cfg = *to;
    /* the data continue at the next unseen sample */
    if (g->active && g->ds.kind >= DATA_DATASET) {
        no.data_epoch = g->ds.pos.epoch;
        no.data_position = g->ds.pos.start + g->ds.pos.steps * (uint64_t)g->ds.per_step;
    }
    uint64_t pos[2] = {no.data_epoch, no.data_position};
    if (MPI_Bcast(pos, 2, MPI_UINT64_T, 0, world) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Bcast failed");
    no.data_epoch = pos[0];
    no.data_position = pos[1];
    ptc_sched *ns = NULL;
    int rc = make_schedule(&no, &ns);
    rc = agree(world, rc);
    if (rc != PTC_OK) {
        ptc_sched_destroy(ns);
        return rc;
    }
    /* a cuda job's state leaves the device before the new layout's model is
     * built on it: the move reads the old model's host arrays, and the
     * device never holds two models (nor the old runtime's buffers) */
    if (jo->cuda) { /* every process, active or not, agrees */
        rc = agree(world, g->gmodel ? ptc_exec_model_cuda_pull_state(g->gmodel) : PTC_OK);
        if (rc != PTC_OK) {
            ptc_sched_destroy(ns);
            return rc;
        }
        ptc_exec_destroy(g->e);
        g->e = NULL;
        ptc_exec_model_cuda_release_device(g->gmodel);
    }
    /* the new segment lives on the heap: its model's data callback keeps
     * the address of its train_data, so it never moves */
    seg *ng = seg_new();
    rc = agree(world, ng ? PTC_OK : PTC_E_NOMEM);
    if (rc != PTC_OK) {
        seg_free(ng);
        ptc_sched_destroy(ns);
        return rc;
    }
    rc = seg_open(ng, &no, ns, store, world, wrank, true, rc);
    if (rc != PTC_OK) {
        seg_free(ng);
        return rc;
    }
    /* the state moves by the minimal plan, in budgeted rounds; each chunk of
     * a process is a layout rank of its own */
    double t1 = now_s();
    ptc_exec_resize_stats st;
    seg_owners so, no_;
    rc = seg_owners_get(g, world, wrank, &so);
    if (rc == PTC_OK)
        rc = seg_owners_get(ng, world, wrank, &no_);
    rc = agree(world, rc);
    if (rc == PTC_OK)
        rc = ptc_exec_resize_owned(g->layout, so.owner, (const void *const *const *)so.bufs,
                                   ng->layout, no_.owner, (void *const *const *)no_.bufs, world,
                                   NULL, &st);
    seg_owners_free(&so);
    seg_owners_free(&no_);
    if (rc == PTC_OK && ng->gmodel)
        rc = ptc_exec_model_cuda_push_state(ng->gmodel);
    rc = agree(world, rc);
    if (rc == PTC_OK && rep) {
        ptc_config_format(&g->cfg, PTC_CONFIG_STYLE_KEYS, rep->from, sizeof rep->from);
        ptc_config_format(to, PTC_CONFIG_STYLE_KEYS, rep->to, sizeof rep->to);
        rep->bytes_moved = st.bytes_moved;
        rep->max_process_bytes = st.max_process_bytes;
        rep->plan_seconds = st.plan_seconds;
        rep->move_seconds = st.move_seconds;
        rep->rebuild_seconds = t1 - t0;
    }
    if (rc != PTC_OK) {
        seg_free(ng);
        return rc;
    }
    seg_free(g);
    *gp = ng;
    *jo = no;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t rss = (uint64_t)ru.ru_maxrss * 1024, mx = rss;
    MPI_Reduce(&rss, &mx, 1, MPI_UINT64_T, MPI_MAX, 0, world);
    if (rep)
        rep->peak_rss_bytes = mx;
    return PTC_OK;
}

/* Run step @p k on the active processes and report it on process 0. */
static int run_step(ptc_train *t, const ptc_train_opts *o, seg *g, int64_t k,
                    ptc_train_step_fn on_step, void *user, bool *has_loss, double *last_loss,
                    ptc_train_result *res)
{
    if (g->model)
        ptc_exec_model_set_step(g->model, k);
    if (g->gmodel)
        ptc_exec_model_cuda_set_step(g->gmodel, k);
    int rc;
    if ((rc = train_data_next(&g->ds)) != PTC_OK || (rc = ptc_exec_step(g->e)) != PTC_OK) {
        res->failed_step = (int)k; /* the caller aborts: others may be blocked */
        return rc;
    }
    bool have_model = g->model || g->gmodel;
    memset(g->losses, 0, (size_t)g->G * sizeof *g->losses);
    if (have_model) {
        int nl = 0;
        const double *l = NULL;
        if (g->model)
            l = ptc_exec_model_losses(g->model, &nl);
        else if ((rc = ptc_exec_model_cuda_losses(g->gmodel, &l, &nl)) != PTC_OK) {
            res->failed_step = (int)k;
            return rc;
        }
        for (int i = 0; g->tp_i == 0 && i < nl; i++) /* one copy per replica */
            g->losses[g->dp_i * o->microbatches + i] = l[i];
    }
    train_data_done(&g->ds);
    /* The records this step served are durable before process 0 learns of the
     * step (the reduces below wait for every process): a job killed later
     * has them counted, so the audit shows the steps a restart runs again. */
    if ((rc = train_data_flush(&g->ds)) != PTC_OK) {
        res->failed_step = (int)k;
        return rc;
    }
    ptc_exec_stats st;
    ptc_exec_get_stats(g->e, &st);
    double mx[4] = {st.step_seconds, st.actions_seconds, st.reduce_seconds,
                    (double)st.peak_buffers},
           mxo[4];
    double sm[2] = {st.compute_seconds, (double)st.messages}, smo[2];
    int mrc = MPI_Reduce(g->losses, g->all, g->G, MPI_DOUBLE, MPI_SUM, 0, g->comm);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Reduce(mx, mxo, 4, MPI_DOUBLE, MPI_MAX, 0, g->comm);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Reduce(sm, smo, 2, MPI_DOUBLE, MPI_SUM, 0, g->comm);
    if (mrc != MPI_SUCCESS) {
        res->failed_step = (int)k;
        return mpi_fail(mrc, "MPI_Reduce of the step's figures");
    }
    if (g->rank == 0) {
        ptc_train_step sr = {.step = (int)k, .has_loss = have_model,
                             .step_ms = mxo[0] * 1e3, .actions_ms = mxo[1] * 1e3,
                             .reduce_ms = mxo[2] * 1e3, .compute_ms = smo[0] * 1e3,
                             .messages = (long)smo[1], .peak_buffers = (long)mxo[3]};
        for (int i = 0; i < g->G; i++)
            sr.loss += g->all[i];
        sr.loss /= g->G;
        if (g->sim)
            sr.predicted_ms = ptc_sched_sim_makespan(g->sim) * o->unit_ms;
        *has_loss = have_model;
        *last_loss = sr.loss;
        if (on_step)
            rc = on_step(&sr, user);
    }
    (void)t;
    return rc;
}

int ptc_train_run(ptc_train *t, MPI_Comm world, ptc_train_step_fn on_step, void *user,
                  ptc_train_result *res)
{
    const ptc_train_opts *o = &t->o;
    ptc_train_opts jo = t->o; /* the running configuration, data seed and position */
    int wrank = 0, wsize = 1;
    if (MPI_Comm_rank(world, &wrank) != MPI_SUCCESS ||
        MPI_Comm_size(world, &wsize) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_rank/size failed");
    ptc_train_result dummy;
    if (!res)
        res = &dummy;
    memset(res, 0, sizeof *res);
    res->failed_step = -1;
    /* the world holds the largest configuration; without resizes, exactly it */
    int need = ptc_config_world(&o->cfg);
    for (int i = 0; i < o->nresize; i++)
        if (ptc_config_world(&o->resize_cfg[i]) > need)
            need = ptc_config_world(&o->resize_cfg[i]);
    bool elastic = o->nresize > 0 || o->control;
    if (elastic ? need > wsize : need != wsize)
        return ptc_error_set(PTC_E_CONFIG, "--config needs %d processes, started with %d "
                                           "(mpirun -np)", need, wsize);
    bool saving = o->save_every >= 0, state = saving || o->resume || elastic;
    ptc_store *store = NULL;
    ptc_ckpt_record rec;
    memset(&rec, 0, sizeof rec);
    uint64_t from = 0;
    int64_t first = 0;
    int rc = PTC_OK;
    if (o->store) {
        /* a job that saves (or may be told to stop) makes its store if there is none: process 0
         * first, then the others open what it made */
        int orc = PTC_OK;
        if (wrank == 0)
            orc = ptc_store_open(&store, o->store,
                                 saving || o->control ? PTC_STORE_CREATE : 0);
        int r0 = orc;
        if (MPI_Bcast(&r0, 1, MPI_INT, 0, world) != MPI_SUCCESS)
            r0 = PTC_E_MPI;
        if (wrank != 0 && r0 == PTC_OK)
            orc = ptc_store_open(&store, o->store, 0);
        else if (wrank != 0)
            orc = ptc_error_set(r0, "opening the store %s failed on process 0", o->store);
        rc = orc;
    }
    if (o->resume) {
        rc = resume_record(store, o, world, wrank, rc, &rec, &from);
        if (rc == PTC_OK) {
            jo.data_seed = rec.seed;
            jo.data_epoch = rec.epoch;
            jo.data_position = rec.sample;
            first = (int64_t)rec.step;
        }
    }
    ptc_sched *s0 = NULL;
    if (rc == PTC_OK)
        rc = ptc_sched_clone(&s0, t->sched);
    seg *g = seg_new();
    if (agree(world, g ? PTC_OK : PTC_E_NOMEM) != PTC_OK) {
        ptc_sched_destroy(s0);
        rc = rc != PTC_OK ? rc : PTC_E_NOMEM;
        goto out;
    }
    rc = seg_open(g, &jo, s0, store, world, wrank, state, rc);
    if (rc == PTC_OK && o->resume) {
        ptc_ckpt_options co;
        ptc_ckpt_options_init(&co);
        double t0 = MPI_Wtime();
        if (g->active)
            rc = ptc_ckpt_load(store, from, g->layout, g->ranks, g->nranks, g->bufs, &co, g->comm,
                               NULL, NULL);
        if (rc == PTC_OK && g->gmodel)
            rc = ptc_exec_model_cuda_push_state(g->gmodel);
        rc = agree(world, rc);
        res->resumed_from = from;
        res->load_seconds = MPI_Wtime() - t0;
    }
    res->first_step = first;
    bool has_loss = false;
    double last_loss = 0;
    int next_resize = 0;
    while (next_resize < o->nresize && o->resize_step[next_resize] <= first)
        next_resize++;
    int64_t k = first;
    while (rc == PTC_OK && k < first + o->steps) {
        decision d = {0};
        if (g->active) {
            rc = run_step(t, &jo, g, k, on_step, user, &has_loss, &last_loss, res);
            if (res->failed_step >= 0)
                goto out;
            k++;
            if (g->rank == 0) {
                d.rc = rc;
                d.step = k;
                if (rc == PTC_OK && k < first + o->steps) {
                    if (next_resize < o->nresize && o->resize_step[next_resize] == k) {
                        d.action = ACT_RESIZE;
                        snprintf(d.reason, sizeof d.reason, "planned");
                        ptc_config_format(&o->resize_cfg[next_resize], PTC_CONFIG_STYLE_KEYS,
                                          d.cfg, sizeof d.cfg);
                    } else if (o->stop && *o->stop) {
                        d.action = ACT_STOP;
                        snprintf(d.reason, sizeof d.reason, "stop");
                    } else if (o->control) {
                        d.rc = read_control(o->control, &d);
                    }
                }
            }
            if (MPI_Bcast(&d, (int)sizeof d, MPI_BYTE, 0, g->comm) != MPI_SUCCESS) {
                res->failed_step = (int)k - 1;
                rc = ptc_error_set(PTC_E_MPI, "MPI_Bcast failed");
                goto out;
            }
            rc = d.rc;
            int64_t done = k - first;
            bool last = k == first + o->steps, stopping = d.action == ACT_STOP;
            /* a stop saves whenever the job has a store */
            if (rc == PTC_OK && (stopping ? store != NULL :
                                 saving && (last || (o->save_every > 0 &&
                                                     done % o->save_every == 0)))) {
                uint64_t v = 0;
                if (g->gmodel) /* every active process has one: agree is collective */
                    rc = agree(g->comm, ptc_exec_model_cuda_pull_state(g->gmodel));
                if (rc == PTC_OK)
                    rc = save_state(t, store, g->layout, g->rules, g->ranks, g->nranks, g->bufs, &g->ds,
                                k, has_loss, last_loss, g->comm, &v);
                if (rc == PTC_OK) {
                    /* the records served up to this version are durable
                     * already: run_step flushes them after every step */
                    res->last_version = v;
                    res->saves++;
                }
            }
            if (rc != PTC_OK || (last && !stopping))
                d.action = ACT_FINISH;
            if (g->rank == 0) {
                decision w = d;
                w.rc = rc;
                if (w.action != ACT_GO)
                    tell_waiting(world, ptc_config_world(&g->cfg), &w);
            }
        } else {
            rc = wait_word(world, &d);
            if (rc == PTC_OK)
                rc = d.rc != PTC_OK ? ptc_error_set(d.rc, "the job failed") : PTC_OK;
            k = d.step;
        }
        if (rc != PTC_OK || d.action == ACT_FINISH || d.action == ACT_STOP) {
            if (d.action == ACT_STOP) {
                res->stopped = true;
                if (wrank == 0 && o->on_resize) {
                    ptc_train_resize r = {.step = k, .reason = "stop",
                                          .version = res->last_version};
                    ptc_config_format(&g->cfg, PTC_CONFIG_STYLE_KEYS, r.from, sizeof r.from);
                    o->on_resize(&r, user);
                }
            }
            break;
        }
        if (d.action == ACT_RESIZE) {
            ptc_config to;
            rc = ptc_config_parse(&to, d.cfg);
            if (rc == PTC_OK && ptc_config_world(&to) > wsize)
                rc = ptc_error_set(PTC_E_CONFIG, "resize to %s needs %d processes, the job has "
                                                 "%d", d.cfg, ptc_config_world(&to), wsize);
            else if (rc == PTC_OK && o->cuda && (to.tp > 1 || to.zero))
                rc = ptc_error_set(PTC_E_UNSUPPORTED, "resize to %s: the cuda model runs tp=1 "
                                                      "and zero=0", d.cfg);
            rc = agree(world, rc);
            ptc_train_resize r = {.step = k, .reason = d.reason};
            if (rc == PTC_OK)
                rc = resize(t, &jo, &g, &to, store, world, wrank, &r);
            if (rc == PTC_OK && !strcmp(d.reason, "planned"))
                next_resize++;
            if (rc == PTC_OK && wrank == 0 && o->on_resize)
                o->on_resize(&r, user);
        }
    }
    res->last_step = k;
    if (rc == PTC_OK && o->save && g->active && (g->model || g->gmodel)) {
        size_t np = 0;
        const ptc_exec_param *p = NULL;
        if (g->model)
            p = ptc_exec_model_params(g->model, &np);
        else
            rc = ptc_exec_model_cuda_params(g->gmodel, &p, &np);
        if (rc == PTC_OK) {
            ptc_train tt = *t;
            tt.o.cfg = g->cfg;
            tt.sched = g->sched;
            rc = save_gathered(&tt, g->comm, p, np, wrank, g->pp_i, g->dp_i);
        }
        rc = agree(g->comm, rc);
    }
    if (rc == PTC_OK && g->fake) {
        /* res is valid on process 0 */
        unsigned long chk = (unsigned long)ptc_exec_fake_checked(g->fake), tot = 0;
        int mrc = MPI_Reduce(&chk, &tot, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, g->comm);
        if (mrc != MPI_SUCCESS)
            rc = mpi_fail(mrc, "MPI_Reduce");
        else
            res->fake_checked = tot;
    }
    if (rc == PTC_OK && g->e)
        ptc_exec_actions(g->e, &res->actions_rank0);
out:
    seg_free(g);
    ptc_ckpt_record_free(&rec);
    ptc_store_close(store);
    return rc;
}
