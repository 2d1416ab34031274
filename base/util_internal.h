/* Internal helpers shared by every module of libptc: the allocator and I/O
 * wrappers that fault injection hooks into, error and log helpers. Never
 * installed; cli/ must not include it. */
#ifndef PTC_UTIL_INTERNAL_H
#define PTC_UTIL_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ptc/error.h"

/* Allocation through these counts toward fault injection
 * (base/fault_testing.h). They set a PTC_E_NOMEM detail message on failure. */
void *ptc_malloc(size_t n);
void *ptc_calloc(size_t count, size_t size);
void *ptc_realloc(void *p, size_t n);
char *ptc_strdup(const char *s);
char *ptc_strndup(const char *s, size_t n);
void ptc_free(void *p);

/* Grow *p (element size @p elem) to hold at least @p need elements;
 * *cap tracks capacity. Returns PTC_OK or PTC_E_NOMEM. */
int ptc_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Writes through these count toward fault injection (base/fault_testing.h).
 * Each returns PTC_OK or PTC_E_IO with a detail naming @p what (a path) and
 * the OS error. pwrite_all/write_all loop over short writes and EINTR. */
int ptc_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what);
int ptc_write_all(int fd, const void *buf, size_t n, const char *what);
int ptc_fsync(int fd, const char *what);
/* Start writing back bytes [off, off + len) of @p fd without waiting for
 * them (Linux: sync_file_range WRITE; elsewhere nothing). A hint only: it
 * makes no data durable (ptc_fsync does) and its failure is ignored. */
void ptc_start_writeback(int fd, uint64_t off, uint64_t len);
/* fsync a directory (after creating or renaming entries in it). */
int ptc_fsync_dir(const char *dir);
/* pread exactly n bytes; a short read is PTC_E_FORMAT ("truncated"). */
int ptc_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *what);
struct iovec;
/* XXH3-64 of @p n bytes at @p p (the store's block checksum), and of the
 * bytes of @p n segments in order: the value of XXH3_64bits, computed with
 * the widest vector unit of this CPU (base/hash.c). */
uint64_t ptc_hash(const void *p, size_t n);
uint64_t ptc_hash_iov(const struct iovec *seg, int n);
/* Whether base/hash_avx2.c holds an AVX2 build (x86-64, GCC). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PTC_HASH_AVX2 1
#else
#define PTC_HASH_AVX2 0
#endif
/* preadv exactly the @p n segments of @p iov (any count: IOV_MAX at a time),
 * as ptc_pread_all; @p iov is used up (advanced in place). */
int ptc_preadv_all(int fd, struct iovec *iov, int n, uint64_t off, const char *what);

/* Read the regular file @p path whole, at most @p max bytes, into a new
 * NUL-terminated buffer (*out, free with ptc_free; *len bytes without the
 * NUL). Never blocks on what is not a regular file: a FIFO, a device, a
 * socket or a directory is refused before a byte is read. PTC_E_NOTFOUND
 * (no such file), PTC_E_IO (not a regular file, a read error), PTC_E_RANGE
 * (larger than @p max), PTC_E_BUSY (shorter than fstat said: being rewritten
 * while read), PTC_E_NOMEM. */
int ptc_file_read(const char *path, size_t max, char **out, size_t *len);

/* A text file another program writes while we run (a control file, a slots
 * file, a hostfile): ptc_file_read, and the text is complete only when it
 * ends in a newline. PTC_OK and *out (NUL-terminated, free with ptc_free);
 * ptc_file_read's codes; PTC_E_BUSY (empty or no final newline yet: being
 * written, look again later); PTC_E_FORMAT (a NUL byte). */
int ptc_file_read_text(const char *path, size_t max, char **out);

/* "a FIFO", "a directory", ... of a st_mode, for messages. */
const char *ptc_file_kind(mode_t mode);

/* Record errno-based failure: "<fmt>: <strerror(errno)>". Returns code. */
int ptc_error_sys(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Log through the installed callback (no-op if none). */
void ptc_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Log @p msg unless it is what *@p last holds (said already); *@p last (of
 * @p cap bytes) keeps it. A watched input's problem is said once, not at
 * every look; NULL forgets it, so that the next problem is said again. */
void ptc_log_changed(char *last, size_t cap, int level, const char *msg);

/* mkdir -p; PTC_OK or PTC_E_IO. */
int ptc_mkdir_p(const char *path, mode_t mode);

/* Atomic replacement of a file (file.c). ptc_tmpfile_create makes a fresh
 * temporary file next to @p path (same directory, so the rename is atomic);
 * *tmp_path is allocated with ptc_malloc. ptc_tmpfile_commit fsyncs and
 * closes @p fd, renames @p tmp_path onto @p path and fsyncs the directory;
 * on failure it removes the temporary file; it always closes @p fd and
 * frees @p tmp_path. ptc_tmpfile_discard closes @p fd, removes and frees
 * @p tmp_path (either may be -1 / NULL). PTC_OK or PTC_E_IO. */
int ptc_tmpfile_create(const char *path, char **tmp_path, int *fd);
int ptc_tmpfile_commit(int fd, char *tmp_path, const char *path);
void ptc_tmpfile_discard(int fd, char *tmp_path);

/* Write a printable, one-line, truncated rendering of @p len bytes at @p s
 * into @p buf (control bytes as \xNN, at most about 80 source bytes): how
 * an untrusted name appears in a message. */
void ptc_quote_name(char *buf, size_t cap, const char *s, size_t len);

/* Fault injection: whether this allocation fails; the errno this write or
 * fsync fails with, or 0; whether this message of the pipeline runtime is
 * never sent. In the shipped library none fires (fault_no_testing.c); in
 * the test build fault_testing.c fires them as base/fault_testing.h sets. */
bool ptc_fault_alloc_hit(void);
int ptc_fault_write_hit(void);
bool ptc_fault_send_hit(void);
/* Whether this thread armed crash point @p point (ptc_fault_crash_at); a
 * hit disarms it. */
bool ptc_fault_crash_hit(const char *point);
/* A step of a protocol (a crash point's name), passed at @p version: in
 * the test build, PTC_FAULT_KILL may kill the process here and
 * PTC_FAULT_TRACE records it (base/fault_testing.c); elsewhere nothing. */
void ptc_fault_step(const char *point, uint64_t version);
/* Whether to act as if MPI did not provide MPI_THREAD_MULTIPLE
 * (PTC_FAULT_MPI_SINGLE=1 in the test build; never in the shipped library):
 * the paths that would call MPI from a thread of the library run on the
 * caller's thread instead, as with an MPI that does not provide it. */
bool ptc_fault_mpi_single(void);
/* Whether readers read every shard into memory instead of mapping the ones
 * stored uncompressed (PTC_FAULT_NO_MAP=1 in the test build; never in the
 * shipped library): the read path's tests on any data. */
bool ptc_fault_no_map(void);

/* Checked arithmetic on sizes: return false on overflow. */
static inline bool ptc_mul_overflow_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline bool ptc_add_overflow_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

/* Little-endian integers in byte records (wire messages, journal records). */
static inline void ptc_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void ptc_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t ptc_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ptc_get_le64(const uint8_t *p)
{
    return (uint64_t)ptc_get_le32(p) | (uint64_t)ptc_get_le32(p + 4) << 32;
}

#define PTC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define PTC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PTC_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
