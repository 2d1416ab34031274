/* The persistent count map of served records and the exactly-once audit. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ptc/dataset.h"
#include "ptc/store.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ptc_counts_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void audit(ptc_store *s, const char *name, uint64_t seed, uint64_t epoch, uint64_t n,
                  uint64_t once, uint64_t rep, uint64_t miss)
{
    ptc_dataset_audit_result a;
    assert_int_equal(ptc_dataset_audit_counts(s, name, 5, seed, epoch, n, &a), PTC_OK);
    assert_int_equal(a.samples, n);
    assert_int_equal(a.once, once);
    assert_int_equal(a.repeated, rep);
    assert_int_equal(a.missing, miss);
}

static void test_counts(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/s1", dir);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, path, PTC_STORE_CREATE), PTC_OK);
    audit(s, "toy", 1, 2, 110, 0, 0, 110);
    ptc_dataset_counter *c;
    assert_int_equal(ptc_dataset_counter_create(&c, s), PTC_OK);
    for (uint64_t id = 0; id < 100; id++)
        assert_int_equal(ptc_dataset_counter_add(c, "toy", 5, 1, 2, id), PTC_OK);
    /* other keys do not mix in */
    assert_int_equal(ptc_dataset_counter_add(c, "toy", 5, 1, 3, 0), PTC_OK);
    assert_int_equal(ptc_dataset_counter_add(c, "toy", 5, 2, 2, 0), PTC_OK);
    assert_int_equal(ptc_dataset_counter_add(c, "toy2", 5, 1, 2, 0), PTC_OK);
    assert_int_equal(ptc_dataset_counter_add(c, "to", 5, 1, 2, 0), PTC_OK);
    /* another generation of the same name (a replaced dataset) neither */
    assert_int_equal(ptc_dataset_counter_add(c, "toy", 6, 1, 2, 0), PTC_OK);
    assert_int_equal(ptc_dataset_counter_add(c, "toy", 4, 1, 2, 1), PTC_OK);
    assert_int_equal(ptc_dataset_counter_add(c, "", 5, 1, 2, 0), PTC_E_INVAL);
    audit(s, "toy", 1, 2, 110, 0, 0, 110); /* not flushed yet */
    assert_int_equal(ptc_dataset_counter_flush(c), PTC_OK);
    audit(s, "toy", 1, 2, 110, 100, 0, 10);
    /* repeats across flushes and within one */
    for (uint64_t id = 0; id < 5; id++)
        assert_int_equal(ptc_dataset_counter_add(c, "toy", 5, 1, 2, id * 7), PTC_OK);
    assert_int_equal(ptc_dataset_counter_add(c, "toy", 5, 1, 2, 105), PTC_OK);
    assert_int_equal(ptc_dataset_counter_add(c, "toy", 5, 1, 2, 105), PTC_OK);
    ptc_dataset_counter_destroy(c); /* flushes */
    audit(s, "toy", 1, 2, 110, 95, 6, 9);
    audit(s, "toy", 1, 3, 110, 1, 0, 109);
    audit(s, "toy2", 1, 2, 1, 1, 0, 0);
    audit(s, "to", 1, 2, 3, 1, 0, 2);
    ptc_dataset_audit_result a;
    assert_int_equal(ptc_dataset_audit_counts(s, "toy", 5, 1, 2, 100, &a), PTC_E_STORE);
    ptc_store_close(s);

    /* durable: a reopened store sees the same */
    assert_int_equal(ptc_store_open(&s, path, 0), PTC_OK);
    audit(s, "toy", 1, 2, 110, 95, 6, 9);
    ptc_store_close(s);
    assert_int_equal(ptc_store_open(&s, path, PTC_STORE_READONLY), PTC_OK);
    audit(s, "toy", 1, 2, 110, 95, 6, 9);
    assert_int_equal(ptc_dataset_counter_create(&c, s), PTC_E_INVAL);
    assert_null(c);
    ptc_store_close(s);
    ptc_dataset_counter_destroy(NULL);
}

struct targ {
    ptc_dataset_counter *c;
    int t;
};

