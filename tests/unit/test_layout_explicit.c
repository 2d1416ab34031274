/* Explicit layouts (ptc_layout_create_explicit): the shards, pieces, owners
 * and groups of a layout of per-rank pieces as FSDP2 x TP places them on a
 * (dp=2, tp=2) mesh (a strided shard of two pieces, a 2-D box, a replicated
 * tensor, a scalar, a tensor only two ranks hold); every refusal of bad
 * input; the coverage check; the version record of such a layout
 * ("explicit:4") through the record codec; a store round trip (saved with
 * the checkpoint steps, its layout rebuilt from the shard records equal to
 * the saved one, every tensor read back whole); loads of it into another
 * explicit layout; and exports of its ranks under its own layout and under
 * configurations (the preset `none` and given rules), byte-exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/ckpt.h"
#include "ptc/layout.h"
#include "ptc/safetensors.h"
#include "ptc/store/store_internal.h"
#include "ptc/vfile.h"

/* ---- the layout of a (dp=2, tp=2) mesh -------------------------------------------------- */

enum { T_COL, T_ROW, T_STRIDED, T_BIAS, T_STEP, T_HALF, NT };
#define W 4

static const ptc_tensor_info TENSORS[NT] = {
    {"w_col", PTC_DTYPE_F32, 2, {8, 6}},     /* (_StridedShard(0, sf=2), Shard(0)) */
    {"w_row", PTC_DTYPE_F32, 2, {8, 6}},     /* (Shard(0), Shard(1)) */
    {"w_strided", PTC_DTYPE_F32, 2, {8, 6}}, /* (_StridedShard(0, sf=2), Replicate) */
    {"bias", PTC_DTYPE_F32, 1, {6}},         /* replicated */
    {"step", PTC_DTYPE_F32, 0, {0}},         /* a scalar, replicated */
    {"half", PTC_DTYPE_F32, 1, {5}},         /* Shard(0) over ranks 0 and 1 only */
};

static ptc_piece piece2(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t off,
                        int64_t cols)
{
    ptc_piece p;
    memset(&p, 0, sizeof p);
    p.box.ndim = 2;
    p.box.lo[0] = r0;
    p.box.hi[0] = r1;
    p.box.lo[1] = c0;
    p.box.hi[1] = c1;
    p.local_offset = off;
    p.local_stride[0] = cols;
    p.local_stride[1] = 1;
    return p;
}

static ptc_piece piece1(int64_t lo, int64_t hi)
{
    ptc_piece p;
    memset(&p, 0, sizeof p);
    p.box.ndim = 1;
    p.box.lo[0] = lo;
    p.box.hi[0] = hi;
    p.local_stride[0] = 1;
    return p;
}

/* Storage for the entries of the mesh layout (pieces point into it). */
typedef struct mesh {
    ptc_layout_explicit_shard e[NT * W];
    ptc_piece pc[NT * W][2];
    size_t n;
} mesh;

static void add(mesh *m, size_t t, int rank, int ndim, int64_t d0, int64_t d1, size_t np)
{
    ptc_layout_explicit_shard *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    e->tensor = t;
    e->rank = rank;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->pieces = m->pc[m->n];
    e->npieces = np;
    m->n++;
}

