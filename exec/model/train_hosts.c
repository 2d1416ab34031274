/* A training job whose hosts share no filesystem (ptc train --replicas K):
 * each host's store holds its part of every version (ptc/ckpt's protocol,
 * docs/format.md §10), and a resume takes each byte a process lacks from a
 * process whose host holds it, over MPI, by the minimal-movement plan
 * (reshard/): every source rank is read from one host holding it — its own
 * host's part or a replica on another host — and the plan moves the bytes
 * into the target layout. Nothing is read through a shared filesystem. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/plan.h"
#include "ptc/reshard.h"
#include "exec/model/train_internal.h"

int train_hosts_index(MPI_Comm comm, int *host, int *nhosts)
{
    int me, np, len = 0;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &me));
    PTC_MPI_TRY(MPI_Comm_size(comm, &np));
    char name[MPI_MAX_PROCESSOR_NAME];
    memset(name, 0, sizeof name);
    PTC_MPI_TRY(MPI_Get_processor_name(name, &len));
    char *all = calloc((size_t)np, MPI_MAX_PROCESSOR_NAME);
    if (!all)
        return ptc_error_set(PTC_E_NOMEM, "no memory for the host names");
    int rc = MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME,
                           MPI_CHAR, comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return ptc_mpi_error(rc, "MPI_Allgather of the host names");
    }
    /* hosts numbered in the order of their lowest process */
    int n = 0;
    *host = -1;
    for (int p = 0; p < np; p++) {
        int first = p;
        for (int q = 0; q < p && first == p; q++)
            if (!strncmp(all + (size_t)q * MPI_MAX_PROCESSOR_NAME,
                         all + (size_t)p * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME))
                first = q;
        if (first == p)
            n++;
        if (p == me) {
            /* this process's host: the number of hosts first seen before its lowest process */
            int h = 0;
            for (int q = 0; q < first; q++) {
                bool seen = false;
                for (int u = 0; u < q && !seen; u++)
                    seen = !strncmp(all + (size_t)u * MPI_MAX_PROCESSOR_NAME,
                                    all + (size_t)q * MPI_MAX_PROCESSOR_NAME,
                                    MPI_MAX_PROCESSOR_NAME);
                h += !seen;
            }
            *host = h;
        }
    }
    *nhosts = n;
    free(all);
    return PTC_OK;
}

/* Which source ranks this host's part holds (world bytes into @p have). */
static int inventory(const ptc_store_reader *rd, const ptc_layout *src, uint8_t *have)
{
    int world = ptc_layout_world(src);
    for (int r = 0; r < world; r++) {
        have[r] = 1;
        for (size_t t = 0; t < ptc_layout_count(src) && have[r]; t++) {
            ptc_shard sh;
            PTC_TRY(ptc_layout_shard(src, t, r, &sh));
            ptc_shard_info si;
            if (sh.present && ptc_store_reader_shard(rd, t, (uint32_t)r, &si) != PTC_OK) {
                ptc_error_clear();
                have[r] = 0;
            }
        }
    }
    return PTC_OK;
}

/* Bytes of rank @p r's local tensors of @p l. */
static uint64_t rank_bytes(const ptc_layout *l, int r)
{
    uint64_t b = 0;
    for (size_t t = 0; t < ptc_layout_count(l); t++) {
        size_t n = 0;
        if (ptc_ckpt_local_bytes(l, t, r, &n) == PTC_OK)
            b += n;
    }
    return b;
}

/* The process that provides each source rank: one holding it, preferring
 * the process that runs the same target rank (its bytes stay put), then a
 * process on that target rank's host, then the least loaded; PTC_E_NOTFOUND
 * naming the ranks no process holds. */
