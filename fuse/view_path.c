/* The view's path grammar: absolute paths of the mounted tree parsed into
 * nodes (ptc_view_parse), checked against everything that does not depend
 * on the data, and the errno a filesystem answers for each error. The
 * levels below datasets/<NAME>/ are a step path, parsed by the dataset
 * module (ptc_dataset_step_parse). Pure: no state, no data. */
#include <errno.h>
#include <string.h>

#include "fuse/view_internal.h"
#include "ptc/step.h"

#define VIEW_MAX_DEPTH 10

/* ---- errors ------------------------------------------------------------------------ */

int ptc_view_errno(int rc)
{
    switch (rc) {
    case PTC_OK: return 0;
    case PTC_E_NOTFOUND: return ENOENT;
    case PTC_E_INVAL:
    case PTC_E_RANGE: return EINVAL;
    case PTC_E_NOMEM: return ENOMEM;
    case PTC_E_UNSUPPORTED: return EOPNOTSUPP;
    case PTC_E_BUSY: return EBUSY;
    case PTC_E_TIMEOUT: return ETIMEDOUT;
    default: return EIO;
    }
}

int ptc_view_not_found(const char *path)
{
    return ptc_error_set(PTC_E_NOTFOUND, "no such path in the view: %s", path);
}

/* ---- path grammar ------------------------------------------------------------------ */

struct comp {
    const char *s;
    size_t len;
};

static bool comp_is(const struct comp *c, const char *lit)
{
    size_t n = strlen(lit);
    return c->len == n && memcmp(c->s, lit, n) == 0;
}

/* Canonical decimal: "0" or a non-zero digit then digits. */
static int parse_num(const char *s, size_t len, uint64_t *v, const char *path)
{
    if (len == 0 || (s[0] == '0' && len > 1))
        return ptc_view_not_found(path);
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return ptc_view_not_found(path);
        if (x > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
            return ptc_error_set(PTC_E_RANGE, "number out of range in %s", path);
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return PTC_OK;
}

/* "<prefix><number><suffix>" */
static int parse_prefixed(const struct comp *c, const char *prefix, const char *suffix,
                          uint64_t *v, const char *path)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    if (c->len < pl + sl || memcmp(c->s, prefix, pl) != 0 ||
        memcmp(c->s + c->len - sl, suffix, sl) != 0)
        return ptc_view_not_found(path);
    return parse_num(c->s + pl, c->len - pl - sl, v, path);
}

