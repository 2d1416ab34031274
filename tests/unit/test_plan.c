/* The resharding planner checked by brute force: every element of every
 * target rank's local tensors is filled with the right global id by running
 * the plan's transfers on id buffers; the network bytes equal the lower
 * bound counted from element sets; figures add up; the plan is
 * deterministic. Every configuration with dp*tp*pp <= 8 (zero 0/1, some
 * layers= overrides) is a target, from varied sources and host sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/plan.h"
#include "reshard/reshard_internal.h"

static const char mixed_rules[] =
    "layer blk.{L}.\n"
    "optim .m\n"
    "match blk.*.qkv tp=split(0,blocks=3)\n"
    "match blk.*.fused tp=split(1,blocks=2:3:1)\n"
    "match blk.*.col tp=split(0)\n"
    "match blk.*.row tp=split(1)\n"
    "match blk.*.rep tp=replicate\n"
    "match blk.*.scalar tp=replicate\n"
    "match emb tp=split(0) pp=first+last\n"
    "match head tp=split(0) pp=last\n"
    "match pos tp=replicate pp=first\n"
    "match everywhere tp=split(2) pp=all\n"
    "match empty tp=split(0) pp=first\n"
    "match state kind=optim tp=split(0) pp=all\n";

#define MAXT 64
static ptc_tensor_info mixed[MAXT];
static char mixed_names[MAXT][48];
static size_t nmixed;
static ptc_rules *rules;

static void add(const char *name, ptc_dtype dt, int ndim, int64_t a, int64_t b, int64_t c)
{
    ptc_tensor_info *t = &mixed[nmixed];
    memset(t, 0, sizeof *t);
    snprintf(mixed_names[nmixed], sizeof mixed_names[0], "%s", name);
    t->name = mixed_names[nmixed];
    t->dtype = dt;
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
    for (int L = 0; L < 3; L++) {
        static const char *const suf[] = {"", ".m"};
        for (int o = 0; o < 2; o++) {
            snprintf(n, sizeof n, "blk.%d.qkv%s", L, suf[o]);
            add(n, o ? PTC_DTYPE_F32 : PTC_DTYPE_BF16, 2, 9, 5, 0);
            snprintf(n, sizeof n, "blk.%d.fused%s", L, suf[o]);
            add(n, PTC_DTYPE_F32, 2, 3, 6, 0);
            snprintf(n, sizeof n, "blk.%d.scalar%s", L, suf[o]);
            add(n, PTC_DTYPE_F32, 0, 0, 0, 0);
            snprintf(n, sizeof n, "blk.%d.row%s", L, suf[o]);
            add(n, PTC_DTYPE_F32, 2, 7, 11, 0);
        }
        snprintf(n, sizeof n, "blk.%d.col", L);
        add(n, PTC_DTYPE_I8, 2, 5, 3, 0);
        snprintf(n, sizeof n, "blk.%d.rep", L);
        add(n, PTC_DTYPE_F32, 1, 3, 0, 0);
    }
    add("emb", PTC_DTYPE_F16, 2, 13, 3, 0);
    add("emb.m", PTC_DTYPE_F32, 2, 13, 3, 0);
    add("head", PTC_DTYPE_F32, 2, 3, 2, 0);
    add("pos", PTC_DTYPE_F32, 1, 4, 0, 0);
    add("everywhere", PTC_DTYPE_F64, 3, 2, 1, 5);
    add("everywhere.m", PTC_DTYPE_F32, 3, 2, 3, 5);
    add("empty", PTC_DTYPE_F32, 2, 0, 3, 0);
    add("state", PTC_DTYPE_F32, 1, 10, 0, 0);
}

static int setup(void **st)
{
    (void)st;
    build_mixed();
    return ptc_rules_parse(&rules, mixed_rules, strlen(mixed_rules), "test") == PTC_OK ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    ptc_rules_destroy(rules);
    return 0;
}

/* ---- brute force ---------------------------------------------------------------- */

static int64_t base_id[MAXT];

/* global id of element g of tensor t */
static int64_t gid(const ptc_tensor_info *ti, size_t t, const int64_t *g)
{
    int64_t f = 0;
    for (int d = 0; d < ti->ndim; d++)
        f = f * ti->shape[d] + g[d];
    return base_id[t] + f;
}

