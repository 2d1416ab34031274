/* Fuzz ptc_dataset_step_parse, the step path grammar
 * (seed-<S>/epoch-<E>/batch-<B>/start-<X>/dp-<D>/[policy-<P>/]rank-<R>/step-<K>[.idx]).
 * The input up to its first NUL (at most 1 KiB) is a path, parsed with its
 * length (no NUL read). Any path parses or fails with PTC_E_INVAL or
 * PTC_E_RANGE (the latter only with a run of 7 or more digits). An accepted
 * path has its fields in range for its level (batch >= 1, 1 <= dp <=
 * PTC_DATASET_STEP_MAX_DP, rank < dp, a policy other than none at level
 * POLICY) and those below its level zero; only canonical spellings exist,
 * so ptc_dataset_step_format() at that level writes the input back
 * exactly, needing exactly its length plus one byte of room; a leading
 * zero before any number, a trailing '/', and any further component are
 * rejected; and the view parses "/datasets/d/" + the path to the same
 * fields (the view's grammar below a dataset is this one). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/step.h"
#include "ptc/view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PATH_CAP 1024

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int parse(const char *path, size_t len, ptc_dataset_step *s, ptc_dataset_step_level *lv)
{
    int rc = ptc_dataset_step_parse(path, len, s, lv);
    check(rc == PTC_OK || rc == PTC_E_INVAL || rc == PTC_E_RANGE);
    return rc;
}

static void check_rejected(const char *path)
{
    ptc_dataset_step s;
    ptc_dataset_step_level lv;
    check(parse(path, strlen(path), &s, &lv) != PTC_OK);
}

static bool step_equal(const ptc_dataset_step *a, const ptc_dataset_step *b)
{
    return a->seed == b->seed && a->epoch == b->epoch && a->batch == b->batch &&
           a->start == b->start && a->dp == b->dp && a->rank == b->rank &&
           a->step == b->step && a->policy == b->policy;
}

static void check_fields(const ptc_dataset_step *s, ptc_dataset_step_level lv)
{
    check(lv >= PTC_DATASET_STEP_LEVEL_SEED && lv <= PTC_DATASET_STEP_LEVEL_INDEX);
    check(lv >= PTC_DATASET_STEP_LEVEL_EPOCH || s->epoch == 0);
    check(lv >= PTC_DATASET_STEP_LEVEL_BATCH ? s->batch >= 1 : s->batch == 0);
    check(lv >= PTC_DATASET_STEP_LEVEL_START || s->start == 0);
    check(lv >= PTC_DATASET_STEP_LEVEL_DP ? s->dp >= 1 && s->dp <= PTC_DATASET_STEP_MAX_DP
                                          : s->dp == 0);
    check(lv >= PTC_DATASET_STEP_LEVEL_RANK ? s->rank < s->dp : s->rank == 0);
    check(lv >= PTC_DATASET_STEP_LEVEL_FILE || s->step == 0);
    check(s->policy <= PTC_BATCH_POLICY_ALL);
    check(lv > PTC_DATASET_STEP_LEVEL_DP || s->policy == 0);
    check(lv != PTC_DATASET_STEP_LEVEL_POLICY || s->policy != 0);
}

/* The view reads the same fields from the path under a dataset. */
static void check_view(const char *path, const ptc_dataset_step *s, ptc_dataset_step_level lv)
{
    static char full[PATH_CAP + 32];
    snprintf(full, sizeof full, "/datasets/d/%s", path);
    ptc_view_node n;
    check(ptc_view_parse(full, &n) == PTC_OK);
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
    ptc_dataset_step v = {n.seed, n.epoch, n.batch, n.start, n.dp, n.rank, n.step, n.policy};
    check(n.kind == kinds[lv] && step_equal(&v, s) && strcmp(n.name, "d") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[PATH_CAP + 1], again[PTC_DATASET_STEP_PATH_MAX], tmp[PATH_CAP + 16];
    size_t len = 0;
    while (len < size && len < PATH_CAP && data[len] != 0)
        len++;
    /* parse the bytes in place first: the length bounds them, no NUL is read */
    uint8_t *exact = malloc(len ? len : 1);
    check(exact != NULL);
    memcpy(exact, data, len);
    ptc_dataset_step s, t;
    ptc_dataset_step_level lv, lv2;
    int rc = parse((const char *)exact, len, &s, &lv);
    free(exact);
    memcpy(path, data, len);
    path[len] = '\0';
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

    check_fields(&s, lv);
    check(parse(path, len, &t, &lv2) == PTC_OK && lv2 == lv && step_equal(&s, &t)); /* pure */
    /* canonical: written back exactly, in exactly len + 1 bytes */
    check(ptc_dataset_step_format(&s, lv, again, sizeof again) == PTC_OK);
    check(strcmp(again, path) == 0);
    check(ptc_dataset_step_format(&s, lv, again, len + 1) == PTC_OK);
    check(ptc_dataset_step_format(&s, lv, again, len) == PTC_E_RANGE);
    check_view(path, &s, lv);

    /* a '0' before any number makes it non-canonical */
    for (size_t i = 1; i < len; i++) {
        if (!is_digit(path[i]) || is_digit(path[i - 1]))
            continue;
        memcpy(tmp, path, i);
        tmp[i] = '0';
        memcpy(tmp + i + 1, path + i, len - i + 1);
        check_rejected(tmp);
    }
    snprintf(tmp, sizeof tmp, "%s/", path);
    check_rejected(tmp);
    snprintf(tmp, sizeof tmp, "/%s", path);
    check_rejected(tmp);
    if (lv >= PTC_DATASET_STEP_LEVEL_FILE) {
        snprintf(tmp, sizeof tmp, "%s/step-0", path);
        check_rejected(tmp);
    }
    return 0;
}
