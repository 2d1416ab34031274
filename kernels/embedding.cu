/* Embedding on the GPU. The backward gives each thread one column and walks
 * the rows in order: no atomics, so the scatter-add is deterministic and
 * matches the CPU reference bit for bit, at the price of parallelism
 * limited to c threads (fine for the embedding's share of a step). */
#include <math.h>

#include "kernels/cuda_internal.cuh"
#include "kernels/embedding.h"
#include "kernels/kernels_internal.h"

__global__ static void ptc_emb_forward_kernel(float *out, const int32_t *ids,
                                              const float *table, size_t n,
                                              size_t vocab, size_t c)
{
    size_t total = n * c;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t i = k / c, j = k % c;
        int32_t id = ids[i];
        out[k] = id >= 0 && (size_t)id < vocab ? table[(size_t)id * c + j] : NAN;
    }
}

__global__ static void ptc_emb_backward_kernel(float *dtable, const float *dout,
                                               const int32_t *ids, size_t n,
                                               size_t vocab, size_t c)
{
    size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c)
        return;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && (size_t)id < vocab)
            dtable[(size_t)id * c + j] += dout[i * c + j];
    }
}

int ptc_embedding_forward_cuda(float *out, const int32_t *ids,
                               const float *table, size_t n, size_t vocab,
                               size_t c, cudaStream_t stream)
{
    const char *op = "embedding_forward_cuda";
    PTC_TRY(ptc_embedding_check(op, out, ids, table, n, vocab, c, false, true));
    if (n == 0 || c == 0)
        return PTC_OK;
    ptc_emb_forward_kernel<<<ptc_cuda_blocks(n * c), PTC_CUDA_BLOCK, 0,
                             stream>>>(out, ids, table, n, vocab, c);
    return ptc_cuda_check_launch(op);
}

int ptc_embedding_backward_cuda(float *dtable, const float *dout,
                                const int32_t *ids, size_t n, size_t vocab,
                                size_t c, cudaStream_t stream)
{
    const char *op = "embedding_backward_cuda";
    PTC_TRY(ptc_embedding_check(op, dout, ids, dtable, n, vocab, c, false,
                                true));
    if (n == 0 || c == 0)
        return PTC_OK;
    unsigned grid = (unsigned)((c + PTC_CUDA_BLOCK - 1) / PTC_CUDA_BLOCK);
    ptc_emb_backward_kernel<<<grid, PTC_CUDA_BLOCK, 0, stream>>>(
        dtable, dout, ids, n, vocab, c);
    return ptc_cuda_check_launch(op);
}
