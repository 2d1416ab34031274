/* Versions spread over hosts (ptc_ckpt_hosts_*, docs/format.md §10) over a
 * transport whose processes are threads of this test and whose "hosts" are
 * stores in separate directories: the replica placement rule in closed
 * form; the journal record and metadata codecs on good and altered bytes;
 * clean saves (one and two processes per host, shards that the layout
 * replicates written once per host) loading byte-exact from each host's
 * own store; an agreed failure before and at the prepare (nothing
 * committed, every part removed); and a crash at every point of the
 * protocol on every host — the crashed thread stops there, the others see
 * a lost peer — after which each host's journal alone bounds the newest
 * version, recovery makes every host agree on it (rolled forward exactly
 * when some host recorded the commit), it loads byte-exact on every host,
 * no part of a newer version is left, and the next save follows it; also
 * with one host's store lost. The save in the background (a snapshot taken
 * before the call returns, an agreed failure of one process's snapshot)
 * and the copy to the persistent tier (from each host's own part, a
 * version pinned against --keep-local, byte-exact in the ordinary store). */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/ckpt/ckpt_hosts.h"
#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

/* ---- a transport of threads that notices a dead process ---------------------------- */

#define MAXP 4

typedef struct group {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, departed;
    unsigned long gen;
    bool dead; /* a process left without finishing: collectives fail */
    const void *slot[MAXP];
} group;

typedef struct proc proc;
typedef int (*body_fn)(proc *p);

struct proc {
    group *g;
    int rank;
    ptc_transport t;
    body_fn body;
    void *arg;
    int rc;
    char msg[1024];
    const char *crash; /* crash point armed on this thread */
    uint64_t version;
};

/* Wait until every process arrives (a phase of a collective); false when a
 * process died. */
static bool phase(group *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->dead) {
        pthread_mutex_unlock(&g->mu);
        return false;
    }
    unsigned long gen = g->gen;
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->gen == gen && !g->dead)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    bool ok = g->gen != gen;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

static int lost(void)
{
    return ptc_error_set(PTC_E_MPI, "a peer is gone");
}

static int th_allgather(void *user, const void *in, size_t n, void *out)
{
    proc *p = user;
    p->g->slot[p->rank] = in;
    if (!phase(p->g))
        return lost();
    for (int q = 0; q < p->g->size; q++)
        memcpy((uint8_t *)out + (size_t)q * n, p->g->slot[q], n);
    return phase(p->g) ? PTC_OK : lost();
}

static int th_broadcast(void *user, void *buf, size_t n, int root)
{
    proc *p = user;
    if (p->rank == root)
        p->g->slot[root] = buf;
    if (!phase(p->g))
        return lost();
    if (p->rank != root)
        memcpy(buf, p->g->slot[root], n);
    return phase(p->g) ? PTC_OK : lost();
}

static int th_barrier(void *user)
{
    proc *p = user;
    return phase(p->g) ? PTC_OK : lost();
}

static void *th_main(void *arg)
{
    proc *p = arg;
    p->t = (ptc_transport){.rank = p->rank, .size = p->g->size, .allgather = th_allgather,
                           .broadcast = th_broadcast, .barrier = th_barrier, .user = p};
    ptc_error_clear();
    ptc_fault_crash_at(p->crash);
    p->rc = p->body(p);
    ptc_fault_crash_at(NULL);
    snprintf(p->msg, sizeof p->msg, "%s", p->rc < 0 ? ptc_last_error() : "");
    if (p->rc < 0) { /* a process that failed leaves: the others must not wait */
        pthread_mutex_lock(&p->g->mu);
        p->g->dead = true;
        pthread_cond_broadcast(&p->g->cv);
        pthread_mutex_unlock(&p->g->mu);
    }
    return NULL;
}

/* Run @p body on @p n thread-processes; @p crash[r] (may be NULL) arms a
 * crash point on process r. */
