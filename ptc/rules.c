/* Placement rules: parser, presets, canonical text, name resolution. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/box.h"
#include "ptc/rules.h"
#include "base/util_internal.h"

/* ---- presets ----------------------------------------------------------------
 * Each line is documented in docs/rules.md; the comments here say why. */

static const char preset_llama[] =
    "# HF Llama / Mistral / Qwen naming, Megatron-LM tensor parallelism.\n"
    "layer model.layers.{L}.\n"
    "# Adam moments and fp32 master weights follow their parameter.\n"
    "optim .exp_avg .exp_avg_sq .master\n"
    "# VocabParallelEmbedding: vocabulary rows split over tp.\n"
    "match model.embed_tokens.weight tp=split(0) pp=first\n"
    "# Output layer: ColumnParallelLinear over the vocabulary.\n"
    "match lm_head.weight tp=split(0) pp=last\n"
    "match model.norm.weight tp=replicate pp=last\n"
    "# q/k/v: column parallel (nn.Linear is [out,in]; out = heads).\n"
    "match *.self_attn.q_proj.weight tp=split(0)\n"
    "match *.self_attn.k_proj.weight tp=split(0)\n"
    "match *.self_attn.v_proj.weight tp=split(0)\n"
    "# Qwen2 carries q/k/v biases: split with their rows.\n"
    "match *.self_attn.q_proj.bias tp=split(0)\n"
    "match *.self_attn.k_proj.bias tp=split(0)\n"
    "match *.self_attn.v_proj.bias tp=split(0)\n"
    "# o_proj: row parallel (input features split); a bias is added after\n"
    "# the all-reduce, so it is replicated.\n"
    "match *.self_attn.o_proj.weight tp=split(1)\n"
    "match *.self_attn.o_proj.bias tp=replicate\n"
    "# Qwen3 per-head q/k norms act on head_dim: replicated.\n"
    "match *.self_attn.q_norm.weight tp=replicate\n"
    "match *.self_attn.k_norm.weight tp=replicate\n"
    "# Old checkpoints store the rotary buffer.\n"
    "match *.self_attn.rotary_emb.inv_freq tp=replicate\n"
    "# SwiGLU MLP: gate/up column parallel, down row parallel.\n"
    "match *.mlp.gate_proj.weight tp=split(0)\n"
    "match *.mlp.up_proj.weight tp=split(0)\n"
    "match *.mlp.down_proj.weight tp=split(1)\n"
    "match *.input_layernorm.weight tp=replicate\n"
    "match *.post_attention_layernorm.weight tp=replicate\n";

static const char preset_gpt2[] =
    "# HF GPT-2 naming, with or without the 'transformer.' prefix.\n"
    "# Conv1D weights are [in,out]: column parallel splits dim 1.\n"
    "layer transformer.h.{L}.\n"
    "layer h.{L}.\n"
    "optim .exp_avg .exp_avg_sq .master\n"
    "# Tied input/output embedding: a replica on the first and last stage.\n"
    "match transformer.wte.weight tp=split(0) pp=first+last\n"
    "match wte.weight tp=split(0) pp=first+last\n"
    "match transformer.wpe.weight tp=replicate pp=first\n"
    "match wpe.weight tp=replicate pp=first\n"
    "match transformer.ln_f.* tp=replicate pp=last\n"
    "match ln_f.* tp=replicate pp=last\n"
    "# Untied copy of the output embedding, if a checkpoint has one.\n"
    "match lm_head.weight tp=split(0) pp=last\n"
    "# Fused [q;k;v] columns: each of the three blocks split over tp.\n"
    "match *.attn.c_attn.weight tp=split(1,blocks=3)\n"
    "match *.attn.c_attn.bias tp=split(0,blocks=3)\n"
    "# Row parallel projections: input rows split, bias replicated.\n"
    "match *.attn.c_proj.weight tp=split(0)\n"
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
    "optim .exp_avg .exp_avg_sq .master\n"
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

static const char *const preset_names[] = {"llama", "gpt2", "megatron-gpt", "ptc-mlp", "none",
                                           NULL};
static const char *const preset_texts[] = {preset_llama, preset_gpt2, preset_megatron_gpt,
                                           preset_ptc_mlp, preset_none};

const char *const *ptc_rules_preset_names(void)
{
    return preset_names;
}

