/* ptc train: run the pipeline runtime on the demo model (or fake compute). */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ptc/exec_model.h"
#include "ptc/safetensors.h"

const char ptc_cmd_train_help[] =
    "train the demo model with a pipeline schedule (under mpirun, or alone)\n"
    "\n"
    "usage: [mpirun -np N] ptc train --config dp=D,pp=P --schedule KIND|FILE\n"
    "         --microbatches M --steps S [--chunks V] [--k K]\n"
    "         [--model mlp:layers=L,hidden=H,vocab=V[,tokens=N]] [--seed X]\n"
    "         [--data synthetic|tokens:FILE] [--device cpu|cuda] [--lr LR]\n"
    "         [--timeout SEC] [--fake-compute [--unit-ms U] [--cost-f F]\n"
    "         [--cost-b B] [--cost-w W] [--act-bytes N]] [--jitter MS]\n"
    "         [--prepost N] [--overlap-reduce] [--save FILE.safetensors] [--json]\n"
    "\n"
    "  KIND         1f1b gpipe interleaved kfkb zb-h1 zb-v chimera; or a schedule\n"
    "               text file (docs/schedule-format.md), validated before any\n"
    "               process communicates\n"
    "  --microbatches M  per data-parallel replica; a step trains on D*M of them\n"
    "  --model      default mlp:layers=4,hidden=16,vocab=32,tokens=8\n"
    "  --data       synthetic (default; from --seed) or tokens:FILE (little-endian\n"
    "               u16 tokens, windows of tokens+1)\n"
    "  --device     cpu (default) or cuda: the model on GPU local-rank mod count,\n"
    "               boundary tensors over NCCL (needs a CUDA+NCCL build and a GPU)\n"
    "  --timeout    watchdog: a rank that makes no progress for SEC seconds prints\n"
    "               where it is and which transfers are pending, then exits 1\n"
    "  --fake-compute  no model: each action sleeps its simulator cost times U ms\n"
    "               (default 1) and checks that its inputs came from the right place\n"
    "  --jitter MS  extra random sleep in [0, MS) ms before every compute action\n"
    "  --save FILE  write the final parameters (global names) from rank 0\n"
    "  --json       one JSON object with per-step records and timings\n"
    "Prints `step K loss X` per step (rank 0). Single process = the reference run.\n";

typedef struct train_opts {
    ptc_config cfg;
    const char *schedule, *data, *save, *device;
    int mbs, steps, chunks, k, prepost;
    ptc_exec_model_cfg model;
    double timeout, jitter_ms, unit_ms, cost_f, cost_b, cost_w;
    size_t act_bytes;
    bool fake, json, overlap;
    long drop_send;
} train_opts;

typedef struct data_src {
    int vocab;
    uint64_t seed;
    int64_t per_step; /* global micro-batches per step */
    uint16_t *tok;
    size_t ntok;
} data_src;

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int data_fn(void *user, int64_t step, int64_t gmb, int32_t *ids, int32_t *targets, int n)
{
    data_src *d = user;
    uint64_t window = (uint64_t)(step * d->per_step + gmb);
    if (!d->tok) {
        for (int i = 0; i < n; i++) {
            ids[i] = (int32_t)(mix(d->seed ^ mix(window * (uint64_t)n + (uint64_t)i)) %
                               (uint64_t)d->vocab);
            targets[i] = (int32_t)(((uint64_t)ids[i] * 7 + 3) % (uint64_t)d->vocab);
        }
        return PTC_OK;
    }
    size_t span = d->ntok - (size_t)n - 1 + 1;
    size_t start = (size_t)((window * (uint64_t)n) % span);
    for (int i = 0; i < n; i++) {
        ids[i] = d->tok[start + (size_t)i];
        targets[i] = d->tok[start + (size_t)i + 1];
        if (ids[i] >= d->vocab || targets[i] >= d->vocab)
            return ptc_error_set(PTC_E_RANGE, "token %d at %zu is outside vocab %d",
                                 ids[i] >= d->vocab ? ids[i] : targets[i], start + (size_t)i,
                                 d->vocab);
    }
    return PTC_OK;
}

