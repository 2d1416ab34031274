/* The demo model of `ptc train`: embedding, L residual MLP blocks
 * (LayerNorm -> Linear -> GELU -> Linear), final LayerNorm, lm_head,
 * softmax cross-entropy; split into chunks by the layer -> stage rule. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mpi_internal.h"
#include "exec/model/model_internal.h"
#include "kernels/adamw.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Register tensor `name` of chunk c at offset off (floats). */
static int add_param(ptc_exec_model *x, int c, size_t off, const char *name, int ndim,
                     int64_t d0, int64_t d1, int64_t g0, int64_t g1)
{
    if (x->nparams >= MODEL_MAX_PARAMS)
        return ptc_error_set(PTC_E_RANGE, "model: too many tensors");
    ptc_exec_param *np = ptc_realloc(x->params, (x->nparams + 1) * sizeof *np);
    if (!np)
        return ptc_error_set(PTC_E_NOMEM, "model parameters");
    x->params = np;
    char **nn = ptc_realloc(x->names, (x->nparams + 1) * sizeof *nn);
    if (!nn)
        return ptc_error_set(PTC_E_NOMEM, "model parameters");
    x->names = nn;
    char *dup = ptc_strdup(name);
    if (!dup)
        return ptc_error_set(PTC_E_NOMEM, "model parameters");
    x->names[x->nparams] = dup;
    ptc_exec_param *q = &x->params[x->nparams++];
    memset(q, 0, sizeof *q);
    q->name = dup;
    q->ndim = ndim;
    q->shape[0] = d0;
    q->shape[1] = ndim > 1 ? d1 : 0;
    q->global_shape[0] = g0;
    q->global_shape[1] = ndim > 1 ? g1 : 0;
    q->data = (float *)(uintptr_t)off; /* fixed up once the chunk is allocated */
    q->pipe = x->ch[c].pipe;
    q->stage = x->ch[c].stage;
    q->chunk = c;
    return PTC_OK;
}

/* Layout the parameters of chunk c; with `reg` also name them. */
static int layout_chunk(ptc_exec_model *x, int c, bool reg)
{
    chunk *k = &x->ch[c];
    size_t H = (size_t)x->cfg.hidden, F = x->fl, FG = 4 * H, V = (size_t)x->cfg.vocab, off = 0;
    char nm[160];
    if (k->first) {
        k->emb = off;
        if (reg)
            PTC_TRY(add_param(x, c, off, "model.embed_tokens.weight", 2, (int64_t)V, (int64_t)H,
                              (int64_t)V, (int64_t)H));
        off += V * H;
    }
    for (int l = k->l0; l < k->l1; l++) {
        layer_off *lo = &k->lay[l - k->l0];
        struct {
            size_t *o;
            const char *suffix;
            int ndim;
            size_t d0, d1, g0, g1;
        } t[] = {{&lo->lnw, "input_layernorm.weight", 1, H, 0, H, 0},
                 {&lo->lnb, "input_layernorm.bias", 1, H, 0, H, 0},
                 {&lo->w1, "mlp.up_proj.weight", 2, F, H, FG, H},
                 {&lo->b1, "mlp.up_proj.bias", 1, F, 0, FG, 0},
                 {&lo->w2, "mlp.down_proj.weight", 2, H, F, H, FG},
                 {&lo->b2, "mlp.down_proj.bias", 1, H, 0, H, 0}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            *t[i].o = off;
            if (reg) {
                snprintf(nm, sizeof nm, "model.layers.%d.%s", l, t[i].suffix);
                PTC_TRY(add_param(x, c, off, nm, t[i].ndim, (int64_t)t[i].d0, (int64_t)t[i].d1,
                                  (int64_t)t[i].g0, (int64_t)t[i].g1));
            }
            off += t[i].d0 * (t[i].ndim > 1 ? t[i].d1 : 1);
        }
    }
    if (k->last) {
        k->nw = off;
        if (reg)
            PTC_TRY(add_param(x, c, off, "model.norm.weight", 1, (int64_t)H, 0, (int64_t)H, 0));
        off += H;
        k->nb = off;
        if (reg)
            PTC_TRY(add_param(x, c, off, "model.norm.bias", 1, (int64_t)H, 0, (int64_t)H, 0));
        off += H;
        k->head = off;
        if (reg)
            PTC_TRY(add_param(x, c, off, "lm_head.weight", 2, (int64_t)V, (int64_t)H, (int64_t)V,
                              (int64_t)H));
        off += V * H;
    }
    k->count = off;
    /* Saved activations of one micro-batch. */
    size_t n = (size_t)x->cfg.tokens, a = 0;
    k->a_x0 = a;
    a += n * H;
    k->a_lay = a;
    k->a_lay_stride = n * H * 4 + n * 2 + n * F * 3; /* ln xout dx2 + mean rstd + h g dh */
    a += k->a_lay_stride * (size_t)(k->l1 - k->l0);
    k->a_head = a;
    if (k->last)
        a += n * H + 2 * n + 2 * n * V; /* lnf mean rstd logits dlogits */
    k->a_demb = a;
    if (k->first)
        a += n * H;
    k->a_total = a;
    return PTC_OK;
}

