/* Store maintenance: verify (re-check checksums), gc (remove unreferenced
 * pack files), and the JSON description used by `ptc info --json`. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"
#include "ptc/store/store_ranks.h"
#include "base/util_internal.h"

/* A (pack version, pack rank, offset) triple; offset UINT64_MAX for a file. */
typedef struct extent_key {
    uint64_t version;
    uint32_t rank;
    uint64_t offset;
} extent_key;

typedef struct key_set {
    extent_key *k;
    size_t n, cap, sorted;
} key_set;

static int cmp_key(const void *a, const void *b)
{
    const extent_key *x = a, *y = b;
    if (x->version != y->version)
        return x->version < y->version ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static bool set_has(const key_set *s, const extent_key *k)
{
    return s->sorted && bsearch(k, s->k, s->sorted, sizeof *k, cmp_key) != NULL;
}

static int set_add(key_set *s, const extent_key *k)
{
    PTC_TRY(ptc_grow((void **)&s->k, &s->cap, s->n + 1, sizeof *s->k));
    s->k[s->n++] = *k;
    return PTC_OK;
}

static void set_sort(key_set *s)
{
    if (s->n)
        qsort(s->k, s->n, sizeof *s->k, cmp_key);
    size_t j = 0;
    for (size_t i = 0; i < s->n; i++)
        if (j == 0 || cmp_key(&s->k[j - 1], &s->k[i]) != 0)
            s->k[j++] = s->k[i];
    s->n = j;
    s->sorted = j;
}

/* Versions selected by @p version: 0 newest, ALL every one, else exactly it. */
static int select_versions(ptc_store *s, uint64_t version, uint64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    ptc_version_info *vi;
    size_t nv;
    PTC_TRY(ptc_store_versions(s, &vi, &nv));
    uint64_t *v = ptc_malloc((nv ? nv : 1) * sizeof *v);
    if (!v) {
        ptc_store_versions_free(vi, nv);
        return PTC_E_NOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < nv; i++)
        if (version == PTC_STORE_ALL_VERSIONS || vi[i].version == version ||
            (version == 0 && i + 1 == nv))
            v[k++] = vi[i].version;
    ptc_store_versions_free(vi, nv);
    if (k == 0 && version != PTC_STORE_ALL_VERSIONS) {
        ptc_free(v);
        if (version == 0)
            return ptc_error_set(PTC_E_NOTFOUND, "store %s has no versions", s->dir);
        return ptc_error_set(PTC_E_NOTFOUND, "version %llu not found in store %s",
                             (unsigned long long)version, s->dir);
    }
    *out = v;
    *n = k;
    return PTC_OK;
}

/* ---- verify ------------------------------------------------------------------------ */

/* One pass over the selected versions' data records, each extent once:
 * counting (@p total) or verifying. */
static int verify_pass(ptc_store *s, const uint64_t *vs, size_t nv, bool check,
                       ptc_progress_fn fn, void *user, uint64_t *done, uint64_t *total)
{
    key_set seen = {0};
    int rc = PTC_OK;
    for (size_t i = 0; i < nv && rc == PTC_OK; i++) {
        ptc_store_reader *r;
        if ((rc = ptc_store_reader_open(&r, s, vs[i])) < 0)
            break;
        size_t nt = ptc_store_reader_tensor_count(r);
        for (size_t t = 0; t < nt && rc == PTC_OK; t++) {
            const ptc_shard_rec *recs;
            size_t n;
            ptc_store_reader_recs(r, t, &recs, &n);
            for (size_t j = 0; j < n && rc == PTC_OK; j++) {
                const ptc_shard_rec *rec = &recs[j];
                extent_key k = {rec->pack_version, rec->pack_rank, rec->offset};
                if (rec->kind != PTC_SHARD_DATA || rec->nblocks == 0 || set_has(&seen, &k))
                    continue;
                if ((rc = set_add(&seen, &k)) < 0)
                    break;
                if (check)
                    rc = ptc_store_reader_verify_rec(r, t, rec, fn, user, done, *total);
                else
                    *total += rec->raw_length;
            }
        }
        ptc_store_reader_close(r);
        set_sort(&seen);
    }
    ptc_free(seen.k);
    return rc;
}

int ptc_store_verify(ptc_store *s, uint64_t version, ptc_progress_fn progress, void *user)
{
    uint64_t *vs;
    size_t nv;
    PTC_TRY(select_versions(s, version, &vs, &nv));
    /* every dataset too, with all versions (the catalog read checks its summary) */
    ptc_store_dataset_info *ds = NULL;
    size_t nd = 0;
    uint64_t done = 0, total = 0;
    int rc = PTC_OK;
    if (version == PTC_STORE_ALL_VERSIONS)
        rc = ptc_store_datasets(s, &ds, &nd);
    for (size_t i = 0; i < nd; i++)
        total += ds[i].bytes + 8 * (ds[i].samples + 1);
    if (rc == PTC_OK)
        rc = verify_pass(s, vs, nv, false, NULL, NULL, &done, &total);
    if (rc == PTC_OK)
        rc = verify_pass(s, vs, nv, true, progress, user, &done, &total);
    for (size_t i = 0; i < nd && rc == PTC_OK; i++)
        rc = ptc_store_dataset_verify_blocks(s, ds[i].name, progress, user, &done, total);
    ptc_store_free(ds);
    ptc_free(vs);
    return rc;
}

/* ---- gc ------------------------------------------------------------------------------ */

/* Every pack file (version, rank) a committed shard record points to, as
 * @p txn sees them. */
static int referenced_packs(ptc_store *s, MDB_txn *txn, key_set *ref)
{
    MDB_cursor *c;
    int mrc = mdb_cursor_open(txn, s->dbi_shards, &c);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    unsigned fmt;
    int rc = ptc_store_format_txn(s, txn, &fmt);
    MDB_val k, v;
    for (mrc = rc ? MDB_NOTFOUND : mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        ptc_shard_rec rec;
        memset(&rec, 0, sizeof rec);
        if ((rc = ptc_store_shard_rec_get(s, fmt, &k, &v, &rec, NULL)) < 0) {
            /* refuse to guess what a corrupt record references */
            rc = ptc_error_set(PTC_E_STORE, "gc: %s; nothing removed", ptc_last_error());
            break;
        }
        extent_key key = {rec.pack_version, rec.pack_rank, 0};
        bool data = rec.kind == PTC_SHARD_DATA;
        ptc_shard_rec_free(&rec);
        if (data && (rc = set_add(ref, &key)) < 0)
            break;
    }
    if (rc == PTC_OK && mrc != MDB_NOTFOUND)
        rc = ptc_store_mdb_error(mrc, s->dir);
    mdb_cursor_close(c);
    set_sort(ref);
    return rc;
}

/* gc works in slices: it holds the writer lock while it removes files, but
 * hands it to a writer that queues for it after each removal (a save never
 * waits longer than one removal plus, when the metadata changed meanwhile,
 * one read of the shard records), then queues again and goes on with what
 * the metadata references then. */
typedef struct gc_run {
    ptc_store *s;
    int lock_fd;
    bool recycle; /* files no reader holds go to packs/spare (ptc_store_gc_recycle) */
    int sfd;      /* packs/spare, opened at the first such file; -1 before */
    key_set ref;      /* pack files referenced, as of metadata txn `txnid` */
    uint64_t *ids;    /* dataset ids referenced, the same */
    size_t nids;
    size_t txnid;
    bool have;
    ptc_store_gc_stats st;
} gc_run;

/* The references as of now (read again only if the metadata changed). */
static int gc_refresh(gc_run *g)
{
    MDB_txn *txn;
    int mrc = mdb_txn_begin(g->s->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, g->s->dir);
    size_t id = mdb_txn_id(txn);
    int rc = PTC_OK;
    if (!g->have || id != g->txnid) {
        g->ref.n = g->ref.sorted = 0;
        ptc_free(g->ids);
        g->ids = NULL;
        g->nids = 0;
        g->have = false;
        if ((rc = referenced_packs(g->s, txn, &g->ref)) == PTC_OK &&
            (rc = ptc_store_dataset_ids(g->s, &g->ids, &g->nids)) == PTC_OK) {
            g->txnid = id;
            g->have = true;
        }
    }
    mdb_txn_abort(txn);
    return rc;
}

/* Before each removal: let a queued writer go first. */
static int gc_turn(gc_run *g)
{
    if (ptc_store_lock_wanted(g->lock_fd))
        PTC_TRY(ptc_store_relock(g->s, &g->lock_fd));
    return gc_refresh(g);
}

/* "v<N>", N canonical decimal >= 1. */
static bool parse_vdir(const char *name, uint64_t *v)
{
    if (name[0] != 'v' || name[1] < '1' || name[1] > '9')
        return false;
    uint64_t x = 0;
    for (const char *p = name + 1; *p; p++) {
        if (*p < '0' || *p > '9' || x > (UINT64_MAX - 9) / 10)
            return false;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *v = x;
    return true;
}

/* Names of the entries of directory handle @p dfd that @p keep accepts
 * (collected first: removing entries while reading a directory is
 * unspecified). */
typedef struct name_list {
    char (*v)[40];
    size_t n, cap;
} name_list;

static int list_dir(int dfd, const char *what, bool (*keep)(const char *name), name_list *out)
{
    int lfd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        int rc = ptc_error_sys(PTC_E_IO, "read %s", what);
        if (lfd >= 0)
            close(lfd);
        return rc;
    }
    int rc = PTC_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strlen(e->d_name) >= sizeof *out->v || !keep(e->d_name))
            continue;
        if ((rc = ptc_grow((void **)&out->v, &out->cap, out->n + 1, sizeof *out->v)) < 0)
            break;
        memcpy(out->v[out->n++], e->d_name, strlen(e->d_name) + 1); /* fits: checked above */
    }
    closedir(d);
    return rc;
}

