/* The planner against the all-pairs planner it replaced (tests/unit/
 * plan_ref.h, kept on the test side): on random small cases (uneven
 * splits, fused blocks of unequal sizes, replicated key/value heads,
 * zero=1 optimizer state, layers= maps, pp=first+last and pp=all tensors,
 * empty tensors; packed, explicit and non-monotone host maps; with and
 * without reuse) every figure, every per-host figure, every transfer (byte
 * for byte) and every reuse bit are the same. A figures-only plan has the
 * same figures. A per-process plan holds exactly the whole plan's
 * transfers that its process sends or receives, and its figures are the
 * whole plan's restricted to the process. The same holds with explicit
 * layouts (per-rank pieces: replicas, ranks lacking a tensor, local tensors
 * of several pieces) as sources and targets, and the explicit copy of a
 * configuration's layout plans exactly as that layout does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/layout_copy.h"
#include "tests/unit/plan_ref.h"

/* ---- random cases ------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? (uint32_t)(rng % n) : 0;
}

static const char rules_text[] =
    "layer blk.{L}.\n"
    "optim .m\n"
    "match blk.*.col tp=split(0)\n"
    "match blk.*.row tp=split(1)\n"
    "match blk.*.fused tp=split(1,blocks=2:3:1)\n"
    "match blk.*.qkv3 tp=split(0,blocks=3)\n"
    "match blk.*.gqa tp=split(0,heads=4,kv_heads=1:1,head_dim=2)\n"
    "match blk.*.rep tp=replicate\n"
    "match blk.*.scalar tp=replicate\n"
    "match emb tp=split(0) pp=first+last\n"
    "match head tp=split(0) pp=last\n"
    "match pos tp=replicate pp=first\n"
    "match everywhere tp=split(2) pp=all\n"
    "match empty tp=split(0) pp=first\n"
    "match state kind=optim tp=split(0) pp=all\n";

#define MAXT 96
typedef struct model {
    ptc_tensor_info t[MAXT];
    char names[MAXT][40];
    size_t n;
    int layers;
    bool gqa;
} model;

static void add(model *m, const char *name, ptc_dtype dt, int ndim, int64_t a, int64_t b,
                int64_t c)
{
    assert_true(m->n < MAXT);
    ptc_tensor_info *t = &m->t[m->n];
    memset(t, 0, sizeof *t);
    snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
    t->name = m->names[m->n];
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = a;
    t->shape[1] = b;
    t->shape[2] = c;
    m->n++;
}

static int64_t ext(void) { return 1 + rnd(9); }

static void random_model(model *m)
{
    memset(m, 0, sizeof *m);
    m->layers = 1 + (int)rnd(4);
    m->gqa = rnd(2);
    unsigned kinds = 1 + rnd(255);
    char n[40];
    static const ptc_dtype dts[] = {PTC_DTYPE_F32, PTC_DTYPE_BF16, PTC_DTYPE_I8, PTC_DTYPE_F64};
    for (int L = 0; L < m->layers; L++)
        for (int o = 0; o < 2; o++) {
            const char *suf = o ? ".m" : "";
            ptc_dtype dt = o ? PTC_DTYPE_F32 : dts[rnd(4)];
            if (kinds & 1) {
                snprintf(n, sizeof n, "blk.%d.col%s", L, suf);
                add(m, n, dt, 2, ext(), ext(), 0);
            }
            if (kinds & 2) {
                snprintf(n, sizeof n, "blk.%d.row%s", L, suf);
                add(m, n, dt, 2, ext(), ext(), 0);
            }
            if (kinds & 4) {
                snprintf(n, sizeof n, "blk.%d.fused%s", L, suf);
                add(m, n, dt, 2, ext(), 6, 0);
            }
            if (kinds & 8) {
                snprintf(n, sizeof n, "blk.%d.qkv3%s", L, suf);
                add(m, n, dt, 2, 3 * ext(), ext(), 0);
            }
            if (m->gqa) {
                snprintf(n, sizeof n, "blk.%d.gqa%s", L, suf);
                add(m, n, dt, 2, 12, ext(), 0);
            }
            if (kinds & 16) {
                snprintf(n, sizeof n, "blk.%d.rep%s", L, suf);
                add(m, n, dt, 1, ext(), 0, 0);
            }
            if (kinds & 32) {
                snprintf(n, sizeof n, "blk.%d.scalar%s", L, suf);
                add(m, n, dt, 0, 0, 0, 0);
            }
        }
    if (kinds & 64) {
        add(m, "emb", PTC_DTYPE_F16, 2, ext() + 4, ext(), 0);
        add(m, "emb.m", PTC_DTYPE_F32, 2, m->t[m->n - 1].shape[0], m->t[m->n - 1].shape[1], 0);
        add(m, "head", PTC_DTYPE_F32, 2, ext(), ext(), 0);
        add(m, "pos", PTC_DTYPE_F32, 1, ext(), 0, 0);
    }
    if (kinds & 128) {
        add(m, "everywhere", PTC_DTYPE_F64, 3, ext(), 2, ext());
        add(m, "everywhere.m", PTC_DTYPE_F32, 3, ext(), 1, ext());
        add(m, "empty", PTC_DTYPE_F32, 2, 0, ext(), 0);
        add(m, "state", PTC_DTYPE_F32, 1, ext() + 3, 0, 0);
    }
}

/* dp*tp*pp <= 48, zero 0/1, a layers= map now and then */
static void random_config(const model *m, char *out, size_t cap)
{
    int dp, tp, pp;
    do {
        dp = 1 + (int)rnd(6);
        tp = 1 + (int)rnd(m->gqa ? 4 : 5);
        if (m->gqa && tp == 3)
            tp = 4;
        pp = 1 + (int)rnd(4);
    } while (dp * tp * pp > 48);
    int n = snprintf(out, cap, "dp=%d,tp=%d,pp=%d,zero=%d", dp, tp, pp, (int)rnd(2));
    if (pp > 1 && rnd(3) == 0) {
        n += snprintf(out + n, cap - (size_t)n, ",layers=");
        int left = m->layers;
        for (int s = 0; s < pp; s++) {
            int k = s == pp - 1 ? left : (int)rnd((uint32_t)left + 1);
            left -= k;
            n += snprintf(out + n, cap - (size_t)n, "%s%d", s ? ":" : "", k);
        }
    }
}

