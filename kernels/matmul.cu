/* Fully connected layer on the GPU: cuBLAS SGEMM in its default FP32 math
 * mode (no TF32, so results stay close to the CPU reference), plus a bias
 * broadcast and a deterministic bias-gradient reduction. Row-major buffers
 * are read as their column-major transposes, as in llm.c. */
#include <cublas_v2.h>

#include "kernels/cublas_internal.h"
#include "kernels/cuda_internal.cuh"
#include "kernels/kernels_internal.h"
#include "kernels/matmul.h"

static int ptc_cublas_check(cublasStatus_t st, const char *op, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return PTC_OK;
    PTC_TRY(ptc_cublas_load()); /* cuBLAS could not be loaded: say why */
    return ptc_error_set(PTC_E_CUDA, "%s: %s failed: %s", op, what,
                         ptc_cublas_status_string(st));
}

/* out[i][o] = bias[o] (or 0), the starting value of a beta = 1 GEMM. */
__global__ static void ptc_matmul_bias_fill(float *out, const float *bias,
                                            size_t n, size_t oc)
{
    size_t total = n * oc;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (size_t)gridDim.x * blockDim.x)
        out[k] = bias ? bias[k % oc] : 0.0f;
}

struct ptc_matmul_dbias_term {
    const float *dout;
    size_t oc;
    __device__ float operator()(size_t i, size_t o) const
    {
        return dout[i * oc + o];
    }
};

int ptc_matmul_forward_cuda(float *out, const float *inp, const float *weight,
                            const float *bias, size_t n, size_t c, size_t oc,
                            cublasHandle_t cublas, cudaStream_t stream)
{
    const char *op = "matmul_forward_cuda";
    PTC_TRY(ptc_matmul_check_forward(op, out, inp, weight, n, c, oc, true));
    if (n == 0 || oc == 0)
        return PTC_OK;
    if (!cublas)
        return ptc_error_set(PTC_E_INVAL, "%s: cublas handle is null", op);
    PTC_TRY(ptc_cublas_check(ptc_cublas_set_stream(cublas, stream), op,
                             "cublasSetStream"));
    float beta = 0.0f;
    if (bias || c == 0) {
        ptc_matmul_bias_fill<<<ptc_cuda_blocks(n * oc), PTC_CUDA_BLOCK, 0,
                               stream>>>(out, bias, n, oc);
        PTC_TRY(ptc_cuda_check_launch(op));
        beta = 1.0f;
    }
    if (c == 0)
        return PTC_OK;
    const float one = 1.0f;
    /* out^T [oc x n] = weight [oc x c] . inp^T [c x n] (column-major). */
    return ptc_cublas_check(ptc_cublas_sgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N,
                                        (int)oc, (int)n, (int)c, &one, weight,
                                        (int)c, inp, (int)c, &beta, out,
                                        (int)oc),
                            op, "cublasSgemm");
}

int ptc_matmul_backward_cuda(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp,
                             const float *weight, size_t n, size_t c, size_t oc,
                             cublasHandle_t cublas, cudaStream_t stream)
{
    const char *op = "matmul_backward_cuda";
    PTC_TRY(ptc_matmul_check_backward(op, dinp, dweight, dbias, dout, inp,
                                      weight, n, c, oc, true));
    bool gemm = n > 0 && c > 0 && oc > 0;
    const float one = 1.0f;
    if (gemm && (dinp || dweight)) {
        if (!cublas)
            return ptc_error_set(PTC_E_INVAL, "%s: cublas handle is null", op);
        PTC_TRY(ptc_cublas_check(ptc_cublas_set_stream(cublas, stream), op,
                                 "cublasSetStream"));
    }
    if (gemm && dinp)
        /* dinp^T [c x n] += weight^T [c x oc] . dout^T [oc x n] */
        PTC_TRY(ptc_cublas_check(
            ptc_cublas_sgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)c, (int)n,
                        (int)oc, &one, weight, (int)c, dout, (int)oc, &one,
                        dinp, (int)c),
            op, "cublasSgemm (dinp)"));
    if (gemm && dweight)
        /* dweight^T [c x oc] += inp^T [c x n] . dout [n x oc] */
        PTC_TRY(ptc_cublas_check(
            ptc_cublas_sgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_T, (int)c, (int)oc,
                        (int)n, &one, inp, (int)c, dout, (int)oc, &one,
                        dweight, (int)c),
            op, "cublasSgemm (dweight)"));
    if (dbias) {
        ptc_colreduce(dbias, n, oc, ptc_matmul_dbias_term{dout, oc}, stream);
        PTC_TRY(ptc_cuda_check_launch(op));
    }
    return PTC_OK;
}
