/* Placement rules: parser (include, param, if=, head-aware splits), presets,
 * canonical text, name resolution, Hugging Face config.json parameters. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/box.h"
#include "ptc/rules.h"
#include "base/buf_internal.h"
#include "base/util_internal.h"

/* ---- presets ----------------------------------------------------------------
 * Each line is documented in docs/rules.md; the comments here say why. The
 * $parameters are Hugging Face config.json keys (ptc import reads them). */

static const char preset_llama[] =
    "# HF Llama / Mistral / Qwen2 / Qwen3 / Gemma naming, Megatron-LM tensor\n"
    "# parallelism. Parameters (config.json): num_attention_heads,\n"
    "# num_key_value_heads, head_dim.\n"
    "layer model.layers.{L}.\n"
    "# Adam moments, fp32 master weights and Adam's step follow their parameter.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# VocabParallelEmbedding: vocabulary rows split over tp. Tied embeddings\n"
    "# (no lm_head.weight in the collection: Qwen2, Gemma, small Llamas): the\n"
    "# last stage uses the embedding as its output layer, so it holds a replica.\n"
    "match model.embed_tokens.weight tp=split(0) pp=first+last unless=lm_head.weight\n"
    "match model.embed_tokens.weight tp=split(0) pp=first\n"
    "# Output layer: ColumnParallelLinear over the vocabulary.\n"
    "match lm_head.weight tp=split(0) pp=last\n"
    "match model.norm.weight tp=replicate pp=last\n"
    "# q: column parallel by whole query heads (nn.Linear is [out,in]).\n"
    "match *.self_attn.q_proj.weight tp=split(0,heads=$num_attention_heads,head_dim=$head_dim)\n"
    "# k/v: by whole key/value heads; with more tp ranks than kv heads every\n"
    "# head is replicated on the ranks that share it (vLLM QKVParallelLinear).\n"
    "match *.self_attn.k_proj.weight tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.self_attn.v_proj.weight tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "# Qwen2 carries q/k/v biases: split with their rows.\n"
    "match *.self_attn.q_proj.bias tp=split(0,heads=$num_attention_heads,head_dim=$head_dim)\n"
    "match *.self_attn.k_proj.bias tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.self_attn.v_proj.bias tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "# o_proj: row parallel (input features = the query heads); a bias is\n"
    "# added after the all-reduce, so it is replicated.\n"
    "match *.self_attn.o_proj.weight tp=split(1,heads=$num_attention_heads,head_dim=$head_dim)\n"
    "match *.self_attn.o_proj.bias tp=replicate\n"
    "# Qwen3 / Gemma3 per-head q/k norms act on head_dim: replicated.\n"
    "match *.self_attn.q_norm.weight tp=replicate\n"
    "match *.self_attn.k_norm.weight tp=replicate\n"
    "# Old checkpoints store the rotary buffer.\n"
    "match *.self_attn.rotary_emb.inv_freq tp=replicate\n"
    "# SwiGLU MLP: gate/up column parallel, down row parallel.\n"
    "match *.mlp.gate_proj.weight tp=split(0)\n"
    "match *.mlp.up_proj.weight tp=split(0)\n"
    "match *.mlp.down_proj.weight tp=split(1)\n"
    "match *.input_layernorm.weight tp=replicate\n"
    "match *.post_attention_layernorm.weight tp=replicate\n"
    "# Gemma2/3 sandwich norms.\n"
    "match *.pre_feedforward_layernorm.weight tp=replicate\n"
    "match *.post_feedforward_layernorm.weight tp=replicate\n";

static const char preset_gpt2[] =
    "# HF GPT-2 naming, with or without the 'transformer.' prefix.\n"
    "# Conv1D weights are [in,out]: column parallel splits dim 1.\n"
    "# Parameter (config.json): n_head.\n"
    "layer transformer.h.{L}.\n"
    "layer h.{L}.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# Tied input/output embedding: a replica on the first and last stage.\n"
    "match transformer.wte.weight tp=split(0) pp=first+last\n"
    "match wte.weight tp=split(0) pp=first+last\n"
    "match transformer.wpe.weight tp=replicate pp=first\n"
    "match wpe.weight tp=replicate pp=first\n"
    "match transformer.ln_f.* tp=replicate pp=last\n"
    "match ln_f.* tp=replicate pp=last\n"
    "# Untied copy of the output embedding, if a checkpoint has one.\n"
    "match lm_head.weight tp=split(0) pp=last\n"
    "# Fused [q;k;v] columns: each of the three blocks split by whole heads.\n"
    "match *.attn.c_attn.weight tp=split(1,blocks=3,heads=$n_head)\n"
    "match *.attn.c_attn.bias tp=split(0,blocks=3,heads=$n_head)\n"
    "# Row parallel projections: input rows split, bias replicated.\n"
    "match *.attn.c_proj.weight tp=split(0,heads=$n_head)\n"
    "match *.attn.c_proj.bias tp=replicate\n"
    "match *.mlp.c_fc.weight tp=split(1)\n"
    "match *.mlp.c_fc.bias tp=split(0)\n"
    "match *.mlp.c_proj.weight tp=split(0)\n"
    "match *.mlp.c_proj.bias tp=replicate\n"
    "match *.ln_1.* tp=replicate\n"
    "match *.ln_2.* tp=replicate\n"
    "# Causal-mask buffers of older checkpoints.\n"
    "match *.attn.bias tp=replicate\n"
    "match *.attn.masked_bias tp=replicate\n";

static const char preset_megatron_gpt[] =
    "# Megatron-LM legacy GPT naming (language_model.*), GELU MLP.\n"
    "layer language_model.encoder.layers.{L}.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# Embeddings are tied by default: the last stage holds a replica.\n"
    "match language_model.embedding.word_embeddings.weight tp=split(0) pp=first+last\n"
    "match language_model.embedding.position_embeddings.weight tp=replicate pp=first\n"
    "match word_embeddings_for_head.weight tp=split(0) pp=last\n"
    "match language_model.output_layer.weight tp=split(0) pp=last\n"
    "match language_model.encoder.final_layernorm.* tp=replicate pp=last\n"
    "# query_key_value rows are interleaved per head group\n"
    "# ([groups, q heads + k + v, head_dim]), so a plain row split keeps\n"
    "# each rank's q, k and v together.\n"
    "match *.self_attention.query_key_value.weight tp=split(0)\n"
    "match *.self_attention.query_key_value.bias tp=split(0)\n"
    "match *.self_attention.dense.weight tp=split(1)\n"
    "match *.self_attention.dense.bias tp=replicate\n"
    "match *.mlp.dense_h_to_4h.weight tp=split(0)\n"
    "match *.mlp.dense_h_to_4h.bias tp=split(0)\n"
    "match *.mlp.dense_4h_to_h.weight tp=split(1)\n"
    "match *.mlp.dense_4h_to_h.bias tp=replicate\n"
    "match *.input_layernorm.* tp=replicate\n"
    "match *.post_attention_layernorm.* tp=replicate\n";

