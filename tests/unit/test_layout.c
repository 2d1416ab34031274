/* The layout function: every shard of a mixed collection under every small
 * configuration checked element by element against an independent oracle,
 * owners against brute-force shard comparison, hand-worked pieces, every
 * validation error, and the time for 1000 tensors x 64 ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/layout.h"

/* ---- a mixed collection --------------------------------------------------------- */

static const char mixed_rules[] =
    "layer blk.{L}.\n"
    "optim .m\n"
    "match blk.*.qkv tp=split(0,blocks=3)\n"
    "match blk.*.fused tp=split(1,blocks=2:3:1)\n"
    "match blk.*.zblk tp=split(0,blocks=0:4:0:1)\n"
    "match blk.*.col tp=split(0)\n"
    "match blk.*.row tp=split(1)\n"
    "match blk.*.rep tp=replicate\n"
    "match blk.*.scalar tp=replicate\n"
    "match emb tp=split(0) pp=first+last\n"
    "match head tp=split(0) pp=last\n"
    "match pos tp=replicate pp=first\n"
    "match everywhere tp=split(2) pp=all\n"
    "match empty tp=split(0) pp=first\n"
    "match hollow tp=split(1) pp=last\n"
    "match state kind=optim tp=split(0) pp=all\n";

#define MAXT 64
static ptc_tensor_info mixed[MAXT];
static char mixed_names[MAXT][48];
static size_t nmixed;

static void add(const char *name, int ndim, int64_t a, int64_t b, int64_t c)
{
    ptc_tensor_info *t = &mixed[nmixed];
    memset(t, 0, sizeof *t);
    snprintf(mixed_names[nmixed], sizeof mixed_names[0], "%s", name);
    t->name = mixed_names[nmixed];
    t->dtype = PTC_DTYPE_F32;
    t->ndim = ndim;
    t->shape[0] = a;
    t->shape[1] = b;
    t->shape[2] = c;
    nmixed++;
}

static void build_mixed(void)
{
    nmixed = 0;
    char n[48];
    for (int L = 0; L < 5; L++) {
        static const char *const suf[] = {"", ".m"};
        for (int o = 0; o < 2; o++) {
            snprintf(n, sizeof n, "blk.%d.qkv%s", L, suf[o]);
            add(n, 2, 9, 2, 0);
            snprintf(n, sizeof n, "blk.%d.fused%s", L, suf[o]);
            add(n, 2, 2, 6, 0);
            snprintf(n, sizeof n, "blk.%d.scalar%s", L, suf[o]);
            add(n, 0, 0, 0, 0);
        }
        snprintf(n, sizeof n, "blk.%d.zblk", L);
        add(n, 2, 5, 2, 0);
        snprintf(n, sizeof n, "blk.%d.col", L);
        add(n, 2, 5, 3, 0);
        snprintf(n, sizeof n, "blk.%d.row.m", L);
        add(n, 2, 2, 7, 0);
        snprintf(n, sizeof n, "blk.%d.rep", L);
        add(n, 1, 3, 0, 0);
    }
    add("emb", 2, 7, 2, 0);
    add("emb.m", 2, 7, 2, 0);
    add("head", 2, 3, 2, 0);
    add("pos", 1, 4, 0, 0);
    add("everywhere", 3, 2, 1, 5);
    add("everywhere.m", 3, 2, 1, 5);
    add("empty", 2, 0, 3, 0);
    add("hollow.m", 3, 2, 3, 0); /* zero volume, split dim not the empty one */
    add("state", 1, 3, 0, 0);
}

/* ---- the oracle ----------------------------------------------------------------- */

static int expected_stage_of_layer(const ptc_config *c, int64_t n, int64_t L)
{
    if (c->nlayers) {
        int64_t end = 0;
        for (int s = 0; s < c->nlayers; s++) {
            end += c->layers[s];
            if (L < end)
                return s;
        }
        return -1;
    }
    for (int s = 0; s < c->pp; s++)
        if ((int64_t)s * n / c->pp <= L && L < (int64_t)(s + 1) * n / c->pp)
            return s;
    return -1;
}

static bool expected_on_stage(const ptc_placement *p, const ptc_config *c, int64_t n, int s)
{
    switch (p->pp) {
    case PTC_PP_LAYER: return expected_stage_of_layer(c, n, p->layer) == s;
    case PTC_PP_FIRST: return s == 0;
    case PTC_PP_LAST: return s == c->pp - 1;
    case PTC_PP_FIRST_LAST: return s == 0 || s == c->pp - 1;
    case PTC_PP_ALL: return true;
    }
    return false;
}

static int64_t chunk_lo(int64_t S, int64_t n, int64_t i)
{
    int64_t c = (S + n - 1) / n;
    return i * c < S ? i * c : S;
}

/* Block sizes of the split dim. */
static int blocks_of(const ptc_placement *p, int64_t S, int64_t *bs)
{
    if (p->nblocks == 0) {
        bs[0] = S;
        return 1;
    }
    for (int b = 0; b < p->nblocks; b++)
        bs[b] = p->blocks_equal ? S / p->nblocks : p->blocks[b];
    return p->nblocks;
}

/* tp-local shape of tp rank i. */
static void tp_local_shape(const ptc_tensor_info *t, const ptc_placement *p, int T, int i,
                           int64_t *shape)
{
    memcpy(shape, t->shape, sizeof t->shape);
    if (p->tp != PTC_TP_SPLIT)
        return;
    int64_t bs[PTC_RULES_MAX_BLOCKS];
    int nb = blocks_of(p, t->shape[p->dim], bs);
    int64_t len = 0;
    for (int b = 0; b < nb; b++)
        len += chunk_lo(bs[b], T, i + 1) - chunk_lo(bs[b], T, i);
    shape[p->dim] = len;
}

/* Where global element g lives on (tp_i, dp_i): the local element index, or
 * -1 if that rank does not hold it. Written from the definitions, sharing no
 * code with layout.c. */
