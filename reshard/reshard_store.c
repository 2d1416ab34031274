/* Store executors: a thread pool on one host, and MPI processes (each a
 * group of target ranks) exchanging what the plan sends between them. Both
 * fill every target shard chunk by chunk from the plan's transfers and
 * stream it into the rank's pack file; one commit at the end. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "kernels/pack.h"
#include "ptc/convert.h"
#include "ptc/layout.h"
#include "ptc/store/store_ranks.h"
#include "base/pool_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"
#include "reshard/reshard_store_internal.h"

/* Target elements filled per step (in source-dtype bytes). */
#define RS_CHUNK ((size_t)2 << 20)



double rs_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ptc_reshard_options_init(ptc_reshard_options *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = PTC_RESHARD_DTYPE_KEEP;
}

void rs_set_err(rs_ctx *c, int rc)
{
    pthread_mutex_lock(&c->err_lock);
    if (atomic_load(&c->rc) == PTC_OK) {
        snprintf(c->err, sizeof c->err, "%s", ptc_last_error());
        atomic_store(&c->rc, rc);
    }
    pthread_mutex_unlock(&c->err_lock);
}

/* ---- setup shared by both executors ------------------------------------- */

int rs_ctx_open(rs_ctx *c, ptc_store *s, uint64_t version, const ptc_config *to,
                    const ptc_reshard_options *opts, const int *src_host, const int *dst_host,
                    int me)
{
    c->s = s;
    if (opts)
        c->o = *opts;
    else
        ptc_reshard_options_init(&c->o);
    pthread_mutex_init(&c->err_lock, NULL);
    PTC_TRY(ptc_store_reader_open(&c->rd, s, version));
    PTC_TRY(ptc_layout_of_version(&c->ls, c->rd, NULL));
    PTC_TRY(ptc_layout_version_rules(c->rd, &c->rules));
    PTC_TRY(ptc_layout_of_version_rules(&c->lt, c->rd, to, c->rules));
    c->nt = ptc_layout_count(c->lt);
    c->ws = ptc_layout_world(c->ls);
    c->wt = ptc_config_world(ptc_layout_config(c->lt));
    c->out_dt = ptc_malloc(sizeof(ptc_dtype) * (c->nt + 1));
    if (!c->out_dt)
        return PTC_E_NOMEM;
    bool convert = false;
    for (size_t t = 0; t < c->nt; t++) {
        ptc_dtype d = ptc_layout_tensor(c->lt, t)->dtype;
        c->out_dt[t] = d;
        if (c->o.dtype != PTC_RESHARD_DTYPE_KEEP && ptc_dtype_is_float(d) && d != c->o.dtype) {
            c->out_dt[t] = c->o.dtype;
            convert = true;
        }
    }
    if (c->o.dtype != PTC_RESHARD_DTYPE_KEEP && c->o.dtype != PTC_DTYPE_F32 &&
        c->o.dtype != PTC_DTYPE_BF16 && c->o.dtype != PTC_DTYPE_F16)
        return ptc_error_set(PTC_E_INVAL, "reshard converts only to F32, BF16 or F16");
    ptc_plan_options po = {.src_host = src_host, .dst_host = dst_host, .no_reuse = convert};
    if (src_host) { /* MPI: each process is a host and keeps its own part */
        po.src_proc = src_host;
        po.dst_proc = dst_host;
        po.proc = me;
    }
    PTC_TRY(ptc_plan_create(&c->plan, c->ls, c->lt, &po));
    c->xf = ptc_plan_transfers(c->plan, &c->nxf);
    return PTC_OK;
}