static int load_tokens(data_src *d, const char *path, int n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ptc_cli_error("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < 0 || (size_t)len / 2 < (size_t)n + 1) {
        fclose(f);
        return ptc_cli_error("%s: fewer than %d tokens", path, n + 1);
    }
    d->ntok = (size_t)len / 2;
    d->tok = malloc(d->ntok * 2);
    if (!d->tok || fread(d->tok, 2, d->ntok, f) != d->ntok) {
        fclose(f);
        return ptc_cli_error("%s: read failed", path);
    }
    fclose(f);
    return PTC_CLI_OK;
}

enum {
    OPT_CONFIG = 256, OPT_SCHEDULE, OPT_CHUNKS, OPT_K, OPT_MBS, OPT_STEPS, OPT_MODEL, OPT_SEED,
    OPT_DATA, OPT_DEVICE, OPT_TIMEOUT, OPT_FAKE, OPT_JITTER, OPT_JSON, OPT_SAVE, OPT_UNIT,
    OPT_CF, OPT_CB, OPT_CW, OPT_ACT, OPT_PREPOST, OPT_OVERLAP, OPT_LR, OPT_DROP,
};

static bool parse_double(const char *s, double lo, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v < lo)
        return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, train_opts *o)
{
    static const struct option longopts[] = {
        {"config", 1, 0, OPT_CONFIG},   {"schedule", 1, 0, OPT_SCHEDULE},
        {"chunks", 1, 0, OPT_CHUNKS},   {"k", 1, 0, OPT_K},
        {"microbatches", 1, 0, OPT_MBS}, {"steps", 1, 0, OPT_STEPS},
        {"model", 1, 0, OPT_MODEL},     {"seed", 1, 0, OPT_SEED},
        {"data", 1, 0, OPT_DATA},       {"device", 1, 0, OPT_DEVICE},
        {"timeout", 1, 0, OPT_TIMEOUT}, {"fake-compute", 0, 0, OPT_FAKE},
        {"jitter", 1, 0, OPT_JITTER},   {"json", 0, 0, OPT_JSON},
        {"save", 1, 0, OPT_SAVE},       {"unit-ms", 1, 0, OPT_UNIT},
        {"cost-f", 1, 0, OPT_CF},       {"cost-b", 1, 0, OPT_CB},
        {"cost-w", 1, 0, OPT_CW},       {"act-bytes", 1, 0, OPT_ACT},
        {"prepost", 1, 0, OPT_PREPOST}, {"overlap-reduce", 0, 0, OPT_OVERLAP},
        {"lr", 1, 0, OPT_LR},           {"debug-drop-send", 1, 0, OPT_DROP},
        {"help", 0, 0, 'h'},            {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    ptc_config_init(&o->cfg);
    o->data = "synthetic";
    o->device = "cpu";
    o->chunks = 2;
    o->k = 2;
    o->unit_ms = 1;
    o->cost_f = 1;
    o->cost_b = 2;
    o->act_bytes = 1024;
    o->model = (ptc_exec_model_cfg){.layers = 4, .hidden = 16, .vocab = 32, .tokens = 8,
                                    .lr = 1e-3f, .seed = 0};
    bool have_cfg = false;
    int c;
    uint64_t u;
    double d;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            ptc_cli_help(ptc_cmd_train_help);
            exit(0);
        case OPT_CONFIG:
            if (ptc_config_parse(&o->cfg, optarg) != PTC_OK)
                return ptc_cli_usage_error("--config: %s", ptc_last_error());
            have_cfg = true;
            break;
        case OPT_SCHEDULE:
            o->schedule = optarg;
            break;
        case OPT_CHUNKS:
            if (!ptc_cli_parse_int(optarg, 1, 1024, &o->chunks))
                return ptc_cli_usage_error("--chunks: expected 1..1024");
            break;
        case OPT_K:
            if (!ptc_cli_parse_int(optarg, 1, 1 << 20, &o->k))
                return ptc_cli_usage_error("--k: expected a positive integer");
            break;
        case OPT_MBS:
            if (!ptc_cli_parse_int(optarg, 1, 1 << 16, &o->mbs))
                return ptc_cli_usage_error("--microbatches: expected 1..65536");
            break;
        case OPT_STEPS:
            if (!ptc_cli_parse_int(optarg, 1, 1 << 24, &o->steps))
                return ptc_cli_usage_error("--steps: expected a positive integer");
            break;
        case OPT_MODEL:
            if (ptc_exec_model_parse(&o->model, optarg) != PTC_OK)
                return ptc_cli_usage_error("--model: %s", ptc_last_error());
            break;
        case OPT_SEED:
            if (!ptc_cli_parse_u64(optarg, &u))
                return ptc_cli_usage_error("--seed: expected a non-negative integer");
            o->model.seed = u;
            break;
        case OPT_DATA:
            if (strcmp(optarg, "synthetic") && strncmp(optarg, "tokens:", 7))
                return ptc_cli_usage_error("--data: expected synthetic or tokens:FILE");
            o->data = optarg;
            break;
        case OPT_DEVICE:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return ptc_cli_usage_error("--device: expected cpu or cuda");
            o->device = optarg;
            break;
        case OPT_TIMEOUT:
            if (!parse_double(optarg, 0, &o->timeout))
                return ptc_cli_usage_error("--timeout: expected seconds >= 0");
            break;
        case OPT_FAKE:
            o->fake = true;
            break;
        case OPT_JITTER:
            if (!parse_double(optarg, 0, &o->jitter_ms))
                return ptc_cli_usage_error("--jitter: expected milliseconds >= 0");
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_SAVE:
            o->save = optarg;
            break;
        case OPT_UNIT:
            if (!parse_double(optarg, 0, &o->unit_ms))
                return ptc_cli_usage_error("--unit-ms: expected milliseconds >= 0");
            break;
        case OPT_CF:
        case OPT_CB:
        case OPT_CW:
            if (!parse_double(optarg, 0, &d))
                return ptc_cli_usage_error("--cost-*: expected a number >= 0");
            *(c == OPT_CF ? &o->cost_f : c == OPT_CB ? &o->cost_b : &o->cost_w) = d;
            break;
        case OPT_ACT:
            if (!ptc_cli_parse_u64(optarg, &u) || u < 32 || u > (1u << 30))
                return ptc_cli_usage_error("--act-bytes: expected 32..2^30");
            o->act_bytes = (size_t)u;
            break;
        case OPT_PREPOST:
            if (!ptc_cli_parse_int(optarg, 0, 1 << 20, &o->prepost))
                return ptc_cli_usage_error("--prepost: expected a non-negative integer");
            break;
        case OPT_OVERLAP:
            o->overlap = true;
            break;
        case OPT_LR:
            if (!parse_double(optarg, 0, &d))
                return ptc_cli_usage_error("--lr: expected a number >= 0");
            o->model.lr = (float)d;
            break;
        case OPT_DROP:
            if (!ptc_cli_parse_u64(optarg, &u))
                return ptc_cli_usage_error("--debug-drop-send: expected a message count");
            o->drop_send = (long)u;
            break;
        default:
            return ptc_cli_bad_option(argv);
        }
    }
    if (optind < argc)
        return ptc_cli_usage_error("train: unexpected argument '%s'", argv[optind]);
    if (!have_cfg || !o->schedule || !o->mbs || !o->steps)
        return ptc_cli_usage_error("train: --config, --schedule, --microbatches and --steps "
                                   "are required");
    if (o->cfg.tp != 1)
        return ptc_cli_usage_error("train: the demo model has no tensor parallelism (tp=1)");
    if (o->cost_w > o->cost_b)
        return ptc_cli_usage_error("--cost-w must not exceed --cost-b");
    if (!strcmp(o->device, "cuda") && o->fake)
        return ptc_cli_usage_error("--fake-compute runs on the host: use --device cpu");
    if (!o->fake)
        o->act_bytes = ptc_exec_model_act_bytes(&o->model);
    return PTC_CLI_OK;
}