int ptc_rules_preset_text(const char *name, const char **text)
{
    for (size_t i = 0; preset_names[i]; i++)
        if (strcmp(name, preset_names[i]) == 0) {
            *text = preset_texts[i];
            return PTC_OK;
        }
    *text = NULL;
    return ptc_error_set(PTC_E_NOTFOUND,
                         "no rules preset '%.64s' (presets: llama, gpt2, megatron-gpt, ptc-mlp, none)",
                         name);
}

/* ---- the rule set ----------------------------------------------------------- */

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
} match_rule;

struct ptc_rules {
    char *origin;
    layer_pat *layers;
    size_t nlayers, cap_layers;
    char **suffixes;
    size_t nsuffixes, cap_suffixes;
    match_rule *rules;
    size_t nrules, cap_rules;
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
    for (size_t i = 0; i < r->nrules; i++)
        ptc_free(r->rules[i].glob);
    ptc_free(r->layers);
    ptc_free(r->suffixes);
    ptc_free(r->rules);
    ptc_free(r->origin);
    ptc_free(r->text);
    ptc_free(r);
}

const char *ptc_rules_text(const ptc_rules *r)
{
    return r->text;
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

#define MAX_BLOCK_SIZE ((int64_t)1 << 62)

/* Parse the value of tp=: replicate | split(d) | split(d,blocks=N) |
 * split(d,blocks=a:b:...). On failure returns false and a reason. */
static bool parse_tp(const char *v, size_t n, ptc_placement *pl, const char **why)
{
    pl->tp = PTC_TP_REPLICATE;
    pl->dim = -1;
    pl->nblocks = 0;
    pl->blocks_equal = false;
    if (n == 9 && memcmp(v, "replicate", 9) == 0)
        return true;
    *why = "expected replicate, split(d), split(d,blocks=N) or split(d,blocks=a:b:...)";
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
    p = comma + 1;
    if ((size_t)(end - p) < 7 || memcmp(p, "blocks=", 7) != 0) {
        *why = "expected blocks= after the split dimension";
        return false;
    }
    p += 7;
    if (!memchr(p, ':', (size_t)(end - p))) {
        int64_t nb;
        if (!parse_dec(p, (size_t)(end - p), PTC_RULES_MAX_BLOCKS, &nb) || nb < 1) {
            *why = "blocks=N needs N from 1 to 64";
            return false;
        }
        pl->nblocks = (int)nb;
        pl->blocks_equal = true;
        return true;
    }
    while (p <= end) {
        const char *q = p;
        while (q < end && *q != ':')
            q++;
        int64_t sz;
        if (pl->nblocks >= PTC_RULES_MAX_BLOCKS) {
            *why = "more than 64 blocks";
            return false;
        }
        if (!parse_dec(p, (size_t)(q - p), MAX_BLOCK_SIZE, &sz)) {
            *why = "block sizes must be numbers separated by ':'";
            return false;
        }
        pl->blocks[pl->nblocks++] = sz;
        p = q + 1;
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

/* ---- growable text -------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_add(sbuf *b, const char *s, size_t n)
{
    PTC_TRY(ptc_grow((void **)&b->p, &b->cap, b->n + n + 1, 1));
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return PTC_OK;
}

static int sb_str(sbuf *b, const char *s)
{
    return sb_add(b, s, strlen(s));
}

/* Append the tp= value of a placement. */
static int sb_tp(sbuf *b, const ptc_placement *pl)
{
    char tmp[64];
    if (pl->tp != PTC_TP_SPLIT)
        return sb_str(b, "replicate");
    if (pl->nblocks == 0) {
        snprintf(tmp, sizeof tmp, "split(%d)", pl->dim);
        return sb_str(b, tmp);
    }
    if (pl->blocks_equal) {
        snprintf(tmp, sizeof tmp, "split(%d,blocks=%d)", pl->dim, pl->nblocks);
        return sb_str(b, tmp);
    }
    snprintf(tmp, sizeof tmp, "split(%d,blocks=", pl->dim);
    PTC_TRY(sb_str(b, tmp));
    for (int i = 0; i < pl->nblocks; i++) {
        snprintf(tmp, sizeof tmp, i ? ":%lld" : "%lld", (long long)pl->blocks[i]);
        PTC_TRY(sb_str(b, tmp));
    }
    return sb_str(b, ")");
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

static int add_layer(ptc_rules *r, const tok *t, int ntok, const char *origin, int line)
{
    char cb[96];
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

static int add_optim(ptc_rules *r, const tok *t, int ntok, const char *origin, int line)
{
    char cb[96];
    if (ntok < 2)
        return LINE_ERR("%s:%d: 'optim' needs at least one suffix", origin, line);
    for (int i = 1; i < ntok; i++) {
        for (size_t j = 0; j < r->nsuffixes; j++)
            if (strlen(r->suffixes[j]) == t[i].n &&
                memcmp(r->suffixes[j], t[i].s, t[i].n) == 0)
                return LINE_ERR("%s:%d: optim suffix '%s' given twice", origin, line,
                                clip(t[i].s, t[i].n, cb));
        PTC_TRY(ptc_grow((void **)&r->suffixes, &r->cap_suffixes, r->nsuffixes + 1,
                         sizeof *r->suffixes));
        char *s = ptc_strndup(t[i].s, t[i].n);
        if (!s)
            return PTC_E_NOMEM;
        r->suffixes[r->nsuffixes++] = s;
    }
    return PTC_OK;
}

static int add_match(ptc_rules *r, const tok *t, int ntok, const char *origin, int line)
{
    char cb[96];
    if (ntok < 2)
        return LINE_ERR("%s:%d: 'match' needs a glob", origin, line);
    match_rule m;
    memset(&m, 0, sizeof m);
    m.pl.tp = PTC_TP_REPLICATE;
    m.pl.dim = -1;
    m.pl.layer = -1;
    m.pl.kind = PTC_KIND_PARAM;
    m.line = line;
    /* a trailing unescaped backslash has nothing to escape */
    size_t bs = 0;
    for (size_t i = 0; i < t[1].n; i++)
        bs = t[1].s[i] == '\\' ? bs + 1 : 0;
    if (bs % 2)
        return LINE_ERR("%s:%d: glob '%s' ends with a lone backslash", origin, line,
                        clip(t[1].s, t[1].n, cb));
    bool seen_tp = false;
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
            if (!parse_tp(v, vn, &m.pl, &why))
                return LINE_ERR("%s:%d: bad tp= value '%s': %s", origin, line,
                                clip(v, vn, cb), why);
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
        } else {
            return LINE_ERR("%s:%d: unknown key '%s' (tp, pp or kind)", origin, line,
                            clip(s, kn, cb));
        }
    }
    PTC_TRY(ptc_grow((void **)&r->rules, &r->cap_rules, r->nrules + 1, sizeof *r->rules));
    m.glob = ptc_strndup(t[1].s, t[1].n);
    if (!m.glob)
        return PTC_E_NOMEM;
    m.nglob = t[1].n;
    r->rules[r->nrules++] = m;
    return PTC_OK;
}

static int parse_line(ptc_rules *r, const char *s, size_t n, const char *origin, int line)
{
    tok t[PTC_RULES_MAX_BLOCKS];
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
        if (ntok == (int)PTC_ARRAY_LEN(t))
            return LINE_ERR("%s:%d: too many items on one line", origin, line);
        t[ntok].s = s + i;
        t[ntok].n = j - i;
        ntok++;
        i = j;
    }
    if (ntok == 0)
        return PTC_OK;
    char cb[96];
    if (t[0].n == 5 && memcmp(t[0].s, "layer", 5) == 0)
        return add_layer(r, t, ntok, origin, line);
    if (t[0].n == 5 && memcmp(t[0].s, "optim", 5) == 0)
        return add_optim(r, t, ntok, origin, line);
    if (t[0].n == 5 && memcmp(t[0].s, "match", 5) == 0)
        return add_match(r, t, ntok, origin, line);
    return LINE_ERR("%s:%d: unknown directive '%s' (layer, optim or match)", origin, line,
                    clip(t[0].s, t[0].n, cb));
}

static int build_text(ptc_rules *r)
{
    sbuf b = {0};
    int rc = PTC_OK;
    for (size_t i = 0; i < r->nlayers && rc == PTC_OK; i++) {
        rc = sb_str(&b, "layer ");
        if (rc == PTC_OK)
            rc = sb_str(&b, r->layers[i].raw);
        if (rc == PTC_OK)
            rc = sb_str(&b, "\n");
    }
    if (r->nsuffixes && rc == PTC_OK) {
        rc = sb_str(&b, "optim");
        for (size_t i = 0; i < r->nsuffixes && rc == PTC_OK; i++) {
            rc = sb_str(&b, " ");
            if (rc == PTC_OK)
                rc = sb_str(&b, r->suffixes[i]);
        }
        if (rc == PTC_OK)
            rc = sb_str(&b, "\n");
    }
    for (size_t i = 0; i < r->nrules && rc == PTC_OK; i++) {
        const match_rule *m = &r->rules[i];
        rc = sb_str(&b, "match ");
        if (rc == PTC_OK)
            rc = sb_str(&b, m->glob);
        if (rc == PTC_OK)
            rc = sb_str(&b, " tp=");
        if (rc == PTC_OK)
            rc = sb_tp(&b, &m->pl);
        if (rc == PTC_OK && m->has_pp) {
            rc = sb_str(&b, " pp=");
            if (rc == PTC_OK)
                rc = sb_str(&b, pp_name(m->pl.pp));
        }
        if (rc == PTC_OK && m->pl.kind == PTC_KIND_OPTIM)
            rc = sb_str(&b, " kind=optim");
        if (rc == PTC_OK)
            rc = sb_str(&b, "\n");
    }
    if (rc == PTC_OK && !b.p)
        rc = sb_add(&b, "", 0);
    if (rc != PTC_OK) {
        ptc_free(b.p);
        return rc;
    }
    r->text = b.p;
    return PTC_OK;
}

int ptc_rules_parse(ptc_rules **out, const char *text, size_t len, const char *origin)
{
    *out = NULL;
    if (!origin)
        origin = "rules";
    int rc;
    ptc_rules *r = ptc_calloc(1, sizeof *r);
    if (!r)
        return PTC_E_NOMEM;
    r->origin = ptc_strdup(origin);
    if (!r->origin) {
        rc = PTC_E_NOMEM;
        goto out_destroy;
    }
    if (memchr(text, '\0', len)) {
        rc = ptc_error_set(PTC_E_RULE, "%s: contains a NUL byte", origin);
        goto out_destroy;
    }
    size_t i = 0;
    int line = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        line++;
        rc = parse_line(r, text + i, j - i, origin, line);
        if (rc != PTC_OK)
            goto out_destroy;
        i = j + 1;
    }
    for (size_t k = 0; k < r->nrules; k++)
        if (r->rules[k].has_pp && r->rules[k].pl.pp == PTC_PP_LAYER && r->nlayers == 0) {
            rc = ptc_error_set(PTC_E_RULE, "%s:%d: pp=layer needs a 'layer' pattern", origin,
                               r->rules[k].line);
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

#define MAX_RULES_FILE (16 << 20)

int ptc_rules_load(ptc_rules **out, const char *spec)
{
    *out = NULL;
    const char *text;
    for (size_t i = 0; preset_names[i]; i++)
        if (strcmp(spec, preset_names[i]) == 0) {
            char origin[64];
            text = preset_texts[i];
            snprintf(origin, sizeof origin, "preset %s", preset_names[i]);
            return ptc_rules_parse(out, text, strlen(text), origin);
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
        rc = ptc_rules_parse(out, buf, (size_t)st.st_size, spec);
    ptc_free(buf);
out_close:
    close(fd);
    return rc;
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
                                 "give pp=", clip(name, n, cb), r->origin, m->line);
        pl.pp = PTC_PP_LAYER;
    }
    if (pl.pp == PTC_PP_LAYER) {
        if (lr == 0)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s': pp=layer (%s:%d) but the name has no layer "
                                 "index", clip(name, n, cb), r->origin, m->line);
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
    sbuf b = {0};
    char tmp[48];
    int rc = sb_str(&b, "tp=");
    if (rc == PTC_OK)
        rc = sb_tp(&b, p);
    if (rc == PTC_OK)
        rc = sb_str(&b, " pp=");
    if (rc == PTC_OK)
        rc = sb_str(&b, pp_name(p->pp));
    if (rc == PTC_OK && p->pp == PTC_PP_LAYER) {
        snprintf(tmp, sizeof tmp, " layer=%lld", (long long)p->layer);
        rc = sb_str(&b, tmp);
    }
    if (rc == PTC_OK)
        rc = sb_str(&b, p->kind == PTC_KIND_OPTIM ? " kind=optim" : " kind=param");
    if (rc != PTC_OK) {
        ptc_free(b.p);
        return rc;
    }
    if (b.n + 1 > cap) {
        ptc_free(b.p);
        return ptc_error_set(PTC_E_RANGE, "placement text longer than %zu bytes", cap);
    }
    memcpy(buf, b.p, b.n + 1);
    ptc_free(b.p);
    return PTC_OK;
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
            ok = parse_tp(v, vn, &pl, &why);
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
    return true;
}
