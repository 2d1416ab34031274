/* Loading a version of a store spread over hosts (ptc_reshard_hosts_load):
 * each host's store holds its part of every version (ptc/ckpt's protocol,
 * docs/format.md §10) — its ranks' shards and replicas of other hosts' —
 * and every byte a process lacks comes from a process whose host holds it,
 * over the transport, by the minimal-movement plan: every source rank is
 * read from one host holding it, and the plan moves the bytes into the
 * target layout. Nothing is read through a shared filesystem. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ptc/ckpt.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

int ptc_reshard_hosts_index(const ptc_transport *t, const char *name, int *host, int *nhosts)
{
    enum { N = PTC_RESHARD_HOST_NAME_MAX };
    char mine[N];
    memset(mine, 0, sizeof mine);
    int rc = PTC_OK;
    if (!name && gethostname(mine, N - 1) != 0)
        rc = ptc_error_set(PTC_E_IO, "gethostname failed");
    else if (name && (!*name || strlen(name) >= N))
        rc = ptc_error_set(PTC_E_INVAL, "host name '%.64s' is empty or of %d bytes or more",
                           name, N);
    else if (name)
        memcpy(mine, name, strlen(name));
    char *all = ptc_calloc((size_t)t->size, N);
    if (rc == PTC_OK && !all)
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the host names");
    if ((rc = ptc_transport_agree(t, rc, "host numbering")) < 0) {
        ptc_free(all);
        return rc;
    }
    rc = ptc_reshard_gather_all(t, mine, N, all);
    /* hosts numbered in the order of their lowest process */
    int n = 0;
    *host = -1;
    for (int p = 0; rc == PTC_OK && p < t->size; p++) {
        int first = p;
        for (int q = 0; q < p && first == p; q++)
            if (!memcmp(all + (size_t)q * N, all + (size_t)p * N, N))
                first = q;
        if (first != p)
            continue;
        if (!memcmp(all + (size_t)p * N, mine, N))
            *host = n;
        n++;
    }
    *nhosts = n;
    ptc_free(all);
    return rc;
}

/* The process that provides each source rank: one holding it, preferring
 * the process that runs the same target rank (its bytes stay put), then a
 * process on that target rank's host, then the least loaded; PTC_E_NOTFOUND
 * naming the ranks no process holds. */
static int choose_sources(const ptc_layout *src, const uint8_t *have, int np, const int *host_of,
                          const int *dst_owner, int dst_world, int *src_owner)
{
    int world = ptc_layout_world(src);
    uint64_t *load = ptc_calloc((size_t)np, sizeof *load);
    if (!load)
        return ptc_error_set(PTC_E_NOMEM, "no memory to choose sources");
    char missing[256] = "";
    size_t nmiss = 0;
    for (int r = 0; r < world; r++) {
        int best = -1, score = -1;
        int want = r < dst_world ? dst_owner[r] : -1;
        for (int p = 0; p < np; p++) {
            if (!have[(size_t)p * (size_t)world + (size_t)r])
                continue;
            int s = p == want ? 3 : (want >= 0 && host_of[p] == host_of[want]) ? 2 : 1;
            if (s > score || (s == score && load[p] < load[best]))
                best = p, score = s;
        }
        src_owner[r] = best;
        if (best >= 0) {
            load[best] += ptc_reshard_rank_bytes(src, r);
        } else if (ptc_reshard_rank_bytes(src, r) > 0) {
            size_t at = strlen(missing);
            if (at + 16 < sizeof missing)
                snprintf(missing + at, sizeof missing - at, "%s%d", nmiss ? ", " : "", r);
            nmiss++;
        } else {
            src_owner[r] = 0; /* holds nothing */
        }
    }
    ptc_free(load);
    if (nmiss)
        return ptc_error_set(PTC_E_NOTFOUND,
                             "the shards of %zu saved rank%s (%s) are on no host present: "
                             "lost with every copy (save with more --replicas)",
                             nmiss, nmiss == 1 ? "" : "s", missing);
    return PTC_OK;
}

/* The version's layout @p src must have @p dst's tensors in its order. */
static int check_tensors(const ptc_layout *src, const ptc_layout *dst)
{
    size_t nt = ptc_layout_count(src);
    if (nt != ptc_layout_count(dst))
        return ptc_error_set(PTC_E_INVAL, "the version holds %zu tensors, the job %zu", nt,
                             ptc_layout_count(dst));
    for (size_t t = 0; t < nt; t++) {
        const ptc_tensor_info *a = ptc_layout_tensor(src, t), *b = ptc_layout_tensor(dst, t);
        if (strcmp(a->name, b->name) || a->dtype != b->dtype)
            return ptc_error_set(PTC_E_INVAL, "tensor %zu is '%.200s' in the version, "
                                 "'%.200s' in the job", t, a->name, b->name);
    }
    return PTC_OK;
}

