/* Asynchronous saves (ptc_ckpt_save_async, ptc_ckpt_save_locals_async) over
 * a transport of threads: the call returns once the state is copied into the
 * snapshot area, the buffers are overwritten at once, and the version holds
 * the bytes of the call (loaded back under another configuration, byte for
 * byte); the collective steps on a background transport of their own or on
 * the caller's (collectives_in_caller); two saves back to back through one
 * area run one after the other and commit in order; the area grows to the
 * state once and is reused; streamed tensors are pulled into it; a failure
 * of one process (its outcome before the call, its snapshot) reaches every
 * process at the wait and nothing is committed; a save given up commits
 * nothing and leaves no pack files; described tensors without a
 * configuration (an explicit layout: a streamed strided shard of two
 * pieces, a box, a whole tensor) saved in the background with the caller's
 * buffers and pieces overwritten after the call, and a layout that misses
 * part of a tensor refused on every process; the background thread runs at
 * nice + PTC_SAVE_NICE (default 19). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"
#include "tests/unit/ckpt_test_device.h"
#include "tests/unit/thread_transport.h"

enum { A_BACKGROUND, A_CALLER, A_LOCALS, A_FAIL_RC, A_FAIL_SNAP };

typedef struct async_case {
    ptc_store *s;
    int what;
    group bg;             /* the background transport's group */
    size_t stage_bytes[MAXP][2];
    int mismatched[MAXP];
    uint64_t versions[MAXP][2];
    bool done_early[MAXP];
} async_case;

/* tp=2, one rank per process: this rank's local tensors of round @p gen. */
static void locals_of(const ptc_layout *l, int r, int gen, uint8_t **buf, uint64_t *bytes)
{
    for (size_t t = 0; t < NT; t++)
        buf[t] = local_of(l, t, r, gen, &bytes[t]);
}

/* Load version @p v under dp=1 on process 0 and compare with round @p gen. */
static int check_version(proc *p, async_case *c, uint64_t v, int gen)
{
    ptc_layout *l = make_layout("dp=1");
    uint8_t *want[NT], *got[NT];
    uint64_t bytes[NT];
    int rank = 0;
    size_t nr = p->rank == 0 ? 1 : 0;
    locals_of(l, 0, gen, want, bytes);
    for (size_t t = 0; t < NT; t++)
        got[t] = calloc((size_t)bytes[t] + 1, 1);
    uint64_t loaded = 0;
    int rc = ptc_ckpt_load_over(&p->t, c->s, v, l, &rank, nr, (void *const *)got, NULL, NULL,
                                &loaded);
    for (size_t t = 0; rc == PTC_OK && nr && t < NT; t++)
        if (memcmp(got[t], want[t], (size_t)bytes[t]))
            c->mismatched[p->rank]++;
    for (size_t t = 0; t < NT; t++) {
        free(want[t]);
        free(got[t]);
    }
    ptc_layout_destroy(l);
    return rc;
}

