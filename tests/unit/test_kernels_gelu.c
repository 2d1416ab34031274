/* GELU (tanh approximation): closed-form values, threaded CPU path against
 * the reference, backward against finite differences in double. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/gelu.h"
#include "kernels/kernels_internal.h"
#include "kernels_test_util.h"

/* Element-wise float evaluation against double: a few ulp. */
#define GELU_ABS 1e-6
#define GELU_REL 1e-5

static double gelu_d(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static int setup(void **state)
{
    (void)state;
    ptc_kernels_set_threads(4); /* threads even on a small machine */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ptc_kernels_set_threads(0);
    return 0;
}

static void test_values(void **state)
{
    (void)state;
    const float x[5] = {0.0f, 1.0f, -1.0f, 10.0f, -10.0f};
    /* gelu(0) = 0; gelu(+-10) = 10 and -0 to float precision;
     * gelu(1) = 0.5 (1 + tanh(0.7978845608 * 1.044715)) = 0.8411919906. */
    const double want[5] = {0.0, 0.8411919906082768, -0.15880800939172324,
                            10.0, 0.0};
    float out[5];
    assert_int_equal(ptc_gelu_forward_ref(out, x, 5), PTC_OK);
    assert_int_equal(kt_compare_d("gelu_ref_values", out, want, 5, 1e-7, 1e-7), 0);
    assert_int_equal(ptc_gelu_forward_cpu(out, x, 5), PTC_OK);
    assert_int_equal(kt_compare_d("gelu_cpu_values", out, want, 5, 1e-7, 1e-6), 0);
    /* gelu'(0) = 0.5 exactly. */
    float d = 0.0f, g = 2.0f, z = 0.0f;
    assert_int_equal(ptc_gelu_backward_ref(&d, &z, &g, 1), PTC_OK);
    assert_true(d == 1.0f);
}

static void test_cpu_matches_ref(void **state)
{
    (void)state;
    const size_t n = 300007; /* odd, several threads' worth */
    kt_rng r = {7};
    float *x = kt_random(n, -6, 6, &r);
    float *dout = kt_random(n, -1, 1, &r);
    float *ref = kt_alloc(n), *cpu = kt_alloc(n);
    assert_int_equal(ptc_gelu_forward_ref(ref, x, n), PTC_OK);
    assert_int_equal(ptc_gelu_forward_cpu(cpu, x, n), PTC_OK);
    assert_int_equal(kt_compare("gelu_forward", cpu, ref, n, GELU_ABS, GELU_REL), 0);

    float *dref = kt_random(n, -1, 1, &r), *dcpu = kt_copy(dref, n);
    assert_int_equal(ptc_gelu_backward_ref(dref, x, dout, n), PTC_OK);
    assert_int_equal(ptc_gelu_backward_cpu(dcpu, x, dout, n), PTC_OK);
    assert_int_equal(kt_compare("gelu_backward", dcpu, dref, n, GELU_ABS, GELU_REL), 0);

    /* In place: out == inp. */
    float *inplace = kt_copy(x, n);
    assert_int_equal(ptc_gelu_forward_cpu(inplace, inplace, n), PTC_OK);
    assert_int_equal(kt_compare_bits("gelu_inplace", inplace, cpu, n), 0);
    free(x); free(dout); free(ref); free(cpu); free(dref); free(dcpu); free(inplace);
}

static void test_backward_finite_differences(void **state)
{
    (void)state;
    enum { N = 41 };
    float x[N], dout[N], dinp[N];
    double fd[N];
    kt_rng r = {11};
    for (int i = 0; i < N; i++) {
        x[i] = -5.0f + 10.0f * (float)i / (N - 1);
        dout[i] = kt_uniform(&r, -2, 2);
        dinp[i] = 0.0f;
        const double h = 1e-5;
        fd[i] = dout[i] * (gelu_d((double)x[i] + h) - gelu_d((double)x[i] - h)) / (2 * h);
    }
    assert_int_equal(ptc_gelu_backward_ref(dinp, x, dout, N), PTC_OK);
    assert_int_equal(kt_compare_d("gelu_fd", dinp, fd, N, 1e-6, 1e-5), 0);
    for (int i = 0; i < N; i++)
        dinp[i] = 0.0f;
    assert_int_equal(ptc_gelu_backward_cpu(dinp, x, dout, N), PTC_OK);
    assert_int_equal(kt_compare_d("gelu_fd_cpu", dinp, fd, N, 1e-6, 1e-5), 0);
}

static void test_errors(void **state)
{
    (void)state;
    float x = 0;
    assert_int_equal(ptc_gelu_forward_cpu(NULL, &x, 1), PTC_E_INVAL);
    assert_int_equal(ptc_gelu_backward_ref(&x, &x, NULL, 1), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "dout"));
    assert_int_equal(ptc_gelu_forward_ref(NULL, NULL, 0), PTC_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_backward_finite_differences),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
