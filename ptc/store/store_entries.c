/* The store's own entries (docs/format.md §1): every entry the store makes,
 * writes or removes is reached from a handle on the store's root, one
 * component at a time, no link followed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

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

/* What entry @p name of @p dfd is, for a message; NULL if it is what the
 * store makes: a directory (PTC_ENTRY_DIR), a regular file (PTC_ENTRY_FILE), a
 * regular file with no other hard link (PTC_ENTRY_WRITABLE: one the store
 * writes to in place, so no other name may share it). */
const char *ptc_store_entry_kind(int dfd, const char *name, int want)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return NULL;
    if (S_ISLNK(st.st_mode))
        return "a symbolic link";
    if (want == PTC_ENTRY_DIR)
        return S_ISDIR(st.st_mode) ? NULL : "not a directory";
    if (S_ISDIR(st.st_mode))
        return "a directory";
    if (!S_ISREG(st.st_mode))
        return "not a regular file";
    if (want == PTC_ENTRY_WRITABLE && st.st_nlink > 1)
        return "a file with other hard links";
    return NULL;
}

int ptc_store_foreign_error(const char *dir, const char *rel, const char *name, const char *kind)
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
    return ptc_store_foreign_error(s->dir, rel, name, kind);
}

/* ptc_store_subdir() from a root handle (the store handle may not exist yet). */
int ptc_store_subdir_at(int rootfd, const char *dir, const char *rel, bool create, int *out)
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
            const char *kind = ptc_store_entry_kind(fd, c, PTC_ENTRY_DIR);
            if (e == ENOENT)
                rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no %s%s%s", dir, parent,
                                   *parent ? "/" : "", c);
            else if (kind)
                rc = ptc_store_foreign_error(dir, parent, c, kind);
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
    return ptc_store_subdir_at(s->rootfd, s->dir, rel, create, fd);
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
    const char *kind = ptc_store_entry_kind(dfd, name, PTC_ENTRY_FILE);
    if (e == EEXIST && kind)
        return ptc_store_foreign_error(s->dir, rel, name, kind);
    errno = e;
    return ptc_error_sys(e == EEXIST ? PTC_E_EXISTS : PTC_E_IO, "create %s/%s/%s", s->dir, rel,
                         name);
}

/* The spare pack file @p name (packs/spare, left by a recycling gc: no
 * version references it, no reader held it; docs/format.md §7) renamed into
 * directory @p vfd and opened for writing in place: its descriptor, or -1
 * if there is none or it is not a plain file of its own (a link, a file
 * with other names: left alone). */
static int take_spare(const ptc_store *s, int vfd, const char *name)
{
    const int dflags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int pfd = openat(s->rootfd, "packs", dflags);
    int sfd = pfd >= 0 ? openat(pfd, PTC_STORE_SPARE_DIR, dflags) : -1;
    struct stat st;
    bool moved = sfd >= 0 && fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                 S_ISREG(st.st_mode) && st.st_nlink == 1 &&
                 renameat2(sfd, name, vfd, name, RENAME_NOREPLACE) == 0;
    if (sfd >= 0)
        close(sfd);
    if (pfd >= 0)
        close(pfd);
    if (!moved)
        return -1;
    int fd = openat(vfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)) {
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        unlinkat(vfd, name, 0); /* then made anew */
    return fd;
}

int ptc_store_create_pack(const ptc_store *s, int dfd, const char *rel, const char *name,
                          int *fd, bool *spare)
{
    /* a new file in the store's own directory: no link is followed, and a
     * file already there (no writer of this version made it) is not ours */
    *spare = (*fd = take_spare(s, dfd, name)) >= 0;
    if (!*spare)
        PTC_TRY(ptc_store_create_file(s, dfd, rel, name, O_WRONLY, fd));
    flock(*fd, LOCK_SH); /* being written: a recycling gc never moves it (a straggler's) */
    return PTC_OK;
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

/* ---- open / close ------------------------------------------------------------------- */

