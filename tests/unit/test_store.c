/* Store tests: byte-exact round trips (several dtypes, raw and zstd, boxes
 * across block and shard boundaries against a brute-force reference),
 * aliases and cross-version references, pack-only writers, checksum
 * corruption, the writer lock across processes, gc, fault injection of every
 * allocation and write during write+commit, and kill -9 of a writer. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "kernels/pack.h"
#include "ptc/store.h"

/* ---- helpers ------------------------------------------------------------------- */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(p);
}

static void rmrf(const char *p)
{
    nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static char *mktmp(void)
{
    char *t = strdup("/tmp/ptc_store_test_XXXXXX");
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

/* A test tensor: its global bytes and how it is laid out on the ranks. */
typedef struct tmodel {
    const char *name;
    ptc_dtype dt;
    int ndim;
    int64_t shape[PTC_MAX_DIMS];
    int split_dim; /* -1: replicated, rank 0 stores, others alias */
    size_t es, nbytes;
    uint8_t *g;
} tmodel;

static void tm_init(tmodel *t, const char *name, ptc_dtype dt, int ndim, const int64_t *shape,
                    int split_dim, bool compressible, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dt = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->split_dim = split_dim;
    t->es = ptc_dtype_size(dt);
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    t->nbytes = n * t->es;
    t->g = malloc(t->nbytes ? t->nbytes : 1);
    assert_non_null(t->g);
    for (size_t i = 0; i < t->nbytes; i++)
        t->g[i] = compressible ? (uint8_t)((i / 97) % 7) : (uint8_t)mix(seed * 1000003 + i);
}

static void tm_free(tmodel *t)
{
    free(t->g);
}

/* Rank @p r's shard: a box (split along split_dim) with row-major local layout. */
static void tm_shard(const tmodel *t, int world, int r, ptc_piece *pc, int64_t *lshape,
                     uint8_t **buf, size_t *len)
{
    memset(pc, 0, sizeof *pc);
    ptc_box_full(&pc->box, t->ndim, t->shape);
    if (t->split_dim >= 0)
        ptc_split(t->shape[t->split_dim], world, r, &pc->box.lo[t->split_dim],
                  &pc->box.hi[t->split_dim]);
    for (int d = 0; d < t->ndim; d++)
        lshape[d] = pc->box.hi[d] - pc->box.lo[d];
    ptc_strides_row_major(t->ndim, lshape, pc->local_stride);
    size_t n = (size_t)ptc_box_volume(&pc->box);
    *len = n * t->es;
    *buf = malloc(*len ? *len : 1);
    assert_non_null(*buf);
    int64_t gst[PTC_MAX_DIMS];
    ptc_strides_row_major(t->ndim, t->shape, gst);
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++)
        off += pc->box.lo[d] * gst[d];
    if (n)
        assert_int_equal(ptc_pack_copy_ref(*buf, NULL, t->g + off * (int64_t)t->es, gst, lshape,
                                           t->ndim, t->es),
                         PTC_OK);
}

/* Store @p t (tensor index @p idx) for ranks [r0, r1) of @p world. */
static int put_model(ptc_store_writer *w, const tmodel *t, uint32_t idx, int world, int r0,
                     int r1)
{
    for (int r = r0; r < r1; r++) {
        if (t->split_dim < 0 && r > 0) {
            int rc = ptc_store_shard_alias(w, idx, (uint32_t)r, 0);
            if (rc)
                return rc;
            continue;
        }
        ptc_piece pc;
        int64_t ls[PTC_MAX_DIMS];
        uint8_t *buf;
        size_t len;
        tm_shard(t, world, r, &pc, ls, &buf, &len);
        /* stream in odd-sized chunks */
        int rc = ptc_store_shard_begin(w, idx, (uint32_t)r, t->ndim, ls, &pc, 1);
        for (size_t o = 0; rc == 0 && o < len;) {
            size_t n = len - o < 300007 ? len - o : 300007;
            rc = ptc_store_shard_write(w, (uint32_t)r, buf + o, n);
            o += n;
        }
        if (rc == 0)
            rc = ptc_store_shard_end(w, (uint32_t)r);
        free(buf);
        if (rc)
            return rc;
    }
    return 0;
}

/* Brute-force expected bytes of box @p b with destination strides @p ds. */
static void ref_box(const tmodel *t, const ptc_box *b, const int64_t *ds, uint8_t *out)
{
    int64_t gst[PTC_MAX_DIMS];
    ptc_strides_row_major(t->ndim, t->shape, gst);
    if (ptc_box_volume(b) == 0)
        return;
    int64_t idx[PTC_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++)
        idx[d] = b->lo[d];
    for (;;) {
        int64_t go = 0, dofs = 0;
        for (int d = 0; d < b->ndim; d++) {
            go += idx[d] * gst[d];
            dofs += (idx[d] - b->lo[d]) * ds[d];
        }
        memcpy(out + dofs * (int64_t)t->es, t->g + go * (int64_t)t->es, t->es);
        int d = b->ndim - 1;
        while (d >= 0 && ++idx[d] == b->hi[d]) {
            idx[d] = b->lo[d];
            d--;
        }
        if (d < 0)
            break;
    }
}

/* Read box @p b with padded, permuted destination strides and compare. */
static void check_box(ptc_store_reader *r, size_t ti, const tmodel *t, const ptc_box *b,
                      bool transpose)
{
    int64_t ext[PTC_MAX_DIMS], ds[PTC_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++)
        ext[d] = b->hi[d] - b->lo[d];
    ptc_strides_row_major(b->ndim, ext, ds);
    if (transpose && b->ndim >= 2) { /* column-major, with one element of padding */
        int64_t s = 1;
        for (int d = 0; d < b->ndim; d++) {
            ds[d] = s;
            s *= ext[d] + 1;
        }
    }
    size_t span = 1;
    for (int d = 0; d < b->ndim; d++)
        span += (size_t)((ext[d] > 0 ? ext[d] - 1 : 0) * ds[d]);
    size_t nb = span * t->es;
    uint8_t *got = malloc(nb), *want = malloc(nb);
    assert_non_null(got);
    assert_non_null(want);
    memset(got, 0xAB, nb);
    memset(want, 0xAB, nb);
    ref_box(t, b, ds, want);
    int rc = ptc_store_reader_read_box(r, ti, b, got, ds);
    if (rc)
        print_error("read_box: %s\n", ptc_last_error());
    assert_int_equal(rc, PTC_OK);
    assert_memory_equal(got, want, nb);
    free(got);
    free(want);
}

static void check_whole(ptc_store_reader *r, const tmodel *t)
{
    size_t ti;
    assert_int_equal(ptc_store_reader_find(r, t->name, strlen(t->name), &ti), PTC_OK);
    ptc_box b;
    ptc_box_full(&b, t->ndim, t->shape);
    check_box(r, ti, t, &b, false);
}

static ptc_store_write_options wopts(uint32_t world, unsigned codec)
{
    ptc_store_write_options o;
    memset(&o, 0, sizeof o);
    o.step = "step-7";
    o.config = "dp=1,tp=2,pp=1";
    o.rules = "match * tp=split(0)\n";
    o.world_size = world;
    o.codec = codec;
    o.level = codec ? 3 : 0;
    return o;
}

static void add(ptc_store_writer *w, const tmodel *t, uint32_t *idx)
{
    assert_int_equal(ptc_store_writer_add_tensor(w, t->name, strlen(t->name), t->dt, t->ndim,
                                                 t->shape, "tp=split(0)", idx),
                     PTC_OK);
}

/* Sorted "v<V>/rank-<R>.pack" entries under STORE/packs, joined by spaces. */
static void list_packs(const char *dir, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s/packs && find . -type f | sed 's|^\\./||' | sort | tr '\\n' ' '",
             dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    pclose(f);
}

static int count_dirs(const char *dir)
{
    char cmd[1024], buf[64];
    snprintf(cmd, sizeof cmd, "find %s/packs -mindepth 1 -type d | wc -l", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    pclose(f);
    return atoi(buf);
}

/* ---- round trips ------------------------------------------------------------------ */

typedef struct put_job {
    ptc_store_writer *w;
    const tmodel *t;
    uint32_t idx;
    int world, r0, r1, rc;
} put_job;

static void *put_thread(void *p)
{
    put_job *j = p;
    j->rc = put_model(j->w, j->t, j->idx, j->world, j->r0, j->r1);
    return NULL;
}

/* Several threads reading boxes from one reader at once. */
typedef struct read_job {
    ptc_store_reader *r;
    const tmodel *t;
    int seed;
    int bad;
} read_job;

static void *read_thread(void *p)
{
    read_job *j = p;
    const tmodel *t = j->t;
    uint8_t *got = malloc(t->nbytes), *want = malloc(t->nbytes);
    for (int it = 0; it < 20 && got && want; it++) {
        ptc_box b;
        b.ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) {
            int64_t a = (int64_t)(mix((uint64_t)(j->seed * 100 + it * 8 + d)) %
                                  (uint64_t)t->shape[d]);
            b.lo[d] = a;
            b.hi[d] = a + 1 + (int64_t)(mix((uint64_t)(j->seed + it + d)) %
                                        (uint64_t)(t->shape[d] - a));
        }
        int64_t ext[PTC_MAX_DIMS], ds[PTC_MAX_DIMS];
        for (int d = 0; d < b.ndim; d++)
            ext[d] = b.hi[d] - b.lo[d];
        ptc_strides_row_major(b.ndim, ext, ds);
        size_t nb = (size_t)ptc_box_volume(&b) * t->es;
        ref_box(t, &b, ds, want);
        if (ptc_store_reader_read_box(j->r, 0, &b, got, NULL) != PTC_OK ||
            memcmp(got, want, nb) != 0)
            j->bad++;
    }
    if (!got || !want)
        j->bad++;
    free(got);
    free(want);
    return NULL;
}

static void roundtrip(unsigned codec)
{
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    enum { W = 3, NT = 6 };
    tmodel t[NT];
    tm_init(&t[0], "model.layers.0.mlp.weight", PTC_DTYPE_F32, 2, (int64_t[]){700, 1200}, 0,
            false, 1);
    tm_init(&t[1], "emb \xc3\xa9 \"quoted\"/../x", PTC_DTYPE_BF16, 3, (int64_t[]){5, 600, 701},
            1, true, 2);
    tm_init(&t[2], "bias", PTC_DTYPE_F64, 1, (int64_t[]){131075}, -1, false, 3);
    tm_init(&t[3], "counts", PTC_DTYPE_I64, 2, (int64_t[]){2, 3}, 1, false, 4);
    tm_init(&t[4], "mask", PTC_DTYPE_U8, 1, (int64_t[]){2}, 0, true, 5); /* rank 2 empty */
    tm_init(&t[5], "scalar", PTC_DTYPE_F16, 0, (int64_t[]){1}, -1, false, 6);

    ptc_store_writer *w;
    ptc_store_write_options o = wopts(W, codec);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    assert_int_equal(ptc_store_writer_version(w), 1);
    assert_int_equal(ptc_store_writer_set_metadata(w, "format", "pt"), PTC_OK);
    assert_int_equal(ptc_store_writer_set_metadata(w, "format", "pt2"), PTC_OK);
    uint32_t idx[NT];
    for (int i = 0; i < NT; i++)
        add(w, &t[i], &idx[i]);
    /* the biggest tensor: one thread per rank, concurrently */
    pthread_t th[W];
    put_job jobs[W];
    for (int r = 0; r < W; r++) {
        jobs[r] = (put_job){w, &t[0], idx[0], W, r, r + 1, -1};
        assert_int_equal(pthread_create(&th[r], NULL, put_thread, &jobs[r]), 0);
    }
    for (int r = 0; r < W; r++) {
        pthread_join(th[r], NULL);
        assert_int_equal(jobs[r].rc, PTC_OK);
    }
    for (int i = 1; i < NT; i++)
        assert_int_equal(put_model(w, &t[i], idx[i], W, 0, W), PTC_OK);
    uint64_t v;
    assert_int_equal(ptc_store_writer_commit(w, &v), PTC_OK);
    assert_int_equal(v, 1);
    ptc_store_writer_destroy(w);

    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 0), PTC_OK);
    const ptc_version_info *vi = ptc_store_reader_version(r);
    assert_int_equal(vi->version, 1);
    assert_string_equal(vi->step, "step-7");
    assert_string_equal(vi->config, "dp=1,tp=2,pp=1");
    assert_string_equal(ptc_store_reader_metadata(r, "format"), "pt2");
    assert_null(ptc_store_reader_metadata(r, "nope"));
    uint64_t bytes = 0;
    for (int i = 0; i < NT; i++)
        bytes += t[i].nbytes;
    assert_int_equal(vi->bytes, bytes);
    assert_int_equal(ptc_store_reader_tensor_count(r), NT);
    for (int i = 0; i < NT; i++) {
        ptc_store_tensor ti;
        assert_int_equal(ptc_store_reader_tensor(r, (size_t)i, &ti), PTC_OK);
        assert_string_equal(ti.name, t[i].name);
        assert_int_equal(ti.dtype, t[i].dt);
        assert_int_equal(ti.ndim, t[i].ndim);
        assert_int_equal(ti.nshards, W);
        check_whole(r, &t[i]);
        /* each stored shard back byte for byte */
        for (int rk = 0; rk < W; rk++) {
            ptc_piece pc;
            int64_t ls[PTC_MAX_DIMS];
            uint8_t *want, *got;
            size_t len;
            tm_shard(&t[i], W, t[i].split_dim < 0 ? 0 : rk, &pc, ls, &want, &len);
            got = malloc(len ? len : 1);
            assert_int_equal(ptc_store_reader_read_shard(r, (size_t)i, (uint32_t)rk, got, len),
                             PTC_OK);
            assert_memory_equal(got, want, len);
            ptc_shard_info si;
            assert_int_equal(ptc_store_reader_shard(r, (size_t)i, (uint32_t)rk, &si), PTC_OK);
            assert_int_equal(si.alias, t[i].split_dim < 0 && rk > 0);
            assert_int_equal(si.npieces, 1);
            assert_true(ptc_box_equal(&si.pieces[0].box, &pc.box));
            assert_int_equal(si.raw_length, len);
            if (codec == PTC_STORE_CODEC_NONE)
                assert_int_equal(si.length, len);
            free(want);
            free(got);
        }
    }
    /* compressible data shrinks with zstd; random data is stored raw */
    ptc_shard_info si;
    assert_int_equal(ptc_store_reader_shard(r, 1, 0, &si), PTC_OK);
    if (codec == PTC_STORE_CODEC_ZSTD)
        assert_true(si.length < si.raw_length / 4);
    assert_int_equal(ptc_store_reader_shard(r, 0, 1, &si), PTC_OK);
    assert_int_equal(si.length, si.raw_length);
    assert_true(si.nblocks >= 2);

    /* random boxes: inside one block, across blocks, across shards */
    uint64_t seed = 42;
    for (int it = 0; it < 60; it++) {
        const tmodel *m = &t[it % 4];
        ptc_box b;
        b.ndim = m->ndim;
        for (int d = 0; d < m->ndim; d++) {
            int64_t a = (int64_t)(mix(seed++) % (uint64_t)(m->shape[d] + 1));
            int64_t c = (int64_t)(mix(seed++) % (uint64_t)(m->shape[d] + 1));
            b.lo[d] = a < c ? a : c;
            b.hi[d] = a < c ? c : a;
            if (it % 3 == 0 && b.hi[d] - b.lo[d] > 4) /* thin boxes too */
                b.hi[d] = b.lo[d] + 3;
        }
        check_box(r, (size_t)(it % 4), m, &b, it % 2 == 1);
    }
    /* concurrent readers of one snapshot */
    pthread_t rt[4];
    read_job rj[4];
    for (int i = 0; i < 4; i++) {
        rj[i] = (read_job){r, &t[0], i + 1, 0};
        assert_int_equal(pthread_create(&rt[i], NULL, read_thread, &rj[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(rt[i], NULL);
        assert_int_equal(rj[i].bad, 0);
    }
    /* errors: box outside, missing rank */
    ptc_box bad;
    ptc_box_full(&bad, 2, t[0].shape);
    bad.hi[0]++;
    uint8_t tiny[8];
    assert_int_equal(ptc_store_reader_read_box(r, 0, &bad, tiny, NULL), PTC_E_RANGE);
    assert_int_equal(ptc_store_reader_shard(r, 0, 9, &si), PTC_E_NOTFOUND);
    size_t ti;
    assert_int_equal(ptc_store_reader_find(r, "absent", 6, &ti), PTC_E_NOTFOUND);
    assert_int_equal(ptc_store_verify(s, 0, NULL, NULL), PTC_OK);
    ptc_store_reader_close(r);
    ptc_store_close(s);
    for (int i = 0; i < NT; i++)
        tm_free(&t[i]);
    rmrf(dir);
    free(dir);
}

static void test_roundtrip_raw(void **state)
{
    (void)state;
    roundtrip(PTC_STORE_CODEC_NONE);
}

static void test_roundtrip_zstd(void **state)
{
    (void)state;
    roundtrip(PTC_STORE_CODEC_ZSTD);
}

/* A zero-sharded tensor: each rank holds a flat range as several pieces of
 * a 1-d local buffer; reading any box stitches pieces of several ranks. */
static void test_flat_pieces(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    tmodel t;
    tm_init(&t, "opt.exp_avg", PTC_DTYPE_F32, 3, (int64_t[]){7, 130, 300}, 0, false, 9);
    const int W = 4;
    int64_t vol = 7 * 130 * 300;
    ptc_store_writer *w;
    ptc_store_write_options o = wopts((uint32_t)W, PTC_STORE_CODEC_ZSTD);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    uint32_t idx;
    add(w, &t, &idx);
    for (int r = 0; r < W; r++) {
        int64_t a, b;
        ptc_split(vol, W, r, &a, &b);
        ptc_box boxes[2 * PTC_MAX_DIMS];
        size_t nb;
        assert_int_equal(ptc_flat_to_boxes(boxes, &nb, 3, t.shape, a, b), PTC_OK);
        assert_true(nb > 1);
        ptc_piece pcs[2 * PTC_MAX_DIMS];
        int64_t off = 0;
        for (size_t i = 0; i < nb; i++) {
            memset(&pcs[i], 0, sizeof pcs[i]);
            pcs[i].box = boxes[i];
            pcs[i].local_offset = off;
            int64_t ext[3];
            for (int d = 0; d < 3; d++)
                ext[d] = boxes[i].hi[d] - boxes[i].lo[d];
            ptc_strides_row_major(3, ext, pcs[i].local_stride);
            off += ptc_box_volume(&boxes[i]);
        }
        int64_t ls = b - a;
        assert_int_equal(ptc_store_shard_put(w, idx, (uint32_t)r, 1, &ls, pcs, nb,
                                             t.g + a * 4, (size_t)ls * 4),
                         PTC_OK);
    }
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 1), PTC_OK);
    check_whole(r, &t);
    ptc_box b = {3, {1, 5, 17}, {6, 120, 299}};
    check_box(r, 0, &t, &b, true);
    ptc_box c = {3, {3, 64, 0}, {4, 66, 300}};
    check_box(r, 0, &t, &c, false);
    ptc_store_reader_close(r);
    ptc_store_close(s);
    tm_free(&t);
    rmrf(dir);
    free(dir);
}

