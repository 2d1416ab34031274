/* The store's integrity and its writer lock (issue 33):
 *  - metadata records are sealed: a changed byte of a tensor, shard,
 *    version or catalog record, a record that vanished, and a version
 *    record that moved are each a clean PTC_E_STORE, never a different
 *    answer; values liblmdb hands out past the file's end are refused;
 *  - a reused extent is read back before a new version references it: a
 *    save over a rotted parent block writes the shard again;
 *  - writers queue for the lock with a bound; a queued writer gets it from
 *    a holder working in slices (gc) before the holder's next slice; the
 *    lock held by a child forked from a holder that exited names the child;
 *  - listing datasets of a read-only store without any is an empty list.
 * Needs nothing but a temporary directory. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <lmdb.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ptc/ckpt.h"
#include "ptc/layout.h"
#include "ptc/rules.h"
#include "ptc/store.h"
#include "ptc/transport.h"
#include "ptc/store/store_internal.h"

/* ---- helpers ------------------------------------------------------------------- */

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(p);
}

static char *mktmp(void)
{
    char *t = strdup("/tmp/ptc_integrity_XXXXXX");
    assert_non_null(mkdtemp(t));
    return t;
}

static void rmrf(char *p)
{
    nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(p);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define NT 3
static const char *const names[NT] = {"model.q_proj.weight", "model.norm.weight", "lm_head"};

/* A version of NT F32 tensors [4, 1000] on one rank; tensor t's element i
 * holds t * 10000 + i + salt. */
static uint64_t put_version(ptc_store *s, int salt)
{
    ptc_store_write_options o = {.world_size = 1, .config = "dp=1,tp=1,pp=1", .step = "7"};
    ptc_store_writer *w;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    assert_int_equal(ptc_store_writer_set_metadata(w, "format", "pt"), PTC_OK);
    float buf[4000];
    int64_t shape[2] = {4, 1000};
    for (uint32_t t = 0; t < NT; t++) {
        uint32_t idx;
        assert_int_equal(ptc_store_writer_add_tensor(w, names[t], strlen(names[t]),
                                                     PTC_DTYPE_F32, 2, shape, "", &idx),
                         PTC_OK);
        for (int i = 0; i < 4000; i++)
            buf[i] = (float)(t * 10000 + (uint32_t)i + (uint32_t)salt);
        ptc_piece p = {.box = {.ndim = 2, .lo = {0, 0}, .hi = {4, 1000}},
                       .local_stride = {1000, 1}};
        assert_int_equal(ptc_store_shard_put(w, idx, 0, 2, shape, &p, 1, buf, sizeof buf),
                         PTC_OK);
    }
    uint64_t v;
    assert_int_equal(ptc_store_writer_commit(w, &v), PTC_OK);
    ptc_store_writer_destroy(w);
    return v;
}

/* Flip bit @p bit of the first byte of the first occurrence of @p needle
 * (@p n bytes) in data.mdb at or after byte @p from; returns its offset. */
static long flip_in_mdb(const char *dir, const void *needle, size_t n, long from, int bit)
{
    char p[512];
    snprintf(p, sizeof p, "%s/meta/data.mdb", dir);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    uint8_t *b = malloc((size_t)size);
    fseek(f, 0, SEEK_SET);
    assert_int_equal(fread(b, 1, (size_t)size, f), (size_t)size);
    long at = -1;
    for (long i = from; i + (long)n <= size && at < 0; i++)
        if (memcmp(b + i, needle, n) == 0)
            at = i;
    assert_true(at >= 0);
    b[at] ^= (uint8_t)(1u << bit);
    fseek(f, at, SEEK_SET);
    assert_int_equal(fwrite(b + at, 1, 1, f), 1);
    fclose(f);
    free(b);
    return at;
}

static void expect_store_error(int rc, const char *words)
{
    assert_int_equal(rc, PTC_E_STORE);
    const char *m = ptc_last_error();
    if (!strstr(m, words))
        fail_msg("error '%s' lacks '%s'", m, words);
}

/* ---- sealed records ------------------------------------------------------------- */

/* q_proj -> q]proj, at each place the name lies in data.mdb (live records
 * and pages LMDB keeps free): every flip is refused (the reader, info and
 * verify of the version that holds it) or changes nothing any reader sees;
 * the live copies are refused. */
static void test_changed_tensor_name(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    put_version(s, 0);
    put_version(s, 1);
    ptc_store_close(s);
    int refused = 0, places = 0;
    for (long at = 0;; at++, places++) {
        char *copy = mktmp(), cmd[512];
        snprintf(cmd, sizeof cmd, "cp -r '%s/meta' '%s/packs' '%s/'", dir, dir, copy);
        assert_int_equal(system(cmd), 0);
        char p[600];
        snprintf(p, sizeof p, "%s/meta/data.mdb", copy);
        FILE *f = fopen(p, "rb");
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        /* '_' (0x5f) -> ']' (0x5d): the flip */
        long found = -1;
        uint8_t *b = malloc((size_t)size);
        f = fopen(p, "rb");
        assert_int_equal(fread(b, 1, (size_t)size, f), (size_t)size);
        fclose(f);
        for (long i = at; i + 6 <= size && found < 0; i++)
            if (memcmp(b + i, "q_proj", 6) == 0)
                found = i;
        free(b);
        if (found < 0) {
            rmrf(copy);
            break;
        }
        at = flip_in_mdb(copy, "q_proj", 6, found, 1);
        assert_int_equal(ptc_store_open(&s, copy, 0), PTC_OK);
        int bad = 0;
        for (uint64_t v = 1; v <= 2; v++) {
            ptc_store_reader *r;
            int rc = ptc_store_reader_open(&r, s, v);
            if (rc == PTC_OK) {
                size_t t;
                assert_int_equal(ptc_store_reader_find(r, names[0], strlen(names[0]), &t),
                                 PTC_OK);
                ptc_store_reader_close(r);
                continue;
            }
            expect_store_error(rc, "fails its checksum");
            char *json;
            assert_int_equal(ptc_store_info_json(s, v, 0, &json), PTC_E_STORE);
            bad++;
        }
        assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL),
                         bad ? PTC_E_STORE : PTC_OK);
        refused += bad;
        ptc_store_close(s);
        rmrf(copy);
    }
    /* each version's record is live once, LMDB's free pages may hold more */
    assert_true(places >= 2);
    assert_int_equal(refused, 2);
    rmrf(dir);
}

