/* The view library: path grammar, step files, reads and served counts over
 * an in-memory dataset. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/fault_testing.h"
#include "fuse/view_internal.h"
#include "ptc/dataset.h"
#include "ptc/view.h"

/* ---- an in-memory dataset: record i has length i % 11 (so some are empty)
 * and byte j of record i is (i * 31 + j) & 0xff ----------------------------- */

#define MEM_N 1000

struct mem {
    uint64_t n;
    pthread_mutex_t lock;
    uint32_t served[MEM_N];
    uint64_t served_seed, served_epoch;
    int opens, closes;
};

static uint64_t rec_len(uint64_t id)
{
    return id % 11;
}

static int mem_size(void *user, uint64_t id, uint64_t *size)
{
    struct mem *m = user;
    if (id >= m->n)
        return ptc_error_set(PTC_E_RANGE, "bad id");
    *size = rec_len(id);
    return PTC_OK;
}

static int mem_read(void *user, uint64_t id, uint64_t off, void *buf, size_t len)
{
    struct mem *m = user;
    if (id >= m->n || off + len > rec_len(id))
        return ptc_error_set(PTC_E_RANGE, "read outside record %llu", (unsigned long long)id);
    for (size_t j = 0; j < len; j++)
        ((uint8_t *)buf)[j] = (uint8_t)(id * 31 + off + j);
    return PTC_OK;
}

static int mem_open(void *user, const char *name, ptc_view_dataset *ds)
{
    struct mem *m = user;
    if (strcmp(name, "toy") != 0)
        return ptc_error_set(PTC_E_NOTFOUND, "no dataset %s", name);
    memset(ds, 0, sizeof *ds);
    ds->n = m->n;
    ds->user = m;
    ds->record_size = mem_size;
    ds->record_read = mem_read;
    pthread_mutex_lock(&m->lock);
    m->opens++;
    pthread_mutex_unlock(&m->lock);
    return PTC_OK;
}

static void mem_close(void *user, ptc_view_dataset *ds)
{
    struct mem *m = user;
    (void)ds;
    m->closes++;
}

static int mem_list(void *user, ptc_view_emit_fn emit, void *ctx)
{
    (void)user;
    emit(ctx, "toy", true);
    return PTC_OK;
}

static void mem_served(void *user, const char *name, uint64_t generation, uint64_t seed,
                       uint64_t epoch, uint64_t id)
{
    struct mem *m = user;
    assert_string_equal(name, "toy");
    assert_int_equal(generation, 0); /* in-memory datasets have generation 0 */
    pthread_mutex_lock(&m->lock);
    m->served[id]++;
    m->served_seed = seed;
    m->served_epoch = epoch;
    pthread_mutex_unlock(&m->lock);
}

/* a fake model provider: version 3 exists, rank files are 100 bytes of 'R' */
static int model_stat(void *user, const ptc_view_node *n, uint64_t *size)
{
    (void)user;
    if (n->version != 3)
        return ptc_error_set(PTC_E_NOTFOUND, "no version");
    *size = ptc_view_kind_is_dir(n->kind) ? 0 : 100;
    return PTC_OK;
}
static int model_open(void *user, const ptc_view_node *n, void **fh)
{
    (void)user;
    *fh = (void *)(uintptr_t)(n->kind == PTC_VIEW_MODEL_RANK ? 'R' : 'M');
    return PTC_OK;
}
static int model_read(void *user, void *fh, uint64_t off, void *buf, size_t len, size_t *got)
{
    (void)user;
    size_t n = off >= 100 ? 0 : (size_t)(100 - off) < len ? (size_t)(100 - off) : len;
    memset(buf, (int)(uintptr_t)fh, n);
    *got = n;
    return PTC_OK;
}
static void model_close(void *user, void *fh)
{
    (void)user;
    (void)fh;
}

static const ptc_view_ops mem_ops = {
    .dataset_open = mem_open,
    .dataset_close = mem_close,
    .dataset_list = mem_list,
    .served = mem_served,
    .model_stat = model_stat,
    .model_open = model_open,
    .model_read = model_read,
    .model_close = model_close,
};

