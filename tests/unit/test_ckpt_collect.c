/* Collective checkpoints of described local tensors (ptc_ckpt_collect_over,
 * ptc_ckpt_save_locals_over, ptc_ckpt_load_locals_over) over a transport
 * whose "processes" are threads of this test: the layout every process
 * agrees on (order, global shapes from another process, replicated tensors);
 * each check of the exchanged descriptions failing alike on every process
 * with its message and no process named; a failure of one process (its own
 * description, its outcome before the call, a local tensor that does not
 * fit) reaching every process as "... failed on process P: ..." with
 * nothing written; a save and a load under another configuration byte-exact,
 * BF16 into raw 16-bit integers; explicit layouts (no configuration: pieces,
 * boxes and whole tensors; the coverage and mixing checks; loads into
 * another explicit layout and into a configuration); and the description
 * decoder on truncated and altered bytes. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

/* ---- a transport of threads ------------------------------------------------------ */

#define MAXP 4

typedef struct group {
    int size;
    pthread_barrier_t bar;
    const void *slot[MAXP];
} group;

typedef struct proc proc;
typedef int (*body_fn)(proc *p);

struct proc {
    group *g;
    int rank;
    ptc_transport t;
    body_fn body;
    const void *arg;
    int rc;
    char msg[1024];
    /* what the body saw */
    size_t ntensors;
    char names[4][32];
    int ndim[4];
    int64_t shape[4][2];
    uint64_t version;
};

static int th_allgather(void *user, const void *in, size_t n, void *out)
{
    proc *p = user;
    p->g->slot[p->rank] = in;
    pthread_barrier_wait(&p->g->bar);
    for (int q = 0; q < p->g->size; q++)
        memcpy((uint8_t *)out + (size_t)q * n, p->g->slot[q], n);
    pthread_barrier_wait(&p->g->bar);
    return PTC_OK;
}

static int th_broadcast(void *user, void *buf, size_t n, int root)
{
    proc *p = user;
    if (p->rank == root)
        p->g->slot[root] = buf;
    pthread_barrier_wait(&p->g->bar);
    if (p->rank != root)
        memcpy(buf, p->g->slot[root], n);
    pthread_barrier_wait(&p->g->bar);
    return PTC_OK;
}

static int th_barrier(void *user)
{
    proc *p = user;
    pthread_barrier_wait(&p->g->bar);
    return PTC_OK;
}

static void *th_main(void *arg)
{
    proc *p = arg;
    p->t = (ptc_transport){.rank = p->rank, .size = p->g->size, .allgather = th_allgather,
                           .broadcast = th_broadcast, .barrier = th_barrier, .user = p};
    ptc_error_clear();
    p->rc = p->body(p);
    snprintf(p->msg, sizeof p->msg, "%s", p->rc < 0 ? ptc_last_error() : "");
    return NULL;
}

