/* Training-state checkpoints without MPI (the non-collective steps, several
 * ranks per "process"): save under one configuration and load under others
 * (dp, tp, pp, zero=1, layers=) byte-exact against the layout's slices of
 * known global tensors; replicas stored once (aliases); unchanged shards
 * referenced from the parent, changed ones rewritten; the record's JSON
 * round trip and its strict parser; every named error; fault injection of
 * every allocation and write of a save and of a load. */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "kernels/pack.h"
#include "ptc/ckpt.h"

/* ---- helpers ----------------------------------------------------------------- */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

static void rmrf(const char *p)
{
    nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static char *mktmp(void)
{
    char *t = strdup("/tmp/ptc_ckpt_test_XXXXXX");
    assert_non_null(mkdtemp(t));
    return t;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static bool dir_exists(const char *dir, const char *sub)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    struct stat st;
    return stat(p, &st) == 0;
}

static const char RULES[] = "layer model.layers.{L}.\n"
                            "optim .exp_avg .exp_avg_sq\n"
                            "match *.up.weight tp=split(0)\n"
                            "match *.down.weight tp=split(1)\n"
                            "match *.qkv.weight tp=split(0,blocks=3)\n"
                            "match embed.weight tp=split(0) pp=first\n"
                            "match head.weight tp=split(1) pp=last\n"
                            "match norm.weight tp=replicate pp=last\n"
                            "match * tp=replicate\n";

/* A model: parameters of 4 layers plus AdamW moments, known global data. */
typedef struct model {
    size_t nt;
    ptc_tensor_info ti[64];
    char names[64][64];
    uint8_t *g[64];
    size_t gbytes[64];
    ptc_rules *rules;
} model;

static void add_tensor(model *m, const char *name, ptc_dtype dt, int ndim, int64_t d0, int64_t d1)
{
    size_t t = m->nt++;
    assert_true(t < 64);
    snprintf(m->names[t], sizeof m->names[t], "%s", name);
    ptc_tensor_info *ti = &m->ti[t];
    memset(ti, 0, sizeof *ti);
    ti->name = m->names[t];
    ti->dtype = dt;
    ti->ndim = ndim;
    ti->shape[0] = d0;
    ti->shape[1] = d1;
    size_t n = ptc_dtype_size(dt);
    for (int d = 0; d < ndim; d++)
        n *= (size_t)ti->shape[d];
    m->gbytes[t] = n;
    m->g[t] = malloc(n ? n : 1);
    assert_non_null(m->g[t]);
    for (size_t i = 0; i < n; i++)
        m->g[t][i] = (uint8_t)mix(t * 1000003 + i + 17);
}

/* Each parameter of @p layers layers with its two moments (F32). @p big:
 * a head of 2.4 MB per tensor, so shards span several 1 MiB blocks. */
static void model_init_layers(model *m, int layers, bool big)
{
    memset(m, 0, sizeof *m);
    char n[64];
    const char *kinds[] = {"", ".exp_avg", ".exp_avg_sq"};
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "embed.weight%s", kinds[k]);
        add_tensor(m, n, PTC_DTYPE_F32, 2, 50, 12);
        for (int L = 0; L < layers; L++) {
            snprintf(n, sizeof n, "model.layers.%d.up.weight%s", L, kinds[k]);
            add_tensor(m, n, PTC_DTYPE_F32, 2, 24, 12);
            snprintf(n, sizeof n, "model.layers.%d.down.weight%s", L, kinds[k]);
            add_tensor(m, n, PTC_DTYPE_F32, 2, 12, 24);
            snprintf(n, sizeof n, "model.layers.%d.qkv.weight%s", L, kinds[k]);
            add_tensor(m, n, PTC_DTYPE_F32, 2, 36, 12);
            snprintf(n, sizeof n, "model.layers.%d.bias%s", L, kinds[k]);
            add_tensor(m, n, k ? PTC_DTYPE_F32 : PTC_DTYPE_BF16, 1, 7, 0);
        }
        snprintf(n, sizeof n, "norm.weight%s", kinds[k]);
        add_tensor(m, n, PTC_DTYPE_F32, 1, 12, 0);
        snprintf(n, sizeof n, "head.weight%s", kinds[k]);
        if (big)
            add_tensor(m, n, PTC_DTYPE_F32, 2, 600, 1000);
        else
            add_tensor(m, n, PTC_DTYPE_F32, 2, 10, 12);
    }
    assert_int_equal(ptc_rules_parse(&m->rules, RULES, strlen(RULES), "test rules"), PTC_OK);
}

static void model_init(model *m, bool big)
{
    model_init_layers(m, 4, big);
}

static void model_free(model *m)
{
    for (size_t t = 0; t < m->nt; t++)
        free(m->g[t]);
    ptc_rules_destroy(m->rules);
}

static size_t find(const model *m, const char *name)
{
    for (size_t t = 0; t < m->nt; t++)
        if (strcmp(m->names[t], name) == 0)
            return t;
    fail_msg("no tensor %s", name);
    return 0;
}

static ptc_layout *layout_of(const model *m, const char *cfg_text)
{
    ptc_config cfg;
    assert_int_equal(ptc_config_parse(&cfg, cfg_text), PTC_OK);
    ptc_layout *l = NULL;
    int rc = ptc_layout_create(&l, m->ti, m->nt, m->rules, &cfg);
    if (rc != PTC_OK)
        fail_msg("layout %s: %s", cfg_text, ptc_last_error());
    return l;
}

static int world_of(const ptc_layout *l)
{
    return ptc_config_world(ptc_layout_config(l));
}

/* Buffers of every rank of @p l ([r * nt + t]); NULL where empty. With
 * @p m: the expected local tensors cut from the global data; else poison. */
