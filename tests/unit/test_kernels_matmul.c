/* Fully connected layer: closed-form case, cblas path against the
 * reference, reference backward against finite differences, errors. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/kernels_internal.h"
#include "kernels/matmul.h"
#include "kernels_test_util.h"

/* F32 GEMM against a double-accumulated reference, inputs in [-1, 1] and
 * K <= 512: observed errors stay below 2e-6 (docs/kernels.md). */
#define MM_ABS 2e-5
#define MM_REL 1e-5

static void test_closed_form(void **state)
{
    (void)state;
    /* inp [2,3], weight [2,3]: out = inp @ weight^T + bias, by hand. */
    const float inp[6] = {1, 2, 3, 4, 5, 6};
    const float w[6] = {1, 0, -1, 2, 1, 0};
    const float bias[2] = {10, -10};
    const float want[4] = {1 - 3 + 10, 2 + 2 - 10, 4 - 6 + 10, 8 + 5 - 10};
    float out[4];
    assert_int_equal(ptc_matmul_forward_ref(out, inp, w, bias, 2, 3, 2), PTC_OK);
    assert_memory_equal(out, want, sizeof want);
    memset(out, 0, sizeof out);
    assert_int_equal(ptc_matmul_forward_cpu(out, inp, w, bias, 2, 3, 2), PTC_OK);
    assert_memory_equal(out, want, sizeof want);

    /* Backward with dout = ones, accumulating onto 1s:
     * dinp[i][k] = 1 + sum_o w[o][k]; dw[o][k] = 1 + sum_i inp[i][k];
     * dbias[o] = 1 + n. */
    const float dout[4] = {1, 1, 1, 1};
    const float want_dinp[6] = {4, 2, 0, 4, 2, 0};
    const float want_dw[6] = {6, 8, 10, 6, 8, 10};
    const float want_db[2] = {3, 3};
    for (int path = 0; path < 2; path++) {
        float dinp[6], dw[6], db[2];
        for (int i = 0; i < 6; i++)
            dinp[i] = dw[i] = 1;
        db[0] = db[1] = 1;
        int rc = path ? ptc_matmul_backward_cpu(dinp, dw, db, dout, inp, w, 2, 3, 2)
                      : ptc_matmul_backward_ref(dinp, dw, db, dout, inp, w, 2, 3, 2);
        assert_int_equal(rc, PTC_OK);
        assert_memory_equal(dinp, want_dinp, sizeof want_dinp);
        assert_memory_equal(dw, want_dw, sizeof want_dw);
        assert_memory_equal(db, want_db, sizeof want_db);
    }
}

static void check_cpu_vs_ref(size_t n, size_t c, size_t oc, bool with_bias,
                             uint64_t seed)
{
    kt_rng r = {seed};
    float *inp = kt_random(n * c, -1, 1, &r);
    float *w = kt_random(oc * c, -1, 1, &r);
    float *bias = with_bias ? kt_random(oc, -1, 1, &r) : NULL;
    float *dout = kt_random(n * oc, -1, 1, &r);
    float *out_ref = kt_alloc(n * oc), *out_cpu = kt_random(n * oc, 5, 6, &r);
    assert_int_equal(ptc_matmul_forward_ref(out_ref, inp, w, bias, n, c, oc), PTC_OK);
    assert_int_equal(ptc_matmul_forward_cpu(out_cpu, inp, w, bias, n, c, oc), PTC_OK);
    assert_int_equal(kt_compare("matmul_forward", out_cpu, out_ref, n * oc,
                                MM_ABS, MM_REL), 0);

    /* Gradients start non-zero to check accumulation. */
    float *dinp_ref = kt_random(n * c, -1, 1, &r), *dinp_cpu = kt_copy(dinp_ref, n * c);
    float *dw_ref = kt_random(oc * c, -1, 1, &r), *dw_cpu = kt_copy(dw_ref, oc * c);
    float *db_ref = kt_random(oc, -1, 1, &r), *db_cpu = kt_copy(db_ref, oc);
    assert_int_equal(ptc_matmul_backward_ref(dinp_ref, dw_ref, db_ref, dout, inp,
                                             w, n, c, oc), PTC_OK);
    assert_int_equal(ptc_matmul_backward_cpu(dinp_cpu, dw_cpu, db_cpu, dout, inp,
                                             w, n, c, oc), PTC_OK);
    assert_int_equal(kt_compare("matmul_dinp", dinp_cpu, dinp_ref, n * c,
                                MM_ABS, MM_REL), 0);
    assert_int_equal(kt_compare("matmul_dweight", dw_cpu, dw_ref, oc * c,
                                MM_ABS, MM_REL), 0);
    assert_int_equal(kt_compare("matmul_dbias", db_cpu, db_ref, oc, MM_ABS,
                                MM_REL), 0);

    /* Skipping gradients leaves the others identical. */
    float *dw_only = kt_alloc(oc * c), *dw_full = kt_alloc(oc * c);
    float *dinp_tmp = kt_alloc(n * c), *db_tmp = kt_alloc(oc);
    assert_int_equal(ptc_matmul_backward_cpu(NULL, dw_only, NULL, dout, inp, NULL,
                                             n, c, oc), PTC_OK);
    assert_int_equal(ptc_matmul_backward_cpu(dinp_tmp, dw_full, db_tmp, dout, inp,
                                             w, n, c, oc), PTC_OK);
    assert_int_equal(kt_compare_bits("matmul_dweight_only", dw_only, dw_full,
                                     oc * c), 0);

    free(inp); free(w); free(bias); free(dout); free(out_ref); free(out_cpu);
    free(dinp_ref); free(dinp_cpu); free(dw_ref); free(dw_cpu); free(db_ref);
    free(db_cpu); free(dw_only); free(dw_full); free(dinp_tmp); free(db_tmp);
}

