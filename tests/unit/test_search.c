/* Cost model and configuration search: closed-form checks of the formulas
 * on tiny models, links by rank order, the simulator's extension to long
 * runs, bad input, coordinate descent against exhaustive search on random
 * models and clusters, and the choices on published large-scale settings. */
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
#include "ptc/search.h"

static void close_to(double got, double want, const char *what)
{
    if (fabs(got - want) > 1e-9 * fmax(1, fabs(want)))
        fail_msg("%s: got %.15g, want %.15g", what, got, want);
}

/* ---- a tiny hand-made model ----------------------------------------------------- */

/* Two layers of a Megatron MLP block (W1 [8,4] column parallel, W2 [4,8]
 * row parallel), a vocabulary-parallel embedding [16,4] on the first stage
 * and a column-parallel output layer [16,4] on the last. F32, seq 2. */
static ptc_cost_model *tiny(void)
{
    ptc_cost_tensor t[6];
    memset(t, 0, sizeof t);
    for (int l = 0; l < 2; l++) {
        ptc_cost_tensor *a = &t[2 * l], *b = &t[2 * l + 1];
        *a = (ptc_cost_tensor){"w1", PTC_DTYPE_F32, 2, {8, 4}, 0, 0, PTC_COST_PP_LAYER, l,
                               PTC_COST_PARAM, PTC_COST_OP_MATMUL, 1};
        *b = (ptc_cost_tensor){"w2", PTC_DTYPE_F32, 2, {4, 8}, 1, 0, PTC_COST_PP_LAYER, l,
                               PTC_COST_PARAM, PTC_COST_OP_MATMUL, 1};
    }
    t[4] = (ptc_cost_tensor){"emb", PTC_DTYPE_F32, 2, {16, 4}, 0, 0, PTC_COST_PP_FIRST, -1,
                             PTC_COST_PARAM, PTC_COST_OP_LOOKUP, 0};
    t[5] = (ptc_cost_tensor){"head", PTC_DTYPE_F32, 2, {16, 4}, 0, 0, PTC_COST_PP_LAST, -1,
                             PTC_COST_PARAM, PTC_COST_OP_MATMUL, 1};
    ptc_cost_model_info in;
    memset(&in, 0, sizeof in);
    in.seq = 2;
    in.hidden = 4;
    in.act_dtype = PTC_DTYPE_F32;
    in.grad_dtype = PTC_DTYPE_F32;
    in.optim_bytes_per_param = 8;
    in.act_fixed = 10;
    in.act_split = 20;
    ptc_cost_model *m = NULL;
    assert_int_equal(ptc_cost_model_create(&m, t, 6, &in), PTC_OK);
    return m;
}

/* Round numbers: 1000 FLOP/s, 1000 B/s and 1 ms inside a host; 100 B/s and
 * 10 ms between hosts. */
static ptc_search_cluster slow_cluster(int gpus, int per_host)
{
    ptc_search_cluster c;
    ptc_search_cluster_init(&c);
    c.gpus = gpus;
    c.gpus_per_host = per_host;
    c.flops = 1e3;
    c.intra_bw = 1e3;
    c.intra_lat = 1e-3;
    c.inter_bw = 100;
    c.inter_lat = 1e-2;
    c.mem_bytes = 1e9;
    return c;
}

static ptc_search_config cfg(int dp, int tp, int pp, int zero, ptc_sched_kind_id k, int M,
                             int mb, int V, int kk)
{
    ptc_search_config c = {dp, tp, pp, zero, k, M, mb, V, kk};
    return c;
}

static ptc_search_job job_of(int64_t B)
{
    ptc_search_job j;
    ptc_search_job_init(&j);
    j.global_batch = B;
    return j;
}