static uint8_t **bufs_all(const ptc_layout *l, const model *m)
{
    size_t nt = ptc_layout_count(l);
    int world = world_of(l);
    uint8_t **b = calloc((size_t)world * nt, sizeof *b);
    assert_non_null(b);
    ptc_piece pc[64];
    for (int r = 0; r < world; r++)
        for (size_t t = 0; t < nt; t++) {
            size_t bytes, np;
            assert_int_equal(ptc_ckpt_local_bytes(l, t, r, &bytes), PTC_OK);
            if (!bytes)
                continue;
            uint8_t *p = malloc(bytes);
            assert_non_null(p);
            memset(p, 0xAB, bytes);
            b[(size_t)r * nt + t] = p;
            if (!m)
                continue;
            const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
            size_t es = ptc_dtype_size(ti->dtype);
            int64_t gs[PTC_MAX_DIMS];
            ptc_strides_row_major(ti->ndim, ti->shape, gs);
            assert_int_equal(ptc_layout_pieces(l, t, r, pc, 64, &np), PTC_OK);
            for (size_t k = 0; k < np; k++) {
                int64_t ext[PTC_MAX_DIMS], off = 0;
                for (int d = 0; d < ti->ndim; d++) {
                    ext[d] = pc[k].box.hi[d] - pc[k].box.lo[d];
                    off += pc[k].box.lo[d] * gs[d];
                }
                assert_int_equal(ptc_pack_copy_ref(p + (size_t)pc[k].local_offset * es,
                                                   pc[k].local_stride,
                                                   m->g[t] + (size_t)off * es, gs, ext,
                                                   ti->ndim, es),
                                 PTC_OK);
            }
        }
    return b;
}

static void bufs_free(const ptc_layout *l, uint8_t **b)
{
    size_t n = (size_t)world_of(l) * ptc_layout_count(l);
    for (size_t i = 0; i < n; i++)
        free(b[i]);
    free(b);
}

static void bufs_check(const ptc_layout *l, uint8_t **want, uint8_t **got, const char *what)
{
    size_t nt = ptc_layout_count(l);
    for (int r = 0; r < world_of(l); r++)
        for (size_t t = 0; t < nt; t++) {
            size_t bytes;
            assert_int_equal(ptc_ckpt_local_bytes(l, t, r, &bytes), PTC_OK);
            if (bytes && memcmp(want[(size_t)r * nt + t], got[(size_t)r * nt + t], bytes) != 0)
                fail_msg("%s: tensor %s rank %d differs", what, ptc_layout_tensor(l, t)->name, r);
        }
}

/* Save with the ranks cut into consecutive groups, one write_local per
 * group (a "process"), the descriptors committed together. */
static int save_groups(ptc_store *s, const model *m, const ptc_layout *l, uint8_t **bufs,
                       const int *groups, size_t ngroups, const ptc_ckpt_options *o,
                       const ptc_ckpt_record *rec, uint64_t *version)
{
    ptc_ckpt_txn *txn;
    int rc = ptc_ckpt_begin(&txn, s, l, m->rules, o);
    if (rc)
        return rc;
    size_t nt = ptc_layout_count(l);
    void *descs[16] = {0};
    size_t lens[16] = {0};
    int ranks[1024], r0 = 0;
    for (size_t g = 0; g < ngroups && rc == PTC_OK; g++) {
        for (int i = 0; i < groups[g]; i++)
            ranks[i] = r0 + i;
        rc = ptc_ckpt_write_local(s, ptc_ckpt_txn_version(txn), ptc_ckpt_txn_parent(txn), l,
                                  ranks, (size_t)groups[g],
                                  (const void *const *)(bufs + (size_t)r0 * nt), o, &descs[g],
                                  &lens[g]);
        r0 += groups[g];
    }
    if (rc == PTC_OK)
        rc = ptc_ckpt_commit(txn, (const void *const *)descs, lens, ngroups, rec, version);
    else
        ptc_ckpt_abort(txn);
    for (size_t g = 0; g < ngroups; g++)
        ptc_store_free(descs[g]);
    return rc;
}

static int save_all(ptc_store *s, const model *m, const ptc_layout *l, uint8_t **bufs,
                    const ptc_ckpt_options *o, const ptc_ckpt_record *rec, uint64_t *version)
{
    int one = world_of(l);
    return save_groups(s, m, l, bufs, &one, 1, o, rec, version);
}

static int load_all(ptc_store *s, uint64_t v, const ptc_layout *l, uint8_t **bufs,
                    const ptc_ckpt_options *o, ptc_ckpt_record *rec)
{
    int ranks[1024];
    for (int r = 0; r < world_of(l); r++)
        ranks[r] = r;
    return ptc_ckpt_load_local(s, v, l, ranks, (size_t)world_of(l), (void *const *)bufs, o, rec,
                               NULL);
}

/* ---- the record ------------------------------------------------------------------ */

