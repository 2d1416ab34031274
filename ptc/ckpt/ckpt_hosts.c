/* Versions spread over hosts: the cross-host commit protocol (docs/format.md
 * §10, docs/checkpoint.md "Across hosts"). Each host keeps its own store (the
 * same path on every host, never shared); a host's part of a version is an
 * ordinary version of its store holding its ranks' shards, and its journal
 * (ckpt_journal.c) records the two phases: prepared (the part is durable)
 * and committed (every host prepared). The decision is the agreement that
 * every host prepared; a version is committed once any host's journal
 * records it so, and a call returns success only after every host's does.
 * Every step runs over a transport (include/ptc/transport.h), as
 * ckpt_collective.c's; crash points (ptc_fault_crash_at) let tests stop a
 * process where a kill -9 would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ptc/ckpt/ckpt_hosts.h"
#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

/* What every process tells the others at the start of a call: its host,
 * its host's journal (both records' versions and local versions; the
 * prepared record's host, hosts and replicas, then the committed one's;
 * the prepared and committed attempt ids) and its ranks. */
#define INFO_HEAD 80

typedef struct hview {
    size_t nprocs;
    int nhosts;
    int host;               /* this process's */
    bool lead;              /* the lowest process of its host */
    int lock_fd;            /* the leader's: its journal's lock (ptc_hosts_lock), else -1 */
    int *host_of;           /* per process */
    ptc_ckpt_host_state *st; /* per host: its leader's journal */
    ptc_hosts_rec *crec;     /* per host: its committed record's host, hosts, replicas, attempt */
    uint64_t *patt;          /* per host: its prepared record's attempt */
    uint8_t *local;         /* world bytes: the ranks whose shards this host stores */
    int *ranks;             /* every process's ranks, process p's at [roff[p], roff[p + 1]) */
    size_t *roff;
} hview;

static void hview_free(hview *v)
{
    ptc_hosts_unlock(v->lock_fd);
    ptc_free(v->host_of);
    ptc_free(v->st);
    ptc_free(v->crec);
    ptc_free(v->patt);
    ptc_free(v->local);
    ptc_free(v->ranks);
    ptc_free(v->roff);
    memset(v, 0, sizeof *v);
    v->lock_fd = -1;
}

/* A crash point, a step of the protocol at version @p ver: in a test that
 * armed it, the process stops here — no clean-up and no further collective
 * on the way out (crashed); the test build's PTC_FAULT_KILL may kill the
 * process here (ptc_fault_step). */
static _Thread_local bool crashed;
#define CRASH_POINT(name, ver)                                             \
    do {                                                                   \
        ptc_fault_step(name, ver);                                         \
        if (ptc_fault_crash_hit(name)) {                                   \
            crashed = true;                                                \
            return ptc_error_set(PTC_E_IO, "crash point %s", name);        \
        }                                                                  \
    } while (0)

void ptc_ckpt_hosts_options_init(ptc_ckpt_hosts_options *o)
{
    memset(o, 0, sizeof *o);
}

int ptc_ckpt_hosts_replica_hosts(int host, int nhosts, int replicas, int *out)
{
    if (nhosts < 1 || host < 0 || host >= nhosts)
        return ptc_error_set(PTC_E_INVAL, "host %d outside the %d hosts", host, nhosts);
    if (replicas < 0 || replicas >= nhosts)
        return ptc_error_set(PTC_E_INVAL,
                             "--replicas %d needs more than %d hosts (there are %d): a host "
                             "never holds a copy of its own shards",
                             replicas, replicas, nhosts);
    for (int k = 0; k < replicas; k++)
        out[k] = (host + 1 + k) % nhosts;
    return PTC_OK;
}

int ptc_ckpt_host_state_read(ptc_store *s, ptc_ckpt_host_state *st)
{
    memset(st, 0, sizeof *st);
    ptc_hosts_rec p, c;
    int rc = ptc_hosts_rec_read(s, PTC_HOSTS_COMMITTED, &c);
    if (rc < 0 && rc != PTC_E_NOTFOUND)
        return rc;
    rc = ptc_hosts_rec_read(s, PTC_HOSTS_PREPARED, &p);
    if (rc < 0 && rc != PTC_E_NOTFOUND)
        return rc;
    if (rc == PTC_E_NOTFOUND)
        p = c;
    if (p.version < c.version || (p.version == c.version && p.local != c.local))
        return ptc_error_set(PTC_E_FORMAT,
                             "%s/" PTC_HOSTS_DIR ": prepared version %llu (local %llu) against "
                             "committed %llu (local %llu)",
                             ptc_store_dir(s), (unsigned long long)p.version,
                             (unsigned long long)p.local, (unsigned long long)c.version,
                             (unsigned long long)c.local);
    *st = (ptc_ckpt_host_state){.committed = c.version,
                                .committed_local = c.local,
                                .prepared = p.version,
                                .prepared_local = p.local,
                                .host = p.host,
                                .hosts = p.hosts,
                                .replicas = p.replicas};
    return PTC_OK;
}

