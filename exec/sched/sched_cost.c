/* Cost model of a parallel configuration: model descriptions, transformer
 * specs, per-stage compute, tensor-/data-/pipeline-parallel communication,
 * the simulator's bubble and activations, memory per GPU. docs/search.md
 * writes every formula down; the comments here say why. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_search_internal.h"

struct ptc_cost_model {
    ptc_cost_model_info info;
    ptc_cost_tensor *t;
    size_t n;
    int64_t L;
    bool has_optim;
    double params;
};

/* ---- descriptions ------------------------------------------------------------- */

static const char *tname(const ptc_cost_tensor *t, size_t i, char *buf, size_t cap)
{
    if (t->name && *t->name)
        return t->name;
    snprintf(buf, cap, "#%zu", i);
    return buf;
}

static bool dtype_ok(ptc_dtype d) { return (int)d >= 0 && d < PTC_DTYPE_COUNT; }

static double numel(const ptc_cost_tensor *t)
{
    double n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (double)t->shape[d];
    return n;
}

void ptc_cost_model_destroy(ptc_cost_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        ptc_free((char *)m->t[i].name);
    ptc_free(m->t);
    ptc_free(m);
}

static int check_tensor(const ptc_cost_tensor *t, size_t i)
{
    char nb[32];
    const char *nm = tname(t, i, nb, sizeof nb);
    if (t->ndim < 0 || t->ndim > PTC_MAX_DIMS)
        return ptc_error_set(PTC_E_INVAL, "tensor %.200s: %d dimensions", nm, t->ndim);
    if (!dtype_ok(t->dtype))
        return ptc_error_set(PTC_E_INVAL, "tensor %.200s: bad dtype", nm);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return ptc_error_set(PTC_E_INVAL, "tensor %.200s: negative extent", nm);
    if (t->tp_dim < -1 || t->tp_dim >= t->ndim)
        return ptc_error_set(PTC_E_INVAL, "tensor %.200s: split dimension %d of a %d-d tensor",
                             nm, t->tp_dim, t->ndim);
    if (t->tp_blocks < 0 || (t->tp_dim >= 0 && t->tp_blocks > 1 &&
                             t->shape[t->tp_dim] % t->tp_blocks != 0))
        return ptc_error_set(PTC_E_INVAL, "tensor %.200s: %d blocks do not divide dimension %d",
                             nm, t->tp_blocks, t->tp_dim);
    if ((unsigned)t->pp > PTC_COST_PP_ALL || (unsigned)t->kind > PTC_COST_OPTIM ||
        (unsigned)t->op > PTC_COST_OP_TIED)
        return ptc_error_set(PTC_E_INVAL, "tensor %.200s: bad pp, kind or op", nm);
    if (t->pp == PTC_COST_PP_LAYER && (t->layer < 0 || t->layer >= (1 << 24)))
        return ptc_error_set(PTC_E_INVAL, "tensor %.200s: layer %lld out of range", nm,
                             (long long)t->layer);
    if (t->kind == PTC_COST_PARAM && t->op != PTC_COST_OP_OTHER) {
        if (t->ndim != 2 || (t->in_dim != 0 && t->in_dim != 1))
            return ptc_error_set(PTC_E_INVAL,
                                 "tensor %.200s: a matrix product or lookup needs a 2-d "
                                 "shape and in_dim 0 or 1", nm);
        if (t->op == PTC_COST_OP_TIED && t->pp != PTC_COST_PP_FIRST_LAST)
            return ptc_error_set(PTC_E_INVAL, "tensor %.200s: a tied embedding must be on the "
                                              "first and last stage", nm);
    }
    return PTC_OK;
}

int ptc_cost_model_create(ptc_cost_model **out, const ptc_cost_tensor *t, size_t n,
                          const ptc_cost_model_info *info)
{
    *out = NULL;
    if (!info || info->seq < 1 || info->hidden < 1 || info->heads < 0 || info->kv_heads < 0)
        return ptc_error_set(PTC_E_INVAL, "model: seq and hidden must be >= 1");
    if (!dtype_ok(info->act_dtype) || !dtype_ok(info->grad_dtype))
        return ptc_error_set(PTC_E_INVAL, "model: bad activation or gradient dtype");
    const double *figs[] = {&info->optim_bytes_per_param, &info->attn_flops,
                            &info->recompute_flops, &info->act_fixed, &info->act_split,
                            &info->act_first, &info->act_last_split, &info->act_stage};
    for (size_t i = 0; i < PTC_ARRAY_LEN(figs); i++)
        if (!(*figs[i] >= 0) || !isfinite(*figs[i]))
            return ptc_error_set(PTC_E_INVAL, "model: figures must be finite and >= 0");
    int64_t maxl = -1;
    for (size_t i = 0; i < n; i++) {
        PTC_TRY(check_tensor(&t[i], i));
        if (t[i].pp == PTC_COST_PP_LAYER && t[i].layer > maxl)
            maxl = t[i].layer;
    }
    if (maxl < 0)
        return ptc_error_set(PTC_E_INVAL, "model: no tensor belongs to a layer");
    bool *seen = ptc_calloc((size_t)maxl + 1, 1);
    if (!seen)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (t[i].pp == PTC_COST_PP_LAYER)
            seen[t[i].layer] = true;
    for (int64_t l = 0; l <= maxl; l++)
        if (!seen[l]) {
            ptc_free(seen);
            return ptc_error_set(PTC_E_INVAL, "model: layers must be 0..%lld, %lld has no tensor",
                                 (long long)maxl, (long long)l);
        }
    ptc_free(seen);
    ptc_cost_model *m = ptc_calloc(1, sizeof *m);
    if (!m)
        return PTC_E_NOMEM;
    m->t = ptc_calloc(n ? n : 1, sizeof *m->t);
    if (!m->t) {
        ptc_free(m);
        return PTC_E_NOMEM;
    }
    m->info = *info;
    m->L = maxl + 1;
    for (size_t i = 0; i < n; i++) {
        m->t[i] = t[i];
        m->t[i].name = NULL;
        m->n = i + 1;
        if (t[i].name && !(m->t[i].name = ptc_strdup(t[i].name))) {
            ptc_cost_model_destroy(m);
            return PTC_E_NOMEM;
        }
        if (t[i].kind == PTC_COST_OPTIM)
            m->has_optim = true;
        else
            m->params += numel(&t[i]);
    }
    *out = m;
    return PTC_OK;
}

int64_t ptc_cost_model_layers(const ptc_cost_model *m) { return m->L; }
double ptc_cost_model_params(const ptc_cost_model *m) { return m->params; }
const ptc_cost_model_info *ptc_cost_model_get_info(const ptc_cost_model *m) { return &m->info; }
size_t ptc_cost_model_count(const ptc_cost_model *m) { return m->n; }
const ptc_cost_tensor *ptc_cost_model_tensor(const ptc_cost_model *m, size_t i)
{
    return i < m->n ? &m->t[i] : NULL;
}

/* ---- specs -------------------------------------------------------------------- */

