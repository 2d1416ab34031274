/* Pipeline runtime: process-group arithmetic, message tags, per-rank plans
 * (buffer lifetimes, posts), fake compute, the demo model's B = I + W.
 * Whole steps in one process: test_exec_mpi.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "exec/runtime/runtime_internal.h"
#include "ptc/exec_model.h"

static void test_groups_partition(void **state)
{
    (void)state;
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "dp=2,tp=2,pp=3"), PTC_OK);
    int world = ptc_config_world(&c);
    for (int kind = 0; kind <= PTC_EXEC_GROUP_PAIR; kind++) {
        int seen[12] = {0};
        for (int r = 0; r < world; r++) {
            int mem[16], n, idx, color, key;
            assert_int_equal(ptc_exec_group_members(&c, r, kind, mem, 16, &n, &idx), PTC_OK);
            assert_int_equal(ptc_exec_group_color(&c, r, kind, &color, &key), PTC_OK);
            assert_int_equal(mem[idx], r);
            assert_int_equal(idx, key);
            for (int i = 0; i < n; i++) {
                int c2, k2;
                ptc_exec_group_color(&c, mem[i], kind, &c2, &k2);
                assert_int_equal(c2, color); /* one colour per group */
                assert_int_equal(k2, i);     /* keys give the member order */
            }
            seen[r]++;
        }
        for (int r = 0; r < world; r++)
            assert_int_equal(seen[r], 1);
    }
    /* rank 7 = (pp 1, dp 1, tp 1) */
    int mem[16], n, idx;
    ptc_exec_group_members(&c, 7, PTC_EXEC_GROUP_PIPE, mem, 16, &n, &idx);
    assert_int_equal(n, 3);
    assert_int_equal(mem[0], 3);
    assert_int_equal(mem[1], 7);
    assert_int_equal(mem[2], 11);
    assert_int_equal(idx, 1);
    ptc_exec_group_members(&c, 7, PTC_EXEC_GROUP_DP, mem, 16, &n, &idx);
    assert_int_equal(n, 2);
    assert_int_equal(mem[0], 5);
    assert_int_equal(mem[1], 7);
    ptc_exec_group_members(&c, 7, PTC_EXEC_GROUP_TP, mem, 16, &n, &idx);
    assert_int_equal(mem[0], 6);
    assert_int_equal(mem[1], 7);
    /* Chimera pair of rank 0 (pp 0): pp 0 and pp 2, both replicas */
    ptc_exec_group_members(&c, 0, PTC_EXEC_GROUP_PAIR, mem, 16, &n, &idx);
    assert_int_equal(n, 4);
    assert_int_equal(mem[0], 0);
    assert_int_equal(mem[1], 2);
    assert_int_equal(mem[2], 8);
    assert_int_equal(mem[3], 10);
    /* middle stage of odd P pairs with itself */
    ptc_exec_group_members(&c, 7, PTC_EXEC_GROUP_PAIR, mem, 16, &n, &idx);
    assert_int_equal(n, 2);
    assert_int_equal(mem[0], 5);
    assert_int_equal(mem[1], 7);
    assert_int_equal(ptc_exec_group_members(&c, 7, PTC_EXEC_GROUP_PIPE, mem, 2, &n, NULL),
                     PTC_E_RANGE);
    assert_int_equal(ptc_exec_group_members(&c, 12, PTC_EXEC_GROUP_PIPE, mem, 16, &n, NULL),
                     PTC_E_RANGE);
}

static void test_tags(void **state)
{
    (void)state;
    assert_int_equal(ptc_exec_tag(0, 0, 0, 8, 32767), 0);
    assert_int_equal(ptc_exec_tag(1, 0, 0, 8, 32767), 1);
    assert_int_equal(ptc_exec_tag(0, 3, 2, 8, 32767), (2 * 8 + 3) * 2);
    assert_int_equal(ptc_exec_tag(0, 0, 2048, 8, 32767), -1);
    assert_int_equal(ptc_exec_tag(2, 0, 0, 8, 32767), -1);
    /* unique over all (kind, mb, stage) */
    static unsigned char hit[2 * 5 * 7];
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 5; m++)
            for (int g = 0; g < 7; g++) {
                int t = ptc_exec_tag(k, m, g, 5, 1 << 30);
                assert_true(t >= 0 && t < (int)sizeof hit);
                assert_int_equal(hit[t]++, 0);
            }
}

static ptc_sched *gen(ptc_sched_kind_id kind, int P, int M, int V)
{
    ptc_sched *s = NULL;
    ptc_sched_gen g = {.kind = kind, .ranks = P, .microbatches = M, .chunks = V, .k = 2};
    assert_int_equal(ptc_sched_generate(&s, &g), PTC_OK);
    return s;
}

