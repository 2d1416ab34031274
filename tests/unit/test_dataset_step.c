/* The dataset step API (ptc/step.h): the exact records of every step of
 * every rank for an epoch whose last batch is partial, under each batch
 * policy; a job that changes its dp degree (and its batch) at a batch
 * boundary reads every record once; the step path's text, both ways, with
 * its limits. The epoch order is pinned by test_order.c: N = 10, seed 0,
 * epoch 0 is 8 5 2 9 1 3 4 6 0 7. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ptc/dataset.h"

enum { DL = PTC_BATCH_POLICY_DROP_LAST, EQ = PTC_BATCH_POLICY_EQUAL };

#define NONE UINT64_MAX /* the step does not exist */

static const uint64_t PERM10[10] = {8, 5, 2, 9, 1, 3, 4, 6, 0, 7};

/* The ids of a step, checked against the expected list (terminated by
 * NONE), or its absence when want[0] is NONE and absent is set. */
static void check_ids(uint64_t n, const ptc_dataset_step *s, const uint64_t *want, size_t nwant,
                      bool absent)
{
    uint64_t ids[16], count = 99, lo = 99, hi = 99;
    if (absent) {
        assert_int_equal(ptc_dataset_step_range(n, s, &lo, &hi), PTC_E_NOTFOUND);
        assert_int_equal(ptc_dataset_step_ids(n, s, ids, 16, &count), PTC_E_NOTFOUND);
        return;
    }
    assert_int_equal(ptc_dataset_step_range(n, s, &lo, &hi), PTC_OK);
    assert_int_equal(hi - lo, nwant);
    assert_int_equal(ptc_dataset_step_ids(n, s, ids, 16, &count), PTC_OK);
    assert_int_equal(count, nwant);
    for (size_t i = 0; i < nwant; i++) {
        assert_int_equal(ids[i], want[i]);
        assert_int_equal(PERM10[lo + i], want[i]); /* positions lo.. of the order */
    }
}

/* N = 10, B = 4, D = 3: global batches [0,4) [4,8) [8,10), the last one
 * partial. Per policy, the ids of every (step, rank); NONE = no step. */