/* Run @p body on @p n thread-processes with argument @p arg. */
static void run(proc *ps, int n, body_fn body, const void *arg)
{
    group g = {.size = n};
    pthread_t th[MAXP];
    assert_int_equal(pthread_barrier_init(&g.bar, NULL, (unsigned)n), 0);
    for (int r = 0; r < n; r++) {
        memset(&ps[r], 0, sizeof ps[r]);
        ps[r] = (proc){.g = &g, .rank = r, .body = body, .arg = arg};
        assert_int_equal(pthread_create(&th[r], NULL, th_main, &ps[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&g.bar);
}

/* Every process ended with @p rc and message @p msg. */
static void all_fail(const proc *ps, int n, int rc, const char *msg)
{
    for (int r = 0; r < n; r++) {
        if (ps[r].rc != rc || strcmp(ps[r].msg, msg))
            fail_msg("process %d: %d '%s', want %d '%s'", r, ps[r].rc, ps[r].msg, rc, msg);
    }
}

static ptc_ckpt_local local(const char *name, int rank, ptc_dtype dt, int64_t d0, int64_t d1,
                            int ndim)
{
    ptc_ckpt_local x;
    memset(&x, 0, sizeof x);
    x.name = name;
    x.rank = rank;
    x.dtype = dt;
    x.ndim = ndim;
    x.shape[0] = d0;
    x.shape[1] = d1;
    return x;
}

static void set_global(ptc_ckpt_local *x, int ndim, int64_t d0, int64_t d1)
{
    x->has_global = true;
    x->global_ndim = ndim;
    x->global_shape[0] = d0;
    x->global_shape[1] = d1;
}

static const char RULES[] = "match col tp=split(0) pp=first\n"
                            "match rep tp=replicate pp=all\n"
                            "match half tp=replicate pp=all\n";

/* ---- the collection ---------------------------------------------------------------- */

/* Three processes, one rank each of tp=3: `rep` (replicated, no global shape
 * anywhere) and `col` (split, its global shape only on process 2); process 0
 * lists rep first, the others col first. Variants break one thing. */
enum { C_OK, C_DTYPE, C_GSHAPE, C_NOGLOBAL, C_CONFIG, C_MISSING, C_TWICE, C_LOCAL, C_RULE };

static int collect_body(proc *p)
{
    int v = *(const int *)p->arg, r = p->rank, nranks = 1;
    ptc_config cfg;
    ptc_rules *rules = NULL;
    ptc_layout *l = NULL;
    int rc = ptc_config_parse(&cfg, v == C_CONFIG && r == 1 ? "dp=3" : "tp=3");
    if (rc == PTC_OK)
        rc = ptc_rules_parse(&rules, RULES, strlen(RULES), "rules");
    if (rc < 0)
        return rc;
    int ranks[1] = {v == C_TWICE && r == 2 ? 1 : r};
    if (v == C_MISSING && r == 2)
        nranks = 0;
    ptc_ckpt_local x[3];
    ptc_ckpt_local rep = local("rep", ranks[0], PTC_DTYPE_F32, 5, 0, 1);
    ptc_ckpt_local col = local("col", ranks[0], PTC_DTYPE_F32, 2, 2, 2);
    if (r == 2 && v != C_NOGLOBAL)
        set_global(&col, 2, 6, v == C_GSHAPE ? 3 : 2);
    if (r == 1 && v == C_GSHAPE)
        set_global(&col, 2, 6, 2);
    if (r == 2 && v == C_DTYPE)
        col.dtype = PTC_DTYPE_F16;
    if (r == 1 && v == C_LOCAL)
        col.rank = 7;
    size_t n = 0;
    if (r == 0) {
        x[n++] = rep;
        x[n++] = col;
    } else {
        x[n++] = col;
        x[n++] = rep;
    }
    if (v == C_RULE) {
        x[n] = local("extra", ranks[0], PTC_DTYPE_F32, 4, 0, 1);
        set_global(&x[n++], 1, 4, 0);
    }
    if (nranks == 0)
        n = 0;
    rc = ptc_ckpt_collect_over(&p->t, ranks, (size_t)nranks, x, n, &cfg, rules, &l);
    if (rc == PTC_OK) {
        p->ntensors = ptc_layout_count(l);
        for (size_t t = 0; t < p->ntensors && t < 4; t++) {
            const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
            snprintf(p->names[t], sizeof p->names[t], "%s", ti->name);
            p->ndim[t] = ti->ndim;
            memcpy(p->shape[t], ti->shape, sizeof p->shape[t]);
        }
    }
    ptc_layout_destroy(l);
    ptc_rules_destroy(rules);
    return rc;
}

static void test_collect_layout(void **state)
{
    (void)state;
    proc ps[3];
    int v = C_OK;
    run(ps, 3, collect_body, &v);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(ps[r].rc, PTC_OK);
        assert_int_equal(ps[r].ntensors, 2);
        /* process 0's order; col's global shape from process 2; rep's is its local one */
        assert_string_equal(ps[r].names[0], "rep");
        assert_int_equal(ps[r].ndim[0], 1);
        assert_int_equal(ps[r].shape[0][0], 5);
        assert_string_equal(ps[r].names[1], "col");
        assert_int_equal(ps[r].ndim[1], 2);
        assert_int_equal(ps[r].shape[1][0], 6);
        assert_int_equal(ps[r].shape[1][1], 2);
    }
}

static void expect_collect(int v, int rc, const char *msg)
{
    proc ps[3];
    run(ps, 3, collect_body, &v);
    all_fail(ps, 3, rc, msg);
}

static void test_collect_checks(void **state)
{
    (void)state;
    /* computed alike everywhere: no process named */
    expect_collect(C_DTYPE, PTC_E_INVAL, "tensor 'col' is F32 on rank 0 and F16 on rank 2");
    expect_collect(C_GSHAPE, PTC_E_INVAL,
                   "tensor 'col' has global shape [6, 2] on one rank and [6, 3] on another");
    expect_collect(C_NOGLOBAL, PTC_E_INVAL,
                   "tensor 'col': its global shape is unknown (no process gives it, and only "
                   "a replicated tensor's local shape is its global shape)");
    expect_collect(C_CONFIG, PTC_E_INVAL,
                   "process 1 saves with config 'dp=3,tp=1,pp=1', process 0 with "
                   "'dp=1,tp=3,pp=1'");
    expect_collect(C_MISSING, PTC_E_INVAL,
                   "no process runs rank 2 of dp=1,tp=3,pp=1 (3 processes run 2 of 3 ranks)");
    expect_collect(C_TWICE, PTC_E_INVAL, "rank 1 is run by processes 1 and 2");
    /* one process's own description: agreed, naming it */
    expect_collect(C_LOCAL, PTC_E_INVAL,
                   "checkpoint collect failed on process 1: tensor 'col' is given for rank 7, "
                   "which this process does not run");
    /* the layout's own errors: the same everywhere */
    proc ps[3];
    int v = C_RULE;
    run(ps, 3, collect_body, &v);
    assert_int_equal(ps[0].rc, PTC_E_RULE);
    assert_non_null(strstr(ps[0].msg, "'extra'"));
    all_fail(ps, 3, ps[0].rc, ps[0].msg);
}

/* ---- save and load ------------------------------------------------------------------- */

/* tp=2, one rank per process: col F32 [6, 2] split(0) and half BF16 [3]
 * replicated; global element i of col is 100 + i, of half 0x3f80 + i. */
typedef struct io_case {
    ptc_store *s;
    int what;
} io_case;

enum { S_OK, S_RC, S_BIND, L_OK, L_DTYPE, L_RC };

static int save_body(proc *p)
{
    const io_case *c = p->arg;
    int r = p->rank, ranks[1] = {r};
    float colv[6];
    uint16_t half[3];
    for (int i = 0; i < 6; i++)
        colv[i] = (float)(100 + r * 6 + i);
    for (int i = 0; i < 3; i++)
        half[i] = (uint16_t)(0x3f80 + i);
    ptc_config cfg;
    ptc_rules *rules = NULL;
    PTC_TRY(ptc_config_parse(&cfg, "tp=2"));
    PTC_TRY(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"));
    ptc_ckpt_local x[2] = {local("col", r, PTC_DTYPE_F32, 3, 2, 2),
                           local("half", r, PTC_DTYPE_BF16, 3, 0, 1)};
    set_global(&x[0], 2, 6, 2);
    x[0].data = colv;
    x[1].data = half;
    if (c->what == S_BIND && r == 1)
        x[0].shape[0] = 2;
    int rc = PTC_OK;
    if (c->what == S_RC && r == 1)
        rc = ptc_error_set(PTC_E_IO, "disk on fire");
    ptc_ckpt_record rec = {.step = 9};
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = 1;
    rc = ptc_ckpt_save_locals_over(&p->t, rc, c->s, ranks, 1, x, 2, &cfg, rules,
                                   r == 0 ? &rec : NULL, &o, &p->version);
    ptc_rules_destroy(rules);
    return rc;
}

/* dp=1: process 0 runs the one rank, the whole tensors; process 1 none. */
static int load_body(proc *p)
{
    const io_case *c = p->arg;
    int r = p->rank, ranks[1] = {0};
    float colv[12];
    uint16_t half[3];
    memset(colv, 0, sizeof colv);
    memset(half, 0, sizeof half);
    ptc_config cfg;
    PTC_TRY(ptc_config_parse(&cfg, "dp=1"));
    ptc_ckpt_local x[2] = {local("col", 0, PTC_DTYPE_F32, 6, 2, 2),
                           local("half", 0, PTC_DTYPE_U16, 3, 0, 1)}; /* raw bits */
    x[0].data = colv;
    x[1].data = half;
    if (c->what == L_DTYPE)
        x[0].dtype = PTC_DTYPE_F64;
    int rc = PTC_OK;
    if (c->what == L_RC && r == 0)
        rc = ptc_error_set(PTC_E_NOMEM, "no room for the state");
    ptc_ckpt_record rec;
    rc = ptc_ckpt_load_locals_over(&p->t, rc, c->s, 0, ranks, r == 0 ? 1 : 0, x, r == 0 ? 2 : 0,
                                   &cfg, NULL, &rec, &p->version);
    if (rc == PTC_OK) {
        p->ntensors = (size_t)rec.step;
        for (int i = 0; r == 0 && i < 12; i++)
            if (colv[i] != (float)(100 + i))
                rc = ptc_error_set(PTC_E_INVAL, "col[%d] = %g", i, (double)colv[i]);
        for (int i = 0; r == 0 && i < 3; i++)
            if (half[i] != 0x3f80 + i)
                rc = ptc_error_set(PTC_E_INVAL, "half[%d] = %#x", i, half[i]);
    }
    ptc_ckpt_record_free(&rec);
    return rc;
}

static void test_save_and_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/ptc_ckpt_collect_XXXXXX";
    assert_non_null(mkdtemp(dir));
    ptc_store *s = NULL;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    proc ps[2];
    io_case c = {s, S_RC};
    run(ps, 2, save_body, &c);
    all_fail(ps, 2, PTC_E_IO, "checkpoint save failed on process 1: disk on fire");
    c.what = S_BIND;
    run(ps, 2, save_body, &c);
    all_fail(ps, 2, PTC_E_INVAL,
             "checkpoint save failed on process 1: tensor 'col' on rank 1: local shape [2, 2], "
             "but the layout of dp=1,tp=2,pp=1 gives [3, 2]");
    uint64_t latest = 99;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    assert_int_equal(latest, 0);

    c.what = S_OK;
    run(ps, 2, save_body, &c);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(ps[r].rc, PTC_OK);
        assert_int_equal(ps[r].version, 1);
    }
    c.what = L_OK;
    run(ps, 2, load_body, &c);
    for (int r = 0; r < 2; r++) {
        if (ps[r].rc != PTC_OK)
            fail_msg("process %d: %s", r, ps[r].msg);
        assert_int_equal(ps[r].version, 1);
        assert_int_equal(ps[r].ntensors, 9); /* the record's step */
    }
    c.what = L_DTYPE;
    run(ps, 2, load_body, &c);
    all_fail(ps, 2, PTC_E_INVAL,
             "checkpoint load failed on process 0: tensor 'col' on rank 0 has dtype F64; "
             "version 1 has F32");
    c.what = L_RC;
    run(ps, 2, load_body, &c);
    all_fail(ps, 2, PTC_E_NOMEM, "checkpoint load failed on process 0: no room for the state");
    ptc_store_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- explicit layouts ------------------------------------------------------------------ */

/* Two processes, one rank each, no configuration: `strided` F32 [4, 3] as
 * an FSDP2 strided shard holds it (rank r: rows r and r + 2, two pieces of
 * a [2, 3] buffer), `box` F32 [4] by its box (rank r: [2r, 2r + 2)),
 * `plain` F32 [3] whole on both. Element i of a tensor is its base + i. */
enum { X_OK, X_GAP, X_PLAIN, X_MIXED, X_RULES };

static int xsave_body(proc *p)
{
    const io_case *c = p->arg;
    int r = p->rank, ranks[1] = {r};
    float sv[6], bv[2], pv[3];
    for (int i = 0; i < 3; i++) {
        sv[i] = (float)(100 + 3 * r + i);           /* row r */
        sv[3 + i] = (float)(100 + 3 * (r + 2) + i); /* row r + 2 */
        pv[i] = (float)(300 + i);
    }
    for (int i = 0; i < 2; i++)
        bv[i] = (float)(200 + 2 * r + i);
    ptc_piece pc[2];
    memset(pc, 0, sizeof pc);
    for (int k = 0; k < 2; k++) {
        pc[k].box.ndim = 2;
        pc[k].box.lo[0] = r + 2 * k;
        pc[k].box.hi[0] = r + 2 * k + 1;
        pc[k].box.hi[1] = 3;
        pc[k].local_offset = 3 * k;
        pc[k].local_stride[0] = 3;
        pc[k].local_stride[1] = 1;
    }
    ptc_ckpt_local x[3] = {local("strided", r, PTC_DTYPE_F32, 2, 3, 2),
                           local("box", r, PTC_DTYPE_F32, 2, 0, 1),
                           local("plain", r, PTC_DTYPE_F32, 3, 0, 1)};
    set_global(&x[0], 2, 4, 3);
    x[0].pieces = pc;
    x[0].npieces = 2;
    set_global(&x[1], 1, 4, 0);
    x[1].has_box = true;
    x[1].box.ndim = 1;
    x[1].box.lo[0] = c->what == X_GAP ? 0 : 2 * r;
    x[1].box.hi[0] = x[1].box.lo[0] + 2;
    x[0].data = sv;
    x[1].data = bv;
    x[2].data = pv;
    if (c->what == X_PLAIN && r == 1)
        set_global(&x[2], 1, 6, 0);
    ptc_config cfg;
    ptc_rules *rules = NULL;
    PTC_TRY(ptc_config_parse(&cfg, "tp=2"));
    const char rt[] = "match * tp=replicate pp=all\n", bad[] = "match box tp=replicate\n";
    if (c->what == X_MIXED || c->what == X_RULES)
        PTC_TRY(ptc_rules_parse(&rules, c->what == X_RULES ? bad : rt,
                                strlen(c->what == X_RULES ? bad : rt), "rules"));
    ptc_ckpt_record rec = {.step = 4};
    int rc = ptc_ckpt_save_locals_over(&p->t, PTC_OK, c->s, ranks, 1, x, 3,
                                       c->what == X_MIXED && r == 0 ? &cfg : NULL, rules,
                                       r == 0 ? &rec : NULL, NULL, &p->version);
    ptc_rules_destroy(rules);
    return rc;
}

/* Loads of the explicit version: process 0 holds `strided` whole and the
 * first half of `box` (no configuration), process 1 the second half and
 * `plain`; then, under dp=1, process 0 everything. */
static int xload_body(proc *p)
{
    const io_case *c = p->arg;
    int r = p->rank, ranks[1] = {r};
    float sv[12] = {0}, bv[4] = {0}, pv[3] = {0};
    ptc_ckpt_local x[3];
    size_t n = 0;
    if (c->what == L_OK) { /* explicit */
        if (r == 0)
            x[n++] = local("strided", 0, PTC_DTYPE_F32, 4, 3, 2);
        x[n] = local("box", r, PTC_DTYPE_F32, 2, 0, 1);
        set_global(&x[n], 1, 4, 0);
        x[n].has_box = true;
        x[n].box.ndim = 1;
        x[n].box.lo[0] = 2 * r;
        x[n++].box.hi[0] = 2 * r + 2;
        if (r == 1)
            x[n++] = local("plain", 1, PTC_DTYPE_F32, 3, 0, 1);
    } else if (r == 0) { /* dp=1 */
        x[n++] = local("strided", 0, PTC_DTYPE_F32, 4, 3, 2);
        x[n++] = local("box", 0, PTC_DTYPE_F32, 4, 0, 1);
        x[n++] = local("plain", 0, PTC_DTYPE_F32, 3, 0, 1);
    }
    for (size_t i = 0; i < n; i++)
        x[i].data = x[i].name[0] == 's' ? (void *)sv : x[i].name[0] == 'b' ? (void *)bv : pv;
    ptc_config cfg;
    PTC_TRY(ptc_config_parse(&cfg, "dp=1"));
    ptc_ckpt_record rec;
    int rc = ptc_ckpt_load_locals_over(&p->t, PTC_OK, c->s, 0, ranks,
                                       c->what == L_OK || r == 0 ? 1 : 0, x, n,
                                       c->what == L_OK ? NULL : &cfg, NULL, &rec, &p->version);
    if (rc == PTC_OK && strcmp(rec.config, "explicit:2"))
        rc = ptc_error_set(PTC_E_INVAL, "record config '%s'", rec.config);
    ptc_ckpt_record_free(&rec);
    for (size_t i = 0; rc == PTC_OK && i < n; i++) {
        const float *v = x[i].data;
        int64_t len = x[i].ndim == 2 ? 12 : x[i].shape[0], lo = x[i].has_box ? x[i].box.lo[0] : 0;
        float base = x[i].name[0] == 's' ? 100 : x[i].name[0] == 'b' ? 200 : 300;
        for (int64_t k = 0; k < len; k++)
            if (v[k] != base + (float)(lo + k))
                rc = ptc_error_set(PTC_E_INVAL, "%s[%lld] = %g", x[i].name, (long long)k,
                                   (double)v[k]);
    }
    return rc;
}

static void test_explicit(void **state)
{
    (void)state;
    char dir[] = "/tmp/ptc_ckpt_explicit_XXXXXX";
    assert_non_null(mkdtemp(dir));
    ptc_store *s = NULL;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    proc ps[2];
    io_case c = {s, X_GAP};
    run(ps, 2, xsave_body, &c);
    all_fail(ps, 2, PTC_E_INVAL, "checkpoint save failed on process 0: tensor 'box': its shards "
                                 "hold 2 of its 4 elements (no rank holds the rest)");
    c.what = X_PLAIN;
    run(ps, 2, xsave_body, &c);
    all_fail(ps, 2, PTC_E_INVAL,
             "checkpoint save failed on process 1: tensor 'plain' on rank 1: local shape [3] of "
             "a global [6], but neither its box nor its pieces are given (a plain tensor is the "
             "whole tensor unless a configuration places it)");
    c.what = X_MIXED;
    run(ps, 2, xsave_body, &c);
    all_fail(ps, 2, PTC_E_INVAL, "process 1 saves with an explicit layout (no config), process "
                                 "0 with config 'dp=1,tp=2,pp=1'");
    c.what = X_RULES;
    run(ps, 2, xsave_body, &c);
    assert_int_equal(ps[0].rc, PTC_E_RULE);
    assert_non_null(strstr(ps[0].msg, "checkpoint save failed on process 0: checkpoint: the "
                                      "rules do not place the layout's tensors"));
    uint64_t latest = 9;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    assert_int_equal(latest, 0);

    c.what = X_OK;
    run(ps, 2, xsave_body, &c);
    for (int r = 0; r < 2; r++) {
        if (ps[r].rc != PTC_OK)
            fail_msg("process %d: %s", r, ps[r].msg);
        assert_int_equal(ps[r].version, 1);
    }
    ptc_store_reader *rd;
    assert_int_equal(ptc_store_reader_open(&rd, s, 1), PTC_OK);
    assert_string_equal(ptc_store_reader_version(rd)->config, "explicit:2");
    ptc_store_reader_close(rd);
    c.what = L_OK;
    run(ps, 2, xload_body, &c);
    for (int r = 0; r < 2; r++)
        if (ps[r].rc != PTC_OK)
            fail_msg("process %d: %s", r, ps[r].msg);
    c.what = L_DTYPE;
    run(ps, 2, xload_body, &c);
    for (int r = 0; r < 2; r++)
        if (ps[r].rc != PTC_OK)
            fail_msg("process %d: %s", r, ps[r].msg);
    ptc_store_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- the description decoder ------------------------------------------------------------ */

static void test_desc_decode(void **state)
{
    (void)state;
    ptc_config cfg;
    ptc_rules *rules = NULL;
    assert_int_equal(ptc_config_parse(&cfg, "tp=2"), PTC_OK);
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    int ranks[2] = {1, 0};
    ptc_ckpt_local x[2] = {local("col", 1, PTC_DTYPE_F32, 3, 2, 2),
                           local("half", 0, PTC_DTYPE_BF16, 3, 0, 1)};
    set_global(&x[0], 2, 6, 2);
    ptc_buf b = {0};
    assert_int_equal(ptc_ckpt_desc_encode(&b, ranks, 2, x, 2, &cfg, rules), PTC_OK);
    ptc_ckpt_desc d;
    assert_int_equal(ptc_ckpt_desc_decode(&d, b.p, b.len), PTC_OK);
    assert_string_equal(d.config, "dp=1,tp=2,pp=1");
    assert_string_equal(d.rules, ptc_rules_text(rules));
    assert_int_equal(d.nranks, 2);
    assert_int_equal(d.ranks[0], 1);
    assert_int_equal(d.ntensors, 2);
    assert_string_equal(d.tensors[0].name, "col");
    assert_int_equal(d.tensors[0].rank, 1);
    assert_int_equal(d.tensors[0].global_ndim, 2);
    assert_int_equal(d.tensors[0].global_shape[0], 6);
    assert_int_equal(d.tensors[1].dtype, PTC_DTYPE_BF16);
    assert_int_equal(d.tensors[1].global_ndim, -1);
    ptc_ckpt_desc_free(&d);
    /* every shorter prefix, and one byte more, is refused */
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(ptc_ckpt_desc_decode(&d, b.p, n), PTC_E_FORMAT);
    uint8_t *more = malloc(b.len + 1);
    memcpy(more, b.p, b.len);
    more[b.len] = 0;
    assert_int_equal(ptc_ckpt_desc_decode(&d, more, b.len + 1), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "1 trailing bytes"));
    /* any single altered byte decodes or fails cleanly (ASan watches) */
    for (size_t i = 0; i < b.len; i++) {
        memcpy(more, b.p, b.len);
        more[i] ^= 0xff;
        int rc = ptc_ckpt_desc_decode(&d, more, b.len);
        assert_true(rc == PTC_OK || rc == PTC_E_FORMAT);
        ptc_ckpt_desc_free(&d);
    }
    free(more);
    /* this process's own description is checked before it is sent */
    ptc_buf_free(&b);
    ranks[1] = 1;
    assert_int_equal(ptc_ckpt_desc_encode(&b, ranks, 2, x, 2, &cfg, rules), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(), "rank 1 given twice");
    ranks[1] = 0;
    x[1].name = "col";
    x[1].rank = 1;
    assert_int_equal(ptc_ckpt_desc_encode(&b, ranks, 2, x, 2, &cfg, rules), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(), "tensor 'col' is given twice for rank 1");
    x[1].name = "half";
    x[1].ndim = 9;
    assert_int_equal(ptc_ckpt_desc_encode(&b, ranks, 2, x, 2, &cfg, rules), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(),
                        "tensor 'half': the local shape has 9 dimensions (0..8)");
    ptc_buf_free(&b);
    ptc_rules_destroy(rules);
}

/* An explicit description carries each local tensor's pieces: given, its
 * box, or the whole tensor. */
static void test_desc_explicit(void **state)
{
    (void)state;
    int ranks[1] = {0};
    ptc_piece pc[2];
    memset(pc, 0, sizeof pc);
    for (int k = 0; k < 2; k++) {
        pc[k].box.ndim = 1;
        pc[k].box.lo[0] = 4 * k;
        pc[k].box.hi[0] = 4 * k + 2;
        pc[k].local_offset = 2 * k;
        pc[k].local_stride[0] = 1;
    }
    ptc_ckpt_local x[3] = {local("s", 0, PTC_DTYPE_F32, 4, 0, 1),
                           local("b", 0, PTC_DTYPE_F32, 3, 2, 2),
                           local("w", 0, PTC_DTYPE_BF16, 5, 0, 1)};
    set_global(&x[0], 1, 8, 0);
    x[0].pieces = pc;
    x[0].npieces = 2;
    set_global(&x[1], 2, 9, 2);
    x[1].has_box = true;
    x[1].box.ndim = 2;
    x[1].box.lo[0] = 6;
    x[1].box.hi[0] = 9;
    x[1].box.hi[1] = 2;
    ptc_buf b = {0};
    assert_int_equal(ptc_ckpt_desc_encode(&b, ranks, 1, x, 3, NULL, NULL), PTC_OK);
    ptc_ckpt_desc d;
    assert_int_equal(ptc_ckpt_desc_decode(&d, b.p, b.len), PTC_OK);
    assert_string_equal(d.config, "");
    assert_string_equal(d.rules, "");
    assert_int_equal(d.ntensors, 3);
    assert_int_equal(d.tensors[0].npieces, 2);
    assert_memory_equal(d.tensors[0].pieces, pc, sizeof pc);
    assert_int_equal(d.tensors[1].npieces, 1);
    assert_int_equal(d.tensors[1].pieces[0].box.lo[0], 6);
    assert_int_equal(d.tensors[1].pieces[0].local_stride[0], 2);
    assert_int_equal(d.tensors[2].global_ndim, 1); /* the whole tensor */
    assert_int_equal(d.tensors[2].global_shape[0], 5);
    assert_int_equal(d.tensors[2].pieces[0].box.hi[0], 5);
    ptc_layout *l = NULL;
    assert_int_equal(ptc_ckpt_desc_layout(&d, 1, NULL, NULL, &l), PTC_OK);
    assert_true(ptc_layout_is_explicit(l));
    assert_int_equal(ptc_layout_world(l), 1);
    ptc_layout_destroy(l);
    ptc_ckpt_desc_free(&d);
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(ptc_ckpt_desc_decode(&d, b.p, n), PTC_E_FORMAT);
    uint8_t *more = malloc(b.len);
    for (size_t i = 0; i < b.len; i++) {
        memcpy(more, b.p, b.len);
        more[i] ^= 0xff;
        int rc = ptc_ckpt_desc_decode(&d, more, b.len);
        assert_true(rc == PTC_OK || rc == PTC_E_FORMAT);
        ptc_ckpt_desc_free(&d);
    }
    free(more);
    /* a box that is not the buffer's shape */
    ptc_buf_free(&b);
    x[1].box.hi[0] = 8;
    assert_int_equal(ptc_ckpt_desc_encode(&b, ranks, 1, x, 3, NULL, NULL), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(),
                        "tensor 'b' on rank 0: its box does not have its local shape [3, 2]");
    ptc_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collect_layout),
        cmocka_unit_test(test_collect_checks),
        cmocka_unit_test(test_save_and_load),
        cmocka_unit_test(test_desc_decode),
        cmocka_unit_test(test_explicit),
        cmocka_unit_test(test_desc_explicit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