static int64_t oracle(const ptc_tensor_info *t, const ptc_placement *p, const ptc_config *c,
                      const int64_t *g, int tp_i, int dp_i)
{
    int64_t loc[PTC_MAX_DIMS], lshape[PTC_MAX_DIMS];
    memcpy(loc, g, sizeof loc);
    tp_local_shape(t, p, c->tp, tp_i, lshape);
    if (p->tp == PTC_TP_SPLIT) {
        int64_t bs[PTC_RULES_MAX_BLOCKS];
        int nb = blocks_of(p, t->shape[p->dim], bs);
        int64_t x = g[p->dim], start = 0, before = 0;
        for (int b = 0; b < nb; b++) {
            if (x < start + bs[b]) {
                int64_t off = x - start;
                int64_t lo = chunk_lo(bs[b], c->tp, tp_i), hi = chunk_lo(bs[b], c->tp, tp_i + 1);
                if (off < lo || off >= hi)
                    return -1;
                loc[p->dim] = before + off - lo;
                break;
            }
            before += chunk_lo(bs[b], c->tp, tp_i + 1) - chunk_lo(bs[b], c->tp, tp_i);
            start += bs[b];
        }
    }
    int64_t flat = 0;
    for (int d = 0; d < t->ndim; d++)
        flat = flat * lshape[d] + loc[d];
    if (!(c->zero && p->kind == PTC_KIND_OPTIM))
        return flat;
    int64_t V = 1;
    for (int d = 0; d < t->ndim; d++)
        V *= lshape[d];
    int64_t a = chunk_lo(V, c->dp, dp_i), b = chunk_lo(V, c->dp, dp_i + 1);
    return flat >= a && flat < b ? flat - a : -1;
}

static bool piece_equal(const ptc_piece *x, const ptc_piece *y)
{
    if (!ptc_box_equal(&x->box, &y->box) || x->local_offset != y->local_offset)
        return false;
    for (int d = 0; d < x->box.ndim; d++)
        if (x->local_stride[d] != y->local_stride[d])
            return false;
    return true;
}

typedef struct full_shard {
    ptc_shard sh;
    size_t n;
    ptc_piece pc[256];
} full_shard;

static void get_shard(const ptc_layout *l, size_t t, int r, full_shard *f)
{
    assert_int_equal(ptc_layout_shard(l, t, r, &f->sh), PTC_OK);
    assert_int_equal(ptc_layout_pieces(l, t, r, f->pc, 256, &f->n), PTC_OK);
    assert_int_equal(f->n, f->sh.npieces);
}

static bool shard_same(const full_shard *a, const full_shard *b)
{
    if (a->sh.present != b->sh.present || a->sh.ndim != b->sh.ndim || a->n != b->n ||
        a->sh.flat != b->sh.flat)
        return false;
    for (int d = 0; d < a->sh.ndim; d++)
        if (a->sh.shape[d] != b->sh.shape[d])
            return false;
    for (size_t i = 0; i < a->n; i++)
        if (!piece_equal(&a->pc[i], &b->pc[i]))
            return false;
    return true;
}

static full_shard shards[8];

/* Check every shard of every tensor of @p l against the oracle. */
static void check_layout(const ptc_layout *l, const char *cfgtext)
{
    const ptc_config *c = ptc_layout_config(l);
    int W = ptc_config_world(c);
    int64_t nl = ptc_layout_nlayers(l);
    for (size_t t = 0; t < ptc_layout_count(l); t++) {
        const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
        const ptc_placement *p = ptc_layout_placement(l, t);
        int64_t vol = 1;
        for (int d = 0; d < ti->ndim; d++)
            vol *= ti->shape[d];
        for (int r = 0; r < W; r++)
            get_shard(l, t, r, &shards[r]);
        for (int r = 0; r < W; r++) {
            full_shard *f = &shards[r];
            int s, dpi, tpi;
            ptc_config_coords(c, r, &s, &dpi, &tpi);
            bool on = expected_on_stage(p, c, nl, s);
            if (f->sh.present != on)
                fail_msg("%s: tensor %s rank %d present=%d", cfgtext, ti->name, r, on);
            assert_int_equal(ptc_layout_on_stage(l, t, s), on);
            if (!on) {
                assert_int_equal(f->sh.owner, -1);
                assert_int_equal(f->n, 0);
                continue;
            }
            /* local shape */
            int64_t lshape[PTC_MAX_DIMS], lvol = 1, held = 0;
            bool flat = c->zero && p->kind == PTC_KIND_OPTIM;
            assert_int_equal(f->sh.flat, flat);
            tp_local_shape(ti, p, c->tp, tpi, lshape);
            if (flat) {
                int64_t V = 1;
                for (int d = 0; d < ti->ndim; d++)
                    V *= lshape[d];
                assert_int_equal(f->sh.ndim, 1);
                assert_int_equal(f->sh.flat_lo, chunk_lo(V, c->dp, dpi));
                assert_int_equal(f->sh.flat_hi, chunk_lo(V, c->dp, dpi + 1));
                lshape[0] = f->sh.flat_hi - f->sh.flat_lo;
                for (int d = 1; d < PTC_MAX_DIMS; d++)
                    lshape[d] = 0;
            } else {
                assert_int_equal(f->sh.ndim, ti->ndim);
            }
            for (int d = 0; d < f->sh.ndim; d++) {
                assert_int_equal(f->sh.shape[d], lshape[d]);
                lvol *= lshape[d];
            }
            /* every piece element lands where the oracle says, once */
            unsigned char seen_local[4096] = {0};
            unsigned char seen_global[4096] = {0};
            assert_true(lvol <= 4096 && vol <= 4096);
            for (size_t i = 0; i < f->n; i++) {
                const ptc_piece *pc = &f->pc[i];
                assert_int_equal(pc->box.ndim, ti->ndim);
                assert_true(ptc_box_volume(&pc->box) > 0);
                int64_t g[PTC_MAX_DIMS];
                memcpy(g, pc->box.lo, sizeof g);
                for (;;) {
                    int64_t gi = 0;
                    for (int d = 0; d < ti->ndim; d++)
                        gi = gi * ti->shape[d] + g[d];
                    int64_t li = ptc_piece_local_index(pc, g);
                    int64_t want = oracle(ti, p, c, g, tpi, dpi);
                    if (li != want)
                        fail_msg("%s: %s rank %d piece %zu: local %lld, oracle %lld", cfgtext,
                                 ti->name, r, i, (long long)li, (long long)want);
                    assert_true(li >= 0 && li < lvol);
                    assert_int_equal(seen_local[li]++, 0);
                    assert_int_equal(seen_global[gi]++, 0);
                    held++;
                    int d = ti->ndim - 1;
                    while (d >= 0 && ++g[d] == pc->box.hi[d]) {
                        g[d] = pc->box.lo[d];
                        d--;
                    }
                    if (d < 0)
                        break;
                }
                /* contiguous pieces of a flat shard have the box's own strides */
                if (flat) {
                    int64_t ext[PTC_MAX_DIMS], own[PTC_MAX_DIMS], last[PTC_MAX_DIMS];
                    for (int d = 0; d < ti->ndim; d++) {
                        ext[d] = pc->box.hi[d] - pc->box.lo[d];
                        last[d] = pc->box.hi[d] - 1;
                    }
                    ptc_strides_row_major(ti->ndim, ext, own);
                    if (ptc_piece_local_index(pc, last) - pc->local_offset + 1 ==
                        ptc_box_volume(&pc->box))
                        for (int d = 0; d < ti->ndim; d++)
                            assert_int_equal(pc->local_stride[d], own[d]);
                }
            }
            /* and every element the oracle gives this rank is in a piece */
            assert_int_equal(held, lvol == 0 ? 0 : lvol);
            int64_t count = 0;
            int64_t g[PTC_MAX_DIMS] = {0};
            for (int64_t gi = 0; gi < vol; gi++) {
                int64_t x = gi;
                for (int d = ti->ndim - 1; d >= 0; d--) {
                    g[d] = x % ti->shape[d];
                    x /= ti->shape[d];
                }
                count += oracle(ti, p, c, g, tpi, dpi) >= 0;
            }
            assert_int_equal(count, held);
            /* owner: the lowest rank with an identical shard */
            int own = -1;
            for (int q = 0; q < W && own < 0; q++)
                if (shard_same(&shards[q], f))
                    own = q;
            if (f->sh.owner != own)
                fail_msg("%s: %s rank %d owner %d, brute force %d", cfgtext, ti->name, r,
                         f->sh.owner, own);
        }
        /* tiling over each (stage, dp) group: each element exactly once over
         * tp for split tensors; flat tensors exactly once over (dp, tp). */
        for (int s = 0; s < c->pp; s++) {
            if (!expected_on_stage(p, c, nl, s))
                continue;
            int cnt[4096];
            bool flat = c->zero && p->kind == PTC_KIND_OPTIM;
            for (int dpi = 0; dpi < c->dp; dpi++) {
                if (flat && dpi > 0)
                    break;
                memset(cnt, 0, sizeof cnt);
                for (int dq = flat ? 0 : dpi; dq <= (flat ? c->dp - 1 : dpi); dq++)
                    for (int tpi = 0; tpi < c->tp; tpi++) {
                        full_shard *f = &shards[ptc_config_rank(c, s, dq, tpi)];
                        for (size_t i = 0; i < f->n; i++) {
                            ptc_box b = f->pc[i].box;
                            int64_t g[PTC_MAX_DIMS];
                            memcpy(g, b.lo, sizeof g);
                            for (;;) {
                                int64_t gi = 0;
                                for (int d = 0; d < ti->ndim; d++)
                                    gi = gi * ti->shape[d] + g[d];
                                cnt[gi]++;
                                int d = ti->ndim - 1;
                                while (d >= 0 && ++g[d] == b.hi[d]) {
                                    g[d] = b.lo[d];
                                    d--;
                                }
                                if (d < 0)
                                    break;
                            }
                        }
                    }
                int want = p->tp == PTC_TP_SPLIT ? 1 : c->tp;
                for (int64_t gi = 0; gi < vol; gi++)
                    if (cnt[gi] != want)
                        fail_msg("%s: %s stage %d: element %lld covered %d times, want %d",
                                 cfgtext, ti->name, s, (long long)gi, cnt[gi], want);
            }
        }
        /* owners and groups agree with the shards */
        int owners[8];
        assert_int_equal(ptc_layout_owners(l, t, owners), PTC_OK);
        for (int r = 0; r < W; r++)
            assert_int_equal(owners[r], shards[r].sh.owner);
        ptc_shard_group *gr;
        size_t ng;
        assert_int_equal(ptc_layout_groups(l, t, &gr, &ng), PTC_OK);
        size_t total = 0;
        int prev_owner = -1;
        for (size_t i = 0; i < ng; i++) {
            assert_true(gr[i].owner > prev_owner);
            prev_owner = gr[i].owner;
            assert_true(gr[i].nranks >= 1);
            assert_int_equal(gr[i].ranks[0], gr[i].owner);
            for (size_t k = 0; k < gr[i].nranks; k++) {
                assert_int_equal(owners[gr[i].ranks[k]], gr[i].owner);
                if (k)
                    assert_true(gr[i].ranks[k] > gr[i].ranks[k - 1]);
            }
            total += gr[i].nranks;
        }
        size_t present = 0;
        for (int r = 0; r < W; r++)
            present += owners[r] >= 0;
        assert_int_equal(total, present);
        ptc_layout_groups_free(gr);
    }
}