static struct mem *mem_new(void)
{
    struct mem *m = calloc(1, sizeof *m);
    m->n = MEM_N;
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

/* ---- parse ----------------------------------------------------------------------- */

static void test_parse_good(void **state)
{
    (void)state;
    ptc_view_node n;
    assert_int_equal(ptc_view_parse("/", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_ROOT);
    assert_int_equal(ptc_view_parse("/README.txt", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_README);
    assert_int_equal(ptc_view_parse("/datasets/toy_1.v2-x/info.json", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_DATASET_INFO);
    assert_string_equal(n.name, "toy_1.v2-x");
    assert_int_equal(ptc_view_parse("/datasets/toy/samples/0", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_SAMPLE);
    assert_int_equal(ptc_view_parse("/datasets/toy/samples/18446744073709551615", &n), PTC_OK);
    assert_true(n.id == UINT64_MAX);
    assert_int_equal(ptc_view_parse("/datasets/toy/seed-7/epoch-2/batch-64/start-128/dp-4/rank-3/step-10", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_STEP);
    assert_true(n.seed == 7 && n.epoch == 2 && n.batch == 64 && n.start == 128 && n.dp == 4 &&
                n.rank == 3 && n.step == 10);
    assert_int_equal(ptc_view_parse("/datasets/toy/seed-0/epoch-0/batch-1/start-0/dp-1/rank-0/step-0.idx", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_STEP_IDX);
    assert_int_equal(ptc_view_parse("/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_DP);
    assert_int_equal(ptc_view_parse("/models/12/dp2-tp4-pp1", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_MODEL_CFG);
    assert_true(n.version == 12 && n.config.dp == 2 && n.config.tp == 4);
    assert_int_equal(ptc_view_parse("/models/1/dp2-tp1-pp2-zero1/rank-3.safetensors", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_MODEL_RANK);
    assert_true(n.rank == 3 && n.config.zero);
    assert_int_equal(ptc_view_parse("/models/1/model.safetensors", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_MODEL_FULL);
    assert_int_equal(ptc_view_parse("/models/1/info.json", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_MODEL_INFO);
    assert_int_equal(ptc_view_parse("/models", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_MODELS);
}

static void test_parse_bad(void **state)
{
    (void)state;
    static const char *const notfound[] = {
        "", "README.txt", "//", "/README.txt/", "/readme.txt", "/foo", "/datasets/",
        "/datasets/.hidden", "/datasets/a b", "/datasets/..", "/datasets/toy/./info.json",
        "/datasets/toy/info.json/x", "/datasets/toy/samples/01", "/datasets/toy/samples/-1",
        "/datasets/toy/samples/1/2", "/datasets/toy/samples/+1", "/datasets/toy/samples/ 1",
        "/datasets/toy/seed-", "/datasets/toy/seed-abc", "/datasets/toy/seed-01",
        "/datasets/toy/seed-1/batch-4", "/datasets/toy/seed-1/epoch-1/batch-0",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-0",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-9",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-4",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-abc",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-1.idx.idx",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-1.IDX",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-007",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-1/x",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/.idx",
        "/models/0", "/models/01", "/models/x", "/models/1/dp02", "/models/1/dp=02,tp=1,pp=1",
        "/models/1/tp1-dp2-pp1-", "/models/1/dp2-tp1-pp1-zero2", "/models/1/dp0-tp1-pp1",
        "/models/1/garbage", "/models/1/dp2-tp2-pp1/rank-4.safetensors",
        "/models/1/dp2-tp2-pp1/rank-1", "/models/1/dp2-tp2-pp1/rank-01.safetensors",
        "/models/1/info.json/x",
    };
    ptc_view_node n;
    for (size_t i = 0; i < sizeof notfound / sizeof notfound[0]; i++) {
        int rc = ptc_view_parse(notfound[i], &n);
        if (rc != PTC_E_NOTFOUND)
            fail_msg("'%s' gave %d", notfound[i], rc);
        assert_int_equal(ptc_view_errno(rc), 2 /* ENOENT */);
    }
    static const char *const range[] = {
        "/datasets/toy/samples/18446744073709551616",
        "/datasets/toy/samples/99999999999999999999999",
        "/datasets/toy/seed-18446744073709551616",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-1048577",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-99999999999999999999.idx",
        "/models/99999999999999999999",
    };
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++) {
        int rc = ptc_view_parse(range[i], &n);
        if (rc != PTC_E_RANGE)
            fail_msg("'%s' gave %d", range[i], rc);
        assert_int_equal(ptc_view_errno(rc), 22 /* EINVAL */);
    }
    char longname[400] = "/datasets/";
    memset(longname + 10, 'a', 300);
    assert_int_equal(ptc_view_parse(longname, &n), PTC_E_NOTFOUND);
}

/* ---- step plans ------------------------------------------------------------------- */

static ptc_view_dataset mem_ds(struct mem *m)
{
    ptc_view_dataset ds;
    assert_int_equal(mem_open(m, "toy", &ds), PTC_OK);
    return ds;
}

static void test_step_plan(void **state)
{
    (void)state;
    struct mem *m = mem_new();
    ptc_view_dataset ds = mem_ds(m);
    ptc_order o;
    assert_int_equal(ptc_order_init(&o, MEM_N, 5, 1), PTC_OK);
    ptc_view_step *s;
    /* batch 10 from start 3, dp 3: step 2 covers [23, 33), rank 1 gets [27, 31) */
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){5, 1, 10, 3, 3, 1, 2, 0}, &s),
                     PTC_OK);
    assert_int_equal(s->n, 4);
    uint64_t total = 0;
    for (uint64_t i = 0; i < 4; i++) {
        uint64_t id;
        assert_int_equal(ptc_order_sample(&o, 27 + i, &id), PTC_OK);
        assert_int_equal(s->ids[i], id);
        assert_int_equal(s->offsets[i], total);
        total += rec_len(id);
    }
    assert_int_equal(s->offsets[4], total);
    uint8_t idx[40];
    size_t got;
    ptc_view_step_idx_read(s, 0, idx, sizeof idx, &got);
    assert_int_equal(got, 40);
    for (int i = 0; i < 5; i++) {
        uint64_t v = 0;
        for (int b = 7; b >= 0; b--)
            v = v << 8 | idx[8 * i + b];
        assert_int_equal(v, s->offsets[i]);
    }
    ptc_view_step_idx_read(s, 37, idx, 10, &got);
    assert_int_equal(got, 3);
    ptc_view_step_idx_read(s, 40, idx, 10, &got);
    assert_int_equal(got, 0);
    ptc_view_step_destroy(s);

    /* the last step (partial) and one past it */
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){5, 1, 64, 0, 4, 3, 15, 0}, &s),
                     PTC_OK);
    assert_int_equal(s->n, 10); /* [960,1000): 40 records, c = 10 */
    ptc_view_step_destroy(s);
    s = (ptc_view_step *)1;
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){5, 1, 64, 0, 4, 0, 16, 0}, &s),
                     PTC_E_NOTFOUND);
    assert_null(s);
    /* an empty part of an existing step */
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){5, 1, 3, 999, 4, 3, 0, 0}, &s),
                     PTC_OK);
    assert_int_equal(s->n, 0);
    assert_int_equal(s->offsets[0], 0);
    assert_int_equal(ptc_view_step_find(s, 0), 0);
    ptc_view_step_destroy(s);
    /* too many records in one file */
    struct mem big = *m;
    big.n = PTC_VIEW_MAX_STEP_RECORDS + 1;
    ds.n = big.n;
    assert_int_equal(
        ptc_view_step_plan(&ds, &(ptc_dataset_step){0, 0, UINT64_MAX, 0, 1, 0, 0, 0}, &s),
        PTC_E_RANGE);
    ds.n = MEM_N;
    /* allocation failures clean up */
    for (long k = 1; k <= 3; k++) { /* the plan, its ids, its offsets */
        ptc_fault_alloc_at(k);
        int rc = ptc_view_step_plan(&ds, &(ptc_dataset_step){5, 1, 10, 3, 3, 1, 2, 0}, &s);
        ptc_fault_alloc_at(0);
        assert_int_equal(rc, PTC_E_NOMEM);
        assert_null(s);
    }
    free(m);
}

static void test_step_find(void **state)
{
    (void)state;
    uint64_t offs[] = {0, 0, 5, 5, 5, 9, 10, 10};
    uint64_t ids[7] = {0};
    ptc_view_step s = {.n = 7, .ids = ids, .offsets = offs};
    assert_int_equal(ptc_view_step_find(&s, 0), 1);
    assert_int_equal(ptc_view_step_find(&s, 4), 1);
    assert_int_equal(ptc_view_step_find(&s, 5), 4);
    assert_int_equal(ptc_view_step_find(&s, 8), 4);
    assert_int_equal(ptc_view_step_find(&s, 9), 5);
    assert_int_equal(ptc_view_step_find(&s, 10), 7);
    assert_int_equal(ptc_view_step_find(&s, 1000), 7);
}

/* ---- the view ------------------------------------------------------------------------ */

struct names {
    char v[64][64];
    int n;
};

static int collect(void *ctx, const char *name, bool is_dir)
{
    struct names *l = ctx;
    (void)is_dir;
    if (l->n < 64)
        snprintf(l->v[l->n++], 64, "%s", name);
    return 0;
}

static size_t read_all(ptc_view *v, const char *path, uint8_t *buf, size_t cap, size_t chunk)
{
    ptc_view_file *f;
    int rc = ptc_view_open(v, path, &f);
    if (rc != PTC_OK)
        fail_msg("open %s: %d %s", path, rc, ptc_last_error());
    size_t total = 0, got;
    uint64_t size = ptc_view_file_size(f);
    assert_true(size <= cap);
    do {
        assert_int_equal(ptc_view_read(f, total, buf + total, chunk, &got), PTC_OK);
        total += got;
    } while (got > 0);
    assert_int_equal(total, size);
    ptc_view_close(f);
    return total;
}

/* Batch policies in the path: policy-<P> after dp-<D>. Grammar, listing,
 * the records of every step file (those of ptc_batch_part_policy in epoch
 * order), and the served counts of a whole epoch: every record served
 * once except the dropped ones, never served. */
static void test_policy_tree(void **state)
{
    (void)state;
    ptc_view_node n;
    assert_int_equal(ptc_view_parse("/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-equal", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_POLICY);
    assert_int_equal(n.policy, PTC_BATCH_POLICY_EQUAL);
    assert_int_equal(n.dp, 5);
    assert_true(ptc_view_kind_is_dir(n.kind));
    assert_int_equal(ptc_view_parse("/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-drop-last+equal/rank-4/step-7.idx", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_STEP_IDX);
    assert_int_equal(n.policy, PTC_BATCH_POLICY_DROP_LAST | PTC_BATCH_POLICY_EQUAL);
    assert_int_equal(n.rank, 4);
    assert_int_equal(n.step, 7);
    assert_int_equal(ptc_view_parse("/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-drop-last/rank-0", &n), PTC_OK);
    assert_int_equal(n.kind, PTC_VIEW_RANK);
    assert_int_equal(n.policy, PTC_BATCH_POLICY_DROP_LAST);
    /* without the component: policy 0, the default tree */
    assert_int_equal(ptc_view_parse("/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/rank-0/step-1", &n), PTC_OK);
    assert_int_equal(n.policy, 0);
    const char *bad[] = {
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-none",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-equal+drop-last",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-Equal",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-equal/policy-equal",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-equal/rank-5",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/policy-equal/dp-5",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/rank-0/policy-equal",
        "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5/policy-equal/rank-0/step-1/x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (ptc_view_parse(bad[i], &n) != PTC_E_NOTFOUND)
            fail_msg("parsed: %s", bad[i]);
    }

    struct mem *m = mem_new();
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &mem_ops, m), PTC_OK);
    ptc_view_stat st;
    struct names l = {0};
    const char *dp = "/datasets/toy/seed-3/epoch-1/batch-64/start-0/dp-3";
    char path[256];
    /* dp-<D> lists only the ranks (the default tree); policy-<P> lists ranks */
    assert_int_equal(ptc_view_list(v, dp, collect, &l), PTC_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.v[0], "rank-0");
    l.n = 0;
    snprintf(path, sizeof path, "%s/policy-equal", dp);
    assert_int_equal(ptc_view_stat_path(v, path, &st), PTC_OK);
    assert_true(st.is_dir);
    assert_int_equal(ptc_view_list(v, path, collect, &l), PTC_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.v[2], "rank-2");
    snprintf(path, sizeof path, "/datasets/toy/seed-3/epoch-1/batch-64/start-1001/dp-3/policy-equal");
    assert_int_equal(ptc_view_stat_path(v, path, &st), PTC_E_NOTFOUND);

    /* 1000 records, batch 64, dp 3: 15 full batches and one of 40 */
    static const char *const pols[] = {"drop-last", "equal", "drop-last+equal"};
    static const uint64_t want_drop[] = {40, 16, 55};
    ptc_order o;
    assert_int_equal(ptc_order_init(&o, MEM_N, 3, 1), PTC_OK);
    static uint8_t buf[64 * 11];
    for (unsigned pi = 0; pi < 3; pi++) {
        unsigned pol = pi + 1;
        memset(m->served, 0, sizeof m->served);
        uint64_t steps;
        assert_int_equal(ptc_batch_steps_policy(MEM_N, 64, 0, pol, &steps), PTC_OK);
        assert_int_equal(steps, (pol & PTC_BATCH_POLICY_DROP_LAST) ? 15 : 16);
        for (uint64_t k = 0; k <= steps; k++) {
            for (uint64_t r = 0; r < 3; r++) {
                snprintf(path, sizeof path, "%s/policy-%s/rank-%llu/step-%llu", dp, pols[pi],
                         (unsigned long long)r, (unsigned long long)k);
                if (k == steps) {
                    assert_int_equal(ptc_view_stat_path(v, path, &st), PTC_E_NOTFOUND);
                    continue;
                }
                uint64_t lo, hi, want = 0;
                assert_int_equal(ptc_batch_part_policy(MEM_N, 64, 0, 3, r, k, pol, &lo, &hi),
                                 PTC_OK);
                if (pol & PTC_BATCH_POLICY_EQUAL)
                    assert_int_equal(hi - lo, k < 15 ? 21 : 13);
                size_t got = read_all(v, path, buf, sizeof buf, 100);
                for (uint64_t p = lo; p < hi; p++) {
                    uint64_t id;
                    assert_int_equal(ptc_order_sample(&o, p, &id), PTC_OK);
                    for (uint64_t j = 0; j < rec_len(id); j++)
                        assert_int_equal(buf[want + j], (uint8_t)(id * 31 + j));
                    want += rec_len(id);
                }
                assert_int_equal(got, want);
            }
        }
        uint64_t once = 0, never = 0, dropped = 0;
        for (uint64_t id = 0; id < MEM_N; id++) {
            uint64_t p;
            bool d;
            assert_int_equal(ptc_order_position(&o, id, &p), PTC_OK);
            assert_int_equal(ptc_batch_is_dropped(MEM_N, 64, 0, 3, pol, p, &d), PTC_OK);
            assert_int_equal(m->served[id], d ? 0 : 1);
            once += m->served[id] == 1;
            never += m->served[id] == 0;
            dropped += d;
        }
        assert_int_equal(dropped, want_drop[pi]);
        assert_int_equal(never, want_drop[pi]);
        assert_int_equal(once, MEM_N - want_drop[pi]);
    }
    ptc_view_destroy(v);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static void test_view_tree(void **state)
{
    (void)state;
    struct mem *m = mem_new();
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &mem_ops, m), PTC_OK);
    ptc_view_stat st;
    uint8_t buf[8192];
    struct names l = {0};

