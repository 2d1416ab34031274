/**
 * @file safetensors.h
 * @brief safetensors files: validating mmap reader, streaming atomic writer,
 *        header builder, and multi-file checkpoints (model.safetensors.index.json).
 *
 * File layout (the safetensors spec): an 8-byte little-endian header length N,
 * N bytes of JSON, then the data buffer. The JSON object maps each tensor name
 * to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the
 * data buffer) plus an optional "__metadata__" object of string values. The
 * data buffer is covered by the tensors exactly: no gaps, no overlaps, ending
 * at the end of the file.
 *
 * The reader rejects every violation with PTC_E_FORMAT and a one-line message
 * naming the tensor or field (see docs/checkpoint-formats.md for the list).
 * Tensor names are arbitrary UTF-8 and are never used as paths.
 *
 * @note Thread safety: a ptc_st_header, ptc_st_file or ptc_st_index is
 * immutable after it is opened: its accessors are safe from any number of
 * threads; close/destroy must not race with them. A ptc_st_writer is used by
 * one thread at a time (externally synchronised).
 */
#ifndef PTC_SAFETENSORS_H
#define PTC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/dtype.h"
#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most dimensions a tensor may have. */
#define PTC_ST_MAX_DIMS 8
/** Largest accepted JSON header, bytes (the safetensors limit, 100 MB). */
#define PTC_ST_MAX_HEADER 100000000ull
/** Longest accepted tensor name, bytes. */
#define PTC_ST_MAX_NAME 1024

/**
 * One tensor. Filled by the reader; the writer and the header builder read
 * only @c name, @c dtype, @c ndim and @c shape (the rest is ignored), so a
 * tensor read from one file can describe one to write.
 */
typedef struct ptc_st_tensor {
    const char *name;               /**< NUL-terminated UTF-8 (no NUL inside) */
    ptc_dtype dtype;                /**< element type */
    int ndim;                       /**< 0 (scalar) to PTC_ST_MAX_DIMS */
    int64_t shape[PTC_ST_MAX_DIMS]; /**< extents; entries past ndim are 0 */
    uint64_t offset;                /**< absolute byte offset of the data in the file */
    uint64_t nbytes;                /**< data size in bytes (volume * dtype size) */
    const void *data;               /**< mapped data (ptc_st_file), NULL otherwise */
} ptc_st_tensor;

/** One __metadata__ entry (both strings NUL-terminated UTF-8). */
typedef struct ptc_st_kv {
    const char *key;
    const char *value;
} ptc_st_kv;

/* ---- header parser (no file needed) ---------------------------------------- */

/** A parsed, validated safetensors header. Opaque. */
typedef struct ptc_st_header ptc_st_header;

/**
 * Parse and validate a safetensors prefix held in memory.
 * @param buf        the file's first bytes: the 8-byte length, then the JSON
 *                   header (more bytes may follow; they are not read)
 * @param len        bytes available at @p buf
 * @param file_size  size of the whole file: the data buffer is
 *                   [8 + N, file_size) and must be covered exactly
 * @param out        receives the header (destroy with ptc_st_header_destroy);
 *                   NULL on failure
 * @return PTC_OK; PTC_E_FORMAT for any violation (message names the tensor or
 *         field); PTC_E_NOMEM.
 * The tensors are listed in data order (by data_offsets, ties in JSON order);
 * their @c data pointers are NULL.
 */
PTC_API int ptc_st_parse_header(const void *buf, size_t len, uint64_t file_size,
                                ptc_st_header **out);

/** Free a header. NULL is a no-op. Invalidates every pointer it returned. */
PTC_API void ptc_st_header_destroy(ptc_st_header *h);

/** @return the number of tensors. */
PTC_API size_t ptc_st_header_count(const ptc_st_header *h);

/** @return tensor @p i (0 <= i < count) in data order, owned by @p h; NULL if
 * @p i is out of range. */
PTC_API const ptc_st_tensor *ptc_st_header_tensor(const ptc_st_header *h, size_t i);