static void run(proc *ps, int n, body_fn body, void *arg, const char *const *crash)
{
    group g = {.size = n};
    pthread_t th[MAXP];
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    for (int r = 0; r < n; r++) {
        ps[r] = (proc){.g = &g, .rank = r, .body = body, .arg = arg,
                       .crash = crash ? crash[r] : NULL};
        assert_int_equal(pthread_create(&th[r], NULL, th_main, &ps[r]), 0);
    }
    for (int r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
}

/* ---- a job over hosts -------------------------------------------------------------- */

/* w F32 [6, 4] split over tp; b F32 [5] replicated everywhere. */
static const char RULES[] = "match w tp=split(0) pp=first\n"
                            "match b tp=replicate pp=first\n";

typedef struct job {
    int nprocs, nhosts;
    int host_of[MAXP];      /* per process */
    int rank_of[MAXP];      /* one rank per process */
    char dir[MAXP][64];     /* per host */
    ptc_store *s[MAXP];     /* per host */
    ptc_rules *rules;
    ptc_layout *l;
    int replicas, keep;
    bool last;              /* ptc_ckpt_hosts_options.last of the saves */
    uint64_t pin;           /* ptc_ckpt_hosts_options.pin of the saves */
    uint32_t seed;          /* of the data saved next */
    const char *fail;       /* "process:point": an injected failure */
    uint64_t newest;        /* recovery's outcome (process 0's) */
} job;

static uint8_t byte_of(uint32_t seed, size_t t, int owner, size_t i)
{
    return (uint8_t)(seed * 131u + (unsigned)t * 17u + (unsigned)owner * 7u + (unsigned)i);
}

/* Rank r's buffers for data @p seed: identical shards get identical bytes
 * (their owner's). */
static void fill(const ptc_layout *l, int r, uint32_t seed, uint8_t **bufs)
{
    for (size_t t = 0; t < ptc_layout_count(l); t++) {
        size_t bytes;
        ptc_shard sh;
        assert_int_equal(ptc_ckpt_local_bytes(l, t, r, &bytes), PTC_OK);
        assert_int_equal(ptc_layout_shard(l, t, r, &sh), PTC_OK);
        bufs[t] = bytes ? malloc(bytes) : NULL;
        for (size_t i = 0; i < bytes; i++)
            bufs[t][i] = byte_of(seed, t, sh.owner, i);
    }
}

static void job_open(job *j, int nprocs, int nhosts, const char *cfg_text)
{
    memset(j, 0, sizeof *j);
    j->nprocs = nprocs;
    j->nhosts = nhosts;
    for (int h = 0; h < nhosts; h++) {
        snprintf(j->dir[h], sizeof j->dir[h], "/tmp/ptc_hosts_XXXXXX");
        assert_non_null(mkdtemp(j->dir[h]));
        assert_int_equal(ptc_store_open(&j->s[h], j->dir[h], PTC_STORE_CREATE), PTC_OK);
    }
    for (int p = 0; p < nprocs; p++) {
        j->host_of[p] = p * nhosts / nprocs;
        j->rank_of[p] = p;
    }
    ptc_config cfg;
    assert_int_equal(ptc_config_parse(&cfg, cfg_text), PTC_OK);
    assert_int_equal(ptc_config_world(&cfg), nprocs);
    assert_int_equal(ptc_rules_parse(&j->rules, RULES, strlen(RULES), "rules"), PTC_OK);
    ptc_tensor_info ti[2] = {{.name = "w", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {6, 4}},
                             {.name = "b", .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {5}}};
    assert_int_equal(ptc_layout_create(&j->l, ti, 2, j->rules, &cfg), PTC_OK);
}

/* Replace host @p h's store by an empty one (the host and its disk lost). */
static void job_lose_store(job *j, int h)
{
    char cmd[128];
    ptc_store_close(j->s[h]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", j->dir[h]);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ptc_store_open(&j->s[h], j->dir[h], PTC_STORE_CREATE), PTC_OK);
}

static void job_close(job *j)
{
    char cmd[128];
    for (int h = 0; h < j->nhosts; h++) {
        ptc_store_close(j->s[h]);
        snprintf(cmd, sizeof cmd, "rm -rf %s", j->dir[h]);
        assert_int_equal(system(cmd), 0);
    }
    ptc_layout_destroy(j->l);
    ptc_rules_destroy(j->rules);
}

/* The options of @p j's saves: one thread, its replicas, keep and pin. */
static void save_options(const job *j, ptc_ckpt_options *o, ptc_ckpt_hosts_options *ho)
{
    ptc_ckpt_options_init(o);
    o->threads = 1;
    ptc_ckpt_hosts_options_init(ho);
    ho->replicas = j->replicas;
    ho->keep = j->keep;
    ho->pin = j->pin;
    ho->last = j->last;
}

static int save_body(proc *p)
{
    job *j = p->arg;
    int r = j->rank_of[p->rank], h = j->host_of[p->rank];
    uint8_t *bufs[2];
    fill(j->l, r, j->seed, bufs);
    char point[64];
    if (j->fail && atoi(j->fail) == p->rank) { /* a failure, not a crash */
        snprintf(point, sizeof point, "%s", strchr(j->fail, ':') + 1);
        if (!strcmp(point, "write")) {
            free(bufs[0]);
            bufs[0] = NULL; /* "no buffer for tensor 'w'" */
        } else {
            ptc_fault_crash_at(point);
        }
    }
    ptc_ckpt_record rec = {.step = 100 + j->seed};
    ptc_ckpt_options o;
    ptc_ckpt_hosts_options ho;
    save_options(j, &o, &ho);
    int rc = ptc_ckpt_hosts_save_over(&p->t, h, j->s[h], j->l, j->rules, &r, 1,
                                      (const void *const *)bufs, &rec, &o, &ho, &p->version);
    free(bufs[0]);
    free(bufs[1]);
    return rc;
}

static int recover_body(proc *p)
{
    job *j = p->arg;
    int h = j->host_of[p->rank];
    int rc = ptc_ckpt_hosts_recover_over(&p->t, h, j->s[h], &p->version);
    if (rc == PTC_OK && p->rank == 0)
        j->newest = p->version;
    return rc;
}

static void all_ok(const proc *ps, int n, uint64_t version)
{
    for (int r = 0; r < n; r++) {
        if (ps[r].rc != PTC_OK)
            fail_msg("process %d: %s", r, ps[r].msg);
        assert_int_equal(ps[r].version, version);
    }
}

static void save_ok(job *j, uint32_t seed, uint64_t version)
{
    proc ps[MAXP];
    j->seed = seed;
    run(ps, j->nprocs, save_body, j, NULL);
    all_ok(ps, j->nprocs, version);
}

static uint64_t recover_all(job *j)
{
    proc ps[MAXP];
    run(ps, j->nprocs, recover_body, j, NULL);
    all_ok(ps, j->nprocs, j->newest);
    return j->newest;
}

/* Rank @p r of @p s's local version @p v equals data @p seed (its record's
 * step 100 + seed); @p what names the version in a failure. */
static void check_rank(const job *j, ptc_store *s, uint64_t v, int r, uint32_t seed,
                       const char *what)
{
    uint8_t *want[2], *got[2];
    fill(j->l, r, seed, want);
    fill(j->l, r, seed + 1000, got);
    ptc_ckpt_record rec;
    int rc = ptc_ckpt_load_local(s, v, j->l, &r, 1, (void *const *)got, NULL, &rec, NULL);
    if (rc != PTC_OK)
        fail_msg("%s %llu rank %d: %s", what, (unsigned long long)v, r, ptc_last_error());
    assert_int_equal(rec.step, 100 + seed);
    ptc_ckpt_record_free(&rec);
    for (size_t t = 0; t < 2; t++) {
        size_t bytes;
        assert_int_equal(ptc_ckpt_local_bytes(j->l, t, r, &bytes), PTC_OK);
        if (bytes && memcmp(want[t], got[t], bytes))
            fail_msg("%s %llu rank %d tensor %zu differs", what, (unsigned long long)v, r, t);
        free(want[t]);
        free(got[t]);
    }
}

/* Every process's rank loads version @p version from its own host's store
 * and equals data @p seed; each host's journal is clean at @p version and
 * its store holds no newer version. */
static void check_version(job *j, uint64_t version, uint32_t seed)
{
    for (int h = 0; h < j->nhosts; h++) {
        ptc_ckpt_host_state st;
        assert_int_equal(ptc_ckpt_host_state_read(j->s[h], &st), PTC_OK);
        assert_int_equal(st.committed, version);
        assert_int_equal(st.prepared, version);
        assert_int_equal(st.hosts, (uint32_t)j->nhosts);
        assert_int_equal(st.host, (uint32_t)h);
        uint64_t latest, local;
        assert_int_equal(ptc_store_latest(j->s[h], &latest), PTC_OK);
        assert_int_equal(latest, st.committed_local);
        assert_int_equal(ptc_ckpt_hosts_local_version(j->s[h], version, &local), PTC_OK);
        assert_int_equal(local, st.committed_local);
    }
    for (int p = 0; p < j->nprocs; p++) {
        int h = j->host_of[p];
        uint64_t local;
        assert_int_equal(ptc_ckpt_hosts_local_version(j->s[h], version, &local), PTC_OK);
        check_rank(j, j->s[h], local, j->rank_of[p], seed, "version");
    }
}

/* ---- the replica rule and the codecs ------------------------------------------------ */

static void test_replica_rule(void **state)
{
    (void)state;
    int out[4];
    for (int n = 1; n <= 5; n++)
        for (int h = 0; h < n; h++)
            for (int k = 0; k < n; k++) {
                assert_int_equal(ptc_ckpt_hosts_replica_hosts(h, n, k, out), PTC_OK);
                for (int i = 0; i < k; i++) {
                    assert_int_equal(out[i], (h + 1 + i) % n);
                    assert_int_not_equal(out[i], h);
                }
            }
    assert_int_equal(ptc_ckpt_hosts_replica_hosts(0, 3, 3, out), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(), "--replicas 3 needs more than 3 hosts (there are 3): "
                                          "a host never holds a copy of its own shards");
    assert_int_equal(ptc_ckpt_hosts_replica_hosts(0, 3, -1, out), PTC_E_INVAL);
    assert_int_equal(ptc_ckpt_hosts_replica_hosts(3, 3, 1, out), PTC_E_INVAL);
    assert_string_equal(ptc_last_error(), "host 3 outside the 3 hosts");
}

static void test_journal_codec(void **state)
{
    (void)state;
    ptc_hosts_rec r = {.kind = PTC_HOSTS_KIND_PREPARED, .host = 2, .hosts = 4, .replicas = 1,
                       .version = 77, .local = 81, .attempt = 5},
                  d;
    uint8_t b[PTC_HOSTS_REC_SIZE];
    ptc_hosts_rec_encode(&r, b);
    assert_memory_equal(b, "PTCHOST2\x01\0\0\0\x02\0\0\0\x04\0\0\0\x01\0\0\0M\0\0\0\0\0\0\0Q",
                        33);
    assert_memory_equal(b + 40, "\x05\0\0\0\0\0\0\0", 8);
    assert_int_equal(ptc_hosts_rec_decode(b, sizeof b, &d), PTC_OK);
    assert_memory_equal(&d, &r, sizeof r);
    assert_int_equal(ptc_hosts_rec_decode(b, sizeof b - 1, &d), PTC_E_FORMAT);
    for (size_t i = 0; i < sizeof b; i++) { /* any altered byte is refused */
        b[i] ^= 0x10;
        assert_int_equal(ptc_hosts_rec_decode(b, sizeof b, &d), PTC_E_FORMAT);
        b[i] ^= 0x10;
    }
    ptc_hosts_rec bad = r;
    bad.host = 4;
    ptc_hosts_rec_encode(&bad, b);
    assert_int_equal(ptc_hosts_rec_decode(b, sizeof b, &d), PTC_E_FORMAT);
    assert_string_equal(ptc_last_error(), "journal record of host 4 of 4 with 1 replicas");
    bad = r;
    bad.kind = 3;
    ptc_hosts_rec_encode(&bad, b);
    assert_int_equal(ptc_hosts_rec_decode(b, sizeof b, &d), PTC_E_FORMAT);

    char meta[160];
    assert_int_equal(ptc_hosts_meta_format(&r, meta, sizeof meta), PTC_OK);
    assert_string_equal(meta,
                        "{\"host\":2,\"hosts\":4,\"replicas\":1,\"version\":77,\"attempt\":5}");
    assert_int_equal(ptc_hosts_meta_parse(meta, strlen(meta), &d), PTC_OK);
    assert_int_equal(d.version, 77);
    assert_int_equal(d.host, 2);
    assert_int_equal(d.attempt, 5);
    static const char old[] = "{\"host\":2,\"hosts\":4,\"replicas\":1,\"version\":77}";
    assert_int_equal(ptc_hosts_meta_parse(old, strlen(old), &d), PTC_OK); /* no attempt */
    assert_int_equal(d.attempt, 0);
    bad = r;
    bad.attempt = 0;
    ptc_hosts_rec_encode(&bad, b);
    assert_int_equal(ptc_hosts_rec_decode(b, sizeof b, &d), PTC_E_FORMAT);
    static const char *const refused[] = {
        "{\"host\":4,\"hosts\":4,\"replicas\":1,\"version\":77}",
        "{\"host\":1,\"hosts\":4,\"replicas\":4,\"version\":77}",
        "{\"host\":1,\"hosts\":4,\"replicas\":1,\"version\":0}",
        "{\"host\":1,\"hosts\":4,\"replicas\":1}",
        "{\"host\":1,\"hosts\":4,\"replicas\":1,\"version\":7,\"x\":1}",
        "{\"host\":1,\"hosts\":4,\"replicas\":1,\"version\":7,\"attempt\":0}",
        "{\"host\":1,\"host\":1,\"hosts\":4,\"replicas\":1,\"version\":7}",
        "{\"host\":\"1\",\"hosts\":4,\"replicas\":1,\"version\":7}",
        "[1,2]", "", "{",
    };
    for (size_t i = 0; i < PTC_ARRAY_LEN(refused); i++)
        assert_int_equal(ptc_hosts_meta_parse(refused[i], strlen(refused[i]), &d),
                         PTC_E_FORMAT);
}

/* ---- saves ----------------------------------------------------------------------------- */

static void test_save_clean(void **state)
{
    (void)state;
    job j;
    /* three hosts, one process each, dp=3: every host writes its own copy */
    job_open(&j, 3, 3, "dp=3");
    save_ok(&j, 1, 1);
    check_version(&j, 1, 1);
    save_ok(&j, 2, 2);
    check_version(&j, 2, 2);
    save_ok(&j, 2, 3); /* the same data again: referenced, not rewritten */
    check_version(&j, 3, 2);
    uint64_t local;
    assert_int_equal(ptc_ckpt_hosts_local_version(j.s[1], 2, &local), PTC_OK);
    assert_int_equal(ptc_ckpt_hosts_local_version(j.s[1], 4, &local), PTC_E_NOTFOUND);
    job_close(&j);
    /* two hosts of two processes, dp=2,tp=2: b is written once per host */
    job_open(&j, 4, 2, "dp=2,tp=2");
    save_ok(&j, 5, 1);
    check_version(&j, 1, 5);
    save_ok(&j, 6, 2);
    check_version(&j, 2, 6);
    job_close(&j);
}

static void test_save_failures(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    job_open(&j, 3, 3, "dp=3");
    save_ok(&j, 1, 1);
    /* a failure before any host prepared */
    j.seed = 2;
    j.fail = "1:write";
    run(ps, 3, save_body, &j, NULL);
    for (int p = 0; p < 3; p++) {
        assert_int_equal(ps[p].rc, PTC_E_INVAL);
        assert_string_equal(ps[p].msg, "checkpoint save failed on process 1: checkpoint: no "
                                       "buffer for tensor 'w' on rank 1 (96 bytes)");
    }
    check_version(&j, 1, 1);
    /* host 2 fails to record its prepare; hosts 0 and 1 prepared and remove theirs */
    j.fail = "2:fail:hosts.prepared";
    run(ps, 3, save_body, &j, NULL);
    for (int p = 0; p < 3; p++) {
        assert_int_equal(ps[p].rc, PTC_E_IO);
        assert_string_equal(ps[p].msg, "checkpoint save failed on process 2: injected failure "
                                       "at hosts.prepared");
    }
    check_version(&j, 1, 1);
    j.fail = NULL;
    save_ok(&j, 3, 2);
    check_version(&j, 2, 3);
    job_close(&j);
}

/* ---- crashes ----------------------------------------------------------------------------- */

static const char *const POINTS[] = {"hosts.written", "hosts.local", "hosts.prepared",
                                     "hosts.voted", "hosts.marked"};

/* Version 1 saved, then version 2 with process @p victim crashing at
 * @p point; afterwards every host's journal alone bounds the newest version
 * (committed, or committed + 1 in doubt). */
static void crash_save(job *j, int victim, const char *point)
{
    proc ps[MAXP];
    const char *crash[MAXP] = {0};
    save_ok(j, 1, 1);
    crash[victim] = point;
    j->seed = 2;
    run(ps, j->nprocs, save_body, j, crash);
    assert_int_equal(ps[victim].rc, PTC_E_IO);
    char want[64];
    snprintf(want, sizeof want, "crash point %s", point);
    assert_string_equal(ps[victim].msg, want);
    for (int h = 0; h < j->nhosts; h++) {
        ptc_ckpt_host_state st;
        assert_int_equal(ptc_ckpt_host_state_read(j->s[h], &st), PTC_OK);
        assert_true(st.committed == 1 || st.committed == 2);
        assert_true(st.prepared == st.committed || st.prepared == st.committed + 1);
    }
}

static void test_crash_points(void **state)
{
    (void)state;
    for (size_t i = 0; i < PTC_ARRAY_LEN(POINTS); i++)
        for (int victim = 0; victim < 3; victim++) {
            job j;
            job_open(&j, 3, 3, "dp=3");
            crash_save(&j, victim, POINTS[i]);
            /* committed when the crash came after the vote: then some host
             * recorded it (the victim itself at hosts.marked, the others
             * otherwise) */
            uint64_t want = i >= 3 ? 2 : 1;
            uint64_t got = recover_all(&j);
            if (got != want)
                fail_msg("crash at %s on host %d: recovered %llu, want %llu", POINTS[i], victim,
                         (unsigned long long)got, (unsigned long long)want);
            check_version(&j, want, (uint32_t)want);
            assert_int_equal(recover_all(&j), want); /* recovery is idempotent */
            save_ok(&j, 9, want + 1);
            check_version(&j, want + 1, 9);
            job_close(&j);
        }
    /* two processes per host: a non-leader's crash after writing its shards */
    job j;
    job_open(&j, 4, 2, "dp=2,tp=2");
    crash_save(&j, 3, "hosts.written");
    assert_int_equal(recover_all(&j), 1);
    check_version(&j, 1, 1);
    job_close(&j);
}

/* A crash while aborting: host 2 fails to prepare, host 0 dies between
 * resetting its journal and removing its part; recovery removes the part. */
static void test_crash_in_abort(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    const char *crash[MAXP] = {"hosts.abort", NULL, NULL};
    job_open(&j, 3, 3, "dp=3");
    save_ok(&j, 1, 1);
    j.seed = 2;
    j.fail = "2:fail:hosts.prepared";
    run(ps, 3, save_body, &j, crash);
    assert_string_equal(ps[0].msg, "crash point hosts.abort");
    uint64_t latest;
    assert_int_equal(ptc_store_latest(j.s[0], &latest), PTC_OK);
    assert_int_equal(latest, 2); /* the part no journal names */
    j.fail = NULL;
    assert_int_equal(recover_all(&j), 1);
    check_version(&j, 1, 1);
    job_close(&j);
}

/* A host lost with its store: the survivors' journals decide. */
static void test_lost_host(void **state)
{
    (void)state;
    for (int i = 2; i < 4; i++) { /* a crash before / after the vote */
        job j;
        job_open(&j, 3, 3, "dp=3");
        crash_save(&j, 2, POINTS[i]);
        job_lose_store(&j, 2);
        uint64_t want = i == 3 ? 2 : 1;
        assert_int_equal(recover_all(&j), want);
        for (int h = 0; h < 2; h++) {
            ptc_ckpt_host_state st;
            assert_int_equal(ptc_ckpt_host_state_read(j.s[h], &st), PTC_OK);
            assert_int_equal(st.committed, want);
            assert_int_equal(st.prepared, want);
        }
        ptc_ckpt_host_state st;
        assert_int_equal(ptc_ckpt_host_state_read(j.s[2], &st), PTC_OK);
        assert_int_equal(st.committed, 0); /* a fresh store holds no part */
        job_close(&j);
    }
}

/* ---- replicas ----------------------------------------------------------------------- */

/* Rank @p r loads version @p version from host @p h's store alone and equals
 * data @p seed — or, where @p present is false, the store lacks its shards. */
static void check_rank_on(job *j, int h, int r, uint64_t version, uint32_t seed, bool present)
{
    uint8_t *want[2], *got[2];
    fill(j->l, r, seed, want);
    fill(j->l, r, seed + 1000, got);
    uint64_t local, loaded;
    assert_int_equal(ptc_ckpt_hosts_local_version(j->s[h], version, &local), PTC_OK);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = 1;
    int rc = ptc_ckpt_load_local(j->s[h], local, j->l, &r, 1, (void *const *)got, &o, NULL,
                                 &loaded);
    if (present && rc != PTC_OK)
        fail_msg("rank %d on host %d: %s", r, h, ptc_last_error());
    if (!present && rc == PTC_OK)
        fail_msg("rank %d on host %d: loaded, but the host holds no copy", r, h);
    for (size_t t = 0; present && t < 2; t++) {
        size_t bytes;
        assert_int_equal(ptc_ckpt_local_bytes(j->l, t, r, &bytes), PTC_OK);
        if (bytes && memcmp(want[t], got[t], bytes))
            fail_msg("rank %d on host %d: tensor %zu differs", r, h, t);
    }
    for (size_t t = 0; t < 2; t++) {
        free(want[t]);
        free(got[t]);
    }
}

static void test_replicas(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    /* three hosts, tp=3: host h holds rank h, and rank h-1's copy with one replica */
    job_open(&j, 3, 3, "tp=3");
    j.replicas = 3;
    j.seed = 1;
    run(ps, 3, save_body, &j, NULL);
    for (int p = 0; p < 3; p++) {
        assert_int_equal(ps[p].rc, PTC_E_INVAL);
        assert_string_equal(ps[p].msg, "--replicas 3 needs more than 3 hosts (there are 3): a "
                                       "host never holds a copy of its own shards");
    }
    j.replicas = 1;
    save_ok(&j, 1, 1);
    save_ok(&j, 2, 2);
    for (int h = 0; h < 3; h++) {
        ptc_ckpt_host_state st;
        assert_int_equal(ptc_ckpt_host_state_read(j.s[h], &st), PTC_OK);
        assert_int_equal(st.replicas, 1);
        for (int r = 0; r < 3; r++)
            check_rank_on(&j, h, r, 2, 2, r == h || r == (h + 2) % 3);
    }
    /* a host lost with its store: every rank still has a copy on a survivor */
    job_lose_store(&j, 1);
    check_rank_on(&j, 0, 0, 2, 2, true);
    check_rank_on(&j, 2, 1, 2, 2, true);
    check_rank_on(&j, 2, 2, 2, 2, true);
    job_close(&j);
    /* two replicas of three hosts: every host holds everything */
    job_open(&j, 3, 3, "tp=3");
    j.replicas = 2;
    save_ok(&j, 4, 1);
    for (int h = 0; h < 3; h++)
        for (int r = 0; r < 3; r++)
            check_rank_on(&j, h, r, 1, 4, true);
    job_close(&j);
    /* two hosts of two processes, tp=4: host 1 holds ranks 0-3 */
    job_open(&j, 4, 2, "tp=4");
    j.replicas = 1;
    save_ok(&j, 5, 1);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++)
            check_rank_on(&j, h, r, 1, 5, true);
    job_close(&j);
}

/* keep 2: after each save only the two newest versions' parts remain */
static void test_keep(void **state)
{
    (void)state;
    job j;
    job_open(&j, 3, 3, "tp=3");
    j.replicas = 1;
    j.keep = 2;
    for (uint32_t g = 1; g <= 4; g++)
        save_ok(&j, g, g);
    for (int h = 0; h < 3; h++) {
        ptc_version_info *vs;
        size_t n;
        assert_int_equal(ptc_store_versions(j.s[h], &vs, &n), PTC_OK);
        assert_int_equal(n, 2);
        ptc_store_versions_free(vs, n);
        uint64_t local;
        assert_int_equal(ptc_ckpt_hosts_local_version(j.s[h], 2, &local), PTC_E_NOTFOUND);
        /* the versions held, newest first below a bound: 4, 3, then none */
        uint64_t held = 99;
        assert_int_equal(ptc_ckpt_hosts_held(j.s[h], 5, &held), PTC_OK);
        assert_int_equal(held, 4);
        assert_int_equal(ptc_ckpt_hosts_held(j.s[h], 4, &held), PTC_OK);
        assert_int_equal(held, 3);
        assert_int_equal(ptc_ckpt_hosts_held(j.s[h], 3, &held), PTC_OK);
        assert_int_equal(held, 0);
        check_rank_on(&j, h, h, 3, 3, true);
        check_rank_on(&j, h, (h + 2) % 3, 4, 4, true);
        /* the files of the version dropped last are kept as spares (those
         * of the one before went to save 4): own rank, the copy held */
        char p[128];
        snprintf(p, sizeof p, "%s/packs/spare/rank-%d.pack", j.dir[h], h);
        assert_int_equal(access(p, F_OK), 0);
        snprintf(p, sizeof p, "%s/packs/spare/rank-%d.pack", j.dir[h], (h + 2) % 3);
        assert_int_equal(access(p, F_OK), 0);
    }
    /* the job's last save leaves no spare */
    j.last = true;
    save_ok(&j, 5, 5);
    for (int h = 0; h < 3; h++) {
        char p[128];
        snprintf(p, sizeof p, "%s/packs/spare", j.dir[h]);
        assert_int_equal(access(p, F_OK), -1);
        snprintf(p, sizeof p, "%s/packs/v3", j.dir[h]); /* v3's part: dropped, removed */
        assert_int_equal(access(p, F_OK), -1);
    }
    job_close(&j);
}

/* A store that already holds ordinary versions (saved without --replicas):
 * recovery over it keeps every one of them. */
static int plain_save_body(proc *p)
{
    job *j = p->arg;
    int r = j->rank_of[p->rank];
    uint8_t *bufs[2];
    fill(j->l, r, 7, bufs);
    ptc_ckpt_record rec = {.step = 7};
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = 1;
    int rc = ptc_ckpt_save_over(&p->t, j->s[0], j->l, j->rules, &r, 1,
                                (const void *const *)bufs, &rec, &o, &p->version);
    free(bufs[0]);
    free(bufs[1]);
    return rc;
}

static void test_preexisting_versions(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    job_open(&j, 3, 3, "dp=3");
    run(ps, 3, plain_save_body, &j, NULL); /* ordinary versions in host 0's store */
    all_ok(ps, 3, 1);
    run(ps, 3, plain_save_body, &j, NULL);
    all_ok(ps, 3, 2);
    j.newest = 0;
    assert_int_equal(recover_all(&j), 0); /* no version across hosts yet */
    ptc_version_info *vs = NULL;
    size_t n = 0;
    assert_int_equal(ptc_store_versions(j.s[0], &vs, &n), PTC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(vs[0].version, 1);
    assert_int_equal(vs[1].version, 2);
    ptc_store_versions_free(vs, n);
    /* a save across hosts next to them, and a recovery after it, keep them too */
    save_ok(&j, 1, 1);
    assert_int_equal(recover_all(&j), 1);
    assert_int_equal(ptc_store_versions(j.s[0], &vs, &n), PTC_OK);
    assert_int_equal(n, 3);
    ptc_store_versions_free(vs, n);
    job_close(&j);
}

/* A fresh store (host replaced) in a save that crashes after its prepare:
 * its prepared G = D + 1 with committed < D is aborted, as every in-doubt
 * D + 1, and later recoveries and saves go on. */
static void test_fresh_then_crash(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    job_open(&j, 3, 3, "dp=3");
    save_ok(&j, 1, 1);
    job_lose_store(&j, 2); /* host 2 replaced: a fresh store */
    const char *crash[MAXP] = {"hosts.prepared", NULL, NULL};
    j.seed = 2;
    run(ps, 3, save_body, &j, crash); /* host 0 dies after preparing 2 */
    ptc_ckpt_host_state st;
    assert_int_equal(ptc_ckpt_host_state_read(j.s[2], &st), PTC_OK);
    assert_int_equal(st.committed, 0);
    assert_int_equal(st.prepared, 2);
    assert_int_equal(recover_all(&j), 1);
    assert_int_equal(ptc_ckpt_host_state_read(j.s[2], &st), PTC_OK);
    assert_int_equal(st.prepared, 0);
    ptc_version_info *vs = NULL;
    size_t n = 1;
    assert_int_equal(ptc_store_versions(j.s[2], &vs, &n), PTC_OK);
    assert_int_equal(n, 0); /* its part deleted */
    ptc_store_versions_free(vs, n);
    save_ok(&j, 3, 2);
    check_version(&j, 2, 3);
    job_close(&j);
}

/* A host absent from a recovery keeps the journal of an attempt at G that
 * the others aborted; when it returns after they committed another attempt
 * at G, its part is never taken as G's. @p others_voted: the others crash
 * after the vote (the absent host alone commits its attempt: recovery
 * refuses, naming it), else the absent host crashes after its prepare (its
 * prepared attempt is not the committed one: aborted). */
static void stale_case(int others_voted)
{
    job j3, j2;
    proc ps[MAXP];
    job_open(&j3, 3, 3, "dp=3");
    save_ok(&j3, 1, 1);
    const char *crash[MAXP] = {0};
    if (others_voted)
        crash[0] = crash[1] = "hosts.voted";
    else
        crash[2] = "hosts.prepared";
    j3.seed = 2;
    run(ps, 3, save_body, &j3, crash);
    ptc_ckpt_host_state st;
    assert_int_equal(ptc_ckpt_host_state_read(j3.s[2], &st), PTC_OK);
    assert_int_equal(st.committed, others_voted ? 2 : 1);
    assert_int_equal(st.prepared, 2);
    /* host 2 is down: the job goes on with 3 processes on hosts 0 and 1 */
    j2 = j3;
    j2.nhosts = 2;
    j2.host_of[0] = j2.host_of[1] = 0;
    j2.host_of[2] = 1;
    assert_int_equal(recover_all(&j2), 1);
    save_ok(&j2, 3, 2); /* another attempt at 2 */
    /* host 2 returns with its disk */
    if (others_voted) {
        run(ps, 3, recover_body, &j3, NULL);
        for (int r = 0; r < 3; r++) {
            assert_int_equal(ps[r].rc, PTC_E_STORE);
            assert_non_null(strstr(ps[r].msg, "host 2 missed a recovery"));
        }
        job_lose_store(&j3, 2); /* nothing changed: its store replaced */
    }
    assert_int_equal(recover_all(&j3), 2);
    uint64_t local;
    assert_int_equal(ptc_ckpt_hosts_local_version(j3.s[2], 2, &local), PTC_E_NOTFOUND);
    assert_int_equal(ptc_ckpt_host_state_read(j3.s[2], &st), PTC_OK);
    assert_int_equal(st.prepared, st.committed); /* its attempt aborted */
    save_ok(&j3, 4, 3);
    check_version(&j3, 3, 4);
    job_close(&j3);
}

static void test_stale_host(void **state)
{
    (void)state;
    stale_case(1);
    stale_case(0);
    /* not stale: host 1 lost, host 2 renumbered 1 holds the same attempt */
    job j3, j2;
    job_open(&j3, 3, 3, "dp=3");
    save_ok(&j3, 1, 1);
    j2 = j3;
    j2.nhosts = 2;
    j2.host_of[0] = j2.host_of[1] = 0;
    j2.host_of[2] = 1;
    j2.s[1] = j3.s[2];
    assert_int_equal(recover_all(&j2), 1);
    job_close(&j3);
}

/* A save or recovery while another holds a host's journal lock fails with
 * PTC_E_BUSY on every process and changes nothing. */
static void test_busy(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    job_open(&j, 3, 3, "dp=3");
    save_ok(&j, 1, 1);
    char path[128];
    snprintf(path, sizeof path, "%s/hosts/lock", j.dir[1]);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    run(ps, 3, recover_body, &j, NULL);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ps[r].rc, PTC_E_BUSY);
    j.seed = 2;
    run(ps, 3, save_body, &j, NULL);
    for (int r = 0; r < 3; r++)
        assert_int_equal(ps[r].rc, PTC_E_BUSY);
    check_version(&j, 1, 1);
    close(fd);
    assert_int_equal(recover_all(&j), 1);
    save_ok(&j, 2, 2);
    check_version(&j, 2, 2);
    job_close(&j);
}

/* An exchange where process 0 names a process that does not exist: every
 * process gets that failure (agreed), none waits for the others. */
static int bad_exchange_body(proc *p)
{
    int peer = 99;
    char b[4] = {0};
    const void *sb[1] = {b};
    size_t len[1] = {sizeof b};
    return ptc_transport_exchange(&p->t, p->rank == 0, &peer, sb, len, 0, NULL, NULL, NULL);
}

static void test_small_checks(void **state)
{
    (void)state;
    proc ps[MAXP];
    run(ps, 3, bad_exchange_body, NULL, NULL);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(ps[r].rc, PTC_E_INVAL);
        assert_non_null(strstr(ps[r].msg, "no process 99 of 3"));
    }
    job j;
    job_open(&j, 3, 3, "dp=3");
    save_ok(&j, 1, 1);
    uint64_t local = 7;
    assert_int_equal(ptc_ckpt_hosts_local_version(j.s[0], 0, &local), PTC_E_INVAL);
    assert_int_equal(local, 0);
    assert_int_equal(ptc_ckpt_hosts_local_version(j.s[0], 1, &local), PTC_OK);
    assert_int_equal(local, 1);
    job_close(&j);
}