static const char preset_bert[] =
    "# HF BERT naming (BertModel, BertForMaskedLM, BertForPreTraining, with or\n"
    "# without the 'bert.' prefix; sentence-transformers checkpoints too).\n"
    "# Parameters (config.json): num_attention_heads, tie_word_embeddings.\n"
    "layer encoder.layer.{L}.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# VocabParallelEmbedding; the MLM decoder is tied to it, so a tied model\n"
    "# keeps a replica on the last stage.\n"
    "match *embeddings.word_embeddings.weight tp=split(0) pp=first+last if=$tie_word_embeddings\n"
    "match *embeddings.word_embeddings.weight tp=split(0) pp=first\n"
    "match *embeddings.position_embeddings.weight tp=replicate pp=first\n"
    "match *embeddings.token_type_embeddings.weight tp=replicate pp=first\n"
    "match *embeddings.LayerNorm.* tp=replicate pp=first\n"
    "match *embeddings.position_ids tp=replicate pp=first\n"
    "match *embeddings.token_type_ids tp=replicate pp=first\n"
    "# Self-attention: q/k/v column parallel by whole heads, output row parallel.\n"
    "match *.attention.self.query.weight tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.query.bias tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.key.weight tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.key.bias tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.value.weight tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.value.bias tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.output.dense.weight tp=split(1,heads=$num_attention_heads)\n"
    "match *.attention.output.dense.bias tp=replicate\n"
    "match *.attention.output.LayerNorm.* tp=replicate\n"
    "# GELU MLP: intermediate column parallel, output row parallel.\n"
    "match *.intermediate.dense.weight tp=split(0)\n"
    "match *.intermediate.dense.bias tp=split(0)\n"
    "match *.output.dense.weight tp=split(1)\n"
    "match *.output.dense.bias tp=replicate\n"
    "match *.output.LayerNorm.* tp=replicate\n"
    "# Heads on the last stage: the pooler and NSP head replicated, the MLM\n"
    "# decoder split over the vocabulary like the embedding.\n"
    "match *pooler.dense.* tp=replicate pp=last\n"
    "match cls.predictions.bias tp=split(0) pp=last\n"
    "match cls.predictions.decoder.weight tp=split(0) pp=last\n"
    "match cls.predictions.decoder.bias tp=split(0) pp=last\n"
    "match cls.predictions.transform.* tp=replicate pp=last\n"
    "match cls.seq_relationship.* tp=replicate pp=last\n";

static const char preset_phi3[] =
    "# HF Phi-3 naming: Llama's, with fused qkv_proj ([q; k; v] rows: the\n"
    "# query heads, then the key heads, then the value heads) and gate_up_proj\n"
    "# ([gate; up] rows). Parameters: those of llama.\n"
    "match *.self_attn.qkv_proj.weight tp=split(0,heads=$num_attention_heads,kv_heads=$num_key_value_heads:$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.self_attn.qkv_proj.bias tp=split(0,heads=$num_attention_heads,kv_heads=$num_key_value_heads:$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.mlp.gate_up_proj.weight tp=split(0,blocks=2)\n"
    "include llama\n";

static const char preset_none[] =
    "# Everything replicated, every tensor on stage 0.\n"
    "match * tp=replicate pp=first\n";

/* The demo model of `ptc train` (exec/model/): exactly the placement it
 * runs with, so a running job's shards are the stored shards. No catch-all:
 * every tensor, biases included, has its rule. */
static const char preset_ptc_mlp[] =
    "# The demo model of ptc train: Megatron-style MLP blocks.\n"
    "layer model.layers.{L}.\n"
    "optim .exp_avg .exp_avg_sq\n"
    "# Embedding and head replicated over tp (every shard computes them).\n"
    "match model.embed_tokens.weight tp=replicate pp=first\n"
    "match lm_head.weight tp=replicate pp=last\n"
    "match model.norm.weight tp=replicate pp=last\n"
    "match model.norm.bias tp=replicate pp=last\n"
    "match *.input_layernorm.weight tp=replicate\n"
    "match *.input_layernorm.bias tp=replicate\n"
    "# up_proj column parallel (rows = the 4H outputs), down_proj row parallel\n"
    "# (columns = the 4H inputs); down_proj's bias is added after the all-reduce.\n"
    "match *.mlp.up_proj.weight tp=split(0)\n"
    "match *.mlp.up_proj.bias tp=split(0)\n"
    "match *.mlp.down_proj.weight tp=split(1)\n"
    "match *.mlp.down_proj.bias tp=replicate\n";

static const char *const preset_names[] = {"llama", "gpt2", "megatron-gpt", "ptc-mlp", "bert",
                                           "phi3", "none", NULL};
static const char *const preset_texts[] = {preset_llama,   preset_gpt2, preset_megatron_gpt,
                                           preset_ptc_mlp, preset_bert, preset_phi3,
                                           preset_none};

const char *const *ptc_rules_preset_names(void)
{
    return preset_names;
}

static const char *preset_find(const char *name, size_t n)
{
    for (size_t i = 0; preset_names[i]; i++)
        if (strlen(preset_names[i]) == n && memcmp(name, preset_names[i], n) == 0)
            return preset_texts[i];
    return NULL;
}

int ptc_rules_preset_text(const char *name, const char **text)
{
    *text = preset_find(name, strlen(name));
    if (*text)
        return PTC_OK;
    return ptc_error_set(PTC_E_NOTFOUND,
                         "no rules preset '%.64s' (presets: llama, gpt2, megatron-gpt, ptc-mlp, "
                         "bert, phi3, none)", name);
}

/* ---- the rule set ----------------------------------------------------------- */

#define PARAM_NAME_MAX 63
#define MAX_INCLUDE_DEPTH 8

typedef struct layer_pat {
    char *raw;           /* the pattern as written, with {L} */
    size_t npre, nsuf;   /* raw = pre "{L}" suf */
} layer_pat;

typedef struct match_rule {
    char *glob;
    size_t nglob;
    bool has_pp;
    bool has_kind;
    ptc_placement pl;
    int line;            /* line in the source text, for messages */
    int origin;          /* index into ptc_rules.origins */
    char *need;          /* a parameter the split needs and nobody set; NULL */
    char *raw_tp;        /* with need: the tp= value as written */
    char *unless;        /* unless=NAME: skipped when the collection holds NAME */
} match_rule;

typedef struct param {
    char *name;
    int64_t value;
} param;

struct ptc_rules {
    char **origins;      /* origins[0] is the top-level text's */
    size_t norigins, cap_origins;
    layer_pat *layers;
    size_t nlayers, cap_layers;
    char **suffixes;
    int *suffix_src;     /* which parsed text declared it (include merges) */
    size_t nsuffixes, cap_suffixes, cap_suffix_src;
    match_rule *rules;
    size_t nrules, cap_rules;
    param *params;
    size_t nparams, cap_params;
    char *missing;       /* comma-separated unset parameters a split needed */
    char *text;          /* canonical text */
};

void ptc_rules_destroy(ptc_rules *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nlayers; i++)
        ptc_free(r->layers[i].raw);
    for (size_t i = 0; i < r->nsuffixes; i++)
        ptc_free(r->suffixes[i]);
    for (size_t i = 0; i < r->nrules; i++) {
        ptc_free(r->rules[i].glob);
        ptc_free(r->rules[i].need);
        ptc_free(r->rules[i].raw_tp);
        ptc_free(r->rules[i].unless);
    }
    for (size_t i = 0; i < r->nparams; i++)
        ptc_free(r->params[i].name);
    for (size_t i = 0; i < r->norigins; i++)
        ptc_free(r->origins[i]);
    ptc_free(r->origins);
    ptc_free(r->layers);
    ptc_free(r->suffixes);
    ptc_free(r->suffix_src);
    ptc_free(r->rules);
    ptc_free(r->params);
    ptc_free(r->missing);
    ptc_free(r->text);
    ptc_free(r);
}

const char *ptc_rules_text(const ptc_rules *r)
{
    return r->text;
}

const char *ptc_rules_missing_params(const ptc_rules *r)
{
    return r->missing ? r->missing : "";
}

/* Copy at most 80 bytes of untrusted text into @p buf for a message, with
 * control characters shown as '?'. */
