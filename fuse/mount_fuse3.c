/* libfuse3 adapter: a thin shell around the view library (view.c), on
 * libfuse's low-level API. The tree is defined by paths, so a node the
 * kernel holds is its path and the view's node resolved from it at lookup
 * (a ptc_view_handle), kept while the kernel remembers it (lookups minus
 * forgets); every file is immutable and keeps the kernel page cache.
 *
 * Speed:
 *  - no file needs per-open state, so OPEN answers ENOSYS where the kernel
 *    supports that (FUSE_CAP_NO_OPEN_SUPPORT): the kernel then skips OPEN,
 *    FLUSH and RELEASE, and a random samples/<ID> costs one LOOKUP and one
 *    READ. The records of an empty step file count at lookup;
 *  - a path is resolved once, at its first lookup (ptc_view_node_resolve:
 *    dataset, step plan, open model file); a read goes to that handle
 *    (ptc_view_node_pread_segs), with no parsing and none of the view's
 *    locks, as libfuse's passthrough_ll.c reads from an inode's fd;
 *  - reads reply with the bytes where they lie: record bytes stored raw in a
 *    dataset pack go to the kernel straight from the pack file's mapping
 *    (ptc_view_node_pread_segs, fuse_reply_iov), so a step file's first read
 *    copies each byte once into the page cache rather than twice;
 *  - lookups in one directory run in parallel (fuse/fuse_tune.h). */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fuse/fuse_tune.h"
#include "ptc/mount.h"
#include "base/util_internal.h"
#include "xxhash.h"

#define MOUNT_MAX_IO (1u << 20)
#define MOUNT_THREADS 10
#define MOUNT_SEGS 256  /* pieces of one read reply before the rest is copied */
#define MOUNT_PATH_MAX 4096
#define MOUNT_TIMEOUT 86400.0 /* entries and attributes never change */
#define MOUNT_NEG_TIMEOUT 1.0 /* a dataset or version may appear while mounted */
#define MOUNT_UNKNOWN_INO 0xffffffffu /* listed entries: as libfuse's path API says */

/* A node the kernel holds: its path in the view and what a lookup found. */
struct node {
    struct node *next; /* hash chain */
    uint64_t hash;
    uint64_t nlookup;  /* lookups the kernel has not forgotten */
    ptc_view_handle *h; /* the resolved node: reads go here; released at forget */
    bool is_dir;
    uint64_t size;
    char path[];
};

struct mount_ctx {
    ptc_view *view;
    const ptc_mount_options *opts; /* its sync callback answers fsync */
    bool no_open; /* the kernel skips opens (set once in init) */
    uid_t uid;
    gid_t gid;
    struct timespec when;
    pthread_mutex_t lock; /* the node table */
    struct node **tab;
    size_t cap, count;
    struct node *root;
    pthread_key_t scratch; /* per worker: a read's copied bytes */
};

/* Unexpected failures (not a missing path) go to the log: the kernel only
 * sees an errno. */
static int fail(int rc, const char *op, const char *path)
{
    if (rc != PTC_E_NOTFOUND && rc != PTC_E_RANGE)
        ptc_log(PTC_LOG_WARN, "%s %s: %s", op, path ? path : "", ptc_last_error());
    return ptc_view_errno(rc);
}

static void fill_stat(const struct mount_ctx *c, struct stat *st, fuse_ino_t ino, bool is_dir,
                      uint64_t size)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_mode = is_dir ? (S_IFDIR | 0555) : (S_IFREG | 0444);
    st->st_nlink = is_dir ? 2 : 1;
    st->st_size = (off_t)size;
    st->st_blksize = MOUNT_MAX_IO;
    st->st_blocks = (blkcnt_t)((size + 511) / 512);
    st->st_uid = c->uid;
    st->st_gid = c->gid;
    st->st_atim = st->st_mtim = st->st_ctim = c->when;
}

/* ---- nodes ---------------------------------------------------------------------------- */

static struct node *node_of(const struct mount_ctx *c, fuse_ino_t ino)
{
    return ino == FUSE_ROOT_ID ? c->root : (struct node *)(uintptr_t)ino;
}