/* ---- the save in the background and the persistent tier --------------------------- */

typedef struct async_arg {
    job *j;
    int bad; /* the process whose snapshot fails (no buffers), -1: none */
} async_arg;

static int async_body(proc *p)
{
    async_arg *a = p->arg;
    job *j = a->j;
    int r = j->rank_of[p->rank], h = j->host_of[p->rank];
    uint8_t *bufs[2], *later[2];
    fill(j->l, r, j->seed, bufs);
    fill(j->l, r, j->seed + 1, later);
    ptc_ckpt_record rec = {.step = 100 + j->seed};
    ptc_ckpt_options o;
    ptc_ckpt_hosts_options ho;
    save_options(j, &o, &ho);
    ptc_ckpt_stage *st = NULL;
    ptc_ckpt_async *as = NULL;
    assert_int_equal(ptc_ckpt_stage_create(&st), PTC_OK);
    int rc = ptc_ckpt_hosts_save_async(&as, &p->t, h, j->s[h], j->l, j->rules, &r, 1,
                                       p->rank == a->bad ? NULL : (const void *const *)bufs,
                                       &rec, &o, &ho, st);
    /* the job goes on: the save holds the snapshot, not these buffers */
    for (size_t t = 0; t < 2; t++) {
        size_t bytes;
        assert_int_equal(ptc_ckpt_local_bytes(j->l, t, r, &bytes), PTC_OK);
        if (bytes)
            memcpy(bufs[t], later[t], bytes);
        free(later[t]);
    }
    if (rc == PTC_OK)
        rc = ptc_ckpt_async_wait(as, &p->version);
    ptc_ckpt_stage_destroy(st);
    free(bufs[0]);
    free(bufs[1]);
    return rc;
}