static int async_body(proc *p)
{
    async_case *c = (async_case *)p->arg;
    int r = p->rank;
    member bm = {&c->bg, r};
    ptc_transport bt = th_transport(&bm);
    bool caller = c->what == A_CALLER;
    const ptc_transport *t = caller ? &p->t : &bt;
    ptc_layout *l = make_layout("tp=2");
    ptc_rules *rules;
    ptc_config cfg;
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    assert_int_equal(ptc_config_parse(&cfg, "tp=2"), PTC_OK);
    ptc_ckpt_stage *stage;
    assert_int_equal(ptc_ckpt_stage_create(&stage), PTC_OK);
    device d;
    dev_init(&d, 1 << 20);
    ptc_ckpt_stream stream = dev_stream(&d);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.collectives_in_caller = caller;
    o.stream = &stream;
    ptc_ckpt_record rec = {.step = 7};
    int rc = PTC_OK;
    for (int k = 0; k < 2 && rc == PTC_OK; k++) {
        uint8_t *buf[NT];
        uint64_t bytes[NT];
        dev_tensor dt[NT];
        ptc_ckpt_local x[NT];
        size_t n = 0;
        locals_of(l, r, k, buf, bytes);
        for (size_t i = 0; i < NT; i++) {
            ptc_shard sh;
            assert_int_equal(ptc_layout_shard(l, i, r, &sh), PTC_OK);
            x[n] = (ptc_ckpt_local){.name = TENSORS[i].name, .rank = r, .dtype = TENSORS[i].dt,
                                    .ndim = sh.ndim, .has_global = true,
                                    .global_ndim = TENSORS[i].ndim, .data = buf[i]};
            memcpy(x[n].shape, sh.shape, sizeof sh.shape);
            memcpy(x[n].global_shape, TENSORS[i].shape, sizeof TENSORS[i].shape);
            dt[i] = (dev_tensor){buf[i], bytes[i]};
            if ((c->what == A_LOCALS || c->what == A_FAIL_SNAP) && i % 2 == 0) {
                x[n].streamed = true;
                x[n].data = &dt[i];
            }
            n++;
        }
        ptc_ckpt_async *a = NULL;
        int rank = r;
        if (c->what == A_BACKGROUND || c->what == A_CALLER) {
            rc = ptc_ckpt_save_async(&a, t, c->s, l, rules, &rank, 1, (const void *const *)buf,
                                     r == 0 ? &rec : NULL, &o, stage);
        } else {
            int in = PTC_OK;
            if (c->what == A_FAIL_RC && r == 1)
                in = ptc_error_set(PTC_E_IO, "disk on fire");
            if (c->what == A_FAIL_SNAP && r == 1)
                d.fail_after = 1;
            rc = ptc_ckpt_save_locals_async(&a, t, in, c->s, &rank, 1, x, n, &cfg, rules,
                                            r == 0 ? &rec : NULL, &o, stage);
        }
        /* the job goes on: the state changes at once */
        for (size_t i = 0; i < NT; i++) {
            memset(buf[i], 0xEE, (size_t)bytes[i]);
            free(buf[i]);
        }
        c->stage_bytes[r][k] = ptc_ckpt_stage_bytes(stage);
        if (rc == PTC_OK)
            rc = ptc_ckpt_async_wait(a, &c->versions[r][k]);
        if (rc == PTC_OK)
            rc = check_version(p, c, c->versions[r][k], k);
    }
    dev_clean(&d);
    dev_free(&d);
    ptc_ckpt_stage_destroy(stage);
    ptc_rules_destroy(rules);
    ptc_layout_destroy(l);
    return rc;
}

