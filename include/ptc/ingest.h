/**
 * @file ingest.h
 * @brief Ingest readers: streaming record iterators over input files (dataset/ingest*.c).
 *
 * Formats `lines`, `jsonl`, `files`, `tokens:u16:LEN`, `tokens:u32:LEN`,
 * `npy`, `tfrecord` (docs/dataset.md gives the record boundaries of each).
 *
 * @note Thread safety: a ptc_ingest reader is externally synchronised (one
 *       thread at a time); distinct readers are independent.
 */
#ifndef PTC_INGEST_H
#define PTC_INGEST_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest record an ingest reader returns (1 GiB); larger is an error. */
#define PTC_INGEST_MAX_RECORD ((uint64_t)1 << 30)

/** A streaming record reader over the inputs of one ingest. Opaque. */
typedef struct ptc_ingest ptc_ingest;

/**
 * Open a reader of @p format over @p ninputs input paths, read in the given
 * order (for `files`, each INPUT is a directory walked recursively, or a
 * single file). Formats: `lines`, `jsonl`, `files`, `tokens:u16:LEN`,
 * `tokens:u32:LEN`, `npy`, `tfrecord` (see docs/dataset.md for the exact
 * record boundaries of each). The inputs of `tokens:*` are one token
 * stream: windows span files.
 * @param out   the reader; NULL on failure
 * @return PTC_OK; PTC_E_INVAL for an unknown or malformed format or no
 *         inputs; PTC_E_IO / PTC_E_NOTFOUND if an input cannot be opened;
 *         PTC_E_NOMEM. PTC_E_UNSUPPORTED for a format this build lacks.
 */
PTC_API int ptc_ingest_open(ptc_ingest **out, const char *format,
                            const char *const *inputs, size_t ninputs);

/**
 * Check that @p format is a valid ingest format text (as ptc_ingest_open
 * parses it), without opening anything.
 * @return PTC_OK; PTC_E_INVAL naming the problem (see ptc_last_error()).
 */
PTC_API int ptc_ingest_format_check(const char *format);

/**
 * Open a reader of @p format over an in-memory input of @p len bytes (as if
 * it were one input file; not valid for `files`). The buffer must outlive
 * the reader.
 * @return as ptc_ingest_open.
 */
PTC_API int ptc_ingest_open_buffer(ptc_ingest **out, const char *format,
                                   const void *data, size_t len);

/**
 * Read the next record.
 * @param data  set to the record's bytes, owned by the reader and valid
 *              until the next call on it or its destruction
 * @param len   set to the record's length
 * @param end   set to true (and *data NULL, *len 0) when no record is left
 * @return PTC_OK; PTC_E_FORMAT for malformed input (the detail names the
 *         input and the record or line); PTC_E_CHECKSUM for a tfrecord CRC
 *         mismatch (names the record index); PTC_E_IO; PTC_E_NOMEM. After
 *         an error the reader only returns that error again. `tokens:*`:
 *         at the end, the tokens of a last partial window are dropped with
 *         a PTC_LOG_WARN message, and a stream with tokens but no whole
 *         window is PTC_E_FORMAT instead of the end.
 */
PTC_API int ptc_ingest_next(ptc_ingest *r, const uint8_t **data, size_t *len,
                            bool *end);

/** Number of records returned so far. */
PTC_API uint64_t ptc_ingest_count(const ptc_ingest *r);

/**
 * Install a progress callback, called with ("ingest", bytes consumed, total
 * input bytes) at most every 16 MiB of input and once at the end.
 */
PTC_API void ptc_ingest_set_progress(ptc_ingest *r, ptc_progress_fn fn,
                                     void *user);

/** Close the reader; NULL is a no-op. */
PTC_API void ptc_ingest_destroy(ptc_ingest *r);

#ifdef __cplusplus
}
#endif
#endif
