/* What the hosts present hold of a store spread over hosts: whether they
 * hold every saved rank of a version (ptc_reshard_hosts_covered), the
 * newest version they hold whole (ptc_reshard_hosts_whole) and the version
 * a reader takes (ptc_reshard_hosts_pick; ptc_reshard_hosts_pick_open hands
 * the reader a version with an explicit layout it opened to choose, so
 * that the hosts' records are gathered once); the inventories under them,
 * which reshard_hosts.c's load uses as well. */
#include <stdlib.h>
#include <string.h>

#include "ptc/ckpt.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

uint64_t ptc_reshard_rank_bytes(const ptc_layout *l, int r)
{
    uint64_t b = 0;
    for (size_t t = 0; t < ptc_layout_count(l); t++) {
        size_t n = 0;
        if (ptc_ckpt_local_bytes(l, t, r, &n) == PTC_OK)
            b += n;
    }
    return b;
}

int ptc_reshard_hosts_inventory(const ptc_store_reader *rd, const ptc_layout *src, uint8_t *have)
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

/* This host's part of @p version: which saved ranks it holds (a rank with
 * no bytes counts as held), into a fresh @p mine of *@p world bytes; world
 * 0 when it holds no part; *@p expl: the version has an explicit layout,
 * of which a part knows its own ranks' and replicas' records only. */
static int held_here(ptc_store *s, uint64_t version, int *world, uint8_t **mine, int *expl)
{
    uint64_t lv = 0;
    *world = 0;
    *mine = NULL;
    *expl = 0;
    int rc = ptc_ckpt_hosts_local_version(s, version, &lv);
    if (rc == PTC_E_NOTFOUND) { /* no part of it here */
        ptc_error_clear();
        return PTC_OK;
    }
    ptc_store_reader *rd = NULL;
    ptc_layout *src = NULL;
    if (rc == PTC_OK && (rc = ptc_store_reader_open(&rd, s, lv)) == PTC_OK)
        rc = ptc_layout_of_version(&src, rd, NULL);
    if (rc == PTC_OK) {
        *world = ptc_layout_world(src);
        *expl = ptc_layout_is_explicit(src);
        if (!(*mine = ptc_calloc((size_t)*world + 1, 1)))
            rc = ptc_error_set(PTC_E_NOMEM, "no memory for the host's inventory");
    }
    if (rc == PTC_OK)
        rc = ptc_reshard_hosts_inventory(rd, src, *mine);
    for (int r = 0; rc == PTC_OK && r < *world; r++)
        (*mine)[r] |= ptc_reshard_rank_bytes(src, r) == 0; /* nothing to hold */
    ptc_layout_destroy(src);
    ptc_store_reader_close(rd);
    return rc;
}

/* ptc_reshard_hosts_covered; a version with an explicit layout that the
 * hosts hold whole stays open in *@p hv when @p hv is given (with
 * @p record: ptc_reshard_hosts_explicit_lost), hv->layout NULL otherwise. */
static int covered(const ptc_transport *t, ptc_store *s, uint64_t version, bool record,
                   int *missing, ptc_reshard_hosts_version *hv)
{
    static const char what[] = "hosts' inventories";
    *missing = 0;
    int mw[2] = {0, 0}, wmax = 0, expl = 0, world; /* mw: world, explicit */
    uint8_t *mine = NULL, *all = NULL;
    int *worlds = ptc_malloc(sizeof mw * (size_t)t->size);
    int rc = worlds ? held_here(s, version, &mw[0], &mine, &mw[1])
                    : ptc_error_set(PTC_E_NOMEM, "no memory for the hosts' inventories");
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = ptc_reshard_gather_all(t, mw, sizeof mw, worlds);
    for (int p = 0; rc == PTC_OK && p < t->size; p++) {
        wmax = worlds[2 * p] > wmax ? worlds[2 * p] : wmax;
        expl |= worlds[2 * p + 1];
    }
    world = mw[0];
    if (rc == PTC_OK && expl) { /* the records of every part decide */
        ptc_free(mine);
        ptc_free(worlds);
        return ptc_reshard_hosts_explicit_lost(t, s, version, record, missing, hv);
    }
    if (rc == PTC_OK && world != wmax) { /* parts of other layouts: not counted */
        ptc_free(mine);
        mine = NULL;
    }
    uint8_t *row = rc == PTC_OK ? ptc_calloc((size_t)wmax + 1, 1) : NULL;
    all = rc == PTC_OK ? ptc_calloc((size_t)wmax * (size_t)t->size + 1, 1) : NULL;
    if (rc == PTC_OK && (!row || !all))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the hosts' inventories");
    if (rc == PTC_OK && mine)
        memcpy(row, mine, (size_t)wmax);
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = ptc_reshard_gather_all(t, row, (size_t)wmax, all);
    for (int r = 0; rc == PTC_OK && r < wmax; r++) {
        uint8_t any = 0;
        for (int p = 0; p < t->size; p++)
            any |= all[(size_t)p * (size_t)wmax + (size_t)r];
        *missing += !any;
    }
    if (rc == PTC_OK && wmax == 0)
        *missing = 1; /* no host present holds any part of it */
    ptc_free(row);
    ptc_free(all);
    ptc_free(mine);
    ptc_free(worlds);
    return rc;
}

