/* Connection settings libfuse 3.14 cannot ask for, applied to a mounted
 * session (internal; used by fuse/mount_fuse3.c and bench/bench_fuse.c).
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

#endif