static const char *clip(const char *s, size_t n, char buf[96])
{
    size_t m = n > 80 ? 80 : n;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (n > m) {
        memcpy(buf + m, "...", 3);
        m += 3;
    }
    buf[m] = '\0';
    return buf;
}

/* Decimal without sign; false on empty, non-digit or a value above max. */
static bool parse_dec(const char *s, size_t n, int64_t max, int64_t *out)
{
    if (n == 0)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        int d = s[i] - '0';
        if (v > max / 10 || (v == max / 10 && d > max % 10))
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool param_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > PARAM_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

static param *param_find(const ptc_rules *r, const char *s, size_t n)
{
    for (size_t i = 0; r && i < r->nparams; i++)
        if (strlen(r->params[i].name) == n && memcmp(r->params[i].name, s, n) == 0)
            return &r->params[i];
    return NULL;
}

/* Set (or override) a parameter. */
static int param_set(ptc_rules *r, const char *s, size_t n, int64_t v)
{
    param *p = param_find(r, s, n);
    if (p) {
        p->value = v;
        return PTC_OK;
    }
    PTC_TRY(ptc_grow((void **)&r->params, &r->cap_params, r->nparams + 1, sizeof *r->params));
    char *name = ptc_strndup(s, n);
    if (!name)
        return PTC_E_NOMEM;
    r->params[r->nparams].name = name;
    r->params[r->nparams].value = v;
    r->nparams++;
    return PTC_OK;
}

/* Remember an unset parameter a split needed (for ptc_rules_missing_params). */
static int note_missing(ptc_rules *r, const char *s, size_t n)
{
    size_t have = r->missing ? strlen(r->missing) : 0;
    for (size_t i = 0; i < have;) {
        size_t j = i;
        while (j < have && r->missing[j] != ',')
            j++;
        if (j - i == n && memcmp(r->missing + i, s, n) == 0)
            return PTC_OK;
        i = j + 1;
    }
    char *m = ptc_realloc(r->missing, have + n + 2);
    if (!m)
        return PTC_E_NOMEM;
    if (have)
        m[have++] = ',';
    memcpy(m + have, s, n);
    m[have + n] = '\0';
    r->missing = m;
    return PTC_OK;
}

/* ---- values, tp= ------------------------------------------------------------ */

#define MAX_BLOCK_SIZE ((int64_t)1 << 62)

/* The name of a parameter a tp= value refers to but nobody set, and where. */
typedef struct unset_ref {
    const char *name;    /* NULL: none */
    size_t n;
    bool in_blocks;      /* in blocks= (the split cannot do without it) */
    bool in_heads;       /* in heads= / kv_heads= */
    bool in_head_dim;    /* only in head_dim= (a check that can be left out) */
} unset_ref;

/* A number, or `$NAME` when @p r is given. @return 1 a value, 0 an unset
 * parameter (recorded in @p u), -1 not a number or a bad reference. */
static int parse_val(const char *s, size_t n, int64_t max, const ptc_rules *r, int64_t *out,
                     unset_ref *u)
{
    if (n > 0 && s[0] == '$') {
        if (!r || !param_name_ok(s + 1, n - 1))
            return -1;
        const param *p = param_find(r, s + 1, n - 1);
        if (p) {
            if (p->value > max)
                return -1;
            *out = p->value;
            return 1;
        }
        if (u && !u->name) {
            u->name = s + 1;
            u->n = n - 1;
        }
        *out = 0;
        return 0;
    }
    return parse_dec(s, n, max, out) ? 1 : -1;
}

/* A ':'-separated list of values into @p out (at most @p cap).
 * @return the count, or -1 with *why set. */
static int parse_list(const char *p, const char *end, int64_t max, const ptc_rules *r,
                      int64_t *out, int cap, unset_ref *u, bool *unset, const char **why)
{
    int k = 0;
    while (p <= end) {
        const char *q = p;
        while (q < end && *q != ':')
            q++;
        if (k >= cap) {
            *why = "more than 64 blocks";
            return -1;
        }
        int got = parse_val(p, (size_t)(q - p), max, r, &out[k], u);
        if (got < 0) {
            *why = "list entries must be numbers (or $parameters) separated by ':'";
            return -1;
        }
        if (got == 0)
            *unset = true;
        k++;
        p = q + 1;
    }
    return k;
}

static void tp_reset(ptc_placement *pl)
{
    pl->tp = PTC_TP_REPLICATE;
    pl->dim = -1;
    pl->nblocks = 0;
    pl->blocks_equal = false;
    pl->nheads = 0;
    pl->kv = 0;
    pl->head_dim = 0;
    pl->cut = false;
}

static bool item_is(const char *p, const char *q, const char *key, const char **val)
{
    size_t k = strlen(key);
    if ((size_t)(q - p) < k || memcmp(p, key, k) != 0)
        return false;
    *val = p + k;
    return true;
}

/* Parse the value of tp=: replicate | split(d[,blocks=N|a:b:…][,heads=…]
 * [,kv_heads=…][,head_dim=D][,cut]). Parameters ($NAME) are looked up in @p r
 * (NULL: not allowed). An unset parameter is reported in @p u; the caller
 * decides (docs/rules.md). On failure returns false and a reason. */
static bool parse_tp(const char *v, size_t n, ptc_placement *pl, const char **why,
                     const ptc_rules *r, unset_ref *u)
{
    unset_ref dummy;
    if (!u)
        u = &dummy;
    memset(u, 0, sizeof *u);
    tp_reset(pl);
    if (n == 9 && memcmp(v, "replicate", 9) == 0)
        return true;
    *why = "expected replicate or split(d[,blocks=…][,heads=…][,kv_heads=…][,head_dim=D][,cut])";
    if (n < 8 || memcmp(v, "split(", 6) != 0 || v[n - 1] != ')')
        return false;
    const char *p = v + 6, *end = v + n - 1;
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *dend = comma ? comma : end;
    int64_t d;
    if (!parse_dec(p, (size_t)(dend - p), PTC_MAX_DIMS - 1, &d)) {
        *why = "split dimension must be a number from 0 to 7";
        return false;
    }
    pl->tp = PTC_TP_SPLIT;
    pl->dim = (int)d;
    if (!comma)
        return true;
    int64_t hq[PTC_RULES_MAX_BLOCKS], hk[PTC_RULES_MAX_BLOCKS];
    int nq = 0, nk = 0;
    bool seen_blocks = false, seen_q = false, seen_k = false, seen_hd = false;
    p = comma + 1;
    for (;;) {
        const char *q = p;
        while (q < end && *q != ',')
            q++;
        const char *val;
        bool unset = false;
        if (item_is(p, q, "blocks=", &val)) {
            if (seen_blocks) {
                *why = "blocks= given twice";
                return false;
            }
            seen_blocks = true;
            if (!memchr(val, ':', (size_t)(q - val))) {
                int64_t nb;
                int got = parse_val(val, (size_t)(q - val), PTC_RULES_MAX_BLOCKS, r, &nb, u);
                if (got < 0 || (got > 0 && nb < 1)) {
                    *why = "blocks=N needs N from 1 to 64";
                    return false;
                }
                pl->nblocks = got ? (int)nb : 1;
                pl->blocks_equal = true;
                unset = got == 0;
            } else {
                int k = parse_list(val, q, MAX_BLOCK_SIZE, r, pl->blocks, PTC_RULES_MAX_BLOCKS,
                                   u, &unset, why);
                if (k < 0) {
                    if (strstr(*why, "list entries"))
                        *why = "block sizes must be numbers separated by ':'";
                    return false;
                }
                pl->nblocks = k;
            }
            if (unset)
                u->in_blocks = true;
        } else if (item_is(p, q, "heads=", &val) || item_is(p, q, "kv_heads=", &val)) {
            bool kv = p[0] == 'k';
            if (kv ? seen_k : seen_q) {
                *why = kv ? "kv_heads= given twice" : "heads= given twice";
                return false;
            }
            *(kv ? &seen_k : &seen_q) = true;
            int k = parse_list(val, q, MAX_BLOCK_SIZE, r, kv ? hk : hq, PTC_RULES_MAX_BLOCKS, u,
                               &unset, why);
            if (k < 0)
                return false;
            *(kv ? &nk : &nq) = k;
            for (int i = 0; i < k; i++)
                if ((kv ? hk : hq)[i] < 1 && !unset) {
                    *why = "head counts must be at least 1";
                    return false;
                }
            if (unset)
                u->in_heads = true;
        } else if (item_is(p, q, "head_dim=", &val)) {
            if (seen_hd) {
                *why = "head_dim= given twice";
                return false;
            }
            seen_hd = true;
            int got = parse_val(val, (size_t)(q - val), MAX_BLOCK_SIZE, r, &pl->head_dim, u);
            if (got < 0 || (got > 0 && pl->head_dim < 1)) {
                *why = "head_dim= needs a number of at least 1";
                return false;
            }
            if (got == 0)
                u->in_head_dim = true;
        } else if (q - p == 3 && memcmp(p, "cut", 3) == 0) {
            if (pl->cut) {
                *why = "cut given twice";
                return false;
            }
            pl->cut = true;
        } else {
            *why = seen_blocks || seen_q || seen_k || seen_hd || pl->cut
                       ? "unknown split option (blocks=, heads=, kv_heads=, head_dim= or cut)"
                       : "expected blocks= after the split dimension";
            return false;
        }
        if (q == end)
            break;
        p = q + 1;
    }
    if (nq + nk > PTC_RULES_MAX_BLOCKS) {
        *why = "more than 64 head entries";
        return false;
    }
    for (int i = 0; i < nq; i++)
        pl->heads[pl->nheads++] = hq[i];
    for (int i = 0; i < nk; i++) {
        pl->kv |= (uint64_t)1 << pl->nheads;
        pl->heads[pl->nheads++] = hk[i];
    }
    if (pl->nheads && pl->nblocks && pl->nheads != 1 && pl->nheads != pl->nblocks &&
        !u->in_blocks) {
        *why = "heads= and kv_heads= give one entry, or one per block of blocks=";
        return false;
    }
    if ((seen_hd || pl->cut) && !seen_q && !seen_k) {
        *why = "head_dim= and cut go with heads= or kv_heads=";
        return false;
    }
    return true;
}

static bool parse_pp(const char *v, size_t n, ptc_pp_kind *pp)
{
    static const char *const names[] = {"layer", "first", "last", "first+last", "all"};
    for (int i = 0; i < 5; i++)
        if (strlen(names[i]) == n && memcmp(names[i], v, n) == 0) {
            *pp = (ptc_pp_kind)i;
            return true;
        }
    return false;
}

static const char *pp_name(ptc_pp_kind pp)
{
    switch (pp) {
    case PTC_PP_LAYER: return "layer";
    case PTC_PP_FIRST: return "first";
    case PTC_PP_LAST: return "last";
    case PTC_PP_FIRST_LAST: return "first+last";
    case PTC_PP_ALL: return "all";
    }
    return "?";
}

static bool parse_kind(const char *v, size_t n, ptc_tensor_kind *k)
{
    if (n == 5 && memcmp(v, "param", 5) == 0)
        *k = PTC_KIND_PARAM;
    else if (n == 5 && memcmp(v, "optim", 5) == 0)
        *k = PTC_KIND_OPTIM;
    else
        return false;
    return true;
}

/* Append "KEY" and the values joined by ':'. */
static void buf_list(ptc_buf *b, const char *key, const int64_t *v, int n)
{
    ptc_buf_puts(b, key);
    for (int i = 0; i < n; i++)
        ptc_buf_printf(b, i ? ":%lld" : "%lld", (long long)v[i]);
}

/* Append the tp= value of a placement (canonical item order). */
static void buf_tp(ptc_buf *b, const ptc_placement *pl)
{
    if (pl->tp != PTC_TP_SPLIT) {
        ptc_buf_puts(b, "replicate");
        return;
    }
    ptc_buf_printf(b, "split(%d", pl->dim);
    if (pl->nblocks && pl->blocks_equal)
        ptc_buf_printf(b, ",blocks=%d", pl->nblocks);
    else if (pl->nblocks)
        buf_list(b, ",blocks=", pl->blocks, pl->nblocks);
    int nq = 0;
    while (nq < pl->nheads && !(pl->kv >> nq & 1))
        nq++;
    if (nq)
        buf_list(b, ",heads=", pl->heads, nq);
    if (pl->nheads > nq)
        buf_list(b, ",kv_heads=", pl->heads + nq, pl->nheads - nq);
    if (pl->nheads && pl->head_dim)
        ptc_buf_printf(b, ",head_dim=%lld", (long long)pl->head_dim);
    if (pl->nheads && pl->cut)
        ptc_buf_puts(b, ",cut");
    ptc_buf_puts(b, ")");
}

/* ---- parser ------------------------------------------------------------------ */

typedef struct tok {
    const char *s;
    size_t n;
} tok;

static bool is_sep(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

#define LINE_ERR(...) ptc_error_set(PTC_E_RULE, __VA_ARGS__)

/* Split one line into items; returns the count or -1 (too many). */
static int tokenize(const char *s, size_t n, tok *t, int cap)
{
    int ntok = 0;
    size_t i = 0;
    while (i < n) {
        while (i < n && is_sep(s[i]))
            i++;
        if (i >= n || s[i] == '#')
            break;
        size_t j = i;
        while (j < n && !is_sep(s[j]))
            j++;
        if (ntok == cap)
            return -1;
        t[ntok].s = s + i;
        t[ntok].n = j - i;
        ntok++;
        i = j;
    }
    return ntok;
}

static bool tok_is(const tok *t, const char *word)
{
    return t->n == strlen(word) && memcmp(t->s, word, t->n) == 0;
}

/* What one parse of a text (the top level or an included preset) shares. */
typedef struct parse_ctx {
    const char *origin;
    int origin_idx;
    int depth;           /* include depth: 0 top level */
} parse_ctx;

static int add_layer(ptc_rules *r, const tok *t, int ntok, const parse_ctx *pc, int line)
{
    char cb[96];
    const char *origin = pc->origin;
    if (ntok != 2)
        return LINE_ERR("%s:%d: 'layer' takes exactly one pattern", origin, line);
    const char *s = t[1].s;
    size_t n = t[1].n;
    size_t at = SIZE_MAX, count = 0;
    for (size_t i = 0; i + 3 <= n; i++)
        if (memcmp(s + i, "{L}", 3) == 0) {
            if (at == SIZE_MAX)
                at = i;
            count++;
        }
    if (count != 1)
        return LINE_ERR("%s:%d: layer pattern '%s' must contain {L} exactly once", origin,
                        line, clip(s, n, cb));
    for (size_t i = 0; i < r->nlayers; i++)
        if (strlen(r->layers[i].raw) == n && memcmp(r->layers[i].raw, s, n) == 0)
            return PTC_OK; /* the same pattern again (an include): nothing new */
    PTC_TRY(ptc_grow((void **)&r->layers, &r->cap_layers, r->nlayers + 1, sizeof *r->layers));
    char *raw = ptc_strndup(s, n);
    if (!raw)
        return PTC_E_NOMEM;
    r->layers[r->nlayers].raw = raw;
    r->layers[r->nlayers].npre = at;
    r->layers[r->nlayers].nsuf = n - at - 3;
    r->nlayers++;
    return PTC_OK;
}

static int add_optim(ptc_rules *r, const tok *t, int ntok, const parse_ctx *pc, int line)
{
    char cb[96];
    if (ntok < 2)
        return LINE_ERR("%s:%d: 'optim' needs at least one suffix", pc->origin, line);
    for (int i = 1; i < ntok; i++) {
        bool dup = false;
        for (size_t j = 0; j < r->nsuffixes; j++)
            if (strlen(r->suffixes[j]) == t[i].n &&
                memcmp(r->suffixes[j], t[i].s, t[i].n) == 0) {
                /* the same suffix from another text (an include) merges */
                if (r->suffix_src[j] == pc->origin_idx)
                    return LINE_ERR("%s:%d: optim suffix '%s' given twice", pc->origin, line,
                                    clip(t[i].s, t[i].n, cb));
                dup = true;
            }
        if (dup)
            continue;
        PTC_TRY(ptc_grow((void **)&r->suffixes, &r->cap_suffixes, r->nsuffixes + 1,
                         sizeof *r->suffixes));
        PTC_TRY(ptc_grow((void **)&r->suffix_src, &r->cap_suffix_src, r->nsuffixes + 1,
                         sizeof *r->suffix_src));
        char *s = ptc_strndup(t[i].s, t[i].n);
        if (!s)
            return PTC_E_NOMEM;
        r->suffix_src[r->nsuffixes] = pc->origin_idx;
        r->suffixes[r->nsuffixes++] = s;
    }
    return PTC_OK;
}

/* Decide what an unset parameter in a split means (docs/rules.md, "Parameters"):
 * a split that keeps its blocks without the heads loses its heads; a split
 * whose blocks need the parameter is incomplete (an error on resolution);
 * an unset head_dim= check is left out. */
static int settle_unset(ptc_rules *r, match_rule *m, const unset_ref *u, const char *v,
                        size_t vn)
{
    if (!u->name)
        return PTC_OK;
    PTC_TRY(note_missing(r, u->name, u->n));
    ptc_placement *pl = &m->pl;
    if (!u->in_blocks && !u->in_heads) { /* only the head_dim= check */
        pl->head_dim = 0;
        return PTC_OK;
    }
    if (!u->in_blocks && (pl->nblocks || pl->nheads <= 1)) { /* the heads go */
        pl->nheads = 0;
        pl->kv = 0;
        pl->head_dim = 0;
        pl->cut = false;
        return PTC_OK;
    }
    m->need = ptc_strndup(u->name, u->n);
    m->raw_tp = ptc_strndup(v, vn);
    if (!m->need || !m->raw_tp)
        return PTC_E_NOMEM;
    return PTC_OK;
}

static int add_match(ptc_rules *r, const tok *t, int ntok, const parse_ctx *pc, int line)
{
    char cb[96];
    const char *origin = pc->origin;
    if (ntok < 2)
        return LINE_ERR("%s:%d: 'match' needs a glob", origin, line);
    match_rule m;
    memset(&m, 0, sizeof m);
    tp_reset(&m.pl);
    m.pl.layer = -1;
    m.pl.kind = PTC_KIND_PARAM;
    m.line = line;
    m.origin = pc->origin_idx;
    /* a trailing unescaped backslash has nothing to escape */
    size_t bs = 0;
    for (size_t i = 0; i < t[1].n; i++)
        bs = t[1].s[i] == '\\' ? bs + 1 : 0;
    if (bs % 2)
        return LINE_ERR("%s:%d: glob '%s' ends with a lone backslash", origin, line,
                        clip(t[1].s, t[1].n, cb));
    bool seen_tp = false, seen_if = false, active = true;
    const char *unless = NULL;
    size_t nunless = 0;
    unset_ref u;
    memset(&u, 0, sizeof u);
    const char *tpv = NULL;
    size_t tpn = 0;
    for (int i = 2; i < ntok; i++) {
        const char *s = t[i].s;
        size_t n = t[i].n;
        const char *eq = memchr(s, '=', n);
        size_t kn = eq ? (size_t)(eq - s) : n;
        const char *v = eq ? eq + 1 : s + n;
        size_t vn = eq ? n - kn - 1 : 0;
        if (!eq)
            return LINE_ERR("%s:%d: expected key=value, got '%s'", origin, line,
                            clip(s, n, cb));
        if (kn == 2 && memcmp(s, "tp", 2) == 0) {
            const char *why = "";
            if (seen_tp)
                return LINE_ERR("%s:%d: tp= given twice", origin, line);
            seen_tp = true;
            if (!parse_tp(v, vn, &m.pl, &why, r, &u))
                return LINE_ERR("%s:%d: bad tp= value '%s': %s", origin, line,
                                clip(v, vn, cb), why);
            tpv = v;
            tpn = vn;
        } else if (kn == 2 && memcmp(s, "pp", 2) == 0) {
            if (m.has_pp)
                return LINE_ERR("%s:%d: pp= given twice", origin, line);
            m.has_pp = true;
            if (!parse_pp(v, vn, &m.pl.pp))
                return LINE_ERR("%s:%d: bad pp= value '%s' (layer, first, last, "
                                "first+last or all)", origin, line, clip(v, vn, cb));
        } else if (kn == 4 && memcmp(s, "kind", 4) == 0) {
            if (m.has_kind)
                return LINE_ERR("%s:%d: kind= given twice", origin, line);
            m.has_kind = true;
            if (!parse_kind(v, vn, &m.pl.kind))
                return LINE_ERR("%s:%d: bad kind= value '%s' (param or optim)", origin, line,
                                clip(v, vn, cb));
        } else if (kn == 6 && memcmp(s, "unless", 6) == 0) {
            if (unless)
                return LINE_ERR("%s:%d: unless= given twice", origin, line);
            if (vn == 0)
                return LINE_ERR("%s:%d: unless= needs a tensor name", origin, line);
            unless = v;
            nunless = vn;
        } else if (kn == 2 && memcmp(s, "if", 2) == 0) {
            if (seen_if)
                return LINE_ERR("%s:%d: if= given twice", origin, line);
            seen_if = true;
            int64_t x;
            int got = parse_val(v, vn, INT64_MAX, r, &x, NULL);
            if (got < 0)
                return LINE_ERR("%s:%d: bad if= value '%s' (a number or a $parameter)", origin,
                                line, clip(v, vn, cb));
            active = got > 0 && x != 0;
        } else {
            return LINE_ERR("%s:%d: unknown key '%s' (tp, pp, kind, if or unless)", origin, line,
                            clip(s, kn, cb));
        }
    }
    if (!active)
        return PTC_OK; /* if= is 0 or an unset parameter: the line is left out */
    PTC_TRY(ptc_grow((void **)&r->rules, &r->cap_rules, r->nrules + 1, sizeof *r->rules));
    m.glob = ptc_strndup(t[1].s, t[1].n);
    if (!m.glob)
        return PTC_E_NOMEM;
    m.nglob = t[1].n;
    int rc = settle_unset(r, &m, &u, tpv, tpn);
    if (rc == PTC_OK && unless) {
        m.unless = ptc_strndup(unless, nunless);
        if (!m.unless)
            rc = PTC_E_NOMEM;
    }
    if (rc != PTC_OK) {
        ptc_free(m.unless);
        ptc_free(m.glob);
        ptc_free(m.need);
        ptc_free(m.raw_tp);
        return rc;
    }
    r->rules[r->nrules++] = m;
    return PTC_OK;
}

static int parse_text(ptc_rules *r, const char *text, size_t len, const char *origin,
                      int depth);

static int add_include(ptc_rules *r, const tok *t, int ntok, const parse_ctx *pc, int line)
{
    char cb[96];
    if (ntok != 2)
        return LINE_ERR("%s:%d: 'include' takes exactly one preset name", pc->origin, line);
    const char *text = preset_find(t[1].s, t[1].n);
    if (!text)
        return LINE_ERR("%s:%d: no rules preset '%s' to include (presets: llama, gpt2, "
                        "megatron-gpt, ptc-mlp, bert, phi3, none)", pc->origin, line,
                        clip(t[1].s, t[1].n, cb));
    if (pc->depth + 1 >= MAX_INCLUDE_DEPTH)
        return LINE_ERR("%s:%d: includes nested more than %d deep", pc->origin, line,
                        MAX_INCLUDE_DEPTH);
    char origin[80];
    snprintf(origin, sizeof origin, "preset %.*s", (int)t[1].n, t[1].s);
    return parse_text(r, text, strlen(text), origin, pc->depth + 1);
}

/* `param NAME VALUE` lines of the top-level text, set before any other line
 * is read (so a parameter may be used above its line). */
static int collect_params(ptc_rules *r, const char *text, size_t len, const char *origin)
{
    char cb[96];
    tok t[PTC_RULES_MAX_BLOCKS];
    size_t i = 0;
    int line = 0;
    /* names set by this text: a repeat is an error, an override of the
     * caller's value is not */
    size_t nown = 0;
    char **own = NULL;
    int rc = PTC_OK;
    while (i < len && rc == PTC_OK) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        line++;
        int ntok = tokenize(text + i, j - i, t, (int)PTC_ARRAY_LEN(t));
        i = j + 1;
        if (ntok < 1 || !tok_is(&t[0], "param"))
            continue; /* other lines (and too many items) are checked later */
        int64_t v;
        if (ntok != 3) {
            rc = LINE_ERR("%s:%d: 'param' takes a name and a value", origin, line);
        } else if (!param_name_ok(t[1].s, t[1].n)) {
            rc = LINE_ERR("%s:%d: bad parameter name '%s' (letters, digits, '_')", origin, line,
                          clip(t[1].s, t[1].n, cb));
        } else if (!parse_dec(t[2].s, t[2].n, MAX_BLOCK_SIZE, &v)) {
            rc = LINE_ERR("%s:%d: parameter value '%s' is not a non-negative number", origin,
                          line, clip(t[2].s, t[2].n, cb));
        } else {
            for (size_t k = 0; k < nown; k++)
                if (strlen(own[k]) == t[1].n && memcmp(own[k], t[1].s, t[1].n) == 0)
                    rc = LINE_ERR("%s:%d: parameter '%s' given twice", origin, line, own[k]);
            if (rc == PTC_OK)
                rc = param_set(r, t[1].s, t[1].n, v);
            if (rc == PTC_OK) {
                size_t cap = nown;
                rc = ptc_grow((void **)&own, &cap, nown + 1, sizeof *own);
                if (rc == PTC_OK)
                    own[nown++] = param_find(r, t[1].s, t[1].n)->name;
            }
        }
    }
    ptc_free(own);
    return rc;
}

static int parse_line(ptc_rules *r, const char *s, size_t n, const parse_ctx *pc, int line)
{
    tok t[PTC_RULES_MAX_BLOCKS];
    int ntok = tokenize(s, n, t, (int)PTC_ARRAY_LEN(t));
    if (ntok < 0)
        return LINE_ERR("%s:%d: too many items on one line", pc->origin, line);
    if (ntok == 0)
        return PTC_OK;
    char cb[96];
    if (tok_is(&t[0], "layer"))
        return add_layer(r, t, ntok, pc, line);
    if (tok_is(&t[0], "optim"))
        return add_optim(r, t, ntok, pc, line);
    if (tok_is(&t[0], "match"))
        return add_match(r, t, ntok, pc, line);
    if (tok_is(&t[0], "include"))
        return add_include(r, t, ntok, pc, line);
    if (tok_is(&t[0], "param")) {
        if (pc->depth > 0)
            return LINE_ERR("%s:%d: 'param' in an included preset", pc->origin, line);
        return PTC_OK; /* read by collect_params */
    }
    return LINE_ERR("%s:%d: unknown directive '%s' (layer, optim, match, include or param)",
                    pc->origin, line, clip(t[0].s, t[0].n, cb));
}

static int parse_text(ptc_rules *r, const char *text, size_t len, const char *origin,
                      int depth)
{
    PTC_TRY(ptc_grow((void **)&r->origins, &r->cap_origins, r->norigins + 1,
                     sizeof *r->origins));
    char *o = ptc_strdup(origin);
    if (!o)
        return PTC_E_NOMEM;
    r->origins[r->norigins++] = o;
    parse_ctx pc = {.origin = o, .origin_idx = (int)r->norigins - 1, .depth = depth};
    size_t i = 0;
    int line = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        line++;
        PTC_TRY(parse_line(r, text + i, j - i, &pc, line));
        i = j + 1;
    }
    return PTC_OK;
}