/* The whole cross-host save on the background thread: the state as it was
 * when the call returned, byte-exact on every host; one process's failed
 * snapshot fails the save on every process and commits nothing. */
static void test_async(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    job_open(&j, 3, 3, "tp=3");
    j.replicas = 1;
    j.seed = 5;
    async_arg a = {.j = &j, .bad = -1};
    run(ps, 3, async_body, &a, NULL);
    all_ok(ps, 3, 1);
    check_version(&j, 1, 5);
    for (int h = 0; h < 3; h++)
        check_rank_on(&j, h, (h + 2) % 3, 1, 5, true); /* the previous host's copy */
    a.bad = 1;
    j.seed = 8;
    run(ps, 3, async_body, &a, NULL);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(ps[r].rc, PTC_E_INVAL);
        assert_non_null(strstr(ps[r].msg, "buffers"));
    }
    check_version(&j, 1, 5);
    a.bad = -1;
    run(ps, 3, async_body, &a, NULL);
    all_ok(ps, 3, 2);
    check_version(&j, 2, 8);
    job_close(&j);
}

/* Two saves through one deferred stage: each returns before its copy, the
 * buffers are overwritten as soon as ptc_ckpt_async_snapshot_wait returns,
 * and the area (snapshot and received replica) is sized once and reused. */