int ptc_search_spec_parse(ptc_search_spec *out, const char *text)
{
    ptc_search_spec s;
    memset(&s, 0, sizeof s);
    const char *p;
    if (!strncmp(text, "gpt:", 4)) {
        s.family = PTC_SEARCH_GPT;
        p = text + 4;
    } else if (!strncmp(text, "mlp:", 4)) {
        s.family = PTC_SEARCH_MLP;
        s.layers = 4, s.hidden = 16, s.vocab = 32, s.seq = 8;
        p = text + 4;
    } else {
        return ptc_error_set(PTC_E_INVAL, "model spec '%.80s': expected gpt:layers=L,hidden=H,"
                                          "heads=A,vocab=V,seq=S or mlp:layers=L,hidden=H,vocab=V",
                             text);
    }
    while (*p) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        if (!comma)
            comma = p + strlen(p);
        if (!eq || eq > comma)
            return ptc_error_set(PTC_E_INVAL, "model spec: '%.*s' is not key=value",
                                 (int)(comma - p > 60 ? 60 : comma - p), p);
        size_t kl = (size_t)(eq - p);
        const char *v = eq + 1;
        size_t vl = (size_t)(comma - v);
        if (kl == 9 && !strncmp(p, "recompute", 9) && s.family == PTC_SEARCH_GPT) {
            if (vl == 9 && !strncmp(v, "selective", 9))
                s.recompute = PTC_SEARCH_RECOMPUTE_SELECTIVE;
            else if (vl == 4 && !strncmp(v, "none", 4))
                s.recompute = PTC_SEARCH_RECOMPUTE_NONE;
            else if (vl == 4 && !strncmp(v, "full", 4))
                s.recompute = PTC_SEARCH_RECOMPUTE_FULL;
            else
                return ptc_error_set(PTC_E_INVAL, "model spec: recompute must be selective, "
                                                  "none or full");
            p = *comma ? comma + 1 : comma;
            continue;
        }
        char *end;
        long long x = vl && isdigit((unsigned char)*v) ? strtoll(v, &end, 10) : -1;
        if (x < 1 || end != comma || x > (1ll << 40))
            return ptc_error_set(PTC_E_INVAL, "model spec: %.*s needs an integer from 1 to 2^40",
                                 (int)(kl > 40 ? 40 : kl), p);
        struct {
            const char *k;
            int64_t *dst;
            bool gpt, mlp;
        } keys[] = {{"layers", &s.layers, 1, 1},   {"hidden", &s.hidden, 1, 1},
                    {"heads", &s.heads, 1, 0},     {"kv_heads", &s.kv_heads, 1, 0},
                    {"ffn", &s.ffn, 1, 0},         {"vocab", &s.vocab, 1, 1},
                    {"seq", &s.seq, 1, 0},         {"tokens", &s.seq, 0, 1}};
        bool found = false;
        for (size_t i = 0; i < PTC_ARRAY_LEN(keys); i++)
            if (strlen(keys[i].k) == kl && !strncmp(p, keys[i].k, kl) &&
                (s.family == PTC_SEARCH_GPT ? keys[i].gpt : keys[i].mlp)) {
                *keys[i].dst = x;
                found = true;
            }
        if (!found)
            return ptc_error_set(PTC_E_INVAL, "model spec: unknown key '%.*s' for %s", (int)kl,
                                 p, s.family == PTC_SEARCH_GPT ? "gpt" : "mlp");
        p = *comma ? comma + 1 : comma;
    }
    if (s.family == PTC_SEARCH_GPT) {
        const char *miss = !s.layers ? "layers" : !s.hidden ? "hidden" : !s.heads ? "heads"
                         : !s.vocab ? "vocab" : !s.seq ? "seq" : NULL;
        if (miss)
            return ptc_error_set(PTC_E_INVAL, "model spec: gpt needs %s=", miss);
        if (s.hidden % s.heads)
            return ptc_error_set(PTC_E_INVAL, "model spec: heads (%lld) must divide hidden (%lld)",
                                 (long long)s.heads, (long long)s.hidden);
        if (!s.kv_heads)
            s.kv_heads = s.heads;
        if (s.heads % s.kv_heads)
            return ptc_error_set(PTC_E_INVAL, "model spec: kv_heads (%lld) must divide heads "
                                              "(%lld)", (long long)s.kv_heads, (long long)s.heads);
        if (!s.ffn)
            s.ffn = 4 * s.hidden;
    }
    if (s.layers > (1 << 20))
        return ptc_error_set(PTC_E_INVAL, "model spec: at most 2^20 layers");
    *out = s;
    return PTC_OK;
}

typedef struct tbuild {
    ptc_cost_tensor *t;
    size_t n, cap;
    char (*names)[64];
    int rc;
} tbuild;

static void add(tbuild *b, const char *name, ptc_dtype dt, int ndim, int64_t d0, int64_t d1,
                int tp_dim, int blocks, ptc_cost_pp pp, int64_t layer, ptc_cost_op op, int in_dim)
{
    if (b->rc)
        return;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        ptc_cost_tensor *nt = ptc_realloc(b->t, nc * sizeof *nt);
        char(*nn)[64] = nt ? ptc_realloc(b->names, nc * sizeof *nn) : NULL;
        if (nt)
            b->t = nt;
        if (!nn) {
            b->rc = PTC_E_NOMEM;
            return;
        }
        b->names = nn;
        b->cap = nc;
    }
    ptc_cost_tensor *t = &b->t[b->n];
    memset(t, 0, sizeof *t);
    if (layer >= 0)
        snprintf(b->names[b->n], 64, "layers.%lld.%s", (long long)layer, name);
    else
        snprintf(b->names[b->n], 64, "%s", name);
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->tp_dim = tp_dim;
    t->tp_blocks = blocks;
    t->pp = pp;
    t->layer = layer;
    t->kind = PTC_COST_PARAM;
    t->op = op;
    t->in_dim = in_dim;
    b->n++;
}

