/* ptc suggest's view of the newer schedules (zb-h2, zb-interleaved,
 * looped-bfs, dualpipev, dualpipe): the cost model's extension of long runs
 * matches full simulations, its requirements, and the search tries them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/search.h"

static ptc_cost_model *gpt(void)
{
    ptc_search_spec sp;
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=16,hidden=1024,heads=16,vocab=32000,"
                                                "seq=1024"), PTC_OK);
    ptc_cost_model *m;
    assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
    return m;
}

static ptc_search_job job_of(int64_t B)
{
    ptc_search_job j;
    ptc_search_job_init(&j);
    j.global_batch = B;
    return j;
}

/* M = 96 is costed from two short runs extended; a full simulation of the
 * same schedule agrees (the greedy kinds within 1 %, as in test_search). */
static void test_extension_matches_full_simulation(void **st)
{
    (void)st;
    ptc_cost_model *m = gpt();
    ptc_search_cluster c;
    ptc_search_cluster_init(&c);
    c.gpus = 4;
    c.gpus_per_host = 2;
    struct {
        ptc_sched_kind_id k;
        int V;
        double tol;
    } kinds[] = {{PTC_SCHED_ZBH2, 1, 0.01},     {PTC_SCHED_ZBI, 2, 0.01},
                 {PTC_SCHED_LOOPED_BFS, 2, 1e-9}, {PTC_SCHED_DUALPIPEV, 2, 1e-9},
                 {PTC_SCHED_DUALPIPE, 1, 1e-9}};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        int M = 96;
        ptc_search_job j = job_of(M);
        ptc_search_config g = {1, 1, 4, 0, kinds[i].k, M, 1, kinds[i].V, 0};
        ptc_cost_result r;
        if (ptc_cost_evaluate(m, &c, &j, &g, &r))
            fail_msg("%s: %s", ptc_sched_kind_name(kinds[i].k), ptc_last_error());
        ptc_sched_gen sg = {kinds[i].k, 4, M, kinds[i].V, 1, 1, r.stage_b / r.stage_f,
                            r.stage_w / r.stage_f};
        sg.cost_b = nearbyint(sg.cost_b * 16) / 16;
        sg.cost_w = nearbyint(sg.cost_w * 16) / 16;
        ptc_sched *s;
        assert_int_equal(ptc_sched_generate(&s, &sg), PTC_OK);
        ptc_sched_costs sc;
        ptc_sched_costs_init(&sc);
        sc.f = r.stage_f, sc.b = r.stage_b, sc.w = r.stage_w;
        sc.latency = c.inter_lat;
        sc.bandwidth = c.inter_bw;
        sc.act_bytes = 1024.0 * 1024 * 2;
        ptc_sched_sim *sim;
        assert_int_equal(ptc_sched_simulate(s, &sc, &sim), PTC_OK);
        double want = ptc_sched_sim_makespan(sim), err = fabs(r.makespan - want) / want;
        printf("# %-15s M=%d makespan %.6g, full simulation %.6g (%.2g)\n",
               ptc_sched_kind_name(kinds[i].k), M, r.makespan, want, err);
        if (err > kinds[i].tol)
            fail_msg("%s: extended makespan off by %g", ptc_sched_kind_name(kinds[i].k), err);
        /* looped BFS holds every micro-batch: its memory grows with M */
        if (kinds[i].k == PTC_SCHED_LOOPED_BFS)
            assert_true(fabs(r.peak_activations - M) < 1e-9);
        ptc_sched_sim_destroy(sim);
        ptc_sched_destroy(s);
    }
    ptc_cost_model_destroy(m);
}