/* The version record's metadata (the imported __metadata__, a training
 * record): "pt" -> "pv" is refused. */
static void test_changed_version_record(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    put_version(s, 0);
    ptc_store_close(s);
    flip_in_mdb(dir, "{\"format\":\"pt\"}", 15, 0, 2); /* '{' -> '\x7f' */
    assert_int_equal(ptc_store_open(&s, dir, 0), PTC_OK);
    ptc_version_info *vi;
    size_t n;
    expect_store_error(ptc_store_versions(s, &vi, &n), "version record of version 1");
    ptc_store_reader *r;
    expect_store_error(ptc_store_reader_open(&r, s, 1), "fails its checksum");
    ptc_store_close(s);
    rmrf(dir);
}

/* Records that vanish: a shard record (the version's digest), the newest
 * version record (the summary's newest), an older version record (the
 * summary's count). */
static int del_key(MDB_txn *txn, void *user)
{
    const MDB_val *k = user;
    MDB_dbi dbi;
    const char *db = k->mv_size == 16 ? PTC_DB_SHARDS : PTC_DB_VERSIONS;
    if (mdb_dbi_open(txn, db, 0, &dbi) || mdb_del(txn, dbi, (MDB_val *)k, NULL))
        return PTC_E_STORE;
    return PTC_OK;
}

static void test_vanished_records(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    put_version(s, 0);
    put_version(s, 1);
    put_version(s, 2);
    uint8_t key[16];
    ptc_key_shard(key, 3, 1, 0);
    MDB_val k = {16, key};
    assert_int_equal(ptc_store_write_txn(s, del_key, &k), PTC_OK);
    ptc_store_reader *r;
    expect_store_error(ptc_store_reader_open(&r, s, 3), "sealed 3 and 3");
    ptc_key_version(key, 3);
    k.mv_size = 8;
    assert_int_equal(ptc_store_write_txn(s, del_key, &k), PTC_OK);
    uint64_t latest;
    expect_store_error(ptc_store_latest(s, &latest), "the version summary says 3");
    expect_store_error(ptc_store_reader_open(&r, s, 0), "the version summary says 3");
    ptc_store_close(s);
    rmrf(dir);
}

/* A value whose size a corrupt page inflated past the file's end is
 * refused before anything reads it. */
