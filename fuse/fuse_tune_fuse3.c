/* See fuse_tune.h. */
#define FUSE_USE_VERSION 312

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fuse/fuse_tune.h"

/* libfuse answers a request in the thread that read it, so the INIT
 * request seen by the read hook and its reply seen by the write hook meet
 * in one thread: per-thread state, nothing shared between sessions. */
static __thread struct {
    bool pending;     /* this thread read an INIT request and has not answered */
    uint64_t unique;  /* its id */
    uint32_t offered; /* the kernel's flags */
} init_seen;

static ssize_t tune_read(int fd, void *buf, size_t len, void *user)
{
    (void)user;
    ssize_t n = read(fd, buf, len);
    struct fuse_in_header h;
    if (n >= (ssize_t)(sizeof h + sizeof(struct fuse_init_in))) {
        memcpy(&h, buf, sizeof h);
        if (h.opcode == FUSE_INIT) {
            struct fuse_init_in in;
            memcpy(&in, (const char *)buf + sizeof h, sizeof in);
            init_seen.pending = true;
            init_seen.unique = h.unique;
            init_seen.offered = in.flags;
        }
    }
    return n;
}

static ssize_t tune_writev(int fd, struct iovec *iov, int count, void *user)
{
    (void)user;
    /* the INIT reply: the out header, then fuse_init_out (libfuse puts them
     * in the first two vectors; an error reply has no second vector) */
    if (init_seen.pending && count >= 2 && count <= 8 &&
        iov[0].iov_len == sizeof(struct fuse_out_header) &&
        iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t) &&
        iov[1].iov_len <= sizeof(struct fuse_init_out)) {
        struct fuse_out_header h;
        memcpy(&h, iov[0].iov_base, sizeof h);
        if (h.unique == init_seen.unique) {
            init_seen.pending = false;
            struct fuse_init_out out;
            memset(&out, 0, sizeof out);
            memcpy(&out, iov[1].iov_base, iov[1].iov_len);
            if (h.error == 0 && out.major == FUSE_KERNEL_VERSION) {
                if (init_seen.offered & FUSE_PARALLEL_DIROPS)
                    out.flags |= FUSE_PARALLEL_DIROPS;
                out.flags &= ~(uint32_t)FUSE_AUTO_INVAL_DATA;
                struct iovec v[8];
                memcpy(v, iov, sizeof *v * (size_t)count);
                v[1].iov_base = &out;
                return writev(fd, v, count);
            }
        }
    }
    return writev(fd, iov, count);
}

int ptc_fuse_tune(struct fuse_session *se)
{
    static const struct fuse_custom_io io = {.writev = tune_writev, .read = tune_read};
    return fuse_session_custom_io(se, &io, fuse_session_fd(se)) == 0 ? 0 : -1;
}

/* /proc/self/mountinfo writes space, tab, newline and backslash as \ooo */
static void unescape_octal(char *s)
{
    char *d = s;
    for (; *s; s++, d++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *d = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *d = *s;
        }
    }
    *d = '\0';
}

int ptc_fuse_raise_readahead(const char *mountpoint, unsigned kib)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[4608];
    unsigned maj = 0, mnr = 0;
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        char mp[4096];
        unsigned a, b;
        /* id parent major:minor root mountpoint ... (later lines win) */
        if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mp) != 3)
            continue;
        unescape_octal(mp);
        if (strcmp(mp, mountpoint) == 0 && strstr(line, "fuse")) {
            maj = a;
            mnr = b;
            found = true;
        }
    }
    fclose(f);
    if (!found)
        return -1;
    char p[96], v[16];
    snprintf(p, sizeof p, "/sys/class/bdi/%u:%u/read_ahead_kb", maj, mnr);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int n = snprintf(v, sizeof v, "%u", kib);
    bool ok = write(fd, v, (size_t)n) == n;
    close(fd);
    return ok ? 0 : -1;
}
