/* Training-state checkpoints, the steps that need no communicator: begin /
 * write / commit / abort of a save, and the load of one process's ranks under
 * any configuration (the record is ckpt_record.c's). ckpt_collective.c
 * composes these into the collective calls.
 *
 * Saving writes each owned shard straight from the caller's buffer through
 * the store's block engine (1 MiB blocks), so no shard is ever copied whole;
 * loading reads each local piece with ptc_store_reader_read_box, which
 * touches only the blocks the piece needs and keeps one block of scratch. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "ptc/store/store_ranks.h"
#include "base/pool_internal.h"
#include "base/util_internal.h"

/* Room for a configuration's text (as reshard sizes it). */
#define CFG_TEXT_MAX (PTC_CONFIG_MAX_STAGES * 11 + 64)
/* Most threads a process uses by default. */
#define DEFAULT_THREADS_MAX 16
/* Fewest threads a load uses by default, whatever the CPUs: its threads
 * mostly wait on preads, and a cold read wants many in flight (1.24 GiB of
 * packs loaded into 2 processes on the 2-core development machine: 1.30-1.46
 * s with 2 threads each, 1.04-1.20 with 4, 0.62-0.99 with 8, 0.69-0.82 with
 * 16; warm, 8 threads cost no more than 2. With 4 processes on those 2
 * cores 8 each gained nothing over 2: docs/checkpoint.md). */
#define LOAD_THREADS_MIN 8
/* Bounds of the bytes of one load work item (see plan_chunk). */
#define LOAD_CHUNK_MIN ((int64_t)4 << 20)
#define LOAD_CHUNK_MAX ((int64_t)64 << 20)

void ptc_ckpt_options_init(ptc_ckpt_options *o)
{
    memset(o, 0, sizeof *o);
    o->parent = PTC_CKPT_PARENT_LATEST;
    o->codec = PTC_STORE_CODEC_NONE;
}

static ptc_ckpt_options opts_or_default(const ptc_ckpt_options *o)
{
    ptc_ckpt_options d;
    if (o)
        return *o;
    ptc_ckpt_options_init(&d);
    return d;
}

int ptc_ckpt_local_bytes(const ptc_layout *l, size_t t, int rank, size_t *bytes)
{
    *bytes = 0;
    ptc_shard sh;
    PTC_TRY(ptc_layout_shard(l, t, rank, &sh));
    if (!sh.present)
        return PTC_OK;
    int64_t vol = 1;
    for (int d = 0; d < sh.ndim; d++)
        vol *= sh.shape[d];
    *bytes = (size_t)vol * ptc_dtype_size(ptc_layout_tensor(l, t)->dtype);
    return PTC_OK;
}

/* ---- shared checks ---------------------------------------------------------------- */