/** Find a tensor by exact name.
 * @return PTC_OK with *index set, or PTC_E_NOTFOUND (message names it). */
PTC_API int ptc_st_header_find(const ptc_st_header *h, const char *name, size_t *index);

/** @return the number of __metadata__ entries (0 if absent). */
PTC_API size_t ptc_st_header_metadata_count(const ptc_st_header *h);

/** @return __metadata__ entry @p i in file order (strings owned by @p h), or
 * a pair of NULLs if out of range. */
PTC_API ptc_st_kv ptc_st_header_metadata_at(const ptc_st_header *h, size_t i);

/** @return the __metadata__ value for @p key (owned by @p h), or NULL. */
PTC_API const char *ptc_st_header_metadata_get(const ptc_st_header *h, const char *key);

/** @return the absolute offset of the data buffer (8 + N). */
PTC_API uint64_t ptc_st_header_data_start(const ptc_st_header *h);

/* ---- file reader ------------------------------------------------------------ */

/** An open, validated safetensors file (read-only mapping). Opaque. */
typedef struct ptc_st_file ptc_st_file;

/**
 * Open, map and validate @p path.
 * @return PTC_OK; PTC_E_NOTFOUND (no such file); PTC_E_IO (cannot open, stat
 * or map; OS error in the message);
 * PTC_E_FORMAT (any violation, message starts with the path); PTC_E_NOMEM.
 * On failure *out is NULL.
 */
PTC_API int ptc_st_open(ptc_st_file **out, const char *path);

/** Unmap and free. NULL is a no-op. Invalidates every pointer it returned,
 * tensor data included. */
PTC_API void ptc_st_close(ptc_st_file *f);

/** @return the file's header, owned by @p f (its tensors have @c data set). */
PTC_API const ptc_st_header *ptc_st_file_header(const ptc_st_file *f);

/** @return the number of tensors in @p f. */
PTC_API size_t ptc_st_count(const ptc_st_file *f);

/** @return tensor @p i in data order with @c data pointing into the mapping
 * (valid until ptc_st_close), or NULL if out of range. */
PTC_API const ptc_st_tensor *ptc_st_tensor_at(const ptc_st_file *f, size_t i);

/** Find a tensor by exact name: PTC_OK with *index, or PTC_E_NOTFOUND. */
PTC_API int ptc_st_find(const ptc_st_file *f, const char *name, size_t *index);

/** @return the file size in bytes. */
PTC_API uint64_t ptc_st_file_size(const ptc_st_file *f);

/* ---- header builder and streaming writer ----------------------------------- */

/**
 * Build the canonical prefix of a safetensors file: 8-byte length, compact
 * JSON (no spaces; "__metadata__" first if @p n_meta > 0 with keys sorted by
 * byte value, then the tensors in the given order, which is data order, each
 * {"dtype":..,"shape":[..],"data_offsets":[a,b]}), padded with spaces to a
 * multiple of 8.
 * @param entries     tensors (name, dtype, ndim, shape are read)
 * @param n           number of tensors
 * @param meta        metadata pairs (may be NULL when @p n_meta is 0)
 * @param n_meta      number of metadata pairs
 * @param bytes       receives the prefix, allocated with malloc: free() it
 * @param len         receives its length (8 + N)
 * @param offsets_out NULL, or n + 1 entries: the absolute file offset of each
 *                    tensor's data, then the total file size
 * @return PTC_OK; PTC_E_INVAL (duplicate or over-long name, name
 *         "__metadata__", bad dtype, ndim > 8, negative dim, duplicate
 *         metadata key, size overflow; message names it); PTC_E_NOMEM.
 */
PTC_API int ptc_st_header_build(const ptc_st_tensor *entries, size_t n,
                                const ptc_st_kv *meta, size_t n_meta, void **bytes,
                                size_t *len, uint64_t *offsets_out);

/** A safetensors file being written. Opaque. */
typedef struct ptc_st_writer ptc_st_writer;