/* ---- references, aliases, gc --------------------------------------------------- */

static void test_reuse_alias_gc(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    tmodel a, b, b2;
    tm_init(&a, "a", PTC_DTYPE_F32, 2, (int64_t[]){600, 900}, 1, false, 11);
    tm_init(&b, "b", PTC_DTYPE_F32, 1, (int64_t[]){1000}, -1, false, 12);
    tm_init(&b2, "b", PTC_DTYPE_F32, 1, (int64_t[]){1000}, -1, false, 13);
    ptc_store_writer *w;
    ptc_store_write_options o = wopts(2, PTC_STORE_CODEC_NONE);
    uint32_t ia, ib;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    add(w, &a, &ia);
    add(w, &b, &ib);
    assert_int_equal(put_model(w, &a, ia, 2, 0, 2), PTC_OK);
    assert_int_equal(put_model(w, &b, ib, 2, 0, 2), PTC_OK);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);

    /* version 2: "a" referenced (crossing ranks: v2 rank 0 gets v1 rank 1's
     * shard is not the same box, so keep ranks), "b" new data */
    ptc_store_reader *r1;
    assert_int_equal(ptc_store_reader_open(&r1, s, 1), PTC_OK);
    o.parent = 1;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    assert_int_equal(ptc_store_writer_version(w), 2);
    add(w, &b2, &ib); /* order differs from v1 */
    add(w, &a, &ia);
    size_t fa;
    assert_int_equal(ptc_store_reader_find(r1, "a", 1, &fa), PTC_OK);
    assert_int_equal(ptc_store_shard_reuse(w, ia, 0, r1, fa, 0), PTC_OK);
    assert_int_equal(ptc_store_shard_reuse(w, ia, 1, r1, fa, 1), PTC_OK);
    assert_int_equal(ptc_store_shard_reuse(w, ib, 1, r1, 5, 1), PTC_E_RANGE);
    assert_int_equal(put_model(w, &b2, ib, 2, 0, 2), PTC_OK);
    ptc_store_reader_close(r1);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);

    ptc_store_reader *r2;
    assert_int_equal(ptc_store_reader_open(&r2, s, 0), PTC_OK);
    assert_int_equal(ptc_store_reader_version(r2)->parent, 1);
    check_whole(r2, &a);
    check_whole(r2, &b2);
    ptc_shard_info si;
    assert_int_equal(ptc_store_reader_shard(r2, ia, 1, &si), PTC_OK);
    assert_int_equal(si.pack_version, 1);
    assert_int_equal(ptc_store_reader_version(r2)->stored_bytes, 4000);
    ptc_store_reader_close(r2);

    char packs[4096];
    ptc_store_gc_stats st;
    assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 0);
    list_packs(dir, packs, sizeof packs);
    assert_string_equal(packs, "v1/rank-0.pack v1/rank-1.pack v2/rank-0.pack ");

    /* delete v1: its rank-0/rank-1 packs still hold "a" for v2 ... but v1's
     * copy of "b" lives in v1/rank-0.pack too, which stays (a file is kept
     * whole while any extent in it is referenced) */
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_OK);
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_E_NOTFOUND);
    assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 0);
    assert_int_equal(ptc_store_reader_open(&r2, s, 1), PTC_E_NOTFOUND);
    assert_int_equal(ptc_store_reader_open(&r2, s, 2), PTC_OK);
    check_whole(r2, &a);
    ptc_store_reader_close(r2);
    assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL), PTC_OK);

    /* a new v3 that rewrites everything; deleting v2 frees all older packs */
    o.parent = 2;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    add(w, &a, &ia);
    assert_int_equal(put_model(w, &a, ia, 2, 0, 2), PTC_OK);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);
    assert_int_equal(ptc_store_version_delete(s, 2), PTC_OK);
    assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 3);
    assert_int_equal(st.dirs_removed, 2);
    assert_true(st.bytes_removed > 600 * 900 * 4);
    list_packs(dir, packs, sizeof packs);
    assert_string_equal(packs, "v3/rank-0.pack v3/rank-1.pack ");

    /* versions listing */
    ptc_version_info *vl;
    size_t nv;
    assert_int_equal(ptc_store_versions(s, &vl, &nv), PTC_OK);
    assert_int_equal(nv, 1);
    assert_int_equal(vl[0].version, 3);
    assert_int_equal(vl[0].tensor_count, 1);
    ptc_store_versions_free(vl, nv);
    ptc_store_close(s);
    tm_free(&a);
    tm_free(&b);
    tm_free(&b2);
    rmrf(dir);
    free(dir);
}

