/* Error codes, thread-local detail messages, logging, fault injection, and
 * the allocator / I/O wrappers that fault injection counts. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/build_config.h"
#include "ptc/error.h"
#include "base/util_internal.h"

static _Thread_local char tls_msg[1024];

const char *ptc_version(void)
{
    return PTC_VERSION_STRING;
}

unsigned ptc_features(void)
{
    return (PTC_WITH_CUDA ? PTC_FEATURE_CUDA : 0u) | (PTC_WITH_NCCL ? PTC_FEATURE_NCCL : 0u) |
           (PTC_WITH_FUSE ? PTC_FEATURE_FUSE : 0u);
}

const char *ptc_strerror(int code)
{
    switch (code) {
    case PTC_OK: return "success";
    case PTC_E_INVAL: return "invalid argument";
    case PTC_E_NOMEM: return "out of memory";
    case PTC_E_IO: return "i/o error";
    case PTC_E_FORMAT: return "bad file format";
    case PTC_E_NOTFOUND: return "not found";
    case PTC_E_EXISTS: return "already exists";
    case PTC_E_CHECKSUM: return "checksum mismatch";
    case PTC_E_UNSUPPORTED: return "not supported by this build";
    case PTC_E_RANGE: return "out of range";
    case PTC_E_BUSY: return "resource busy";
    case PTC_E_RULE: return "placement rule error";
    case PTC_E_CONFIG: return "configuration does not fit";
    case PTC_E_CUDA: return "cuda error";
    case PTC_E_MPI: return "mpi error";
    case PTC_E_NCCL: return "nccl error";
    case PTC_E_DEADLOCK: return "schedule deadlocks";
    case PTC_E_STORE: return "store metadata inconsistent";
    case PTC_E_TIMEOUT: return "timed out";
    default: return "unknown error";
    }
}

const char *ptc_last_error(void)
{
    return tls_msg;
}

void ptc_error_clear(void)
{
    tls_msg[0] = '\0';
}

static void set_msg(const char *fmt, va_list ap)
{
    /* through a copy: callers wrap the previous message
     * (ptc_error_set(.., "%s: %s", what, ptc_last_error())), and vsnprintf
     * into the buffer it reads from is undefined */
    char msg[sizeof tls_msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(tls_msg, msg, sizeof msg);
    /* one line, always */
    for (char *p = tls_msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

int ptc_error_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_msg(fmt, ap);
    va_end(ap);
    return code;
}

int ptc_error_sys(int code, const char *fmt, ...)
{
    int e = errno;
    char head[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    snprintf(tls_msg, sizeof tls_msg, "%s: %s", head, strerror(e)); /* head is a copy */
    errno = e;
    return code;
}

/* ---- logging ---------------------------------------------------------------- */

static ptc_log_fn log_fn;
static void *log_user;
static int log_max = PTC_LOG_INFO;

void ptc_log_set(ptc_log_fn fn, void *user, int max_level)
{
    log_fn = fn;
    log_user = user;
    log_max = max_level;
}

void ptc_log(int level, const char *fmt, ...)
{
    if (!log_fn || level > log_max)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log_fn(level, buf, log_user);
}

/* ---- fault injection ------------------------------------------------------- */

static atomic_long alloc_fail_at, alloc_count;
static atomic_long write_fail_at, write_count;
static atomic_int write_fail_errno;

void ptc_fault_alloc_at(long n)
{
    atomic_store(&alloc_count, 0);
    atomic_store(&alloc_fail_at, n);
}

void ptc_fault_write_at(long n, int err)
{
    atomic_store(&write_count, 0);
    atomic_store(&write_fail_errno, err ? err : EIO);
    atomic_store(&write_fail_at, n);
}

long ptc_fault_alloc_count(void)
{
    return atomic_load(&alloc_count);
}

long ptc_fault_write_count(void)
{
    return atomic_load(&write_count);
}

static bool alloc_should_fail(void)
{
    long c = atomic_fetch_add(&alloc_count, 1) + 1;
    long at = atomic_load(&alloc_fail_at);
    return at > 0 && c == at;
}

/* Returns the errno to fail with, or 0. */
static int write_should_fail(void)
{
    long c = atomic_fetch_add(&write_count, 1) + 1;
    long at = atomic_load(&write_fail_at);
    return (at > 0 && c == at) ? atomic_load(&write_fail_errno) : 0;
}

/* ---- allocator ---------------------------------------------------------------- */

static void *nomem(size_t n)
{
    ptc_error_set(PTC_E_NOMEM, "out of memory allocating %zu bytes", n);
    return NULL;
}

void *ptc_malloc(size_t n)
{
    if (alloc_should_fail())
        return nomem(n);
    void *p = malloc(n ? n : 1);
    return p ? p : nomem(n);
}

void *ptc_calloc(size_t count, size_t size)
{
    if (alloc_should_fail())
        return nomem(count * size);
    void *p = calloc(count ? count : 1, size ? size : 1);
    return p ? p : nomem(count * size);
}

void *ptc_realloc(void *p, size_t n)
{
    if (alloc_should_fail())
        return nomem(n);
    void *q = realloc(p, n ? n : 1);
    return q ? q : nomem(n);
}

char *ptc_strndup(const char *s, size_t n)
{
    char *p = ptc_malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *ptc_strdup(const char *s)
{
    return ptc_strndup(s, strlen(s));
}

void ptc_free(void *p)
{
    free(p);
}

int ptc_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return PTC_OK;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem)
            return ptc_error_set(PTC_E_NOMEM, "array too large (%zu elements)", need);
        ncap *= 2;
    }
    void *q = ptc_realloc(*p, ncap * elem);
    if (!q)
        return PTC_E_NOMEM;
    *p = q;
    *cap = ncap;
    return PTC_OK;
}

/* ---- I/O ------------------------------------------------------------------------ */

int ptc_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what)
{
    int e = write_should_fail();
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
    int e = write_should_fail();
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
    int e = write_should_fail();
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
