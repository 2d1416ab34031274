/* In-memory executor for device buffers: CUDA pack kernels into per-peer
 * staging buffers, grouped ncclSend/ncclRecv, CUDA unpack kernels. The
 * same two phases as the host executor (sources, then fan-outs). Built only
 * with NCCL. */
#include <string.h>

#include "kernels/pack.h"
#include "base/nccl_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

struct ptc_reshard_nccl {
    ncclComm_t comm;
    int me, np;
};

int ptc_reshard_nccl_create(ptc_reshard_nccl **out, MPI_Comm comm)
{
    *out = NULL;
    ptc_reshard_nccl *c = ptc_calloc(1, sizeof *c);
    if (!c)
        return PTC_E_NOMEM;
    if (MPI_Comm_rank(comm, &c->me) != MPI_SUCCESS || MPI_Comm_size(comm, &c->np) != MPI_SUCCESS) {
        ptc_free(c);
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_rank failed");
    }
    int rc = ptc_nccl_comm_create(&c->comm, comm);
    if (rc != PTC_OK) {
        ptc_free(c);
        return rc;
    }
    *out = c;
    return PTC_OK;
}

void ptc_reshard_nccl_destroy(ptc_reshard_nccl *c)
{
    if (!c)
        return;
    ncclCommDestroy(c->comm);
    ptc_free(c);
}

static size_t xbytes(const ptc_plan *p, const ptc_transfer *x)
{
    return (size_t)ptc_box_volume(&x->box) *
           ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
}

static int copy_box(const ptc_plan *p, const ptc_transfer *x, void *dst, const int64_t *ds,
                    const void *src, const int64_t *ss, cudaStream_t st)
{
    size_t es = ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
    int64_t ext[PTC_MAX_DIMS] = {0};
    for (int d = 0; d < x->box.ndim; d++)
        ext[d] = x->box.hi[d] - x->box.lo[d];
    return ptc_pack_copy_cuda(dst, ds, src, ss, ext, x->box.ndim, es, st);
}

static int dphase(const ptc_plan *p, ptc_reshard_nccl *c, bool fanout, const void *const *src,
                  void *const *dst, cudaStream_t st)
{
    int me = c->me, np = c->np;
    size_t nx;
    const ptc_transfer *xf = ptc_plan_transfers(p, &nx);
    size_t *len = ptc_calloc((size_t)np * 4, sizeof *len);
    uint8_t **buf = ptc_calloc((size_t)np * 2, sizeof *buf);
    int rc = PTC_OK;
    if (!len || !buf) {
        rc = PTC_E_NOMEM;
        goto out_free;
    }
    size_t *in_len = len + np, *at_out = len + 2 * np, *at_in = len + 3 * np;
    for (size_t i = 0; i < nx; i++) {
        const ptc_transfer *x = &xf[i];
        if ((x->kind == PTC_TRANSFER_FANOUT) != fanout || x->src_rank == x->dst_rank)
            continue;
        if (x->src_rank == me && x->dst_rank < np)
            len[x->dst_rank] += xbytes(p, x);
        if (x->dst_rank == me && x->src_rank < np)
            in_len[x->src_rank] += xbytes(p, x);
    }
    for (int q = 0; q < 2 * np && rc == PTC_OK; q++) {
        size_t n = q < np ? len[q] : in_len[q - np];
        cudaError_t e = n ? cudaMalloc((void **)&buf[q], n) : cudaSuccess;
        if (e != cudaSuccess)
            rc = ptc_cuda_error(e, "cudaMalloc of a staging buffer");
    }
    for (size_t i = 0; i < nx && rc == PTC_OK; i++) {
        const ptc_transfer *x = &xf[i];
        if ((x->kind == PTC_TRANSFER_FANOUT) != fanout || x->src_rank != me)
            continue;
        size_t es = ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
        const uint8_t *from = (const uint8_t *)(fanout ? dst[x->tensor] : src[x->tensor]) +
                              (size_t)x->src_offset * es;
        if (x->dst_rank == me) {
            rc = copy_box(p, x, (uint8_t *)dst[x->tensor] + (size_t)x->dst_offset * es,
                          x->dst_stride, from, x->src_stride, st);
            continue;
        }
        rc = copy_box(p, x, buf[x->dst_rank] + at_out[x->dst_rank], NULL, from, x->src_stride, st);
        at_out[x->dst_rank] += xbytes(p, x);
    }
    if (rc == PTC_OK) {
        ncclResult_t nr = ncclGroupStart();
        for (int q = 0; q < np && nr == ncclSuccess; q++) {
            if (q == me)
                continue;
            if (in_len[q])
                nr = ncclRecv(buf[np + q], in_len[q], ncclUint8, q, c->comm, st);
            if (nr == ncclSuccess && len[q])
                nr = ncclSend(buf[q], len[q], ncclUint8, q, c->comm, st);
        }
        ncclResult_t ne = ncclGroupEnd();
        if (nr != ncclSuccess || ne != ncclSuccess)
            rc = ptc_nccl_error(nr != ncclSuccess ? nr : ne, "grouped ncclSend/ncclRecv");
    }
    for (size_t i = 0; i < nx && rc == PTC_OK; i++) {
        const ptc_transfer *x = &xf[i];
        if ((x->kind == PTC_TRANSFER_FANOUT) != fanout || x->dst_rank != me || x->src_rank == me)
            continue;
        size_t es = ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
        rc = copy_box(p, x, (uint8_t *)dst[x->tensor] + (size_t)x->dst_offset * es, x->dst_stride,
                      buf[np + x->src_rank] + at_in[x->src_rank], NULL, st);
        at_in[x->src_rank] += xbytes(p, x);
    }
    cudaError_t e = cudaStreamSynchronize(st);
    if (e != cudaSuccess && rc == PTC_OK)
        rc = ptc_cuda_error(e, "cudaStreamSynchronize after the reshard");
out_free:
    for (int q = 0; buf && q < 2 * np; q++)
        if (buf[q])
            cudaFree(buf[q]);
    ptc_free(buf);
    ptc_free(len);
    return rc;
}

int ptc_reshard_device(const ptc_plan *p, ptc_reshard_nccl *c, const void *const *src,
                       void *const *dst, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    const ptc_layout *ls = ptc_plan_source(p), *lt = ptc_plan_target(p);
    int ws = ptc_config_world(ptc_layout_config(ls)), wt = ptc_config_world(ptc_layout_config(lt));
    if (!c || c->np < ws || c->np < wt)
        return ptc_error_set(PTC_E_INVAL,
                             "device reshard needs %d processes (source %d, target %d ranks)",
                             ws > wt ? ws : wt, ws, wt);
    for (size_t t = 0; c->me < wt && t < ptc_layout_count(lt); t++) {
        if (!ptc_plan_reused(p, t, c->me) || src[t] == dst[t])
            continue;
        ptc_shard sh;
        PTC_TRY(ptc_layout_shard(lt, t, c->me, &sh));
        int64_t v = 1;
        for (int d = 0; d < sh.ndim; d++)
            v *= sh.shape[d];
        cudaError_t e = cudaMemcpyAsync(dst[t], src[t],
                                        (size_t)v * ptc_dtype_size(ptc_layout_tensor(lt, t)->dtype),
                                        cudaMemcpyDeviceToDevice, st);
        if (e != cudaSuccess)
            return ptc_cuda_error(e, "cudaMemcpyAsync of a reused shard");
    }
    PTC_TRY(dphase(p, c, false, src, dst, st));
    return dphase(p, c, true, src, dst, st);
}
