/* Schedule IR, text format, generators, validator and simulator. */
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

static ptc_sched *gen(ptc_sched_kind_id kind, int P, int M, int V, int k)
{
    ptc_sched_gen g = {kind, P, M, V, k, 1, 2, 1};
    ptc_sched *s = NULL;
    int rc = ptc_sched_generate(&s, &g);
    if (rc)
        fail_msg("generate %s P=%d M=%d V=%d k=%d: %s", ptc_sched_kind_name(kind), P, M, V, k,
                 ptc_last_error());
    return s;
}

static ptc_sched_sim *sim_of(const ptc_sched *s, double f, double b, double w, double lat)
{
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.f = f;
    c.b = b;
    c.w = w;
    c.latency = lat;
    ptc_sched_sim *sim = NULL;
    int rc = ptc_sched_simulate(s, &c, &sim);
    if (rc)
        fail_msg("simulate: %s", ptc_last_error());
    return sim;
}

static double worst_peak(const ptc_sched_sim *sim, int P)
{
    double p = 0;
    for (int r = 0; r < P; r++)
        p = fmax(p, ptc_sched_sim_peak(sim, r));
    return p;
}

static void assert_close(double got, double want)
{
    if (fabs(got - want) > 1e-9 * fmax(1, fabs(want)))
        fail_msg("got %.12g, want %.12g", got, want);
}

/* parse(print(x)) == x, with and without inferred communication. */
static void roundtrip(const ptc_sched *s)
{
    char *t;
    size_t n;
    assert_int_equal(ptc_sched_format(s, &t, &n), PTC_OK);
    assert_int_equal(strlen(t), n);
    ptc_sched *p;
    int rc = ptc_sched_parse(&p, t, n);
    if (rc)
        fail_msg("parse of printed schedule: %s", ptc_last_error());
    assert_true(ptc_sched_equal(s, p));
    ptc_sched_destroy(p);
    ptc_sched_text_free(t);
}

static const ptc_sched_kind_id all_kinds[] = {PTC_SCHED_GPIPE, PTC_SCHED_1F1B,
                                              PTC_SCHED_INTERLEAVED, PTC_SCHED_KFKB,
                                              PTC_SCHED_CHIMERA, PTC_SCHED_ZBH1, PTC_SCHED_ZBV};

/* Every generator, many (P, M, V, k): validates, round-trips in text with
 * and without explicit communication, and the explicit form validates too. */
static void test_generators_validate(void **st)
{
    (void)st;
    int cases = 0;
    for (size_t ki = 0; ki < sizeof all_kinds / sizeof *all_kinds; ki++)
        for (int P = 1; P <= 6; P++)
            for (int M = 1; M <= 13; M += (M < 4 ? 1 : 3)) {
                ptc_sched_kind_id kind = all_kinds[ki];
                if (kind == PTC_SCHED_CHIMERA && P < 2)
                    continue;
                int vmax = kind == PTC_SCHED_INTERLEAVED ? 3 : 1;
                int kmax = kind == PTC_SCHED_KFKB ? M : 1;
                for (int V = 1; V <= vmax; V++)
                    for (int k = 1; k <= kmax; k++) {
                        if (kind == PTC_SCHED_INTERLEAVED && M % P)
                            continue;
                        ptc_sched *s = gen(kind, P, M, V, k);
                        ptc_sched_report rep;
                        int rc = ptc_sched_validate(s, &rep);
                        if (rc)
                            fail_msg("%s P=%d M=%d V=%d k=%d: %s", ptc_sched_kind_name(kind), P,
                                     M, V, k, rep.message);
                        ptc_sched_report_clear(&rep);
                        roundtrip(s);
                        ptc_sched *c;
                        assert_int_equal(ptc_sched_clone(&c, s), PTC_OK);
                        assert_int_equal(ptc_sched_infer_comm(c), PTC_OK);
                        assert_true(P == 1 || ptc_sched_has_comm(c));
                        assert_int_equal(ptc_sched_validate(c, NULL), PTC_OK);
                        roundtrip(c);
                        ptc_sched_destroy(c);
                        ptc_sched_destroy(s);
                        cases++;
                    }
            }
    assert_true(cases > 300);
}

