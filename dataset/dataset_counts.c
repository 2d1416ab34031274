/* Served-record counting for the exactly-once audit: serving events are
 * buffered in memory and added to the store's count map
 * (ptc_store_dataset_counts_add, one write transaction per flush), so the
 * FUSE read path never waits for LMDB. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/dataset.h"
#include "ptc/store.h"
#include "base/util_internal.h"

#define COUNT_NAME_MAX 255

struct ptc_dataset_counter {
    ptc_store *store;
    pthread_mutex_t lock;
    ptc_store_dataset_count *ev;
    size_t nev, cap;
    char **names;
    size_t nnames, names_cap;
    pthread_mutex_t flush_lock; /* one flush at a time */
};

static int check_name(const char *name, size_t *len)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > COUNT_NAME_MAX)
        return ptc_error_set(PTC_E_INVAL, "bad dataset name");
    *len = n;
    return PTC_OK;
}

int ptc_dataset_counter_create(ptc_dataset_counter **out, ptc_store *store)
{
    *out = NULL;
    if (ptc_store_readonly(store))
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", ptc_store_dir(store));
    PTC_TRY(ptc_store_dataset_counts_open(store));
    ptc_dataset_counter *c = ptc_calloc(1, sizeof *c);
    if (!c)
        return PTC_E_NOMEM;
    c->store = store;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->flush_lock, NULL);
    *out = c;
    return PTC_OK;
}

