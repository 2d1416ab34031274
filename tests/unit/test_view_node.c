/* Resolved nodes (ptc_view_node_*): a handle reads the same bytes and
 * counts the same served records as ptc_view_pread / ptc_view_pread_segs on
 * its path — step files, .idx, samples, text and model files, over an
 * in-memory dataset and over a real store — holds what it resolved until
 * its last release, and keeps reading the generation the view opened when
 * a dataset is replaced, as path reads do. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fault_testing.h"
#include "fuse/view_internal.h"
#include "ptc/dataset.h"
#include "ptc/store.h"
#include "ptc/view.h"

/* ---- an in-memory dataset: record i has length i % 11 (so some are empty),
 * byte j of record i is (i * 31 + j) & 0xff; records whose id is not a
 * multiple of 3 are also held in one array (served in place) ----------------- */

#define MEM_N 1000

struct mem {
    pthread_mutex_t lock;
    uint32_t served[MEM_N];
    int model_opens, model_closes;
};

static uint8_t held[MEM_N * 11];
static uint64_t held_at[MEM_N + 1];

static uint64_t rec_len(uint64_t id)
{
    return id % 11;
}

static int mem_size(void *user, uint64_t id, uint64_t *size)
{
    (void)user;
    if (id >= MEM_N)
        return ptc_error_set(PTC_E_RANGE, "bad id");
    *size = rec_len(id);
    return PTC_OK;
}

static int mem_read(void *user, uint64_t id, uint64_t off, void *buf, size_t len)
{
    (void)user;
    if (id >= MEM_N || off + len > rec_len(id))
        return ptc_error_set(PTC_E_RANGE, "read outside record %llu", (unsigned long long)id);
    for (size_t j = 0; j < len; j++)
        ((uint8_t *)buf)[j] = (uint8_t)(id * 31 + off + j);
    return PTC_OK;
}

static int mem_map(void *user, uint64_t id, uint64_t off, size_t len, const void **ptr)
{
    (void)user;
    assert_true(len > 0 && off + len <= rec_len(id));
    *ptr = id % 3 ? held + held_at[id] + off : NULL;
    return PTC_OK;
}

static int mem_open(void *user, const char *name, ptc_view_dataset *ds)
{
    bool mapped = strcmp(name, "held") == 0;
    if (strcmp(name, "toy") != 0 && !mapped)
        return ptc_error_set(PTC_E_NOTFOUND, "no dataset %s", name);
    memset(ds, 0, sizeof *ds);
    ds->n = MEM_N;
    ds->user = user;
    ds->record_size = mem_size;
    ds->record_read = mem_read;
    ds->record_map = mapped ? mem_map : NULL;
    return PTC_OK;
}

static void mem_close(void *user, ptc_view_dataset *ds)
{
    (void)user;
    (void)ds;
}

static void mem_served(void *user, const char *name, uint64_t generation, uint64_t seed,
                       uint64_t epoch, uint64_t id)
{
    struct mem *m = user;
    (void)name;
    (void)generation;
    (void)seed;
    (void)epoch;
    pthread_mutex_lock(&m->lock);
    m->served[id]++;
    pthread_mutex_unlock(&m->lock);
}

/* models: version 3 exists; a file is 100 bytes of 'R' (rank files) or 'M' */
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
    struct mem *m = user;
    pthread_mutex_lock(&m->lock);
    m->model_opens++;
    pthread_mutex_unlock(&m->lock);
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
    struct mem *m = user;
    (void)fh;
    pthread_mutex_lock(&m->lock);
    m->model_closes++;
    pthread_mutex_unlock(&m->lock);
}

static const ptc_view_ops mem_ops = {
    .dataset_open = mem_open,
    .dataset_close = mem_close,
    .served = mem_served,
    .model_stat = model_stat,
    .model_open = model_open,
    .model_read = model_read,
    .model_close = model_close,
};

static struct mem *mem_new(ptc_view **v)
{
    for (uint64_t i = 0; i < MEM_N; i++) {
        held_at[i + 1] = held_at[i] + rec_len(i);
        for (uint64_t j = 0; j < rec_len(i); j++)
            held[held_at[i] + j] = (uint8_t)(i * 31 + j);
    }
    struct mem *m = calloc(1, sizeof *m);
    assert_non_null(m);
    pthread_mutex_init(&m->lock, NULL);
    assert_int_equal(ptc_view_create(v, &mem_ops, m), PTC_OK);
    return m;
}

