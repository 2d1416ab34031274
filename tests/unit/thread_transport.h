/* A ptc_transport whose "processes" are threads of one test: the collective
 * checkpoint protocol runs for real (every agreement, broadcast and gather)
 * without MPI. Used by test_ckpt_collect.c, test_ckpt_async.c,
 * test_ckpt_stream.c and test_reshard_hosts.c.
 *
 *   proc ps[N];  run(ps, N, body, arg);   body(proc *p) sees p->t, p->rank
 *
 * Every process's body returns PTC_OK or an error; its message is kept in
 * p->msg. A body may start a second transport over another group (async
 * saves: the background thread's own), made with group_init(). */
#ifndef PTC_TEST_THREAD_TRANSPORT_H
#define PTC_TEST_THREAD_TRANSPORT_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ptc/transport.h"

#define MAXP 4

typedef struct group {
    int size;
    pthread_barrier_t bar;
    const void *slot[MAXP];
} group;

/* One process's end of a group. */
typedef struct member {
    group *g;
    int rank;
} member;

typedef struct proc proc;
typedef int (*body_fn)(proc *p);

struct proc {
    group *g;
    int rank;
    ptc_transport t;
    member self;
    body_fn body;
    const void *arg;
    int rc;
    char msg[1024];
    /* what the body saw */
    size_t ntensors;
    char names[4][32];
    int ndim[4];
    int64_t shape[4][2];
    uint64_t version;
};

static inline int th_allgather(void *user, const void *in, size_t n, void *out)
{
    member *m = user;
    m->g->slot[m->rank] = in;
    pthread_barrier_wait(&m->g->bar);
    for (int q = 0; q < m->g->size; q++)
        memcpy((uint8_t *)out + (size_t)q * n, m->g->slot[q], n);
    pthread_barrier_wait(&m->g->bar);
    return PTC_OK;
}

static inline int th_broadcast(void *user, void *buf, size_t n, int root)
{
    member *m = user;
    if (m->rank == root)
        m->g->slot[root] = buf;
    pthread_barrier_wait(&m->g->bar);
    if (m->rank != root)
        memcpy(buf, m->g->slot[root], n);
    pthread_barrier_wait(&m->g->bar);
    return PTC_OK;
}

static inline int th_barrier(void *user)
{
    member *m = user;
    pthread_barrier_wait(&m->g->bar);
    return PTC_OK;
}

/* The transport of member @p m (its group and rank set). */
static inline ptc_transport th_transport(member *m)
{
    return (ptc_transport){.rank = m->rank, .size = m->g->size, .allgather = th_allgather,
                           .broadcast = th_broadcast, .barrier = th_barrier, .user = m};
}

static inline void *th_main(void *arg)
{
    proc *p = arg;
    p->self = (member){p->g, p->rank};
    p->t = th_transport(&p->self);
    ptc_error_clear();
    p->rc = p->body(p);
    snprintf(p->msg, sizeof p->msg, "%s", p->rc < 0 ? ptc_last_error() : "");
    return NULL;
}

static inline int group_init(group *g, int n)
{
    memset(g, 0, sizeof *g);
    g->size = n;
    return pthread_barrier_init(&g->bar, NULL, (unsigned)n);
}

/* Run @p body on @p n thread-processes with argument @p arg. */
static inline void run(proc *ps, int n, body_fn body, const void *arg)
{
    group g;
    pthread_t th[MAXP];
    assert_int_equal(group_init(&g, n), 0);
    for (int r = 0; r < n; r++) {
        memset(&ps[r], 0, sizeof ps[r]);
        ps[r] = (proc){.g = &g, .rank = r, .body = body, .arg = arg};
        assert_int_equal(pthread_create(&th[r], NULL, th_main, &ps[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&g.bar);
}

/* Every process ended with @p rc and message @p msg. */
static inline void all_fail(const proc *ps, int n, int rc, const char *msg)
{
    for (int r = 0; r < n; r++) {
        if (ps[r].rc != rc || strcmp(ps[r].msg, msg))
            fail_msg("process %d: %d '%s', want %d '%s'", r, ps[r].rc, ps[r].msg, rc, msg);
    }
}

#endif
