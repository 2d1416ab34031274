/* Store executors: a thread pool on one host, and MPI processes (each a
 * group of target ranks) exchanging what the plan sends between them. Both
 * fill every target shard chunk by chunk from the plan's transfers and
 * stream it into the rank's pack file; one commit at the end. */
#include <mpi.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "kernels/pack.h"
#include "ptc/layout.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

/* Target elements filled per step (in source-dtype bytes). */
#define RS_CHUNK ((size_t)2 << 20)
/* Largest single MPI message. */
#define RS_MSG_MAX ((size_t)1 << 30)

typedef struct rs_ctx {
    ptc_store *s;
    ptc_store_reader *rd;
    ptc_layout *ls, *lt;
    ptc_plan *plan;
    const ptc_transfer *xf;
    size_t nxf;
    size_t *first;        /* (t*wt + r) -> first transfer, size nt*wt+1 */
    ptc_dtype *out_dt;    /* per tensor */
    size_t nt;
    int ws, wt;
    ptc_reshard_options o;
    ptc_store_writer *w;
    const uint8_t **net;  /* MPI: per transfer, its received bytes (row-major box) */
    size_t t_lo, t_hi;    /* the tensors written in this pass (MPI: one round) */
    const int *my_ranks;  /* target ranks this process writes */
    size_t nmy;
    atomic_size_t next;   /* next index into my_ranks */
    atomic_uint_fast64_t bytes_written, shards_written, shards_reused, shards_aliased;
    pthread_mutex_t err_lock; /* guards err and the first code stored in rc */
    atomic_int rc;            /* first failure; read without the lock to stop early */
    char err[512];
} rs_ctx;

static double now_s(void)
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

static void set_err(rs_ctx *c, int rc)
{
    pthread_mutex_lock(&c->err_lock);
    if (atomic_load(&c->rc) == PTC_OK) {
        snprintf(c->err, sizeof c->err, "%s", ptc_last_error());
        atomic_store(&c->rc, rc);
    }
    pthread_mutex_unlock(&c->err_lock);
}

/* ---- setup shared by both executors ------------------------------------- */

static int ctx_open(rs_ctx *c, ptc_store *s, uint64_t version, const ptc_config *to,
                    const ptc_reshard_options *opts, const int *src_host, const int *dst_host)
{
    c->s = s;
    if (opts)
        c->o = *opts;
    else
        ptc_reshard_options_init(&c->o);
    pthread_mutex_init(&c->err_lock, NULL);
    PTC_TRY(ptc_store_reader_open(&c->rd, s, version));
    PTC_TRY(ptc_layout_of_version(&c->ls, c->rd, NULL));
    PTC_TRY(ptc_layout_of_version(&c->lt, c->rd, to));
    c->nt = ptc_layout_count(c->lt);
    c->ws = ptc_config_world(ptc_layout_config(c->ls));
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
    PTC_TRY(ptc_plan_create(&c->plan, c->ls, c->lt, &po));
    c->xf = ptc_plan_transfers(c->plan, &c->nxf);
    size_t ncell = c->nt * (size_t)c->wt;
    c->first = ptc_calloc(ncell + 1, sizeof *c->first);
    if (!c->first)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < c->nxf; i++)
        c->first[c->xf[i].tensor * (size_t)c->wt + (size_t)c->xf[i].dst_rank + 1]++;
    for (size_t i = 0; i < ncell; i++)
        c->first[i + 1] += c->first[i];
    return PTC_OK;
}

static void ctx_close(rs_ctx *c)
{
    ptc_store_writer_destroy(c->w);
    ptc_free(c->first);
    ptc_free(c->out_dt);
    ptc_plan_destroy(c->plan);
    ptc_layout_destroy(c->ls);
    ptc_layout_destroy(c->lt);
    ptc_store_reader_close(c->rd);
    pthread_mutex_destroy(&c->err_lock);
}

/* The new version's record and tensor list (same order on every writer). */
static int add_tensors(rs_ctx *c, bool metadata)
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