/* ---- comparing ---------------------------------------------------------------- */

static void same_stats(const ptc_plan_stats *a, const ptc_plan_stats *b)
{
    assert_int_equal(a->bytes_total, b->bytes_total);
    assert_int_equal(a->bytes_reused, b->bytes_reused);
    assert_int_equal(a->bytes_local_copy, b->bytes_local_copy);
    assert_int_equal(a->bytes_network, b->bytes_network);
    assert_int_equal(a->bytes_network_lower_bound, b->bytes_network_lower_bound);
    assert_int_equal(a->max_rank_send, b->max_rank_send);
    assert_int_equal(a->max_rank_recv, b->max_rank_recv);
    assert_int_equal(a->bytes_host_copy, b->bytes_host_copy);
    assert_int_equal(a->bytes_fanout, b->bytes_fanout);
    assert_int_equal(a->tensors, b->tensors);
    assert_int_equal(a->shards, b->shards);
    assert_int_equal(a->shards_reused, b->shards_reused);
    assert_int_equal(a->transfers, b->transfers);
    assert_int_equal(a->hosts, b->hosts);
}

typedef struct hostmap {
    int *src, *dst;
    int hosts;   /* packed, when src is NULL */
} hostmap;

static void random_hosts(hostmap *hm, int ws, int wt)
{
    hm->src = hm->dst = NULL;
    hm->hosts = 0;
    int mode = (int)rnd(4);
    if (mode <= 1) {
        hm->hosts = mode ? 1 + (int)rnd(6) : 0;
        return;
    }
    int nh = 1 + (int)rnd(5);
    hm->src = malloc(sizeof(int) * (size_t)ws);
    hm->dst = malloc(sizeof(int) * (size_t)wt);
    for (int r = 0; r < ws; r++) /* mode 2: non-decreasing; 3: anything */
        hm->src[r] = mode == 2 ? (int)((int64_t)r * nh / ws) : (int)rnd((uint32_t)nh);
    for (int r = 0; r < wt; r++)
        hm->dst[r] = mode == 2 ? (int)((int64_t)r * nh / wt) : (int)rnd((uint32_t)nh);
}

