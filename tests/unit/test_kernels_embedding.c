/* Embedding lookup and scatter-add: exact rows, repeated ids summing, the
 * threaded path giving the reference's bits, bad ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/embedding.h"
#include "kernels/kernels_internal.h"
#include "kernels_test_util.h"

static void test_closed_form(void **state)
{
    (void)state;
    /* table rows r_k = (k, 10k); ids 2 0 2. */
    const float table[3 * 2] = {0, 0, 1, 10, 2, 20};
    const int32_t ids[3] = {2, 0, 2};
    const float want[3 * 2] = {2, 20, 0, 0, 2, 20};
    const float dout[3 * 2] = {1, 2, 3, 4, 5, 6};
    /* dtable starts at 0.5: row 0 gets (3,4), row 1 nothing, row 2 (1,2)+(5,6). */
    const float want_d[3 * 2] = {3.5f, 4.5f, 0.5f, 0.5f, 6.5f, 8.5f};
    for (int path = 0; path < 2; path++) {
        float out[6], d[6];
        for (int i = 0; i < 6; i++)
            d[i] = 0.5f;
        int rc = path ? ptc_embedding_forward_cpu(out, ids, table, 3, 3, 2)
                      : ptc_embedding_forward_ref(out, ids, table, 3, 3, 2);
        assert_int_equal(rc, PTC_OK);
        assert_memory_equal(out, want, sizeof want);
        rc = path ? ptc_embedding_backward_cpu(d, dout, ids, 3, 3, 2)
                  : ptc_embedding_backward_ref(d, dout, ids, 3, 3, 2);
        assert_int_equal(rc, PTC_OK);
        assert_memory_equal(d, want_d, sizeof want_d);
    }
}

static void check_cpu_vs_ref(size_t n, size_t vocab, size_t c, int threads,
                             uint64_t seed)
{
    ptc_kernels_set_threads(threads);
    kt_rng r = {seed};
    float *table = kt_random(vocab * c, -1, 1, &r);
    int32_t *ids = malloc((n > 0 ? n : 1) * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++) /* skewed: many repeats of a few ids */
        ids[i] = (int32_t)(i % 3 == 0 ? kt_next(&r) % (vocab < 4 ? vocab : 4)
                                    : kt_next(&r) % vocab);
    float *o_r = kt_alloc(n * c), *o_c = kt_alloc(n * c);
    assert_int_equal(ptc_embedding_forward_ref(o_r, ids, table, n, vocab, c), PTC_OK);
    assert_int_equal(ptc_embedding_forward_cpu(o_c, ids, table, n, vocab, c), PTC_OK);
    assert_int_equal(kt_compare_bits("embedding_forward", o_c, o_r, n * c), 0);
    float *g = kt_random(n * c, -1, 1, &r);
    float *d_r = kt_random(vocab * c, -1, 1, &r), *d_c = kt_copy(d_r, vocab * c);
    assert_int_equal(ptc_embedding_backward_ref(d_r, g, ids, n, vocab, c), PTC_OK);
    assert_int_equal(ptc_embedding_backward_cpu(d_c, g, ids, n, vocab, c), PTC_OK);
    /* Same summation order (row order per element): identical bits. */
    assert_int_equal(kt_compare_bits("embedding_backward", d_c, d_r, vocab * c), 0);
    ptc_kernels_set_threads(0);
    free(table); free(ids); free(o_r); free(o_c); free(g); free(d_r); free(d_c);
}

static void test_cpu_matches_ref(void **state)
{
    (void)state;
    check_cpu_vs_ref(1, 1, 1, 1, 1);
    check_cpu_vs_ref(257, 50, 100, 3, 2);
    check_cpu_vs_ref(512, 1000, 768, 4, 3);
    check_cpu_vs_ref(64, 8, 17, 16, 4);
}

static void test_bad_ids(void **state)
{
    (void)state;
    const float table[4] = {1, 2, 3, 4};
    float out[4] = {9, 9, 9, 9};
    const int32_t ids[2] = {1, 2};
    assert_int_equal(ptc_embedding_forward_cpu(out, ids, table, 2, 2, 2), PTC_E_RANGE);
    assert_non_null(strstr(ptc_last_error(), "row 1"));
    assert_true(out[0] == 9.0f && out[3] == 9.0f);
    const int32_t neg[1] = {-1};
    float d[4] = {0};
    assert_int_equal(ptc_embedding_backward_ref(d, out, neg, 1, 2, 2), PTC_E_RANGE);
    assert_true(d[0] == 0.0f);
    assert_int_equal(ptc_embedding_forward_ref(out, ids, NULL, 2, 2, 2), PTC_E_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_form),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_bad_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