/* Element g (row-major) of the whole tensor's splitmix stream: the value a
 * sequential fill would give it, so every shard of every layout starts from
 * the same model. */
static uint64_t splitmix_at(uint64_t st0, uint64_t g)
{
    uint64_t st = st0 + g * 0x9E3779B97F4A7C15ull;
    return splitmix(&st);
}

/* Fill the local tensor q (a block of rows [r0, r0 + rows) and columns
 * [c0, c0 + cols) of the whole tensor) with its initial values. */
static void init_tensor(float *d, const ptc_exec_param *q, uint64_t seed, int64_t r0, int64_t c0)
{
    size_t cnt = (size_t)q->shape[0] * (size_t)(q->ndim > 1 ? q->shape[1] : 1);
    const char *nm = q->name;
    size_t ln = strlen(nm);
    bool is_bias = ln > 5 && !strcmp(nm + ln - 5, ".bias");
    bool is_norm = strstr(nm, "norm.") != NULL;
    if (is_bias) {
        memset(d, 0, cnt * sizeof *d);
        return;
    }
    if (is_norm) {
        for (size_t i = 0; i < cnt; i++)
            d[i] = 1.0f;
        return;
    }
    double a = strstr(nm, "embed_tokens") ? 1.0 : 1.0 / sqrt((double)q->global_shape[1]);
    uint64_t st = seed ^ name_hash(nm);
    int64_t rows = q->shape[0], cols = q->ndim > 1 ? q->shape[1] : 1;
    int64_t gcols = q->ndim > 1 ? q->global_shape[1] : 1;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            uint64_t g = (uint64_t)((r0 + i) * gcols + c0 + j);
            d[i * cols + j] = (float)(a * ((double)(splitmix_at(st, g) >> 11) * 0x1.0p-52 - 1.0));
        }
}

/* Part i of n of an extent S by the split rule (DESIGN.md). */
static void split_part(int64_t S, int n, int i, int64_t *lo, int64_t *hi)
{
    int64_t c = (S + n - 1) / n;
    *lo = (int64_t)i * c < S ? (int64_t)i * c : S;
    *hi = ((int64_t)i + 1) * c < S ? ((int64_t)i + 1) * c : S;
}

void ptc_exec_model_replica(int pipes, int P, int D, int rank, int dp_rank, int pipe,
                            int stage, int *rep, int *nrep)
{
    (void)pipe;
    if (pipes != 2) {
        *rep = dp_rank;
        *nrep = D;
        return;
    }
    /* the pair group of ranks {stage's, its mirror's}, ordered by (pp_i, dp_i) */
    int lo = stage < P - 1 - stage ? stage : P - 1 - stage;
    *rep = (rank == lo ? 0 : D) + dp_rank;
    *nrep = 2 * D;
}

void ptc_exec_model_destroy(ptc_exec_model *x)
{
    if (!x)
        return;
    for (int c = 0; x->ch && c < x->nch; c++) {
        chunk *k = &x->ch[c];
        for (int m = 0; k->act && m < x->mbs; m++) {
            ptc_free(k->act[m]);
            ptc_free(k->tok[m]);
        }
        ptc_free(k->act);
        ptc_free(k->tok);
        ptc_free(k->lay);
        ptc_free(k->p);
        ptc_free(k->g);
        ptc_free(k->m);
        ptc_free(k->v);
    }
    for (size_t i = 0; i < x->nparams; i++)
        ptc_free(x->names[i]);
    ptc_free(x->names);
    ptc_free(x->params);
    ptc_free(x->ch);
    ptc_free(x->losses);
    ptc_free(x->scratch);
    ptc_free(x);
}

