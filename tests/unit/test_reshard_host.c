/* The in-memory host executor over MPI. Run plainly (one process) it checks
 * one-rank plans; under `mpirun -np N` (tests/mpi/test_reshard_host.sh) it
 * reshards id-patterned buffers between every pair of a list of
 * configurations with world <= N, several host sizes, and checks every
 * byte of every target rank's local tensors. Tensors of 256 KiB take both
 * paths of the executor: a contiguous box of 64 KiB or more as a message of
 * its own, the rest packed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mpi.h>

#include "ptc/reshard.h"

/* Open MPI leaks its own start-up state (some from unloaded plug-ins, which
 * no suppression can name): leak checks are off in MPI tests only. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

static const char rules_txt[] =
    "layer blk.{L}.\n"
    "optim .m\n"
    "match blk.*.qkv tp=split(0,blocks=3)\n"
    "match blk.*.row tp=split(1)\n"
    "match blk.*.rep tp=replicate\n"
    "match emb tp=split(0) pp=first+last\n"
    "match head tp=split(0) pp=last\n"
    "match everywhere tp=split(2) pp=all\n"
    "match wide tp=split(0) pp=all\n"
    "match tall tp=split(1) pp=all\n";

#define MAXT 32
static ptc_tensor_info tens[MAXT];
static char names[MAXT][32];
static size_t ntens;
static ptc_rules *rules;
static int me, np;

static void add(const char *name, ptc_dtype dt, int ndim, int64_t a, int64_t b, int64_t c)
{
    snprintf(names[ntens], sizeof names[0], "%s", name);
    tens[ntens] = (ptc_tensor_info){.name = names[ntens], .dtype = dt, .ndim = ndim,
                                    .shape = {a, b, c}};
    ntens++;
}

static int setup(void **st)
{
    (void)st;
    char n[32];
    for (int L = 0; L < 3; L++) {
        snprintf(n, sizeof n, "blk.%d.qkv", L);
        add(n, PTC_DTYPE_BF16, 2, 9, 5, 0);
        snprintf(n, sizeof n, "blk.%d.qkv.m", L);
        add(n, PTC_DTYPE_F32, 2, 9, 5, 0);
        snprintf(n, sizeof n, "blk.%d.row.m", L);
        add(n, PTC_DTYPE_F32, 2, 7, 11, 0);
        snprintf(n, sizeof n, "blk.%d.rep", L);
        add(n, PTC_DTYPE_I8, 1, 3, 0, 0);
    }
    add("emb", PTC_DTYPE_F16, 2, 13, 3, 0);
    add("head", PTC_DTYPE_F64, 2, 3, 2, 0);
    add("everywhere", PTC_DTYPE_F32, 3, 2, 1, 5);
    /* boxes of 64 KiB and more, contiguous on both sides (wide, by rows),
     * travel as messages of their own; tall's column boxes are packed */
    add("wide", PTC_DTYPE_F32, 2, 1024, 64, 0);
    add("tall", PTC_DTYPE_F32, 2, 64, 1024, 0);
    return ptc_rules_parse(&rules, rules_txt, strlen(rules_txt), "t") == PTC_OK ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    ptc_rules_destroy(rules);
    return 0;
}

static uint8_t pattern(size_t t, int64_t flat, size_t k)
{
    return (uint8_t)(t * 31 + (uint64_t)flat * 7 + k * 13 + 1);
}

/* local buffers of @p rank with every element's bytes set from its global
 * position (fill) or zero */
static void **make(const ptc_layout *l, int rank, bool fill, int64_t **lens)
{
    void **b = calloc(ntens, sizeof *b);
    *lens = calloc(ntens, sizeof **lens);
    int w = ptc_config_world(ptc_layout_config(l));
    if (rank >= w)
        return b;
    for (size_t t = 0; t < ntens; t++) {
        ptc_shard sh;
        assert_int_equal(ptc_layout_shard(l, t, rank, &sh), PTC_OK);
        if (!sh.present)
            continue;
        size_t es = ptc_dtype_size(tens[t].dtype);
        int64_t v = 1;
        for (int d = 0; d < sh.ndim; d++)
            v *= sh.shape[d];
        (*lens)[t] = v;
        b[t] = calloc((size_t)v * es + 1, 1);
        if (!fill)
            continue;
        ptc_piece pc[16];
        size_t npc;
        assert_int_equal(ptc_layout_pieces(l, t, rank, pc, 16, &npc), PTC_OK);
        for (size_t i = 0; i < npc; i++) {
            int64_t g[PTC_MAX_DIMS];
            memcpy(g, pc[i].box.lo, sizeof g);
            for (;;) {
                int64_t flat = 0;
                for (int d = 0; d < tens[t].ndim; d++)
                    flat = flat * tens[t].shape[d] + g[d];
                int64_t li = ptc_piece_local_index(&pc[i], g);
                for (size_t k = 0; k < es; k++)
                    ((uint8_t *)b[t])[(size_t)li * es + k] = pattern(t, flat, k);
                int d = tens[t].ndim - 1;
                while (d >= 0 && ++g[d] == pc[i].box.hi[d]) {
                    g[d] = pc[i].box.lo[d];
                    d--;
                }
                if (d < 0)
                    break;
            }
        }
    }
    return b;
}

