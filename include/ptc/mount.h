/**
 * @file mount.h
 * @brief Serve a ptc_view as a read-only FUSE filesystem (libfuse3).
 *
 * In a build without libfuse3, ptc_mount_run returns PTC_E_UNSUPPORTED
 * (fuse/mount_no_fuse3.c); the header is the same in every build.
 *
 * @note Thread safety: ptc_mount_run blocks its caller until the filesystem
 *       is unmounted; the view it serves must stay valid until it returns
 *       and is used from the FUSE worker threads concurrently.
 */
#ifndef PTC_MOUNT_H
#define PTC_MOUNT_H

#include "ptc/error.h"
#include "ptc/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How to mount. Zero-initialise, then set what you need. */
typedef struct ptc_mount_options {
    bool foreground;   /**< stay in the foreground (-f); otherwise detach
                            once the mount is up */
    bool allow_other;  /**< let other users read (needs user_allow_other
                            in /etc/fuse.conf for non-root) */
    bool debug;        /**< libfuse debug output on stderr */
    /** Called once the mount is up (after detaching), before requests are
     * served; a negative return unmounts and is returned. Open resources
     * that must not cross a fork (an LMDB environment) here. May be NULL. */
    int (*ready)(void *user);
    /** Called about every @p tick_ms milliseconds while mounted, from a
     * helper thread, and once more after the last request (for durable
     * counters). May be NULL. */
    void (*tick)(void *user);
    unsigned tick_ms;  /**< 0: 1000 */
    /** Called when a program fsyncs a file or directory of the mount
     * (fsync, fdatasync, `sync FILE`, `sync MOUNTPOINT`), from the worker
     * thread that serves it; the fsync returns once it has returned, and
     * fails with EIO when it returns a negative code. The store's mount
     * flushes its served counts here, so they are durable when fsync
     * returns. May be NULL: fsync then succeeds doing nothing. */
    int (*sync)(void *user);
    void *user;        /**< passed to ready, tick and sync */
} ptc_mount_options;

/**
 * Mount @p view read-only at @p mountpoint and serve it with several
 * threads until unmounted (fusermount3 -u, umount) or until SIGINT,
 * SIGTERM or SIGHUP, which unmount cleanly. Immutable files keep the
 * kernel page cache between opens; reads of up to 1 MiB are asked for.
 * Each path is resolved once, when the kernel first looks it up
 * (ptc_view_node_resolve), and its handle kept until the kernel forgets
 * the node; reads go to that handle (ptc_view_node_pread_segs): no path
 * parsing or cache search per read, and record bytes a dataset holds in
 * place (ptc_view_dataset.record_map) are handed to the kernel without a
 * copy. Where the kernel supports it (FUSE_CAP_NO_OPEN_SUPPORT) files are
 * served without opens: the records of an empty step file are served when
 * its name is first looked up rather than at each open. @p view must
 * outlive the call (every handle is released before it returns).
 * Lookups in one directory run in parallel. docs/dataset.md ("Speed").
 * Without @p opts->foreground the process forks once the mount is up; the
 * child goes on in a new session, and the parent waits until the child is
 * serving (opts->ready returned) to exit with status 0 (as any FUSE daemon
 * does) — or, when the child could not start, returns the child's error
 * (code and message; the child unmounted and exited), so a detached mount
 * that fails says why.
 * @return PTC_OK after a clean unmount; PTC_E_NOTFOUND if @p mountpoint
 *         does not exist; PTC_E_INVAL if it is not a directory; PTC_E_BUSY
 *         if it is already a mount point (or a stale one);
 *         PTC_E_UNSUPPORTED if there is no /dev/fuse; PTC_E_IO if the
 *         mount fails; the error of opts->ready; PTC_E_UNSUPPORTED in a
 *         build without FUSE.
 */
PTC_API int ptc_mount_run(ptc_view *view, const char *mountpoint,
                          const ptc_mount_options *opts);

#ifdef __cplusplus
}
#endif
#endif
