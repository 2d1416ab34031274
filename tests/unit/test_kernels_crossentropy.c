/* Softmax cross-entropy: closed forms, threaded CPU path against the
 * reference, backward against finite differences in double, bad targets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels/crossentropy.h"
#include "kernels/kernels_internal.h"
#include "kernels_test_util.h"

/* Float log-sum-exp over v <= 1001 logits against double. */
#define XENT_ABS 1e-5
#define XENT_REL 1e-5
/* dlogits entries are p * scale: tiny, so the absolute part dominates. */
#define XENT_GRAD_ABS 1e-7
#define XENT_GRAD_REL 1e-4

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

static void test_closed_form(void **state)
{
    (void)state;
    /* Equal logits: loss = log v, p = 1/v. Huge equal logits must not
     * overflow (max shift). Row 2 is ignored (negative target). */
    enum { V = 8 };
    float logits[3 * V];
    for (int j = 0; j < V; j++) {
        logits[j] = 0.5f;
        logits[V + j] = 1e30f;
        logits[2 * V + j] = (float)j;
    }
    const int32_t targets[3] = {3, 7, -1};
    const double want[3] = {log(8.0), log(8.0), 0.0};
    for (int path = 0; path < 2; path++) {
        float losses[3] = {-1, -1, -1};
        int rc = path ? ptc_crossentropy_forward_cpu(losses, logits, targets, 3, V)
                      : ptc_crossentropy_forward_ref(losses, logits, targets, 3, V);
        assert_int_equal(rc, PTC_OK);
        assert_int_equal(kt_compare_d("xent_closed", losses, want, 3, 1e-6, 1e-6), 0);

        float d[3 * V];
        for (int j = 0; j < 3 * V; j++)
            d[j] = 2.0f;
        rc = path ? ptc_crossentropy_backward_cpu(d, logits, targets, 3, V, 0.5f)
                  : ptc_crossentropy_backward_ref(d, logits, targets, 3, V, 0.5f);
        assert_int_equal(rc, PTC_OK);
        /* 2 + 0.5 (1/8 - [j == t]); the ignored row stays 2. */
        for (int j = 0; j < V; j++) {
            assert_float_equal(d[j], 2.0 + 0.5 * (0.125 - (j == 3)), 1e-7);
            assert_float_equal(d[V + j], 2.0 + 0.5 * (0.125 - (j == 7)), 1e-7);
            assert_true(d[2 * V + j] == 2.0f);
        }
    }
}

static void test_cpu_matches_ref(void **state)
{
    (void)state;
    const size_t n = 97, v = 1001;
    kt_rng r = {9};
    float *logits = kt_random(n * v, -8, 8, &r);
    int32_t *targets = malloc(n * sizeof *targets);
    assert_non_null(targets);
    for (size_t i = 0; i < n; i++)
        targets[i] = i % 13 == 5 ? -1 : (int32_t)(kt_next(&r) % v);
    float *l_r = kt_alloc(n), *l_c = kt_alloc(n);
    assert_int_equal(ptc_crossentropy_forward_ref(l_r, logits, targets, n, v), PTC_OK);
    assert_int_equal(ptc_crossentropy_forward_cpu(l_c, logits, targets, n, v), PTC_OK);
    assert_int_equal(kt_compare("xent_loss", l_c, l_r, n, XENT_ABS, XENT_REL), 0);

    float *d_r = kt_random(n * v, -1e-3f, 1e-3f, &r), *d_c = kt_copy(d_r, n * v);
    float *d_0 = kt_copy(d_r, n * v);
    float scale = 1.0f / (float)n;
    assert_int_equal(ptc_crossentropy_backward_ref(d_r, logits, targets, n, v, scale),
                     PTC_OK);
    assert_int_equal(ptc_crossentropy_backward_cpu(d_c, logits, targets, n, v, scale),
                     PTC_OK);
    assert_int_equal(kt_compare("xent_dlogits", d_c, d_r, n * v, XENT_GRAD_ABS,
                                XENT_GRAD_REL), 0);
    /* Each counted row of the gradient sums to 0 (softmax minus one-hot). */
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (size_t j = 0; j < v; j++)
            s += (double)d_c[i * v + j] - (double)d_0[i * v + j];
        assert_true(fabs(s) < 1e-6);
    }
    free(logits); free(targets); free(l_r); free(l_c); free(d_r); free(d_c); free(d_0);
}

/* Sum over rows of scale * loss_i, in double. */
static double xent_loss(const double *l, const int32_t *t, size_t n, size_t v,
                        double scale)
{
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < 0)
            continue;
        double mx = -INFINITY, s = 0;
        for (size_t j = 0; j < v; j++)
            mx = l[i * v + j] > mx ? l[i * v + j] : mx;
        for (size_t j = 0; j < v; j++)
            s += exp(l[i * v + j] - mx);
        total += scale * (mx + log(s) - l[i * v + (size_t)t[i]]);
    }
    return total;
}

static void test_backward_finite_differences(void **state)
{
    (void)state;
    enum { N = 4, V = 6 };
    const int32_t t[N] = {0, 5, -1, 2};
    const double scale = 0.25;
    kt_rng r = {13};
    float l[N * V];
    double ld[N * V], fd[N * V];
    for (int i = 0; i < N * V; i++)
        ld[i] = l[i] = kt_uniform(&r, -3, 3);
    const double h = 1e-5;
    for (int i = 0; i < N * V; i++) {
        double keep = ld[i];
        ld[i] = keep + h;
        double lp = xent_loss(ld, t, N, V, scale);
        ld[i] = keep - h;
        double lm = xent_loss(ld, t, N, V, scale);
        ld[i] = keep;
        fd[i] = (lp - lm) / (2 * h);
    }
    for (int path = 0; path < 2; path++) {
        float d[N * V] = {0};
        int rc = path ? ptc_crossentropy_backward_cpu(d, l, t, N, V, (float)scale)
                      : ptc_crossentropy_backward_ref(d, l, t, N, V, (float)scale);
        assert_int_equal(rc, PTC_OK);
        assert_int_equal(kt_compare_d("xent_fd", d, fd, N * V, 1e-6, 1e-5), 0);
    }
    /* And the forward matches the double loss. */
    float losses[N];
    double total = 0;
    assert_int_equal(ptc_crossentropy_forward_cpu(losses, l, t, N, V), PTC_OK);
    for (int i = 0; i < N; i++)
        total += scale * losses[i];
    assert_true(fabs(total - xent_loss(ld, t, N, V, scale)) < 1e-6);
}

static void test_bad_targets(void **state)
{
    (void)state;
    float logits[2 * 3] = {0};
    const int32_t t[2] = {1, 3};
    float losses[2] = {7, 7};
    assert_int_equal(ptc_crossentropy_forward_cpu(losses, logits, t, 2, 3), PTC_E_RANGE);
    assert_non_null(strstr(ptc_last_error(), "row 1"));
    assert_true(losses[0] == 7.0f && losses[1] == 7.0f); /* untouched */
    float d[6] = {0};
    assert_int_equal(ptc_crossentropy_backward_ref(d, logits, t, 2, 3, 1.0f),
                     PTC_E_RANGE);
    assert_true(d[0] == 0.0f && d[1] == 0.0f);
    assert_int_equal(ptc_crossentropy_forward_ref(losses, NULL, t, 2, 3), PTC_E_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_form),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_backward_finite_differences),
        cmocka_unit_test(test_bad_targets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
