/* Epoch order (Feistel permutation) and batch arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "ptc/dataset.h"

#define PTC_MIN_U(a, b) ((a) < (b) ? (a) : (b))

static void check_bijection(uint64_t n, uint64_t seed, uint64_t epoch)
{
    ptc_order o;
    assert_int_equal(ptc_order_init(&o, n, seed, epoch), PTC_OK);
    uint8_t *seen = calloc(n ? n : 1, 1);
    assert_non_null(seen);
    for (uint64_t p = 0; p < n; p++) {
        uint64_t id = UINT64_MAX, back = UINT64_MAX;
        assert_int_equal(ptc_order_sample(&o, p, &id), PTC_OK);
        assert_true(id < n);
        assert_int_equal(seen[id], 0);
        seen[id] = 1;
        assert_int_equal(ptc_order_position(&o, id, &back), PTC_OK);
        assert_int_equal(back, p);
    }
    uint64_t x;
    assert_int_equal(ptc_order_sample(&o, n, &x), PTC_E_RANGE);
    assert_int_equal(ptc_order_position(&o, n, &x), PTC_E_RANGE);
    assert_int_equal(ptc_order_sample(&o, UINT64_MAX, &x), PTC_E_RANGE);
    free(seen);
}

static void test_bijective_small(void **state)
{
    (void)state;
    static const uint64_t ns[] = {
        0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   11,  13,  15,  16,   17,
        31,  32,  33,  63,  64,  65,  97,  127, 128, 129, 251, 255, 256, 257,  509,
        511, 512, 513, 1000, 1021, 1023, 1024, 1025, 2047, 2048, 2049, 3001, 4093,
        4095, 4096, 4097};
    static const uint64_t seeds[] = {0, 1, 42, UINT64_MAX};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t s = 0; s < 4; s++)
            for (uint64_t e = 0; e < 3; e++)
                check_bijection(ns[i], seeds[s], e * 1000003u + s);
    /* every N up to 300 with one key */
    for (uint64_t n = 0; n <= 300; n++)
        check_bijection(n, 7, 3);
}

static void test_edges(void **state)
{
    (void)state;
    ptc_order o;
    uint64_t x = 5;
    assert_int_equal(ptc_order_init(&o, 0, 1, 2), PTC_OK);
    assert_int_equal(ptc_order_sample(&o, 0, &x), PTC_E_RANGE);
    assert_int_equal(ptc_order_position(&o, 0, &x), PTC_E_RANGE);
    assert_int_equal(ptc_order_init(&o, 1, 1, 2), PTC_OK);
    assert_int_equal(ptc_order_sample(&o, 0, &x), PTC_OK);
    assert_int_equal(x, 0);
    assert_int_equal(ptc_order_init(&o, PTC_DATASET_MAX_SAMPLES + 1, 0, 0), PTC_E_RANGE);
    /* the largest N: a 64-bit domain; round trip a few points */
    assert_int_equal(ptc_order_init(&o, PTC_DATASET_MAX_SAMPLES, 9, 9), PTC_OK);
    assert_int_equal(o.half, 32);
    const uint64_t pts[] = {0, 1, 12345678901234ULL, PTC_DATASET_MAX_SAMPLES - 1};
    for (int i = 0; i < 4; i++) {
        uint64_t id, back;
        assert_int_equal(ptc_order_sample(&o, pts[i], &id), PTC_OK);
        assert_true(id < PTC_DATASET_MAX_SAMPLES);
        assert_int_equal(ptc_order_position(&o, id, &back), PTC_OK);
        assert_int_equal(back, pts[i]);
    }
    /* domain choice: smallest even width >= 2 */
    struct { uint64_t n; uint32_t h; } dom[] = {
        {0, 1}, {1, 1}, {4, 1}, {5, 2}, {16, 2}, {17, 3}, {64, 3}, {65, 4},
        {1000000, 10}, {(uint64_t)1 << 62, 31}, {((uint64_t)1 << 62) + 1, 32}};
    for (size_t i = 0; i < sizeof dom / sizeof dom[0]; i++) {
        assert_int_equal(ptc_order_init(&o, dom[i].n, 0, 0), PTC_OK);
        assert_int_equal(o.half, dom[i].h);
    }
}

/* Pinned values: the order is a contract (docs/dataset.md); any change to
 * the round function, domain or rounds changes these and must be a format
 * change. */
