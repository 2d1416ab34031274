/* torch.distributed.pipelining's action lists: writing (both forms),
 * reading (torch 2.15's own output), round trips and errors. */
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
    if (ptc_sched_generate(&s, &g))
        fail_msg("generate: %s", ptc_last_error());
    return s;
}

static char *to_torch(const ptc_sched *s, int form)
{
    char *t;
    size_t n;
    if (ptc_sched_to_torch(s, form, &t, &n))
        fail_msg("to_torch: %s", ptc_last_error());
    assert_int_equal(strlen(t), n);
    return t;
}

static ptc_sched *from_torch(const char *t, int M, size_t *skipped)
{
    ptc_sched *s = NULL;
    size_t sk;
    if (ptc_sched_from_torch(&s, t, strlen(t), M, skipped ? skipped : &sk))
        fail_msg("from_torch: %s", ptc_last_error());
    return s;
}

static void test_write_exact(void **st)
{
    (void)st;
    ptc_sched *s = gen(PTC_SCHED_1F1B, 2, 2, 1, 1);
    char *t = to_torch(s, PTC_SCHED_TORCH_COMPUTE);
    assert_string_equal(t, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
    ptc_sched_text_free(t);
    ptc_sched_destroy(s);
    /* V placement: rank 0 holds stages 0 and 3 (global indices) */
    s = gen(PTC_SCHED_ZBV, 2, 1, 2, 1);
    t = to_torch(s, PTC_SCHED_TORCH_COMPUTE);
    assert_string_equal(t, "0F0,3F0,3I0,3W0,0I0,0W0\n1F0,2F0,2I0,1I0,2W0,1W0\n");
    ptc_sched_text_free(t);
    ptc_sched_destroy(s);
    /* compute and communication: PTC's send/receive order, each send waited
     * for (a forward send after the local backward), gradients reduced after
     * the stage's last backward and the sends that follow it */
    s = gen(PTC_SCHED_1F1B, 2, 1, 1, 1);
    t = to_torch(s, PTC_SCHED_TORCH_COMMS);
    assert_string_equal(t, "0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,"
                           "0WAIT_REDUCE_GRAD\n"
                           "1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,"
                           "1WAIT_SEND_B0\n");
    ptc_sched_text_free(t);
    ptc_sched_destroy(s);
}

/* Counts of a comms-form row set: every send waited for once, one reduction
 * per stage, every action on the rank that holds its stage. */
static void check_comms(const ptc_sched *s, const char *t)
{
    int S = ptc_sched_stages(s), reduces = 0, sends = 0, waits = 0, recvs = 0, row = 0;
    for (const char *p = t; *p;) {
        const char *e = strchr(p, '\n');
        for (const char *c = p; c < e;) {
            const char *ce = memchr(c, ',', (size_t)(e - c));
            if (!ce)
                ce = e;
            int stage = atoi(c);
            int pipe, owner, chunk;
            assert_int_equal(ptc_sched_rank_of(s, 0, stage, &owner, &chunk), PTC_OK);
            if (owner != row)
                fail_msg("row %d holds an action of stage %d (rank %d's)", row, stage, owner);
            (void)pipe;
            const char *ty = c;
            while (*ty >= '0' && *ty <= '9')
                ty++;
            size_t n = (size_t)(ce - ty);
            if (n >= 6 && !strncmp(ty, "SEND_", 5))
                sends++;
            else if (n >= 6 && !strncmp(ty, "RECV_", 5))
                recvs++;
            else if (n >= 10 && !strncmp(ty, "WAIT_SEND_", 10))
                waits++;
            else if (n == 11 && !strncmp(ty, "REDUCE_GRAD", 11))
                reduces++;
            c = ce + 1;
        }
        row++;
        p = e + 1;
    }
    assert_int_equal(row, ptc_sched_ranks(s));
    assert_int_equal(reduces, S);
    assert_int_equal(sends, waits);
    assert_int_equal(sends, recvs);
}

/* Every single-pipe kind: written in either form and read back, the same
 * schedule (kind label aside); the comms form is consistent. */
static void test_roundtrip_all_kinds(void **st)
{
    (void)st;
    const ptc_sched_kind_id kinds[] = {PTC_SCHED_GPIPE, PTC_SCHED_1F1B, PTC_SCHED_INTERLEAVED,
                                       PTC_SCHED_KFKB, PTC_SCHED_ZBH1, PTC_SCHED_ZBH2,
                                       PTC_SCHED_ZBV, PTC_SCHED_ZBI, PTC_SCHED_LOOPED_BFS,
                                       PTC_SCHED_DUALPIPEV};
    for (size_t ki = 0; ki < sizeof kinds / sizeof *kinds; ki++)
        for (int P = 1; P <= 4; P++)
            for (int M = 2 * P; M <= 4 * P; M += 2 * P) {
                ptc_sched *s = gen(kinds[ki], P, M, 2, 2);
                for (int form = 0; form < 2; form++) {
                    char *t = to_torch(s, form);
                    size_t skipped;
                    ptc_sched *r = from_torch(t, 0, &skipped);
                    assert_string_equal(ptc_sched_kind(r), "torch");
                    assert_int_equal(ptc_sched_set_kind(r, ptc_sched_kind(s), ptc_sched_k(s)),
                                     PTC_OK);
                    if (!ptc_sched_equal(s, r))
                        fail_msg("%s P=%d M=%d form %d: read back differs",
                                 ptc_sched_kind_name(kinds[ki]), P, M, form);
                    assert_true(form ? skipped > 0 : skipped == 0);
                    if (form)
                        check_comms(s, t);
                    ptc_sched_destroy(r);
                    ptc_sched_text_free(t);
                }
                ptc_sched_destroy(s);
            }
}

static void test_two_pipes_refused(void **st)
{
    (void)st;
    const ptc_sched_kind_id kinds[] = {PTC_SCHED_CHIMERA, PTC_SCHED_DUALPIPE};
    for (int i = 0; i < 2; i++) {
        ptc_sched *s = gen(kinds[i], 4, 8, 1, 1);
        char *t = (char *)1;
        assert_int_equal(ptc_sched_to_torch(s, PTC_SCHED_TORCH_COMPUTE, &t, NULL),
                         PTC_E_UNSUPPORTED);
        assert_null(t);
        assert_non_null(strstr(ptc_last_error(), "2 pipelines"));
        assert_non_null(strstr(ptc_last_error(), ptc_sched_kind_name(kinds[i])));
        ptc_sched_destroy(s);
    }
    ptc_sched *s = gen(PTC_SCHED_1F1B, 2, 2, 1, 1);
    char *t;
    assert_int_equal(ptc_sched_to_torch(s, 7, &t, NULL), PTC_E_INVAL);
    ptc_sched_destroy(s);
}

/* torch 2.15's own orders (P=4, M=4 or 8): read, validated, simulated. */
static void test_read_torch_output(void **st)
{
    (void)st;
    /* Schedule1F1B.pipeline_order: its last rank starts at F1 and runs F4 */
    const char *one_f1b = "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\n"
                          "1F0,1F1,1F2,1B0,1F3,1B1,1B2,1B3,1REDUCE_GRAD,1WAIT_REDUCE_GRAD\n"
                          "2F0,2F1,2B0,2F2,2B1,2F3,2B2,2B3,2REDUCE_GRAD,2WAIT_REDUCE_GRAD\n"
                          "3F1,3B0,3F2,3B1,3F3,3B2,3F4,3B3,3REDUCE_GRAD,3WAIT_REDUCE_GRAD\n";
    size_t skipped;
    ptc_sched *s = from_torch(one_f1b, 0, &skipped);
    assert_int_equal(skipped, 8);
    assert_int_equal(ptc_sched_microbatches(s), 5);
    ptc_sched_report rep;
    assert_int_equal(ptc_sched_validate(s, &rep), PTC_E_INVAL);
    assert_string_equal(rep.message, "rank 3 step 1 (B0): backward before the forward of the "
                                     "same micro-batch and stage");
    ptc_sched_report_clear(&rep);
    ptc_sched_destroy(s);
    s = (ptc_sched *)1;
    assert_int_equal(ptc_sched_from_torch(&s, one_f1b, strlen(one_f1b), 4, &skipped),
                     PTC_E_FORMAT);
    assert_null(s);
    assert_string_equal(ptc_last_error(), "torch schedule: rank 3 runs micro-batch 4, out of "
                                          "range (microbatches 4)");
    /* ScheduleDualPipeV, P=2, M=4: idle cells, OVERLAP_F_B groups, B and I/W */
    const char *dpv = "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,"
                      "3B2,(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,0I3,0W3\n"
                      "1F0,2F0,1F1,2F1,1F2,2B0,(2F2;1B0)OVERLAP_F_B,(1F3;2B1)OVERLAP_F_B,"
                      "(2F3;1B1)OVERLAP_F_B,2B2,1B2,2I3,1I3,2W3,1W3\n";
    s = from_torch(dpv, 0, &skipped);
    assert_int_equal(skipped, 0);
    assert_int_equal(ptc_sched_stages(s), 4);
    assert_int_equal(ptc_sched_validate(s, NULL), PTC_OK);
    int pipe, stage;
    assert_int_equal(ptc_sched_stage_of(s, 0, 1, &pipe, &stage), PTC_OK);
    assert_int_equal(stage, 3);
    /* the same order as PTC's own dualpipev */
    ptc_sched *d = gen(PTC_SCHED_DUALPIPEV, 2, 4, 2, 1);
    assert_int_equal(ptc_sched_set_kind(s, "dualpipev", 0), PTC_OK);
    assert_true(ptc_sched_equal(s, d));
    ptc_sched_destroy(d);
    ptc_sched_destroy(s);
    /* quoted cells, CRLF lines, spaces, a trailing empty cell */
    s = from_torch("\"0F0\", 0B0 ,\r\n", 0, NULL);
    assert_int_equal(ptc_sched_validate(s, NULL), PTC_OK);
    ptc_sched_destroy(s);
}

static void test_read_errors(void **st)
{
    (void)st;
    struct {
        const char *text;
        int M, code;
        const char *needle;
    } bad[] = {
        {"0F0\n0B0\n", 0, PTC_E_FORMAT, "stage 0 has actions on rank 0 and on rank 1"},
        {"0F0,0B0,2F0,2B0\n", 0, PTC_E_FORMAT, "stage 1 has no action (stages 0..2 are used)"},
        {"0X0\n", 0, PTC_E_FORMAT, "line 1 (rank 0) cell 1 '0X0': unknown action type"},
        {"0F0,0F\n", 0, PTC_E_FORMAT, "cell 2 '0F': a compute action needs its micro-batch"},
        {"F0\n", 0, PTC_E_FORMAT, "an action starts with its stage number"},
        {"0F0x\n", 0, PTC_E_FORMAT, "trailing characters"},
        {"9999999999F0\n", 0, PTC_E_FORMAT, "stage number too large"},
        {"0F9999999999\n", 0, PTC_E_FORMAT, "micro-batch number too large"},
        {"70000F0\n", 0, PTC_E_FORMAT, "stage number over the limit"},
        {"(0F0;0SEND_F0)OVERLAP_F_B\n", 0, PTC_E_FORMAT, "a group holds compute actions only"},
        {"(0F0;0B0\n", 0, PTC_E_FORMAT, "a group is '(ACTION;ACTION...)OVERLAP_F_B'"},
        {"(0F0;;0B0)OVERLAP_F_B\n", 0, PTC_E_FORMAT, "empty action in a group"},
        {"\"0F0,0B0\n", 0, PTC_E_FORMAT, "unterminated or misplaced quote"},
        {"0F0,\xc3\xa9\n", 0, PTC_E_FORMAT, "unexpected character"},
        {"0F2,0B2\n", 2, PTC_E_FORMAT, "rank 0 runs micro-batch 2, out of range (microbatches 2)"},
        {"", 0, PTC_E_FORMAT, "torch schedule: no rows"},
        {",,0SEND_F0\n", 0, PTC_E_FORMAT, "no compute action"},
        {"0F0,0B0\n\n", 0, PTC_E_FORMAT, "rank 1 holds no stage"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ptc_sched *s = (ptc_sched *)1;
        size_t sk = 7;
        int rc = ptc_sched_from_torch(&s, bad[i].text, strlen(bad[i].text), bad[i].M, &sk);
        if (rc != bad[i].code || !strstr(ptc_last_error(), bad[i].needle))
            fail_msg("input %zu: got %d '%s', want %d '%s'", i, rc, ptc_last_error(),
                     bad[i].code, bad[i].needle);
        assert_null(s);
        assert_int_equal(sk, 0);
    }
    ptc_sched *s;
    assert_int_equal(ptc_sched_from_torch(&s, "0F0,0B0\n", 8, -1, NULL), PTC_E_RANGE);
}

static void test_alloc_failures(void **st)
{
    (void)st;
    for (int form = 0; form < 2; form++)
        for (long n = 1;; n++) {
            ptc_fault_alloc_at(n);
            ptc_sched *s = NULL, *r = NULL;
            char *t = NULL;
            size_t len = 0, sk;
            ptc_sched_gen g = {PTC_SCHED_ZBV, 2, 3, 2, 1, 1, 2, 1};
            int rc = ptc_sched_generate(&s, &g);
            if (!rc)
                rc = ptc_sched_to_torch(s, form, &t, &len);
            if (!rc)
                rc = ptc_sched_from_torch(&r, t, len, 0, &sk);
            long used = ptc_fault_alloc_count();
            ptc_fault_alloc_at(0);
            ptc_sched_destroy(r);
            ptc_sched_text_free(t);
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
        cmocka_unit_test(test_write_exact),
        cmocka_unit_test(test_roundtrip_all_kinds),
        cmocka_unit_test(test_two_pipes_refused),
        cmocka_unit_test(test_read_torch_output),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