static int build_text(ptc_rules *r)
{
    ptc_buf b = {0};
    for (size_t i = 0; i < r->nlayers; i++)
        ptc_buf_printf(&b, "layer %s\n", r->layers[i].raw);
    if (r->nsuffixes) {
        ptc_buf_puts(&b, "optim");
        for (size_t i = 0; i < r->nsuffixes; i++)
            ptc_buf_printf(&b, " %s", r->suffixes[i]);
        ptc_buf_puts(&b, "\n");
    }
    for (size_t i = 0; i < r->nrules; i++) {
        const match_rule *m = &r->rules[i];
        ptc_buf_printf(&b, "match %s tp=", m->glob);
        if (m->raw_tp)
            ptc_buf_puts(&b, m->raw_tp);
        else
            buf_tp(&b, &m->pl);
        if (m->has_pp)
            ptc_buf_printf(&b, " pp=%s", pp_name(m->pl.pp));
        if (m->pl.kind == PTC_KIND_OPTIM)
            ptc_buf_puts(&b, " kind=optim");
        if (m->unless)
            ptc_buf_printf(&b, " unless=%s", m->unless);
        ptc_buf_puts(&b, "\n");
    }
    ptc_buf_put(&b, "", 0); /* an empty text is "" */
    if (b.err) {
        int rc = b.err;
        ptc_buf_free(&b);
        return rc;
    }
    r->text = b.s;
    return PTC_OK;
}