static bool dataset_name_ok(const struct comp *c)
{
    if (c->len == 0 || c->len > PTC_VIEW_NAME_MAX || c->s[0] == '.')
        return false;
    for (size_t i = 0; i < c->len; i++) {
        char ch = c->s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

static int parse_models(const struct comp *c, int n, ptc_view_node *node, const char *path)
{
    if (n == 1) {
        node->kind = PTC_VIEW_MODELS;
        return PTC_OK;
    }
    PTC_TRY(parse_num(c[1].s, c[1].len, &node->version, path));
    if (node->version == 0)
        return ptc_view_not_found(path);
    if (n == 2) {
        node->kind = PTC_VIEW_MODEL;
        return PTC_OK;
    }
    if (n == 3 && comp_is(&c[2], "info.json")) {
        node->kind = PTC_VIEW_MODEL_INFO;
        return PTC_OK;
    }
    if (n == 3 && comp_is(&c[2], "model.safetensors")) {
        node->kind = PTC_VIEW_MODEL_FULL;
        return PTC_OK;
    }
    if (n > 4 || c[2].len > PTC_VIEW_NAME_MAX)
        return ptc_view_not_found(path);
    char cfg[PTC_VIEW_NAME_MAX + 1], canon[PTC_VIEW_NAME_MAX + 1];
    memcpy(cfg, c[2].s, c[2].len);
    cfg[c[2].len] = 0;
    /* The listing shows the canonical path form (dp1-tp2-pp1); a lookup takes
     * every spelling the CLI takes (tp2, dp=1,tp=2,pp=1, ...), as `ptc export
     * --config` does, except numbers with leading zeros. */
    for (size_t i = 0; cfg[i]; i++)
        if (cfg[i] == '0' && cfg[i + 1] >= '0' && cfg[i + 1] <= '9' &&
            (i == 0 || cfg[i - 1] < '0' || cfg[i - 1] > '9'))
            return ptc_view_not_found(path);
    if (ptc_config_parse(&node->config, cfg) != PTC_OK ||
        ptc_config_format(&node->config, PTC_CONFIG_STYLE_PATH, canon, sizeof canon) != PTC_OK)
        return ptc_view_not_found(path);
    if (n == 3) {
        node->kind = PTC_VIEW_MODEL_CFG;
        return PTC_OK;
    }
    PTC_TRY(parse_prefixed(&c[3], "rank-", ".safetensors", &node->rank, path));
    if (node->rank >= (uint64_t)ptc_config_world(&node->config))
        return ptc_view_not_found(path);
    node->kind = PTC_VIEW_MODEL_RANK;
    return PTC_OK;
}

static int parse_datasets(const struct comp *c, int n, ptc_view_node *node, const char *path)
{
    if (n == 1) {
        node->kind = PTC_VIEW_DATASETS;
        return PTC_OK;
    }
    if (!dataset_name_ok(&c[1]))
        return ptc_view_not_found(path);
    memcpy(node->name, c[1].s, c[1].len);
    node->name[c[1].len] = 0;
    if (n == 2) {
        node->kind = PTC_VIEW_DATASET;
        return PTC_OK;
    }
    if (comp_is(&c[2], "info.json")) {
        if (n != 3)
            return ptc_view_not_found(path);
        node->kind = PTC_VIEW_DATASET_INFO;
        return PTC_OK;
    }
    if (comp_is(&c[2], "samples")) {
        if (n == 3) {
            node->kind = PTC_VIEW_SAMPLES;
            return PTC_OK;
        }
        if (n != 4)
            return ptc_view_not_found(path);
        PTC_TRY(parse_num(c[3].s, c[3].len, &node->id, path));
        node->kind = PTC_VIEW_SAMPLE;
        return PTC_OK;
    }
    /* the rest is a step path: seed-<S>/.../rank-<R>/step-<K>[.idx] */
    ptc_dataset_step st;
    ptc_dataset_step_level level;
    int rc = ptc_dataset_step_parse(c[2].s, strlen(c[2].s), &st, &level);
    if (rc == PTC_E_INVAL)
        return ptc_view_not_found(path);
    PTC_TRY(rc);
    static const ptc_view_kind kinds[] = {
        [PTC_DATASET_STEP_LEVEL_SEED] = PTC_VIEW_SEED,
        [PTC_DATASET_STEP_LEVEL_EPOCH] = PTC_VIEW_EPOCH,
        [PTC_DATASET_STEP_LEVEL_BATCH] = PTC_VIEW_BATCH,
        [PTC_DATASET_STEP_LEVEL_START] = PTC_VIEW_START,
        [PTC_DATASET_STEP_LEVEL_DP] = PTC_VIEW_DP,
        [PTC_DATASET_STEP_LEVEL_POLICY] = PTC_VIEW_POLICY,
        [PTC_DATASET_STEP_LEVEL_RANK] = PTC_VIEW_RANK,
        [PTC_DATASET_STEP_LEVEL_FILE] = PTC_VIEW_STEP,
        [PTC_DATASET_STEP_LEVEL_INDEX] = PTC_VIEW_STEP_IDX,
    };
    node->kind = kinds[level];
    node->seed = st.seed;
    node->epoch = st.epoch;
    node->batch = st.batch;
    node->start = st.start;
    node->dp = st.dp;
    node->rank = st.rank;
    node->step = st.step;
    node->policy = st.policy;
    return PTC_OK;
}

int ptc_view_parse(const char *path, ptc_view_node *node)
{
    memset(node, 0, sizeof *node);
    if (!path || path[0] != '/')
        return ptc_error_set(PTC_E_NOTFOUND, "view paths are absolute");
    struct comp c[VIEW_MAX_DEPTH + 1];
    int n = 0;
    const char *p = path + 1;
    if (*p == 0) {
        node->kind = PTC_VIEW_ROOT;
        return PTC_OK;
    }
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0 || n == VIEW_MAX_DEPTH || (len == 1 && p[0] == '.') ||
            (len == 2 && p[0] == '.' && p[1] == '.'))
            return ptc_view_not_found(path);
        c[n].s = p;
        c[n].len = len;
        n++;
        if (!slash)
            break;
        p = slash + 1;
    }
    if (comp_is(&c[0], "README.txt") && n == 1) {
        node->kind = PTC_VIEW_README;
        return PTC_OK;
    }
    if (comp_is(&c[0], "models"))
        return parse_models(c, n, node, path);
    if (comp_is(&c[0], "datasets"))
        return parse_datasets(c, n, node, path);
    return ptc_view_not_found(path);
}

bool ptc_view_kind_is_dir(ptc_view_kind k)
{
    switch (k) {
    case PTC_VIEW_README:
    case PTC_VIEW_MODEL_INFO:
    case PTC_VIEW_MODEL_FULL:
    case PTC_VIEW_MODEL_RANK:
    case PTC_VIEW_DATASET_INFO:
    case PTC_VIEW_SAMPLE:
    case PTC_VIEW_STEP:
    case PTC_VIEW_STEP_IDX:
        return false;
    default:
        return true;
    }
}
