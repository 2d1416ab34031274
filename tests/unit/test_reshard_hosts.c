/* The version a load across hosts takes, opened once: three thread-
 * processes, each on a host of its own whose store is a directory no other
 * opens (thread_transport.h, its all-gathers and broadcasts counted). A
 * version saved with an explicit layout is opened to choose it (the shard
 * records of every host gathered: ptc_reshard_hosts_covered) and that
 * opening is the load's: a load of the version the pick takes
 * (ptc_reshard_hosts_load, version 0) makes exactly the collectives of the
 * pick and of a load of that version named, less one opening of it
 * (ptc_reshard_hosts_version_open) — gathers and bytes gathered — and
 * loads byte-exact; so too when the newest version lacks a host's rank and
 * the pick falls back to the older one, with the same warning and the same
 * error for the newest asked for. A version saved under a configuration
 * keeps its path: the pick reads the hosts' inventories and opens nothing
 * (the load's collectives are the pick's plus the named load's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "thread_transport.h"
#include "ptc/ckpt.h"
#include "reshard/reshard_internal.h"

#define NP 3 /* processes = hosts = saved ranks */

/* ---- counted collectives ------------------------------------------------------------- */

static _Thread_local long n_gathers, n_broadcasts;
static _Thread_local uint64_t n_bytes; /* contributed to all-gathers */

static int counted_allgather(void *user, const void *in, size_t n, void *out)
{
    n_gathers++;
    n_bytes += n;
    return th_allgather(user, in, n, out);
}

static int counted_broadcast(void *user, void *buf, size_t n, int root)
{
    n_broadcasts++;
    return th_broadcast(user, buf, n, root);
}

typedef struct count {
    long gathers, broadcasts;
    uint64_t bytes;
} count;

/* ---- the job ----------------------------------------------------------------------- */

/* w F32 [6, 4] in rows of 2 per saved rank, b F32 [5] on every rank: the
 * explicit layout and tp=3 under RULES place them alike. */
static const char RULES[] = "match w tp=split(0) pp=first\n"
                            "match b tp=replicate pp=first\n";
static const ptc_tensor_info TENSORS[2] = {
    {.name = "w", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {6, 4}},
    {.name = "b", .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {5}}};

enum mode { SAVE, LOAD, PICK, OPEN, PICK_OPEN };

typedef struct job {
    char dir[NP][64];
    ptc_store *s[NP];   /* host p's, process p's */
    ptc_rules *rules;
    ptc_layout *xl;     /* explicit, 3 ranks */
    ptc_layout *cl;     /* tp=3 */
    ptc_layout *dst;    /* tp=2: processes 0 and 1 run its ranks */
    /* what the bodies do */
    enum mode mode;
    const ptc_layout *save_l;
    int replicas;
    uint32_t seed;      /* of the data saved, or expected by a load */
    uint64_t version;   /* asked for (0: the pick's) */
    /* what they saw */
    count c[NP];
    uint64_t took[NP];
    bool opened[NP], has_rec[NP];
    int64_t step[NP];
} job;

static uint8_t gbyte(uint32_t seed, size_t t, size_t i)
{
    return (uint8_t)(seed * 131u + (unsigned)t * 17u + (unsigned)i * 7u);
}

/* Rank @p r's local tensor @p t of @p l (row splits of w, b whole: its
 * bytes are the global tensor's from r x its size, and b's from 0) is
 * data @p seed's; @p fill: make it so, else check it. */
static int rank_bytes(const ptc_layout *l, int r, uint32_t seed, uint8_t **bufs, bool fill)
{
    for (size_t t = 0; t < 2; t++) {
        size_t n = 0;
        PTC_TRY(ptc_ckpt_local_bytes(l, t, r, &n));
        size_t at = t == 0 ? (size_t)r * n : 0;
        for (size_t i = 0; i < n; i++) {
            if (fill)
                bufs[t][i] = gbyte(seed, t, at + i);
            else if (bufs[t][i] != gbyte(seed, t, at + i))
                return ptc_error_set(PTC_E_INVAL, "rank %d tensor %zu byte %zu differs", r, t,
                                     i);
        }
    }
    return PTC_OK;
}

