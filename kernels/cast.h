/* Element-type casts between the floating-point dtypes (internal kernel
 * header; never installed).
 *
 * Three implementations with one behaviour:
 *   - cast_ref.c: the plain C reference, the specification;
 *   - cast_fast.h: branch-light bit routines shared by the optimized CPU path
 *     (kernels/cast_cpu.c) and the CUDA kernel;
 *   - cast.cu: the CUDA kernel.
 *
 * Semantics (all directions go through F32 bit patterns):
 *   - narrowing rounds to nearest, ties to even, with subnormals (no flush);
 *   - NaN stays NaN with its sign; the payload's top bits are kept where the
 *     target has room, and a payload that would vanish becomes the quiet bit,
 *     so F16/BF16/F8_E5M2 -> F32 -> same type is bit-exact for every pattern;
 *   - F16, BF16 and F8_E5M2 overflow to infinity (IEEE rounding);
 *   - F8_E4M3 is the finite-only "fn" variant (float8_e4m3fn): no infinity,
 *     S.1111.111 is NaN, and everything beyond +-448 (infinity included)
 *     saturates to +-448;
 *   - F64 -> F32 is the C conversion (round to nearest even).
 *
 * Thread safety: every function is pure and safe from any thread.
 */
#ifndef PTC_KERNELS_CAST_H
#define PTC_KERNELS_CAST_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/dtype.h"
#include "ptc/error.h"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#else
struct CUstream_st;
typedef struct CUstream_st *cudaStream_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reference scalars: the spec (F32 values as their bit patterns) ---- */
uint32_t ptc_cast_ref_f16_to_f32(uint16_t h);
uint16_t ptc_cast_ref_f32_to_f16(uint32_t f);
uint32_t ptc_cast_ref_bf16_to_f32(uint16_t b);
uint16_t ptc_cast_ref_f32_to_bf16(uint32_t f);
uint32_t ptc_cast_ref_e4m3_to_f32(uint8_t v);
uint8_t ptc_cast_ref_f32_to_e4m3(uint32_t f);
uint32_t ptc_cast_ref_e5m2_to_f32(uint8_t v);
uint8_t ptc_cast_ref_f32_to_e5m2(uint32_t f);

/* @return true if the reference (and the fast paths) can cast st -> dt:
 * identical dtypes, or both of F16 BF16 F32 F64 F8_E4M3 F8_E5M2. */
bool ptc_cast_supported(ptc_dtype dt, ptc_dtype st);

/* Reference array cast of @p n elements from @p src (dtype @p st) to @p dst
 * (dtype @p dt); buffers must not overlap; no alignment required.
 * @return PTC_OK, or PTC_E_UNSUPPORTED for a pair ptc_cast_supported()
 * rejects. */
int ptc_cast_ref(void *dst, ptc_dtype dt, const void *src, ptc_dtype st, size_t n);

/* CUDA array cast, same semantics and signature plus a stream. @p dst and
 * @p src are device pointers (or managed memory). Asynchronous on @p stream.
 * @return PTC_OK, PTC_E_UNSUPPORTED for a pair ptc_cast_supported() rejects,
 * or PTC_E_CUDA (launch failure, detail via ptc_last_error()).
 * Only defined when the library is built with CUDA (PTC_WITH_CUDA). */
int ptc_cast_cuda(void *dst, ptc_dtype dt, const void *src, ptc_dtype st, size_t n,
                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