static void tp_formulas(void **state)
{
    (void)state;
    ptc_cost_model *m = tiny();
    assert_int_equal(ptc_cost_model_layers(m), 2);
    close_to(ptc_cost_model_params(m), 2 * 64 + 64 + 64, "parameters");
    ptc_search_cluster c = slow_cluster(2, 8);
    ptc_search_job j = job_of(1);
    ptc_search_config g = cfg(1, 2, 1, 0, PTC_SCHED_1F1B, 1, 1, 1, 0);
    ptc_cost_result r;
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    /* FLOPs per token forward: layers 2 * (2*16 + 2*16), head 2*32 -> 192;
     * 2 tokens at 1000 FLOP/s: 0.384 s forward, twice that backward. */
    close_to(r.compute, 0.384 + 0.768, "compute");
    /* All-reduce over 2 ranks in a host: 2 alpha + bytes / beta.
     * Forward: W2's partial sum per layer and the embedding's partial sum
     * (2 tokens x 4 x 4 bytes = 32 B each), three fp32 values per token for
     * the vocabulary-parallel loss (8 B each). Backward: W1's input
     * gradient per layer and the output layer's (32 B each). */
    double ar32 = 2e-3 + 32 / 1e3, ar8 = 2e-3 + 8 / 1e3;
    close_to(r.tp_comm, 3 * ar32 + 3 * ar8 + 3 * ar32, "tp");
    close_to(r.step_time, r.compute + r.tp_comm, "step");
    close_to(r.bubble + r.pp_comm + r.dp_comm, 0, "no pipeline, no dp");
    /* Memory: 128 local elements (half of every split tensor) x 4 B of
     * parameters, as much of gradients, 8 B of Adam state; activations
     * per token per layer 10 + 20/2, two layers, two tokens, one
     * micro-batch in flight. */
    close_to(r.mem_params, 512, "params");
    close_to(r.mem_grads, 512, "grads");
    close_to(r.mem_optim, 1024, "optim");
    close_to(r.mem_act, 2 * 2 * 20, "activations");
    close_to(r.mem, 512 + 512 + 1024 + 80, "memory");
    assert_true(r.fits);
    assert_false(r.tp_inter);
    /* The same ranks on two hosts of one GPU: the inter-host link. */
    c = slow_cluster(2, 1);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    double ar32e = 2e-2 + 32 / 100.0, ar8e = 2e-2 + 8 / 100.0;
    close_to(r.tp_comm, 6 * ar32e + 3 * ar8e, "tp between hosts");
    assert_true(r.tp_inter);
    ptc_cost_model_destroy(m);
}

static void dp_formulas(void **state)
{
    (void)state;
    ptc_cost_model *m = tiny();
    ptc_search_job j = job_of(2);
    ptc_cost_result r, z;
    /* dp=2 on hosts of one GPU: 256 elements of F32 gradients = 1024 B,
     * ring all-reduce between 2 hosts: 2 alpha + 1024 / beta. */
    ptc_search_cluster c = slow_cluster(2, 1);
    ptc_search_config g = cfg(2, 1, 1, 0, PTC_SCHED_1F1B, 1, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    close_to(r.dp_comm, 2e-2 + 1024 / 100.0, "dp all-reduce");
    assert_true(r.dp_inter);
    close_to(r.tp_comm, 0, "no tp");
    close_to(r.compute, 2 * 0.192 * 3 * 2, "compute of 2 tokens, 3x forward, unsplit");
    close_to(r.step_time, r.compute + r.dp_comm, "step");
    /* ZeRO: reduce-scatter of the gradients plus all-gather of the
     * parameters (same volume here), optimizer state halved. */
    g.zero = 1;
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &z), PTC_OK);
    close_to(z.dp_comm, 2 * (1e-2 + 512 / 100.0), "reduce-scatter + all-gather");
    close_to(z.mem_optim, r.mem_optim / 2, "sharded optimizer state");
    close_to(z.mem_params + z.mem_grads, r.mem_params + r.mem_grads, "params and grads kept");
    /* Overlap with the last backward (one micro-batch: the whole backward,
     * 0.768 s of the 1.152 s... of this rank), at least a layer's share. */
    j.dp_overlap = true;
    g.zero = 0;
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &z), PTC_OK);
    double full = 2e-2 + 1024 / 100.0, window = 2 * 0.192 * 2 * 2;
    close_to(z.dp_comm, fmax(full - window, full / 2), "overlapped reduction");
    /* Hierarchical: dp=4 on 2 hosts of 2: reduce-scatter and all-gather
     * inside each host (k=2), all-reduce of half the bytes between 2. */
    c = slow_cluster(4, 2);
    j = job_of(4);
    g = cfg(4, 1, 1, 0, PTC_SCHED_1F1B, 1, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    double S = 1024;
    close_to(r.dp_comm, 2 * (1e-3 + 0.5 * S / 1e3) + 2 * 1e-2 + 2 * 0.5 * (S / 2) / 100.0,
             "hierarchical all-reduce");
    ptc_cost_model_destroy(m);
}