int ptc_rules_parse_params(ptc_rules **out, const char *text, size_t len, const char *origin,
                           const ptc_rules_param *params, size_t nparams)
{
    char cb[96];
    *out = NULL;
    if (!origin)
        origin = "rules";
    int rc;
    ptc_rules *r = ptc_calloc(1, sizeof *r);
    if (!r)
        return PTC_E_NOMEM;
    if (memchr(text, '\0', len)) {
        rc = ptc_error_set(PTC_E_RULE, "%s: contains a NUL byte", origin);
        goto out_destroy;
    }
    for (size_t i = 0; i < nparams; i++) {
        size_t n = params[i].name ? strlen(params[i].name) : 0;
        if (!param_name_ok(params[i].name, n) || params[i].value < 0) {
            rc = ptc_error_set(PTC_E_RULE, "bad rules parameter '%s'",
                               clip(params[i].name ? params[i].name : "", n, cb));
            goto out_destroy;
        }
        rc = param_set(r, params[i].name, n, params[i].value);
        if (rc != PTC_OK)
            goto out_destroy;
    }
    rc = collect_params(r, text, len, origin);
    if (rc != PTC_OK)
        goto out_destroy;
    rc = parse_text(r, text, len, origin, 0);
    if (rc != PTC_OK)
        goto out_destroy;
    for (size_t k = 0; k < r->nrules; k++)
        if (r->rules[k].has_pp && r->rules[k].pl.pp == PTC_PP_LAYER && r->nlayers == 0) {
            rc = ptc_error_set(PTC_E_RULE, "%s:%d: pp=layer needs a 'layer' pattern",
                               r->origins[r->rules[k].origin], r->rules[k].line);
            goto out_destroy;
        }
    if (r->nrules == 0) {
        rc = ptc_error_set(PTC_E_RULE, "%s: no 'match' rules", origin);
        goto out_destroy;
    }
    rc = build_text(r);
    if (rc != PTC_OK)
        goto out_destroy;
    *out = r;
    return PTC_OK;

out_destroy:
    ptc_rules_destroy(r);
    return rc;
}

