/* The rounds of a load across hosts (ptc_reshard_hosts_load): the version's
 * tensors are cut, in their order, into groups whose source bytes on every
 * process stay within half the budget (a tensor over it alone); the groups
 * follow from the layout and the providers of the source ranks only, so
 * every process cuts them alike. Round g reads group g's source shards
 * this process provides (a shard that several of its ranks hold, the same
 * owner, read once), moves them by the plan (ptc_reshard_owned_round) and
 * frees them; group g + 1 is read on a thread meanwhile, where both fit in
 * the budget together. So a process holds at most max(budget, its largest
 * tensor's source bytes) of source shards at once. Each round's outcome is
 * agreed in the next round's exchange, the last one at the end. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool_internal.h"
#include "base/util_internal.h"
#include "ptc/store/store_ranks.h"
#include "reshard/reshard_internal.h"

uint64_t ptc_reshard_hosts_budget(void)
{
    const char *e = getenv("PTC_HOSTS_LOAD_BUDGET");
    if (!e || !*e)
        return PTC_RESHARD_HOSTS_LOAD_BUDGET_DEFAULT;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(e, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift)
        end++;
    if (errno || end == e || *end || *e == '-' || v == 0 || v > (UINT64_MAX >> shift)) {
        ptc_log(PTC_LOG_WARN, "PTC_HOSTS_LOAD_BUDGET='%.40s' is not a byte count (N, NK, NM "
                "or NG); using %llu MiB", e,
                (unsigned long long)(PTC_RESHARD_HOSTS_LOAD_BUDGET_DEFAULT >> 20));
        return PTC_RESHARD_HOSTS_LOAD_BUDGET_DEFAULT;
    }
    return (uint64_t)v << shift;
}

/* The stored shard of (@p t, @p r) as this process keeps it: its bytes
 * (0: none), and the earlier rank of ranks[0..i) whose buffer holds the same
 * shard (-1: none; the same owner in the layout). */
static int shard_of(const ptc_layout *l, size_t t, const int *ranks, size_t i, uint64_t *bytes,
                    long *same)
{
    ptc_shard sh, sj;
    *bytes = 0;
    *same = -1;
    PTC_TRY(ptc_layout_shard(l, t, ranks[i], &sh));
    int64_t v = sh.present ? 1 : 0;
    for (int d = 0; v && d < sh.ndim; d++)
        v *= sh.shape[d];
    if (v <= 0)
        return PTC_OK;
    *bytes = (uint64_t)v * ptc_dtype_size(ptc_layout_tensor(l, t)->dtype);
    for (size_t j = 0; j < i && *same < 0; j++) {
        PTC_TRY(ptc_layout_shard(l, t, ranks[j], &sj));
        if (sj.present && sj.owner == sh.owner)
            *same = (long)j;
    }
    return PTC_OK;
}

/* The source bytes of tensor @p t on each of the @p np processes into
 * @p per (added), the ranks a process provides in increasing order. */
static int tensor_bytes(const ptc_reshard_hosts_src *s, size_t t, int np, const int *by_proc,
                        const size_t *first, uint64_t *per)
{
    for (int p = 0; p < np; p++)
        for (size_t i = 0; i < first[p + 1] - first[p]; i++) {
            uint64_t b;
            long same;
            PTC_TRY(shard_of(s->src, t, by_proc + first[p], i, &b, &same));
            if (same < 0)
                per[p] += b;
        }
    return PTC_OK;
}

/* Cut the tensors into groups: within half the budget on every process. */
static int cut_groups(ptc_reshard_hosts_src *s, const int *src_owner, int np, int me)
{
    size_t nt = ptc_layout_count(s->src);
    int world = ptc_layout_world(s->src);
    uint64_t half = s->budget / 2 ? s->budget / 2 : 1;
    int *by_proc = ptc_malloc(sizeof(int) * ((size_t)world + 1));
    size_t *first = ptc_calloc((size_t)np + 2, sizeof *first);
    uint64_t *per = ptc_calloc((size_t)np, sizeof *per);
    uint64_t *acc = ptc_calloc((size_t)np, sizeof *acc);
    s->gend = ptc_calloc(nt + 1, sizeof *s->gend);
    s->gbytes = ptc_calloc(nt + 1, sizeof *s->gbytes);
    int rc = by_proc && first && per && acc && s->gend && s->gbytes
                 ? PTC_OK
                 : ptc_error_set(PTC_E_NOMEM, "no memory to cut the load into rounds");
    /* the ranks each process provides, by process then rank (counting sort) */
    for (int r = 0; rc == PTC_OK && r < world; r++)
        first[src_owner[r] + 2]++;
    for (int p = 0; rc == PTC_OK && p < np; p++)
        first[p + 2] += first[p + 1];
    for (int r = 0; rc == PTC_OK && r < world; r++)
        by_proc[first[src_owner[r] + 1]++] = r;
    for (size_t t = 0; rc == PTC_OK && t < nt; t++) {
        memset(per, 0, sizeof *per * (size_t)np);
        if ((rc = tensor_bytes(s, t, np, by_proc, first, per)) < 0)
            break;
        bool over = false;
        for (int p = 0; p < np; p++)
            over = over || acc[p] + per[p] > half;
        if (over && t > (s->ngroups ? s->gend[s->ngroups - 1] : 0)) { /* close the group */
            s->gbytes[s->ngroups] = acc[me];
            s->gend[s->ngroups++] = t;
            memset(acc, 0, sizeof *acc * (size_t)np);
        }
        for (int p = 0; p < np; p++)
            acc[p] += per[p];
    }
    if (rc == PTC_OK && nt) {
        s->gbytes[s->ngroups] = acc[me];
        s->gend[s->ngroups++] = nt;
    }
    ptc_free(by_proc);
    ptc_free(first);
    ptc_free(per);
    ptc_free(acc);
    return rc;
}

