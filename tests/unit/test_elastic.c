/* The configuration rule of ptc elastic (ptc_elastic_pick): tp within a
 * host, pp dividing the layers, dp the rest; fixed degrees kept; what fits
 * nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/elastic.h"

static void expect(const int *slots, size_t n, ptc_elastic_want w, int dp, int tp, int pp)
{
    ptc_config c;
    int usable[8];
    assert_int_equal(ptc_elastic_pick(&c, usable, slots, n, &w), PTC_OK);
    assert_int_equal(c.dp, dp);
    assert_int_equal(c.tp, tp);
    assert_int_equal(c.pp, pp);
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(usable[i] % tp, 0); /* tp groups never span hosts */
        assert_true(usable[i] <= slots[i]);
        total += usable[i];
    }
    assert_true(dp * tp * pp <= total);
}

static void test_auto(void **state)
{
    (void)state;
    ptc_elastic_want w = {.layers = 4, .hidden = 8, .microbatches = 4};
    expect((int[]){4}, 1, w, 1, 4, 1);
    expect((int[]){3}, 1, w, 3, 1, 1);    /* odd: no tp; pp 2 would leave a slot idle */
    expect((int[]){5}, 1, w, 5, 1, 1);
    expect((int[]){8}, 1, w, 1, 8, 1);
    expect((int[]){8, 8}, 2, w, 1, 8, 2); /* pp 2 uses every slot: pp before dp */
    expect((int[]){8, 4}, 2, w, 3, 4, 1); /* tp divides every host */
    expect((int[]){8, 6}, 2, w, 7, 2, 1);
    expect((int[]){1}, 1, w, 1, 1, 1);
    w.hidden = 6; /* tp divides the hidden width */
    expect((int[]){8}, 1, w, 1, 2, 4);
    w.hidden = 0;
    w.tp = 1;
    expect((int[]){4}, 1, w, 1, 1, 4);
    w.tp = 0;
    w.microbatches = 2; /* pp at most the micro-batches */
    expect((int[]){4}, 1, w, 1, 4, 1);
    w.tp = 1;
    expect((int[]){4}, 1, w, 2, 1, 2);
    w.tp = 0;
    w.layers = 3;
    expect((int[]){3}, 1, w, 3, 1, 1);    /* 3 layers: pp 3 > 2 micro-batches */
    /* automatic tp leaves room for a fixed pp */
    w = (ptc_elastic_want){.pp = 2, .layers = 4, .hidden = 8, .microbatches = 4};
    expect((int[]){4}, 1, w, 1, 2, 2);
    expect((int[]){3}, 1, w, 1, 1, 2);
    expect((int[]){8}, 1, w, 1, 4, 2);
}

static void test_fixed(void **state)
{
    (void)state;
    ptc_elastic_want w = {.tp = 2, .pp = 2, .layers = 4, .zero = true};
    expect((int[]){4}, 1, w, 1, 2, 2);
    expect((int[]){7}, 1, w, 1, 2, 2);
    expect((int[]){8}, 1, w, 2, 2, 2);
    expect((int[]){3, 3}, 2, w, 1, 2, 2); /* 2 + 2 usable */
    ptc_config c;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){8}, 1, &w), PTC_OK);
    assert_true(c.zero);
    w.pp = 3; /* a fixed pp need not divide the layers */
    expect((int[]){6}, 1, w, 1, 2, 3);
}

static void test_nothing_fits(void **state)
{
    (void)state;
    ptc_config c;
    ptc_elastic_want w = {.layers = 4};
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){0}, 1, &w), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "no slot"));
    w.tp = 4;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){3, 3}, 2, &w), PTC_E_CONFIG);
    w.tp = 2;
    w.pp = 3;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){3, 3}, 2, &w), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "no configuration fits"));
    w.pp = 5;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){64}, 1, &w), PTC_E_CONFIG);
    /* bad arguments */
    w = (ptc_elastic_want){.layers = 0};
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){4}, 1, &w), PTC_E_INVAL);
    w.layers = 4;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){-1}, 1, &w), PTC_E_INVAL);
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){4}, 0, &w), PTC_E_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_fixed),
        cmocka_unit_test(test_nothing_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
