/* Fork-join thread pool (pool_internal.h). A call creates its threads and
 * joins them: no global state, nothing to set up or shut down; starting a
 * thread costs tens of microseconds, which every caller's items amortize. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "base/pool_internal.h"
#include "base/util_internal.h"

typedef struct pool {
    const ptc_pool_job *job;
    atomic_size_t next;
    atomic_int rc;
    pthread_mutex_t mu;
    char err[1024];
} pool;

static void pool_fail(pool *p, int rc)
{
    pthread_mutex_lock(&p->mu);
    if (atomic_load(&p->rc) == PTC_OK) {
        snprintf(p->err, sizeof p->err, "%s", ptc_last_error());
        atomic_store(&p->rc, rc);
    }
    pthread_mutex_unlock(&p->mu);
}

static void *pool_worker(void *arg)
{
    pool *p = arg;
    const ptc_pool_job *job = p->job;
    void *local = NULL;
    int rc;
    if (job->local_init && (rc = job->local_init(job->ctx, &local)) != PTC_OK) {
        pool_fail(p, rc);
        return NULL;
    }
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= job->n || atomic_load(&p->rc) != PTC_OK)
            break;
        if ((rc = job->fn(job->ctx, local, i)) != PTC_OK) {
            pool_fail(p, rc);
            break;
        }
    }
    if (job->local_free)
        job->local_free(job->ctx, local);
    return NULL;
}

int ptc_pool_run(int threads, const ptc_pool_job *job)
{
    if (job->n == 0)
        return PTC_OK;
    pool p = {.job = job};
    atomic_init(&p.next, 0);
    atomic_init(&p.rc, PTC_OK);
    if (pthread_mutex_init(&p.mu, NULL) != 0)
        return ptc_error_set(PTC_E_NOMEM, "cannot create a mutex");
    size_t extra = (size_t)(threads > 1 ? threads - 1 : 0);
    if (extra > job->n - 1)
        extra = job->n - 1;
    pthread_t *th = extra ? ptc_calloc(extra, sizeof *th) : NULL;
    if (extra && !th) {
        pthread_mutex_destroy(&p.mu);
        return PTC_E_NOMEM;
    }
    size_t started = 0;
    for (; started < extra; started++)
        if (pthread_create(&th[started], NULL, pool_worker, &p) != 0)
            break; /* fewer threads: the started ones and this one do the rest */
    pool_worker(&p);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    ptc_free(th);
    pthread_mutex_destroy(&p.mu);
    int rc = atomic_load(&p.rc);
    if (rc != PTC_OK)
        return ptc_error_set(rc, "%s", p.err);
    return PTC_OK;
}

typedef struct for_ctx {
    int (*fn)(void *ctx, size_t i);
    void *ctx;
} for_ctx;

static int for_item(void *ctx, void *local, size_t i)
{
    (void)local;
    const for_ctx *f = ctx;
    return f->fn(f->ctx, i);
}

int ptc_pool_for(int threads, size_t n, int (*fn)(void *ctx, size_t i), void *ctx)
{
    for_ctx f = {fn, ctx};
    ptc_pool_job job = {.n = n, .fn = for_item, .ctx = &f};
    return ptc_pool_run(threads, &job);
}

int ptc_pool_threads(int asked, int max)
{
    if (asked > 0)
        return asked;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        return 1;
    return max > 0 && cores > max ? max : (int)cores;
}