    assert_int_equal(ptc_view_stat_path(v, "/", &st), PTC_OK);
    assert_true(st.is_dir);
    assert_int_equal(ptc_view_list(v, "/", collect, &l), PTC_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.v[0], "README.txt");
    size_t n = read_all(v, "/README.txt", buf, sizeof buf, 100);
    assert_true(n > 100 && memcmp(buf, "PTC mount", 9) == 0);

    l.n = 0;
    assert_int_equal(ptc_view_list(v, "/datasets", collect, &l), PTC_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.v[0], "toy");
    n = read_all(v, "/datasets/toy/info.json", buf, sizeof buf, 7);
    buf[n] = 0;
    assert_string_equal((char *)buf, "{\"name\":\"toy\",\"samples\":1000}\n");
    assert_int_equal(ptc_view_stat_path(v, "/datasets/nope/info.json", &st), PTC_E_NOTFOUND);
    assert_int_equal(ptc_view_stat_path(v, "/datasets/nope", &st), PTC_E_NOTFOUND);

    /* samples: random access, not counted */
    assert_int_equal(ptc_view_stat_path(v, "/datasets/toy/samples/21", &st), PTC_OK);
    assert_false(st.is_dir);
    assert_int_equal(st.size, 10);
    n = read_all(v, "/datasets/toy/samples/21", buf, sizeof buf, 3);
    for (size_t j = 0; j < n; j++)
        assert_int_equal(buf[j], (uint8_t)(21 * 31 + j));
    assert_int_equal(ptc_view_stat_path(v, "/datasets/toy/samples/1000", &st), PTC_E_NOTFOUND);
    assert_int_equal(ptc_view_stat_path(v, "/datasets/toy/samples/999", &st), PTC_OK);

