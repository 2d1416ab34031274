/* The tensors a model description stands for, as a stored copy would hold
 * them: names, dtypes, shapes and placement rules, so the resharding
 * planner can plan a move from shapes alone (`ptc plan --model`, `ptc
 * suggest --from`). The description (exec/sched) knows nothing of layouts;
 * this adapter, above both, writes the rules its fields imply. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/util_internal.h"
#include "ptc/search_store.h"

struct ptc_search_tensors {
    ptc_tensor_info *t;
    size_t n;
    char *names;      /* every name, NUL-separated */
    ptc_rules *rules;
};

#define LAYER_PREFIX "layers."

static const char *const optim_suffix[] = {".exp_avg", ".exp_avg_sq", ".master"};

static const char *pp_word(ptc_cost_pp pp)
{
    switch (pp) {
    case PTC_COST_PP_FIRST: return "first";
    case PTC_COST_PP_LAST: return "last";
    case PTC_COST_PP_FIRST_LAST: return "first+last";
    case PTC_COST_PP_ALL: return "all";
    default: return NULL;
    }
}

/* A growable text. */
typedef struct text {
    char *s;
    size_t n, cap;
} text;

static int put(text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(text *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            return ptc_error_set(PTC_E_INVAL, "model: cannot format a rule");
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return PTC_OK;
        }
        PTC_TRY(ptc_grow((void **)&b->s, &b->cap, b->n + (size_t)k + 256, 1));
    }
}

/* The name of layer tensor @p c within its layer: its name without a
 * leading "layers.<L>." (how specs name them), else its whole name. */
static const char *in_layer(const ptc_cost_tensor *c, char *buf, size_t cap, size_t i)
{
    const char *nm = c->name && *c->name ? c->name : NULL;
    if (!nm) {
        snprintf(buf, cap, "t%zu", i);
        return buf;
    }
    char pre[48];
    int k = snprintf(pre, sizeof pre, LAYER_PREFIX "%lld.", (long long)c->layer);
    if (c->pp == PTC_COST_PP_LAYER && k > 0 && !strncmp(nm, pre, (size_t)k))
        return nm + k;
    return nm;
}

/* Name of tensor i: layer tensors are layers.<L>.<name within the layer>. */
static int name_of(text *b, const ptc_cost_tensor *c, size_t i)
{
    char buf[32];
    const char *nm = in_layer(c, buf, sizeof buf, i);
    if (c->pp == PTC_COST_PP_LAYER)
        return put(b, LAYER_PREFIX "%lld.%s", (long long)c->layer, nm);
    return put(b, "%s", nm);
}

/* One rule per kind of tensor: layer tensors by their name within a layer
 * (first match wins), the others by their whole name. */
static int rule_of(text *r, const ptc_cost_tensor *c, size_t i)
{
    char tp[64], buf[32];
    if (c->tp_dim < 0)
        snprintf(tp, sizeof tp, "tp=replicate");
    else if (c->tp_blocks > 1)
        snprintf(tp, sizeof tp, "tp=split(%d,blocks=%d)", c->tp_dim, c->tp_blocks);
    else
        snprintf(tp, sizeof tp, "tp=split(%d)", c->tp_dim);
    const char *nm = in_layer(c, buf, sizeof buf, i);
    if (c->pp == PTC_COST_PP_LAYER)
        return put(r, "match " LAYER_PREFIX "*.%s %s\n", nm, tp);
    return put(r, "match %s %s pp=%s\n", nm, tp, pp_word(c->pp));
}

/* Whether an earlier layer tensor has layer tensor i's name within the
 * layer (its rule is written once); PTC_E_INVAL if its placement differs. */
static int seen_before(const ptc_cost_model *m, size_t i, bool *seen)
{
    const ptc_cost_tensor *c = ptc_cost_model_tensor(m, i);
    char b1[32], b2[32];
    *seen = false;
    if (c->pp != PTC_COST_PP_LAYER)
        return PTC_OK;
    const char *nm = in_layer(c, b1, sizeof b1, i);
    for (size_t j = 0; j < i && !*seen; j++) {
        const ptc_cost_tensor *e = ptc_cost_model_tensor(m, j);
        if (e->pp != PTC_COST_PP_LAYER || strcmp(in_layer(e, b2, sizeof b2, j), nm))
            continue;
        if (e->tp_dim != c->tp_dim ||
            (e->tp_blocks > 1 ? e->tp_blocks : 0) != (c->tp_blocks > 1 ? c->tp_blocks : 0))
            return ptc_error_set(PTC_E_INVAL, "model: layer tensors named '%.200s' are placed "
                                              "differently in different layers", nm);
        *seen = true;
    }
    return PTC_OK;
}

void ptc_search_tensors_destroy(ptc_search_tensors *t)
{
    if (!t)
        return;
    ptc_free(t->t);
    ptc_free(t->names);
    ptc_rules_destroy(t->rules);
    ptc_free(t);
}