static void test_plan_lifetimes(void **state)
{
    (void)state;
    for (int kind = PTC_SCHED_GPIPE; kind <= PTC_SCHED_ZBV; kind++) {
        ptc_sched *s = gen(kind, 4, 8, 2);
        size_t sends = 0, recvs = 0;
        for (int r = 0; r < 4; r++) {
            ptc_exec_plan_info in;
            assert_int_equal(ptc_exec_plan_inspect(s, r, &in), PTC_OK);
            assert_int_equal(in.final_buffers, 0); /* everything allocated is freed */
            assert_true(in.peak_buffers >= 1);
            sends += in.sends;
            recvs += in.recvs;
            if (kind == PTC_SCHED_ZBV)
                /* stages P-1 and P meet on rank P-1: F and B hand over */
                assert_int_equal(in.local_handoffs, r == 3 ? 16u : 0u);
            else
                assert_int_equal(in.local_handoffs, 0);
        }
        assert_int_equal(sends, recvs);
        ptc_sched_destroy(s);
    }
    /* GPipe's last stage keeps every micro-batch's input until its backward,
     * plus one outgoing gradient: M + 1. 1F1B keeps far fewer. */
    ptc_sched *g = gen(PTC_SCHED_GPIPE, 2, 4, 1), *o = gen(PTC_SCHED_1F1B, 2, 4, 1);
    ptc_exec_plan_info ig, io;
    assert_int_equal(ptc_exec_plan_inspect(g, 1, &ig), PTC_OK);
    assert_int_equal(ptc_exec_plan_inspect(o, 1, &io), PTC_OK);
    assert_int_equal(ig.peak_buffers, 5);
    assert_true(io.peak_buffers <= 3);
    assert_int_equal(ig.recvs, 4);
    assert_int_equal(ig.sends, 4);
    assert_int_equal(ptc_exec_plan_inspect(g, 2, &ig), PTC_E_RANGE);
    ptc_sched_destroy(g);
    ptc_sched_destroy(o);
}

static void test_plan_posts(void **state)
{
    (void)state;
    /* Sends are attached to their producer, receives listed in order. */
    ptc_sched *s = gen(PTC_SCHED_1F1B, 2, 3, 1);
    assert_int_equal(ptc_sched_infer_comm(s), PTC_OK);
    rt_plan p;
    assert_int_equal(rt_plan_build(&p, s, 0, 1 << 30), PTC_OK);
    for (size_t i = 0; i < p.n; i++) {
        const rt_op *o = &p.ops[i];
        if (o->a.op == PTC_SCHED_F) {
            assert_int_equal(o->nsend, 1);
            int j = p.send_of[o->first_send];
            assert_int_equal(p.ops[j].a.op, PTC_SCHED_SEND);
            assert_int_equal(p.ops[j].a.mb, o->a.mb);
            assert_true((size_t)j > i);
            assert_int_equal(p.ops[j].tag, ptc_exec_tag(PTC_SCHED_ACT, o->a.mb, 1, 3, 1 << 30));
        }
        if (o->a.op == PTC_SCHED_B) {
            assert_true(o->wait_recv >= 0); /* dout comes from rank 1 */
            assert_int_equal(p.ops[o->wait_recv].a.op, PTC_SCHED_RECV);
            assert_int_equal(p.ops[o->wait_recv].a.mb, o->a.mb);
            assert_int_equal(o->out, -1); /* first stage: no dinp */
        }
    }
    assert_int_equal(p.nrecv, 3);
    for (size_t k = 1; k < p.nrecv; k++)
        assert_true(p.recvs[k] > p.recvs[k - 1]);
    rt_plan_free(&p);
    /* Tags too large for the MPI bound: FIFO tags, sends in list order. */
    assert_int_equal(rt_plan_build(&p, s, 0, 3), PTC_OK);
    for (size_t i = 0; i < p.n; i++) {
        if (p.ops[i].a.op == PTC_SCHED_SEND || p.ops[i].a.op == PTC_SCHED_RECV)
            assert_int_equal(p.ops[i].tag, p.ops[i].a.tensor);
        if (p.ops[i].a.op == PTC_SCHED_F)
            assert_int_equal(p.ops[i].nsend, 0);
    }
    rt_plan_free(&p);
    ptc_sched_destroy(s);
    /* A send before its producer is refused, naming the step. */
    const char *bad = "ranks 2\nstages 2\nmicrobatches 1\n"
                      "rank 0: SA0>1 F0 RG0<1 B0\nrank 1: RA0<0 F0 B0 SG0>0\n";
    assert_int_equal(ptc_sched_parse(&s, bad, strlen(bad)), PTC_OK);
    assert_int_equal(rt_plan_build(&p, s, 0, 1 << 30), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "step 0 (SA0>1): send before"));
    ptc_sched_destroy(s);
}

