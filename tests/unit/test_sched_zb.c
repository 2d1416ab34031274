/* The newer generators (zb-h2, zb-interleaved, looped-bfs, dualpipev,
 * dualpipe), the link-aware planning of the zero-bubble family and the
 * compaction of an order for the links. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/sched.h"

static ptc_sched *gen_costed(ptc_sched_kind_id kind, int P, int M, int V, double w, double lat)
{
    ptc_sched_gen g = {kind, P, M, V, 1, 1, 2, w};
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.w = w;
    c.latency = lat;
    ptc_sched *s = NULL;
    int rc = ptc_sched_generate_costed(&s, &g, &c);
    if (rc)
        fail_msg("generate %s P=%d M=%d V=%d latency %g: %s", ptc_sched_kind_name(kind), P, M,
                 V, lat, ptc_last_error());
    return s;
}

static ptc_sched *gen(ptc_sched_kind_id kind, int P, int M, int V, double w)
{
    return gen_costed(kind, P, M, V, w, 0);
}

typedef struct figs {
    double makespan, peak[16];
} figs;

static figs sim(const ptc_sched *s, double w, double lat)
{
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.w = w;
    c.latency = lat;
    ptc_sched_sim *x = NULL;
    if (ptc_sched_simulate(s, &c, &x))
        fail_msg("simulate: %s", ptc_last_error());
    figs f = {ptc_sched_sim_makespan(x), {0}};
    for (int r = 0; r < ptc_sched_ranks(s) && r < 16; r++)
        f.peak[r] = ptc_sched_sim_peak(x, r);
    ptc_sched_sim_destroy(x);
    return f;
}

static void assert_close(double got, double want, const char *what)
{
    if (fabs(got - want) > 1e-9 * fmax(1, fabs(want)))
        fail_msg("%s: got %.12g, want %.12g", what, got, want);
}

static void valid_and_roundtrip(ptc_sched *s, const char *what)
{
    ptc_sched_report rep;
    if (ptc_sched_validate(s, &rep))
        fail_msg("%s: %s", what, rep.message);
    ptc_sched_report_clear(&rep);
    char *t;
    size_t n;
    assert_int_equal(ptc_sched_format(s, &t, &n), PTC_OK);
    ptc_sched *p;
    assert_int_equal(ptc_sched_parse(&p, t, n), PTC_OK);
    assert_true(ptc_sched_equal(s, p));
    ptc_sched_destroy(p);
    ptc_sched_text_free(t);
    ptc_sched *c;
    assert_int_equal(ptc_sched_clone(&c, s), PTC_OK);
    assert_int_equal(ptc_sched_infer_comm(c), PTC_OK);
    assert_int_equal(ptc_sched_validate(c, NULL), PTC_OK);
    ptc_sched_destroy(c);
}

/* Each stage of @p s sees the micro-batches of its pipe in increasing
 * order for F, for B/I and for W: weight gradients add up in 1F1B's order. */
static void assert_stage_order(const ptc_sched *s, const char *what)
{
    int S = ptc_sched_stages(s), GS = S * ptc_sched_pipes(s);
    int *last = malloc((size_t)GS * 3 * sizeof(int));
    for (int i = 0; i < GS * 3; i++)
        last[i] = -1;
    for (int r = 0; r < ptc_sched_ranks(s); r++) {
        size_t n;
        const ptc_sched_action *a = ptc_sched_actions(s, r, &n);
        for (size_t i = 0; i < n; i++) {
            int pipe, st;
            assert_int_equal(ptc_sched_stage_of(s, r, a[i].chunk, &pipe, &st), PTC_OK);
            int cls = a[i].op == PTC_SCHED_F ? 0 : a[i].op == PTC_SCHED_W ? 2 : 1;
            int *l = &last[(pipe * S + st) * 3 + cls];
            if (a[i].mb <= *l)
                fail_msg("%s: rank %d step %zu: micro-batch %d after %d on its stage", what, r,
                         i, a[i].mb, *l);
            *l = a[i].mb;
        }
    }
    free(last);
}

