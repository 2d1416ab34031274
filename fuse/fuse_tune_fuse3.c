/* See fuse_tune.h. */
#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fuse/fuse_tune.h"

/* One flag per process is enough: each session's first successful reply is
 * its INIT reply (the kernel sends nothing else until INIT is answered),
 * and a process mounts one session at a time. */
struct tune_io {
    atomic_bool init_done;
    uint32_t offered; /* the kernel's INIT flags */
};

static struct tune_io tune;

static ssize_t tune_read(int fd, void *buf, size_t len, void *user)
{
    (void)user;
    ssize_t n = read(fd, buf, len);
    if (n >= (ssize_t)(sizeof(struct fuse_in_header) + sizeof(struct fuse_init_in)) &&
        !atomic_load_explicit(&tune.init_done, memory_order_acquire)) {
        struct fuse_in_header h;
        memcpy(&h, buf, sizeof h);
        if (h.opcode == FUSE_INIT) {
            struct fuse_init_in in;
            memcpy(&in, (const char *)buf + sizeof h, sizeof in);
            tune.offered = in.flags;
        }
    }
    return n;
}

static ssize_t tune_writev(int fd, struct iovec *iov, int count, void *user)
{
    (void)user;
    /* the INIT reply: out header, then fuse_init_out (libfuse's layout
     * puts them in the first two vectors) */
    if (count >= 2 && iov[0].iov_len == sizeof(struct fuse_out_header) &&
        iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t) &&
        iov[1].iov_len <= sizeof(struct fuse_init_out) &&
        !atomic_load_explicit(&tune.init_done, memory_order_acquire)) {
        struct fuse_out_header h;
        memcpy(&h, iov[0].iov_base, sizeof h);
        struct fuse_init_out out;
        memset(&out, 0, sizeof out);
        memcpy(&out, iov[1].iov_base, iov[1].iov_len);
        if (h.error == 0 && out.major == FUSE_KERNEL_VERSION) {
            if (tune.offered & FUSE_PARALLEL_DIROPS)
                out.flags |= FUSE_PARALLEL_DIROPS;
            out.flags &= ~(uint32_t)FUSE_AUTO_INVAL_DATA;
            struct iovec v[8];
            int n = count < 8 ? count : 8;
            memcpy(v, iov, sizeof *v * (size_t)n);
            v[1].iov_base = &out;
            atomic_store_explicit(&tune.init_done, true, memory_order_release);
            if (count <= 8)
                return writev(fd, v, n);
        }
    }
    return writev(fd, iov, count);
}

int ptc_fuse_tune(struct fuse_session *se)
{
    static const struct fuse_custom_io io = {.writev = tune_writev, .read = tune_read};
    atomic_store(&tune.init_done, false);
    tune.offered = 0;
    return fuse_session_custom_io(se, &io, fuse_session_fd(se)) == 0 ? 0 : -1;
}