static void test_gpipe_1f1b_closed_forms(void **st)
{
    (void)st;
    double F = 1, B = 2;
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 20; M += 3) {
            ptc_sched *g = gen(PTC_SCHED_GPIPE, P, M, 1, 1), *o = gen(PTC_SCHED_1F1B, P, M, 1, 1);
            ptc_sched_sim *sg = sim_of(g, F, B, 0, 0), *so = sim_of(o, F, B, 0, 0);
            assert_close(ptc_sched_sim_makespan(sg), (M + P - 1) * (F + B));
            assert_close(ptc_sched_sim_makespan(so), (M + P - 1) * (F + B));
            assert_close(ptc_sched_sim_bubble(sg), (double)(P - 1) / (M + P - 1));
            assert_close(ptc_sched_sim_bubble(so), (double)(P - 1) / (M + P - 1));
            for (int i = 0; i < P; i++) {
                assert_true(ptc_sched_sim_peak(sg, i) == M);
                assert_true(ptc_sched_sim_peak(so, i) == (P - i < M ? P - i : M));
            }
            ptc_sched_sim_destroy(sg);
            ptc_sched_sim_destroy(so);
            ptc_sched_destroy(g);
            ptc_sched_destroy(o);
        }
    /* Other costs: F=3, B=5. */
    ptc_sched *o = gen(PTC_SCHED_1F1B, 5, 9, 1, 1);
    ptc_sched_sim *so = sim_of(o, 3, 5, 0, 0);
    assert_close(ptc_sched_sim_makespan(so), (9 + 5 - 1) * 8.0);
    ptc_sched_sim_destroy(so);
    ptc_sched_destroy(o);
}

static void test_kfkb_extremes(void **st)
{
    (void)st;
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 9; M++) {
            ptc_sched *k1 = gen(PTC_SCHED_KFKB, P, M, 1, 1), *o = gen(PTC_SCHED_1F1B, P, M, 1, 1);
            ptc_sched *km = gen(PTC_SCHED_KFKB, P, M, 1, M), *g = gen(PTC_SCHED_GPIPE, P, M, 1, 1);
            for (int r = 0; r < P; r++) {
                size_t n1, n2, n3, n4;
                const ptc_sched_action *a1 = ptc_sched_actions(k1, r, &n1);
                const ptc_sched_action *a2 = ptc_sched_actions(o, r, &n2);
                const ptc_sched_action *a3 = ptc_sched_actions(km, r, &n3);
                const ptc_sched_action *a4 = ptc_sched_actions(g, r, &n4);
                assert_int_equal(n1, n2);
                assert_int_equal(n3, n4);
                assert_memory_equal(a1, a2, n1 * sizeof *a1);
                assert_memory_equal(a3, a4, n3 * sizeof *a3);
            }
            assert_int_equal(ptc_sched_k(km), M);
            ptc_sched_destroy(k1);
            ptc_sched_destroy(o);
            ptc_sched_destroy(km);
            ptc_sched_destroy(g);
        }
}

static void test_interleaved_closed_form(void **st)
{
    (void)st;
    double F = 1, B = 2;
    for (int P = 1; P <= 8; P++)
        for (int V = 1; V <= 4; V++)
            for (int M = P; M <= 4 * P; M += P) {
                ptc_sched *s = gen(PTC_SCHED_INTERLEAVED, P, M, V, 1);
                ptc_sched_sim *sim = sim_of(s, F, B, 0, 0);
                assert_close(ptc_sched_sim_makespan(sim), M * (F + B) + (P - 1) * (F + B) / V);
                assert_close(ptc_sched_sim_bubble(sim), (double)(P - 1) / (V * M + P - 1));
                ptc_sched_sim_destroy(sim);
                ptc_sched_destroy(s);
            }
    /* Exactly (binary fractions) for V = 2 and 4. */
    ptc_sched *s = gen(PTC_SCHED_INTERLEAVED, 4, 8, 4, 1);
    ptc_sched_sim *sim = sim_of(s, 1, 2, 0, 0);
    assert_true(ptc_sched_sim_makespan(sim) == 8 * 3.0 + 3 * 3.0 / 4);
    ptc_sched_sim_destroy(sim);
    ptc_sched_destroy(s);
}