static void test_record_roundtrip(void **state)
{
    (void)state;
    uint8_t rng[300];
    for (size_t i = 0; i < sizeof rng; i++)
        rng[i] = (uint8_t)(i * 37);
    rng[0] = 0;
    rng[1] = 0xff;
    ptc_ckpt_kv kv[] = {{"zeta", "last"}, {"alpha", "é ü \"quoted\" \n"}, {"mid", ""}};
    ptc_ckpt_record in = {.step = 1234,
                          .config = "dp=2,tp=2,pp=2,zero=1",
                          .schedule = "1f1b",
                          .seed = UINT64_MAX,
                          .epoch = 3,
                          .sample = 98765,
                          .global_batch = 32,
                          .dataset = "tiny",
                          .has_loss = true,
                          .loss = 2.718281828459045,
                          .rng = rng,
                          .rng_len = sizeof rng,
                          .extra = kv,
                          .nextra = 3};
    char *json;
    assert_int_equal(ptc_ckpt_record_to_json(&in, &json), PTC_OK);
    ptc_ckpt_record out;
    assert_int_equal(ptc_ckpt_record_from_json(json, strlen(json), &out), PTC_OK);
    assert_int_equal(out.format, 1);
    assert_int_equal(out.step, 1234);
    assert_string_equal(out.config, in.config);
    assert_string_equal(out.schedule, "1f1b");
    assert_true(out.seed == UINT64_MAX);
    assert_int_equal(out.epoch, 3);
    assert_int_equal(out.sample, 98765);
    assert_int_equal(out.global_batch, 32);
    assert_string_equal(out.dataset, "tiny");
    assert_true(out.has_loss);
    assert_true(out.loss == in.loss); /* bit-exact through the text */
    assert_int_equal(out.rng_len, sizeof rng);
    assert_memory_equal(out.rng, rng, sizeof rng);
    assert_int_equal(out.nextra, 3);
    /* sorted by key */
    assert_string_equal(out.extra[0].key, "alpha");
    assert_string_equal(out.extra[0].value, kv[1].value);
    assert_string_equal(out.extra[1].key, "mid");
    assert_string_equal(out.extra[1].value, "");
    assert_string_equal(out.extra[2].key, "zeta");
    /* the text is a fixed point */
    char *again;
    assert_int_equal(ptc_ckpt_record_to_json(&out, &again), PTC_OK);
    assert_string_equal(json, again);
    ptc_store_free(again);
    ptc_store_free(json);
    ptc_ckpt_record_free(&out);
    assert_null(out.config);
    ptc_ckpt_record_free(&out); /* zeroed: a no-op */
    ptc_ckpt_record_free(NULL);

    /* the documented text of a small record */
    ptc_ckpt_record small = {.step = 5, .seed = 7, .epoch = 1, .sample = 40, .global_batch = 8,
                             .has_loss = true, .loss = 0.5};
    assert_int_equal(ptc_ckpt_record_to_json(&small, &json), PTC_OK);
    assert_string_equal(json, "{\"epoch\":1,\"format\":1,\"global_batch\":8,\"loss\":0.5,"
                              "\"sample\":40,\"seed\":\"7\",\"step\":5}");
    ptc_store_free(json);

    /* losses that JSON numbers cannot hold */
    double odd[] = {NAN, INFINITY, -INFINITY, -0.0, 1e-300};
    for (size_t i = 0; i < 5; i++) {
        ptc_ckpt_record r = {.step = 1, .has_loss = true, .loss = odd[i]};
        assert_int_equal(ptc_ckpt_record_to_json(&r, &json), PTC_OK);
        assert_int_equal(ptc_ckpt_record_from_json(json, strlen(json), &out), PTC_OK);
        assert_true(out.has_loss);
        if (isnan(odd[i]))
            assert_true(isnan(out.loss));
        else
            assert_memory_equal(&out.loss, &odd[i], sizeof(double));
        ptc_ckpt_record_free(&out);
        ptc_store_free(json);
    }
}

static void test_record_rejects(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "{",
        "[1]",
        "{\"format\":1}",
        "{\"step\":1}",
        "{\"format\":2,\"step\":1}",
        "{\"format\":1,\"step\":-1}",
        "{\"format\":1,\"step\":1.5}",
        "{\"format\":1,\"step\":\"1\"}",
        "{\"format\":1,\"step\":1,\"step\":2}",
        "{\"format\":1,\"step\":1,\"unknown\":0}",
        "{\"format\":1,\"step\":1,\"seed\":7}",
        "{\"format\":1,\"step\":1,\"seed\":\"07\"}",
        "{\"format\":1,\"step\":1,\"seed\":\"18446744073709551616\"}",
        "{\"format\":1,\"step\":1,\"seed\":\"-1\"}",
        "{\"format\":1,\"step\":1,\"seed\":\"\"}",
        "{\"format\":1,\"step\":1,\"rng\":\"abc\"}",
        "{\"format\":1,\"step\":1,\"rng\":\"AB\"}",
        "{\"format\":1,\"step\":1,\"rng\":\"zz\"}",
        "{\"format\":1,\"step\":1,\"rng\":\"\"}",
        "{\"format\":1,\"step\":1,\"loss\":\"big\"}",
        "{\"format\":1,\"step\":1,\"loss\":null}",
        "{\"format\":1,\"step\":1,\"config\":3}",
        "{\"format\":1,\"step\":1,\"extra\":{\"a\":1}}",
        "{\"format\":1,\"step\":1,\"extra\":[]}",
        "{\"format\":1,\"step\":1,\"extra\":{\"\":\"x\"}}",
        "{\"format\":1,\"step\":1,\"epoch\":9223372036854775808}",
        "{\"format\":1,\"step\":1} trailing",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ptc_ckpt_record r;
        int rc = ptc_ckpt_record_from_json(bad[i], strlen(bad[i]), &r);
        if (rc != PTC_E_FORMAT)
            fail_msg("accepted (%d): %s", rc, bad[i]);
        assert_non_null(strstr(ptc_last_error(), "training-state record"));
        assert_null(r.config);
        assert_null(r.extra);
    }
    ptc_ckpt_record r;
    assert_int_equal(ptc_ckpt_record_from_json("{\"format\":1,\"step\":1,\"x\":2}", 27, &r),
                     PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "unknown key 'x'"));
    /* the minimal record */
    assert_int_equal(ptc_ckpt_record_from_json("{\"format\":1,\"step\":0} ", 22, &r), PTC_OK);
    assert_false(r.has_loss);
    assert_null(r.config);
    ptc_ckpt_record_free(&r);

    /* what cannot be written */
    char *json = NULL;
    ptc_ckpt_record w = {.step = (uint64_t)INT64_MAX + 1};
    assert_int_equal(ptc_ckpt_record_to_json(&w, &json), PTC_E_RANGE);
    assert_null(json);
    w = (ptc_ckpt_record){.config = "\xff\xfe"};
    assert_int_equal(ptc_ckpt_record_to_json(&w, &json), PTC_E_INVAL);
    ptc_ckpt_kv dup[] = {{"k", "1"}, {"k", "2"}};
    w = (ptc_ckpt_record){.extra = dup, .nextra = 2};
    assert_int_equal(ptc_ckpt_record_to_json(&w, &json), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "given twice"));
    w = (ptc_ckpt_record){.rng_len = 3};
    assert_int_equal(ptc_ckpt_record_to_json(&w, &json), PTC_E_INVAL);
    w = (ptc_ckpt_record){.rng = (const uint8_t *)"", .rng_len = PTC_CKPT_RNG_MAX + 1};
    assert_int_equal(ptc_ckpt_record_to_json(&w, &json), PTC_E_RANGE);
    assert_null(json);
}

/* ---- save under one configuration, load under others ---------------------------------- */