static void mem_free(ptc_view *v, struct mem *m)
{
    ptc_view_destroy(v);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static ptc_view_handle *resolve(ptc_view *v, const char *path)
{
    ptc_view_handle *h = NULL;
    int rc = ptc_view_node_resolve(v, path, &h);
    if (rc != PTC_OK)
        fail_msg("resolve %s: %d %s", path, rc, ptc_last_error());
    assert_non_null(h);
    return h;
}

/* The whole file in chunks of @p chunk: through @p h, or the path when
 * @p h is NULL. */
static size_t read_chunks(ptc_view *v, const char *path, ptc_view_handle *h, uint8_t *buf,
                          size_t cap, size_t chunk)
{
    size_t total = 0, got;
    do {
        assert_true(total + chunk <= cap);
        int rc = h ? ptc_view_node_pread(h, total, buf + total, chunk, &got)
                   : ptc_view_pread(v, path, total, buf + total, chunk, &got);
        assert_int_equal(rc, PTC_OK);
        total += got;
    } while (got > 0);
    return total;
}

static void step_path(char *path, size_t cap, const char *ds, int r, uint64_t k)
{
    snprintf(path, cap, "/datasets/%s/seed-5/epoch-1/batch-250/start-0/dp-3/rank-%d/step-%llu",
             ds, r, (unsigned long long)k);
}

/* Every step file of an epoch through a handle and through its path, in
 * odd chunks: the same bytes, and the same records counted (once each per
 * pass); partial reads count the same records. .idx: the same bytes. */
static void test_step_files(void **state)
{
    (void)state;
    ptc_view *v;
    struct mem *m = mem_new(&v);
    static uint8_t a[1 << 16], b[1 << 16];
    static uint32_t by_path[MEM_N];
    char path[256], idx[300];
    size_t chunks[] = {1, 5, 4096, 13};
    for (int pass = 0; pass < 2; pass++) {
        memset(m->served, 0, sizeof m->served);
        for (uint64_t k = 0; k < 4; k++)
            for (int r = 0; r < 3; r++) {
                step_path(path, sizeof path, "toy", r, k);
                size_t chunk = chunks[(k + (uint64_t)r) % 4];
                ptc_view_handle *h = pass ? resolve(v, path) : NULL;
                size_t n = read_chunks(v, path, h, pass ? a : b, sizeof a, chunk);
                ptc_view_stat st, pst;
                assert_int_equal(ptc_view_stat_path(v, path, &pst), PTC_OK);
                assert_int_equal(n, pst.size);
                if (h) {
                    ptc_view_node_stat(h, &st);
                    assert_false(st.is_dir);
                    assert_int_equal(st.size, pst.size);
                    assert_int_equal(ptc_view_node_kind(h), PTC_VIEW_STEP);
                    /* the path's bytes, read again without counting */
                    uint32_t keep[MEM_N];
                    memcpy(keep, m->served, sizeof keep);
                    assert_int_equal(read_chunks(v, path, NULL, b, sizeof b, 4096), n);
                    memcpy(m->served, keep, sizeof keep);
                    assert_memory_equal(a, b, n);
                    ptc_view_node_release(h);
                }
                snprintf(idx, sizeof idx, "%s.idx", path);
                ptc_view_handle *hi = resolve(v, idx);
                size_t ni = read_chunks(v, idx, hi, a, sizeof a, 7);
                assert_int_equal(read_chunks(v, idx, NULL, b, sizeof b, 4096), ni);
                assert_memory_equal(a, b, ni);
                assert_int_equal(ni, 8 * (ni / 8));
                ptc_view_node_release(hi);
            }
        if (pass == 0)
            memcpy(by_path, m->served, sizeof by_path);
    }
    for (int i = 0; i < MEM_N; i++)
        assert_int_equal(m->served[i], 1);
    assert_memory_equal(m->served, by_path, sizeof by_path);

    /* a prefix of a file counts the records it completes, by either way */
    const char *p = "/datasets/toy/seed-1/epoch-0/batch-1000/start-0/dp-1/rank-0/step-0";
    ptc_view_handle *h = resolve(v, p);
    size_t got;
    for (uint64_t end = 1; end < 300; end += 37) {
        memset(m->served, 0, sizeof m->served);
        assert_int_equal(ptc_view_pread(v, p, end / 2, b, (size_t)(end - end / 2), &got), PTC_OK);
        memcpy(by_path, m->served, sizeof by_path);
        memset(m->served, 0, sizeof m->served);
        assert_int_equal(ptc_view_node_pread(h, end / 2, a, (size_t)(end - end / 2), &got),
                         PTC_OK);
        assert_memory_equal(a, b, got);
        assert_memory_equal(m->served, by_path, sizeof by_path);
    }
    /* past the end: nothing, nothing counted */
    memset(m->served, 0, sizeof m->served);
    ptc_view_stat st;
    ptc_view_node_stat(h, &st);
    assert_int_equal(ptc_view_node_pread(h, st.size, a, 10, &got), PTC_OK);
    assert_int_equal(got, 0);
    assert_int_equal(ptc_view_node_pread(h, 0, a, 0, &got), PTC_OK);
    assert_int_equal(got, 0);
    for (int i = 0; i < MEM_N; i++)
        assert_int_equal(m->served[i], 0);
    ptc_view_node_release(h);
    mem_free(v, m);
}

/* Pieces: ptc_view_node_pread_segs lists exactly what ptc_view_pread_segs
 * lists (the same pointers into the dataset's memory, the same lengths),
 * for every room from the minimum up, and counts the same. */
static void test_segs(void **state)
{
    (void)state;
    ptc_view *v;
    struct mem *m = mem_new(&v);
    static uint8_t sa[1 << 16], sb[1 << 16];
    ptc_view_seg ga[256], gb[256];
    char path[256];
    size_t chunks[] = {1, 7, 100, 4096}, rooms[] = {2, 3, 5, 256};
    size_t in_place = 0;
    for (uint64_t k = 0; k < 4; k++)
        for (int r = 0; r < 3; r++) {
            step_path(path, sizeof path, "held", r, k);
            ptc_view_handle *h = resolve(v, path);
            ptc_view_stat st;
            ptc_view_node_stat(h, &st);
            size_t chunk = chunks[(k + (uint64_t)r) % 4], room = rooms[(k + 2 * (uint64_t)r) % 4];
            for (uint64_t off = 0; off < st.size; off += chunk) {
                size_t na = room, nb = room, gota, gotb;
                memset(m->served, 0, sizeof m->served);
                assert_int_equal(ptc_view_pread_segs(v, path, off, chunk, sb, gb, &nb, &gotb),
                                 PTC_OK);
                uint32_t by_path[MEM_N];
                memcpy(by_path, m->served, sizeof by_path);
                memset(m->served, 0, sizeof m->served);
                assert_int_equal(ptc_view_node_pread_segs(h, off, chunk, sa, ga, &na, &gota),
                                 PTC_OK);
                assert_memory_equal(m->served, by_path, sizeof by_path);
                assert_int_equal(gota, gotb);
                assert_int_equal(na, nb);
                assert_true(na <= room);
                for (size_t i = 0; i < na; i++) {
                    assert_int_equal(ga[i].len, gb[i].len);
                    const uint8_t *pa = ga[i].ptr, *pb = gb[i].ptr;
                    bool held_a = pa >= held && pa < held + sizeof held;
                    assert_int_equal(held_a, pb >= held && pb < held + sizeof held);
                    if (held_a) {
                        assert_ptr_equal(pa, pb);
                        in_place++;
                    } else { /* from the scratch, at the same place */
                        assert_int_equal(pa - sa, pb - sb);
                        assert_memory_equal(pa, pb, ga[i].len);
                    }
                }
            }
            ptc_view_node_release(h);
        }
    assert_true(in_place > 0);

    /* samples in place or copied, text through the scratch; too little room */
    memset(m->served, 0, sizeof m->served);
    ptc_view_handle *h = resolve(v, "/datasets/held/samples/7");
    size_t n = 2, got;
    assert_int_equal(ptc_view_node_pread_segs(h, 2, 100, sa, ga, &n, &got), PTC_OK);
    assert_int_equal(got, rec_len(7) - 2);
    assert_int_equal(n, 1);
    assert_ptr_equal(ga[0].ptr, held + held_at[7] + 2);
    n = 1;
    assert_int_equal(ptc_view_node_pread_segs(h, 0, 100, sa, ga, &n, &got), PTC_E_INVAL);
    assert_int_equal(got, 0);
    ptc_view_node_release(h);
    h = resolve(v, "/datasets/held/samples/9");
    n = 2;
    assert_int_equal(ptc_view_node_pread_segs(h, 0, 100, sa, ga, &n, &got), PTC_OK);
    assert_int_equal(n, 1);
    assert_ptr_equal(ga[0].ptr, sa);
    assert_int_equal(sa[8], (uint8_t)(9 * 31 + 8));
    ptc_view_node_release(h);
    h = resolve(v, "/README.txt");
    n = 2;
    assert_int_equal(ptc_view_node_pread_segs(h, 0, 9, sa, ga, &n, &got), PTC_OK);
    assert_int_equal(n, 1);
    assert_memory_equal(ga[0].ptr, "PTC mount", 9);
    ptc_view_node_release(h);
    for (int i = 0; i < MEM_N; i++)
        assert_int_equal(m->served[i], 0);
    mem_free(v, m);
}

/* Samples, text and model files: the bytes of the path; nothing counted;
 * directories resolve and are not readable. */
static void test_other_files(void **state)
{
    (void)state;
    ptc_view *v;
    struct mem *m = mem_new(&v);
    static uint8_t a[8192], b[8192];
    static const char *const files[] = {
        "/README.txt",
        "/datasets/toy/info.json",
        "/datasets/toy/samples/0",
        "/datasets/toy/samples/21",
        "/datasets/toy/samples/999",
        "/models/3/info.json",
        "/models/3/model.safetensors",
        "/models/3/dp2-tp2-pp1/rank-3.safetensors",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        ptc_view_handle *h = resolve(v, files[i]);
        ptc_view_stat st, pst;
        ptc_view_node_stat(h, &st);
        assert_int_equal(ptc_view_stat_path(v, files[i], &pst), PTC_OK);
        assert_false(st.is_dir);
        assert_int_equal(st.size, pst.size);
        size_t na = read_chunks(v, files[i], h, a, sizeof a, 3);
        size_t nb = read_chunks(v, files[i], NULL, b, sizeof b, 3);
        assert_int_equal(na, st.size);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        ptc_view_node_release(h);
    }
    assert_memory_equal(a, "RRRR", 4);
    for (int i = 0; i < MEM_N; i++)
        assert_int_equal(m->served[i], 0);

    static const char *const dirs[] = {"/", "/models", "/models/3", "/models/3/dp2-tp2-pp1",
                                       "/datasets", "/datasets/toy", "/datasets/toy/samples",
                                       "/datasets/toy/seed-1/epoch-2/batch-3/start-4/dp-5"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        ptc_view_handle *h = resolve(v, dirs[i]);
        ptc_view_stat st;
        ptc_view_node_stat(h, &st);
        assert_true(st.is_dir);
        size_t got = 1, n = 2;
        ptc_view_seg segs[2];
        assert_int_equal(ptc_view_node_pread(h, 0, a, 10, &got), PTC_E_INVAL);
        assert_int_equal(got, 0);
        assert_int_equal(ptc_view_node_pread_segs(h, 0, 10, a, segs, &n, &got), PTC_E_INVAL);
        assert_int_equal(n, 0);
        ptc_view_node_release(h);
    }
    mem_free(v, m);
}

/* A handle holds what it resolved until its last release: the model file
 * stays open, the step plan outlives the view's plan cache. Failures leave
 * *out NULL; an empty step file counts once per view, by resolve, lookup
 * or open, whichever comes first. */
static void test_refcount(void **state)
{
    (void)state;
    ptc_view *v;
    struct mem *m = mem_new(&v);
    uint8_t buf[4096];
    size_t got;

    ptc_view_handle *h = resolve(v, "/models/3/dp1-tp1-pp2/rank-1.safetensors");
    assert_int_equal(m->model_opens, 1);
    assert_ptr_equal(ptc_view_node_retain(h), h);
    assert_ptr_equal(ptc_view_node_retain(h), h);
    ptc_view_node_release(h);
    ptc_view_node_release(h);
    assert_int_equal(m->model_closes, 0);
    assert_int_equal(ptc_view_node_pread(h, 90, buf, 100, &got), PTC_OK);
    assert_int_equal(got, 10);
    assert_int_equal(buf[9], 'R');
    assert_int_equal(m->model_opens, 1); /* reads open nothing */
    ptc_view_node_release(h);
    assert_int_equal(m->model_closes, 1);
    ptc_view_node_release(NULL);

    /* a step plan outlives the view's cache of 64 plans */
    const char *p = "/datasets/toy/seed-2/epoch-0/batch-100/start-0/dp-2/rank-1/step-3";
    h = resolve(v, p);
    char path[256];
    for (int k = 0; k < 200; k++) {
        ptc_view_stat st;
        snprintf(path, sizeof path, "/datasets/toy/seed-%d/epoch-0/batch-10/start-0/dp-1/rank-0/step-0", 100 + k);
        assert_int_equal(ptc_view_stat_path(v, path, &st), PTC_OK);
    }
    ptc_view_dataset ds;
    assert_int_equal(mem_open(m, "toy", &ds), PTC_OK);
    ptc_view_step *s;
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){2, 0, 100, 0, 2, 1, 3, 0}, &s),
                     PTC_OK);
    size_t n = read_chunks(v, NULL, h, buf, sizeof buf, 64);
    assert_int_equal(n, s->offsets[s->n]);
    for (uint64_t i = 0; i < s->n; i++)
        for (uint64_t j = 0; j < rec_len(s->ids[i]); j++)
            assert_int_equal(buf[s->offsets[i] + j], (uint8_t)(s->ids[i] * 31 + j));
    ptc_view_step_destroy(s);
    ptc_view_node_release(h);

    /* failures */
    h = (ptc_view_handle *)1;
    assert_int_equal(ptc_view_node_resolve(v, "/datasets/toy/samples/1000", &h), PTC_E_NOTFOUND);
    assert_null(h);
    h = (ptc_view_handle *)1;
    assert_int_equal(ptc_view_node_resolve(v, "/datasets/nope/info.json", &h), PTC_E_NOTFOUND);
    assert_null(h);
    h = (ptc_view_handle *)1;
    assert_int_equal(ptc_view_node_resolve(v, "/datasets/toy/samples/99999999999999999999", &h),
                     PTC_E_RANGE);
    assert_null(h);
    h = (ptc_view_handle *)1;
    assert_int_equal(ptc_view_node_resolve(v, "/models/4/info.json", &h), PTC_E_NOTFOUND);
    assert_null(h);
    h = (ptc_view_handle *)1;
    assert_int_equal(ptc_view_node_resolve(v, "relative", &h), PTC_E_NOTFOUND);
    assert_null(h);
    h = (ptc_view_handle *)1;
    ptc_fault_alloc_at(1); /* the handle */
    int rc = ptc_view_node_resolve(v, "/datasets/toy/samples/1", &h);
    ptc_fault_alloc_at(0);
    assert_int_equal(rc, PTC_E_NOMEM);
    assert_null(h);
    assert_int_equal(m->model_opens, m->model_closes);

    /* an empty step file: counted by the first of resolve, lookup, open */
    memset(m->served, 0, sizeof m->served);
    ptc_order o;
    ptc_order_init(&o, MEM_N, 3, 7);
    uint64_t pos = 0, id = 1;
    for (; id % 11 != 0; pos++)
        ptc_order_sample(&o, pos, &id);
    pos--;
    snprintf(path, sizeof path,
             "/datasets/toy/seed-3/epoch-7/batch-1/start-%llu/dp-1/rank-0/step-0",
             (unsigned long long)pos);
    h = resolve(v, path);
    ptc_view_stat st;
    ptc_view_node_stat(h, &st);
    assert_int_equal(st.size, 0);
    assert_int_equal(m->served[id], 1);
    ptc_view_handle *h2 = resolve(v, path);
    assert_int_equal(ptc_view_lookup(v, path, &st), PTC_OK);
    ptc_view_file *f;
    assert_int_equal(ptc_view_open(v, path, &f), PTC_OK);
    ptc_view_close(f);
    assert_int_equal(ptc_view_node_pread(h2, 0, buf, 10, &got), PTC_OK);
    assert_int_equal(got, 0);
    assert_int_equal(m->served[id], 1);
    ptc_view_node_release(h);
    ptc_view_node_release(h2);
    mem_free(v, m);
}

