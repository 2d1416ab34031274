/* The demo model of `ptc train` on a CUDA device. Built only with CUDA
 * (file name *_cuda.c).
 *
 * A host model (exec/model/model.c) gives the layout, the tensor names and
 * the initial values; every chunk's parameters, gradients and AdamW moments
 * are mirrored on the device, and the callbacks below run the same kernel
 * calls in the same order as the CPU callbacks, on the _cuda kernels: one
 * stream and one cuBLAS handle per shard. Saved activations (and the
 * micro-batch's token ids and targets) live in one device block per (chunk,
 * micro-batch), kept in a per-chunk free list once allocated.
 *
 * The runtime's NCCL transfers run on its own stream and read the boundary
 * buffers after a callback returns, so every callback synchronises its
 * stream before returning.
 *
 * tests/unit/test_model_cuda.c compiles this file against a host shim of
 * the CUDA API (PTC_CUDA_SHIM) to check it against the CPU model bit for
 * bit; that is the only reason for the #ifndef below. */
#ifndef PTC_CUDA_SHIM
#include <cuda_runtime.h>

#include "kernels/cublas_internal.h"
#endif
#include <string.h>

#include "exec/model/model_internal.h"
#include "kernels/adamw.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

/* Device side of one chunk. */
typedef struct dchunk {
    float *p, *g, *m, *v;  /* [count] each */
    float **act;           /* [mbs] activation block of a live micro-batch */
    float **pool;          /* [mbs] free blocks */
    int npool;
    size_t block_bytes;    /* a_total floats, then 2n int32 token ids/targets */
} dchunk;

struct ptc_exec_model_cuda {
    ptc_exec_model *h;     /* host model: layout, names, initial values, and
                              the host copy that params() refreshes */
    cudaStream_t st;
    cublasHandle_t blas;
    dchunk *d;             /* [h->nch] */
    float *scratch;        /* [n, max(4H, V)] x 3, as the host model's */
    float *dloss;          /* [mbs, n] per-row losses of the last stage */
    float *hloss;          /* host copy of dloss */
    double *losses;        /* [mbs] */
    int32_t *tok;          /* [2n] host staging of ids and targets */
};