/* This process's info: host, journal, ranks. */
static int info_encode(int host, const ptc_ckpt_host_state *st, const ptc_hosts_rec *c,
                       uint64_t patt, const int *ranks, size_t nranks, uint8_t **out,
                       size_t *len)
{
    size_t n = INFO_HEAD + 4 * nranks;
    uint8_t *b = ptc_malloc(n);
    if (!b)
        return PTC_E_NOMEM;
    ptc_put_le32(b, (uint32_t)host);
    ptc_put_le32(b + 4, (uint32_t)nranks);
    ptc_put_le64(b + 8, st->committed);
    ptc_put_le64(b + 16, st->committed_local);
    ptc_put_le64(b + 24, st->prepared);
    ptc_put_le64(b + 32, st->prepared_local);
    ptc_put_le32(b + 40, st->host);
    ptc_put_le32(b + 44, st->hosts);
    ptc_put_le32(b + 48, st->replicas);
    ptc_put_le32(b + 52, c->host);
    ptc_put_le32(b + 56, c->hosts);
    ptc_put_le32(b + 60, c->replicas);
    ptc_put_le64(b + 64, patt);
    ptc_put_le64(b + 72, c->attempt);
    for (size_t i = 0; i < nranks; i++)
        ptc_put_le32(b + INFO_HEAD + 4 * i, (uint32_t)ranks[i]);
    *out = b;
    *len = n;
    return PTC_OK;
}

/* Mark in v->local the ranks whose shards this host stores: its own and,
 * with @p replicas copies, those of the hosts whose copies it holds. */
static void view_mark(hview *v, int replicas, int world)
{
    memset(v->local, 0, (size_t)world);
    for (size_t p = 0; p < v->nprocs; p++) {
        int back = (v->host - v->host_of[p] + v->nhosts) % v->nhosts; /* its host + back */
        if (back > replicas)
            continue;
        for (size_t i = v->roff[p]; i < v->roff[p + 1]; i++)
            if (v->ranks[i] >= 0 && v->ranks[i] < world)
                v->local[v->ranks[i]] = 1;
    }
}

/* Every process's info into @p v (the same outcome on every process). */
static int view_build(const ptc_transport *t, int host, const uint8_t *all, const size_t *lens,
                      int world, hview *v)
{
    int size = t->size;
    v->nprocs = (size_t)size;
    size_t total = 0;
    for (int p = 0; p < size; p++)
        total += lens[p];
    if (!(v->host_of = ptc_calloc((size_t)size, sizeof *v->host_of)) ||
        !(v->st = ptc_calloc((size_t)size, sizeof *v->st)) ||
        !(v->crec = ptc_calloc((size_t)size, sizeof *v->crec)) ||
        !(v->patt = ptc_calloc((size_t)size, sizeof *v->patt)) ||
        !(v->local = ptc_calloc((size_t)world + 1, 1)) ||
        !(v->ranks = ptc_calloc(total / 4 + 1, sizeof *v->ranks)) ||
        !(v->roff = ptc_calloc((size_t)size + 1, sizeof *v->roff)))
        return PTC_E_NOMEM;
    int *lead = ptc_malloc(sizeof *lead * (size_t)size);
    if (!lead)
        return PTC_E_NOMEM;
    for (int h = 0; h < size; h++)
        lead[h] = -1;
    size_t at = 0;
    int rc = PTC_OK;
    for (int p = 0; p < size && rc == PTC_OK; p++) {
        const uint8_t *m = all + at;
        at += lens[p];
        if (lens[p] < INFO_HEAD) {
            rc = ptc_error_set(PTC_E_INVAL, "process %d sent %zu bytes of journal and ranks, "
                               "fewer than %d", p, lens[p], INFO_HEAD);
            break;
        }
        uint32_t h = ptc_get_le32(m), nr = ptc_get_le32(m + 4);
        if (lens[p] != INFO_HEAD + 4 * (size_t)nr || h >= (uint32_t)size) {
            rc = ptc_error_set(PTC_E_INVAL, "process %d gives host %u: hosts are numbered 0 "
                               "to %d (at most one per process)", p, h, size - 1);
            break;
        }
        v->host_of[p] = (int)h;
        v->nhosts = PTC_MAX(v->nhosts, (int)h + 1);
        if (lead[h] < 0) {
            lead[h] = p;
            v->st[h] = (ptc_ckpt_host_state){.committed = ptc_get_le64(m + 8),
                                             .committed_local = ptc_get_le64(m + 16),
                                             .prepared = ptc_get_le64(m + 24),
                                             .prepared_local = ptc_get_le64(m + 32),
                                             .host = ptc_get_le32(m + 40),
                                             .hosts = ptc_get_le32(m + 44),
                                             .replicas = ptc_get_le32(m + 48)};
            v->crec[h] = (ptc_hosts_rec){.host = ptc_get_le32(m + 52),
                                         .hosts = ptc_get_le32(m + 56),
                                         .replicas = ptc_get_le32(m + 60),
                                         .attempt = ptc_get_le64(m + 72)};
            v->patt[h] = ptc_get_le64(m + 64);
        }
        v->roff[p + 1] = v->roff[p] + nr;
        for (uint32_t i = 0; i < nr; i++)
            v->ranks[v->roff[p] + i] = (int)ptc_get_le32(m + INFO_HEAD + 4 * i);
    }
    for (int h = 0; h < v->nhosts && rc == PTC_OK; h++)
        if (lead[h] < 0)
            rc = ptc_error_set(PTC_E_INVAL, "no process gives host %d of %d (hosts are "
                               "numbered without gaps)", h, v->nhosts);
    if (rc == PTC_OK)
        v->lead = lead[host] == t->rank;
    ptc_free(lead);
    if (rc == PTC_OK)
        view_mark(v, 0, world);
    return rc;
}

