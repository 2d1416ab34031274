/* The model a configuration search costs: descriptions of its tensors
 * (from a store, from a caller) and the transformer / MLP specs of
 * `ptc suggest --model`, built into one description. docs/search.md. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_search_internal.h"

/* ---- descriptions ------------------------------------------------------------- */

const char *cost_tensor_name(const ptc_cost_tensor *t, size_t i, char *buf, size_t cap)
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
    const char *nm = cost_tensor_name(t, i, nb, sizeof nb);
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