static void test_new_kinds_validate(void **st)
{
    (void)st;
    const ptc_sched_kind_id kinds[] = {PTC_SCHED_ZBH2, PTC_SCHED_ZBI, PTC_SCHED_LOOPED_BFS,
                                       PTC_SCHED_DUALPIPEV, PTC_SCHED_DUALPIPE};
    int cases = 0;
    for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++)
        for (int P = 1; P <= 6; P++)
            for (int M = 1; M <= 14; M += (M < 4 ? 1 : 3))
                for (int V = 1; V <= 3; V++)
                    for (int lat = 0; lat <= 1; lat++) {
                        ptc_sched_kind_id k = kinds[ki];
                        bool looped = k == PTC_SCHED_ZBI || k == PTC_SCHED_LOOPED_BFS;
                        if (!looped && V > 1)
                            continue;
                        if (k == PTC_SCHED_DUALPIPEV && M < 2 * P)
                            continue;
                        if (k == PTC_SCHED_DUALPIPE && (P % 2 || M % 2 || M < 2 * P))
                            continue;
                        ptc_sched *s = gen_costed(k, P, M, V, 1, lat);
                        char what[96];
                        snprintf(what, sizeof what, "%s P=%d M=%d V=%d latency %d",
                                 ptc_sched_kind_name(k), P, M, V, lat);
                        valid_and_roundtrip(s, what);
                        assert_stage_order(s, what);
                        assert_string_equal(ptc_sched_kind(s), ptc_sched_kind_name(k));
                        ptc_sched_destroy(s);
                        cases++;
                    }
    assert_true(cases > 250);
}

static void test_requirements(void **st)
{
    (void)st;
    struct {
        ptc_sched_kind_id k;
        int P, M;
        const char *needle;
    } bad[] = {
        {PTC_SCHED_DUALPIPEV, 4, 7, "dualpipev needs microbatches (7) >= 2 * stages (8)"},
        {PTC_SCHED_DUALPIPE, 3, 12, "dualpipe needs an even number of stages (3)"},
        {PTC_SCHED_DUALPIPE, 4, 9, "even number of microbatches (9)"},
        {PTC_SCHED_DUALPIPE, 4, 6, ">= 2 * stages"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ptc_sched_gen g = {bad[i].k, bad[i].P, bad[i].M, 1, 1, 0, 0, 0};
        ptc_sched *s = (ptc_sched *)1;
        assert_int_equal(ptc_sched_generate(&s, &g), PTC_E_INVAL);
        assert_null(s);
        if (!strstr(ptc_last_error(), bad[i].needle))
            fail_msg("'%s' lacks '%s'", ptc_last_error(), bad[i].needle);
    }
    ptc_sched_kind_id k;
    const char *names[] = {"zb-h2", "zb-interleaved", "looped-bfs", "dualpipev", "dualpipe"};
    const ptc_sched_kind_id ids[] = {PTC_SCHED_ZBH2, PTC_SCHED_ZBI, PTC_SCHED_LOOPED_BFS,
                                     PTC_SCHED_DUALPIPEV, PTC_SCHED_DUALPIPE};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(ptc_sched_kind_parse(names[i], &k), PTC_OK);
        assert_int_equal(k, ids[i]);
        assert_string_equal(ptc_sched_kind_name(k), names[i]);
    }
    /* bad costs for planning */
    ptc_sched_gen g = {PTC_SCHED_ZBV, 2, 4, 2, 1, 0, 0, 0};
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.latency = -1;
    ptc_sched *s = (ptc_sched *)1;
    assert_int_equal(ptc_sched_generate_costed(&s, &g, &c), PTC_E_INVAL);
    assert_null(s);
}