static void test_zbh1_closed_form(void **st)
{
    (void)st;
    /* F=1, B=2, W=1: bubble (P-1)*1 per rank. Also W=0.5 (W <= F). */
    const double ws[] = {1, 0.5};
    for (size_t wi = 0; wi < 2; wi++)
        for (int P = 1; P <= 8; P++)
            for (int M = P; M <= 3 * P + 2; M++) {
                ptc_sched_gen g = {PTC_SCHED_ZBH1, P, M, 1, 1, 1, 2, ws[wi]};
                ptc_sched *s;
                assert_int_equal(ptc_sched_generate(&s, &g), PTC_OK);
                ptc_sched_sim *sim = sim_of(s, 1, 2, ws[wi], 0);
                double mk = M * 3.0 + (P - 1) * (3 - 2 * ws[wi]);
                assert_close(ptc_sched_sim_makespan(sim), mk);
                for (int r = 0; r < P; r++) /* F + I + W = F + B per micro-batch */
                    assert_close(ptc_sched_sim_busy(sim, r), M * 3.0);
                assert_close(ptc_sched_sim_bubble(sim), 1 - M * 3.0 / mk);
                ptc_sched_sim *o = sim_of(s, 1, 2, ws[wi], 0);
                for (int r = 0; r < P; r++) /* memory as 1F1B */
                    assert_true(ptc_sched_sim_peak(o, r) <= P - r);
                ptc_sched_sim_destroy(o);
                ptc_sched_sim_destroy(sim);
                ptc_sched_destroy(s);
            }
}

static void test_chimera_beats_1f1b(void **st)
{
    (void)st;
    for (int P = 4; P <= 8; P += 2)
        for (int M = P; M <= 4 * P; M += P) {
            ptc_sched *c = gen(PTC_SCHED_CHIMERA, P, M, 1, 1), *o = gen(PTC_SCHED_1F1B, P, M, 1, 1);
            assert_int_equal(ptc_sched_pipes(c), 2);
            int pipe, stage;
            /* bidirectional placement: rank i holds stage i of pipe 0 and
             * stage P-1-i of pipe 1 */
            for (int i = 0; i < P; i++) {
                assert_int_equal(ptc_sched_stage_of(c, i, 1, &pipe, &stage), PTC_OK);
                assert_int_equal(pipe, 1);
                assert_int_equal(stage, P - 1 - i);
            }
            ptc_sched_sim *sc = sim_of(c, 1, 2, 0, 0), *so = sim_of(o, 1, 2, 0, 0);
            if (!(ptc_sched_sim_bubble(sc) < ptc_sched_sim_bubble(so)))
                fail_msg("P=%d M=%d chimera bubble %g vs 1f1b %g", P, M,
                         ptc_sched_sim_bubble(sc), ptc_sched_sim_bubble(so));
            assert_true(worst_peak(sc, P) <= worst_peak(so, P));
            ptc_sched_sim_destroy(sc);
            ptc_sched_sim_destroy(so);
            ptc_sched_destroy(c);
            ptc_sched_destroy(o);
        }
}

static void test_zbv_layout_and_memory(void **st)
{
    (void)st;
    ptc_sched *s = gen(PTC_SCHED_ZBV, 4, 16, 2, 1);
    int rank, chunk;
    assert_int_equal(ptc_sched_rank_of(s, 0, 7, &rank, &chunk), PTC_OK); /* V shape */
    assert_int_equal(rank, 0);
    assert_int_equal(chunk, 1);
    assert_int_equal(ptc_sched_rank_of(s, 0, 4, &rank, &chunk), PTC_OK);
    assert_int_equal(rank, 3);
    ptc_sched_sim *z = sim_of(s, 1, 2, 1, 0);
    ptc_sched *o = gen(PTC_SCHED_1F1B, 4, 16, 1, 1);
    ptc_sched_sim *so = sim_of(o, 1, 2, 1, 0);
    assert_true(ptc_sched_sim_bubble(z) < ptc_sched_sim_bubble(so));
    assert_true(worst_peak(z, 4) <= worst_peak(so, 4));
    ptc_sched_sim_destroy(z);
    ptc_sched_sim_destroy(so);
    ptc_sched_destroy(s);
    ptc_sched_destroy(o);
}