int ptc_rules_parse(ptc_rules **out, const char *text, size_t len, const char *origin)
{
    return ptc_rules_parse_params(out, text, len, origin, NULL, 0);
}

#define MAX_RULES_FILE (16 << 20)

int ptc_rules_load_params(ptc_rules **out, const char *spec, const ptc_rules_param *params,
                          size_t nparams)
{
    *out = NULL;
    const char *text = preset_find(spec, strlen(spec));
    if (text) {
        char origin[64];
        snprintf(origin, sizeof origin, "preset %.40s", spec);
        return ptc_rules_parse_params(out, text, strlen(text), origin, params, nparams);
    }
    int rc;
    int fd = open(spec, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ptc_error_sys(PTC_E_IO, "cannot open rules file '%.200s' (and it is no preset)",
                             spec);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = ptc_error_sys(PTC_E_IO, "cannot stat rules file '%.200s'", spec);
        goto out_close;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MAX_RULES_FILE) {
        rc = ptc_error_set(PTC_E_IO, "rules file '%.200s' is not a regular file under 16 MiB",
                           spec);
        goto out_close;
    }
    char *buf = ptc_malloc((size_t)st.st_size + 1);
    if (!buf) {
        rc = PTC_E_NOMEM;
        goto out_close;
    }
    rc = ptc_pread_all(fd, buf, (size_t)st.st_size, 0, spec);
    if (rc == PTC_OK)
        rc = ptc_rules_parse_params(out, buf, (size_t)st.st_size, spec, params, nparams);
    ptc_free(buf);
out_close:
    close(fd);
    return rc;
}

