/* The planner against the all-pairs planner it replaced (tests/unit/
 * plan_ref.h, kept on the test side): on random small cases (uneven
 * splits, fused blocks of unequal sizes, replicated key/value heads,
 * zero=1 optimizer state, layers= maps, pp=first+last and pp=all tensors,
 * empty tensors; packed, explicit and non-monotone host maps; with and
 * without reuse) every figure, every per-host figure, every transfer (byte
 * for byte) and every reuse bit are the same. A figures-only plan has the
 * same figures. A per-process plan holds exactly the whole plan's
 * transfers that its process sends or receives, and its figures are the
 * whole plan's restricted to the process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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
    int ws = ptc_config_world(&cs), wt = ptc_config_world(&ct);
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
    for (size_t t = 0; t < m->n; t++)
        for (int k = 0; k < wt; k++)
            assert_int_equal(ref_plan_reused(r, t, k), ptc_plan_reused(p, t, k));
    bool kinds[4] = {false};
    for (size_t i = 0; i < nr; i++)
        kinds[xr[i].kind] = true;
    for (int k = 0; k < 4; k++)
        seen_kind[k] += kinds[k];
    seen_reused += a.shards_reused > 0;
    seen_zero += cs.zero && ct.zero;
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
    ptc_layout_destroy(ls);
    ptc_layout_destroy(lt);
    cases_run++;
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