    /* directories */
    const char *base = "/datasets/toy/seed-3/epoch-1/batch-64/start-0/dp-4";
    assert_int_equal(ptc_view_stat_path(v, base, &st), PTC_OK);
    assert_true(st.is_dir);
    l.n = 0;
    assert_int_equal(ptc_view_list(v, base, collect, &l), PTC_OK);
    assert_int_equal(l.n, 4);
    assert_string_equal(l.v[3], "rank-3");
    l.n = 0;
    assert_int_equal(ptc_view_list(v, "/datasets/toy/samples", collect, &l), PTC_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(ptc_view_stat_path(v, "/datasets/toy/seed-3/epoch-1/batch-64/start-1000", &st), PTC_OK);
    assert_int_equal(ptc_view_stat_path(v, "/datasets/toy/seed-3/epoch-1/batch-64/start-1001", &st), PTC_E_NOTFOUND);
    assert_int_equal(ptc_view_stat_path(v, "/datasets/toy/seed-3/epoch-1/batch-64/start-1000/dp-2/rank-1/step-0", &st), PTC_E_NOTFOUND);
    assert_int_equal(ptc_view_list(v, "/README.txt", collect, &l), PTC_E_INVAL);
    ptc_view_file *f = (ptc_view_file *)1;
    assert_int_equal(ptc_view_open(v, base, &f), PTC_E_INVAL);
    assert_null(f);

    for (int i = 0; i < MEM_N; i++)
        assert_int_equal(m->served[i], 0); /* samples are not counted */

    /* a step file is its records concatenated; .idx matches */
    char path[256];
    snprintf(path, sizeof path, "%s/rank-2/step-3", base);
    assert_int_equal(ptc_view_stat_path(v, path, &st), PTC_OK);
    ptc_view_dataset ds = mem_ds(m);
    ptc_view_step *s;
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){3, 1, 64, 0, 4, 2, 3, 0}, &s),
                     PTC_OK);
    assert_int_equal(s->n, 16);
    assert_int_equal(st.size, s->offsets[16]);
    n = read_all(v, path, buf, sizeof buf, 5);
    for (uint64_t i = 0; i < s->n; i++)
        for (uint64_t j = 0; j < rec_len(s->ids[i]); j++)
            assert_int_equal(buf[s->offsets[i] + j], (uint8_t)(s->ids[i] * 31 + j));
    snprintf(path, sizeof path, "%s/rank-2/step-3.idx", base);
    n = read_all(v, path, buf, sizeof buf, 13);
    assert_int_equal(n, 8 * 17);
    assert_memory_equal(buf, s->offsets, n); /* little-endian host */
    ptc_view_step_destroy(s);
    snprintf(path, sizeof path, "%s/rank-2/step-16", base);
    assert_int_equal(ptc_view_stat_path(v, path, &st), PTC_E_NOTFOUND);
    snprintf(path, sizeof path, "%s/rank-2/step-16.idx", base);
    assert_int_equal(ptc_view_open(v, path, &f), PTC_E_NOTFOUND);

    /* models route to the callbacks */
    assert_int_equal(ptc_view_stat_path(v, "/models/3/dp2-tp2-pp1/rank-3.safetensors", &st), PTC_OK);
    assert_int_equal(st.size, 100);
    n = read_all(v, "/models/3/dp2-tp2-pp1/rank-3.safetensors", buf, sizeof buf, 33);
    assert_int_equal(n, 100);
    assert_int_equal(buf[99], 'R');
    assert_int_equal(ptc_view_stat_path(v, "/models/4/info.json", &st), PTC_E_NOTFOUND);
    l.n = 0;
    assert_int_equal(ptc_view_list(v, "/models/3/dp2-tp2-pp2", collect, &l), PTC_OK);
    assert_int_equal(l.n, 8);
    assert_string_equal(l.v[7], "rank-7.safetensors");

    uint64_t sum = 0;
    for (int i = 0; i < MEM_N; i++)
        sum += m->served[i];
    assert_int_equal(sum, 16); /* the step file's records; not .idx, samples, stat */
    ptc_view_destroy(v);
    assert_int_equal(m->opens, 2);
    assert_int_equal(m->closes, 1); /* the view opened "toy" once; the test once more */
    free(m);

    /* a view without a backing has an empty tree */
    assert_int_equal(ptc_view_create(&v, NULL, NULL), PTC_OK);
    assert_int_equal(ptc_view_stat_path(v, "/datasets/toy", &st), PTC_E_NOTFOUND);
    assert_int_equal(ptc_view_stat_path(v, "/models/1", &st), PTC_E_NOTFOUND);
    assert_int_equal(ptc_view_stat_path(v, "/datasets", &st), PTC_OK);
    ptc_view_destroy(v);
    ptc_view_destroy(NULL);
}