/* Rank r = dp*2 + tp; listed in a scrambled order (creation sorts). */
static void mesh_layout(mesh *m)
{
    m->n = 0;
    for (int k = 0; k < W; k++) {
        int r = (k * 3) % W, i = r / 2, j = r % 2;
        /* tp chunk j of 8 rows (4), dp chunk i of it (2): one box */
        m->pc[m->n][0] = piece2(j * 4 + i * 2, j * 4 + i * 2 + 2, 0, 6, 0, 6);
        add(m, T_COL, r, 2, 2, 6, 1);
        m->pc[m->n][0] = piece2(i * 4, i * 4 + 4, j * 3, j * 3 + 3, 0, 3);
        add(m, T_ROW, r, 2, 4, 3, 1);
        /* sub-chunk i of each of the two halves: rows 2i..2i+2 and 4+2i..4+2i+2 */
        m->pc[m->n][0] = piece2(2 * i, 2 * i + 2, 0, 6, 0, 6);
        m->pc[m->n][1] = piece2(4 + 2 * i, 4 + 2 * i + 2, 0, 6, 12, 6);
        add(m, T_STRIDED, r, 2, 4, 6, 2);
        m->pc[m->n][0] = piece1(0, 6);
        add(m, T_BIAS, r, 1, 6, 0, 1);
        memset(&m->pc[m->n][0], 0, sizeof(ptc_piece)); /* a 0-d box: the one element */
        add(m, T_STEP, r, 0, 0, 0, 1);
        if (r < 2) {
            m->pc[m->n][0] = piece1(r * 3, r == 0 ? 3 : 5);
            add(m, T_HALF, r, 1, r == 0 ? 3 : 2, 0, 1);
        }
    }
}

static ptc_layout *make_mesh(void)
{
    mesh m;
    mesh_layout(&m);
    ptc_layout *l = NULL;
    if (ptc_layout_create_explicit(&l, TENSORS, NT, W, m.e, m.n) != PTC_OK)
        fail_msg("create: %s", ptc_last_error());
    return l;
}

/* ---- queries ---------------------------------------------------------------------------- */

static void test_shards(void **state)
{
    (void)state;
    ptc_layout *l = make_mesh();
    assert_true(ptc_layout_is_explicit(l));
    assert_int_equal(ptc_layout_world(l), 4);
    assert_int_equal(ptc_layout_count(l), NT);
    char text[64];
    assert_int_equal(ptc_layout_describe(l, text, sizeof text), PTC_OK);
    assert_string_equal(text, "explicit:4");
    assert_int_equal(ptc_layout_describe(l, text, 5), PTC_E_RANGE);
    /* the configuration every structure-exploiting consumer sees */
    const ptc_config *c = ptc_layout_config(l);
    assert_int_equal(c->dp, 1);
    assert_int_equal(c->tp, 4);
    assert_int_equal(c->pp, 1);
    assert_true(ptc_layout_on_stage(l, T_HALF, 0));
    assert_false(ptc_layout_on_stage(l, T_HALF, 1));

    /* rank 3 = (dp 1, tp 1): the strided shard's two pieces in the given order */
    ptc_shard sh;
    ptc_piece pc[4];
    size_t np;
    assert_int_equal(ptc_layout_shard(l, T_STRIDED, 3, &sh), PTC_OK);
    assert_true(sh.present);
    assert_false(sh.flat);
    assert_int_equal(sh.ndim, 2);
    assert_int_equal(sh.shape[0], 4);
    assert_int_equal(sh.shape[1], 6);
    assert_int_equal(sh.flat_hi, 24);
    assert_int_equal(sh.npieces, 2);
    assert_int_equal(sh.owner, 2);
    assert_int_equal(ptc_layout_pieces(l, T_STRIDED, 3, pc, 4, &np), PTC_OK);
    assert_int_equal(np, 2);
    assert_int_equal(pc[0].box.lo[0], 2);
    assert_int_equal(pc[0].box.hi[0], 4);
    assert_int_equal(pc[1].box.lo[0], 6);
    assert_int_equal(pc[1].local_offset, 12);
    assert_int_equal(ptc_layout_pieces(l, T_STRIDED, 3, pc, 1, &np), PTC_E_RANGE);
    assert_int_equal(np, 2);
    /* FSDP2 x TP on dim 0: rank 1 = (dp 0, tp 1) holds rows 4..6 */
    assert_int_equal(ptc_layout_pieces(l, T_COL, 1, pc, 4, &np), PTC_OK);
    assert_int_equal(np, 1);
    assert_int_equal(pc[0].box.lo[0], 4);
    assert_int_equal(pc[0].box.hi[0], 6);
    /* a rank that lacks a tensor */
    assert_int_equal(ptc_layout_shard(l, T_HALF, 2, &sh), PTC_OK);
    assert_false(sh.present);
    assert_int_equal(sh.owner, -1);
    assert_int_equal(ptc_layout_shard(l, T_HALF, 4, &sh), PTC_E_RANGE);
    assert_int_equal(ptc_layout_shard(l, NT, 0, &sh), PTC_E_RANGE);

    /* owners and groups: equal shards share the lowest rank */
    int own[W];
    const int want[NT][W] = {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 0, 2, 2},
                             {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 1, -1, -1}};
    for (size_t t = 0; t < NT; t++) {
        assert_int_equal(ptc_layout_owners(l, t, own), PTC_OK);
        assert_memory_equal(own, want[t], sizeof own);
    }
    ptc_shard_group *g;
    size_t ng;
    assert_int_equal(ptc_layout_groups(l, T_STRIDED, &g, &ng), PTC_OK);
    assert_int_equal(ng, 2);
    assert_int_equal(g[1].owner, 2);
    assert_int_equal(g[1].nranks, 2);
    assert_int_equal(g[1].ranks[1], 3);
    ptc_layout_groups_free(g);
    for (size_t t = 0; t < NT; t++)
        assert_int_equal(ptc_layout_check_cover(l, t), PTC_OK);
    ptc_layout_destroy(l);
}

