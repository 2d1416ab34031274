/* Embedding on the CPU. The forward copies rows in parallel; the backward
 * splits the columns over threads, so every dtable element is summed by one
 * thread in row order: no locks, and the same bits as the reference. */
#include "kernels/embedding.h"

#include <string.h>

#include "kernels/kernels_internal.h"

#define PTC_EMB_WORK_GRAIN ((size_t)1 << 16)

struct ptc_emb_ctx {
    float *dst;
    const float *src;
    const int32_t *ids;
    size_t n, c;
};

static void ptc_emb_forward_rows(void *arg, size_t b, size_t e)
{
    const struct ptc_emb_ctx *x = arg;
    for (size_t i = b; i < e; i++)
        memcpy(x->dst + i * x->c, x->src + (size_t)x->ids[i] * x->c,
               x->c * sizeof(float));
}

static void ptc_emb_backward_cols(void *arg, size_t b, size_t e)
{
    const struct ptc_emb_ctx *x = arg;
    for (size_t i = 0; i < x->n; i++) {
        float *restrict d = x->dst + (size_t)x->ids[i] * x->c;
        const float *restrict g = x->src + i * x->c;
        for (size_t j = b; j < e; j++)
            d[j] += g[j];
    }
}

static size_t ptc_emb_grain(size_t width)
{
    size_t g = width > 0 ? PTC_EMB_WORK_GRAIN / width : PTC_EMB_WORK_GRAIN;
    return g > 0 ? g : 1;
}

int ptc_embedding_forward_cpu(float *out, const int32_t *ids,
                              const float *table, size_t n, size_t vocab,
                              size_t c)
{
    PTC_TRY(ptc_embedding_check("embedding_forward_cpu", out, ids, table, n,
                                vocab, c, true, false));
    if (c == 0)
        return PTC_OK;
    struct ptc_emb_ctx x = {out, table, ids, n, c};
    ptc_kernels_parallel_for(n, ptc_emb_grain(c), ptc_emb_forward_rows, &x);
    return PTC_OK;
}

int ptc_embedding_backward_cpu(float *dtable, const float *dout,
                               const int32_t *ids, size_t n, size_t vocab,
                               size_t c)
{
    PTC_TRY(ptc_embedding_check("embedding_backward_cpu", dout, ids, dtable, n,
                                vocab, c, true, false));
    if (n == 0)
        return PTC_OK;
    struct ptc_emb_ctx x = {dtable, dout, ids, n, c};
    /* At least 16 columns (64 bytes) per thread, so threads do not share
     * cache lines of a dtable row. */
    size_t g = ptc_emb_grain(n);
    ptc_kernels_parallel_for(c, g < 16 ? 16 : g, ptc_emb_backward_cols, &x);
    return PTC_OK;
}