/* Every refusal of the plan builder names the step and the problem. */
static void test_plan_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *rank1; /* rank 1's list (rank 0: F0 SA0>1 RG0<1 B0) */
        const char *error;
    } cases[] = {
        {"F0 B0 SG0>0", "step 0 (F0): forward input never received"},
        {"RA0<0 RA0<0 F0 B0 SG0>0", "step 1 (RA0<0): receive into a buffer still in use"},
        {"B0 RA0<0 F0 SG0>0", "step 0 (B0): backward before its forward"},
        {"W0 RA0<0 F0 B0 SG0>0", "step 0 (W0): weight gradient without a live input"},
        {"RA0<0 F0 B0 B0 SG0>0", "step 3 (B0): backward before its forward"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "ranks 2\nstages 2\nmicrobatches 1\nrank 0: F0 SA0>1 RG0<1 B0\nrank 1: %s\n",
                 cases[i].rank1);
        ptc_sched *s;
        assert_int_equal(ptc_sched_parse(&s, text, strlen(text)), PTC_OK);
        rt_plan p;
        assert_int_equal(rt_plan_build(&p, s, 0, 1 << 30), PTC_OK); /* rank 0 is sound */
        rt_plan_free(&p);
        assert_int_equal(rt_plan_build(&p, s, 1, 1 << 30), PTC_E_INVAL);
        if (!strstr(ptc_last_error(), cases[i].error))
            fail_msg("case %zu: '%s', want '%s'", i, ptc_last_error(), cases[i].error);
        ptc_sched_destroy(s);
    }
    /* Two forwards of one micro-batch on the first stage. */
    const char *twice = "ranks 2\nstages 2\nmicrobatches 1\n"
                        "rank 0: F0 F0 SA0>1 RG0<1 B0\nrank 1: RA0<0 F0 B0 SG0>0\n";
    ptc_sched *s;
    assert_int_equal(ptc_sched_parse(&s, twice, strlen(twice)), PTC_OK);
    rt_plan p;
    assert_int_equal(rt_plan_build(&p, s, 0, 1 << 30), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "step 1 (F0): activation produced twice"));
    ptc_sched_destroy(s);
}