static int choose_sources(const ptc_layout *src, const uint8_t *have, int np, const int *host_of,
                          const int *dst_owner, int dst_world, int *src_owner)
{
    int world = ptc_layout_world(src);
    uint64_t *load = calloc((size_t)np, sizeof *load);
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
            load[best] += rank_bytes(src, r);
        } else if (rank_bytes(src, r) > 0) {
            size_t at = strlen(missing);
            if (at + 16 < sizeof missing)
                snprintf(missing + at, sizeof missing - at, "%s%d", nmiss ? ", " : "", r);
            nmiss++;
        } else {
            src_owner[r] = 0; /* holds nothing */
        }
    }
    free(load);
    if (nmiss)
        return ptc_error_set(PTC_E_NOTFOUND,
                             "the shards of %zu saved rank%s (%s) are on no host present: "
                             "lost with every copy (save with more --replicas)",
                             nmiss, nmiss == 1 ? "" : "s", missing);
    return PTC_OK;
}

/* Version @p lv's layout, checked to have @p dst's tensors in its order. */
static int source_layout(ptc_store *s, uint64_t lv, const ptc_layout *dst, ptc_layout **src)
{
    ptc_store_reader *rd = NULL;
    *src = NULL;
    PTC_TRY(ptc_store_reader_open(&rd, s, lv));
    int rc = ptc_layout_of_version(src, rd, NULL);
    size_t nt = rc == PTC_OK ? ptc_layout_count(*src) : 0;
    if (rc == PTC_OK && nt != ptc_layout_count(dst))
        rc = ptc_error_set(PTC_E_INVAL, "the version holds %zu tensors, the job %zu", nt,
                           ptc_layout_count(dst));
    for (size_t t = 0; rc == PTC_OK && t < nt; t++) {
        const ptc_tensor_info *a = ptc_layout_tensor(*src, t), *b = ptc_layout_tensor(dst, t);
        if (strcmp(a->name, b->name) || a->dtype != b->dtype)
            rc = ptc_error_set(PTC_E_INVAL, "tensor %zu is '%.200s' in the version, '%.200s' "
                               "in the job", t, a->name, b->name);
    }
    ptc_store_reader_close(rd);
    if (rc < 0) {
        ptc_layout_destroy(*src);
        *src = NULL;
    }
    return rc;
}

/* The lowest process whose host holds a part of the version (@p has on
 * this one), or -1. Collective. */
static int lowest_holder(MPI_Comm comm, bool has, int *root)
{
    int me, mine, low;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &me));
    mine = has ? me : INT_MAX;
    PTC_MPI_TRY(MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, comm));
    *root = low == INT_MAX ? -1 : low;
    return PTC_OK;
}

/* A host without its part of the version (a fresh store joining the job, or
 * one that missed the version) builds the source layout from the version's
 * configuration and rules, sent by the lowest process whose host holds a
 * part: the tensors are the job's own (source_layout checked them on the
 * holders). Collective; @p src is set where it was NULL. */
