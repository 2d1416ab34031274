/* In-memory executor for host buffers over MPI: process i is source rank i
 * and target rank i (ptc_reshard_host), or each rank is held by the process
 * an owner map names (ptc_reshard_host_owned_range: a process may hold
 * several ranks, or none). Reused shards are copied, or sent whole when
 * their source and target ranks are on different processes. Two phases: every transfer from a source buffer, then
 * the fan-outs from target buffers that received over the network. In each
 * phase a transfer whose box is contiguous in both its source and its
 * target buffer (and of at least RH_DIRECT_MIN bytes) travels as a message
 * of its own, sent from the source buffer and received into the target
 * buffer (no copy on either side; posted first, so the wire works while the
 * rest is packed); the other transfers to a peer are packed into one
 * message (or 1 GiB pieces of it) and unpacked on arrival. Both sides
 * classify the plan's transfers alike and post in plan order, so messages
 * match by MPI's non-overtaking order. */
#include <mpi.h>
#include <string.h>

#include "kernels/pack.h"
#include "base/mpi_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

#define RH_DIRECT_MIN ((size_t)64 << 10)
#define RH_TAG_DIRECT 4096
#define RH_TAG_REUSED 8192

static size_t xbytes(const ptc_plan *p, const ptc_transfer *x)
{
    return (size_t)ptc_box_volume(&x->box) *
           ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
}

static void box_ext(const ptc_box *b, int64_t *ext)
{
    for (int d = 0; d < b->ndim; d++)
        ext[d] = b->hi[d] - b->lo[d];
}

/* Pack transfer x from its provider buffer into row-major @p out. */
int ptc_reshard_pack_one(const ptc_plan *p, const ptc_transfer *x, const void *from, void *out)
{
    size_t es = ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
    int64_t ext[PTC_MAX_DIMS] = {0};
    box_ext(&x->box, ext);
    return ptc_pack_copy(out, NULL, (const uint8_t *)from + (size_t)x->src_offset * es,
                         x->src_stride, ext, x->box.ndim, es);
}

/* Unpack row-major @p in into the target buffer of transfer x. */
int ptc_reshard_unpack_one(const ptc_plan *p, const ptc_transfer *x, const void *in, void *to)
{
    size_t es = ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
    int64_t ext[PTC_MAX_DIMS] = {0};
    box_ext(&x->box, ext);
    return ptc_pack_copy((uint8_t *)to + (size_t)x->dst_offset * es, x->dst_stride, in, NULL, ext,
                         x->box.ndim, es);
}

/* A box of extents @p ext at element strides @p st is one run of memory. */
static bool contiguous(const int64_t *ext, const int64_t *st, int ndim);

bool ptc_reshard_box_contiguous(const ptc_box *b, const int64_t *stride)
{
    int64_t ext[PTC_MAX_DIMS] = {0};
    box_ext(b, ext);
    return contiguous(ext, stride, b->ndim);
}

static bool contiguous(const int64_t *ext, const int64_t *st, int ndim)
{
    int64_t run = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (ext[d] > 1 && st[d] != run)
            return false;
        run *= ext[d];
    }
    return true;
}

/* Transfer @p x travels as its own message, without packing. */
static bool direct(const ptc_plan *p, const ptc_transfer *x)
{
    size_t n = xbytes(p, x);
    if (n < RH_DIRECT_MIN || n > PTC_MPI_MSG_MAX)
        return false;
    int64_t ext[PTC_MAX_DIMS] = {0};
    box_ext(&x->box, ext);
    return contiguous(ext, x->src_stride, x->box.ndim) &&
           contiguous(ext, x->dst_stride, x->box.ndim);
}

/* Who holds what: per source rank and per target rank, the process
 * (comm rank) and, on this process, the rank's tensor array. */
typedef struct owners {
    const int *src, *dst;               /* process of each source / target rank */
    const void *const *const *sbuf;     /* per source rank (NULL: not here) */
    void *const *const *dbuf;           /* per target rank (NULL: not here) */
} owners;