static void test_writer_errors(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_store_writer *w;
    ptc_store_write_options o = wopts(2, PTC_STORE_CODEC_NONE);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    const int64_t shape[1] = {10};
    uint32_t i0;
    assert_int_equal(ptc_store_writer_add_tensor(w, "x", 1, PTC_DTYPE_U8, 1, shape, NULL, &i0),
                     PTC_OK);
    assert_int_equal(ptc_store_writer_add_tensor(w, "", 0, PTC_DTYPE_U8, 1, shape, NULL, NULL),
                     PTC_E_INVAL);
    assert_int_equal(ptc_store_writer_add_tensor(w, "\xff", 1, PTC_DTYPE_U8, 1, shape, NULL, NULL),
                     PTC_E_INVAL);
    char longname[PTC_STORE_MAX_NAME + 2];
    memset(longname, 'n', sizeof longname);
    assert_int_equal(ptc_store_writer_add_tensor(w, longname, PTC_STORE_MAX_NAME, PTC_DTYPE_U8, 1,
                                                 shape, NULL, NULL),
                     PTC_OK);
    assert_int_equal(ptc_store_writer_add_tensor(w, longname, PTC_STORE_MAX_NAME + 1,
                                                 PTC_DTYPE_U8, 1, shape, NULL, NULL),
                     PTC_E_INVAL);
    ptc_piece pc;
    memset(&pc, 0, sizeof pc);
    pc.box.ndim = 1;
    pc.box.hi[0] = 11; /* outside the tensor */
    pc.local_stride[0] = 1;
    int64_t ls = 11;
    uint8_t data[16] = {0};
    assert_int_equal(ptc_store_shard_begin(w, i0, 0, 1, &ls, &pc, 1), PTC_E_INVAL);
    pc.box.hi[0] = 10;
    ls = 9; /* local tensor too small for the piece */
    assert_int_equal(ptc_store_shard_begin(w, i0, 0, 1, &ls, &pc, 1), PTC_E_INVAL);
    ls = 10;
    assert_int_equal(ptc_store_shard_begin(w, i0, 5, 1, &ls, &pc, 1), PTC_E_INVAL);
    assert_int_equal(ptc_store_shard_begin(w, i0, 0, 1, &ls, &pc, 1), PTC_OK);
    assert_int_equal(ptc_store_shard_write(w, 0, data, 11), PTC_E_INVAL);
    ptc_store_writer_destroy(w); /* abort: files removed */
    char packs[256];
    list_packs(dir, packs, sizeof packs);
    assert_string_equal(packs, "");

    /* short shard; alias without owner; duplicate names */
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    assert_int_equal(ptc_store_writer_add_tensor(w, "x", 1, PTC_DTYPE_U8, 1, shape, NULL, &i0),
                     PTC_OK);
    assert_int_equal(ptc_store_shard_begin(w, i0, 0, 1, &ls, &pc, 1), PTC_OK);
    assert_int_equal(ptc_store_shard_write(w, 0, data, 9), PTC_OK);
    assert_int_equal(ptc_store_shard_end(w, 0), PTC_E_INVAL);
    ptc_store_writer_destroy(w);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    assert_int_equal(ptc_store_writer_add_tensor(w, "x", 1, PTC_DTYPE_U8, 1, shape, NULL, &i0),
                     PTC_OK);
    assert_int_equal(ptc_store_shard_alias(w, i0, 1, 0), PTC_OK);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_E_INVAL);
    ptc_store_writer_destroy(w);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    assert_int_equal(ptc_store_writer_add_tensor(w, "x", 1, PTC_DTYPE_U8, 1, shape, NULL, &i0),
                     PTC_OK);
    assert_int_equal(ptc_store_writer_add_tensor(w, "x", 1, PTC_DTYPE_U8, 1, shape, NULL, NULL),
                     PTC_OK);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_E_EXISTS);
    ptc_store_writer_destroy(w);
    uint64_t latest;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    assert_int_equal(latest, 0);
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 0), PTC_E_NOTFOUND);
    ptc_store_close(s);

    /* read-only: no writers, no gc */
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_READONLY), PTC_OK);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_E_INVAL);
    assert_null(w);
    assert_int_equal(ptc_store_gc(s, NULL), PTC_E_INVAL);
    ptc_store_close(s);
    rmrf(dir);
    free(dir);
}