/* Strides along extent-1 dimensions do not tell shards apart; empty pieces
 * are dropped. */
static void test_equality(void **state)
{
    (void)state;
    ptc_tensor_info ti = {"x", PTC_DTYPE_F32, 2, {1, 4}};
    ptc_piece a[2] = {piece2(0, 1, 0, 4, 0, 4), piece2(0, 0, 0, 4, 0, 4)};
    ptc_piece b[1] = {piece2(0, 1, 0, 4, 0, 99)};
    ptc_layout_explicit_shard e[2] = {{0, 0, 2, {1, 4}, a, 2}, {0, 1, 2, {1, 4}, b, 1}};
    ptc_layout *l = NULL;
    assert_int_equal(ptc_layout_create_explicit(&l, &ti, 1, 2, e, 2), PTC_OK);
    ptc_shard sh;
    assert_int_equal(ptc_layout_shard(l, 0, 1, &sh), PTC_OK);
    assert_int_equal(sh.owner, 0);
    assert_int_equal(sh.npieces, 1);
    ptc_layout_destroy(l);
}

static void expect_refused(const ptc_tensor_info *ti, size_t n, int world,
                           const ptc_layout_explicit_shard *e, size_t ne, int rc,
                           const char *msg)
{
    ptc_layout *l = (ptc_layout *)1;
    assert_int_equal(ptc_layout_create_explicit(&l, ti, n, world, e, ne), rc);
    assert_null(l);
    if (strcmp(ptc_last_error(), msg))
        fail_msg("message '%s', want '%s'", ptc_last_error(), msg);
}