static void test_adaptive_kfkb(void **st)
{
    (void)st;
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    for (int P = 2; P <= 8; P *= 2) {
        int M = 4 * P;
        ptc_sched *o = gen(PTC_SCHED_1F1B, P, M, 1, 1);
        /* free links: not worse than 1F1B */
        c.latency = 0;
        ptc_sched_adaptive a = {P, M, 0, 0, 0, 0};
        ptc_sched *s;
        assert_int_equal(ptc_sched_adapt_kfkb(&s, &a, &c), PTC_OK);
        ptc_sched_sim *so = sim_of(o, 1, 2, 0, 0);
        assert_true(a.makespan <= ptc_sched_sim_makespan(so) + 1e-9);
        ptc_sched_sim_destroy(so);
        ptc_sched_destroy(s);
        /* slow links (latency 2 forwards): k > 1 and strictly better */
        c.latency = 2;
        ptc_sched_adaptive b = {P, M, 0, 0, 0, 0};
        assert_int_equal(ptc_sched_adapt_kfkb(&s, &b, &c), PTC_OK);
        assert_true(b.chosen_k > 1);
        assert_int_equal(ptc_sched_k(s), b.chosen_k);
        so = sim_of(o, 1, 2, 0, 2);
        assert_true(b.makespan < ptc_sched_sim_makespan(so));
        ptc_sched_sim_destroy(so);
        ptc_sched_destroy(s);
        /* a memory limit of P: k = 1 only (kFkB k>1 holds more on rank 0) */
        ptc_sched_adaptive m = {P, M, (double)P, 0, 0, 0};
        assert_int_equal(ptc_sched_adapt_kfkb(&s, &m, &c), PTC_OK);
        assert_int_equal(m.chosen_k, 1);
        ptc_sched_destroy(s);
        ptc_sched_adaptive none = {P, M, 0.5, 0, 0, 0};
        assert_int_equal(ptc_sched_adapt_kfkb(&s, &none, &c), PTC_E_RANGE);
        assert_null(s);
        ptc_sched_destroy(o);
    }
}

static void test_links_and_trace(void **st)
{
    (void)st;
    /* 2 ranks, 1 micro-batch, GPipe: F0, hop, F1, B1, hop, B0. */
    ptc_sched *s = gen(PTC_SCHED_GPIPE, 2, 1, 1, 1);
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    c.latency = 0.5;
    c.bandwidth = 100;
    c.act_bytes = 50; /* 0.5 per message */
    ptc_sched_sim *sim;
    assert_int_equal(ptc_sched_simulate(s, &c, &sim), PTC_OK);
    assert_close(ptc_sched_sim_makespan(sim), 1 + 1 + 1 + 2 + 2 + 1);
    assert_int_equal(ptc_sched_sim_messages(sim), 2);
    ptc_sched_sim_destroy(sim);
    /* Trace: 10 bytes/unit until t=2, then 100: the activation (50 bytes)
     * leaves at 1: 10 bytes by 2, 40 more take 0.4 -> arrives 2.4 (+0). */
    const char *tt = "# t bw\n0 10\n2 100\n";
    ptc_sched_bw_trace *tr;
    assert_int_equal(ptc_sched_bw_trace_parse(&tr, tt, strlen(tt)), PTC_OK);
    c.latency = 0;
    c.bandwidth = 0;
    c.trace = tr;
    assert_int_equal(ptc_sched_simulate(s, &c, &sim), PTC_OK);
    /* F1 at 2.4..3.4, B1 ..5.4, grad 50 bytes at 100/unit: 0.5 -> B0 5.9..7.9 */
    assert_close(ptc_sched_sim_makespan(sim), 7.9);
    ptc_sched_sim_destroy(sim);
    ptc_sched_bw_trace_destroy(tr);
    const char *bad[] = {"1 10\n", "0 10\n0 20\n", "0 -1\n", "0 0\n", "0 x\n", "", "0 1 2\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(ptc_sched_bw_trace_parse(&tr, bad[i], strlen(bad[i])), PTC_E_FORMAT);
        assert_null(tr);
    }
    ptc_sched_destroy(s);
}