/* ---- not a store, missing version ----------------------------------------------- */

static void test_not_a_store(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = (ptc_store *)1;
    assert_int_equal(ptc_store_open(&s, dir, 0), PTC_E_NOTFOUND);
    assert_null(s);
    assert_non_null(strstr(ptc_last_error(), dir));
    assert_non_null(strstr(ptc_last_error(), "not a ptc store"));
    char sub[512];
    snprintf(sub, sizeof sub, "%s/nope", dir);
    assert_int_equal(ptc_store_open(&s, sub, PTC_STORE_READONLY), PTC_E_NOTFOUND);
    assert_non_null(strstr(ptc_last_error(), sub));
    /* created, then a missing version */
    assert_int_equal(ptc_store_open(&s, sub, PTC_STORE_CREATE), PTC_OK);
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 99), PTC_E_NOTFOUND);
    assert_non_null(strstr(ptc_last_error(), "version 99"));
    assert_int_equal(ptc_store_verify(s, 3, NULL, NULL), PTC_E_NOTFOUND);
    char *json;
    assert_int_equal(ptc_store_info_json(s, 0, 0, &json), PTC_OK);
    json_t *j = json_loads(json, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "versions")), 0);
    json_decref(j);
    ptc_store_free(json);
    ptc_store_close(s);
    /* reopen without CREATE works now */
    assert_int_equal(ptc_store_open(&s, sub, 0), PTC_OK);
    ptc_store_close(s);
    rmrf(dir);
    free(dir);
}

