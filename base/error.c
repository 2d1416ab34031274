/* Error codes, thread-local detail messages and logging. */
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

void ptc_log_changed(char *last, size_t cap, int level, const char *msg)
{
    if (!msg) {
        if (cap)
            last[0] = 0;
        return;
    }
    if (cap && !strncmp(last, msg, cap - 1))
        return;
    snprintf(last, cap, "%s", msg);
    ptc_log(level, "%s", msg);
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