static ptc_sched *parse_ok(const char *t)
{
    ptc_sched *s;
    int rc = ptc_sched_parse(&s, t, strlen(t));
    if (rc)
        fail_msg("parse: %s", ptc_last_error());
    return s;
}

static void expect_invalid(const char *text, int code, const char *needle)
{
    ptc_sched *s = parse_ok(text);
    ptc_sched_report rep;
    int rc = ptc_sched_validate(s, &rep);
    if (rc != code || !strstr(rep.message, needle))
        fail_msg("want %d '%s', got %d '%s'", code, needle, rc, rep.message);
    assert_string_equal(ptc_last_error(), rep.message);
    if (code == PTC_E_DEADLOCK) {
        assert_non_null(rep.grid);
        assert_non_null(strstr(rep.grid, "["));
    }
    ptc_sched_report_clear(&rep);
    ptc_sched_destroy(s);
}

static const char hdr2[] = "ranks 2\nstages 2\nmicrobatches 2\n";

static void test_rejects(void **st)
{
    (void)st;
    char t[512];
    /* compute-only deadlock: rank 0 waits for B0 from rank 1, which waits
     * for F1 that rank 0 only runs after B0 */
    snprintf(t, sizeof t, "%srank 0: F0 B0 F1 B1\nrank 1: F0 F1 B0 B1\n", hdr2);
    expect_invalid(t, PTC_E_DEADLOCK, "deadlock: rank 0 step 1");
    /* B before F on the same stage */
    snprintf(t, sizeof t, "%srank 0: F0 B1 F1 B0\nrank 1: F0 B0 F1 B1\n", hdr2);
    expect_invalid(t, PTC_E_INVAL, "rank 0 step 1 (B1): backward before the forward");
    /* W before I */
    snprintf(t, sizeof t, "%srank 0: F0 F1 I0 W0 I1 W1\nrank 1: F0 W0 I0 F1 I1 W1\n", hdr2);
    expect_invalid(t, PTC_E_INVAL, "W before I");
    /* counts: missing backward, repeated forward, B and I mixed */
    snprintf(t, sizeof t, "%srank 0: F0 F1 B0\nrank 1: F0 B0 F1 B1\n", hdr2);
    expect_invalid(t, PTC_E_INVAL, "micro-batch 1 pipe 0 stage 0 (rank 0): no backward");
    snprintf(t, sizeof t, "%srank 0: F0 F0 F1 B0 B1\nrank 1: F0 B0 F1 B1\n", hdr2);
    expect_invalid(t, PTC_E_INVAL, "forward repeated");
    snprintf(t, sizeof t, "%srank 0: F0 F1 B0 I1 W1 B1\nrank 1: F0 B0 F1 B1\n", hdr2);
    expect_invalid(t, PTC_E_INVAL, "backward repeated");
    /* chunk not placed */
    snprintf(t, sizeof t, "%srank 0: F0.1 F1 B0 B1\nrank 1: F0 B0 F1 B1\n", hdr2);
    expect_invalid(t, PTC_E_INVAL, "chunk 1 is not placed on rank 0");
    /* explicit communication: both ranks send first -> blocking deadlock */
    snprintf(t, sizeof t,
             "ranks 2\nstages 2\nmicrobatches 1\n"
             "rank 0: F0 SA0>1 RG0<1 B0\nrank 1: SG0>0 RA0<0 F0 B0\n");
    expect_invalid(t, PTC_E_INVAL, "sends a gradient before its backward");
    snprintf(t, sizeof t,
             "ranks 2\nstages 2\nmicrobatches 2\n"
             "rank 0: F0 SA0>1 F1 SA1>1 RG0<1 B0 RG1<1 B1\n"
             "rank 1: RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0\n");
    expect_invalid(t, PTC_E_DEADLOCK, "deadlock: rank 0 step 3 (SA1>1) waits for rank 1, "
                                      "blocked at step 3 (SG0>0)");
    /* the same with the receive posted first is fine */
    snprintf(t, sizeof t,
             "ranks 2\nstages 2\nmicrobatches 2\n"
             "rank 0: F0 SA0>1 F1 SA1>1 RG0<1 B0 RG1<1 B1\n"
             "rank 1: RA0<0 F0 B0 RA1<0 SG0>0 F1 B1 SG1>0\n");
    ptc_sched *s = parse_ok(t);
    ptc_sched_report rep;
    assert_int_equal(ptc_sched_validate(s, &rep), PTC_OK);
    assert_int_equal(rep.messages, 4);
    ptc_sched_report_clear(&rep);
    roundtrip(s);
    ptc_sched_destroy(s);
    /* FIFO mismatch: micro-batches swapped between sender and receiver */
    snprintf(t, sizeof t,
             "ranks 2\nstages 2\nmicrobatches 2\n"
             "rank 0: F0 SA0>1 F1 SA1>1 RG0<1 B0 RG1<1 B1\n"
             "rank 1: RA1<0 F0 B0 RA0<0 SG0>0 F1 B1 SG1>0\n");
    expect_invalid(t, PTC_E_INVAL, "not the tensor that stage expects");
    /* compute before its input is received */
    snprintf(t, sizeof t,
             "ranks 2\nstages 2\nmicrobatches 1\n"
             "rank 0: F0 SA0>1 RG0<1 B0\nrank 1: F0 RA0<0 B0 SG0>0\n");
    expect_invalid(t, PTC_E_INVAL, "rank 1 step 0 (F0): runs before its input activation");
}

