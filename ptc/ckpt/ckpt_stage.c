/* The snapshot area of asynchronous saves (ptc_ckpt_stage): one buffer
 * for the snapshot, grown to the largest state, and one for the replicas a
 * save across hosts receives; kept from save to save, held by one save at a
 * time. Its own file: ckpt_async.c (the snapshot) and ckpt_hosts.c (the
 * replicas' area) both use it, and neither calls the other's way round. */
#include <pthread.h>
#include <stdint.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

int ptc_ckpt_lock_init(pthread_mutex_t *mu, pthread_cond_t *cv)
{
    if (pthread_mutex_init(mu, NULL) != 0)
        return ptc_error_set(PTC_E_NOMEM, "cannot create a mutex");
    if (pthread_cond_init(cv, NULL) != 0) {
        pthread_mutex_destroy(mu);
        return ptc_error_set(PTC_E_NOMEM, "cannot create a condition variable");
    }
    return PTC_OK;
}

int ptc_ckpt_stage_create(ptc_ckpt_stage **out)
{
    ptc_ckpt_stage *st = ptc_calloc(1, sizeof *st);
    *out = NULL;
    if (!st)
        return PTC_E_NOMEM;
    int rc = ptc_ckpt_lock_init(&st->mu, &st->cv);
    if (rc < 0) {
        ptc_free(st);
        return rc;
    }
    *out = st;
    return PTC_OK;
}

/* Wait until no save uses the area, then hold it. */
void ptc_ckpt_stage_take(ptc_ckpt_stage *st)
{
    pthread_mutex_lock(&st->mu);
    while (st->busy)
        pthread_cond_wait(&st->cv, &st->mu);
    st->busy = true;
    pthread_mutex_unlock(&st->mu);
}

void ptc_ckpt_stage_give(ptc_ckpt_stage *st)
{
    pthread_mutex_lock(&st->mu);
    st->busy = false;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

size_t ptc_ckpt_stage_bytes(const ptc_ckpt_stage *st)
{
    return st ? st->cap + st->copies_cap : 0;
}

void ptc_ckpt_stage_defer(ptc_ckpt_stage *st, bool on)
{
    if (st)
        st->deferred = on;
}

int ptc_ckpt_stage_copies(ptc_ckpt_stage *st, size_t bytes, uint8_t **out)
{
    *out = NULL;
    if (bytes > st->copies_cap || !st->copies) {
        ptc_free(st->copies); /* the old bytes are not needed */
        st->copies_cap = 0;
        if (!(st->copies = ptc_malloc(bytes + 1)))
            return ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %zu bytes of replica "
                                              "copies", bytes);
        st->copies_cap = bytes;
    }
    *out = st->copies;
    return PTC_OK;
}

void ptc_ckpt_stage_destroy(ptc_ckpt_stage *st)
{
    if (!st)
        return;
    ptc_free(st->mem);
    ptc_free(st->copies);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    ptc_free(st);
}