static char *mkstore(ptc_store **s)
{
    char *dir = strdup("/tmp/ptc_ckpt_async_XXXXXX");
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

static void run_case(int what, async_case *c)
{
    proc ps[2];
    c->what = what;
    assert_int_equal(group_init(&c->bg, 2), 0);
    run(ps, 2, async_body, c);
    pthread_barrier_destroy(&c->bg.bar);
    if (what == A_FAIL_RC) {
        all_fail(ps, 2, PTC_E_IO, "checkpoint save failed on process 1: disk on fire");
        return;
    }
    if (what == A_FAIL_SNAP) {
        all_fail(ps, 2, PTC_E_IO, "checkpoint save failed on process 1: device copy failed at "
                                  "byte 0");
        return;
    }
    for (int r = 0; r < 2; r++) {
        if (ps[r].rc != PTC_OK)
            fail_msg("case %d process %d: %s", what, r, ps[r].msg);
        assert_int_equal(c->mismatched[r], 0);
        /* the area holds the state once and is reused */
        assert_true(c->stage_bytes[r][0] > 4u << 20);
        assert_int_equal(c->stage_bytes[r][1], c->stage_bytes[r][0]);
    }
}

static void test_async_background(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    async_case c = {.s = s};
    run_case(A_BACKGROUND, &c);
    assert_int_equal(c.versions[0][0], 1);
    assert_int_equal(c.versions[1][1], 2);
    run_case(A_CALLER, &c);
    assert_int_equal(c.versions[0][0], 3);
    assert_int_equal(c.versions[1][1], 4);
    run_case(A_LOCALS, &c);
    assert_int_equal(c.versions[1][1], 6);
    rmstore(s, dir);
}

static void test_async_failures(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    async_case c = {.s = s};
    run_case(A_FAIL_RC, &c);
    run_case(A_FAIL_SNAP, &c);
    uint64_t latest = 9;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    assert_int_equal(latest, 0);
    rmstore(s, dir);
}

/* Two saves through one area without a wait between them: the second
 * starts after the first's background part and both commit, in order. */
static int back_to_back_body(proc *p)
{
    async_case *c = (async_case *)p->arg;
    member bm = {&c->bg, p->rank};
    ptc_transport bt = th_transport(&bm);
    ptc_layout *l = make_layout("tp=2");
    ptc_rules *rules;
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    ptc_ckpt_stage *stage;
    assert_int_equal(ptc_ckpt_stage_create(&stage), PTC_OK);
    ptc_ckpt_async *a[2] = {NULL, NULL};
    int rank = p->rank, rc = PTC_OK;
    for (int k = 0; k < 2 && rc == PTC_OK; k++) {
        uint8_t *buf[NT];
        uint64_t bytes[NT];
        locals_of(l, rank, k, buf, bytes);
        rc = ptc_ckpt_save_async(&a[k], &bt, c->s, l, rules, &rank, 1, (const void *const *)buf,
                                 NULL, NULL, stage);
        for (size_t t = 0; t < NT; t++)
            free(buf[t]);
    }
    /* the first's background part ended before the second began */
    c->done_early[p->rank] = ptc_ckpt_async_done(a[0]);
    for (int k = 0; k < 2; k++) {
        int w = ptc_ckpt_async_wait(a[k], &c->versions[p->rank][k]);
        rc = rc == PTC_OK ? w : rc;
    }
    for (int k = 0; rc == PTC_OK && k < 2; k++)
        rc = check_version(p, c, c->versions[p->rank][k], k);
    ptc_ckpt_stage_destroy(stage);
    ptc_rules_destroy(rules);
    ptc_layout_destroy(l);
    return rc;
}

static void test_async_back_to_back(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    async_case c = {.s = s};
    proc ps[2];
    assert_int_equal(group_init(&c.bg, 2), 0);
    run(ps, 2, back_to_back_body, &c);
    pthread_barrier_destroy(&c.bg.bar);
    for (int r = 0; r < 2; r++) {
        if (ps[r].rc != PTC_OK)
            fail_msg("process %d: %s", r, ps[r].msg);
        assert_true(c.done_early[r]);
        assert_int_equal(c.versions[r][0], 1);
        assert_int_equal(c.versions[r][1], 2);
        assert_int_equal(c.mismatched[r], 0);
    }
    rmstore(s, dir);
}

/* A save given up (ptc_ckpt_async_cancel) commits nothing and leaves no
 * pack files; the next save through the same area commits. */
static void test_async_cancel(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    ptc_layout *l = make_layout("tp=2");
    ptc_rules *rules;
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    ptc_ckpt_stage *stage;
    assert_int_equal(ptc_ckpt_stage_create(&stage), PTC_OK);
    ptc_transport t;
    ptc_transport_self(&t);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.collectives_in_caller = true;
    uint8_t *buf[2 * NT];
    uint64_t bytes[2 * NT];
    locals_of(l, 0, 0, buf, bytes);
    locals_of(l, 1, 0, buf + NT, bytes + NT);
    int ranks[2] = {0, 1};
    for (int k = 0; k < 2; k++) {
        ptc_ckpt_async *a;
        assert_int_equal(ptc_ckpt_save_async(&a, &t, s, l, rules, ranks, 2,
                                             (const void *const *)buf, NULL, &o, stage),
                         PTC_OK);
        uint64_t v = 0, latest = 9;
        if (k == 0) {
            ptc_ckpt_async_cancel(a);
            assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
            assert_int_equal(latest, 0);
            char p[256];
            snprintf(p, sizeof p, "%s/packs/v1", dir);
            assert_int_equal(access(p, F_OK), -1);
        } else {
            assert_int_equal(ptc_ckpt_async_wait(a, &v), PTC_OK);
            assert_int_equal(v, 1);
        }
    }
    for (size_t i = 0; i < 2 * NT; i++)
        free(buf[i]);
    ptc_ckpt_stage_destroy(stage);
    ptc_rules_destroy(rules);
    ptc_layout_destroy(l);
    rmstore(s, dir);
}

/* ---- explicit layouts ------------------------------------------------------------------ */

/* Two processes, one rank each, no configuration: `strided` F32 [4, 3] as an
 * FSDP2 strided shard holds it (rank r: rows r and r + 2, two pieces of a
 * [2, 3] buffer; streamed), `box` F32 [4] by its box (rank r: [2r, 2r + 2);
 * XP_GAP: [0, 2) on both), `plain` F32 [3] whole on both. Element i of a
 * tensor is its base + i. */
enum { XP_WHOLE, XP_GAP };

typedef struct xcase {
    ptc_store *s;
    int what;
    bool caller;
    group bg;
    uint64_t version[MAXP];
} xcase;

/* Process 0 loads version @p v under dp=1 and checks every element. */
static int xcheck(proc *p, ptc_store *s, uint64_t v)
{
    int rank = 0;
    float sv[12] = {0}, bv[4] = {0}, pv[3] = {0};
    const float base[3] = {100, 200, 300};
    float *got[3] = {sv, bv, pv};
    int64_t len[3] = {12, 4, 3};
    ptc_ckpt_local x[3];
    memset(x, 0, sizeof x);
    const char *names[3] = {"strided", "box", "plain"};
    for (int i = 0; i < 3; i++) {
        x[i].name = names[i];
        x[i].dtype = PTC_DTYPE_F32;
        x[i].ndim = i == 0 ? 2 : 1;
        x[i].shape[0] = i == 0 ? 4 : len[i];
        x[i].shape[1] = 3;
        x[i].data = got[i];
    }
    ptc_config cfg;
    PTC_TRY(ptc_config_parse(&cfg, "dp=1"));
    size_t nr = p->rank == 0 ? 1 : 0;
    PTC_TRY(ptc_ckpt_load_locals_over(&p->t, PTC_OK, s, v, &rank, nr, x, nr ? 3 : 0, &cfg,
                                      NULL, NULL, NULL));
    for (int i = 0; nr && i < 3; i++)
        for (int64_t k = 0; k < len[i]; k++)
            if (got[i][k] != base[i] + (float)k)
                return ptc_error_set(PTC_E_INVAL, "%s[%lld] = %g", names[i], (long long)k,
                                     (double)got[i][k]);
    return PTC_OK;
}

static int xasync_body(proc *p)
{
    xcase *c = (xcase *)p->arg;
    int r = p->rank;
    member bm = {&c->bg, r};
    ptc_transport bt = th_transport(&bm);
    float *sv = malloc(6 * sizeof *sv), bv[2], pv[3];
    ptc_piece *pc = calloc(2, sizeof *pc);
    assert_non_null(sv);
    assert_non_null(pc);
    for (int i = 0; i < 3; i++) {
        sv[i] = (float)(100 + 3 * r + i);           /* row r */
        sv[3 + i] = (float)(100 + 3 * (r + 2) + i); /* row r + 2 */
        pv[i] = (float)(300 + i);
    }
    for (int i = 0; i < 2; i++)
        bv[i] = (float)(200 + 2 * r + i);
    for (int k = 0; k < 2; k++) {
        pc[k].box.ndim = 2;
        pc[k].box.lo[0] = r + 2 * k;
        pc[k].box.hi[0] = r + 2 * k + 1;
        pc[k].box.hi[1] = 3;
        pc[k].local_offset = 3 * k;
        pc[k].local_stride[0] = 3;
        pc[k].local_stride[1] = 1;
    }
    device d;
    dev_init(&d, 1 << 20);
    ptc_ckpt_stream stream = dev_stream(&d);
    dev_tensor dt = {(uint8_t *)sv, 6 * sizeof *sv};
    ptc_ckpt_local x[3] = {
        {.name = "strided", .rank = r, .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {2, 3},
         .has_global = true, .global_ndim = 2, .global_shape = {4, 3}, .data = &dt,
         .streamed = true, .pieces = pc, .npieces = 2},
        {.name = "box", .rank = r, .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {2},
         .has_global = true, .global_ndim = 1, .global_shape = {4}, .has_box = true,
         .box = {.ndim = 1, .lo = {c->what == XP_GAP ? 0 : 2 * r},
                 .hi = {c->what == XP_GAP ? 2 : 2 * r + 2}},
         .data = bv},
        {.name = "plain", .rank = r, .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {3},
         .data = pv}};
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.collectives_in_caller = c->caller;
    o.stream = &stream;
    ptc_ckpt_stage *stage;
    assert_int_equal(ptc_ckpt_stage_create(&stage), PTC_OK);
    ptc_ckpt_record rec = {.step = 4};
    ptc_ckpt_async *a = NULL;
    int rc = ptc_ckpt_save_locals_async(&a, c->caller ? &p->t : &bt, PTC_OK, c->s, &r, 1, x, 3,
                                        NULL, NULL, r == 0 ? &rec : NULL, &o, stage);
    /* the job goes on: its tensors and their descriptions change at once */
    memset(sv, 0xEE, 6 * sizeof *sv);
    memset(bv, 0xEE, sizeof bv);
    memset(pv, 0xEE, sizeof pv);
    memset(pc, 0xEE, 2 * sizeof *pc);
    free(sv);
    free(pc);
    if (rc == PTC_OK)
        rc = ptc_ckpt_async_wait(a, &c->version[r]);
    if (rc == PTC_OK)
        rc = xcheck(p, c->s, c->version[r]);
    dev_clean(&d);
    dev_free(&d);
    ptc_ckpt_stage_destroy(stage);
    return rc;
}

static void xrun(xcase *c, int what, bool caller, proc *ps)
{
    c->what = what;
    c->caller = caller;
    assert_int_equal(group_init(&c->bg, 2), 0);
    run(ps, 2, xasync_body, c);
    pthread_barrier_destroy(&c->bg.bar);
}

static void test_async_explicit(void **state)
{
    (void)state;
    ptc_store *s;
    char *dir = mkstore(&s);
    xcase c = {.s = s};
    proc ps[2];
    for (int caller = 0; caller < 2; caller++) {
        xrun(&c, XP_GAP, caller, ps);
        all_fail(ps, 2, PTC_E_INVAL, "checkpoint save failed on process 0: tensor 'box': its "
                                     "shards hold 2 of its 4 elements (no rank holds the rest)");
    }
    uint64_t latest = 9;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    assert_int_equal(latest, 0);
    for (int caller = 0; caller < 2; caller++) {
        xrun(&c, XP_WHOLE, caller, ps);
        for (int r = 0; r < 2; r++) {
            if (ps[r].rc != PTC_OK)
                fail_msg("caller %d process %d: %s", caller, r, ps[r].msg);
            assert_int_equal(c.version[r], (uint64_t)caller + 1);
        }
    }
    ptc_store_reader *rd;
    assert_int_equal(ptc_store_reader_open(&rd, s, 2), PTC_OK);
    assert_string_equal(ptc_store_reader_version(rd)->config, "explicit:2");
    ptc_store_reader_close(rd);
    rmstore(s, dir);
}

/* ---- the background thread's priority ------------------------------------------------- */

/* The nice value of the threads of this process other than the caller's
 * (and the other process's, @p other): the highest found (-100: none). */
static int others_nice(pid_t other)
{
    pid_t me = (pid_t)syscall(SYS_gettid);
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int top = -100;
    struct dirent *e;
    while ((e = readdir(d))) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || tid == me || tid == other)
            continue;
        char path[64], line[1024];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* ended meanwhile */
        size_t n = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        line[n] = 0;
        const char *q = strrchr(line, ')'); /* after the name: fields 3.. */
        int nice = 0, field = 2; /* the space before each field counts it */
        for (const char *t = q ? q + 1 : line; *t && field <= 19; t++)
            if (*t == ' ' && ++field == 19)
                nice = atoi(t + 1);
        top = nice > top ? nice : top;
    }
    closedir(d);
    return top;
}