/* "rank-<R>.pack", R canonical decimal <= UINT32_MAX. */
static bool parse_rank_file(const char *n, uint32_t *out)
{
    if (strncmp(n, "rank-", 5) != 0 || n[5] < '0' || n[5] > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long rank = strtoull(n + 5, &end, 10);
    if (errno || end == n + 5 || strcmp(end, ".pack") != 0 || rank > UINT32_MAX ||
        (n[5] == '0' && end != n + 6))
        return false;
    *out = (uint32_t)rank;
    return true;
}

static bool is_rank_file(const char *n)
{
    uint32_t r;
    return parse_rank_file(n, &r);
}

static bool is_vdir(const char *n)
{
    uint64_t v;
    return parse_vdir(n, &v);
}

/* "d<N>.pack", N canonical decimal >= 1 (the vdir rule). */
static bool parse_dataset_file(const char *n, uint64_t *id)
{
    size_t len = strlen(n);
    char vname[40];
    if (n[0] != 'd' || len < 7 || len - 6 + 2 > sizeof vname || strcmp(n + len - 5, ".pack") != 0)
        return false;
    snprintf(vname, sizeof vname, "v%.*s", (int)(len - 6), n + 1);
    return parse_vdir(vname, id);
}

static bool is_dataset_file(const char *n)
{
    uint64_t id;
    return parse_dataset_file(n, &id);
}

/* Directory @p name under packs/ (handle @p pfd), made first if @p create,
 * by handle and no link followed: *fd, or -1 when it does not exist (still
 * PTC_OK); a link or a file in its place is foreign (named, never entered). */
static int packs_subdir(ptc_store *s, int pfd, const char *name, bool create, int *fd)
{
    if (create && mkdirat(pfd, name, 0755) != 0 && errno != EEXIST)
        return ptc_error_sys(PTC_E_IO, "mkdir %s/packs/%s", s->dir, name);
    *fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*fd >= 0 || errno == ENOENT)
        return PTC_OK;
    if (errno == ENOTDIR || errno == ELOOP)
        return ptc_store_foreign(s, pfd, "packs", name);
    return ptc_error_sys(PTC_E_IO, "open %s/packs/%s", s->dir, name);
}

