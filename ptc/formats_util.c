/* Atomic file replacement and message quoting for the format modules. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ptc/formats_internal.h"
#include "base/util_internal.h"

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

void ptc_quote_name(char *buf, size_t cap, const char *s, size_t len)
{
    size_t o = 0, max = len > 80 ? 80 : len;
    for (size_t i = 0; i < max && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F || c == '\\' || c == '\'') {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    if (max < len && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o < cap ? o : cap - 1] = '\0';
}
