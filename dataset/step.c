/* Dataset steps: the records of step K of rank R (positions by the batch
 * arithmetic, ids by the epoch order) and the step path's text, both ways.
 * The one place that computes a step and spells its path; docs/dataset.md
 * ("Steps: the records and the path", "Names") is the grammar. */
#include <stdio.h>
#include <string.h>

#include "base/util_internal.h"
#include "ptc/dataset.h"
#include "ptc/step.h"

int ptc_dataset_step_range(uint64_t n, const ptc_dataset_step *s, uint64_t *lo, uint64_t *hi)
{
    return ptc_batch_part_policy(n, s->batch, s->start, s->dp, s->rank, s->step, s->policy, lo,
                                 hi);
}

int ptc_dataset_step_ids(uint64_t n, const ptc_dataset_step *s, uint64_t *ids, uint64_t cap,
                         uint64_t *count)
{
    uint64_t lo, hi;
    PTC_TRY(ptc_dataset_step_range(n, s, &lo, &hi));
    *count = hi - lo;
    if (cap < hi - lo)
        return ptc_error_set(PTC_E_RANGE, "step %llu has %llu records, room for %llu",
                             (unsigned long long)s->step, (unsigned long long)(hi - lo),
                             (unsigned long long)cap);
    ptc_order o;
    PTC_TRY(ptc_order_init(&o, n, s->seed, s->epoch));
    for (uint64_t p = lo; p < hi; p++)
        PTC_TRY(ptc_order_sample(&o, p, &ids[p - lo]));
    return PTC_OK;
}

/* ---- the path ---------------------------------------------------------------------- */

/* The numbered components in path order, and the level each one ends. */
enum { COMP_SEED, COMP_EPOCH, COMP_BATCH, COMP_START, COMP_DP, COMP_RANK, COMP_STEP, NCOMP };

static const char *const comp_prefix[NCOMP] = {"seed-", "epoch-", "batch-", "start-",
                                               "dp-",   "rank-",  "step-"};

static uint64_t *comp_field(ptc_dataset_step *s, int c)
{
    uint64_t *const f[NCOMP] = {&s->seed, &s->epoch, &s->batch, &s->start,
                                &s->dp,   &s->rank,  &s->step};
    return f[c];
}

static uint64_t comp_value(const ptc_dataset_step *s, int c)
{
    const uint64_t f[NCOMP] = {s->seed, s->epoch, s->batch, s->start, s->dp, s->rank, s->step};
    return f[c];
}

/* How many numbered components a level holds. */
static int level_comps(ptc_dataset_step_level level)
{
    switch (level) {
    case PTC_DATASET_STEP_LEVEL_SEED: return 1;
    case PTC_DATASET_STEP_LEVEL_EPOCH: return 2;
    case PTC_DATASET_STEP_LEVEL_BATCH: return 3;
    case PTC_DATASET_STEP_LEVEL_START: return 4;
    case PTC_DATASET_STEP_LEVEL_DP:
    case PTC_DATASET_STEP_LEVEL_POLICY: return 5;
    case PTC_DATASET_STEP_LEVEL_RANK: return 6;
    case PTC_DATASET_STEP_LEVEL_FILE:
    case PTC_DATASET_STEP_LEVEL_INDEX: return 7;
    }
    return 0;
}

/* Are the fields of the first @p ncomp components in range? PTC_OK, or
 * PTC_E_INVAL / PTC_E_RANGE with the reason in @p why (no message set). */
static int check_fields(const ptc_dataset_step *s, int ncomp, char *why, size_t cap)
{
    typedef unsigned long long ull;
    if (ncomp > COMP_BATCH && s->batch == 0) {
        snprintf(why, cap, "batch-0: the global batch is at least 1");
        return PTC_E_INVAL;
    }
    if (ncomp > COMP_DP && s->dp == 0) {
        snprintf(why, cap, "dp-0: the dp degree is at least 1");
        return PTC_E_INVAL;
    }
    if (ncomp > COMP_DP && s->dp > PTC_DATASET_STEP_MAX_DP) {
        snprintf(why, cap, "dp-%llu is over the largest supported %llu", (ull)s->dp,
                 (ull)PTC_DATASET_STEP_MAX_DP);
        return PTC_E_RANGE;
    }
    if (ncomp > COMP_RANK && s->rank >= s->dp) {
        snprintf(why, cap, "rank-%llu is not a rank of dp-%llu", (ull)s->rank, (ull)s->dp);
        return PTC_E_INVAL;
    }
    return PTC_OK;
}