static void test_value_outside_file(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    put_version(s, 0);
    MDB_txn *txn;
    assert_int_equal(mdb_txn_begin(ptc_store_env(s), NULL, MDB_RDONLY, &txn), 0);
    uint8_t key[8];
    ptc_key_version(key, 1);
    MDB_val k = {8, key}, v;
    assert_int_equal(mdb_get(txn, s->dbi_versions, &k, &v), 0);
    assert_int_equal(ptc_store_val_check(s, NULL, &v, "version record"), PTC_OK);
    MDB_val big = {(size_t)1 << 30, v.mv_data};
    expect_store_error(ptc_store_val_check(s, NULL, &big, "version record"),
                       "outside the database file");
    mdb_txn_abort(txn);
    ptc_store_close(s);
    rmrf(dir);
}

/* ---- data.mdb's pages ------------------------------------------------------------------ */

static uint64_t rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A copy of @p dir with @p n bytes at @p off of data.mdb replaced by the
 * same bytes XOR @p x (n <= 8); its directory, to free. */
static char *damage(const char *dir, long off, uint64_t x, int n)
{
    char *copy = mktmp(), cmd[512], p[600];
    snprintf(cmd, sizeof cmd, "cp -r '%s/meta' '%s/packs' '%s/'", dir, dir, copy);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/meta/data.mdb", copy);
    int fd = open(p, O_RDWR);
    uint8_t b[8];
    assert_int_equal(pread(fd, b, (size_t)n, off), n);
    for (int i = 0; i < n; i++)
        b[i] ^= (uint8_t)(x >> (8 * i));
    assert_int_equal(pwrite(fd, b, (size_t)n, off), n);
    close(fd);
    return copy;
}

static void expect_open_damaged(const char *dir, const char *words)
{
    ptc_store *s;
    int rc = ptc_store_open(&s, dir, 0);
    if (rc == PTC_OK)
        ptc_store_close(s);
    expect_store_error(rc, words);
}

/* Damage liblmdb reads without checking, found before it reads: meta pages
 * that do not pair up (liblmdb would silently open an older snapshot), a
 * page size of 0, a tree page whose header names another page, a leaf node
 * turned into a sub-database node (liblmdb would follow garbage). */
static void test_mdb_pages(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    put_version(s, 0);
    put_version(s, 1);
    ptc_store_close(s);
    char p[600];
    snprintf(p, sizeof p, "%s/meta/data.mdb", dir);
    int fd = open(p, O_RDONLY);
    uint8_t m0[160], m1[160];
    assert_int_equal(pread(fd, m0, sizeof m0, 0), (ssize_t)sizeof m0);
    uint64_t psize = rd_le(m0 + 16 + 24, 4);
    assert_int_equal(pread(fd, m1, sizeof m1, (off_t)psize), (ssize_t)sizeof m1);
    uint64_t t0 = rd_le(m0 + 16 + 128, 8), t1 = rd_le(m1 + 16 + 128, 8);
    const uint8_t *cur = t0 > t1 ? m0 : m1;
    long cur_off = t0 > t1 ? 0 : (long)psize;
    uint64_t main_root = rd_le(cur + 16 + 72 + 40, 8);
    close(fd);
    assert_true(t0 + 1 == t1 || t1 + 1 == t0);

    /* the newest meta page's txnid lowered: liblmdb would take the other */
    char *c = damage(dir, cur_off + 16 + 128, 1ull << 40, 8);
    expect_open_damaged(c, "transaction ids do not pair up");
    rmrf(c);
    c = damage(dir, 16 + 24, psize, 4); /* meta 0's page size 0 */
    expect_open_damaged(c, "bad page size");
    rmrf(c);
    c = damage(dir, (long)(main_root * psize), 1, 1); /* its header's page number */
    expect_open_damaged(c, "names another page");
    rmrf(c);
    /* the node of the ptc.shards database in the main tree: flags F_SUBDATA
     * -> F_SUBDATA|F_BIGDATA (a page number read from the sub-db record);
     * and a shard record's node given F_SUBDATA */
    uint8_t *page = malloc(psize);
    fd = open(p, O_RDONLY);
    assert_int_equal(pread(fd, page, psize, (off_t)(main_root * psize)), (ssize_t)psize);
    uint8_t *k = memmem(page, psize, "ptc.shards", 10);
    assert_non_null(k);
    long node = (long)(main_root * psize) + (k - page) - 8;
    uint64_t shards_root = rd_le(k + 10 + 40, 8);
    assert_int_equal(pread(fd, page, psize, (off_t)(shards_root * psize)), (ssize_t)psize);
    uint64_t first = rd_le(page + 16, 2); /* the first node of a shard page */
    close(fd);
    c = damage(dir, node + 4, 0x01, 1);
    expect_open_damaged(c, "page");
    rmrf(c);
    if (rd_le(page + 10, 2) & 0x02) { /* a leaf: records are its nodes */
        c = damage(dir, (long)(shards_root * psize + first) + 4, 0x02, 1);
        expect_open_damaged(c, "a sub-database node where none can be");
        rmrf(c);
    }
    free(page);
    /* intact, it opens (and verifies) */
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CHECK), PTC_OK);
    assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL), PTC_OK);
    ptc_store_close(s);
    rmrf(dir);
}