static void test_refusals(void **state)
{
    (void)state;
    ptc_tensor_info ti[2] = {{"x", PTC_DTYPE_F32, 2, {4, 4}}, {"x", PTC_DTYPE_F32, 1, {3}}};
    ptc_piece p = piece2(0, 2, 0, 4, 0, 4), q = piece2(2, 4, 0, 4, 0, 4);
    ptc_layout_explicit_shard e[2] = {{0, 0, 2, {2, 4}, &p, 1}, {0, 1, 2, {2, 4}, &q, 1}};
    expect_refused(ti, 2, 2, e, 2, PTC_E_INVAL, "tensor 'x' is listed twice");
    expect_refused(ti, 1, 0, e, 2, PTC_E_INVAL, "explicit layout: world of 0 ranks (1..1048576)");
    e[1].rank = 2;
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL, "tensor 'x': rank 2 outside the world of 2");
    e[1].rank = 0;
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL, "tensor 'x': rank 0's shard is given twice");
    e[1].rank = 1;
    e[1].tensor = 1;
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL, "explicit shard 1: tensor 1 of 1");
    e[1].tensor = 0;
    q.box.hi[0] = 5;
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL,
                   "tensor 'x' on rank 1, piece 0: piece box outside the tensor (dim 0: 2:5 of "
                   "4)");
    q = piece2(2, 4, 0, 4, 1, 4);
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL,
                   "tensor 'x' on rank 1, piece 0: piece reaches local element 8 of 8");
    q = piece2(2, 3, 0, 4, 0, 4);
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL,
                   "tensor 'x' on rank 1: its pieces hold 4 elements, its local tensor 8");
    q = piece2(2, 4, 0, 4, 0, 4);
    e[1].shape[0] = -1;
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL, "tensor 'x' on rank 1: negative local extent");
    e[1].shape[0] = 2;
    e[1].ndim = 9;
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL,
                   "tensor 'x' on rank 1: 9 local dimensions (0..8)");
    e[1].ndim = 2;
    e[1].pieces = NULL;
    expect_refused(ti, 1, 2, e, 2, PTC_E_INVAL, "tensor 'x' on rank 1: pieces is NULL");
}

static void expect_cover(const ptc_piece *p, const ptc_piece *q, const char *msg)
{
    ptc_tensor_info ti = {"x", PTC_DTYPE_F32, 2, {4, 4}};
    ptc_layout_explicit_shard e[2] = {{0, 0, 2, {2, 4}, p, 1}, {0, 1, 2, {2, 4}, q, 1}};
    ptc_layout *l = NULL;
    assert_int_equal(ptc_layout_create_explicit(&l, &ti, 1, 2, e, 2), PTC_OK);
    int rc = ptc_layout_check_cover(l, 0);
    if (!msg) {
        assert_int_equal(rc, PTC_OK);
    } else {
        assert_int_equal(rc, PTC_E_INVAL);
        assert_string_equal(ptc_last_error(), msg);
    }
    assert_int_equal(ptc_layout_check_cover(l, 1), PTC_E_RANGE);
    ptc_layout_destroy(l);
}

static void test_cover(void **state)
{
    (void)state;
    ptc_piece top = piece2(0, 2, 0, 4, 0, 4), bottom = piece2(2, 4, 0, 4, 0, 4),
              mid = piece2(1, 3, 0, 4, 0, 4), left = piece2(0, 4, 0, 2, 0, 2);
    expect_cover(&top, &bottom, NULL);
    expect_cover(&top, &mid, "tensor 'x': ranks 0 and 1 hold overlapping parts that are not "
                             "one shard");
    /* a replica is one shard: half the tensor */
    expect_cover(&top, &top, "tensor 'x': its shards hold 8 of its 16 elements (no rank holds "
                             "the rest)");
    expect_cover(&top, &left, "tensor 'x': ranks 0 and 1 hold overlapping parts that are not "
                              "one shard");
    ptc_piece two[2] = {piece2(0, 1, 0, 4, 0, 4), piece2(0, 1, 0, 4, 4, 4)};
    ptc_tensor_info ti = {"x", PTC_DTYPE_F32, 2, {4, 4}};
    ptc_layout_explicit_shard e[1] = {{0, 0, 2, {2, 4}, two, 2}};
    ptc_layout *l = NULL;
    assert_int_equal(ptc_layout_create_explicit(&l, &ti, 1, 1, e, 1), PTC_OK);
    assert_int_equal(ptc_layout_check_cover(l, 0), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(), "tensor 'x': rank 0 holds some elements twice");
    ptc_layout_destroy(l);
    /* only the top half: the rest is nobody's */
    e[0] = (ptc_layout_explicit_shard){0, 0, 2, {2, 4}, &top, 1};
    assert_int_equal(ptc_layout_create_explicit(&l, &ti, 1, 3, e, 1), PTC_OK);
    assert_int_equal(ptc_layout_check_cover(l, 0), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(),
                        "tensor 'x': its shards hold 8 of its 16 elements (no rank holds the "
                        "rest)");
    ptc_layout_destroy(l);
    /* a layout of a configuration covers by construction */
    ptc_rules *rules;
    ptc_config cfg;
    assert_int_equal(ptc_rules_load(&rules, "none"), PTC_OK);
    assert_int_equal(ptc_config_parse(&cfg, "tp=2"), PTC_OK);
    assert_int_equal(ptc_layout_create(&l, &ti, 1, rules, &cfg), PTC_OK);
    assert_false(ptc_layout_is_explicit(l));
    assert_int_equal(ptc_layout_check_cover(l, 0), PTC_OK);
    assert_int_equal(ptc_layout_describe(l, (char[64]){0}, 64), PTC_OK);
    ptc_layout_destroy(l);
    ptc_rules_destroy(rules);
}