static int cu(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return PTC_OK;
    return ptc_error_set(PTC_E_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

/* ---- device selection --------------------------------------------------------- */

int ptc_exec_cuda_select_device(int local_rank, int local_size, int *device)
{
    if (device)
        *device = -1;
    if (local_rank < 0 || local_size < 0 || (local_size > 0 && local_rank >= local_size))
        return ptc_error_set(PTC_E_INVAL, "local rank %d of %d", local_rank, local_size);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return ptc_error_set(PTC_E_CUDA, "no cuda device: %s", cudaGetErrorString(e));
    if (count < 1)
        return ptc_error_set(PTC_E_CUDA, "no cuda device visible");
    if (local_size > count)
        return ptc_error_set(PTC_E_CONFIG,
                             "%d processes on this node but %d cuda device%s: nccl needs a "
                             "device of its own for each rank",
                             local_size, count, count == 1 ? "" : "s");
    int dev = local_rank % count;
    PTC_TRY(cu(cudaSetDevice(dev), "cudaSetDevice"));
    if (device)
        *device = dev;
    return PTC_OK;
}

/* ---- create / destroy ----------------------------------------------------------- */

static int zero(ptc_exec_model_cuda *x, float *p, size_t count)
{
    return cu(cudaMemsetAsync(p, 0, count * sizeof(float), x->st), "cudaMemsetAsync");
}

static size_t wide_of(const ptc_exec_model_cfg *m)
{
    size_t H = (size_t)m->hidden, V = (size_t)m->vocab;
    return 4 * H > V ? 4 * H : V;
}

/* Everything on the device (and the stream and cuBLAS handle), leaving the
 * host model and host buffers; pointers NULL after, so it runs once. */
static void free_device(ptc_exec_model_cuda *x)
{
    if (x->st)
        cudaStreamSynchronize(x->st);
    for (int c = 0; x->d && c < x->h->nch; c++) {
        dchunk *d = &x->d[c];
        for (int mb = 0; d->act && mb < x->h->mbs; mb++)
            cudaFree(d->act[mb]);
        for (int i = 0; d->pool && i < d->npool; i++)
            cudaFree(d->pool[i]);
        ptc_free(d->act);
        ptc_free(d->pool);
        cudaFree(d->p);
        cudaFree(d->g);
        cudaFree(d->m);
        cudaFree(d->v);
    }
    ptc_free(x->d);
    x->d = NULL;
    cudaFree(x->scratch);
    x->scratch = NULL;
    cudaFree(x->dloss);
    x->dloss = NULL;
    if (x->blas)
        ptc_cublas_destroy(x->blas);
    x->blas = NULL;
    if (x->st)
        cudaStreamDestroy(x->st);
    x->st = NULL;
}

void ptc_exec_model_cuda_destroy(ptc_exec_model_cuda *x)
{
    if (!x)
        return;
    free_device(x);
    ptc_free(x->hloss);
    ptc_free(x->losses);
    ptc_free(x->tok);
    ptc_exec_model_destroy(x->h);
    ptc_free(x);
}

void ptc_exec_model_cuda_release_device(ptc_exec_model_cuda *x)
{
    if (x)
        free_device(x);
}

/* After ptc_exec_model_cuda_release_device() only the host model is left. */
static int on_device(const ptc_exec_model_cuda *x, const char *what)
{
    if (!x)
        return ptc_error_set(PTC_E_INVAL, "cuda model: %s of a NULL model", what);
    if (!x->d)
        return ptc_error_set(PTC_E_INVAL, "cuda model: %s after its device side was released",
                             what);
    return PTC_OK;
}

int ptc_exec_model_cuda_create(ptc_exec_model_cuda **out, const ptc_exec_model_cfg *m,
                               const ptc_sched *s, int rank, int64_t gmb_base,
                               int64_t gmb_total, ptc_exec_data_fn data, void *data_user)
{
    *out = NULL;
    if (m->tp > 1 || m->zero)
        return ptc_error_set(PTC_E_UNSUPPORTED, "cuda model: tensor parallelism and zero=1 "
                                                "run on the CPU model (--device cpu)");
    ptc_exec_model_cuda *x = ptc_calloc(1, sizeof *x);
    if (!x)
        return ptc_error_set(PTC_E_NOMEM, "cuda model");
    int rc = ptc_exec_model_create(&x->h, m, s, rank, gmb_base, gmb_total, data, data_user);
    if (rc != PTC_OK)
        goto out_destroy;
    ptc_exec_model *h = x->h;
    size_t n = (size_t)m->tokens, mbs = (size_t)h->mbs;
    rc = PTC_E_NOMEM;
    x->d = ptc_calloc((size_t)(h->nch > 0 ? h->nch : 1), sizeof *x->d);
    x->hloss = ptc_calloc(mbs * n, sizeof *x->hloss);
    x->losses = ptc_calloc(mbs, sizeof *x->losses);
    x->tok = ptc_calloc(2 * n, sizeof *x->tok);
    if (!x->d || !x->hloss || !x->losses || !x->tok) {
        ptc_error_set(PTC_E_NOMEM, "cuda model of rank %d", rank);
        goto out_destroy;
    }
    if ((rc = cu(cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking), "cudaStreamCreate")) !=
        PTC_OK)
        goto out_destroy;
    if ((rc = ptc_cublas_load()) != PTC_OK) /* loaded on first use */
        goto out_destroy;
    cublasStatus_t bs = ptc_cublas_create(&x->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        x->blas = NULL;
        rc = ptc_error_set(PTC_E_CUDA, "cublasCreate failed (status %d)", (int)bs);
        goto out_destroy;
    }
    /* FP32 arithmetic in the GEMMs (no TF32), as the CPU path. */
    bs = ptc_cublas_set_math_mode(x->blas, CUBLAS_DEFAULT_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        rc = ptc_error_set(PTC_E_CUDA, "cublasSetMathMode failed (status %d)", (int)bs);
        goto out_destroy;
    }
    if ((rc = cu(cudaMalloc((void **)&x->scratch, 3 * n * wide_of(m) * sizeof(float)),
                 "cudaMalloc of the model scratch")) != PTC_OK ||
        (rc = cu(cudaMalloc((void **)&x->dloss, mbs * n * sizeof(float)),
                 "cudaMalloc of the losses")) != PTC_OK ||
        (rc = cu(cudaMemsetAsync(x->dloss, 0, mbs * n * sizeof(float), x->st),
                 "cudaMemsetAsync")) != PTC_OK)
        goto out_destroy;
    for (int c = 0; c < h->nch; c++) {
        const chunk *k = &h->ch[c];
        dchunk *d = &x->d[c];
        size_t bytes = (k->count ? k->count : 1) * sizeof(float);
        d->block_bytes = k->a_total * sizeof(float) + 2 * n * sizeof(int32_t);
        d->act = ptc_calloc(mbs, sizeof *d->act);
        d->pool = ptc_calloc(mbs, sizeof *d->pool);
        if (!d->act || !d->pool) {
            rc = ptc_error_set(PTC_E_NOMEM, "cuda model of rank %d", rank);
            goto out_destroy;
        }
        if ((rc = cu(cudaMalloc((void **)&d->p, bytes), "cudaMalloc of parameters")) != PTC_OK ||
            (rc = cu(cudaMalloc((void **)&d->g, bytes), "cudaMalloc of gradients")) != PTC_OK ||
            (rc = cu(cudaMalloc((void **)&d->m, bytes), "cudaMalloc of moments")) != PTC_OK ||
            (rc = cu(cudaMalloc((void **)&d->v, bytes), "cudaMalloc of moments")) != PTC_OK ||
            (rc = cu(cudaMemcpyAsync(d->p, k->p, bytes, cudaMemcpyHostToDevice, x->st),
                     "upload of parameters")) != PTC_OK ||
            (rc = zero(x, d->g, bytes / sizeof(float))) != PTC_OK ||
            (rc = zero(x, d->m, bytes / sizeof(float))) != PTC_OK ||
            (rc = zero(x, d->v, bytes / sizeof(float))) != PTC_OK)
            goto out_destroy;
    }
    /* Everything above is ordered on the model's stream (a non-blocking
     * stream does not wait for the legacy default stream). */
    if ((rc = cu(cudaStreamSynchronize(x->st), "upload of the model")) != PTC_OK)
        goto out_destroy;
    *out = x;
    return PTC_OK;
out_destroy:
    ptc_exec_model_cuda_destroy(x);
    return rc;
}

void ptc_exec_model_cuda_set_step(ptc_exec_model_cuda *x, int64_t step)
{
    ptc_exec_model_set_step(x->h, step);
}

int ptc_exec_model_cuda_losses(ptc_exec_model_cuda *x, const double **losses, int *n)
{
    PTC_TRY(on_device(x, "losses"));
    ptc_exec_model *h = x->h;
    size_t rows = (size_t)h->cfg.tokens;
    *losses = x->losses;
    *n = h->mbs;
    PTC_TRY(cu(cudaMemcpyAsync(x->hloss, x->dloss, (size_t)h->mbs * rows * sizeof(float),
                               cudaMemcpyDeviceToHost, x->st),
               "copy of the losses"));
    PTC_TRY(cu(cudaStreamSynchronize(x->st), "copy of the losses"));
    for (int mb = 0; mb < h->mbs; mb++) {
        double sum = 0;
        for (size_t i = 0; i < rows; i++)
            sum += x->hloss[(size_t)mb * rows + i];
        x->losses[mb] = sum / (double)rows;
    }
    return PTC_OK;
}

int ptc_exec_model_cuda_params(ptc_exec_model_cuda *x, const ptc_exec_param **params,
                               size_t *n)
{
    PTC_TRY(on_device(x, "parameters"));
    for (int c = 0; c < x->h->nch; c++) {
        const chunk *k = &x->h->ch[c];
        if (k->count)
            PTC_TRY(cu(cudaMemcpyAsync(k->p, x->d[c].p, k->count * sizeof(float),
                                       cudaMemcpyDeviceToHost, x->st),
                       "copy of parameters to the host"));
    }
    PTC_TRY(cu(cudaStreamSynchronize(x->st), "copy of parameters to the host"));
    *params = ptc_exec_model_params(x->h, n);
    return PTC_OK;
}

/* ---- the training state on the host (save, resume, resize) ---------------------- */

ptc_exec_model *ptc_exec_model_cuda_host(ptc_exec_model_cuda *x)
{
    return x ? x->h : NULL;
}

/* One transfer of parameters and both AdamW moments of every chunk,
 * device to host (@p up false) or host to device, then one synchronisation.
 * The device moments hold `count` floats: the CUDA model refuses zero=1,
 * so the host chunk's `ocount` is the same. */
static int move_state(ptc_exec_model_cuda *x, bool up)
{
    enum cudaMemcpyKind kind = up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    const char *what = up ? "copy of the training state to the device"
                          : "copy of the training state to the host";
    PTC_TRY(on_device(x, what));
    for (int c = 0; c < x->h->nch; c++) {
        const chunk *k = &x->h->ch[c];
        dchunk *d = &x->d[c];
        if (!k->count)
            continue;
        if (k->ocount != k->count)
            return ptc_error_set(PTC_E_UNSUPPORTED, "cuda model: chunk %d has %zu moment "
                                                    "floats for %zu parameters (zero=1)",
                                 c, k->ocount, k->count);
        size_t bytes = k->count * sizeof(float);
        float *dev[3] = {d->p, d->m, d->v}, *host[3] = {k->p, k->m, k->v};
        for (int i = 0; i < 3; i++)
            PTC_TRY(cu(up ? cudaMemcpyAsync(dev[i], host[i], bytes, kind, x->st)
                          : cudaMemcpyAsync(host[i], dev[i], bytes, kind, x->st),
                       what));
    }
    return cu(cudaStreamSynchronize(x->st), what);
}

int ptc_exec_model_cuda_pull_state(ptc_exec_model_cuda *x)
{
    return move_state(x, false);
}

int ptc_exec_model_cuda_push_state(ptc_exec_model_cuda *x)
{
    return move_state(x, true);
}

/* ---- compute (mirrors exec/model/model.c call for call) --------------------- */

static int check_args(const ptc_exec_model_cuda *x, int c, int mb)
{
    PTC_TRY(on_device(x, "a step"));
    if (c < 0 || c >= x->h->nch || mb < 0 || mb >= x->h->mbs)
        return ptc_error_set(PTC_E_RANGE, "model: chunk %d mb %d out of range", c, mb);
    return PTC_OK;
}

/* The callback's device work is done when it returns (see the top). */
static int finish(ptc_exec_model_cuda *x, const char *what)
{
    PTC_TRY(cu(cudaGetLastError(), what));
    return cu(cudaStreamSynchronize(x->st), what);
}

static int copy(ptc_exec_model_cuda *x, void *dst, const void *src, size_t count)
{
    return cu(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, x->st),
              "cudaMemcpyAsync");
}

