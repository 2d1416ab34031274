/* Preparing a training job of `ptc train` alone on each process, before MPI
 * starts: the options checked, the schedule generated or read and
 * validated, the GPU chosen (include/ptc/train.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exec/model/train_internal.h"

#define SCHED_FILE_MAX ((size_t)256 << 20)

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
    o->replicas = -1;
    o->persist_every = 1;
    o->save_every = -1;
}

/* ---- schedule ----------------------------------------------------------------- */

int train_make_schedule(const ptc_train_opts *o, ptc_sched **out)
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
        int rc = ptc_file_read(o->schedule, SCHED_FILE_MAX, &buf, &len);
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

/* ---- the job -------------------------------------------------------------------- */

static int check_opts(const ptc_train_opts *o)
{
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
    if ((o->save_every >= 0 || o->resume || o->resume_from) && !o->store)
        return ptc_error_set(PTC_E_INVAL, "--save-every and --resume need --store");
    if (o->resume_version && o->resume_any)
        return ptc_error_set(PTC_E_INVAL, "--resume-any takes the newest version: not with "
                                          "--version");
    if (o->resume_from && o->resume_any)
        return ptc_error_set(PTC_E_INVAL, "--resume-from reads a store that must hold a "
                                          "version: not with --resume-any");
    if (o->save_async && o->save_every < 0)
        return ptc_error_set(PTC_E_INVAL, "--save-async needs --save-every");
    if ((o->save_every >= 0 || o->resume || o->resume_from) && o->fake)
        return ptc_error_set(PTC_E_INVAL, "--save-every and --resume need a model (not "
                                          "--fake-compute)");
    if ((o->persist || o->keep_local) && o->replicas < 0)
        return ptc_error_set(PTC_E_INVAL, "--persist and --keep-local go with --replicas (a "
                                          "store on each host)");
    if (o->persist_every < 1)
        return ptc_error_set(PTC_E_INVAL, "--persist-every: expected a number >= 1");
    if (o->replicas >= 0 && !o->store)
        return ptc_error_set(PTC_E_INVAL, "--replicas needs --store (the store on each host)");
    /* --data dataset:NAME with --replicas: each host's store holds the same
     * dataset (train_data.c checks that they agree); its reader processes
     * count the records they serve in their host's store */
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
    return PTC_OK;
}

int ptc_train_prepare(ptc_train **out, const ptc_train_opts *o)
{
    *out = NULL;
    PTC_TRY(check_opts(o));
    ptc_train *t = ptc_calloc(1, sizeof *t);
    if (!t)
        return PTC_E_NOMEM;
    t->o = *o;
    if (!o->fake)
        t->o.act_bytes = ptc_exec_model_act_bytes(&o->model);
    int rc = train_make_schedule(&t->o, &t->sched);
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
