/* The configuration rule of ptc elastic (ptc_elastic_pick): tp within a
 * host, pp dividing the layers, dp the rest; fixed degrees kept; what fits
 * nothing. The same choice asked of the cost model (ptc_elastic_search): the
 * highest predicted throughput among the configurations the rule allows,
 * checked against every candidate costed here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/elastic.h"

static void expect(const int *slots, size_t n, ptc_elastic_want w, int dp, int tp, int pp)
{
    ptc_config c;
    int usable[8];
    assert_int_equal(ptc_elastic_pick(&c, usable, slots, n, &w), PTC_OK);
    assert_int_equal(c.dp, dp);
    assert_int_equal(c.tp, tp);
    assert_int_equal(c.pp, pp);
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(usable[i] % tp, 0); /* tp groups never span hosts */
        assert_true(usable[i] <= slots[i]);
        total += usable[i];
    }
    assert_true(dp * tp * pp <= total);
}

static void test_auto(void **state)
{
    (void)state;
    ptc_elastic_want w = {.layers = 4, .hidden = 8, .microbatches = 4};
    expect((int[]){4}, 1, w, 1, 4, 1);
    expect((int[]){3}, 1, w, 3, 1, 1);    /* odd: no tp; pp 2 would leave a slot idle */
    expect((int[]){5}, 1, w, 5, 1, 1);
    expect((int[]){8}, 1, w, 1, 8, 1);
    expect((int[]){8, 8}, 2, w, 1, 8, 2); /* pp 2 uses every slot: pp before dp */
    expect((int[]){8, 4}, 2, w, 3, 4, 1); /* tp divides every host */
    expect((int[]){8, 6}, 2, w, 7, 2, 1);
    expect((int[]){1}, 1, w, 1, 1, 1);
    w.hidden = 6; /* tp divides the hidden width */
    expect((int[]){8}, 1, w, 1, 2, 4);
    w.hidden = 0;
    w.tp = 1;
    expect((int[]){4}, 1, w, 1, 1, 4);
    w.tp = 0;
    w.microbatches = 2; /* pp at most the micro-batches */
    expect((int[]){4}, 1, w, 1, 4, 1);
    w.tp = 1;
    expect((int[]){4}, 1, w, 2, 1, 2);
    w.tp = 0;
    w.layers = 3;
    expect((int[]){3}, 1, w, 3, 1, 1);    /* 3 layers: pp 3 > 2 micro-batches */
    /* automatic tp leaves room for a fixed pp */
    w = (ptc_elastic_want){.pp = 2, .layers = 4, .hidden = 8, .microbatches = 4};
    expect((int[]){4}, 1, w, 1, 2, 2);
    expect((int[]){3}, 1, w, 1, 1, 2);
    expect((int[]){8}, 1, w, 1, 4, 2);
}

static void test_fixed(void **state)
{
    (void)state;
    ptc_elastic_want w = {.tp = 2, .pp = 2, .layers = 4, .zero = true};
    expect((int[]){4}, 1, w, 1, 2, 2);
    expect((int[]){7}, 1, w, 1, 2, 2);
    expect((int[]){8}, 1, w, 2, 2, 2);
    expect((int[]){3, 3}, 2, w, 1, 2, 2); /* 2 + 2 usable */
    ptc_config c;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){8}, 1, &w), PTC_OK);
    assert_true(c.zero);
    w.pp = 3; /* a fixed pp need not divide the layers */
    expect((int[]){6}, 1, w, 1, 2, 3);
}

static void test_nothing_fits(void **state)
{
    (void)state;
    ptc_config c;
    ptc_elastic_want w = {.layers = 4};
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){0}, 1, &w), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "no slot"));
    w.tp = 4;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){3, 3}, 2, &w), PTC_E_CONFIG);
    w.tp = 2;
    w.pp = 3;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){3, 3}, 2, &w), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "no configuration fits"));
    w.pp = 5;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){64}, 1, &w), PTC_E_CONFIG);
    /* bad arguments */
    w = (ptc_elastic_want){.layers = 0};
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){4}, 1, &w), PTC_E_INVAL);
    w.layers = 4;
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){-1}, 1, &w), PTC_E_INVAL);
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){4}, 0, &w), PTC_E_INVAL);
}