static fuse_ino_t ino_of(const struct mount_ctx *c, const struct node *n)
{
    return n == c->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

static struct node *node_new(const char *path, size_t len, uint64_t hash)
{
    struct node *n = ptc_malloc(sizeof *n + len + 1);
    if (!n)
        return NULL;
    memset(n, 0, sizeof *n);
    n->hash = hash;
    memcpy(n->path, path, len + 1);
    return n;
}

/* The node of @p path (hash @p h) with one more kernel reference; NULL if
 * there is none. Caller holds the lock. */
static struct node *node_find(struct mount_ctx *c, const char *path, uint64_t h)
{
    for (struct node *n = c->tab[h & (c->cap - 1)]; n; n = n->next)
        if (n->hash == h && strcmp(n->path, path) == 0) {
            n->nlookup++;
            return n;
        }
    return NULL;
}

/* The node of @p path with one more kernel reference: found, or added
 * holding the resolved *@p vh (then *vh is set NULL: the node owns it);
 * NULL when out of memory. Caller holds the lock. */
static struct node *node_ref(struct mount_ctx *c, const char *path, size_t len, uint64_t h,
                             ptc_view_handle **vh)
{
    struct node *n = node_find(c, path, h);
    if (n)
        return n; /* another lookup added it meanwhile: *vh stays the caller's */
    if (2 * (c->count + 1) > c->cap) {
        size_t ncap = 2 * c->cap;
        struct node **t = ptc_calloc(ncap, sizeof *t);
        if (t) {
            for (size_t i = 0; i < c->cap; i++)
                for (struct node *m = c->tab[i], *next; m; m = next) {
                    next = m->next;
                    m->next = t[m->hash & (ncap - 1)];
                    t[m->hash & (ncap - 1)] = m;
                }
            ptc_free(c->tab);
            c->tab = t;
            c->cap = ncap;
        } /* else: longer chains, still correct */
    }
    n = node_new(path, len, h);
    if (!n)
        return NULL;
    ptc_view_stat st;
    ptc_view_node_stat(*vh, &st);
    n->nlookup = 1;
    n->h = *vh;
    *vh = NULL;
    n->is_dir = st.is_dir;
    n->size = st.size;
    n->next = c->tab[h & (c->cap - 1)];
    c->tab[h & (c->cap - 1)] = n;
    c->count++;
    return n;
}

static void node_forget(struct mount_ctx *c, fuse_ino_t ino, uint64_t nlookup)
{
    struct node *n = node_of(c, ino);
    if (n == c->root)
        return;
    pthread_mutex_lock(&c->lock);
    n->nlookup = nlookup < n->nlookup ? n->nlookup - nlookup : 0;
    if (n->nlookup > 0) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    struct node **pp = &c->tab[n->hash & (c->cap - 1)];
    while (*pp != n)
        pp = &(*pp)->next;
    *pp = n->next;
    c->count--;
    pthread_mutex_unlock(&c->lock);
    ptc_view_node_release(n->h);
    ptc_free(n);
}

/* ---- operations ----------------------------------------------------------------------- */

static void op_init(void *user, struct fuse_conn_info *conn)
{
    struct mount_ctx *c = user;
    /* the kernel lowers the mount's readahead to this when it reads the
     * reply, after ptc_fuse_raise_readahead has raised it */
    conn->max_readahead = PTC_FUSE_READAHEAD_KIB * 1024;
    conn->max_write = MOUNT_MAX_IO;
    conn->max_read = MOUNT_MAX_IO; /* must match the max_read mount option */
    conn->want |= FUSE_CAP_ASYNC_READ & conn->capable;
    conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA; /* nothing ever changes */
    c->no_open = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct mount_ctx *c = fuse_req_userdata(req);
    const struct node *p = node_of(c, parent);
    char path[MOUNT_PATH_MAX];
    int len = snprintf(path, sizeof path, "%s/%s", strcmp(p->path, "/") ? p->path : "", name);
    if (len < 0 || (size_t)len >= sizeof path) {
        fuse_reply_err(req, ENAMETOOLONG);
        return;
    }
    /* a node the kernel already holds is not resolved again (nothing in
     * the tree changes once found) */
    uint64_t hash = XXH3_64bits(path, (size_t)len);
    pthread_mutex_lock(&c->lock);
    struct node *n = node_find(c, path, hash);
    pthread_mutex_unlock(&c->lock);
    if (!n) {
        ptc_view_handle *vh;
        /* without opens, the first lookup is where an empty step file is
         * served (once per view, however often it is resolved) */
        int rc = ptc_view_node_resolve(c->view, path, &vh);
        if (rc == PTC_E_NOTFOUND) {
            struct fuse_entry_param e = {.ino = 0, .entry_timeout = MOUNT_NEG_TIMEOUT};
            fuse_reply_entry(req, &e);
            return;
        }
        if (rc < 0) {
            fuse_reply_err(req, fail(rc, "lookup", path));
            return;
        }
        pthread_mutex_lock(&c->lock);
        n = node_ref(c, path, (size_t)len, hash, &vh);
        pthread_mutex_unlock(&c->lock);
        ptc_view_node_release(vh); /* NULL when the node took it */
        if (!n) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
    }
    struct fuse_entry_param e = {.entry_timeout = MOUNT_TIMEOUT, .attr_timeout = MOUNT_TIMEOUT};
    e.ino = ino_of(c, n);
    fill_stat(c, &e.attr, e.ino, n->is_dir, n->size);
    if (fuse_reply_entry(req, &e) != 0)
        node_forget(c, e.ino, 1); /* the kernel never got it */
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    node_forget(fuse_req_userdata(req), ino, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    for (size_t i = 0; i < count; i++)
        node_forget(fuse_req_userdata(req), forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct mount_ctx *c = fuse_req_userdata(req);
    const struct node *n = node_of(c, ino);
    struct stat st;
    fill_stat(c, &st, ino, n->is_dir, n->size);
    fuse_reply_attr(req, &st, MOUNT_TIMEOUT);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount_ctx *c = fuse_req_userdata(req);
    if (node_of(c, ino)->is_dir) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (c->no_open) {
        fuse_reply_err(req, ENOSYS); /* once: no OPEN/FLUSH/RELEASE from now on */
        return;
    }
    fi->keep_cache = 1; /* reads need no per-open state: they go to the node's handle */
    fuse_reply_open(req, fi);
}

static void free_scratch(void *p)
{
    ptc_free(p);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)fi;
    struct mount_ctx *c = fuse_req_userdata(req);
    const struct node *n = node_of(c, ino);
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    size = size < MOUNT_MAX_IO ? size : MOUNT_MAX_IO;
    void *scratch = pthread_getspecific(c->scratch);
    if (!scratch) {
        scratch = ptc_malloc(MOUNT_MAX_IO);
        if (!scratch || pthread_setspecific(c->scratch, scratch) != 0) {
            ptc_free(scratch);
            fuse_reply_err(req, ENOMEM);
            return;
        }
    }
    ptc_view_seg segs[MOUNT_SEGS];
    size_t nseg = MOUNT_SEGS, got;
    int rc = ptc_view_node_pread_segs(n->h, (uint64_t)off, size, scratch, segs, &nseg, &got);
    if (rc < 0) {
        fuse_reply_err(req, fail(rc, "read", n->path));
        return;
    }
    struct iovec iov[MOUNT_SEGS];
    for (size_t i = 0; i < nseg; i++)
        iov[i] = (struct iovec){(void *)segs[i].ptr, segs[i].len};
    fuse_reply_iov(req, iov, (int)nseg);
}

/* fsync and fsyncdir of any node: the data never changes, but what reads
 * did (served counts) is made durable by the owner's sync callback. FLUSH
 * (every close, where the kernel sends opens at all) does not: a close
 * would cost a store transaction. */
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)datasync;
    (void)fi;
    struct mount_ctx *c = fuse_req_userdata(req);
    int rc = c->opts->sync ? c->opts->sync(c->opts->user) : PTC_OK;
    if (rc < 0) {
        ptc_log(PTC_LOG_WARN, "fsync %s: %s", node_of(c, ino)->path, ptc_last_error());
        fuse_reply_err(req, EIO);
        return;
    }
    fuse_reply_err(req, 0);
}