/* Process of a kept transfer's provider and receiver. */
static bool involves(const ptc_transfer *x, const int *sp, const int *dp, int me)
{
    int from = x->kind == PTC_TRANSFER_FANOUT ? dp[x->src_rank] : sp[x->src_rank];
    return from == me || dp[x->dst_rank] == me;
}

/* Per-process plans of process map (sp, dp) against the whole plan p. */
static void check_per_process(const ptc_layout *ls, const ptc_layout *lt, const ptc_plan *p,
                              const ptc_plan_options *base, int np, const int *sp, const int *dp)
{
    int ws = ptc_config_world(ptc_layout_config(ls)), wt = ptc_config_world(ptc_layout_config(lt));
    size_t nx, nt = ptc_layout_count(lt);
    const ptc_transfer *x = ptc_plan_transfers(p, &nx);
    uint64_t *kept_at = malloc(sizeof(uint64_t) * (nx + 1));
    ptc_transfer *want = malloc(sizeof *want * (nx + 1));
    uint64_t *sent = calloc((size_t)ws + 1, sizeof *sent);
    uint64_t *got = calloc((size_t)wt + 1, sizeof *got);
    for (size_t i = 0; i < nx; i++)
        if (x[i].kind == PTC_TRANSFER_NETWORK) {
            uint64_t b = (uint64_t)ptc_box_volume(&x[i].box) *
                         ptc_dtype_size(ptc_layout_tensor(lt, x[i].tensor)->dtype);
            sent[x[i].src_rank] += b;
            got[x[i].dst_rank] += b;
        }
    for (int me = 0; me < np; me++) {
        ptc_plan_options o = *base;
        o.src_proc = sp;
        o.dst_proc = dp;
        o.proc = me;
        ptc_plan *q;
        if (ptc_plan_create(&q, ls, lt, &o) != PTC_OK)
            fail_msg("per-process plan %d: %s", me, ptc_last_error());
        size_t nw = 0;
        ptc_plan_stats e = {0};
        for (size_t i = 0; i < nx; i++) {
            kept_at[i] = UINT64_MAX;
            if (!involves(&x[i], sp, dp, me))
                continue;
            want[nw] = x[i];
            if (x[i].kind == PTC_TRANSFER_FANOUT)
                want[nw].via = kept_at[x[i].via];
            kept_at[i] = nw++;
        }
        for (size_t i = 0; i < nx; i++) {
            if (dp[x[i].dst_rank] != me)
                continue;
            uint64_t b = (uint64_t)ptc_box_volume(&x[i].box) *
                         ptc_dtype_size(ptc_layout_tensor(lt, x[i].tensor)->dtype);
            if (x[i].kind == PTC_TRANSFER_NETWORK)
                e.bytes_network += b;
            else
                e.bytes_local_copy += b;
            if (x[i].kind == PTC_TRANSFER_HOST)
                e.bytes_host_copy += b;
            if (x[i].kind == PTC_TRANSFER_FANOUT)
                e.bytes_fanout += b;
        }
        for (size_t t = 0; t < nt; t++)
            for (int r = 0; r < wt; r++) {
                bool mine = (r < ws && sp[r] == me) || dp[r] == me;
                assert_int_equal(ptc_plan_reused(q, t, r), mine && ptc_plan_reused(p, t, r));
                ptc_shard sh;
                assert_int_equal(ptc_layout_shard(lt, t, r, &sh), PTC_OK);
                if (dp[r] != me || !sh.present || !sh.npieces)
                    continue;
                int64_t v = 1;
                for (int d = 0; d < sh.ndim; d++)
                    v *= sh.shape[d];
                uint64_t b = (uint64_t)v * ptc_dtype_size(ptc_layout_tensor(lt, t)->dtype);
                e.bytes_total += b;
                e.shards++;
                if (ptc_plan_reused(p, t, r)) {
                    e.bytes_reused += b;
                    e.shards_reused++;
                }
            }
        for (int s = 0; s < ws; s++)
            if (sp[s] == me)
                e.max_rank_send = e.max_rank_send > sent[s] ? e.max_rank_send : sent[s];
        for (int r = 0; r < wt; r++)
            if (dp[r] == me)
                e.max_rank_recv = e.max_rank_recv > got[r] ? e.max_rank_recv : got[r];
        ptc_plan_stats ps, qs;
        ptc_plan_stats_get(p, &ps);
        ptc_plan_stats_get(q, &qs);
        e.tensors = ps.tensors;
        e.transfers = nw;
        e.hosts = ps.hosts;
        same_stats(&qs, &e);
        size_t nq;
        const ptc_transfer *y = ptc_plan_transfers(q, &nq);
        assert_int_equal(nq, nw);
        assert_memory_equal(y, want, nw * sizeof *y);
        ptc_plan_destroy(q);
    }
    free(kept_at);
    free(want);
    free(sent);
    free(got);
}