/* The process that provides transfer x (a target rank for a fan-out) and
 * the one that receives it. */
static int x_from(const owners *o, const ptc_transfer *x, bool fanout)
{
    return fanout ? o->dst[x->src_rank] : o->src[x->src_rank];
}

static const uint8_t *x_src(const owners *o, const ptc_transfer *x, bool fanout)
{
    return fanout ? o->dbuf[x->src_rank][x->tensor] : o->sbuf[x->src_rank][x->tensor];
}

static int phase(const ptc_plan *p, MPI_Comm comm, int me, int np, bool fanout, size_t t_lo,
                 size_t t_hi, const owners *o)
{
    size_t nx;
    const ptc_transfer *xf = ptc_plan_transfers(p, &nx);
    size_t *out_len = ptc_calloc((size_t)np * 4, sizeof *out_len);
    uint8_t **buf = ptc_calloc((size_t)np * 2, sizeof *buf);
    MPI_Request *req = NULL;
    size_t nreq = 0, capreq = 0;
    int rc = PTC_OK;
    if (!out_len || !buf) {
        rc = PTC_E_NOMEM;
        goto out_free;
    }
    size_t *in_len = out_len + np, *at_out = out_len + 2 * np, *at_in = out_len + 3 * np;
    for (size_t i = 0; i < nx; i++) {
        const ptc_transfer *x = &xf[i];
        if ((x->kind == PTC_TRANSFER_FANOUT) != fanout || x->tensor < t_lo || x->tensor >= t_hi)
            continue;
        int from = x_from(o, x, fanout), to = o->dst[x->dst_rank];
        if (from == to || direct(p, x))
            continue;
        if (from == me)
            out_len[to] += xbytes(p, x);
        if (to == me)
            in_len[from] += xbytes(p, x);
    }
    for (int q = 0; q < np; q++) {
        buf[q] = ptc_malloc(out_len[q] + 1);
        buf[np + q] = ptc_malloc(in_len[q] + 1);
        if (!buf[q] || !buf[np + q]) {
            rc = PTC_E_NOMEM;
            goto out_free;
        }
    }
    /* receives first (packed, then direct), then the direct sends, then the
     * local copies and the packing, then the packed sends */
    for (int q = 0; q < np && rc == PTC_OK; q++)
        if (q != me)
            rc = ptc_mpi_post(&req, &nreq, &capreq, buf[np + q], in_len[q], q, 0, comm, false);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < nx && rc == PTC_OK; i++) {
            const ptc_transfer *x = &xf[i];
            if ((x->kind == PTC_TRANSFER_FANOUT) != fanout || x->tensor < t_lo ||
                x->tensor >= t_hi)
                continue;
            int from = x_from(o, x, fanout), to = o->dst[x->dst_rank];
            if (from == to || !direct(p, x))
                continue;
            size_t es = ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
            if (pass == 0 && to == me)
                rc = ptc_mpi_post(
                    &req, &nreq, &capreq,
                    (uint8_t *)o->dbuf[x->dst_rank][x->tensor] + (size_t)x->dst_offset * es,
                    xbytes(p, x), from, RH_TAG_DIRECT, comm, false);
            if (pass == 1 && from == me)
                rc = ptc_mpi_post(&req, &nreq, &capreq,
                                  (void *)(x_src(o, x, fanout) + (size_t)x->src_offset * es),
                                  xbytes(p, x), to, RH_TAG_DIRECT, comm, true);
        }
    for (size_t i = 0; i < nx && rc == PTC_OK; i++) {
        const ptc_transfer *x = &xf[i];
        if ((x->kind == PTC_TRANSFER_FANOUT) != fanout || x->tensor < t_lo || x->tensor >= t_hi)
            continue;
        int from = x_from(o, x, fanout), to = o->dst[x->dst_rank];
        if (from != me || (to != me && direct(p, x)))
            continue;
        const uint8_t *src = x_src(o, x, fanout);
        if (to == me) {
            size_t es = ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
            int64_t ext[PTC_MAX_DIMS] = {0};
            box_ext(&x->box, ext);
            rc = ptc_pack_copy((uint8_t *)o->dbuf[x->dst_rank][x->tensor] +
                                   (size_t)x->dst_offset * es,
                               x->dst_stride, src + (size_t)x->src_offset * es, x->src_stride,
                               ext, x->box.ndim, es);
            continue;
        }
        rc = ptc_reshard_pack_one(p, x, src, buf[to] + at_out[to]);
        at_out[to] += xbytes(p, x);
    }
    for (int q = 0; q < np && rc == PTC_OK; q++)
        if (q != me)
            rc = ptc_mpi_post(&req, &nreq, &capreq, buf[q], out_len[q], q, 0, comm, true);
    int mrc = nreq ? ptc_mpi_waitall((int)nreq, req) : MPI_SUCCESS;
    if (mrc != MPI_SUCCESS && rc == PTC_OK)
        rc = ptc_mpi_error(mrc, "MPI_Waitall");
    for (size_t i = 0; i < nx && rc == PTC_OK; i++) {
        const ptc_transfer *x = &xf[i];
        if ((x->kind == PTC_TRANSFER_FANOUT) != fanout || x->tensor < t_lo || x->tensor >= t_hi)
            continue;
        int from = x_from(o, x, fanout), to = o->dst[x->dst_rank];
        if (to != me || from == me || direct(p, x))
            continue;
        rc = ptc_reshard_unpack_one(p, x, buf[np + from] + at_in[from],
                                    o->dbuf[x->dst_rank][x->tensor]);
        at_in[from] += xbytes(p, x);
    }
