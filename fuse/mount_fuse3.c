/* libfuse3 adapter: a thin shell around the view library (view.c). Uses
 * the high-level, path-based API: the tree is defined by its paths, and
 * the immutable files keep the kernel page cache.
 *
 * Speed: no file needs per-open state (a read resolves its path through
 * the view's caches), so open answers ENOSYS where the kernel supports it
 * (FUSE_CAP_NO_OPEN_SUPPORT): the kernel then skips OPEN, FLUSH and
 * RELEASE for every file, and a random samples/<ID> costs one LOOKUP and
 * one READ. The records of an empty step file, counted at open otherwise,
 * count at lookup then. */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuse/fuse_tune.h"
#include "ptc/mount.h"
#include "ptc/util_internal.h"

#define MOUNT_MAX_IO (1u << 20)
#define MOUNT_THREADS 10

struct mount_ctx {
    ptc_view *view;
    bool no_open; /* the kernel skips opens (set once in init) */
    uid_t uid;
    gid_t gid;
    struct timespec when;
};

static struct mount_ctx *ctx_get(void)
{
    return fuse_get_context()->private_data;
}

/* Unexpected failures (not a missing path) go to the log: the kernel only
 * sees an errno. */
static int fail(int rc, const char *op, const char *path)
{
    if (rc != PTC_E_NOTFOUND && rc != PTC_E_RANGE)
        ptc_log(PTC_LOG_WARN, "%s %s: %s", op, path ? path : "", ptc_last_error());
    return -ptc_view_errno(rc);
}

static void fill_stat(const struct mount_ctx *c, struct stat *st, bool is_dir, uint64_t size)
{
    memset(st, 0, sizeof *st);
    st->st_mode = is_dir ? (S_IFDIR | 0555) : (S_IFREG | 0444);
    st->st_nlink = is_dir ? 2 : 1;
    st->st_size = (off_t)size;
    st->st_blksize = MOUNT_MAX_IO;
    st->st_blocks = (blkcnt_t)((size + 511) / 512);
    st->st_uid = c->uid;
    st->st_gid = c->gid;
    st->st_atim = st->st_mtim = st->st_ctim = c->when;
}

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    /* Everything under the mount is immutable: cache attributes and data in
     * the kernel for long; negative entries briefly (a dataset or model
     * version may appear while mounted). */
    cfg->kernel_cache = 1;
    cfg->entry_timeout = 86400;
    cfg->attr_timeout = 86400;
    cfg->negative_timeout = 1;
    cfg->nullpath_ok = 0; /* reads without an open find the file by its path */
    conn->max_readahead = conn->max_readahead > MOUNT_MAX_IO ? conn->max_readahead : MOUNT_MAX_IO;
    conn->max_write = MOUNT_MAX_IO;
    conn->max_read = MOUNT_MAX_IO; /* must match the max_read mount option */
    conn->want |= FUSE_CAP_ASYNC_READ & conn->capable;
    struct mount_ctx *c = ctx_get();
    c->no_open = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
    return c;
}

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    struct mount_ctx *c = ctx_get();
    (void)fi; /* the handle may be a file's or a directory's: use the path */
    if (!path)
        return -ENOENT;
    ptc_view_stat vs;
    /* without opens, a lookup (getattr by path; attributes are then cached
     * for a day) is where an empty step file is served */
    int rc = c->no_open ? ptc_view_lookup(c->view, path, &vs)
                        : ptc_view_stat_path(c->view, path, &vs);
    if (rc < 0)
        return fail(rc, "stat", path);
    fill_stat(c, st, vs.is_dir, vs.size);
    return 0;
}

struct fill_ctx {
    void *buf;
    fuse_fill_dir_t filler;
    const struct mount_ctx *c;
};

static int emit_entry(void *p, const char *name, bool is_dir)
{
    struct fill_ctx *f = p;
    struct stat st;
    fill_stat(f->c, &st, is_dir, 0);
    return f->filler(f->buf, name, &st, 0, 0);
}

/* With nullpath_ok, readdir gets no path: keep it in the directory handle. */
static int op_opendir(const char *path, struct fuse_file_info *fi)
{
    ptc_view_stat vs;
    int rc = ptc_view_stat_path(ctx_get()->view, path, &vs);
    if (rc < 0)
        return fail(rc, "opendir", path);
    if (!vs.is_dir)
        return -ENOTDIR;
    char *p = ptc_strdup(path);
    if (!p)
        return -ENOMEM;
    fi->fh = (uint64_t)(uintptr_t)p;
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    return 0;
}

static int op_releasedir(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    ptc_free((char *)(uintptr_t)fi->fh);
    return 0;
}

