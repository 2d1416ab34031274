/* Ingest readers: shared state and the per-format hooks. Private to dataset/. */
#ifndef PTC_INGEST_INTERNAL_H
#define PTC_INGEST_INTERNAL_H

#include "ptc/ingest.h"

enum ingest_kind {
    INGEST_LINES,
    INGEST_JSONL,
    INGEST_FILES,
    INGEST_TOKENS,
    INGEST_NPY,
    INGEST_TFRECORD,
};

/* The current input: a buffered window [pos, end) of data, whose first byte
 * is at offset base of the input. Memory inputs are one window with eof. */
struct ingest_src {
    int fd;              /* -1 for a memory input or none */
    const char *name;    /* for messages; borrowed */
    const uint8_t *data; /* == own for file inputs */
    uint8_t *own;
    size_t cap, pos, end;
    uint64_t base;
    uint64_t size;       /* file inputs: the file's size (the window never
                            grows past what the file holds) */
    bool eof;
    bool open;
};

struct ptc_ingest {
    enum ingest_kind kind;
    char **inputs;       /* owned paths (files: the sorted file list) */
    size_t ninputs, cur; /* next input to open */
    struct ingest_src src;
    bool mem;            /* a single memory input */
    uint64_t count;      /* records returned */
    uint64_t in_record;  /* record (or line) index within the current input */
    int err;             /* sticky failure */
    unsigned tok_width;
    uint64_t tok_len;
    uint8_t *tbuf;       /* tokens: a window across inputs, being filled */
    size_t tcap, tfill;
    uint64_t tok_total;  /* tokens: tokens in the inputs so far */
    uint8_t *fbuf;       /* files: the current file's bytes */
    size_t fcap;
    void *npy;           /* npy: per-input state (ingest_npy.c) */
    ptc_progress_fn progress;
    void *progress_user;
    uint64_t total, done_before, last_report;
};

/* First capacity of the input window (it doubles as records need). */
#define INGEST_WINDOW ((size_t)1 << 20)

/* Make at least @p need bytes available at src->data + src->pos (fewer only
 * at end of input). The window grows only as far as the input's real size
 * (+1 byte to see its end), however much @p need claims, so a length read
 * from a hostile header costs no more memory than the file itself.
 * PTC_OK, PTC_E_IO, PTC_E_NOMEM. */
int ptc_ingest_src_fill(struct ingest_src *s, size_t need);

/* tfrecord: next record of the current input; *got false at end of input. */
int ptc_ingest_tfrecord_next(ptc_ingest *r, const uint8_t **data, size_t *len,
                             bool *got);

/* npy: next row of the current input; *got false at end of input. */
int ptc_ingest_npy_next(ptc_ingest *r, const uint8_t **data, size_t *len,
                        bool *got);
void ptc_ingest_npy_reset(ptc_ingest *r);

#endif
