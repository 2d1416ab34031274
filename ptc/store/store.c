/* The store handle: opening the LMDB environment and the format record,
 * named databases, version listing and deletion. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

#define MAX_DBS 64

MDB_env *ptc_store_env(ptc_store *s)
{
    return s->env;
}

const char *ptc_store_dir(const ptc_store *s)
{
    return s->dir;
}

bool ptc_store_readonly(const ptc_store *s)
{
    return s->readonly;
}

void ptc_store_free(void *p)
{
    ptc_free(p);
}

int ptc_store_open(ptc_store **out, const char *dir, unsigned flags)
{
    ptc_store_options o = {.flags = flags};
    return ptc_store_open_ex(out, dir, &o);
}

static int open_core_dbis(ptc_store *s, bool create)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(s->env, NULL, s->readonly ? MDB_RDONLY : 0, &txn);
    if (rc)
        return ptc_store_mdb_error(rc, s->dir);
    unsigned f = create ? MDB_CREATE : 0;
    const char *names[4] = {PTC_DB_META, PTC_DB_VERSIONS, PTC_DB_TENSORS, PTC_DB_SHARDS};
    MDB_dbi *dbis[4] = {&s->dbi_meta, &s->dbi_versions, &s->dbi_tensors, &s->dbi_shards};
    for (int i = 0; i < 4; i++) {
        rc = mdb_dbi_open(txn, names[i], f, dbis[i]);
        if (rc == MDB_NOTFOUND) {
            mdb_txn_abort(txn);
            return ptc_error_set(PTC_E_NOTFOUND,
                                 "no ptc store at '%s' (metadata has no %s database)", s->dir,
                                 names[i]);
        }
        if (rc) {
            mdb_txn_abort(txn);
            return ptc_store_mdb_error(rc, s->dir);
        }
    }
    /* the format record: magic, format version, block size; a new store is
     * made in the current format, with its (empty) summaries */
    MDB_val k = {6, (void *)"format"}, v;
    rc = mdb_get(txn, s->dbi_meta, &k, &v);
    int prc = PTC_OK;
    if (rc == MDB_NOTFOUND && create) {
        static const ptc_store_summary none;
        if ((prc = ptc_store_format_put(s, txn, PTC_STORE_FORMAT_VERSION)) == PTC_OK &&
            (prc = ptc_store_summary_put(s, txn, PTC_SUMMARY_VERSIONS, &none)) == PTC_OK)
            prc = ptc_store_summary_put(s, txn, PTC_SUMMARY_DATASETS, &none);
    } else if (rc && rc != MDB_NOTFOUND) {
        prc = ptc_store_mdb_error(rc, s->dir);
    } else {
        unsigned fmt;
        prc = ptc_store_format_txn(s, txn, &fmt);
    }
    if (prc < 0) {
        mdb_txn_abort(txn);
        return prc;
    }
    rc = mdb_txn_commit(txn);
    if (rc)
        return ptc_store_mdb_error(rc, s->dir);
    return PTC_OK;
}

/* Walk data.mdb's pages (store_mdbcheck.c) as of a snapshot this handle
 * holds open, so no writer reuses its pages meanwhile; before anything of
 * liblmdb reads a tree. */
static int walk_pinned(ptc_store *s, int datafd)
{
    for (int attempt = 0;; attempt++) {
        MDB_txn *txn;
        int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
        if (mrc)
            return ptc_store_mdb_error(mrc, s->dir);
        int rc = ptc_store_mdb_walk(datafd, s->dir, mdb_txn_id(txn));
        mdb_txn_abort(txn);
        if (rc != PTC_E_BUSY || attempt == 10) /* BUSY: its meta page was rewritten */
            return rc == PTC_E_BUSY ? ptc_error_set(rc, "store %s: metadata changing too fast "
                                                        "to check", s->dir)
                                    : rc;
    }
}

/* A store is created only in a new or empty directory (or over the remains
 * of an interrupted creation: meta/, packs/, lock), never inside a directory
 * that holds something else. */