static int32_t *block_tok(const chunk *k, float *a) { return (int32_t *)(a + k->a_total); }

static int block_get(ptc_exec_model_cuda *x, int c, int mb)
{
    dchunk *d = &x->d[c];
    if (d->npool > 0) {
        d->act[mb] = d->pool[--d->npool];
        return PTC_OK;
    }
    float *a = NULL;
    PTC_TRY(cu(cudaMalloc((void **)&a, d->block_bytes), "cudaMalloc of activations"));
    d->act[mb] = a;
    return PTC_OK;
}

static void block_put(ptc_exec_model_cuda *x, int c, int mb)
{
    dchunk *d = &x->d[c];
    if (!d->act[mb])
        return;
    d->pool[d->npool++] = d->act[mb]; /* at most mbs blocks per chunk exist */
    d->act[mb] = NULL;
}

static int model_forward(void *user, int c, int mb, const void *in, void *out)
{
    ptc_exec_model_cuda *x = user;
    PTC_TRY(check_args(x, c, mb));
    ptc_exec_model *h = x->h;
    const chunk *k = &h->ch[c];
    dchunk *d = &x->d[c];
    size_t n = (size_t)h->cfg.tokens, H = (size_t)h->cfg.hidden, F = 4 * H,
           V = (size_t)h->cfg.vocab;
    if (d->act[mb])
        return ptc_error_set(PTC_E_INVAL, "model: forward of mb %d chunk %d twice", mb, c);
    if (!k->first && !in)
        return ptc_error_set(PTC_E_INVAL, "model: forward of mb %d chunk %d without input",
                             mb, c);
    PTC_TRY(block_get(x, c, mb));
    float *a = d->act[mb];
    int32_t *tok = block_tok(k, a);
    cudaStream_t st = x->st;
    if (k->first || k->last) {
        PTC_TRY(h->data(h->data_user, h->step, h->gmb_base + mb, x->tok, x->tok + n, (int)n));
        PTC_TRY(cu(cudaMemcpyAsync(tok, x->tok, 2 * n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   st),
                   "upload of token ids"));
    }
    float *xin = a + k->a_x0;
    if (k->first)
        PTC_TRY(ptc_embedding_forward_cuda(xin, tok, d->p + k->emb, n, V, H, st));
    else
        PTC_TRY(copy(x, xin, in, n * H));
    for (int l = k->l0; l < k->l1; l++) {
        const layer_off *lo = &k->lay[l - k->l0];
        lay_act s = lay_ptrs(h, k, a, l - k->l0);
        PTC_TRY(ptc_layernorm_forward_cuda(s.ln, s.mean, s.rstd, xin, d->p + lo->lnw,
                                           d->p + lo->lnb, n, H, LN_EPS, st));
        PTC_TRY(ptc_matmul_forward_cuda(s.h, s.ln, d->p + lo->w1, d->p + lo->b1, n, H, F,
                                        x->blas, st));
        PTC_TRY(ptc_gelu_forward_cuda(s.g, s.h, n * F, st));
        float *br = x->scratch;
        PTC_TRY(ptc_matmul_forward_cuda(br, s.g, d->p + lo->w2, d->p + lo->b2, n, F, H, x->blas,
                                        st));
        PTC_TRY(ptc_residual_forward_cuda(s.xout, xin, br, n * H, st));
        xin = s.xout;
    }
    if (k->last) {
        float *lnf = a + k->a_head, *mean = lnf + n * H, *rstd = mean + n, *logits = rstd + n;
        PTC_TRY(ptc_layernorm_forward_cuda(lnf, mean, rstd, xin, d->p + k->nw, d->p + k->nb, n,
                                           H, LN_EPS, st));
        PTC_TRY(ptc_matmul_forward_cuda(logits, lnf, d->p + k->head, NULL, n, H, V, x->blas, st));
        PTC_TRY(ptc_crossentropy_forward_cuda(x->dloss + (size_t)mb * n, logits, tok + n, n, V,
                                              st));
    } else if (out) {
        PTC_TRY(copy(x, out, xin, n * H));
    }
    return finish(x, "model forward");
}