int ptc_rules_load(ptc_rules **out, const char *spec)
{
    return ptc_rules_load_params(out, spec, NULL, 0);
}

/* ---- resolution -------------------------------------------------------------- */

/* Bytes of the UTF-8 character at s (1 for an invalid sequence). */
static size_t utf8_len(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    size_t l = c < 0x80 ? 1 : c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (l > n)
        return 1;
    for (size_t i = 1; i < l; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80)
            return 1;
    return l;
}

/* Whole-name glob: '*' any run, '?' one UTF-8 character, '\x' literal x.
 * Backtracks only to the last '*', which is enough because every other
 * pattern element matches a fixed text once its start is fixed. */
static bool glob_match(const char *p, size_t np, const char *s, size_t ns)
{
    size_t pi = 0, si = 0, star_p = SIZE_MAX, star_s = 0;
    while (si < ns) {
        if (pi < np && p[pi] == '*') {
            star_p = ++pi;
            star_s = si;
            continue;
        }
        if (pi < np && p[pi] == '?') {
            pi++;
            si += utf8_len(s + si, ns - si);
            continue;
        }
        if (pi < np) {
            char c = p[pi];
            size_t adv = 1;
            if (c == '\\' && pi + 1 < np) {
                c = p[pi + 1];
                adv = 2;
            }
            if (s[si] == c) {
                pi += adv;
                si++;
                continue;
            }
        }
        if (star_p == SIZE_MAX)
            return false;
        star_s += utf8_len(s + star_s, ns - star_s);
        si = star_s;
        pi = star_p;
    }
    while (pi < np && p[pi] == '*')
        pi++;
    return pi == np;
}

/* Layer index of a name: the first `layer` pattern that occurs in it (leftmost
 * occurrence; {L} is the maximal run of decimal digits there).
 * @return 1 found, 0 none, -1 index too large. */
static int layer_of(const ptc_rules *r, const char *s, size_t n, int64_t *idx)
{
    for (size_t k = 0; k < r->nlayers; k++) {
        const layer_pat *lp = &r->layers[k];
        const char *pre = lp->raw, *suf = lp->raw + lp->npre + 3;
        for (size_t i = 0; i + lp->npre < n; i++) {
            if (memcmp(s + i, pre, lp->npre) != 0)
                continue;
            size_t j = i + lp->npre, e = j;
            while (e < n && s[e] >= '0' && s[e] <= '9')
                e++;
            if (e == j || n - e < lp->nsuf || memcmp(s + e, suf, lp->nsuf) != 0)
                continue;
            if (!parse_dec(s + j, e - j, INT32_MAX, idx))
                return -1;
            return 1;
        }
    }
    return 0;
}

int ptc_rules_resolve(const ptc_rules *r, const char *name, ptc_placement *out)
{
    return ptc_rules_resolve_in(r, name, NULL, NULL, out);
}

int ptc_rules_resolve_in(const ptc_rules *r, const char *name, ptc_rules_has_fn has,
                         void *user, ptc_placement *out)
{
    char cb[96], pb[96];
    size_t n = strlen(name), pn = n;
    size_t best = 0;
    for (size_t i = 0; i < r->nsuffixes; i++) {
        size_t l = strlen(r->suffixes[i]);
        if (l < n && l > best && memcmp(name + n - l, r->suffixes[i], l) == 0)
            best = l;
    }
    pn = n - best;
    const match_rule *m = NULL;
    size_t mi;
    for (mi = 0; mi < r->nrules; mi++)
        if (glob_match(r->rules[mi].glob, r->rules[mi].nglob, name, pn)) {
            /* without a collection an unless= line is left out */
            if (r->rules[mi].unless && (!has || has(r->rules[mi].unless, user)))
                continue;
            m = &r->rules[mi];
            break;
        }
    if (!m) {
        if (best)
            return ptc_error_set(PTC_E_RULE,
                                 "no placement rule matches tensor '%s' (parameter '%s' of "
                                 "optimizer state)", clip(name, n, cb), clip(name, pn, pb));
        return ptc_error_set(PTC_E_RULE, "no placement rule matches tensor '%s'",
                             clip(name, n, cb));
    }
    const char *where = r->origins[m->origin];
    if (m->need)
        return ptc_error_set(PTC_E_RULE,
                             "tensor '%s': its rule (%s:%d) needs the parameter '%s' (a "
                             "'param' line, --param, or config.json beside the checkpoint)",
                             clip(name, n, cb), where, m->line, m->need);
    ptc_placement pl = m->pl;
    pl.rule = (int)mi;
    int64_t idx = -1;
    int lr = layer_of(r, name, pn, &idx);
    if (lr < 0)
        return ptc_error_set(PTC_E_RULE, "tensor '%s': layer index too large",
                             clip(name, n, cb));
    if (!m->has_pp) {
        if (lr == 0)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s' has no layer index, so its rule (%s:%d) must "
                                 "give pp=", clip(name, n, cb), where, m->line);
        pl.pp = PTC_PP_LAYER;
    }
    if (pl.pp == PTC_PP_LAYER) {
        if (lr == 0)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s': pp=layer (%s:%d) but the name has no layer "
                                 "index", clip(name, n, cb), where, m->line);
        pl.layer = idx;
    } else {
        pl.layer = -1;
    }
    if (best)
        pl.kind = PTC_KIND_OPTIM;
    *out = pl;
    return PTC_OK;
}