/**
 * Start writing @p path: builds the header (see ptc_st_header_build), creates
 * a temporary file in the same directory and writes the header to it.
 * @return PTC_OK; the codes of ptc_st_header_build; PTC_E_IO. On failure
 * *out is NULL and no file is left behind.
 */
PTC_API int ptc_st_writer_create(ptc_st_writer **out, const char *path,
                                 const ptc_st_tensor *entries, size_t n,
                                 const ptc_st_kv *meta, size_t n_meta);

/**
 * Append @p len bytes of tensor data (tensors back to back in entry order;
 * any chunking). Writing past the expected total is PTC_E_RANGE.
 * @return PTC_OK, PTC_E_RANGE or PTC_E_IO. After a failure, only
 * ptc_st_writer_abort may be called.
 */
PTC_API int ptc_st_writer_write(ptc_st_writer *w, const void *data, size_t len);

/** @return data bytes still expected before ptc_st_writer_finish. */
PTC_API uint64_t ptc_st_writer_remaining(const ptc_st_writer *w);

/**
 * Check that exactly the expected byte count was written, fsync, rename the
 * temporary file onto the target and fsync the directory. Always frees @p w;
 * on failure the temporary file is removed and the target is untouched.
 * @return PTC_OK; PTC_E_RANGE (short by some bytes); PTC_E_IO.
 */
PTC_API int ptc_st_writer_finish(ptc_st_writer *w);

/** Remove the temporary file and free @p w. NULL is a no-op. */
PTC_API void ptc_st_writer_abort(ptc_st_writer *w);

/* ---- multi-file checkpoints ------------------------------------------------ */

/** A validated model.safetensors.index.json with its files open. Opaque. */
typedef struct ptc_st_index ptc_st_index;

/**
 * Open an index file ({"metadata": {...}, "weight_map": {tensor: file}}),
 * open every file it names (plain file names in the index's directory: a
 * name with '/' or equal to "." or ".." is rejected) and check that the
 * weight_map lists exactly the files' tensors.
 * @return PTC_OK; PTC_E_FORMAT (bad JSON, bad file name, a tensor missing
 * from its file or present in a file but not mapped to it; the message names
 * the tensor and file); PTC_E_IO / PTC_E_FORMAT from a shard's ptc_st_open;
 * PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_st_index_open(ptc_st_index **out, const char *index_path);

/** Close every file and free. NULL is a no-op. */
PTC_API void ptc_st_index_close(ptc_st_index *x);

/** @return the number of distinct files (sorted by name). */
PTC_API size_t ptc_st_index_file_count(const ptc_st_index *x);

/** @return file @p i (owned by @p x), or NULL if out of range. */
PTC_API const ptc_st_file *ptc_st_index_file(const ptc_st_index *x, size_t i);

/** @return the name of file @p i as written in the index (owned by @p x). */
PTC_API const char *ptc_st_index_file_name(const ptc_st_index *x, size_t i);

/** Locate tensor @p name: PTC_OK with the file index and the tensor index
 * within that file, or PTC_E_NOTFOUND. */
PTC_API int ptc_st_index_find(const ptc_st_index *x, const char *name, size_t *file,
                              size_t *tensor);

/** @return the index's "metadata" object as compact JSON text (owned by
 * @p x), "{}" if absent. */
PTC_API const char *ptc_st_index_metadata_json(const ptc_st_index *x);

/**
 * Write an index file atomically: {"metadata":{"total_parameters":P,
 * "total_size":T},"weight_map":{name: file, ...}} with the weight_map sorted
 * by tensor name, as Hugging Face's save_pretrained writes it
 * (total_parameters: the elements of all tensors; left out when 0).
 * @return PTC_OK; PTC_E_INVAL (duplicate tensor, bad file name); PTC_E_IO.
 */
PTC_API int ptc_st_index_write(const char *path, const char *const *names,
                               const char *const *files, size_t n, uint64_t total_size,
                               uint64_t total_parameters);

#ifdef __cplusplus
}
#endif
#endif