/* ---- a reused extent is checked ---------------------------------------------------- */

static void test_reuse_rotted_extent(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    static const char rules_text[] = "match * tp=replicate pp=first\n";
    ptc_rules *rules;
    assert_int_equal(ptc_rules_parse(&rules, rules_text, strlen(rules_text), NULL), PTC_OK);
    ptc_config cfg;
    assert_int_equal(ptc_config_parse(&cfg, "dp=1,tp=1,pp=1"), PTC_OK);
    /* 2.5 MiB: three blocks */
    enum { N = 655360 };
    ptc_tensor_info ti = {.name = "w", .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {N}};
    ptc_layout *l;
    assert_int_equal(ptc_layout_create(&l, &ti, 1, rules, &cfg), PTC_OK);
    float *buf = malloc(N * sizeof *buf);
    for (int i = 0; i < N; i++)
        buf[i] = (float)i * 0.5f;
    const void *bufs[1] = {buf};
    int ranks[1] = {0};
    ptc_transport t;
    ptc_transport_self(&t);
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    ptc_ckpt_record rec = {.step = 1};
    uint64_t v1, v2, v3;
    assert_int_equal(ptc_ckpt_save_over(&t, s, l, rules, ranks, 1, bufs, &rec, &o, &v1), PTC_OK);
    /* a bit of its second block rots on disk */
    char pack[512];
    snprintf(pack, sizeof pack, "%s/packs/v%llu/rank-0.pack", dir, (unsigned long long)v1);
    int fd = open(pack, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    off_t at = 64 + (1 << 20) + 12345;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
    assert_int_equal(ptc_store_verify(s, v1, NULL, NULL), PTC_E_CHECKSUM);
    /* the same bytes again: the parent's extent matches by its checksums,
     * but reads back wrong, so the shard is written again */
    rec.step = 2;
    assert_int_equal(ptc_ckpt_save_over(&t, s, l, rules, ranks, 1, bufs, &rec, &o, &v2), PTC_OK);
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, v2), PTC_OK);
    assert_int_equal(ptc_store_reader_version(r)->stored_bytes, (uint64_t)N * 4);
    ptc_store_reader_close(r);
    assert_int_equal(ptc_store_verify(s, v2, NULL, NULL), PTC_OK);
    float *got = calloc(N, sizeof *got);
    void *gots[1] = {got};
    assert_int_equal(ptc_ckpt_load_local(s, v2, l, ranks, 1, gots, NULL, NULL, NULL), PTC_OK);
    assert_memory_equal(got, buf, N * sizeof *buf);
    /* and a sound parent is referenced, not copied */
    rec.step = 3;
    assert_int_equal(ptc_ckpt_save_over(&t, s, l, rules, ranks, 1, bufs, &rec, &o, &v3), PTC_OK);
    assert_int_equal(ptc_store_reader_open(&r, s, v3), PTC_OK);
    assert_int_equal(ptc_store_reader_version(r)->stored_bytes, 0);
    ptc_store_reader_close(r);
    free(got);
    free(buf);
    ptc_layout_destroy(l);
    ptc_rules_destroy(rules);
    ptc_store_close(s);
    rmrf(dir);
}

/* ---- the writer lock -------------------------------------------------------------- */

/* A child takes the lock, says so, holds it @p hold_ms, releases and exits. */
static pid_t hold_lock(const char *dir, int hold_ms)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        ptc_store *cs;
        int fd;
        if (ptc_store_open(&cs, dir, 0) || ptc_store_lock(cs, &fd))
            _exit(2);
        if (write(p[1], "L", 1) != 1)
            _exit(3);
        usleep((useconds_t)hold_ms * 1000);
        ptc_store_unlock(cs, fd);
        ptc_store_close(cs);
        _exit(0);
    }
    close(p[1]);
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);
    close(p[0]);
    return pid;
}