/* The ranks must be distinct and inside the world. */
static int check_ranks(const ptc_layout *l, const int *ranks, size_t nranks)
{
    int world = ptc_layout_world(l);
    if (nranks && !ranks)
        return ptc_error_set(PTC_E_INVAL, "checkpoint: ranks is NULL with %zu ranks", nranks);
    for (size_t i = 0; i < nranks; i++) {
        if (ranks[i] < 0 || ranks[i] >= world)
            return ptc_error_set(PTC_E_INVAL, "checkpoint: rank %d outside the world of %d ranks",
                                 ranks[i], world);
        for (size_t j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return ptc_error_set(PTC_E_INVAL, "checkpoint: rank %d given twice", ranks[i]);
    }
    return PTC_OK;
}


/* The configuration text of a version of layout @p l ("explicit:W" for an
 * explicit layout, docs/format.md §2.2). */
static int format_config(const ptc_layout *l, char *buf, size_t cap)
{
    return ptc_layout_describe(l, buf, cap);
}

/* The store writer's options for version of layout @p l. */
static int write_options(const ptc_layout *l, const ptc_ckpt_options *o, const char *cfg,
                         const char *rules, uint64_t parent, ptc_store_write_options *wo)
{
    *wo = (ptc_store_write_options){
        .step = "",
        .config = cfg,
        .rules = rules,
        .parent = parent,
        .world_size = (uint32_t)ptc_layout_world(l),
        .codec = o->codec,
        .level = o->level,
    };
    return PTC_OK;
}

/* The layout's tensors, in order, with their placement text. */
static int add_tensors(ptc_store_writer *w, const ptc_layout *l)
{
    for (size_t t = 0; t < ptc_layout_count(l); t++) {
        const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
        char place[256] = ""; /* an explicit layout's tensors have no placement text */
        if (!ptc_layout_is_explicit(l))
            PTC_TRY(ptc_placement_format(ptc_layout_placement(l, t), place, sizeof place));
        PTC_TRY(ptc_store_writer_add_tensor(w, ti->name, strlen(ti->name), ti->dtype, ti->ndim,
                                            ti->shape, place, NULL));
    }
    return PTC_OK;
}

/* ---- begin / commit / abort -------------------------------------------------------- */

struct ptc_ckpt_txn {
    ptc_store *s;
    const ptc_layout *l;
    ptc_store_writer *w;
    uint64_t version, parent;
};

uint64_t ptc_ckpt_txn_version(const ptc_ckpt_txn *txn)
{
    return txn->version;
}

uint64_t ptc_ckpt_txn_parent(const ptc_ckpt_txn *txn)
{
    return txn->parent;
}

static bool layout_has_name(const char *name, void *user)
{
    size_t t;
    return ptc_layout_find(user, name, &t) == PTC_OK;
}

/* The stored rules must reproduce the layout for every later reader; the
 * rules of an explicit layout (for views under a configuration) must place
 * every tensor. */
static int check_rules(const ptc_layout *l, const ptc_rules *rules)
{
    for (size_t t = 0; rules && t < ptc_layout_count(l); t++) {
        const char *name = ptc_layout_tensor(l, t)->name;
        ptc_placement p;
        int rc = ptc_rules_resolve_in(rules, name, layout_has_name, (void *)l, &p);
        if (rc < 0)
            return ptc_error_set(rc, "checkpoint: the rules do not place the layout's tensors: %s",
                                 ptc_last_error());
        if (ptc_layout_is_explicit(l))
            continue;
        /* as ptc_layout_create does: optimizer state with fewer dims than its
         * parameter's split dim (a 0-d step) is replicated over tp */
        if (p.tp == PTC_TP_SPLIT && p.kind == PTC_KIND_OPTIM &&
            p.dim >= ptc_layout_tensor(l, t)->ndim) {
            p.tp = PTC_TP_REPLICATE;
            p.dim = -1;
            p.nblocks = 0;
            p.blocks_equal = false;
            p.nheads = 0;
            p.kv = 0;
            p.head_dim = 0;
            p.cut = false;
        }
        if (!ptc_placement_equal(&p, ptc_layout_placement(l, t))) {
            char a[256], b[256];
            ptc_placement_format(&p, a, sizeof a);
            ptc_placement_format(ptc_layout_placement(l, t), b, sizeof b);
            return ptc_error_set(PTC_E_RULE,
                                 "checkpoint: tensor '%.200s' is placed '%s' by the rules but "
                                 "'%s' by the layout",
                                 name, a, b);
        }
    }
    return PTC_OK;
}

int ptc_ckpt_begin(ptc_ckpt_txn **out, ptc_store *s, const ptc_layout *l, const ptc_rules *rules,
                   const ptc_ckpt_options *opts)
{
    *out = NULL;
    if (!s || !l || (!rules && !ptc_layout_is_explicit(l)))
        return ptc_error_set(PTC_E_INVAL, "checkpoint begin: store, layout and rules are required");
    ptc_ckpt_options o = opts_or_default(opts);
    PTC_TRY(check_rules(l, rules));
    char cfg[CFG_TEXT_MAX];
    PTC_TRY(format_config(l, cfg, sizeof cfg));
    ptc_ckpt_txn *txn = ptc_calloc(1, sizeof *txn);
    if (!txn)
        return PTC_E_NOMEM;
    txn->s = s;
    txn->l = l;
    ptc_store_write_options wo;
    write_options(l, &o, cfg, rules ? ptc_rules_text(rules) : "", 0, &wo);
    int rc = ptc_store_writer_begin(&txn->w, s, &wo);
    if (rc < 0)
        goto out_free;
    txn->version = ptc_store_writer_version(txn->w);
    /* resolved under the lock: no other writer can commit in between */
    if (o.parent == PTC_CKPT_PARENT_LATEST) {
        if ((rc = ptc_store_latest(s, &txn->parent)) < 0)
            goto out_free;
    } else if (o.parent) {
        ptc_store_reader *rd;
        if ((rc = ptc_store_reader_open(&rd, s, o.parent)) < 0) {
            rc = ptc_error_set(rc, "checkpoint parent: %s", ptc_last_error());
            goto out_free;
        }
        ptc_store_reader_close(rd);
        txn->parent = o.parent;
    }
    if ((rc = ptc_store_writer_set_origin(txn->w, NULL, txn->parent)) < 0 ||
        (rc = add_tensors(txn->w, l)) < 0)
        goto out_free;
    *out = txn;
    return PTC_OK;
out_free:
    ptc_store_writer_destroy(txn->w);
    ptc_free(txn);
    return rc;
}

void ptc_ckpt_abort(ptc_ckpt_txn *txn)
{
    if (!txn)
        return;
    /* still under the writer lock: nobody else can own version V's files */
    if (txn->w)
        ptc_store_remove_vdir(txn->s, txn->version, NULL, NULL);
    ptc_store_writer_destroy(txn->w);
    ptc_free(txn);
}

int ptc_ckpt_commit(ptc_ckpt_txn *txn, const void *const *descs, const size_t *lens, size_t n,
                    const ptc_ckpt_record *rec, uint64_t *version)
{
    return ptc_ckpt_commit_part(txn, descs, lens, n, rec, NULL, NULL, NULL, version);
}

int ptc_ckpt_commit_part(ptc_ckpt_txn *txn, const void *const *descs, const size_t *lens,
                         size_t n, const ptc_ckpt_record *rec, const uint8_t *want,
                         const char *key, const char *value, uint64_t *version)
{
    if (!txn)
        return ptc_error_set(PTC_E_INVAL, "checkpoint commit: no transaction");
    char *json = NULL;
    int rc = PTC_OK;
    if (n && (!descs || !lens)) {
        rc = ptc_error_set(PTC_E_INVAL, "checkpoint commit: descs or lens is NULL");
        goto out_abort;
    }
    if (rec) {
        ptc_ckpt_record r = *rec;
        char cfg[CFG_TEXT_MAX];
        if (!r.config) {
            if ((rc = format_config(txn->l, cfg, sizeof cfg)) < 0)
                goto out_abort;
            r.config = cfg;
        }
        char step[24];
        snprintf(step, sizeof step, "%llu", (unsigned long long)r.step);
        if ((rc = ptc_ckpt_record_to_json(&r, &json)) < 0 ||
            (rc = ptc_store_writer_set_metadata(txn->w, PTC_CKPT_RECORD_KEY, json)) < 0 ||
            (rc = ptc_store_writer_set_origin(txn->w, step, txn->parent)) < 0)
            goto out_abort;
    }
    if (key && (rc = ptc_store_writer_set_metadata(txn->w, key, value)) < 0)
        goto out_abort;
    if ((rc = ptc_store_check_coverage(txn->l, descs, lens, n, want)) < 0)
        goto out_abort;
    for (size_t i = 0; i < n; i++)
        if ((rc = ptc_store_writer_import(txn->w, descs[i], lens[i])) < 0) {
            rc = ptc_error_set(rc, "checkpoint descriptor %zu: %s", i, ptc_last_error());
            goto out_abort;
        }
    uint64_t v;
    if ((rc = ptc_store_writer_commit(txn->w, &v)) < 0)
        goto out_abort;
    if (version)
        *version = v;
    ptc_store_free(json);
    ptc_store_writer_destroy(txn->w);
    ptc_free(txn);
    return PTC_OK;
out_abort:
    ptc_store_free(json);
    ptc_ckpt_abort(txn);
    return rc;
}

/* ---- writing one process's ranks ------------------------------------------------------ */

typedef struct wr_ctx {
    const ptc_layout *l;
    ptc_store_writer *w;
    ptc_store_reader *parent; /* NULL: no reuse */
    const int *ranks;
    const void *const *bufs;
    size_t nt;
    const uint8_t *local; /* ptc_rank_source.local */
} wr_ctx;

typedef struct wr_rank {
    const wr_ctx *c;
    size_t i; /* index into c->ranks */
} wr_rank;

static uint64_t shard_bytes(const wr_ctx *c, size_t t, const ptc_shard *sh)
{
    size_t es = ptc_dtype_size(ptc_layout_tensor(c->l, t)->dtype);
    return (uint64_t)ptc_ckpt_shard_volume(sh) * es;
}

/* ptc_rank_source.find: the parent's stored shard with the same place and
 * block checksums */
static int wr_find(void *user, size_t t, int r, const ptc_shard *sh, const ptc_piece *pc,
                   size_t np, const ptc_store_reader **rd, size_t *st, int64_t *from)
{
    const wr_rank *k = user;
    const uint8_t *buf = k->c->bufs[k->i * k->c->nt + t];
    *rd = k->c->parent;
    *from = -1;
    if (k->c->parent && buf)
        *from = ptc_store_find_unchanged(k->c->parent, k->c->l, t, r, sh, pc, buf,
                                         shard_bytes(k->c, t, sh), st);
    return PTC_OK;
}

/* ptc_rank_source.write: straight from the caller's buffer */
static int wr_write(void *user, ptc_store_writer *w, size_t t, int r, const ptc_shard *sh,
                    const ptc_piece *pc, size_t np)
{
    const wr_rank *k = user;
    uint64_t bytes = shard_bytes(k->c, t, sh);
    const uint8_t *buf = k->c->bufs[k->i * k->c->nt + t];
    if (bytes && !buf)
        return ptc_error_set(PTC_E_INVAL,
                             "checkpoint: no buffer for tensor '%.200s' on rank %d (%llu bytes)",
                             ptc_layout_tensor(k->c->l, t)->name, r, (unsigned long long)bytes);
    return ptc_store_shard_put(w, (uint32_t)t, (uint32_t)r, sh->ndim, sh->shape, pc, np, buf,
                               (size_t)bytes);
}

static int write_rank(void *arg, size_t i)
{
    wr_ctx *c = arg;
    wr_rank k = {c, i};
    ptc_rank_source src = {.find = wr_find, .write = wr_write, .user = &k, .local = c->local};
    return ptc_store_write_rank(c->w, c->l, c->ranks[i], 0, c->nt, &src, NULL);
}

int ptc_ckpt_write_local(ptc_store *s, uint64_t version, uint64_t parent, const ptc_layout *l,
                         const int *ranks, size_t nranks, const void *const *bufs,
                         const ptc_ckpt_options *opts, void **desc, size_t *desc_len)
{
    return ptc_ckpt_write_part(s, version, parent, l, ranks, nranks, bufs, opts, NULL, desc,
                               desc_len);
}

int ptc_ckpt_write_part(ptc_store *s, uint64_t version, uint64_t parent, const ptc_layout *l,
                        const int *ranks, size_t nranks, const void *const *bufs,
                        const ptc_ckpt_options *opts, const uint8_t *local, void **desc,
                        size_t *desc_len)
{
    *desc = NULL;
    *desc_len = 0;
    if (!s || !l || (nranks && !bufs))
        return ptc_error_set(PTC_E_INVAL, "checkpoint write: store, layout and buffers are required");
    ptc_ckpt_options o = opts_or_default(opts);
    PTC_TRY(check_ranks(l, ranks, nranks));
    char cfg[CFG_TEXT_MAX];
    PTC_TRY(format_config(l, cfg, sizeof cfg));
    wr_ctx c = {.l = l, .ranks = ranks, .bufs = bufs, .nt = ptc_layout_count(l), .local = local};
    uint32_t *r32 = ptc_malloc(sizeof *r32 * (nranks + 1));
    if (!r32)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < nranks; i++)
        r32[i] = (uint32_t)ranks[i];
    ptc_store_write_options wo;
    write_options(l, &o, cfg, "", parent, &wo);
    int rc = ptc_store_writer_begin_pack(&c.w, s, version, &wo, r32, nranks);
    if (rc < 0)
        goto out_free;
    if ((rc = add_tensors(c.w, l)) < 0)
        goto out_free;
    if (parent && !o.no_reuse && (rc = ptc_store_reader_open(&c.parent, s, parent)) < 0) {
        rc = ptc_error_set(rc, "checkpoint parent: %s", ptc_last_error());
        goto out_free;
    }
    int threads = ptc_pool_threads(o.threads, DEFAULT_THREADS_MAX);
    if ((rc = ptc_pool_for(threads, nranks, write_rank, &c)) < 0 ||
        (rc = ptc_store_writer_export(c.w, desc, desc_len)) < 0)
        goto out_free;
out_free:
    ptc_store_reader_close(c.parent);
    ptc_store_writer_destroy(c.w); /* unless exported, removes this process's pack files */
    ptc_free(r32);
    return rc;
}