static void links_by_rank_order(void **state)
{
    (void)state;
    ptc_cost_model *m = tiny();
    ptc_search_job j = job_of(2);
    ptc_cost_result r;
    /* rank = (pp_i*D + dp_i)*T + tp_i; hosts of 2: tp=2 inside, dp across. */
    ptc_search_cluster c = slow_cluster(4, 2);
    ptc_search_config g = cfg(2, 2, 1, 0, PTC_SCHED_1F1B, 1, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    assert_false(r.tp_inter);
    assert_true(r.dp_inter);
    /* dp=2 inside a host of 4, pp=2 across (stage boundary 2 ranks away). */
    c = slow_cluster(4, 2);
    g = cfg(2, 1, 2, 0, PTC_SCHED_1F1B, 1, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    assert_false(r.dp_inter);
    assert_true(r.pp_inter);
    /* Everything on one host. */
    c = slow_cluster(4, 4);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    assert_false(r.dp_inter || r.pp_inter || r.tp_inter);
    ptc_cost_model_destroy(m);
}

static void pipeline_formulas(void **state)
{
    (void)state;
    ptc_cost_model *m = tiny();
    /* pp=2 inside a host, 1F1B, M=3, no tp: stage 1 (layer 1 and the
     * output layer) is the busiest: forward 2*(32+32) + 2*64 = 256 FLOPs
     * per token, 2 tokens: f = 0.512, b = 1.024. Transfers: 2 tokens x 4 x
     * 4 B = 32 B: 1 ms + 32 ms each. */
    ptc_search_cluster c = slow_cluster(2, 2);
    ptc_search_job j = job_of(3);
    ptc_search_config g = cfg(1, 1, 2, 0, PTC_SCHED_1F1B, 3, 1, 1, 0);
    ptc_cost_result r;
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    double f = 0.512, b = 1.024, x = 1e-3 + 32 / 1e3;
    close_to(r.stage_f, f, "f");
    close_to(r.stage_b, b, "b");
    close_to(r.compute, 3 * (f + b), "compute");
    /* Without transfers 1F1B takes (M + P - 1)(f + b). */
    close_to(r.bubble, (3 + 2 - 1) * (f + b) - 3 * (f + b), "bubble");
    /* The simulator's own answer with the same costs and links. */
    ptc_sched_gen sg = {PTC_SCHED_1F1B, 2, 3, 1, 1, 0, 0, 0};
    ptc_sched *s;
    assert_int_equal(ptc_sched_generate(&s, &sg), PTC_OK);
    ptc_sched_costs sc;
    ptc_sched_costs_init(&sc);
    sc.f = f, sc.b = b, sc.latency = 1e-3, sc.bandwidth = 1e3, sc.act_bytes = 32;
    ptc_sched_sim *sim;
    assert_int_equal(ptc_sched_simulate(s, &sc, &sim), PTC_OK);
    close_to(r.makespan, ptc_sched_sim_makespan(sim), "makespan");
    close_to(r.step_time, ptc_sched_sim_makespan(sim), "step = makespan (dp=1)");
    close_to(r.pp_comm, r.step_time - 4 * (f + b), "p2p share");
    assert_true(r.pp_comm >= 2 * x - 1e-12); /* at least one round trip */
    /* Peak activations: 1F1B holds P micro-batches on rank 0. */
    close_to(r.peak_activations, 2, "peak");
    /* Rank 0's memory: layer 0 + embedding, two micro-batches of one
     * layer's activations (2 tokens x 30 B). */
    assert_int_equal(r.mem_rank, 0);
    close_to(r.mem_act, 2 * 2 * 30, "activations of rank 0");
    close_to(r.mem_params, (64 + 64) * 4, "rank 0 parameters");
    ptc_sched_sim_destroy(sim);
    ptc_sched_destroy(s);
    ptc_cost_model_destroy(m);
}

/* The demo model's activation block, exactly as exec/runtime_model.c lays
 * it out, times the simulator's peak. */
static void demo_activations(void **state)
{
    (void)state;
    ptc_search_spec sp;
    assert_int_equal(ptc_search_spec_parse(&sp, "mlp:layers=4,hidden=16,vocab=32,tokens=8"),
                     PTC_OK);
    ptc_cost_model *m;
    assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
    ptc_search_cluster c = slow_cluster(2, 2);
    ptc_search_job j = job_of(4);
    ptc_search_config g = cfg(1, 1, 2, 0, PTC_SCHED_1F1B, 4, 1, 1, 0);
    ptc_cost_result r;
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
    /* Rank 0: stage input n*H, two layers of n*(4H + 2 + 3*4H), dEmb n*H
     * floats; 2 micro-batches held by 1F1B. Rank 1 holds one with the head
     * (n*(H + 2 + 2V)); rank 0 is the fuller one in total. */
    double n = 8, H = 16, V = 32;
    double blk0 = 4 * (n * H + 2 * n * (4 * H + 2 + 12 * H) + n * H);
    double blk1 = 4 * (n * H + 2 * n * (4 * H + 2 + 12 * H) + n * (H + 2 + 2 * V));
    double p0 = 4 * (V * H + 2 * (2 * H + 8 * H * H + 5 * H));
    double p1 = 4 * (2 * (2 * H + 8 * H * H + 5 * H) + 2 * H + V * H);
    double m0 = p0 * (1 + 1 + 2) + 2 * blk0, m1 = p1 * 4 + blk1;
    close_to(r.mem, fmax(m0, m1), "memory of the fuller rank");
    close_to(r.mem_act, m0 > m1 ? 2 * blk0 : blk1, "activation bytes");
    ptc_cost_model_destroy(m);
}

/* Long runs are simulated short and extended; check against full runs. */
static void extension_matches_full_simulation(void **state)
{
    (void)state;
    ptc_search_spec sp;
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=16,hidden=1024,heads=16,vocab=32000,"
                                                "seq=1024"), PTC_OK);
    ptc_cost_model *m;
    assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
    ptc_search_cluster c;
    ptc_search_cluster_init(&c);
    c.gpus = 4;
    c.gpus_per_host = 2; /* stage boundaries cross hosts */
    struct {
        ptc_sched_kind_id k;
        int V, kk;
        double tol;
    } kinds[] = {{PTC_SCHED_1F1B, 1, 0, 1e-9},        {PTC_SCHED_GPIPE, 1, 0, 1e-9},
                 {PTC_SCHED_INTERLEAVED, 2, 0, 1e-9}, {PTC_SCHED_KFKB, 1, 2, 1e-9},
                 {PTC_SCHED_ZBH1, 1, 0, 0.01},        {PTC_SCHED_ZBV, 2, 0, 0.01},
                 {PTC_SCHED_CHIMERA, 1, 0, 0.01}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int M = 96;
        ptc_search_job j = job_of(M);
        ptc_search_config g = cfg(1, 1, 4, 0, kinds[i].k, M, 1, kinds[i].V, kinds[i].kk);
        ptc_cost_result r;
        assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &r), PTC_OK);
        ptc_sched_gen sg = {kinds[i].k, 4, M, kinds[i].V, kinds[i].kk ? kinds[i].kk : 1,
                            1, r.stage_b / r.stage_f, r.stage_w / r.stage_f};
        /* The search rounds the greedy generators' ratios to 1/16. */
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
        /* Peak: held from F to B or W (the simulator's own peak ends at I). */
        double want = ptc_sched_sim_makespan(sim), peak = 0, held = 0;
        for (int rk = 0; rk < 4; rk++) {
            size_t na;
            const ptc_sched_action *a = ptc_sched_actions(s, rk, &na);
            long cur = 0, best = 0;
            for (size_t q = 0; q < na; q++) {
                cur += a[q].op == PTC_SCHED_F ? 1 : a[q].op == PTC_SCHED_B || a[q].op == PTC_SCHED_W ? -1 : 0;
                best = cur > best ? cur : best;
            }
            peak = fmax(peak, (double)best * 4 / ptc_sched_stages(s));
            held = fmax(held, ptc_sched_sim_peak(sim, rk));
        }
        if (kinds[i].k != PTC_SCHED_ZBH1 && kinds[i].k != PTC_SCHED_ZBV)
            close_to(held, peak, "the simulator's peak without I/W");
        double err = fabs(r.makespan - want) / want;
        printf("# %-12s M=%d makespan %.6g, full simulation %.6g (%.2g), peak %g vs %g\n",
               ptc_sched_kind_name(kinds[i].k), M, r.makespan, want, err, r.peak_activations,
               peak);
        if (err > kinds[i].tol)
            fail_msg("%s: extended makespan off by %g", ptc_sched_kind_name(kinds[i].k), err);
        close_to(r.peak_activations, peak, "peak");
        ptc_sched_sim_destroy(sim);
        ptc_sched_destroy(s);
    }
    ptc_cost_model_destroy(m);
}

