/* The store handle: opening the LMDB environment, the format record, the
 * writer lock, version listing and deletion, shared path helpers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

#define MAX_DBS 64

int ptc_store_mdb_error(int rc, const char *what)
{
    switch (rc) {
    case MDB_MAP_FULL:
        return ptc_error_set(PTC_E_IO, "%s: store metadata map is full (%s)", what,
                             mdb_strerror(rc));
    case ENOMEM:
        return ptc_error_set(PTC_E_NOMEM, "%s: %s", what, mdb_strerror(rc));
    case MDB_NOTFOUND:
        return ptc_error_set(PTC_E_NOTFOUND, "%s: %s", what, mdb_strerror(rc));
    case MDB_CORRUPTED:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
    case MDB_PAGE_NOTFOUND:
        return ptc_error_set(PTC_E_STORE, "%s: %s", what, mdb_strerror(rc));
    default:
        return ptc_error_set(PTC_E_IO, "%s: %s", what, mdb_strerror(rc));
    }
}

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

int ptc_store_pack_path(char *out, size_t cap, const char *dir, uint64_t v, uint32_t rank)
{
    int n = snprintf(out, cap, "%s/packs/v%llu/rank-%u.pack", dir, (unsigned long long)v,
                     rank);
    if (n < 0 || (size_t)n >= cap)
        return ptc_error_set(PTC_E_INVAL, "store path too long: %s", dir);
    return PTC_OK;
}

/* "rank-<R>.pack" with R canonical decimal (no sign, no leading zeros). */
static bool parse_pack_name(const char *name, uint32_t *rank)
{
    if (strncmp(name, "rank-", 5) != 0)
        return false;
    const char *p = name + 5;
    if (!(*p >= '0' && *p <= '9') || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return false;
    uint64_t v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > UINT32_MAX)
            return false;
        p++;
    }
    if (strcmp(p, ".pack") != 0)
        return false;
    *rank = (uint32_t)v;
    return true;
}

/* ---- the store's own entries ----------------------------------------------------- */

enum { ENTRY_DIR, ENTRY_FILE, ENTRY_WRITABLE };

/* What entry @p name of @p dfd is, for a message; NULL if it is what the
 * store makes: a directory (ENTRY_DIR), a regular file (ENTRY_FILE), a
 * regular file with no other hard link (ENTRY_WRITABLE: one the store
 * writes to in place, so no other name may share it). */
static const char *entry_kind(int dfd, const char *name, int want)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return NULL;
    if (S_ISLNK(st.st_mode))
        return "a symbolic link";
    if (want == ENTRY_DIR)
        return S_ISDIR(st.st_mode) ? NULL : "not a directory";
    if (S_ISDIR(st.st_mode))
        return "a directory";
    if (!S_ISREG(st.st_mode))
        return "not a regular file";
    if (want == ENTRY_WRITABLE && st.st_nlink > 1)
        return "a file with other hard links";
    return NULL;
}

static int foreign_error(const char *dir, const char *rel, const char *name, const char *kind)
{
    return ptc_error_set(PTC_E_STORE,
                         "store %s: %s%s%s is %s, not an entry the store made; refusing to "
                         "follow or remove it (move it out of the store)",
                         dir, rel ? rel : "", rel && *rel ? "/" : "", name, kind);
}

int ptc_store_foreign(const ptc_store *s, int dfd, const char *rel, const char *name)
{
    struct stat st;
    const char *kind = "not what the store expects";
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        kind = S_ISLNK(st.st_mode)  ? "a symbolic link"
               : S_ISDIR(st.st_mode) ? "a directory"
               : !S_ISREG(st.st_mode) ? "a special file"
               : st.st_nlink > 1     ? "a file with other hard links"
                                     : "a regular file";
    return foreign_error(s->dir, rel, name, kind);
}