static int write_options(rs_ctx *c, ptc_store_write_options *wo, char *cfg, size_t cap)
{
    const ptc_version_info *vi = ptc_store_reader_version(c->rd);
    PTC_TRY(ptc_config_format(ptc_layout_config(c->lt), PTC_CONFIG_STYLE_KEYS, cfg, cap));
    *wo = (ptc_store_write_options){
        .step = c->o.step ? c->o.step : vi->step,
        .config = cfg,
        .rules = vi->rules,
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
    size_t x0 = c->first[t * (size_t)c->wt + (size_t)r], x1 = c->first[t * (size_t)c->wt + (size_t)r + 1];
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

static int do_rank(rs_ctx *c, int r, uint8_t *chunk, uint8_t *conv)
{
    ptc_piece *pc = NULL, *sp = NULL;
    size_t cap = 0, capsp = 0;
    int rc = PTC_OK;
    for (size_t t = c->t_lo; t < c->t_hi && rc == PTC_OK && atomic_load(&c->rc) == PTC_OK; t++) {
        ptc_shard sh;
        size_t np;
        if ((rc = ptc_layout_shard(c->lt, t, r, &sh)) != PTC_OK)
            break;
        if (!sh.present)
            continue;
        if (sh.owner != r) {
            rc = ptc_store_shard_alias(c->w, (uint32_t)t, (uint32_t)r, (uint32_t)sh.owner);
            atomic_fetch_add(&c->shards_aliased, 1);
            continue;
        }
        if ((rc = ptc_grow((void **)&pc, &cap, sh.npieces + 1, sizeof *pc)) != PTC_OK ||
            (rc = ptc_layout_pieces(c->lt, t, r, pc, cap, &np)) != PTC_OK)
            break;
        int from = find_identical(c, t, r, &sh, pc, &sp, &capsp);
        if (from >= 0) {
            rc = ptc_store_shard_reuse(c->w, (uint32_t)t, (uint32_t)r, c->rd, t, (uint32_t)from);
            atomic_fetch_add(&c->shards_reused, 1);
            continue;
        }
        rc = write_shard(c, t, r, &sh, pc, chunk, conv);
    }
    ptc_free(pc);
    ptc_free(sp);
    return rc;
}

static void *worker(void *arg)
{
    rs_ctx *c = arg;
    uint8_t *chunk = ptc_malloc(RS_CHUNK);
    /* a conversion writes at most 4 output bytes per input byte (F8 -> F32) */
    bool convert = c->o.dtype != PTC_RESHARD_DTYPE_KEEP;
    uint8_t *conv = convert ? ptc_malloc(RS_CHUNK * 4) : NULL;
    if (!chunk || (convert && !conv)) {
        ptc_error_set(PTC_E_NOMEM, "out of memory for reshard buffers");
        set_err(c, PTC_E_NOMEM);
        goto out_free;
    }
    for (;;) {
        size_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->nmy || atomic_load(&c->rc) != PTC_OK)
            break;
        int rc = do_rank(c, c->my_ranks[i], chunk, conv);
        if (rc != PTC_OK) {
            set_err(c, rc);
            break;
        }
    }
out_free:
    ptc_free(chunk);
    ptc_free(conv);
    return NULL;
}

/* Run the pool over c->my_ranks; the first error is re-raised here. */
static int run_pool(rs_ctx *c)
{
    int n = c->o.threads;
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    if ((size_t)n > c->nmy)
        n = c->nmy ? (int)c->nmy : 1;
    pthread_t *th = ptc_calloc((size_t)n, sizeof *th);
    if (!th)
        return PTC_E_NOMEM;
    int started = 0;
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, worker, c) != 0)
            break;
    if (started == 0)
        worker(c);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    ptc_free(th);
    if (atomic_load(&c->rc) != PTC_OK)
        return ptc_error_set(atomic_load(&c->rc), "%s", c->err);
    return PTC_OK;
}

