/* Placement values: numbers and $parameters, the tp=, pp= and kind=
 * grammar shared by rules lines (rules.c) and the placement text
 * (ptc_placement_format / _parse / _equal, the form `ptc info` and the
 * store record). docs/rules.md is the grammar. */
#include <string.h>

#include "ptc/box.h"
#include "ptc/layout/rules_internal.h"

/* ---- text helpers, parameters --------------------------------------------------- */

const char *ptc_rules_clip(const char *s, size_t n, char buf[96])
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

bool ptc_rules_dec(const char *s, size_t n, int64_t max, int64_t *out)
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
bool ptc_rules_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > PTC_RULES_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}
ptc_rules_var *ptc_rules_var_find(const ptc_rules_vars *vars, const char *s, size_t n)
{
    for (size_t i = 0; vars && i < vars->n; i++)
        if (strlen(vars->v[i].name) == n && memcmp(vars->v[i].name, s, n) == 0)
            return &vars->v[i];
    return NULL;
}

/* ---- values, tp= ------------------------------------------------------------ */

int ptc_rules_value(const char *s, size_t n, int64_t max, const ptc_rules_vars *vars,
                    int64_t *out, ptc_rules_unset *u)
{
    if (n > 0 && s[0] == '$') {
        if (!vars || !ptc_rules_name_ok(s + 1, n - 1))
            return -1;
        const ptc_rules_var *p = ptc_rules_var_find(vars, s + 1, n - 1);
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
    return ptc_rules_dec(s, n, max, out) ? 1 : -1;
}

/* A ':'-separated list of values into @p out (at most @p cap).
 * @return the count, or -1 with *why set. */
static int parse_list(const char *p, const char *end, int64_t max, const ptc_rules_vars *vars,
                      int64_t *out, int cap, ptc_rules_unset *u, bool *unset, const char **why)
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
        int got = ptc_rules_value(p, (size_t)(q - p), max, vars, &out[k], u);
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

void ptc_rules_tp_reset(ptc_placement *pl)
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

bool ptc_rules_tp_parse(const char *v, size_t n, ptc_placement *pl, const char **why,
                     const ptc_rules_vars *vars, ptc_rules_unset *u)
{
    ptc_rules_unset dummy;
    if (!u)
        u = &dummy;
    memset(u, 0, sizeof *u);
    ptc_rules_tp_reset(pl);
    if (n == 9 && memcmp(v, "replicate", 9) == 0)
        return true;
    *why = "expected replicate or split(d[,blocks=…][,heads=…][,kv_heads=…][,head_dim=D][,cut])";
    if (n < 8 || memcmp(v, "split(", 6) != 0 || v[n - 1] != ')')
        return false;
    const char *p = v + 6, *end = v + n - 1;
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *dend = comma ? comma : end;
    int64_t d;
    if (!ptc_rules_dec(p, (size_t)(dend - p), PTC_MAX_DIMS - 1, &d)) {
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
                int got =
                    ptc_rules_value(val, (size_t)(q - val), PTC_RULES_MAX_BLOCKS, vars, &nb, u);
                if (got < 0 || (got > 0 && nb < 1)) {
                    *why = "blocks=N needs N from 1 to 64";
                    return false;
                }
                pl->nblocks = got ? (int)nb : 1;
                pl->blocks_equal = true;
                unset = got == 0;
            } else {
                int k = parse_list(val, q, PTC_RULES_MAX_VALUE, vars, pl->blocks,
                                   PTC_RULES_MAX_BLOCKS, u, &unset, why);
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
            int k = parse_list(val, q, PTC_RULES_MAX_VALUE, vars, kv ? hk : hq,
                               PTC_RULES_MAX_BLOCKS, u, &unset, why);
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
            int got = ptc_rules_value(val, (size_t)(q - val), PTC_RULES_MAX_VALUE, vars,
                                      &pl->head_dim, u);
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

bool ptc_rules_pp_parse(const char *v, size_t n, ptc_pp_kind *pp)
{
    static const char *const names[] = {"layer", "first", "last", "first+last", "all"};
    for (int i = 0; i < 5; i++)
        if (strlen(names[i]) == n && memcmp(names[i], v, n) == 0) {
            *pp = (ptc_pp_kind)i;
            return true;
        }
    return false;
}

const char *ptc_rules_pp_name(ptc_pp_kind pp)
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

bool ptc_rules_kind_parse(const char *v, size_t n, ptc_tensor_kind *k)
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

void ptc_rules_tp_format(ptc_buf *b, const ptc_placement *pl)
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

/* ---- placement text ----------------------------------------------------------- */

int ptc_placement_format(const ptc_placement *p, char *buf, size_t cap)
{
    ptc_buf b = {0};
    ptc_buf_puts(&b, "tp=");
    ptc_rules_tp_format(&b, p);
    ptc_buf_printf(&b, " pp=%s", ptc_rules_pp_name(p->pp));
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
                                 ptc_rules_clip(text, n, cb));
        const char *eq = memchr(item, '=', len);
        if (!eq)
            return ptc_error_set(PTC_E_INVAL, "placement: expected key=value, got '%s'",
                                 ptc_rules_clip(item, len, cb));
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
                                 ptc_rules_clip(item, kn, cb));
        if (seen[which])
            return ptc_error_set(PTC_E_INVAL, "placement: key '%s' given twice",
                                 ptc_rules_clip(item, kn, cb));
        seen[which] = true;
        bool ok;
        switch (which) {
        case 0:
            ok = ptc_rules_tp_parse(v, vn, &pl, &why, NULL, NULL);
            break;
        case 1:
            ok = ptc_rules_pp_parse(v, vn, &pl.pp);
            break;
        case 2:
            ok = ptc_rules_dec(v, vn, INT32_MAX, &pl.layer);
            break;
        default:
            ok = ptc_rules_kind_parse(v, vn, &pl.kind);
            break;
        }
        if (!ok)
            return ptc_error_set(PTC_E_INVAL, "placement: bad value '%s' for '%s'",
                                 ptc_rules_clip(v, vn, cb), which == 0 ? "tp" : which == 1 ? "pp"
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