static int check_creatable(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? PTC_OK : ptc_error_sys(PTC_E_IO, "open %s", dir);
    struct dirent *e;
    int rc = PTC_OK;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "meta") || !strcmp(n, "packs") ||
            !strcmp(n, "lock"))
            continue;
        rc = ptc_error_set(PTC_E_NOTFOUND,
                           "'%s' is not a ptc store and not empty (holds '%s'); "
                           "refusing to create a store there", dir, n);
        break;
    }
    closedir(d);
    return rc;
}

int ptc_store_open_ex(ptc_store **out, const char *dir, const ptc_store_options *opts)
{
    *out = NULL;
    unsigned flags = opts ? opts->flags : 0;
    bool create = (flags & PTC_STORE_CREATE) && !(flags & PTC_STORE_READONLY);
    char meta[4096];
    if (!dir || !*dir)
        return ptc_error_set(PTC_E_INVAL, "empty store path");
    if (snprintf(meta, sizeof meta, "%s/meta", dir) >= (int)sizeof meta)
        return ptc_error_set(PTC_E_INVAL, "store path too long: %s", dir);
    /* the store's own path may be a link (the user's choice); nothing below it is followed */
    int rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0 && errno == ENOENT && create) {
        PTC_TRY(ptc_mkdir_p(dir, 0755));
        rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (rootfd < 0) {
        if (errno == ENOENT)
            return ptc_error_sys(PTC_E_NOTFOUND, "no ptc store at '%s'", dir);
        if (errno == ENOTDIR)
            return ptc_error_set(PTC_E_NOTFOUND, "'%s' is not a ptc store (not a directory)",
                                 dir);
        return ptc_error_sys(PTC_E_IO, "open %s", dir);
    }
    int datafd = -1, metafd = -1, rc = ptc_store_subdir_at(rootfd, dir, "meta", false, &metafd);
    struct stat st;
    if (rc < 0 && rc != PTC_E_NOTFOUND)
        goto out_close_root;
    if (metafd < 0 || fstatat(metafd, "data.mdb", &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (!create) {
            rc = ptc_error_set(PTC_E_NOTFOUND, "'%s' is not a ptc store (no meta/data.mdb)",
                               dir);
            goto out_close_root;
        }
        int pfd = -1;
        if ((rc = check_creatable(dir)) < 0 ||
            (metafd < 0 && (rc = ptc_store_subdir_at(rootfd, dir, "meta", true, &metafd)) < 0) ||
            (rc = ptc_store_subdir_at(rootfd, dir, "packs", true, &pfd)) < 0)
            goto out_close_root;
        close(pfd);
    }
    /* LMDB opens meta/data.mdb and meta/lock.mdb by name, following links,
     * and writes lock.mdb even when read-only: check both, and give it the
     * meta directory through its handle so no link on the way is followed */
    static const char *const lmdb_files[2] = {"data.mdb", "lock.mdb"};
    for (int i = 0; i < 2; i++) {
        bool written = i == 1 || !(flags & PTC_STORE_READONLY);
        const char *kind = ptc_store_entry_kind(metafd, lmdb_files[i],
                                                written ? PTC_ENTRY_WRITABLE : PTC_ENTRY_FILE);
        if (kind) {
            rc = ptc_store_foreign_error(dir, "meta", lmdb_files[i], kind);
            goto out_close_root;
        }
    }
    char meta_fd_path[64];
    snprintf(meta_fd_path, sizeof meta_fd_path, "/proc/self/fd/%d", metafd);
    const char *meta_open = access(meta_fd_path, F_OK) == 0 ? meta_fd_path : meta;

    ptc_store *s = ptc_calloc(1, sizeof *s);
    if (!s) {
        rc = PTC_E_NOMEM;
        goto out_close_root;
    }
    s->rootfd = rootfd;
    s->readonly = (flags & PTC_STORE_READONLY) != 0;
    s->lock_wait_ms = ptc_store_lock_timeout_resolve(opts ? opts->lock_timeout_ms : 0);
    s->dir = ptc_strdup(dir);
    if (!s->dir) {
        rc = PTC_E_NOMEM;
        goto out_free;
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        rc = ptc_error_set(PTC_E_NOMEM, "cannot create mutex");
        goto out_free;
    }
    int mrc = mdb_env_create(&s->env);
    if (mrc) {
        rc = ptc_store_mdb_error(mrc, dir);
        goto out_mutex;
    }
    uint64_t map = opts && opts->map_size ? opts->map_size
                   : sizeof(size_t) >= 8  ? (uint64_t)1 << 40
                                          : (uint64_t)1 << 30;
    if ((mrc = mdb_env_set_mapsize(s->env, (size_t)map)) ||
        (mrc = mdb_env_set_maxdbs(s->env, MAX_DBS)) ||
        (mrc = mdb_env_set_maxreaders(s->env, 1024))) {
        rc = ptc_store_mdb_error(mrc, dir);
        goto out_env;
    }
    /* liblmdb trusts its pages: their structure is checked first */
    datafd = openat(metafd, "data.mdb", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat dst;
    bool walk = false;
    if (datafd >= 0 && fstat(datafd, &dst) == 0 && dst.st_size > 0) {
        if ((rc = ptc_store_mdb_metas(datafd, dir, NULL)) < 0)
            goto out_env;
        const char *e = getenv("PTC_VERIFY_METADATA");
        walk = (flags & PTC_STORE_CHECK) || (uint64_t)dst.st_size <= PTC_STORE_CHECK_AUTO ||
               (e && strcmp(e, "1") == 0);
    }
    unsigned ef = MDB_NOTLS | (s->readonly ? MDB_RDONLY : 0);
    mrc = mdb_env_open(s->env, meta_open, ef, 0644);
    if (mrc) {
        rc = mrc == ENOENT ? ptc_error_set(PTC_E_NOTFOUND, "'%s' is not a ptc store (%s)", dir,
                                           mdb_strerror(mrc))
                           : ptc_store_mdb_error(mrc, dir);
        goto out_env;
    }
    if ((rc = ptc_store_map_find(s)) < 0 || (walk && (rc = walk_pinned(s, datafd)) < 0) ||
        (rc = open_core_dbis(s, create)) < 0)
        goto out_env;
    if (datafd >= 0)
        close(datafd);
    int dead;
    mdb_reader_check(s->env, &dead); /* clear reader slots of killed processes */
    close(metafd);
    *out = s;
    return PTC_OK;
out_env:
    if (datafd >= 0)
        close(datafd);
    mdb_env_close(s->env);
out_mutex:
    pthread_mutex_destroy(&s->mu);
out_free:
    ptc_free(s->dir);
    ptc_free(s);
out_close_root:
    if (metafd >= 0)
        close(metafd);
    close(rootfd);
    return rc;
}

void ptc_store_close(ptc_store *s)
{
    if (!s)
        return;
    mdb_env_close(s->env);
    for (int i = 0; i < s->nextra; i++)
        ptc_free(s->extra[i].name);
    pthread_mutex_destroy(&s->mu);
    close(s->rootfd);
    ptc_free(s->dir);
    ptc_free(s);
}

/* The cached handle of database @p name, opened (in a write transaction
 * creating it when @p create, else a read transaction) the first time. */
static int dbi_cached(ptc_store *s, const char *name, unsigned mdb_flags, bool create,
                      MDB_dbi *out)
{
    int rc = PTC_OK;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nextra; i++)
        if (strcmp(s->extra[i].name, name) == 0) {
            *out = s->extra[i].dbi;
            goto out_unlock;
        }
    if (s->nextra == (int)PTC_ARRAY_LEN(s->extra)) {
        rc = ptc_error_set(PTC_E_STORE, "too many named databases in store %s", s->dir);
        goto out_unlock;
    }
    char *copy = ptc_strdup(name);
    if (!copy) {
        rc = PTC_E_NOMEM;
        goto out_unlock;
    }
    MDB_txn *txn;
    int mrc = mdb_txn_begin(s->env, NULL, create ? 0 : MDB_RDONLY, &txn);
    if (!mrc) {
        mrc = mdb_dbi_open(txn, name, mdb_flags | (create ? MDB_CREATE : 0), out);
        /* committing keeps the handle (a read transaction's too) */
        mrc = mrc ? (mdb_txn_abort(txn), mrc) : mdb_txn_commit(txn);
    }
    if (mrc) {
        ptc_free(copy);
        rc = mrc == MDB_NOTFOUND ? ptc_error_set(PTC_E_NOTFOUND, "store %s has no %s database",
                                                 s->dir, name)
                                 : ptc_store_mdb_error(mrc, name);
        goto out_unlock;
    }
    s->extra[s->nextra].name = copy;
    s->extra[s->nextra].dbi = *out;
    s->nextra++;
out_unlock:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ptc_store_dbi_open(ptc_store *s, const char *name, unsigned mdb_flags, MDB_dbi *out)
{
    return dbi_cached(s, name, mdb_flags, !s->readonly, out);
}

int ptc_store_dbi_find(ptc_store *s, const char *name, MDB_dbi *out)
{
    return dbi_cached(s, name, 0, false, out);
}

int ptc_store_write_txn(ptc_store *s, int (*fn)(MDB_txn *txn, void *user), void *user)
{
    if (s->readonly)
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", s->dir);
    MDB_txn *txn;
    int mrc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    int rc = fn(txn, user);
    if (rc < 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    mrc = mdb_txn_commit(txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    return PTC_OK;
}

/* ---- versions ------------------------------------------------------------------- */

int ptc_store_latest_txn(ptc_store *s, MDB_txn *txn, uint64_t *out)
{
    *out = 0;
    MDB_cursor *c;
    int mrc = mdb_cursor_open(txn, s->dbi_versions, &c);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    MDB_val k, v;
    mrc = mdb_cursor_get(c, &k, &v, MDB_LAST);
    mdb_cursor_close(c);
    uint64_t newest = 0;
    if (mrc && mrc != MDB_NOTFOUND)
        return ptc_store_mdb_error(mrc, s->dir);
    if (mrc == 0) {
        PTC_TRY(ptc_store_val_check(s, &k, NULL, "version key"));
        if (k.mv_size != 8)
            return ptc_error_set(PTC_E_STORE, "store %s: bad version key", s->dir);
        newest = ptc_key_get_u64(k.mv_data);
    }
    /* the newest version is the last key; a format-2 store says which that
     * must be, so a record that vanished or moved is an error, not an older
     * "newest" version */
    unsigned fmt;
    PTC_TRY(ptc_store_format_txn(s, txn, &fmt));
    if (fmt >= 2) {
        ptc_store_summary sum;
        PTC_TRY(ptc_store_summary_get(s, txn, PTC_SUMMARY_VERSIONS, &sum));
        if (sum.newest != newest)
            return ptc_error_set(PTC_E_STORE,
                                 "store %s: corrupt metadata: the newest version record is %llu, "
                                 "the version summary says %llu; run ptc verify",
                                 s->dir, (unsigned long long)newest,
                                 (unsigned long long)sum.newest);
    }
    *out = newest;
    return PTC_OK;
}

/* Version numbers are never handed out twice, even after the newest version
 * is deleted: the meta key "last_version" (u64 little-endian) keeps the
 * highest number ever committed. */
int ptc_store_issued_txn(ptc_store *s, MDB_txn *txn, uint64_t *out)
{
    uint64_t latest;
    PTC_TRY(ptc_store_latest_txn(s, txn, &latest));
    MDB_val k = {12, (void *)"last_version"}, v;
    int mrc = mdb_get(txn, s->dbi_meta, &k, &v);
    uint64_t issued = 0;
    if (mrc == 0) {
        PTC_TRY(ptc_store_val_check(s, &k, &v, "last_version record"));
        if (v.mv_size != 8)
            return ptc_error_set(PTC_E_STORE, "store %s: bad last_version record", s->dir);
        for (int i = 7; i >= 0; i--)
            issued = (issued << 8) | ((const uint8_t *)v.mv_data)[i];
    } else if (mrc != MDB_NOTFOUND) {
        return ptc_store_mdb_error(mrc, s->dir);
    }
    *out = issued > latest ? issued : latest;
    return PTC_OK;
}

int ptc_store_issued_put(ptc_store *s, MDB_txn *txn, uint64_t version)
{
    uint8_t rec[8];
    for (int i = 0; i < 8; i++)
        rec[i] = (uint8_t)(version >> (8 * i));
    MDB_val k = {12, (void *)"last_version"}, v = {8, rec};
    int mrc = mdb_put(txn, s->dbi_meta, &k, &v, 0);
    return mrc ? ptc_store_mdb_error(mrc, s->dir) : PTC_OK;
}

int ptc_store_issued(ptc_store *s, uint64_t *out)
{
    MDB_txn *txn;
    int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    int rc = ptc_store_issued_txn(s, txn, out);
    mdb_txn_abort(txn);
    return rc;
}

int ptc_store_format(ptc_store *s, unsigned *out)
{
    MDB_txn *txn;
    int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    int rc = ptc_store_format_txn(s, txn, out);
    mdb_txn_abort(txn);
    return rc;
}

int ptc_store_latest(ptc_store *s, uint64_t *out)
{
    MDB_txn *txn;
    int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    int rc = ptc_store_latest_txn(s, txn, out);
    mdb_txn_abort(txn);
    return rc;
}

static void info_from_rec(ptc_version_info *o, uint64_t v, ptc_version_rec *r)
{
    o->version = v;
    o->parent = r->parent;
    o->created_unix_ns = r->created_unix_ns;
    o->step = r->step;
    o->config = r->config;
    o->rules = r->rules;
    o->metadata_json = r->metadata_json;
    o->tensor_count = r->tensor_count;
    o->bytes = r->bytes;
    o->stored_bytes = r->stored_bytes;
}

void ptc_store_versions_free(ptc_version_info *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        ptc_free((char *)v[i].step);
        ptc_free((char *)v[i].config);
        ptc_free((char *)v[i].rules);
        ptc_free((char *)v[i].metadata_json);
    }
    ptc_free(v);
}

int ptc_store_versions(ptc_store *s, ptc_version_info **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    MDB_txn *txn;
    int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    MDB_cursor *c;
    if ((mrc = mdb_cursor_open(txn, s->dbi_versions, &c))) {
        mdb_txn_abort(txn);
        return ptc_store_mdb_error(mrc, s->dir);
    }
    ptc_version_info *arr = NULL;
    size_t cnt = 0, cap = 0;
    unsigned fmt;
    ptc_store_summary got = {0}, want;
    int rc = ptc_store_format_txn(s, txn, &fmt);
    if (rc < 0)
        goto out_free;
    MDB_val k, v;
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        ptc_version_rec r;
        uint64_t sum;
        if ((rc = ptc_store_version_rec_get(s, fmt, &k, &v, &r, &sum)) < 0)
            goto out_free;
        uint64_t ver = ptc_key_get_u64(k.mv_data);
        if ((rc = ptc_grow((void **)&arr, &cap, cnt + 1, sizeof *arr)) < 0) {
            ptc_version_rec_free(&r);
            goto out_free;
        }
        info_from_rec(&arr[cnt++], ver, &r);
        if (ver == 0 || ver <= got.newest) {
            rc = ptc_error_set(PTC_E_STORE, "store %s: corrupt metadata: version keys out of "
                               "order; run ptc verify", s->dir);
            goto out_free;
        }
        got.count++;
        got.newest = ver;
        got.xsum ^= sum;
    }
    if (mrc != MDB_NOTFOUND) {
        rc = ptc_store_mdb_error(mrc, s->dir);
        goto out_free;
    }
    if (fmt >= 2 &&
        ((rc = ptc_store_summary_get(s, txn, PTC_SUMMARY_VERSIONS, &want)) < 0 ||
         (rc = ptc_store_summary_mismatch(s, "version records", &want, &got)) < 0))
        goto out_free;
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    *out = arr;
    *n = cnt;
    return PTC_OK;
out_free:
    ptc_store_versions_free(arr, cnt);
    mdb_cursor_close(c);
    mdb_txn_abort(txn);
    return rc;
}

/* Delete every key of @p dbi that starts with the 8-byte version prefix. */
static int delete_prefix(MDB_txn *txn, MDB_dbi dbi, const uint8_t *prefix)
{
    MDB_cursor *c;
    int mrc = mdb_cursor_open(txn, dbi, &c);
    if (mrc)
        return ptc_store_mdb_error(mrc, "delete version");
    MDB_val k = {8, (void *)prefix}, v;
    for (;;) {
        k.mv_size = 8;
        k.mv_data = (void *)prefix;
        mrc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
        if (mrc || k.mv_size < 8 || memcmp(k.mv_data, prefix, 8) != 0)
            break;
        if ((mrc = mdb_cursor_del(c, 0)))
            break;
    }
    mdb_cursor_close(c);
    if (mrc && mrc != MDB_NOTFOUND)
        return ptc_store_mdb_error(mrc, "delete version");
    return PTC_OK;
}

struct del_ctx {
    ptc_store *s;
    uint64_t v;
};

static int delete_txn(MDB_txn *txn, void *user)
{
    struct del_ctx *d = user;
    ptc_store *s = d->s;
    PTC_TRY(ptc_store_upgrade_txn(s, txn));
    uint8_t key[8];
    ptc_key_version(key, d->v);
    MDB_val k = {8, key}, v;
    int mrc = mdb_get(txn, s->dbi_versions, &k, &v);
    if (mrc == MDB_NOTFOUND)
        return ptc_error_set(PTC_E_NOTFOUND, "version %llu not found in store %s",
                             (unsigned long long)d->v, s->dir);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    /* the summary loses exactly this record's sum: a record that fails its
     * checksum is not deleted (the store needs ptc verify first) */
    size_t body;
    uint64_t sum;
    ptc_store_summary sm;
    PTC_TRY(ptc_store_rec_open(s, PTC_STORE_FORMAT_VERSION, PTC_REC_VERSION, &k, &v, &body,
                               &sum));
    PTC_TRY(ptc_store_summary_get(s, txn, PTC_SUMMARY_VERSIONS, &sm));
    if ((mrc = mdb_del(txn, s->dbi_versions, &k, NULL)))
        return ptc_store_mdb_error(mrc, s->dir);
    PTC_TRY(delete_prefix(txn, s->dbi_tensors, key));
    PTC_TRY(delete_prefix(txn, s->dbi_shards, key));
    sm.count--;
    sm.xsum ^= sum;
    MDB_cursor *c;
    if ((mrc = mdb_cursor_open(txn, s->dbi_versions, &c)))
        return ptc_store_mdb_error(mrc, s->dir);
    mrc = mdb_cursor_get(c, &k, &v, MDB_LAST);
    mdb_cursor_close(c);
    if (mrc && mrc != MDB_NOTFOUND)
        return ptc_store_mdb_error(mrc, s->dir);
    sm.newest = mrc == 0 && k.mv_size == 8 ? ptc_key_get_u64(k.mv_data) : 0;
    return ptc_store_summary_put(s, txn, PTC_SUMMARY_VERSIONS, &sm);
}

int ptc_store_version_delete(ptc_store *s, uint64_t version)
{
    int fd;
    PTC_TRY(ptc_store_lock(s, &fd));
    struct del_ctx d = {s, version};
    int rc = ptc_store_write_txn(s, delete_txn, &d);
    ptc_store_unlock(s, fd);
    return rc;
}