out_free:
    for (int q = 0; buf && q < 2 * np; q++)
        ptc_free(buf[q]);
    ptc_free(buf);
    ptc_free(out_len);
    ptc_free(req);
    return rc;
}

/* Bytes of target rank r's local tensor t (its source shard, when reused). */
static int shard_bytes(const ptc_layout *l, size_t t, int r, size_t *n)
{
    ptc_shard sh;
    PTC_TRY(ptc_layout_shard(l, t, r, &sh));
    int64_t v = 1;
    for (int d = 0; d < sh.ndim; d++)
        v *= sh.shape[d];
    *n = (size_t)v * ptc_dtype_size(ptc_layout_tensor(l, t)->dtype);
    return PTC_OK;
}

/* Reused shards (target rank r's tensor identical to source rank r's): a
 * copy where one process holds both ranks (none when the caller passes the
 * same buffer), else the whole shard as a message between their processes
 * (posted in (tensor, rank) order on both sides). */
static int reused(const ptc_plan *p, MPI_Comm comm, int me, size_t t_lo, size_t t_hi,
                  const owners *o)
{
    const ptc_layout *lt = ptc_plan_target(p);
    /* a shard is reused only by a rank of both layouts */
    int wt = ptc_config_world(ptc_layout_config(lt)),
        ws = ptc_config_world(ptc_layout_config(ptc_plan_source(p)));
    int wb = ws < wt ? ws : wt;
    MPI_Request *req = NULL;
    size_t nreq = 0, capreq = 0, nmine = 0;
    /* this process's ranks (a per-process plan knows only theirs) */
    int *mine = ptc_malloc(sizeof(int) * ((size_t)wb + 1));
    if (!mine)
        return PTC_E_NOMEM;
    for (int r = 0; r < wb; r++)
        if (o->src[r] == me || o->dst[r] == me)
            mine[nmine++] = r;
    int rc = PTC_OK;
    for (size_t t = t_lo; t < t_hi && rc == PTC_OK; t++)
        for (size_t i = 0; i < nmine && rc == PTC_OK; i++) {
            int r = mine[i], from = o->src[r], to = o->dst[r];
            if (!ptc_plan_reused(p, t, r))
                continue;
            size_t n;
            rc = shard_bytes(lt, t, r, &n);
            if (rc != PTC_OK)
                break;
            if (from == me && to == me) {
                if (o->sbuf[r][t] != o->dbuf[r][t])
                    memcpy(o->dbuf[r][t], o->sbuf[r][t], n);
            } else if (to == me) {
                rc = ptc_mpi_post(&req, &nreq, &capreq, o->dbuf[r][t], n, from,
                                  RH_TAG_REUSED, comm, false);
            } else {
                rc = ptc_mpi_post(&req, &nreq, &capreq, (void *)o->sbuf[r][t], n, to,
                                  RH_TAG_REUSED, comm, true);
            }
        }
    ptc_free(mine);
    int mrc = nreq ? ptc_mpi_waitall((int)nreq, req) : MPI_SUCCESS;
    if (mrc != MPI_SUCCESS && rc == PTC_OK)
        rc = ptc_mpi_error(mrc, "MPI_Waitall");
    ptc_free(req);
    return rc;
}