static int alloc_rank(const ptc_layout *l, int r, uint8_t **bufs)
{
    for (size_t t = 0; t < 2; t++) {
        size_t n = 0;
        PTC_TRY(ptc_ckpt_local_bytes(l, t, r, &n));
        if (!(bufs[t] = calloc(n + 1, 1)))
            return PTC_E_NOMEM;
    }
    return PTC_OK;
}

static int save(proc *p, job *j, ptc_store *s)
{
    uint8_t *bufs[2] = {NULL, NULL};
    int r = p->rank;
    int rc = alloc_rank(j->save_l, r, bufs);
    if (rc == PTC_OK)
        rc = rank_bytes(j->save_l, r, j->seed, bufs, true);
    ptc_ckpt_record rec = {.step = 100 + j->seed};
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = 1;
    ptc_ckpt_hosts_options ho;
    ptc_ckpt_hosts_options_init(&ho);
    ho.replicas = j->replicas;
    if ((rc = ptc_transport_agree(&p->t, rc, "test save")) == PTC_OK)
        rc = ptc_ckpt_hosts_save_over(&p->t, p->rank, s, j->save_l,
                                      j->save_l == j->xl ? NULL : j->rules, &r, 1,
                                      (const void *const *)bufs, &rec, &o, &ho, &p->version);
    free(bufs[0]);
    free(bufs[1]);
    return rc;
}

/* Processes 0 and 1 run dst's ranks 0 and 1; the load's bytes checked. */
static int load(proc *p, job *j, ptc_store *s)
{
    uint8_t *bufs[2] = {NULL, NULL};
    int r = p->rank;
    size_t nranks = r < 2 ? 1 : 0;
    int rc = nranks ? alloc_rank(j->dst, r, bufs) : PTC_OK;
    ptc_reshard_hosts_result res;
    if (rc == PTC_OK)
        rc = ptc_reshard_hosts_load(&p->t, p->rank, s, j->version, j->dst, &r, nranks,
                                    (void *const *)bufs, &res);
    if (rc == PTC_OK) {
        p->version = res.version;
        if (nranks)
            rc = rank_bytes(j->dst, r, j->seed, bufs, false);
    }
    free(bufs[0]);
    free(bufs[1]);
    return rc;
}

static int body(proc *p)
{
    job *j = (job *)p->arg;
    ptc_store *s = j->s[p->rank];
    p->t.allgather = counted_allgather;
    p->t.broadcast = counted_broadcast;
    n_gathers = n_broadcasts = 0;
    n_bytes = 0;
    ptc_reshard_hosts_version hv;
    int rc = PTC_OK;
    switch (j->mode) {
    case SAVE:
        rc = save(p, j, s);
        break;
    case LOAD:
        rc = load(p, j, s);
        break;
    case PICK:
        rc = ptc_reshard_hosts_pick(&p->t, p->rank, s, 0, &p->version);
        break;
    case OPEN:
        if ((rc = ptc_reshard_hosts_version_open(&p->t, s, j->version, NULL, NULL, false,
                                                 &hv)) == PTC_OK)
            ptc_reshard_hosts_version_close(&hv);
        break;
    case PICK_OPEN:
        rc = ptc_reshard_hosts_pick_open(&p->t, p->rank, s, 0, true, &p->version, &hv);
        if (rc == PTC_OK) {
            j->opened[p->rank] = hv.layout != NULL;
            j->has_rec[p->rank] = hv.has_rec;
            j->step[p->rank] = hv.has_rec ? (int64_t)hv.rec.step : -1;
            ptc_reshard_hosts_version_close(&hv);
        }
        break;
    }
    j->c[p->rank] = (count){n_gathers, n_broadcasts, n_bytes};
    j->took[p->rank] = p->version;
    return rc;
}

/* Run @p mode on every process: every one succeeds with version @p want
 * (0: not checked). */
static void run_ok(job *j, enum mode mode, uint64_t want)
{
    proc ps[NP];
    j->mode = mode;
    run(ps, NP, body, j);
    for (int p = 0; p < NP; p++) {
        if (ps[p].rc != PTC_OK)
            fail_msg("mode %d, process %d: %s", (int)mode, p, ps[p].msg);
        if (want)
            assert_int_equal(j->took[p], want);
    }
}