static int cases_run;
/* cases whose plan has each transfer kind, reused shards, per-process plans */
static int seen_kind[4], seen_reused, seen_proc, seen_zero, seen_lower;

/* Every figure, transfer and reuse bit of the planner equal the
 * reference's for layouts @p ls -> @p lt (named @p from, @p to). */
static void check_layouts(const ptc_layout *ls, const ptc_layout *lt, const char *from,
                          const char *to)
{
    size_t nt = ptc_layout_count(ls);
    int ws = ptc_layout_world(ls), wt = ptc_layout_world(lt);
    hostmap hm;
    random_hosts(&hm, ws, wt);
    ptc_plan_options o = {.hosts = hm.hosts, .src_host = hm.src, .dst_host = hm.dst,
                          .no_reuse = rnd(5) == 0};
    ref_plan *r;
    ptc_plan *p, *f;
    if (ref_plan_create(&r, ls, lt, &o) != PTC_OK)
        fail_msg("reference %s -> %s: %s", from, to, ptc_last_error());
    if (ptc_plan_create(&p, ls, lt, &o) != PTC_OK)
        fail_msg("plan %s -> %s: %s", from, to, ptc_last_error());
    ptc_plan_stats a, b, c;
    ref_plan_stats_get(r, &a);
    ptc_plan_stats_get(p, &b);
    same_stats(&a, &b);
    size_t nr, np;
    const ptc_transfer *xr = ref_plan_transfers(r, &nr), *xp = ptc_plan_transfers(p, &np);
    for (int h = 0; h < a.hosts; h++) {
        ptc_plan_host_stats x = {0}, y;
        assert_int_equal(ref_plan_host_stats_get(r, h, &x), PTC_OK);
        assert_int_equal(ptc_plan_host_stats_get(p, h, &y), PTC_OK);
        assert_int_equal(x.bytes_in, y.bytes_in);
        assert_int_equal(x.bytes_out, y.bytes_out);
        assert_int_equal(x.bytes_need, y.bytes_need);
        assert_int_equal(x.bytes_have, y.bytes_have);
        /* the reference has no copy figure: HOST and FANOUT bytes into h */
        uint64_t copy = 0;
        for (size_t i = 0; i < nr; i++)
            if ((xr[i].kind == PTC_TRANSFER_HOST || xr[i].kind == PTC_TRANSFER_FANOUT) &&
                ptc_plan_dst_host(p, xr[i].dst_rank) == h)
                copy += (uint64_t)ptc_box_volume(&xr[i].box) *
                        ptc_dtype_size(ptc_layout_tensor(lt, xr[i].tensor)->dtype);
        assert_int_equal(y.bytes_copy, copy);
    }
    assert_int_equal(nr, np);
    assert_memory_equal(xr, xp, nr * sizeof *xr);
    for (size_t t = 0; t < nt; t++)
        for (int k = 0; k < wt; k++)
            assert_int_equal(ref_plan_reused(r, t, k), ptc_plan_reused(p, t, k));
    bool kinds[4] = {false};
    for (size_t i = 0; i < nr; i++)
        kinds[xr[i].kind] = true;
    for (int k = 0; k < 4; k++)
        seen_kind[k] += kinds[k];
    seen_reused += a.shards_reused > 0;
    seen_zero += ptc_layout_config(ls)->zero && ptc_layout_config(lt)->zero;
    seen_lower += a.bytes_network_lower_bound > 0;
    /* the figures alone */
    ptc_plan_options fo = o;
    fo.figures_only = true;
    assert_int_equal(ptc_plan_create(&f, ls, lt, &fo), PTC_OK);
    ptc_plan_stats_get(f, &c);
    same_stats(&a, &c);
    ptc_plan_transfers(f, &np);
    assert_int_equal(np, 0);
    ptc_plan_destroy(f);
    /* per-process plans: blocks of ranks, or ranks dealt at random */
    if (rnd(2)) {
        int nproc = 1 + (int)rnd(4), n = ws > wt ? ws : wt;
        int *own = malloc(sizeof(int) * (size_t)n), *own2 = malloc(sizeof(int) * (size_t)n);
        bool blocks = rnd(2);
        for (int k = 0; k < n; k++) {
            own[k] = blocks ? (int)((int64_t)k * nproc / n) : (int)rnd((uint32_t)nproc);
            own2[k] = blocks ? own[k] : (int)rnd((uint32_t)nproc);
        }
        check_per_process(ls, lt, p, &o, nproc, own, own2);
        seen_proc++;
        free(own);
        free(own2);
    }
    ptc_plan_destroy(p);
    ref_plan_destroy(r);
    free(hm.src);
    free(hm.dst);
    cases_run++;
}