/* ---- spare pack files ------------------------------------------------------------------ */

/* A recycling gc (ptc_store_gc_recycle: saves that drop their oldest
 * version at every commit) moves an unreferenced rank file that no reader
 * holds to packs/spare/rank-<R>.pack instead of unlinking it, and the next
 * writer of that rank name renames it into its version and overwrites it in
 * place (store_write.c): the pages or blocks are not freed and allocated
 * again at every save. A reader holds a shared flock on each pack file it
 * opens (store_read.c); a file whose exclusive flock gc cannot have is being
 * read and is unlinked as always, so the reader keeps its bytes. */

/* Move @p name (an unreferenced rank file of directory @p vfd) to
 * packs/spare, or remove it if a reader holds it or it cannot be moved. */
static int recycle_file(gc_run *g, int pfd, int vfd, const char *rel, const char *name,
                        uint64_t *size)
{
    ptc_store *s = g->s;
    int fd = openat(vfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    bool mine = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
                flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (mine && g->sfd < 0 && packs_subdir(s, pfd, PTC_STORE_SPARE_DIR, true, &g->sfd) < 0)
        ptc_error_clear(); /* no spare directory: removed as without recycling */
    mine = mine && g->sfd >= 0;
    /* a spare of the same name (an older version's) is replaced: freed */
    bool moved = mine && renameat(vfd, name, g->sfd, name) == 0;
    if (mine) /* now, not at the close: a child forked meanwhile shares the lock */
        flock(fd, LOCK_UN);
    if (fd >= 0)
        close(fd);
    if (moved) {
        *size = (uint64_t)st.st_size;
        return PTC_OK;
    }
    return ptc_store_remove_file(s, vfd, rel, name, size);
}

/* Remove every file of packs/spare, then the directory itself unless
 * @p keep_dir. A spare left by an earlier recycling gc that no writer
 * took since (the ranks changed) is stale. Within gc (@p g, else NULL)
 * a queued writer goes first before each removal. */
static int clear_spares(ptc_store *s, gc_run *g, int pfd, bool keep_dir, ptc_store_gc_stats *st)
{
    static const char rel[] = "packs/" PTC_STORE_SPARE_DIR;
    int sfd;
    PTC_TRY(packs_subdir(s, pfd, PTC_STORE_SPARE_DIR, false, &sfd));
    if (sfd < 0)
        return PTC_OK;
    name_list files = {0};
    int rc = list_dir(sfd, rel, is_rank_file, &files);
    for (size_t i = 0; i < files.n && rc == PTC_OK; i++) {
        uint64_t sz;
        if (g && (rc = gc_turn(g)) < 0)
            break;
        if ((rc = ptc_store_remove_file(s, sfd, rel, files.v[i], &sz)) == PTC_OK && st) {
            st->files_removed++;
            st->bytes_removed += sz;
        }
    }
    ptc_free(files.v);
    close(sfd);
    if (rc == PTC_OK && !keep_dir && unlinkat(pfd, PTC_STORE_SPARE_DIR, AT_REMOVEDIR) == 0 && st)
        st->dirs_removed++;
    return rc;
}

/* Everything inside the store is reached by handle from its root and no link
 * is followed: an entry gc would touch that is a link (or not what the store
 * makes) stops gc with an error naming it, nothing removed through it. */
static int gc_vdir(gc_run *g, int pfd, const char *vname)
{
    ptc_store *s = g->s;
    ptc_store_gc_stats *st = &g->st;
    uint64_t v;
    parse_vdir(vname, &v);
    char rel[64];
    snprintf(rel, sizeof rel, "packs/%s", vname);
    int vfd;
    PTC_TRY(packs_subdir(s, pfd, vname, false, &vfd));
    if (vfd < 0)
        return PTC_OK;
    name_list files = {0};
    int rc = list_dir(vfd, rel, is_rank_file, &files);
    bool removed = false;
    for (size_t i = 0; i < files.n && rc == PTC_OK; i++) {
        uint32_t rank;
        parse_rank_file(files.v[i], &rank);
        extent_key k = {v, rank, 0};
        if ((rc = gc_turn(g)) < 0)
            break;
        if (set_has(&g->ref, &k))
            continue;
        uint64_t sz;
        if ((rc = g->recycle ? recycle_file(g, pfd, vfd, rel, files.v[i], &sz)
                             : ptc_store_remove_file(s, vfd, rel, files.v[i], &sz)) < 0)
            break;
        removed = true;
        st->files_removed++;
        st->bytes_removed += sz;
    }
    ptc_free(files.v);
    if (rc == PTC_OK) {
        if (unlinkat(pfd, vname, AT_REMOVEDIR) == 0)
            st->dirs_removed++;
        else if (errno != ENOTEMPTY && errno != EEXIST)
            rc = ptc_error_sys(PTC_E_IO, "remove %s/%s", s->dir, rel);
        else if (removed)
            rc = ptc_fsync(vfd, rel);
    }
    close(vfd);
    return rc;
}

/* Dataset pack files packs/datasets/d<N>.pack that no catalog record
 * references (replaced datasets, aborted ingests). */
static int gc_datasets(gc_run *g, int pfd)
{
    ptc_store *s = g->s;
    ptc_store_gc_stats *st = &g->st;
    int dfd;
    PTC_TRY(packs_subdir(s, pfd, "datasets", false, &dfd));
    if (dfd < 0)
        return PTC_OK;
    name_list files = {0};
    int rc = list_dir(dfd, "packs/datasets", is_dataset_file, &files);
    bool removed = false;
    for (size_t f = 0; f < files.n && rc == PTC_OK; f++) {
        uint64_t id;
        parse_dataset_file(files.v[f], &id);
        if ((rc = gc_turn(g)) < 0)
            break;
        bool used = false;
        for (size_t i = 0; i < g->nids && !used; i++)
            used = g->ids[i] == id;
        if (used)
            continue;
        uint64_t sz;
        if ((rc = ptc_store_remove_file(s, dfd, "packs/datasets", files.v[f], &sz)) < 0)
            break;
        removed = true;
        st->files_removed++;
        st->bytes_removed += sz;
    }
    if (rc == PTC_OK && removed)
        rc = ptc_fsync(dfd, "packs/datasets");
    close(dfd);
    ptc_free(files.v);
    return rc;
}

static int store_gc(ptc_store *s, bool recycle, ptc_store_gc_stats *stats)
{
    if (stats)
        memset(stats, 0, sizeof *stats);
    gc_run g = {.s = s, .lock_fd = -1, .recycle = recycle, .sfd = -1};
    int pfd = -1;
    name_list vdirs = {0};
    int rc;
    if ((rc = ptc_store_lock(s, &g.lock_fd)) < 0 || (rc = gc_refresh(&g)) < 0)
        goto out_unlock;
    rc = ptc_store_subdir(s, "packs", false, &pfd);
    if (rc == PTC_E_NOTFOUND) {
        rc = PTC_OK;
        goto out_unlock;
    }
    if (rc < 0 || (rc = list_dir(pfd, "packs", is_vdir, &vdirs)) < 0)
        goto out_unlock;
    /* the spares no writer took since the last recycling gc go first; a
     * plain gc leaves none */
    if ((rc = clear_spares(s, &g, pfd, recycle, &g.st)) < 0)
        goto out_unlock;
    for (size_t i = 0; i < vdirs.n && rc == PTC_OK; i++)
        rc = gc_vdir(&g, pfd, vdirs.v[i]);
    if (rc == PTC_OK && (g.st.files_removed || g.st.dirs_removed))
        rc = ptc_fsync(pfd, "packs");
    if (rc == PTC_OK)
        rc = gc_datasets(&g, pfd);
out_unlock:
    if (pfd >= 0)
        close(pfd);
    if (g.sfd >= 0)
        close(g.sfd);
    ptc_free(vdirs.v);
    ptc_free(g.ref.k);
    ptc_free(g.ids);
    ptc_store_unlock(s, g.lock_fd);
    if (stats)
        *stats = g.st;
    return rc;
}

int ptc_store_gc(ptc_store *s, ptc_store_gc_stats *stats)
{
    return store_gc(s, false, stats);
}

int ptc_store_gc_recycle(ptc_store *s, ptc_store_gc_stats *stats)
{
    return store_gc(s, true, stats);
}

/* ---- info ------------------------------------------------------------------------------ */

static json_t *json_i64_array(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* json_object_set_new that remembers a failure in *ok (NULL values included). */
static void jset(json_t *o, const char *k, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(o, k, v) != 0)
        *ok = false;
}

static json_t *shard_json(const ptc_shard_rec *rec, unsigned flags, bool *ok)
{
    json_t *o = json_object();
    if (!o) {
        *ok = false;
        return NULL;
    }
    jset(o, "rank", json_integer(rec->rank), ok);
    if (rec->kind == PTC_SHARD_ALIAS) {
        jset(o, "alias_of", json_integer(rec->alias_rank), ok);
        return o;
    }
    char pack[64];
    snprintf(pack, sizeof pack, "packs/v%llu/rank-%u.pack",
             (unsigned long long)rec->pack_version, rec->pack_rank);
    jset(o, "pack", json_string(pack), ok);
    jset(o, "pack_version", json_integer((json_int_t)rec->pack_version), ok);
    jset(o, "pack_rank", json_integer(rec->pack_rank), ok);
    jset(o, "offset", json_integer((json_int_t)rec->offset), ok);
    jset(o, "length", json_integer((json_int_t)rec->length), ok);
    jset(o, "raw_length", json_integer((json_int_t)rec->raw_length), ok);
    jset(o, "codec", json_string(rec->codec == PTC_STORE_CODEC_ZSTD ? "zstd" : "none"), ok);
    jset(o, "local_shape", json_i64_array(rec->local_shape, rec->local_ndim), ok);
    json_t *pieces = json_array();
    for (uint32_t i = 0; pieces && i < rec->npieces; i++) {
        const ptc_piece *p = &rec->pieces[i];
        json_t *po = json_object();
        if (!po) {
            *ok = false;
            break;
        }
        jset(po, "lo", json_i64_array(p->box.lo, p->box.ndim), ok);
        jset(po, "hi", json_i64_array(p->box.hi, p->box.ndim), ok);
        jset(po, "local_offset", json_integer(p->local_offset), ok);
        jset(po, "local_stride", json_i64_array(p->local_stride, p->box.ndim), ok);
        if (json_array_append_new(pieces, po) != 0)
            *ok = false;
    }
    jset(o, "pieces", pieces, ok);
    jset(o, "nblocks", json_integer((json_int_t)rec->nblocks), ok);
    if (flags & PTC_STORE_INFO_BLOCKS) {
        json_t *blocks = json_array();
        for (uint64_t i = 0; blocks && i < rec->nblocks; i++) {
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rec->blocks[i].xxh3);
            json_t *bo = json_object();
            if (!bo) {
                *ok = false;
                break;
            }
            jset(bo, "length", json_integer(rec->blocks[i].stored), ok);
            jset(bo, "codec",
                 json_string(rec->blocks[i].codec == PTC_BLOCK_ZSTD ? "zstd" : "raw"), ok);
            jset(bo, "xxh3", json_string(hex), ok);
            if (json_array_append_new(blocks, bo) != 0)
                *ok = false;
        }
        jset(o, "blocks", blocks, ok);
    }
    return o;
}