static void test_parse_errors(void **st)
{
    (void)st;
    const char *bad[] = {
        "ranks 2\nstages 2\nrank 0: F0\n",              /* sizes missing */
        "ranks 2\nstages 2\nmicrobatches 2\nrank 0: X0\n",
        "ranks 2\nstages 2\nmicrobatches 2\nrank 0: F2\n", /* mb out of range */
        "ranks 2\nstages 2\nmicrobatches 2\nrank 2: F0\n",
        "ranks 2\nstages 2\nmicrobatches 2\nrank 0: SA0>0\n", /* self */
        "ranks 2\nstages 3\nmicrobatches 2\nrank 0: F0\n",   /* no looped fit */
        "ranks 2\nstages 2\nmicrobatches 2\nplace 0 0\nplace 0 1\n",
        "ranks 2\nstages 2\nmicrobatches 2\nplace 0 0 0\n",
        "ranks 0\nstages 2\nmicrobatches 2\n",
        "ranks 2\nranks 2\n",
        "ptc-schedule 2\n",
        "ranks 2\nstages 2\nmicrobatches 2\nrank 0: F0.\n",
        "ranks 2\nstages 2\nmicrobatches 2\nrank 0: F01234567890\n",
        "ranks 2\nstages 2\nmicrobatches 2\nrank 0 F0\n",
        "ranks 2\nstages 2\nmicrobatches 2\nbogus\n",
        "ranks 99999\nstages 2\nmicrobatches 2\nrank 0: F0\n",
        "ranks 2\nstages 65536\nmicrobatches 1000\nrank 0: F0\n", /* too many cells */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ptc_sched *s = (ptc_sched *)1;
        int rc = ptc_sched_parse(&s, bad[i], strlen(bad[i]));
        if (rc == PTC_OK)
            fail_msg("accepted bad input %zu", i);
        assert_null(s);
        assert_true(strlen(ptc_last_error()) > 0);
    }
    /* comments, blank lines, continuation lines, explicit chunk 0 */
    const char *ok = "# hand-made\nptc-schedule 1\nranks 2 # two\nstages 2\nmicrobatches 2\n\n"
                     "rank 0: F0 F1.0\nrank 1: F0 B0 F1 B1\nrank 0: B0 B1\n";
    ptc_sched *s = parse_ok(ok);
    size_t n;
    assert_non_null(ptc_sched_actions(s, 0, &n));
    assert_int_equal(n, 4);
    assert_int_equal(ptc_sched_validate(s, NULL), PTC_OK);
    ptc_sched_destroy(s);
}