static void test_known_answers(void **state)
{
    (void)state;
    ptc_order o;
    uint64_t got[8];
    assert_int_equal(ptc_order_init(&o, 10, 0, 0), PTC_OK);
    for (uint64_t p = 0; p < 8; p++)
        assert_int_equal(ptc_order_sample(&o, p, &got[p]), PTC_OK);
    static const uint64_t want10[8] = {8, 5, 2, 9, 1, 3, 4, 6};
    assert_memory_equal(got, want10, sizeof want10);
    assert_int_equal(ptc_order_init(&o, 1000000, 1234, 5), PTC_OK);
    for (uint64_t p = 0; p < 8; p++)
        assert_int_equal(ptc_order_sample(&o, p, &got[p]), PTC_OK);
    static const uint64_t want1m[8] = {271030, 837010, 184732, 899710, 362697, 228012, 298280, 326812};
    assert_memory_equal(got, want1m, sizeof want1m);
}

/* ---- statistical mixing ------------------------------------------------------ */

enum { NBUCKET = 32 };

struct mix_stats {
    double mean_disp;   /* mean |perm(p) - p| / n; uniform: 1/3 */
    double corr;        /* Pearson correlation of perm(p), perm(p+1) */
    double chi2_joint;  /* (position bucket, sample bucket) grid, 1023 dof */
    double chi2_head;   /* samples of the first n/16 positions over 32 buckets */
};

typedef uint64_t (*perm_fn)(uint64_t p, uint64_t n, const void *ctx);

static void mix(struct mix_stats *st, uint64_t n, perm_fn f, const void *ctx)
{
    double sd = 0, sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    static double grid[NBUCKET][NBUCKET];
    double head[NBUCKET] = {0};
    memset(grid, 0, sizeof grid);
    uint64_t prev = f(0, n, ctx);
    for (uint64_t p = 0; p < n; p++) {
        uint64_t v = p == 0 ? prev : f(p, n, ctx);
        sd += fabs((double)v - (double)p);
        grid[p * NBUCKET / n][v * NBUCKET / n] += 1;
        if (p < n / 16)
            head[v * NBUCKET / n] += 1;
        if (p > 0) {
            double x = (double)prev, y = (double)v;
            sx += x; sy += y; sxx += x * x; syy += y * y; sxy += x * y;
        }
        prev = v;
    }
    double m = (double)(n - 1);
    double cov = sxy / m - (sx / m) * (sy / m);
    double vx = sxx / m - (sx / m) * (sx / m), vy = syy / m - (sy / m) * (sy / m);
    st->mean_disp = sd / (double)n / (double)n;
    st->corr = cov / sqrt(vx * vy);
    double e = (double)n / (NBUCKET * NBUCKET), c = 0;
    for (int i = 0; i < NBUCKET; i++)
        for (int j = 0; j < NBUCKET; j++)
            c += (grid[i][j] - e) * (grid[i][j] - e) / e;
    st->chi2_joint = c;
    double eh = (double)(n / 16) / NBUCKET, ch = 0;
    for (int j = 0; j < NBUCKET; j++)
        ch += (head[j] - eh) * (head[j] - eh) / eh;
    st->chi2_head = ch;
}

/* Bounds for a uniformly random permutation of n = 10^6: mean displacement
 * 1/3 (sd ~ 0.0002), correlation 0 (sd ~ 0.001), chi-square with 1023 dof
 * (mean 1023, sd 45) and 31 dof (mean 31, sd 8). Generous multiples of the
 * sd, far from any structured permutation. */
static bool mix_ok(const struct mix_stats *st)
{
    return fabs(st->mean_disp - 1.0 / 3.0) < 0.005 && fabs(st->corr) < 0.01 &&
           st->chi2_joint < 1023 + 8 * 45 && st->chi2_head < 31 + 8 * 8;
}

static uint64_t perm_order(uint64_t p, uint64_t n, const void *ctx)
{
    uint64_t id;
    (void)n;
    assert_int_equal(ptc_order_sample(ctx, p, &id), PTC_OK);
    return id;
}
static uint64_t perm_identity(uint64_t p, uint64_t n, const void *ctx)
{
    (void)n; (void)ctx;
    return p;
}
static uint64_t perm_reverse(uint64_t p, uint64_t n, const void *ctx)
{
    (void)ctx;
    return n - 1 - p;
}
/* A Feistel network whose round function ignores its input (a "weak" key
 * schedule) is an xor with a constant; cycle-walk it like the real one. */
static uint64_t perm_xor(uint64_t p, uint64_t n, const void *ctx)
{
    (void)ctx;
    uint64_t v = p ^ 0xA5A5Bu;
    while (v >= n) v = (v ^ 0xA5A5Bu) + 1 < n ? (v ^ 0xA5A5Bu) + 1 : (v ^ 0xA5A5Bu) % n;
    return v;
}
/* A rotation by a large stride (an "LCG" order): well spread but consecutive
 * positions are perfectly related. */