struct reader_arg {
    ptc_view_handle *h;
    const ptc_view_step *s;
    int bad;
};

static void *reader(void *p)
{
    struct reader_arg *a = p;
    uint8_t buf[4096];
    for (int it = 0; it < 50; it++) {
        size_t got, total = 0, chunk = 1 + (size_t)(it % 37);
        if (it % 10 == 0) /* references taken and dropped while others read */
            ptc_view_node_retain(a->h);
        while (ptc_view_node_pread(a->h, total, buf + total, chunk, &got) == PTC_OK && got)
            total += got;
        if (it % 10 == 0)
            ptc_view_node_release(a->h);
        if (total != a->s->offsets[a->s->n])
            a->bad++;
        for (uint64_t i = 0; i < a->s->n; i++)
            for (uint64_t j = 0; j < rec_len(a->s->ids[i]); j++)
                if (buf[a->s->offsets[i] + j] != (uint8_t)(a->s->ids[i] * 31 + j))
                    a->bad++;
    }
    return NULL;
}

/* 8 threads read one handle at once: right bytes, every record of the file
 * counted once per full read. */
static void test_threads(void **state)
{
    (void)state;
    ptc_view *v;
    struct mem *m = mem_new(&v);
    const char *p = "/datasets/toy/seed-5/epoch-0/batch-64/start-0/dp-2/rank-1/step-4";
    ptc_view_handle *h = resolve(v, p);
    ptc_view_dataset ds;
    assert_int_equal(mem_open(m, "toy", &ds), PTC_OK);
    ptc_view_step *s;
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){5, 0, 64, 0, 2, 1, 4, 0}, &s),
                     PTC_OK);
    pthread_t th[8];
    struct reader_arg args[8];
    for (int t = 0; t < 8; t++) {
        args[t] = (struct reader_arg){h, s, 0};
        assert_int_equal(pthread_create(&th[t], NULL, reader, &args[t]), 0);
    }
    for (int t = 0; t < 8; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(args[t].bad, 0);
    }
    for (uint64_t i = 0; i < s->n; i++)
        assert_int_equal(m->served[s->ids[i]], 8 * 50);
    uint64_t sum = 0;
    for (int i = 0; i < MEM_N; i++)
        sum += m->served[i];
    assert_int_equal(sum, 8 * 50 * s->n);
    ptc_view_step_destroy(s);
    ptc_view_node_release(h);
    mem_free(v, m);
}