int ptc_exec_model_create(ptc_exec_model **out, const ptc_exec_model_cfg *m,
                          const ptc_sched *s, int rank, int64_t gmb_base, int64_t gmb_total,
                          ptc_exec_data_fn data, void *data_user)
{
    *out = NULL;
    if (m->layers < 0 || m->hidden < 1 || m->vocab < 2 || m->tokens < 1 || !data ||
        gmb_total < 1 || gmb_base < 0)
        return ptc_error_set(PTC_E_INVAL, "model: bad shape or data source");
    if ((int64_t)m->tokens * m->hidden * 4 > INT32_MAX / 4 ||
        (int64_t)m->tokens * m->vocab > INT32_MAX / 4 ||
        (int64_t)m->vocab * m->hidden > INT32_MAX / 4)
        return ptc_error_set(PTC_E_RANGE, "model: sizes too large");
    if (rank < 0 || rank >= ptc_sched_ranks(s))
        return ptc_error_set(PTC_E_RANGE, "model: rank %d outside the schedule", rank);
    int T = m->tp > 1 ? m->tp : 1, D = m->dp > 1 ? m->dp : 1;
    if (m->tp_rank < 0 || m->tp_rank >= T || m->dp_rank < 0 || m->dp_rank >= D)
        return ptc_error_set(PTC_E_INVAL, "model: tp rank %d of %d, dp rank %d of %d",
                             m->tp_rank, T, m->dp_rank, D);
    if (m->zero && ptc_sched_pipes(s) == 2 && ptc_sched_ranks(s) % 2)
        return ptc_error_set(PTC_E_CONFIG, "model: zero=1 with a two-pipe schedule needs an "
                                           "even number of pipeline ranks");
    int rc = PTC_E_NOMEM;
    ptc_exec_model *x = ptc_calloc(1, sizeof *x);
    if (!x)
        return ptc_error_set(PTC_E_NOMEM, "model");
    x->cfg = *m;
    x->cfg.tp = T;
    x->cfg.dp = D;
    x->T = T;
    x->t = m->tp_rank;
    x->tp_comm = x->rep_comm = MPI_COMM_NULL;
    int64_t flo, fhi;
    split_part(4 * (int64_t)m->hidden, T, x->t, &flo, &fhi);
    x->fl = (size_t)(fhi - flo);
    x->s = s;
    x->rank = rank;
    x->nch = ptc_sched_chunks(s, rank);
    x->mbs = ptc_sched_microbatches(s);
    x->S = ptc_sched_stages(s);
    x->gmb_base = gmb_base;
    x->gmb_total = gmb_total;
    x->data = data;
    x->data_user = data_user;
    size_t n = (size_t)m->tokens, H = (size_t)m->hidden;
    size_t wide = 4 * H > (size_t)m->vocab ? 4 * H : (size_t)m->vocab;
    x->ch = ptc_calloc((size_t)(x->nch > 0 ? x->nch : 1), sizeof *x->ch);
    x->losses = ptc_calloc((size_t)x->mbs, sizeof *x->losses);
    x->scratch = ptc_malloc(3 * n * wide * sizeof(float));
    if (!x->ch || !x->losses || !x->scratch)
        goto out_destroy;
    ptc_config pc;
    ptc_config_init(&pc);
    pc.pp = x->S;
    if (m->nstage_layers > 0) {
        if (m->nstage_layers != x->S || !m->stage_layers) {
            rc = ptc_error_set(PTC_E_CONFIG, "model: layers= gives %d stages, the schedule has "
                                             "%d", m->nstage_layers, x->S);
            goto out_destroy;
        }
        pc.nlayers = m->nstage_layers;
        memcpy(pc.layers, m->stage_layers, (size_t)m->nstage_layers * sizeof *pc.layers);
    }
    x->cfg.stage_layers = NULL; /* borrowed: not kept */
    if ((rc = ptc_config_check_layers(&pc, m->layers)) != PTC_OK)
        goto out_destroy;
    for (int c = 0; c < x->nch; c++) {
        chunk *k = &x->ch[c];
        ptc_sched_stage_of(s, rank, c, &k->pipe, &k->stage);
        k->first = k->stage == 0;
        k->last = k->stage == x->S - 1;
        k->l0 = -1;
        k->l1 = -1;
        ptc_exec_model_replica(ptc_sched_pipes(s), ptc_sched_ranks(s), D, rank, m->dp_rank,
                               k->pipe, k->stage, &k->rep, &k->nrep);
        if (!m->zero) {
            k->rep = 0;
            k->nrep = 1;
        }
        for (int l = 0; l < m->layers; l++) {
            int st;
            rc = ptc_config_stage_of_layer(&pc, m->layers, l, &st);
            if (rc != PTC_OK)
                goto out_destroy;
            if (st == k->stage) {
                if (k->l0 < 0)
                    k->l0 = l;
                k->l1 = l + 1;
            }
        }
        if (k->l0 < 0)
            k->l0 = k->l1 = 0;
        rc = PTC_E_NOMEM;
        k->lay = ptc_calloc((size_t)(k->l1 - k->l0 + 1), sizeof *k->lay);
        if (!k->lay)
            goto out_destroy;
        size_t first_param = x->nparams;
        if ((rc = layout_chunk(x, c, true)) != PTC_OK)
            goto out_destroy;
        /* this replica's flat range of each tensor (all of it without ZeRO) */
        k->ocount = 0;
        for (size_t i = first_param; i < x->nparams; i++) {
            ptc_exec_param *q = &x->params[i];
            int64_t numel = q->shape[0] * (q->ndim > 1 ? q->shape[1] : 1), a, b;
            split_part(numel, k->nrep, k->rep, &a, &b);
            q->optim_offset = a;
            q->optim_count = b - a;
            q->exp_avg = (float *)(uintptr_t)k->ocount; /* fixed up below */
            q->rep = k->rep;
            q->nrep = k->nrep;
            k->ocount += (size_t)(b - a);
        }
        rc = PTC_E_NOMEM;
        size_t cnt = k->count ? k->count : 1, ocnt = k->ocount ? k->ocount : 1;
        k->p = ptc_malloc(cnt * sizeof(float));
        k->g = ptc_calloc(cnt, sizeof(float));
        k->m = ptc_calloc(ocnt, sizeof(float));
        k->v = ptc_calloc(ocnt, sizeof(float));
        k->act = ptc_calloc((size_t)x->mbs, sizeof *k->act);
        k->tok = ptc_calloc((size_t)x->mbs, sizeof *k->tok);
        if (!k->p || !k->g || !k->m || !k->v || !k->act || !k->tok)
            goto out_destroy;
        for (size_t i = first_param; i < x->nparams; i++) {
            ptc_exec_param *q = &x->params[i];
            size_t mo = (size_t)(uintptr_t)q->exp_avg;
            q->data = k->p + (size_t)(uintptr_t)q->data;
            q->exp_avg = k->m + mo;
            q->exp_avg_sq = k->v + mo;
            /* up_proj holds rows [flo, fhi) of the whole tensor, down_proj
             * columns [flo, fhi); everything else is whole */
            bool up = strstr(q->name, "up_proj.") != NULL;
            bool down_w = strstr(q->name, "down_proj.weight") != NULL;
            q->global_offset[0] = up ? flo : 0;
            q->global_offset[1] = down_w ? flo : 0;
            init_tensor(q->data, q, m->seed, q->global_offset[0], q->global_offset[1]);
        }
    }
    *out = x;
    return PTC_OK;
out_destroy:
    if (rc == PTC_E_NOMEM)
        ptc_error_set(PTC_E_NOMEM, "model of rank %d", rank);
    ptc_exec_model_destroy(x);
    return rc;
}

