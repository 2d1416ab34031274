/* Parallel loops of the CPU kernels over base's fork-join pool: the
 * thread-count knob and static chunking of an index range (the kernels'
 * grains amortize thread start). */
#include "kernels/kernels_internal.h"
#include "base/pool_internal.h"

#include <limits.h>
#include <stdatomic.h>

#define PTC_KERNELS_MAX_THREADS 16

static atomic_int ptc_kernels_nthreads_set;

int ptc_kernels_threads(void)
{
    return ptc_pool_threads(atomic_load(&ptc_kernels_nthreads_set), PTC_KERNELS_MAX_THREADS);
}

void ptc_kernels_set_threads(int n)
{
    atomic_store(&ptc_kernels_nthreads_set, n < 0 ? 0 : n);
}

typedef struct chunks {
    ptc_kernels_range_fn fn;
    void *ctx;
    size_t n, per;
} chunks;

static int run_chunk(void *arg, size_t i)
{
    const chunks *c = arg;
    size_t b = i * c->per, e = b + c->per < c->n ? b + c->per : c->n;
    c->fn(c->ctx, b, e);
    return PTC_OK;
}

void ptc_kernels_parallel_for(size_t n, size_t grain, ptc_kernels_range_fn fn,
                              void *ctx)
{
    if (n == 0)
        return;
    if (grain == 0)
        grain = 1;
    size_t nt = (size_t)ptc_kernels_threads();
    if (n / grain < nt)
        nt = n / grain;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    /* one contiguous chunk per thread; chunks never fail, so the pool's
     * only error is being unable to start: then run them here */
    chunks c = {fn, ctx, n, (n + nt - 1) / nt};
    size_t nchunks = (n + c.per - 1) / c.per;
    if (ptc_pool_for((int)nt, nchunks, run_chunk, &c) != PTC_OK) {
        ptc_error_clear();
        fn(ctx, 0, n);
    }
}

int ptc_kernels_check_buf(const char *op, const char *arg, const void *p,
                          size_t a, size_t b)
{
    size_t count;
    if (!ptc_kernels_mul(a, b, &count))
        return ptc_error_set(PTC_E_RANGE, "%s: %s size %zu x %zu overflows",
                             op, arg, a, b);
    if (count > 0 && p == NULL)
        return ptc_error_set(PTC_E_INVAL, "%s: %s is null", op, arg);
    return PTC_OK;
}

int ptc_kernels_check_int(const char *op, size_t a, size_t b, size_t c)
{
    if (a > INT_MAX || b > INT_MAX || c > INT_MAX)
        return ptc_error_set(PTC_E_RANGE, "%s: sizes %zu, %zu, %zu exceed INT_MAX",
                             op, a, b, c);
    return PTC_OK;
}