static void reap(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_writer_waits(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    /* a wait longer than the hold: the writer gets the lock */
    pid_t pid = hold_lock(dir, 300);
    assert_int_equal(ptc_store_set_lock_timeout(s, 20000), PTC_OK);
    double t0 = now_s();
    put_version(s, 0);
    double waited = now_s() - t0;
    reap(pid);
    assert_true(waited > 0.2 && waited < 10);
    /* a wait shorter than the hold: PTC_E_BUSY naming the holder and the wait */
    pid = hold_lock(dir, 1500);
    assert_int_equal(ptc_store_set_lock_timeout(s, 200), PTC_OK);
    ptc_store_writer *w;
    ptc_store_write_options o = {.world_size = 1};
    t0 = now_s();
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_E_BUSY);
    assert_true(now_s() - t0 >= 0.19);
    char want[96];
    snprintf(want, sizeof want, "locked by another process (pid %ld); waited 0.2 s", (long)pid);
    if (!strstr(ptc_last_error(), want))
        fail_msg("'%s' lacks '%s'", ptc_last_error(), want);
    assert_int_equal(ptc_store_gc(s, NULL), PTC_E_BUSY);
    reap(pid);
    assert_int_equal(ptc_store_gc(s, NULL), PTC_OK);
    assert_int_equal(ptc_store_set_lock_timeout(s, -1), PTC_E_INVAL);
    ptc_store_close(s);
    rmrf(dir);
}

/* The handover gc relies on: B holds the lock, C queues; B sees C waiting,
 * releases and queues again; C holds it before B does. */
static void test_queued_writer_first(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    int fd;
    assert_int_equal(ptc_store_lock(s, &fd), PTC_OK);
    assert_false(ptc_store_lock_wanted(fd));
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        ptc_store *cs;
        int cfd;
        if (ptc_store_open(&cs, dir, 0) || ptc_store_lock(cs, &cfd))
            _exit(2);
        /* holding it: tell the time, keep it a while */
        double t = now_s();
        if (write(p[1], &t, sizeof t) != sizeof t)
            _exit(3);
        usleep(200000);
        ptc_store_unlock(cs, cfd);
        ptc_store_close(cs);
        _exit(0);
    }
    close(p[1]);
    bool seen = false;
    for (int i = 0; i < 2000 && !seen; i++) {
        seen = ptc_store_lock_wanted(fd);
        if (!seen)
            usleep(1000);
    }
    assert_true(seen);
    assert_int_equal(ptc_store_relock(s, &fd), PTC_OK); /* back once the child is done */
    double back = now_s(), child_had;
    assert_int_equal(read(p[0], &child_had, sizeof child_had), (ssize_t)sizeof child_had);
    assert_true(child_had < back);
    assert_true(back - child_had >= 0.19); /* we waited for its whole hold */
    close(p[0]);
    reap(pid);
    ptc_store_unlock(s, fd);
    ptc_store_close(s);
    rmrf(dir);
}

/* gc under a stream of saves: every save succeeds (none waits for a whole
 * gc), gc removes what no version references, the store verifies. */
static void test_gc_beside_saves(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    put_version(s, 0);
    /* debris for gc to chew on: 300 pack directories of aborted writers */
    for (int i = 0; i < 300; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/packs/v%d", dir, 1000 + i);
        assert_int_equal(mkdir(p, 0755), 0);
        snprintf(p, sizeof p, "%s/packs/v%d/rank-0.pack", dir, 1000 + i);
        int fd = open(p, O_CREAT | O_WRONLY, 0644);
        assert_true(fd >= 0 && write(fd, "x", 1) == 1);
        close(fd);
    }
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ptc_store *cs;
        ptc_store_gc_stats st;
        if (ptc_store_open(&cs, dir, 0))
            _exit(2);
        for (int i = 0; i < 5; i++)
            if (ptc_store_gc(cs, &st))
                _exit(3);
        ptc_store_close(cs);
        _exit(0);
    }
    for (int i = 1; i <= 10; i++) {
        put_version(s, i);
        char p[64];
        snprintf(p, sizeof p, "%d", i); /* keep the newest two */
        if (i >= 2)
            assert_int_equal(ptc_store_version_delete(s, (uint64_t)i - 1), PTC_OK);
    }
    reap(pid);
    ptc_store_gc_stats st;
    assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
    assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL), PTC_OK);
    char p[600];
    snprintf(p, sizeof p, "%s/packs/v1000", dir);
    assert_int_equal(access(p, F_OK), -1);
    ptc_version_info *vi;
    size_t n;
    assert_int_equal(ptc_store_versions(s, &vi, &n), PTC_OK);
    assert_int_equal(n, 2);
    ptc_store_versions_free(vi, n);
    ptc_store_close(s);
    rmrf(dir);
}

