/* Layer normalization: closed-form row, threaded CPU path against the
 * reference, backward against finite differences in double. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/kernels_internal.h"
#include "kernels/layernorm.h"
#include "kernels_test_util.h"

/* Float row sums (c up to 768) against double: observed < 1e-6. */
#define LN_ABS 1e-5
#define LN_REL 1e-5
/* Parameter gradients sum over n rows in float. */
#define LN_PARAM_ABS 1e-4
#define LN_PARAM_REL 1e-5

static int setup(void **state)
{
    (void)state;
    ptc_kernels_set_threads(3);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ptc_kernels_set_threads(0);
    return 0;
}

static void test_closed_form(void **state)
{
    (void)state;
    /* Row 1 2 3 4: mean 2.5, biased variance 1.25. */
    const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2}, b[4] = {0, 0, 0, 1};
    const float eps = 1e-5f;
    double s = 1.0 / sqrt(1.25 + (double)eps);
    const double want[4] = {-1.5 * s, -0.5 * s, 2 * 0.5 * s, 2 * 1.5 * s + 1};
    float out[4], mean, rstd;
    for (int path = 0; path < 2; path++) {
        int rc = path ? ptc_layernorm_forward_cpu(out, &mean, &rstd, x, w, b, 1, 4, eps)
                      : ptc_layernorm_forward_ref(out, &mean, &rstd, x, w, b, 1, 4, eps);
        assert_int_equal(rc, PTC_OK);
        assert_true(mean == 2.5f);
        assert_true(fabs(rstd - s) <= 1e-6 * s);
        assert_int_equal(kt_compare_d("ln_closed", out, want, 4, 1e-6, 1e-6), 0);
    }
    /* mean and rstd are optional. */
    assert_int_equal(ptc_layernorm_forward_cpu(out, NULL, NULL, x, w, b, 1, 4, eps),
                     PTC_OK);
    assert_int_equal(kt_compare_d("ln_closed_nostats", out, want, 4, 1e-6, 1e-6), 0);
}

static void check_cpu_vs_ref(size_t n, size_t c, uint64_t seed)
{
    kt_rng r = {seed};
    float *x = kt_random(n * c, -3, 5, &r);
    float *w = kt_random(c, 0.5f, 1.5f, &r), *b = kt_random(c, -1, 1, &r);
    float *dout = kt_random(n * c, -1, 1, &r);
    float *out_r = kt_alloc(n * c), *out_c = kt_alloc(n * c);
    float *m_r = kt_alloc(n), *m_c = kt_alloc(n), *s_r = kt_alloc(n), *s_c = kt_alloc(n);
    assert_int_equal(ptc_layernorm_forward_ref(out_r, m_r, s_r, x, w, b, n, c, 1e-5f),
                     PTC_OK);
    assert_int_equal(ptc_layernorm_forward_cpu(out_c, m_c, s_c, x, w, b, n, c, 1e-5f),
                     PTC_OK);
    assert_int_equal(kt_compare("ln_out", out_c, out_r, n * c, LN_ABS, LN_REL), 0);
    assert_int_equal(kt_compare("ln_mean", m_c, m_r, n, LN_ABS, LN_REL), 0);
    assert_int_equal(kt_compare("ln_rstd", s_c, s_r, n, LN_ABS, LN_REL), 0);

    float *dx_r = kt_random(n * c, -1, 1, &r), *dx_c = kt_copy(dx_r, n * c);
    float *dw_r = kt_random(c, -1, 1, &r), *dw_c = kt_copy(dw_r, c);
    float *db_r = kt_random(c, -1, 1, &r), *db_c = kt_copy(db_r, c);
    assert_int_equal(ptc_layernorm_backward_ref(dx_r, dw_r, db_r, dout, x, w, m_r,
                                                s_r, n, c), PTC_OK);
    assert_int_equal(ptc_layernorm_backward_cpu(dx_c, dw_c, db_c, dout, x, w, m_r,
                                                s_r, n, c), PTC_OK);
    assert_int_equal(kt_compare("ln_dinp", dx_c, dx_r, n * c, LN_ABS, LN_REL), 0);
    assert_int_equal(kt_compare("ln_dweight", dw_c, dw_r, c, LN_PARAM_ABS,
                                LN_PARAM_REL), 0);
    assert_int_equal(kt_compare("ln_dbias", db_c, db_r, c, LN_PARAM_ABS,
                                LN_PARAM_REL), 0);

    /* The CPU result does not depend on the thread count. */
    float *dw_1 = kt_alloc(c), *dx_1 = kt_alloc(n * c), *dw_4 = kt_alloc(c),
          *dx_4 = kt_alloc(n * c);
    ptc_kernels_set_threads(1);
    assert_int_equal(ptc_layernorm_backward_cpu(dx_1, dw_1, NULL, dout, x, w, m_r,
                                                s_r, n, c), PTC_OK);
    ptc_kernels_set_threads(4);
    assert_int_equal(ptc_layernorm_backward_cpu(dx_4, dw_4, NULL, dout, x, w, m_r,
                                                s_r, n, c), PTC_OK);
    ptc_kernels_set_threads(3);
    assert_int_equal(kt_compare_bits("ln_dweight_threads", dw_4, dw_1, c), 0);
    assert_int_equal(kt_compare_bits("ln_dinp_threads", dx_4, dx_1, n * c), 0);

    free(x); free(w); free(b); free(dout); free(out_r); free(out_c); free(m_r);
    free(m_c); free(s_r); free(s_c); free(dx_r); free(dx_c); free(dw_r);
    free(dw_c); free(db_r); free(db_c); free(dw_1); free(dx_1); free(dw_4);
    free(dx_4);
}