int ptc_reshard_hosts_covered(const ptc_transport *t, ptc_store *s, uint64_t version,
                              int *missing)
{
    return covered(t, s, version, false, missing, NULL);
}

/* ptc_reshard_hosts_whole; the version taken open in *@p hv where covered
 * left it open (an explicit layout), hv->layout NULL otherwise. */
static int whole(const ptc_transport *t, ptc_store *s, uint64_t newest, bool record,
                 uint64_t *version, int *missing, ptc_reshard_hosts_version *hv)
{
    *version = newest;
    *missing = 0;
    uint64_t *each = ptc_malloc(sizeof(uint64_t) * (size_t)t->size);
    int rc = each ? PTC_OK : ptc_error_set(PTC_E_NOMEM, "no memory for the hosts' versions");
    rc = ptc_transport_agree(t, rc, "hosts' versions");
    for (uint64_t cand = newest; rc == PTC_OK && cand;) {
        int m = 0;
        if ((rc = covered(t, s, cand, record, &m, hv)) < 0)
            break;
        if (cand == newest)
            *missing = m;
        if (!m) {
            *version = cand;
            break;
        }
        uint64_t mine = 0, older = 0;
        rc = ptc_transport_agree(t, ptc_ckpt_hosts_held(s, cand, &mine), "hosts' versions");
        if (rc == PTC_OK)
            rc = ptc_reshard_gather_all(t, &mine, sizeof mine, each);
        for (int p = 0; rc == PTC_OK && p < t->size; p++)
            older = each[p] > older ? each[p] : older;
        cand = older;
    }
    ptc_free(each);
    return rc;
}

int ptc_reshard_hosts_whole(const ptc_transport *t, ptc_store *s, uint64_t newest,
                            uint64_t *version, int *missing)
{
    return whole(t, s, newest, false, version, missing, NULL);
}

int ptc_reshard_hosts_pick_open(const ptc_transport *t, int host, ptc_store *s, uint64_t version,
                                bool record, uint64_t *picked, ptc_reshard_hosts_version *hv)
{
    uint64_t newest = 0;
    *picked = 0;
    if (hv)
        memset(hv, 0, sizeof *hv);
    PTC_TRY(ptc_ckpt_hosts_recover_over(t, host, s, &newest));
    int rc = PTC_OK;
    if (!newest || version > newest)
        rc = ptc_error_set(PTC_E_NOTFOUND, "the stores %s hold no committed version %llu "
                           "across hosts (newest: %llu)", ptc_store_dir(s),
                           (unsigned long long)version, (unsigned long long)newest);
    PTC_TRY(ptc_transport_agree(t, rc, "hosts' versions"));
    if (version) {
        *picked = version;
        return PTC_OK;
    }
    int missing = 0;
    PTC_TRY(whole(t, s, newest, record, picked, &missing, hv));
    if (*picked != newest && t->rank == 0)
        ptc_log(PTC_LOG_WARN, "version %llu has no copy of %d saved rank%s on the hosts "
                "present; taking version %llu, the newest one they hold whole",
                (unsigned long long)newest, missing, missing == 1 ? "" : "s",
                (unsigned long long)*picked);
    return PTC_OK;
}

int ptc_reshard_hosts_pick(const ptc_transport *t, int host, ptc_store *s, uint64_t version,
                           uint64_t *picked)
{
    return ptc_reshard_hosts_pick_open(t, host, s, version, false, picked, NULL);
}