/* Exactly once: dp=4 batch 64 for 5 steps, then dp=3 batch 48 from the next
 * position to the end, read in odd chunk sizes: every record is counted
 * once and the bytes served equal all records. */
static void test_exactly_once(void **state)
{
    (void)state;
    struct mem *m = mem_new();
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &mem_ops, m), PTC_OK);
    static uint8_t buf[1 << 16];
    uint64_t bytes = 0, want_bytes = 0;
    for (uint64_t i = 0; i < MEM_N; i++)
        want_bytes += rec_len(i);
    char path[256];
    size_t chunks[] = {1, 3, 4096, 7};
    for (uint64_t k = 0; k < 5; k++)
        for (int r = 0; r < 4; r++) {
            snprintf(path, sizeof path,
                     "/datasets/toy/seed-9/epoch-4/batch-64/start-0/dp-4/rank-%d/step-%llu", r,
                     (unsigned long long)k);
            bytes += read_all(v, path, buf, sizeof buf, chunks[(k + (uint64_t)r) % 4]);
        }
    for (uint64_t k = 0;; k++) {
        ptc_view_stat st;
        snprintf(path, sizeof path,
                 "/datasets/toy/seed-9/epoch-4/batch-48/start-320/dp-3/rank-0/step-%llu",
                 (unsigned long long)k);
        if (ptc_view_stat_path(v, path, &st) == PTC_E_NOTFOUND) {
            assert_int_equal(k, 15); /* ceil(680 / 48) */
            break;
        }
        for (int r = 0; r < 3; r++) {
            snprintf(path, sizeof path,
                     "/datasets/toy/seed-9/epoch-4/batch-48/start-320/dp-3/rank-%d/step-%llu", r,
                     (unsigned long long)k);
            bytes += read_all(v, path, buf, sizeof buf, chunks[(k + (uint64_t)r) % 4]);
        }
    }
    assert_int_equal(bytes, want_bytes);
    for (int i = 0; i < MEM_N; i++)
        assert_int_equal(m->served[i], 1);
    assert_int_equal(m->served_seed, 9);
    assert_int_equal(m->served_epoch, 4);

    /* reading only a prefix of a file counts only the records it completes */
    memset(m->served, 0, sizeof m->served);
    const char *p = "/datasets/toy/seed-1/epoch-0/batch-1000/start-0/dp-1/rank-0/step-0";
    ptc_view_file *f;
    assert_int_equal(ptc_view_open(v, p, &f), PTC_OK);
    size_t got;
    assert_int_equal(ptc_view_read(f, 0, buf, 100, &got), PTC_OK);
    assert_int_equal(got, 100);
    ptc_view_dataset ds = mem_ds(m);
    ptc_view_step *s;
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){1, 0, 1000, 0, 1, 0, 0, 0}, &s),
                     PTC_OK);
    uint64_t counted = 0, want = 0;
    for (uint64_t i = 0; i < s->n; i++) {
        uint64_t t = s->offsets[i + 1] ? s->offsets[i + 1] - 1 : 0;
        want += t < 100;
        counted += m->served[s->ids[i]];
        assert_int_equal(m->served[s->ids[i]], t < 100);
    }
    assert_int_equal(counted, want);
    ptc_view_step_destroy(s);
    ptc_view_close(f);

    /* an empty step file counts its (empty) records at open */
    memset(m->served, 0, sizeof m->served);
    /* find a position whose record is empty: id % 11 == 0 */
    ptc_order o;
    ptc_order_init(&o, MEM_N, 2, 2);
    uint64_t pos = 0, id = 1;
    for (; id % 11 != 0; pos++)
        ptc_order_sample(&o, pos, &id);
    pos--;
    snprintf(path, sizeof path, "/datasets/toy/seed-2/epoch-2/batch-1/start-%llu/dp-1/rank-0/step-0",
             (unsigned long long)pos);
    assert_int_equal(ptc_view_open(v, path, &f), PTC_OK);
    assert_int_equal(ptc_view_file_size(f), 0);
    assert_int_equal(m->served[id], 1);
    ptc_view_close(f);
    ptc_view_destroy(v);
    free(m);
}