/* ---- bad input -------------------------------------------------------------------- */

static void bad_specs(void **state)
{
    (void)state;
    ptc_search_spec sp;
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=2,hidden=100,heads=3,vocab=8,seq=4"),
                     PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "heads (3) must divide hidden (100)"));
    assert_null(strchr(ptc_last_error(), '\n'));
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=2,hidden=96,heads=4,vocab=8"),
                     PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "seq"));
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=2,hidden=96,heads=4,vocab=8,seq=4,"
                                                "kv_heads=3"), PTC_E_INVAL);
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=0,hidden=96,heads=4,vocab=8,seq=4"),
                     PTC_E_INVAL);
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=2,hidden=96,heads=4,vocab=8,seq=4,"
                                                "colour=2"), PTC_E_INVAL);
    assert_int_equal(ptc_search_spec_parse(&sp, "bert:layers=2"), PTC_E_INVAL);
    assert_int_equal(ptc_search_spec_parse(&sp, "mlp:layers=2,hidden=x"), PTC_E_INVAL);
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=2,hidden=96,heads=4,vocab=8,seq=4,"
                                                "kv_heads=2,ffn=100,recompute=full"), PTC_OK);
    assert_int_equal(sp.ffn, 100);
    assert_int_equal(sp.kv_heads, 2);
    /* A tensor list with a gap in its layers, a split dim out of range. */
    ptc_cost_tensor t = {"x", PTC_DTYPE_F32, 2, {4, 4}, 0, 0, PTC_COST_PP_LAYER, 1,
                         PTC_COST_PARAM, PTC_COST_OP_MATMUL, 1};
    ptc_cost_model_info in;
    memset(&in, 0, sizeof in);
    in.seq = in.hidden = 4;
    in.act_dtype = in.grad_dtype = PTC_DTYPE_F32;
    ptc_cost_model *m = (ptc_cost_model *)&t;
    assert_int_equal(ptc_cost_model_create(&m, &t, 1, &in), PTC_E_INVAL);
    assert_null(m);
    t.layer = 0;
    t.tp_dim = 2;
    assert_int_equal(ptc_cost_model_create(&m, &t, 1, &in), PTC_E_INVAL);
}