static void fill_result(rs_ctx *c, ptc_reshard_result *res, uint64_t version, double t0)
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
    res->seconds = now_s() - t0;
}

/* Figures of the plan under opts->hosts (the executors plan with their own
 * host maps). */
static int figures(rs_ctx *c, ptc_reshard_result *res)
{
    if (!res)
        return PTC_OK;
    ptc_plan *p;
    ptc_plan_options po = {.hosts = c->o.hosts,
                           .no_reuse = c->o.dtype != PTC_RESHARD_DTYPE_KEEP};
    PTC_TRY(ptc_plan_create(&p, c->ls, c->lt, &po));
    ptc_plan_stats_get(p, &res->plan);
    ptc_plan_destroy(p);
    return PTC_OK;
}

int ptc_reshard_store(ptc_store *s, uint64_t version, const ptc_config *to,
                      const ptc_reshard_options *opts, ptc_reshard_result *res)
{
    double t0 = now_s();
    rs_ctx c = {0};
    int *ranks = NULL;
    int rc = ctx_open(&c, s, version, to, opts, NULL, NULL);
    if (rc != PTC_OK)
        goto out_close;
    char cfg[PTC_CONFIG_MAX_STAGES * 11 + 64];
    ptc_store_write_options wo;
    if ((rc = write_options(&c, &wo, cfg, sizeof cfg)) != PTC_OK ||
        (rc = ptc_store_writer_begin(&c.w, s, &wo)) != PTC_OK ||
        (rc = add_tensors(&c, true)) != PTC_OK)
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
    if ((rc = run_pool(&c)) != PTC_OK)
        goto out_close;
    uint64_t v = 0;
    if ((rc = ptc_store_writer_commit(c.w, &v)) != PTC_OK)
        goto out_close;
    fill_result(&c, res, v, t0);
    rc = figures(&c, res);
out_close:
    ptc_free(ranks);
    ctx_close(&c);
    return rc;
}

/* ---- MPI ------------------------------------------------------------------ */

static int mpi_fail(int err, const char *call)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    return ptc_error_set(PTC_E_MPI, "%s failed: %.*s", call, len, msg);
}