static bool lists_store(const char *path)
{
    return strcmp(path, "/models") == 0 || strcmp(path, "/datasets") == 0;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount_ctx *c = fuse_req_userdata(req);
    if (!node_of(c, ino)->is_dir) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    /* models/ and datasets/ list what the store holds at each opendir
     * (versions and datasets come and go while mounted): the kernel drops
     * their cached listing at every open; every other listing is fixed */
    bool fixed = !lists_store(node_of(c, ino)->path);
    fi->cache_readdir = fixed;
    fi->keep_cache = fixed;
    fuse_reply_open(req, fi);
}

/* Directory entries from entry number @p off on, as many as fit. */
struct dir_fill {
    fuse_req_t req;
    const struct mount_ctx *c;
    char *buf;
    size_t size, used;
    off_t off, next; /* entries to skip; number of the entry being added */
};

static int dir_add(struct dir_fill *d, const char *name, bool is_dir)
{
    if (d->next++ < d->off)
        return 0;
    struct stat st;
    fill_stat(d->c, &st, MOUNT_UNKNOWN_INO, is_dir, 0);
    size_t need = fuse_add_direntry(d->req, d->buf + d->used, d->size - d->used, name, &st,
                                    d->next);
    if (need > d->size - d->used)
        return 1; /* full: the kernel asks again from here */
    d->used += need;
    return 0;
}