static void test_infer_comm_api(void **st)
{
    (void)st;
    ptc_sched *s = gen(PTC_SCHED_INTERLEAVED, 3, 6, 2, 1);
    assert_int_equal(ptc_sched_infer_comm(s), PTC_OK);
    /* every SEND names peer, tensor, micro-batch and local chunk; its
     * partner RECV exists on the peer with the consumer's chunk */
    size_t sends = 0, recvs = 0;
    for (int r = 0; r < 3; r++) {
        size_t n;
        const ptc_sched_action *a = ptc_sched_actions(s, r, &n);
        for (size_t i = 0; i < n; i++) {
            if (a[i].op == PTC_SCHED_SEND) {
                sends++;
                int p, stg, q, c;
                assert_int_equal(ptc_sched_stage_of(s, r, a[i].chunk, &p, &stg), PTC_OK);
                int next = a[i].tensor == PTC_SCHED_ACT ? stg + 1 : stg - 1;
                assert_int_equal(ptc_sched_rank_of(s, p, next, &q, &c), PTC_OK);
                assert_int_equal(q, a[i].peer);
            } else if (a[i].op == PTC_SCHED_RECV) {
                recvs++;
            }
        }
    }
    /* 6 micro-batches x 5 stage boundaries x 2 directions */
    assert_int_equal(sends, 60);
    assert_int_equal(recvs, 60);
    ptc_sched_destroy(s);
    /* inference reports a compute deadlock and leaves the schedule alone */
    char t[256];
    snprintf(t, sizeof t, "%srank 0: F0 B0 F1 B1\nrank 1: F0 F1 B0 B1\n", hdr2);
    s = parse_ok(t);
    assert_int_equal(ptc_sched_infer_comm(s), PTC_E_DEADLOCK);
    assert_false(ptc_sched_has_comm(s));
    ptc_sched_destroy(s);
}

static void test_pictures(void **st)
{
    (void)st;
    ptc_sched *s = gen(PTC_SCHED_ZBH1, 3, 4, 1, 1);
    ptc_sched_sim *sim = sim_of(s, 1, 2, 1, 0);
    char *svg, *tr;
    assert_int_equal(ptc_sched_svg(s, sim, &svg), PTC_OK);
    assert_non_null(strstr(svg, "<svg"));
    assert_non_null(strstr(svg, "rank 2"));
    assert_non_null(strstr(svg, "I0 ["));
    assert_int_equal(ptc_sched_trace_json(s, sim, &tr), PTC_OK);
    assert_non_null(strstr(tr, "\"traceEvents\""));
    assert_non_null(strstr(tr, "\"ph\":\"X\""));
    ptc_sched_text_free(svg);
    ptc_sched_text_free(tr);
    ptc_sched_sim_destroy(sim);
    ptc_sched_destroy(s);
}

static void test_alloc_failures(void **st)
{
    (void)st;
    /* Every allocation of generate+validate+simulate+format fails in turn
     * without leaking or crashing. */
    for (long n = 1;; n++) {
        ptc_fault_alloc_at(n);
        ptc_sched_gen g = {PTC_SCHED_CHIMERA, 3, 4, 1, 1, 1, 2, 0};
        ptc_sched *s = NULL;
        ptc_sched_sim *sim = NULL;
        char *t = NULL;
        int rc = ptc_sched_generate(&s, &g);
        if (!rc)
            rc = ptc_sched_validate(s, NULL);
        if (!rc)
            rc = ptc_sched_simulate(s, &(ptc_sched_costs){1, 2, 0, 0, 0, 0, NULL}, &sim);
        if (!rc)
            rc = ptc_sched_format(s, &t, NULL);
        long used = ptc_fault_alloc_count();
        ptc_fault_alloc_at(0);
        ptc_sched_text_free(t);
        ptc_sched_sim_destroy(sim);
        ptc_sched_destroy(s);
        if (rc == PTC_OK) {
            assert_true(n > used);
            break;
        }
        assert_int_equal(rc, PTC_E_NOMEM);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generators_validate),
        cmocka_unit_test(test_gpipe_1f1b_closed_forms),
        cmocka_unit_test(test_kfkb_extremes),
        cmocka_unit_test(test_interleaved_closed_form),
        cmocka_unit_test(test_zbh1_closed_form),
        cmocka_unit_test(test_chimera_beats_1f1b),
        cmocka_unit_test(test_zbv_layout_and_memory),
        cmocka_unit_test(test_adaptive_kfkb),
        cmocka_unit_test(test_links_and_trace),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_infer_comm_api),
        cmocka_unit_test(test_pictures),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
