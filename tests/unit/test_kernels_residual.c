/* Residual add (and the fork-join helper the CPU paths share): the threaded
 * path must give the reference's bits, in place too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/kernels_internal.h"
#include "kernels/residual.h"
#include "kernels_test_util.h"

static void count_range(void *ctx, size_t b, size_t e)
{
    unsigned char *hits = ctx;
    for (size_t i = b; i < e; i++)
        hits[i]++;
}

static void test_parallel_for_covers_once(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 15, 16, 17, 1000, 100003};
    const int threads[] = {1, 2, 3, 7, 16};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
            size_t n = sizes[s];
            unsigned char *hits = calloc(n + 1, 1);
            assert_non_null(hits);
            ptc_kernels_set_threads(threads[t]);
            assert_int_equal(ptc_kernels_threads(), threads[t]);
            ptc_kernels_parallel_for(n, 16, count_range, hits);
            for (size_t i = 0; i < n; i++)
                if (hits[i] != 1)
                    fail_msg("n=%zu threads=%d: index %zu hit %d times", n,
                             threads[t], i, hits[i]);
            free(hits);
        }
    }
    ptc_kernels_set_threads(0);
    assert_true(ptc_kernels_threads() >= 1);
}

static void test_cpu_matches_ref(void **state)
{
    (void)state;
    ptc_kernels_set_threads(4);
    const size_t n = 600011;
    kt_rng r = {21};
    float *a = kt_random(n, -10, 10, &r), *b = kt_random(n, -10, 10, &r);
    float *ref = kt_alloc(n), *cpu = kt_alloc(n);
    assert_int_equal(ptc_residual_forward_ref(ref, a, b, n), PTC_OK);
    assert_int_equal(ptc_residual_forward_cpu(cpu, a, b, n), PTC_OK);
    assert_int_equal(kt_compare_bits("residual_forward", cpu, ref, n), 0);
    for (size_t i = 0; i < 1000; i++)
        assert_true(ref[i] == a[i] + b[i]);
    /* In place into the first input. */
    float *inplace = kt_copy(a, n);
    assert_int_equal(ptc_residual_forward_cpu(inplace, inplace, b, n), PTC_OK);
    assert_int_equal(kt_compare_bits("residual_inplace", inplace, ref, n), 0);

    /* Backward accumulates dout into both gradients. */
    float *g = kt_random(n, -1, 1, &r);
    float *d1r = kt_copy(a, n), *d2r = kt_copy(b, n);
    float *d1c = kt_copy(a, n), *d2c = kt_copy(b, n);
    assert_int_equal(ptc_residual_backward_ref(d1r, d2r, g, n), PTC_OK);
    assert_int_equal(ptc_residual_backward_cpu(d1c, d2c, g, n), PTC_OK);
    assert_int_equal(kt_compare_bits("residual_dinp1", d1c, d1r, n), 0);
    assert_int_equal(kt_compare_bits("residual_dinp2", d2c, d2r, n), 0);
    assert_true(d1r[7] == a[7] + g[7] && d2r[7] == b[7] + g[7]);
    ptc_kernels_set_threads(0);
    free(a); free(b); free(ref); free(cpu); free(inplace); free(g);
    free(d1r); free(d2r); free(d1c); free(d2c);
}

static void test_errors(void **state)
{
    (void)state;
    float x = 1;
    assert_int_equal(ptc_residual_forward_cpu(&x, NULL, &x, 1), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "inp1"));
    assert_int_equal(ptc_residual_backward_ref(&x, NULL, &x, 1), PTC_E_INVAL);
    assert_true(x == 1.0f);
    assert_int_equal(ptc_residual_forward_ref(NULL, NULL, NULL, 0), PTC_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parallel_for_covers_once),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