typedef struct hload {
    const ptc_transport *t;
    const ptc_layout *src; /* the version's layout (borrowed) */
    int world, dst_world;
    int *host_of, *src_owner, *dst_owner, *src_host, *dst_host;
    uint8_t *have;
    uint64_t budget;              /* the smallest of the processes' */
    ptc_reshard_hosts_src rd;     /* the source shards this process provides */
    const void *const **src_ptrs; /* per source rank: its row of rd.ptrs here */
    void *const **dst_ptrs;
} hload;

static void hload_free(hload *h)
{
    ptc_reshard_hosts_src_free(&h->rd);
    ptc_free(h->host_of);
    ptc_free(h->src_owner);
    ptc_free(h->dst_owner);
    ptc_free(h->src_host);
    ptc_free(h->dst_host);
    ptc_free(h->have);
    ptc_free(h->src_ptrs);
    ptc_free(h->dst_ptrs);
}

/* Who holds and who runs what, the same on every process: one all-gather
 * of a record per process — its host, its budget (u64), the target ranks
 * it runs (dw ints, -1 or itself) and the source ranks its host's part
 * holds (world bytes). */
static int hload_maps(hload *h, int host, ptc_store *s, uint64_t lv, const int *ranks,
                      size_t nranks)
{
    const ptc_transport *t = h->t;
    int np = t->size, world = h->world, dw = h->dst_world;
    size_t rec = sizeof(int) * ((size_t)dw + 1) + 8 + (size_t)world;
    uint8_t *mine = ptc_calloc(rec, 1), *all = ptc_calloc((size_t)np, rec);
    int rc = PTC_OK;
    if (!(h->host_of = ptc_calloc((size_t)np, sizeof *h->host_of)) ||
        !(h->have = ptc_calloc((size_t)np * (size_t)world + 1, 1)) ||
        !(h->src_owner = ptc_calloc((size_t)world + 1, sizeof(int))) ||
        !(h->src_host = ptc_calloc((size_t)world + 1, sizeof(int))) ||
        !(h->dst_owner = ptc_calloc((size_t)dw + 1, sizeof(int))) ||
        !(h->dst_host = ptc_calloc((size_t)dw + 1, sizeof(int))) || !mine || !all)
        rc = ptc_error_set(PTC_E_NOMEM, "no memory to plan the load");
    int v = -1;
    size_t at_budget = sizeof(int) * ((size_t)dw + 1), at_have = at_budget + 8;
    uint64_t budget = ptc_reshard_hosts_budget();
    ptc_store_reader *rd = NULL;
    if (rc == PTC_OK && lv && (rc = ptc_store_reader_open(&rd, s, lv)) == PTC_OK)
        rc = ptc_reshard_hosts_inventory(rd, h->src, mine + at_have); /* lv 0: none here */
    ptc_store_reader_close(rd);
    if (rc == PTC_OK) {
        memcpy(mine, &host, sizeof host);
        memcpy(mine + at_budget, &budget, 8);
    }
    for (int r = 0; rc == PTC_OK && r < dw; r++)
        memcpy(mine + sizeof(int) * (size_t)(r + 1), &v, sizeof v);
    for (size_t i = 0; rc == PTC_OK && i < nranks; i++) {
        if (ranks[i] < 0 || ranks[i] >= dw)
            rc = ptc_error_set(PTC_E_INVAL, "target rank %d outside the world of %d", ranks[i],
                               dw);
        else
            memcpy(mine + sizeof(int) * (size_t)(ranks[i] + 1), &t->rank, sizeof(int));
    }
    rc = ptc_transport_agree(t, rc, "load across hosts");
    if (rc == PTC_OK)
        rc = ptc_reshard_gather_all(t, mine, rec, all);
    h->budget = UINT64_MAX;
    for (int p = 0; rc == PTC_OK && p < np; p++) {
        memcpy(&h->host_of[p], all + (size_t)p * rec, sizeof(int));
        memcpy(&budget, all + (size_t)p * rec + at_budget, 8);
        h->budget = budget < h->budget ? budget : h->budget;
        memcpy(h->have + (size_t)p * (size_t)world, all + (size_t)p * rec + at_have,
               (size_t)world);
    }
    for (int r = 0; rc == PTC_OK && r < dw; r++) {
        h->dst_owner[r] = -1;
        for (int p = 0; p < np; p++) {
            memcpy(&v, all + (size_t)p * rec + sizeof(int) * (size_t)(r + 1), sizeof v);
            if (v >= 0)
                h->dst_owner[r] = p;
        }
        if (h->dst_owner[r] < 0)
            rc = ptc_error_set(PTC_E_INVAL, "no process runs target rank %d", r);
        else
            h->dst_host[r] = h->host_of[h->dst_owner[r]];
    }
    ptc_free(mine);
    ptc_free(all);
    if (rc == PTC_OK)
        rc = choose_sources(h->src, h->have, np, h->host_of, h->dst_owner, dw, h->src_owner);
    for (int r = 0; rc == PTC_OK && r < world; r++)
        h->src_host[r] = h->host_of[h->src_owner[r]];
    return rc;
}

