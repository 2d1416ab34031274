/* Placement rules: the rule set — the parser of rules text (include,
 * param, if=, unless=, head-aware splits), its canonical text, and the
 * resolution of a tensor name to its placement. The values of a rule
 * (tp=, pp=, kind=) are rules_placement.c's, the presets rules_presets.c's,
 * the parameters of a Hugging Face config.json rules_hf.c's
 * (ptc/layout/rules_internal.h). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util_internal.h"
#include "ptc/layout/rules_internal.h"

/* ---- the rule set ----------------------------------------------------------- */

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
    ptc_rules_vars params;
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
    for (size_t i = 0; i < r->params.n; i++)
        ptc_free(r->params.v[i].name);
    for (size_t i = 0; i < r->norigins; i++)
        ptc_free(r->origins[i]);
    ptc_free(r->origins);
    ptc_free(r->layers);
    ptc_free(r->suffixes);
    ptc_free(r->suffix_src);
    ptc_free(r->rules);
    ptc_free(r->params.v);
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

/* Set (or override) a parameter. */
static int param_set(ptc_rules *r, const char *s, size_t n, int64_t v)
{
    ptc_rules_vars *vars = &r->params;
    ptc_rules_var *p = ptc_rules_var_find(vars, s, n);
    if (p) {
        p->value = v;
        return PTC_OK;
    }
    PTC_TRY(ptc_grow((void **)&vars->v, &vars->cap, vars->n + 1, sizeof *vars->v));
    char *name = ptc_strndup(s, n);
    if (!name)
        return PTC_E_NOMEM;
    vars->v[vars->n].name = name;
    vars->v[vars->n].value = v;
    vars->n++;
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
                        line, ptc_rules_clip(s, n, cb));
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
                                    ptc_rules_clip(t[i].s, t[i].n, cb));
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
static int settle_unset(ptc_rules *r, match_rule *m, const ptc_rules_unset *u, const char *v,
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
    ptc_rules_tp_reset(&m.pl);
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
                        ptc_rules_clip(t[1].s, t[1].n, cb));
    bool seen_tp = false, seen_if = false, active = true;
    const char *unless = NULL;
    size_t nunless = 0;
    ptc_rules_unset u;
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
                            ptc_rules_clip(s, n, cb));
        if (kn == 2 && memcmp(s, "tp", 2) == 0) {
            const char *why = "";
            if (seen_tp)
                return LINE_ERR("%s:%d: tp= given twice", origin, line);
            seen_tp = true;
            if (!ptc_rules_tp_parse(v, vn, &m.pl, &why, &r->params, &u))
                return LINE_ERR("%s:%d: bad tp= value '%s': %s", origin, line,
                                ptc_rules_clip(v, vn, cb), why);
            tpv = v;
            tpn = vn;
        } else if (kn == 2 && memcmp(s, "pp", 2) == 0) {
            if (m.has_pp)
                return LINE_ERR("%s:%d: pp= given twice", origin, line);
            m.has_pp = true;
            if (!ptc_rules_pp_parse(v, vn, &m.pl.pp))
                return LINE_ERR("%s:%d: bad pp= value '%s' (layer, first, last, "
                                "first+last or all)", origin, line, ptc_rules_clip(v, vn, cb));
        } else if (kn == 4 && memcmp(s, "kind", 4) == 0) {
            if (m.has_kind)
                return LINE_ERR("%s:%d: kind= given twice", origin, line);
            m.has_kind = true;
            if (!ptc_rules_kind_parse(v, vn, &m.pl.kind))
                return LINE_ERR("%s:%d: bad kind= value '%s' (param or optim)", origin, line,
                                ptc_rules_clip(v, vn, cb));
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
            int got = ptc_rules_value(v, vn, INT64_MAX, &r->params, &x, NULL);
            if (got < 0)
                return LINE_ERR("%s:%d: bad if= value '%s' (a number or a $parameter)", origin,
                                line, ptc_rules_clip(v, vn, cb));
            active = got > 0 && x != 0;
        } else {
            return LINE_ERR("%s:%d: unknown key '%s' (tp, pp, kind, if or unless)", origin, line,
                            ptc_rules_clip(s, kn, cb));
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
    const char *text = ptc_rules_preset_find(t[1].s, t[1].n);
    if (!text)
        return LINE_ERR("%s:%d: no rules preset '%s' to include (presets: llama, gpt2, "
                        "megatron-gpt, ptc-mlp, bert, phi3, none)", pc->origin, line,
                        ptc_rules_clip(t[1].s, t[1].n, cb));
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
        } else if (!ptc_rules_name_ok(t[1].s, t[1].n)) {
            rc = LINE_ERR("%s:%d: bad parameter name '%s' (letters, digits, '_')", origin, line,
                          ptc_rules_clip(t[1].s, t[1].n, cb));
        } else if (!ptc_rules_dec(t[2].s, t[2].n, PTC_RULES_MAX_VALUE, &v)) {
            rc = LINE_ERR("%s:%d: parameter value '%s' is not a non-negative number", origin,
                          line, ptc_rules_clip(t[2].s, t[2].n, cb));
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
                    own[nown++] = ptc_rules_var_find(&r->params, t[1].s, t[1].n)->name;
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
                    pc->origin, line, ptc_rules_clip(t[0].s, t[0].n, cb));
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
            ptc_rules_tp_format(&b, &m->pl);
        if (m->has_pp)
            ptc_buf_printf(&b, " pp=%s", ptc_rules_pp_name(m->pl.pp));
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
        if (!ptc_rules_name_ok(params[i].name, n) || params[i].value < 0) {
            rc = ptc_error_set(PTC_E_RULE, "bad rules parameter '%s'",
                               ptc_rules_clip(params[i].name ? params[i].name : "", n, cb));
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
    const char *text = ptc_rules_preset_find(spec, strlen(spec));
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
            if (!ptc_rules_dec(s + j, e - j, INT32_MAX, idx))
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
                                 "optimizer state)", ptc_rules_clip(name, n, cb), ptc_rules_clip(name, pn, pb));
        return ptc_error_set(PTC_E_RULE, "no placement rule matches tensor '%s'",
                             ptc_rules_clip(name, n, cb));
    }
    const char *where = r->origins[m->origin];
    if (m->need)
        return ptc_error_set(PTC_E_RULE,
                             "tensor '%s': its rule (%s:%d) needs the parameter '%s' (a "
                             "'param' line, --param, or config.json beside the checkpoint)",
                             ptc_rules_clip(name, n, cb), where, m->line, m->need);
    ptc_placement pl = m->pl;
    pl.rule = (int)mi;
    int64_t idx = -1;
    int lr = layer_of(r, name, pn, &idx);
    if (lr < 0)
        return ptc_error_set(PTC_E_RULE, "tensor '%s': layer index too large",
                             ptc_rules_clip(name, n, cb));
    if (!m->has_pp) {
        if (lr == 0)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s' has no layer index, so its rule (%s:%d) must "
                                 "give pp=", ptc_rules_clip(name, n, cb), where, m->line);
        pl.pp = PTC_PP_LAYER;
    }
    if (pl.pp == PTC_PP_LAYER) {
        if (lr == 0)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s': pp=layer (%s:%d) but the name has no layer "
                                 "index", ptc_rules_clip(name, n, cb), where, m->line);
        pl.layer = idx;
    } else {
        pl.layer = -1;
    }
    if (best)
        pl.kind = PTC_KIND_OPTIM;
    *out = pl;
    return PTC_OK;
}