int ptc_dataset_step_format(const ptc_dataset_step *s, ptc_dataset_step_level level, char *buf,
                            size_t cap)
{
    int ncomp = level_comps(level);
    if (ncomp == 0)
        return ptc_error_set(PTC_E_INVAL, "step path: unknown level %d", (int)level);
    /* the policy is a field of the levels below dp-<D> */
    bool with_policy = level > PTC_DATASET_STEP_LEVEL_DP && s->policy != 0;
    const char *policy = ptc_batch_policy_name(s->policy);
    if (with_policy && !policy)
        return ptc_error_set(PTC_E_INVAL, "step path: unknown batch policy flags 0x%x",
                             s->policy);
    if (level == PTC_DATASET_STEP_LEVEL_POLICY && s->policy == 0)
        return ptc_error_set(PTC_E_INVAL, "step path: the policy level needs a policy");
    char why[96];
    int rc = check_fields(s, ncomp, why, sizeof why);
    if (rc != PTC_OK)
        return ptc_error_set(rc, "step path: %s", why);
    size_t len = 0;
    for (int c = 0; c < ncomp; c++) {
        /* the policy directory sits between dp-<D> and rank-<R> */
        bool pol = c == COMP_DP && with_policy;
        size_t room = cap - len; /* len < cap after every write */
        int w = snprintf(buf + len, room, "%s%s%llu%s%s", c ? "/" : "", comp_prefix[c],
                         (unsigned long long)comp_value(s, c), pol ? "/policy-" : "",
                         pol ? policy : "");
        if (w < 0 || (size_t)w >= room)
            return ptc_error_set(PTC_E_RANGE, "step path longer than %zu bytes",
                                 cap ? cap - 1 : 0);
        len += (size_t)w;
    }
    if (level == PTC_DATASET_STEP_LEVEL_INDEX) {
        if (cap - len <= 4)
            return ptc_error_set(PTC_E_RANGE, "step path longer than %zu bytes", cap - 1);
        memcpy(buf + len, ".idx", 5);
    }
    return PTC_OK;
}

/* A component of the path being parsed. */
typedef struct comp {
    const char *s;
    size_t len;
} comp;

/* The error @p rc of path @p path: "<what> '<path>' (<why>)", the path
 * quoted as untrusted text. */
static int path_error(int rc, const char *what, const char *path, size_t len, const char *why)
{
    char q[PTC_DATASET_STEP_PATH_MAX + 128];
    ptc_quote_name(q, sizeof q, path, len);
    return ptc_error_set(rc, "%s '%s' (%s)", what, q, why);
}

/* The error of a malformed path (PTC_E_INVAL). */
static int bad_path(const char *path, size_t len, const char *why)
{
    return path_error(PTC_E_INVAL, "not a step path:", path, len, why);
}

/* "<prefix><canonical decimal><suffix>": PTC_OK, PTC_E_INVAL (not that
 * shape; no message: the caller names the path) or PTC_E_RANGE (over
 * 2^64 - 1, with a message). */
static int parse_num(const comp *c, const char *prefix, const char *suffix, uint64_t *v)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    if (c->len <= pl + sl || memcmp(c->s, prefix, pl) != 0 ||
        memcmp(c->s + c->len - sl, suffix, sl) != 0)
        return PTC_E_INVAL;
    const char *d = c->s + pl;
    size_t n = c->len - pl - sl;
    if (d[0] == '0' && n > 1)
        return PTC_E_INVAL;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9')
            return PTC_E_INVAL;
        if (x > (UINT64_MAX - (uint64_t)(d[i] - '0')) / 10)
            return path_error(PTC_E_RANGE, "a number out of range in", c->s, c->len,
                              "more than 2^64 - 1");
        x = x * 10 + (uint64_t)(d[i] - '0');
    }
    *v = x;
    return PTC_OK;
}