/* The version record of an explicit layout says so in its configuration
 * text; a parallel-configuration parser refuses that text by name. */
static void test_version_record(void **state)
{
    (void)state;
    ptc_version_rec v = {.state = 1, .parent = 3, .created_unix_ns = 42, .tensor_count = NT,
                         .step = "7", .config = "explicit:4", .rules = "",
                         .metadata_json = "{}"};
    ptc_buf b = {0};
    assert_int_equal(ptc_version_rec_encode(&b, &v), PTC_OK);
    ptc_version_rec d;
    assert_int_equal(ptc_version_rec_decode(&d, b.p, b.len), PTC_OK);
    assert_string_equal(d.config, "explicit:4");
    assert_string_equal(d.rules, "");
    assert_int_equal(d.parent, 3);
    ptc_version_rec_free(&d);
    ptc_buf_free(&b);
    int w = -1;
    assert_int_equal(ptc_layout_parse_explicit("explicit:4", &w), PTC_OK);
    assert_int_equal(w, 4);
    assert_int_equal(ptc_layout_parse_explicit("explicit:1048576", &w), PTC_OK);
    assert_int_equal(w, 1048576);
    assert_int_equal(ptc_layout_parse_explicit("dp=2,tp=1,pp=1", &w), PTC_OK);
    assert_int_equal(w, 0);
    const char *bad[] = {"explicit:", "explicit:04", "explicit:0", "explicit:1048577",
                         "explicit:4,tp=2", "explicit:-1", "explicit:99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(ptc_layout_parse_explicit(bad[i], &w), PTC_E_INVAL);
        assert_int_equal(w, 0);
    }
    assert_string_equal(ptc_last_error(), "bad explicit layout 'explicit:99999999999999999999' "
                                          "(explicit:W, W in 1..1048576)");
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "explicit:4"), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(),
                        "config 'explicit:4' names an explicit layout (per-rank pieces, e.g. "
                        "saved from DTensors), not a parallel configuration");
}

/* ---- through a store -------------------------------------------------------------------- */

/* Element i (row-major) of tensor t. */
static float value(size_t t, int64_t i)
{
    return (float)(1000 * (int64_t)t + i);
}

/* Local buffers of every rank of @p l, filled from the global values. */
static float **fill_locals(const ptc_layout *l)
{
    size_t nt = ptc_layout_count(l);
    int w = ptc_layout_world(l);
    float **bufs = calloc((size_t)w * nt, sizeof *bufs);
    for (int r = 0; r < w; r++)
        for (size_t t = 0; t < nt; t++) {
            ptc_shard sh;
            ptc_piece pc[8];
            size_t np;
            assert_int_equal(ptc_layout_shard(l, t, r, &sh), PTC_OK);
            if (!sh.present || sh.flat_hi == 0)
                continue;
            const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
            float *b = bufs[(size_t)r * nt + t] = calloc((size_t)sh.flat_hi, sizeof *b);
            assert_int_equal(ptc_layout_pieces(l, t, r, pc, 8, &np), PTC_OK);
            int64_t gst[PTC_MAX_DIMS];
            ptc_strides_row_major(ti->ndim, ti->shape, gst);
            for (size_t k = 0; k < np; k++) {
                int64_t g[PTC_MAX_DIMS];
                memcpy(g, pc[k].box.lo, sizeof g);
                for (int64_t e = 0; e < ptc_box_volume(&pc[k].box); e++) {
                    int64_t flat = 0;
                    for (int d = 0; d < ti->ndim; d++)
                        flat += g[d] * gst[d];
                    b[ptc_piece_local_index(&pc[k], g)] = value(t, flat);
                    for (int d = ti->ndim - 1; d >= 0; d--) { /* next index of the box */
                        if (++g[d] < pc[k].box.hi[d])
                            break;
                        g[d] = pc[k].box.lo[d];
                    }
                }
            }
        }
    return bufs;
}

