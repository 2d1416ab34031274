/* Streamed local tensors (ptc_ckpt_stream): a test "device" whose memory is
 * reached only through the callbacks and a ring of four host slots that are
 * poisoned when given back. Saves under tp=2 with some tensors streamed and
 * loads under tp=3 (three ranks on two processes, interleaved fused blocks),
 * dp=2 with zero=1 (flat shards) and dp=1, into streamed and host buffers,
 * windows of a few KiB: every byte equals the layout's slice of the global
 * tensors. Reuse decided as the bytes pass: an unchanged streamed shard is
 * pulled once and referenced (nothing written); one changed in its last
 * block is pulled twice up to it and written; one changed in its first block
 * is pulled once. Every pull and acquire is given back, ranges are whole
 * chunks, the plan names the streamed shards in order; a failing callback
 * fails the save or load on every process with its message and nothing is
 * written. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/fault_testing.h"
#include "base/util_internal.h"
#include "tests/unit/ckpt_test_device.h"
#include "tests/unit/thread_transport.h"

/* ---- a save and loads across thread-processes --------------------------------------- */

typedef struct io_case {
    ptc_store *s;
    const char *cfg;
    int nranks[MAXP];     /* ranks of each process: [first, first + n) */
    int first[MAXP];
    unsigned streamed;    /* bit r*NT + t: rank r's tensor t is streamed */
    int gen;              /* round of the data */
    size_t chunk;
    int fail_after;       /* process 1's device fails its n-th call */
    bool tweak;           /* the last byte of tensor 0 flipped */
    int threads;          /* 0: 2 */
    size_t from_t;        /* the tensors before this one are left out */
    long fault;           /* > 0: the call's fault-th allocation fails */
    long fault_count;     /* the call's allocations */
    device dev[MAXP];
    int mismatched[MAXP]; /* load: local tensors that differ */
} io_case;

static bool is_streamed(const io_case *c, int r, size_t t)
{
    return (c->streamed >> (r * (int)NT + (int)t)) & 1;
}

static int io_body(proc *p, bool save)
{
    io_case *c = (io_case *)p->arg;
    ptc_layout *l = make_layout(c->cfg);
    device *d = &c->dev[p->rank];
    dev_init(d, c->chunk);
    if (p->rank == 1)
        d->fail_after = c->fail_after;
    ptc_ckpt_stream stream = dev_stream(d);
    ptc_config cfg;
    ptc_rules *rules;
    assert_int_equal(ptc_config_parse(&cfg, c->cfg), PTC_OK);
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    int ranks[MAXP];
    size_t nr = (size_t)c->nranks[p->rank], n = 0;
    ptc_ckpt_local x[MAXP * NT];
    dev_tensor dt[MAXP * NT];
    uint8_t *want[MAXP * NT];
    memset(x, 0, sizeof x);
    for (size_t i = 0; i < nr; i++) {
        int r = ranks[i] = c->first[p->rank] + (int)i;
        for (size_t t = c->from_t; t < NT; t++) {
            uint64_t bytes;
            uint8_t *mine = local_of(l, t, r, c->gen, &bytes);
            ptc_shard sh;
            assert_int_equal(ptc_layout_shard(l, t, r, &sh), PTC_OK);
            if (!sh.present) {
                free(mine);
                continue;
            }
            ptc_ckpt_local *y = &x[n];
            y->name = TENSORS[t].name;
            y->rank = r;
            y->dtype = TENSORS[t].dt;
            y->ndim = sh.ndim;
            memcpy(y->shape, sh.shape, sizeof sh.shape);
            y->has_global = true;
            y->global_ndim = TENSORS[t].ndim;
            memcpy(y->global_shape, TENSORS[t].shape, sizeof TENSORS[t].shape);
            if (c->tweak && t == 0 && bytes)
                mine[bytes - 1] ^= 1;
            want[n] = mine;
            uint8_t *mem = save ? mine : malloc((size_t)bytes + 1);
            if (!save)
                memset(mem, 0x33, (size_t)bytes);
            dt[n] = (dev_tensor){mem, bytes};
            y->streamed = is_streamed(c, r, t);
            y->data = y->streamed ? (void *)&dt[n] : mem;
            n++;
        }
    }
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.stream = &stream;
    o.threads = c->threads ? c->threads : 2;
    ptc_ckpt_record rec = {.step = 4};
    int rc;
    if (c->fault)
        ptc_fault_alloc_at(c->fault);
    if (save) {
        rc = ptc_ckpt_save_locals_over(&p->t, PTC_OK, c->s, ranks, nr, x, n, &cfg, rules,
                                       p->rank == 0 ? &rec : NULL, &o, &p->version);
    } else {
        rc = ptc_ckpt_load_locals_over(&p->t, PTC_OK, c->s, 0, ranks, nr, x, n, &cfg, &o, NULL,
                                       &p->version);
    }
    if (c->fault) {
        c->fault_count = ptc_fault_alloc_count();
        ptc_fault_alloc_at(0);
    }
    if (!save) {
        for (size_t i = 0; rc == PTC_OK && i < n; i++)
            if (memcmp(dt[i].mem, want[i], (size_t)dt[i].bytes))
                c->mismatched[p->rank]++;
    }
    for (size_t i = 0; i < n; i++) {
        if (!save)
            free(dt[i].mem);
        free(want[i]);
    }
    ptc_rules_destroy(rules);
    ptc_layout_destroy(l);
    return rc;
}

