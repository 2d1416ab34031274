/* Parallel configurations: both text forms, rank coordinates, layer stages. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/config.h"
#include "ptc/layout.h"
#include "base/util_internal.h"

void ptc_config_init(ptc_config *out)
{
    memset(out, 0, sizeof *out);
    out->dp = out->tp = out->pp = 1;
}

/* Parse a positive decimal of exactly [s, s+n); no sign, no spaces. */
static int parse_uint(const char *s, size_t n, const char *what, long long max,
                      long long *out)
{
    if (n == 0)
        return ptc_error_set(PTC_E_INVAL, "config: %s has no value", what);
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return ptc_error_set(PTC_E_INVAL, "config: %s value '%.*s' is not a number",
                                 what, (int)(n > 40 ? 40 : n), s);
        if (v > (max - (s[i] - '0')) / 10)
            return ptc_error_set(PTC_E_INVAL, "config: %s value '%.*s' is too large",
                                 what, (int)(n > 40 ? 40 : n), s);
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return PTC_OK;
}

static int parse_layers(ptc_config *c, const char *s, size_t n)
{
    c->nlayers = 0;
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != ':')
            j++;
        if (c->nlayers >= PTC_CONFIG_MAX_STAGES)
            return ptc_error_set(PTC_E_INVAL, "config: layers list longer than %d",
                                 PTC_CONFIG_MAX_STAGES);
        long long v;
        PTC_TRY(parse_uint(s + i, j - i, "layers", UINT32_MAX, &v));
        c->layers[c->nlayers++] = (uint32_t)v;
        i = j + 1;
    }
    return PTC_OK;
}

static int set_key(ptc_config *c, const char *k, size_t kn, const char *v, size_t vn,
                   unsigned *seen)
{
    static const char *const keys[] = {"dp", "tp", "pp", "zero", "layers"};
    int which = -1;
    for (int i = 0; i < 5; i++)
        if (strlen(keys[i]) == kn && memcmp(keys[i], k, kn) == 0)
            which = i;
    if (which < 0)
        return ptc_error_set(PTC_E_INVAL, "config: unknown key '%.*s'",
                             (int)(kn > 40 ? 40 : kn), k);
    if (*seen & (1u << which))
        return ptc_error_set(PTC_E_INVAL, "config: key '%s' given twice", keys[which]);
    *seen |= 1u << which;
    long long x;
    switch (which) {
    case 0: case 1: case 2:
        PTC_TRY(parse_uint(v, vn, keys[which], PTC_CONFIG_MAX_WORLD, &x));
        if (x < 1)
            return ptc_error_set(PTC_E_INVAL, "config: %s must be at least 1", keys[which]);
        if (which == 0) c->dp = (int)x;
        if (which == 1) c->tp = (int)x;
        if (which == 2) c->pp = (int)x;
        return PTC_OK;
    case 3:
        PTC_TRY(parse_uint(v, vn, "zero", 1000, &x));
        if (x > 1)
            return ptc_error_set(PTC_E_INVAL, "config: zero must be 0 or 1");
        c->zero = x == 1;
        return PTC_OK;
    default:
        return parse_layers(c, v, vn);
    }
}

int ptc_config_parse(ptc_config *out, const char *text)
{
    ptc_config c;
    ptc_config_init(&c);
    size_t n = strlen(text);
    if (n == 0)
        return ptc_error_set(PTC_E_INVAL, "config: empty");
    if (n > 16384)
        return ptc_error_set(PTC_E_INVAL, "config: too long");
    if (strncmp(text, PTC_LAYOUT_EXPLICIT_PREFIX, strlen(PTC_LAYOUT_EXPLICIT_PREFIX)) == 0)
        return ptc_error_set(PTC_E_INVAL, "config '%.64s' names an explicit layout (per-rank "
                                          "pieces, e.g. saved from DTensors), not a parallel "
                                          "configuration", text);
    bool keys_form = strchr(text, '=') != NULL;
    char sep = keys_form ? ',' : '-';
    unsigned seen = 0;
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && text[j] != sep)
            j++;
        const char *item = text + i;
        size_t len = j - i;
        if (len == 0)
            return ptc_error_set(PTC_E_INVAL, "config '%.64s': empty item", text);
        size_t kn, vo;
        if (keys_form) {
            const char *eq = memchr(item, '=', len);
            if (!eq)
                return ptc_error_set(PTC_E_INVAL, "config: item '%.*s' has no '='",
                                     (int)(len > 40 ? 40 : len), item);
            kn = (size_t)(eq - item);
            vo = kn + 1;
        } else {
            kn = 0;
            while (kn < len && islower((unsigned char)item[kn]))
                kn++;
            vo = kn;
        }
        PTC_TRY(set_key(&c, item, kn, item + vo, len - vo, &seen));
        i = j + 1;
    }
    long long world = (long long)c.dp * c.tp * c.pp;
    if (world > PTC_CONFIG_MAX_WORLD)
        return ptc_error_set(PTC_E_INVAL, "config: world size %lld exceeds %d", world,
                             PTC_CONFIG_MAX_WORLD);
    if (c.nlayers && c.nlayers != c.pp)
        return ptc_error_set(PTC_E_INVAL, "config: layers list has %d entries but pp=%d",
                             c.nlayers, c.pp);
    *out = c;
    return PTC_OK;
}