/* the best throughput over the rule's candidates, costed independently */
static double brute_best(const int *slots, size_t n, const ptc_elastic_want *w,
                         const ptc_search_cluster *cl0)
{
    ptc_search_spec spec = {.family = PTC_SEARCH_MLP, .layers = w->layers, .hidden = w->hidden,
                            .vocab = w->vocab, .seq = w->tokens};
    ptc_cost_model *m;
    assert_int_equal(ptc_cost_model_from_spec(&m, &spec), PTC_OK);
    ptc_search_cluster cl = *cl0;
    cl.gpus_per_host = 0;
    for (size_t i = 0; i < n; i++)
        cl.gpus_per_host = slots[i] > cl.gpus_per_host ? slots[i] : cl.gpus_per_host;
    double best = 0;
    for (int tp = 1; tp <= 8; tp *= 2) {
        if ((w->tp && tp != w->tp) || w->hidden % tp)
            continue;
        int S = 0;
        bool ok = true;
        for (size_t i = 0; i < n; i++) {
            ok = ok && (w->tp || slots[i] % tp == 0);
            S += slots[i] / tp * tp;
        }
        for (int pp = 1; ok && pp <= w->layers; pp++) {
            if ((w->pp && pp != w->pp) || w->layers % pp || tp * pp > S ||
                (!w->pp && pp > w->microbatches))
                continue;
            int dp = S / (tp * pp);
            cl.gpus = dp * tp * pp;
            ptc_search_job j;
            ptc_search_job_init(&j);
            j.global_batch = dp * w->microbatches;
            ptc_search_config c = {.dp = dp, .tp = tp, .pp = pp, .schedule = PTC_SCHED_1F1B,
                                   .microbatches = w->microbatches, .mb_size = 1, .chunks = 1};
            ptc_cost_result r;
            if (ptc_cost_evaluate(m, &cl, &j, &c, &r) == PTC_OK && r.fits &&
                j.global_batch / r.step_time > best)
                best = (double)j.global_batch / r.step_time;
        }
    }
    ptc_cost_model_destroy(m);
    return best;
}

static void test_search(void **state)
{
    (void)state;
    ptc_elastic_want w = {.layers = 4, .hidden = 64, .microbatches = 4, .vocab = 128,
                          .tokens = 8, .schedule = PTC_SCHED_1F1B};
    ptc_search_cluster fast, slow;
    ptc_search_cluster_init(&fast);
    slow = fast;
    slow.intra_bw = slow.inter_bw = 1e6; /* 1 MB/s links, 1 ms latency */
    slow.intra_lat = slow.inter_lat = 1e-3;
    const int cases[][3] = {{4, 0, 1}, {8, 0, 1}, {3, 0, 1}, {8, 8, 2}, {6, 2, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const int slots[2] = {cases[k][0], cases[k][1]};
        size_t n = (size_t)cases[k][2];
        for (int q = 0; q < 2; q++) {
            const ptc_search_cluster *cl = q ? &slow : &fast;
            ptc_config c;
            int usable[2];
            double step;
            assert_int_equal(ptc_elastic_search(&c, usable, slots, n, &w, cl, &step), PTC_OK);
            int total = 0;
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(usable[i] % c.tp, 0);
                total += usable[i];
            }
            assert_true(c.dp * c.tp * c.pp <= total);
            assert_int_equal(w.layers % c.pp, 0);
            double got = c.dp * w.microbatches / step, best = brute_best(slots, n, &w, cl);
            assert_true(got >= best * (1 - 1e-9));
        }
    }
    /* the tiny demo model on fast links: data parallelism, not the rule's tp */
    ptc_config c;
    assert_int_equal(ptc_elastic_search(&c, NULL, (int[]){4}, 1, &w, &fast, NULL), PTC_OK);
    assert_int_equal(c.dp, 4);
    assert_int_equal(c.tp, 1);
    assert_int_equal(c.pp, 1);
    assert_int_equal(ptc_elastic_pick(&c, NULL, (int[]){4}, 1, &w), PTC_OK);
    assert_int_equal(c.tp, 4);
    /* fixed degrees are kept */
    w.tp = 2;
    w.pp = 2;
    assert_int_equal(ptc_elastic_search(&c, NULL, (int[]){8}, 1, &w, &fast, NULL), PTC_OK);
    assert_int_equal(c.tp, 2);
    assert_int_equal(c.pp, 2);
    assert_int_equal(c.dp, 2);
    /* no memory: nothing fits, named; the rule's own errors come first */
    ptc_search_cluster tiny = fast;
    tiny.mem_bytes = 1024;
    assert_int_equal(ptc_elastic_search(&c, NULL, (int[]){8}, 1, &w, &tiny, NULL), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "no configuration fits"));
    w.pp = 3;
    assert_int_equal(ptc_elastic_search(&c, NULL, (int[]){8}, 1, &w, &fast, NULL), PTC_E_CONFIG);
}