static void free_locals(float **bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(bufs[i]);
    free(bufs);
}

/* Every local buffer of @p got equals @p want's for the same layout. */
static void same_locals(const ptc_layout *l, float **got, float **want)
{
    size_t nt = ptc_layout_count(l);
    for (int r = 0; r < ptc_layout_world(l); r++)
        for (size_t t = 0; t < nt; t++) {
            size_t bytes;
            assert_int_equal(ptc_ckpt_local_bytes(l, t, r, &bytes), PTC_OK);
            if (bytes)
                assert_memory_equal(got[(size_t)r * nt + t], want[(size_t)r * nt + t], bytes);
        }
}

static uint64_t save_mesh(ptc_store *s, const ptc_layout *l, const ptc_rules *rules)
{
    float **bufs = fill_locals(l);
    int ranks[W] = {0, 1, 2, 3};
    ptc_ckpt_txn *txn;
    if (ptc_ckpt_begin(&txn, s, l, rules, NULL) != PTC_OK)
        fail_msg("begin: %s", ptc_last_error());
    void *desc;
    size_t len;
    assert_int_equal(ptc_ckpt_write_local(s, ptc_ckpt_txn_version(txn), ptc_ckpt_txn_parent(txn),
                                          l, ranks, W, (const void *const *)bufs, NULL, &desc,
                                          &len),
                     PTC_OK);
    ptc_ckpt_record rec = {.step = 5};
    uint64_t v;
    const void *dp[1] = {desc};
    assert_int_equal(ptc_ckpt_commit(txn, dp, &len, 1, &rec, &v), PTC_OK);
    ptc_store_free(desc);
    free_locals(bufs, (size_t)W * NT);
    return v;
}

/* Both layouts give every (tensor, rank) the same shard and pieces. */
static void same_layout(const ptc_layout *a, const ptc_layout *b)
{
    assert_int_equal(ptc_layout_count(a), ptc_layout_count(b));
    assert_int_equal(ptc_layout_world(a), ptc_layout_world(b));
    for (size_t t = 0; t < ptc_layout_count(a); t++) {
        assert_string_equal(ptc_layout_tensor(a, t)->name, ptc_layout_tensor(b, t)->name);
        for (int r = 0; r < ptc_layout_world(a); r++) {
            ptc_shard x, y;
            ptc_piece px[8], py[8];
            size_t nx, ny;
            assert_int_equal(ptc_layout_shard(a, t, r, &x), PTC_OK);
            assert_int_equal(ptc_layout_shard(b, t, r, &y), PTC_OK);
            assert_memory_equal(&x, &y, sizeof x);
            assert_int_equal(ptc_layout_pieces(a, t, r, px, 8, &nx), PTC_OK);
            assert_int_equal(ptc_layout_pieces(b, t, r, py, 8, &ny), PTC_OK);
            assert_int_equal(nx, ny);
            assert_memory_equal(px, py, nx * sizeof *px);
        }
    }
}

/* A rank's export (a safetensors file in memory): tensor @p name holds the
 * global elements @p idx (n of them) in order. */