static int version_json(ptc_store *s, uint64_t v, unsigned flags, json_t *arr)
{
    ptc_store_reader *r;
    PTC_TRY(ptc_store_reader_open(&r, s, v));
    const ptc_version_info *vi = ptc_store_reader_version(r);
    bool ok = true;
    json_t *o = json_object();
    if (!o) {
        ptc_store_reader_close(r);
        return ptc_error_set(PTC_E_NOMEM, "cannot build json");
    }
    jset(o, "version", json_integer((json_int_t)vi->version), &ok);
    jset(o, "parent", json_integer((json_int_t)vi->parent), &ok);
    jset(o, "created_unix_ns", json_integer(vi->created_unix_ns), &ok);
    jset(o, "step", json_string(vi->step), &ok);
    jset(o, "config", json_string(vi->config), &ok);
    jset(o, "rules", json_string(vi->rules), &ok);
    jset(o, "state", json_string("committed"), &ok);
    jset(o, "metadata", json_loads(vi->metadata_json, 0, NULL), &ok);
    jset(o, "tensor_count", json_integer((json_int_t)vi->tensor_count), &ok);
    jset(o, "bytes", json_integer((json_int_t)vi->bytes), &ok);
    jset(o, "stored_bytes", json_integer((json_int_t)vi->stored_bytes), &ok);
    json_t *tensors = json_array();
    size_t nt = ptc_store_reader_tensor_count(r);
    for (size_t t = 0; ok && tensors && t < nt; t++) {
        ptc_store_tensor ti;
        ptc_store_reader_tensor(r, t, &ti);
        json_t *to = json_object();
        if (!to) {
            ok = false;
            break;
        }
        jset(to, "name", json_stringn(ti.name, ti.name_len), &ok);
        jset(to, "dtype", json_string(ptc_dtype_name(ti.dtype)), &ok);
        jset(to, "shape", json_i64_array(ti.shape, ti.ndim), &ok);
        jset(to, "placement", json_string(ti.placement), &ok);
        const ptc_shard_rec *recs;
        size_t n;
        ptc_store_reader_recs(r, t, &recs, &n);
        json_t *shards = json_array();
        for (size_t j = 0; shards && j < n; j++)
            if (json_array_append_new(shards, shard_json(&recs[j], flags, &ok)) != 0)
                ok = false;
        jset(to, "shards", shards, &ok);
        if (json_array_append_new(tensors, to) != 0)
            ok = false;
    }
    jset(o, "tensors", tensors, &ok);
    ptc_store_reader_close(r);
    if (!ok || json_array_append_new(arr, o) != 0)
        return ptc_error_set(PTC_E_STORE, "version %llu: cannot describe as json "
                             "(out of memory or invalid text)", (unsigned long long)v);
    return PTC_OK;
}

