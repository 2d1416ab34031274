/* Inside ptc/ckpt: what the collective steps (ckpt_collective.c), the
 * collection of described local tensors (ckpt_collect.c) and the
 * non-collective steps (ckpt.c) share. Never installed. */
#ifndef PTC_CKPT_INTERNAL_H
#define PTC_CKPT_INTERNAL_H

#include <pthread.h>

#include "ptc/ckpt.h"
#include "ptc/store/store_ranks.h"
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
/* A save's ptc_ckpt_bind: first every tensor of the collected layout @p l
 * must be held whole by the ranks together (an explicit layout may not be;
 * ptc_layout_check_cover), then the check of @p locals against it. */
int ptc_ckpt_bind_save(const ptc_layout *l, const int *ranks, size_t nranks,
                       const ptc_ckpt_local *locals, size_t n, void ***bufs);

/* ---- streamed tensors (ckpt_stream.c) ------------------------------------------------- */

/* The streamed buffers of a save or load: where streamed[i * ntensors + t]
 * is set, bufs[i * ntensors + t] is a token of @p stream. */
typedef struct ptc_ckpt_io {
    const ptc_ckpt_stream *stream;
    const uint8_t *streamed; /* NULL: nothing is streamed */
} ptc_ckpt_io;

/* Whether buffer (i, t) of a table of @p nt tensors is streamed. */
static inline bool ptc_ckpt_io_streamed(const ptc_ckpt_io *io, size_t i, size_t nt, size_t t)
{
    return io && io->streamed && io->streamed[i * nt + t];
}

/* The bytes of one pull / push: the stream's chunk (for a save rounded up
 * to whole store blocks). */
size_t ptc_ckpt_stream_chunk(const ptc_ckpt_stream *s, bool save);

/* The table of @p io for the described tensors bound to @p l (the layout
 * their bufs table was made for): *tab (ptc_free) is NULL where none is
 * streamed. PTC_E_INVAL where one is streamed and @p stream is NULL or
 * lacks the callbacks of a save (@p save) or a load. */
int ptc_ckpt_io_bind(ptc_ckpt_io *io, uint8_t **tab, const ptc_layout *l, const int *ranks,
                     size_t nranks, const ptc_ckpt_local *locals, size_t n,
                     const ptc_ckpt_stream *stream, bool save);

/* Tell the stream the order of the streamed owned shards of this process
 * (its plan callback, when it has one). */
int ptc_ckpt_stream_plan(const ptc_ckpt_io *io, const ptc_layout *l, const int *ranks,
                         size_t nranks, void *const *bufs);

/* Save the owned shard (t, r) of streamed tensor @p tok into @p w: pulled
 * chunk by chunk and compared with @p cand (may be NULL) block by block
 * while equal; equal to the end: a reference to the candidate; else written
 * (the equal prefix pulled again). */
int ptc_ckpt_stream_write(ptc_store_writer *w, const ptc_ckpt_stream *s, void *tok,
                          const ptc_store_candidate *cand, size_t t, int r,
                          const ptc_shard *sh, const ptc_piece *pc, size_t np, uint64_t bytes);

/* The windows of the streamed destinations of a load: each a range of one
 * local tensor, filled by reads of the stored boxes that land in it. */
typedef struct ptc_ckpt_part {
    uint32_t st;                  /* the stored tensor */
    ptc_box box;                  /* global box */
    int64_t stride[PTC_MAX_DIMS]; /* its strides in the window */
    uint64_t at;                  /* byte offset of box.lo in the window */
} ptc_ckpt_part;

typedef struct ptc_ckpt_window {
    void *tok;
    uint64_t off, n;     /* bytes of the local tensor */
    size_t first, count; /* its parts */
} ptc_ckpt_window;

typedef struct ptc_ckpt_windows {
    ptc_ckpt_window *w;
    size_t n, cap;
    ptc_ckpt_part *p;
    size_t np, pcap;
} ptc_ckpt_windows;

/* Add the windows of rank @p r's local tensor @p t (stored as @p st) of
 * layout @p l, whose pieces are @p pc[np], streamed as @p tok. */
int ptc_ckpt_windows_add(ptc_ckpt_windows *ws, const ptc_layout *l, size_t t, uint32_t st,
                         const ptc_piece *pc, size_t np, void *tok, size_t chunk);
/* Fill window @p i: acquire, read its parts from @p rd, push (or release). */
int ptc_ckpt_window_run(const ptc_ckpt_windows *ws, const ptc_store_reader *rd,
                        const ptc_ckpt_stream *s, size_t i);
void ptc_ckpt_windows_free(ptc_ckpt_windows *ws);

/* ptc_ckpt_write_local / ptc_ckpt_load_local with streamed buffers (@p io
 * may be NULL). */
int ptc_ckpt_write_local_io(ptc_store *s, uint64_t version, uint64_t parent, const ptc_layout *l,
                            const int *ranks, size_t nranks, const void *const *bufs,
                            const ptc_ckpt_options *opts, const ptc_ckpt_io *io, void **desc,
                            size_t *desc_len);