static void check_case(const model *m, const ptc_rules *rules, const char *from, const char *to)
{
    ptc_config cs, ct;
    assert_int_equal(ptc_config_parse(&cs, from), PTC_OK);
    assert_int_equal(ptc_config_parse(&ct, to), PTC_OK);
    ptc_layout *ls = NULL, *lt = NULL;
    if (ptc_layout_create(&ls, m->t, m->n, rules, &cs) != PTC_OK ||
        ptc_layout_create(&lt, m->t, m->n, rules, &ct) != PTC_OK) {
        ptc_layout_destroy(ls); /* e.g. a layers= map a model cannot take */
        return;
    }
    check_layouts(ls, lt, from, to);
    ptc_layout_destroy(ls);
    ptc_layout_destroy(lt);
}

static void test_random_cases(void **st)
{
    (void)st;
    ptc_rules *rules;
    assert_int_equal(ptc_rules_parse(&rules, rules_text, strlen(rules_text), "test"), PTC_OK);
    const char *env = getenv("PTC_PLAN_EQUIV_CASES");
    int want = env ? atoi(env) : 400;
    int tries = 0;
    while (cases_run < want && tries < 20 * want) {
        model m;
        random_model(&m);
        char a[96], b[96];
        random_config(&m, a, sizeof a);
        random_config(&m, b, sizeof b);
        check_case(&m, rules, a, b);
        tries++;
    }
    ptc_rules_destroy(rules);
    /* most draws make valid layouts; a test that compared nothing would pass */
    assert_int_equal(cases_run, want);
    for (int k = 0; k < 4; k++)
        assert_true(seen_kind[k] > want / 10);
    assert_true(seen_reused > want / 10);
    assert_true(seen_proc > want / 4);
    assert_true(seen_zero > want / 10);
    assert_true(seen_lower > want / 10);
    print_message("%d cases: LOCAL %d, HOST %d, FANOUT %d, NETWORK %d, reuse %d, zero=1 both %d, "
                  "per-process %d\n", cases_run, seen_kind[0], seen_kind[1], seen_kind[2],
                  seen_kind[3], seen_reused, seen_zero, seen_proc);
}

/* ---- explicit layouts ------------------------------------------------------------ */

typedef struct xlist {
    ptc_layout_explicit_shard *e;
    size_t *pc0;          /* first piece of each entry in pc (pc moves as it grows) */
    size_t n, cap, cap0;
    ptc_piece *pc;
    size_t npc, cappc;
} xlist;

static ptc_layout_explicit_shard *x_add(xlist *x, size_t t, int rank, int ndim,
                                        const int64_t *shape)
{
    assert_int_equal(ptc_grow((void **)&x->e, &x->cap, x->n + 1, sizeof *x->e), PTC_OK);
    assert_int_equal(ptc_grow((void **)&x->pc0, &x->cap0, x->n + 1, sizeof *x->pc0), PTC_OK);
    ptc_layout_explicit_shard *e = &x->e[x->n];
    memset(e, 0, sizeof *e);
    e->tensor = t;
    e->rank = rank;
    e->ndim = ndim;
    memcpy(e->shape, shape, sizeof *shape * (size_t)ndim);
    x->pc0[x->n++] = x->npc;
    return e;
}

static void x_piece(xlist *x, const ptc_piece *p)
{
    assert_int_equal(ptc_grow((void **)&x->pc, &x->cappc, x->npc + 1, sizeof *x->pc), PTC_OK);
    x->pc[x->npc++] = *p;
    x->e[x->n - 1].npieces++;
}