/* The source ranks this process provides, cut into rounds. */
static int hload_sources(hload *h, ptc_store *s, uint64_t lv)
{
    PTC_TRY(ptc_reshard_hosts_src_init(&h->rd, h->src, s, lv, h->src_owner, h->t->size,
                                       h->t->rank, h->budget));
    if (!(h->src_ptrs = ptc_calloc((size_t)h->world + 1, sizeof *h->src_ptrs)))
        return ptc_error_set(PTC_E_NOMEM, "no memory for the source ranks");
    size_t nt = ptc_layout_count(h->src);
    for (size_t i = 0; i < h->rd.nmine; i++)
        h->src_ptrs[h->rd.mine[i]] = (const void *const *)&h->rd.ptrs[i * nt];
    return PTC_OK;
}

/* The plan's figures into @p res, the busiest host's bytes with them. */
static void figures(const ptc_plan *plan, int nhosts, uint64_t version, uint64_t read,
                    ptc_reshard_hosts_result *res)
{
    memset(res, 0, sizeof *res);
    res->version = version;
    res->hosts = nhosts;
    res->bytes_read = read;
    ptc_plan_stats_get(plan, &res->plan);
    for (int h = 0; h < nhosts; h++) {
        ptc_plan_host_stats hs;
        if (ptc_plan_host_stats_get(plan, h, &hs) != PTC_OK) {
            ptc_error_clear();
            continue;
        }
        uint64_t b = hs.bytes_in > hs.bytes_out ? hs.bytes_in : hs.bytes_out;
        if (b > res->max_host_bytes)
            res->max_host_bytes = b;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ptc_reshard_hosts_load_open(const ptc_transport *t, int host, ptc_store *s, uint64_t version,
                                const ptc_reshard_hosts_version *hv, const ptc_layout *dst,
                                const int *ranks, size_t nranks, void *const *bufs,
                                ptc_reshard_hosts_result *res)
{
    double t0 = now_s();
    hload h;
    memset(&h, 0, sizeof h);
    h.t = t;
    h.src = hv->layout;
    int host_max = host;
    ptc_plan *plan = NULL;
    int rc;
    if ((rc = ptc_transport_agree(t, check_tensors(h.src, dst), "load across hosts")) < 0)
        return rc;
    h.world = ptc_layout_world(h.src);
    h.dst_world = ptc_layout_world(dst);
    /* the maps' outcome is alike everywhere (agreed, or from what every
     * process gathered) */
    if ((rc = hload_maps(&h, host, s, hv->lv, ranks, nranks)) < 0)
        goto out_free;
    /* the groups, the plan and the first round's reads: their outcomes are
     * agreed in the first round's exchange (ptc_reshard_hosts_src_move) */
    rc = hload_sources(&h, s, hv->lv);
    ptc_plan_options po = {.src_host = h.src_host, .dst_host = h.dst_host};
    size_t nt = ptc_layout_count(dst), rounds = 0;
    if (rc == PTC_OK)
        rc = ptc_plan_create(&plan, h.src, dst, &po);
    for (int p = 0; rc == PTC_OK && p < t->size; p++)
        host_max = h.host_of[p] > host_max ? h.host_of[p] : host_max;
    if (rc == PTC_OK && !(h.dst_ptrs = ptc_calloc((size_t)h.dst_world + 1, sizeof *h.dst_ptrs)))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the target ranks");
    for (size_t i = 0; rc == PTC_OK && i < nranks; i++)
        h.dst_ptrs[ranks[i]] = (void *const *)&bufs[i * nt];
    double t_move = now_s();
    rc = ptc_reshard_hosts_src_move(&h.rd, rc, plan, t, h.src_owner, h.src_ptrs, h.dst_owner,
                                    h.dst_ptrs, &rounds);
    t_move = now_s() - t_move;
    if (rc == PTC_OK && res) {
        /* every source rank with bytes is read once, by its provider: the
         * sum over processes needs no collective */
        uint64_t all_read = 0;
        for (int r = 0; r < h.world; r++)
            all_read += ptc_reshard_rank_bytes(h.src, r);
        figures(plan, host_max + 1, version, all_read, res);
        res->seconds = now_s() - t0;
        res->read_seconds = h.rd.read_seconds;
        res->move_seconds = t_move;
        res->rounds = rounds;
        res->source_peak_bytes = h.rd.peak;
    }
out_free:
    ptc_plan_destroy(plan);
    hload_free(&h);
    return rc;
}

int ptc_reshard_hosts_load(const ptc_transport *t, int host, ptc_store *s, uint64_t version,
                           const ptc_layout *dst, const int *ranks, size_t nranks,
                           void *const *bufs, ptc_reshard_hosts_result *res)
{
    ptc_reshard_hosts_version hv; /* opened once: by the pick where it opened it */
    memset(&hv, 0, sizeof hv);
    if (!version)
        PTC_TRY(ptc_reshard_hosts_pick_open(t, host, s, 0, false, &version, &hv));
    PTC_TRY(ptc_reshard_hosts_version_ensure(t, s, version, false, &hv));
    int rc = ptc_reshard_hosts_load_open(t, host, s, version, &hv, dst, ranks, nranks, bufs, res);
    ptc_reshard_hosts_version_close(&hv);
    return rc;
}