/* ---- over a real store ------------------------------------------------------------- */

static char tmp[256];

static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0)
        fail_msg("failed: %s", cmd);
}

static size_t slurp(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static ptc_dataset_audit_result audit(ptc_store *s, const char *name, uint64_t gen,
                                      uint64_t samples)
{
    ptc_dataset_audit_result a;
    assert_int_equal(ptc_dataset_audit_counts(s, name, gen, 4, 0, samples, &a), PTC_OK);
    return a;
}

/* A store with a model (llama-tiny at tp=2) and a 100-line dataset: model
 * rank files of other layouts, whole models, samples, step files and .idx
 * read the same through handles and paths (pieces: the same pointers into
 * the pack mapping), served counts reach the store alike; a dataset
 * replaced while the view holds it is read and counted as the generation
 * the view opened, through old handles, new handles and paths alike. */
static void test_store(void **state)
{
    (void)state;
    const char *ptc = getenv("PTC");
    if (!ptc)
        skip();
    snprintf(tmp, sizeof tmp, "/tmp/ptc-view-node.XXXXXX");
    assert_non_null(mkdtemp(tmp));
    sh("'%s' synth --preset llama-tiny --seed 3 --out %s/m.safetensors", ptc, tmp);
    sh("'%s' import --store %s/s --config tp=2 --rules llama %s/m.safetensors >/dev/null", ptc,
       tmp, tmp);
    sh("seq 1 100 | sed 's/^/line /' >%s/a.txt && seq 1 60 | sed 's/^/new /' >%s/b.txt", tmp,
       tmp);
    sh("'%s' dataset ingest --store %s/s --name text --format lines %s/a.txt >/dev/null", ptc,
       tmp, tmp);
    sh("'%s' export --store %s/s --config dp=1,tp=1,pp=2 --out-dir %s/exp", ptc, tmp, tmp);

    char dir[300];
    snprintf(dir, sizeof dir, "%s/s", tmp);
    ptc_store *store;
    assert_int_equal(ptc_store_open(&store, dir, 0), PTC_OK);
    ptc_store_dataset *sd;
    assert_int_equal(ptc_store_dataset_open(&sd, store, "text"), PTC_OK);
    uint64_t gen1 = ptc_store_dataset_get_info(sd)->id;
    ptc_store_dataset_close(sd);
    ptc_view_store *vs;
    assert_int_equal(ptc_view_store_create(&vs, NULL, NULL), PTC_OK);
    assert_int_equal(ptc_view_store_attach(vs, store, true), PTC_OK);
    ptc_view *v = ptc_view_store_view(vs);

    static uint8_t a[1 << 20], b[1 << 20], want[1 << 20];
    static const char *const files[] = {
        "/models/1/info.json",
        "/models/1/model.safetensors",
        "/models/1/dp1-tp2-pp1/rank-1.safetensors",
        "/models/1/dp1-tp1-pp2/rank-1.safetensors",
        "/datasets/text/info.json",
        "/datasets/text/samples/0",
        "/datasets/text/samples/99",
        "/datasets/text/seed-4/epoch-0/batch-100/start-0/dp-2/rank-1/step-0.idx",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        ptc_view_handle *h = resolve(v, files[i]);
        size_t na = read_chunks(v, files[i], h, a, sizeof a, 65536);
        size_t nb = read_chunks(v, files[i], NULL, b, sizeof b, 65536);
        assert_true(na > 0);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        if (strstr(files[i], "dp1-tp1-pp2")) { /* as `ptc export --config` writes it */
            char p[300];
            snprintf(p, sizeof p, "%s/exp/rank-1.safetensors", tmp);
            assert_int_equal(slurp(p, want, sizeof want), na);
            assert_memory_equal(a, want, na);
        }
        ptc_view_node_release(h);
    }

    /* one epoch in one step: rank 0 through a handle (pieces), rank 1
     * through its path; every record once */
    const char *r0 = "/datasets/text/seed-4/epoch-0/batch-100/start-0/dp-2/rank-0/step-0";
    const char *r1 = "/datasets/text/seed-4/epoch-0/batch-100/start-0/dp-2/rank-1/step-0";
    ptc_view_handle *h0 = resolve(v, r0);
    ptc_view_stat st;
    ptc_view_node_stat(h0, &st);
    ptc_view_seg ga[256], gb[256];
    size_t na = 256, nb = 256, got, gotb;
    assert_int_equal(ptc_view_node_pread_segs(h0, 0, st.size, a, ga, &na, &got), PTC_OK);
    assert_int_equal(got, st.size);
    assert_int_equal(ptc_view_pread_segs(v, r0, 0, st.size, b, gb, &nb, &gotb), PTC_OK);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        assert_ptr_equal(ga[i].ptr, gb[i].ptr); /* the pack mapping */
        assert_int_equal(ga[i].len, gb[i].len);
    }
    size_t n1 = read_chunks(v, r1, NULL, b, sizeof b, 100);
    assert_true(n1 > 0);
    assert_int_equal(ptc_view_store_flush(vs), PTC_OK);
    ptc_dataset_audit_result au = audit(store, "text", gen1, 100);
    assert_int_equal(au.once, 50);
    assert_int_equal(au.repeated, 50); /* rank 0 read twice: handle, then path */
    assert_int_equal(au.missing, 0);
    size_t n0 = read_chunks(v, r0, h0, want, sizeof want, 4096);
    assert_int_equal(n0, st.size);

    /* the dataset replaced while the view holds it */
    ptc_view_handle *hs = resolve(v, "/datasets/text/samples/80");
    sh("'%s' dataset ingest --store %s/s --name text --format lines --replace %s/b.txt >/dev/null",
       ptc, tmp, tmp);
    assert_int_equal(ptc_store_dataset_open(&sd, store, "text"), PTC_OK);
    uint64_t gen2 = ptc_store_dataset_get_info(sd)->id;
    assert_int_equal(ptc_store_dataset_get_info(sd)->samples, 60);
    ptc_store_dataset_close(sd);
    assert_true(gen2 != gen1);
    /* old handle, new handle, path: the generation the view opened */
    size_t k = read_chunks(v, NULL, hs, a, sizeof a, 100);
    assert_int_equal(k, strlen("line 81"));
    assert_memory_equal(a, "line 81", k);
    assert_int_equal(ptc_view_pread(v, "/datasets/text/samples/80", 0, b, 100, &got), PTC_OK);
    assert_int_equal(got, k);
    assert_memory_equal(b, "line 81", k);
    ptc_view_node_release(hs);
    hs = resolve(v, "/datasets/text/samples/80");
    assert_int_equal(read_chunks(v, NULL, hs, a, sizeof a, 100), k);
    assert_memory_equal(a, "line 81", k);
    ptc_view_node_release(hs);
    assert_int_equal(read_chunks(v, NULL, h0, a, sizeof a, 4096), n0);
    assert_memory_equal(a, want, n0);
    ptc_view_handle *h1 = resolve(v, r1);
    assert_int_equal(read_chunks(v, NULL, h1, a, sizeof a, 4096), n1);
    assert_int_equal(read_chunks(v, r1, NULL, b, sizeof b, 4096), n1);
    assert_memory_equal(a, b, n1);
    ptc_view_node_release(h1);
    ptc_view_node_release(h0);
    assert_int_equal(ptc_view_store_flush(vs), PTC_OK);
    au = audit(store, "text", gen1, 100);
    assert_int_equal(au.once, 0);
    assert_int_equal(au.repeated, 100); /* counted where the reads came from */
    au = audit(store, "text", gen2, 60);
    assert_int_equal(au.missing, 60); /* the new generation: nothing */
    ptc_view_store_destroy(vs);

    /* a new view sees the new generation */
    assert_int_equal(ptc_view_store_create(&vs, NULL, NULL), PTC_OK);
    assert_int_equal(ptc_view_store_attach(vs, store, false), PTC_OK);
    v = ptc_view_store_view(vs);
    hs = resolve(v, "/datasets/text/samples/40");
    assert_int_equal(read_chunks(v, NULL, hs, a, sizeof a, 100), strlen("new 41"));
    assert_memory_equal(a, "new 41", strlen("new 41"));
    ptc_view_node_release(hs);
    hs = (ptc_view_handle *)1;
    assert_int_equal(ptc_view_node_resolve(v, "/datasets/text/samples/80", &hs), PTC_E_NOTFOUND);
    assert_null(hs);
    ptc_view_store_destroy(vs);
    ptc_store_close(store);
    sh("rm -rf '%s'", tmp);
}