int ptc_cost_model_from_spec(ptc_cost_model **out, const ptc_search_spec *sp)
{
    *out = NULL;
    tbuild b;
    memset(&b, 0, sizeof b);
    ptc_cost_model_info in;
    memset(&in, 0, sizeof in);
    int64_t H = sp->hidden, L = sp->layers, V = sp->vocab, S = sp->seq;
    if (L < 1 || H < 1 || V < 1 || S < 1)
        return ptc_error_set(PTC_E_INVAL, "model spec: layers, hidden, vocab and seq must be >= 1");
    const ptc_cost_pp LY = PTC_COST_PP_LAYER;
    const ptc_cost_op MM = PTC_COST_OP_MATMUL, OT = PTC_COST_OP_OTHER;
    in.seq = S;
    in.hidden = H;
    if (sp->family == PTC_SEARCH_GPT) {
        if (sp->heads < 1 || H % sp->heads || sp->kv_heads < 1 || sp->heads % sp->kv_heads ||
            sp->ffn < 1)
            return ptc_error_set(PTC_E_INVAL, "model spec: heads must divide hidden and kv_heads "
                                              "heads");
        const ptc_dtype dt = PTC_DTYPE_BF16;
        int64_t F = sp->ffn, hd = H / sp->heads, qkv = H + 2 * sp->kv_heads * hd;
        for (int64_t l = 0; l < L; l++) {
            add(&b, "input_layernorm.weight", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
            add(&b, "input_layernorm.bias", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
            /* q, k and v are blocks of unequal size: the per-head split that
             * Megatron's fused layout gives is a plain row split of it. */
            add(&b, "self_attention.query_key_value.weight", dt, 2, qkv, H, 0, 0, LY, l, MM, 1);
            add(&b, "self_attention.query_key_value.bias", dt, 1, qkv, 0, 0, 0, LY, l, OT, 0);
            add(&b, "self_attention.dense.weight", dt, 2, H, H, 1, 0, LY, l, MM, 1);
            add(&b, "self_attention.dense.bias", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
            add(&b, "post_attention_layernorm.weight", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
            add(&b, "post_attention_layernorm.bias", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
            add(&b, "mlp.dense_h_to_4h.weight", dt, 2, F, H, 0, 0, LY, l, MM, 1);
            add(&b, "mlp.dense_h_to_4h.bias", dt, 1, F, 0, 0, 0, LY, l, OT, 0);
            add(&b, "mlp.dense_4h_to_h.weight", dt, 2, H, F, 1, 0, LY, l, MM, 1);
            add(&b, "mlp.dense_4h_to_h.bias", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
        }
        add(&b, "embedding.word_embeddings.weight", dt, 2, V, H, 0, 0, PTC_COST_PP_FIRST, -1,
            PTC_COST_OP_LOOKUP, 0);
        add(&b, "embedding.position_embeddings.weight", dt, 2, S, H, -1, 0, PTC_COST_PP_FIRST,
            -1, PTC_COST_OP_LOOKUP, 0);
        add(&b, "final_layernorm.weight", dt, 1, H, 0, -1, 0, PTC_COST_PP_LAST, -1, OT, 0);
        add(&b, "final_layernorm.bias", dt, 1, H, 0, -1, 0, PTC_COST_PP_LAST, -1, OT, 0);
        add(&b, "output_layer.weight", dt, 2, V, H, 0, 0, PTC_COST_PP_LAST, -1, MM, 1);
        in.heads = sp->heads;
        in.kv_heads = sp->kv_heads;
        in.act_dtype = PTC_DTYPE_BF16;
        in.grad_dtype = PTC_DTYPE_BF16;
        in.optim_bytes_per_param = 12; /* fp32 master, Adam m and v */
        in.attn_flops = 4.0 * (double)S * (double)H;
        double h = (double)H, a = (double)sp->heads, s = (double)S;
        /* Korthikanti et al. 2022, bytes per token per layer, 16-bit. */
        switch (sp->recompute) {
        case PTC_SEARCH_RECOMPUTE_SELECTIVE:
            in.act_split = 34 * h;
            in.recompute_flops = in.attn_flops;
            break;
        case PTC_SEARCH_RECOMPUTE_NONE:
            in.act_fixed = 10 * h;
            in.act_split = 24 * h + 5 * a * s;
            break;
        case PTC_SEARCH_RECOMPUTE_FULL:
            in.act_split = 2 * h;
            in.recompute_flops = 2.0 * (double)(qkv * H + H * H + 2 * F * H) + in.attn_flops;
            break;
        }
        in.act_last_split = 4.0 * (double)V; /* fp32 logits for the loss */
    } else {
        /* The demo model (exec/runtime_model.c): F32 everywhere, AdamW. */
        const ptc_dtype dt = PTC_DTYPE_F32;
        int64_t F = 4 * H;
        add(&b, "model.embed_tokens.weight", dt, 2, V, H, -1, 0, PTC_COST_PP_FIRST, -1,
            PTC_COST_OP_LOOKUP, 0);
        for (int64_t l = 0; l < L; l++) {
            add(&b, "input_layernorm.weight", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
            add(&b, "input_layernorm.bias", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
            add(&b, "mlp.up_proj.weight", dt, 2, F, H, 0, 0, LY, l, MM, 1);
            add(&b, "mlp.up_proj.bias", dt, 1, F, 0, 0, 0, LY, l, OT, 0);
            add(&b, "mlp.down_proj.weight", dt, 2, H, F, 1, 0, LY, l, MM, 1);
            add(&b, "mlp.down_proj.bias", dt, 1, H, 0, -1, 0, LY, l, OT, 0);
        }
        add(&b, "model.norm.weight", dt, 1, H, 0, -1, 0, PTC_COST_PP_LAST, -1, OT, 0);
        add(&b, "model.norm.bias", dt, 1, H, 0, -1, 0, PTC_COST_PP_LAST, -1, OT, 0);
        add(&b, "lm_head.weight", dt, 2, V, H, -1, 0, PTC_COST_PP_LAST, -1, MM, 1);
        in.act_dtype = PTC_DTYPE_F32;
        in.grad_dtype = PTC_DTYPE_F32;
        in.optim_bytes_per_param = 8; /* AdamW m and v */
        /* The block one micro-batch keeps per chunk, in floats per token:
         * stage input H; per layer LN out, x out, dx2, dsum (4H), mean and
         * rstd (2), h, g, dh (3F); first stage dEmb H; last stage final LN
         * H, mean, rstd, logits and their gradient (2V). */
        double h = (double)H;
        in.act_stage = 4 * h;
        in.act_fixed = 4 * (4 * h + 2 + 3 * (double)F);
        in.act_first = 4 * h;
        in.act_last_split = 4 * (h + 2 + 2 * (double)V);
    }
    if (b.rc) {
        ptc_free(b.t);
        ptc_free(b.names);
        return b.rc;
    }
    for (size_t i = 0; i < b.n; i++)
        b.t[i].name = b.names[i];
    int rc = ptc_cost_model_create(out, b.t, b.n, &in);
    ptc_free(b.t);
    ptc_free(b.names);
    return rc;
}

/* ---- per-tp aggregates ------------------------------------------------------------- */

static void agg_add(cost_agg *a, const cost_agg *b, double s)
{
    double *x = (double *)a;
    const double *y = (const double *)b;
    for (size_t i = 0; i < sizeof *a / sizeof(double); i++)
        x[i] += s * y[i];
}

/* Elements of the tp shard on the fullest rank (the split rule's first part). */
static double local_numel(const ptc_cost_tensor *t, int T)
{
    double n = 1;
    for (int d = 0; d < t->ndim; d++) {
        double e = (double)t->shape[d];
        if (d == t->tp_dim && T > 1) {
            double blocks = t->tp_blocks > 1 ? t->tp_blocks : 1;
            e = blocks * ceil(e / blocks / T);
        }
        n *= e;
    }
    return n;
}

/* Matrix-product bookkeeping of one group, for pairing column- with
 * row-parallel products. */
typedef struct pairing {
    int rows, cols;
    double row_w, col_in, col_out;
} pairing;

static void matmul(cost_agg *g, pairing *pr, const ptc_cost_tensor *t, int in_dim, int T,
                   double ln)
{
    g->flops_f += 2 * ln;
    g->flops_bw += 2 * ln;
    g->flops_bi += 2 * ln;
    if (T <= 1 || t->tp_dim < 0)
        return;
    double in_w = (double)t->shape[in_dim], out_w = (double)t->shape[1 - in_dim];
    if (t->tp_dim == in_dim) { /* contraction split: output is a partial sum */
        pr->rows++;
        pr->row_w += out_w;
    } else {
        pr->cols++;
        pr->col_in = fmax(pr->col_in, in_w);
        pr->col_out = fmax(pr->col_out, out_w);
    }
}

static void lookup(cost_agg *g, const ptc_cost_tensor *t, int T)
{
    if (T <= 1 || t->tp_dim < 0)
        return;
    double w = (double)t->shape[1 - t->in_dim];
    if (t->tp_dim == t->in_dim) { /* vocabulary split: partial sums of rows */
        g->ar_f_n += 1;
        g->ar_f_w += w;
    } else { /* width split: gather the output */
        g->ag_f_n += 1;
        g->ag_f_w += w;
    }
}

/* Pair column-parallel products with the row-parallel ones that close
 * them: each pair is one all-reduce forward (the row product's partial
 * sum) and one backward (the column products' input gradient). Column
 * products left without a partner keep their output split: the output
 * layer's vocabulary-parallel loss needs three small all-reduces (max,
 * sum of exponentials, target logit), anything else an all-gather. */
static void close_pairs(cost_agg *g, const pairing *pr, bool last)
{
    if (pr->rows > 0) {
        g->ar_f_n += pr->rows;
        g->ar_f_w += pr->row_w;
        g->ar_b_n += pr->rows;
        g->ar_b_w += pr->row_w;
    } else if (pr->cols > 0) {
        g->ar_b_n += 1;
        g->ar_b_w += pr->col_in;
        if (last) {
            g->small_f_n += 3;
        } else {
            g->ag_f_n += 1;
            g->ag_f_w += pr->col_out;
        }
    }
}

static void tp_free(cost_tp *t) { ptc_free(t->pre); }

static int tp_build(const ptc_cost_model *m, int T, cost_tp *out)
{
    memset(out, 0, sizeof *out);
    out->tp = T;
    out->valid = true;
    const ptc_cost_model_info *in = &m->info;
    if (T > 1 && in->heads > 0 && (in->heads % T || in->kv_heads % T)) {
        out->valid = false;
        snprintf(out->why, sizeof out->why, "tp=%d does not divide %lld heads and %lld kv heads",
                 T, (long long)in->heads, (long long)in->kv_heads);
    }
    size_t L = (size_t)m->L;
    cost_agg *lay = ptc_calloc(L + 1, sizeof *lay);
    pairing *pr = ptc_calloc(L + 2, sizeof *pr);
    out->pre = ptc_calloc(L + 1, sizeof *out->pre);
    if (!lay || !pr || !out->pre) {
        ptc_free(lay);
        ptc_free(pr);
        tp_free(out);
        return PTC_E_NOMEM;
    }
    pairing *pfirst = &pr[L], *plast = &pr[L + 1];
    size_t gsz = ptc_dtype_size(in->grad_dtype);
    for (size_t i = 0; i < m->n; i++) {
        const ptc_cost_tensor *t = &m->t[i];
        if (T > 1 && out->valid && t->pp == PTC_COST_PP_LAYER && t->tp_dim >= 0) {
            int64_t blocks = t->tp_blocks > 1 ? t->tp_blocks : 1;
            if ((t->shape[t->tp_dim] / blocks) % T) {
                out->valid = false;
                char nb[32];
                snprintf(out->why, sizeof out->why, "tp=%d does not divide dimension %d (%lld) "
                         "of %.60s", T, t->tp_dim, (long long)(t->shape[t->tp_dim] / blocks),
                         tname(t, i, nb, sizeof nb));
            }
        }
        double ln = local_numel(t, T);
        cost_agg *mem;
        switch (t->pp) {
        case PTC_COST_PP_LAYER: mem = &lay[t->layer]; break;
        case PTC_COST_PP_FIRST: mem = &out->first; break;
        case PTC_COST_PP_LAST: mem = &out->last; break;
        case PTC_COST_PP_FIRST_LAST: mem = &out->fl_mem; break;
        default: mem = &out->all; break;
        }
        double dsz = (double)ptc_dtype_size(t->dtype);
        if (t->kind == PTC_COST_OPTIM) {
            mem->optim_b += ln * dsz;
            continue;
        }
        mem->param_b += ln * dsz;
        mem->grad_b += ln * (double)gsz;
        if (!m->has_optim)
            mem->optim_b += ln * in->optim_bytes_per_param;
        if (t->op == PTC_COST_OP_OTHER || t->pp == PTC_COST_PP_ALL)
            continue;
        /* Where the tensor computes. */
        bool on_first = t->pp == PTC_COST_PP_FIRST ||
                        (t->pp == PTC_COST_PP_FIRST_LAST && t->op != PTC_COST_OP_MATMUL);
        bool on_last = t->pp == PTC_COST_PP_LAST ||
                       (t->pp == PTC_COST_PP_FIRST_LAST && t->op != PTC_COST_OP_LOOKUP);
        cost_agg *g = t->pp == PTC_COST_PP_LAYER ? &lay[t->layer] : NULL;
        pairing *p = t->pp == PTC_COST_PP_LAYER ? &pr[t->layer] : NULL;
        if (t->op == PTC_COST_OP_MATMUL) {
            if (!g) {
                g = on_last ? &out->last : &out->first;
                p = on_last ? plast : pfirst;
            }
            matmul(g, p, t, t->in_dim, T, ln);
        } else if (t->op == PTC_COST_OP_LOOKUP) {
            lookup(g ? g : on_last && !on_first ? &out->last : &out->first, t, T);
        } else { /* tied: lookup first, output product last (contracting the width) */
            lookup(&out->first, t, T);
            matmul(&out->last, plast, t, 1 - t->in_dim, T, ln);
        }
    }
    for (size_t l = 0; l < L; l++) {
        close_pairs(&lay[l], &pr[l], false);
        double a = in->heads > 0 || in->attn_flops > 0 ? in->attn_flops / T : 0;
        lay[l].flops_f += a;
        lay[l].flops_bi += 2 * a + in->recompute_flops / T;
        lay[l].act += in->act_fixed + in->act_split / T;
        agg_add(&out->pre[l + 1], &out->pre[l], 1);
        agg_add(&out->pre[l + 1], &lay[l], 1);
    }
    close_pairs(&out->first, pfirst, false);
    close_pairs(&out->last, plast, true);
    out->first.act += in->act_first;
    out->last.act += in->act_last_split / T;
    ptc_free(lay);
    ptc_free(pr);
    return PTC_OK;
}

/* ---- context and caches ------------------------------------------------------------ */

int cost_check_inputs(const ptc_search_cluster *c, const ptc_search_job *j)
{
    if (c->gpus < 1)
        return ptc_error_set(PTC_E_INVAL, "gpus must be >= 1, got %d", c->gpus);
    if (c->gpus_per_host < 1)
        return ptc_error_set(PTC_E_INVAL, "gpus per host must be >= 1");
    if (!(c->mem_bytes > 0) || !(c->flops > 0) || !(c->intra_bw > 0) || !(c->inter_bw > 0) ||
        !(c->intra_lat >= 0) || !(c->inter_lat >= 0) ||
        !isfinite(c->mem_bytes + c->flops + c->intra_bw + c->inter_bw + c->intra_lat +
                  c->inter_lat))
        return ptc_error_set(PTC_E_INVAL, "cluster: memory, FLOP/s and bandwidths must be > 0, "
                                          "latencies >= 0");
    if (j->global_batch < 1 || j->global_batch > (1ll << 40))
        return ptc_error_set(PTC_E_INVAL, "global batch must be 1..2^40, got %lld",
                             (long long)j->global_batch);
    if (j->max_mb_size < 0)
        return ptc_error_set(PTC_E_INVAL, "largest micro-batch size must be >= 0");
    return PTC_OK;
}

int cost_ctx_init(cost_ctx *x, const ptc_cost_model *m, const ptc_search_cluster *c,
                  const ptc_search_job *j)
{
    memset(x, 0, sizeof *x);
    PTC_TRY(cost_check_inputs(c, j));
    x->m = m;
    x->c = *c;
    x->j = *j;
    return PTC_OK;
}

static void peaks_free(cost_peaks *p);

void cost_ctx_free(cost_ctx *x)
{
    for (size_t i = 0; i < x->ntps; i++)
        tp_free(&x->tps[i]);
    ptc_free(x->tps);
    for (size_t i = 0; i < x->sim_cap; i++)
        peaks_free(&x->sims[i].peaks);
    ptc_free(x->sims);
    ptc_free(x->topos);
    for (size_t i = 0; i < x->gen_n; i++)
        ptc_sched_destroy(x->gens[i].s);
    ptc_free(x->gens);
    memset(x, 0, sizeof *x);
}

const cost_tp *cost_tp_get(cost_ctx *x, int T)
{
    for (size_t i = 0; i < x->ntps; i++)
        if (x->tps[i].tp == T)
            return &x->tps[i];
    if (ptc_grow((void **)&x->tps, &x->cap_tps, x->ntps + 1, sizeof *x->tps))
        return NULL;
    if (tp_build(x->m, T, &x->tps[x->ntps]) != PTC_OK)
        return NULL;
    return &x->tps[x->ntps++];
}

static uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* ---- topology ------------------------------------------------------------------------ */

/* Host shape of the group {base + i*stride}, merged into *s as the worst
 * case seen so far (most hosts, fewest members on one host). */
static void shape_merge(cost_shape *s, const int *r, int n, int G)
{
    int hosts = 0, kmin = n, run = 0, prev = -1;
    for (int i = 0; i < n; i++) {
        int h = r[i] / G;
        if (h != prev) {
            if (prev >= 0)
                kmin = PTC_MIN(kmin, run);
            hosts++;
            run = 0;
            prev = h;
        }
        run++;
    }
    kmin = PTC_MIN(kmin, run);
    s->n = n;
    s->h = PTC_MAX(s->h, hosts);
    s->k = s->k ? PTC_MIN(s->k, kmin) : kmin;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static const cost_topo *topo_get(cost_ctx *x, int D, int T, int P, int V, bool wrap,
                                 bool chimera)
{
    for (size_t i = 0; i < x->topo_n; i++) {
        const cost_topo *t = &x->topos[i];
        if (t->D == D && t->T == T && t->P == P && t->V == V && t->kind_wrap == wrap &&
            t->chimera == chimera)
            return t;
    }
    if (ptc_grow((void **)&x->topos, &x->topo_cap, x->topo_n + 1, sizeof *x->topos))
        return NULL;
    int G = x->c.gpus_per_host;
    int n = PTC_MAX(PTC_MAX(T, 2 * D), 2);
    int *r = ptc_malloc((size_t)n * sizeof *r);
    if (!r)
        return NULL;
    cost_topo *t = &x->topos[x->topo_n];
    memset(t, 0, sizeof *t);
    t->D = D, t->T = T, t->P = P, t->V = V, t->kind_wrap = wrap, t->chimera = chimera;
#define RANK(pp, dp, tp) (((pp) * D + (dp)) * T + (tp))
    for (int pp = 0; pp < P; pp++)
        for (int dp = 0; dp < D; dp++) {
            for (int i = 0; i < T; i++)
                r[i] = RANK(pp, dp, i);
            shape_merge(&t->tp, r, T, G);
        }
    for (int pp = 0; pp < P; pp++)
        for (int tp = 0; tp < T; tp++) {
            int m = 0;
            /* Chimera reduces over the replica pair {pp, P-1-pp}. */
            int other = chimera ? P - 1 - pp : pp;
            for (int dp = 0; dp < D; dp++) {
                r[m++] = RANK(pp, dp, tp);
                if (other != pp)
                    r[m++] = RANK(other, dp, tp);
            }
            qsort(r, (size_t)m, sizeof *r, cmp_int);
            shape_merge(&t->dp, r, m, G);
        }
    for (int pp = 0; pp + 1 < P && !t->pp_inter; pp++)
        for (int i = 0; i < D * T && !t->pp_inter; i++)
            t->pp_inter = RANK(pp, 0, i) / G != RANK(pp + 1, 0, i) / G;
    for (int i = 0; wrap && P > 1 && i < D * T && !t->pp_inter; i++)
        t->pp_inter = RANK(P - 1, 0, i) / G != RANK(0, 0, i) / G;
#undef RANK
    ptc_free(r);
    t->used = true;
    return &x->topos[x->topo_n++];
}

/* Ring all-reduce of @p bytes over a group; hierarchical (reduce-scatter
 * inside each host, all-reduce of a 1/k share between hosts, all-gather
 * inside) when the group has k > 1 members on each of h > 1 hosts. */
static double t_allreduce(const ptc_search_cluster *c, const cost_shape *s, double bytes)
{
    double n = s->n, k = s->k, h = s->h;
    if (n <= 1 || bytes < 0)
        return 0;
    if (h <= 1)
        return 2 * (n - 1) * c->intra_lat + 2 * (n - 1) / n * bytes / c->intra_bw;
    if (k <= 1)
        return 2 * (n - 1) * c->inter_lat + 2 * (n - 1) / n * bytes / c->inter_bw;
    return 2 * ((k - 1) * c->intra_lat + (k - 1) / k * bytes / c->intra_bw) +
           2 * (h - 1) * c->inter_lat + 2 * (h - 1) / h * bytes / k / c->inter_bw;
}

/* Reduce-scatter or all-gather: half an all-reduce in every case. */
static double t_half(const ptc_search_cluster *c, const cost_shape *s, double bytes)
{
    return t_allreduce(c, s, bytes) / 2;
}

/* ---- simulations ---------------------------------------------------------------------- */

typedef struct sim_key {
    int kind, P, M, V, k;
    double f, b, w, lat, bw, act;
} sim_key;

static uint64_t key_hash(const sim_key *k)
{
    uint64_t h = 0x51ED270B27E1ull;
    h = mix64(h, (uint64_t)k->kind);
    h = mix64(h, (uint64_t)k->P);
    h = mix64(h, (uint64_t)k->M);
    h = mix64(h, (uint64_t)k->V);
    h = mix64(h, (uint64_t)k->k);
    h = mix64(h, dbits(k->f));
    h = mix64(h, dbits(k->b));
    h = mix64(h, dbits(k->w));
    h = mix64(h, dbits(k->lat));
    h = mix64(h, dbits(k->bw));
    return mix64(h, dbits(k->act));
}

static bool key_eq(const cost_sim *s, const sim_key *k)
{
    return s->kind == k->kind && s->P == k->P && s->M == k->M && s->V == k->V && s->k == k->k &&
           s->f == k->f && s->b == k->b && s->w == k->w && s->lat == k->lat && s->tr == k->bw &&
           s->act_bytes == k->act;
}

#define GEN_MAX_ACTIONS ((size_t)1 << 24)

/* The schedule of k with M micro-batches, generated once. The greedy
 * generators order work by the cost ratios b/f and w/f, rounded to 1/16
 * so that configurations with nearly the same ratios share a schedule. */
static int gen_get(cost_ctx *x, const sim_key *k, int M, const ptc_sched **out)
{
    bool greedy = sched_costs_order(k->kind);
    double rb = greedy && k->f > 0 ? nearbyint(k->b / k->f * 16) / 16 : 0;
    double rw = greedy && k->f > 0 ? nearbyint(k->w / k->f * 16) / 16 : 0;
    int kk = k->kind == PTC_SCHED_KFKB ? k->k : 1;
    for (size_t i = 0; i < x->gen_n; i++) {
        const cost_gen *g = &x->gens[i];
        if (g->kind == k->kind && g->P == k->P && g->M == M && g->V == k->V && g->k == kk &&
            g->rb == rb && g->rw == rw) {
            *out = g->s;
            return PTC_OK;
        }
    }
    if (x->gen_actions > GEN_MAX_ACTIONS) { /* bounded memory: start over */
        for (size_t i = 0; i < x->gen_n; i++)
            ptc_sched_destroy(x->gens[i].s);
        x->gen_n = 0;
        x->gen_actions = 0;
    }
    if (ptc_grow((void **)&x->gens, &x->gen_cap, x->gen_n + 1, sizeof *x->gens))
        return PTC_E_NOMEM;
    ptc_sched_gen g = {.kind = (ptc_sched_kind_id)k->kind, .ranks = k->P, .microbatches = M,
                       .chunks = k->V, .k = kk, .cost_f = greedy && rb > 0 ? 1 : 0,
                       .cost_b = rb, .cost_w = rw};
    ptc_sched *s;
    PTC_TRY(ptc_sched_generate(&s, &g));
    cost_gen *e = &x->gens[x->gen_n++];
    e->kind = k->kind, e->P = k->P, e->M = M, e->V = k->V, e->k = kk, e->rb = rb, e->rw = rw;
    e->s = s;
    e->actions = 0;
    for (int r = 0; r < k->P; r++) {
        size_t n;
        ptc_sched_actions(s, r, &n);
        e->actions += n;
    }
    x->gen_actions += e->actions;
    *out = s;
    return PTC_OK;
}

/* ---- activation peaks (cost_peaks) ---------------------------------------------------- */

static void peaks_free(cost_peaks *p)
{
    for (int r = 0; p->v && r < p->P; r++)
        ptc_free(p->v[r]);
    ptc_free(p->v);
    ptc_free(p->peak);
    ptc_free(p->stage);
    ptc_free(p->n);
    ptc_free(p->cap);
    memset(p, 0, sizeof *p);
}

static int peaks_init(cost_peaks *p, int P, int nch)
{
    memset(p, 0, sizeof *p);
    p->P = P;
    p->nch = nch;
    p->peak = ptc_calloc((size_t)P, sizeof *p->peak);
    p->stage = ptc_malloc((size_t)P * (size_t)nch * sizeof *p->stage);
    p->n = ptc_calloc((size_t)P, sizeof *p->n);
    p->cap = ptc_calloc((size_t)P, sizeof *p->cap);
    p->v = ptc_calloc((size_t)P, sizeof *p->v);
    if (!p->peak || !p->stage || !p->n || !p->cap || !p->v) {
        peaks_free(p);
        return PTC_E_NOMEM;
    }
    for (int i = 0; i < P * nch; i++)
        p->stage[i] = -1;
    return PTC_OK;
}

/* Add @p c (nch counts) to rank r's vectors unless one of them matches or
 * exceeds it in every chunk; drop those it exceeds. */
static int peaks_add(cost_peaks *p, int r, const double *c)
{
    int nch = p->nch, n = p->n[r], kept = 0;
    double *v = p->v[r];
    for (int i = 0; i < n; i++) {
        bool ge = true;
        for (int q = 0; q < nch && ge; q++)
            ge = v[(size_t)i * nch + q] >= c[q];
        if (ge)
            return PTC_OK;
    }
    for (int i = 0; i < n; i++) {
        bool le = true;
        for (int q = 0; q < nch && le; q++)
            le = v[(size_t)i * nch + q] <= c[q];
        if (!le) {
            if (kept != i)
                memcpy(v + (size_t)kept * nch, v + (size_t)i * nch, (size_t)nch * sizeof *v);
            kept++;
        }
    }
    if (ptc_grow((void **)&p->v[r], &p->cap[r], (size_t)kept + 1, (size_t)nch * sizeof *v))
        return PTC_E_NOMEM;
    memcpy(p->v[r] + (size_t)kept * nch, c, (size_t)nch * sizeof *c);
    p->n[r] = kept + 1;
    return PTC_OK;
}

/* The peaks of schedule @p s into @p p (initialised here). */
static int peaks_of(const ptc_sched *s, cost_peaks *p)
{
    int P = ptc_sched_ranks(s), nch = 1;
    for (int r = 0; r < P; r++)
        nch = PTC_MAX(nch, ptc_sched_chunks(s, r));
    if (nch > 64)
        return ptc_error_set(PTC_E_CONFIG, "at most 64 chunks");
    PTC_TRY(peaks_init(p, P, nch));
    double unit = (double)P / ptc_sched_stages(s), cur[64];
    for (int r = 0; r < P; r++) {
        for (int c = 0; c < ptc_sched_chunks(s, r); c++) {
            int pipe, st;
            if (ptc_sched_stage_of(s, r, c, &pipe, &st) == PTC_OK)
                p->stage[(size_t)r * nch + c] = st;
        }
        size_t n;
        const ptc_sched_action *a = ptc_sched_actions(s, r, &n);
        long tot = 0, best = 0;
        bool rising = false;
        for (int c = 0; c < nch; c++)
            cur[c] = 0;
        for (size_t i = 0; i <= n; i++) {
            bool release = i < n && (a[i].op == PTC_SCHED_B || a[i].op == PTC_SCHED_W);
            if ((i == n || release) && rising) { /* a local maximum */
                int rc = peaks_add(p, r, cur);
                if (rc) {
                    peaks_free(p);
                    return rc;
                }
                rising = false;
            }
            if (i == n || a[i].chunk >= nch)
                continue;
            if (a[i].op == PTC_SCHED_F) {
                cur[a[i].chunk]++;
                tot++;
                rising = true;
            } else if (release) {
                cur[a[i].chunk]--;
                tot--;
            }
            best = tot > best ? tot : best;
        }
        p->peak[r] = (double)best * unit;
    }
    return PTC_OK;
}

/* Long runs: fold the peaks of the second point @p b into @p a, extended to
 * t (GPipe holds every micro-batch: linear in M; the others level off, so
 * their vectors are the union). */
static int peaks_extend(cost_peaks *a, const cost_peaks *b, bool linear, double t)
{
    for (int r = 0; r < a->P; r++) {
        if (linear && a->n[r] == 1 && b->n[r] == 1) {
            for (int q = 0; q < a->nch; q++)
                a->v[r][q] += t * (b->v[r][q] - a->v[r][q]);
            a->peak[r] += t * (b->peak[r] - a->peak[r]);
            continue;
        }
        for (int i = 0; i < b->n[r]; i++)
            PTC_TRY(peaks_add(a, r, b->v[r] + (size_t)i * b->nch));
        a->peak[r] = fmax(a->peak[r], b->peak[r]);
    }
    return PTC_OK;
}

/* Simulate one schedule exactly: its makespan with or without p2p costs,
 * and (if @p pk) the per-rank activation peaks, which depend only on the
 * lists. */
static int sim_point(cost_ctx *x, const sim_key *k, int M, bool comm, double *mk,
                     cost_peaks *pk)
{
    const ptc_sched *s;
    PTC_TRY(gen_get(x, k, M, &s));
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.f = k->f;
    c.b = k->b;
    c.w = k->w;
    if (comm) {
        c.latency = k->lat;
        c.bandwidth = k->bw;
        c.act_bytes = k->act;
    }
    ptc_sched_sim *sim;
    int rc = ptc_sched_simulate(s, &c, &sim);
    x->simulations++;
    if (rc)
        return rc;
    *mk = ptc_sched_sim_makespan(sim);
    ptc_sched_sim_destroy(sim);
    /* Held until B or W: the weight gradient needs the layer inputs (the
     * simulator's own peak releases them at I). */
    return pk ? peaks_of(s, pk) : PTC_OK;
}

/* Long runs are simulated at two micro-batch counts past the warm-up (m1,
 * m2: multiples of the schedule's period) and extended: the time beyond
 * the busy time is constant once the schedule repeats itself (exact for
 * 1F1B, GPipe, kFkB and interleaved without link limits; the unit test
 * bounds the error of the others against full simulations). */
static void extrapolation_points(const sim_key *k, int *m1, int *m2)
{
    int u = k->kind == PTC_SCHED_INTERLEAVED || k->kind == PTC_SCHED_ZBI ? k->P
          : k->kind == PTC_SCHED_KFKB                                     ? k->k
          : sched_two_pipes(k->kind)                                      ? 2
                                                                          : 1;
    int lo = PTC_MAX(2 * k->P, 8);
    *m1 = u * ((lo + u - 1) / u);
    *m2 = *m1 + u * ((PTC_MAX(k->P, 4) + u - 1) / u);
}

static double extend(double o1, double o2, double t)
{
    return o2 >= o1 ? o1 + t * (o2 - o1) : o1;
}

/* The makespan of k (with or without p2p costs), simulated or extended
 * from two shorter runs; the activation peaks too when @p pk. */
static int sim_makespan(cost_ctx *x, const sim_key *k, bool comm, double *mk, cost_peaks *pk)
{
    int m1, m2;
    extrapolation_points(k, &m1, &m2);
    if (k->M <= m2)
        return sim_point(x, k, k->M, comm, mk, pk);
    double a, b;
    cost_peaks p2;
    PTC_TRY(sim_point(x, k, m1, comm, &a, pk));
    int rc = sim_point(x, k, m2, comm, &b, pk ? &p2 : NULL);
    if (rc) {
        if (pk)
            peaks_free(pk);
        return rc;
    }
    /* Extend the overhead over the busy time (f + b per micro-batch on
     * every rank): constant once the schedule has settled, growing
     * linearly when the links cannot keep up. */
    double t = (double)(k->M - m1) / (double)(m2 - m1), busy = k->f + k->b;
    *mk = k->M * busy + extend(a - m1 * busy, b - m2 * busy, t);
    if (pk) {
        rc = peaks_extend(pk, &p2,
                          k->kind == PTC_SCHED_GPIPE || k->kind == PTC_SCHED_LOOPED_BFS, t);
        peaks_free(&p2);
        if (rc)
            peaks_free(pk);
    }
    return rc;
}

/* The cached simulation of k; the makespan without p2p costs only when
 * @p need0 (the breakdown of the configurations reported). */
static int sim_get(cost_ctx *x, const sim_key *k, bool need0, const cost_sim **out)
{
    if (x->sim_n * 2 + 2 > x->sim_cap) { /* grow and rehash */
        size_t nc = x->sim_cap ? x->sim_cap * 2 : 256;
        cost_sim *ns = ptc_calloc(nc, sizeof *ns);
        if (!ns)
            return PTC_E_NOMEM;
        for (size_t i = 0; i < x->sim_cap; i++) {
            if (!x->sims[i].used)
                continue;
            sim_key kk = {x->sims[i].kind, x->sims[i].P, x->sims[i].M, x->sims[i].V,
                          x->sims[i].k, x->sims[i].f, x->sims[i].b, x->sims[i].w,
                          x->sims[i].lat, x->sims[i].tr, x->sims[i].act_bytes};
            size_t j = key_hash(&kk) & (nc - 1);
            while (ns[j].used)
                j = (j + 1) & (nc - 1);
            ns[j] = x->sims[i];
        }
        ptc_free(x->sims);
        x->sims = ns;
        x->sim_cap = nc;
    }
    size_t j = key_hash(k) & (x->sim_cap - 1);
    cost_sim *e = NULL;
    while (x->sims[j].used) {
        if (key_eq(&x->sims[j], k)) {
            e = &x->sims[j];
            break;
        }
        j = (j + 1) & (x->sim_cap - 1);
    }
    if (!e) {
        cost_sim n;
        memset(&n, 0, sizeof n);
        n.kind = k->kind, n.P = k->P, n.M = k->M, n.V = k->V, n.k = k->k;
        n.f = k->f, n.b = k->b, n.w = k->w, n.lat = k->lat, n.tr = k->bw, n.act_bytes = k->act;
        PTC_TRY(sim_makespan(x, k, true, &n.makespan, &n.peaks));
        n.have0 = k->lat == 0 && (k->bw == 0 || k->act == 0);
        n.makespan0 = n.makespan;
        n.used = true;
        x->sims[j] = n;
        x->sim_n++;
        e = &x->sims[j];
    }
    if (need0 && !e->have0) {
        PTC_TRY(sim_makespan(x, k, false, &e->makespan0, NULL));
        e->have0 = true;
    }
    *out = e;
    return PTC_OK;
}

/* ---- evaluation ---------------------------------------------------------------------- */

static bool kind_allowed(const ptc_search_job *j, ptc_sched_kind_id k)
{
    return !j->kinds || (j->kinds & (1u << k));
}

static int stages_of(const ptc_search_config *cfg)
{
    switch (cfg->schedule) {
    case PTC_SCHED_INTERLEAVED:
    case PTC_SCHED_ZBI:
    case PTC_SCHED_LOOPED_BFS: return cfg->pp * cfg->chunks;
    case PTC_SCHED_ZBV:
    case PTC_SCHED_DUALPIPEV: return 2 * cfg->pp;
    default: return cfg->pp;
    }
}

int cost_check_config(cost_ctx *x, const ptc_search_config *g)
{
    const ptc_search_cluster *c = &x->c;
    int64_t B = x->j.global_batch;
    if (g->dp < 1 || g->tp < 1 || g->pp < 1 || g->microbatches < 1 || g->mb_size < 1)
        return ptc_error_set(PTC_E_CONFIG, "dp, tp, pp, microbatches and mb_size must be >= 1");
    if ((int64_t)g->dp * g->tp * g->pp != c->gpus)
        return ptc_error_set(PTC_E_CONFIG, "dp*tp*pp = %lld, not the %d GPUs",
                             (long long)g->dp * g->tp * g->pp, c->gpus);
    if ((int64_t)g->dp * g->microbatches * g->mb_size != B)
        return ptc_error_set(PTC_E_CONFIG, "dp*microbatches*mb_size = %lld, not the global "
                             "batch %lld", (long long)g->dp * g->microbatches * g->mb_size,
                             (long long)B);
    if (x->j.max_mb_size && g->mb_size > x->j.max_mb_size)
        return ptc_error_set(PTC_E_CONFIG, "micro-batch size %d over the limit %lld", g->mb_size,
                             (long long)x->j.max_mb_size);
    if (g->zero != 0 && g->zero != 1)
        return ptc_error_set(PTC_E_CONFIG, "zero must be 0 or 1");
    if (g->zero && x->j.no_zero)
        return ptc_error_set(PTC_E_CONFIG, "zero=1 is not allowed");
    if (g->pp > PTC_SCHED_MAX_RANKS || g->microbatches > PTC_SCHED_MAX_MICROBATCHES)
        return ptc_error_set(PTC_E_CONFIG, "pp or microbatches over the simulator's limits");
    if ((unsigned)g->schedule > PTC_SCHED_DUALPIPE)
        return ptc_error_set(PTC_E_CONFIG, "unknown schedule kind");
    const cost_tp *t = cost_tp_get(x, g->tp);
    if (!t)
        return PTC_E_NOMEM;
    if (!t->valid)
        return ptc_error_set(PTC_E_CONFIG, "%s", t->why);
    int P = g->pp, M = g->microbatches;
    if (P == 1) {
        if (g->schedule != PTC_SCHED_1F1B || g->chunks != 1 || g->k != 0)
            return ptc_error_set(PTC_E_CONFIG, "pp=1 is written schedule 1f1b, chunks 1, k 0");
        return PTC_OK;
    }
    if (!kind_allowed(&x->j, g->schedule))
        return ptc_error_set(PTC_E_CONFIG, "schedule %s is not allowed",
                             ptc_sched_kind_name(g->schedule));
    switch (g->schedule) {
    case PTC_SCHED_INTERLEAVED:
        if (g->chunks < 2 || M % P)
            return ptc_error_set(PTC_E_CONFIG, "interleaved needs chunks >= 2 and microbatches "
                                               "a multiple of pp");
        break;
    case PTC_SCHED_ZBI:
    case PTC_SCHED_LOOPED_BFS:
        if (g->chunks < 2)
            return ptc_error_set(PTC_E_CONFIG, "%s needs chunks >= 2",
                                 ptc_sched_kind_name(g->schedule));
        break;
    case PTC_SCHED_ZBV:
    case PTC_SCHED_DUALPIPEV:
        if (g->chunks != 2)
            return ptc_error_set(PTC_E_CONFIG, "%s has 2 chunks",
                                 ptc_sched_kind_name(g->schedule));
        if (g->schedule == PTC_SCHED_DUALPIPEV && M < 2 * P)
            return ptc_error_set(PTC_E_CONFIG, "dualpipev needs microbatches >= 2*pp");
        break;
    case PTC_SCHED_DUALPIPE:
        if (g->chunks != 1 || P % 2 || M % 2 || M < 2 * P)
            return ptc_error_set(PTC_E_CONFIG, "dualpipe has 1 chunk and needs an even pp and "
                                               "an even number of microbatches >= 2*pp");
        break;
    default:
        if (g->chunks != 1)
            return ptc_error_set(PTC_E_CONFIG, "%s has 1 chunk", ptc_sched_kind_name(g->schedule));
    }
    if (g->chunks > 64)
        return ptc_error_set(PTC_E_CONFIG, "at most 64 chunks");
    if (g->schedule == PTC_SCHED_KFKB ? (g->k < 1 || g->k > M) : g->k != 0)
        return ptc_error_set(PTC_E_CONFIG, "k applies to kfkb only, 1 <= k <= microbatches");
    int S = stages_of(g);
    if (S > x->m->L)
        return ptc_error_set(PTC_E_CONFIG, "%d stages for %lld layers", S, (long long)x->m->L);
    return PTC_OK;
}

/* Sum of the groups on stage s of S (DESIGN's layer rule). */
static void stage_agg(const ptc_cost_model *m, const cost_tp *t, int s, int S, cost_agg *a)
{
    int64_t L = m->L, l0 = (int64_t)s * L / S, l1 = (int64_t)(s + 1) * L / S;
    memset(a, 0, sizeof *a);
    agg_add(a, &t->pre[l1], 1);
    agg_add(a, &t->pre[l0], -1);
    if (s == 0)
        agg_add(a, &t->first, 1);
    if (s == S - 1)
        agg_add(a, &t->last, 1);
    if (s == 0 || s == S - 1)
        agg_add(a, &t->fl_mem, 1);
    a->act += m->info.act_stage;
}

/* Stage indices held by pipeline rank r, per chunk. */
static int rank_stages(const ptc_search_config *g, int r, int *st)
{
    int P = g->pp;
    switch (g->schedule) {
    case PTC_SCHED_ZBV:
    case PTC_SCHED_DUALPIPEV:
        st[0] = r;
        st[1] = 2 * P - 1 - r;
        return 2;
    case PTC_SCHED_CHIMERA:
    case PTC_SCHED_DUALPIPE:
        st[0] = r;
        st[1] = P - 1 - r;
        return 2;
    case PTC_SCHED_INTERLEAVED:
    case PTC_SCHED_ZBI:
    case PTC_SCHED_LOOPED_BFS:
        for (int c = 0; c < g->chunks; c++)
            st[c] = r + c * P;
        return g->chunks;
    default:
        st[0] = r;
        return 1;
    }
}

typedef struct stage_cost {
    double fc, bc, wc, tf, tb; /* compute f, b, w; tp comm forward, backward */
} stage_cost;

static stage_cost stage_time(const cost_ctx *x, const cost_agg *a, double tokens, double asz,
                             const cost_shape *tp)
{
    const ptc_search_cluster *c = &x->c;
    stage_cost s;
    s.fc = a->flops_f * tokens / c->flops;
    s.wc = a->flops_bw * tokens / c->flops;
    s.bc = s.wc + a->flops_bi * tokens / c->flops;
    /* Collectives cost alpha per call and beta per byte, so a group's
     * count and summed widths give its total time. */
    double one = t_allreduce(c, tp, 0), per_b = t_allreduce(c, tp, 1) - one;
    double g1 = t_half(c, tp, 0), g_b = t_half(c, tp, 1) - g1;
    s.tf = a->ar_f_n * one + a->ar_f_w * tokens * asz * per_b + a->ag_f_n * g1 +
           a->ag_f_w * tokens * asz * g_b + a->small_f_n * (one + 4 * tokens * per_b);
    s.tb = a->ar_b_n * one + a->ar_b_w * tokens * asz * per_b;
    return s;
}

int cost_eval(cost_ctx *x, const ptc_search_config *g, bool breakdown, ptc_cost_result *out)
{
    memset(out, 0, sizeof *out);
    PTC_TRY(cost_check_config(x, g));
    const ptc_cost_model *m = x->m;
    const ptc_search_cluster *c = &x->c;
    const cost_tp *t = cost_tp_get(x, g->tp);
    int P = g->pp, D = g->dp, S = stages_of(g), M = g->microbatches;
    bool chim = sched_two_pipes(g->schedule) && P > 1;
    bool wrap = g->schedule == PTC_SCHED_INTERLEAVED || g->schedule == PTC_SCHED_ZBI ||
                g->schedule == PTC_SCHED_LOOPED_BFS;
    const cost_topo *tp = topo_get(x, D, g->tp, P, g->chunks, wrap, chim);
    if (!tp)
        return PTC_E_NOMEM;
    double tokens = (double)g->mb_size * (double)m->info.seq;
    double asz = (double)ptc_dtype_size(m->info.act_dtype);
    /* Stages are costed alike by the simulator: use the busiest one. */
    int nst = chim ? P : S;
    stage_cost best = {0};
    double best_t = -1;
    for (int s = 0; s < nst; s++) {
        cost_agg a;
        stage_agg(m, t, s, nst, &a);
        stage_cost sc = stage_time(x, &a, tokens, asz, &tp->tp);
        double tt = sc.fc + sc.bc + sc.tf + sc.tb;
        if (tt > best_t) {
            best_t = tt;
            best = sc;
        }
    }
    double f = best.fc + best.tf, b = best.bc + best.tb, w = best.wc;
    bool zb = sched_splits_backward(g->schedule);
    /* The simulator charges a chunk (P/S) of a whole-stage cost. */
    double scale = chim ? 1 : (double)S / P;
    double lat = 0, bw = 0, act = 0;
    if (P > 1) {
        lat = tp->pp_inter ? c->inter_lat : c->intra_lat;
        bw = tp->pp_inter ? c->inter_bw : c->intra_bw;
        act = tokens * (double)m->info.hidden * asz;
    }
    sim_key k = {g->schedule, P, M, g->chunks, g->schedule == PTC_SCHED_KFKB ? g->k : 0,
                 f * scale, b * scale, zb ? fmin(w, b) * scale : 0, lat, bw, act};
    const cost_sim *sim;
    int rc = sim_get(x, &k, breakdown, &sim);
    if (rc)
        return rc;
    /* Memory and gradient reduction per pipeline rank. */
    cost_shape dpg = tp->dp;
    int st[66];
    double mem_best = -1, dp_max = 0;
    for (int r = 0; r < P; r++) {
        int nc = P == 1 ? 1 : rank_stages(g, r, st);
        if (P == 1)
            st[0] = 0;
        double pb = t->all.param_b, gb = t->all.grad_b, ob = t->all.optim_b, dpt = 0;
        for (int ci = 0; ci < nc; ci++) {
            cost_agg a;
            stage_agg(m, t, st[ci], nst, &a);
            pb += a.param_b;
            gb += a.grad_b;
            ob += a.optim_b;
            if (g->zero)
                dpt += t_half(c, &dpg, a.grad_b) + t_half(c, &dpg, a.param_b);
            else
                dpt += t_allreduce(c, &dpg, a.grad_b);
        }
        if (g->zero && dpg.n > 1)
            ob /= dpg.n;
        if (x->j.dp_overlap && dpt > 0) {
            /* Layer by layer behind the rank's last backward (whole-stage b
             * covers the chunks a micro-batch visits); the last layer's
             * share cannot hide. */
            double layers = 0;
            for (int ci = 0; ci < nc; ci++) {
                int ns = nst;
                layers += (double)((int64_t)(st[ci] + 1) * m->L / ns - (int64_t)st[ci] * m->L / ns);
            }
            double window = chim ? b : b * (double)S / P;
            dpt = fmax(dpt - window, dpt / fmax(layers, 1));
        }
        /* The rank's activations at its fullest: each chunk's held
         * micro-batches times that chunk's bytes. */
        const cost_peaks *pk = &sim->peaks;
        double cb[64], am = 0;
        for (int q = 0; q < pk->nch && q < 64; q++) {
            int sq = pk->stage[(size_t)r * pk->nch + q];
            cb[q] = 0;
            if (sq >= 0) {
                cost_agg a;
                stage_agg(m, t, sq, nst, &a);
                cb[q] = a.act * tokens;
            }
        }
        for (int i = 0; i < pk->n[r]; i++) {
            const double *v = pk->v[r] + (size_t)i * pk->nch;
            double sum = 0;
            for (int q = 0; q < pk->nch && q < 64; q++)
                sum += v[q] * cb[q];
            am = fmax(am, sum);
        }
        double mem = pb + gb + ob + am;
        if (mem > mem_best) {
            mem_best = mem;
            out->mem_params = pb;
            out->mem_grads = gb;
            out->mem_optim = ob;
            out->mem_act = am;
            out->mem_rank = r;
        }
        dp_max = fmax(dp_max, dpt);
        out->peak_activations = fmax(out->peak_activations, pk->peak[r]);
    }
    double per_mb = chim ? 1 : (double)S / P; /* chunks a micro-batch visits per rank */
    out->stage_f = k.f;
    out->stage_b = k.b;
    out->stage_w = k.w;
    out->makespan = sim->makespan;
    out->compute = M * per_mb * (best.fc + best.bc);
    out->tp_comm = M * per_mb * (best.tf + best.tb);
    double busy = out->compute + out->tp_comm;
    /* Differences of sums: what is below rounding is zero. */
    double eps = 1e-9 * sim->makespan;
    if (breakdown) {
        out->bubble = sim->makespan0 - busy > eps ? sim->makespan0 - busy : 0;
        out->pp_comm = sim->makespan - (busy + out->bubble);
        if (fabs(out->pp_comm) <= eps)
            out->pp_comm = 0;
    } else { /* bubble and p2p together, until the breakdown is asked for */
        out->bubble = sim->makespan - busy > eps ? sim->makespan - busy : 0;
    }
    out->dp_comm = dp_max;
    out->step_time = sim->makespan + dp_max;
    out->mem = mem_best;
    out->fits = mem_best <= c->mem_bytes;
    out->shortfall = out->fits ? 0 : mem_best - c->mem_bytes;
    out->pp_inter = P > 1 && tp->pp_inter;
    out->tp_inter = tp->tp.h > 1;
    out->dp_inter = dpg.n > 1 && dpg.h > 1;
    return PTC_OK;
}

int ptc_cost_evaluate(const ptc_cost_model *m, const ptc_search_cluster *c,
                      const ptc_search_job *j, const ptc_search_config *cfg,
                      ptc_cost_result *out)
{
    memset(out, 0, sizeof *out);
    cost_ctx x;
    PTC_TRY(cost_ctx_init(&x, m, c, j));
    int rc = cost_eval(&x, cfg, true, out);
    cost_ctx_free(&x);
    return rc;
}

/* ---- small helpers of the public API ------------------------------------------------- */

void ptc_search_cluster_init(ptc_search_cluster *c)
{
    memset(c, 0, sizeof *c);
    c->gpus = 8;
    c->gpus_per_host = 8;
    c->mem_bytes = 80.0 * (1ull << 30);
    c->flops = 150e12;
    c->intra_bw = 300e9;
    c->intra_lat = 2e-6;
    c->inter_bw = 25e9;
    c->inter_lat = 5e-6;
}

void ptc_search_job_init(ptc_search_job *j)
{
    memset(j, 0, sizeof *j);
    j->global_batch = 1;
}

int ptc_search_config_format(const ptc_search_config *c, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "dp=%d,tp=%d,pp=%d,zero=%d schedule=%s microbatches=%d mb_size=%d",
                     c->dp, c->tp, c->pp, c->zero, ptc_sched_kind_name(c->schedule),
                     c->microbatches, c->mb_size);
    if (n >= 0 && (size_t)n < cap &&
        (c->schedule == PTC_SCHED_INTERLEAVED || c->schedule == PTC_SCHED_ZBI ||
         c->schedule == PTC_SCHED_LOOPED_BFS))
        n += snprintf(buf + n, cap - (size_t)n, " chunks=%d", c->chunks);
    if (n >= 0 && (size_t)n < cap && c->schedule == PTC_SCHED_KFKB)
        n += snprintf(buf + n, cap - (size_t)n, " k=%d", c->k);
    if (n < 0 || (size_t)n >= cap)
        return ptc_error_set(PTC_E_RANGE, "configuration text needs more than %zu bytes", cap);
    return PTC_OK;
}
