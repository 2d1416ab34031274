/* Reference embedding lookup and scatter-add. */
#include "kernels/embedding.h"

#include <string.h>

#include "kernels/kernels_internal.h"

int ptc_embedding_check(const char *op, const float *rows, const int32_t *ids,
                        const float *table, size_t n, size_t vocab, size_t c,
                        bool check_ids, bool int_sizes)
{
    PTC_TRY(ptc_kernels_check_buf(op, "rows", rows, n, c));
    PTC_TRY(ptc_kernels_check_buf(op, "ids", ids, n, 1));
    PTC_TRY(ptc_kernels_check_buf(op, "table", table, n > 0 ? vocab : 0, c));
    if (int_sizes)
        PTC_TRY(ptc_kernels_check_int(op, n, vocab, c));
    for (size_t i = 0; check_ids && i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= vocab)
            return ptc_error_set(PTC_E_RANGE,
                                 "%s: id %d of row %zu is outside the "
                                 "vocabulary of %zu",
                                 op, (int)ids[i], i, vocab);
    return PTC_OK;
}

int ptc_embedding_forward_ref(float *out, const int32_t *ids,
                              const float *table, size_t n, size_t vocab,
                              size_t c)
{
    PTC_TRY(ptc_embedding_check("embedding_forward_ref", out, ids, table, n,
                                vocab, c, true, false));
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < c; j++)
            out[i * c + j] = table[(size_t)ids[i] * c + j];
    return PTC_OK;
}

int ptc_embedding_backward_ref(float *dtable, const float *dout,
                               const int32_t *ids, size_t n, size_t vocab,
                               size_t c)
{
    PTC_TRY(ptc_embedding_check("embedding_backward_ref", dout, ids, dtable, n,
                                vocab, c, true, false));
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < c; j++)
            dtable[(size_t)ids[i] * c + j] += dout[i * c + j];
    return PTC_OK;
}