static int deferred_body(proc *p)
{
    job *j = ((async_arg *)p->arg)->j;
    int r = j->rank_of[p->rank], h = j->host_of[p->rank], from = -1;
    for (int q = 0; q < j->nprocs; q++) /* the process whose copy this one receives */
        if (j->host_of[q] == (h + j->nhosts - 1) % j->nhosts)
            from = j->rank_of[q];
    size_t want = 0;
    for (size_t t = 0; t < 2; t++) {
        size_t own, copy;
        assert_int_equal(ptc_ckpt_local_bytes(j->l, t, r, &own), PTC_OK);
        assert_int_equal(ptc_ckpt_local_bytes(j->l, t, from, &copy), PTC_OK);
        want += (own + 63) / 64 * 64 + copy;
    }
    ptc_ckpt_options o;
    ptc_ckpt_hosts_options ho;
    save_options(j, &o, &ho);
    ptc_ckpt_stage *st = NULL;
    assert_int_equal(ptc_ckpt_stage_create(&st), PTC_OK);
    ptc_ckpt_stage_defer(st, true);
    int rc = PTC_OK;
    for (uint32_t k = 0; k < 2 && rc == PTC_OK; k++) {
        uint8_t *bufs[2];
        fill(j->l, r, j->seed + k, bufs);
        ptc_ckpt_record rec = {.step = 100 + j->seed + k};
        ptc_ckpt_async *as = NULL;
        rc = ptc_ckpt_hosts_save_async(&as, &p->t, h, j->s[h], j->l, j->rules, &r, 1,
                                       (const void *const *)bufs, &rec, &o, &ho, st);
        if (rc == PTC_OK) {
            ptc_ckpt_async_snapshot_wait(as);
            for (size_t t = 0; t < 2; t++) { /* the save holds its copy now */
                size_t bytes;
                assert_int_equal(ptc_ckpt_local_bytes(j->l, t, r, &bytes), PTC_OK);
                if (bytes)
                    memset(bufs[t], 0xA5, bytes);
            }
            rc = ptc_ckpt_async_wait(as, &p->version);
        }
        if (rc == PTC_OK)
            assert_int_equal(ptc_ckpt_stage_bytes(st), want);
        free(bufs[0]);
        free(bufs[1]);
    }
    ptc_ckpt_async_snapshot_wait(NULL);
    ptc_ckpt_stage_destroy(st);
    return rc;
}