static void test_fake_checks(void **state)
{
    (void)state;
    ptc_sched *s = gen(PTC_SCHED_1F1B, 2, 2, 1);
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    ptc_exec_fake *f0, *f1;
    assert_int_equal(ptc_exec_fake_create(&f0, s, 0, &c, 0, 64), PTC_OK);
    assert_int_equal(ptc_exec_fake_create(&f1, s, 1, &c, 0, 64), PTC_OK);
    ptc_exec_stage a, b;
    ptc_exec_fake_stage(f0, &a);
    ptc_exec_fake_stage(f1, &b);
    char buf[64], grad[64];
    assert_int_equal(a.forward(a.user, 0, 1, NULL, buf), PTC_OK);
    assert_int_equal(b.forward(b.user, 0, 0, buf, NULL), PTC_E_INVAL); /* mb 1 sent as 0 */
    assert_int_equal(b.forward(b.user, 0, 1, buf, NULL), PTC_OK);
    assert_int_equal(ptc_exec_fake_checked(f1), 1);
    assert_int_equal(b.backward(b.user, 0, 1, NULL, grad), PTC_OK);
    assert_int_equal(a.backward(a.user, 0, 1, buf, NULL), PTC_E_INVAL); /* an activation */
    assert_int_equal(a.backward(a.user, 0, 1, grad, NULL), PTC_OK);
    ptc_exec_fake *bad;
    assert_int_equal(ptc_exec_fake_create(&bad, s, 0, &c, 0, 16), PTC_E_INVAL);
    assert_null(bad);
    ptc_exec_fake_destroy(f0);
    ptc_exec_fake_destroy(f1);
    ptc_sched_destroy(s);
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

static void test_model_split_backward(void **state)
{
    (void)state;
    ptc_exec_model_cfg m = {.layers = 2, .hidden = 4, .vocab = 11, .tokens = 3, .seed = 5};
    assert_int_equal(ptc_exec_model_parse(&m, "mlp:layers=3,hidden=6,vocab=11,tokens=3"),
                     PTC_OK);
    assert_int_equal(m.layers, 3);
    assert_int_equal(m.hidden, 6);
    assert_int_equal(ptc_exec_model_parse(&m, "mlp:layers=3,depth=2"), PTC_E_INVAL);
    assert_int_equal(ptc_exec_model_parse(&m, "gpt:layers=3"), PTC_E_INVAL);
    assert_int_equal(ptc_exec_model_parse(&m, "mlp:vocab=1"), PTC_E_INVAL);
    ptc_sched *s = gen(PTC_SCHED_1F1B, 1, 2, 1);
    ptc_exec_model *x, *y;
    assert_int_equal(ptc_exec_model_create(&x, &m, s, 0, 0, 2, data, NULL), PTC_OK);
    assert_int_equal(ptc_exec_model_create(&y, &m, s, 0, 0, 2, data, NULL), PTC_OK);
    ptc_exec_stage a, b;
    ptc_exec_model_stage(x, &a);
    ptc_exec_model_stage(y, &b);
    for (int mb = 0; mb < 2; mb++) {
        assert_int_equal(a.forward(a.user, 0, mb, NULL, NULL), PTC_OK);
        assert_int_equal(a.backward(a.user, 0, mb, NULL, NULL), PTC_OK);
        assert_int_equal(b.forward(b.user, 0, mb, NULL, NULL), PTC_OK);
        assert_int_equal(b.backward_input(b.user, 0, mb, NULL, NULL), PTC_OK);
        assert_int_equal(b.backward_weight(b.user, 0, mb), PTC_OK);
    }
    assert_int_equal(a.backward(a.user, 0, 0, NULL, NULL), PTC_E_INVAL); /* no forward */
    float *ga, *gb;
    size_t na, nb;
    assert_int_equal(a.grads(a.user, 0, &ga, &na), PTC_OK);
    assert_int_equal(b.grads(b.user, 0, &gb, &nb), PTC_OK);
    /* embed 11*6 + 3 layers * (6+6+24*6+24+6*24+6) + norm 12 + head 11*6 */
    assert_int_equal(na, 11 * 6 + 3 * (12 + 144 + 24 + 144 + 6) + 12 + 66);
    assert_int_equal(na, nb);
    assert_memory_equal(ga, gb, na * sizeof(float)); /* B == I then W, bit for bit */
    double nz = 0;
    for (size_t i = 0; i < na; i++)
        nz += ga[i] != 0;
    assert_true(nz > na / 2);
    size_t np;
    const ptc_exec_param *p = ptc_exec_model_params(x, &np);
    assert_int_equal(np, 1 + 3 * 6 + 3);
    assert_string_equal(p[0].name, "model.embed_tokens.weight");
    assert_string_equal(p[3].name, "model.layers.0.mlp.up_proj.weight");
    assert_int_equal(p[3].shape[0], 24);
    assert_string_equal(p[np - 1].name, "lm_head.weight");
    int nl;
    const double *l = ptc_exec_model_losses(x, &nl);
    assert_int_equal(nl, 2);
    assert_true(l[0] > 1.0 && l[0] < 5.0); /* about log(11) at initialisation */
    ptc_exec_model_destroy(x);
    ptc_exec_model_destroy(y);
    ptc_sched_destroy(s);
}

static void test_model_stage_split(void **state)
{
    (void)state;
    /* 5 layers over 4 stages (interleaved P=2, V=2), floor rule:
     * stage 0: layer 0, 1: 1, 2: 2, 3: 3 and 4. Rank 1 holds stages 1, 3. */
    ptc_exec_model_cfg m = {.layers = 5, .hidden = 4, .vocab = 11, .tokens = 2};
    ptc_sched *s = gen(PTC_SCHED_INTERLEAVED, 2, 2, 2);
    ptc_exec_model *x;
    assert_int_equal(ptc_exec_model_create(&x, &m, s, 1, 0, 2, data, NULL), PTC_OK);
    size_t np;
    const ptc_exec_param *p = ptc_exec_model_params(x, &np);
    int layers_seen[5] = {0};
    for (size_t i = 0; i < np; i++) {
        int l;
        if (sscanf(p[i].name, "model.layers.%d.", &l) == 1)
            layers_seen[l] = p[i].stage + 1;
    }
    assert_int_equal(layers_seen[0], 0);
    assert_int_equal(layers_seen[1], 2);
    assert_int_equal(layers_seen[2], 0);
    assert_int_equal(layers_seen[3], 4);
    assert_int_equal(layers_seen[4], 4);
    assert_string_equal(p[0].name, "model.layers.1.input_layernorm.weight");
    assert_string_equal(p[np - 1].name, "lm_head.weight");
    ptc_exec_model_destroy(x);
    ptc_sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups_partition),  cmocka_unit_test(test_tags),
        cmocka_unit_test(test_plan_lifetimes),    cmocka_unit_test(test_plan_posts),
        cmocka_unit_test(test_plan_refusals),
        cmocka_unit_test(test_fake_checks),       cmocka_unit_test(test_model_split_backward),
        cmocka_unit_test(test_model_stage_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