/* ptc_store_subdir() from a root handle (the store handle may not exist yet). */
static int subdir_at(int rootfd, const char *dir, const char *rel, bool create, int *out)
{
    *out = -1;
    char buf[256], done[256] = "";
    if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf)
        return ptc_error_set(PTC_E_INVAL, "store path too long: %s", rel);
    int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return ptc_error_sys(PTC_E_IO, "open %s", dir);
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        const char *parent = done;
        int nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, c, 0755) != 0 && errno != EEXIST) {
                int rc = ptc_error_sys(PTC_E_IO, "mkdir %s/%s%s%s", dir, parent,
                                       *parent ? "/" : "", c);
                close(fd);
                return rc;
            }
            nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (nfd < 0) {
            int e = errno, rc;
            const char *kind = entry_kind(fd, c, ENTRY_DIR);
            if (e == ENOENT)
                rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no %s%s%s", dir, parent,
                                   *parent ? "/" : "", c);
            else if (kind)
                rc = foreign_error(dir, parent, c, kind);
            else {
                errno = e;
                rc = ptc_error_sys(PTC_E_IO, "open %s/%s%s%s", dir, parent, *parent ? "/" : "",
                                   c);
            }
            close(fd);
            return rc;
        }
        close(fd);
        fd = nfd;
        size_t n = strlen(done);
        snprintf(done + n, sizeof done - n, "%s%s", n ? "/" : "", c);
    }
    *out = fd;
    return PTC_OK;
}

int ptc_store_subdir(const ptc_store *s, const char *rel, bool create, int *fd)
{
    return subdir_at(s->rootfd, s->dir, rel, create, fd);
}

int ptc_store_create_file(const ptc_store *s, int dfd, const char *rel, const char *name,
                          int oflags, int *out)
{
    *out = -1;
    int fd = openat(dfd, name, oflags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
        *out = fd;
        return PTC_OK;
    }
    int e = errno;
    const char *kind = entry_kind(dfd, name, ENTRY_FILE);
    if (e == EEXIST && kind)
        return foreign_error(s->dir, rel, name, kind);
    errno = e;
    return ptc_error_sys(e == EEXIST ? PTC_E_EXISTS : PTC_E_IO, "create %s/%s/%s", s->dir, rel,
                         name);
}

int ptc_store_remove_file(const ptc_store *s, int dfd, const char *rel, const char *name,
                          uint64_t *size)
{
    if (size)
        *size = 0;
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? PTC_OK
                               : ptc_error_sys(PTC_E_IO, "stat %s/%s/%s", s->dir, rel, name);
    if (!S_ISREG(st.st_mode)) /* a hard link may go: that removes only our name */
        return ptc_store_foreign(s, dfd, rel, name);
    if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
        return ptc_error_sys(PTC_E_IO, "remove %s/%s/%s", s->dir, rel, name);
    if (size)
        *size = (uint64_t)st.st_size;
    return PTC_OK;
}