static void check_export(const ptc_store_reader *r, const ptc_layout *l, int rank,
                         const char *cfg_meta, const char *name, size_t t, const int64_t *idx,
                         size_t n)
{
    ptc_vfile *f;
    assert_int_equal(ptc_vfile_rank(&f, r, l, rank, PTC_DTYPE_KEEP), PTC_OK);
    uint64_t size = ptc_vfile_size(f);
    uint8_t *buf = malloc(size);
    size_t got;
    assert_int_equal(ptc_vfile_read(f, buf, 0, size, &got), PTC_OK);
    assert_int_equal(got, size);
    ptc_st_header *h;
    assert_int_equal(ptc_st_parse_header(buf, size, size, &h), PTC_OK);
    assert_string_equal(ptc_st_header_metadata_get(h, "ptc.config"), cfg_meta);
    size_t i;
    assert_int_equal(ptc_st_header_find(h, name, &i), PTC_OK);
    const ptc_st_tensor *st = ptc_st_header_tensor(h, i);
    assert_int_equal(st->nbytes, n * sizeof(float));
    const float *data = (const float *)(buf + st->offset);
    for (size_t k = 0; k < n; k++)
        assert_true(data[k] == value(t, idx[k]));
    ptc_st_header_destroy(h);
    free(buf);
    ptc_vfile_destroy(f);
}