/* Leader: take its journal's lock, held until hview_free, and check that
 * the journal @p sent (read before the lock) is unchanged: a concurrent
 * save or recovery on this store gets PTC_E_BUSY. */
static int lock_journal(ptc_store *s, const ptc_ckpt_host_state *sent, hview *v)
{
    PTC_TRY(ptc_hosts_lock(s, &v->lock_fd));
    ptc_ckpt_host_state now;
    PTC_TRY(ptc_ckpt_host_state_read(s, &now));
    if (now.committed != sent->committed || now.committed_local != sent->committed_local ||
        now.prepared != sent->prepared || now.prepared_local != sent->prepared_local)
        return ptc_error_set(PTC_E_BUSY, "%s: the journal changed while it was read (another "
                             "checkpoint save or recovery across hosts)", ptc_store_dir(s));
    return PTC_OK;
}

/* The view of the hosts (collective); @p what names the call in messages,
 * @p rc is this process's outcome so far (agreed first). */
static int view_gather(const ptc_transport *t, int rc, int host, ptc_store *s, const int *ranks,
                       size_t nranks, int world, const char *what, hview *v)
{
    memset(v, 0, sizeof *v);
    v->lock_fd = -1;
    v->host = host;
    ptc_ckpt_host_state st;
    ptc_hosts_rec c = {0}, pr = {0};
    uint8_t *mine = NULL;
    void *all = NULL;
    size_t len = 0, *lens = NULL;
    if (rc == PTC_OK && (!s || host < 0))
        rc = ptc_error_set(PTC_E_INVAL, "%s: a store and a host index >= 0 are required", what);
    if (rc == PTC_OK)
        rc = ptc_ckpt_host_state_read(s, &st);
    if (rc == PTC_OK && (rc = ptc_hosts_rec_read(s, PTC_HOSTS_COMMITTED, &c)) == PTC_E_NOTFOUND)
        rc = PTC_OK; /* none yet: zeros */
    if (rc == PTC_OK && (rc = ptc_hosts_rec_read(s, PTC_HOSTS_PREPARED, &pr)) == PTC_E_NOTFOUND) {
        pr = c;
        rc = PTC_OK;
    }
    if (rc == PTC_OK)
        rc = info_encode(host, &st, &c, pr.attempt, ranks, nranks, &mine, &len);
    if (rc == PTC_OK && !(lens = ptc_calloc((size_t)t->size, sizeof *lens)))
        rc = PTC_E_NOMEM;
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_free;
    if ((rc = ptc_transport_allgatherv(t, mine, len, &all, lens)) < 0) {
        rc = ptc_ckpt_lost(rc, what, "exchange of the hosts' journals");
        goto out_free;
    }
    rc = view_build(t, host, all, lens, world, v);
    if (rc == PTC_OK && v->lead) /* the journal sent is the one read under the lock */
        rc = lock_journal(s, &st, v);
    rc = ptc_transport_agree(t, rc, what);
out_free:
    ptc_free(mine);
    ptc_free(lens);
    ptc_transport_free(all);
    if (rc < 0)
        hview_free(v);
    return rc;
}

/* Whether every process's @p rc is PTC_OK (*ok); the return value is the
 * transport's: a failure here means a process is gone. */
static int vote(const ptc_transport *t, int rc, bool *ok)
{
    *ok = rc == PTC_OK;
    if (t->size <= 1)
        return PTC_OK;
    int32_t mine = rc < 0 ? (int32_t)rc : 0;
    int32_t *all = calloc((size_t)t->size, sizeof *all); /* as ptc_transport_agree */
    if (!all)
        return ptc_error_set(PTC_E_NOMEM, "no memory to vote");
    int trc = t->allgather(t->user, &mine, sizeof mine, all);
    for (int p = 0; trc == PTC_OK && p < t->size; p++)
        if (all[p] < 0)
            *ok = false;
    free(all);
    return trc;
}

/* ---- local versions and the journal ------------------------------------------------ */

/* Remove this host's part @p local (a version of its store); absent: fine. */
static int drop_local(ptc_store *s, uint64_t local)
{
    int rc = ptc_store_version_delete(s, local);
    if (rc == PTC_E_NOTFOUND) {
        ptc_error_clear();
        return PTC_OK;
    }
    return rc;
}

/* Abort this host's in-doubt version: the journal first (the prepared record
 * back to the committed one), then the part; a crash between leaves a
 * local version that no journal names, which recovery removes. */
static int abort_prepared(ptc_store *s, const ptc_ckpt_host_state *st)
{
    ptc_hosts_rec c;
    int rc = ptc_hosts_rec_read(s, PTC_HOSTS_COMMITTED, &c);
    if (rc == PTC_E_NOTFOUND) {
        ptc_error_clear();
        rc = ptc_hosts_rec_remove(s, PTC_HOSTS_PREPARED);
    } else if (rc == PTC_OK) {
        c.kind = PTC_HOSTS_KIND_PREPARED;
        rc = ptc_hosts_rec_write(s, PTC_HOSTS_PREPARED, &c);
    }
    if (rc < 0)
        return rc;
    CRASH_POINT("hosts.abort", st->prepared);
    return drop_local(s, st->prepared_local);
}