static void test_cpu_matches_ref(void **state)
{
    (void)state;
    check_cpu_vs_ref(1, 1, 1, true, 1);
    check_cpu_vs_ref(67, 129, 45, true, 2);
    check_cpu_vs_ref(64, 96, 288, false, 3); /* fused-QKV-like 3x width */
    check_cpu_vs_ref(33, 512, 17, true, 4);
}

/* L = sum_{i,o} dout[i][o] * out[i][o], evaluated in double. */
static double mm_loss(const double *inp, const double *w, const double *b,
                      const double *dout, size_t n, size_t c, size_t oc)
{
    double loss = 0.0;
    for (size_t i = 0; i < n; i++)
        for (size_t o = 0; o < oc; o++) {
            double acc = b[o];
            for (size_t k = 0; k < c; k++)
                acc += inp[i * c + k] * w[o * c + k];
            loss += dout[i * oc + o] * acc;
        }
    return loss;
}

static void fd_grad(double *x, size_t len, double *grad, const double *inp,
                    const double *w, const double *b, const double *dout,
                    size_t n, size_t c, size_t oc)
{
    const double h = 1e-4;
    for (size_t i = 0; i < len; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = mm_loss(inp, w, b, dout, n, c, oc);
        x[i] = keep - h;
        double lm = mm_loss(inp, w, b, dout, n, c, oc);
        x[i] = keep;
        grad[i] = (lp - lm) / (2 * h);
    }
}

static void test_backward_finite_differences(void **state)
{
    (void)state;
    enum { N = 3, C = 4, OC = 5 };
    kt_rng r = {42};
    float inp[N * C], w[OC * C], b[OC], dout[N * OC];
    double inp_d[N * C], w_d[OC * C], b_d[OC], dout_d[N * OC];
    for (int i = 0; i < N * C; i++) inp_d[i] = inp[i] = kt_uniform(&r, -1, 1);
    for (int i = 0; i < OC * C; i++) w_d[i] = w[i] = kt_uniform(&r, -1, 1);
    for (int i = 0; i < OC; i++) b_d[i] = b[i] = kt_uniform(&r, -1, 1);
    for (int i = 0; i < N * OC; i++) dout_d[i] = dout[i] = kt_uniform(&r, -1, 1);
    double g_inp[N * C], g_w[OC * C], g_b[OC];
    fd_grad(inp_d, N * C, g_inp, inp_d, w_d, b_d, dout_d, N, C, OC);
    fd_grad(w_d, OC * C, g_w, inp_d, w_d, b_d, dout_d, N, C, OC);
    fd_grad(b_d, OC, g_b, inp_d, w_d, b_d, dout_d, N, C, OC);
    float dinp[N * C] = {0}, dw[OC * C] = {0}, db[OC] = {0};
    assert_int_equal(ptc_matmul_backward_ref(dinp, dw, db, dout, inp, w, N, C, OC),
                     PTC_OK);
    assert_int_equal(kt_compare_d("fd_dinp", dinp, g_inp, N * C, 1e-6, 1e-6), 0);
    assert_int_equal(kt_compare_d("fd_dweight", dw, g_w, OC * C, 1e-6, 1e-6), 0);
    assert_int_equal(kt_compare_d("fd_dbias", db, g_b, OC, 1e-6, 1e-6), 0);
}

static void test_degenerate_sizes(void **state)
{
    (void)state;
    /* c == 0: out is the bias broadcast; BLAS must not be called. */
    const float bias[3] = {1, 2, 3};
    float out[6];
    const float want[6] = {1, 2, 3, 1, 2, 3};
    float dummy = 0;
    assert_int_equal(ptc_matmul_forward_cpu(out, &dummy, &dummy, bias, 2, 0, 3), PTC_OK);
    assert_memory_equal(out, want, sizeof want);
    assert_int_equal(ptc_matmul_forward_ref(out, &dummy, &dummy, NULL, 2, 0, 3), PTC_OK);
    for (int i = 0; i < 6; i++)
        assert_true(out[i] == 0.0f);
    /* n == 0: nothing to do, NULL buffers are fine. */
    assert_int_equal(ptc_matmul_forward_cpu(NULL, NULL, &dummy, NULL, 0, 3, 3), PTC_OK);
    float db[3] = {1, 1, 1};
    assert_int_equal(ptc_matmul_backward_cpu(NULL, NULL, db, NULL, NULL, NULL, 0, 3, 3),
                     PTC_OK);
    assert_true(db[0] == 1.0f && db[2] == 1.0f);
}

static void test_errors(void **state)
{
    (void)state;
    float x[4] = {0};
    assert_int_equal(ptc_matmul_forward_ref(NULL, x, x, NULL, 2, 2, 1), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "out"));
    assert_int_equal(ptc_matmul_forward_cpu(x, x, NULL, NULL, 2, 2, 1), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "weight"));
    assert_int_equal(ptc_matmul_backward_cpu(x, NULL, NULL, x, x, NULL, 2, 2, 1),
                     PTC_E_INVAL);
    assert_int_equal(ptc_matmul_forward_ref(x, x, x, NULL, SIZE_MAX / 2, 4, 1),
                     PTC_E_RANGE);
    /* BLAS takes int sizes: the cblas path refuses what does not fit. */
    assert_int_equal(ptc_matmul_forward_cpu(x, x, x, NULL, (size_t)INT_MAX + 1, 1, 1),
                     PTC_E_RANGE);
    assert_non_null(strstr(ptc_last_error(), "INT_MAX"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_form),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_backward_finite_differences),
        cmocka_unit_test(test_degenerate_sizes),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