static int share_layout(MPI_Comm comm, ptc_store *s, uint64_t lv, const ptc_layout *dst,
                        ptc_layout **src)
{
    int root = -1, me;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &me));
    PTC_TRY(lowest_holder(comm, lv != 0, &root));
    if (root < 0)
        return ptc_error_set(PTC_E_NOTFOUND, "no host present holds a part of the version");
    char *txt = NULL;
    uint64_t len[2] = {0, 0};
    ptc_store_reader *rd = NULL;
    int rc = PTC_OK;
    if (me == root && (rc = ptc_store_reader_open(&rd, s, lv)) == PTC_OK) {
        const ptc_version_info *vi = ptc_store_reader_version(rd);
        const char *c = vi->config ? vi->config : "", *r = vi->rules ? vi->rules : "";
        len[0] = strlen(c) + 1;
        len[1] = strlen(r) + 1;
        if ((txt = malloc(len[0] + len[1]))) {
            memcpy(txt, c, len[0]);
            memcpy(txt + len[0], r, len[1]);
        }
    }
    ptc_store_reader_close(rd);
    if (me == root && rc == PTC_OK && !txt)
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the version's layout");
    if ((rc = train_agree(comm, rc)) < 0)
        return rc;
    PTC_MPI_TRY(MPI_Bcast(len, 2, MPI_UINT64_T, root, comm));
    if (me != root && !(txt = malloc(len[0] + len[1])))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the version's layout");
    if ((rc = train_agree(comm, rc)) == PTC_OK &&
        MPI_Bcast(txt, (int)(len[0] + len[1]), MPI_CHAR, root, comm) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Bcast of the version's layout failed");
    ptc_config cfg;
    ptc_rules *rules = NULL;
    size_t nt = ptc_layout_count(dst);
    ptc_tensor_info *ti = *src || rc < 0 ? NULL : calloc(nt + 1, sizeof *ti);
    if (!*src && rc == PTC_OK && !ti)
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the version's layout");
    if (!*src && rc == PTC_OK && (rc = ptc_config_parse(&cfg, txt)) == PTC_OK)
        rc = ptc_rules_parse(&rules, txt + len[0], len[1] - 1, "stored rules");
    for (size_t t = 0; ti && rc == PTC_OK && t < nt; t++)
        ti[t] = *ptc_layout_tensor(dst, t);
    if (!*src && rc == PTC_OK)
        rc = ptc_layout_create(src, ti, nt, rules, &cfg);
    ptc_rules_destroy(rules);
    free(ti);
    free(txt);
    return train_agree(comm, rc);
}

