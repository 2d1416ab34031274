/* File I/O helpers: whole reads and writes that loop over short transfers
 * and EINTR, fsync of files and directories, mkdir -p, and atomic
 * replacement of a file through a temporary next to it. Writes and fsyncs
 * count toward fault injection (fault.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ptc/error.h"
#include "base/util_internal.h"

int ptc_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what)
{
    int e = ptc_fault_write_hit();
    if (e) {
        errno = e;
        return ptc_error_sys(PTC_E_IO, "write %s", what);
    }
    const char *p = buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return ptc_error_sys(PTC_E_IO, "write %s", what);
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return PTC_OK;
}

int ptc_write_all(int fd, const void *buf, size_t n, const char *what)
{
    int e = ptc_fault_write_hit();
    if (e) {
        errno = e;
        return ptc_error_sys(PTC_E_IO, "write %s", what);
    }
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return ptc_error_sys(PTC_E_IO, "write %s", what);
        }
        p += w;
        n -= (size_t)w;
    }
    return PTC_OK;
}

int ptc_fsync(int fd, const char *what)
{
    int e = ptc_fault_write_hit();
    if (e) {
        errno = e;
        return ptc_error_sys(PTC_E_IO, "fsync %s", what);
    }
    if (fsync(fd) != 0)
        return ptc_error_sys(PTC_E_IO, "fsync %s", what);
    return PTC_OK;
}

#ifdef __linux__
void ptc_start_writeback(int fd, uint64_t off, uint64_t len)
{
    (void)sync_file_range(fd, (off_t)off, (off_t)len, SYNC_FILE_RANGE_WRITE);
}
#else
void ptc_start_writeback(int fd, uint64_t off, uint64_t len)
{
    (void)fd;
    (void)off;
    (void)len;
}
#endif

int ptc_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ptc_error_sys(PTC_E_IO, "open %s", dir);
    int rc = ptc_fsync(fd, dir);
    close(fd);
    return rc;
}

int ptc_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *what)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return ptc_error_sys(PTC_E_IO, "read %s", what);
        }
        if (r == 0)
            return ptc_error_set(PTC_E_FORMAT, "%s: truncated at byte %llu", what,
                                 (unsigned long long)off);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return PTC_OK;
}

/* Opened without blocking (a FIFO's open waits for a writer, a device's may
 * wait too) and checked with fstat before a byte is read: only a regular
 * file is read. A path that is not one is refused before it is opened. */
int ptc_file_read(const char *path, size_t max, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ptc_error_set(PTC_E_IO, "%s is not a regular file (%s)", path,
                             ptc_file_kind(st.st_mode));
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "open %s", path);
    int rc = PTC_OK;
    if (fstat(fd, &st) != 0)
        rc = ptc_error_sys(PTC_E_IO, "stat %s", path);
    else if (!S_ISREG(st.st_mode)) /* replaced between the stat and the open */
        rc = ptc_error_set(PTC_E_IO, "%s is not a regular file (%s)", path,
                           ptc_file_kind(st.st_mode));
    else if ((uint64_t)st.st_size > max)
        rc = ptc_error_set(PTC_E_RANGE, "%s: %lld bytes, expected at most %zu", path,
                           (long long)st.st_size, max);
    else if (fcntl(fd, F_SETFL, 0) != 0) /* reads of a regular file block as usual */
        rc = ptc_error_sys(PTC_E_IO, "fcntl %s", path);
    char *buf = NULL;
    if (rc == PTC_OK) {
        buf = ptc_malloc((size_t)st.st_size + 1);
        rc = buf ? ptc_pread_all(fd, buf, (size_t)st.st_size, 0, path) : PTC_E_NOMEM;
        if (rc == PTC_E_FORMAT) /* shorter than fstat said: rewritten while read */
            rc = ptc_error_set(PTC_E_BUSY, "%s changed while it was read", path);
    }
    close(fd);
    if (rc != PTC_OK) {
        ptc_free(buf);
        return rc;
    }
    buf[st.st_size] = 0;
    *out = buf;
    *len = (size_t)st.st_size;
    return PTC_OK;
}

const char *ptc_file_kind(mode_t mode)
{
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a file";
}

