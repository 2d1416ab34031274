/* AdamW: two steps computed by hand, threaded CPU path against the
 * reference over several steps, argument checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/adamw.h"
#include "kernels/kernels_internal.h"
#include "kernels_test_util.h"

/* Float arithmetic against the double reference, per step. */
#define ADAMW_ABS 1e-6
#define ADAMW_REL 1e-5

/* Powers of two where possible, so the hand-computed moments are exact in
 * float and only the parameter needs a tolerance. */
static const ptc_adamw_params hp = {.lr = 0.125f, .beta1 = 0.75f,
                                    .beta2 = 0.875f, .eps = 0x1p-20f,
                                    .weight_decay = 0.0625f};

static int setup(void **state)
{
    (void)state;
    ptc_kernels_set_threads(4);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ptc_kernels_set_threads(0);
    return 0;
}

static void test_hand_computed(void **state)
{
    (void)state;
    /* p = 1, m = v = 0, lr 1/8, betas 3/4 and 7/8, eps 2^-20, decay 1/16.
     * Step 1, g = 0.5:
     *   m = 0.25 * 0.5 = 0.125          v = 0.125 * 0.25 = 0.03125
     *   mhat = 0.125 / 0.25 = 0.5       vhat = 0.03125 / 0.125 = 0.25
     *   p = 1 - 0.125 (0.5 / (0.5 + 2^-20) + 0.0625 * 1) = 0.8671877384
     * Step 2, g = -0.25:
     *   m = 0.09375 - 0.0625 = 0.03125  v = 0.02734375 + 0.0078125 = 0.03515625
     *   mhat = 0.03125 / (1 - 0.75^2) = 0.0714285714
     *   vhat = 0.03515625 / (1 - 0.875^2) = 0.15, sqrt = 0.3872983346
     *   p = 0.8671877384 - 0.125 (0.0714285714 / (0.3872983346 + 2^-20)
     *                             + 0.0625 * 0.8671877384) = 0.8373594187 */
    const double want[2][3] = {{0.8671877384181244, 0.125, 0.03125},
                               {0.8373594186790677, 0.03125, 0.03515625}};
    const float grads[2] = {0.5f, -0.25f};
    for (int path = 0; path < 2; path++) {
        float p = 1.0f, m = 0.0f, v = 0.0f;
        for (int t = 1; t <= 2; t++) {
            int rc = path ? ptc_adamw_update_cpu(&p, &m, &v, &grads[t - 1], 1, &hp, t)
                          : ptc_adamw_update_ref(&p, &m, &v, &grads[t - 1], 1, &hp, t);
            assert_int_equal(rc, PTC_OK);
            assert_int_equal(kt_compare_d("adamw_p", &p, &want[t - 1][0], 1, 0, 1e-6), 0);
            assert_true(m == (float)want[t - 1][1]); /* exact */
            assert_true(v == (float)want[t - 1][2]);
        }
    }
}

static void test_zero_lr_keeps_params(void **state)
{
    (void)state;
    ptc_adamw_params z = hp;
    z.lr = 0.0f;
    float p[3] = {1, -2, 3}, m[3] = {0}, v[3] = {0};
    const float g[3] = {1, 1, -1};
    assert_int_equal(ptc_adamw_update_cpu(p, m, v, g, 3, &z, 1), PTC_OK);
    assert_true(p[0] == 1.0f && p[1] == -2.0f && p[2] == 3.0f);
    assert_true(m[2] == -0.25f && v[0] == 0.125f);
}

static void test_cpu_matches_ref(void **state)
{
    (void)state;
    const size_t n = 300001;
    kt_rng r = {3};
    float *p_r = kt_random(n, -1, 1, &r), *p_c = kt_copy(p_r, n);
    float *m_r = kt_alloc(n), *m_c = kt_alloc(n);
    float *v_r = kt_alloc(n), *v_c = kt_alloc(n);
    float *g = kt_alloc(n);
    for (int t = 1; t <= 3; t++) {
        for (size_t i = 0; i < n; i++)
            g[i] = kt_uniform(&r, -1, 1);
        assert_int_equal(ptc_adamw_update_ref(p_r, m_r, v_r, g, n, &hp, t), PTC_OK);
        assert_int_equal(ptc_adamw_update_cpu(p_c, m_c, v_c, g, n, &hp, t), PTC_OK);
        assert_int_equal(kt_compare("adamw_params", p_c, p_r, n, ADAMW_ABS, ADAMW_REL), 0);
        assert_int_equal(kt_compare("adamw_m", m_c, m_r, n, ADAMW_ABS, ADAMW_REL), 0);
        assert_int_equal(kt_compare("adamw_v", v_c, v_r, n, ADAMW_ABS, ADAMW_REL), 0);
        /* Keep both paths on the same state so errors do not compound. */
        memcpy(p_c, p_r, n * sizeof(float));
        memcpy(m_c, m_r, n * sizeof(float));
        memcpy(v_c, v_r, n * sizeof(float));
    }
    free(p_r); free(p_c); free(m_r); free(m_c); free(v_r); free(v_c); free(g);
}

static void test_errors(void **state)
{
    (void)state;
    float x = 0;
    assert_int_equal(ptc_adamw_update_ref(&x, &x, &x, &x, 1, &hp, 0), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "step"));
    assert_int_equal(ptc_adamw_update_cpu(&x, &x, &x, &x, 1, NULL, 1), PTC_E_INVAL);
    ptc_adamw_params bad = hp;
    bad.beta1 = 1.0f;
    assert_int_equal(ptc_adamw_update_cpu(&x, &x, &x, &x, 1, &bad, 1), PTC_E_INVAL);
    bad = hp;
    bad.eps = -1.0f;
    assert_int_equal(ptc_adamw_update_ref(&x, &x, &x, &x, 1, &bad, 1), PTC_E_INVAL);
    bad = hp;
    bad.lr = NAN;
    assert_int_equal(ptc_adamw_update_ref(&x, &x, &x, &x, 1, &bad, 1), PTC_E_INVAL);
    assert_int_equal(ptc_adamw_update_cpu(&x, NULL, &x, &x, 1, &hp, 1), PTC_E_INVAL);
    assert_true(x == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_computed),
        cmocka_unit_test(test_zero_lr_keeps_params),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
