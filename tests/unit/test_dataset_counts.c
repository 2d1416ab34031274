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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