static ptc_layout *x_make(xlist *x, const ptc_tensor_info *ti, size_t nt, int world)
{
    for (size_t i = 0; i < x->n; i++)
        x->e[i].pieces = x->pc + x->pc0[i];
    ptc_layout *l = NULL;
    if (ptc_layout_create_explicit(&l, ti, nt, world, x->e, x->n) != PTC_OK)
        fail_msg("explicit layout: %s", ptc_last_error());
    free(x->e);
    free(x->pc0);
    free(x->pc);
    memset(x, 0, sizeof *x);
    return l;
}

/* The explicit layout holding every shard of @p l as it is. */
static ptc_layout *explicit_copy(const ptc_layout *l)
{
    ptc_layout *out = NULL;
    if (layout_explicit_copy(l, &out) != PTC_OK)
        fail_msg("explicit copy: %s", ptc_last_error());
    return out;
}

/* Tensor t cut into a grid of cells (1 to 3 runs per dimension, some
 * empty), dealt to groups; each rank holds a group's cells in a random
 * order (one 1-D local tensor, or the cell's own shape) or, now and then,
 * nothing. With @p cover every group with cells has a rank. */
static void random_tensor(xlist *x, size_t t, const ptc_tensor_info *ti, int world, bool cover)
{
    int nd = ti->ndim;
    int64_t cut[PTC_MAX_DIMS][4];
    int ncut[PTC_MAX_DIMS];
    size_t ncell = 1;
    for (int d = 0; d < nd; d++) {
        ncut[d] = 1 + (int)rnd(3);
        cut[d][0] = 0;
        cut[d][ncut[d]] = ti->shape[d];
        for (int k = 1; k < ncut[d]; k++)
            cut[d][k] = rnd((uint32_t)ti->shape[d] + 1);
        for (int k = 1; k < ncut[d]; k++) /* sorted */
            for (int j = k; j > 1 && cut[d][j] < cut[d][j - 1]; j--) {
                int64_t v = cut[d][j];
                cut[d][j] = cut[d][j - 1];
                cut[d][j - 1] = v;
            }
        ncell *= (size_t)ncut[d];
    }
    int ngroups = 1 + (int)rnd((uint32_t)world);
    int cell_group[64];
    for (size_t c = 0; c < ncell; c++)
        cell_group[c] = (int)rnd((uint32_t)ngroups);
    int group_of[16];
    for (int r = 0; r < world; r++) {
        group_of[r] = r < ngroups ? r : (int)rnd((uint32_t)ngroups);
        if (rnd(5) == 0 && (!cover || r >= ngroups))
            group_of[r] = -1; /* lacks the tensor */
    }
    for (int r = 0; r < world; r++) {
        int g = group_of[r];
        if (g < 0)
            continue;
        /* the group's cells in an order fixed by the group (replicas equal) */
        uint64_t saved = rng;
        rng = 0x51ed270b27a1ull * (uint64_t)(g + 1) + t;
        size_t order[64], n = 0;
        for (size_t c = 0; c < ncell; c++)
            if (cell_group[c] == g)
                order[n++] = c;
        for (size_t k = n; k > 1; k--) {
            size_t j = rnd((uint32_t)k), v = order[k - 1];
            order[k - 1] = order[j];
            order[j] = v;
        }
        bool flat = n != 1 || rnd(2);
        rng = saved;
        ptc_piece pc[64];
        int64_t vol = 0;
        for (size_t k = 0; k < n; k++) {
            size_t c = order[k];
            memset(&pc[k], 0, sizeof pc[k]);
            pc[k].box.ndim = nd;
            for (int d = nd - 1; d >= 0; d--) {
                int i = (int)(c % (size_t)ncut[d]);
                c /= (size_t)ncut[d];
                pc[k].box.lo[d] = cut[d][i];
                pc[k].box.hi[d] = cut[d][i + 1];
            }
            int64_t ext[PTC_MAX_DIMS];
            for (int d = 0; d < nd; d++)
                ext[d] = pc[k].box.hi[d] - pc[k].box.lo[d];
            ptc_strides_row_major(nd, ext, pc[k].local_stride);
            pc[k].local_offset = vol;
            vol += ptc_box_volume(&pc[k].box);
        }
        if (flat) {
            x_add(x, t, r, 1, &vol);
        } else {
            int64_t ext[PTC_MAX_DIMS];
            for (int d = 0; d < nd; d++)
                ext[d] = pc[0].box.hi[d] - pc[0].box.lo[d];
            x_add(x, t, r, nd, ext);
        }
        for (size_t k = 0; k < n; k++)
            x_piece(x, &pc[k]);
    }
}