static void roundtrip(const char *from, const int *groups, size_t ngroups, unsigned codec,
                      const char *const *to, size_t nto)
{
    char *dir = mktmp();
    model m;
    model_init(&m, true);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_layout *la = layout_of(&m, from);
    uint8_t **src = bufs_all(la, &m);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.codec = codec;
    o.threads = 3;
    uint8_t rng[16] = {1, 2, 3};
    ptc_ckpt_record rec = {.step = 42, .schedule = "zbh1", .seed = 9, .epoch = 2, .sample = 640,
                           .global_batch = 64, .dataset = "d", .rng = rng, .rng_len = 16};
    uint64_t v = 0;
    int rc = save_groups(s, &m, la, src, groups, ngroups, &o, &rec, &v);
    if (rc)
        fail_msg("save %s: %s", from, ptc_last_error());
    assert_int_equal(v, 1);
    assert_int_equal(ptc_store_verify(s, 1, NULL, NULL), PTC_OK);
    for (size_t k = 0; k < nto; k++) {
        ptc_layout *lb = layout_of(&m, to[k]);
        uint8_t **want = bufs_all(lb, &m), **got = bufs_all(lb, NULL);
        ptc_ckpt_record back;
        for (int threads = 1; threads <= 4; threads += 3) {
            o.threads = threads;
            if ((rc = load_all(s, 0, lb, got, &o, &back)) != PTC_OK)
                fail_msg("load %s -> %s: %s", from, to[k], ptc_last_error());
            bufs_check(lb, want, got, to[k]);
            assert_int_equal(back.step, 42);
            assert_string_equal(back.schedule, "zbh1");
            assert_memory_equal(back.rng, rng, 16);
            ptc_config c1, c2;
            assert_int_equal(ptc_config_parse(&c1, back.config), PTC_OK);
            assert_int_equal(ptc_config_parse(&c2, from), PTC_OK);
            assert_true(ptc_config_equal(&c1, &c2)); /* the saving job's configuration */
            ptc_ckpt_record_free(&back);
        }
        /* one rank per call, as one process per rank would */
        uint8_t **one = bufs_all(lb, NULL);
        size_t nt = ptc_layout_count(lb);
        for (int r = 0; r < world_of(lb); r++)
            assert_int_equal(ptc_ckpt_load_local(s, 1, lb, &r, 1,
                                                 (void *const *)(one + (size_t)r * nt), &o, NULL,
                                                 NULL),
                             PTC_OK);
        bufs_check(lb, want, one, to[k]);
        bufs_free(lb, one);
        bufs_free(lb, want);
        bufs_free(lb, got);
        ptc_layout_destroy(lb);
    }
    bufs_free(la, src);
    ptc_layout_destroy(la);
    ptc_store_close(s);
    model_free(&m);
    rmrf(dir);
    free(dir);
}

static void test_roundtrip_zero1_8(void **state)
{
    (void)state;
    static const char *to[] = {"dp=2,tp=2,pp=2,zero=1", "dp=1,tp=3,pp=2",
                               "dp=2,tp=1,pp=2,layers=1:3", "dp=4,tp=1,pp=1,zero=1",
                               "dp=1,tp=1,pp=1", "dp=3,tp=2,pp=1,zero=1",
                               "dp=1,tp=2,pp=4,zero=1,layers=1:1:1:1"};
    int groups[] = {3, 1, 4};
    roundtrip("dp=2,tp=2,pp=2,zero=1", groups, 3, PTC_STORE_CODEC_NONE, to, 7);
}

static void test_roundtrip_zstd_tp3(void **state)
{
    (void)state;
    static const char *to[] = {"dp=2,tp=2,pp=2,zero=1", "dp=1,tp=1,pp=1", "tp=4,pp=1,dp=1"};
    int groups[] = {2, 2, 2};
    roundtrip("dp=2,tp=3,pp=1,zero=1", groups, 3, PTC_STORE_CODEC_ZSTD, to, 3);
}

/* ---- replicas, reuse ---------------------------------------------------------------- */