static int op_readdir(const char *dpath, void *buf, fuse_fill_dir_t filler, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)dpath;
    (void)off;
    (void)flags;
    const char *path = (const char *)(uintptr_t)fi->fh;
    struct mount_ctx *c = ctx_get();
    struct fill_ctx f = {buf, filler, c};
    filler(buf, ".", NULL, 0, 0);
    filler(buf, "..", NULL, 0, 0);
    int rc = ptc_view_list(c->view, path, emit_entry, &f);
    return rc < 0 ? fail(rc, "list", path) : 0;
}

static int op_open(const char *path, struct fuse_file_info *fi)
{
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
        return -EROFS;
    if (ctx_get()->no_open)
        return -ENOSYS; /* once: no OPEN/FLUSH/RELEASE from now on */
    ptc_view_file *f;
    int rc = ptc_view_open(ctx_get()->view, path, &f);
    if (rc < 0)
        return fail(rc, "open", path);
    fi->fh = (uint64_t)(uintptr_t)f;
    fi->keep_cache = 1;
    return 0;
}

static int op_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
    size_t got;
    if (off < 0)
        return -EINVAL;
    ptc_view_file *f = fi ? (ptc_view_file *)(uintptr_t)fi->fh : NULL;
    int rc = f ? ptc_view_read(f, (uint64_t)off, buf, size, &got)
               : ptc_view_pread(ctx_get()->view, path, (uint64_t)off, buf, size, &got);
    if (rc < 0)
        return fail(rc, "read", path);
    return (int)got;
}

static int op_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    ptc_view_close((ptc_view_file *)(uintptr_t)fi->fh);
    return 0;
}

static int op_statfs(const char *path, struct statvfs *st)
{
    (void)path;
    memset(st, 0, sizeof *st);
    st->f_bsize = MOUNT_MAX_IO;
    st->f_frsize = 4096;
    st->f_namemax = 255;
    st->f_flag = ST_RDONLY;
    return 0;
}

static const struct fuse_operations mount_ops = {
    .init = op_init,
    .getattr = op_getattr,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .statfs = op_statfs,
};

/* ---- the tick thread ---------------------------------------------------------------- */

struct ticker {
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    const ptc_mount_options *opts;
};

static void *tick_main(void *p)
{
    struct ticker *t = p;
    unsigned ms = t->opts->tick_ms ? t->opts->tick_ms : 1000;
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        struct timespec due;
        clock_gettime(CLOCK_REALTIME, &due);
        due.tv_sec += ms / 1000;
        due.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (due.tv_nsec >= 1000000000L) {
            due.tv_sec++;
            due.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->cond, &t->lock, &due);
        if (t->stop)
            break;
        pthread_mutex_unlock(&t->lock);
        t->opts->tick(t->opts->user);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* ---- mount ---------------------------------------------------------------------------- */

static int check_mountpoint(const char *mountpoint)
{
    struct stat st, parent;
    if (stat(mountpoint, &st) != 0) {
        if (errno == ENOENT)
            return ptc_error_set(PTC_E_NOTFOUND, "mount point %s does not exist", mountpoint);
        if (errno == ENOTCONN)
            return ptc_error_set(PTC_E_BUSY,
                                 "mount point %s is a stale mount (run fusermount3 -u %s)",
                                 mountpoint, mountpoint);
        return ptc_error_sys(PTC_E_IO, "mount point %s", mountpoint);
    }
    if (!S_ISDIR(st.st_mode))
        return ptc_error_set(PTC_E_INVAL, "mount point %s is not a directory", mountpoint);
    size_t n = strlen(mountpoint);
    char *up = ptc_malloc(n + 4);
    if (!up)
        return PTC_E_NOMEM;
    snprintf(up, n + 4, "%s/..", mountpoint);
    int rc = stat(up, &parent);
    ptc_free(up);
    if (rc == 0 && (parent.st_dev != st.st_dev || parent.st_ino == st.st_ino))
        return ptc_error_set(PTC_E_BUSY, "%s is already a mount point", mountpoint);
    struct stat dev;
    if (stat("/dev/fuse", &dev) != 0)
        return ptc_error_set(PTC_E_UNSUPPORTED,
                             "no /dev/fuse: the fuse kernel module is not available here");
    return PTC_OK;
}

/* The kernel caps a FUSE mount's readahead at the bdi default (128 KiB)
 * whatever max_readahead says; raise it so sequential reads reach the
 * daemon as 1 MiB requests. Best effort (needs write access to sysfs). The
 * device number comes from /proc/self/mountinfo: a stat of the mount point
 * would wait for this very process to answer. */
static void raise_readahead(const char *mountpoint)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char line[4608];
    unsigned maj = 0, mnr = 0;
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        char mp[4096];
        unsigned a, b;
        /* id parent major:minor root mountpoint ... (later lines win) */
        if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mp) == 3 &&
            strcmp(mp, mountpoint) == 0 && strstr(line, "fuse")) {
            maj = a;
            mnr = b;
            found = true;
        }
    }
    fclose(f);
    if (!found)
        return;
    char p[96];
    snprintf(p, sizeof p, "/sys/class/bdi/%u:%u/read_ahead_kb", maj, mnr);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char v[16];
    int n = snprintf(v, sizeof v, "%u", MOUNT_MAX_IO / 1024);
    if (write(fd, v, (size_t)n) != n)
        ptc_log(PTC_LOG_DEBUG, "cannot raise the readahead of %s", mountpoint);
    close(fd);
}