void ptc_reshard_hosts_src_free(ptc_reshard_hosts_src *s)
{
    size_t nt = s->src ? ptc_layout_count(s->src) : 0;
    for (size_t i = 0; s->bufs && i < s->nmine * nt; i++)
        ptc_free(s->bufs[i]);
    ptc_free(s->bufs);
    ptc_free(s->ptrs);
    ptc_free(s->map);
    ptc_free(s->mine);
    ptc_free(s->gend);
    ptc_free(s->gbytes);
    ptc_store_reader_close(s->rd);
    memset(s, 0, sizeof *s);
}

int ptc_reshard_hosts_src_init(ptc_reshard_hosts_src *s, const ptc_layout *src, ptc_store *st,
                               uint64_t lv, const int *src_owner, int np, int me,
                               uint64_t budget)
{
    memset(s, 0, sizeof *s);
    s->src = src;
    s->budget = budget;
    size_t nt = ptc_layout_count(src);
    int world = ptc_layout_world(src);
    if (!(s->mine = ptc_calloc((size_t)world + 1, sizeof(int))))
        return ptc_error_set(PTC_E_NOMEM, "no memory for the source ranks");
    for (int r = 0; r < world; r++)
        if (src_owner[r] == me && ptc_reshard_rank_bytes(src, r) > 0)
            s->mine[s->nmine++] = r;
    if (!(s->bufs = ptc_calloc(s->nmine * nt + 1, sizeof *s->bufs)) ||
        !(s->ptrs = ptc_calloc(s->nmine * nt + 1, sizeof *s->ptrs)) ||
        !(s->map = ptc_calloc(nt + 1, sizeof *s->map)))
        return ptc_error_set(PTC_E_NOMEM, "no memory for the source ranks");
    PTC_TRY(cut_groups(s, src_owner, np, me));
    if (s->nmine == 0)
        return PTC_OK; /* e.g. a host without its part of the version */
    PTC_TRY(ptc_store_reader_open(&s->rd, st, lv));
    for (size_t t = 0; t < nt; t++) {
        const char *name = ptc_layout_tensor(src, t)->name;
        size_t at;
        PTC_TRY(ptc_store_reader_find(s->rd, name, strlen(name), &at));
        s->map[t] = (uint32_t)at;
    }
    return PTC_OK;
}

/* The reads of a group: (rank index, tensor) pairs, each shard whole. */
typedef struct reads {
    ptc_reshard_hosts_src *s;
    size_t *it; /* i * nt + t */
    size_t n;
} reads;

/* One shard: in place in the pack file's mapping where it is stored
 * uncompressed (verified, no copy, no memory of ours), else read into a
 * buffer of its own. Each item touches its own entries of bufs/ptrs. */