/* ---- placement text ----------------------------------------------------------- */

int ptc_placement_format(const ptc_placement *p, char *buf, size_t cap)
{
    ptc_buf b = {0};
    ptc_buf_puts(&b, "tp=");
    buf_tp(&b, p);
    ptc_buf_printf(&b, " pp=%s", pp_name(p->pp));
    if (p->pp == PTC_PP_LAYER)
        ptc_buf_printf(&b, " layer=%lld", (long long)p->layer);
    ptc_buf_puts(&b, p->kind == PTC_KIND_OPTIM ? " kind=optim" : " kind=param");
    int rc = b.err;
    if (rc == PTC_OK && b.len + 1 > cap)
        rc = ptc_error_set(PTC_E_RANGE, "placement text longer than %zu bytes", cap);
    if (rc == PTC_OK)
        memcpy(buf, b.s, b.len + 1);
    ptc_buf_free(&b);
    return rc;
}

int ptc_placement_parse(ptc_placement *out, const char *text)
{
    char cb[96];
    ptc_placement pl;
    memset(&pl, 0, sizeof pl);
    pl.dim = -1;
    pl.layer = -1;
    pl.rule = -1;
    bool seen[4] = {false, false, false, false};
    const char *s = text;
    size_t n = strlen(text);
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && text[j] != ' ')
            j++;
        const char *item = s + i;
        size_t len = j - i;
        if (len == 0)
            return ptc_error_set(PTC_E_INVAL, "placement: empty item in '%s'",
                                 clip(text, n, cb));
        const char *eq = memchr(item, '=', len);
        if (!eq)
            return ptc_error_set(PTC_E_INVAL, "placement: expected key=value, got '%s'",
                                 clip(item, len, cb));
        size_t kn = (size_t)(eq - item), vn = len - kn - 1;
        const char *v = eq + 1;
        const char *why = "";
        int which = -1;
        if (kn == 2 && memcmp(item, "tp", 2) == 0)
            which = 0;
        else if (kn == 2 && memcmp(item, "pp", 2) == 0)
            which = 1;
        else if (kn == 5 && memcmp(item, "layer", 5) == 0)
            which = 2;
        else if (kn == 4 && memcmp(item, "kind", 4) == 0)
            which = 3;
        if (which < 0)
            return ptc_error_set(PTC_E_INVAL, "placement: unknown key '%s'",
                                 clip(item, kn, cb));
        if (seen[which])
            return ptc_error_set(PTC_E_INVAL, "placement: key '%s' given twice",
                                 clip(item, kn, cb));
        seen[which] = true;
        bool ok;
        switch (which) {
        case 0:
            ok = parse_tp(v, vn, &pl, &why, NULL, NULL);
            break;
        case 1:
            ok = parse_pp(v, vn, &pl.pp);
            break;
        case 2:
            ok = parse_dec(v, vn, INT32_MAX, &pl.layer);
            break;
        default:
            ok = parse_kind(v, vn, &pl.kind);
            break;
        }
        if (!ok)
            return ptc_error_set(PTC_E_INVAL, "placement: bad value '%s' for '%s'",
                                 clip(v, vn, cb), which == 0 ? "tp" : which == 1 ? "pp"
                                                        : which == 2 ? "layer" : "kind");
        i = j + 1;
    }
    if (!seen[0] || !seen[1] || !seen[3])
        return ptc_error_set(PTC_E_INVAL, "placement: needs tp=, pp= and kind=");
    if (seen[2] != (pl.pp == PTC_PP_LAYER))
        return ptc_error_set(PTC_E_INVAL, "placement: layer= goes with pp=layer and only there");
    *out = pl;
    return PTC_OK;
}

bool ptc_placement_equal(const ptc_placement *a, const ptc_placement *b)
{
    if (a->tp != b->tp || a->pp != b->pp || a->kind != b->kind)
        return false;
    if (a->pp == PTC_PP_LAYER && a->layer != b->layer)
        return false;
    if (a->tp == PTC_TP_REPLICATE)
        return true;
    if (a->dim != b->dim || a->nblocks != b->nblocks || a->blocks_equal != b->blocks_equal)
        return false;
    if (a->nblocks && !a->blocks_equal)
        for (int i = 0; i < a->nblocks; i++)
            if (a->blocks[i] != b->blocks[i])
                return false;
    if (a->nheads != b->nheads)
        return false;
    if (a->nheads == 0)
        return true;
    if (a->kv != b->kv || a->head_dim != b->head_dim || a->cut != b->cut)
        return false;
    for (int i = 0; i < a->nheads; i++)
        if (a->heads[i] != b->heads[i])
            return false;
    return true;
}

/* ---- Hugging Face config.json ---------------------------------------------------- */

static int params_add(ptc_rules_param **p, size_t *n, size_t *cap, const char *name, int64_t v)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*p)[i].name, name) == 0)
            return PTC_OK;
    PTC_TRY(ptc_grow((void **)p, cap, *n + 1, sizeof **p));
    char *s = ptc_strdup(name);
    if (!s)
        return PTC_E_NOMEM;
    (*p)[*n].name = s;
    (*p)[*n].value = v;
    (*n)++;
    return PTC_OK;
}

static bool params_get(const ptc_rules_param *p, size_t n, const char *name, int64_t *v)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0) {
            *v = p[i].value;
            return true;
        }
    return false;
}

void ptc_rules_params_free(ptc_rules_param *params, size_t n)
{
    for (size_t i = 0; params && i < n; i++)
        ptc_free((char *)params[i].name);
    ptc_free(params);
}

int ptc_rules_params_read(const char *path, ptc_rules_param **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    json_error_t jerr;
    json_t *obj = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj) {
        FILE *f = fopen(path, "r");
        if (!f)
            return ptc_error_sys(PTC_E_IO, "cannot read '%.200s'", path);
        fclose(f);
        return ptc_error_set(PTC_E_FORMAT, "%.200s:%d: %s", path, jerr.line, jerr.text);
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        return ptc_error_set(PTC_E_FORMAT, "%.200s: not a JSON object", path);
    }
    ptc_rules_param *p = NULL;
    size_t n = 0, cap = 0;
    int rc = PTC_OK;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        if (rc != PTC_OK || !param_name_ok(key, strlen(key)))
            continue;
        if (json_is_integer(val) && json_integer_value(val) >= 0)
            rc = params_add(&p, &n, &cap, key, (int64_t)json_integer_value(val));
        else if (json_is_boolean(val))
            rc = params_add(&p, &n, &cap, key, json_is_true(val) ? 1 : 0);
    }
    json_decref(obj);
    /* what Hugging Face derives when config.json leaves it out */
    int64_t heads, kv, hidden;
    if (rc == PTC_OK && params_get(p, n, "num_attention_heads", &heads) && heads > 0) {
        if (!params_get(p, n, "num_key_value_heads", &kv))
            rc = params_add(&p, &n, &cap, "num_key_value_heads", heads);
        if (rc == PTC_OK && params_get(p, n, "hidden_size", &hidden) && hidden % heads == 0)
            rc = params_add(&p, &n, &cap, "head_dim", hidden / heads);
    }
    if (rc != PTC_OK) {
        ptc_rules_params_free(p, n);
        return rc;
    }
    *out = p;
    *nout = n;
    return PTC_OK;
}