static void test_all_small_configs(void **state)
{
    (void)state;
    build_mixed();
    ptc_rules *rules = NULL;
    assert_int_equal(ptc_rules_parse(&rules, mixed_rules, strlen(mixed_rules), "mixed"), PTC_OK);
    int checked = 0;
    for (int dp = 1; dp <= 8; dp++)
        for (int tp = 1; dp * tp <= 8; tp++)
            for (int pp = 1; dp * tp * pp <= 8; pp++)
                for (int zero = 0; zero <= 1; zero++) {
                    char text[64];
                    snprintf(text, sizeof text, "dp=%d,tp=%d,pp=%d,zero=%d", dp, tp, pp, zero);
                    ptc_config c;
                    assert_int_equal(ptc_config_parse(&c, text), PTC_OK);
                    ptc_layout *l = NULL;
                    if (ptc_layout_create(&l, mixed, nmixed, rules, &c) != PTC_OK)
                        fail_msg("%s: %s", text, ptc_last_error());
                    assert_int_equal(ptc_layout_nlayers(l), 5);
                    check_layout(l, text);
                    ptc_layout_destroy(l);
                    checked++;
                }
    const char *overrides[] = {"pp=2,layers=5:0",       "pp=2,layers=1:4,dp=2,zero=1",
                               "pp=3,layers=2:2:1,tp=2", "pp=4,layers=0:2:0:3",
                               "pp=4,tp=2,layers=0:0:0:5,zero=1"};
    for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++) {
        ptc_config c;
        assert_int_equal(ptc_config_parse(&c, overrides[i]), PTC_OK);
        ptc_layout *l = NULL;
        if (ptc_layout_create(&l, mixed, nmixed, rules, &c) != PTC_OK)
            fail_msg("%s: %s", overrides[i], ptc_last_error());
        check_layout(l, overrides[i]);
        ptc_layout_destroy(l);
        checked++;
    }
    assert_true(checked > 40);
    ptc_rules_destroy(rules);
}

/* ---- hand-worked examples --------------------------------------------------------- */

static ptc_layout *make(const char *rules_text, const ptc_tensor_info *t, size_t n,
                        const char *cfg)
{
    ptc_rules *r = NULL;
    ptc_config c;
    assert_int_equal(ptc_rules_parse(&r, rules_text, strlen(rules_text), "r"), PTC_OK);
    assert_int_equal(ptc_config_parse(&c, cfg), PTC_OK);
    ptc_layout *l = NULL;
    int rc = ptc_layout_create(&l, t, n, r, &c);
    ptc_rules_destroy(r);
    if (rc != PTC_OK)
        fail_msg("layout: %s", ptc_last_error());
    return l;
}