static uint64_t perm_stride(uint64_t p, uint64_t n, const void *ctx)
{
    (void)ctx;
    return (p * 618033u) % n; /* gcd(618033, 10^6) = 1 */
}

static void test_mixing(void **state)
{
    (void)state;
    const uint64_t n = 1000000;
    struct mix_stats st;
    for (uint64_t e = 0; e < 2; e++) {
        ptc_order o;
        assert_int_equal(ptc_order_init(&o, n, 20240601, e), PTC_OK);
        mix(&st, n, perm_order, &o);
        print_message("epoch %llu: disp %.5f corr %.5f chi2 %.1f head %.1f\n",
                      (unsigned long long)e, st.mean_disp, st.corr, st.chi2_joint,
                      st.chi2_head);
        assert_true(mix_ok(&st));
    }
    /* the bounds have teeth */
    mix(&st, n, perm_identity, NULL);
    assert_false(mix_ok(&st));
    mix(&st, n, perm_reverse, NULL);
    assert_false(mix_ok(&st));
    mix(&st, n, perm_xor, NULL);
    assert_false(mix_ok(&st));
    mix(&st, n, perm_stride, NULL);
    assert_false(mix_ok(&st));
}

/* Two epochs (and two seeds) give unrelated orders: agreement on about 1/N
 * of positions, not more. */
static void test_epochs_differ(void **state)
{
    (void)state;
    const uint64_t n = 100000;
    ptc_order a, b, c;
    assert_int_equal(ptc_order_init(&a, n, 1, 0), PTC_OK);
    assert_int_equal(ptc_order_init(&b, n, 1, 1), PTC_OK);
    assert_int_equal(ptc_order_init(&c, n, 2, 0), PTC_OK);
    int same_ab = 0, same_ac = 0;
    for (uint64_t p = 0; p < n; p++) {
        uint64_t x, y, z;
        ptc_order_sample(&a, p, &x);
        ptc_order_sample(&b, p, &y);
        ptc_order_sample(&c, p, &z);
        same_ab += x == y;
        same_ac += x == z;
    }
    assert_true(same_ab < 10);
    assert_true(same_ac < 10);
}

/* ---- batch arithmetic -------------------------------------------------------- */

static void test_batch_basic(void **state)
{
    (void)state;
    uint64_t s, lo, hi;
    assert_int_equal(ptc_batch_steps(10, 3, 0, &s), PTC_OK);
    assert_int_equal(s, 4);
    assert_int_equal(ptc_batch_steps(10, 3, 1, &s), PTC_OK);
    assert_int_equal(s, 3);
    assert_int_equal(ptc_batch_steps(10, 3, 10, &s), PTC_OK);
    assert_int_equal(s, 0);
    assert_int_equal(ptc_batch_steps(10, 3, 99, &s), PTC_OK);
    assert_int_equal(s, 0);
    assert_int_equal(ptc_batch_steps(10, 0, 0, &s), PTC_E_INVAL);
    assert_int_equal(ptc_batch_steps(0, 5, 0, &s), PTC_OK);
    assert_int_equal(s, 0);

    /* n=10, B=4, D=3: c = ceil(4/3) = 2 */
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 0, 0, &lo, &hi), PTC_OK);
    assert_true(lo == 0 && hi == 2);
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 1, 0, &lo, &hi), PTC_OK);
    assert_true(lo == 2 && hi == 4);
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 2, 0, &lo, &hi), PTC_OK);
    assert_true(lo == 4 && hi == 4);
    /* last partial batch [8, 10): c = 1 */
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 0, 2, &lo, &hi), PTC_OK);
    assert_true(lo == 8 && hi == 9);
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 1, 2, &lo, &hi), PTC_OK);
    assert_true(lo == 9 && hi == 10);
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 2, 2, &lo, &hi), PTC_OK);
    assert_true(lo == 10 && hi == 10);
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 0, 3, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_batch_part(10, 4, 0, 3, 3, 0, &lo, &hi), PTC_E_INVAL);
    assert_int_equal(ptc_batch_part(10, 4, 0, 0, 0, 0, &lo, &hi), PTC_E_INVAL);
    assert_int_equal(ptc_batch_part(10, 0, 0, 1, 0, 0, &lo, &hi), PTC_E_INVAL);
    assert_int_equal(ptc_batch_part(10, 4, 10, 1, 0, 0, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_batch_part(0, 4, 0, 1, 0, 0, &lo, &hi), PTC_E_NOTFOUND);
}