/* Read, generate and validate the schedule. No communication. */
static int make_schedule(const train_opts *o, ptc_sched **out)
{
    *out = NULL;
    ptc_sched *s = NULL;
    ptc_sched_kind_id kind;
    int rc;
    if (ptc_sched_kind_parse(o->schedule, &kind) == PTC_OK) {
        ptc_sched_gen g = {.kind = kind, .ranks = o->cfg.pp, .microbatches = o->mbs,
                           .chunks = o->chunks, .k = o->k, .cost_f = o->cost_f,
                           .cost_b = o->cost_b, .cost_w = o->cost_w};
        rc = ptc_sched_generate(&s, &g);
        if (rc != PTC_OK)
            return ptc_cli_lib_error(rc);
    } else {
        FILE *f = fopen(o->schedule, "rb");
        if (!f)
            return ptc_cli_error("--schedule: '%s' is neither a kind nor a readable file",
                                 o->schedule);
        char *buf = NULL;
        size_t len = 0, cap = 0, got;
        do {
            if (len + 65536 > cap) {
                cap = (len + 65536) * 2;
                char *nb = realloc(buf, cap);
                if (!nb) {
                    free(buf);
                    fclose(f);
                    return ptc_cli_error("out of memory");
                }
                buf = nb;
            }
            got = fread(buf + len, 1, cap - len, f);
            len += got;
        } while (got > 0 && len < (256u << 20));
        fclose(f);
        rc = ptc_sched_parse(&s, buf, len);
        free(buf);
        if (rc != PTC_OK)
            return ptc_cli_error("%s: %s", o->schedule, ptc_last_error());
    }
    ptc_sched_report rep;
    rc = ptc_sched_validate(s, &rep);
    if (rc != PTC_OK) {
        ptc_cli_error("schedule rejected: %s", rep.message);
        ptc_sched_report_clear(&rep);
        ptc_sched_destroy(s);
        return PTC_CLI_FAIL;
    }
    ptc_sched_report_clear(&rep);
    if (ptc_sched_ranks(s) != o->cfg.pp || ptc_sched_microbatches(s) != o->mbs) {
        ptc_cli_error("schedule has %d ranks and %d micro-batches, expected pp=%d and %d",
                      ptc_sched_ranks(s), ptc_sched_microbatches(s), o->cfg.pp, o->mbs);
        ptc_sched_destroy(s);
        return PTC_CLI_FAIL;
    }
    *out = s;
    return PTC_CLI_OK;
}