static void test_alias_and_reuse(void **state)
{
    (void)state;
    char *dir = mktmp();
    model m;
    model_init(&m, true);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_layout *l = layout_of(&m, "dp=2,tp=2,pp=1,zero=1");
    uint8_t **b = bufs_all(l, &m);
    size_t nt = ptc_layout_count(l);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    ptc_ckpt_record rec = {.step = 1};
    uint64_t v;
    assert_int_equal(save_all(s, &m, l, b, &o, &rec, &v), PTC_OK); /* no parent yet */
    assert_int_equal(v, 1);

    /* replicas: every rank whose owner is another rank is an alias of it */
    ptc_store_reader *rd;
    assert_int_equal(ptc_store_reader_open(&rd, s, 1), PTC_OK);
    size_t aliases = 0;
    for (size_t t = 0; t < nt; t++) {
        int owners[4];
        size_t st;
        const char *name = ptc_layout_tensor(l, t)->name;
        assert_int_equal(ptc_layout_owners(l, t, owners), PTC_OK);
        assert_int_equal(ptc_store_reader_find(rd, name, strlen(name), &st), PTC_OK);
        for (int r = 0; r < 4; r++) {
            ptc_shard_info si;
            assert_int_equal(ptc_store_reader_shard(rd, st, (uint32_t)r, &si), PTC_OK);
            assert_int_equal(si.alias, owners[r] != r);
            assert_int_equal(si.owner_rank, (uint32_t)owners[r]);
            aliases += si.alias;
        }
    }
    /* params: dp rank 1 aliases dp rank 0 (the replicated ones every tp
     * rank too); zero=1 moments are distinct per rank */
    size_t up = find(&m, "model.layers.0.up.weight"), norm = find(&m, "norm.weight");
    size_t mom = find(&m, "model.layers.0.up.weight.exp_avg");
    ptc_shard_info si;
    assert_int_equal(ptc_store_reader_shard(rd, up, 3, &si), PTC_OK);
    assert_true(si.alias && si.owner_rank == 1);
    assert_int_equal(ptc_store_reader_shard(rd, norm, 3, &si), PTC_OK);
    assert_true(si.alias && si.owner_rank == 0);
    assert_int_equal(ptc_store_reader_shard(rd, mom, 3, &si), PTC_OK);
    assert_false(si.alias);
    assert_true(aliases > nt);
    uint64_t stored1 = ptc_store_reader_version(rd)->stored_bytes;
    ptc_store_reader_close(rd);

    /* change one element of one parameter (tp rank 1's rows of layer 2's
     * up.weight) and one moment of the head; everything else unchanged */
    size_t up2 = find(&m, "model.layers.2.up.weight"), hm = find(&m, "head.weight.exp_avg_sq");
    m.g[up2][20 * 12 * 4 + 5] ^= 1;     /* row 20: tp rank 1 of 2 */
    m.g[hm][(size_t)599 * 1000 * 4] ^= 1; /* tp 0, second flat half: rank 2 */
    uint8_t **b2 = bufs_all(l, &m);
    rec.step = 2;
    assert_int_equal(save_all(s, &m, l, b2, &o, &rec, &v), PTC_OK); /* parent: the newest */
    assert_int_equal(v, 2);
    assert_int_equal(ptc_store_reader_open(&rd, s, 2), PTC_OK);
    assert_int_equal(ptc_store_reader_version(rd)->parent, 1);
    assert_string_equal(ptc_store_reader_version(rd)->step, "2");
    uint64_t rewritten = 0;
    for (size_t t = 0; t < nt; t++)
        for (int r = 0; r < 4; r++) {
            ptc_store_reader_shard(rd, t, (uint32_t)r, &si);
            bool changed = (t == up2 && si.owner_rank == 1) || (t == hm && r == 2);
            if (changed != (si.pack_version == 2))
                fail_msg("tensor %s rank %d: pack version %llu", m.names[t], r,
                         (unsigned long long)si.pack_version);
            if (!si.alias && si.pack_version == 2)
                rewritten += si.length;
        }
    assert_int_equal(ptc_store_reader_version(rd)->stored_bytes, rewritten);
    assert_true(rewritten > 0 && rewritten < stored1 / 4);
    ptc_store_reader_close(rd);
    uint8_t **got = bufs_all(l, NULL);
    assert_int_equal(load_all(s, 2, l, got, &o, NULL), PTC_OK);
    bufs_check(l, b2, got, "v2");
    assert_int_equal(load_all(s, 1, l, got, &o, NULL), PTC_OK);
    bufs_check(l, b, got, "v1 after v2");

    /* no_reuse: everything written again */
    o.no_reuse = true;
    assert_int_equal(save_all(s, &m, l, b2, &o, &rec, &v), PTC_OK);
    assert_int_equal(ptc_store_reader_open(&rd, s, v), PTC_OK);
    for (size_t t = 0; t < nt; t++) {
        ptc_store_reader_shard(rd, t, 0, &si);
        assert_int_equal(si.pack_version, v);
    }
    ptc_store_reader_close(rd);

    /* another configuration with the same pieces on some ranks (tp=2
     * without dp): its parameters are referenced, not rewritten; the
     * zero=1 moments now whole tp shards: written */
    o.no_reuse = false;
    o.parent = 2;
    ptc_layout *l2 = layout_of(&m, "tp=2");
    uint8_t **c2 = bufs_all(l2, &m);
    assert_int_equal(save_all(s, &m, l2, c2, &o, &rec, &v), PTC_OK);
    assert_int_equal(ptc_store_reader_open(&rd, s, v), PTC_OK);
    assert_int_equal(ptc_store_reader_version(rd)->parent, 2);
    ptc_store_reader_shard(rd, up2, 1, &si);
    assert_int_equal(si.pack_version, 2);
    ptc_store_reader_shard(rd, up, 0, &si);
    assert_int_equal(si.pack_version, 1);
    ptc_store_reader_shard(rd, mom, 0, &si);
    assert_int_equal(si.pack_version, v);
    ptc_store_reader_close(rd);
    assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL), PTC_OK);
    /* gc keeps every referenced pack */
    assert_int_equal(ptc_store_gc(s, NULL), PTC_OK);
    uint8_t **g2 = bufs_all(l2, NULL);
    assert_int_equal(load_all(s, v, l2, g2, NULL, NULL), PTC_OK);
    bufs_check(l2, c2, g2, "tp=2 after gc");
    bufs_free(l2, g2);
    bufs_free(l2, c2);
    ptc_layout_destroy(l2);

    bufs_free(l, got);
    bufs_free(l, b2);
    bufs_free(l, b);
    ptc_layout_destroy(l);
    ptc_store_close(s);
    model_free(&m);
    rmrf(dir);
    free(dir);
}

/* ---- errors ------------------------------------------------------------------------- */

static void expect(int rc, int want, const char *words)
{
    if (rc != want)
        fail_msg("got %d (%s), want %d", rc, ptc_last_error(), want);
    const char *msg = ptc_last_error();
    if (strchr(msg, '\n'))
        fail_msg("message of more than one line: %s", msg);
    char w[256];
    snprintf(w, sizeof w, "%s", words);
    for (char *tok = strtok(w, "|"); tok; tok = strtok(NULL, "|"))
        if (!strstr(msg, tok))
            fail_msg("message '%s' does not name '%s'", msg, tok);
}

/* Loading version 1 of @p s (saved from @p m under dp=2,tp=2,pp=2) into a
 * layout it does not match: a tensor the version lacks, one the layout lacks,
 * another shape, another dtype. */
static void check_load_mismatch(ptc_store *s, const model *m)
{
    model m2;
    model_init(&m2, false);
    add_tensor(&m2, "model.layers.0.extra", PTC_DTYPE_F32, 1, 3, 0);
    ptc_layout *l2 = layout_of(&m2, "dp=2,tp=2,pp=2");
    uint8_t **g2 = bufs_all(l2, NULL);
    expect(load_all(s, 1, l2, g2, NULL, NULL), PTC_E_NOTFOUND,
           "model.layers.0.extra|not in version 1");
    bufs_free(l2, g2);
    ptc_layout_destroy(l2);
    m2.nt = m->nt - 1; /* without the last tensor of the version */
    l2 = layout_of(&m2, "dp=2,tp=2,pp=2");
    g2 = bufs_all(l2, NULL);
    expect(load_all(s, 1, l2, g2, NULL, NULL), PTC_E_INVAL,
           "head.weight.exp_avg_sq|layout does not have");
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.ignore_extra = true;
    assert_int_equal(load_all(s, 1, l2, g2, &o, NULL), PTC_OK);
    bufs_free(l2, g2);
    ptc_layout_destroy(l2);
    m2.nt = m->nt;
    size_t t0 = find(&m2, "model.layers.1.up.weight");
    m2.ti[t0].shape[0] = 25;
    l2 = layout_of(&m2, "dp=2,tp=2,pp=2");
    g2 = bufs_all(l2, NULL);
    expect(load_all(s, 1, l2, g2, NULL, NULL), PTC_E_INVAL,
           "model.layers.1.up.weight|F32 [24, 12]|F32 [25, 12]");
    bufs_free(l2, g2);
    ptc_layout_destroy(l2);
    m2.ti[t0].shape[0] = 24;
    m2.ti[t0].dtype = PTC_DTYPE_BF16;
    l2 = layout_of(&m2, "dp=2,tp=2,pp=2");
    g2 = bufs_all(l2, NULL);
    expect(load_all(s, 1, l2, g2, NULL, NULL), PTC_E_INVAL, "F32 [24, 12]|BF16 [24, 12]");
    bufs_free(l2, g2);
    ptc_layout_destroy(l2);
    m2.nt = m->nt + 1;
    model_free(&m2);
}