int ptc_store_remove_vdir(ptc_store *s, uint64_t v, uint64_t *files, uint64_t *bytes)
{
    char rel[48], name[32];
    snprintf(name, sizeof name, "v%llu", (unsigned long long)v);
    snprintf(rel, sizeof rel, "packs/%s", name);
    /* nothing there is no error, and leaves the last error message alone
     * (an abort path calls this while reporting what went wrong) */
    struct stat vst;
    if (fstatat(s->rootfd, rel, &vst, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
        return PTC_OK;
    int vfd;
    int rc = ptc_store_subdir(s, rel, false, &vfd);
    if (rc == PTC_E_NOTFOUND)
        return PTC_OK;
    PTC_TRY(rc);
    int lfd = fcntl(vfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        rc = ptc_error_sys(PTC_E_IO, "open %s/%s", s->dir, rel);
        if (lfd >= 0)
            close(lfd);
        close(vfd);
        return rc;
    }
    /* collect first: removing entries while reading a directory is unspecified */
    char (*names)[32] = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint32_t rank;
        if (!parse_pack_name(e->d_name, &rank) || strlen(e->d_name) >= sizeof *names)
            continue;
        if ((rc = ptc_grow((void **)&names, &cap, n + 1, sizeof *names)) < 0)
            break;
        memcpy(names[n++], e->d_name, strlen(e->d_name) + 1); /* fits: checked above */
    }
    closedir(d);
    for (size_t i = 0; i < n && rc == PTC_OK; i++) {
        uint64_t sz;
        if ((rc = ptc_store_remove_file(s, vfd, rel, names[i], &sz)) < 0)
            break;
        if (files)
            (*files)++;
        if (bytes)
            *bytes += sz;
    }
    ptc_free(names);
    close(vfd);
    if (rc < 0)
        return rc;
    int pfd;
    PTC_TRY(ptc_store_subdir(s, "packs", false, &pfd));
    if (unlinkat(pfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && errno != ENOTEMPTY &&
        errno != EEXIST)
        rc = ptc_error_sys(PTC_E_IO, "remove %s/%s", s->dir, rel);
    close(pfd);
    return rc;
}

/* ---- writer lock ----------------------------------------------------------------- */

/* The pid of the process holding the flock on lock file @p fd (stat @p st):
 * the kernel's lock table first (/proc/locks names the holder even when it
 * has not written its pid yet), else the pid the holder wrote into the file
 * (read a few times: it writes right after taking the lock). 0: unknown. */
static long lock_holder(int fd, const struct stat *st)
{
    long pid = 0;
    FILE *f = fopen("/proc/locks", "re");
    char line[256];
    while (f && pid == 0 && fgets(line, sizeof line, f)) {
        long p;
        unsigned maj, min;
        unsigned long long ino;
        char type[16], mode[16];
        /* "1: FLOCK  ADVISORY  WRITE 481 fe:00:10953123 0 EOF"; waiters
         * ("1: -> FLOCK ...") do not hold it */
        if (sscanf(line, "%*d: %15s %*s %15s %ld %x:%x:%llu", type, mode, &p, &maj, &min,
                   &ino) == 6 &&
            strcmp(type, "FLOCK") == 0 && strcmp(mode, "WRITE") == 0 &&
            ino == (unsigned long long)st->st_ino && maj == major(st->st_dev) &&
            min == minor(st->st_dev))
            pid = p;
    }
    if (f)
        fclose(f);
    for (int i = 0; pid <= 0 && i < 50; i++) {
        char txt[32] = {0};
        ssize_t n = pread(fd, txt, sizeof txt - 1, 0);
        char *end;
        long p = n > 0 ? strtol(txt, &end, 10) : 0;
        if (n > 0 && end != txt && (*end == '\n' || *end == '\0') && p > 0)
            pid = p;
        else
            usleep(1000);
    }
    return pid;
}

int ptc_store_lock(ptc_store *s, int *out_fd)
{
    *out_fd = -1;
    if (s->readonly)
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", s->dir);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/lock", s->dir) >= (int)sizeof path)
        return ptc_error_set(PTC_E_INVAL, "store path too long: %s", s->dir);
    int fd = openat(s->rootfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == ELOOP)
            return ptc_store_foreign(s, s->rootfd, "", "lock");
        return ptc_error_sys(PTC_E_IO, "open %s", path);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
        close(fd);
        return ptc_store_foreign(s, s->rootfd, "", "lock");
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            long pid = lock_holder(fd, &st);
            close(fd);
            if (pid <= 0)
                return ptc_error_set(PTC_E_BUSY,
                                     "store %s is locked by another process (its pid is "
                                     "unknown)", s->dir);
            return ptc_error_set(PTC_E_BUSY, "store %s is locked by another process (pid %ld)",
                                 s->dir, pid);
        }
        close(fd);
        errno = e;
        return ptc_error_sys(PTC_E_IO, "lock %s", path);
    }
    /* the pid over the old text, then cut what is left of it: the file is
     * never empty while locked, so a loser never reads "no pid" */
    char txt[32];
    int n = snprintf(txt, sizeof txt, "%ld\n", (long)getpid());
    int rc;
    if ((rc = ptc_pwrite_all(fd, txt, (size_t)n, 0, path)) < 0)
        goto out_close;
    if (ftruncate(fd, n) != 0) {
        rc = ptc_error_sys(PTC_E_IO, "truncate %s", path);
        goto out_close;
    }
    *out_fd = fd;
    return PTC_OK;