/* ---- corruption ---------------------------------------------------------------------- */

/* A store of one 1024 x 700 F32 tensor saved by 2 ranks (rank 1: rows 512
 * on, 2800 bytes each, in 2 blocks: its second starts 1376 bytes into its
 * row 374); returns the pack offset of rank 1's second block. */
static int64_t victim_store(unsigned codec, char **dir, ptc_store **s, tmodel *t)
{
    *dir = mktmp();
    assert_int_equal(ptc_store_open(s, *dir, PTC_STORE_CREATE), PTC_OK);
    tm_init(t, "victim.weight", PTC_DTYPE_F32, 2, (int64_t[]){1024, 700}, 0, codec != 0, 21);
    ptc_store_writer *w;
    ptc_store_write_options o = wopts(2, codec);
    uint32_t idx;
    assert_int_equal(ptc_store_writer_begin(&w, *s, &o), PTC_OK);
    add(w, t, &idx);
    assert_int_equal(put_model(w, t, idx, 2, 0, 2), PTC_OK);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);

    /* where is rank 1's second block? from the info dump */
    char *json;
    assert_int_equal(ptc_store_info_json(*s, 0, PTC_STORE_INFO_BLOCKS, &json), PTC_OK);
    json_t *j = json_loads(json, 0, NULL);
    ptc_store_free(json);
    assert_non_null(j);
    json_t *sh = json_array_get(
        json_object_get(json_array_get(json_object_get(
                                           json_array_get(json_object_get(j, "versions"), 0),
                                           "tensors"),
                                       0),
                        "shards"),
        1);
    assert_int_equal(json_integer_value(json_object_get(sh, "rank")), 1);
    assert_string_equal(json_string_value(json_object_get(sh, "pack")), "packs/v1/rank-1.pack");
    json_t *blocks = json_object_get(sh, "blocks");
    assert_true(json_array_size(blocks) >= 2);
    int64_t off = json_integer_value(json_object_get(sh, "offset")) +
                  json_integer_value(json_object_get(json_array_get(blocks, 0), "length"));
    if (codec)
        assert_string_equal(json_string_value(json_object_get(json_array_get(blocks, 1), "codec")),
                            "zstd");
    json_decref(j);
    return off;
}

/* Flip one bit of byte @p off of rank 1's pack. */
static void flip_byte(const char *dir, int64_t off)
{
    char path[512];
    snprintf(path, sizeof path, "%s/packs/v1/rank-1.pack", dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t byte;
    assert_int_equal(pread(fd, &byte, 1, off), 1);
    byte ^= 0x10;
    assert_int_equal(pwrite(fd, &byte, 1, off), 1);
    close(fd);
}

static void corrupt(unsigned codec)
{
    char *dir;
    ptc_store *s;
    tmodel t;
    int64_t off = victim_store(codec, &dir, &s, &t) + 5;
    flip_byte(dir, off);

    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 1), PTC_OK);
    /* rank 0's half and rank 1's first block still read fine */
    ptc_box ok = {2, {0, 0}, {600, 700}};
    check_box(r, 0, &t, &ok, false);
    ptc_box b;
    ptc_box_full(&b, 2, t.shape);
    float *buf = malloc(t.nbytes);
    /* rows from 380 of rank 1 (its second block starts in row 374, the
     * flipped byte 5 bytes into it): that block's head lies outside the box
     * and is read only for the checksum, which still fails */
    ptc_box tail = {2, {512 + 380, 0}, {1024, 700}};
    assert_int_equal(ptc_store_reader_read_box(r, 0, &tail, buf, NULL), PTC_E_CHECKSUM);
    assert_int_equal(ptc_store_reader_read_box(r, 0, &b, buf, NULL), PTC_E_CHECKSUM);
    assert_non_null(strstr(ptc_last_error(), "victim.weight"));
    assert_non_null(strstr(ptc_last_error(), "rank 1"));
    assert_non_null(strstr(ptc_last_error(), "rank-1.pack"));
    char want[64];
    snprintf(want, sizeof want, "byte offset %lld", (long long)(off - 5));
    assert_non_null(strstr(ptc_last_error(), want));
    ptc_store_reader_close(r);
    assert_int_equal(ptc_store_verify(s, 1, NULL, NULL), PTC_E_CHECKSUM);
    assert_non_null(strstr(ptc_last_error(), want));
    free(buf);
    ptc_store_close(s);
    tm_free(&t);
    rmrf(dir);
    free(dir);
}

static void test_corruption_raw(void **state)
{
    (void)state;
    corrupt(PTC_STORE_CODEC_NONE);
}

static void test_corruption_zstd(void **state)
{
    (void)state;
    corrupt(PTC_STORE_CODEC_ZSTD);
}

/* A flipped byte in a raw block, outside the bytes a read wants (read only
 * for the checksum): every way a read takes its bytes out of the block
 * still fails, and the bytes of the other blocks still read. */