static void bad_clusters_and_configs(void **state)
{
    (void)state;
    ptc_cost_model *m = tiny();
    ptc_search_cluster c = slow_cluster(0, 8);
    ptc_search_job j = job_of(4);
    ptc_search_result *r = (ptc_search_result *)&c;
    assert_int_equal(ptc_search_run(&r, m, &c, &j, NULL), PTC_E_INVAL);
    assert_null(r);
    assert_non_null(strstr(ptc_last_error(), "gpus must be >= 1"));
    c = slow_cluster(4, 8);
    c.inter_bw = 0;
    assert_int_equal(ptc_search_run(&r, m, &c, &j, NULL), PTC_E_INVAL);
    c = slow_cluster(4, 8);
    j.global_batch = 0;
    assert_int_equal(ptc_search_run(&r, m, &c, &j, NULL), PTC_E_INVAL);
    /* 7 GPUs, batch 4, 2 layers: dp=7 does not divide the batch, tp=7 does
     * not divide the split tensors, pp=7 exceeds the layers. */
    c = slow_cluster(7, 8);
    j = job_of(4);
    assert_int_equal(ptc_search_run(&r, m, &c, &j, NULL), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "no valid configuration"));
    /* Invalid configurations are refused with a reason. */
    c = slow_cluster(4, 8);
    ptc_cost_result cr;
    ptc_search_config g = cfg(2, 2, 1, 0, PTC_SCHED_1F1B, 1, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &cr), PTC_E_CONFIG); /* 2*1*1 != 4 */
    g = cfg(1, 1, 4, 0, PTC_SCHED_1F1B, 4, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &cr), PTC_E_CONFIG); /* 4 stages, 2 layers */
    assert_non_null(strstr(ptc_last_error(), "4 stages for 2 layers"));
    g = cfg(4, 1, 1, 0, PTC_SCHED_1F1B, 1, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &cr), PTC_OK);
    g = cfg(1, 4, 1, 0, PTC_SCHED_1F1B, 4, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &cr), PTC_OK); /* 8/4, 4/4: fine */
    c = slow_cluster(3, 8);
    g = cfg(1, 3, 1, 0, PTC_SCHED_1F1B, 4, 1, 1, 0);
    assert_int_equal(ptc_cost_evaluate(m, &c, &j, &g, &cr), PTC_E_CONFIG); /* 8 rows / 3 */
    assert_non_null(strstr(ptc_last_error(), "tp=3 does not divide"));
    ptc_cost_model_destroy(m);
}

static void nothing_fits(void **state)
{
    (void)state;
    ptc_cost_model *m = tiny();
    ptc_search_cluster c = slow_cluster(4, 2);
    ptc_search_job j = job_of(8);
    ptc_search_opts o;
    ptc_search_opts_init(&o);
    /* Find the least memory any configuration needs, then offer a byte
     * less: the search must say that nothing fits and by how much. */
    c.mem_bytes = 1;
    ptc_search_result *r;
    assert_int_equal(ptc_search_run(&r, m, &c, &j, &o), PTC_OK);
    assert_int_equal(ptc_search_result_count(r), 0);
    const ptc_search_entry *cl = ptc_search_result_closest(r);
    assert_non_null(cl);
    double need = cl->cost.mem;
    ptc_search_stats st;
    ptc_search_result_stats(r, &st);
    assert_true(st.exhaustive); /* descent found nothing: everything was tried */
    assert_int_equal(st.fitting, 0);
    assert_true(ptc_search_result_rejected_count(r) > 0);
    ptc_search_result_destroy(r);
    c.mem_bytes = need - 1;
    assert_int_equal(ptc_search_run(&r, m, &c, &j, &o), PTC_OK);
    assert_int_equal(ptc_search_result_count(r), 0);
    close_to(ptc_search_result_closest(r)->cost.shortfall, 1, "smallest shortfall");
    ptc_search_result_destroy(r);
    c.mem_bytes = need;
    assert_int_equal(ptc_search_run(&r, m, &c, &j, &o), PTC_OK);
    assert_true(ptc_search_result_count(r) >= 1);
    assert_null(ptc_search_result_closest(r));
    close_to(ptc_search_result_entry(r, 0)->cost.mem, need, "the one that just fits");
    ptc_search_result_destroy(r);
    ptc_cost_model_destroy(m);
}