/* F=1, B=2: the simulator's figures of the fixed-structure kinds. */
static void test_closed_forms(void **st)
{
    (void)st;
    for (int P = 1; P <= 8; P++) {
        /* looped BFS: as interleaved 1F1B's time, GPipe's memory (M >= P) */
        for (int V = 1; V <= 4; V++)
            for (int M = P; M <= 3 * P; M++) {
                ptc_sched *s = gen(PTC_SCHED_LOOPED_BFS, P, M, V, 0);
                figs f = sim(s, 0, 0);
                assert_close(f.makespan, (M + (double)(P - 1) / V) * 3, "looped-bfs makespan");
                for (int r = 0; r < P; r++)
                    assert_close(f.peak[r], M, "looped-bfs peak");
                ptc_sched_destroy(s);
            }
        /* ZB-H2 reaches M(F+B) + (P-1)F, the time the first forward needs
         * to reach the last rank: with W = I for M >= P, with W = B/4 for
         * M >= 3P-2; never slower than ZB-H1, holding 2(P-i)-1 on rank i */
        for (int M = P; M <= 4 * P; M++)
            for (int wi = 0; wi < 2; wi++) {
                double w = wi ? 1 : 0.5;
                ptc_sched *h2 = gen(PTC_SCHED_ZBH2, P, M, 1, w);
                ptc_sched *h1 = gen(PTC_SCHED_ZBH1, P, M, 1, w);
                figs f2 = sim(h2, w, 0), f1 = sim(h1, w, 0);
                if (w == 1 || M >= 3 * P - 2)
                    assert_close(f2.makespan, M * 3.0 + (P - 1), "zb-h2 makespan");
                assert_true(f2.makespan <= f1.makespan + 1e-9);
                for (int r = 0; r < P; r++)
                    assert_true(f2.peak[r] <= 2 * (P - r) - 1);
                ptc_sched_destroy(h2);
                ptc_sched_destroy(h1);
            }
        /* ZB-V and DualPipeV (W = I): M(F+B) + (P-1)F/2 for M >= 2P; ZB-V
         * holds P whole stages, DualPipeV one half more */
        for (int M = 2 * P; M <= 4 * P; M++) {
            ptc_sched *z = gen(PTC_SCHED_ZBV, P, M, 2, 1);
            ptc_sched *d = gen(PTC_SCHED_DUALPIPEV, P, M, 2, 1);
            figs fz = sim(z, 1, 0), fd = sim(d, 1, 0);
            assert_close(fz.makespan, M * 3.0 + (P - 1) * 0.5, "zb-v makespan");
            assert_close(fd.makespan, M * 3.0 + (P - 1) * 0.5, "dualpipev makespan");
            for (int r = 0; r < P; r++) {
                assert_true(fz.peak[r] <= P);
                assert_true(fd.peak[r] <= P + 0.5);
            }
            ptc_sched_destroy(z);
            ptc_sched_destroy(d);
        }
    }
    /* DualPipe on P ranks is DualPipeV on P/2 folded out: twice its time */
    for (int P = 2; P <= 8; P += 2)
        for (int M = 2 * P; M <= 4 * P; M += 2) {
            ptc_sched *d2 = gen(PTC_SCHED_DUALPIPE, P, M, 1, 1);
            ptc_sched *dv = gen(PTC_SCHED_DUALPIPEV, P / 2, M / 2, 2, 1);
            assert_int_equal(ptc_sched_pipes(d2), 2);
            assert_close(sim(d2, 1, 0).makespan, 2 * sim(dv, 1, 0).makespan, "dualpipe");
            ptc_sched_destroy(d2);
            ptc_sched_destroy(dv);
        }
}

/* Interleaved zero bubble: interleaved 1F1B's memory less one hop per rank,
 * never slower than interleaved 1F1B. */
static void test_zb_interleaved(void **st)
{
    (void)st;
    for (int P = 2; P <= 8; P += 2)
        for (int V = 1; V <= 3; V++)
            for (int M = P; M <= 4 * P; M += P) {
                ptc_sched *z = gen(PTC_SCHED_ZBI, P, M, V, 1);
                ptc_sched *i = gen(PTC_SCHED_INTERLEAVED, P, M, V, 1);
                figs fz = sim(z, 1, 0), fi = sim(i, 1, 0);
                assert_true(fz.makespan <= fi.makespan + 1e-9);
                for (int r = 0; r < P; r++)
                    assert_true(fz.peak[r] <= ((V - 1) * P + P - r) / (double)V + 1e-9);
                ptc_sched_destroy(z);
                ptc_sched_destroy(i);
            }
}

/* The activation cap of rank r (whole stages) each kind keeps. */
static double cap_of(ptc_sched_kind_id k, int P, int V, int r)
{
    switch (k) {
    case PTC_SCHED_ZBH1: return P - r;
    case PTC_SCHED_ZBH2: return 2 * (P - r) - 1;
    case PTC_SCHED_ZBV: return P;
    case PTC_SCHED_ZBI: return ((V - 1) * P + P - r) / (double)V;
    case PTC_SCHED_DUALPIPEV: return P + 0.5;
    default: return P; /* chimera */
    }
}

/* Planned for the links: never slower than the free-links order under the
 * same links, within the kind's memory, and for zb-v not slower than
 * DualPipeV's fixed order either. */