static uint64_t meta_version(const char *meta_json);

/* Remove the parts of versions across hosts newer than @p keep in this
 * store (parts that no journal names: a crash after a local commit, before
 * its record). Only a version whose metadata carries ptc.hosts is such a
 * part: an ordinary version (a save without --replicas) is never touched. */
static int drop_orphans(ptc_store *s, uint64_t keep)
{
    ptc_version_info *vs = NULL;
    size_t n = 0;
    PTC_TRY(ptc_store_versions(s, &vs, &n));
    int rc = PTC_OK;
    for (size_t i = 0; i < n && rc == PTC_OK; i++)
        if (vs[i].version > keep && meta_version(vs[i].metadata_json) != 0)
            rc = drop_local(s, vs[i].version);
    ptc_store_versions_free(vs, n);
    return rc;
}

/* This leader's part of the resolution to the newest committed @p d;
 * @p same: its prepared record is of d's committed attempt. */
static int resolve_host(ptc_store *s, const ptc_ckpt_host_state *st, uint64_t d, bool same)
{
    if (st->prepared > d + 1)
        return ptc_error_set(PTC_E_STORE,
                             "%s: journal prepared version %llu, but the newest committed "
                             "version across hosts is %llu",
                             ptc_store_dir(s), (unsigned long long)st->prepared,
                             (unsigned long long)d);
    if (st->committed < d && st->prepared < d)
        return PTC_OK; /* a store that holds no part of d: left as it is */
    if (st->committed < d && st->prepared == d && same) { /* another host committed it */
        ptc_hosts_rec p;
        PTC_TRY(ptc_hosts_rec_read(s, PTC_HOSTS_PREPARED, &p));
        p.kind = PTC_HOSTS_KIND_COMMITTED;
        PTC_TRY(ptc_hosts_rec_write(s, PTC_HOSTS_COMMITTED, &p));
        return drop_orphans(s, p.local);
    }
    if (st->prepared > d || st->committed < d) /* prepared d + 1, committed nowhere (a fresh
                             or lagging store's too: committed < d), or another attempt at d
                             than the committed one: abort */
        PTC_TRY(abort_prepared(s, st));
    return drop_orphans(s, st->committed_local);
}

/* How many hosts record attempt @p a at @p d committed. */
static int count_attempt(const hview *v, uint64_t d, uint64_t a)
{
    int n = 0;
    for (int h = 0; h < v->nhosts; h++)
        n += v->st[h].committed == d && v->crec[h].attempt == a;
    return n;
}

/* Whether the hosts' committed records of @p d name one attempt (the same
 * on every process). A host that missed a recovery (down while the others
 * aborted an attempt at d that only it had committed, then committed
 * another) holds a committed record of the other attempt: recovery refuses
 * rather than mixing that host's part into d, naming the host whose
 * attempt fewer hosts record. A prepared record of another attempt is
 * aborted by resolve_host. */
static int check_records(const hview *v, uint64_t d)
{
    int ref = -1;
    for (int h = 0; h < v->nhosts; h++) {
        if (!d || v->st[h].committed != d)
            continue;
        if (ref < 0) {
            ref = h;
            continue;
        }
        uint64_t a = v->crec[h].attempt, b = v->crec[ref].attempt;
        if (a == b)
            continue;
        int stale = count_attempt(v, d, a) <= count_attempt(v, d, b) ? h : ref;
        return ptc_error_set(PTC_E_STORE,
                             "hosts %d and %d record different attempts at version %llu "
                             "committed (%llu, %llu): host %d missed a recovery and holds "
                             "another attempt at it; resume without it or replace its store",
                             ref, h, (unsigned long long)d, (unsigned long long)b,
                             (unsigned long long)a, stale);
    }
    return PTC_OK;
}

/* The newest committed version of the view, every leader's journal brought
 * to it (collective). */
static int resolve(const ptc_transport *t, ptc_store *s, const hview *v, const char *what,
                   uint64_t *newest)
{
    uint64_t d = 0;
    for (int h = 0; h < v->nhosts; h++)
        d = PTC_MAX(d, v->st[h].committed);
    int rc = check_records(v, d);
    uint64_t att = 0;
    for (int h = 0; h < v->nhosts && !att; h++)
        if (d && v->st[h].committed == d)
            att = v->crec[h].attempt;
    if (rc == PTC_OK && v->lead)
        rc = resolve_host(s, &v->st[v->host], d, v->patt[v->host] == att);
    PTC_TRY(ptc_transport_agree(t, rc, what));
    *newest = d;
    return PTC_OK;
}

int ptc_ckpt_hosts_recover_over(const ptc_transport *t, int host, ptc_store *s,
                                uint64_t *newest)
{
    static const char what[] = "checkpoint recovery";
    hview v;
    PTC_TRY(view_gather(t, PTC_OK, host, s, NULL, 0, 0, what, &v));
    int rc = resolve(t, s, &v, what, newest);
    hview_free(&v);
    return rc;
}

/* ---- the save ------------------------------------------------------------------------- */