int ptc_exec_model_set_comms(ptc_exec_model *x, MPI_Comm tp, MPI_Comm replicas)
{
    int size = 1, me = 0;
    if (x->T > 1) {
        if (tp == MPI_COMM_NULL || MPI_Comm_size(tp, &size) != MPI_SUCCESS ||
            MPI_Comm_rank(tp, &me) != MPI_SUCCESS || size != x->T || me != x->t)
            return ptc_error_set(PTC_E_CONFIG, "model: the tensor-parallel group is not the "
                                               "%d ranks the model was built for", x->T);
    }
    x->tp_comm = tp;
    if (x->cfg.zero && x->nch > 0) {
        if (replicas == MPI_COMM_NULL || MPI_Comm_size(replicas, &size) != MPI_SUCCESS ||
            MPI_Comm_rank(replicas, &me) != MPI_SUCCESS || size != x->ch[0].nrep ||
            me != x->ch[0].rep)
            return ptc_error_set(PTC_E_CONFIG, "model: the replica group (%d, rank %d) is not "
                                               "what ZeRO was set up for (%d, rank %d)", size,
                                 me, x->ch[0].nrep, x->ch[0].rep);
    }
    x->rep_comm = replicas;
    return PTC_OK;
}

void ptc_exec_model_tensors_free(ptc_tensor_info *t, size_t n)
{
    for (size_t i = 0; t && i < n; i++)
        ptc_free((char *)t[i].name);
    ptc_free(t);
}

int ptc_exec_model_tensors(const ptc_exec_model_cfg *m, bool optim, ptc_tensor_info **out,
                           size_t *n)
{
    *out = NULL;
    *n = 0;
    int64_t H = m->hidden, F = 4 * (int64_t)m->hidden, V = m->vocab;
    size_t np = 6 * (size_t)(m->layers > 0 ? m->layers : 0) + 4, total = optim ? 3 * np : np;
    ptc_tensor_info *t = ptc_calloc(total, sizeof *t);
    if (!t)
        return PTC_E_NOMEM;
    static const struct {
        const char *suffix;
        int ndim, d0, d1; /* 0 H, 1 F, 2 V */
    } lay[] = {{"input_layernorm.weight", 1, 0, 0}, {"input_layernorm.bias", 1, 0, 0},
               {"mlp.up_proj.weight", 2, 1, 0},     {"mlp.up_proj.bias", 1, 1, 0},
               {"mlp.down_proj.weight", 2, 0, 1},   {"mlp.down_proj.bias", 1, 0, 0}};
    const int64_t dim[3] = {H, F, V};
    char nm[160];
    size_t k = 0;
    int rc = PTC_OK;
#define ADD(NAME, ND, D0, D1)                                                             \
    do {                                                                                  \
        t[k] = (ptc_tensor_info){.dtype = PTC_DTYPE_F32, .ndim = (ND), .shape = {D0, D1}}; \
        if (!(t[k].name = ptc_strdup(NAME)))                                              \
            rc = PTC_E_NOMEM;                                                             \
        k++;                                                                              \
    } while (0)
    ADD("model.embed_tokens.weight", 2, V, H);
    for (int l = 0; rc == PTC_OK && l < m->layers; l++)
        for (size_t i = 0; rc == PTC_OK && i < PTC_ARRAY_LEN(lay); i++) {
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, lay[i].suffix);
            ADD(nm, lay[i].ndim, dim[lay[i].d0], lay[i].ndim > 1 ? dim[lay[i].d1] : 0);
        }
    if (rc == PTC_OK) {
        ADD("model.norm.weight", 1, H, 0);
        ADD("model.norm.bias", 1, H, 0);
        ADD("lm_head.weight", 2, V, H);
    }
    for (int o = 0; optim && rc == PTC_OK && o < 2; o++)
        for (size_t i = 0; rc == PTC_OK && i < np; i++) {
            snprintf(nm, sizeof nm, "%s%s", t[i].name, o == 0 ? ".exp_avg" : ".exp_avg_sq");
            ADD(nm, t[i].ndim, t[i].shape[0], t[i].shape[1]);
        }