static int read_one(void *arg, size_t k)
{
    const reads *r = arg;
    ptc_reshard_hosts_src *s = r->s;
    size_t x = r->it[k], nt = ptc_layout_count(s->src), i = x / nt, t = x % nt;
    uint64_t b;
    long same;
    PTC_TRY(shard_of(s->src, t, s->mine, i, &b, &same));
    const void *at;
    PTC_TRY(ptc_store_reader_map_shard(s->rd, s->map[t], (uint32_t)s->mine[i], &at));
    if (at) {
        s->ptrs[x] = at;
        return PTC_OK;
    }
    if (!(s->bufs[x] = ptc_malloc((size_t)b)))
        return ptc_error_set(PTC_E_NOMEM, "no memory for rank %d's shard of '%.200s' (%llu bytes)",
                             s->mine[i], ptc_layout_tensor(s->src, t)->name,
                             (unsigned long long)b);
    s->ptrs[x] = s->bufs[x];
    return ptc_store_reader_read_shard(s->rd, s->map[t], (uint32_t)s->mine[i], s->bufs[x],
                                       (size_t)b);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ptc_reshard_hosts_src_read(ptc_reshard_hosts_src *s, size_t g)
{
    double t_start = now_s();
    size_t nt = ptc_layout_count(s->src), t0 = g ? s->gend[g - 1] : 0, t1 = s->gend[g];
    reads r = {s, ptc_malloc(sizeof(size_t) * (s->nmine * (t1 - t0) + 1)), 0};
    if (!r.it)
        return ptc_error_set(PTC_E_NOMEM, "no memory for the reads of round %zu", g);
    int rc = PTC_OK;
    for (size_t i = 0; rc == PTC_OK && i < s->nmine; i++)
        for (size_t t = t0; rc == PTC_OK && t < t1; t++) {
            uint64_t b;
            long same;
            if ((rc = shard_of(s->src, t, s->mine, i, &b, &same)) < 0 || !b || same >= 0)
                continue;
            r.it[r.n++] = i * nt + t;
        }
    if (rc == PTC_OK && r.n)
        rc = ptc_pool_for(ptc_pool_threads(0, 16), r.n, read_one, &r);
    /* the shards held in memory of ours (a failed round's too: the drop
     * frees them); an earlier rank's shard shared */
    for (size_t i = 0; i < s->nmine; i++)
        for (size_t t = t0; t < t1; t++) {
            size_t k = i * nt + t;
            uint64_t b;
            long same;
            if (shard_of(s->src, t, s->mine, i, &b, &same) < 0) /* rc says so already */
                continue;
            if (s->bufs[k])
                s->held += b;
            else if (b && same >= 0 && rc == PTC_OK)
                s->ptrs[k] = s->ptrs[(size_t)same * nt + t];
        }
    s->peak = s->held > s->peak ? s->held : s->peak;
    ptc_free(r.it);
    s->read_seconds += now_s() - t_start;
    return rc;
}

void ptc_reshard_hosts_src_drop(ptc_reshard_hosts_src *s, size_t g)
{
    size_t nt = ptc_layout_count(s->src), t0 = g ? s->gend[g - 1] : 0, t1 = s->gend[g];
    for (size_t i = 0; i < s->nmine; i++)
        for (size_t t = t0; t < t1; t++) {
            size_t k = i * nt + t;
            if (s->bufs[k]) {
                uint64_t b;
                long same;
                if (shard_of(s->src, t, s->mine, i, &b, &same) == PTC_OK)
                    s->held -= b;
                ptc_free(s->bufs[k]);
            }
            s->bufs[k] = NULL;
            s->ptrs[k] = NULL;
        }
}

/* The read of the next group, on a thread beside a round's exchange. */
typedef struct ahead {
    ptc_reshard_hosts_src *s;
    size_t g;
    int rc;
    char err[1024]; /* the thread's message (ptc_error_set's is per thread) */
} ahead;

static void *ahead_main(void *arg)
{
    ahead *a = arg;
    if ((a->rc = ptc_reshard_hosts_src_read(a->s, a->g)) < 0)
        snprintf(a->err, sizeof a->err, "%s", ptc_last_error());
    return NULL;
}

int ptc_reshard_hosts_src_move(ptc_reshard_hosts_src *s, int rc, const ptc_plan *p,
                               const ptc_transport *t, const int *src_owner,
                               const void *const *const *src, const int *dst_owner,
                               void *const *const *dst, size_t *rounds)
{
    /* alike everywhere when rc is PTC_OK; else one round carries the failure */
    size_t ng = rc == PTC_OK && s->ngroups ? s->ngroups : 1;
    bool gone = false;
    if (rc == PTC_OK && s->ngroups)
        rc = ptc_reshard_hosts_src_read(s, 0);
    size_t g = 0;
    for (; g < ng && !gone; g++) {
        size_t t0 = g && s->gend ? s->gend[g - 1] : 0, t1 = rc == PTC_OK ? s->gend[g] : t0;
        ahead a = {s, g + 1, PTC_OK, ""};
        pthread_t th;
        bool side = rc == PTC_OK && g + 1 < ng && s->gbytes[g] + s->gbytes[g + 1] <= s->budget &&
                    pthread_create(&th, NULL, ahead_main, &a) == 0;
        rc = ptc_reshard_owned_round(rc, p, t, src_owner, src, dst_owner, dst, t0, t1, &gone);
        if (side) {
            pthread_join(th, NULL);
            if (a.rc < 0 && rc == PTC_OK)
                rc = ptc_error_set(a.rc, "%s", a.err);
        }
        if (g < s->ngroups)
            ptc_reshard_hosts_src_drop(s, g);
        if (!side && rc == PTC_OK && g + 1 < ng)
            rc = ptc_reshard_hosts_src_read(s, g + 1);
    }
    *rounds = g;
    /* a round that failed in its exchange failed alike everywhere */
    return gone ? rc : ptc_transport_agree(t, rc, "load across hosts");
}
