/* The watchdog of a training job outside the runtime's step (--timeout):
 * a thread that sees a wait of the step loop — the step's data, its
 * figures, the decision at a step boundary, a save, a resize, the store and
 * the resume at the start — make no progress for the timeout, and then
 * says where this process is and calls the job's on_timeout. The runtime
 * watches its own step (exec/runtime: every transfer); between steps a
 * process can block in a collective its peers never reach, or in a read,
 * where no error comes back: only another thread can see it. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "exec/model/train_internal.h"

struct train_watch {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double timeout;
    int wrank;
    ptc_train_timeout_fn fn;
    void *user;
    bool armed, quit;
    const char *phase;       /* static text */
    int64_t step;
    struct timespec since;   /* CLOCK_MONOTONIC */
};

static double elapsed(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static void *watch_main(void *arg)
{
    train_watch *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 200000000; /* 0.2 s: the report comes within that of the timeout */
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
        if (w->quit || !w->armed || elapsed(&w->since) <= w->timeout)
            continue;
        w->armed = false; /* fires once */
        char line[256];
        snprintf(line, sizeof line, "watchdog: rank %d: no progress for %.1f s while %s "
                 "(step %lld)", w->wrank, elapsed(&w->since), w->phase, (long long)w->step);
        pthread_mutex_unlock(&w->mu);
        if (w->fn)
            w->fn(line, w->user); /* ends the process, as a rule */
        else
            ptc_log(PTC_LOG_ERROR, "%s", line);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int train_watch_start(train_watch **out, double timeout, int wrank, ptc_train_timeout_fn fn,
                      void *user)
{
    *out = NULL;
    if (!(timeout > 0))
        return PTC_OK; /* no watchdog: the calls below are no-ops on NULL */
    train_watch *w = ptc_calloc(1, sizeof *w);
    if (!w)
        return PTC_E_NOMEM;
    w->timeout = timeout;
    w->wrank = wrank;
    w->fn = fn;
    w->user = user;
    pthread_condattr_t ca;
    int err = pthread_condattr_init(&ca);
    if (err == 0) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        err = pthread_cond_init(&w->cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    if (err == 0 && (err = pthread_mutex_init(&w->mu, NULL)) != 0)
        pthread_cond_destroy(&w->cv);
    if (err == 0 && (err = pthread_create(&w->thread, NULL, watch_main, w)) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    if (err != 0) {
        ptc_free(w);
        return ptc_error_set(PTC_E_NOMEM, "cannot start the watchdog thread (error %d)", err);
    }
    *out = w;
    return PTC_OK;
}

void train_watch_enter(train_watch *w, const char *phase, int64_t step)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->phase = phase;
    w->step = step;
    w->armed = true;
    clock_gettime(CLOCK_MONOTONIC, &w->since);
    pthread_mutex_unlock(&w->mu);
}

void train_watch_leave(train_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->armed = false;
    pthread_mutex_unlock(&w->mu);
}

void train_watch_stop(train_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    ptc_free(w);
}