int ptc_store_info_json(ptc_store *s, uint64_t version, unsigned flags, char **json)
{
    *json = NULL;
    uint64_t latest;
    PTC_TRY(ptc_store_latest(s, &latest));
    uint64_t *vs = NULL;
    size_t nv = 0;
    if (latest != 0 || version != 0)
        PTC_TRY(select_versions(s, version, &vs, &nv));
    unsigned fmt;
    PTC_TRY(ptc_store_format(s, &fmt));
    json_t *root = json_object(), *arr = json_array();
    bool ok = root && arr;
    int rc = PTC_OK;
    if (ok) {
        jset(root, "store", json_string(s->dir), &ok);
        jset(root, "format", json_integer(fmt), &ok);
        jset(root, "metadata_checked", json_boolean(fmt >= 2), &ok);
        jset(root, "block_size", json_integer((json_int_t)PTC_STORE_BLOCK_SIZE), &ok);
        jset(root, "latest", json_integer((json_int_t)latest), &ok);
    }
    for (size_t i = 0; ok && i < nv && rc == PTC_OK; i++)
        rc = version_json(s, vs[i], flags, arr);
    ptc_free(vs);
    if (rc < 0)
        goto out_decref;
    json_object_set(root, "versions", arr);
    char *txt = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    if (!txt) {
        rc = ptc_error_set(PTC_E_NOMEM, "cannot serialise store info");
        goto out_decref;
    }
    *json = ptc_strdup(txt);
    free(txt);
    if (!*json)
        rc = PTC_E_NOMEM;
out_decref:
    json_decref(arr);
    json_decref(root);
    return rc;
}

