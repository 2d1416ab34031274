/* The watchdog of a training job outside the runtime's step
 * (exec/model/train_watch.c): a wait entered and not left within the
 * timeout calls on_timeout once, from another thread, with a line naming
 * the rank, the wait and the step; a wait left in time, or one that moves
 * on (progress), calls nothing; no timeout starts no thread. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "exec/model/train_internal.h"

typedef struct fired {
    pthread_mutex_t mu;
    int n;
    char line[256];
    pthread_t by;
} fired;

static void on_timeout(const char *where, void *user)
{
    fired *f = user;
    pthread_mutex_lock(&f->mu);
    f->n++;
    snprintf(f->line, sizeof f->line, "%s", where);
    f->by = pthread_self();
    pthread_mutex_unlock(&f->mu);
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int count(fired *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->n;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void test_fires_once(void **state)
{
    (void)state;
    fired f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    train_watch *w = NULL;
    assert_int_equal(train_watch_start(&w, 0.3, 3, on_timeout, &f), PTC_OK);
    assert_non_null(w);
    train_watch_enter(w, "saving the state", 7);
    nap(1.2); /* four timeouts long: still once */
    assert_int_equal(count(&f), 1);
    assert_non_null(strstr(f.line, "watchdog: rank 3: no progress for 0."));
    assert_non_null(strstr(f.line, " s while saving the state (step 7)"));
    assert_false(pthread_equal(f.by, pthread_self()));
    /* entered again: armed again */
    train_watch_enter(w, "resizing online", 9);
    nap(0.7);
    assert_int_equal(count(&f), 2);
    assert_non_null(strstr(f.line, "while resizing online (step 9)"));
    train_watch_stop(w);
}

static void test_progress_and_leave(void **state)
{
    (void)state;
    fired f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    train_watch *w = NULL;
    assert_int_equal(train_watch_start(&w, 0.4, 0, on_timeout, &f), PTC_OK);
    for (int i = 0; i < 8; i++) { /* 1.2 s of waits, each shorter than the timeout */
        train_watch_enter(w, "deciding at the step boundary", i);
        nap(0.15);
    }
    train_watch_leave(w); /* the runtime's step: not this watchdog's */
    nap(0.8);
    assert_int_equal(count(&f), 0);
    train_watch_stop(w);
}

static void test_no_timeout(void **state)
{
    (void)state;
    fired f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    train_watch *w = (train_watch *)&f;
    assert_int_equal(train_watch_start(&w, 0, 0, on_timeout, &f), PTC_OK);
    assert_null(w);
    train_watch_enter(NULL, "x", 0);
    train_watch_leave(NULL);
    train_watch_stop(NULL);
    assert_int_equal(count(&f), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fires_once),
        cmocka_unit_test(test_progress_and_leave),
        cmocka_unit_test(test_no_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