/* A writer that forked and exited with the lock held: the lock lives on in
 * the child; the error names the child, never the dead pid. */
static void test_lock_of_forked_child(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    int p[2], stop[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(stop), 0);
    pid_t a = fork();
    assert_true(a >= 0);
    if (a == 0) {
        ptc_store *cs;
        int fd;
        if (ptc_store_open(&cs, dir, 0) || ptc_store_lock(cs, &fd))
            _exit(2);
        pid_t c = fork(); /* inherits the lock file's open description */
        if (c == 0) {
            char ch;
            if (read(stop[0], &ch, 1) < 0)
                _exit(3);
            _exit(0);
        }
        if (write(p[1], &c, sizeof c) != sizeof c)
            _exit(3);
        _exit(0); /* exits holding the lock: no unlock */
    }
    close(p[1]);
    pid_t c;
    assert_int_equal(read(p[0], &c, sizeof c), (ssize_t)sizeof c);
    reap(a);
    assert_int_equal(ptc_store_set_lock_timeout(s, 0), PTC_OK);
    ptc_store_writer *w;
    ptc_store_write_options o = {.world_size = 1};
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_E_BUSY);
    char want[64], dead[64];
    snprintf(want, sizeof want, "(pid %ld)", (long)c);
    snprintf(dead, sizeof dead, "(pid %ld)", (long)a);
    if (!strstr(ptc_last_error(), want) || strstr(ptc_last_error(), dead)) {
        kill(c, SIGKILL); /* it holds the lock and the test's output */
        fail_msg("'%s' should name %s, not %s", ptc_last_error(), want, dead);
    }
    assert_int_equal(write(stop[1], "x", 1), 1);
    int st;
    waitpid(c, &st, 0); /* not our child: reaped by init; wait for the lock */
    assert_int_equal(ptc_store_set_lock_timeout(s, 10000), PTC_OK);
    put_version(s, 0);
    close(p[0]);
    close(stop[0]);
    close(stop[1]);
    ptc_store_close(s);
    rmrf(dir);
}

/* ---- reading writes nothing ---------------------------------------------------------- */

static void test_readonly_listing(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    put_version(s, 0);
    ptc_store_close(s);
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_READONLY), PTC_OK);
    ptc_store_dataset_info *d;
    size_t n = 9;
    assert_int_equal(ptc_store_datasets(s, &d, &n), PTC_OK);
    assert_int_equal(n, 0);
    ptc_store_free(d);
    assert_int_equal(ptc_store_verify(s, PTC_STORE_ALL_VERSIONS, NULL, NULL), PTC_OK);
    ptc_store_close(s);
    /* a writable handle lists without creating the catalog */
    assert_int_equal(ptc_store_open(&s, dir, 0), PTC_OK);
    assert_int_equal(ptc_store_datasets(s, &d, &n), PTC_OK);
    ptc_store_free(d);
    MDB_dbi dbi;
    assert_int_equal(ptc_store_dbi_find(s, PTC_DB_DATASETS, &dbi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_store_dataset_counts_open(s), PTC_OK);
    assert_int_equal(ptc_store_dbi_find(s, PTC_STORE_DB_COUNTS, &dbi), PTC_E_NOTFOUND);
    ptc_store_close(s);
    rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_changed_tensor_name),
        cmocka_unit_test(test_changed_version_record),
        cmocka_unit_test(test_vanished_records),
        cmocka_unit_test(test_value_outside_file),
        cmocka_unit_test(test_mdb_pages),
        cmocka_unit_test(test_reuse_rotted_extent),
        cmocka_unit_test(test_writer_waits),
        cmocka_unit_test(test_queued_writer_first),
        cmocka_unit_test(test_gc_beside_saves),
        cmocka_unit_test(test_lock_of_forked_child),
        cmocka_unit_test(test_readonly_listing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