int ptc_dataset_counter_add(ptc_dataset_counter *c, const char *name, uint64_t gen,
                            uint64_t seed, uint64_t epoch, uint64_t id)
{
    size_t nlen = 0;
    PTC_TRY(check_name(name, &nlen));
    int rc = PTC_OK;
    pthread_mutex_lock(&c->lock);
    size_t ni = 0;
    while (ni < c->nnames && strcmp(c->names[ni], name) != 0)
        ni++;
    if (ni == c->nnames) {
        rc = ptc_grow((void **)&c->names, &c->names_cap, ni + 1, sizeof *c->names);
        char *copy = rc == PTC_OK ? ptc_strdup(name) : NULL;
        if (!copy) {
            rc = PTC_E_NOMEM;
            goto out_unlock;
        }
        c->names[c->nnames++] = copy;
    }
    rc = ptc_grow((void **)&c->ev, &c->cap, c->nev + 1, sizeof *c->ev);
    if (rc == PTC_OK)
        c->ev[c->nev++] = (ptc_store_dataset_count){(uint32_t)ni, gen, seed, epoch, id, 1};
out_unlock:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int cmp_ev(const void *pa, const void *pb)
{
    const ptc_store_dataset_count *a = pa, *b = pb;
    if (a->name != b->name)
        return a->name < b->name ? -1 : 1;
    if (a->gen != b->gen)
        return a->gen < b->gen ? -1 : 1;
    if (a->seed != b->seed)
        return a->seed < b->seed ? -1 : 1;
    if (a->epoch != b->epoch)
        return a->epoch < b->epoch ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Sort and merge equal events in place (their counts add); returns the
 * number of distinct ones. */
static size_t merge_events(ptc_store_dataset_count *ev, size_t n)
{
    if (n == 0)
        return 0;
    qsort(ev, n, sizeof *ev, cmp_ev);
    size_t o = 0;
    for (size_t i = 1; i < n; i++) {
        if (cmp_ev(&ev[o], &ev[i]) == 0)
            ev[o].count += ev[i].count;
        else
            ev[++o] = ev[i];
    }
    return o + 1;
}

int ptc_dataset_counter_flush(ptc_dataset_counter *c)
{
    pthread_mutex_lock(&c->flush_lock);
    pthread_mutex_lock(&c->lock);
    ptc_store_dataset_count *ev = c->ev;
    size_t n = c->nev;
    /* the name strings live until destroy; the array may grow meanwhile,
     * so the transaction works on a copy of it */
    char **names = ptc_malloc((c->nnames ? c->nnames : 1) * sizeof *names);
    if (!names) {
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_unlock(&c->flush_lock);
        return PTC_E_NOMEM;
    }
    if (c->nnames)
        memcpy(names, c->names, c->nnames * sizeof *names);
    c->ev = NULL;
    c->nev = c->cap = 0;
    pthread_mutex_unlock(&c->lock);
    n = merge_events(ev, n);
    int rc = ptc_store_dataset_counts_add(c->store, (const char *const *)names, ev, n);
    if (rc < 0) {
        /* keep the counts for the next flush, ahead of newer ones */
        pthread_mutex_lock(&c->lock);
        ptc_store_dataset_count *m = ptc_malloc((n + c->nev) * sizeof *m);
        if (m) {
            memcpy(m, ev, n * sizeof *m);
            if (c->nev)
                memcpy(m + n, c->ev, c->nev * sizeof *m);
            ptc_free(c->ev);
            c->ev = m;
            c->nev += n;
            c->cap = c->nev;
        } else {
            ptc_log(PTC_LOG_ERROR, "lost %zu dataset counts", n);
        }
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&c->flush_lock);
    ptc_free(ev);
    ptc_free(names);
    return rc;
}

void ptc_dataset_counter_destroy(ptc_dataset_counter *c)
{
    if (!c)
        return;
    int rc = ptc_dataset_counter_flush(c);
    if (rc < 0)
        ptc_log(PTC_LOG_ERROR, "dataset counts not saved: %s", ptc_last_error());
    ptc_free(c->ev);
    for (size_t i = 0; i < c->nnames; i++)
        ptc_free(c->names[i]);
    ptc_free(c->names);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->flush_lock);
    ptc_free(c);
}

struct audit_job {
    const char *name;
    ptc_dataset_audit_result *out;
    const ptc_dataset_batch_policy *policy; /* NULL: none */
    ptc_order order;
    uint64_t served_dropped; /* served records the policy drops */
};

static int audit_one(uint64_t id, uint64_t count, void *user)
{
    struct audit_job *j = user;
    if (id >= j->out->samples)
        return ptc_error_set(PTC_E_STORE,
                             "dataset counts of '%s' hold record %llu of a dataset of %llu",
                             j->name, (unsigned long long)id,
                             (unsigned long long)j->out->samples);
    if (count == 1)
        j->out->once++;
    else if (count > 1)
        j->out->repeated++;
    if (count > 0 && j->policy) {
        const ptc_dataset_batch_policy *p = j->policy;
        uint64_t pos;
        bool dropped;
        PTC_TRY(ptc_order_position(&j->order, id, &pos));
        PTC_TRY(ptc_batch_is_dropped(j->out->samples, p->batch, p->start, p->dp, p->policy,
                                     pos, &dropped));
        j->served_dropped += dropped;
    }
    return PTC_OK;
}

int ptc_dataset_audit_counts_policy(ptc_store *store, const char *name, uint64_t gen,
                                    uint64_t seed, uint64_t epoch, uint64_t samples,
                                    const ptc_dataset_batch_policy *policy,
                                    ptc_dataset_audit_result *out)
{
    size_t nlen = 0;
    PTC_TRY(check_name(name, &nlen));
    memset(out, 0, sizeof *out);
    out->samples = samples;
    struct audit_job j = {.name = name, .out = out, .policy = policy};
    uint64_t dropped = 0;
    if (policy) {
        PTC_TRY(ptc_batch_dropped(samples, policy->batch, policy->start, policy->dp,
                                  policy->policy, &dropped));
        PTC_TRY(ptc_order_init(&j.order, samples, seed, epoch));
    }
    int rc = ptc_store_dataset_counts_each(store, name, gen, seed, epoch, audit_one, &j);
    if (rc == PTC_OK) {
        out->dropped = dropped - j.served_dropped;
        out->missing = samples - out->once - out->repeated - out->dropped;
    }
    return rc;
}

int ptc_dataset_audit_counts(ptc_store *store, const char *name, uint64_t gen, uint64_t seed,
                             uint64_t epoch, uint64_t samples, ptc_dataset_audit_result *out)
{
    return ptc_dataset_audit_counts_policy(store, name, gen, seed, epoch, samples, NULL, out);
}