#undef ADD
    if (rc != PTC_OK) {
        ptc_exec_model_tensors_free(t, k);
        return ptc_error_set(PTC_E_NOMEM, "model tensor list");
    }
    *out = t;
    *n = k;
    return PTC_OK;
}

void ptc_exec_model_set_step(ptc_exec_model *x, int64_t step) { x->step = step; }

const double *ptc_exec_model_losses(const ptc_exec_model *x, int *n)
{
    *n = x->mbs;
    return x->losses;
}

const ptc_exec_param *ptc_exec_model_params(const ptc_exec_model *x, size_t *n)
{
    *n = x->nparams;
    return x->params;
}

/* ---- compute ----------------------------------------------------------------- */

/* Sum @p n floats over the tensor-parallel group, in place. */
static int tp_allreduce(ptc_exec_model *x, float *buf, size_t n)
{
    if (x->T == 1)
        return PTC_OK;
    if (x->tp_comm == MPI_COMM_NULL)
        return ptc_error_set(PTC_E_INVAL, "model: tp=%d without its communicator "
                                          "(ptc_exec_model_set_comms)", x->T);
    int mrc = ptc_mpi_allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, x->tp_comm);
    if (mrc != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "model: tensor-parallel MPI_Allreduce failed (%d)", mrc);
    return PTC_OK;
}

static int chunk_of(const ptc_exec_model *x, int c, int mb)
{
    if (c < 0 || c >= x->nch || mb < 0 || mb >= x->mbs)
        return ptc_error_set(PTC_E_RANGE, "model: chunk %d mb %d out of range", c, mb);
    return PTC_OK;
}

static int model_forward(void *user, int c, int mb, const void *in, void *out)
{
    ptc_exec_model *x = user;
    PTC_TRY(chunk_of(x, c, mb));
    chunk *k = &x->ch[c];
    size_t n = (size_t)x->cfg.tokens, H = (size_t)x->cfg.hidden, F = x->fl,
           V = (size_t)x->cfg.vocab;
    if (k->act[mb])
        return ptc_error_set(PTC_E_INVAL, "model: forward of mb %d chunk %d twice", mb, c);
    float *a = ptc_malloc(k->a_total * sizeof(float));
    int32_t *tok = ptc_malloc(2 * n * sizeof(int32_t));
    if (!a || !tok) {
        ptc_free(a);
        ptc_free(tok);
        return ptc_error_set(PTC_E_NOMEM, "model activations");
    }
    k->act[mb] = a;
    k->tok[mb] = tok;
    if (k->first || k->last)
        PTC_TRY(x->data(x->data_user, x->step, x->gmb_base + mb, tok, tok + n, (int)n));
    float *xin = a + k->a_x0;
    if (k->first)
        PTC_TRY(ptc_embedding_forward_cpu(xin, tok, k->p + k->emb, n, V, H));
    else
        memcpy(xin, in, n * H * sizeof(float));
    for (int l = k->l0; l < k->l1; l++) {
        const layer_off *lo = &k->lay[l - k->l0];
        lay_act s = lay_ptrs(x, k, a, l - k->l0);
        PTC_TRY(ptc_layernorm_forward_cpu(s.ln, s.mean, s.rstd, xin, k->p + lo->lnw,
                                          k->p + lo->lnb, n, H, LN_EPS));
        PTC_TRY(ptc_matmul_forward_cpu(s.h, s.ln, k->p + lo->w1, k->p + lo->b1, n, H, F));
        PTC_TRY(ptc_gelu_forward_cpu(s.g, s.h, n * F));
        float *br = x->scratch;
        if (x->T == 1) {
            PTC_TRY(ptc_matmul_forward_cpu(br, s.g, k->p + lo->w2, k->p + lo->b2, n, F, H));
        } else {
            /* row-parallel: partial sums over this shard's inputs, summed over
             * the group, then the replicated bias */
            PTC_TRY(ptc_matmul_forward_cpu(br, s.g, k->p + lo->w2, NULL, n, F, H));
            PTC_TRY(tp_allreduce(x, br, n * H));
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < H; j++)
                    br[i * H + j] += k->p[lo->b2 + j];
        }
        PTC_TRY(ptc_residual_forward_cpu(s.xout, xin, br, n * H));
        xin = s.xout;
    }
    if (k->last) {
        float *lnf = a + k->a_head, *mean = lnf + n * H, *rstd = mean + n, *logits = rstd + n;
        PTC_TRY(ptc_layernorm_forward_cpu(lnf, mean, rstd, xin, k->p + k->nw, k->p + k->nb, n,
                                          H, LN_EPS));
        PTC_TRY(ptc_matmul_forward_cpu(logits, lnf, k->p + k->head, NULL, n, H, V));
        float *losses = x->scratch;
        PTC_TRY(ptc_crossentropy_forward_cpu(losses, logits, tok + n, n, V));
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += losses[i];
        x->losses[mb] = sum / (double)n;
    } else if (out) {
        memcpy(out, xin, n * H * sizeof(float));
    }
    return PTC_OK;
}