static void test_errors(void **state)
{
    (void)state;
    char *dir = mktmp();
    model m;
    model_init(&m, false);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_layout *l = layout_of(&m, "dp=2,tp=2,pp=2");
    uint8_t **b = bufs_all(l, &m);
    size_t nt = ptc_layout_count(l);
    ptc_ckpt_record rec = {.step = 7};
    uint64_t v;

    /* an empty store */
    uint8_t **got = bufs_all(l, NULL);
    expect(load_all(s, 0, l, got, NULL, NULL), PTC_E_NOTFOUND, "no versions");
    ptc_ckpt_record r;
    expect(ptc_ckpt_read_record(s, 0, &r), PTC_E_NOTFOUND, "no versions");
    assert_int_equal(save_all(s, &m, l, b, NULL, &rec, &v), PTC_OK);
    expect(load_all(s, 9, l, got, NULL, NULL), PTC_E_NOTFOUND, "version 9 not found");

    /* the writer lock held by a checkpoint in progress */
    ptc_ckpt_txn *txn, *txn2;
    assert_int_equal(ptc_ckpt_begin(&txn, s, l, m.rules, NULL), PTC_OK);
    assert_int_equal(ptc_ckpt_txn_version(txn), 2);
    assert_int_equal(ptc_ckpt_txn_parent(txn), 1);
    expect(ptc_ckpt_begin(&txn2, s, l, m.rules, NULL), PTC_E_BUSY, "locked|pid");
    assert_null(txn2);

    /* a rank nobody wrote: the commit refuses, nothing visible */
    int half[4] = {0, 1, 2, 3};
    void *d;
    size_t dl;
    assert_int_equal(ptc_ckpt_write_local(s, 2, 0, l, half, 4, (const void *const *)b, NULL, &d,
                                          &dl),
                     PTC_OK);
    assert_true(dir_exists(dir, "packs/v2"));
    expect(ptc_ckpt_commit(txn, (const void *const *)&d, &dl, 1, &rec, NULL), PTC_E_INVAL,
           "rank 4's shard of tensor|missing");
    ptc_store_free(d);
    assert_false(dir_exists(dir, "packs/v2"));
    uint64_t latest;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    assert_int_equal(latest, 1);

    /* a rank written twice */
    assert_int_equal(ptc_ckpt_begin(&txn, s, l, m.rules, NULL), PTC_OK);
    int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    void *dd[2];
    size_t dls[2];
    assert_int_equal(ptc_ckpt_write_local(s, 2, 1, l, all, 8, (const void *const *)b, NULL, &dd[0],
                                          &dls[0]),
                     PTC_OK);
    assert_int_equal(ptc_ckpt_write_local(s, 2, 1, l, all + 7, 1,
                                          (const void *const *)(b + 7 * nt), NULL, &dd[1],
                                          &dls[1]),
                     PTC_OK);
    expect(ptc_ckpt_commit(txn, (const void *const *)dd, dls, 2, &rec, NULL), PTC_E_EXISTS,
           "two shards");
    ptc_store_free(dd[0]);
    ptc_store_free(dd[1]);
    assert_false(dir_exists(dir, "packs/v2"));

    /* a descriptor of another version */
    assert_int_equal(ptc_ckpt_begin(&txn, s, l, m.rules, NULL), PTC_OK);
    assert_int_equal(ptc_ckpt_write_local(s, 5, 1, l, all, 8, (const void *const *)b, NULL, &d,
                                          &dl),
                     PTC_OK);
    expect(ptc_ckpt_commit(txn, (const void *const *)&d, &dl, 1, &rec, NULL), PTC_E_INVAL,
           "version 5");
    ptc_store_free(d);
    assert_int_equal(ptc_store_gc(s, NULL), PTC_OK); /* its pack files are debris */
    assert_false(dir_exists(dir, "packs/v5"));

    /* a record that cannot be written: nothing committed */
    assert_int_equal(ptc_ckpt_begin(&txn, s, l, m.rules, NULL), PTC_OK);
    assert_int_equal(ptc_ckpt_write_local(s, 2, 1, l, all, 8, (const void *const *)b, NULL, &d,
                                          &dl),
                     PTC_OK);
    ptc_ckpt_record huge = {.step = UINT64_MAX};
    expect(ptc_ckpt_commit(txn, (const void *const *)&d, &dl, 1, &huge, NULL), PTC_E_RANGE,
           "step");
    ptc_store_free(d);
    assert_false(dir_exists(dir, "packs/v2"));

    /* bad ranks and buffers */
    expect(ptc_ckpt_write_local(s, 2, 0, l, (int[]){8}, 1, (const void *const *)b, NULL, &d, &dl),
           PTC_E_INVAL, "rank 8");
    expect(ptc_ckpt_write_local(s, 2, 0, l, (int[]){1, 1}, 2, (const void *const *)b, NULL, &d,
                                &dl),
           PTC_E_INVAL, "rank 1 given twice");
    size_t emb = find(&m, "embed.weight");
    uint8_t *keep = b[emb];
    b[emb] = NULL;
    expect(ptc_ckpt_write_local(s, 2, 0, l, all, 1, (const void *const *)b, NULL, &d, &dl),
           PTC_E_INVAL, "embed.weight|rank 0");
    b[emb] = keep;
    assert_false(dir_exists(dir, "packs/v2"));
    keep = got[emb];
    got[emb] = NULL;
    expect(load_all(s, 1, l, got, NULL, NULL), PTC_E_INVAL, "no buffer for tensor|embed.weight");
    got[emb] = keep;

    /* rules that place a tensor otherwise than the layout */
    ptc_rules *other;
    const char *ot = "layer model.layers.{L}.\noptim .exp_avg .exp_avg_sq\n"
                     "match embed.weight tp=split(0) pp=first\n"
                     "match head.weight tp=split(1) pp=last\n"
                     "match norm.weight tp=replicate pp=last\nmatch * tp=replicate\n";
    assert_int_equal(ptc_rules_parse(&other, ot, strlen(ot), NULL), PTC_OK);
    expect(ptc_ckpt_begin(&txn, s, l, other, NULL), PTC_E_RULE, "up.weight");
    ptc_rules_destroy(other);

    /* a parent that does not exist */
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.parent = 77;
    expect(ptc_ckpt_begin(&txn, s, l, m.rules, &o), PTC_E_NOTFOUND, "version 77");

    /* loading: a tensor the version lacks, one the layout lacks, shapes and dtypes */
    check_load_mismatch(s, &m);

    /* a configuration the model cannot take (4 layers) */
    ptc_config bad;
    assert_int_equal(ptc_config_parse(&bad, "pp=2,layers=1:2"), PTC_OK);
    ptc_layout *lbad = NULL;
    expect(ptc_layout_create(&lbad, m.ti, m.nt, m.rules, &bad), PTC_E_CONFIG, "layers");
    assert_null(lbad);

    /* a version without a record, and one with a malformed record */
    ptc_store_writer *w;
    ptc_store_write_options wo = {.config = "dp=1,tp=1,pp=1", .rules = ptc_rules_text(m.rules),
                                  .world_size = 1};
    ptc_layout *l1 = layout_of(&m, "dp=1,tp=1,pp=1");
    uint8_t **b1 = bufs_all(l1, &m);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(ptc_store_writer_begin(&w, s, &wo), PTC_OK);
        if (k == 1)
            assert_int_equal(ptc_store_writer_set_metadata(w, PTC_CKPT_RECORD_KEY,
                                                           "{\"format\":1,\"step\":\"x\"}"),
                             PTC_OK);
        for (size_t t = 0; t < m.nt; t++) {
            const ptc_tensor_info *ti = &m.ti[t];
            ptc_piece p = {.local_offset = 0};
            ptc_box_full(&p.box, ti->ndim, ti->shape);
            ptc_strides_row_major(ti->ndim, ti->shape, p.local_stride);
            assert_int_equal(ptc_store_writer_add_tensor(w, ti->name, strlen(ti->name), ti->dtype,
                                                         ti->ndim, ti->shape, NULL, NULL),
                             PTC_OK);
            assert_int_equal(ptc_store_shard_put(w, (uint32_t)t, 0, ti->ndim, ti->shape, &p, 1,
                                                 m.g[t], m.gbytes[t]),
                             PTC_OK);
        }
        assert_int_equal(ptc_store_writer_commit(w, &v), PTC_OK);
        ptc_store_writer_destroy(w);
    }
    expect(ptc_ckpt_read_record(s, 2, &r), PTC_E_NOTFOUND, "version 2 has no training-state");
    r.step = 99;
    assert_int_equal(load_all(s, 2, l, got, NULL, &r), PTC_OK);
    assert_int_equal(r.format, 0);
    assert_int_equal(r.step, 0);
    bufs_check(l, b, got, "imported version");
    expect(ptc_ckpt_read_record(s, 3, &r), PTC_E_FORMAT, "version 3|'step'");
    expect(load_all(s, 3, l, got, NULL, &r), PTC_E_FORMAT, "version 3|training-state record");
    assert_null(r.config);
    assert_int_equal(ptc_ckpt_read_record(s, 1, &r), PTC_OK);
    assert_int_equal(r.step, 7);
    assert_string_equal(r.config, "dp=2,tp=2,pp=2");
    ptc_ckpt_record_free(&r);

    bufs_free(l1, b1);
    ptc_layout_destroy(l1);
    bufs_free(l, got);
    bufs_free(l, b);
    ptc_layout_destroy(l);
    ptc_store_close(s);
    model_free(&m);
    rmrf(dir);
    free(dir);
}