typedef struct nice_case {
    ptc_store *s;
    group bg;
    pthread_barrier_t go; /* process 1 saves once process 0 has looked */
    pid_t tid1;
    int base;             /* the test's nice value */
    int seen;             /* the background thread's */
} nice_case;

/* Process 0 starts a save in the background; its thread waits in the
 * save's first collective for process 1's, which starts only after
 * process 0 has found the thread's nice value. */
static int nice_body(proc *p)
{
    nice_case *c = (nice_case *)p->arg;
    int r = p->rank;
    member bm = {&c->bg, r};
    ptc_transport bt = th_transport(&bm);
    ptc_layout *l = make_layout("tp=2");
    ptc_rules *rules;
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    ptc_ckpt_stage *stage;
    assert_int_equal(ptc_ckpt_stage_create(&stage), PTC_OK);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    uint8_t *buf[NT];
    uint64_t bytes[NT];
    locals_of(l, r, 0, buf, bytes);
    if (r == 1) {
        c->tid1 = (pid_t)syscall(SYS_gettid);
        pthread_barrier_wait(&c->go);
    }
    int rank = r;
    ptc_ckpt_async *a = NULL;
    int rc = ptc_ckpt_save_async(&a, &bt, c->s, l, rules, &rank, 1, (const void *const *)buf,
                                 NULL, &o, stage);
    if (r == 0) {
        for (int i = 0; i < 5000 && (c->seen = others_nice(c->tid1)) <= c->base; i++)
            usleep(1000); /* until the thread has begun (the others: at base) */
        pthread_barrier_wait(&c->go);
    }
    if (rc == PTC_OK)
        rc = ptc_ckpt_async_wait(a, NULL);
    for (size_t i = 0; i < NT; i++)
        free(buf[i]);
    ptc_ckpt_stage_destroy(stage);
    ptc_rules_destroy(rules);
    ptc_layout_destroy(l);
    return rc;
}