static void test_requirements(void **st)
{
    (void)st;
    ptc_cost_model *m = gpt();
    ptc_search_cluster c;
    ptc_search_cluster_init(&c);
    c.gpus = 4;
    struct {
        ptc_sched_kind_id k;
        int pp, dp, M, V;
        const char *needle;
    } bad[] = {
        {PTC_SCHED_DUALPIPEV, 4, 1, 6, 2, "dualpipev needs microbatches >= 2*pp"},
        {PTC_SCHED_DUALPIPEV, 4, 1, 8, 1, "dualpipev has 2 chunks"},
        {PTC_SCHED_DUALPIPE, 4, 1, 7, 1, "dualpipe has 1 chunk and needs an even pp"},
        {PTC_SCHED_ZBI, 4, 1, 8, 1, "zb-interleaved needs chunks >= 2"},
        {PTC_SCHED_LOOPED_BFS, 4, 1, 8, 1, "looped-bfs needs chunks >= 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ptc_search_job j = job_of(bad[i].M);
        ptc_search_config g = {bad[i].dp, 1, bad[i].pp, 0, bad[i].k, bad[i].M, 1, bad[i].V, 0};
        ptc_cost_result r;
        assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_E_CONFIG);
        if (!strstr(ptc_last_error(), bad[i].needle))
            fail_msg("'%s' lacks '%s'", ptc_last_error(), bad[i].needle);
    }
    char buf[128];
    ptc_search_config g = {1, 1, 4, 0, PTC_SCHED_ZBI, 8, 1, 2, 0};
    assert_int_equal(ptc_search_config_format(&g, buf, sizeof buf), PTC_OK);
    assert_string_equal(buf, "dp=1,tp=1,pp=4,zero=0 schedule=zb-interleaved microbatches=8 "
                             "mb_size=1 chunks=2");
    ptc_cost_model_destroy(m);
}

/* The exhaustive search costs every new kind (each appears among the
 * configurations kept when all are kept), and the descent finds a run of
 * them when they are the only kinds allowed and pp = 1 does not fit. */
static void test_search_tries_them(void **st)
{
    (void)st;
    /* one head: no tensor parallelism, pipelines are the way to less memory */
    ptc_search_spec sp;
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=16,hidden=1024,heads=1,vocab=32000,"
                                                "seq=1024"), PTC_OK);
    ptc_cost_model *m;
    assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
    ptc_search_cluster c;
    ptc_search_cluster_init(&c);
    c.gpus = 8;
    c.gpus_per_host = 8;
    c.mem_bytes = 1e15; /* everything fits */
    const ptc_sched_kind_id kinds[] = {PTC_SCHED_ZBH2, PTC_SCHED_ZBI, PTC_SCHED_LOOPED_BFS,
                                       PTC_SCHED_DUALPIPEV, PTC_SCHED_DUALPIPE};
    ptc_search_job j = job_of(64);
    j.no_zero = true;
    ptc_search_opts o;
    ptc_search_opts_init(&o);
    o.exhaustive = true;
    o.top = 1 << 20;
    ptc_search_result *res;
    assert_int_equal(ptc_search_run(&res, m, &c, &j, &o), PTC_OK);
    size_t n = ptc_search_result_count(res);
    double mem_pp1 = INFINITY, mem_dpv = INFINITY;
    for (size_t e = 0; e < n; e++) {
        const ptc_search_entry *x = ptc_search_result_entry(res, e);
        if (x->config.pp == 1)
            mem_pp1 = fmin(mem_pp1, x->cost.mem);
        if (x->config.schedule == PTC_SCHED_DUALPIPEV)
            mem_dpv = fmin(mem_dpv, x->cost.mem);
    }
    assert_true(mem_dpv < mem_pp1);
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        size_t seen = 0;
        for (size_t e = 0; e < n; e++) {
            const ptc_search_config *g = &ptc_search_result_entry(res, e)->config;
            if (g->schedule == kinds[i]) {
                seen++;
                assert_true(g->pp >= 2);
            }
        }
        if (!seen)
            fail_msg("the exhaustive search never tried %s", ptc_sched_kind_name(kinds[i]));
    }
    ptc_search_result_destroy(res);
    /* only dualpipev allowed, memory for pipelines only: the descent finds it */
    j.kinds = 1u << PTC_SCHED_DUALPIPEV;
    o.exhaustive = false;
    o.top = 5;
    c.mem_bytes = (mem_pp1 + mem_dpv) / 2;
    assert_int_equal(ptc_search_run(&res, m, &c, &j, &o), PTC_OK);
    assert_true(ptc_search_result_count(res) > 0);
    const ptc_search_config *g = &ptc_search_result_entry(res, 0)->config;
    if (g->schedule != PTC_SCHED_DUALPIPEV || g->pp < 2)
        fail_msg("best: pp=%d %s", g->pp, ptc_sched_kind_name(g->schedule));
    ptc_search_result_destroy(res);
    ptc_cost_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extension_matches_full_simulation),
        cmocka_unit_test(test_requirements),
        cmocka_unit_test(test_search_tries_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
