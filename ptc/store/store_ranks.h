/* Writing the shards of layout ranks into a version being written: the one
 * writer of a rank's shards, used by training-state checkpoints (ptc/ckpt)
 * and by the store resharder (reshard/). Library-internal interface of the
 * store module (visible to the modules above it); never installed. */
#ifndef PTC_STORE_RANKS_H
#define PTC_STORE_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/layout.h"
#include "ptc/store.h"

/* Where the shards of a rank come from. Both callbacks run on the thread
 * that called ptc_store_write_rank. */
typedef struct ptc_rank_source {
    /* A stored shard whose bytes and place equal those of the owned shard
     * (t, r) (pieces @p pc[np]): set *rd, *st (its tensor index in *rd) and
     * *from (its rank) — or *from = -1 to have the shard written. NULL: never
     * reuse. A failure here is not fatal to the caller: return PTC_OK with
     * *from = -1 to write instead. */
    int (*find)(void *user, size_t t, int r, const ptc_shard *sh, const ptc_piece *pc,
                size_t np, const ptc_store_reader **rd, size_t *st, int64_t *from);
    /* Write the owned shard (t, r) into @p w: ptc_store_shard_put, or
     * ptc_store_shard_begin / _write / _end — or, where the bytes turn out
     * to equal a stored shard as they stream by (ptc_store_candidate_*),
     * reference it (ptc_store_shard_reuse). */
    int (*write)(void *user, ptc_store_writer *w, size_t t, int r, const ptc_shard *sh,
                 const ptc_piece *pc, size_t np);
    void *user;
    /* NULL: the store holds every rank's shards. Else world bytes, nonzero
     * for the ranks whose shards this store holds (a host's part of a
     * version spread over hosts): a shard whose owner is not among them is
     * owned by the lowest of them holding it (the same owner in the layout). */
    const uint8_t *local;
} ptc_rank_source;

/* What one call did, in shards. */
typedef struct ptc_rank_counts {
    uint64_t written, reused, aliased;
    uint64_t rewritten; /* of written: found unchanged, but the stored copy
                           failed its check (ptc_store_shard_reuse) */
} ptc_rank_counts;

/* Write rank @p r's shards of the tensors [t_lo, t_hi) of layout @p l into
 * @p w: a tensor the rank does not hold is skipped; a shard whose owner
 * (the lowest rank holding an identical shard) is another rank is an
 * alias; an owned shard is referenced where @p src finds it stored (and the
 * stored copy passes its check), else written by @p src. @p counts (may be
 * NULL) is added to. One thread per (writer, rank) at a time, as the writer
 * requires. */
int ptc_store_write_rank(ptc_store_writer *w, const ptc_layout *l, int r, size_t t_lo,
                         size_t t_hi, const ptc_rank_source *src, ptc_rank_counts *counts);

/* A shard of tensor @p t of layout @p l that @p parent holds unchanged: the
 * same tensor (name, dtype, shape), the same local shape and pieces as
 * (t, r)'s shard @p sh / @p pc, and block checksums (XXH3-64 per 1 MiB) equal
 * to those of the @p bytes at @p buf; rank @p r's stored shard is tried
 * first. Returns the stored rank and sets *pt to the tensor's index in
 * @p parent, or -1 (nothing equal; never an error). */
int64_t ptc_store_find_unchanged(const ptc_store_reader *parent, const ptc_layout *l, size_t t,
                                 int r, const ptc_shard *sh, const ptc_piece *pc,
                                 const void *buf, uint64_t bytes, size_t *pt);

/* A stored shard that an owned shard whose bytes are not at hand (pulled
 * chunk by chunk, e.g. from device memory) may turn out to equal: found by
 * place, compared block by block as the bytes pass. */
typedef struct ptc_store_candidate {
    const ptc_store_reader *rd; /* the parent version */
    size_t st;                  /* the tensor's index in rd */
    uint32_t rank;              /* the stored shard's rank */
    uint64_t nblocks;           /* its 1 MiB blocks */
    const void *rec;            /* its record (rd's, valid while rd is open) */
} ptc_store_candidate;

/* The stored shard of @p parent (may be NULL) with the tensor (name, dtype,
 * shape), local shape, pieces and length @p bytes of (t, r)'s shard @p sh /
 * @p pc — rank @p r's first — into *c: true; else false (never an error). */
bool ptc_store_candidate_find(ptc_store_candidate *c, const ptc_store_reader *parent,
                              const ptc_layout *l, size_t t, int r, const ptc_shard *sh,
                              const ptc_piece *pc, uint64_t bytes);

/* Block @p k of the candidate has checksum @p xxh3 (XXH3-64 of its raw
 * bytes). */
bool ptc_store_candidate_block(const ptc_store_candidate *c, uint64_t k, uint64_t xxh3);

/* Every (tensor, rank) that layout @p l places (on the ranks @p want marks,
 * world bytes; NULL: every rank) has a shard record in one of the @p n
 * descriptor buffers (ptc_store_writer_export) — PTC_OK — or PTC_E_INVAL
 * naming the first missing rank and tensor; PTC_E_FORMAT for a malformed
 * buffer. */
int ptc_store_check_coverage(const ptc_layout *l, const void *const *descs, const size_t *lens,
                             size_t n, const uint8_t *want);

/* Replace the step label (unless @p step is NULL) and the parent of a
 * version being written, before commit: a checkpoint learns its parent
 * under the writer lock and its step only at commit. PTC_OK or PTC_E_NOMEM. */
int ptc_store_writer_set_origin(ptc_store_writer *w, const char *step, uint64_t parent);

/* Remove the pack directory of version @p v (its rank-*.pack files, then the
 * directory if empty). Counts into @p files / @p bytes (may be NULL). A
 * foreign entry in its place (a symbolic link) is an error, never followed. */
int ptc_store_remove_vdir(ptc_store *s, uint64_t v, uint64_t *files, uint64_t *bytes);

/* ptc_store_gc, except that an unreferenced rank file no reader holds is
 * kept as packs/spare/rank-<R>.pack (replacing an older spare of that
 * name, the spares no writer took since the last such gc removed), for the
 * next writer of rank R to overwrite in place (ptc_store_writer): for saves
 * that drop their oldest version at each commit, so that the pages or disk
 * blocks are not freed and allocated again at every save. A moved file
 * counts as removed in @p stats. A plain ptc_store_gc removes the spares. */
int ptc_store_gc_recycle(ptc_store *s, ptc_store_gc_stats *stats);

/* The whole stored local tensor (@p t, @p rank) of reader @p r in place: a
 * pointer into the reader's read-only mapping of its pack file (valid until
 * the reader is closed) after every block's checksum was verified, when it
 * is stored uncompressed; else *out is NULL (compressed, the file cannot
 * be mapped, or its pages cannot be faulted in: MADV_POPULATE_READ, so that
 * a disk error is reported by the read, not raised as SIGBUS): read it with
 * ptc_store_reader_read_shard. No copy and no memory of the caller's: the
 * page cache's pages are the bytes.
 * @return PTC_OK, PTC_E_NOTFOUND, PTC_E_CHECKSUM, PTC_E_IO. */
int ptc_store_reader_map_shard(const ptc_store_reader *r, size_t t, uint32_t rank,
                               const void **out);

#endif