int train_hosts_covered(MPI_Comm comm, ptc_store *s, uint64_t version, int *missing)
{
    *missing = 0;
    uint64_t lv = 0;
    int rc = ptc_ckpt_hosts_local_version(s, version, &lv);
    if (rc == PTC_E_NOTFOUND) { /* no part of it here */
        ptc_error_clear();
        rc = PTC_OK;
    }
    ptc_store_reader *rd = NULL;
    ptc_layout *src = NULL;
    if (rc == PTC_OK && lv && (rc = ptc_store_reader_open(&rd, s, lv)) == PTC_OK)
        rc = ptc_layout_of_version(&src, rd, NULL);
    int world = src ? ptc_layout_world(src) : 0, wmax = 0;
    uint8_t *mine = NULL, *all = NULL;
    if ((rc = train_agree(comm, rc)) == PTC_OK &&
        MPI_Allreduce(&world, &wmax, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Allreduce of the version's world failed");
    if (rc == PTC_OK) {
        mine = calloc((size_t)wmax + 1, 1);
        all = calloc((size_t)wmax + 1, 1);
        if (!mine || !all)
            rc = ptc_error_set(PTC_E_NOMEM, "no memory for the hosts' inventories");
    }
    if (rc == PTC_OK && src && world == wmax)
        rc = inventory(rd, src, mine);
    for (int r = 0; rc == PTC_OK && src && world == wmax && r < world; r++)
        mine[r] |= rank_bytes(src, r) == 0; /* nothing to hold */
    if ((rc = train_agree(comm, rc)) == PTC_OK &&
        MPI_Allreduce(mine, all, wmax, MPI_UNSIGNED_CHAR, MPI_MAX, comm) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Allreduce of the hosts' inventories failed");
    for (int r = 0; rc == PTC_OK && r < wmax; r++)
        *missing += !all[r];
    if (rc == PTC_OK && wmax == 0)
        *missing = 1; /* no host present holds any part of it */
    free(mine);
    free(all);
    ptc_layout_destroy(src);
    ptc_store_reader_close(rd);
    return rc;
}

typedef struct hload {
    ptc_layout *src;
    int np, me, world, dst_world;
    int *host_of, *src_owner, *dst_owner, *src_host, *dst_host;
    uint8_t *have;
    int *mine; /* the source ranks this process provides */
    size_t nmine;
    void **sbufs; /* nmine x ntensors */
    const void *const **src_ptrs;
    void *const **dst_ptrs;
} hload;

static void hload_free(hload *h)
{
    size_t nt = h->src ? ptc_layout_count(h->src) : 0;
    for (size_t i = 0; h->sbufs && i < h->nmine * nt; i++)
        free(h->sbufs[i]);
    free(h->sbufs);
    free(h->host_of);
    free(h->src_owner);
    free(h->dst_owner);
    free(h->src_host);
    free(h->dst_host);
    free(h->have);
    free(h->mine);
    free(h->src_ptrs);
    free(h->dst_ptrs);
    ptc_layout_destroy(h->src);
}

/* Who holds and who runs what, the same on every process. */
static int hload_maps(hload *h, MPI_Comm comm, int host, ptc_store *s, uint64_t lv,
                      const ptc_layout *dst, const int *ranks, size_t nranks)
{
    int np = h->np, world = h->world;
    if (!(h->host_of = calloc((size_t)np, sizeof *h->host_of)) ||
        !(h->have = calloc((size_t)np * (size_t)world + 1, 1)) ||
        !(h->src_owner = calloc((size_t)world, sizeof(int))) ||
        !(h->src_host = calloc((size_t)world, sizeof(int))) ||
        !(h->dst_owner = malloc(sizeof(int) * (size_t)h->dst_world)) ||
        !(h->dst_host = calloc((size_t)h->dst_world, sizeof(int))))
        return ptc_error_set(PTC_E_NOMEM, "no memory to plan the load");
    uint8_t *mine = calloc((size_t)world + 1, 1);
    ptc_store_reader *rd = NULL;
    int rc = !mine ? PTC_E_NOMEM : lv ? ptc_store_reader_open(&rd, s, lv) : PTC_OK;
    if (rc == PTC_OK && lv) /* a host without its part holds nothing */
        rc = inventory(rd, h->src, mine);
    ptc_store_reader_close(rd);
    rc = train_agree(comm, rc);
    if (rc == PTC_OK)
        rc = MPI_Allgather(mine, world, MPI_BYTE, h->have, world, MPI_BYTE, comm) == MPI_SUCCESS &&
                     MPI_Allgather(&host, 1, MPI_INT, h->host_of, 1, MPI_INT, comm) ==
                         MPI_SUCCESS
                 ? PTC_OK
                 : ptc_error_set(PTC_E_MPI, "MPI_Allgather of the hosts' inventories failed");
    free(mine);
    if (rc < 0)
        return rc;
    int *runs = malloc(sizeof(int) * (size_t)h->dst_world);
    if (!runs)
        return ptc_error_set(PTC_E_NOMEM, "no memory to plan the load");
    for (int r = 0; r < h->dst_world; r++)
        runs[r] = -1;
    for (size_t i = 0; i < nranks; i++)
        runs[ranks[i]] = h->me;
    rc = MPI_Allreduce(runs, h->dst_owner, h->dst_world, MPI_INT, MPI_MAX, comm);
    free(runs);
    if (rc != MPI_SUCCESS)
        return ptc_mpi_error(rc, "MPI_Allreduce of the target ranks");
    for (int r = 0; r < h->dst_world; r++) {
        if (h->dst_owner[r] < 0)
            return ptc_error_set(PTC_E_INVAL, "no process runs target rank %d", r);
        h->dst_host[r] = h->host_of[h->dst_owner[r]];
    }
    (void)dst;
    PTC_TRY(choose_sources(h->src, h->have, np, h->host_of, h->dst_owner, h->dst_world,
                           h->src_owner));
    for (int r = 0; r < world; r++)
        h->src_host[r] = h->host_of[h->src_owner[r]];
    return PTC_OK;
}

/* Read the source ranks this process provides from its host's part. */
static int hload_read(hload *h, ptc_store *s, uint64_t lv)
{
    size_t nt = ptc_layout_count(h->src);
    if (!(h->mine = calloc((size_t)h->world, sizeof(int))) ||
        !(h->src_ptrs = calloc((size_t)h->world, sizeof *h->src_ptrs)))
        return ptc_error_set(PTC_E_NOMEM, "no memory for the source ranks");
    for (int r = 0; r < h->world; r++)
        if (h->src_owner[r] == h->me && rank_bytes(h->src, r) > 0)
            h->mine[h->nmine++] = r;
    if (!(h->sbufs = calloc(h->nmine * nt + 1, sizeof *h->sbufs)))
        return ptc_error_set(PTC_E_NOMEM, "no memory for the source ranks");
    for (size_t i = 0; i < h->nmine; i++) {
        for (size_t t = 0; t < nt; t++) {
            size_t b;
            PTC_TRY(ptc_ckpt_local_bytes(h->src, t, h->mine[i], &b));
            if (b && !(h->sbufs[i * nt + t] = malloc(b)))
                return ptc_error_set(PTC_E_NOMEM, "no memory for rank %d's shards (%zu bytes)",
                                     h->mine[i], b);
        }
        h->src_ptrs[h->mine[i]] = (const void *const *)&h->sbufs[i * nt];
    }
    ptc_ckpt_options co;
    ptc_ckpt_options_init(&co);
    if (h->nmine == 0)
        return PTC_OK; /* e.g. a host without its part */
    return ptc_ckpt_load_local(s, lv, h->src, h->mine, h->nmine, h->sbufs, &co, NULL, NULL);
}

int train_hosts_load(MPI_Comm comm, ptc_store *s, uint64_t version, const ptc_layout *dst,
                     const int *ranks, size_t nranks, void *const *bufs, ptc_plan_stats *stats)
{
    hload h;
    memset(&h, 0, sizeof h);
    int host, nhosts;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &h.me));
    PTC_MPI_TRY(MPI_Comm_size(comm, &h.np));
    int rc = train_hosts_index(comm, &host, &nhosts);
    uint64_t lv = 0;
    if (rc == PTC_OK && (rc = ptc_ckpt_hosts_local_version(s, version, &lv)) == PTC_E_NOTFOUND) {
        ptc_error_clear(); /* a host without its part: it receives all it runs */
        rc = PTC_OK;
    }
    if (rc == PTC_OK && lv)
        rc = source_layout(s, lv, dst, &h.src);
    if ((rc = train_agree(comm, rc)) < 0 || (rc = share_layout(comm, s, lv, dst, &h.src)) < 0)
        goto out_free;
    h.world = ptc_layout_world(h.src);
    h.dst_world = ptc_layout_world(dst);
    rc = hload_maps(&h, comm, host, s, lv, dst, ranks, nranks);
    if (rc == PTC_OK)
        rc = hload_read(&h, s, lv);
    if ((rc = train_agree(comm, rc)) < 0)
        goto out_free;
    ptc_plan_options po = {.src_host = h.src_host, .dst_host = h.dst_host};
    ptc_plan *plan = NULL;
    rc = ptc_plan_create(&plan, h.src, dst, &po);
    size_t nt = ptc_layout_count(dst);
    if (rc == PTC_OK && !(h.dst_ptrs = calloc((size_t)h.dst_world, sizeof *h.dst_ptrs)))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the target ranks");
    for (size_t i = 0; rc == PTC_OK && i < nranks; i++)
        h.dst_ptrs[ranks[i]] = (void *const *)&bufs[i * nt];
    if ((rc = train_agree(comm, rc)) == PTC_OK) {
        rc = ptc_reshard_host_owned_range(plan, comm, 0, nt, h.src_owner, h.src_ptrs,
                                          h.dst_owner, h.dst_ptrs);
        rc = train_agree(comm, rc);
    }
    if (rc == PTC_OK && stats)
        ptc_plan_stats_get(plan, stats);
    ptc_plan_destroy(plan);
out_free:
    hload_free(&h);
    return rc;
}