static void allocation_failures(void **state)
{
    (void)state;
    ptc_search_spec sp;
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=4,hidden=256,heads=4,vocab=1000,"
                                                "seq=128"), PTC_OK);
    ptc_search_cluster c;
    ptc_search_cluster_init(&c);
    c.gpus = 8;
    c.gpus_per_host = 4;
    ptc_search_job j = job_of(16);
    ptc_search_opts o;
    ptc_search_opts_init(&o);
    o.restarts = 2;
    /* Count the allocations of one run, then fail each in turn. */
    ptc_fault_alloc_at(0);
    long before = ptc_fault_alloc_count();
    ptc_cost_model *m;
    assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
    ptc_search_result *r;
    assert_int_equal(ptc_search_run(&r, m, &c, &j, &o), PTC_OK);
    ptc_search_result_destroy(r);
    ptc_cost_model_destroy(m);
    long total = ptc_fault_alloc_count() - before;
    assert_true(total > 10);
    long step = total > 400 ? total / 400 : 1;
    for (long n = 1; n <= total; n += step) {
        ptc_fault_alloc_at(n);
        m = NULL;
        r = NULL;
        int rc = ptc_cost_model_from_spec(&m, &sp);
        if (rc == PTC_OK)
            rc = ptc_search_run(&r, m, &c, &j, &o);
        ptc_fault_alloc_at(0);
        if (rc != PTC_OK && rc != PTC_E_NOMEM)
            fail_msg("allocation %ld: %s", n, ptc_last_error());
        if (rc != PTC_OK)
            assert_null(r);
        ptc_search_result_destroy(r);
        ptc_cost_model_destroy(m);
    }
}

/* ---- descent against exhaustive search ------------------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int ri(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }
static double rf(double lo, double hi) { return lo + (hi - lo) * (double)(rnd() >> 11) * 0x1p-53; }

/* The full runs (PTC_TEST_FULL=1: unit.test_search_all, label slow). */
static bool test_full(void)
{
    const char *full = getenv("PTC_TEST_FULL");
    return full && !strcmp(full, "1");
}

/* Under the sanitizers (which look for memory errors; the agreement rate is
 * the plain build's to check) the first 20 cases: every path of both
 * searches, at a fifth of the time (unit.test_search took 103 s of the
 * sanitizer pass on the 2-core CI machine). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define SEARCH_CASES 20
#else
#define SEARCH_CASES 100
#endif

/* 1000 random cases in the full run, the first SEARCH_CASES otherwise. */
static void descent_vs_exhaustive(void **state)
{
    (void)state;
    rng_state = 88172645463325252ull; /* fixed: the test is deterministic */
    int cases = test_full() ? 1000 : SEARCH_CASES;
    int valid = 0, agree = 0, none_fit = 0;
    double t_desc = 0, t_ex = 0;
    for (int i = 0; i < cases; i++) {
        char txt[160];
        if (rnd() % 5 == 0) {
            snprintf(txt, sizeof txt, "mlp:layers=%d,hidden=%d,vocab=%d,tokens=%d", ri(1, 24),
                     16 << ri(0, 5), ri(16, 4096), 8 << ri(0, 6));
        } else {
            int heads = 1 << ri(0, 5);
            if (rnd() % 3 == 0)
                heads *= 3;
            int hd = 32 << ri(0, 2);
            snprintf(txt, sizeof txt, "gpt:layers=%d,hidden=%d,heads=%d,vocab=%d,seq=%d",
                     ri(1, 48), heads * hd, heads, ri(1000, 60000), 128 << ri(0, 5));
        }
        ptc_search_spec sp;
        ptc_cost_model *m;
        assert_int_equal(ptc_search_spec_parse(&sp, txt), PTC_OK);
        assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
        ptc_search_cluster c;
        ptc_search_cluster_init(&c);
        c.gpus = rnd() % 2 ? 1 << ri(0, 6) : ri(1, 64);
        c.gpus_per_host = 1 << ri(0, 3);
        c.flops = rf(5e12, 400e12);
        c.intra_bw = rf(20e9, 600e9);
        c.inter_bw = rf(2e9, 50e9);
        c.intra_lat = rf(1e-6, 20e-6);
        c.inter_lat = rf(2e-6, 50e-6);
        ptc_search_job j = job_of(rnd() % 2 ? (int64_t)c.gpus * ri(1, 8) : ri(1, 512));
        j.dp_overlap = rnd() % 2;
        ptc_search_opts o;
        ptc_search_opts_init(&o);
        /* Memory from just under the least any configuration needs to 8x. */
        c.mem_bytes = 1;
        o.exhaustive = true;
        ptc_search_result *a, *b;
        if (ptc_search_run(&a, m, &c, &j, &o) != PTC_OK) {
            assert_int_equal(ptc_search_run(&a, m, &c, &j, &o), PTC_E_CONFIG);
            ptc_cost_model_destroy(m);
            continue; /* no valid configuration at all (e.g. a prime batch) */
        }
        double need = ptc_search_result_closest(a)->cost.mem;
        ptc_search_result_destroy(a);
        c.mem_bytes = need * exp(rf(log(0.9), log(8)));
        o.exhaustive = false;
        assert_int_equal(ptc_search_run(&a, m, &c, &j, &o), PTC_OK);
        o.exhaustive = true;
        assert_int_equal(ptc_search_run(&b, m, &c, &j, &o), PTC_OK);
        ptc_search_stats sa, sb;
        ptc_search_result_stats(a, &sa);
        ptc_search_result_stats(b, &sb);
        t_desc += sa.seconds;
        t_ex += sb.seconds;
        valid++;
        size_t na = ptc_search_result_count(a), nb = ptc_search_result_count(b);
        if (na == 0 || nb == 0) {
            assert_int_equal(na, nb); /* descent falls back to exhaustive */
            none_fit++;
            agree++;
        } else {
            double x = ptc_search_result_entry(a, 0)->cost.step_time;
            double y = ptc_search_result_entry(b, 0)->cost.step_time;
            assert_true(x >= y * (1 - 1e-9)); /* exhaustive is never beaten */
            if (x <= y * 1.01)
                agree++;
        }
        ptc_search_result_destroy(a);
        ptc_search_result_destroy(b);
        ptc_cost_model_destroy(m);
    }
    double rate = (double)agree / valid;
    printf("# descent within 1%% of exhaustive: %d of %d (%.1f%%); %d with nothing fitting; "
           "search time descent %.2f s, exhaustive %.2f s\n",
           agree, valid, 100 * rate, none_fit, t_desc, t_ex);
    assert_true(valid >= cases * 4 / 5);
    if (cases >= 100) /* a statistic of the 100 cases (16 of 17 under the sanitizers) */
        assert_true(rate >= 0.95);
}

