/* Fork-join helper for the CPU kernels. One call creates its threads and
 * joins them: no pool, no global state beyond the thread-count knob, so the
 * kernels stay reentrant and need no init/shutdown. Thread start costs tens
 * of microseconds, which the grain sizes of the callers amortize. */
#include "kernels/kernels_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define PTC_KERNELS_MAX_THREADS 16

static atomic_int ptc_kernels_nthreads_set;

int ptc_kernels_threads(void)
{
    int n = atomic_load(&ptc_kernels_nthreads_set);
    if (n > 0)
        return n;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        return 1;
    return cpus > PTC_KERNELS_MAX_THREADS ? PTC_KERNELS_MAX_THREADS : (int)cpus;
}

void ptc_kernels_set_threads(int n)
{
    atomic_store(&ptc_kernels_nthreads_set, n < 0 ? 0 : n);
}

struct ptc_kernels_chunk {
    ptc_kernels_range_fn fn;
    void *ctx;
    size_t begin, end;
};

static void *ptc_kernels_chunk_main(void *arg)
{
    struct ptc_kernels_chunk *ch = arg;
    ch->fn(ch->ctx, ch->begin, ch->end);
    return NULL;
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
    struct ptc_kernels_chunk chunks[PTC_KERNELS_MAX_THREADS];
    pthread_t tids[PTC_KERNELS_MAX_THREADS];
    bool started[PTC_KERNELS_MAX_THREADS] = {false};
    size_t per = (n + nt - 1) / nt;
    for (size_t i = 0; i < nt; i++) {
        size_t b = i * per < n ? i * per : n;
        size_t e = (i + 1) * per < n ? (i + 1) * per : n;
        chunks[i] = (struct ptc_kernels_chunk){fn, ctx, b, e};
    }
    /* Chunk 0 runs on the caller; a chunk whose thread fails to start runs
     * on the caller too, after the others were launched. */
    for (size_t i = 1; i < nt; i++)
        started[i] = pthread_create(&tids[i], NULL, ptc_kernels_chunk_main,
                                    &chunks[i]) == 0;
    fn(ctx, chunks[0].begin, chunks[0].end);
    for (size_t i = 1; i < nt; i++) {
        if (started[i])
            pthread_join(tids[i], NULL);
        else
            fn(ctx, chunks[i].begin, chunks[i].end);
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