static void test_corruption_outside(void **state)
{
    (void)state;
    char *dir;
    ptc_store *s;
    tmodel t;
    /* 6 bytes before rank 1's second block: element 342 of its row 374
     * (global 886), whose elements 0-343 lie in its first block */
    int64_t blk1 = victim_store(PTC_STORE_CODEC_NONE, &dir, &s, &t);
    flip_byte(dir, blk1 - 6);
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 1), PTC_OK);
    float *buf = malloc(t.nbytes);
    const ptc_box bad[] = {
        {2, {612, 0}, {712, 700}}, /* whole rows before it: one preadv into place */
        {2, {612, 0}, {712, 400}}, /* 1600-byte rows of a strided source */
        {2, {612, 0}, {712, 100}}, /* 400-byte rows, under SCATTER_ROW_MIN */
        {2, {886, 0}, {887, 342}}, /* its row, up to it */
        {2, {886, 343}, {887, 700}}, /* and from the element after it */
    };
    char want[64];
    snprintf(want, sizeof want, "block 0 at byte offset %lld",
             (long long)(blk1 - (int64_t)PTC_STORE_BLOCK_SIZE));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(ptc_store_reader_read_box(r, 0, &bad[i], buf, NULL), PTC_E_CHECKSUM);
        assert_non_null(strstr(ptc_last_error(), want));
    }
    /* rank 0, and rank 1's second block, whole or in part */
    const ptc_box ok[] = {
        {2, {0, 0}, {512, 700}},     {2, {887, 0}, {1024, 700}},
        {2, {887, 100}, {1024, 500}}, {2, {887, 300}, {1024, 400}},
        {2, {886, 344}, {887, 700}},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        check_box(r, 0, &t, &ok[i], i == 3);
    ptc_store_reader_close(r);
    free(buf);
    ptc_store_close(s);
    tm_free(&t);
    rmrf(dir);
    free(dir);
}

/* ---- pack-only writers ------------------------------------------------------------------ */

static void test_pack_only(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    tmodel t, rep;
    tm_init(&t, "w", PTC_DTYPE_F16, 2, (int64_t[]){1500, 800}, 0, false, 31);
    tm_init(&rep, "r", PTC_DTYPE_F32, 1, (int64_t[]){77}, -1, false, 32);
    ptc_store_write_options o = wopts(4, PTC_STORE_CODEC_ZSTD);
    ptc_store_writer *w, *p;
    uint32_t it, ir;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    uint64_t v = ptc_store_writer_version(w);
    const uint32_t mine[2] = {2, 3};
    assert_int_equal(ptc_store_writer_begin_pack(&p, s, v, &o, mine, 2), PTC_OK);
    add(w, &t, &it);
    add(w, &rep, &ir);
    add(p, &t, &it);
    add(p, &rep, &ir);
    assert_int_equal(put_model(w, &t, it, 4, 0, 2), PTC_OK);
    assert_int_equal(put_model(w, &rep, ir, 4, 0, 2), PTC_OK);
    assert_int_equal(put_model(p, &t, it, 4, 2, 4), PTC_OK);
    assert_int_equal(put_model(p, &rep, ir, 4, 2, 4), PTC_OK); /* aliases of rank 0 */
    assert_int_equal(put_model(p, &t, it, 4, 0, 1), PTC_E_INVAL); /* not its rank */
    void *buf;
    size_t len;
    assert_int_equal(ptc_store_writer_export(p, &buf, &len), PTC_OK);
    assert_int_equal(ptc_store_writer_commit(p, NULL), PTC_E_INVAL);
    ptc_store_writer_destroy(p);
    /* a corrupt buffer is rejected, whatever byte is damaged */
    uint8_t *bad = malloc(len);
    for (size_t i = 0; i < len; i += 7) {
        memcpy(bad, buf, len);
        bad[i] ^= 0xff;
        int rc = ptc_store_writer_import(w, bad, len);
        (void)rc; /* some flips (hash bytes) still parse; never crash */
    }
    free(bad);
    ptc_store_writer_destroy(w);
    /* start over: the imports above may have been accepted */
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    assert_int_equal(ptc_store_writer_version(w), v);
    /* begin removed the stale v1 files of the pack-only writer; rewrite */
    assert_int_equal(ptc_store_writer_begin_pack(&p, s, v, &o, mine, 2), PTC_OK);
    add(w, &t, &it);
    add(w, &rep, &ir);
    add(p, &t, &it);
    add(p, &rep, &ir);
    assert_int_equal(put_model(p, &t, it, 4, 2, 4), PTC_OK);
    assert_int_equal(put_model(p, &rep, ir, 4, 2, 4), PTC_OK);
    ptc_store_free(buf);
    assert_int_equal(ptc_store_writer_export(p, &buf, &len), PTC_OK);
    ptc_store_writer_destroy(p);
    assert_int_equal(put_model(w, &t, it, 4, 0, 2), PTC_OK);
    assert_int_equal(put_model(w, &rep, ir, 4, 0, 2), PTC_OK);
    assert_int_equal(ptc_store_writer_import(w, buf, len - 1), PTC_E_FORMAT);
    assert_int_equal(ptc_store_writer_import(w, buf, len), PTC_OK);
    ptc_store_free(buf);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, v), PTC_OK);
    check_whole(r, &t);
    check_whole(r, &rep);
    ptc_shard_info si;
    assert_int_equal(ptc_store_reader_shard(r, it, 3, &si), PTC_OK);
    assert_int_equal(si.pack_rank, 3);
    assert_int_equal(ptc_store_reader_shard(r, ir, 3, &si), PTC_OK);
    assert_true(si.alias);
    assert_int_equal(si.owner_rank, 0);
    ptc_store_reader_close(r);
    assert_int_equal(ptc_store_verify(s, v, NULL, NULL), PTC_OK);
    ptc_store_close(s);
    tm_free(&t);
    tm_free(&rep);
    rmrf(dir);
    free(dir);
}

/* ---- the writer lock across processes ---------------------------------------------------- */

static void test_writer_lock(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_store_close(s);
    int up[2], down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        ptc_store *cs;
        ptc_store_writer *w;
        ptc_store_write_options o = wopts(1, 0);
        char ok = 'k';
        if (ptc_store_open(&cs, dir, 0) || ptc_store_writer_begin(&w, cs, &o))
            ok = 'x';
        if (write(up[1], &ok, 1) != 1)
            _exit(3);
        char c;
        if (read(down[0], &c, 1) < 0)
            _exit(3);
        _exit(ok == 'k' ? 0 : 2);
    }
    close(up[1]);
    close(down[0]);
    char c = 0;
    assert_int_equal(read(up[0], &c, 1), 1);
    assert_int_equal(c, 'k');
    assert_int_equal(ptc_store_open(&s, dir, 0), PTC_OK);
    assert_int_equal(ptc_store_set_lock_timeout(s, 0), PTC_OK); /* fail at once */
    ptc_store_writer *w;
    ptc_store_write_options o = wopts(1, 0);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_E_BUSY);
    char want[64];
    snprintf(want, sizeof want, "locked by another process (pid %ld)", (long)pid);
    assert_non_null(strstr(ptc_last_error(), want));
    assert_int_equal(ptc_store_gc(s, NULL), PTC_E_BUSY);
    assert_int_equal(write(down[1], "x", 1), 1);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    /* the same process cannot take it twice either */
    ptc_store_writer *w2;
    assert_int_equal(ptc_store_writer_begin(&w2, s, &o), PTC_E_BUSY);
    ptc_store_writer_destroy(w);
    assert_int_equal(ptc_store_writer_begin(&w2, s, &o), PTC_OK);
    ptc_store_writer_destroy(w2);
    close(up[0]);
    close(down[1]);
    ptc_store_close(s);
    rmrf(dir);
    free(dir);
}