static void expect_piece(const ptc_piece *p, int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1,
                         int64_t off, int64_t st0, int64_t st1)
{
    if (p->box.lo[0] != lo0 || p->box.hi[0] != hi0 || p->box.lo[1] != lo1 ||
        p->box.hi[1] != hi1 || p->local_offset != off || p->local_stride[0] != st0 ||
        p->local_stride[1] != st1)
        fail_msg("piece [%lld,%lld)x[%lld,%lld) off %lld strides %lld,%lld; want "
                 "[%lld,%lld)x[%lld,%lld) off %lld strides %lld,%lld",
                 (long long)p->box.lo[0], (long long)p->box.hi[0], (long long)p->box.lo[1],
                 (long long)p->box.hi[1], (long long)p->local_offset,
                 (long long)p->local_stride[0], (long long)p->local_stride[1], (long long)lo0,
                 (long long)hi0, (long long)lo1, (long long)hi1, (long long)off,
                 (long long)st0, (long long)st1);
}

static void test_fused_qkv_uneven(void **state)
{
    (void)state;
    /* GPT-2 c_attn: Conv1D [in=2, out=9] = [q;k;v] of 3 columns each, tp=2:
     * each block of 3 splits 2 + 1 */
    ptc_tensor_info t = {.name = "h.0.attn.c_attn.weight", .dtype = PTC_DTYPE_F32, .ndim = 2,
                         .shape = {2, 9}};
    ptc_layout *l = make("layer h.{L}.\nmatch * tp=split(1,blocks=3)\n", &t, 1, "tp=2");
    ptc_shard sh;
    ptc_piece pc[8];
    size_t n;
    assert_int_equal(ptc_layout_shard(l, 0, 0, &sh), PTC_OK);
    assert_true(sh.present && !sh.flat && sh.ndim == 2 && sh.shape[0] == 2 && sh.shape[1] == 6);
    assert_int_equal(sh.owner, 0);
    assert_int_equal(ptc_layout_pieces(l, 0, 0, pc, 8, &n), PTC_OK);
    assert_int_equal(n, 3);
    expect_piece(&pc[0], 0, 2, 0, 2, 0, 6, 1);
    expect_piece(&pc[1], 0, 2, 3, 5, 2, 6, 1);
    expect_piece(&pc[2], 0, 2, 6, 8, 4, 6, 1);
    assert_int_equal(ptc_layout_shard(l, 0, 1, &sh), PTC_OK);
    assert_true(sh.shape[0] == 2 && sh.shape[1] == 3 && sh.owner == 1);
    assert_int_equal(ptc_layout_pieces(l, 0, 1, pc, 8, &n), PTC_OK);
    assert_int_equal(n, 3);
    expect_piece(&pc[0], 0, 2, 2, 3, 0, 3, 1);
    expect_piece(&pc[1], 0, 2, 5, 6, 1, 3, 1);
    expect_piece(&pc[2], 0, 2, 8, 9, 2, 3, 1);
    /* too little room: the count still comes back */
    assert_int_equal(ptc_layout_pieces(l, 0, 1, pc, 2, &n), PTC_E_RANGE);
    assert_int_equal(n, 3);
    assert_int_equal(ptc_layout_pieces(l, 0, 2, pc, 8, &n), PTC_E_RANGE);
    assert_int_equal(ptc_layout_shard(l, 1, 0, &sh), PTC_E_RANGE);
    ptc_layout_destroy(l);
}

static void test_tied_first_last(void **state)
{
    (void)state;
    ptc_tensor_info t[3] = {
        {.name = "wte.weight", .dtype = PTC_DTYPE_BF16, .ndim = 2, .shape = {5, 2}},
        {.name = "h.0.w", .dtype = PTC_DTYPE_BF16, .ndim = 1, .shape = {2}},
        {.name = "h.1.w", .dtype = PTC_DTYPE_BF16, .ndim = 1, .shape = {2}},
    };
    /* dp=2, tp=2, pp=3: stage s holds ranks 4s..4s+3 */
    ptc_layout *l = make("layer h.{L}.\nmatch wte.weight tp=split(0) pp=first+last\n"
                         "match * tp=replicate\n", t, 3, "dp=2,tp=2,pp=3");
    int owners[12];
    assert_int_equal(ptc_layout_owners(l, 0, owners), PTC_OK);
    int want[12] = {0, 1, 0, 1, -1, -1, -1, -1, 0, 1, 0, 1};
    assert_memory_equal(owners, want, sizeof want);
    ptc_shard_group *g;
    size_t ng;
    assert_int_equal(ptc_layout_groups(l, 0, &g, &ng), PTC_OK);
    assert_int_equal(ng, 2);
    assert_int_equal(g[0].owner, 0);
    assert_int_equal(g[0].nranks, 4);
    int r0[4] = {0, 2, 8, 10}, r1[4] = {1, 3, 9, 11};
    assert_memory_equal(g[0].ranks, r0, sizeof r0);
    assert_memory_equal(g[1].ranks, r1, sizeof r1);
    ptc_layout_groups_free(g);
    ptc_layout_groups_free(NULL);
    ptc_piece pc[4];
    size_t n;
    assert_int_equal(ptc_layout_pieces(l, 0, 9, pc, 4, &n), PTC_OK);
    assert_int_equal(n, 1);
    expect_piece(&pc[0], 3, 5, 0, 2, 0, 2, 1);
    /* 2 layers over 3 stages: floor(s*2/3) gives layer 0 -> stage 1, 1 -> 2 */
    assert_false(ptc_layout_on_stage(l, 1, 0));
    assert_true(ptc_layout_on_stage(l, 1, 1));
    assert_true(ptc_layout_on_stage(l, 2, 2));
    assert_int_equal(ptc_layout_owners(l, 2, owners), PTC_OK);
    int want2[12] = {-1, -1, -1, -1, -1, -1, -1, -1, 8, 8, 8, 8};
    assert_memory_equal(owners, want2, sizeof want2);
    size_t idx;
    assert_int_equal(ptc_layout_find(l, "h.1.w", &idx), PTC_OK);
    assert_int_equal(idx, 2);
    assert_int_equal(ptc_layout_find(l, "h.2.w", &idx), PTC_E_NOTFOUND);
    assert_string_equal(ptc_layout_tensor(l, 0)->name, "wte.weight");
    ptc_layout_destroy(l);
}