/* ---- loading one process's ranks -------------------------------------------------------- */

enum { LD_READ = 0, LD_COPY = 1 };

/* One unit of load work: a box of a stored tensor into a destination, or a
 * copy between two local buffers (ranks of this process holding identical
 * shards are read once). */
typedef struct ld_item {
    int kind;
    uint32_t st;        /* READ: the stored tensor */
    ptc_box box;        /* READ: global box */
    int64_t stride[PTC_MAX_DIMS];
    uint8_t *dst;       /* READ: element box.lo; COPY: destination */
    const uint8_t *src; /* COPY */
    size_t bytes;       /* COPY */
} ld_item;

typedef struct ld_ctx {
    const ptc_store_reader *rd;
    ld_item *items;
    size_t n, cap;
    size_t ncopy_first; /* items [ncopy_first, n) are copies (second phase) */
    int64_t chunk;      /* target bytes of a read item */
} ld_ctx;

static int ld_push(ld_ctx *c, const ld_item *it)
{
    PTC_TRY(ptc_grow((void **)&c->items, &c->cap, c->n + 1, sizeof *c->items));
    c->items[c->n++] = *it;
    return PTC_OK;
}

/* Cut a piece into items of about c->chunk bytes along its outermost
 * dimensions, so that threads share big tensors evenly. */