/* ---- fault injection ------------------------------------------------------------------------ */

static tmodel fa, fb;

/* Version 1 of the fault-injection store. */
static void fault_setup(const char *dir)
{
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_store_writer *w;
    ptc_store_write_options o = wopts(2, PTC_STORE_CODEC_ZSTD);
    uint32_t ia, ib;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    add(w, &fa, &ia);
    add(w, &fb, &ib);
    assert_int_equal(put_model(w, &fa, ia, 2, 0, 2), PTC_OK);
    assert_int_equal(put_model(w, &fb, ib, 2, 0, 2), PTC_OK);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);
    ptc_store_close(s);
}

/* Open, write version 2 (new data, zstd, an alias, a reference to v1,
 * metadata), commit, close: everything a fault may hit. */
static int fault_write(const char *dir)
{
    ptc_store *s;
    int rc = ptc_store_open(&s, dir, 0);
    if (rc)
        return rc;
    ptc_store_reader *r1 = NULL;
    ptc_store_writer *w = NULL;
    ptc_store_write_options o = wopts(2, PTC_STORE_CODEC_ZSTD);
    o.parent = 1;
    uint32_t ia, ib;
    size_t fa_idx;
    if ((rc = ptc_store_reader_open(&r1, s, 1)) || (rc = ptc_store_writer_begin(&w, s, &o)) ||
        (rc = ptc_store_writer_set_metadata(w, "k", "v")) ||
        (rc = ptc_store_writer_add_tensor(w, fb.name, strlen(fb.name), fb.dt, fb.ndim, fb.shape,
                                          "p", &ib)) ||
        (rc = ptc_store_writer_add_tensor(w, fa.name, strlen(fa.name), fa.dt, fa.ndim, fa.shape,
                                          "p", &ia)) ||
        (rc = ptc_store_reader_find(r1, fa.name, strlen(fa.name), &fa_idx)) ||
        (rc = ptc_store_shard_reuse(w, ia, 0, r1, fa_idx, 0)) ||
        (rc = ptc_store_shard_reuse(w, ia, 1, r1, fa_idx, 1)) ||
        (rc = put_model(w, &fb, ib, 2, 0, 2)) || (rc = ptc_store_writer_commit(w, NULL)))
        goto out;
out:
    ptc_store_writer_destroy(w);
    ptc_store_reader_close(r1);
    ptc_store_close(s);
    return rc;
}

/* After any failure: v1 intact; v2 either absent or complete; gc leaves
 * exactly the referenced files. Resets the store to v1 only. */
static void fault_check(const char *dir, int rc, long n)
{
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, 0), PTC_OK);
    uint64_t latest;
    assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
    if (rc != PTC_OK && latest != 1)
        fail_msg("fault %ld: failed write (%d) left version %llu", n, rc,
                 (unsigned long long)latest);
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 1), PTC_OK);
    check_whole(r, &fa);
    check_whole(r, &fb);
    ptc_store_reader_close(r);
    assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL), PTC_OK);
    if (latest == 2) {
        assert_int_equal(ptc_store_reader_open(&r, s, 2), PTC_OK);
        check_whole(r, &fa);
        check_whole(r, &fb);
        assert_string_equal(ptc_store_reader_metadata(r, "k"), "v");
        ptc_store_reader_close(r);
        assert_int_equal(ptc_store_version_delete(s, 2), PTC_OK);
    }
    assert_int_equal(ptc_store_gc(s, NULL), PTC_OK);
    char packs[512];
    list_packs(dir, packs, sizeof packs);
    assert_string_equal(packs, "v1/rank-0.pack v1/rank-1.pack ");
    assert_int_equal(count_dirs(dir), 1);
    ptc_store_close(s);
}

static void fault_loop(bool writes)
{
    char *dir = mktmp();
    tm_init(&fa, "fa", PTC_DTYPE_F32, 2, (int64_t[]){300, 1000}, 0, false, 41);
    tm_init(&fb, "fb", PTC_DTYPE_I16, 2, (int64_t[]){9, 70000}, 1, true, 42);
    fault_setup(dir);
    long n;
    for (n = 1;; n++) {
        if (writes)
            ptc_fault_write_at(n, ENOSPC);
        else
            ptc_fault_alloc_at(n);
        int rc = fault_write(dir);
        long count = writes ? ptc_fault_write_count() : ptc_fault_alloc_count();
        ptc_fault_write_at(0, 0);
        ptc_fault_alloc_at(0);
        fault_check(dir, rc, n);
        if (count < n) { /* the fault did not fire: every point has been covered */
            assert_int_equal(rc, PTC_OK);
            break;
        }
        assert_int_not_equal(rc, PTC_OK);
    }
    print_message("%s: failed each of %ld points in turn\n", writes ? "writes" : "allocations",
                  n - 1);
    assert_true(n > (writes ? 5 : 30));
    tm_free(&fa);
    tm_free(&fb);
    rmrf(dir);
    free(dir);
}

static void test_fault_alloc(void **state)
{
    (void)state;
    fault_loop(false);
}

static void test_fault_write(void **state)
{
    (void)state;
    fault_loop(true);
}

/* ---- kill -9 of a writer -------------------------------------------------------------------- */

#define CRASH_MB 6

static void crash_child(const char *dir, int fd)
{
    ptc_store *s;
    ptc_store_writer *w;
    ptc_store_write_options o = wopts(2, PTC_STORE_CODEC_NONE);
    if (ptc_store_open(&s, dir, 0) || ptc_store_writer_begin(&w, s, &o))
        _exit(2);
    const int64_t shape[1] = {CRASH_MB << 20};
    uint32_t idx;
    if (ptc_store_writer_add_tensor(w, "big", 3, PTC_DTYPE_U8, 1, shape, NULL, &idx))
        _exit(2);
    uint8_t *chunk = malloc(1 << 20);
    for (int r = 0; r < 2; r++) {
        ptc_piece pc;
        memset(&pc, 0, sizeof pc);
        pc.box.ndim = 1;
        ptc_split(shape[0], 2, r, &pc.box.lo[0], &pc.box.hi[0]);
        pc.local_stride[0] = 1;
        int64_t ls = pc.box.hi[0] - pc.box.lo[0];
        if (ptc_store_shard_begin(w, idx, (uint32_t)r, 1, &ls, &pc, 1))
            _exit(2);
        for (int64_t o2 = 0; o2 < ls; o2 += 1 << 20) {
            memset(chunk, (int)(o2 >> 20) + r, 1 << 20);
            if (ptc_store_shard_write(w, (uint32_t)r, chunk, 1 << 20))
                _exit(2);
            if (write(fd, "b", 1) != 1)
                _exit(3);
        }
        if (ptc_store_shard_end(w, (uint32_t)r))
            _exit(2);
    }
    if (write(fd, "c", 1) != 1)
        _exit(3);
    if (ptc_store_writer_commit(w, NULL))
        _exit(2);
    if (write(fd, "d", 1) != 1)
        _exit(3);
    pause();
    _exit(0);
}

