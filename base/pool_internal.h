/* The thread pool every module uses: fork-join over an index range. Never
 * installed. */
#ifndef PTC_POOL_INTERNAL_H
#define PTC_POOL_INTERNAL_H

#include <stddef.h>

/* A job of @c n items. Threads take the next item in turn (items may take
 * very different times); fn returns PTC_OK or an error code with its
 * message set (ptc_error_set). */
typedef struct ptc_pool_job {
    size_t n;
    int (*fn)(void *ctx, void *local, size_t i);
    void *ctx;
    /* Optional per-thread state (scratch buffers): made once per thread
     * before its first item, freed after its last. local_init failing is
     * the job's failure. */
    int (*local_init)(void *ctx, void **local);
    void (*local_free)(void *ctx, void *local);
} ptc_pool_job;

/* Run @p job on up to @p threads threads, the caller's included (fewer when
 * there are fewer items, or when a thread cannot be started: the others do
 * its share). The first failure stops the others taking new items and is
 * returned here with its message. */
int ptc_pool_run(int threads, const ptc_pool_job *job);

/* The same for a plain function of the item index. */
int ptc_pool_for(int threads, size_t n, int (*fn)(void *ctx, size_t i), void *ctx);

/* The threads to use: @p asked when > 0, else the online CPUs, at most
 * @p max (and at least 1). */
int ptc_pool_threads(int asked, int max);

#endif