#define MPI_TRY(call)                                    \
    do {                                                 \
        int mpi_err_ = (call);                           \
        if (mpi_err_ != MPI_SUCCESS)                     \
            return mpi_fail(mpi_err_, #call);            \
    } while (0)

/* Every process agrees on the first failure: the lowest code wins, and the
 * processes that did not fail report that another one did. */
static int agree(MPI_Comm comm, int rc)
{
    int all = rc;
    if (MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Allreduce failed");
    if (all != PTC_OK && rc == PTC_OK)
        return ptc_error_set(all, "reshard failed on another process (%s)", ptc_strerror(all));
    return all;
}

/* Post sends/receives of a buffer in messages of at most RS_MSG_MAX. */
static int post(MPI_Request **req, size_t *nreq, size_t *cap, void *buf, size_t len, int peer,
                MPI_Comm comm, bool send)
{
    size_t nmsg = len ? (len + RS_MSG_MAX - 1) / RS_MSG_MAX : 0;
    for (size_t k = 0; k < nmsg; k++) {
        PTC_TRY(ptc_grow((void **)req, cap, *nreq + 1, sizeof **req));
        size_t off = k * RS_MSG_MAX, n = PTC_MIN(RS_MSG_MAX, len - off);
        uint8_t *p = (uint8_t *)buf + off;
        if (send)
            MPI_TRY(MPI_Isend(p, (int)n, MPI_BYTE, peer, (int)k, comm, &(*req)[(*nreq)++]));
        else
            MPI_TRY(MPI_Irecv(p, (int)n, MPI_BYTE, peer, (int)k, comm, &(*req)[(*nreq)++]));
    }
    return PTC_OK;
}

/* NETWORK bytes of transfer @p x. */
static size_t net_bytes(const rs_ctx *c, const ptc_transfer *x)
{
    return (size_t)ptc_box_volume(&x->box) *
           ptc_dtype_size(ptc_layout_tensor(c->lt, x->tensor)->dtype);
}

/* Cut the tensors into consecutive ranges (ends[k] = one past the last
 * tensor of range k) such that no process sends plus receives more than
 * @p budget network bytes within a range, unless a single tensor does
 * (then it is a range of its own). Every process computes the same cut. */
static int plan_rounds(const rs_ctx *c, int np, uint64_t budget, size_t **ends_out, size_t *nr,
                       uint64_t *max_bytes)
{
    uint64_t *acc = ptc_calloc((size_t)np * 2, sizeof *acc);
    size_t *ends = ptc_malloc(sizeof *ends * (c->nt + 1));
    *ends_out = ends;
    *nr = 0;
    *max_bytes = 0;
    if (!acc || !ends) {
        ptc_free(acc);
        return ptc_error_set(PTC_E_NOMEM, "out of memory for the reshard rounds");
    }
    uint64_t *cur = acc + np, top = 0;
    for (size_t t = 0; t < c->nt; t++) {
        memset(cur, 0, sizeof *cur * (size_t)np);
        size_t x0 = c->first[t * (size_t)c->wt], x1 = c->first[(t + 1) * (size_t)c->wt];
        for (size_t i = x0; i < x1; i++) {
            const ptc_transfer *x = &c->xf[i];
            if (x->kind != PTC_TRANSFER_NETWORK)
                continue;
            size_t b = net_bytes(c, x);
            cur[ptc_plan_src_host(c->plan, x->src_rank)] += b;
            cur[ptc_plan_dst_host(c->plan, x->dst_rank)] += b;
        }
        bool over = false;
        for (int p = 0; p < np; p++)
            over |= acc[p] + cur[p] > budget;
        if (over && (*nr ? ends[*nr - 1] : 0) < t) {
            ends[(*nr)++] = t;
            memset(acc, 0, sizeof *acc * (size_t)np);
        }
        for (int p = 0; p < np; p++) {
            acc[p] += cur[p];
            top = PTC_MAX(top, acc[p]);
        }
    }
    if (c->nt && (*nr == 0 || ends[*nr - 1] < c->nt))
        ends[(*nr)++] = c->nt;
    *max_bytes = top;
    ptc_free(acc);
    return PTC_OK;
}

static void free_bufs(uint8_t **bufs, int np)
{
    if (bufs)
        for (int p = 0; p < 2 * np; p++)
            ptc_free(bufs[p]);
    ptc_free(bufs);
}

/* Read what this process sends for the tensors [c->t_lo, c->t_hi),
 * exchange, and point c->net at what it got. Every process calls it for
 * the same range. */
static int exchange(rs_ctx *c, MPI_Comm comm, int me, int np, uint8_t ***bufs_out)
{
    size_t *out_len = ptc_calloc((size_t)np, sizeof *out_len);
    size_t *in_len = ptc_calloc((size_t)np, sizeof *in_len);
    uint8_t **out = ptc_calloc((size_t)np * 2, sizeof *out);
    *bufs_out = out;
    int rc = PTC_OK;
    size_t *at_out = NULL;
    MPI_Request *req = NULL;
    size_t nreq = 0, capreq = 0;
    size_t x0 = c->first[c->t_lo * (size_t)c->wt], x1 = c->first[c->t_hi * (size_t)c->wt];
    if (!out_len || !in_len || !out) {
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory for the reshard exchange");
        goto out_agree;
    }
    for (size_t i = x0; i < x1; i++) {
        const ptc_transfer *x = &c->xf[i];
        if (x->kind != PTC_TRANSFER_NETWORK)
            continue;
        size_t b = net_bytes(c, x);
        int sp = ptc_plan_src_host(c->plan, x->src_rank), dp = ptc_plan_dst_host(c->plan, x->dst_rank);
        if (sp == me)
            out_len[dp] += b;
        if (dp == me)
            in_len[sp] += b;
    }
    size_t nmsg = 0;
    for (int p = 0; p < np && rc == PTC_OK; p++) {
        out[p] = ptc_malloc(out_len[p] + 1);
        out[np + p] = ptc_malloc(in_len[p] + 1);
        if (!out[p] || !out[np + p])
            rc = PTC_E_NOMEM;
        nmsg += (in_len[p] + RS_MSG_MAX - 1) / RS_MSG_MAX + (out_len[p] + RS_MSG_MAX - 1) / RS_MSG_MAX;
    }
    if (rc == PTC_OK && !(at_out = ptc_calloc((size_t)np * 2, sizeof *at_out)))
        rc = PTC_E_NOMEM;
    /* every request slot up front, so posting cannot fail half way */
    if (rc == PTC_OK)
        rc = ptc_grow((void **)&req, &capreq, nmsg + 1, sizeof *req);
out_agree:
    /* every process posts its whole exchange, or none does */
    rc = agree(comm, rc);
    if (rc != PTC_OK)
        goto out_free;
    /* read the boxes this process sends, in plan order */
    size_t *at_in = at_out + np;
    for (size_t i = x0; i < x1; i++) {
        const ptc_transfer *x = &c->xf[i];
        if (x->kind != PTC_TRANSFER_NETWORK)
            continue;
        size_t b = net_bytes(c, x);
        int sp = ptc_plan_src_host(c->plan, x->src_rank), dp = ptc_plan_dst_host(c->plan, x->dst_rank);
        if (sp == me) {
            if (rc == PTC_OK)
                rc = ptc_store_reader_read_box(c->rd, x->tensor, &x->box, out[dp] + at_out[dp],
                                               NULL);
            at_out[dp] += b;
        }
        if (dp == me) {
            c->net[i] = out[np + sp] + at_in[sp];
            at_in[sp] += b;
        }
    }
    /* exchange even after a read failure, so no peer waits forever */
    int prc = PTC_OK;
    for (int p = 0; p < np && prc == PTC_OK; p++) {
        if (p == me)
            continue;
        prc = post(&req, &nreq, &capreq, out[np + p], in_len[p], p, comm, false);
        if (prc == PTC_OK)
            prc = post(&req, &nreq, &capreq, out[p], out_len[p], p, comm, true);
    }
    if (nreq && MPI_Waitall((int)nreq, req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && prc == PTC_OK)
        prc = ptc_error_set(PTC_E_MPI, "MPI_Waitall failed in the reshard exchange");
    if (rc == PTC_OK)
        rc = prc;
out_free:
    ptc_free(req);
    ptc_free(at_out);
    ptc_free(out_len);
    ptc_free(in_len);
    return rc;
}

/* Process 0 gathers every other process's shard descriptors and imports
 * them into the committing writer. */
static int gather_descriptors(rs_ctx *c, MPI_Comm comm, int me, int np, int rc_in)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = rc_in;
    if (me != 0 && rc == PTC_OK && c->w)
        rc = ptc_store_writer_export(c->w, &buf, &len);
    if (rc == PTC_OK && len > INT_MAX)
        rc = ptc_error_set(PTC_E_RANGE, "shard descriptors of %zu bytes exceed one MPI message",
                           len);
    unsigned long long l = len;
    unsigned long long *lens = NULL;
    if (me == 0 && rc == PTC_OK && !(lens = ptc_calloc((size_t)np, sizeof *lens)))
        rc = PTC_E_NOMEM;
    rc = agree(comm, rc);
    if (rc != PTC_OK)
        goto out_free;
    if (MPI_Gather(&l, 1, MPI_UNSIGNED_LONG_LONG, lens, 1, MPI_UNSIGNED_LONG_LONG, 0, comm) !=
        MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Gather of descriptor sizes failed");
    /* the root holds a buffer for every message before anyone sends */
    uint8_t **bufs = NULL;
    if (me == 0 && rc == PTC_OK) {
        bufs = ptc_calloc((size_t)np, sizeof *bufs);
        for (int p = 1; bufs && p < np && rc == PTC_OK; p++)
            if (lens[p] && !(bufs[p] = ptc_malloc(lens[p])))
                rc = PTC_E_NOMEM;
        if (!bufs)
            rc = PTC_E_NOMEM;
    }
    rc = agree(comm, rc);
    if (rc == PTC_OK && me != 0 && len &&
        MPI_Send(buf, (int)len, MPI_BYTE, 0, 0, comm) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Send of shard descriptors failed");
    /* once agreed, every message is received, even after a failed import,
     * so no sender blocks forever */
    bool receiving = rc == PTC_OK && me == 0;
    for (int p = 1; receiving && p < np; p++) {
        if (!lens[p])
            continue;
        if (MPI_Recv(bufs[p], (int)lens[p], MPI_BYTE, p, 0, comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS) {
            if (rc == PTC_OK)
                rc = ptc_error_set(PTC_E_MPI, "MPI_Recv of shard descriptors failed");
        } else if (rc == PTC_OK) {
            rc = ptc_store_writer_import(c->w, bufs[p], lens[p]);
        }
    }
    for (int p = 1; bufs && p < np; p++)
        ptc_free(bufs[p]);
    ptc_free(bufs);
out_free:
    ptc_free(lens);
    ptc_store_free(buf);
    return rc;
}

int ptc_reshard_store_mpi(ptc_store *s, uint64_t version, const ptc_config *to, MPI_Comm comm,
                          const ptc_reshard_options *opts, ptc_reshard_result *res)
{
    double t0 = now_s();
    int me, np;
    MPI_TRY(MPI_Comm_rank(comm, &me));
    MPI_TRY(MPI_Comm_size(comm, &np));
    rs_ctx c = {0};
    int *src_host = NULL, *dst_host = NULL, *mine = NULL;
    uint8_t **bufs = NULL;
    size_t *ends = NULL, nr = 0;
    uint64_t max_round = 0;
    int rc = PTC_OK;
    /* the host maps need the world sizes: read them from the layouts first */
    {
        ptc_store_reader *rd = NULL;
        ptc_layout *ls = NULL, *lt = NULL;
        rc = ptc_store_reader_open(&rd, s, version);
        if (rc == PTC_OK)
            rc = ptc_layout_of_version(&ls, rd, NULL);
        if (rc == PTC_OK)
            rc = ptc_layout_of_version(&lt, rd, to);
        if (rc == PTC_OK) {
            int ws = ptc_config_world(ptc_layout_config(ls));
            int wt = ptc_config_world(ptc_layout_config(lt));
            src_host = ptc_malloc(sizeof(int) * (size_t)ws);
            dst_host = ptc_malloc(sizeof(int) * (size_t)wt);
            mine = ptc_malloc(sizeof(int) * (size_t)wt);
            if (!src_host || !dst_host || !mine)
                rc = PTC_E_NOMEM;
            for (int r = 0; rc == PTC_OK && r < ws; r++)
                src_host[r] = (int)((int64_t)r * np / ws);
            for (int r = 0; rc == PTC_OK && r < wt; r++)
                dst_host[r] = (int)((int64_t)r * np / wt);
        }
        ptc_layout_destroy(ls);
        ptc_layout_destroy(lt);
        ptc_store_reader_close(rd);
    }
    if (rc == PTC_OK)
        rc = ctx_open(&c, s, version, to, opts, src_host, dst_host);
    /* the figures now, so nothing can fail on one process after the commit */
    ptc_reshard_result fig = {0};
    if (rc == PTC_OK)
        rc = figures(&c, res ? &fig : NULL);
    if ((rc = agree(comm, rc)) != PTC_OK)
        goto out_close;
    for (int r = 0; r < c.wt; r++)
        if (dst_host[r] == me)
            mine[c.nmy++] = r;
    c.my_ranks = mine;
    /* process 0 allocates the version; the others write pack files for it */
    char cfg[PTC_CONFIG_MAX_STAGES * 11 + 64];
    ptc_store_write_options wo;
    unsigned long long v = 0;
    rc = write_options(&c, &wo, cfg, sizeof cfg);
    if (me == 0 && rc == PTC_OK && (rc = ptc_store_writer_begin(&c.w, s, &wo)) == PTC_OK)
        v = ptc_store_writer_version(c.w);
    if ((rc = agree(comm, rc)) != PTC_OK)
        goto out_close;
    if (MPI_Bcast(&v, 1, MPI_UNSIGNED_LONG_LONG, 0, comm) != MPI_SUCCESS) {
        rc = ptc_error_set(PTC_E_MPI, "MPI_Bcast of the version failed");
        goto out_close;
    }
    if (me != 0 && c.nmy) {
        uint32_t *r32 = ptc_malloc(sizeof(uint32_t) * c.nmy);
        rc = r32 ? PTC_OK : PTC_E_NOMEM;
        for (size_t i = 0; rc == PTC_OK && i < c.nmy; i++)
            r32[i] = (uint32_t)mine[i];
        if (rc == PTC_OK)
            rc = ptc_store_writer_begin_pack(&c.w, s, v, &wo, r32, c.nmy);
        ptc_free(r32);
    }
    if (rc == PTC_OK && c.w)
        rc = add_tensors(&c, me == 0);
    if (rc == PTC_OK)
        rc = plan_rounds(&c, np, c.o.mpi_budget ? c.o.mpi_budget : PTC_RESHARD_MPI_BUDGET, &ends,
                         &nr, &max_round);
    if (rc == PTC_OK && !(c.net = ptc_calloc(c.nxf + 1, sizeof *c.net)))
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory for the reshard exchange");
    if ((rc = agree(comm, rc)) != PTC_OK)
        goto out_close;
    /* per range of tensors: exchange, write this process's ranks' shards of
     * it (each rank's pack continues in tensor order), free */
    for (size_t k = 0; k < nr; k++) {
        c.t_lo = k ? ends[k - 1] : 0;
        c.t_hi = ends[k];
        rc = exchange(&c, comm, me, np, &bufs);
        if ((rc = agree(comm, rc)) == PTC_OK && c.nmy) {
            atomic_store(&c.next, 0);
            rc = run_pool(&c);
        }
        free_bufs(bufs, np);
        bufs = NULL;
        memset((void *)c.net, 0, sizeof *c.net * (c.nxf + 1));
        if ((rc = agree(comm, rc)) != PTC_OK)
            goto out_close;
    }
    rc = gather_descriptors(&c, comm, me, np, rc);
    uint64_t committed = 0;
    if (me == 0 && rc == PTC_OK)
        rc = ptc_store_writer_commit(c.w, &committed);
    if ((rc = agree(comm, rc)) != PTC_OK)
        goto out_close;
    unsigned long long cv = committed;
    MPI_Bcast(&cv, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
    /* totals over all processes */
    unsigned long long mine_st[4] = {atomic_load(&c.bytes_written), atomic_load(&c.shards_written),
                                     atomic_load(&c.shards_reused), atomic_load(&c.shards_aliased)},
                       all_st[4];
    MPI_Allreduce(mine_st, all_st, 4, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
    fill_result(&c, res, cv, t0);
    if (res) {
        res->bytes_written = all_st[0];
        res->shards_written = all_st[1];
        res->shards_reused = all_st[2];
        res->shards_aliased = all_st[3];
        res->rounds = nr;
        res->max_round_bytes = max_round;
        res->plan = fig.plan;
    }
    rc = PTC_OK;
out_close:
    free_bufs(bufs, np);
    ptc_free(ends);
    ptc_free((void *)c.net);
    ptc_free(src_host);
    ptc_free(dst_host);
    ptc_free(mine);
    ctx_close(&c);
    return rc;
}