int ptc_search_tensors_create(ptc_search_tensors **out, const ptc_cost_model *m, bool optim)
{
    *out = NULL;
    size_t n = ptc_cost_model_count(m), nopt = 0;
    bool has_optim = false;
    for (size_t i = 0; i < n; i++)
        has_optim |= ptc_cost_model_tensor(m, i)->kind == PTC_COST_OPTIM;
    if (optim && !has_optim) {
        /* Adam in fp32: 4 bytes per element and tensor */
        double per = ptc_cost_model_get_info(m)->optim_bytes_per_param;
        nopt = (size_t)PTC_MIN(3.0, PTC_MAX(0.0, round(per / 4)));
    }
    ptc_search_tensors *st = ptc_calloc(1, sizeof *st);
    text names = {0}, rules = {0};
    size_t *at = NULL, total = 0;
    int rc = st ? PTC_OK : PTC_E_NOMEM;
    if (rc == PTC_OK)
        rc = put(&rules, "layer " LAYER_PREFIX "{L}.\n");
    for (size_t k = 0; rc == PTC_OK && k < nopt; k++)
        rc = put(&rules, "%s%s", k ? " " : "optim ", optim_suffix[k]);
    if (rc == PTC_OK && nopt)
        rc = put(&rules, "\n");
    for (size_t i = 0; rc == PTC_OK && i < n; i++)
        total += 1 + (ptc_cost_model_tensor(m, i)->kind == PTC_COST_PARAM ? nopt : 0);
    if (rc == PTC_OK && (!(st->t = ptc_calloc(total + 1, sizeof *st->t)) ||
                         !(at = ptc_calloc(total + 1, sizeof *at))))
        rc = PTC_E_NOMEM;
    for (size_t i = 0; rc == PTC_OK && i < n; i++) {
        const ptc_cost_tensor *c = ptc_cost_model_tensor(m, i);
        size_t copies = 1 + (c->kind == PTC_COST_PARAM ? nopt : 0);
        bool seen;
        rc = seen_before(m, i, &seen);
        if (rc == PTC_OK && !seen)
            rc = rule_of(&rules, c, i);
        for (size_t k = 0; rc == PTC_OK && k < copies; k++) {
            ptc_tensor_info *ti = &st->t[st->n];
            at[st->n++] = names.n;
            ti->dtype = k ? PTC_DTYPE_F32 : c->dtype;
            ti->ndim = c->ndim;
            memcpy(ti->shape, c->shape, sizeof ti->shape);
            rc = name_of(&names, c, i);
            if (rc == PTC_OK && k)
                rc = put(&names, "%s", optim_suffix[k - 1]);
            if (rc == PTC_OK)
                rc = put(&names, "%c", '\0'); /* names are NUL-separated */
        }
    }
    if (rc == PTC_OK) {
        st->names = names.s;
        names.s = NULL;
        for (size_t i = 0; i < st->n; i++)
            st->t[i].name = st->names + at[i];
        rc = ptc_rules_parse(&st->rules, rules.s, rules.n, "model spec");
    }
    ptc_free(at);
    ptc_free(names.s);
    ptc_free(rules.s);
    if (rc != PTC_OK) {
        ptc_search_tensors_destroy(st);
        return rc;
    }
    *out = st;
    return PTC_OK;
}

int ptc_search_tensors_from_store(ptc_search_tensors **out, ptc_store *s, uint64_t version)
{
    *out = NULL;
    ptc_store_reader *r;
    PTC_TRY(ptc_store_reader_open(&r, s, version));
    const ptc_version_info *vi = ptc_store_reader_version(r);
    size_t n = ptc_store_reader_tensor_count(r);
    ptc_search_tensors *st = ptc_calloc(1, sizeof *st);
    text names = {0};
    size_t *at = NULL;
    int rc = st ? PTC_OK : PTC_E_NOMEM;
    if (rc == PTC_OK && (!(st->t = ptc_calloc(n + 1, sizeof *st->t)) ||
                         !(at = ptc_calloc(n + 1, sizeof *at))))
        rc = PTC_E_NOMEM;
    for (size_t i = 0; rc == PTC_OK && i < n; i++) {
        ptc_store_tensor ti;
        rc = ptc_store_reader_tensor(r, i, &ti);
        if (rc != PTC_OK)
            break;
        at[i] = names.n;
        st->t[i].dtype = ti.dtype;
        st->t[i].ndim = ti.ndim;
        memcpy(st->t[i].shape, ti.shape, sizeof st->t[i].shape);
        rc = put(&names, "%s%c", ti.name, '\0');
        st->n++;
    }
    if (rc == PTC_OK) {
        const char *rt = vi->rules ? vi->rules : "";
        rc = ptc_rules_parse(&st->rules, rt, strlen(rt), "stored rules");
    }
    if (rc == PTC_OK) {
        st->names = names.s;
        names.s = NULL;
        for (size_t i = 0; i < st->n; i++)
            st->t[i].name = st->names + at[i];
    }
    ptc_free(at);
    ptc_free(names.s);
    ptc_store_reader_close(r);
    if (rc != PTC_OK) {
        ptc_search_tensors_destroy(st);
        return rc;
    }
    *out = st;
    return PTC_OK;
}

const ptc_tensor_info *ptc_search_tensors_list(const ptc_search_tensors *t, size_t *n)
{
    *n = t->n;
    return t->t;
}

const ptc_rules *ptc_search_tensors_rules(const ptc_search_tensors *t) { return t->rules; }