static void test_async_deferred(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    job_open(&j, 3, 3, "tp=3");
    j.replicas = 1;
    j.seed = 21;
    async_arg a = {.j = &j, .bad = -1};
    run(ps, 3, deferred_body, &a, NULL);
    all_ok(ps, 3, 2);
    check_version(&j, 2, 22);
    for (int h = 0; h < 3; h++) {
        check_rank_on(&j, h, (h + 2) % 3, 2, 22, true);
        check_rank_on(&j, h, (h + 2) % 3, 1, 21, true);
    }
    job_close(&j);
}

typedef struct persist_arg {
    job *j;
    ptc_store *ps;
    uint64_t version;
} persist_arg;

static int persist_body(proc *p)
{
    persist_arg *a = p->arg;
    job *j = a->j;
    int r = j->rank_of[p->rank], h = j->host_of[p->rank];
    return ptc_ckpt_hosts_persist_over(&p->t, j->s[h], a->version, a->ps, j->l, j->rules, &r, 1,
                                       NULL, &p->version);
}

/* Every rank of the persistent store's version @p pv equals data @p seed. */
static void check_persisted(job *j, ptc_store *ps, uint64_t pv, uint32_t seed)
{
    for (int r = 0; r < j->nprocs; r++)
        check_rank(j, ps, pv, r, seed, "persisted version");
}

