/* Inside ptc/ckpt: what the collective steps (ckpt_collective.c), the
 * collection of described local tensors (ckpt_collect.c) and the
 * non-collective steps (ckpt.c) share. Never installed. */
#ifndef PTC_CKPT_INTERNAL_H
#define PTC_CKPT_INTERNAL_H

#include "ptc/ckpt.h"
#include "base/buf_internal.h"

/* ---- one process's description on the wire (docs/format.md §9.1) ---------------- */

/* Format number of the description (its first u32). 2: local tensors
 * carry their pieces (explicit layouts). */
#define PTC_CKPT_DESC_FORMAT 2u

/* A local tensor of a decoded description: global_ndim -1 where the process
 * does not know the global shape; pieces only in an explicit description. */
typedef struct ptc_ckpt_desc_tensor {
    char *name;
    int rank;
    ptc_dtype dtype;
    int ndim;
    int64_t shape[PTC_MAX_DIMS];
    int global_ndim;
    int64_t global_shape[PTC_MAX_DIMS];
    ptc_piece *pieces;
    size_t npieces;
} ptc_ckpt_desc_tensor;

/* A decoded description: every pointer owned (ptc_ckpt_desc_free). */
typedef struct ptc_ckpt_desc {
    char *config; /* the configuration, keys style; "" for an explicit layout */
    char *rules;  /* the canonical rules text ("" where none) */
    int *ranks;
    size_t nranks;
    ptc_ckpt_desc_tensor *tensors;
    size_t ntensors;
} ptc_ckpt_desc;

/* Append this process's description (checked first: distinct non-negative
 * ranks, each local tensor of one of them, once, with a name, a dtype and
 * shapes in range; PTC_E_INVAL naming the problem). @p cfg NULL: an
 * explicit description, whose local tensors carry their pieces (given, a
 * box, or the whole tensor); @p rules may then be NULL. */
int ptc_ckpt_desc_encode(ptc_buf *b, const int *ranks, size_t nranks,
                         const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                         const ptc_rules *rules);
/* Decode untrusted bytes: PTC_E_FORMAT naming the field, PTC_E_NOMEM; on
 * failure *d is zeroed. */
int ptc_ckpt_desc_decode(ptc_ckpt_desc *d, const void *data, size_t len);
void ptc_ckpt_desc_free(ptc_ckpt_desc *d);
/* The layout of the @p n decoded descriptions (process order) under @p cfg
 * and @p rules (cfg NULL: explicit), with the checks of
 * ptc_ckpt_collect_over (every process computes the same outcome). */
int ptc_ckpt_desc_layout(const ptc_ckpt_desc *d, size_t n, const ptc_config *cfg,
                         const ptc_rules *rules, ptc_layout **out);
/* Whether a buffer of dtype @p have may carry @p want as raw bits (BF16 and
 * FP8 in integers of their size). */
bool ptc_ckpt_raw_ok(ptc_dtype have, ptc_dtype want);

/* ---- local tensors against a layout ---------------------------------------------------- */

/* Check @p locals against layout @p l for each of @p ranks (a save: exact
 * dtypes; @p raw, a load: BF16/FP8 also into integers of their size) and
 * return the nranks x ntensors buffer table of ptc_ckpt_write_local /
 * ptc_ckpt_load_local in *bufs (ptc_free). @p where names the layout's
 * source in messages ("the layout", "version 3"). */
int ptc_ckpt_bind(const ptc_layout *l, const int *ranks, size_t nranks,
                  const ptc_ckpt_local *locals, size_t n, const char *where, bool raw,
                  void ***bufs);

/* ---- the record (ckpt_record.c) -------------------------------------------------------- */

/* The record of an open version into *rec; a version without one: PTC_E_NOTFOUND
 * where @p required, else a zeroed record with format 0. */
int ptc_ckpt_reader_record(const ptc_store_reader *rd, ptc_ckpt_record *rec, bool required);

/* ---- a host's part of a version spread over hosts (ckpt_hosts.c) ---------------- */

/* ptc_ckpt_write_local into a store that holds only the ranks @p local
 * marks (world bytes; NULL: every rank): a shard whose layout owner is
 * elsewhere is written by the lowest marked rank holding it
 * (ptc_rank_source.local). */
int ptc_ckpt_write_part(ptc_store *s, uint64_t version, uint64_t parent, const ptc_layout *l,
                        const int *ranks, size_t nranks, const void *const *bufs,
                        const ptc_ckpt_options *opts, const uint8_t *local, void **desc,
                        size_t *desc_len);
/* ptc_ckpt_commit of a version that holds the shards of the ranks @p want
 * marks (NULL: every rank), with the metadata @p key = @p value (key NULL:
 * none) besides the record. */
int ptc_ckpt_commit_part(ptc_ckpt_txn *txn, const void *const *descs, const size_t *lens,
                         size_t n, const ptc_ckpt_record *rec, const uint8_t *want,
                         const char *key, const char *value, uint64_t *version);

/* ---- shared pieces ------------------------------------------------------------------------ */

/* "[a, b, c]" (Python's list notation, which the messages use; ckpt.c). */
void ptc_ckpt_shape_text(char *buf, size_t cap, int ndim, const int64_t *shape);
/* Elements of a shard (1 for a 0-d one; 0 where not present). */
int64_t ptc_ckpt_shard_volume(const ptc_shard *sh);
/* A failure of the transport itself: "WHAT: STEP: its message" (ckpt_collect.c). */
int ptc_ckpt_lost(int rc, const char *what, const char *step);
/* The collection of ptc_ckpt_collect_over, whose failures of one process
 * are agreed as "WHAT failed on process P: ..."; @p rc: this process's
 * outcome before it (agreed first). */
int ptc_ckpt_collect(const ptc_transport *t, const char *what, int rc, const int *ranks,
                     size_t nranks, const ptc_ckpt_local *locals, size_t n,
                     const ptc_config *cfg, const ptc_rules *rules, ptc_layout **out);
/* ptc_ckpt_collect of an explicit layout to load version @p rd into: a
 * tensor the version has in another dtype that the buffers take as raw bits
 * gets the version's dtype. */
int ptc_ckpt_collect_load(const ptc_transport *t, const char *what, const int *ranks,
                          size_t nranks, const ptc_ckpt_local *locals, size_t n,
                          const ptc_store_reader *rd, ptc_layout **out);

#endif