typedef struct hsave {
    const ptc_transport *t;
    ptc_store *s;
    const ptc_layout *l;
    const int *ranks;
    size_t nranks;
    const void *const *bufs;
    const ptc_ckpt_record *rec;
    const ptc_ckpt_options *opts;
    int replicas;
    hview v;
    uint64_t version; /* across hosts */
    uint64_t attempt; /* this save's attempt id, chosen by process 0 */
    uint64_t local, parent; /* of this host's part */
    bool at_vote;           /* every process wrote: the hosts vote */
    /* what this process writes: its ranks, then the ranks whose copies it
     * received (replicas), with the buffer table (wranks x ntensors) */
    int *wranks;
    size_t nw;
    const void **wbufs;
    uint8_t *copies; /* the received bytes: own_copies, or the stage's */
    uint8_t *own_copies;
    ptc_ckpt_stage *stage; /* may be NULL */
} hsave;

/* The message list of the replica exchange. */
typedef struct msgs {
    size_t n, cap;
    int *peer;
    void **buf;
    size_t *len;
} msgs;

static int msgs_add(msgs *m, int peer, void *buf, size_t len)
{
    if (m->n == m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 16;
        int *p = ptc_realloc(m->peer, nc * sizeof *p);
        if (p)
            m->peer = p;
        void **b = p ? ptc_realloc(m->buf, nc * sizeof *b) : NULL;
        if (b)
            m->buf = b;
        size_t *l = b ? ptc_realloc(m->len, nc * sizeof *l) : NULL;
        if (!l)
            return PTC_E_NOMEM;
        m->len = l;
        m->cap = nc;
    }
    m->peer[m->n] = peer;
    m->buf[m->n] = buf;
    m->len[m->n++] = len;
    return PTC_OK;
}

static void msgs_free(msgs *m)
{
    ptc_free(m->peer);
    ptc_free(m->buf);
    ptc_free(m->len);
}

/* The @p i-th process (in process order) of host @p h, counting modulo
 * the host's processes. */
static int proc_of(const hview *v, int h, size_t i)
{
    size_t n = 0;
    for (size_t p = 0; p < v->nprocs; p++)
        n += v->host_of[p] == h;
    i %= n;
    for (size_t p = 0; p < v->nprocs; p++)
        if (v->host_of[p] == h && i-- == 0)
            return (int)p;
    return -1;
}

/* Process @p p's index among its host's processes. */
static size_t index_in_host(const hview *v, int p)
{
    size_t i = 0;
    for (int q = 0; q < p; q++)
        i += v->host_of[q] == v->host_of[p];
    return i;
}

/* This process's messages of the replica exchange, and what it will write:
 * the i-th process of host h sends its ranks' buffers to the (i mod n)-th
 * of each of hosts h+1..h+K (n: that host's processes), which writes them
 * as its own. Both sides size each buffer from the layout. */
static int plan_copies(hsave *c, msgs *out, msgs *in)
{
    const hview *v = &c->v;
    int me = c->t->rank, H = v->nhosts;
    size_t nt = ptc_layout_count(c->l), mine = index_in_host(v, me), nin = 0, bytes_in = 0;
    for (int k = 1; k <= c->replicas; k++) {
        int q = proc_of(v, (v->host + k) % H, mine);
        for (size_t a = 0; a < c->nranks; a++)
            for (size_t t = 0; t < nt; t++) {
                size_t b;
                PTC_TRY(ptc_ckpt_local_bytes(c->l, t, c->ranks[a], &b));
                if (b && !c->bufs[a * nt + t])
                    return ptc_error_set(PTC_E_INVAL, "checkpoint: no buffer for tensor "
                                         "'%.200s' on rank %d (%zu bytes)",
                                         ptc_layout_tensor(c->l, t)->name, c->ranks[a], b);
                if (b)
                    PTC_TRY(msgs_add(out, q, (void *)c->bufs[a * nt + t], b));
            }
    }
    /* the sources: every process p of hosts h-1..h-K whose receiver here is me */
    for (int pass = 0; pass < 2; pass++) {
        c->nw = c->nranks;
        for (size_t p = 0; p < v->nprocs; p++) {
            int back = (v->host - v->host_of[p] + H) % H;
            if (back < 1 || back > c->replicas || proc_of(v, v->host, index_in_host(v, (int)p)) != me)
                continue;
            for (size_t i = v->roff[p]; i < v->roff[p + 1]; i++) {
                if (pass == 1)
                    c->wranks[c->nw] = v->ranks[i];
                for (size_t t = 0; t < nt; t++) {
                    size_t b;
                    PTC_TRY(ptc_ckpt_local_bytes(c->l, t, v->ranks[i], &b));
                    if (pass == 0) {
                        bytes_in += b;
                    } else if (b) {
                        void *at = c->copies + nin;
                        c->wbufs[c->nw * nt + t] = at;
                        nin += b;
                        PTC_TRY(msgs_add(in, (int)p, at, b));
                    }
                }
                c->nw++;
            }
        }
        if (pass == 1)
            break;
        if (!(c->wranks = ptc_calloc(c->nw + 1, sizeof *c->wranks)) ||
            !(c->wbufs = ptc_calloc(c->nw * nt + 1, sizeof *c->wbufs)))
            return PTC_E_NOMEM;
        /* the stage's area is reused from save to save: no fresh pages to
         * fault in and zero for every save's copies */
        if (c->stage)
            PTC_TRY(ptc_ckpt_stage_copies(c->stage, bytes_in, &c->copies));
        else if (!(c->copies = c->own_copies = ptc_malloc(bytes_in + 1)))
            return PTC_E_NOMEM;
        for (size_t a = 0; a < c->nranks; a++) {
            c->wranks[a] = c->ranks[a];
            for (size_t t = 0; t < nt; t++)
                c->wbufs[a * nt + t] = c->bufs[a * nt + t];
        }
    }
    return PTC_OK;
}