/* ---- saving: rank 0 gathers pipe 0's stages of replica 0 ----------------------- */

typedef struct saved {
    char *name;
    int ndim;
    int64_t shape[2];
    float *data;
    size_t count;
} saved;

static int cmp_saved(const void *a, const void *b)
{
    return strcmp(((const saved *)a)->name, ((const saved *)b)->name);
}

static size_t pack_params(const ptc_exec_param *p, size_t np, int pipe_filter, char **out)
{
    size_t len = 4;
    uint32_t cnt = 0;
    for (size_t i = 0; i < np; i++) {
        if (p[i].pipe != pipe_filter)
            continue;
        size_t c = (size_t)p[i].shape[0] * (size_t)(p[i].ndim > 1 ? p[i].shape[1] : 1);
        len += 4 + strlen(p[i].name) + 4 + 16 + 8 + c * 4;
        cnt++;
    }
    char *b = malloc(len), *q = b;
    if (!b)
        return 0;
    memcpy(q, &cnt, 4);
    q += 4;
    for (size_t i = 0; i < np; i++) {
        if (p[i].pipe != pipe_filter)
            continue;
        uint32_t nl = (uint32_t)strlen(p[i].name), nd = (uint32_t)p[i].ndim;
        uint64_t c = (uint64_t)p[i].shape[0] * (uint64_t)(p[i].ndim > 1 ? p[i].shape[1] : 1);
        memcpy(q, &nl, 4), q += 4;
        memcpy(q, p[i].name, nl), q += nl;
        memcpy(q, &nd, 4), q += 4;
        memcpy(q, p[i].shape, 16), q += 16;
        memcpy(q, &c, 8), q += 8;
        memcpy(q, p[i].data, c * 4), q += c * 4;
    }
    *out = b;
    return len;
}

