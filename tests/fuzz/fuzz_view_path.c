/* Fuzz ptc_view_parse, the grammar of the mounted tree. The input up to its
 * first NUL (at most 4 KiB) is a path. Any path parses or fails with
 * PTC_E_NOTFOUND or PTC_E_RANGE (the latter only with a number of 7 or more
 * digits in it). An accepted path has its fields in range (version >= 1,
 * model rank < world, batch >= 1, 1 <= dp <= PTC_VIEW_MAX_DP, rank < dp, a
 * dataset name of [A-Za-z0-9._-] not starting with '.') and the fields its
 * kind does not use zero. Only canonical spellings exist (but for a model's
 * configuration level, which takes the CLI's spellings, e.g. tp2), so the
 * path built back from the parsed fields is the input itself and parses to an equal
 * node (an optional policy-<P> level after dp-<D> included); a leading
 * zero put before any of its numbers, a trailing '/', and a
 * "." or ".." child are all rejected. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/batch.h"
#include "ptc/view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PATH_CAP 4096

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Dataset levels below the name, in path order, and the depth of a kind. */
static int step_level(ptc_view_kind k)
{
    switch (k) {
    case PTC_VIEW_SEED: return 1;
    case PTC_VIEW_EPOCH: return 2;
    case PTC_VIEW_BATCH: return 3;
    case PTC_VIEW_START: return 4;
    case PTC_VIEW_DP:
    case PTC_VIEW_POLICY: return 5;
    case PTC_VIEW_RANK: return 6;
    case PTC_VIEW_STEP:
    case PTC_VIEW_STEP_IDX: return 7;
    default: return 0;
    }
}

static bool is_model_kind(ptc_view_kind k)
{
    return k == PTC_VIEW_MODEL || k == PTC_VIEW_MODEL_INFO || k == PTC_VIEW_MODEL_FULL ||
           k == PTC_VIEW_MODEL_CFG || k == PTC_VIEW_MODEL_RANK;
}