/* The replica exchange (collective): afterwards this process holds the
 * copies it writes. */
static int copy_replicas(hsave *c)
{
    static const char what[] = "checkpoint save";
    msgs out = {0}, in = {0};
    int rc = plan_copies(c, &out, &in);
    if ((rc = ptc_transport_agree(c->t, rc, what)) == PTC_OK) {
        rc = ptc_transport_exchange(c->t, out.n, out.peer, (const void *const *)out.buf, out.len,
                                    in.n, in.peer, in.buf, in.len);
        rc = ptc_transport_agree(c->t, rc, what);
    }
    msgs_free(&out);
    msgs_free(&in);
    return rc;
}

/* Leader: its host's descriptors (of the gathered ones) committed as a
 * version of its store, then recorded as prepared. */
static int prepare(hsave *c, ptc_ckpt_txn *txn, const uint8_t *all, const size_t *lens)
{
    int size = c->t->size, n = 0;
    const void **descs = ptc_calloc((size_t)size, sizeof *descs);
    size_t *dl = ptc_calloc((size_t)size, sizeof *dl), at = 0;
    if (!descs || !dl) {
        ptc_free(descs);
        ptc_free(dl);
        ptc_ckpt_abort(txn);
        return PTC_E_NOMEM;
    }
    for (int p = 0; p < size; p++) {
        if (c->v.host_of[p] == c->v.host) {
            descs[n] = all + at;
            dl[n++] = lens[p];
        }
        at += lens[p];
    }
    ptc_hosts_rec r = {.kind = PTC_HOSTS_KIND_PREPARED,
                       .host = (uint32_t)c->v.host,
                       .hosts = (uint32_t)c->v.nhosts,
                       .replicas = (uint32_t)c->replicas,
                       .version = c->version,
                       .attempt = c->attempt};
    char meta[160];
    int rc = ptc_hosts_meta_format(&r, meta, sizeof meta);
    if (rc < 0) {
        ptc_ckpt_abort(txn);
    } else {
        rc = ptc_ckpt_commit_part(txn, descs, dl, (size_t)n, c->rec, c->v.local,
                                  PTC_HOSTS_META_KEY, meta, &r.local);
    }
    ptc_free(descs);
    ptc_free(dl);
    PTC_TRY(rc);
    CRASH_POINT("hosts.local", c->version);
    if (ptc_fault_crash_hit("fail:hosts.prepared")) /* a test's failure, not a crash */
        rc = ptc_error_set(PTC_E_IO, "injected failure at hosts.prepared");
    if (rc < 0 || (rc = ptc_hosts_rec_write(c->s, PTC_HOSTS_PREPARED, &r)) < 0) {
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", ptc_last_error());
        drop_local(c->s, r.local); /* never prepared: nobody can commit it */
        return ptc_error_set(rc, "%s", keep);
    }
    c->local = r.local;
    CRASH_POINT("hosts.prepared", c->version);
    return PTC_OK;
}

/* Write every process's part and prepare every host's (through the vote);
 * *prepared: whether this leader's part was recorded prepared. */
static int write_and_prepare(hsave *c, ptc_ckpt_txn *txn, int rc, bool *prepared)
{
    static const char what[] = "checkpoint save";
    const ptc_transport *t = c->t;
    void *desc = NULL, *all = NULL;
    size_t dlen = 0, *lens = NULL;
    *prepared = false;
    if (rc == PTC_OK)
        rc = ptc_ckpt_write_part(c->s, c->local, c->parent, c->l, c->wranks, c->nw, c->wbufs,
                                 c->opts, NULL, c->v.local, &desc, &dlen);
    if (rc == PTC_OK)
        ptc_fault_step("hosts.written", c->version);
    if (rc == PTC_OK && ptc_fault_crash_hit("hosts.written")) {
        crashed = true;
        rc = ptc_error_set(PTC_E_IO, "crash point hosts.written");
        goto out_abort; /* the leader's lock goes with the process */
    }
    if (rc == PTC_OK && !(lens = ptc_calloc((size_t)t->size, sizeof *lens)))
        rc = PTC_E_NOMEM;
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_abort;
    if ((rc = ptc_transport_allgatherv(t, desc, dlen, &all, lens)) < 0) {
        rc = ptc_ckpt_lost(rc, what, "exchange of the shard descriptors");
        goto out_abort;
    }
    c->at_vote = true;
    if (c->v.lead) {
        rc = prepare(c, txn, all, lens);
        txn = NULL; /* consumed */
        if (crashed)
            goto out_free;
        *prepared = rc == PTC_OK;
    }
out_abort:
    ptc_ckpt_abort(txn);
out_free:
    ptc_store_free(desc);
    ptc_transport_free(all);
    ptc_free(lens);
    return rc;
}

/* A new attempt id in 1..INT64_MAX: two attempts at one version (a save,
 * its abort by recovery, a retry) never share one. */
static uint64_t new_attempt(void)
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) { /* no entropy source: time, pid */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    }
    x &= INT64_MAX;
    return x ? x : 1;
}

