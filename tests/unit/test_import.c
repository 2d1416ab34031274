/* Import end to end through the library: a canonical checkpoint imported
 * under several configurations exports back byte-identically; and failing
 * the N-th allocation or write of an import, for every N up to the total,
 * leaves the store valid: version 1 still opens, exports byte-identically and
 * verifies, no half-written version is visible, and gc then leaves only what
 * committed versions reference. */
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/ptc.h"

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static char dir[64], model[128], store[128], out[128];

/* A small llama-named model with an uneven fused-free layout and optimizer
 * state, written by the canonical writer. */
static void write_model(void)
{
    static const char *const names[] = {
        "lm_head.weight",
        "model.embed_tokens.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.mlp.down_proj.weight.exp_avg",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.input_layernorm.weight",
        "model.layers.1.self_attn.o_proj.weight",
        "model.norm.weight",
    };
    static const int64_t shapes[][2] = {{10, 6}, {10, 6}, {6, 7}, {6, 7},
                                        {6, 6},  {6, 0}, {6, 6}, {6, 0}};
    ptc_st_tensor t[8];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 8; i++) {
        t[i].name = names[i];
        t[i].dtype = i == 3 ? PTC_DTYPE_F32 : PTC_DTYPE_BF16;
        t[i].ndim = shapes[i][1] ? 2 : 1;
        t[i].shape[0] = shapes[i][0];
        t[i].shape[1] = shapes[i][1];
    }
    ptc_st_kv meta[] = {{"format", "pt"}};
    ptc_st_writer *w;
    assert_int_equal(ptc_st_writer_create(&w, model, t, 8, meta, 1), PTC_OK);
    uint64_t left = ptc_st_writer_remaining(w);
    for (uint64_t i = 0; i < left; i++) {
        uint8_t b = (uint8_t)(i * 131 + 7);
        assert_int_equal(ptc_st_writer_write(w, &b, 1), PTC_OK);
    }
    assert_int_equal(ptc_st_writer_finish(w), PTC_OK);
}

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/ptc_import_test_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    write_model();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static bool files_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb)
            eq = false;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return eq;
}

static long fault_n;   /* arm this fault just around ptc_import (0: none) */
static bool fault_writes;
static long fault_count;

static int import_cfg(const char *cfg_text, unsigned codec, uint64_t *version)
{
    ptc_config cfg;
    ptc_rules *rules = NULL;
    ptc_store *s = NULL;
    assert_int_equal(ptc_config_parse(&cfg, cfg_text), PTC_OK);
    assert_int_equal(ptc_rules_load(&rules, "llama"), PTC_OK);
    int rc = ptc_store_open(&s, store, PTC_STORE_CREATE);
    if (rc == PTC_OK) {
        const char *in[] = {model};
        ptc_import_options o = {.codec = codec, .step = "5"};
        if (fault_n && fault_writes)
            ptc_fault_write_at(fault_n, ENOSPC);
        else if (fault_n)
            ptc_fault_alloc_at(fault_n);
        rc = ptc_import(s, in, 1, &cfg, rules, &o, version);
        fault_count = fault_writes ? ptc_fault_write_count() : ptc_fault_alloc_count();
        ptc_fault_write_at(0, 0);
        ptc_fault_alloc_at(0);
    }
    ptc_store_close(s);
    ptc_rules_destroy(rules);
    return rc;
}

/* Export version v whole and compare with the input. */
static void check_version(uint64_t v)
{
    ptc_store *s;
    ptc_store_reader *r;
    ptc_vfile *f;
    assert_int_equal(ptc_store_open(&s, store, 0), PTC_OK);
    assert_int_equal(ptc_store_reader_open(&r, s, v), PTC_OK);
    assert_int_equal(ptc_vfile_whole(&f, r, PTC_DTYPE_KEEP), PTC_OK);
    assert_int_equal(ptc_vfile_write(f, out, NULL, NULL), PTC_OK);
    assert_true(files_equal(model, out));
    ptc_vfile_destroy(f);
    ptc_store_reader_close(r);
    assert_int_equal(ptc_store_verify(s, v, NULL, NULL), PTC_OK);
    ptc_store_close(s);
}

static void test_round_trips(void **state)
{
    (void)state;
    static const char *const cfgs[] = {"dp=1", "tp=4", "dp=2,tp=3,pp=2,zero=1",
                                       "pp=2,layers=2:0", "dp=3,zero=1"};
    for (size_t i = 0; i < 5; i++) {
        uint64_t v = 0;
        assert_int_equal(import_cfg(cfgs[i], i % 2 ? PTC_STORE_CODEC_ZSTD : 0, &v), PTC_OK);
        assert_int_equal(v, i + 1);
        check_version(v);
    }
}

/* A deleted newest version's number is never handed out again. */
static void test_numbers_not_reused(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(import_cfg("tp=2", 0, &v), PTC_OK);
    assert_int_equal(v, 1);
    assert_int_equal(import_cfg("tp=3", 0, &v), PTC_OK);
    assert_int_equal(v, 2);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, store, 0), PTC_OK);
    assert_int_equal(ptc_store_version_delete(s, 2), PTC_OK);
    ptc_store_close(s);
    assert_int_equal(import_cfg("tp=4", 0, &v), PTC_OK);
    assert_int_equal(v, 3);
    check_version(3);
    check_version(1);
}

static void count_versions(uint64_t *latest)
{
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, store, 0), PTC_OK);
    assert_int_equal(ptc_store_latest(s, latest), PTC_OK);
    ptc_store_close(s);
}

/* Fail the n-th allocation (or write) of an import, for every n. */
static void fault_loop(bool writes)
{
    nftw(store, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    uint64_t v;
    assert_int_equal(import_cfg("dp=2,tp=2,pp=2,zero=1", PTC_STORE_CODEC_ZSTD, &v), PTC_OK);
    long n;
    for (n = 1; n < 100000; n++) {
        fault_writes = writes;
        fault_n = n;
        uint64_t nv = 0;
        int rc = import_cfg("tp=3,pp=2", 0, &nv);
        long count = fault_count;
        fault_n = 0;
        uint64_t latest;
        count_versions(&latest);
        if (rc != PTC_OK) {
            assert_true(strlen(ptc_last_error()) > 0);
            assert_int_equal(latest, 1); /* nothing half-written is visible */
        } else {
            assert_true(nv > 1 && latest == nv);
        }
        check_version(1);
        if (latest > 1) {
            check_version(latest);
            ptc_store *s;
            assert_int_equal(ptc_store_open(&s, store, 0), PTC_OK);
            assert_int_equal(ptc_store_version_delete(s, latest), PTC_OK);
            ptc_store_close(s);
        }
        ptc_store *s;
        ptc_store_gc_stats st;
        assert_int_equal(ptc_store_open(&s, store, 0), PTC_OK);
        assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
        ptc_store_close(s);
        check_version(1);
        if (count < n)
            break; /* the fault no longer fires: every point was covered */
    }
    print_message("%s: %ld fault points covered\n", writes ? "writes" : "allocations", n - 1);
    assert_true(n > 3);
}

static void test_fault_writes(void **state)
{
    (void)state;
    fault_loop(true);
}

static void test_fault_allocs(void **state)
{
    (void)state;
    fault_loop(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_numbers_not_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_allocs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
