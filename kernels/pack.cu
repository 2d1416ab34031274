/* CUDA strided copy: the host simplifies the iteration space exactly as the
 * CPU path does, then one thread per element (grid-stride) decomposes its
 * linear index over the reduced extents. Same bytes as ptc_pack_copy_ref(). */
#include <cuda_runtime.h>
#include <string.h>

#include "kernels/pack.h"

namespace {

struct pack_args {
    int ndim;
    int64_t ext[PTC_MAX_DIMS];
    int64_t ds[PTC_MAX_DIMS];
    int64_t ss[PTC_MAX_DIMS];
};

template <typename T>
__global__ void pack_kernel(T *dst, const T *src, pack_args a, int64_t total)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i, so = 0, dof = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t c = r % a.ext[d];
            r /= a.ext[d];
            so += c * a.ss[d];
            dof += c * a.ds[d];
        }
        dst[dof] = src[so];
    }
}

/* Element sizes other than 1/2/4/8: copy byte by byte. */
__global__ void pack_kernel_bytes(char *dst, const char *src, pack_args a, int64_t total,
                                  int64_t es)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total * es;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t e = i / es, b = i % es;
        int64_t r = e, so = 0, dof = 0;
        for (int d = a.ndim - 1; d >= 0; d--) {
            int64_t c = r % a.ext[d];
            r /= a.ext[d];
            so += c * a.ss[d];
            dof += c * a.ds[d];
        }
        dst[dof * es + b] = src[so * es + b];
    }
}

template <typename T>
void launch(void *dst, const void *src, const pack_args &a, int64_t total, cudaStream_t st)
{
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535)
        blocks = 65535;
    pack_kernel<T><<<(unsigned)blocks, threads, 0, st>>>((T *)dst, (const T *)src, a, total);
}

} // namespace

extern "C" int ptc_pack_copy_cuda(void *dst, const int64_t *dst_strides, const void *src,
                                  const int64_t *src_strides, const int64_t *extents,
                                  int ndim, size_t elem_size, struct CUstream_st *stream)
{
    pack_args a;
    bool empty;
    int rc = ptc_pack_simplify(a.ext, a.ds, a.ss, &a.ndim, &empty, dst_strides, src_strides,
                               extents, ndim, elem_size);
    if (rc < 0 || empty)
        return rc;
    int64_t total = 1;
    for (int d = 0; d < a.ndim; d++)
        total *= a.ext[d];
    cudaStream_t st = (cudaStream_t)stream;
    switch (elem_size) {
    case 1: launch<uint8_t>(dst, src, a, total, st); break;
    case 2: launch<uint16_t>(dst, src, a, total, st); break;
    case 4: launch<uint32_t>(dst, src, a, total, st); break;
    case 8: launch<unsigned long long>(dst, src, a, total, st); break;
    default: {
        int64_t blocks = (total * (int64_t)elem_size + 255) / 256;
        if (blocks > 65535)
            blocks = 65535;
        pack_kernel_bytes<<<(unsigned)blocks, 256, 0, st>>>((char *)dst, (const char *)src, a,
                                                             total, (int64_t)elem_size);
    }
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return ptc_error_set(PTC_E_CUDA, "pack: kernel launch failed: %s",
                             cudaGetErrorString(e));
    return PTC_OK;
}