/* Begin on every leader, exchange each host's local version and parent,
 * and process 0's attempt id. */
static int begin(hsave *c, const ptc_rules *rules, ptc_ckpt_txn **txn)
{
    static const char what[] = "checkpoint save";
    const ptc_transport *t = c->t;
    int rc = PTC_OK;
    *txn = NULL;
    if (c->v.lead && c->rec) {
        char *json = NULL;
        rc = ptc_ckpt_record_to_json(c->rec, &json);
        ptc_store_free(json);
    }
    if (c->v.lead && rc == PTC_OK)
        rc = ptc_ckpt_begin(txn, c->s, c->l, rules, c->opts);
    uint8_t mine[24] = {0}, *all = ptc_malloc(24 * (size_t)t->size);
    if (!all && rc == PTC_OK)
        rc = PTC_E_NOMEM;
    if ((rc = ptc_transport_agree(t, rc, what)) < 0) {
        ptc_ckpt_abort(*txn);
        *txn = NULL;
        ptc_free(all);
        return rc;
    }
    if (*txn) {
        ptc_put_le64(mine, ptc_ckpt_txn_version(*txn));
        ptc_put_le64(mine + 8, ptc_ckpt_txn_parent(*txn));
    }
    if (t->rank == 0)
        ptc_put_le64(mine + 16, new_attempt());
    if ((rc = t->allgather(t->user, mine, sizeof mine, all)) < 0) {
        ptc_free(all);
        ptc_ckpt_abort(*txn);
        *txn = NULL;
        return ptc_ckpt_lost(rc, what, "exchange of the hosts' local versions");
    }
    for (int p = 0; p < t->size; p++)
        if (c->v.host_of[p] == c->v.host) { /* the leader: the host's lowest process */
            c->local = ptc_get_le64(all + 24 * p);
            c->parent = ptc_get_le64(all + 24 * p + 8);
            break;
        }
    c->attempt = ptc_get_le64(all + 16);
    ptc_free(all);
    return PTC_OK;
}

/* Second phase, after the vote on every process's outcome @p rc of the
 * first (its host's part recorded prepared where @p prepared): the commit
 * records, then the acknowledgement that every host wrote its own. */
static int finish(hsave *c, int rc, bool prepared)
{
    static const char what[] = "checkpoint save";
    bool ok;
    int trc = vote(c->t, rc, &ok);
    if (trc < 0) /* a process is gone: this host's part stays in doubt */
        return ptc_error_set(trc, "%s: vote on version %llu: %s (recovery decides it)", what,
                             (unsigned long long)c->version, ptc_last_error());
    if (!ok) { /* some host did not prepare: nobody commits, each removes its part */
        int arc = PTC_OK;
        if (prepared) {
            ptc_ckpt_host_state st = {.prepared = c->version, .prepared_local = c->local};
            char keep[1024];
            snprintf(keep, sizeof keep, "%s", ptc_last_error());
            arc = abort_prepared(c->s, &st);
            if (crashed)
                return arc;
            ptc_error_set(rc, "%s", keep);
        }
        rc = ptc_transport_agree(c->t, rc, what);
        return rc < 0 ? rc : arc;
    }
    CRASH_POINT("hosts.voted", c->version);
    if (c->v.lead) {
        ptc_hosts_rec r = {.kind = PTC_HOSTS_KIND_COMMITTED,
                           .host = (uint32_t)c->v.host,
                           .hosts = (uint32_t)c->v.nhosts,
                           .replicas = (uint32_t)c->replicas,
                           .version = c->version,
                           .local = c->local,
                           .attempt = c->attempt};
        rc = ptc_hosts_rec_write(c->s, PTC_HOSTS_COMMITTED, &r);
        if (rc == PTC_OK)
            CRASH_POINT("hosts.marked", c->version);
    }
    return ptc_transport_agree(c->t, rc, what);
}

/* Delete this store's parts of versions older than the newest @p keep
 * (G - keep and before), then their files, except version @p pin's (a
 * background copy reads it). A part the journal names is never among them. */
static int keep_newest(ptc_store *s, uint64_t g, int keep, uint64_t pin, bool last)
{
    ptc_version_info *vs = NULL;
    size_t n = 0, dropped = 0;
    PTC_TRY(ptc_store_versions(s, &vs, &n));
    int rc = PTC_OK;
    for (size_t i = 0; i < n && rc == PTC_OK; i++) {
        uint64_t v = meta_version(vs[i].metadata_json);
        if (v && v + (uint64_t)keep <= g && v != pin) {
            rc = drop_local(s, vs[i].version);
            dropped++;
        }
    }
    ptc_store_versions_free(vs, n);
    /* the dropped files are kept as spares for the next save to overwrite
     * (saves every step on RAM: no pages freed and faulted in again); the
     * job's last save leaves none */
    if (rc == PTC_OK && last)
        rc = ptc_store_gc(s, NULL);
    else if (rc == PTC_OK && dropped)
        rc = ptc_store_gc_recycle(s, NULL);
    return rc;
}

int ptc_ckpt_hosts_save_over(const ptc_transport *t, int host, ptc_store *s,
                             const ptc_layout *l, const ptc_rules *rules, const int *ranks,
                             size_t nranks, const void *const *bufs, const ptc_ckpt_record *rec,
                             const ptc_ckpt_options *opts, const ptc_ckpt_hosts_options *hopts,
                             uint64_t *version)
{
    return ptc_ckpt_hosts_save_rc(t, PTC_OK, host, s, l, rules, ranks, nranks, bufs, rec, opts,
                                  hopts, NULL, version);
}