static int ld_split(ld_ctx *c, uint32_t st, const ptc_piece *p, uint8_t *base, size_t es)
{
    int64_t vol = ptc_box_volume(&p->box);
    if (vol == 0)
        return PTC_OK;
    int nd = p->box.ndim, d = 0;
    while (d < nd && p->box.hi[d] - p->box.lo[d] == 1)
        d++;
    if ((int64_t)es * vol <= c->chunk || d == nd) {
        ld_item it = {.kind = LD_READ, .st = st, .box = p->box,
                      .dst = base + (size_t)p->local_offset * es};
        memcpy(it.stride, p->local_stride, sizeof it.stride);
        return ld_push(c, &it);
    }
    int64_t ext = p->box.hi[d] - p->box.lo[d];
    int64_t parts = PTC_MIN(ext, ((int64_t)es * vol + c->chunk - 1) / c->chunk);
    for (int64_t k = 0; k < parts; k++) {
        int64_t lo, hi;
        ptc_split(ext, parts, k, &lo, &hi);
        if (lo == hi)
            continue;
        ptc_box sub = p->box;
        sub.lo[d] = p->box.lo[d] + lo;
        sub.hi[d] = p->box.lo[d] + hi;
        ptc_piece q;
        ptc_piece_restrict(&q, p, &sub);
        PTC_TRY(ld_split(c, st, &q, base, es));
    }
    return PTC_OK;
}