/* ---- published settings --------------------------------------------------------- */

/* GPT models of Narayanan et al. 2021 (Megatron-LM, Table 1): layers,
 * hidden, heads, GPUs, global batch; vocabulary 51200, sequence 2048; and
 * the tensor- and pipeline-parallel sizes used there. */
static const struct {
    const char *name;
    int layers, hidden, heads, gpus, batch, tp, pp;
} published[] = {
    {"1.7B", 24, 2304, 24, 32, 512, 1, 1},        {"3.6B", 30, 3072, 32, 64, 512, 2, 1},
    {"7.5B", 36, 4096, 32, 128, 512, 4, 1},       {"18B", 40, 6144, 48, 256, 1024, 8, 1},
    {"39B", 48, 8192, 64, 512, 1536, 8, 2},       {"76B", 60, 10240, 80, 1024, 1792, 8, 4},
    {"145B", 80, 12288, 96, 1536, 2304, 8, 8},    {"310B", 96, 16384, 128, 1920, 2160, 8, 16},
    {"530B", 105, 20480, 128, 2520, 2520, 8, 35}, {"1T", 128, 25600, 160, 3072, 3072, 8, 64},
};

/* Does any configuration with pp = 1 and tensor parallelism inside a host
 * fit? */
static bool fits_without_pp(const ptc_cost_model *m, const ptc_search_cluster *c,
                            const ptc_search_job *j)
{
    for (int T = 1; T <= c->gpus && T <= c->gpus_per_host; T++) {
        if (c->gpus % T || j->global_batch % (c->gpus / T))
            continue;
        int D = c->gpus / T;
        int64_t per = j->global_batch / D;
        for (int64_t mb = 1; mb <= per; mb++)
            for (int z = 0; z <= (j->no_zero ? 0 : 1); z++) {
                if (per % mb)
                    continue;
                ptc_search_config g = cfg(D, T, 1, z, PTC_SCHED_1F1B, (int)(per / mb), (int)mb,
                                          1, 0);
                ptc_cost_result r;
                if (ptc_cost_evaluate(m, c, j, &g, &r) == PTC_OK && r.fits)
                    return true;
            }
    }
    return false;
}

/* Every model in the full run; otherwise those up to 1,536 GPUs (through
 * 145B: pipelines appear from 76B on), which take a tenth of the time. */