static int unpack_params(const char *b, size_t len, saved **list, size_t *n)
{
    uint32_t cnt;
    if (len < 4)
        return -1;
    memcpy(&cnt, b, 4);
    const char *q = b + 4;
    for (uint32_t i = 0; i < cnt; i++) {
        saved s;
        uint32_t nl, nd;
        uint64_t c;
        memcpy(&nl, q, 4), q += 4;
        s.name = strndup(q, nl), q += nl;
        memcpy(&nd, q, 4), q += 4;
        s.ndim = (int)nd;
        memcpy(s.shape, q, 16), q += 16;
        memcpy(&c, q, 8), q += 8;
        s.count = (size_t)c;
        s.data = malloc(c * 4 + 1);
        if (!s.name || !s.data)
            return -1;
        memcpy(s.data, q, c * 4), q += c * 4;
        saved *nl2 = realloc(*list, (*n + 1) * sizeof *nl2);
        if (!nl2)
            return -1;
        *list = nl2;
        (*list)[(*n)++] = s;
    }
    return (size_t)(q - b) == len ? 0 : -1;
}

static int save_model(const train_opts *o, const ptc_sched *s, const ptc_exec_param *p,
                      size_t np, int pp_i, int dp_i, int wrank)
{
    int S = ptc_sched_stages(s), P = o->cfg.pp;
    int rc = PTC_CLI_OK;
    if (wrank != 0) {
        if (dp_i != 0)
            return PTC_CLI_OK;
        /* Does this rank hold a pipe-0 stage? */
        bool holds = false;
        for (size_t i = 0; i < np; i++)
            holds |= p[i].pipe == 0;
        int nch = ptc_sched_chunks(s, pp_i);
        for (int c = 0; c < nch; c++) {
            int pipe, st;
            ptc_sched_stage_of(s, pp_i, c, &pipe, &st);
            holds |= pipe == 0;
        }
        if (!holds)
            return PTC_CLI_OK;
        char *b = NULL;
        size_t len = pack_params(p, np, 0, &b);
        if (!len)
            return ptc_cli_error("out of memory");
        MPI_Send(b, (int)len, MPI_BYTE, 0, 7001, MPI_COMM_WORLD);
        free(b);
        return PTC_CLI_OK;
    }
    saved *list = NULL;
    size_t n = 0;
    char *b = NULL;
    size_t len = pack_params(p, np, 0, &b);
    if (!len || unpack_params(b, len, &list, &n))
        return ptc_cli_error("out of memory");
    free(b);
    /* one message from every other pipeline rank holding a pipe-0 stage */
    bool *from = calloc((size_t)P, 1);
    for (int st = 0; st < S; st++) {
        int r, c;
        ptc_sched_rank_of(s, 0, st, &r, &c);
        if (r != 0)
            from[r] = true;
    }
    for (int r = 1; r < P; r++) {
        if (!from[r])
            continue;
        int src = ptc_config_rank(&o->cfg, r, 0, 0), cnt;
        MPI_Status stt;
        MPI_Probe(src, 7001, MPI_COMM_WORLD, &stt);
        MPI_Get_count(&stt, MPI_BYTE, &cnt);
        char *rb = malloc((size_t)cnt + 1);
        MPI_Recv(rb, cnt, MPI_BYTE, src, 7001, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (unpack_params(rb, (size_t)cnt, &list, &n))
            rc = ptc_cli_error("--save: bad parameter message from rank %d", src);
        free(rb);
    }
    free(from);
    if (rc == PTC_CLI_OK) {
        qsort(list, n, sizeof *list, cmp_saved);
        ptc_st_tensor *t = calloc(n ? n : 1, sizeof *t);
        for (size_t i = 0; i < n; i++) {
            t[i].name = list[i].name;
            t[i].dtype = PTC_DTYPE_F32;
            t[i].ndim = list[i].ndim;
            t[i].shape[0] = list[i].shape[0];
            t[i].shape[1] = list[i].shape[1];
        }
        ptc_st_kv meta[] = {{"format", "pt"}};
        ptc_st_writer *w = NULL;
        int lrc = ptc_st_writer_create(&w, o->save, t, n, meta, 1);
        for (size_t i = 0; lrc == PTC_OK && i < n; i++)
            lrc = ptc_st_writer_write(w, list[i].data, list[i].count * 4);
        if (lrc == PTC_OK)
            lrc = ptc_st_writer_finish(w);
        else
            ptc_st_writer_abort(w);
        if (lrc != PTC_OK)
            rc = ptc_cli_lib_error(lrc);
        free(t);
    }
    for (size_t i = 0; i < n; i++) {
        free(list[i].name);
        free(list[i].data);
    }
    free(list);
    return rc;
}

/* ---- the command ---------------------------------------------------------------- */

/* --device cuda: before MPI_Init (so that every rank of a machine without a
 * GPU fails alike, with one line and nothing sent), bind this process to GPU
 * local-rank mod count. The local rank comes from the launcher. */
static int select_gpu(void)
{
    unsigned have = ptc_features();
    if (!(have & PTC_FEATURE_CUDA) || !(have & PTC_FEATURE_NCCL))
        return ptc_cli_error("--device cuda: this build has no %s (use --device cpu)",
                             !(have & PTC_FEATURE_CUDA) ? "cuda" : "nccl");
    static const char *rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                      "SLURM_LOCALID"};
    static const char *size_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                      "SLURM_NTASKS_PER_NODE"};
    int local = 0, size = 0; /* alone: rank 0 of an unknown count */
    for (size_t i = 0; i < sizeof rank_vars / sizeof rank_vars[0]; i++) {
        const char *v = getenv(rank_vars[i]), *w = getenv(size_vars[i]);
        if (v && ptc_cli_parse_int(v, 0, 1 << 20, &local)) {
            if (!w || !ptc_cli_parse_int(w, 1, 1 << 20, &size))
                size = 0;
            break;
        }
        local = 0;
    }
    int dev;
    if (ptc_exec_cuda_select_device(local, size, &dev) != PTC_OK)
        return ptc_cli_error("--device cuda: %s", ptc_last_error());
    return PTC_CLI_OK;
}