static void job_open(job *j)
{
    memset(j, 0, sizeof *j);
    for (int h = 0; h < NP; h++) {
        snprintf(j->dir[h], sizeof j->dir[h], "/tmp/ptc_rhosts_XXXXXX");
        assert_non_null(mkdtemp(j->dir[h]));
        assert_int_equal(ptc_store_open(&j->s[h], j->dir[h], PTC_STORE_CREATE), PTC_OK);
    }
    assert_int_equal(ptc_rules_parse(&j->rules, RULES, strlen(RULES), "rules"), PTC_OK);
    ptc_config cfg;
    assert_int_equal(ptc_config_parse(&cfg, "tp=3"), PTC_OK);
    assert_int_equal(ptc_layout_create(&j->cl, TENSORS, 2, j->rules, &cfg), PTC_OK);
    assert_int_equal(ptc_config_parse(&cfg, "tp=2"), PTC_OK);
    assert_int_equal(ptc_layout_create(&j->dst, TENSORS, 2, j->rules, &cfg), PTC_OK);
    ptc_piece pc[2 * NP];
    ptc_layout_explicit_shard sh[2 * NP];
    memset(pc, 0, sizeof pc);
    memset(sh, 0, sizeof sh);
    for (int r = 0; r < NP; r++) {
        ptc_piece *w = &pc[2 * r], *b = &pc[2 * r + 1];
        w->box.ndim = 2;
        w->box.lo[0] = 2 * r;
        w->box.hi[0] = 2 * r + 2;
        w->box.hi[1] = 4;
        w->local_stride[0] = 4;
        w->local_stride[1] = 1;
        b->box.ndim = 1;
        b->box.hi[0] = 5;
        b->local_stride[0] = 1;
        sh[2 * r] = (ptc_layout_explicit_shard){
            .tensor = 0, .rank = r, .ndim = 2, .shape = {2, 4}, .pieces = w, .npieces = 1};
        sh[2 * r + 1] = (ptc_layout_explicit_shard){
            .tensor = 1, .rank = r, .ndim = 1, .shape = {5}, .pieces = b, .npieces = 1};
    }
    assert_int_equal(ptc_layout_create_explicit(&j->xl, TENSORS, 2, NP, sh, 2 * NP), PTC_OK);
}

static void job_close(job *j)
{
    char cmd[128];
    for (int h = 0; h < NP; h++) {
        ptc_store_close(j->s[h]);
        snprintf(cmd, sizeof cmd, "rm -rf %s", j->dir[h]);
        assert_int_equal(system(cmd), 0);
    }
    ptc_layout_destroy(j->xl);
    ptc_layout_destroy(j->cl);
    ptc_layout_destroy(j->dst);
    ptc_rules_destroy(j->rules);
}

static void save_ok(job *j, const ptc_layout *l, int replicas, uint32_t seed, uint64_t version)
{
    j->save_l = l;
    j->replicas = replicas;
    j->seed = seed;
    run_ok(j, SAVE, version);
}

/* ---- the warning of a fallback ------------------------------------------------------ */

static char warned[512];
static int nwarned;

static void on_log(int level, const char *msg, void *user)
{
    (void)user;
    if (level == PTC_LOG_WARN) { /* process 0's alone */
        snprintf(warned, sizeof warned, "%s", msg);
        nwarned++;
    }
}

/* ---- the collectives of a load ------------------------------------------------------ */

/* The counts of @p mode on each process, with version @p version asked
 * for and data @p seed expected, into @p out. */
static void counted(job *j, enum mode mode, uint64_t version, uint32_t seed, uint64_t took,
                    count *out)
{
    j->version = version;
    j->seed = seed;
    run_ok(j, mode, mode == OPEN ? 0u : took);
    memcpy(out, j->c, sizeof j->c);
}

/* A load of version 0 taking version @p took (data @p seed): its
 * collectives on every process are the pick's and those of a load of
 * @p took named, less @p opens openings of @p took. */
