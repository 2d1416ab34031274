/* CUDA float casts: one thread per element through F32 bits, using the same
 * bit routines as the optimized CPU path (cast_fast.h). Semantics are those
 * of kernels/cast_ref.c. */
#include <cuda_runtime.h>
#include <string.h>

#include "kernels/cast.h"
#include "kernels/cast_fast.h"

namespace {

__device__ __forceinline__ uint32_t load_bits(const unsigned char *src, int st, size_t i)
{
    switch (st) {
    case PTC_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        return ptc_fast_f16_to_f32(h);
    }
    case PTC_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        return ptc_fast_bf16_to_f32(h);
    }
    case PTC_DTYPE_F8_E4M3: return ptc_fast_e4m3_to_f32(src[i]);
    case PTC_DTYPE_F8_E5M2: return ptc_fast_e5m2_to_f32(src[i]);
    case PTC_DTYPE_F64: {
        double d;
        memcpy(&d, src + 8 * i, 8);
        return __float_as_uint(__double2float_rn(d));
    }
    default: {
        uint32_t b;
        memcpy(&b, src + 4 * i, 4);
        return b;
    }
    }
}

__device__ __forceinline__ void store_bits(unsigned char *dst, int dt, size_t i, uint32_t b)
{
    switch (dt) {
    case PTC_DTYPE_F16: {
        uint16_t h = ptc_fast_f32_to_f16(b);
        memcpy(dst + 2 * i, &h, 2);
        break;
    }
    case PTC_DTYPE_BF16: {
        uint16_t h = ptc_fast_f32_to_bf16(b);
        memcpy(dst + 2 * i, &h, 2);
        break;
    }
    case PTC_DTYPE_F8_E4M3: dst[i] = ptc_fast_f32_to_e4m3(b); break;
    case PTC_DTYPE_F8_E5M2: dst[i] = ptc_fast_f32_to_e5m2(b); break;
    case PTC_DTYPE_F64: {
        double d = (double)__uint_as_float(b);
        memcpy(dst + 8 * i, &d, 8);
        break;
    }
    default: memcpy(dst + 4 * i, &b, 4); break;
    }
}

__global__ void cast_kernel(unsigned char *dst, int dt, const unsigned char *src, int st,
                            size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        store_bits(dst, dt, i, load_bits(src, st, i));
}

} // namespace

extern "C" int ptc_cast_cuda(void *dst, ptc_dtype dt, const void *src, ptc_dtype st,
                             size_t n, cudaStream_t stream)
{
    if (!ptc_cast_supported(dt, st))
        return ptc_error_set(PTC_E_UNSUPPORTED, "cannot convert %s to %s",
                             ptc_dtype_name(st), ptc_dtype_name(dt));
    if (n == 0)
        return PTC_OK;
    cudaError_t err;
    if (dt == st) {
        err = cudaMemcpyAsync(dst, src, n * ptc_dtype_size(dt), cudaMemcpyDeviceToDevice,
                              stream);
        if (err != cudaSuccess)
            return ptc_error_set(PTC_E_CUDA, "cast copy: %s", cudaGetErrorString(err));
        return PTC_OK;
    }
    const unsigned threads = 256;
    size_t want = (n + threads - 1) / threads;
    unsigned blocks = want > 65535u * 16u ? 65535u * 16u : (unsigned)want;
    cast_kernel<<<blocks, threads, 0, stream>>>((unsigned char *)dst, (int)dt,
                                                (const unsigned char *)src, (int)st, n);
    err = cudaGetLastError();
    if (err != cudaSuccess)
        return ptc_error_set(PTC_E_CUDA, "cast %s to %s: kernel launch: %s",
                             ptc_dtype_name(st), ptc_dtype_name(dt), cudaGetErrorString(err));
    return PTC_OK;
}