/* P of a "policy-<P>" component: a policy name other than "none". */
static bool parse_policy(const comp *c, unsigned *policy)
{
    char name[PTC_BATCH_POLICY_NAME_MAX];
    size_t n = c->len - 7;
    if (n >= sizeof name)
        return false;
    memcpy(name, c->s + 7, n);
    name[n] = 0;
    /* "policy-none" is not a name: the default rule has no component */
    return ptc_batch_policy_parse(name, policy) == PTC_OK && *policy != 0;
}

/* Split into at most @p cap non-empty components; -1 if there are more or
 * one is empty (an empty path, a leading, trailing or doubled '/'). */
static int split(const char *path, size_t len, comp *c, int cap)
{
    int n = 0;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && path[j] != '/')
            j++;
        if (j == i || n == cap)
            return -1;
        c[n].s = path + i;
        c[n].len = j - i;
        n++;
        if (j == len)
            return n;
        i = j + 1;
    }
}

/* The error of component @p i (0-based, policy-<P> not counted) that is
 * not "<prefix><number>". */
static int bad_comp(const char *path, size_t len, int i, bool has_policy)
{
    char why[48];
    snprintf(why, sizeof why, "expected %s<number> as component %d", comp_prefix[i],
             i + 1 + (has_policy && i > COMP_DP));
    return bad_path(path, len, why);
}

int ptc_dataset_step_parse(const char *path, size_t len, ptc_dataset_step *s,
                           ptc_dataset_step_level *level)
{
    memset(s, 0, sizeof *s);
    comp c[NCOMP + 1];
    int n = split(path, len, c, NCOMP + 1);
    if (n < 0)
        return bad_path(path, len, len ? "more than 8 components, or an empty one" : "empty");
    /* An optional policy-<P> after dp-<D>: read it first, then the rest as
     * if it were not there. The order of the checks below is the view's
     * (a path with several faults fails for the first). */
    bool has_policy = n > COMP_RANK && c[COMP_RANK].len > 7 &&
                      memcmp(c[COMP_RANK].s, "policy-", 7) == 0;
    if (has_policy) {
        if (!parse_policy(&c[COMP_RANK], &s->policy))
            return bad_path(path, len, "unknown batch policy: drop-last, equal or drop-last+equal");
        memmove(&c[COMP_RANK], &c[COMP_RANK + 1], (size_t)(n - COMP_RANK - 1) * sizeof *c);
        n--;
    } else if (n > NCOMP) {
        return bad_path(path, len, "more than 8 components");
    }
    int dirs = n < COMP_STEP ? n : COMP_STEP;
    for (int i = 0; i < dirs; i++) {
        int rc = parse_num(&c[i], comp_prefix[i], "", comp_field(s, i));
        if (rc == PTC_E_INVAL)
            return bad_comp(path, len, i, has_policy);
        PTC_TRY(rc);
    }
    char why[96];
    int rc = check_fields(s, dirs, why, sizeof why);
    if (rc == PTC_E_INVAL)
        return bad_path(path, len, why);
    if (rc != PTC_OK)
        return path_error(rc, "step path", path, len, why);
    static const ptc_dataset_step_level levels[NCOMP] = {
        PTC_DATASET_STEP_LEVEL_SEED,  PTC_DATASET_STEP_LEVEL_EPOCH, PTC_DATASET_STEP_LEVEL_BATCH,
        PTC_DATASET_STEP_LEVEL_START, PTC_DATASET_STEP_LEVEL_DP,    PTC_DATASET_STEP_LEVEL_RANK,
        PTC_DATASET_STEP_LEVEL_FILE,
    };
    *level = levels[n - 1];
    if (n == COMP_DP + 1 && has_policy)
        *level = PTC_DATASET_STEP_LEVEL_POLICY;
    if (n == NCOMP) {
        const comp *k = &c[COMP_STEP];
        bool idx = k->len > 4 && memcmp(k->s + k->len - 4, ".idx", 4) == 0;
        rc = parse_num(k, "step-", idx ? ".idx" : "", &s->step);
        if (rc == PTC_E_INVAL)
            return bad_comp(path, len, COMP_STEP, has_policy);
        PTC_TRY(rc);
        if (idx)
            *level = PTC_DATASET_STEP_LEVEL_INDEX;
    }
    return PTC_OK;
}