/* local buffers of every rank of a layout, filled with ids (target: -1) */
typedef struct bufs {
    int world;
    int64_t **b; /* [rank * ntensors + t] */
    int64_t *len;
} bufs;

static void for_each(const ptc_box *b, void (*fn)(const int64_t *g, void *u), void *u)
{
    if (ptc_box_is_empty(b))
        return;
    int64_t g[PTC_MAX_DIMS];
    memcpy(g, b->lo, sizeof g);
    for (;;) {
        fn(g, u);
        int d = b->ndim - 1;
        while (d >= 0 && ++g[d] == b->hi[d]) {
            g[d] = b->lo[d];
            d--;
        }
        if (d < 0)
            return;
    }
}

typedef struct fill_ctx {
    const ptc_tensor_info *ti;
    size_t t;
    const ptc_piece *pc;
    int64_t *buf, len;
    uint8_t *set; /* id set (for need/have) */
} fill_ctx;

static void fill_one(const int64_t *g, void *u)
{
    fill_ctx *c = u;
    int64_t li = ptc_piece_local_index(c->pc, g);
    assert_true(li >= 0 && li < c->len);
    if (c->buf)
        c->buf[li] = gid(c->ti, c->t, g);
    if (c->set)
        c->set[gid(c->ti, c->t, g)] = 1;
}

static void make_bufs(bufs *B, const ptc_layout *l, bool with_ids)
{
    B->world = ptc_config_world(ptc_layout_config(l));
    size_t nt = ptc_layout_count(l);
    B->b = calloc((size_t)B->world * nt, sizeof *B->b);
    B->len = calloc((size_t)B->world * nt, sizeof *B->len);
    for (int r = 0; r < B->world; r++)
        for (size_t t = 0; t < nt; t++) {
            ptc_shard sh;
            assert_int_equal(ptc_layout_shard(l, t, r, &sh), PTC_OK);
            if (!sh.present)
                continue;
            int64_t v = 1;
            for (int d = 0; d < sh.ndim; d++)
                v *= sh.shape[d];
            int64_t *buf = malloc(sizeof(int64_t) * (size_t)(v + 1));
            for (int64_t i = 0; i < v; i++)
                buf[i] = -1;
            B->b[(size_t)r * nt + t] = buf;
            B->len[(size_t)r * nt + t] = v;
            if (!with_ids)
                continue;
            ptc_piece pc[64];
            size_t np;
            assert_int_equal(ptc_layout_pieces(l, t, r, pc, 64, &np), PTC_OK);
            for (size_t i = 0; i < np; i++) {
                fill_ctx c = {ptc_layout_tensor(l, t), t, &pc[i], buf, v, NULL};
                for_each(&pc[i].box, fill_one, &c);
            }
        }
}

static void free_bufs(bufs *B, size_t nt)
{
    for (size_t i = 0; i < (size_t)B->world * nt; i++)
        free(B->b[i]);
    free(B->b);
    free(B->len);
}

typedef struct copy_ctx {
    const ptc_transfer *x;
    const int64_t *src;
    int64_t slen;
    int64_t *dst;
    int64_t dlen;
} copy_ctx;

static void copy_one(const int64_t *g, void *u)
{
    copy_ctx *c = u;
    int64_t so = c->x->src_offset, dof = c->x->dst_offset;
    for (int d = 0; d < c->x->box.ndim; d++) {
        so += (g[d] - c->x->box.lo[d]) * c->x->src_stride[d];
        dof += (g[d] - c->x->box.lo[d]) * c->x->dst_stride[d];
    }
    assert_true(so >= 0 && so < c->slen);
    assert_true(dof >= 0 && dof < c->dlen);
    assert_true(c->src[so] >= 0);
    c->dst[dof] = c->src[so];
}