/* Input-gradient pass; with `full` also the weight gradients (B). */
static int model_bwd(ptc_exec_model_cuda *x, int c, int mb, const void *dout, void *dinp,
                     bool full)
{
    PTC_TRY(check_args(x, c, mb));
    ptc_exec_model *h = x->h;
    const chunk *k = &h->ch[c];
    dchunk *d = &x->d[c];
    float *a = d->act[mb];
    if (!a)
        return ptc_error_set(PTC_E_INVAL, "model: backward of mb %d chunk %d before forward",
                             mb, c);
    if (!k->last && !dout)
        return ptc_error_set(PTC_E_INVAL, "model: backward of mb %d chunk %d without dout",
                             mb, c);
    size_t n = (size_t)h->cfg.tokens, H = (size_t)h->cfg.hidden, F = 4 * H,
           V = (size_t)h->cfg.vocab;
    cudaStream_t st = x->st;
    const int32_t *tok = block_tok(k, a);
    float *dx = x->scratch, *tmp = x->scratch + n * wide_of(&h->cfg);
    float *xlast = k->l1 > k->l0 ? lay_ptrs(h, k, a, k->l1 - k->l0 - 1).xout : a + k->a_x0;
    if (k->last) {
        float *lnf = a + k->a_head, *mean = lnf + n * H, *rstd = mean + n, *logits = rstd + n,
              *dlogits = logits + n * V;
        PTC_TRY(zero(x, dlogits, n * V));
        float scale = (float)(1.0 / ((double)n * (double)h->gmb_total));
        PTC_TRY(ptc_crossentropy_backward_cuda(dlogits, logits, tok + n, n, V, scale, st));
        PTC_TRY(zero(x, tmp, n * H));
        PTC_TRY(ptc_matmul_backward_cuda(tmp, full ? d->g + k->head : NULL, NULL, dlogits, lnf,
                                         d->p + k->head, n, H, V, x->blas, st));
        PTC_TRY(zero(x, dx, n * H));
        PTC_TRY(ptc_layernorm_backward_cuda(dx, d->g + k->nw, d->g + k->nb, tmp, xlast,
                                            d->p + k->nw, mean, rstd, n, H, st));
    } else {
        PTC_TRY(copy(x, dx, dout, n * H));
    }
    for (int l = k->l1 - 1; l >= k->l0; l--) {
        const layer_off *lo = &k->lay[l - k->l0];
        lay_act s = lay_ptrs(h, k, a, l - k->l0);
        const float *xin = l > k->l0 ? lay_ptrs(h, k, a, l - k->l0 - 1).xout : a + k->a_x0;
        PTC_TRY(copy(x, s.dx2, dx, n * H)); /* dout of down_proj, kept for W */
        float *dg = tmp;
        PTC_TRY(zero(x, dg, n * F));
        PTC_TRY(ptc_matmul_backward_cuda(dg, full ? d->g + lo->w2 : NULL,
                                         full ? d->g + lo->b2 : NULL, s.dx2, s.g, d->p + lo->w2,
                                         n, F, H, x->blas, st));
        PTC_TRY(zero(x, s.dh, n * F));
        PTC_TRY(ptc_gelu_backward_cuda(s.dh, s.h, dg, n * F, st));
        float *dln = tmp;
        PTC_TRY(zero(x, dln, n * H));
        PTC_TRY(ptc_matmul_backward_cuda(dln, full ? d->g + lo->w1 : NULL,
                                         full ? d->g + lo->b1 : NULL, s.dh, s.ln, d->p + lo->w1,
                                         n, H, F, x->blas, st));
        /* residual: dxin = dx + LN backward(dln) */
        PTC_TRY(ptc_layernorm_backward_cuda(dx, d->g + lo->lnw, d->g + lo->lnb, dln, xin,
                                            d->p + lo->lnw, s.mean, s.rstd, n, H, st));
    }
    if (k->first) {
        float *demb = a + k->a_demb;
        PTC_TRY(copy(x, demb, dx, n * H));
        if (full)
            PTC_TRY(ptc_embedding_backward_cuda(d->g + k->emb, demb, tok, n, V, H, st));
    } else if (dinp) {
        PTC_TRY(copy(x, dinp, dx, n * H));
    }
    return finish(x, "model backward");
}