/* Hostfiles: the grammar, the defaults, and a one-line error naming the
 * line for every bad word. */
static void test_hostfile(void **state)
{
    (void)state;
    ptc_elastic_host h[4];
    size_t n = 99;
    assert_int_equal(ptc_elastic_hostfile_parse("# cluster\n\nnode-a slots=8 max_slots=8\n"
                                                "  10.0.0.2\tslots=4 # half\r\nnode-c slots=0",
                                                h, 4, &n),
                     PTC_OK);
    assert_int_equal(n, 3);
    assert_string_equal(h[0].name, "node-a");
    assert_int_equal(h[0].slots, 8);
    assert_string_equal(h[1].name, "10.0.0.2");
    assert_int_equal(h[1].slots, 4);
    assert_string_equal(h[2].name, "node-c");
    assert_int_equal(h[2].slots, 0);
    assert_int_equal(ptc_elastic_hostfile_parse("solo", h, 4, &n), PTC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(h[0].slots, 1); /* the default */
    assert_int_equal(ptc_elastic_hostfile_parse("", h, 4, &n), PTC_OK);
    assert_int_equal(n, 0);
    static const struct {
        const char *text, *words;
    } bad[] = {
        {"a slots=\n", "line 1: bad 'slots='"},
        {"a\nb slots=-1", "line 2: bad 'slots=-1'"},
        {"a slots=4x", "bad 'slots=4x'"},
        {"a slots=99999999999", "bad 'slots=99999999999'"},
        {"a slots=2 slots=3", "unknown or repeated 'slots=3'"},
        {"a max_slots=", "bad 'max_slots='"},
        {"a cpus=4", "unknown or repeated 'cpus=4'"},
        {"slots=4", "'slots=4' is not a host name"},
        {"a\n\na slots=2", "line 3: host a named twice"},
        {"a\nb\nc\nd\ne", "line 5: more than 4 hosts"},
        {"na\x01me", "is not a host name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ptc_elastic_hostfile_parse(bad[i].text, h, 4, &n), PTC_E_INVAL);
        if (!strstr(ptc_last_error(), bad[i].words))
            fail_msg("'%s': got '%s', want '%s'", bad[i].text, ptc_last_error(), bad[i].words);
        assert_null(strchr(ptc_last_error(), '\n'));
    }
    char longname[300];
    memset(longname, 'x', 256);
    longname[256] = 0;
    assert_int_equal(ptc_elastic_hostfile_parse(longname, h, 4, &n), PTC_E_INVAL);
    longname[255] = 0;
    assert_int_equal(ptc_elastic_hostfile_parse(longname, h, 4, &n), PTC_OK);
    assert_int_equal(strlen(h[0].name), 255);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_fixed),
        cmocka_unit_test(test_nothing_fits),
        cmocka_unit_test(test_search),
        cmocka_unit_test(test_hostfile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
