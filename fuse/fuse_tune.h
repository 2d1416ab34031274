/* Connection settings libfuse 3.14 cannot ask for, applied to a mounted
 * session, and the mount's readahead (internal; used by fuse/mount_fuse3.c
 * and bench/bench_fuse.c).
 *
 * libfuse 3.14 never offers FUSE_PARALLEL_DIROPS in its INIT reply (it
 * records the capability but does not send it), so the kernel serialises
 * every LOOKUP of a directory on the directory's mutex: a random
 * samples/<ID> read then costs one queue position per lookup, whatever the
 * number of threads. It also asks for FUSE_AUTO_INVAL_DATA, which makes the
 * kernel check a file's attributes on every read of its cached pages;
 * files that never change do not need that.
 *
 * ptc_fuse_tune routes the session's device I/O through libfuse's custom
 * I/O hooks (fuse_session_custom_io) and edits the one INIT reply on its
 * way to the kernel: PARALLEL_DIROPS on (when the kernel offered it),
 * AUTO_INVAL_DATA off. Everything else is libfuse's. The hooks keep no
 * state shared between sessions, so any number may be tuned at once. */
#ifndef PTC_FUSE_TUNE_H
#define PTC_FUSE_TUNE_H

struct fuse_session;

/** Call after fuse_session_mount (or fuse_mount) and before the loop.
 * @return 0, or -1 if libfuse refused the hooks (the session is unchanged). */
int ptc_fuse_tune(struct fuse_session *se);

/** The kernel caps a FUSE mount's readahead at the bdi default (128 KiB)
 * whatever max_readahead says; set the mount's read_ahead_kb to @p kib so
 * sequential reads reach the daemon as large requests. Best effort (needs
 * write access to sysfs). The device number comes from
 * /proc/self/mountinfo: a stat of the mount point would wait for this very
 * process to answer, so @p mountpoint must be the absolute path, resolved
 * before mounting. The kernel then lowers it to the max_readahead of the
 * INIT reply, so that must be at least as large. @return 0, or -1 if it
 * could not be set. */
int ptc_fuse_raise_readahead(const char *mountpoint, unsigned kib);

/** The readahead both mounts use: two of the kernel's 1 MiB READ requests in
 * flight, so two workers fill the page cache while the reader copies out of
 * it. First reads on 2 cores: +17 % over a 1 MiB window; a 3 MiB window is
 * slower than 2 MiB (docs/dataset.md, "Speed"). */
#define PTC_FUSE_READAHEAD_KIB 2048u

#endif