static void load_counts(job *j, uint64_t took, uint32_t seed, int opens)
{
    count pick[NP], named[NP], open[NP], picked[NP];
    counted(j, PICK, 0, seed, took, pick);
    counted(j, LOAD, took, seed, took, named);
    counted(j, OPEN, took, seed, took, open);
    counted(j, LOAD, 0, seed, took, picked);
    for (int p = 0; p < NP; p++) {
        assert_true(open[p].gathers > 0 && open[p].bytes > 0);
        if (picked[p].gathers != pick[p].gathers + named[p].gathers - opens * open[p].gathers ||
            picked[p].bytes != pick[p].bytes + named[p].bytes - opens * open[p].bytes ||
            picked[p].broadcasts !=
                pick[p].broadcasts + named[p].broadcasts - opens * open[p].broadcasts)
            fail_msg("process %d: the load of version 0 made %ld all-gathers (%llu bytes) "
                     "and %ld broadcasts; the pick %ld (%llu), %ld, a load of version %llu "
                     "%ld (%llu), %ld, an opening of it %ld (%llu), %ld; %d opening(s) "
                     "expected saved",
                     p, picked[p].gathers, (unsigned long long)picked[p].bytes,
                     picked[p].broadcasts, pick[p].gathers,
                     (unsigned long long)pick[p].bytes, pick[p].broadcasts,
                     (unsigned long long)took, named[p].gathers,
                     (unsigned long long)named[p].bytes, named[p].broadcasts,
                     open[p].gathers, (unsigned long long)open[p].bytes, open[p].broadcasts,
                     opens);
    }
}

static void test_explicit_opened_once(void **state)
{
    (void)state;
    job j;
    job_open(&j);
    save_ok(&j, j.xl, 1, 1, 1); /* version 1: each host's ranks also on the next host */
    save_ok(&j, j.xl, 0, 2, 2); /* version 2: no replicas */

    /* every host present: version 2 is whole; the pick's opening is the load's */
    load_counts(&j, 2, 2, 1);
    /* the version handed over as opened: its own layout, the record asked for */
    j.version = 0;
    run_ok(&j, PICK_OPEN, 2);
    for (int p = 0; p < NP; p++) {
        assert_true(j.opened[p] && j.has_rec[p]);
        assert_int_equal(j.step[p], 102);
    }

    /* host 2's store lost: version 2 lacks rank 2, version 1 holds it on
     * host 0 (host 2's replica); the load takes version 1, said once */
    ptc_store_close(j.s[2]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", j.dir[2]);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ptc_store_open(&j.s[2], j.dir[2], PTC_STORE_CREATE), PTC_OK);
    ptc_log_set(on_log, NULL, PTC_LOG_WARN);
    nwarned = 0;
    load_counts(&j, 1, 1, 1);
    ptc_log_set(NULL, NULL, PTC_LOG_ERROR);
    assert_int_equal(nwarned, 2); /* the pick's and the load's */
    assert_string_equal(warned, "version 2 has no copy of 1 saved rank on the hosts present; "
                                "taking version 1, the newest one they hold whole");
    run_ok(&j, PICK_OPEN, 1);
    for (int p = 0; p < NP; p++)
        assert_true(j.opened[p] && j.has_rec[p] && j.step[p] == 101);

    /* version 2 asked for: its lost rank named on every process */
    proc ps[NP];
    j.mode = LOAD;
    j.version = 2;
    run(ps, NP, body, &j);
    all_fail(ps, NP, PTC_E_NOTFOUND,
             "load across hosts failed on process 0: version 2: the shards of 1 saved rank "
             "(2) are on no host present: lost with every copy (save with more --replicas)");
    job_close(&j);
}

static void test_configuration_not_opened(void **state)
{
    (void)state;
    job j;
    job_open(&j);
    save_ok(&j, j.cl, 0, 3, 1);
    /* the pick reads the inventories: nothing to hand over */
    load_counts(&j, 1, 3, 0);
    j.version = 0;
    run_ok(&j, PICK_OPEN, 1);
    for (int p = 0; p < NP; p++)
        assert_false(j.opened[p] || j.has_rec[p]);
    job_close(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_explicit_opened_once),
        cmocka_unit_test(test_configuration_not_opened),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