static int emit_entry(void *p, const char *name, bool is_dir)
{
    return dir_add(p, name, is_dir);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    struct mount_ctx *c = fuse_req_userdata(req);
    const struct node *n = node_of(c, ino);
    size = size < MOUNT_MAX_IO ? size : MOUNT_MAX_IO;
    struct dir_fill d = {.req = req, .c = c, .buf = ptc_malloc(size), .size = size, .off = off};
    if (!d.buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int rc = PTC_OK;
    if (!dir_add(&d, ".", true) && !dir_add(&d, "..", true))
        rc = ptc_view_list(c->view, n->path, emit_entry, &d);
    if (rc < 0)
        fuse_reply_err(req, fail(rc, "list", n->path));
    else
        fuse_reply_buf(req, d.buf, d.used);
    ptc_free(d.buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    (void)fi;
    fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs st;
    memset(&st, 0, sizeof st);
    st.f_bsize = MOUNT_MAX_IO;
    st.f_frsize = 4096;
    st.f_namemax = 255;
    st.f_flag = ST_RDONLY;
    fuse_reply_statfs(req, &st);
}

static const struct fuse_lowlevel_ops mount_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .open = op_open,
    .read = op_read,
    .fsync = op_fsync,
    .fsyncdir = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .statfs = op_statfs,
};

/* ---- the tick thread ---------------------------------------------------------------- */

struct ticker {
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    const ptc_mount_options *opts;
    struct mount_ctx *c;
    struct fuse_session *se;
};

/* ---- versions that went away ------------------------------------------------------------ */

typedef struct name_set {
    char (*v)[64];
    size_t n, cap;
} name_set;

static int add_name(void *ctx, const char *name, bool is_dir)
{
    (void)is_dir;
    name_set *s = ctx;
    if (strlen(name) >= sizeof *s->v)
        return 0;
    if (ptc_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v) < 0)
        return 1;
    snprintf(s->v[s->n++], sizeof *s->v, "%s", name);
    return 0;
}

static bool has_name(const name_set *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return true;
    return false;
}

/* The kernel keeps a looked-up entry (and through it the node, which holds
 * the version's open files) for as long as it likes: tell it to forget the
 * entries of versions that are gone from models/, so that their nodes are
 * forgotten once no file of them is open and the view can let the version
 * go (its pack files, deleted by gc, then free their space). */