static void check_pair(const char *src_cfg, const char *dst_cfg, int hosts)
{
    ptc_config cs, ct;
    assert_int_equal(ptc_config_parse(&cs, src_cfg), PTC_OK);
    assert_int_equal(ptc_config_parse(&ct, dst_cfg), PTC_OK);
    ptc_layout *ls, *lt;
    assert_int_equal(ptc_layout_create(&ls, mixed, nmixed, rules, &cs), PTC_OK);
    assert_int_equal(ptc_layout_create(&lt, mixed, nmixed, rules, &ct), PTC_OK);
    ptc_plan_options o = {.hosts = hosts};
    ptc_plan *p, *p2;
    int rc = ptc_plan_create(&p, ls, lt, &o);
    if (rc != PTC_OK)
        fail_msg("%s -> %s hosts %d: %s", src_cfg, dst_cfg, hosts, ptc_last_error());
    assert_int_equal(ptc_plan_create(&p2, ls, lt, &o), PTC_OK);
    size_t nt = nmixed, nx, nx2;
    const ptc_transfer *x = ptc_plan_transfers(p, &nx), *x2 = ptc_plan_transfers(p2, &nx2);
    assert_int_equal(nx, nx2);
    assert_memory_equal(x, x2, nx * sizeof *x);

    int64_t total_ids = 0;
    for (size_t t = 0; t < nt; t++) {
        base_id[t] = total_ids;
        int64_t v = 1;
        for (int d = 0; d < mixed[t].ndim; d++)
            v *= mixed[t].shape[d];
        total_ids += v;
    }
    bufs S, T, E;
    make_bufs(&S, ls, true);
    make_bufs(&T, lt, false);
    make_bufs(&E, lt, true);
    ptc_plan_stats st;
    ptc_plan_stats_get(p, &st);
    int nh = st.hosts;
    /* run: reused shards, then every non-fan-out transfer, then fan-outs */
    uint64_t total = 0, reused = 0, local = 0, net = 0;
    for (int r = 0; r < T.world; r++)
        for (size_t t = 0; t < nt; t++) {
            size_t i = (size_t)r * nt + t;
            size_t es = ptc_dtype_size(mixed[t].dtype);
            total += (uint64_t)T.len[i] * es;
            if (ptc_plan_reused(p, t, r)) {
                assert_true(r < S.world);
                assert_int_equal(S.len[i], T.len[i]);
                memcpy(T.b[i], S.b[i], sizeof(int64_t) * (size_t)T.len[i]);
                reused += (uint64_t)T.len[i] * es;
            }
        }
    for (int phase = 0; phase < 2; phase++)
        for (size_t k = 0; k < nx; k++) {
            const ptc_transfer *y = &x[k];
            if ((y->kind == PTC_TRANSFER_FANOUT) != (phase == 1))
                continue;
            size_t t = y->tensor;
            size_t es = ptc_dtype_size(mixed[t].dtype);
            int dh = ptc_plan_dst_host(p, y->dst_rank);
            uint64_t b = (uint64_t)ptc_box_volume(&y->box) * es;
            bufs *from = &S;
            switch (y->kind) {
            case PTC_TRANSFER_LOCAL:
                assert_int_equal(y->src_rank, y->dst_rank);
                local += b;
                break;
            case PTC_TRANSFER_HOST:
                assert_int_not_equal(y->src_rank, y->dst_rank);
                assert_int_equal(ptc_plan_src_host(p, y->src_rank), dh);
                local += b;
                break;
            case PTC_TRANSFER_FANOUT:
                assert_int_equal(ptc_plan_dst_host(p, y->src_rank), dh);
                assert_true(y->via < k);
                assert_int_equal(x[y->via].kind, PTC_TRANSFER_NETWORK);
                from = &T;
                local += b;
                break;
            case PTC_TRANSFER_NETWORK:
                assert_int_not_equal(ptc_plan_src_host(p, y->src_rank), dh);
                net += b;
                break;
            default:
                fail();
            }
            size_t si = (size_t)y->src_rank * nt + t, di = (size_t)y->dst_rank * nt + t;
            assert_non_null(from->b[si]);
            assert_non_null(T.b[di]);
            copy_ctx c = {y, from->b[si], from->len[si], T.b[di], T.len[di]};
            for_each(&y->box, copy_one, &c);
        }
    /* every target element holds its id */
    for (size_t i = 0; i < (size_t)T.world * nt; i++)
        if (T.b[i])
            assert_memory_equal(T.b[i], E.b[i], sizeof(int64_t) * (size_t)T.len[i]);
    /* lower bound by element sets, and network elements per host exactly once */
    uint64_t lb = 0;
    uint8_t *need = malloc((size_t)total_ids + 1), *have = malloc((size_t)total_ids + 1);
    uint8_t *got = malloc((size_t)total_ids + 1);
    int64_t *bytes_of = malloc(sizeof(int64_t) * ((size_t)total_ids + 1));
    for (size_t t = 0; t < nt; t++)
        for (int64_t i = base_id[t]; i < base_id[t] + (t + 1 < nt ? base_id[t + 1] - base_id[t]
                                                                   : total_ids - base_id[t]);
             i++)
            bytes_of[i] = (int64_t)ptc_dtype_size(mixed[t].dtype);
    for (int h = 0; h < nh; h++) {
        memset(need, 0, (size_t)total_ids + 1);
        memset(have, 0, (size_t)total_ids + 1);
        memset(got, 0, (size_t)total_ids + 1);
        for (int r = 0; r < T.world; r++)
            if (ptc_plan_dst_host(p, r) == h)
                for (size_t t = 0; t < nt; t++)
                    for (int64_t e = 0; T.b[(size_t)r * nt + t] && e < T.len[(size_t)r * nt + t];
                         e++)
                        need[E.b[(size_t)r * nt + t][e]] = 1;
        for (int s = 0; s < S.world; s++)
            if (ptc_plan_src_host(p, s) == h)
                for (size_t t = 0; t < nt; t++)
                    for (int64_t e = 0; S.b[(size_t)s * nt + t] && e < S.len[(size_t)s * nt + t];
                         e++)
                        have[S.b[(size_t)s * nt + t][e]] = 1;
        uint64_t hneed = 0, hhave = 0, hlb = 0;
        for (int64_t i = 0; i < total_ids; i++) {
            hneed += need[i] ? (uint64_t)bytes_of[i] : 0;
            hhave += have[i] ? (uint64_t)bytes_of[i] : 0;
            hlb += (need[i] && !have[i]) ? (uint64_t)bytes_of[i] : 0;
        }
        /* network transfers into h: exactly need - have, once each */
        for (size_t k = 0; k < nx; k++) {
            const ptc_transfer *y = &x[k];
            if (y->kind != PTC_TRANSFER_NETWORK || ptc_plan_dst_host(p, y->dst_rank) != h)
                continue;
            size_t si = (size_t)y->src_rank * nt + y->tensor;
            const int64_t *sb = S.b[si];
            /* walk the box through the source mapping */
            ptc_piece pc = {.box = y->box, .local_offset = y->src_offset};
            memcpy(pc.local_stride, y->src_stride, sizeof pc.local_stride);
            ptc_box b = y->box;
            int64_t g[PTC_MAX_DIMS];
            memcpy(g, b.lo, sizeof g);
            for (;;) {
                int64_t id = sb[ptc_piece_local_index(&pc, g)];
                assert_true(need[id] && !have[id]);
                assert_int_equal(got[id], 0);
                got[id] = 1;
                int d = b.ndim - 1;
                while (d >= 0 && ++g[d] == b.hi[d]) {
                    g[d] = b.lo[d];
                    d--;
                }
                if (d < 0)
                    break;
            }
        }
        for (int64_t i = 0; i < total_ids; i++)
            assert_int_equal(got[i], need[i] && !have[i]);
        ptc_plan_host_stats hs;
        assert_int_equal(ptc_plan_host_stats_get(p, h, &hs), PTC_OK);
        assert_int_equal(hs.bytes_need, hneed);
        assert_int_equal(hs.bytes_have, hhave);
        assert_int_equal(hs.bytes_in, hlb);
        lb += hlb;
    }
    assert_int_equal(st.bytes_total, total);
    assert_int_equal(st.bytes_reused, reused);
    assert_int_equal(st.bytes_local_copy, local);
    assert_int_equal(st.bytes_network, net);
    assert_int_equal(st.bytes_network_lower_bound, lb);
    assert_int_equal(st.bytes_network, st.bytes_network_lower_bound);
    assert_int_equal(st.bytes_total, st.bytes_reused + st.bytes_local_copy + st.bytes_network);
    assert_int_equal(st.transfers, nx);
    free(need);
    free(have);
    free(got);
    free(bytes_of);
    free_bufs(&S, nt);
    free_bufs(&T, nt);
    free_bufs(&E, nt);
    ptc_plan_destroy(p);
    ptc_plan_destroy(p2);
    ptc_layout_destroy(ls);
    ptc_layout_destroy(lt);
}