static int model_backward(void *user, int c, int mb, const void *dout, void *dinp)
{
    ptc_exec_model_cuda *x = user;
    PTC_TRY(model_bwd(x, c, mb, dout, dinp, true));
    block_put(x, c, mb);
    return PTC_OK;
}

static int model_backward_input(void *user, int c, int mb, const void *dout, void *dinp)
{
    return model_bwd(user, c, mb, dout, dinp, false);
}

static int cuda_wgrad_matmul(void *ctx, float *dw, float *db, const float *dout,
                             const float *xin, const float *w, size_t n, size_t in, size_t out)
{
    ptc_exec_model_cuda *x = ctx;
    return ptc_matmul_backward_cuda(NULL, dw, db, dout, xin, w, n, in, out, x->blas, x->st);
}

static int cuda_wgrad_embedding(void *ctx, float *dtable, const float *dout, const int32_t *tok,
                                size_t n, size_t vocab, size_t hidden)
{
    ptc_exec_model_cuda *x = ctx;
    return ptc_embedding_backward_cuda(dtable, dout, tok, n, vocab, hidden, x->st);
}

static int model_backward_weight(void *user, int c, int mb)
{
    static const model_wgrad_ops cuda = {cuda_wgrad_matmul, cuda_wgrad_embedding};
    ptc_exec_model_cuda *x = user;
    PTC_TRY(check_args(x, c, mb));
    float *a = x->d[c].act[mb];
    PTC_TRY(model_weight_pass(x->h, c, mb, a, x->d[c].g, x->d[c].p,
                              a ? block_tok(&x->h->ch[c], a) : NULL, &cuda, x));
    PTC_TRY(finish(x, "model weight gradient"));
    block_put(x, c, mb);
    return PTC_OK;
}