static void test_crash(void **state)
{
    (void)state;
    char *dir = mktmp();
    tm_init(&fa, "fa", PTC_DTYPE_F32, 2, (int64_t[]){300, 1000}, 0, false, 41);
    tm_init(&fb, "fb", PTC_DTYPE_I16, 2, (int64_t[]){9, 70000}, 1, true, 42);
    fault_setup(dir);
    /* kill after k progress bytes: k blocks written, all blocks, committed */
    const int kills[] = {1, 2, 4, CRASH_MB, CRASH_MB + 1, CRASH_MB + 2};
    /* the number the next commit takes: a kill right after "c" may land after the commit
     * (then that version is checked and deleted, and deleted numbers are not reused) */
    uint64_t next = 2;
    for (size_t i = 0; i < sizeof kills / sizeof kills[0]; i++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            crash_child(dir, p[1]);
        }
        close(p[1]);
        for (int k = 0; k < kills[i]; k++) {
            char c;
            assert_int_equal(read(p[0], &c, 1), 1);
        }
        kill(pid, SIGKILL);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));
        close(p[0]);
        ptc_store *s;
        assert_int_equal(ptc_store_open(&s, dir, 0), PTC_OK);
        uint64_t latest;
        assert_int_equal(ptc_store_latest(s, &latest), PTC_OK);
        if (kills[i] <= CRASH_MB)
            assert_int_equal(latest, 1);
        else if (kills[i] == CRASH_MB + 2)
            assert_int_equal(latest, next);
        if (latest > 1) {
            assert_int_equal(latest, next);
            ptc_store_reader *r;
            assert_int_equal(ptc_store_reader_open(&r, s, latest), PTC_OK);
            uint8_t *buf = malloc(3 << 20);
            assert_int_equal(ptc_store_reader_read_shard(r, 0, 1, buf, 3 << 20), PTC_OK);
            assert_int_equal(buf[(2 << 20) + 5], 3);
            free(buf);
            ptc_store_reader_close(r);
            assert_int_equal(ptc_store_verify(s, latest, NULL, NULL), PTC_OK);
            assert_int_equal(ptc_store_version_delete(s, latest), PTC_OK);
            next = latest + 1;
        } else {
            char vdir[512];
            struct stat sb;
            snprintf(vdir, sizeof vdir, "%s/packs/v%llu", dir, (unsigned long long)next);
            assert_int_equal(stat(vdir, &sb), 0); /* debris left by the crash */
        }
        ptc_store_close(s);
        fault_check(dir, PTC_E_IO, (long)i); /* v1 intact, gc leaves only v1 */
    }
    tm_free(&fa);
    tm_free(&fb);
    rmrf(dir);
    free(dir);
}

/* ---- info --------------------------------------------------------------------------------- */

static void test_info_json(void **state)
{
    (void)state;
    char *dir = mktmp();
    tm_init(&fa, "fa", PTC_DTYPE_F32, 2, (int64_t[]){300, 1000}, 0, false, 41);
    tm_init(&fb, "fb", PTC_DTYPE_I16, 2, (int64_t[]){9, 70000}, 1, true, 42);
    fault_setup(dir);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_READONLY), PTC_OK);
    char *txt;
    assert_int_equal(ptc_store_info_json(s, PTC_STORE_ALL_VERSIONS, 0, &txt), PTC_OK);
    json_error_t err;
    json_t *j = json_loads(txt, 0, &err);
    ptc_store_free(txt);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "latest")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "block_size")), 1 << 20);
    json_t *v = json_array_get(json_object_get(j, "versions"), 0);
    assert_string_equal(json_string_value(json_object_get(v, "step")), "step-7");
    assert_int_equal(json_integer_value(json_object_get(v, "tensor_count")), 2);
    json_t *t1 = json_array_get(json_object_get(v, "tensors"), 1);
    assert_string_equal(json_string_value(json_object_get(t1, "name")), "fb");
    assert_string_equal(json_string_value(json_object_get(t1, "dtype")), "I16");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(t1, "shape"), 1)), 70000);
    json_t *s0 = json_array_get(json_object_get(t1, "shards"), 0);
    assert_string_equal(json_string_value(json_object_get(s0, "codec")), "zstd");
    assert_int_equal(json_integer_value(json_object_get(s0, "raw_length")), 9 * 35000 * 2);
    assert_null(json_object_get(s0, "blocks"));
    json_decref(j);
    ptc_store_close(s);
    tm_free(&fa);
    tm_free(&fb);
    rmrf(dir);
    free(dir);
}

/* Debris of a version number nobody committed, plus foreign files, under gc. */
static void test_gc_debris(void **state)
{
    (void)state;
    char *dir = mktmp();
    tm_init(&fa, "fa", PTC_DTYPE_F32, 2, (int64_t[]){300, 1000}, 0, false, 41);
    tm_init(&fb, "fb", PTC_DTYPE_I16, 2, (int64_t[]){9, 70000}, 1, true, 42);
    fault_setup(dir);
    char p[512];
    snprintf(p, sizeof p, "%s/packs/v9", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/packs/v9/rank-4.pack", dir);
    FILE *f = fopen(p, "w");
    fputs("12345", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/packs/v1/rank-7.pack", dir);
    f = fopen(p, "w");
    fputs("123", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/packs/v1/notes.txt", dir); /* not ours: kept */
    f = fopen(p, "w");
    fputs("x", f);
    fclose(f);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, 0), PTC_OK);
    ptc_store_gc_stats st;
    assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 2);
    assert_int_equal(st.bytes_removed, 8);
    assert_int_equal(st.dirs_removed, 1);
    char packs[512];
    list_packs(dir, packs, sizeof packs);
    assert_string_equal(packs, "v1/notes.txt v1/rank-0.pack v1/rank-1.pack ");
    ptc_store_close(s);
    tm_free(&fa);
    tm_free(&fb);
    rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_raw),   cmocka_unit_test(test_roundtrip_zstd),
        cmocka_unit_test(test_flat_pieces),     cmocka_unit_test(test_reuse_alias_gc),
        cmocka_unit_test(test_writer_errors),   cmocka_unit_test(test_not_a_store),
        cmocka_unit_test(test_corruption_raw),  cmocka_unit_test(test_corruption_zstd),
        cmocka_unit_test(test_corruption_outside),
        cmocka_unit_test(test_pack_only),       cmocka_unit_test(test_writer_lock),
        cmocka_unit_test(test_fault_alloc),     cmocka_unit_test(test_fault_write),
        cmocka_unit_test(test_crash),           cmocka_unit_test(test_info_json),
        cmocka_unit_test(test_gc_debris),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