/* Input-gradient pass; with `full` also the weight gradients (B). */
static int model_bwd(ptc_exec_model *x, int c, int mb, const void *dout, void *dinp, bool full)
{
    PTC_TRY(chunk_of(x, c, mb));
    chunk *k = &x->ch[c];
    float *a = k->act[mb];
    if (!a)
        return ptc_error_set(PTC_E_INVAL, "model: backward of mb %d chunk %d before forward",
                             mb, c);
    size_t n = (size_t)x->cfg.tokens, H = (size_t)x->cfg.hidden, F = x->fl,
           V = (size_t)x->cfg.vocab;
    const int32_t *tok = k->tok[mb];
    /* dx: gradient w.r.t. the current residual stream, in scratch. */
    float *dx = x->scratch, *tmp = x->scratch + n * (4 * H > V ? 4 * H : V);
    float *xlast = k->l1 > k->l0 ? lay_ptrs(x, k, a, k->l1 - k->l0 - 1).xout : a + k->a_x0;
    if (k->last) {
        float *lnf = a + k->a_head, *mean = lnf + n * H, *rstd = mean + n, *logits = rstd + n,
              *dlogits = logits + n * V;
        memset(dlogits, 0, n * V * sizeof(float));
        float scale = (float)(1.0 / ((double)n * (double)x->gmb_total));
        PTC_TRY(ptc_crossentropy_backward_cpu(dlogits, logits, tok + n, n, V, scale));
        memset(tmp, 0, n * H * sizeof(float));
        PTC_TRY(ptc_matmul_backward_cpu(tmp, full ? k->g + k->head : NULL, NULL, dlogits, lnf,
                                        k->p + k->head, n, H, V));
        memset(dx, 0, n * H * sizeof(float));
        PTC_TRY(ptc_layernorm_backward_cpu(dx, k->g + k->nw, k->g + k->nb, tmp, xlast,
                                           k->p + k->nw, mean, rstd, n, H));
    } else {
        memcpy(dx, dout, n * H * sizeof(float));
    }
    for (int l = k->l1 - 1; l >= k->l0; l--) {
        const layer_off *lo = &k->lay[l - k->l0];
        lay_act s = lay_ptrs(x, k, a, l - k->l0);
        const float *xin = l > k->l0 ? lay_ptrs(x, k, a, l - k->l0 - 1).xout : a + k->a_x0;
        memcpy(s.dx2, dx, n * H * sizeof(float)); /* dout of down_proj, kept for W */
        float *dg = tmp;
        memset(dg, 0, n * F * sizeof(float));
        PTC_TRY(ptc_matmul_backward_cpu(dg, full ? k->g + lo->w2 : NULL,
                                        full ? k->g + lo->b2 : NULL, s.dx2, s.g, k->p + lo->w2,
                                        n, F, H));
        memset(s.dh, 0, n * F * sizeof(float));
        PTC_TRY(ptc_gelu_backward_cpu(s.dh, s.h, dg, n * F));
        float *dln = tmp;
        memset(dln, 0, n * H * sizeof(float));
        PTC_TRY(ptc_matmul_backward_cpu(dln, full ? k->g + lo->w1 : NULL,
                                        full ? k->g + lo->b1 : NULL, s.dh, s.ln, k->p + lo->w1,
                                        n, H, F));
        /* column-parallel up_proj: the input gradient sums over the group */
        PTC_TRY(tp_allreduce(x, dln, n * H));
        /* residual: dxin = dx + LN backward(dln) */
        PTC_TRY(ptc_layernorm_backward_cpu(dx, k->g + lo->lnw, k->g + lo->lnb, dln, xin,
                                           k->p + lo->lnw, s.mean, s.rstd, n, H));
    }
    if (k->first) {
        float *demb = a + k->a_demb;
        memcpy(demb, dx, n * H * sizeof(float));
        if (full)
            PTC_TRY(ptc_embedding_backward_cpu(k->g + k->emb, demb, tok, n, V, H));
    } else if (dinp) {
        memcpy(dinp, dx, n * H * sizeof(float));
    }
    return PTC_OK;
}