/* ---- fault injection ---------------------------------------------------------------- */

typedef struct fault_env {
    char *dir;
    model a, b;          /* version 1's data and the new data */
    ptc_layout *la, *lb; /* the same configuration over a and b */
    uint8_t **ba, **bb;
} fault_env;

/* Open the store, save b in two "processes" (reusing a's unchanged
 * shards), commit or abort, close: everything a fault may hit. */
static int fault_save(fault_env *e)
{
    ptc_store *s;
    int rc = ptc_store_open(&s, e->dir, 0);
    if (rc)
        return rc;
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = 2;
    uint8_t rng[5] = {9, 8, 7, 6, 5};
    ptc_ckpt_kv kv = {"k", "v"};
    ptc_ckpt_record rec = {.step = 2, .rng = rng, .rng_len = 5, .extra = &kv, .nextra = 1,
                           .has_loss = true, .loss = 1.5};
    int groups[2] = {1, 3};
    rc = save_groups(s, &e->b, e->lb, e->bb, groups, 2, &o, &rec, NULL);
    ptc_store_close(s);
    return rc;
}

/* After any outcome: version 1 intact; version 2 absent with no pack
 * files left, or complete. Resets the store to version 1. */
static void fault_check(fault_env *e, int rc, long n)
{
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, e->dir, 0), PTC_OK);
    uint64_t latest;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    if (rc != PTC_OK && (latest != 1 || dir_exists(e->dir, "packs/v2")))
        fail_msg("fault %ld: failed save (%d: %s) left version %llu or its packs", n, rc,
                 ptc_last_error(), (unsigned long long)latest);
    uint8_t **got = bufs_all(e->la, NULL);
    assert_int_equal(load_all(s, 1, e->la, got, NULL, NULL), PTC_OK);
    bufs_check(e->la, e->ba, got, "version 1 after a fault");
    if (latest == 2) {
        ptc_ckpt_record r;
        assert_int_equal(load_all(s, 2, e->lb, got, NULL, &r), PTC_OK);
        bufs_check(e->lb, e->bb, got, "version 2");
        assert_int_equal(r.step, 2);
        assert_int_equal(r.rng_len, 5);
        assert_string_equal(r.extra[0].value, "v");
        ptc_ckpt_record_free(&r);
        assert_int_equal(ptc_store_version_delete(s, 2), PTC_OK);
    }
    assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL), PTC_OK);
    assert_int_equal(ptc_store_gc(s, NULL), PTC_OK);
    assert_false(dir_exists(e->dir, "packs/v2"));
    bufs_free(e->la, got);
    ptc_store_close(s);
}