/* Without opens (what the mount does when the kernel skips them): whole
 * epochs read through ptc_view_pread in odd chunks count every record once
 * and equal the opened reads byte for byte; ptc_view_lookup counts an empty
 * step file (ptc_view_stat_path does not); errors are those of open. */
/* Step K of rank R of the dp=3, batch 250 split that both read tests use. */
static void step_path(char *path, size_t cap, int r, uint64_t k)
{
    snprintf(path, cap, "/datasets/toy/seed-5/epoch-1/batch-250/start-0/dp-3/rank-%d/step-%llu",
             r, (unsigned long long)k);
}

static void test_no_open(void **state)
{
    (void)state;
    struct mem *m = mem_new();
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &mem_ops, m), PTC_OK);
    static uint8_t a[1 << 16], b[1 << 16];
    char path[256];
    size_t chunks[] = {1, 5, 4096, 13};
    uint64_t bytes = 0;
    for (uint64_t k = 0; k < 4; k++)
        for (int r = 0; r < 3; r++) {
            step_path(path, sizeof path, r, k);
            ptc_view_stat st;
            assert_int_equal(ptc_view_lookup(v, path, &st), PTC_OK);
            assert_false(st.is_dir);
            size_t total = 0, got, chunk = chunks[(k + (uint64_t)r) % 4];
            do {
                assert_int_equal(ptc_view_pread(v, path, total, a + total, chunk, &got), PTC_OK);
                total += got;
            } while (got > 0);
            assert_int_equal(total, st.size);
            bytes += total;
            /* the same bytes as an opened read (which counts them again) */
            assert_int_equal(read_all(v, path, b, sizeof b, 4096), total);
            assert_memory_equal(a, b, total);
        }
    uint64_t want_bytes = 0;
    for (uint64_t i = 0; i < MEM_N; i++) {
        want_bytes += rec_len(i);
        assert_int_equal(m->served[i], 2);
    }
    assert_int_equal(bytes, want_bytes);
    assert_int_equal(m->served_seed, 5);
    assert_int_equal(m->served_epoch, 1);

    /* .idx, samples/ and text files read without opens; nothing counted */
    memset(m->served, 0, sizeof m->served);
    size_t got;
    const char *p = "/datasets/toy/seed-5/epoch-1/batch-250/start-0/dp-3/rank-0/step-0.idx";
    assert_int_equal(ptc_view_pread(v, p, 0, a, sizeof a, &got), PTC_OK);
    assert_int_equal(read_all(v, p, b, sizeof b, 7), got);
    assert_memory_equal(a, b, got);
    assert_int_equal(ptc_view_pread(v, "/datasets/toy/samples/7", 2, a, 100, &got), PTC_OK);
    assert_int_equal(got, rec_len(7) - 2);
    assert_int_equal(a[0], (uint8_t)(7 * 31 + 2));
    assert_int_equal(ptc_view_pread(v, "/README.txt", 0, a, 9, &got), PTC_OK);
    assert_memory_equal(a, "PTC mount", 9);
    for (int i = 0; i < MEM_N; i++)
        assert_int_equal(m->served[i], 0);
    assert_int_equal(ptc_view_pread(v, "/datasets/toy/samples/999999", 0, a, 1, &got),
                     PTC_E_NOTFOUND);
    assert_int_equal(got, 0);
    assert_int_equal(ptc_view_pread(v, "/datasets/toy", 0, a, 1, &got), PTC_E_INVAL);

    /* an empty step file: counted by a lookup, not by a stat */
    ptc_order o;
    ptc_order_init(&o, MEM_N, 3, 7);
    uint64_t pos = 0, id = 1;
    for (; id % 11 != 0; pos++)
        ptc_order_sample(&o, pos, &id);
    pos--;
    snprintf(path, sizeof path, "/datasets/toy/seed-3/epoch-7/batch-1/start-%llu/dp-1/rank-0/step-0",
             (unsigned long long)pos);
    ptc_view_stat st;
    assert_int_equal(ptc_view_stat_path(v, path, &st), PTC_OK);
    assert_int_equal(st.size, 0);
    assert_int_equal(m->served[id], 0);
    assert_int_equal(ptc_view_lookup(v, path, &st), PTC_OK);
    assert_int_equal(st.size, 0);
    assert_int_equal(m->served[id], 1);
    /* looked up again (a dentry evicted and re-resolved) or opened: still once */
    assert_int_equal(ptc_view_lookup(v, path, &st), PTC_OK);
    ptc_view_file *ef;
    assert_int_equal(ptc_view_open(v, path, &ef), PTC_OK);
    ptc_view_close(ef);
    assert_int_equal(m->served[id], 1);
    assert_int_equal(ptc_view_lookup(v, "/datasets/toy/seed-3/epoch-7/batch-1/start-0/dp-1/rank-0/step-999999", &st),
                     PTC_E_NOTFOUND);
    assert_int_equal(ptc_view_lookup(v, "/datasets/toy/seed-3", &st), PTC_OK);
    assert_true(st.is_dir);
    ptc_view_destroy(v);
    free(m);
}

/* ---- reads in place -------------------------------------------------------------- */

/* The toy dataset again, its records laid out in one array: ids not
 * divisible by 3 are served in place from it, the others copied. */
static uint8_t held[MEM_N * 11];
static uint64_t held_at[MEM_N + 1];

/* The record pieces hinted (prefetch) and then fetched (map or read) by
 * the current read, in order; single-threaded tests only. */
struct piece {
    uint64_t id, off;
    size_t len;
};
static struct piece hinted[4096], fetched[4096];
static size_t nhinted, nfetched;

static void note(struct piece *list, size_t *n, uint64_t id, uint64_t off, size_t len)
{
    assert_true(*n < 4096);
    list[(*n)++] = (struct piece){id, off, len};
}