static void release(ptc_exec_model *x, int c, int mb)
{
    chunk *k = &x->ch[c];
    ptc_free(k->act[mb]);
    ptc_free(k->tok[mb]);
    k->act[mb] = NULL;
    k->tok[mb] = NULL;
}

static int model_backward(void *user, int c, int mb, const void *dout, void *dinp)
{
    ptc_exec_model *x = user;
    PTC_TRY(model_bwd(x, c, mb, dout, dinp, true));
    release(x, c, mb);
    return PTC_OK;
}

static int model_backward_input(void *user, int c, int mb, const void *dout, void *dinp)
{
    return model_bwd(user, c, mb, dout, dinp, false);
}

int model_weight_pass(const ptc_exec_model *x, int c, int mb, float *a, float *g, const float *p,
                      const int32_t *tok, const model_wgrad_ops *ops, void *ctx)
{
    const chunk *k = &x->ch[c];
    if (!a)
        return ptc_error_set(PTC_E_INVAL, "model: weight gradient of mb %d chunk %d without "
                                          "its input gradient", mb, c);
    size_t n = (size_t)x->cfg.tokens, H = (size_t)x->cfg.hidden, F = x->fl,
           V = (size_t)x->cfg.vocab;
    if (k->last) {
        float *lnf = a + k->a_head, *logits = lnf + n * H + 2 * n, *dlogits = logits + n * V;
        PTC_TRY(ops->matmul(ctx, g + k->head, NULL, dlogits, lnf, p + k->head, n, H, V));
    }
    for (int l = k->l1 - 1; l >= k->l0; l--) {
        const layer_off *lo = &k->lay[l - k->l0];
        lay_act s = lay_ptrs(x, k, a, l - k->l0);
        PTC_TRY(ops->matmul(ctx, g + lo->w2, g + lo->b2, s.dx2, s.g, p + lo->w2, n, F, H));
        PTC_TRY(ops->matmul(ctx, g + lo->w1, g + lo->b1, s.dh, s.ln, p + lo->w1, n, H, F));
    }
    if (k->first)
        PTC_TRY(ops->embedding(ctx, g + k->emb, a + k->a_demb, tok, n, V, H));
    return PTC_OK;
}

static int cpu_wgrad_matmul(void *ctx, float *dw, float *db, const float *dout, const float *x,
                            const float *w, size_t n, size_t in, size_t out)
{
    (void)ctx;
    return ptc_matmul_backward_cpu(NULL, dw, db, dout, x, w, n, in, out);
}

static int cpu_wgrad_embedding(void *ctx, float *dtable, const float *dout, const int32_t *tok,
                               size_t n, size_t vocab, size_t hidden)
{
    (void)ctx;
    return ptc_embedding_backward_cpu(dtable, dout, tok, n, vocab, hidden);
}

static int model_backward_weight(void *user, int c, int mb)
{
    static const model_wgrad_ops cpu = {cpu_wgrad_matmul, cpu_wgrad_embedding};
    ptc_exec_model *x = user;
    PTC_TRY(chunk_of(x, c, mb));
    chunk *k = &x->ch[c];
    PTC_TRY(model_weight_pass(x, c, mb, k->act[mb], k->g, k->p, k->tok[mb], &cpu, NULL));
    release(x, c, mb);
    return PTC_OK;
}

static int model_grads(void *user, int c, float **g, size_t *count)
{
    ptc_exec_model *x = user;
    if (c < 0 || c >= x->nch)
        return ptc_error_set(PTC_E_RANGE, "model: chunk %d", c);
    *g = x->ch[c].g;
    *count = x->ch[c].count;
    return PTC_OK;
}

/* ZeRO-1: all-gather every replica's updated ranges of chunk c over the
 * replica group. Member j contributes, tensor by tensor in the chunk's
 * order, part j of each tensor; the gradient buffer (no longer needed)
 * receives them. */