static void test_empty_parts(void **state)
{
    (void)state;
    /* 2 rows over tp=4: parts 1, 1, 0, 0; the two empty shards are one */
    ptc_tensor_info t = {.name = "x", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {2, 4}};
    ptc_layout *l = make("match * tp=split(0) pp=first\n", &t, 1, "tp=4");
    ptc_shard sh;
    ptc_piece pc[2];
    size_t n;
    assert_int_equal(ptc_layout_shard(l, 0, 3, &sh), PTC_OK);
    assert_true(sh.present && sh.ndim == 2 && sh.shape[0] == 0 && sh.shape[1] == 4);
    assert_int_equal(sh.npieces, 0);
    assert_int_equal(sh.owner, 2);
    assert_int_equal(ptc_layout_pieces(l, 0, 3, pc, 0, &n), PTC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ptc_layout_pieces(l, 0, 1, pc, 2, &n), PTC_OK);
    assert_int_equal(n, 1);
    expect_piece(&pc[0], 1, 2, 0, 4, 0, 4, 1);
    ptc_layout_destroy(l);
}

static void test_zero_pieces(void **state)
{
    (void)state;
    /* [3,4] optimizer state, dp=2: ranges [0,6) and [6,12) */
    ptc_tensor_info t = {.name = "w.exp_avg", .dtype = PTC_DTYPE_F32, .ndim = 2,
                         .shape = {3, 4}};
    ptc_layout *l = make("optim .exp_avg\nmatch * pp=all\n", &t, 1, "dp=2,zero=1");
    ptc_shard sh;
    ptc_piece pc[4];
    size_t n;
    assert_int_equal(ptc_layout_shard(l, 0, 0, &sh), PTC_OK);
    assert_true(sh.flat && sh.ndim == 1 && sh.shape[0] == 6 && sh.flat_lo == 0 &&
                sh.flat_hi == 6);
    assert_int_equal(ptc_layout_pieces(l, 0, 0, pc, 4, &n), PTC_OK);
    assert_int_equal(n, 2);
    expect_piece(&pc[0], 0, 1, 0, 4, 0, 4, 1);
    expect_piece(&pc[1], 1, 2, 0, 2, 4, 2, 1);
    assert_int_equal(ptc_layout_pieces(l, 0, 1, pc, 4, &n), PTC_OK);
    assert_int_equal(n, 2);
    expect_piece(&pc[0], 1, 2, 2, 4, 0, 2, 1);
    expect_piece(&pc[1], 2, 3, 0, 4, 2, 4, 1);
    ptc_layout_destroy(l);

    /* fused columns, tp=2, zero=1, dp=1: one flat box crossing three block
     * parts; the pieces are not contiguous in the 1-D tensor, so they keep
     * the tp-local row stride 6 */
    ptc_tensor_info q = {.name = "c.m", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {2, 9}};
    l = make("optim .m\nmatch c tp=split(1,blocks=3) pp=first\n", &q, 1, "tp=2,zero=1");
    assert_int_equal(ptc_layout_pieces(l, 0, 0, pc, 4, &n), PTC_OK);
    assert_int_equal(n, 3);
    expect_piece(&pc[0], 0, 2, 0, 2, 0, 6, 1);
    expect_piece(&pc[1], 0, 2, 3, 5, 2, 6, 1);
    expect_piece(&pc[2], 0, 2, 6, 8, 4, 6, 1);
    ptc_layout_destroy(l);
    /* dp=2: each rank holds one row of the tp-local [2,6] */
    l = make("optim .m\nmatch c tp=split(1,blocks=3) pp=first\n", &q, 1, "dp=2,tp=2,zero=1");
    assert_int_equal(ptc_layout_pieces(l, 0, 2, pc, 4, &n), PTC_OK); /* dp 1, tp 0 */
    assert_int_equal(n, 3);
    expect_piece(&pc[0], 1, 2, 0, 2, 0, 2, 1);
    expect_piece(&pc[1], 1, 2, 3, 5, 2, 2, 1);
    expect_piece(&pc[2], 1, 2, 6, 8, 4, 2, 1);
    ptc_layout_destroy(l);
    /* a scalar over dp=3: rank 0 holds it, ranks 1 and 2 hold the same empty
     * shard, owned by rank 1 */
    ptc_tensor_info s = {.name = "step.m", .dtype = PTC_DTYPE_I64, .ndim = 0};
    l = make("optim .m\nmatch * pp=first\n", &s, 1, "dp=3,zero=1");
    int owners[3];
    assert_int_equal(ptc_layout_owners(l, 0, owners), PTC_OK);
    assert_true(owners[0] == 0 && owners[1] == 1 && owners[2] == 1);
    assert_int_equal(ptc_layout_pieces(l, 0, 0, pc, 4, &n), PTC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(pc[0].box.ndim, 0);
    assert_int_equal(pc[0].local_offset, 0);
    ptc_layout_destroy(l);
}

/* ---- errors ---------------------------------------------------------------------- */

static void expect_create_error(const char *rules_text, const ptc_tensor_info *t, size_t n,
                                const char *cfg, int code, const char *needle)
{
    ptc_rules *r = NULL;
    ptc_config c;
    assert_int_equal(ptc_rules_parse(&r, rules_text, strlen(rules_text), "r"), PTC_OK);
    assert_int_equal(ptc_config_parse(&c, cfg), PTC_OK);
    ptc_layout *l = (ptc_layout *)1;
    int rc = ptc_layout_create(&l, t, n, r, &c);
    ptc_rules_destroy(r);
    if (rc != code || !strstr(ptc_last_error(), needle))
        fail_msg("rc %d, message '%s' (wanted %d, '%s')", rc, ptc_last_error(), code, needle);
    assert_null(l);
}

static void test_errors(void **state)
{
    (void)state;
    ptc_tensor_info t[3] = {
        {.name = "l.0.w", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {6, 4}},
        {.name = "l.2.w", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {6, 4}},
        {.name = "top", .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {5}},
    };
    const char *base = "layer l.{L}.\nmatch l.* tp=split(0)\nmatch top pp=first\n";
    expect_create_error(base, t, 3, "pp=1", PTC_E_RULE,
                        "layer 1 is missing: tensor 'l.2.w' has layer 2");
    t[1].name = "l.1.w";
    expect_create_error(base, t, 3, "pp=2,layers=1:2", PTC_E_CONFIG, "sums to 3");
    expect_create_error("layer l.{L}.\nmatch l.* tp=split(2)\nmatch top pp=first\n", t, 3,
                        "tp=2", PTC_E_RULE, "tensor 'l.0.w': split dim 2 but the tensor has 2");
    expect_create_error("layer l.{L}.\nmatch l.* tp=replicate\nmatch top tp=split(0,blocks=2) "
                        "pp=first\n", t, 3, "tp=2", PTC_E_RULE,
                        "tensor 'top': dim 0 of size 5 is not divisible into 2 blocks");
    expect_create_error("layer l.{L}.\nmatch l.* tp=split(1,blocks=1:2)\nmatch top pp=first\n",
                        t, 3, "tp=2", PTC_E_RULE, "tensor 'l.0.w': blocks sum to 3 but dim 1");
    expect_create_error("layer l.{L}.\nmatch l.* tp=split(1,blocks=4611686018427387904:"
                        "4611686018427387904)\nmatch top pp=first\n",
                        t, 3, "tp=2", PTC_E_RULE, "blocks sum to more than");
    expect_create_error("layer l.{L}.\nmatch l.* tp=replicate\n", t, 3, "tp=2", PTC_E_RULE,
                        "no placement rule matches tensor 'top'");
    expect_create_error("layer l.{L}.\nmatch * tp=replicate\n", t, 3, "tp=2", PTC_E_RULE,
                        "tensor 'top' has no layer index");
    ptc_tensor_info d[2] = {t[2], t[2]};
    expect_create_error(base, d, 2, "tp=1", PTC_E_INVAL, "tensor 'top' is listed twice");
    ptc_tensor_info bad = t[2];
    bad.ndim = 9;
    expect_create_error(base, &bad, 1, "tp=1", PTC_E_INVAL, "9 dims");
    bad = t[2];
    bad.shape[0] = -1;
    expect_create_error(base, &bad, 1, "tp=1", PTC_E_INVAL, "negative extent");
    bad = t[2];
    bad.dtype = PTC_DTYPE_COUNT;
    expect_create_error(base, &bad, 1, "tp=1", PTC_E_INVAL, "bad dtype");
    bad = t[2];
    bad.name = NULL;
    expect_create_error(base, &bad, 1, "tp=1", PTC_E_INVAL, "has no name");
    char longname[1100];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    bad = t[2];
    bad.name = longname;
    expect_create_error("match * pp=all\n", &bad, 1, "tp=1", PTC_E_INVAL, "longer than 1024");
    bad = t[2];
    bad.ndim = 3;
    bad.shape[0] = bad.shape[1] = bad.shape[2] = (int64_t)1 << 30;
    expect_create_error(base, &bad, 1, "tp=1", PTC_E_RANGE, "element count overflows");
    /* an empty tensor whose other extents overflow together (a zero extent
     * hid it: the volume beside a split dim overflowed; found by the fuzzer) */
    bad.shape[0] = 0;
    bad.shape[1] = (int64_t)18014819416276993;
    bad.shape[2] = 2816;
    expect_create_error(base, &bad, 1, "tp=1", PTC_E_RANGE, "element count overflows");
    /* an empty collection is fine; layers= must then sum to 0 */
    ptc_layout *l = make(base, t, 0, "pp=2,layers=0:0");
    assert_int_equal(ptc_layout_count(l), 0);
    assert_int_equal(ptc_layout_nlayers(l), 0);
    ptc_layout_destroy(l);
    expect_create_error(base, t, 0, "pp=2,layers=1:0", PTC_E_CONFIG, "sums to 1");
}

static void test_alloc_failures(void **state)
{
    (void)state;
    build_mixed();
    ptc_rules *r = NULL;
    ptc_config c;
    assert_int_equal(ptc_rules_parse(&r, mixed_rules, strlen(mixed_rules), "m"), PTC_OK);
    assert_int_equal(ptc_config_parse(&c, "dp=2,tp=2,pp=2,zero=1"), PTC_OK);
    ptc_fault_alloc_at(0);
    ptc_layout *l = NULL;
    assert_int_equal(ptc_layout_create(&l, mixed, nmixed, r, &c), PTC_OK);
    ptc_shard_group *g;
    size_t ng;
    assert_int_equal(ptc_layout_groups(l, 0, &g, &ng), PTC_OK);
    long total = ptc_fault_alloc_count();
    ptc_layout_groups_free(g);
    ptc_layout_destroy(l);
    for (long i = 1; i <= total; i++) {
        ptc_fault_alloc_at(i);
        l = (ptc_layout *)1;
        int rc = ptc_layout_create(&l, mixed, nmixed, r, &c);
        if (rc == PTC_OK) {
            g = (ptc_shard_group *)1;
            rc = ptc_layout_groups(l, 0, &g, &ng);
            assert_int_equal(rc, PTC_E_NOMEM);
            assert_null(g);
            ptc_layout_destroy(l);
        } else {
            assert_int_equal(rc, PTC_E_NOMEM);
            assert_null(l);
        }
    }
    ptc_fault_alloc_at(0);
    ptc_rules_destroy(r);
}

/* ---- speed ----------------------------------------------------------------------- */


static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_speed(void **state)
{
    (void)state;
    /* 1000 tensors (llama naming, parameters and Adam moments), 64 ranks */
    static ptc_tensor_info t[1000];
    static char names[1000][80];
    static const char *const parts[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                        "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                                        "mlp.down_proj.weight"};
    size_t n = 0;
    for (int L = 0; n + 10 <= 1000; L++)
        for (int k = 0; k < 5; k++)
            for (int o = 0; o < 2; o++) {
                snprintf(names[n], sizeof names[n], "model.layers.%d.%s%s", L, parts[k],
                         o ? ".exp_avg" : "");
                t[n].name = names[n];
                t[n].dtype = PTC_DTYPE_BF16;
                t[n].ndim = 2;
                t[n].shape[0] = 4096 + 3 * k;
                t[n].shape[1] = 4096 - k;
                n++;
            }
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load(&r, "llama"), PTC_OK);
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "dp=4,tp=4,pp=4,zero=1"), PTC_OK);
    static ptc_piece pc[1024];
    double t0 = now_ms();
    ptc_layout *l = NULL;
    assert_int_equal(ptc_layout_create(&l, t, n, r, &c), PTC_OK);
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        for (int rank = 0; rank < 64; rank++) {
            ptc_shard sh;
            size_t np;
            assert_int_equal(ptc_layout_shard(l, i, rank, &sh), PTC_OK);
            assert_int_equal(ptc_layout_pieces(l, i, rank, pc, 1024, &np), PTC_OK);
            total += (int64_t)np;
        }
    double ms = now_ms() - t0;
    /* the speed goal (under 100 ms) is bench/bench_layout.c's: a unit test
     * asserts no wall time */
    print_message("1000 tensors x 64 ranks: %.1f ms, %lld pieces\n", ms, (long long)total);
    assert_true(total > 0);
    ptc_layout_destroy(l);
    ptc_rules_destroy(r);
}