int ptc_mount_run(ptc_view *view, const char *mountpoint, const ptc_mount_options *opts)
{
    static const ptc_mount_options no_opts;
    if (!opts)
        opts = &no_opts;
    PTC_TRY(check_mountpoint(mountpoint));
    struct mount_ctx c = {.view = view, .uid = getuid(), .gid = getgid()};
    clock_gettime(CLOCK_REALTIME, &c.when);
    char o[256];
    snprintf(o, sizeof o, "ro,fsname=ptc,subtype=ptc,default_permissions,max_read=%u%s",
             MOUNT_MAX_IO, opts->allow_other ? ",allow_other" : "");
    char *argv[] = {"ptc", "-o", o, opts->debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(opts->debug ? 4 : 3, argv);
    int rc = PTC_OK;
    struct fuse *f = fuse_new(&args, &mount_ops, sizeof mount_ops, &c);
    if (!f) {
        rc = ptc_error_set(PTC_E_IO, "cannot set up the fuse filesystem");
        goto out_args;
    }
    if (fuse_mount(f, mountpoint) != 0) {
        rc = ptc_error_set(PTC_E_IO, "cannot mount at %s (see the message above)", mountpoint);
        goto out_destroy;
    }
    raise_readahead(mountpoint);
    if (ptc_fuse_tune(fuse_get_session(f)) != 0)
        ptc_log(PTC_LOG_DEBUG, "cannot tune the fuse session; serving with libfuse's settings");
    /* detach only now, so the caller sees mount errors and a mounted tree */
    if (fuse_daemonize(opts->foreground) != 0) {
        rc = ptc_error_set(PTC_E_IO, "cannot detach from the terminal");
        goto out_unmount;
    }
    struct fuse_session *se = fuse_get_session(f);
    if (fuse_set_signal_handlers(se) != 0) {
        rc = ptc_error_set(PTC_E_IO, "cannot install signal handlers");
        goto out_unmount;
    }
    if (opts->ready) {
        rc = opts->ready(opts->user);
        if (rc < 0)
            goto out_signals;
    }
    struct ticker t = {.opts = opts};
    bool ticking = false;
    if (opts->tick) {
        pthread_mutex_init(&t.lock, NULL);
        pthread_cond_init(&t.cond, NULL);
        ticking = pthread_create(&t.th, NULL, tick_main, &t) == 0;
        if (!ticking) {
            pthread_cond_destroy(&t.cond);
            pthread_mutex_destroy(&t.lock);
            rc = ptc_error_set(PTC_E_IO, "cannot start the tick thread");
            goto out_signals;
        }
    }
    /* > 0: ended by a signal, which is a clean unmount */
    struct fuse_loop_config *lc = fuse_loop_cfg_create();
    if (!lc) {
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory");
        goto out_ticker;
    }
    /* a /dev/fuse clone per worker thread: no thundering herd on one
     * queue; up to MOUNT_THREADS workers (readahead keeps several 1 MiB
     * reads in flight, and parallel lookups overlap), idle ones kept */
    fuse_loop_cfg_set_clone_fd(lc, 1);
    fuse_loop_cfg_set_max_threads(lc, MOUNT_THREADS);
    if (fuse_loop_mt(f, lc) < 0)
        rc = ptc_error_set(PTC_E_IO, "the fuse loop failed");
    fuse_loop_cfg_destroy(lc);
out_ticker:
    if (ticking) {
        pthread_mutex_lock(&t.lock);
        t.stop = true;
        pthread_cond_signal(&t.cond);
        pthread_mutex_unlock(&t.lock);
        pthread_join(t.th, NULL);
        pthread_cond_destroy(&t.cond);
        pthread_mutex_destroy(&t.lock);
        opts->tick(opts->user);
    }
out_signals:
    fuse_remove_signal_handlers(se);
out_unmount:
    fuse_unmount(f);
out_destroy:
    fuse_destroy(f);
out_args:
    fuse_opt_free_args(&args);
    return rc;
}