static void fault_env_init(fault_env *e)
{
    e->dir = mktmp();
    /* one layer: every allocation point of a save is still there, fewer
     * times over (the loop stays short under the sanitizers) */
    model_init_layers(&e->a, 1, false);
    model_init_layers(&e->b, 1, false);
    /* b: two tensors changed, the rest as in a */
    e->b.g[find(&e->b, "model.layers.0.up.weight")][0] ^= 1;
    e->b.g[find(&e->b, "head.weight.exp_avg")][7] ^= 1;
    e->la = layout_of(&e->a, "dp=2,tp=2,pp=1,zero=1");
    e->lb = layout_of(&e->b, "dp=2,tp=2,pp=1,zero=1");
    e->ba = bufs_all(e->la, &e->a);
    e->bb = bufs_all(e->lb, &e->b);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, e->dir, PTC_STORE_CREATE), PTC_OK);
    ptc_ckpt_record rec = {.step = 1};
    assert_int_equal(save_all(s, &e->a, e->la, e->ba, NULL, &rec, NULL), PTC_OK);
    ptc_store_close(s);
}

static void fault_env_free(fault_env *e)
{
    bufs_free(e->la, e->ba);
    bufs_free(e->lb, e->bb);
    ptc_layout_destroy(e->la);
    ptc_layout_destroy(e->lb);
    model_free(&e->a);
    model_free(&e->b);
    rmrf(e->dir);
    free(e->dir);
}

/* PTC_TEST_PART=K/N: this run fails fault points K, K + N, K + 2N, ... only (ctest runs
 * the N parts side by side: cmake/tests.cmake); unset, every point.
 * ctest-parts: test_fault_save_alloc 4 */
static void fault_part(long *first, long *step)
{
    const char *p = getenv("PTC_TEST_PART");
    *first = *step = 1;
    if (p)
        assert_true(sscanf(p, "%ld/%ld", first, step) == 2 && *step >= 1 && *first >= 1 &&
                    *first <= *step);
}

static void fault_loop(bool writes)
{
    fault_env e;
    fault_env_init(&e);
    long n, first, step, points = 0;
    fault_part(&first, &step);
    for (n = first;; n += step) {
        if (writes)
            ptc_fault_write_at(n, ENOSPC);
        else
            ptc_fault_alloc_at(n);
        int rc = fault_save(&e);
        long count = writes ? ptc_fault_write_count() : ptc_fault_alloc_count();
        ptc_fault_write_at(0, 0);
        ptc_fault_alloc_at(0);
        fault_check(&e, rc, n);
        if (count < n) { /* the fault did not fire: every point has been covered */
            assert_int_equal(rc, PTC_OK);
            points = count;
            break;
        }
        if (rc == PTC_OK)
            fail_msg("fault %ld fired but the save succeeded", n);
    }
    print_message("save: failed each of %ld %s in turn (every %ld from %ld)\n", points,
                  writes ? "writes" : "allocations", step, first);
    assert_true(points > (writes ? 4 : 30));
    fault_env_free(&e);
}

static void test_fault_save_alloc(void **state)
{
    (void)state;
    fault_loop(false);
}

static void test_fault_save_write(void **state)
{
    (void)state;
    fault_loop(true);
}

/* Every allocation of a load under another configuration fails in turn:
 * an error and nothing leaked, or the right bytes. */
static void test_fault_load_alloc(void **state)
{
    (void)state;
    fault_env e;
    fault_env_init(&e);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, e.dir, 0), PTC_OK);
    ptc_layout *l = layout_of(&e.a, "dp=1,tp=3,pp=1,zero=1");
    uint8_t **want = bufs_all(l, &e.a), **got = bufs_all(l, NULL);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = 2;
    long n;
    for (n = 1;; n++) {
        ptc_ckpt_record r;
        ptc_fault_alloc_at(n);
        int rc = load_all(s, 1, l, got, &o, &r);
        long count = ptc_fault_alloc_count();
        ptc_fault_alloc_at(0);
        if (rc == PTC_OK) {
            bufs_check(l, want, got, "load under faults");
            assert_int_equal(r.step, 1);
            ptc_ckpt_record_free(&r);
        } else {
            assert_null(r.config);
        }
        if (count < n) {
            assert_int_equal(rc, PTC_OK);
            break;
        }
        if (rc == PTC_OK)
            fail_msg("fault %ld fired but the load succeeded", n);
    }
    print_message("load: failed each of %ld allocations in turn\n", n - 1);
    assert_true(n > 10);
    bufs_free(l, want);
    bufs_free(l, got);
    ptc_layout_destroy(l);
    ptc_store_close(s);
    fault_env_free(&e);
}

int main(void)
{
    /* PTC_TEST_FILTER / PTC_TEST_SKIP (cmocka's globs): ctest runs each fault loop as a
     * test of its own beside the rest (cmake/tests.cmake); under ASan they take minutes */
    if (getenv("PTC_TEST_FILTER"))
        cmocka_set_test_filter(getenv("PTC_TEST_FILTER"));
    if (getenv("PTC_TEST_SKIP"))
        cmocka_set_skip_filter(getenv("PTC_TEST_SKIP"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_roundtrip),  cmocka_unit_test(test_record_rejects),
        cmocka_unit_test(test_roundtrip_zero1_8), cmocka_unit_test(test_roundtrip_zstd_tp3),
        cmocka_unit_test(test_alias_and_reuse),   cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fault_save_alloc),  cmocka_unit_test(test_fault_save_write),
        cmocka_unit_test(test_fault_load_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