static void test_batch_huge(void **state)
{
    (void)state;
    const uint64_t n = PTC_DATASET_MAX_SAMPLES;
    uint64_t lo, hi, s;
    assert_int_equal(ptc_batch_part(n, UINT64_MAX, 0, 1, 0, 0, &lo, &hi), PTC_OK);
    assert_true(lo == 0 && hi == n);
    assert_int_equal(ptc_batch_part(n, UINT64_MAX, 0, 1, 0, 1, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_batch_part(n, 2, 0, 1, 0, UINT64_MAX, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_batch_part(n, 1, n - 1, 1, 0, 1, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_batch_part(n, 1, n - 1, 1, 0, 0, &lo, &hi), PTC_OK);
    assert_true(lo == n - 1 && hi == n);
    /* step*batch fits but start + it overflows */
    assert_int_equal(ptc_batch_part(n, (uint64_t)1 << 62, n - 1, 1, 0, 4, &lo, &hi),
                     PTC_E_NOTFOUND);
    /* dp beyond int64: every rank past the batch is empty */
    assert_int_equal(ptc_batch_part(n, 8, 0, UINT64_MAX, UINT64_MAX - 1, 0, &lo, &hi), PTC_OK);
    assert_true(lo == 8 && hi == 8);
    assert_int_equal(ptc_batch_part(n, 8, 0, UINT64_MAX, 7, 0, &lo, &hi), PTC_OK);
    assert_true(lo == 7 && hi == 8);
    /* the split of a near-2^63 extent */
    assert_int_equal(ptc_batch_part(n, n, 0, 3, 2, 0, &lo, &hi), PTC_OK);
    uint64_t c = n / 3 + (n % 3 != 0);
    assert_true(lo == 2 * c && hi == n);
    assert_int_equal(ptc_batch_steps(n, 1, 0, &s), PTC_OK);
    assert_true(s == n);
    assert_int_equal(ptc_batch_part(n + 1, 1, 0, 1, 0, 0, &lo, &hi), PTC_E_RANGE);
}

/* The union of all ranks' parts over all steps is [start, n) in order, each
 * position once, and part sizes follow the split rule; also across a change
 * of dp and batch at a batch boundary. */
static void test_batch_cover(void **state)
{
    (void)state;
    for (uint64_t n = 0; n < 60; n++)
        for (uint64_t b = 1; b < 12; b++)
            for (uint64_t d = 1; d < 6; d++)
                for (uint64_t x = 0; x <= n; x += 7) {
                    uint64_t steps, next = x;
                    assert_int_equal(ptc_batch_steps(n, b, x, &steps), PTC_OK);
                    for (uint64_t k = 0; k < steps; k++) {
                        uint64_t g = PTC_MIN_U(n - (x + k * b), b);
                        uint64_t c = (g + d - 1) / d;
                        for (uint64_t r = 0; r < d; r++) {
                            uint64_t lo, hi;
                            assert_int_equal(ptc_batch_part(n, b, x, d, r, k, &lo, &hi), PTC_OK);
                            assert_int_equal(lo, next);
                            uint64_t want = r * c >= g ? 0 : (g - r * c < c ? g - r * c : c);
                            assert_int_equal(hi - lo, want);
                            next = hi;
                        }
                    }
                    assert_int_equal(next, x > n ? x : n);
                    uint64_t lo, hi;
                    assert_int_equal(ptc_batch_part(n, b, x, d, 0, steps, &lo, &hi),
                                     PTC_E_NOTFOUND);
                }
    /* dp=4, batch 64 for 5 steps, then dp=3, batch 48 from there */
    const uint64_t n = 1000;
    uint8_t seen[1000] = {0};
    uint64_t lo, hi, steps;
    for (uint64_t k = 0; k < 5; k++)
        for (uint64_t r = 0; r < 4; r++) {
            assert_int_equal(ptc_batch_part(n, 64, 0, 4, r, k, &lo, &hi), PTC_OK);
            for (uint64_t p = lo; p < hi; p++) seen[p]++;
        }
    assert_int_equal(ptc_batch_steps(n, 48, 320, &steps), PTC_OK);
    assert_int_equal(steps, 15);
    for (uint64_t k = 0; k < steps; k++)
        for (uint64_t r = 0; r < 3; r++) {
            assert_int_equal(ptc_batch_part(n, 48, 320, 3, r, k, &lo, &hi), PTC_OK);
            for (uint64_t p = lo; p < hi; p++) seen[p]++;
        }
    for (uint64_t p = 0; p < n; p++)
        assert_int_equal(seen[p], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bijective_small), cmocka_unit_test(test_edges),
        cmocka_unit_test(test_known_answers),   cmocka_unit_test(test_mixing),
        cmocka_unit_test(test_epochs_differ),   cmocka_unit_test(test_batch_basic),
        cmocka_unit_test(test_batch_huge),      cmocka_unit_test(test_batch_cover),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