/* every configuration with dp*tp*pp <= 8, zero 0/1, plus layers= overrides */
static char cfgs[128][64];
static int ncfg;

static void all_configs(void)
{
    ncfg = 0;
    for (int z = 0; z < 2; z++)
        for (int pp = 1; pp <= 8; pp++)
            for (int tp = 1; tp * pp <= 8; tp++)
                for (int dp = 1; dp * tp * pp <= 8; dp++)
                    snprintf(cfgs[ncfg++], 64, "dp=%d,tp=%d,pp=%d,zero=%d", dp, tp, pp, z);
    snprintf(cfgs[ncfg++], 64, "tp=2,pp=2,layers=1:2");
    snprintf(cfgs[ncfg++], 64, "dp=2,pp=3,zero=1,layers=0:2:1");
    snprintf(cfgs[ncfg++], 64, "pp=2,layers=3:0");
    snprintf(cfgs[ncfg++], 64, "tp=3,pp=2,layers=2:1");
}

static void test_every_target(void **st)
{
    (void)st;
    all_configs();
    int n = 0;
    for (int j = 0; j < ncfg; j++)
        for (int k = 0; k < 5; k++) {
            int i = (j * 7 + k * 13 + 3) % ncfg;
            int hosts = (j + k) % 4; /* 0 = one host */
            check_pair(cfgs[i], cfgs[j], hosts);
            n++;
        }
    assert_true(n >= 5 * 76);
}

