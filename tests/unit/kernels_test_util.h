/* Shared helpers of the kernel unit tests: a seeded generator, tolerance
 * comparison that prints the first mismatches, and buffer helpers.
 * Tolerance everywhere: |got - ref| <= abs_tol + |ref| * rel_eps. */
#ifndef PTC_KERNELS_TEST_UTIL_H
#define PTC_KERNELS_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kt_rng {
    uint64_t s;
} kt_rng;

/* splitmix64: good enough for test data, identical on every platform. */
static inline uint64_t kt_next(kt_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float kt_uniform(kt_rng *r, float lo, float hi)
{
    double u = (double)(kt_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

static inline float *kt_alloc(size_t n)
{
    float *p = calloc(n > 0 ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        exit(1);
    }
    return p;
}

static inline float *kt_random(size_t n, float lo, float hi, kt_rng *r)
{
    float *p = kt_alloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = kt_uniform(r, lo, hi);
    return p;
}

static inline float *kt_copy(const float *src, size_t n)
{
    float *p = kt_alloc(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

/* Compare got[] to a reference given as float (refd == NULL) or double.
 * Prints the first five mismatches and a summary line on a failure.
 * @return the number of mismatches. */
static inline size_t kt_compare_any(const char *what, const float *got,
                                    const float *reff, const double *refd,
                                    size_t n, double abs_tol, double rel_eps)
{
    size_t bad = 0;
    double max_err = 0.0;
    for (size_t i = 0; i < n; i++) {
        double ref = refd ? refd[i] : (double)reff[i];
        double err = fabs((double)got[i] - ref);
        double tol = abs_tol + fabs(ref) * rel_eps;
        if (!(err <= tol)) { /* NaN counts as a mismatch */
            if (bad < 5)
                fprintf(stderr,
                        "%s: mismatch at %zu: got %.9g ref %.9g |err| %.3g "
                        "tol %.3g\n",
                        what, i, (double)got[i], ref, err, tol);
            bad++;
        }
        if (err > max_err)
            max_err = err;
    }
    if (bad)
        fprintf(stderr, "%s: %zu of %zu mismatches, max |err| %.3g\n", what,
                bad, n, max_err);
    return bad;
}

static inline size_t kt_compare(const char *what, const float *got,
                                const float *ref, size_t n, double abs_tol,
                                double rel_eps)
{
    return kt_compare_any(what, got, ref, NULL, n, abs_tol, rel_eps);
}

static inline size_t kt_compare_d(const char *what, const float *got,
                                  const double *ref, size_t n, double abs_tol,
                                  double rel_eps)
{
    return kt_compare_any(what, got, NULL, ref, n, abs_tol, rel_eps);
}

/* Bit-exact comparison (for ops with a fixed summation order). */
static inline size_t kt_compare_bits(const char *what, const float *got,
                                     const float *ref, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &ref[i], sizeof(float)) != 0) {
            if (bad < 5)
                fprintf(stderr, "%s: bits differ at %zu: got %.9g ref %.9g\n",
                        what, i, (double)got[i], (double)ref[i]);
            bad++;
        }
    }
    if (bad)
        fprintf(stderr, "%s: %zu of %zu elements differ\n", what, bad, n);
    return bad;
}

#endif