static bool is_dataset_kind(ptc_view_kind k)
{
    return k == PTC_VIEW_DATASET || k == PTC_VIEW_DATASET_INFO || k == PTC_VIEW_SAMPLES ||
           k == PTC_VIEW_SAMPLE || step_level(k) > 0;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > PTC_VIEW_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || is_digit(s[i]) ||
              s[i] == '.' || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* The fields in range, and those the kind does not use zero. */
static void check_fields(const ptc_view_node *n)
{
    ptc_view_kind k = n->kind;
    int lvl = step_level(k);
    check(is_model_kind(k) ? n->version >= 1 : n->version == 0);
    if (k == PTC_VIEW_MODEL_CFG || k == PTC_VIEW_MODEL_RANK) {
        const ptc_config *c = &n->config;
        check(c->dp >= 1 && c->tp >= 1 && c->pp >= 1);
        check((long long)c->dp * c->tp * c->pp <= PTC_CONFIG_MAX_WORLD);
        check(c->nlayers == 0 || c->nlayers == c->pp);
    } else {
        check(n->config.dp == 0 && n->config.tp == 0 && n->config.pp == 0 &&
              n->config.nlayers == 0);
    }
    if (k == PTC_VIEW_MODEL_RANK)
        check(n->rank < (uint64_t)ptc_config_world(&n->config));
    check(is_dataset_kind(k) ? name_ok(n->name) : n->name[0] == '\0');
    check(k == PTC_VIEW_SAMPLE || n->id == 0);
    check(lvl >= 1 || n->seed == 0);
    check(lvl >= 2 || n->epoch == 0);
    check(lvl >= 3 ? n->batch >= 1 : n->batch == 0);
    check(lvl >= 4 || n->start == 0);
    check(lvl >= 5 ? n->dp >= 1 && n->dp <= PTC_VIEW_MAX_DP : n->dp == 0);
    if (lvl >= 6)
        check(n->rank < n->dp);
    else if (k != PTC_VIEW_MODEL_RANK)
        check(n->rank == 0);
    check(lvl >= 7 || n->step == 0);
    /* a policy-<P> level (after dp-<D>) names a policy, never "none" */
    check(n->policy <= PTC_BATCH_POLICY_ALL);
    check(lvl >= 5 || n->policy == 0);
    check(k != PTC_VIEW_POLICY || n->policy != 0);
    check(k != PTC_VIEW_DP || n->policy == 0);
}

/* The canonical path of a node, built from its fields alone. */
static void format_node(const ptc_view_node *n, char *buf, size_t cap)
{
    typedef unsigned long long ull;
    size_t len = 0;
#define PUT(...)                                                                 \
    do {                                                                         \
        int w_ = snprintf(buf + len, cap - len, __VA_ARGS__);                    \
        check(w_ >= 0 && (size_t)w_ < cap - len);                                \
        len += (size_t)w_;                                                       \
    } while (0)
    ptc_view_kind k = n->kind;
    buf[0] = '\0';
    if (k == PTC_VIEW_ROOT) {
        PUT("/");
    } else if (k == PTC_VIEW_README) {
        PUT("/README.txt");
    } else if (k == PTC_VIEW_MODELS || is_model_kind(k)) {
        PUT("/models");
        if (k != PTC_VIEW_MODELS)
            PUT("/%llu", (ull)n->version);
        if (k == PTC_VIEW_MODEL_INFO)
            PUT("/info.json");
        if (k == PTC_VIEW_MODEL_FULL)
            PUT("/model.safetensors");
        if (k == PTC_VIEW_MODEL_CFG || k == PTC_VIEW_MODEL_RANK) {
            char cfg[PTC_VIEW_NAME_MAX + 1];
            check(ptc_config_format(&n->config, PTC_CONFIG_STYLE_PATH, cfg, sizeof cfg) ==
                  PTC_OK);
            PUT("/%s", cfg);
        }
        if (k == PTC_VIEW_MODEL_RANK)
            PUT("/rank-%llu.safetensors", (ull)n->rank);
    } else {
        PUT("/datasets");
        if (k != PTC_VIEW_DATASETS)
            PUT("/%s", n->name);
        if (k == PTC_VIEW_DATASET_INFO)
            PUT("/info.json");
        if (k == PTC_VIEW_SAMPLES || k == PTC_VIEW_SAMPLE)
            PUT("/samples");
        if (k == PTC_VIEW_SAMPLE)
            PUT("/%llu", (ull)n->id);
        int lvl = step_level(k);
        const char *pre[] = {"seed", "epoch", "batch", "start", "dp", "rank", "step"};
        const uint64_t val[] = {n->seed, n->epoch, n->batch, n->start, n->dp, n->rank, n->step};
        for (int i = 0; i < lvl; i++) {
            PUT("/%s-%llu", pre[i], (ull)val[i]);
            if (i == 4 && n->policy)
                PUT("/policy-%s", ptc_batch_policy_name(n->policy));
        }
        if (k == PTC_VIEW_STEP_IDX)
            PUT(".idx");
    }
#undef PUT
}

static bool node_equal(const ptc_view_node *a, const ptc_view_node *b)
{
    return a->kind == b->kind && strcmp(a->name, b->name) == 0 && a->version == b->version &&
           a->config.dp == b->config.dp && a->config.tp == b->config.tp &&
           a->config.pp == b->config.pp && a->config.zero == b->config.zero &&
           a->config.nlayers == b->config.nlayers &&
           (a->config.dp == 0 || ptc_config_equal(&a->config, &b->config)) && a->id == b->id &&
           a->seed == b->seed && a->epoch == b->epoch && a->batch == b->batch &&
           a->start == b->start && a->dp == b->dp && a->rank == b->rank && a->step == b->step &&
           a->policy == b->policy;
}

static int parse(const char *path, ptc_view_node *n)
{
    int rc = ptc_view_parse(path, n);
    check(rc == PTC_OK || rc == PTC_E_NOTFOUND || rc == PTC_E_RANGE);
    check(ptc_view_errno(rc) == (rc == PTC_OK ? 0 : rc == PTC_E_NOTFOUND ? ENOENT : EINVAL));
    return rc;
}

static void check_rejected(const char *path)
{
    ptc_view_node n;
    check(parse(path, &n) != PTC_OK);
}

/* A '0' put before every number outside the dataset name (which may hold
 * digits of its own) must make the path non-canonical. */
static void check_leading_zeros(const char *path, const ptc_view_node *n, char *tmp)
{
    size_t len = strlen(path);
    size_t name_from = 0, name_to = 0;
    if (is_dataset_kind(n->kind)) {
        name_from = strlen("/datasets/");
        name_to = name_from + strlen(n->name);
    }
    for (size_t i = 1; i < len; i++) {
        if (!is_digit(path[i]) || is_digit(path[i - 1]) || (i >= name_from && i < name_to))
            continue;
        memcpy(tmp, path, i);
        tmp[i] = '0';
        memcpy(tmp + i + 1, path + i, len - i + 1);
        check_rejected(tmp);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_CAP + 1], again[PATH_CAP + 16], tmp[PATH_CAP + 16];
    size_t len = 0;
    while (len < size && len < PATH_CAP && data[len] != 0) {
        path[len] = (char)data[len];
        len++;
    }
    path[len] = '\0';

    ptc_view_node n, m;
    int rc = parse(path, &n);
    if (rc == PTC_E_RANGE) {
        size_t run = 0, best = 0;
        for (size_t i = 0; i < len; i++) {
            run = is_digit(path[i]) ? run + 1 : 0;
            best = run > best ? run : best;
        }
        check(best >= 7); /* only dp over 2^20 or a number over 2^64 - 1 */
    }
    if (rc != PTC_OK)
        return 0;

    check_fields(&n);
    check(ptc_view_parse(path, &m) == PTC_OK && node_equal(&n, &m)); /* pure */
    format_node(&n, again, sizeof again);
    /* only canonical paths are accepted, except the configuration level of a
     * model path, which takes every spelling the CLI takes (tp2,
     * dp=1,tp=2,pp=1) and is built back in its canonical form */
    if (n.kind != PTC_VIEW_MODEL_CFG && n.kind != PTC_VIEW_MODEL_RANK)
        check(strcmp(again, path) == 0);
    check(parse(again, &m) == PTC_OK && node_equal(&n, &m));

    check_leading_zeros(path, &n, tmp);
    if (len + 4 < sizeof tmp) {
        snprintf(tmp, sizeof tmp, "%s/", path);
        check_rejected(tmp);
        if (n.kind != PTC_VIEW_ROOT) {
            snprintf(tmp, sizeof tmp, "%s/.", path);
            check_rejected(tmp);
            snprintf(tmp, sizeof tmp, "%s/..", path);
            check_rejected(tmp);
        }
    }
    return 0;
}