static void release(void **b, int64_t *lens)
{
    for (size_t t = 0; t < ntens; t++)
        free(b[t]);
    free(b);
    free(lens);
}

/* returns the number of wrong bytes on this process */
static long run_case(const char *from, const char *to, int hosts)
{
    ptc_config a, b;
    assert_int_equal(ptc_config_parse(&a, from), PTC_OK);
    assert_int_equal(ptc_config_parse(&b, to), PTC_OK);
    ptc_layout *la, *lb;
    assert_int_equal(ptc_layout_create(&la, tens, ntens, rules, &a), PTC_OK);
    assert_int_equal(ptc_layout_create(&lb, tens, ntens, rules, &b), PTC_OK);
    ptc_plan *p;
    ptc_plan_options o = {.hosts = hosts};
    assert_int_equal(ptc_plan_create(&p, la, lb, &o), PTC_OK);
    int64_t *ls, *lt, *le;
    void **src = make(la, me, true, &ls), **dst = make(lb, me, false, &lt),
         **exp = make(lb, me, true, &le);
    MPI_Comm comm = MPI_COMM_WORLD;
    int rc = ptc_reshard_host(p, comm, (const void *const *)src, dst);
    if (rc != PTC_OK)
        print_error("rank %d: %s\n", me, ptc_last_error());
    long bad = rc != PTC_OK;
    for (size_t t = 0; t < ntens; t++)
        if (dst[t])
            for (int64_t i = 0; i < lt[t] * (int64_t)ptc_dtype_size(tens[t].dtype); i++)
                bad += ((uint8_t *)dst[t])[i] != ((uint8_t *)exp[t])[i];
    if (bad)
        print_error("rank %d: %s -> %s hosts %d: %ld wrong bytes\n", me, from, to, hosts, bad);
    release(src, ls);
    release(dst, lt);
    release(exp, le);
    ptc_plan_destroy(p);
    ptc_layout_destroy(la);
    ptc_layout_destroy(lb);
    return bad;
}

static void test_pairs(void **st)
{
    (void)st;
    static const char *const cfgs[] = {
        "dp=1",           "tp=2",           "pp=2",          "dp=2,zero=1",
        "tp=2,pp=2",      "dp=2,tp=2,zero=1", "tp=4",        "dp=2,pp=2,zero=1,layers=1:2",
        "tp=3",           "dp=4,zero=1",    "pp=4",          "tp=2,pp=2,layers=2:1",
    };
    /* the configurations that fit the world; every ordered pair of them, or
     * under the sanitizers (PTC_TEST_EACH=1, cmake/tests.cmake) each as a
     * source once and as a target once (k to k + 1, cyclically): that pass
     * looks for memory errors, this one for wrong bytes */
    const char *fit[sizeof cfgs / sizeof cfgs[0]];
    size_t nc = 0;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        ptc_config c;
        ptc_config_parse(&c, cfgs[i]);
        if (ptc_config_world(&c) <= np)
            fit[nc++] = cfgs[i];
    }
    const char *each = getenv("PTC_TEST_EACH");
    bool once = each && strcmp(each, "1") == 0;
    long bad = 0, cases = 0;
    for (size_t i = 0; i < nc; i++)
        for (size_t j = 0; j < nc; j++) {
            if (once && j != (i + 1) % nc)
                continue;
            for (int hosts = 0; hosts <= 2; hosts++) {
                bad += run_case(fit[i], fit[j], hosts);
                cases++;
            }
        }
    long all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        print_message("%ld cases on %d processes, %ld wrong bytes\n", cases, np, all);
    assert_int_equal(all, 0);
    assert_true(cases >= 3);
}

/* too few processes: a clear error, no hang */
static void test_too_small(void **st)
{
    (void)st;
    ptc_config a, b;
    char big[32];
    snprintf(big, sizeof big, "tp=%d", np + 1);
    ptc_config_parse(&a, "dp=1");
    ptc_config_parse(&b, big);
    ptc_layout *la, *lb;
    assert_int_equal(ptc_layout_create(&la, tens, ntens, rules, &a), PTC_OK);
    assert_int_equal(ptc_layout_create(&lb, tens, ntens, rules, &b), PTC_OK);
    ptc_plan *p;
    assert_int_equal(ptc_plan_create(&p, la, lb, NULL), PTC_OK);
    MPI_Comm comm = MPI_COMM_WORLD;
    void *bufs[MAXT] = {0};
    assert_int_equal(ptc_reshard_host(p, comm, (const void *const *)bufs, bufs), PTC_E_INVAL);
    ptc_plan_destroy(p);
    ptc_layout_destroy(la);
    ptc_layout_destroy(lb);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_too_small),
        cmocka_unit_test(test_pairs),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    MPI_Finalize();
    return rc;
}