static int held_map(void *user, uint64_t id, uint64_t off, size_t len, const void **ptr)
{
    assert_true(len > 0);
    assert_true(off + len <= rec_len(id));
    (void)user;
    *ptr = id % 3 ? held + held_at[id] + off : NULL;
    if (*ptr)
        note(fetched, &nfetched, id, off, len);
    return PTC_OK;
}

static int held_read(void *user, uint64_t id, uint64_t off, void *buf, size_t len)
{
    note(fetched, &nfetched, id, off, len);
    return mem_read(user, id, off, buf, len);
}

static void held_prefetch(void *user, uint64_t id, uint64_t off, size_t len)
{
    (void)user;
    note(hinted, &nhinted, id, off, len);
}

static int held_open(void *user, const char *name, ptc_view_dataset *ds)
{
    PTC_TRY(mem_open(user, name, ds));
    ds->record_map = held_map;
    ds->record_read = held_read;
    ds->record_prefetch = held_prefetch;
    return PTC_OK;
}

/* Read [off, off + len) of @p path by pieces into @p out; the pieces that
 * lie in @p held are counted in *in_place. */
static size_t read_segs(ptc_view *v, const char *path, uint64_t off, size_t len, size_t room,
                        uint8_t *out, size_t *in_place)
{
    static uint8_t scratch[1 << 16];
    ptc_view_seg segs[256];
    size_t nseg = room, got, at = 0;
    assert_true(len <= sizeof scratch);
    int rc = ptc_view_pread_segs(v, path, off, len, scratch, segs, &nseg, &got);
    if (rc != PTC_OK)
        fail_msg("segs %s: %d %s", path, rc, ptc_last_error());
    assert_true(nseg <= room);
    for (size_t i = 0; i < nseg; i++) {
        const uint8_t *p = segs[i].ptr;
        bool in_held = p >= held && p + segs[i].len <= held + sizeof held;
        assert_true(in_held || (p >= scratch && p + segs[i].len <= scratch + sizeof scratch));
        *in_place += in_held;
        memcpy(out + at, p, segs[i].len);
        at += segs[i].len;
    }
    assert_int_equal(at, got);
    return got;
}

static void test_segs(void **state)
{
    (void)state;
    for (uint64_t i = 0; i < MEM_N; i++) {
        held_at[i + 1] = held_at[i] + rec_len(i);
        for (uint64_t j = 0; j < rec_len(i); j++)
            held[held_at[i] + j] = (uint8_t)(i * 31 + j);
    }
    struct mem *m = mem_new();
    ptc_view_ops ops = mem_ops;
    ops.dataset_open = held_open;
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &ops, m), PTC_OK);
    static uint8_t a[1 << 16], b[1 << 16];
    char path[256];
    size_t chunks[] = {1, 7, 100, 4096}, rooms[] = {2, 3, 5, 256};
    size_t in_place = 0;
    uint64_t bytes = 0;
    for (uint64_t k = 0; k < 4; k++)
        for (int r = 0; r < 3; r++) {
            step_path(path, sizeof path, r, k);
            size_t chunk = chunks[(k + (uint64_t)r) % 4], room = rooms[(k + 2 * (uint64_t)r) % 4];
            size_t total = 0, got;
            do {
                /* every piece a step read fetches was hinted first, in order */
                nhinted = nfetched = 0;
                got = read_segs(v, path, total, chunk, room, a + total, &in_place);
                assert_int_equal(nhinted, nfetched);
                assert_memory_equal(hinted, fetched, nhinted * sizeof *hinted);
                total += got;
            } while (got > 0);
            bytes += total;
            /* the same bytes as a copying read (which counts them again) */
            assert_int_equal(read_all(v, path, b, sizeof b, 4096), total);
            assert_memory_equal(a, b, total);
        }
    assert_true(in_place > 0);
    uint64_t want_bytes = 0;
    for (uint64_t i = 0; i < MEM_N; i++) {
        want_bytes += rec_len(i);
        assert_int_equal(m->served[i], 2);
    }
    assert_int_equal(bytes, want_bytes);

    /* samples/<ID> in place or copied; other files through the scratch */
    size_t got, before = in_place;
    got = read_segs(v, "/datasets/toy/samples/7", 2, 100, 2, a, &in_place);
    assert_int_equal(got, rec_len(7) - 2);
    assert_int_equal(a[0], (uint8_t)(7 * 31 + 2));
    assert_int_equal(in_place, before + 1);
    got = read_segs(v, "/datasets/toy/samples/9", 0, 100, 2, a, &in_place);
    assert_int_equal(got, rec_len(9));
    assert_int_equal(a[8], (uint8_t)(9 * 31 + 8));
    assert_int_equal(in_place, before + 1);
    got = read_segs(v, "/README.txt", 0, 9, 2, a, &in_place);
    assert_memory_equal(a, "PTC mount", 9);
    const char *p = "/datasets/toy/seed-5/epoch-1/batch-250/start-0/dp-3/rank-0/step-0.idx";
    got = read_segs(v, p, 0, sizeof a, 2, a, &in_place);
    assert_int_equal(read_all(v, p, b, sizeof b, 7), got);
    assert_memory_equal(a, b, got);
    assert_int_equal(in_place, before + 1);
    /* past the end: nothing; errors as ptc_view_pread */
    assert_int_equal(read_segs(v, "/datasets/toy/samples/7", 50, 10, 2, a, &in_place), 0);
    ptc_view_seg segs[2];
    size_t nseg = 1;
    assert_int_equal(ptc_view_pread_segs(v, "/README.txt", 0, 9, a, segs, &nseg, &got),
                     PTC_E_INVAL);
    nseg = 2;
    assert_int_equal(ptc_view_pread_segs(v, "/datasets/toy/samples/999999", 0, 1, a, segs,
                                         &nseg, &got),
                     PTC_E_NOTFOUND);
    assert_int_equal(nseg, 0);
    assert_int_equal(got, 0);
    ptc_view_destroy(v);
    free(m);
}

static struct piece later[4096];
static size_t nlater;

static void later_prefetch(void *user, uint64_t id, uint64_t off, size_t len)
{
    (void)user;
    note(later, &nlater, id, off, len);
}