int ptc_ckpt_hosts_save_rc(const ptc_transport *t, int rc_in, int host, ptc_store *s,
                           const ptc_layout *l, const ptc_rules *rules, const int *ranks,
                           size_t nranks, const void *const *bufs, const ptc_ckpt_record *rec,
                           const ptc_ckpt_options *opts, const ptc_ckpt_hosts_options *hopts,
                           ptc_ckpt_stage *stage, uint64_t *version)
{
    static const char what[] = "checkpoint save";
    hsave c = {.t = t, .s = s, .l = l, .ranks = ranks, .nranks = nranks, .bufs = bufs,
               .rec = rec, .opts = opts, .replicas = hopts ? hopts->replicas : 0,
               .stage = stage};
    crashed = false;
    int world = l ? ptc_layout_world(l) : 0;
    PTC_TRY(view_gather(t, rc_in, host, s, ranks, nranks, world, what, &c.v));
    int rc = PTC_OK;
    if (c.replicas < 0 || c.replicas >= c.v.nhosts) {
        int dummy[1];
        rc = ptc_ckpt_hosts_replica_hosts(0, c.v.nhosts, c.replicas, dummy);
        goto out_free; /* alike on every process */
    }
    view_mark(&c.v, c.replicas, world);
    uint64_t d;
    if ((rc = resolve(t, s, &c.v, what, &d)) < 0)
        goto out_free;
    ptc_fault_step("hosts.resolved", d + 1);
    if ((rc = copy_replicas(&c)) < 0)
        goto out_free;
    c.version = d + 1;
    ptc_fault_step("hosts.exchanged", c.version);
    ptc_ckpt_txn *txn = NULL;
    if ((rc = begin(&c, rules, &txn)) < 0)
        goto out_free;
    bool prepared;
    rc = write_and_prepare(&c, txn, PTC_OK, &prepared);
    if (crashed || !c.at_vote)
        goto out_free;
    if ((rc = finish(&c, rc, prepared)) < 0)
        goto out_free;
    if (version)
        *version = c.version;
    ptc_fault_step("hosts.acked", c.version);
    if (hopts && hopts->keep > 0) /* committed: a failure here is reported, not undone */
        rc = ptc_transport_agree(t, c.v.lead ? keep_newest(s, c.version, hopts->keep, hopts->pin,
                                                           hopts->last)
                                             : PTC_OK,
                                 "removing old versions");
    ptc_fault_step("hosts.done", c.version);
out_free:
    crashed = false;
    hview_free(&c.v);
    ptc_free(c.wranks);
    ptc_free(c.wbufs);
    ptc_free(c.own_copies);
    return rc;
}

/* The version in @p meta_json (a version's metadata object) if it names one. */
static uint64_t meta_version(const char *meta_json)
{
    json_t *o = json_loads(meta_json, 0, NULL);
    json_t *x = json_object_get(o, PTC_HOSTS_META_KEY);
    ptc_hosts_rec r = {0};
    if (json_is_string(x) &&
        ptc_hosts_meta_parse(json_string_value(x), json_string_length(x), &r) < 0)
        ptc_error_clear();
    json_decref(o);
    return r.version;
}

uint64_t ptc_ckpt_hosts_part_of(const ptc_version_info *info)
{
    return info && info->metadata_json ? meta_version(info->metadata_json) : 0;
}

int ptc_ckpt_hosts_local_version(ptc_store *s, uint64_t version, uint64_t *local)
{
    *local = 0;
    if (version == 0)
        return ptc_error_set(PTC_E_INVAL, "store %s: versions across hosts are numbered from 1",
                             ptc_store_dir(s));
    ptc_ckpt_host_state st;
    PTC_TRY(ptc_ckpt_host_state_read(s, &st));
    if (version == st.committed) {
        *local = st.committed_local;
        return PTC_OK;
    }
    ptc_version_info *vs = NULL;
    size_t n = 0;
    PTC_TRY(ptc_store_versions(s, &vs, &n));
    for (size_t i = n; i-- > 0 && !*local;)
        if (vs[i].version <= st.committed_local && meta_version(vs[i].metadata_json) == version)
            *local = vs[i].version;
    ptc_store_versions_free(vs, n);
    if (!*local)
        return ptc_error_set(PTC_E_NOTFOUND, "store %s holds no committed part of version %llu",
                             ptc_store_dir(s), (unsigned long long)version);
    return PTC_OK;
}

int ptc_ckpt_hosts_held(ptc_store *s, uint64_t below, uint64_t *version)
{
    *version = 0;
    ptc_ckpt_host_state st;
    PTC_TRY(ptc_ckpt_host_state_read(s, &st));
    ptc_version_info *vs = NULL;
    size_t n = 0;
    PTC_TRY(ptc_store_versions(s, &vs, &n));
    for (size_t i = 0; i < n; i++) {
        uint64_t g = vs[i].version <= st.committed_local ? meta_version(vs[i].metadata_json) : 0;
        if (g && g < below && g <= st.committed && g > *version)
            *version = g;
    }
    ptc_store_versions_free(vs, n);
    return PTC_OK;
}