int ptc_ckpt_load_local_io(ptc_store *s, uint64_t version, const ptc_layout *l, const int *ranks,
                           size_t nranks, void *const *bufs, const ptc_ckpt_options *opts,
                           const ptc_ckpt_io *io, ptc_ckpt_record *rec, uint64_t *loaded);

/* ---- the save's collective steps (ckpt_collective.c), apart for async saves -------------- */

/* A save between its steps. Zero-initialise. */
typedef struct ptc_ckpt_saving {
    ptc_ckpt_txn *txn;         /* process 0, after the begin */
    uint64_t version, parent;  /* every process, after the begin */
    void *desc;                /* after the write */
    size_t dlen;
} ptc_ckpt_saving;

/* Agree on @p rc; process 0 checks @p rec and begins; all learn the version. */
int ptc_ckpt_save_begin(const ptc_transport *t, ptc_store *s, const ptc_layout *l,
                        const ptc_rules *rules, const ptc_ckpt_record *rec,
                        const ptc_ckpt_options *opts, int rc, ptc_ckpt_saving *sv);
/* Agree on this process's write (@p rc), gather the descriptors, process 0
 * commits, all learn the outcome and version. Frees what @p sv holds
 * (aborting the version on failure). */
int ptc_ckpt_save_finish(const ptc_transport *t, int rc, const ptc_ckpt_record *rec,
                         ptc_ckpt_saving *sv, uint64_t *version);
/* Drop a save that will not finish (process 0: abort). */
void ptc_ckpt_saving_free(ptc_ckpt_saving *sv);

/* ---- the record (ckpt_record.c) -------------------------------------------------------- */

/* The record of an open version into *rec; a version without one: PTC_E_NOTFOUND
 * where @p required, else a zeroed record with format 0. */
int ptc_ckpt_reader_record(const ptc_store_reader *rd, ptc_ckpt_record *rec, bool required);

/* ---- a host's part of a version spread over hosts (ckpt_hosts.c) ---------------- */

/* ptc_ckpt_write_local_io (@p io may be NULL) into a store that holds only
 * the ranks @p local marks (world bytes; NULL: every rank): a shard whose
 * layout owner is elsewhere is written by the lowest marked rank holding it
 * (ptc_rank_source.local). */
int ptc_ckpt_write_part(ptc_store *s, uint64_t version, uint64_t parent, const ptc_layout *l,
                        const int *ranks, size_t nranks, const void *const *bufs,
                        const ptc_ckpt_options *opts, const ptc_ckpt_io *io,
                        const uint8_t *local, void **desc, size_t *desc_len);
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
/* ptc_ckpt_collect of an explicit layout to load version @p rd into (or,
 * @p rd NULL, the version whose layout @p vl is): a tensor the version has
 * in another dtype that the buffers take as raw bits gets the version's
 * dtype. */
int ptc_ckpt_collect_load(const ptc_transport *t, const char *what, const int *ranks,
                          size_t nranks, const ptc_ckpt_local *locals, size_t n,
                          const ptc_store_reader *rd, const ptc_layout *vl, ptc_layout **out);

/* ---- across hosts (ckpt_hosts.c) ------------------------------------------------------- */

/* ptc_ckpt_hosts_save_over with this process's outcome so far, @p rc_in,
 * agreed in its first step (the asynchronous save's snapshot); the replica
 * copies this process receives go into @p stage's copy area (NULL: memory
 * of this save's own). */
int ptc_ckpt_hosts_save_rc(const ptc_transport *t, int rc_in, int host, ptc_store *s,
                           const ptc_layout *l, const ptc_rules *rules, const int *ranks,
                           size_t nranks, const void *const *bufs, const ptc_ckpt_record *rec,
                           const ptc_ckpt_options *opts, const ptc_ckpt_hosts_options *hopts,
                           ptc_ckpt_stage *stage, uint64_t *version);

/* The copy area of @p st, at least @p bytes (grown when smaller, kept for
 * the next save, never shrunk): where a save across hosts receives the
 * replicas it writes. Only the save holding @p st uses it (ckpt_async.c). */
int ptc_ckpt_stage_copies(ptc_ckpt_stage *st, size_t bytes, uint8_t **out);

/* The snapshot area (ckpt_stage.c). */
struct ptc_ckpt_stage {
    uint8_t *mem;
    size_t cap;
    uint8_t *copies; /* replicas received by a save across hosts */
    size_t copies_cap;
    bool deferred; /* ptc_ckpt_stage_defer: hosts saves snapshot on their thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy; /* the background part of a save uses it */
};

/* A mutex and a condition variable, both or neither (PTC_E_NOMEM, said).
 * The snapshot area's and each asynchronous save's. */
int ptc_ckpt_lock_init(pthread_mutex_t *mu, pthread_cond_t *cv);

/* Wait until no save uses the area, then hold it; give it back. */
void ptc_ckpt_stage_take(ptc_ckpt_stage *st);
void ptc_ckpt_stage_give(ptc_ckpt_stage *st);

#endif