static ptc_layout *random_explicit(const model *m, bool cover)
{
    xlist x = {0};
    int world = 1 + (int)rnd(8);
    for (size_t t = 0; t < m->n; t++)
        random_tensor(&x, t, &m->t[t], world, cover);
    return x_make(&x, m->t, m->n, world);
}

/* Explicit sources and targets: the explicit copy of a configuration's
 * layout plans exactly as the layout itself, and random explicit layouts
 * (replicas, ranks lacking tensors, strided local tensors, empty cells)
 * plan as the reference does. */
static void test_random_explicit(void **st)
{
    (void)st;
    ptc_rules *rules;
    assert_int_equal(ptc_rules_parse(&rules, rules_text, strlen(rules_text), "test"), PTC_OK);
    const char *env = getenv("PTC_PLAN_EQUIV_CASES");
    int want = env ? atoi(env) / 2 : 200, run = 0, copies = 0;
    cases_run = 0;
    memset(seen_kind, 0, sizeof seen_kind);
    while (run < want) {
        model m;
        random_model(&m);
        char a[96], b[96];
        random_config(&m, a, sizeof a);
        random_config(&m, b, sizeof b);
        ptc_config cs, ct;
        assert_int_equal(ptc_config_parse(&cs, a), PTC_OK);
        assert_int_equal(ptc_config_parse(&ct, b), PTC_OK);
        ptc_layout *ls = NULL, *lt = NULL;
        if (ptc_layout_create(&ls, m.t, m.n, rules, &cs) != PTC_OK ||
            ptc_layout_create(&lt, m.t, m.n, rules, &ct) != PTC_OK) {
            ptc_layout_destroy(ls);
            continue;
        }
        int mode = (int)rnd(5);
        ptc_layout *xs = mode == 0 ? explicit_copy(ls)
                         : mode == 2 || mode == 4 ? random_explicit(&m, true) : NULL;
        ptc_layout *xt = mode == 1 ? explicit_copy(lt)
                         : mode == 3 || mode == 4 ? random_explicit(&m, false) : NULL;
        check_layouts(xs ? xs : ls, xt ? xt : lt, mode == 0 || mode >= 2 ? "explicit" : a,
                      mode == 1 || mode >= 3 ? "explicit" : b);
        if (mode <= 1) { /* the copy changes nothing */
            ptc_plan *p, *q;
            ptc_plan_stats x, y;
            assert_int_equal(ptc_plan_create(&p, ls, lt, NULL), PTC_OK);
            assert_int_equal(ptc_plan_create(&q, xs ? xs : ls, xt ? xt : lt, NULL), PTC_OK);
            ptc_plan_stats_get(p, &x);
            ptc_plan_stats_get(q, &y);
            x.plan_seconds = y.plan_seconds = 0;
            same_stats(&x, &y);
            size_t nx, ny;
            const ptc_transfer *tx = ptc_plan_transfers(p, &nx), *ty = ptc_plan_transfers(q, &ny);
            assert_int_equal(nx, ny);
            assert_memory_equal(tx, ty, nx * sizeof *tx);
            ptc_plan_destroy(p);
            ptc_plan_destroy(q);
            copies++;
        }
        ptc_layout_destroy(xs);
        ptc_layout_destroy(xt);
        ptc_layout_destroy(ls);
        ptc_layout_destroy(lt);
        run++;
    }
    ptc_rules_destroy(rules);
    assert_int_equal(cases_run, want);
    assert_true(copies > want / 5);
    for (int k = 0; k < 4; k++)
        assert_true(seen_kind[k] > want / 20);
    print_message("%d explicit cases (%d copies): LOCAL %d, HOST %d, FANOUT %d, NETWORK %d\n",
                  cases_run, copies, seen_kind[0], seen_kind[1], seen_kind[2], seen_kind[3]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_cases),
        cmocka_unit_test(test_random_explicit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