/* The persistent tier: a version pinned while later saves trim (keep 1)
 * stays readable, is copied from each host's own part into an ordinary
 * store byte-exact with its record; unpinned, the next save trims it, and
 * copying a version no host holds fails alike everywhere. */
static void test_persist(void **state)
{
    (void)state;
    job j;
    proc ps[MAXP];
    job_open(&j, 3, 3, "tp=3");
    j.replicas = 1;
    j.keep = 1;
    char dir[64] = "/tmp/ptc_persist_XXXXXX";
    assert_non_null(mkdtemp(dir));
    persist_arg a = {.j = &j};
    assert_int_equal(ptc_store_open(&a.ps, dir, PTC_STORE_CREATE), PTC_OK);
    save_ok(&j, 1, 1);
    j.pin = 1; /* a copy of version 1 in flight */
    save_ok(&j, 2, 2);
    save_ok(&j, 3, 3);
    for (int h = 0; h < 3; h++)
        check_rank_on(&j, h, h, 1, 1, true);
    a.version = 1;
    run(ps, 3, persist_body, &a, NULL);
    all_ok(ps, 3, 1);
    check_persisted(&j, a.ps, 1, 1);
    j.pin = 0;
    save_ok(&j, 4, 4);
    for (int h = 0; h < 3; h++) {
        uint64_t local;
        assert_int_equal(ptc_ckpt_hosts_local_version(j.s[h], 1, &local), PTC_E_NOTFOUND);
        ptc_version_info *vs;
        size_t n;
        assert_int_equal(ptc_store_versions(j.s[h], &vs, &n), PTC_OK);
        assert_int_equal(n, 1);
        ptc_store_versions_free(vs, n);
    }
    run(ps, 3, persist_body, &a, NULL); /* version 1 is gone everywhere */
    for (int r = 0; r < 3; r++)
        assert_int_equal(ps[r].rc, PTC_E_NOTFOUND);
    a.version = 4;
    run(ps, 3, persist_body, &a, NULL);
    all_ok(ps, 3, 2);
    check_persisted(&j, a.ps, 2, 4);
    check_persisted(&j, a.ps, 1, 1);
    ptc_store_close(a.ps);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    job_close(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica_rule),   cmocka_unit_test(test_journal_codec),
        cmocka_unit_test(test_save_clean),     cmocka_unit_test(test_save_failures),
        cmocka_unit_test(test_crash_points),   cmocka_unit_test(test_crash_in_abort),
        cmocka_unit_test(test_lost_host),      cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_keep),           cmocka_unit_test(test_preexisting_versions),
        cmocka_unit_test(test_fresh_then_crash), cmocka_unit_test(test_stale_host),
        cmocka_unit_test(test_busy),           cmocka_unit_test(test_small_checks),
        cmocka_unit_test(test_async),          cmocka_unit_test(test_async_deferred),          cmocka_unit_test(test_persist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