static void test_uneven_last_batch(void **state)
{
    (void)state;
    struct {
        unsigned policy;
        uint64_t step, rank;
        uint64_t ids[3];
        size_t n;
        bool absent;
    } cases[] = {
        /* the split rule: ceil(4/3) = 2, 2, 0; the last batch 1, 1, 0 */
        {0, 0, 0, {8, 5}, 2, false},  {0, 0, 1, {2, 9}, 2, false},
        {0, 0, 2, {0}, 0, false},     {0, 1, 0, {1, 3}, 2, false},
        {0, 1, 1, {4, 6}, 2, false},  {0, 1, 2, {0}, 0, false},
        {0, 2, 0, {0}, 1, false},     {0, 2, 1, {7}, 1, false},
        {0, 2, 2, {0}, 0, false},     {0, 3, 0, {0}, 0, true},
        /* drop-last: the partial batch has no step */
        {DL, 0, 0, {8, 5}, 2, false}, {DL, 1, 1, {4, 6}, 2, false},
        {DL, 1, 2, {0}, 0, false},    {DL, 2, 0, {0}, 0, true},
        {DL, 2, 2, {0}, 0, true},
        /* equal: floor(4/3) = 1 each, the 4th of a batch dropped; the last
         * batch of 2 gives every rank floor(2/3) = 0 */
        {EQ, 0, 0, {8}, 1, false},    {EQ, 0, 1, {5}, 1, false},
        {EQ, 0, 2, {2}, 1, false},    {EQ, 1, 0, {1}, 1, false},
        {EQ, 1, 1, {3}, 1, false},    {EQ, 1, 2, {4}, 1, false},
        {EQ, 2, 0, {0}, 0, false},    {EQ, 2, 1, {0}, 0, false},
        {EQ, 3, 0, {0}, 0, true},
        /* both */
        {DL | EQ, 0, 2, {2}, 1, false}, {DL | EQ, 1, 0, {1}, 1, false},
        {DL | EQ, 2, 0, {0}, 0, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ptc_dataset_step s = {.seed = 0, .epoch = 0, .batch = 4, .start = 0, .dp = 3,
                              .rank = cases[i].rank, .step = cases[i].step,
                              .policy = cases[i].policy};
        check_ids(10, &s, cases[i].ids, cases[i].n, cases[i].absent);
    }
    /* another epoch is another order: 4 1 2 3 5 9 7 6 0 8 */
    ptc_dataset_step s = {.epoch = 1, .batch = 4, .dp = 3, .rank = 1, .step = 2};
    uint64_t ids[4], count;
    assert_int_equal(ptc_dataset_step_ids(10, &s, ids, 4, &count), PTC_OK);
    assert_int_equal(count, 1);
    assert_int_equal(ids[0], 8);
}

/* Every id of the epoch counted once over all steps and ranks of a job
 * that reads steps [0, k1) with (B1, D1) from 0, then from X = k1*B1 with
 * (B2, D2) to the end. */
static void read_with_change(uint64_t n, uint64_t seed, uint64_t b1, uint64_t d1, uint64_t k1,
                             uint64_t b2, uint64_t d2, unsigned policy, uint64_t *seen)
{
    uint64_t ids[64], count;
    memset(seen, 0, n * sizeof *seen);
    for (int phase = 0; phase < 2; phase++) {
        ptc_dataset_step s = {.seed = seed, .epoch = 3, .policy = policy};
        s.batch = phase ? b2 : b1;
        s.dp = phase ? d2 : d1;
        s.start = phase ? k1 * b1 : 0;
        for (s.step = 0; phase || s.step < k1; s.step++) {
            int rc = PTC_OK;
            for (s.rank = 0; s.rank < s.dp; s.rank++) {
                rc = ptc_dataset_step_ids(n, &s, ids, 64, &count);
                if (rc == PTC_E_NOTFOUND)
                    break;
                assert_int_equal(rc, PTC_OK);
                for (uint64_t i = 0; i < count; i++)
                    seen[ids[i]]++;
            }
            if (rc == PTC_E_NOTFOUND) {
                assert_int_equal(s.rank, 0); /* a step exists for all ranks or none */
                break;
            }
        }
    }
}

static void test_dp_change_at_batch_boundary(void **state)
{
    (void)state;
    uint64_t seen[1000];
    /* 10 records: dp 2 for one batch of 4, then dp 3 from start-4 */
    read_with_change(10, 0, 4, 2, 1, 4, 3, 0, seen);
    for (int i = 0; i < 10; i++)
        assert_int_equal(seen[i], 1);
    /* the steps of the second phase are exactly those of start-4 */
    ptc_dataset_step s = {.batch = 4, .start = 4, .dp = 3, .rank = 0, .step = 0};
    uint64_t lo, hi;
    assert_int_equal(ptc_dataset_step_range(10, &s, &lo, &hi), PTC_OK);
    assert_int_equal(lo, 4);
    assert_int_equal(hi, 6);
    s.step = 1;
    s.rank = 1;
    assert_int_equal(ptc_dataset_step_range(10, &s, &lo, &hi), PTC_OK);
    assert_int_equal(lo, 9);
    assert_int_equal(hi, 10);
    s.step = 2;
    assert_int_equal(ptc_dataset_step_range(10, &s, &lo, &hi), PTC_E_NOTFOUND);
    /* 1000 records, seed 99: dp 4 with B 24 for 7 steps, then dp 5 with B 35
     * (batch and dp change at once); and dp 8 -> dp 1 */
    read_with_change(1000, 99, 24, 4, 7, 35, 5, 0, seen);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(seen[i], 1);
    read_with_change(1000, 99, 16, 8, 30, 7, 1, 0, seen);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(seen[i], 1);
    /* under equal the dropped positions are exactly ptc_batch_is_dropped's,
     * in each phase (1000 - 168 = 832 positions from start-168) */
    read_with_change(1000, 99, 24, 5, 7, 35, 3, EQ, seen);
    uint64_t once = 0;
    ptc_order o;
    assert_int_equal(ptc_order_init(&o, 1000, 99, 3), PTC_OK);
    for (uint64_t p = 0; p < 1000; p++) {
        uint64_t id;
        bool dropped;
        assert_int_equal(ptc_order_sample(&o, p, &id), PTC_OK);
        if (p < 168)
            assert_int_equal(ptc_batch_is_dropped(168, 24, 0, 5, EQ, p, &dropped), PTC_OK);
        else
            assert_int_equal(ptc_batch_is_dropped(1000, 35, 168, 3, EQ, p, &dropped), PTC_OK);
        assert_int_equal(seen[id], dropped ? 0 : 1);
        once += seen[id];
    }
    /* 24 mod 5 = 4 of each of 7 batches; 35 mod 3 = 2 of 23 full batches
     * and 27 mod 3 = 0 of the last */
    assert_int_equal(once, 1000 - 7 * 4 - 23 * 2);
}

static void test_ids_room(void **state)
{
    (void)state;
    ptc_dataset_step s = {.batch = 4, .dp = 1};
    uint64_t ids[4] = {77, 77, 77, 77}, count = 0;
    assert_int_equal(ptc_dataset_step_ids(10, &s, ids, 3, &count), PTC_E_RANGE);
    assert_int_equal(count, 4);
    assert_int_equal(ids[0], 77); /* nothing written */
    assert_int_equal(ptc_dataset_step_ids(10, &s, ids, 4, &count), PTC_OK);
    assert_int_equal(ids[3], 9);
    /* bad arguments are the batch arithmetic's */
    s.rank = 1;
    assert_int_equal(ptc_dataset_step_ids(10, &s, ids, 4, &count), PTC_E_INVAL);
    s.rank = 0;
    s.policy = 4;
    assert_int_equal(ptc_dataset_step_ids(10, &s, ids, 4, &count), PTC_E_INVAL);
    s.policy = 0;
    s.batch = 0;
    assert_int_equal(ptc_dataset_step_ids(10, &s, ids, 4, &count), PTC_E_INVAL);
}

/* ---- the path ---------------------------------------------------------------------- */

static void check_format(const ptc_dataset_step *s, ptc_dataset_step_level level,
                         const char *want)
{
    char buf[PTC_DATASET_STEP_PATH_MAX];
    assert_int_equal(ptc_dataset_step_format(s, level, buf, sizeof buf), PTC_OK);
    assert_string_equal(buf, want);
    /* exactly the room it needs, and a byte less */
    size_t need = strlen(want) + 1;
    assert_int_equal(ptc_dataset_step_format(s, level, buf, need), PTC_OK);
    assert_string_equal(buf, want);
    assert_int_equal(ptc_dataset_step_format(s, level, buf, need - 1), PTC_E_RANGE);
    /* and back */
    ptc_dataset_step got;
    ptc_dataset_step_level lv;
    assert_int_equal(ptc_dataset_step_parse(want, strlen(want), &got, &lv), PTC_OK);
    assert_int_equal(lv, level);
    char again[PTC_DATASET_STEP_PATH_MAX];
    assert_int_equal(ptc_dataset_step_format(&got, lv, again, sizeof again), PTC_OK);
    assert_string_equal(again, want);
}

static void test_format(void **state)
{
    (void)state;
    ptc_dataset_step s = {.seed = 7, .epoch = 1, .batch = 64, .start = 128, .dp = 4,
                          .rank = 3, .step = 12};
    check_format(&s, PTC_DATASET_STEP_LEVEL_SEED, "seed-7");
    check_format(&s, PTC_DATASET_STEP_LEVEL_EPOCH, "seed-7/epoch-1");
    check_format(&s, PTC_DATASET_STEP_LEVEL_BATCH, "seed-7/epoch-1/batch-64");
    check_format(&s, PTC_DATASET_STEP_LEVEL_START, "seed-7/epoch-1/batch-64/start-128");
    check_format(&s, PTC_DATASET_STEP_LEVEL_DP, "seed-7/epoch-1/batch-64/start-128/dp-4");
    check_format(&s, PTC_DATASET_STEP_LEVEL_RANK,
                 "seed-7/epoch-1/batch-64/start-128/dp-4/rank-3");
    check_format(&s, PTC_DATASET_STEP_LEVEL_FILE,
                 "seed-7/epoch-1/batch-64/start-128/dp-4/rank-3/step-12");
    check_format(&s, PTC_DATASET_STEP_LEVEL_INDEX,
                 "seed-7/epoch-1/batch-64/start-128/dp-4/rank-3/step-12.idx");
    s.policy = DL | EQ;
    check_format(&s, PTC_DATASET_STEP_LEVEL_DP, "seed-7/epoch-1/batch-64/start-128/dp-4");
    check_format(&s, PTC_DATASET_STEP_LEVEL_POLICY,
                 "seed-7/epoch-1/batch-64/start-128/dp-4/policy-drop-last+equal");
    check_format(&s, PTC_DATASET_STEP_LEVEL_INDEX,
                 "seed-7/epoch-1/batch-64/start-128/dp-4/policy-drop-last+equal/rank-3/"
                 "step-12.idx");
    s.policy = EQ;
    check_format(&s, PTC_DATASET_STEP_LEVEL_FILE,
                 "seed-7/epoch-1/batch-64/start-128/dp-4/policy-equal/rank-3/step-12");
    /* fields below the level are not read */
    ptc_dataset_step z = {.seed = 0, .batch = 0, .dp = 0};
    check_format(&z, PTC_DATASET_STEP_LEVEL_EPOCH, "seed-0/epoch-0");
    /* the largest of everything fits PTC_DATASET_STEP_PATH_MAX */
    ptc_dataset_step big = {UINT64_MAX, UINT64_MAX,           UINT64_MAX,
                            UINT64_MAX, PTC_DATASET_STEP_MAX_DP, PTC_DATASET_STEP_MAX_DP - 1,
                            UINT64_MAX, DL | EQ};
    check_format(&big, PTC_DATASET_STEP_LEVEL_INDEX,
                 "seed-18446744073709551615/epoch-18446744073709551615/"
                 "batch-18446744073709551615/start-18446744073709551615/dp-1048576/"
                 "policy-drop-last+equal/rank-1048575/step-18446744073709551615.idx");
}

static void test_format_errors(void **state)
{
    (void)state;
    char buf[PTC_DATASET_STEP_PATH_MAX];
    ptc_dataset_step s = {.batch = 4, .dp = 2, .rank = 1};
    ptc_dataset_step_level file = PTC_DATASET_STEP_LEVEL_FILE;
    assert_int_equal(ptc_dataset_step_format(&s, (ptc_dataset_step_level)0, buf, 256),
                     PTC_E_INVAL);
    assert_int_equal(ptc_dataset_step_format(&s, (ptc_dataset_step_level)10, buf, 256),
                     PTC_E_INVAL);
    assert_int_equal(ptc_dataset_step_format(&s, PTC_DATASET_STEP_LEVEL_POLICY, buf, 256),
                     PTC_E_INVAL); /* no policy */
    s.policy = 4;
    assert_int_equal(ptc_dataset_step_format(&s, file, buf, 256), PTC_E_INVAL);
    assert_int_equal(ptc_dataset_step_format(&s, PTC_DATASET_STEP_LEVEL_DP, buf, 256), PTC_OK);
    assert_string_equal(buf, "seed-0/epoch-0/batch-4/start-0/dp-2"); /* not read there */
    s.policy = 0;
    s.rank = 2;
    assert_int_equal(ptc_dataset_step_format(&s, file, buf, 256), PTC_E_INVAL);
    assert_int_equal(ptc_dataset_step_format(&s, PTC_DATASET_STEP_LEVEL_DP, buf, 256), PTC_OK);
    s.rank = 0;
    s.dp = 0;
    assert_int_equal(ptc_dataset_step_format(&s, file, buf, 256), PTC_E_INVAL);
    s.dp = PTC_DATASET_STEP_MAX_DP + 1;
    assert_int_equal(ptc_dataset_step_format(&s, file, buf, 256), PTC_E_RANGE);
    s.dp = 2;
    s.batch = 0;
    assert_int_equal(ptc_dataset_step_format(&s, file, buf, 256), PTC_E_INVAL);
    assert_int_equal(ptc_dataset_step_format(&s, PTC_DATASET_STEP_LEVEL_EPOCH, buf, 256),
                     PTC_OK);
    assert_int_equal(ptc_dataset_step_format(&s, PTC_DATASET_STEP_LEVEL_SEED, buf, 0),
                     PTC_E_RANGE);
}

static int parse(const char *text, ptc_dataset_step *s, ptc_dataset_step_level *lv)
{
    return ptc_dataset_step_parse(text, strlen(text), s, lv);
}

static void test_parse(void **state)
{
    (void)state;
    ptc_dataset_step s;
    ptc_dataset_step_level lv;
    assert_int_equal(parse("seed-1/epoch-2/batch-3/start-4/dp-5/policy-equal/rank-4/step-6.idx",
                           &s, &lv), PTC_OK);
    assert_int_equal(lv, PTC_DATASET_STEP_LEVEL_INDEX);
    assert_true(s.seed == 1 && s.epoch == 2 && s.batch == 3 && s.start == 4 && s.dp == 5 &&
                s.rank == 4 && s.step == 6 && s.policy == EQ);
    /* fields below the level are 0 */
    assert_int_equal(parse("seed-9/epoch-8/batch-7", &s, &lv), PTC_OK);
    assert_int_equal(lv, PTC_DATASET_STEP_LEVEL_BATCH);
    assert_true(s.seed == 9 && s.epoch == 8 && s.batch == 7 && s.start == 0 && s.dp == 0 &&
                s.policy == 0);
    /* the length bounds the text: no NUL needed */
    const char *text = "seed-1/epoch-2/batch-3/start-4/dp-5/rank-0/step-61";
    assert_int_equal(ptc_dataset_step_parse(text, strlen(text) - 1, &s, &lv), PTC_OK);
    assert_int_equal(lv, PTC_DATASET_STEP_LEVEL_FILE);
    assert_int_equal(s.step, 6);
    assert_int_equal(ptc_dataset_step_parse(text, 6, &s, &lv), PTC_OK);
    assert_int_equal(lv, PTC_DATASET_STEP_LEVEL_SEED);
    assert_int_equal(s.seed, 1);
    assert_int_equal(parse("seed-0/epoch-0/batch-1/start-0/dp-1048576", &s, &lv), PTC_OK);

    const char *bad[] = {
        "",
        "/seed-1",
        "seed-1/",
        "seed-1//epoch-2",
        "seed-01",
        "seed-",
        "seed-1x",
        "seed-+1",
        "Seed-1",
        "epoch-1",
        "seed-1/epoch-2/batch-0",
        "seed-1/epoch-2/batch-3/start-4/dp-0",
        "seed-1/epoch-2/batch-3/start-4/dp-2/rank-2",
        "seed-1/epoch-2/batch-3/start-4/dp-2/policy-none/rank-0",
        "seed-1/epoch-2/batch-3/start-4/dp-2/policy-Equal",
        "seed-1/epoch-2/batch-3/start-4/dp-2/policy-",
        "seed-1/epoch-2/batch-3/start-4/policy-equal/dp-2",
        "seed-1/epoch-2/batch-3/start-4/dp-2/rank-0/policy-equal",
        "seed-1/epoch-2/batch-3/start-4/dp-2/rank-0/step-1.idx.idx",
        "seed-1/epoch-2/batch-3/start-4/dp-2/rank-0/step-.idx",
        "seed-1/epoch-2/batch-3/start-4/dp-2/rank-0/step-1/x",
        "seed-1/epoch-2/batch-3/start-4/dp-2/policy-equal/rank-0/step-1/x",
        "seed-1/epoch-2/batch-3/start-4/dp-2/rank-0/step-1.IDX",
        "seed-1/epoch-2/batch-3/start-4/dp-2/rank-0/step-01",
        "seed-1/./epoch-2",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (parse(bad[i], &s, &lv) != PTC_E_INVAL)
            fail_msg("'%s' was not rejected as PTC_E_INVAL", bad[i]);
        assert_non_null(strstr(ptc_last_error(), "not a step path"));
    }
    /* numbers that do not fit */
    assert_int_equal(parse("seed-18446744073709551616", &s, &lv), PTC_E_RANGE);
    assert_int_equal(parse("seed-18446744073709551615", &s, &lv), PTC_OK);
    assert_int_equal(s.seed, UINT64_MAX);
    assert_int_equal(parse("seed-1/epoch-2/batch-3/start-4/dp-1048577", &s, &lv), PTC_E_RANGE);
    assert_int_equal(parse("seed-1/epoch-2/batch-3/start-4/dp-2/rank-0/"
                           "step-99999999999999999999.idx", &s, &lv), PTC_E_RANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uneven_last_batch),
        cmocka_unit_test(test_dp_change_at_batch_boundary),
        cmocka_unit_test(test_ids_room),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_format_errors),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