/* ptc_view_store_options.source (what ptc mount --across-hosts uses): the
 * model files of a version are read from the store and version the source
 * names, its info.json is the view's own record of it with the tensors read;
 * a source's error is the read's. */
static ptc_store *src_store;
static int src_calls;
static int source_other(void *user, ptc_store *store, uint64_t version, ptc_store **from,
                        uint64_t *as)
{
    (void)user;
    (void)store;
    src_calls++;
    if (version == 2)
        return ptc_error_set(PTC_E_IO, "no copy of version 2");
    *from = src_store;
    *as = 2;
    return PTC_OK;
}

static void test_store_source(void **state)
{
    (void)state;
    const char *ptc = getenv("PTC");
    if (!ptc)
        skip();
    char td[64], dir[300], dir2[300], p[300];
    snprintf(td, sizeof td, "/tmp/ptc-view-source.XXXXXX");
    assert_non_null(mkdtemp(td));
    sh("'%s' synth --preset llama-tiny --seed 3 --out %s/a.safetensors", ptc, td);
    sh("'%s' synth --preset llama-tiny --seed 4 --out %s/b.safetensors", ptc, td);
    sh("'%s' import --store %s/s --config tp=2 --rules llama %s/a.safetensors >/dev/null", ptc,
       td, td);
    sh("'%s' import --store %s/s --config tp=2 --rules llama %s/a.safetensors >/dev/null", ptc,
       td, td);
    for (int i = 0; i < 2; i++) /* the copy: version 2 of s2 */
        sh("'%s' import --store %s/s2 --config tp=2 --rules llama %s/b.safetensors >/dev/null",
           ptc, td, td);
    sh("'%s' export --store %s/s2 --out %s/b2.safetensors >/dev/null", ptc, td, td);
    snprintf(dir, sizeof dir, "%s/s", td);
    snprintf(dir2, sizeof dir2, "%s/s2", td);
    ptc_store *store;
    assert_int_equal(ptc_store_open(&store, dir, 0), PTC_OK);
    assert_int_equal(ptc_store_open(&src_store, dir2, 0), PTC_OK);
    ptc_view_store_options o = {.source = source_other};
    ptc_view_store *vs;
    assert_int_equal(ptc_view_store_create(&vs, NULL, &o), PTC_OK);
    assert_int_equal(ptc_view_store_attach(vs, store, false), PTC_OK);
    ptc_view *v = ptc_view_store_view(vs);
    static uint8_t got[1 << 20], want[1 << 20];
    size_t n = read_chunks(v, "/models/1/model.safetensors", NULL, got, sizeof got, 65536);
    snprintf(p, sizeof p, "%s/b2.safetensors", td);
    assert_int_equal(slurp(p, want, sizeof want), n);
    assert_memory_equal(got, want, n); /* s2's version 2, not s's version 1 */
    n = read_chunks(v, "/models/1/info.json", NULL, got, sizeof got - 1, 4096);
    got[n] = 0;
    assert_non_null(strstr((char *)got, "{\"version\":1,\"parent\":0,"));
    assert_non_null(strstr((char *)got, "\"tensor_count\":"));
    int calls = src_calls;
    read_chunks(v, "/models/1/dp1-tp2-pp1/rank-0.safetensors", NULL, got, sizeof got, 65536);
    assert_int_equal(src_calls, calls); /* the version stays open: asked once */
    ptc_view_handle *h = NULL;
    int rc = ptc_view_node_resolve(v, "/models/2/model.safetensors", &h);
    ptc_view_node_release(h);
    assert_int_equal(rc, PTC_E_IO);
    assert_non_null(strstr(ptc_last_error(), "no copy of version 2"));
    ptc_view_store_destroy(vs);
    ptc_store_close(src_store);
    ptc_store_close(store);
    sh("rm -rf %s", td);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_files), cmocka_unit_test(test_segs),
        cmocka_unit_test(test_other_files), cmocka_unit_test(test_refcount),
        cmocka_unit_test(test_threads),    cmocka_unit_test(test_store),
        cmocka_unit_test(test_store_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