static void test_store_round_trip(void **state)
{
    (void)state;
    char dir[] = "/tmp/ptc_layout_explicit_XXXXXX";
    assert_non_null(mkdtemp(dir));
    ptc_store *s = NULL;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_layout *l = make_mesh();
    uint64_t v = save_mesh(s, l, NULL);
    assert_int_equal(v, 1);

    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, v), PTC_OK);
    const ptc_version_info *vi = ptc_store_reader_version(r);
    assert_string_equal(vi->config, "explicit:4");
    assert_string_equal(vi->rules, "");
    ptc_store_tensor st;
    assert_int_equal(ptc_store_reader_tensor(r, T_STRIDED, &st), PTC_OK);
    assert_string_equal(st.placement, "");
    assert_int_equal(st.nshards, 4); /* one data record and an alias per distinct shard */
    assert_int_equal(ptc_store_reader_tensor(r, T_HALF, &st), PTC_OK);
    assert_int_equal(st.nshards, 2);
    /* the layout rebuilt from the shard records is the saved one */
    ptc_layout *back = NULL;
    assert_int_equal(ptc_layout_of_version(&back, r, NULL), PTC_OK);
    assert_true(ptc_layout_is_explicit(back));
    same_layout(l, back);
    /* every tensor whole, from the stored pieces */
    for (size_t t = 0; t < NT; t++) {
        const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
        ptc_box box;
        ptc_box_full(&box, ti->ndim, ti->shape);
        int64_t vol = ptc_box_volume(&box);
        float *whole = malloc(sizeof *whole * (size_t)vol);
        assert_int_equal(ptc_store_reader_read_box(r, t, &box, whole, NULL), PTC_OK);
        for (int64_t i = 0; i < vol; i++)
            assert_true(whole[i] == value(t, i));
        free(whole);
    }
    /* exports: a rank under the stored layout (its strided shard's local
     * tensor: rows 2..4 then 6..8), under dp=1 with no rules stored (the
     * preset none: whole tensors), under tp=2 with given rules (split) */
    int64_t idx[48];
    for (int k = 0; k < 24; k++)
        idx[k] = (k < 12 ? 12 : 24) + k;
    check_export(r, back, 3, "explicit:4", "w_strided", T_STRIDED, idx, 24);
    ptc_layout *cl = NULL;
    ptc_config cfg;
    assert_int_equal(ptc_config_parse(&cfg, "dp=1"), PTC_OK);
    assert_int_equal(ptc_layout_of_version(&cl, r, &cfg), PTC_OK);
    for (int k = 0; k < 48; k++)
        idx[k] = k;
    check_export(r, cl, 0, "dp=1,tp=1,pp=1", "w_row", T_ROW, idx, 48);
    ptc_layout_destroy(cl);
    ptc_rules *rules;
    const char rt[] = "match w_* tp=split(0) pp=all\nmatch * tp=replicate pp=all\n";
    assert_int_equal(ptc_rules_parse(&rules, rt, strlen(rt), "test"), PTC_OK);
    assert_int_equal(ptc_config_parse(&cfg, "tp=2"), PTC_OK);
    assert_int_equal(ptc_layout_of_version_rules(&cl, r, &cfg, rules), PTC_OK);
    for (int k = 0; k < 24; k++)
        idx[k] = 24 + k;
    check_export(r, cl, 1, "dp=1,tp=2,pp=1", "w_col", T_COL, idx, 24);
    ptc_layout_destroy(cl);

    /* a load into another explicit layout: two ranks, halves of dim 1 */
    ptc_layout_explicit_shard e[NT * 2];
    ptc_piece pc[NT * 2];
    size_t ne = 0;
    for (size_t t = 0; t < NT; t++)
        for (int k = 0; k < 2; k++) {
            const ptc_tensor_info *ti = &TENSORS[t];
            memset(&e[ne], 0, sizeof e[ne]);
            e[ne].tensor = t;
            e[ne].rank = k;
            e[ne].ndim = ti->ndim;
            memcpy(e[ne].shape, ti->shape, sizeof e[ne].shape);
            memset(&pc[ne], 0, sizeof pc[ne]);
            ptc_box_full(&pc[ne].box, ti->ndim, ti->shape);
            if (ti->ndim == 2) {
                e[ne].shape[1] = 3;
                pc[ne].box.lo[1] = 3 * k;
                pc[ne].box.hi[1] = 3 * k + 3;
            }
            ptc_strides_row_major(ti->ndim, e[ne].shape, pc[ne].local_stride);
            e[ne].pieces = &pc[ne];
            e[ne].npieces = 1;
            ne++;
        }
    ptc_layout *to = NULL;
    assert_int_equal(ptc_layout_create_explicit(&to, TENSORS, NT, 2, e, ne), PTC_OK);
    float **want = fill_locals(to), **got = calloc(2 * NT, sizeof *got);
    for (size_t i = 0; i < 2 * NT; i++) {
        size_t bytes;
        assert_int_equal(ptc_ckpt_local_bytes(to, i % NT, (int)(i / NT), &bytes), PTC_OK);
        got[i] = calloc(bytes / sizeof(float) + 1, sizeof(float));
    }
    int ranks[2] = {0, 1};
    ptc_ckpt_record rec;
    assert_int_equal(ptc_ckpt_load_local(s, v, to, ranks, 2, (void *const *)got, NULL, &rec,
                                         NULL),
                     PTC_OK);
    assert_int_equal(rec.step, 5);
    assert_string_equal(rec.config, "explicit:4");
    ptc_ckpt_record_free(&rec);
    same_locals(to, got, want);
    free_locals(want, 2 * NT);
    free_locals(got, 2 * NT);
    ptc_layout_destroy(to);

    /* rules given to an explicit save are stored for the views */
    ptc_layout_destroy(back);
    ptc_store_reader_close(r);
    assert_int_equal(save_mesh(s, l, rules), 2);
    assert_int_equal(ptc_store_reader_open(&r, s, 2), PTC_OK);
    assert_string_equal(ptc_store_reader_version(r)->rules, ptc_rules_text(rules));
    assert_int_equal(ptc_layout_of_version(&cl, r, &cfg), PTC_OK);
    check_export(r, cl, 1, "dp=1,tp=2,pp=1", "w_col", T_COL, idx, 24);
    ptc_layout_destroy(cl);
    ptc_store_reader_close(r);
    ptc_rules_destroy(rules);

    ptc_layout_destroy(l);
    ptc_store_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards),          cmocka_unit_test(test_equality),
        cmocka_unit_test(test_refusals),        cmocka_unit_test(test_cover),
        cmocka_unit_test(test_version_record),  cmocka_unit_test(test_store_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