/* ---- head-aware splits ----------------------------------------------------------- */

/* One Llama layer with 8 query heads and 2 key/value heads of head_dim 8
 * (hidden 64), placed by the llama preset with its parameters. */
static const char *const gqa_names[] = {
    "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
    "model.layers.0.self_attn.k_proj.weight.exp_avg",
};
static const int64_t gqa_rows[] = {64, 16, 16, 64, 16};

static ptc_layout *gqa_layout(const char *cfgtext, int expect_rc)
{
    ptc_tensor_info t[5];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 5; i++) {
        t[i].name = gqa_names[i];
        t[i].dtype = PTC_DTYPE_F32;
        t[i].ndim = 2;
        t[i].shape[0] = gqa_rows[i];
        t[i].shape[1] = 64;
    }
    const ptc_rules_param params[] = {
        {"num_attention_heads", 8}, {"num_key_value_heads", 2}, {"head_dim", 8}};
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load_params(&r, "llama", params, 3), PTC_OK);
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, cfgtext), PTC_OK);
    ptc_layout *l = NULL;
    int rc = ptc_layout_create(&l, t, 5, r, &c);
    ptc_rules_destroy(r);
    assert_int_equal(rc, expect_rc);
    return l;
}

/* Tensor t on rank: one piece covering rows [lo, hi) (dim d) of the whole tensor. */
static void expect_rows(const ptc_layout *l, size_t t, int rank, int d, int64_t lo, int64_t hi,
                        int owner)
{
    ptc_shard sh;
    ptc_piece pc[4];
    size_t np;
    assert_int_equal(ptc_layout_shard(l, t, rank, &sh), PTC_OK);
    assert_true(sh.present);
    assert_int_equal(sh.owner, owner);
    assert_int_equal(ptc_layout_pieces(l, t, rank, pc, 4, &np), PTC_OK);
    assert_int_equal(np, 1);
    for (int e = 0; e < 2; e++) {
        int64_t full = ptc_layout_tensor(l, t)->shape[e];
        assert_int_equal(pc[0].box.lo[e], e == d ? lo : 0);
        assert_int_equal(pc[0].box.hi[e], e == d ? hi : full);
        assert_int_equal(sh.shape[e], e == d ? hi - lo : full);
    }
    assert_int_equal(pc[0].local_offset, 0);
}