static void test_identity_reuses_everything(void **st)
{
    (void)st;
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "dp=2,tp=2,pp=2,zero=1"), PTC_OK);
    ptc_layout *l;
    assert_int_equal(ptc_layout_create(&l, mixed, nmixed, rules, &c), PTC_OK);
    ptc_plan *p;
    assert_int_equal(ptc_plan_create(&p, l, l, NULL), PTC_OK);
    ptc_plan_stats s;
    ptc_plan_stats_get(p, &s);
    assert_true(s.bytes_total > 0);
    assert_int_equal(s.bytes_reused, s.bytes_total);
    assert_int_equal(s.transfers, 0);
    ptc_plan_destroy(p);
    /* without reuse everything is a local copy */
    ptc_plan_options o = {.no_reuse = true, .hosts = 1};
    assert_int_equal(ptc_plan_create(&p, l, l, &o), PTC_OK);
    ptc_plan_stats_get(p, &s);
    assert_int_equal(s.bytes_reused, 0);
    assert_int_equal(s.bytes_local_copy, s.bytes_total);
    assert_int_equal(s.bytes_host_copy, 0);
    assert_int_equal(s.bytes_network, 0);
    ptc_plan_destroy(p);
    ptc_layout_destroy(l);
}

/* hand-worked: one [8,4] F32 tensor split over tp, tp=2 -> tp=4, 2 ranks per
 * host: target ranks 0,1 (host 0) take rows 0-1, 2-3 from source rank 0 on
 * host 0; target ranks 2,3 (host 1) take rows 4-5, 6-7 from source rank 1,
 * which is on host 0 too: 64 bytes each over the network */
static void test_hand_worked(void **st)
{
    (void)st;
    const char *txt = "match w tp=split(0) pp=first\n";
    ptc_rules *r;
    assert_int_equal(ptc_rules_parse(&r, txt, strlen(txt), "t"), PTC_OK);
    ptc_tensor_info w = {.name = "w", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {8, 4}};
    ptc_config a, b;
    ptc_config_parse(&a, "tp=2");
    ptc_config_parse(&b, "tp=4");
    ptc_layout *la, *lb;
    assert_int_equal(ptc_layout_create(&la, &w, 1, r, &a), PTC_OK);
    assert_int_equal(ptc_layout_create(&lb, &w, 1, r, &b), PTC_OK);
    ptc_plan *p;
    ptc_plan_options o = {.hosts = 2};
    assert_int_equal(ptc_plan_create(&p, la, lb, &o), PTC_OK);
    ptc_plan_stats s;
    ptc_plan_stats_get(p, &s);
    assert_int_equal(s.bytes_total, 128);
    assert_int_equal(s.bytes_network, 64);
    assert_int_equal(s.bytes_network_lower_bound, 64);
    assert_int_equal(s.max_rank_send, 64);
    assert_int_equal(s.max_rank_recv, 32);
    assert_int_equal(s.bytes_local_copy, 64);
    size_t n;
    const ptc_transfer *x = ptc_plan_transfers(p, &n);
    assert_int_equal(n, 4);
    assert_int_equal(x[0].kind, PTC_TRANSFER_LOCAL);
    assert_int_equal(x[1].kind, PTC_TRANSFER_HOST);
    assert_int_equal(x[1].src_rank, 0);
    assert_int_equal(x[1].src_offset, 8);
    assert_int_equal(x[2].kind, PTC_TRANSFER_NETWORK);
    assert_int_equal(x[2].src_rank, 1);
    assert_int_equal(x[3].src_offset, 8);
    ptc_plan_destroy(p);
    /* a host-size of 4: all local */
    o.hosts = 4;
    assert_int_equal(ptc_plan_create(&p, la, lb, &o), PTC_OK);
    ptc_plan_stats_get(p, &s);
    assert_int_equal(s.bytes_network, 0);
    assert_int_equal(s.bytes_network_lower_bound, 0);
    ptc_plan_destroy(p);
    ptc_layout_destroy(la);
    ptc_layout_destroy(lb);
    ptc_rules_destroy(r);
}