/* The background part runs at nice + PTC_SAVE_NICE (default 19; capped at
 * 19), below the job. */
static void test_async_priority(void **state)
{
    (void)state;
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (base >= 14)
        skip(); /* run niced this far: nothing lower to tell apart */
    static const struct {
        const char *env;
        int add;
    } cases[] = {{NULL, 19}, {"5", 5}, {"junk", 19}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (cases[k].env)
            setenv("PTC_SAVE_NICE", cases[k].env, 1);
        else
            unsetenv("PTC_SAVE_NICE");
        ptc_store *s;
        char *dir = mkstore(&s);
        nice_case c = {.s = s, .base = base};
        assert_int_equal(group_init(&c.bg, 2), 0);
        assert_int_equal(pthread_barrier_init(&c.go, NULL, 2), 0);
        proc ps[2];
        run(ps, 2, nice_body, &c);
        for (int r = 0; r < 2; r++)
            if (ps[r].rc != PTC_OK)
                fail_msg("process %d: %s", r, ps[r].msg);
        int want = base + cases[k].add > 19 ? 19 : base + cases[k].add;
        if (c.seen != want)
            fail_msg("PTC_SAVE_NICE=%s: the background thread at nice %d, not %d",
                     cases[k].env ? cases[k].env : "(unset)", c.seen, want);
        pthread_barrier_destroy(&c.go);
        pthread_barrier_destroy(&c.bg.bar);
        rmstore(s, dir);
    }
    unsetenv("PTC_SAVE_NICE");
}

/* The handle's edges: a wait of NULL, done of NULL, bad arguments. */
static void test_async_edges(void **state)
{
    (void)state;
    assert_int_equal(ptc_ckpt_async_wait(NULL, NULL), PTC_OK);
    assert_true(ptc_ckpt_async_done(NULL));
    ptc_ckpt_async *a = (ptc_ckpt_async *)1;
    assert_int_equal(ptc_ckpt_save_async(&a, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL,
                                         NULL),
                     PTC_E_INVAL);
    assert_null(a);
    assert_int_equal(ptc_ckpt_stage_bytes(NULL), 0);
    ptc_ckpt_stage_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_background),
        cmocka_unit_test(test_async_failures),
        cmocka_unit_test(test_async_back_to_back),
        cmocka_unit_test(test_async_cancel),
        cmocka_unit_test(test_async_explicit),
        cmocka_unit_test(test_async_edges),
        cmocka_unit_test(test_async_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