static void test_gqa_kv_heads(void **state)
{
    (void)state;
    /* tp=4 > 2 kv heads: rank i holds kv head floor(i*2/4), whole, rows 8h..8h+8;
     * ranks 0,1 hold replicas of head 0 (owner 0), ranks 2,3 of head 1 */
    ptc_layout *l = gqa_layout("tp=4", PTC_OK);
    static const int64_t k4[4] = {0, 0, 8, 8};
    static const int own4[4] = {0, 0, 2, 2};
    for (int r = 0; r < 4; r++) {
        expect_rows(l, 0, r, 0, 16 * r, 16 * r + 16, r); /* q: 2 heads each */
        expect_rows(l, 1, r, 0, k4[r], k4[r] + 8, own4[r]);
        expect_rows(l, 2, r, 0, k4[r], k4[r] + 8, own4[r]);
        expect_rows(l, 3, r, 1, 16 * r, 16 * r + 16, r); /* o: its q heads' columns */
    }
    ptc_shard_group *g = NULL;
    size_t ng;
    assert_int_equal(ptc_layout_groups(l, 1, &g, &ng), PTC_OK);
    assert_int_equal(ng, 2);
    assert_int_equal(g[0].owner, 0);
    assert_int_equal(g[0].nranks, 2);
    assert_int_equal(g[0].ranks[1], 1);
    assert_int_equal(g[1].owner, 2);
    assert_int_equal(g[1].nranks, 2);
    assert_int_equal(g[1].ranks[1], 3);
    ptc_layout_groups_free(g);
    char buf[128];
    assert_int_equal(ptc_placement_format(ptc_layout_placement(l, 1), buf, sizeof buf), PTC_OK);
    assert_string_equal(buf, "tp=split(0,kv_heads=2,head_dim=8) pp=layer layer=0 kind=param");
    ptc_layout_destroy(l);

    /* tp=8: kv head floor(i*2/8): ranks 0-3 rows [0,8), ranks 4-7 rows [8,16) */
    l = gqa_layout("tp=8", PTC_OK);
    for (int r = 0; r < 8; r++) {
        expect_rows(l, 0, r, 0, 8 * r, 8 * r + 8, r);
        expect_rows(l, 1, r, 0, r < 4 ? 0 : 8, r < 4 ? 8 : 16, r < 4 ? 0 : 4);
        expect_rows(l, 3, r, 1, 8 * r, 8 * r + 8, r);
    }
    ptc_layout_destroy(l);

    /* tp=2 divides both: the split rule, one kv head per rank */
    l = gqa_layout("tp=2", PTC_OK);
    expect_rows(l, 1, 1, 0, 8, 16, 1);
    ptc_layout_destroy(l);

    /* zero=1: optimizer state of a replicated kv head is flat over dp; the
     * tp ranks that share the head share its ranges */
    l = gqa_layout("dp=2,tp=4,zero=1", PTC_OK);
    int owners[8];
    assert_int_equal(ptc_layout_owners(l, 4, owners), PTC_OK);
    static const int zo[8] = {0, 0, 2, 2, 4, 4, 6, 6};
    for (int r = 0; r < 8; r++) {
        assert_int_equal(owners[r], zo[r]);
        ptc_shard sh;
        ptc_piece pc[4];
        size_t np;
        assert_int_equal(ptc_layout_shard(l, 4, r, &sh), PTC_OK);
        assert_true(sh.flat);
        assert_int_equal(sh.shape[0], 256); /* 8 rows x 64 over dp=2 */
        assert_int_equal(ptc_layout_pieces(l, 4, r, pc, 4, &np), PTC_OK);
        assert_int_equal(np, 1);
        int64_t head = (r % 4) / 2, half = r / 4;
        assert_int_equal(pc[0].box.lo[0], head * 8 + half * 4);
        assert_int_equal(pc[0].box.hi[0], head * 8 + half * 4 + 4);
    }
    ptc_layout_destroy(l);

    /* tp=3 cuts the 8 query heads: refused, naming the tensor */
    gqa_layout("tp=3", PTC_E_RULE);
    assert_non_null(strstr(ptc_last_error(), "q_proj.weight"));
    assert_non_null(strstr(ptc_last_error(), "cut"));
}

