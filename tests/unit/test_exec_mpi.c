/* Pipeline runtime: whole steps in one process (MPI singleton): the loss
 * falls, every boundary buffer returns to the pool, timings are ordered,
 * bad arguments are refused. Open MPI's own initialisation leaks, so leak
 * detection is off in this executable (test_exec.c keeps it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "exec/runtime/runtime_internal.h"
#include "ptc/exec_model.h"

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

static ptc_sched *gen(ptc_sched_kind_id kind, int P, int M, int V)
{
    ptc_sched *s = NULL;
    ptc_sched_gen g = {.kind = kind, .ranks = P, .microbatches = M, .chunks = V, .k = 2};
    assert_int_equal(ptc_sched_generate(&s, &g), PTC_OK);
    return s;
}

static int data(void *user, int64_t step, int64_t gmb, int32_t *ids, int32_t *t, int n)
{
    (void)user;
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((step * 31 + gmb * 7 + i * 3) % 11);
        t[i] = (ids[i] + 1) % 11;
    }
    return PTC_OK;
}

static int failing_forward(void *user, int chunk, int mb, const void *in, void *out)
{
    (void)user, (void)chunk, (void)mb, (void)in, (void)out;
    return ptc_error_set(PTC_E_RANGE, "forward failed on purpose");
}

static void test_runtime_single_process(void **state)
{
    (void)state;
    int inited;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init(NULL, NULL);
    ptc_config c;
    ptc_config_init(&c);
    ptc_sched *s = gen(PTC_SCHED_ZBH1, 1, 4, 1);
    ptc_exec_model_cfg m = {.layers = 2, .hidden = 4, .vocab = 11, .tokens = 3, .lr = 1e-2f};
    ptc_exec_model *x;
    assert_int_equal(ptc_exec_model_create(&x, &m, s, 0, 0, 4, data, NULL), PTC_OK);
    ptc_exec_stage fns;
    ptc_exec_model_stage(x, &fns);
    ptc_exec_opts o;
    ptc_exec_opts_init(&o);
    ptc_exec *e;
    assert_int_equal(ptc_exec_create(&e, s, &c, MPI_COMM_WORLD, &fns, &o), PTC_E_INVAL);
    assert_null(e);
    o.act_bytes = ptc_exec_model_act_bytes(&m);
    ptc_config c2;
    assert_int_equal(ptc_config_parse(&c2, "pp=2"), PTC_OK);
    assert_int_equal(ptc_exec_create(&e, s, &c2, MPI_COMM_WORLD, &fns, &o), PTC_E_INVAL);
    o.timeout = 30;
    assert_int_equal(ptc_exec_create(&e, s, &c, MPI_COMM_WORLD, &fns, &o), PTC_OK);
    double first = 0, last = 0;
    for (int k = 0; k < 20; k++) {
        ptc_exec_model_set_step(x, 0); /* the same batch: the loss must fall */
        int rc = ptc_exec_step(e);
        if (rc != PTC_OK)
            print_error("step: %s\n", ptc_last_error());
        assert_int_equal(rc, PTC_OK);
        int nl;
        const double *l = ptc_exec_model_losses(x, &nl);
        double sum = 0;
        for (int i = 0; i < nl; i++)
            sum += l[i];
        if (k == 0)
            first = sum;
        last = sum;
        assert_int_equal(e->in_use, 0); /* every boundary buffer back in the pool */
    }
    assert_true(last < first * 0.9);
    size_t n;
    const ptc_exec_timing *t = ptc_exec_timings(e, &n);
    assert_int_equal(n, 12); /* F, I, W for 4 micro-batches, no communication */
    for (size_t i = 0; i < n; i++) {
        assert_true(t[i].end >= t[i].start);
        if (i)
            assert_true(t[i].start >= t[i - 1].end);
    }
    ptc_exec_stats st;
    ptc_exec_get_stats(e, &st);
    assert_int_equal(st.messages, 0);
    assert_true(st.step_seconds >= st.actions_seconds);
    ptc_exec_destroy(e);

    /* a failing callback fails the step, and the executor refuses more */
    fns.forward = failing_forward;
    assert_int_equal(ptc_exec_create(&e, s, &c, MPI_COMM_WORLD, &fns, &o), PTC_OK);
    assert_int_equal(ptc_exec_step(e), PTC_E_RANGE);
    assert_int_equal(ptc_exec_step(e), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "previous step"));
    ptc_exec_destroy(e);
    ptc_exec_model_destroy(x);
    ptc_sched_destroy(s);
    ptc_exec_destroy(NULL);
    ptc_exec_nccl_comm_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_runtime_single_process)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited)
        MPI_Finalize();
    return rc;
}