static int save_body(proc *p)
{
    return io_body(p, true);
}

static int load_body(proc *p)
{
    return io_body(p, false);
}

static char *mkstore(ptc_store **s)
{
    char *dir = strdup("/tmp/ptc_ckpt_stream_XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(ptc_store_open(s, dir, PTC_STORE_CREATE), PTC_OK);
    return dir;
}

static void rmstore(ptc_store *s, char *dir)
{
    ptc_store_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static void all_ok(const proc *ps, int n, const io_case *c)
{
    for (int r = 0; r < n; r++) {
        if (ps[r].rc != PTC_OK)
            fail_msg("process %d: %s", r, ps[r].msg);
        assert_int_equal(c->mismatched[r], 0);
        dev_clean(&c->dev[r]);
    }
}

static void test_stream_save_and_loads(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    proc ps[MAXP];
    /* tp=2: rank 0 streams big, big.m and scalar; rank 1 streams fused and rep */
    io_case c = {.s = s, .cfg = "tp=2", .nranks = {1, 1}, .first = {0, 1},
                 .streamed = 1u << 0 | 1u << 1 | 1u << 4 | 1u << (NT + 2) | 1u << (NT + 3),
                 .chunk = 1 << 20};
    run(ps, 2, save_body, &c);
    all_ok(ps, 2, &c);
    assert_int_equal(ps[0].version, 1);
    /* big and big.m: 2 MiB each, 2 chunks each; scalar: 1; rank 1's rep is
     * rank 0's replica (an alias): never pulled */
    assert_int_equal(c.dev[0].pulls, 5);
    assert_int_equal(c.dev[0].nplanned, 3);
    assert_int_equal(c.dev[1].pulls, 1);
    assert_int_equal(c.dev[1].nplanned, 1);

    /* tp=3 on two processes (ranks 0,1 | 2): fused's blocks interleave in
     * each local tensor; windows of 4 KiB */
    const struct {
        const char *cfg;
        int nranks[2], first[2];
        unsigned streamed;
    } loads[] = {
        {"tp=3", {2, 1}, {0, 2}, 0x1f | 0x1fu << (2 * NT)},
        {"dp=2,zero=1", {1, 1}, {0, 1}, 0x1f | 0x1fu << NT},
        {"dp=1", {1, 0}, {0, 0}, 0x1f},
        {"tp=3", {2, 1}, {0, 2}, 0x1fu << NT}, /* one rank streamed, one in host memory */
    };
    for (size_t k = 0; k < sizeof loads / sizeof loads[0]; k++) {
        io_case lc = {.s = s, .cfg = loads[k].cfg, .nranks = {loads[k].nranks[0],
                                                              loads[k].nranks[1]},
                      .first = {loads[k].first[0], loads[k].first[1]},
                      .streamed = loads[k].streamed, .chunk = 4096};
        run(ps, 2, load_body, &lc);
        all_ok(ps, 2, &lc);
        assert_true(lc.dev[0].pushes > 0);
        for (int r = 0; r < 2; r++)
            dev_free(&lc.dev[r]);
    }
    for (int r = 0; r < 2; r++)
        dev_free(&c.dev[r]);
    rmstore(s, dir);
}

/* One process, dp=1, big streamed: reuse decided as the bytes pass. */
static void test_stream_reuse(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    proc ps[1];
    io_case c = {.s = s, .cfg = "dp=1", .nranks = {1}, .first = {0}, .streamed = 0,
                 .chunk = 1 << 20};
    run(ps, 1, save_body, &c); /* v1 from host memory */
    all_ok(ps, 1, &c);
    dev_free(&c.dev[0]);
    /* v2: big streamed, same bytes: its 4 chunks pulled once, nothing written */
    c.streamed = 1;
    run(ps, 1, save_body, &c);
    all_ok(ps, 1, &c);
    assert_int_equal(ps[0].version, 2);
    assert_int_equal(c.dev[0].pulls, 4);
    ptc_store_reader *rd;
    ptc_shard_info si;
    assert_int_equal(ptc_store_reader_open(&rd, s, 2), PTC_OK);
    assert_int_equal(ptc_store_reader_shard(rd, 0, 0, &si), PTC_OK);
    assert_int_equal(si.pack_version, 1); /* the parent's bytes */
    ptc_store_reader_close(rd);
    dev_free(&c.dev[0]);
    /* v3: other data: big differs in its first block: pulled once, written */
    c.gen = 1;
    run(ps, 1, save_body, &c);
    all_ok(ps, 1, &c);
    assert_int_equal(c.dev[0].pulls, 4);
    assert_int_equal(ptc_store_reader_open(&rd, s, 3), PTC_OK);
    assert_int_equal(ptc_store_reader_shard(rd, 0, 0, &si), PTC_OK);
    assert_int_equal(si.pack_version, 3);
    ptc_store_reader_close(rd);
    dev_free(&c.dev[0]);
    /* v4: only the last byte changed: 4 chunks compared, then the 3 equal
     * ones pulled again and written with the last */
    c.tweak = true;
    run(ps, 1, save_body, &c);
    all_ok(ps, 1, &c);
    assert_int_equal(c.dev[0].pulls, 7);
    assert_int_equal(c.dev[0].pulled, (4 + 3) << 20);
    dev_free(&c.dev[0]);
    io_case lc = {.s = s, .cfg = "dp=1", .nranks = {1}, .first = {0}, .streamed = 1,
                  .gen = 1, .tweak = true, .chunk = 1 << 20};
    run(ps, 1, load_body, &lc);
    all_ok(ps, 1, &lc);
    assert_int_equal(ps[0].version, 4);
    dev_free(&lc.dev[0]);
    rmstore(s, dir);
}

static void test_stream_errors(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    proc ps[2];
    io_case c = {.s = s, .cfg = "tp=2", .nranks = {1, 1}, .first = {0, 1},
                 .streamed = 1u | 1u << NT, .chunk = 1 << 20, .fail_after = 2};
    run(ps, 2, save_body, &c);
    all_fail(ps, 2, PTC_E_IO, "checkpoint save failed on process 1: device copy failed at byte "
                              "1048576");
    uint64_t latest = 9;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    assert_int_equal(latest, 0);
    struct stat st;
    assert_int_not_equal(stat(dir, &st), -1);
    for (int r = 0; r < 2; r++) {
        dev_clean(&c.dev[r]);
        dev_free(&c.dev[r]);
    }
    c.fail_after = 0;
    run(ps, 2, save_body, &c);
    all_ok(ps, 2, &c);
    for (int r = 0; r < 2; r++)
        dev_free(&c.dev[r]);
    c.fail_after = 3;
    c.chunk = 4096;
    c.threads = 1; /* the third acquire is the third window */
    run(ps, 2, load_body, &c);
    all_fail(ps, 2, PTC_E_IO, "checkpoint load failed on process 1: device copy failed at byte "
                              "8192");
    for (int r = 0; r < 2; r++) {
        dev_clean(&c.dev[r]);
        dev_free(&c.dev[r]);
    }
    rmstore(s, dir);
}

/* Every allocation of a streamed save, then of a streamed load, fails in
 * turn (one process running both ranks of tp=2, the small tensors, windows
 * of 1 KiB): an error with every range given back and nothing committed or
 * leaked, or the right bytes. */
static void test_stream_faults(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    proc ps[1];
    long n[2];
    for (int save = 1; save >= 0; save--) {
        for (n[save] = 1;; n[save]++) {
            /* the small tensors only: fused streamed on rank 1, scalar on 0 */
            io_case c = {.s = s, .cfg = "tp=2", .nranks = {2}, .first = {0},
                         .streamed = 1u << 4 | 1u << (NT + 2), .chunk = 1024, .threads = 1,
                         .from_t = 2, .fault = n[save]};
            run(ps, 1, save ? save_body : load_body, &c);
            dev_clean(&c.dev[0]);
            dev_free(&c.dev[0]);
            assert_int_equal(c.mismatched[0], 0);
            uint64_t latest = 0;
            assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
            if (c.fault_count < n[save]) { /* no fault fired: done */
                if (ps[0].rc != PTC_OK)
                    fail_msg("%s without a fault: %s", save ? "save" : "load", ps[0].msg);
                assert_int_equal(latest, 1);
                break;
            }
            if (ps[0].rc == PTC_OK)
                fail_msg("fault %ld of the %s fired, but it succeeded", n[save],
                         save ? "save" : "load");
            assert_int_equal(latest, save ? 0 : 1);
        }
    }
    print_message("failed each of %ld allocations of a save, %ld of a load\n", n[1] - 1,
                  n[0] - 1);
    assert_true(n[1] > 20 && n[0] > 10);
    rmstore(s, dir);
}

/* A streamed tensor without a stream, and a stream without the callbacks. */
static void test_stream_missing(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    float v[3] = {1, 2, 3};
    ptc_ckpt_local x = {.name = "rep", .rank = 0, .dtype = PTC_DTYPE_F32, .ndim = 1,
                        .shape = {3}, .data = v, .streamed = true};
    ptc_transport t;
    ptc_transport_self(&t);
    ptc_config cfg;
    ptc_rules *rules;
    assert_int_equal(ptc_config_parse(&cfg, "dp=1"), PTC_OK);
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    int rank = 0;
    assert_int_equal(ptc_ckpt_save_locals_over(&t, PTC_OK, s, &rank, 1, &x, 1, &cfg, rules,
                                               NULL, NULL, NULL),
                     PTC_E_INVAL);
    assert_string_equal(ptc_last_error(),
                        "checkpoint: tensor 'rep' on rank 0 is streamed, but the options give no "
                        "stream with the callbacks of a save (pull, release)");
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    ptc_ckpt_stream half = {.pull = dev_pull, .release = dev_release};
    o.stream = &half;
    x.streamed = false;
    assert_int_equal(ptc_ckpt_save_locals_over(&t, PTC_OK, s, &rank, 1, &x, 1, &cfg, rules,
                                               NULL, &o, NULL),
                     PTC_OK);
    x.streamed = true;
    assert_int_equal(ptc_ckpt_load_locals_over(&t, PTC_OK, s, 0, &rank, 1, &x, 1, &cfg, &o,
                                               NULL, NULL),
                     PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "callbacks of a load (acquire, push, release)"));
    ptc_rules_destroy(rules);
    rmstore(s, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_save_and_loads),
        cmocka_unit_test(test_stream_reuse),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_stream_missing),
        cmocka_unit_test(test_stream_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