static void published_settings(void **state)
{
    (void)state;
    bool full = test_full();
    printf("# model  paper tp/pp | ptc suggest (default) | Megatron-2021 features (no ZeRO, "
           "1F1B/interleaved)\n");
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        if (!full && published[i].gpus > 1536)
            continue;
        char txt[160];
        snprintf(txt, sizeof txt, "gpt:layers=%d,hidden=%d,heads=%d,vocab=51200,seq=2048",
                 published[i].layers, published[i].hidden, published[i].heads);
        ptc_search_spec sp;
        ptc_cost_model *m;
        assert_int_equal(ptc_search_spec_parse(&sp, txt), PTC_OK);
        assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
        ptc_search_cluster c;
        ptc_search_cluster_init(&c); /* A100 80GB, 8 per host, NVLink, IB */
        c.gpus = published[i].gpus;
        ptc_search_job j = job_of(published[i].batch);
        j.dp_overlap = true;
        ptc_search_result *r;
        /* 1. The default search keeps tensor parallelism inside a host. */
        assert_int_equal(ptc_search_run(&r, m, &c, &j, NULL), PTC_OK);
        assert_true(ptc_search_result_count(r) > 0);
        ptc_search_config d = ptc_search_result_entry(r, 0)->config;
        ptc_search_result_destroy(r);
        if (d.tp > c.gpus_per_host)
            fail_msg("%s: tp=%d spans hosts", published[i].name, d.tp);
        /* 2. With the published systems' features, pipeline parallelism
         * appears exactly when the model does not fit without it (and
         * tensor parallelism inside a host). */
        ptc_search_job jm = j;
        jm.no_zero = true;
        jm.kinds = 1u << PTC_SCHED_1F1B | 1u << PTC_SCHED_INTERLEAVED;
        assert_int_equal(ptc_search_run(&r, m, &c, &jm, NULL), PTC_OK);
        assert_true(ptc_search_result_count(r) > 0);
        ptc_search_config p = ptc_search_result_entry(r, 0)->config;
        ptc_search_result_destroy(r);
        bool fits1 = fits_without_pp(m, &c, &jm);
        printf("# %-5s  %2d/%-3d | dp=%d tp=%d pp=%d zero=%d %s | dp=%d tp=%d pp=%d %s "
               "(pp=1 %s)\n", published[i].name, published[i].tp, published[i].pp, d.dp, d.tp,
               d.pp, d.zero, ptc_sched_kind_name(d.schedule), p.dp, p.tp, p.pp,
               ptc_sched_kind_name(p.schedule), fits1 ? "fits" : "does not fit");
        if (fits1 != (p.pp == 1))
            fail_msg("%s: pp=%d chosen while pp=1 %s", published[i].name, p.pp,
                     fits1 ? "fits" : "does not fit");
        if (published[i].pp == 1)
            assert_int_equal(d.pp, 1); /* where the paper needed no pipeline, neither do we */
        ptc_cost_model_destroy(m);
    }
}

static void search_is_deterministic(void **state)
{
    (void)state;
    ptc_search_spec sp;
    assert_int_equal(ptc_search_spec_parse(&sp, "gpt:layers=32,hidden=4096,heads=32,vocab=50000,"
                                                "seq=2048"), PTC_OK);
    ptc_cost_model *m;
    assert_int_equal(ptc_cost_model_from_spec(&m, &sp), PTC_OK);
    ptc_search_cluster c;
    ptc_search_cluster_init(&c);
    c.gpus = 64;
    ptc_search_job j = job_of(256);
    ptc_search_opts o;
    ptc_search_opts_init(&o);
    o.top = 10;
    ptc_search_result *a, *b;
    assert_int_equal(ptc_search_run(&a, m, &c, &j, &o), PTC_OK);
    assert_int_equal(ptc_search_run(&b, m, &c, &j, &o), PTC_OK);
    assert_int_equal(ptc_search_result_count(a), ptc_search_result_count(b));
    for (size_t i = 0; i < ptc_search_result_count(a); i++) {
        const ptc_search_entry *x = ptc_search_result_entry(a, i), *y = ptc_search_result_entry(b, i);
        assert_memory_equal(&x->config, &y->config, sizeof x->config);
        assert_true(x->cost.step_time == y->cost.step_time);
        if (i > 0) /* best first */
            assert_true(ptc_search_result_entry(a, i - 1)->cost.step_time <=
                        x->cost.step_time * (1 + 1e-9));
        /* Entries are the evaluation of their configuration. */
        ptc_cost_result r;
        assert_int_equal(ptc_cost_evaluate(m, &c, &j, &x->config, &r), PTC_OK);
        close_to(r.step_time, x->cost.step_time, "re-evaluated step");
        close_to(r.mem, x->cost.mem, "re-evaluated memory");
        close_to(r.compute + r.tp_comm + r.bubble + r.pp_comm + r.dp_comm, r.step_time,
                 "breakdown adds up");
    }
    char buf[128];
    assert_int_equal(ptc_search_config_format(&ptc_search_result_entry(a, 0)->config, buf,
                                              sizeof buf), PTC_OK);
    assert_non_null(strstr(buf, "dp="));
    assert_int_equal(ptc_search_config_format(&ptc_search_result_entry(a, 0)->config, buf, 8),
                     PTC_E_RANGE);
    ptc_search_result_destroy(a);
    ptc_search_result_destroy(b);
    ptc_cost_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tp_formulas),
        cmocka_unit_test(dp_formulas),
        cmocka_unit_test(links_by_rank_order),
        cmocka_unit_test(pipeline_formulas),
        cmocka_unit_test(demo_activations),
        cmocka_unit_test(extension_matches_full_simulation),
        cmocka_unit_test(bad_specs),
        cmocka_unit_test(bad_clusters_and_configs),
        cmocka_unit_test(nothing_fits),
        cmocka_unit_test(allocation_failures),
        cmocka_unit_test(search_is_deterministic),
        cmocka_unit_test(published_settings),
        cmocka_unit_test(descent_vs_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