int ptc_config_format(const ptc_config *c, int style, char *buf, size_t cap)
{
    size_t at = 0;
    int w;
#define EMIT(...)                                                        \
    do {                                                                 \
        w = snprintf(buf + at, at < cap ? cap - at : 0, __VA_ARGS__);    \
        at += (size_t)w;                                                 \
    } while (0)
    if (style == PTC_CONFIG_STYLE_PATH) {
        EMIT("dp%d-tp%d-pp%d", c->dp, c->tp, c->pp);
        if (c->zero)
            EMIT("-zero1");
        if (c->nlayers)
            EMIT("-layers");
    } else {
        EMIT("dp=%d,tp=%d,pp=%d", c->dp, c->tp, c->pp);
        if (c->zero)
            EMIT(",zero=1");
        if (c->nlayers)
            EMIT(",layers=");
    }
    for (int i = 0; i < c->nlayers; i++)
        EMIT(i ? ":%u" : "%u", c->layers[i]);
#undef EMIT
    if (at >= cap)
        return ptc_error_set(PTC_E_RANGE, "config text longer than %zu bytes", cap);
    return PTC_OK;
}

int ptc_config_world(const ptc_config *c)
{
    return c->dp * c->tp * c->pp;
}

void ptc_config_coords(const ptc_config *c, int rank, int *pp_i, int *dp_i, int *tp_i)
{
    *tp_i = rank % c->tp;
    *dp_i = (rank / c->tp) % c->dp;
    *pp_i = rank / (c->tp * c->dp);
}

int ptc_config_rank(const ptc_config *c, int pp_i, int dp_i, int tp_i)
{
    return (pp_i * c->dp + dp_i) * c->tp + tp_i;
}

bool ptc_config_equal(const ptc_config *a, const ptc_config *b)
{
    if (a->dp != b->dp || a->tp != b->tp || a->pp != b->pp || a->zero != b->zero ||
        a->nlayers != b->nlayers)
        return false;
    return memcmp(a->layers, b->layers, sizeof(uint32_t) * (size_t)a->nlayers) == 0;
}

int ptc_config_check_layers(const ptc_config *c, int64_t nlayers)
{
    if (!c->nlayers)
        return PTC_OK;
    int64_t sum = 0;
    for (int i = 0; i < c->nlayers; i++)
        sum += c->layers[i];
    if (c->nlayers != c->pp)
        return ptc_error_set(PTC_E_CONFIG, "layers= has %d entries but pp=%d", c->nlayers,
                             c->pp);
    if (sum != nlayers)
        return ptc_error_set(PTC_E_CONFIG,
                             "layers= sums to %lld but the model has %lld layers",
                             (long long)sum, (long long)nlayers);
    return PTC_OK;
}

int ptc_config_stage_of_layer(const ptc_config *c, int64_t nlayers, int64_t layer,
                              int *stage)
{
    if (layer < 0 || layer >= nlayers)
        return ptc_error_set(PTC_E_RANGE, "layer %lld outside 0..%lld", (long long)layer,
                             (long long)nlayers - 1);
    PTC_TRY(ptc_config_check_layers(c, nlayers));
    if (c->nlayers) {
        int64_t end = 0;
        for (int s = 0; s < c->nlayers; s++) {
            end += c->layers[s];
            if (layer < end) {
                *stage = s;
                return PTC_OK;
            }
        }
    }
    /* largest s with floor(s*n/P) <= layer */
    int64_t P = c->pp;
    int64_t s = ((layer + 1) * P - 1) / nlayers;
    while (s > 0 && (s * nlayers) / P > layer)
        s--;
    while (s + 1 < P && ((s + 1) * nlayers) / P <= layer)
        s++;
    *stage = (int)s;
    return PTC_OK;
}