int ptc_file_read_text(const char *path, size_t max, char **out)
{
    size_t len = 0;
    PTC_TRY(ptc_file_read(path, max, out, &len));
    int rc = PTC_OK;
    if (strlen(*out) != len)
        rc = ptc_error_set(PTC_E_FORMAT, "%s holds a NUL byte at byte %zu", path,
                           strlen(*out));
    else if (len == 0 || (*out)[len - 1] != '\n') {
        char q[128];
        ptc_quote_name(q, sizeof q, *out, len);
        rc = ptc_error_set(PTC_E_BUSY, "%s is incomplete ('%s' without its newline)", path, q);
    }
    if (rc != PTC_OK) {
        ptc_free(*out);
        *out = NULL;
    }
    return rc;
}

int ptc_mkdir_p(const char *path, mode_t mode)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return ptc_error_set(PTC_E_INVAL, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return ptc_error_sys(PTC_E_IO, "mkdir %s", buf);
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return ptc_error_set(PTC_E_IO, "%s is not a directory", path);
    return PTC_OK;
}

/* ---- atomic replacement --------------------------------------------------------- */

int ptc_tmpfile_create(const char *path, char **tmp_path, int *fd)
{
    *tmp_path = NULL;
    *fd = -1;
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dirlen;
    if (*base == '\0' || !strcmp(base, ".") || !strcmp(base, ".."))
        return ptc_error_set(PTC_E_INVAL, "output path '%s' names a directory", path);
    /* the rename that ends the write must not fail after the whole file is
     * written: refuse now what it would refuse then */
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return ptc_error_set(PTC_E_INVAL, "output path '%s' is a directory", path);
        char *dir = dirlen ? ptc_strndup(path, dirlen) : ptc_strdup(".");
        if (!dir)
            return PTC_E_NOMEM;
        struct stat ds;
        bool sticky = stat(dir, &ds) == 0 && (ds.st_mode & S_ISVTX);
        ptc_free(dir);
        uid_t me = geteuid();
        if (sticky && me != 0 && st.st_uid != me && ds.st_uid != me)
            return ptc_error_set(PTC_E_IO,
                                 "cannot replace '%s': another user's file in a sticky "
                                 "directory", path);
    }
    size_t cap = strlen(path) + 64;
    char *tmp = ptc_malloc(cap);
    if (!tmp)
        return PTC_E_NOMEM;
    static _Thread_local unsigned counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(tmp, cap, "%.*s.%s.tmp.%ld.%u", (int)dirlen, path, base, (long)getpid(),
                 (unsigned)(counter++ ^ ((unsigned)time(NULL) << 8)));
        int f = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (f >= 0) {
            *tmp_path = tmp;
            *fd = f;
            return PTC_OK;
        }
        if (errno != EEXIST) {
            int rc = ptc_error_sys(PTC_E_IO, "create %s", tmp);
            ptc_free(tmp);
            return rc;
        }
    }
    ptc_free(tmp);
    return ptc_error_set(PTC_E_IO, "cannot create a temporary file next to %s", path);
}

int ptc_tmpfile_commit(int fd, char *tmp_path, const char *path)
{
    int rc = ptc_fsync(fd, tmp_path);
    if (rc < 0)
        goto out_discard;
    if (close(fd) != 0) {
        fd = -1;
        rc = ptc_error_sys(PTC_E_IO, "close %s", tmp_path);
        goto out_discard;
    }
    fd = -1;
    if (rename(tmp_path, path) != 0) {
        rc = ptc_error_sys(PTC_E_IO, "rename %s to %s", tmp_path, path);
        goto out_discard;
    }
    ptc_free(tmp_path);
    {
        const char *slash = strrchr(path, '/');
        char *dir = slash ? ptc_strndup(path, slash == path ? 1 : (size_t)(slash - path))
                          : ptc_strdup(".");
        if (!dir)
            return PTC_E_NOMEM;
        rc = ptc_fsync_dir(dir);
        ptc_free(dir);
    }
    return rc;

out_discard:
    ptc_tmpfile_discard(fd, tmp_path);
    return rc;
}

void ptc_tmpfile_discard(int fd, char *tmp_path)
{
    if (fd >= 0)
        close(fd);
    if (tmp_path) {
        unlink(tmp_path);
        ptc_free(tmp_path);
    }
}