/* Every allocation of a plan failing in turn: PTC_E_NOMEM, no plan, no
 * crash (under ASan: no leak). Two tensors with replicated groups, so a
 * failure can land between tensors and inside a group's pieces. */
static void test_out_of_memory(void **st)
{
    (void)st;
    const char *txt = "match w tp=split(0) pp=first\nmatch b tp=replicate pp=first\n";
    ptc_rules *r;
    assert_int_equal(ptc_rules_parse(&r, txt, strlen(txt), "t"), PTC_OK);
    ptc_tensor_info t[2] = {
        {.name = "w", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {8, 4}},
        {.name = "b", .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {6}},
    };
    ptc_config a, b;
    ptc_config_parse(&a, "dp=2,tp=2");
    ptc_config_parse(&b, "tp=4");
    ptc_layout *la, *lb;
    assert_int_equal(ptc_layout_create(&la, t, 2, r, &a), PTC_OK);
    assert_int_equal(ptc_layout_create(&lb, t, 2, r, &b), PTC_OK);
    /* the whole plan, its figures alone, and per-process plans on one host
     * and on two (the two ways a per-process plan is made) */
    static const int own[4] = {0, 1, 1, 0};
    ptc_plan_options variants[4] = {
        {.hosts = 2},
        {.hosts = 2, .figures_only = true},
        {.src_proc = own, .dst_proc = own, .proc = 1},
        {.hosts = 2, .src_proc = own, .dst_proc = own, .proc = 0},
    };
    for (int v = 0; v < 4; v++) {
        ptc_plan_options o = variants[v];
        ptc_plan *p;
        ptc_fault_alloc_at(0);
        assert_int_equal(ptc_plan_create(&p, la, lb, &o), PTC_OK);
        long total = ptc_fault_alloc_count();
        ptc_plan_destroy(p);
        assert_true(total > 4);
        for (long i = 1; i <= total; i++) {
            ptc_fault_alloc_at(i);
            p = (ptc_plan *)1;
            int rc = ptc_plan_create(&p, la, lb, &o);
            ptc_fault_alloc_at(0);
            if (rc != PTC_E_NOMEM)
                fail_msg("variant %d, allocation %ld of %ld failing: rc %d", v, i, total, rc);
            assert_null(p);
        }
    }
    ptc_layout_destroy(la);
    ptc_layout_destroy(lb);
    ptc_rules_destroy(r);
}