static void forget_gone_models(struct mount_ctx *c, struct fuse_session *se)
{
    static const char prefix[] = "/models/";
    name_set held = {0}, live = {0};
    struct node *models = NULL;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->cap; i++)
        for (struct node *n = c->tab[i]; n; n = n->next) {
            if (strcmp(n->path, "/models") == 0)
                models = n;
            else if (strncmp(n->path, prefix, sizeof prefix - 1) == 0 &&
                     !strchr(n->path + sizeof prefix - 1, '/'))
                add_name(&held, n->path + sizeof prefix - 1, true);
        }
    fuse_ino_t parent = models ? ino_of(c, models) : 0;
    pthread_mutex_unlock(&c->lock);
    if (parent && held.n && ptc_view_list(c->view, "/models", add_name, &live) == PTC_OK)
        for (size_t i = 0; i < held.n; i++)
            if (!has_name(&live, held.v[i]))
                fuse_lowlevel_notify_inval_entry(se, parent, held.v[i], strlen(held.v[i]));
    ptc_free(held.v);
    ptc_free(live.v);
}

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
        forget_gone_models(t->c, t->se);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* ---- detaching --------------------------------------------------------------------------- */

/* Detach from the caller (libfuse's fuse_daemonize, but the parent learns
 * how the start ended): fork; the child goes on in a new session at / and
 * reports once it is serving, or why it is not, through a pipe; the parent
 * waits for that report. Returns 1 in the parent with *rc the child's
 * outcome, 0 in the child with *report the pipe's write end. */
static int detach(int *report, int *rc)
{
    *report = -1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        *rc = ptc_error_sys(PTC_E_IO, "cannot detach from the terminal");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        *rc = ptc_error_sys(PTC_E_IO, "cannot detach from the terminal");
        close(p[0]);
        close(p[1]);
        return 1;
    }
    if (pid == 0) {
        close(p[0]);
        *report = p[1];
        (void)setsid();
        (void)!chdir("/");
        return 0;
    }
    close(p[1]);
    /* the report: i32 code, then the message; nothing (EOF) if the child died */
    char msg[1024];
    int32_t code = PTC_E_IO;
    size_t got = 0;
    ssize_t n;
    while (got < sizeof msg - 1 &&
           ((n = read(p[0], msg + got, sizeof msg - 1 - got)) > 0 || (n < 0 && errno == EINTR)))
        got += n > 0 ? (size_t)n : 0;
    close(p[0]);
    msg[got] = 0;
    if (got >= sizeof code) {
        memcpy(&code, msg, sizeof code);
        *rc = code >= 0 ? PTC_OK : ptc_error_set(code, "%s", msg + sizeof code);
        return 1;
    }
    int st = 0;
    waitpid(pid, &st, 0);
    *rc = WIFSIGNALED(st)
              ? ptc_error_set(PTC_E_IO, "the mount process died of signal %d before serving",
                              WTERMSIG(st))
              : ptc_error_set(PTC_E_IO, "the mount process ended (status %d) before serving",
                              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 1;
}

/* The child tells the parent how the start ended (once; then its standard
 * streams go to /dev/null, as a daemon's do). */
static void report_start(int *report, int rc)
{
    if (*report < 0)
        return;
    char msg[1024];
    int32_t code = rc < 0 ? rc : 0;
    memcpy(msg, &code, sizeof code);
    int n = snprintf(msg + sizeof code, sizeof msg - sizeof code, "%s",
                     rc < 0 ? ptc_last_error() : "");
    size_t len = sizeof code + (size_t)PTC_MAX(n, 0);
    (void)!write(*report, msg, PTC_MIN(len, sizeof msg - 1));
    close(*report);
    *report = -1;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        if (null > 2)
            close(null);
    }
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

static int ctx_init(struct mount_ctx *c, ptc_view *view, const ptc_mount_options *opts)
{
    memset(c, 0, sizeof *c);
    c->view = view;
    c->opts = opts;
    c->uid = getuid();
    c->gid = getgid();
    clock_gettime(CLOCK_REALTIME, &c->when);
    c->cap = 1024;
    c->tab = ptc_calloc(c->cap, sizeof *c->tab);
    c->root = node_new("/", 1, 0);
    if (!c->tab || !c->root) {
        ptc_free(c->tab);
        ptc_free(c->root);
        return ptc_error_set(PTC_E_NOMEM, "out of memory");
    }
    int rc = ptc_view_node_resolve(view, "/", &c->root->h);
    if (rc < 0 || pthread_key_create(&c->scratch, free_scratch) != 0) {
        ptc_view_node_release(c->root->h);
        ptc_free(c->tab);
        ptc_free(c->root);
        return rc < 0 ? rc : ptc_error_set(PTC_E_NOMEM, "out of memory");
    }
    c->root->is_dir = true;
    pthread_mutex_init(&c->lock, NULL);
    return PTC_OK;
}

