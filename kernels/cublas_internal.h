/**
 * @file cublas_internal.h
 * @brief cuBLAS loaded on first use (kernels/cublas_cuda.c): libptc does not
 * link it, so a process that never multiplies on a GPU does not map it.
 * cuBLAS with cuBLASLt is about 600 MB of shared objects whose relocations
 * cost some 70 ms of CPU at every process start, paid by every rank of a
 * CPU job and every `ptc` command of a CUDA build; the CUDA runtime and NCCL
 * stay linked (about 2 ms together).
 *
 * The wrappers take and return cuBLAS's own types. A handle made by the
 * caller's cublasCreate works with them: dlopen of the soname the caller
 * linked returns the library already loaded. Thread-safe (the library is
 * loaded once, under a pthread_once).
 */
#ifndef PTC_KERNELS_CUBLAS_INTERNAL_H
#define PTC_KERNELS_CUBLAS_INTERNAL_H

#include <cublas_v2.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Loads cuBLAS (the soname of the toolkit built against, PTC_CUBLAS_SONAME,
 * then the same name in the toolkit's library folder).
 * @return PTC_OK, or PTC_E_CUDA naming the library and the loader's reason. */
int ptc_cublas_load(void);

/* The subset libptc calls. Each loads cuBLAS first; where that fails it
 * returns CUBLAS_STATUS_NOT_INITIALIZED (ptc_cublas_load says why). */
cublasStatus_t ptc_cublas_create(cublasHandle_t *handle);
cublasStatus_t ptc_cublas_destroy(cublasHandle_t handle);
cublasStatus_t ptc_cublas_set_math_mode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t ptc_cublas_set_stream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t ptc_cublas_sgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                                int m, int n, int k, const float *alpha, const float *a, int lda,
                                const float *b, int ldb, const float *beta, float *c, int ldc);
/** cublasGetStatusString, or a fixed text where cuBLAS is not loaded. */
const char *ptc_cublas_status_string(cublasStatus_t status);

#ifdef __cplusplus
}
#endif

#endif