static void test_planned_for_links(void **st)
{
    (void)st;
    const double lats[] = {0.25, 0.5, 1, 2};
    const ptc_sched_kind_id kinds[] = {PTC_SCHED_ZBH1, PTC_SCHED_ZBH2, PTC_SCHED_ZBV,
                                       PTC_SCHED_ZBI, PTC_SCHED_DUALPIPEV, PTC_SCHED_CHIMERA};
    for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++)
        for (int P = 4; P <= 8; P += 4)
            for (int M = 2 * P; M <= 4 * P; M += 2 * P)
                for (size_t li = 0; li < 4; li++) {
                    ptc_sched_kind_id k = kinds[ki];
                    int V = k == PTC_SCHED_ZBV || k == PTC_SCHED_DUALPIPEV || k == PTC_SCHED_ZBI
                                ? 2
                                : 1;
                    ptc_sched *plain = gen(k, P, M, V, 1);
                    ptc_sched *lin = gen_costed(k, P, M, V, 1, lats[li]);
                    figs fp = sim(plain, 1, lats[li]), fl = sim(lin, 1, lats[li]);
                    if (fl.makespan > fp.makespan + 1e-9)
                        fail_msg("%s P=%d M=%d latency %g: planned %g, free-links order %g",
                                 ptc_sched_kind_name(k), P, M, lats[li], fl.makespan,
                                 fp.makespan);
                    for (int r = 0; r < P; r++)
                        if (fl.peak[r] > cap_of(k, P, V, r) + 1e-9)
                            fail_msg("%s P=%d M=%d latency %g: rank %d holds %g, cap %g",
                                     ptc_sched_kind_name(k), P, M, lats[li], r, fl.peak[r],
                                     cap_of(k, P, V, r));
                    if (k == PTC_SCHED_ZBV) {
                        ptc_sched *dv = gen(PTC_SCHED_DUALPIPEV, P, M, 2, 1);
                        assert_true(fl.makespan <= sim(dv, 1, lats[li]).makespan + 1e-9);
                        for (int r = 0; r < P; r++)
                            assert_true(fl.peak[r] <= P);
                        ptc_sched_destroy(dv);
                    }
                    ptc_sched_destroy(plain);
                    ptc_sched_destroy(lin);
                }
    /* the figure of the report: P=8, M=16, latency = one forward. The order
     * made without the links took 108.5 there; torch 2.15's ZBV 89.5. */
    ptc_sched *z = gen_costed(PTC_SCHED_ZBV, 8, 16, 2, 1, 1);
    double t = sim(z, 1, 1).makespan;
    if (!(t <= 89.5))
        fail_msg("zb-v P=8 M=16 latency 1: %g", t);
    assert_string_equal(ptc_sched_kind(z), "zb-v");
    assert_stage_order(z, "zb-v planned for latency 1");
    ptc_sched_destroy(z);
}

/* Compaction keeps a rank's own peak and the stage order, and does not lose
 * against the order it starts from: DualPipeV's fixed phases, re-timed. */
static void test_compaction(void **st)
{
    (void)st;
    for (int P = 2; P <= 8; P += 2)
        for (int li = 1; li <= 4; li++) {
            double lat = li * 0.5;
            ptc_sched *fixed = gen(PTC_SCHED_DUALPIPEV, P, 2 * P + 4, 2, 1);
            ptc_sched *lin = gen_costed(PTC_SCHED_DUALPIPEV, P, 2 * P + 4, 2, 1, lat);
            figs ff = sim(fixed, 1, lat), fl = sim(lin, 1, lat);
            assert_true(fl.makespan <= ff.makespan + 1e-9);
            for (int r = 0; r < P; r++)
                assert_true(fl.peak[r] <= ff.peak[r] + 1e-9);
            assert_stage_order(lin, "dualpipev compacted");
            valid_and_roundtrip(lin, "dualpipev compacted");
            ptc_sched_destroy(fixed);
            ptc_sched_destroy(lin);
        }
    /* with latency 1 the compaction is strictly shorter at P=4, M=16 */
    ptc_sched *fixed = gen(PTC_SCHED_DUALPIPEV, 4, 16, 2, 1);
    ptc_sched *lin = gen_costed(PTC_SCHED_DUALPIPEV, 4, 16, 2, 1, 1);
    assert_true(sim(lin, 1, 1).makespan < sim(fixed, 1, 1).makespan);
    ptc_sched_destroy(fixed);
    ptc_sched_destroy(lin);
}

/* Every allocation of the planning paths fails in turn without leaks. */
static void test_alloc_failures(void **st)
{
    (void)st;
    const ptc_sched_kind_id kinds[] = {PTC_SCHED_ZBV, PTC_SCHED_DUALPIPEV, PTC_SCHED_ZBI};
    for (size_t ki = 0; ki < 3; ki++)
        for (long n = 1;; n++) {
            ptc_sched_gen g = {kinds[ki], 2, 4, 2, 1, 1, 2, 1};
            ptc_sched_costs c;
            ptc_sched_costs_init(&c);
            c.latency = 0.5;
            c.w = 1;
            ptc_fault_alloc_at(n);
            ptc_sched *s = NULL;
            int rc = ptc_sched_generate_costed(&s, &g, &c);
            long used = ptc_fault_alloc_count();
            ptc_fault_alloc_at(0);
            if (rc == PTC_OK) {
                assert_true(n > used);
                assert_int_equal(ptc_sched_validate(s, NULL), PTC_OK);
                ptc_sched_destroy(s);
                break;
            }
            assert_int_equal(rc, PTC_E_NOMEM);
            assert_null(s);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_kinds_validate),
        cmocka_unit_test(test_requirements),
        cmocka_unit_test(test_closed_forms),
        cmocka_unit_test(test_zb_interleaved),
        cmocka_unit_test(test_planned_for_links),
        cmocka_unit_test(test_compaction),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