static int later_open(void *user, const char *name, ptc_view_dataset *ds)
{
    PTC_TRY(held_open(user, name, ds));
    ds->record_prefetch_later = later_prefetch;
    return PTC_OK;
}

/* The first read of a step file hints the whole records of the next
 * PTC_VIEW_LOOKAHEAD step files of its directory, in order, with
 * record_prefetch_later (none past the epoch's last step); later reads of
 * the file hint nothing more. */
static void test_lookahead(void **state)
{
    (void)state;
    struct mem *m = mem_new();
    ptc_view_ops ops = mem_ops;
    ops.dataset_open = later_open;
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &ops, m), PTC_OK);
    static uint8_t buf[1 << 16];
    static struct piece got[4096];
    char path[256];
    /* batch 100 of 1000 records: steps 0..9, each of ranks 0..2 */
    for (uint64_t k = 0; k < 10; k++) {
        snprintf(path, sizeof path,
                 "/datasets/toy/seed-5/epoch-1/batch-100/start-0/dp-3/rank-1/step-%llu",
                 (unsigned long long)k);
        ptc_view_file *f;
        assert_int_equal(ptc_view_open(v, path, &f), PTC_OK);
        size_t n;
        nlater = 0;
        assert_int_equal(ptc_view_read(f, 0, buf, 10, &n), PTC_OK);
        size_t ngot = nlater;
        memcpy(got, later, ngot * sizeof *got);
        nlater = 0;
        assert_int_equal(ptc_view_read(f, 10, buf, sizeof buf, &n), PTC_OK);
        assert_int_equal(nlater, 0); /* not the file's first read */
        ptc_view_close(f);
        /* what the next steps' reads fetch, whole records */
        nfetched = 0;
        uint64_t last = k + PTC_VIEW_LOOKAHEAD < 9 ? k + PTC_VIEW_LOOKAHEAD : 9;
        for (uint64_t j = k + 1; j <= last; j++) {
            snprintf(path, sizeof path,
                     "/datasets/toy/seed-5/epoch-1/batch-100/start-0/dp-3/rank-1/step-%llu",
                     (unsigned long long)j);
            read_all(v, path, buf, sizeof buf, sizeof buf);
        }
        assert_int_equal(ngot, nfetched);
        assert_memory_equal(got, fetched, ngot * sizeof *got);
        assert_true(k == 9 ? ngot == 0 : ngot > 20 * (last - k));
        for (size_t i = 0; i < ngot; i++)
            assert_int_equal(got[i].len, rec_len(got[i].id));
    }
    ptc_view_destroy(v);
    free(m);
}

struct thread_arg {
    ptc_view *v;
    struct mem *m;
    int t;
    int bad;
    int reads[4][16];
};

static void *reader(void *p)
{
    struct thread_arg *a = p;
    uint8_t buf[4096];
    char path[256];
    ptc_view_dataset ds;
    mem_open(a->m, "toy", &ds);
    for (int it = 0; it < 200; it++) {
        /* threads 0-3 share files, 4-7 read their own rank */
        int r = a->t < 4 ? it % 4 : a->t - 4;
        int k = it % 15;
        snprintf(path, sizeof path,
                 "/datasets/toy/seed-5/epoch-0/batch-64/start-0/dp-4/rank-%d/step-%d", r, k);
        ptc_view_file *f;
        ptc_view_step *s;
        if (ptc_view_open(a->v, path, &f) != PTC_OK ||
            ptc_view_step_plan(&ds,
                               &(ptc_dataset_step){5, 0, 64, 0, 4, (uint64_t)r, (uint64_t)k, 0},
                               &s) != PTC_OK) {
            a->bad++;
            continue;
        }
        size_t got, total = 0, chunk = 1 + (size_t)(it % 37);
        while (ptc_view_read(f, total, buf + total, chunk, &got) == PTC_OK && got)
            total += got;
        if (total != ptc_view_file_size(f) || total != s->offsets[s->n])
            a->bad++;
        for (uint64_t i = 0; i < s->n; i++)
            for (uint64_t j = 0; j < rec_len(s->ids[i]); j++)
                if (buf[s->offsets[i] + j] != (uint8_t)(s->ids[i] * 31 + j))
                    a->bad++;
        a->reads[r][k]++;
        ptc_view_step_destroy(s);
        ptc_view_close(f);
    }
    return NULL;
}

/* 8 threads read the same and different step files at once: bytes are
 * right and every read file counts each of its records exactly once. */
static void test_threads(void **state)
{
    (void)state;
    struct mem *m = mem_new();
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &mem_ops, m), PTC_OK);
    pthread_t th[8];
    static struct thread_arg args[8];
    for (int t = 0; t < 8; t++) {
        memset(&args[t], 0, sizeof args[t]);
        args[t].v = v;
        args[t].m = m;
        args[t].t = t;
        assert_int_equal(pthread_create(&th[t], NULL, reader, &args[t]), 0);
    }
    int reads[4][16] = {{0}};
    for (int t = 0; t < 8; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(args[t].bad, 0);
        for (int r = 0; r < 4; r++)
            for (int k = 0; k < 16; k++)
                reads[r][k] += args[t].reads[r][k];
    }
    ptc_view_dataset ds = mem_ds(m);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 16; k++) {
            ptc_view_step *s;
            assert_int_equal(
                ptc_view_step_plan(
                    &ds, &(ptc_dataset_step){5, 0, 64, 0, 4, (uint64_t)r, (uint64_t)k, 0}, &s),
                PTC_OK);
            for (uint64_t i = 0; i < s->n; i++)
                assert_int_equal(m->served[s->ids[i]], (uint32_t)reads[r][k]);
            ptc_view_step_destroy(s);
        }
    ptc_view_destroy(v);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_good),  cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_step_plan),   cmocka_unit_test(test_step_find),
        cmocka_unit_test(test_view_tree),   cmocka_unit_test(test_exactly_once),
        cmocka_unit_test(test_threads),     cmocka_unit_test(test_no_open),
        cmocka_unit_test(test_segs),
        cmocka_unit_test(test_lookahead),        cmocka_unit_test(test_policy_tree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