static int zero_gather(ptc_exec_model *x, int c)
{
    chunk *k = &x->ch[c];
    if (k->nrep == 1 || !k->count)
        return PTC_OK;
    if (x->rep_comm == MPI_COMM_NULL)
        return ptc_error_set(PTC_E_INVAL, "model: zero=1 without the replica communicator "
                                          "(ptc_exec_model_set_comms)");
    int *counts = ptc_calloc((size_t)k->nrep, sizeof *counts);
    int *displs = ptc_calloc((size_t)k->nrep, sizeof *displs);
    int rc = counts && displs ? PTC_OK : ptc_error_set(PTC_E_NOMEM, "ZeRO all-gather");
    for (size_t i = 0; rc == PTC_OK && i < x->nparams; i++) {
        const ptc_exec_param *q = &x->params[i];
        if (q->chunk != c)
            continue;
        int64_t numel = q->shape[0] * (q->ndim > 1 ? q->shape[1] : 1), a, b;
        for (int j = 0; j < k->nrep; j++) {
            split_part(numel, k->nrep, j, &a, &b);
            counts[j] += (int)(b - a);
        }
    }
    for (int j = 1; rc == PTC_OK && j < k->nrep; j++)
        displs[j] = displs[j - 1] + counts[j - 1];
    float *buf = k->g;
    /* pack, send, unpack: one pass over the tensors per member */
    for (int pass = 0; rc == PTC_OK && pass < 2; pass++) {
        for (int j = 0; j < k->nrep; j++) {
            if (pass == 0 && j != k->rep)
                continue;
            size_t at = (size_t)displs[j];
            for (size_t i = 0; i < x->nparams; i++) {
                const ptc_exec_param *q = &x->params[i];
                if (q->chunk != c)
                    continue;
                int64_t numel = q->shape[0] * (q->ndim > 1 ? q->shape[1] : 1), a, b;
                split_part(numel, k->nrep, j, &a, &b);
                if (pass == 0)
                    memcpy(buf + at, q->data + a, (size_t)(b - a) * sizeof(float));
                else if (j != k->rep)
                    memcpy(q->data + a, buf + at, (size_t)(b - a) * sizeof(float));
                at += (size_t)(b - a);
            }
        }
        if (pass == 0) {
            int mrc = ptc_mpi_allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                                     MPI_FLOAT, x->rep_comm);
            if (mrc != MPI_SUCCESS)
                rc = ptc_error_set(PTC_E_MPI, "model: ZeRO MPI_Allgatherv failed (%d)", mrc);
        }
    }
    ptc_free(counts);
    ptc_free(displs);
    return rc;
}

void exec_model_before_update(ptc_exec_model *x, void (*fn)(void *user), void *user)
{
    x->before_update = fn;
    x->before_update_user = user;
}

static int model_optimizer(void *user)
{
    ptc_exec_model *x = user;
    if (x->before_update)
        x->before_update(x->before_update_user);
    ptc_adamw_params hp = {.lr = x->cfg.lr > 0 ? x->cfg.lr : 1e-3f,
                           .beta1 = 0.9f,
                           .beta2 = 0.999f,
                           .eps = 1e-8f,
                           .weight_decay = 0.0f};
    if (!x->cfg.zero) {
        for (int c = 0; c < x->nch; c++) {
            chunk *k = &x->ch[c];
            if (!k->count)
                continue;
            PTC_TRY(ptc_adamw_update_cpu(k->p, k->m, k->v, k->g, k->count, &hp, x->step + 1));
            memset(k->g, 0, k->count * sizeof(float));
        }
        return PTC_OK;
    }
    /* ZeRO-1: each replica updates its ranges, then the ranges are gathered,
     * chunk by chunk in the order the runtime reduced them (stage order for
     * two pipes), so that every member issues the same collectives. */
    int order[2] = {0, 1};
    if (x->nch == 2 && x->ch[1].stage < x->ch[0].stage)
        order[0] = 1, order[1] = 0;
    for (int oi = 0; oi < x->nch; oi++) {
        int c = x->nch == 2 ? order[oi] : oi;
        chunk *k = &x->ch[c];
        for (size_t i = 0; i < x->nparams; i++) {
            ptc_exec_param *q = &x->params[i];
            if (q->chunk != c || q->optim_count == 0)
                continue;
            size_t off = (size_t)(q->data - k->p) + (size_t)q->optim_offset;
            PTC_TRY(ptc_adamw_update_cpu(k->p + off, q->exp_avg, q->exp_avg_sq, k->g + off,
                                         (size_t)q->optim_count, &hp, x->step + 1));
        }
        PTC_TRY(zero_gather(x, c));
        if (k->count)
            memset(k->g, 0, k->count * sizeof(float));
    }
    return PTC_OK;
}

void ptc_exec_model_stage(ptc_exec_model *x, ptc_exec_stage *out)
{
    memset(out, 0, sizeof *out);
    out->user = x;
    out->forward = model_forward;
    out->backward = model_backward;
    out->backward_input = model_backward_input;
    out->backward_weight = model_backward_weight;
    out->grads = model_grads;
    out->optimizer_step = model_optimizer;
}