static void test_cpu_matches_ref(void **state)
{
    (void)state;
    check_cpu_vs_ref(1, 1, 1);
    check_cpu_vs_ref(300, 77, 2);
    check_cpu_vs_ref(96, 768, 3);
}

/* L = sum dout * layernorm(x; w, b), in double. */
static double ln_loss(const double *x, const double *w, const double *b,
                      const double *dout, size_t n, size_t c, double eps)
{
    double loss = 0.0;
    for (size_t i = 0; i < n; i++) {
        double m = 0, v = 0;
        for (size_t j = 0; j < c; j++)
            m += x[i * c + j];
        m /= (double)c;
        for (size_t j = 0; j < c; j++)
            v += (x[i * c + j] - m) * (x[i * c + j] - m);
        v /= (double)c;
        double s = 1.0 / sqrt(v + eps);
        for (size_t j = 0; j < c; j++)
            loss += dout[i * c + j] * ((x[i * c + j] - m) * s * w[j] + b[j]);
    }
    return loss;
}

static void test_backward_finite_differences(void **state)
{
    (void)state;
    enum { N = 3, C = 7 };
    const float eps = 1e-5f;
    kt_rng r = {5};
    float x[N * C], w[C], b[C], dout[N * C];
    double xd[N * C], wd[C], bd[C], doutd[N * C];
    for (int i = 0; i < N * C; i++) xd[i] = x[i] = kt_uniform(&r, -2, 2);
    for (int i = 0; i < C; i++) wd[i] = w[i] = kt_uniform(&r, 0.5f, 1.5f);
    for (int i = 0; i < C; i++) bd[i] = b[i] = kt_uniform(&r, -1, 1);
    for (int i = 0; i < N * C; i++) doutd[i] = dout[i] = kt_uniform(&r, -1, 1);
    double gx[N * C], gw[C], gb[C];
    double *vars[3] = {xd, wd, bd}, *grads[3] = {gx, gw, gb};
    size_t lens[3] = {N * C, C, C};
    const double h = 1e-5;
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < lens[k]; i++) {
            double keep = vars[k][i];
            vars[k][i] = keep + h;
            double lp = ln_loss(xd, wd, bd, doutd, N, C, eps);
            vars[k][i] = keep - h;
            double lm = ln_loss(xd, wd, bd, doutd, N, C, eps);
            vars[k][i] = keep;
            grads[k][i] = (lp - lm) / (2 * h);
        }
    float out[N * C], mean[N], rstd[N];
    assert_int_equal(ptc_layernorm_forward_ref(out, mean, rstd, x, w, b, N, C, eps),
                     PTC_OK);
    for (int path = 0; path < 2; path++) {
        float dx[N * C] = {0}, dw[C] = {0}, db[C] = {0};
        int rc = path ? ptc_layernorm_backward_cpu(dx, dw, db, dout, x, w, mean,
                                                   rstd, N, C)
                      : ptc_layernorm_backward_ref(dx, dw, db, dout, x, w, mean,
                                                   rstd, N, C);
        assert_int_equal(rc, PTC_OK);
        assert_int_equal(kt_compare_d("ln_fd_dinp", dx, gx, N * C, 1e-5, 1e-4), 0);
        assert_int_equal(kt_compare_d("ln_fd_dweight", dw, gw, C, 1e-5, 1e-4), 0);
        assert_int_equal(kt_compare_d("ln_fd_dbias", db, gb, C, 1e-5, 1e-4), 0);
    }
}

static void test_errors(void **state)
{
    (void)state;
    float x[4] = {0};
    assert_int_equal(ptc_layernorm_forward_ref(x, NULL, NULL, x, x, x, 1, 4, -1.0f),
                     PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "eps"));
    assert_int_equal(ptc_layernorm_forward_cpu(x, NULL, NULL, x, NULL, x, 1, 4, 1e-5f),
                     PTC_E_INVAL);
    assert_int_equal(ptc_layernorm_backward_cpu(x, NULL, NULL, x, x, x, NULL, x, 1, 4),
                     PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "mean"));
    assert_int_equal(ptc_layernorm_forward_ref(x, NULL, NULL, x, x, x, SIZE_MAX / 2,
                                               4, 1e-5f), PTC_E_RANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_form),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_backward_finite_differences),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