static int model_grads(void *user, int c, float **g, size_t *count)
{
    ptc_exec_model_cuda *x = user;
    PTC_TRY(on_device(x, "gradients"));
    if (c < 0 || c >= x->h->nch)
        return ptc_error_set(PTC_E_RANGE, "model: chunk %d", c);
    *g = x->d[c].g;
    *count = x->h->ch[c].count;
    return PTC_OK;
}

static int model_optimizer(void *user)
{
    ptc_exec_model_cuda *x = user;
    PTC_TRY(on_device(x, "an optimizer step"));
    ptc_exec_model *h = x->h;
    ptc_adamw_params hp = {.lr = h->cfg.lr > 0 ? h->cfg.lr : 1e-3f,
                           .beta1 = 0.9f,
                           .beta2 = 0.999f,
                           .eps = 1e-8f,
                           .weight_decay = 0.0f};
    for (int c = 0; c < h->nch; c++) {
        const chunk *k = &h->ch[c];
        dchunk *d = &x->d[c];
        if (!k->count)
            continue;
        PTC_TRY(ptc_adamw_update_cuda(d->p, d->m, d->v, d->g, k->count, &hp, h->step + 1,
                                      x->st));
        PTC_TRY(zero(x, d->g, k->count));
    }
    return finish(x, "model optimizer");
}

void ptc_exec_model_cuda_stage(ptc_exec_model_cuda *x, ptc_exec_stage *out)
{
    memset(out, 0, sizeof *out);
    out->user = x;
    out->forward = model_forward;
    out->backward = model_backward;
    out->backward_input = model_backward_input;
    out->backward_weight = model_backward_weight;
    out->grads = model_grads;
    out->optimizer_step = model_optimizer;
}