int ptc_reshard_host_owned_range(const ptc_plan *p, MPI_Comm comm, size_t t_lo, size_t t_hi,
                                 const int *src_owner, const void *const *const *src,
                                 const int *dst_owner, void *const *const *dst)
{
    int me, np;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &me));
    PTC_MPI_TRY(MPI_Comm_size(comm, &np));
    const ptc_layout *ls = ptc_plan_source(p), *lt = ptc_plan_target(p);
    int ws = ptc_config_world(ptc_layout_config(ls)), wt = ptc_config_world(ptc_layout_config(lt));
    for (int r = 0; r < ws; r++)
        if (src_owner[r] < 0 || src_owner[r] >= np)
            return ptc_error_set(PTC_E_INVAL, "source rank %d: process %d of %d", r,
                                 src_owner[r], np);
    for (int r = 0; r < wt; r++)
        if (dst_owner[r] < 0 || dst_owner[r] >= np)
            return ptc_error_set(PTC_E_INVAL, "target rank %d: process %d of %d", r,
                                 dst_owner[r], np);
    if (t_hi > ptc_layout_count(lt))
        t_hi = ptc_layout_count(lt);
    owners o = {src_owner, dst_owner, src, dst};
    PTC_TRY(reused(p, comm, me, t_lo, t_hi, &o));
    PTC_TRY(phase(p, comm, me, np, false, t_lo, t_hi, &o));
    return phase(p, comm, me, np, true, t_lo, t_hi, &o);
}

int ptc_reshard_host_range(const ptc_plan *p, MPI_Comm comm, size_t t_lo, size_t t_hi,
                           const void *const *src, void *const *dst)
{
    int me, np;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &me));
    PTC_MPI_TRY(MPI_Comm_size(comm, &np));
    const ptc_layout *ls = ptc_plan_source(p), *lt = ptc_plan_target(p);
    int ws = ptc_config_world(ptc_layout_config(ls)), wt = ptc_config_world(ptc_layout_config(lt));
    if (np < ws || np < wt)
        return ptc_error_set(PTC_E_INVAL,
                             "in-memory reshard needs %d processes (source %d, target %d ranks), "
                             "the communicator has %d",
                             ws > wt ? ws : wt, ws, wt, np);
    /* process i is source rank i and target rank i */
    int n = ws > wt ? ws : wt;
    int *own = ptc_malloc((size_t)n * sizeof *own);
    const void *const **sb = ptc_calloc((size_t)n, sizeof *sb);
    void *const **db = ptc_calloc((size_t)n, sizeof *db);
    int rc = PTC_E_NOMEM;
    if (own && sb && db) {
        for (int r = 0; r < n; r++)
            own[r] = r;
        if (me < ws)
            sb[me] = src;
        if (me < wt)
            db[me] = dst;
        rc = ptc_reshard_host_owned_range(p, comm, t_lo, t_hi, own, sb, own, db);
    }
    ptc_free(own);
    ptc_free(sb);
    ptc_free(db);
    return rc;
}

int ptc_reshard_host(const ptc_plan *p, MPI_Comm comm, const void *const *src,
                     void *const *dst)
{
    return ptc_reshard_host_range(p, comm, 0, SIZE_MAX, src, dst);
}