static int ld_run(void *arg, size_t i)
{
    ld_ctx *c = arg;
    const ld_item *it = &c->items[i];
    if (it->kind == LD_COPY) {
        memcpy(it->dst, it->src, it->bytes);
        return PTC_OK;
    }
    return ptc_store_reader_read_box(c->rd, it->st, &it->box, it->dst, it->stride);
}

static int ld_run_copy(void *arg, size_t i)
{
    ld_ctx *c = arg;
    return ld_run(c, c->ncopy_first + i);
}

void ptc_ckpt_shape_text(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

int64_t ptc_ckpt_shard_volume(const ptc_shard *sh)
{
    if (!sh->present)
        return 0;
    int64_t v = 1;
    for (int d = 0; d < sh->ndim; d++)
        v *= sh->shape[d];
    return v;
}

static void shape_text(char *buf, size_t cap, ptc_dtype dt, int ndim, const int64_t *shape)
{
    size_t at = (size_t)snprintf(buf, cap, "%s ", ptc_dtype_name(dt));
    if (at < cap)
        ptc_ckpt_shape_text(buf + at, cap - at, ndim, shape);
}

/* Map the layout's tensors to the version's; refuse what does not match. */
static int match_tensors(const ptc_store_reader *rd, const ptc_layout *l, bool ignore_extra,
                         uint32_t *map)
{
    uint64_t v = ptc_store_reader_version(rd)->version;
    size_t nt = ptc_layout_count(l);
    for (size_t t = 0; t < nt; t++) {
        const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
        size_t st;
        if (ptc_store_reader_find(rd, ti->name, strlen(ti->name), &st) != PTC_OK)
            return ptc_error_set(PTC_E_NOTFOUND,
                                 "tensor '%.200s' is not in version %llu (the layout expects it)",
                                 ti->name, (unsigned long long)v);
        ptc_store_tensor s;
        PTC_TRY(ptc_store_reader_tensor(rd, st, &s));
        bool same = s.dtype == ti->dtype && s.ndim == ti->ndim;
        for (int d = 0; same && d < ti->ndim; d++)
            same = s.shape[d] == ti->shape[d];
        if (!same) {
            char a[256], b[256];
            shape_text(a, sizeof a, s.dtype, s.ndim, s.shape);
            shape_text(b, sizeof b, ti->dtype, ti->ndim, ti->shape);
            return ptc_error_set(PTC_E_INVAL,
                                 "tensor '%.200s': version %llu has %s, the layout expects %s",
                                 ti->name, (unsigned long long)v, a, b);
        }
        map[t] = (uint32_t)st;
    }
    size_t ns = ptc_store_reader_tensor_count(rd);
    if (!ignore_extra && ns > nt)
        for (size_t st = 0; st < ns; st++) {
            ptc_store_tensor s;
            size_t t;
            PTC_TRY(ptc_store_reader_tensor(rd, st, &s));
            if (ptc_layout_find(l, s.name, &t) != PTC_OK)
                return ptc_error_set(PTC_E_INVAL,
                                     "version %llu has tensor '%.200s', which the layout does "
                                     "not have (set ignore_extra to skip it)",
                                     (unsigned long long)v, s.name);
        }
    return PTC_OK;
}

/* The work of this process: reads of every local piece, and copies for
 * the ranks whose shard another of its ranks reads. */
static int ld_plan(ld_ctx *c, const ptc_layout *l, const uint32_t *map, const int *ranks,
                   size_t nranks, void *const *bufs, int threads)
{
    size_t nt = ptc_layout_count(l);
    ptc_piece *pc = NULL;
    size_t cap = 0;
    int rc = PTC_OK;
    /* the chunk: a few items per thread, never tiny, never huge */
    int64_t total = 0;
    for (size_t i = 0; i < nranks; i++)
        for (size_t t = 0; t < nt; t++) {
            size_t b;
            PTC_TRY(ptc_ckpt_local_bytes(l, t, ranks[i], &b));
            total += (int64_t)b;
        }
    c->chunk = PTC_MAX(LOAD_CHUNK_MIN, PTC_MIN(LOAD_CHUNK_MAX, total / (4 * (int64_t)threads)));
    for (int phase = 0; phase < 2 && rc == PTC_OK; phase++) {
        if (phase == 1)
            c->ncopy_first = c->n;
        for (size_t i = 0; i < nranks && rc == PTC_OK; i++)
            for (size_t t = 0; t < nt && rc == PTC_OK; t++) {
                const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
                size_t es = ptc_dtype_size(ti->dtype), np;
                ptc_shard sh;
                if ((rc = ptc_layout_shard(l, t, ranks[i], &sh)) < 0)
                    break;
                int64_t vol = ptc_ckpt_shard_volume(&sh);
                if (!sh.present || vol == 0)
                    continue;
                uint8_t *dst = bufs[i * nt + t];
                if (!dst) {
                    rc = ptc_error_set(PTC_E_INVAL,
                                       "checkpoint: no buffer for tensor '%.200s' on rank %d",
                                       ti->name, ranks[i]);
                    break;
                }
                size_t j = 0; /* an earlier rank of this process with the same shard */
                while (j < i) {
                    ptc_shard sj;
                    if ((rc = ptc_layout_shard(l, t, ranks[j], &sj)) < 0)
                        break;
                    if (sj.present && sj.owner == sh.owner)
                        break;
                    j++;
                }
                if (rc < 0)
                    break;
                if (phase == 1) {
                    if (j < i) {
                        ld_item it = {.kind = LD_COPY, .dst = dst, .src = bufs[j * nt + t],
                                      .bytes = (size_t)vol * es};
                        rc = ld_push(c, &it);
                    }
                    continue;
                }
                if (j < i)
                    continue;
                if ((rc = ptc_grow((void **)&pc, &cap, sh.npieces + 1, sizeof *pc)) < 0 ||
                    (rc = ptc_layout_pieces(l, t, ranks[i], pc, cap, &np)) < 0)
                    break;
                for (size_t k = 0; k < np && rc == PTC_OK; k++)
                    rc = ld_split(c, map[t], &pc[k], dst, es);
            }
    }
    ptc_free(pc);
    return rc;
}

int ptc_ckpt_load_local(ptc_store *s, uint64_t version, const ptc_layout *l, const int *ranks,
                        size_t nranks, void *const *bufs, const ptc_ckpt_options *opts,
                        ptc_ckpt_record *rec, uint64_t *loaded)
{
    if (rec)
        memset(rec, 0, sizeof *rec);
    if (!s || !l || (nranks && !bufs))
        return ptc_error_set(PTC_E_INVAL, "checkpoint load: store, layout and buffers are required");
    ptc_ckpt_options o = opts_or_default(opts);
    PTC_TRY(check_ranks(l, ranks, nranks));
    ptc_store_reader *rd;
    PTC_TRY(ptc_store_reader_open(&rd, s, version));
    int threads = o.threads > 0 ? o.threads
                                : PTC_MAX(ptc_pool_threads(0, DEFAULT_THREADS_MAX), LOAD_THREADS_MIN);
    ld_ctx c = {.rd = rd};
    uint32_t *map = ptc_malloc(sizeof *map * (ptc_layout_count(l) + 1));
    int rc = map ? PTC_OK : PTC_E_NOMEM;
    if (rc == PTC_OK)
        rc = match_tensors(rd, l, o.ignore_extra, map);
    if (rc == PTC_OK && rec)
        rc = ptc_ckpt_reader_record(rd, rec, false);
    if (rc == PTC_OK)
        rc = ld_plan(&c, l, map, ranks, nranks, bufs, threads);
    /* reads first; then the copies from what they filled */
    if (rc == PTC_OK)
        rc = ptc_pool_for(threads, c.ncopy_first, ld_run, &c);
    if (rc == PTC_OK)
        rc = ptc_pool_for(threads, c.n - c.ncopy_first, ld_run_copy, &c);
    if (rc == PTC_OK && loaded)
        *loaded = ptc_store_reader_version(rd)->version;
    if (rc < 0 && rec)
        ptc_ckpt_record_free(rec);
    ptc_free(c.items);
    ptc_free(map);
    ptc_store_reader_close(rd);
    return rc;
}