static void test_heads_rules(void **state)
{
    (void)state;
    ptc_tensor_info t[2];
    memset(t, 0, sizeof t);
    t[0].name = "q";
    t[1].name = "kv";
    for (int i = 0; i < 2; i++) {
        t[i].dtype = PTC_DTYPE_F32;
        t[i].ndim = 2;
        t[i].shape[1] = 4;
    }
    t[0].shape[0] = 64; /* 8 heads of 8 */
    t[1].shape[0] = 24; /* 3 kv heads of 8 */
    ptc_config c3, c4, c6;
    assert_int_equal(ptc_config_parse(&c3, "tp=3"), PTC_OK);
    assert_int_equal(ptc_config_parse(&c4, "tp=4"), PTC_OK);
    assert_int_equal(ptc_config_parse(&c6, "tp=6"), PTC_OK);
    ptc_rules *r = NULL;
    ptc_layout *l = NULL;
    /* cut: a degree that does not fit the heads splits rows by the split rule */
    const char *cut = "match q tp=split(0,heads=8,cut) pp=all\n"
                      "match kv tp=split(0,kv_heads=3,head_dim=8,cut) pp=all\n";
    assert_int_equal(ptc_rules_parse(&r, cut, strlen(cut), "cut"), PTC_OK);
    assert_int_equal(ptc_layout_create(&l, t, 2, r, &c3), PTC_OK);
    expect_rows(l, 0, 2, 0, 44, 64, 2); /* rows 22+22+20 */
    ptc_layout_destroy(l);
    /* 3 kv heads over tp=6: two ranks per head */
    assert_int_equal(ptc_layout_create(&l, t, 2, r, &c6), PTC_OK);
    expect_rows(l, 1, 3, 0, 8, 16, 2);
    ptc_layout_destroy(l);
    ptc_rules_destroy(r);
    /* without cut: 3 kv heads over tp=4 (neither divides) is refused */
    const char *strict = "match q tp=split(0,heads=8) pp=all\n"
                         "match kv tp=split(0,kv_heads=3) pp=all\n";
    assert_int_equal(ptc_rules_parse(&r, strict, strlen(strict), "strict"), PTC_OK);
    assert_int_equal(ptc_layout_create(&l, t, 2, r, &c4), PTC_E_RULE);
    assert_non_null(strstr(ptc_last_error(), "'kv'"));
    assert_non_null(strstr(ptc_last_error(), "key/value"));
    /* the dry run lists every problem at once */
    size_t np = 99;
    ptc_config c5;
    assert_int_equal(ptc_config_parse(&c5, "tp=5"), PTC_OK);
    assert_int_equal(ptc_layout_check(t, 2, r, &c5, NULL, NULL, &np), PTC_OK);
    assert_int_equal(np, 2);
    assert_int_equal(ptc_layout_check(t, 2, r, &c3, NULL, NULL, &np), PTC_OK);
    assert_int_equal(np, 1); /* q only: 3 kv heads fit tp=3 */
    assert_int_equal(ptc_layout_check(t, 2, r, &c4, NULL, NULL, &np), PTC_OK);
    assert_int_equal(np, 1);
    ptc_rules_destroy(r);
    /* head_dim= is checked against the shape */
    const char *hd = "match q tp=split(0,heads=8,head_dim=16) pp=all\nmatch kv pp=all\n";
    assert_int_equal(ptc_rules_parse(&r, hd, strlen(hd), "hd"), PTC_OK);
    assert_int_equal(ptc_layout_create(&l, t, 2, r, &c4), PTC_E_RULE);
    assert_non_null(strstr(ptc_last_error(), "head_dim=16"));
    ptc_rules_destroy(r);
}

static void test_tied_unless(void **state)
{
    (void)state;
    /* llama: embed_tokens goes to the last stage too exactly when there is
     * no lm_head.weight */
    ptc_tensor_info t[4];
    memset(t, 0, sizeof t);
    const char *names[4] = {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight",
                            "model.layers.1.mlp.up_proj.weight", "lm_head.weight"};
    for (int i = 0; i < 4; i++) {
        t[i].name = names[i];
        t[i].dtype = PTC_DTYPE_F32;
        t[i].ndim = 2;
        t[i].shape[0] = 10;
        t[i].shape[1] = 4;
    }
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load(&r, "llama"), PTC_OK);
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "pp=2"), PTC_OK);
    ptc_layout *l = NULL;
    assert_int_equal(ptc_layout_create(&l, t, 4, r, &c), PTC_OK); /* untied */
    assert_int_equal(ptc_layout_placement(l, 0)->pp, PTC_PP_FIRST);
    assert_false(ptc_layout_on_stage(l, 0, 1));
    ptc_layout_destroy(l);
    assert_int_equal(ptc_layout_create(&l, t, 3, r, &c), PTC_OK); /* tied */
    assert_int_equal(ptc_layout_placement(l, 0)->pp, PTC_PP_FIRST_LAST);
    assert_true(ptc_layout_on_stage(l, 0, 1));
    ptc_layout_destroy(l);
    ptc_rules_destroy(r);

    /* Adam's 0-d step of a split parameter: replicated over tp, on its layer */
    ptc_tensor_info st[2];
    memset(st, 0, sizeof st);
    st[0].name = "model.layers.0.mlp.up_proj.weight";
    st[0].dtype = PTC_DTYPE_F32;
    st[0].ndim = 2;
    st[0].shape[0] = 6;
    st[0].shape[1] = 4;
    st[1].name = "model.layers.0.mlp.up_proj.weight.step";
    st[1].dtype = PTC_DTYPE_F32;
    st[1].ndim = 0;
    assert_int_equal(ptc_rules_load(&r, "llama"), PTC_OK);
    assert_int_equal(ptc_config_parse(&c, "tp=2"), PTC_OK);
    assert_int_equal(ptc_layout_create(&l, st, 2, r, &c), PTC_OK);
    const ptc_placement *sp = ptc_layout_placement(l, 1);
    assert_int_equal(sp->tp, PTC_TP_REPLICATE);
    assert_int_equal(sp->kind, PTC_KIND_OPTIM);
    assert_int_equal(sp->layer, 0);
    int own[2];
    assert_int_equal(ptc_layout_owners(l, 1, own), PTC_OK);
    assert_int_equal(own[0], 0);
    assert_int_equal(own[1], 0);
    ptc_layout_destroy(l);
    ptc_rules_destroy(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_small_configs), cmocka_unit_test(test_fused_qkv_uneven),
        cmocka_unit_test(test_tied_first_last),   cmocka_unit_test(test_empty_parts),
        cmocka_unit_test(test_zero_pieces),       cmocka_unit_test(test_errors),
        cmocka_unit_test(test_alloc_failures),    cmocka_unit_test(test_speed),
        cmocka_unit_test(test_gqa_kv_heads),      cmocka_unit_test(test_heads_rules),
        cmocka_unit_test(test_tied_unless),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