/* ---- removing an empty store --------------------------------------------------------- */

/* (here rather than in store.c: it asks the dataset catalog, which calls
 * store.c, so store.c calls nothing above it) */
/* Remove the directories under packs/ (each empty); PTC_E_EXISTS if one
 * holds anything or is not a directory. */
static int remove_empty_packs(ptc_store *s, int pfd)
{
    int lfd = fcntl(pfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        return ptc_error_sys(PTC_E_IO, "read %s/packs", s->dir);
    }
    int rc = PTC_OK;
    struct dirent *e;
    while (rc == PTC_OK && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st; /* a directory, never followed: the store made it */
        if (fstatat(pfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
            unlinkat(pfd, e->d_name, AT_REMOVEDIR) != 0)
            rc = ptc_error_set(PTC_E_EXISTS, "store %s: packs/%s holds data; store kept",
                               s->dir, e->d_name);
    }
    closedir(d);
    return rc;
}

int ptc_store_remove_empty(const char *dir, bool remove_dir)
{
    ptc_store *s;
    PTC_TRY(ptc_store_open(&s, dir, 0));
    int lock_fd = -1, pfd = -1, mfd = -1, rc;
    uint64_t issued = 0, *ids = NULL;
    size_t nids = 0;
    if ((rc = ptc_store_lock(s, &lock_fd)) < 0 || (rc = ptc_store_issued(s, &issued)) < 0 ||
        (rc = ptc_store_dataset_ids(s, &ids, &nids)) < 0)
        goto out_close;
    ptc_free(ids);
    if (issued || nids) {
        rc = ptc_error_set(PTC_E_EXISTS, "store %s holds versions or datasets; store kept", dir);
        goto out_close;
    }
    /* the payload side first: if it holds anything, nothing is removed */
    rc = ptc_store_subdir(s, "packs", false, &pfd);
    if (rc == PTC_OK) {
        if ((rc = clear_spares(s, NULL, pfd, false, NULL)) < 0 ||
            (rc = remove_empty_packs(s, pfd)) < 0)
            goto out_close;
        if (unlinkat(s->rootfd, "packs", AT_REMOVEDIR) != 0) {
            rc = ptc_error_sys(PTC_E_IO, "remove %s/packs", dir);
            goto out_close;
        }
    } else if (rc != PTC_E_NOTFOUND) {
        goto out_close;
    }
    if ((rc = ptc_store_subdir(s, "meta", false, &mfd)) < 0)
        goto out_close;
    mdb_env_close(s->env);
    s->env = NULL;
    unlinkat(mfd, "data.mdb", 0);
    unlinkat(mfd, "lock.mdb", 0);
    rc = PTC_OK;
    if (unlinkat(s->rootfd, "meta", AT_REMOVEDIR) != 0 ||
        unlinkat(s->rootfd, "lock", 0) != 0) /* while still held: no one else takes it */
        rc = ptc_error_sys(PTC_E_IO, "remove the empty store %s", dir);
    if (rc == PTC_OK && remove_dir && rmdir(dir) != 0 && errno != ENOTEMPTY && errno != EEXIST)
        rc = ptc_error_sys(PTC_E_IO, "remove %s", dir);
out_close:
    if (mfd >= 0)
        close(mfd);
    if (pfd >= 0)
        close(pfd);
    ptc_store_unlock(s, lock_fd);
    ptc_store_close(s);
    return rc;
}
