/**
 * @file error.h
 * @brief Error codes, messages, logging and fault injection.
 *
 * Every fallible function returns PTC_OK (0) or a negative PTC_E_* code.
 * The detail of the last failure (path, tensor, byte offset, OS error) is kept
 * per thread and read with ptc_last_error().
 *
 * @note Thread safety: all functions here are safe to call from any thread.
 *       The detail message is thread-local.
 */
#ifndef PTC_ERROR_H
#define PTC_ERROR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PTC_BUILDING)
#define PTC_API __attribute__((visibility("default")))
#else
#define PTC_API
#endif

/** Error codes. Always negative; PTC_OK is 0. */
enum {
    PTC_OK = 0,
    PTC_E_INVAL = -1,       /**< invalid argument or malformed text */
    PTC_E_NOMEM = -2,       /**< out of memory */
    PTC_E_IO = -3,          /**< an operating-system I/O call failed */
    PTC_E_FORMAT = -4,      /**< a file violates its format */
    PTC_E_NOTFOUND = -5,    /**< no such tensor, version, file or key */
    PTC_E_EXISTS = -6,      /**< already exists */
    PTC_E_CHECKSUM = -7,    /**< stored data does not match its checksum */
    PTC_E_UNSUPPORTED = -8, /**< feature not built in or not supported */
    PTC_E_RANGE = -9,       /**< a number or box is out of range */
    PTC_E_BUSY = -10,       /**< resource locked by another process */
    PTC_E_RULE = -11,       /**< a placement rule is missing or inconsistent */
    PTC_E_CONFIG = -12,     /**< a parallel configuration does not fit */
    PTC_E_CUDA = -13,       /**< a CUDA call failed */
    PTC_E_MPI = -14,        /**< an MPI call failed */
    PTC_E_NCCL = -15,       /**< an NCCL call failed */
    PTC_E_DEADLOCK = -16,   /**< a schedule cannot complete */
    PTC_E_STORE = -17,      /**< the store's metadata is inconsistent */
    PTC_E_TIMEOUT = -18,    /**< a watchdog fired */
};

/** Evaluate an int-returning expression; return its code if negative. */
#define PTC_TRY(expr)                    \
    do {                                 \
        int ptc_try_rc_ = (expr);        \
        if (ptc_try_rc_ < 0)             \
            return ptc_try_rc_;          \
    } while (0)

/** @return static text for a code (never NULL). */
PTC_API const char *ptc_strerror(int code);

/**
 * @return the detail message of the last failure on this thread: one
 * lower-case line. Valid until the next failing call on this thread.
 * Empty string if none.
 */
PTC_API const char *ptc_last_error(void);

/** Record a failure on this thread and return @p code (for callers that
 * extend the library: custom callbacks, executors). printf-style. */
PTC_API int ptc_error_set(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Clear this thread's detail message. */
PTC_API void ptc_error_clear(void);

/** @return "0.1.0" */
PTC_API const char *ptc_version(void);

/** Optional parts of a build of the library (ptc_features()). A part a build
 * lacks answers PTC_E_UNSUPPORTED; the headers are the same in every build. */
enum {
    PTC_FEATURE_CUDA = 1u << 0, /**< CUDA kernels and the CUDA demo model */
    PTC_FEATURE_NCCL = 1u << 1, /**< NCCL executors (device buffers) */
    PTC_FEATURE_FUSE = 1u << 2, /**< the FUSE mount (ptc_mount_run) */
};

/** @return the PTC_FEATURE_* flags of this build of the library. */
PTC_API unsigned ptc_features(void);

/* ---- logging -------------------------------------------------------------- */

enum { PTC_LOG_ERROR = 0, PTC_LOG_WARN = 1, PTC_LOG_INFO = 2, PTC_LOG_DEBUG = 3 };

/** Log callback: level, one line without newline, user pointer. */
typedef void (*ptc_log_fn)(int level, const char *msg, void *user);

/** Install a log callback (NULL: discard). Process-wide; set it before
 * other threads call the library. The library never prints itself. */
PTC_API void ptc_log_set(ptc_log_fn fn, void *user, int max_level);

/** Progress callback: what (static text), done, total (0 if unknown). */
typedef void (*ptc_progress_fn)(const char *what, uint64_t done, uint64_t total,
                                void *user);

#ifdef __cplusplus
}
#endif
#endif