/* replicated sources on several hosts: the least-loaded sender balances */
static void test_least_loaded(void **st)
{
    (void)st;
    const char *txt = "match w* tp=replicate pp=first\n";
    ptc_rules *r;
    assert_int_equal(ptc_rules_parse(&r, txt, strlen(txt), "t"), PTC_OK);
    ptc_tensor_info w[4];
    char names[4][8];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], 8, "w%d", i);
        w[i] = (ptc_tensor_info){.name = names[i], .dtype = PTC_DTYPE_U8, .ndim = 1, .shape = {100}};
    }
    ptc_config a, b;
    ptc_config_parse(&a, "dp=4");
    ptc_config_parse(&b, "dp=8");
    ptc_layout *la, *lb;
    assert_int_equal(ptc_layout_create(&la, w, 4, r, &a), PTC_OK);
    assert_int_equal(ptc_layout_create(&lb, w, 4, r, &b), PTC_OK);
    /* sources 0-3 on hosts 0,0,1,1 (hosts=2); targets 4..7 on hosts 2,3 */
    ptc_plan *p;
    ptc_plan_options o = {.hosts = 2};
    assert_int_equal(ptc_plan_create(&p, la, lb, &o), PTC_OK);
    ptc_plan_stats s;
    ptc_plan_stats_get(p, &s);
    /* hosts 2 and 3 need 400 bytes each, nothing local */
    assert_int_equal(s.bytes_network, 800);
    assert_int_equal(s.bytes_fanout, 800);
    /* 8 tensor copies over 4 senders: 200 each */
    assert_int_equal(s.max_rank_send, 200);
    ptc_plan_destroy(p);
    ptc_layout_destroy(la);
    ptc_layout_destroy(lb);
    ptc_rules_destroy(r);
}

static void test_mismatch(void **st)
{
    (void)st;
    ptc_config c;
    ptc_config_parse(&c, "tp=2");
    ptc_layout *a, *b;
    assert_int_equal(ptc_layout_create(&a, mixed, nmixed, rules, &c), PTC_OK);
    assert_int_equal(ptc_layout_create(&b, mixed, nmixed - 1, rules, &c), PTC_OK);
    ptc_plan *p = (ptc_plan *)1;
    assert_int_equal(ptc_plan_create(&p, a, b, NULL), PTC_E_INVAL);
    assert_null(p);
    ptc_plan_options o = {.hosts = -1};
    assert_int_equal(ptc_plan_create(&p, a, a, &o), PTC_E_INVAL);
    ptc_layout_destroy(a);
    ptc_layout_destroy(b);
}

static int walk_cb(const ptc_piece *sub, void *u)
{
    int64_t *seen = u;
    ptc_box b = sub->box;
    int64_t g[PTC_MAX_DIMS];
    memcpy(g, b.lo, sizeof g);
    for (;;) {
        seen[ptc_piece_local_index(sub, g)]++;
        int d = b.ndim - 1;
        while (d >= 0 && ++g[d] == b.hi[d]) {
            g[d] = b.lo[d];
            d--;
        }
        if (d < 0)
            break;
    }
    return PTC_OK;
}

/* every local range [a,b) of every piece of every shard: each element in the
 * range exactly once, nothing outside */
static void test_walk_range(void **st)
{
    (void)st;
    ptc_config c;
    ptc_config_parse(&c, "dp=3,tp=2,pp=1,zero=1");
    ptc_layout *l;
    assert_int_equal(ptc_layout_create(&l, mixed, nmixed, rules, &c), PTC_OK);
    for (size_t t = 0; t < nmixed; t++)
        for (int r = 0; r < 6; r++) {
            ptc_shard sh;
            ptc_layout_shard(l, t, r, &sh);
            if (!sh.present)
                continue;
            int64_t v = 1;
            for (int d = 0; d < sh.ndim; d++)
                v *= sh.shape[d];
            ptc_piece pc[64];
            size_t np;
            ptc_layout_pieces(l, t, r, pc, 64, &np);
            int64_t *seen = calloc((size_t)v + 1, sizeof *seen);
            for (int64_t a = 0; a <= v; a += 3)
                for (int64_t b = a; b <= v; b += 2) {
                    memset(seen, 0, sizeof *seen * (size_t)(v + 1));
                    for (size_t i = 0; i < np; i++) {
                        assert_true(ptc_piece_is_monotone(&pc[i]));
                        assert_int_equal(ptc_piece_walk_range(&pc[i], a, b, walk_cb, seen),
                                         PTC_OK);
                    }
                    for (int64_t e = 0; e < v; e++)
                        assert_int_equal(seen[e], e >= a && e < b ? 1 : 0);
                }
            free(seen);
        }
    ptc_layout_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_worked),   cmocka_unit_test(test_least_loaded),
        cmocka_unit_test(test_identity_reuses_everything),
        cmocka_unit_test(test_mismatch),      cmocka_unit_test(test_walk_range),
        cmocka_unit_test(test_every_target),  cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