out_close:
    close(fd); /* closing the only descriptor releases the flock */
    return rc;
}

void ptc_store_unlock(int fd)
{
    if (fd >= 0)
        close(fd);
}

/* ---- open / close ------------------------------------------------------------------- */

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
    /* the format record: magic, format version, block size */
    MDB_val k = {6, (void *)"format"}, v;
    rc = mdb_get(txn, s->dbi_meta, &k, &v);
    if (rc == MDB_NOTFOUND && create) {
        uint8_t rec[16];
        memcpy(rec, PTC_STORE_MAGIC, 8);
        for (int i = 0; i < 4; i++) {
            rec[8 + i] = (uint8_t)(PTC_STORE_FORMAT_VERSION >> (8 * i));
            rec[12 + i] = (uint8_t)(PTC_STORE_BLOCK_SIZE >> (8 * i));
        }
        v.mv_size = sizeof rec;
        v.mv_data = rec;
        rc = mdb_put(txn, s->dbi_meta, &k, &v, 0);
        if (rc) {
            mdb_txn_abort(txn);
            return ptc_store_mdb_error(rc, s->dir);
        }
    } else if (rc == MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return ptc_error_set(PTC_E_STORE, "store '%s' has no format record", s->dir);
    } else if (rc) {
        mdb_txn_abort(txn);
        return ptc_store_mdb_error(rc, s->dir);
    } else {
        const uint8_t *p = v.mv_data;
        uint32_t fmt = 0, bs = 0;
        if (v.mv_size == 16)
            for (int i = 3; i >= 0; i--) {
                fmt = (fmt << 8) | p[8 + i];
                bs = (bs << 8) | p[12 + i];
            }
        if (v.mv_size != 16 || memcmp(p, PTC_STORE_MAGIC, 8) != 0) {
            mdb_txn_abort(txn);
            return ptc_error_set(PTC_E_STORE, "store '%s': bad format record", s->dir);
        }
        if (fmt != PTC_STORE_FORMAT_VERSION || bs != PTC_STORE_BLOCK_SIZE) {
            mdb_txn_abort(txn);
            return ptc_error_set(PTC_E_STORE,
                                 "store '%s': unsupported format %u (block size %u); this "
                                 "build reads format %u",
                                 s->dir, fmt, bs, PTC_STORE_FORMAT_VERSION);
        }
    }
    rc = mdb_txn_commit(txn);
    if (rc)
        return ptc_store_mdb_error(rc, s->dir);
    return PTC_OK;
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
    int metafd = -1, rc = subdir_at(rootfd, dir, "meta", false, &metafd);
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
            (metafd < 0 && (rc = subdir_at(rootfd, dir, "meta", true, &metafd)) < 0) ||
            (rc = subdir_at(rootfd, dir, "packs", true, &pfd)) < 0)
            goto out_close_root;
        close(pfd);
    }
    /* LMDB opens meta/data.mdb and meta/lock.mdb by name, following links,
     * and writes lock.mdb even when read-only: check both, and give it the
     * meta directory through its handle so no link on the way is followed */
    static const char *const lmdb_files[2] = {"data.mdb", "lock.mdb"};
    for (int i = 0; i < 2; i++) {
        bool written = i == 1 || !(flags & PTC_STORE_READONLY);
        const char *kind = entry_kind(metafd, lmdb_files[i], written ? ENTRY_WRITABLE : ENTRY_FILE);
        if (kind) {
            rc = foreign_error(dir, "meta", lmdb_files[i], kind);
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
    unsigned ef = MDB_NOTLS | (s->readonly ? MDB_RDONLY : 0);
    mrc = mdb_env_open(s->env, meta_open, ef, 0644);
    if (mrc) {
        rc = mrc == ENOENT ? ptc_error_set(PTC_E_NOTFOUND, "'%s' is not a ptc store (%s)", dir,
                                           mdb_strerror(mrc))
                           : ptc_store_mdb_error(mrc, dir);
        goto out_env;
    }
    if ((rc = open_core_dbis(s, create)) < 0)
        goto out_env;
    int dead;
    mdb_reader_check(s->env, &dead); /* clear reader slots of killed processes */
    close(metafd);
    *out = s;
    return PTC_OK;
out_env:
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

int ptc_store_dbi_open(ptc_store *s, const char *name, unsigned mdb_flags, MDB_dbi *out)
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
    int mrc = mdb_txn_begin(s->env, NULL, s->readonly ? MDB_RDONLY : 0, &txn);
    if (!mrc) {
        mrc = mdb_dbi_open(txn, name, mdb_flags | (s->readonly ? 0 : MDB_CREATE), out);
        mrc = mrc ? (mdb_txn_abort(txn), mrc) : mdb_txn_commit(txn);
    }
    if (mrc) {
        ptc_free(copy);
        rc = ptc_store_mdb_error(mrc, name);
        goto out_unlock;
    }
    s->extra[s->nextra].name = copy;
    s->extra[s->nextra].dbi = *out;
    s->nextra++;
out_unlock:
    pthread_mutex_unlock(&s->mu);
    return rc;
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
    if (mrc == MDB_NOTFOUND)
        return PTC_OK;
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    if (k.mv_size != 8)
        return ptc_error_set(PTC_E_STORE, "store %s: bad version key", s->dir);
    *out = ptc_key_get_u64(k.mv_data);
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
    int rc = PTC_OK;
    MDB_val k, v;
    for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8) {
            rc = ptc_error_set(PTC_E_STORE, "store %s: bad version key", s->dir);
            goto out_free;
        }
        ptc_version_rec r;
        if ((rc = ptc_version_rec_decode(&r, v.mv_data, v.mv_size)) < 0)
            goto out_free;
        if ((rc = ptc_grow((void **)&arr, &cap, cnt + 1, sizeof *arr)) < 0) {
            ptc_version_rec_free(&r);
            goto out_free;
        }
        info_from_rec(&arr[cnt++], ptc_key_get_u64(k.mv_data), &r);
    }
    if (mrc != MDB_NOTFOUND) {
        rc = ptc_store_mdb_error(mrc, s->dir);
        goto out_free;
    }
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
    uint8_t key[8];
    ptc_key_version(key, d->v);
    MDB_val k = {8, key};
    int mrc = mdb_del(txn, d->s->dbi_versions, &k, NULL);
    if (mrc == MDB_NOTFOUND)
        return ptc_error_set(PTC_E_NOTFOUND, "version %llu not found in store %s",
                             (unsigned long long)d->v, d->s->dir);
    if (mrc)
        return ptc_store_mdb_error(mrc, d->s->dir);
    PTC_TRY(delete_prefix(txn, d->s->dbi_tensors, key));
    return delete_prefix(txn, d->s->dbi_shards, key);
}

int ptc_store_version_delete(ptc_store *s, uint64_t version)
{
    int fd;
    PTC_TRY(ptc_store_lock(s, &fd));
    struct del_ctx d = {s, version};
    int rc = ptc_store_write_txn(s, delete_txn, &d);
    ptc_store_unlock(fd);
    return rc;
}