int ptc_cmd_train(int argc, char **argv)
{
    ptc_cli_init();
    train_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc != PTC_CLI_OK)
        return rc;
    /* Validate before anything is sent: every rank does it alone. */
    ptc_sched *s = NULL;
    rc = make_schedule(&o, &s);
    if (rc != PTC_CLI_OK)
        return rc;
    bool cuda = !strcmp(o.device, "cuda");
    if (cuda && (rc = select_gpu()) != PTC_CLI_OK) {
        ptc_sched_destroy(s);
        return rc;
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init(&argc, &argv);
    int wrank = 0, wsize = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    ptc_exec *e = NULL;
    ptc_exec_model *model = NULL;
    ptc_exec_model_cuda *gmodel = NULL;
    ptc_exec_fake *fake = NULL;
    ptc_sched_sim *sim = NULL;
    json_t *steps = NULL;
    data_src ds = {.vocab = o.model.vocab, .seed = o.model.seed,
                   .per_step = (int64_t)o.mbs * o.cfg.dp};
    double *losses = NULL, *all = NULL;
    if (ptc_config_world(&o.cfg) != wsize) {
        rc = ptc_cli_error("--config needs %d processes, started with %d (mpirun -np)",
                           ptc_config_world(&o.cfg), wsize);
        goto out_finalize;
    }
    int pp_i, dp_i, tp_i;
    ptc_config_coords(&o.cfg, wrank, &pp_i, &dp_i, &tp_i);
    ptc_exec_stage fns;
    if (o.fake) {
        ptc_sched_costs costs;
        ptc_sched_costs_init(&costs);
        costs.f = o.cost_f;
        costs.b = o.cost_b;
        costs.w = o.cost_w;
        if ((rc = ptc_exec_fake_create(&fake, s, pp_i, &costs, o.unit_ms * 1e-3, o.act_bytes)) !=
                PTC_OK ||
            (rc = ptc_sched_simulate(s, &costs, &sim)) != PTC_OK) {
            rc = ptc_cli_lib_error(rc);
            goto out_finalize;
        }
        ptc_exec_fake_stage(fake, &fns);
    } else {
        if (!strncmp(o.data, "tokens:", 7) &&
            load_tokens(&ds, o.data + 7, o.model.tokens) != PTC_CLI_OK) {
            rc = PTC_CLI_FAIL;
            goto out_finalize;
        }
        if (cuda)
            rc = ptc_exec_model_cuda_create(&gmodel, &o.model, s, pp_i, (int64_t)dp_i * o.mbs,
                                            (int64_t)o.mbs * o.cfg.dp, data_fn, &ds);
        else
            rc = ptc_exec_model_create(&model, &o.model, s, pp_i, (int64_t)dp_i * o.mbs,
                                       (int64_t)o.mbs * o.cfg.dp, data_fn, &ds);
        if (rc != PTC_OK) {
            rc = ptc_cli_lib_error(rc);
            goto out_finalize;
        }
        if (cuda)
            ptc_exec_model_cuda_stage(gmodel, &fns);
        else
            ptc_exec_model_stage(model, &fns);
    }
    bool have_model = model || gmodel;
    ptc_exec_opts eo;
    ptc_exec_opts_init(&eo);
    eo.act_bytes = o.act_bytes;
    eo.device = cuda ? PTC_EXEC_DEVICE_CUDA : PTC_EXEC_DEVICE_HOST;
    eo.timeout = o.timeout;
    eo.jitter = o.jitter_ms * 1e-3;
    eo.jitter_seed = o.model.seed;
    eo.prepost = o.prepost;
    eo.overlap_reduce = o.overlap;
    rc = ptc_exec_create(&e, s, &o.cfg, MPI_COMM_WORLD, &fns, &eo);
    if (rc != PTC_OK) {
        rc = ptc_cli_lib_error(rc);
        goto out_finalize;
    }
    if (o.drop_send && wrank == 0)
        ptc_exec_testing_drop_send(e, o.drop_send);
    int G = o.mbs * o.cfg.dp;
    losses = calloc((size_t)G, sizeof *losses);
    all = calloc((size_t)G, sizeof *all);
    steps = json_array();
    for (int k = 0; k < o.steps; k++) {
        if (model)
            ptc_exec_model_set_step(model, k);
        if (gmodel)
            ptc_exec_model_cuda_set_step(gmodel, k);
        rc = ptc_exec_step(e);
        if (rc == PTC_E_TIMEOUT) {
            fprintf(stderr, "ptc: error: rank %d: %s\n", wrank, ptc_last_error());
            fflush(stderr);
            sleep(1); /* let the other ranks' watchdogs report too */
            _exit(PTC_CLI_FAIL);
        }
        if (rc != PTC_OK) {
            fprintf(stderr, "ptc: error: rank %d: %s\n", wrank,
                    *ptc_last_error() ? ptc_last_error() : ptc_strerror(rc));
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, PTC_CLI_FAIL);
        }
        memset(losses, 0, (size_t)G * sizeof *losses);
        if (have_model) {
            int nl = 0;
            const double *l = NULL;
            if (model)
                l = ptc_exec_model_losses(model, &nl);
            else if ((rc = ptc_exec_model_cuda_losses(gmodel, &l, &nl)) != PTC_OK) {
                fprintf(stderr, "ptc: error: rank %d: %s\n", wrank, ptc_last_error());
                fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, PTC_CLI_FAIL);
            }
            for (int i = 0; i < nl; i++)
                losses[dp_i * o.mbs + i] = l[i];
        }
        MPI_Reduce(losses, all, G, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        ptc_exec_stats st;
        ptc_exec_get_stats(e, &st);
        double mx[4] = {st.step_seconds, st.actions_seconds, st.reduce_seconds,
                        (double)st.peak_buffers},
               mxo[4];
        double sm[2] = {st.compute_seconds, (double)st.messages}, smo[2];
        MPI_Reduce(mx, mxo, 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(sm, smo, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (wrank != 0)
            continue;
        double loss = 0;
        for (int i = 0; i < G; i++)
            loss += all[i];
        loss /= G;
        json_t *rec = json_pack("{s:i, s:f, s:f, s:f, s:f, s:i, s:i}", "step", k,
                                "step_ms", mxo[0] * 1e3, "actions_ms", mxo[1] * 1e3,
                                "reduce_ms", mxo[2] * 1e3, "compute_ms", smo[0] * 1e3,
                                "messages", (json_int_t)smo[1], "peak_buffers",
                                (json_int_t)mxo[3]);
        if (have_model)
            json_object_set_new(rec, "loss", json_real(loss));
        if (sim)
            json_object_set_new(rec, "predicted_ms",
                                json_real(ptc_sched_sim_makespan(sim) * o.unit_ms));
        json_array_append_new(steps, rec);
        if (!o.json) {
            if (have_model)
                printf("step %d loss %.9g time %.3f ms\n", k, loss, mxo[0] * 1e3);
            else
                printf("step %d time %.3f ms (actions %.3f ms, predicted %.3f ms)\n", k,
                       mxo[0] * 1e3, mxo[1] * 1e3, ptc_sched_sim_makespan(sim) * o.unit_ms);
            fflush(stdout);
        }
    }
    if (o.save && have_model) {
        size_t np = 0;
        const ptc_exec_param *p = NULL;
        if (model)
            p = ptc_exec_model_params(model, &np);
        else if ((rc = ptc_exec_model_cuda_params(gmodel, &p, &np)) != PTC_OK) {
            rc = ptc_cli_lib_error(rc);
            goto out_finalize;
        }
        rc = save_model(&o, s, p, np, pp_i, dp_i, wrank);
        if (rc != PTC_CLI_OK)
            goto out_finalize;
    }
    if (fake) {
        unsigned long chk = (unsigned long)ptc_exec_fake_checked(fake), tot = 0;
        MPI_Reduce(&chk, &tot, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (wrank == 0 && !o.json)
            printf("fake compute: %lu inputs checked\n", tot);
    }
    if (wrank == 0 && o.json) {
        char cfgtxt[256];
        ptc_config_format(&o.cfg, PTC_CONFIG_STYLE_KEYS, cfgtxt, sizeof cfgtxt);
        size_t na;
        ptc_exec_actions(e, &na);
        json_t *root = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:b, s:O}", "config", cfgtxt,
                                 "schedule", ptc_sched_kind(s), "device", o.device,
                                 "world", wsize,
                                 "microbatches", o.mbs, "actions_rank0", (json_int_t)na,
                                 "fake_compute", o.fake, "steps", steps);
        char *txt = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
        ptc_cli_print_json(txt);
        free(txt);
        json_decref(root);
    }
    rc = PTC_CLI_OK;
out_finalize:
    json_decref(steps);
    free(losses);
    free(all);
    free(ds.tok);
    ptc_exec_destroy(e);
    ptc_exec_model_destroy(model);
    ptc_exec_model_cuda_destroy(gmodel);
    ptc_exec_fake_destroy(fake);
    ptc_sched_sim_destroy(sim);
    ptc_sched_destroy(s);
    if (rc != PTC_CLI_OK && wsize > 1) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    MPI_Finalize();
    return rc;
}