size_t rs_first(const rs_ctx *c, size_t t, int r)
{
    /* transfers are sorted by (tensor, target rank) */
    size_t lo = 0, hi = c->nxf;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ptc_transfer *x = &c->xf[mid];
        if (x->tensor < t || (x->tensor == t && x->dst_rank < r))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void rs_ctx_close(rs_ctx *c)
{
    ptc_store_writer_destroy(c->w);
    ptc_free(c->out_dt);
    ptc_plan_destroy(c->plan);
    ptc_layout_destroy(c->ls);
    ptc_layout_destroy(c->lt);
    ptc_rules_destroy(c->rules);
    ptc_store_reader_close(c->rd);
    pthread_mutex_destroy(&c->err_lock);
}

/* The new version's record and tensor list (same order on every writer). */
int rs_add_tensors(rs_ctx *c, bool metadata)
{
    if (metadata) {
        const ptc_version_info *vi = ptc_store_reader_version(c->rd);
        json_error_t je;
        json_t *m = json_loads(vi->metadata_json ? vi->metadata_json : "{}", 0, &je);
        if (!m || !json_is_object(m)) {
            json_decref(m);
            return ptc_error_set(PTC_E_STORE, "version %llu: metadata is not a JSON object",
                                 (unsigned long long)vi->version);
        }
        const char *k;
        json_t *v;
        int rc = PTC_OK;
        json_object_foreach(m, k, v)
        {
            if (json_is_string(v) && rc == PTC_OK)
                rc = ptc_store_writer_set_metadata(c->w, k, json_string_value(v));
        }
        json_decref(m);
        PTC_TRY(rc);
    }
    for (size_t t = 0; t < c->nt; t++) {
        const ptc_tensor_info *ti = ptc_layout_tensor(c->lt, t);
        char place[256];
        PTC_TRY(ptc_placement_format(ptc_layout_placement(c->lt, t), place, sizeof place));
        PTC_TRY(ptc_store_writer_add_tensor(c->w, ti->name, strlen(ti->name), c->out_dt[t],
                                            ti->ndim, ti->shape, place, NULL));
    }
    return PTC_OK;
}

int rs_write_options(rs_ctx *c, ptc_store_write_options *wo, char *cfg, size_t cap)
{
    const ptc_version_info *vi = ptc_store_reader_version(c->rd);
    PTC_TRY(ptc_config_format(ptc_layout_config(c->lt), PTC_CONFIG_STYLE_KEYS, cfg, cap));
    *wo = (ptc_store_write_options){
        .step = c->o.step ? c->o.step : vi->step,
        .config = cfg,
        .rules = ptc_rules_text(c->rules), /* the target's (an explicit source may have none) */
        .parent = vi->version,
        .world_size = (uint32_t)c->wt,
        .codec = c->o.codec,
        .level = c->o.level,
    };
    return PTC_OK;
}

/* ---- filling one shard -------------------------------------------------- */

typedef struct fill_ctx {
    rs_ctx *c;
    const ptc_transfer *x;
    uint8_t *chunk;
    int64_t a;
    size_t es;
} fill_ctx;

static int fill_sub(const ptc_piece *sub, void *user)
{
    fill_ctx *f = user;
    const ptc_transfer *x = f->x;
    uint8_t *dst = f->chunk + (size_t)(sub->local_offset - f->a) * f->es;
    int nd = sub->box.ndim;
    if (x->kind == PTC_TRANSFER_NETWORK || x->kind == PTC_TRANSFER_FANOUT) {
        const ptc_transfer *src_x = x->kind == PTC_TRANSFER_FANOUT ? &f->c->xf[x->via] : x;
        const uint8_t *base = f->c->net ? f->c->net[src_x - f->c->xf] : NULL;
        if (base) {
            int64_t ext[PTC_MAX_DIMS] = {0}, rm[PTC_MAX_DIMS], e[PTC_MAX_DIMS], off = 0;
            for (int d = 0; d < nd; d++)
                ext[d] = src_x->box.hi[d] - src_x->box.lo[d];
            ptc_strides_row_major(nd, ext, rm);
            for (int d = 0; d < nd; d++) {
                off += (sub->box.lo[d] - src_x->box.lo[d]) * rm[d];
                e[d] = sub->box.hi[d] - sub->box.lo[d];
            }
            return ptc_pack_copy(dst, sub->local_stride, base + (size_t)off * f->es, rm, e, nd,
                                 f->es);
        }
    }
    /* from the stored source shards on this host */
    return ptc_store_reader_read_box(f->c->rd, x->tensor, &sub->box, dst, sub->local_stride);
}

static int write_shard(rs_ctx *c, size_t t, int r, const ptc_shard *sh, const ptc_piece *pc,
                       uint8_t *chunk, uint8_t *conv)
{
    ptc_dtype sdt = ptc_layout_tensor(c->lt, t)->dtype, ddt = c->out_dt[t];
    size_t es = ptc_dtype_size(sdt), eo = ptc_dtype_size(ddt);
    PTC_TRY(ptc_store_shard_begin(c->w, (uint32_t)t, (uint32_t)r, sh->ndim, sh->shape, pc,
                                  sh->npieces));
    int64_t nel = 1;
    for (int d = 0; d < sh->ndim; d++)
        nel *= sh->shape[d];
    int64_t per = (int64_t)(RS_CHUNK / es);
    size_t x0 = rs_first(c, t, r), x1 = rs_first(c, t, r + 1);
    for (int64_t a = 0; a < nel; a += per) {
        int64_t b = PTC_MIN(nel, a + per);
        fill_ctx f = {c, NULL, chunk, a, es};
        for (size_t i = x0; i < x1; i++) {
            f.x = &c->xf[i];
            ptc_piece to = {.box = f.x->box, .local_offset = f.x->dst_offset};
            memcpy(to.local_stride, f.x->dst_stride, sizeof to.local_stride);
            PTC_TRY(ptc_piece_walk_range(&to, a, b, fill_sub, &f));
        }
        const void *out = chunk;
        if (ddt != sdt) {
            PTC_TRY(ptc_dtype_convert(conv, ddt, chunk, sdt, (size_t)(b - a)));
            out = conv;
        }
        PTC_TRY(ptc_store_shard_write(c->w, (uint32_t)r, out, (size_t)(b - a) * eo));
        atomic_fetch_add(&c->bytes_written, (uint64_t)(b - a) * eo);
    }
    PTC_TRY(ptc_store_shard_end(c->w, (uint32_t)r));
    atomic_fetch_add(&c->shards_written, 1);
    return PTC_OK;
}

/* A stored source rank whose shard of t is identical to (t, r)'s target
 * shard, or -1 (the same rank first). */
static int find_identical(rs_ctx *c, size_t t, int r, const ptc_shard *sh, const ptc_piece *pc,
                          ptc_piece **sp, size_t *cap)
{
    if (c->out_dt[t] != ptc_layout_tensor(c->lt, t)->dtype)
        return -1;
    ptc_shard_group *g = NULL;
    size_t ng = 0;
    if (ptc_layout_groups(c->ls, t, &g, &ng) != PTC_OK)
        return -1;
    int found = -1;
    for (int pass = 0; pass < 2 && found < 0; pass++)
        for (size_t i = 0; i < ng && found < 0; i++) {
            bool has_r = false;
            for (size_t k = 0; k < g[i].nranks; k++)
                has_r |= g[i].ranks[k] == r;
            if ((pass == 0) != has_r)
                continue;
            ptc_shard ss;
            size_t np;
            if (ptc_layout_shard(c->ls, t, g[i].owner, &ss) != PTC_OK ||
                ptc_grow((void **)sp, cap, ss.npieces + 1, sizeof **sp) != PTC_OK ||
                ptc_layout_pieces(c->ls, t, g[i].owner, *sp, *cap, &np) != PTC_OK)
                continue;
            if (ptc_shard_same(sh, pc, &ss, *sp))
                found = has_r ? r : g[i].owner;
        }
    ptc_layout_groups_free(g);
    return found;
}

typedef struct rs_rank {
    rs_ctx *c;
    uint8_t *chunk, *conv;
    ptc_piece *sp; /* find_identical's scratch */
    size_t capsp;
} rs_rank;

/* ptc_rank_source.find: a source rank's shard with the same place */
static int rs_find(void *user, size_t t, int r, const ptc_shard *sh, const ptc_piece *pc,
                   size_t np, const ptc_store_reader **rd, size_t *st, int64_t *from)
{
    rs_rank *k = user;
    *rd = k->c->rd;
    *st = t;
    *from = find_identical(k->c, t, r, sh, pc, &k->sp, &k->capsp);
    return PTC_OK;
}

/* ptc_rank_source.write: filled from the plan's transfers */
static int rs_write(void *user, ptc_store_writer *w, size_t t, int r, const ptc_shard *sh,
                    const ptc_piece *pc, size_t np)
{
    rs_rank *k = user;
    int rc = atomic_load(&k->c->rc);
    if (rc != PTC_OK)
        return rc; /* another thread failed: stop (its message is kept) */
    return write_shard(k->c, t, r, sh, pc, k->chunk, k->conv);
}

static int do_rank(rs_ctx *c, int r, uint8_t *chunk, uint8_t *conv)
{
    rs_rank k = {.c = c, .chunk = chunk, .conv = conv};
    ptc_rank_source src = {.find = rs_find, .write = rs_write, .user = &k};
    ptc_rank_counts n = {0};
    int rc = ptc_store_write_rank(c->w, c->lt, r, c->t_lo, c->t_hi, &src, &n);
    atomic_fetch_add(&c->shards_reused, n.reused);
    atomic_fetch_add(&c->shards_aliased, n.aliased);
    ptc_free(k.sp);
    return rc;
}

/* A worker's buffers: one chunk of target elements, and its conversion */
typedef struct rs_bufs {
    uint8_t *chunk, *conv;
} rs_bufs;

static void rs_bufs_free(void *ctx, void *local)
{
    rs_bufs *b = local;
    if (b) {
        ptc_free(b->chunk);
        ptc_free(b->conv);
        ptc_free(b);
    }
}

static int rs_bufs_init(void *ctx, void **local)
{
    rs_ctx *c = ctx;
    rs_bufs *b = ptc_calloc(1, sizeof *b);
    /* a conversion writes at most 4 output bytes per input byte (F8 -> F32) */
    bool convert = c->o.dtype != PTC_RESHARD_DTYPE_KEEP;
    if (b && (b->chunk = ptc_malloc(RS_CHUNK)) &&
        (!convert || (b->conv = ptc_malloc(RS_CHUNK * 4)))) {
        *local = b;
        return PTC_OK;
    }
    rs_bufs_free(ctx, b);
    return ptc_error_set(PTC_E_NOMEM, "out of memory for reshard buffers");
}

static int rs_item(void *ctx, void *local, size_t i)
{
    rs_ctx *c = ctx;
    rs_bufs *b = local;
    int rc = do_rank(c, c->my_ranks[i], b->chunk, b->conv);
    if (rc != PTC_OK)
        rs_set_err(c, rc);
    return rc;
}

/* Run the pool over c->my_ranks; the first error is re-raised here. */
int rs_run_pool(rs_ctx *c)
{
    ptc_pool_job job = {.n = c->nmy, .fn = rs_item, .ctx = c, .local_init = rs_bufs_init,
                        .local_free = rs_bufs_free};
    int rc = ptc_pool_run(ptc_pool_threads(c->o.threads, 0), &job);
    if (rc != PTC_OK && atomic_load(&c->rc) != PTC_OK)
        return ptc_error_set(atomic_load(&c->rc), "%s", c->err);
    return rc;
}

void rs_fill_result(rs_ctx *c, ptc_reshard_result *res, uint64_t version, double t0)
{
    if (!res)
        return;
    memset(res, 0, sizeof *res);
    res->version = version;
    res->parent = ptc_store_reader_version(c->rd)->version;
    res->bytes_written = atomic_load(&c->bytes_written);
    res->shards_written = atomic_load(&c->shards_written);
    res->shards_reused = atomic_load(&c->shards_reused);
    res->shards_aliased = atomic_load(&c->shards_aliased);
    res->seconds = rs_now_s() - t0;
}

/* Figures of the plan under opts->hosts (the executors plan with their own
 * host maps). */
int rs_figures(rs_ctx *c, ptc_reshard_result *res)
{
    if (!res)
        return PTC_OK;
    ptc_plan *p;
    ptc_plan_options po = {.hosts = c->o.hosts,
                           .no_reuse = c->o.dtype != PTC_RESHARD_DTYPE_KEEP,
                           .figures_only = true};
    PTC_TRY(ptc_plan_create(&p, c->ls, c->lt, &po));
    ptc_plan_stats_get(p, &res->plan);
    ptc_plan_destroy(p);
    return PTC_OK;
}

int ptc_reshard_store(ptc_store *s, uint64_t version, const ptc_config *to,
                      const ptc_reshard_options *opts, ptc_reshard_result *res)
{
    double t0 = rs_now_s();
    rs_ctx c = {0};
    int *ranks = NULL;
    int rc = rs_ctx_open(&c, s, version, to, opts, NULL, NULL, -1);
    if (rc != PTC_OK)
        goto out_close;
    char cfg[PTC_CONFIG_MAX_STAGES * 11 + 64];
    ptc_store_write_options wo;
    if ((rc = rs_write_options(&c, &wo, cfg, sizeof cfg)) != PTC_OK ||
        (rc = ptc_store_writer_begin(&c.w, s, &wo)) != PTC_OK ||
        (rc = rs_add_tensors(&c, true)) != PTC_OK)
        goto out_close;
    ranks = ptc_malloc(sizeof(int) * (size_t)c.wt);
    if (!ranks) {
        rc = PTC_E_NOMEM;
        goto out_close;
    }
    for (int r = 0; r < c.wt; r++)
        ranks[r] = r;
    c.my_ranks = ranks;
    c.t_hi = c.nt;
    c.nmy = (size_t)c.wt;
    if ((rc = rs_run_pool(&c)) != PTC_OK)
        goto out_close;
    uint64_t v = 0;
    if ((rc = ptc_store_writer_commit(c.w, &v)) != PTC_OK)
        goto out_close;
    rs_fill_result(&c, res, v, t0);
    rc = rs_figures(&c, res);
out_close:
    ptc_free(ranks);
    rs_ctx_close(&c);
    return rc;
}