static void *adder(void *p)
{
    struct targ *a = p;
    for (uint64_t id = 0; id < 2000; id++) {
        /* every thread counts ids = t (mod 4) once; threads t and t+4 overlap */
        if (id % 4 == (uint64_t)(a->t % 4))
            ptc_dataset_counter_add(a->c, "mt", 5, 0, 0, id);
        if (id % 500 == 0 && a->t == 0)
            ptc_dataset_counter_flush(a->c);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/s2", dir);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, path, PTC_STORE_CREATE), PTC_OK);
    ptc_dataset_counter *c;
    assert_int_equal(ptc_dataset_counter_create(&c, s), PTC_OK);
    pthread_t th[8];
    struct targ a[8];
    for (int t = 0; t < 8; t++) {
        a[t] = (struct targ){c, t};
        assert_int_equal(pthread_create(&th[t], NULL, adder, &a[t]), 0);
    }
    for (int t = 0; t < 8; t++)
        pthread_join(th[t], NULL);
    ptc_dataset_counter_destroy(c);
    audit(s, "mt", 0, 0, 4000, 0, 2000, 2000); /* each id < 2000 counted twice */
    ptc_store_close(s);
}

/* The audit under a batch policy: N = 10, batch 4, dp 3, policy equal
 * drops positions 3, 7, 8, 9. Serving every step file's records audits as
 * 6 once, 4 dropped, 0 missing; without the policy those 4 are missing. */
static void serve_epoch(ptc_dataset_counter *c, uint64_t epoch, unsigned pol, uint64_t skip_pos)
{
    ptc_order o;
    assert_int_equal(ptc_order_init(&o, 10, 1, epoch), PTC_OK);
    uint64_t steps;
    assert_int_equal(ptc_batch_steps_policy(10, 4, 0, pol, &steps), PTC_OK);
    for (uint64_t k = 0; k < steps; k++)
        for (uint64_t r = 0; r < 3; r++) {
            uint64_t lo, hi, id;
            assert_int_equal(ptc_batch_part_policy(10, 4, 0, 3, r, k, pol, &lo, &hi), PTC_OK);
            for (uint64_t p = lo; p < hi; p++) {
                assert_int_equal(ptc_order_sample(&o, p, &id), PTC_OK);
                if (p != skip_pos)
                    assert_int_equal(ptc_dataset_counter_add(c, "pol", 5, 1, epoch, id), PTC_OK);
            }
        }
}

static void audit_pol(ptc_store *s, uint64_t epoch, const ptc_dataset_batch_policy *p,
                      uint64_t once, uint64_t rep, uint64_t miss, uint64_t dropped)
{
    ptc_dataset_audit_result a;
    assert_int_equal(ptc_dataset_audit_counts_policy(s, "pol", 5, 1, epoch, 10, p, &a), PTC_OK);
    assert_int_equal(a.samples, 10);
    assert_int_equal(a.once, once);
    assert_int_equal(a.repeated, rep);
    assert_int_equal(a.missing, miss);
    assert_int_equal(a.dropped, dropped);
}

static void test_policy(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/s3", dir);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, path, PTC_STORE_CREATE), PTC_OK);
    ptc_dataset_counter *c;
    assert_int_equal(ptc_dataset_counter_create(&c, s), PTC_OK);
    const ptc_dataset_batch_policy eq = {PTC_BATCH_POLICY_EQUAL, 4, 0, 3};
    const ptc_dataset_batch_policy dl = {PTC_BATCH_POLICY_DROP_LAST, 4, 0, 3};
    const ptc_dataset_batch_policy both = {PTC_BATCH_POLICY_DROP_LAST | PTC_BATCH_POLICY_EQUAL,
                                           4, 0, 3};
    const ptc_dataset_batch_policy none = {0, 4, 0, 3};
    serve_epoch(c, 0, PTC_BATCH_POLICY_EQUAL, UINT64_MAX);
    serve_epoch(c, 1, PTC_BATCH_POLICY_DROP_LAST, UINT64_MAX);
    serve_epoch(c, 2, PTC_BATCH_POLICY_EQUAL, 5); /* position 5 never read */
    serve_epoch(c, 3, 0, UINT64_MAX);             /* the whole epoch, no policy */
    assert_int_equal(ptc_dataset_counter_flush(c), PTC_OK);
    audit_pol(s, 0, &eq, 6, 0, 0, 4);
    audit_pol(s, 0, &both, 6, 0, 0, 4);
    audit_pol(s, 0, NULL, 6, 0, 4, 0);
    audit_pol(s, 0, &none, 6, 0, 4, 0);
    audit_pol(s, 0, &dl, 6, 0, 2, 2); /* 3 and 7 are not dropped by drop-last */
    audit_pol(s, 1, &dl, 8, 0, 0, 2);
    audit_pol(s, 2, &eq, 5, 0, 1, 4);
    /* records served although the policy drops them count as served */
    audit_pol(s, 3, &eq, 10, 0, 0, 0);
    audit_pol(s, 3, &dl, 10, 0, 0, 0);
    ptc_dataset_audit_result a;
    const ptc_dataset_batch_policy bad[] = {{4, 4, 0, 3}, {1, 0, 0, 3}, {1, 4, 0, 0}};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(ptc_dataset_audit_counts_policy(s, "pol", 5, 1, 0, 10, &bad[i], &a),
                         PTC_E_INVAL);
    ptc_dataset_counter_destroy(c);
    ptc_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_policy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