static void ctx_fini(struct mount_ctx *c)
{
    for (size_t i = 0; i < c->cap; i++)
        for (struct node *n = c->tab[i], *next; n; n = next) {
            next = n->next;
            ptc_view_node_release(n->h);
            ptc_free(n);
        }
    ptc_free(c->tab);
    ptc_view_node_release(c->root->h);
    ptc_free(c->root);
    /* the workers have ended (their scratch freed by the key's destructor) */
    pthread_key_delete(c->scratch);
    pthread_mutex_destroy(&c->lock);
}

int ptc_mount_run(ptc_view *view, const char *mountpoint, const ptc_mount_options *opts)
{
    static const ptc_mount_options no_opts;
    if (!opts)
        opts = &no_opts;
    PTC_TRY(check_mountpoint(mountpoint));
    /* resolved now: once mounted, resolving it would wait on this process */
    char abs_mp[PATH_MAX];
    const char *mp_abs = realpath(mountpoint, abs_mp) ? abs_mp : mountpoint;
    struct mount_ctx c;
    PTC_TRY(ctx_init(&c, view, opts));
    char o[256];
    snprintf(o, sizeof o, "ro,fsname=ptc,subtype=ptc,default_permissions,max_read=%u%s",
             MOUNT_MAX_IO, opts->allow_other ? ",allow_other" : "");
    char *argv[] = {"ptc", "-o", o, opts->debug ? "-d" : NULL, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(opts->debug ? 4 : 3, argv);
    int rc = PTC_OK, report = -1; /* a detached child's pipe to its parent */
    struct fuse_session *se = fuse_session_new(&args, &mount_ops, sizeof mount_ops, &c);
    if (!se) {
        rc = ptc_error_set(PTC_E_IO, "cannot set up the fuse filesystem");
        goto out_args;
    }
    if (fuse_session_mount(se, mp_abs) != 0) {
        rc = ptc_error_set(PTC_E_IO, "cannot mount at %s (see the message above)", mountpoint);
        goto out_destroy;
    }
    if (ptc_fuse_raise_readahead(mp_abs, PTC_FUSE_READAHEAD_KIB) != 0)
        ptc_log(PTC_LOG_DEBUG, "cannot raise the readahead of %s", mountpoint);
    if (ptc_fuse_tune(se) != 0)
        ptc_log(PTC_LOG_DEBUG, "cannot tune the fuse session; serving with libfuse's settings");
    /* detach only now, so the caller sees mount errors and a mounted tree;
     * the parent waits until the child serves (exit 0, as any FUSE daemon's
     * parent) or failed to start (its error is returned here, the child
     * having unmounted) */
    if (!opts->foreground && detach(&report, &rc) == 1) {
        if (rc == PTC_OK)
            _exit(0);
        goto out_destroy;
    }
    if (opts->foreground)
        (void)!chdir("/");
    if (fuse_set_signal_handlers(se) != 0) {
        rc = ptc_error_set(PTC_E_IO, "cannot install signal handlers");
        goto out_unmount;
    }
    if (opts->ready) {
        rc = opts->ready(opts->user);
        if (rc < 0)
            goto out_signals;
    }
    struct ticker t = {.opts = opts, .c = &c, .se = se};
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
    report_start(&report, PTC_OK);
    /* > 0: ended by a signal, which is a clean unmount */
    if (fuse_session_loop_mt(se, lc) < 0)
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
    fuse_session_unmount(se);
    report_start(&report, rc); /* a child that did not start: the parent says why */
out_destroy:
    fuse_session_destroy(se);
out_args:
    fuse_opt_free_args(&args);
    ctx_fini(&c);
    return rc;
}
