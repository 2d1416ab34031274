/* The demo model's CUDA variant (exec/model/model_cuda.c) without a GPU:
 * the file is compiled here against a host shim of the CUDA runtime and
 * cuBLAS (device memory = host memory, every _cuda kernel = its _cpu twin),
 * and every schedule kind is interpreted in one process on both models.
 * Since the CUDA model makes the same kernel calls in the same order as the
 * CPU model, losses, gradients and parameters must agree bit for bit: this
 * checks its buffer layout, pointer arithmetic, zeroing, copies, token
 * upload, activation blocks and optimizer, not the kernels themselves
 * (tests/gpu/ does that on a GPU). Also: device selection, allocation
 * failures at every point of create (no leak), misuse errors. In a build
 * without CUDA it checks the header stubs instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/build_config.h"

#if PTC_WITH_CUDA
/* ---- host shim of the CUDA runtime / cuBLAS subset the model uses -------------- */
#define PTC_CUDA_SHIM 1
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNoDevice = 100 };
enum cudaMemcpyKind {
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3
};
typedef struct CUstream_st *cudaStream_t;
typedef struct cublasContext *cublasHandle_t;
typedef int cublasStatus_t;
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_STATUS_ALLOC_FAILED 3
#define CUBLAS_DEFAULT_MATH 0
#define cudaStreamNonBlocking 1

static long shim_live;         /* allocations not yet freed */
static long shim_fail_at = -1; /* fail the n-th allocation (0-based) */
static long shim_allocs;
static int shim_devices = 1, shim_device = -1;
static int shim_stream_tag, shim_blas_tag;

static bool shim_alloc_fails(void) { return shim_allocs++ == shim_fail_at; }

static cudaError_t shim_cudaMalloc(void **p, size_t n)
{
    *p = NULL;
    if (shim_alloc_fails())
        return cudaErrorMemoryAllocation;
    *p = malloc(n ? n : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n); /* NaN floats: reading what was never written shows */
    shim_live++;
    return cudaSuccess;
}
static cudaError_t shim_cudaFree(void *p)
{
    if (p) {
        free(p);
        shim_live--;
    }
    return cudaSuccess;
}
/* Only the stream-ordered forms: the model's stream is non-blocking, so a
 * copy or memset on the legacy default stream would race with its kernels. */
static cudaError_t shim_cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                                        cudaStream_t st)
{
    (void)k;
    assert_ptr_equal(st, &shim_stream_tag);
    memcpy(d, s, n);
    return cudaSuccess;
}
static cudaError_t shim_cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
    assert_ptr_equal(st, &shim_stream_tag);
    memset(d, v, n);
    return cudaSuccess;
}
static cudaError_t shim_cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags)
{
    (void)flags;
    *st = NULL;
    if (shim_alloc_fails())
        return cudaErrorMemoryAllocation;
    *st = (cudaStream_t)(void *)&shim_stream_tag;
    shim_live++;
    return cudaSuccess;
}
static cudaError_t shim_cudaStreamDestroy(cudaStream_t st)
{
    assert_ptr_equal(st, &shim_stream_tag);
    shim_live--;
    return cudaSuccess;
}
static cudaError_t shim_cudaStreamSynchronize(cudaStream_t st)
{
    assert_ptr_equal(st, &shim_stream_tag);
    return cudaSuccess;
}
static cudaError_t shim_cudaGetLastError(void) { return cudaSuccess; }
static const char *shim_cudaGetErrorString(cudaError_t e)
{
    return e == cudaErrorNoDevice ? "no CUDA-capable device is detected" : "shim error";
}
static cudaError_t shim_cudaGetDeviceCount(int *n)
{
    *n = shim_devices > 0 ? shim_devices : 0;
    return shim_devices < 0 ? cudaErrorNoDevice : cudaSuccess;
}
static cudaError_t shim_cudaSetDevice(int d)
{
    shim_device = d;
    return cudaSuccess;
}
static cublasStatus_t shim_cublasCreate(cublasHandle_t *h)
{
    *h = NULL;
    if (shim_alloc_fails())
        return CUBLAS_STATUS_ALLOC_FAILED;
    *h = (cublasHandle_t)(void *)&shim_blas_tag;
    shim_live++;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t shim_cublasDestroy(cublasHandle_t h)
{
    assert_ptr_equal(h, &shim_blas_tag);
    shim_live--;
    return CUBLAS_STATUS_SUCCESS;
}
static cublasStatus_t shim_cublasSetMathMode(cublasHandle_t h, int mode)
{
    assert_ptr_equal(h, &shim_blas_tag);
    assert_int_equal(mode, CUBLAS_DEFAULT_MATH);
    return CUBLAS_STATUS_SUCCESS;
}
#define cudaMalloc shim_cudaMalloc
#define cudaFree shim_cudaFree
#define cudaMemcpyAsync shim_cudaMemcpyAsync
#define cudaMemsetAsync shim_cudaMemsetAsync
#define cudaStreamCreateWithFlags shim_cudaStreamCreateWithFlags
#define cudaStreamDestroy shim_cudaStreamDestroy
#define cudaStreamSynchronize shim_cudaStreamSynchronize
#define cudaGetLastError shim_cudaGetLastError
#define cudaGetErrorString shim_cudaGetErrorString
#define cudaGetDeviceCount shim_cudaGetDeviceCount
#define cudaSetDevice shim_cudaSetDevice
#define ptc_cublas_load() PTC_OK
#define ptc_cublas_create shim_cublasCreate
#define ptc_cublas_destroy shim_cublasDestroy
#define ptc_cublas_set_math_mode shim_cublasSetMathMode

/* The _cuda kernels become their _cpu twins (after checking the stream and
 * handle); the model's public functions get test names so that they cannot
 * clash with the library's copy. */
#define ptc_matmul_forward_cuda shim_matmul_forward
#define ptc_matmul_backward_cuda shim_matmul_backward
#define ptc_gelu_forward_cuda shim_gelu_forward
#define ptc_gelu_backward_cuda shim_gelu_backward
#define ptc_layernorm_forward_cuda shim_layernorm_forward
#define ptc_layernorm_backward_cuda shim_layernorm_backward
#define ptc_crossentropy_forward_cuda shim_crossentropy_forward
#define ptc_crossentropy_backward_cuda shim_crossentropy_backward
#define ptc_adamw_update_cuda shim_adamw_update
#define ptc_residual_forward_cuda shim_residual_forward
#define ptc_residual_backward_cuda shim_residual_backward
#define ptc_embedding_forward_cuda shim_embedding_forward
#define ptc_embedding_backward_cuda shim_embedding_backward
#define ptc_exec_cuda_select_device shim_select_device
#define ptc_exec_model_cuda_create shim_model_create
#define ptc_exec_model_cuda_destroy shim_model_destroy
#define ptc_exec_model_cuda_stage shim_model_stage
#define ptc_exec_model_cuda_set_step shim_model_set_step
#define ptc_exec_model_cuda_losses shim_model_losses
#define ptc_exec_model_cuda_params shim_model_params
#define ptc_exec_model_cuda_host shim_model_host
#define ptc_exec_model_cuda_pull_state shim_model_pull
#define ptc_exec_model_cuda_push_state shim_model_push
#define ptc_exec_model_cuda_release_device shim_model_release

#include "exec/model/model_cuda.c"

#define ST(s) assert_ptr_equal((void *)(s), &shim_stream_tag)
#define BL(b) assert_ptr_equal((void *)(b), &shim_blas_tag)

int shim_matmul_forward(float *out, const float *inp, const float *w, const float *b, size_t n,
                        size_t c, size_t oc, struct cublasContext *blas, struct CUstream_st *st)
{
    ST(st), BL(blas);
    return ptc_matmul_forward_cpu(out, inp, w, b, n, c, oc);
}
int shim_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, size_t n, size_t c, size_t oc,
                         struct cublasContext *blas, struct CUstream_st *st)
{
    ST(st), BL(blas);
    return ptc_matmul_backward_cpu(dinp, dw, db, dout, inp, w, n, c, oc);
}
int shim_gelu_forward(float *out, const float *inp, size_t n, struct CUstream_st *st)
{
    ST(st);
    return ptc_gelu_forward_cpu(out, inp, n);
}
int shim_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                       struct CUstream_st *st)
{
    ST(st);
    return ptc_gelu_backward_cpu(dinp, inp, dout, n);
}
int shim_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, size_t n, size_t c, float eps,
                           struct CUstream_st *st)
{
    ST(st);
    return ptc_layernorm_forward_cpu(out, mean, rstd, inp, w, b, n, c, eps);
}
int shim_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, size_t n, size_t c, struct CUstream_st *st)
{
    ST(st);
    return ptc_layernorm_backward_cpu(dinp, dw, db, dout, inp, w, mean, rstd, n, c);
}
int shim_crossentropy_forward(float *losses, const float *logits, const int32_t *t, size_t n,
                              size_t v, struct CUstream_st *st)
{
    ST(st);
    return ptc_crossentropy_forward_cpu(losses, logits, t, n, v);
}
int shim_crossentropy_backward(float *dl, const float *logits, const int32_t *t, size_t n,
                               size_t v, float scale, struct CUstream_st *st)
{
    ST(st);
    return ptc_crossentropy_backward_cpu(dl, logits, t, n, v, scale);
}
int shim_adamw_update(float *p, float *m, float *v, const float *g, size_t n,
                      const ptc_adamw_params *hp, int64_t t, struct CUstream_st *st)
{
    ST(st);
    return ptc_adamw_update_cpu(p, m, v, g, n, hp, t);
}
int shim_residual_forward(float *out, const float *a, const float *b, size_t n,
                          struct CUstream_st *st)
{
    ST(st);
    return ptc_residual_forward_cpu(out, a, b, n);
}
int shim_residual_backward(float *da, float *db, const float *dout, size_t n,
                           struct CUstream_st *st)
{
    ST(st);
    return ptc_residual_backward_cpu(da, db, dout, n);
}
int shim_embedding_forward(float *out, const int32_t *ids, const float *table, size_t n,
                           size_t vocab, size_t c, struct CUstream_st *st)
{
    ST(st);
    return ptc_embedding_forward_cpu(out, ids, table, n, vocab, c);
}
int shim_embedding_backward(float *dtable, const float *dout, const int32_t *ids, size_t n,
                            size_t vocab, size_t c, struct CUstream_st *st)
{
    ST(st);
    return ptc_embedding_backward_cpu(dtable, dout, ids, n, vocab, c);
}

/* ---- the comparison -------------------------------------------------------------- */

static int data_fn(void *user, int64_t step, int64_t gmb, int32_t *ids, int32_t *targets, int n)
{
    int vocab = *(const int *)user;
    uint64_t z = (uint64_t)(step * 1000 + gmb) * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        z ^= z >> 29;
        z *= 0xBF58476D1CE4E5B9ull;
        ids[i] = (int32_t)((z >> 33) % (uint64_t)vocab);
        targets[i] = (int32_t)(((uint64_t)ids[i] * 7 + 3) % (uint64_t)vocab);
    }
    return PTC_OK;
}

/* Boundary tensors of one model family: [pipe][stage][mb] activation (F
 * output) and gradient (B/I output). */
typedef struct mailbox {
    float **act, **grad;
    bool *act_ok, *grad_ok;
} mailbox;

static void mailbox_init(mailbox *b, size_t slots, size_t floats)
{
    b->act = calloc(slots, sizeof *b->act);
    b->grad = calloc(slots, sizeof *b->grad);
    b->act_ok = calloc(slots, 1);
    b->grad_ok = calloc(slots, 1);
    for (size_t i = 0; i < slots; i++) {
        b->act[i] = calloc(floats, sizeof(float));
        b->grad[i] = calloc(floats, sizeof(float));
    }
}

static void mailbox_free(mailbox *b, size_t slots)
{
    for (size_t i = 0; i < slots; i++) {
        free(b->act[i]);
        free(b->grad[i]);
    }
    free(b->act);
    free(b->grad);
    free(b->act_ok);
    free(b->grad_ok);
}

/* Run schedule `kind` on P ranks, M micro-batches, for `steps` steps, with
 * both models; everything must be bit-identical. */
static void compare_kind(ptc_sched_kind_id kind, int P, int M, int steps)
{
    ptc_sched_gen g = {.kind = kind, .ranks = P, .microbatches = M, .chunks = 2, .k = 2};
    ptc_sched *s = NULL;
    assert_int_equal(ptc_sched_generate(&s, &g), PTC_OK);
    ptc_exec_model_cfg cfg = {.layers = 5, .hidden = 8, .vocab = 40, .tokens = 6, .lr = 1e-2f,
                              .seed = 11};
    int vocab = cfg.vocab;
    int S = ptc_sched_stages(s), pipes = ptc_sched_pipes(s);
    ptc_exec_model **cm = calloc((size_t)P, sizeof *cm);
    ptc_exec_model_cuda **gm = calloc((size_t)P, sizeof *gm);
    ptc_exec_stage *cs = calloc((size_t)P, sizeof *cs), *gs = calloc((size_t)P, sizeof *gs);
    long live0 = shim_live;
    for (int r = 0; r < P; r++) {
        assert_int_equal(ptc_exec_model_create(&cm[r], &cfg, s, r, 0, M, data_fn, &vocab),
                         PTC_OK);
        assert_int_equal(shim_model_create(&gm[r], &cfg, s, r, 0, M, data_fn, &vocab), PTC_OK);
        ptc_exec_model_stage(cm[r], &cs[r]);
        shim_model_stage(gm[r], &gs[r]);
        assert_ptr_equal(gs[r].user, gm[r]);
    }
    size_t slots = (size_t)pipes * (size_t)S * (size_t)M,
           floats = ptc_exec_model_act_bytes(&cfg) / sizeof(float);
    mailbox mc, mg;
    mailbox_init(&mc, slots, floats);
    mailbox_init(&mg, slots, floats);
    size_t *pos = calloc((size_t)P, sizeof *pos);
    for (int step = 0; step < steps; step++) {
        for (int r = 0; r < P; r++) {
            ptc_exec_model_set_step(cm[r], step);
            shim_model_set_step(gm[r], step);
            pos[r] = 0;
        }
        memset(mc.act_ok, 0, slots), memset(mc.grad_ok, 0, slots);
        bool progress = true, done = false;
        while (progress && !done) {
            progress = false;
            done = true;
            for (int r = 0; r < P; r++) {
                size_t n;
                const ptc_sched_action *a = ptc_sched_actions(s, r, &n);
                while (pos[r] < n && a[pos[r]].op > PTC_SCHED_W)
                    pos[r]++; /* SEND/RECV: the mailboxes stand for them */
                if (pos[r] == n)
                    continue;
                done = false;
                const ptc_sched_action *x = &a[pos[r]];
                int pipe, st;
                assert_int_equal(ptc_sched_stage_of(s, r, x->chunk, &pipe, &st), PTC_OK);
                size_t here = ((size_t)pipe * (size_t)S + (size_t)st) * (size_t)M + (size_t)x->mb;
                int rc_c = PTC_OK, rc_g = PTC_OK;
                if (x->op == PTC_SCHED_F) {
                    size_t prev = here - (size_t)M;
                    if (st > 0 && !mc.act_ok[prev])
                        continue; /* input not produced yet */
                    rc_c = cs[r].forward(cs[r].user, x->chunk, x->mb, st ? mc.act[prev] : NULL,
                                         st < S - 1 ? mc.act[here] : NULL);
                    rc_g = gs[r].forward(gs[r].user, x->chunk, x->mb, st ? mg.act[prev] : NULL,
                                         st < S - 1 ? mg.act[here] : NULL);
                    mc.act_ok[here] = true;
                } else if (x->op == PTC_SCHED_B || x->op == PTC_SCHED_I) {
                    size_t next = here + (size_t)M;
                    if (st < S - 1 && !mc.grad_ok[next])
                        continue;
                    const float *dc = st < S - 1 ? mc.grad[next] : NULL,
                                *dg = st < S - 1 ? mg.grad[next] : NULL;
                    float *oc = st ? mc.grad[here] : NULL, *og = st ? mg.grad[here] : NULL;
                    if (x->op == PTC_SCHED_B) {
                        rc_c = cs[r].backward(cs[r].user, x->chunk, x->mb, dc, oc);
                        rc_g = gs[r].backward(gs[r].user, x->chunk, x->mb, dg, og);
                    } else {
                        rc_c = cs[r].backward_input(cs[r].user, x->chunk, x->mb, dc, oc);
                        rc_g = gs[r].backward_input(gs[r].user, x->chunk, x->mb, dg, og);
                    }
                    mc.grad_ok[here] = true;
                } else {
                    rc_c = cs[r].backward_weight(cs[r].user, x->chunk, x->mb);
                    rc_g = gs[r].backward_weight(gs[r].user, x->chunk, x->mb);
                }
                assert_int_equal(rc_c, PTC_OK);
                assert_int_equal(rc_g, PTC_OK);
                /* what crosses a boundary is identical */
                assert_memory_equal(mc.act[here], mg.act[here], floats * sizeof(float));
                assert_memory_equal(mc.grad[here], mg.grad[here], floats * sizeof(float));
                pos[r]++;
                progress = true;
            }
        }
        assert_true(done);
        for (int r = 0; r < P; r++) {
            for (int c = 0; c < ptc_sched_chunks(s, r); c++) {
                float *g1, *g2;
                size_t n1, n2;
                assert_int_equal(cs[r].grads(cs[r].user, c, &g1, &n1), PTC_OK);
                assert_int_equal(gs[r].grads(gs[r].user, c, &g2, &n2), PTC_OK);
                assert_int_equal(n1, n2);
                assert_memory_equal(g1, g2, n1 * sizeof(float));
            }
            assert_int_equal(cs[r].optimizer_step(cs[r].user), PTC_OK);
            assert_int_equal(gs[r].optimizer_step(gs[r].user), PTC_OK);
            int n1, n2;
            const double *l1 = ptc_exec_model_losses(cm[r], &n1), *l2;
            assert_int_equal(shim_model_losses(gm[r], &l2, &n2), PTC_OK);
            assert_int_equal(n1, n2);
            assert_memory_equal(l1, l2, (size_t)n1 * sizeof(double));
        }
    }
    /* Losses were computed somewhere and moved: not a comparison of zeros. */
    bool any_loss = false;
    for (int r = 0; r < P; r++) {
        int nl;
        const double *l;
        assert_int_equal(shim_model_losses(gm[r], &l, &nl), PTC_OK);
        for (int i = 0; i < nl; i++)
            any_loss |= l[i] > 0.5;
    }
    assert_true(any_loss);
    for (int r = 0; r < P; r++) {
        size_t n1, n2;
        const ptc_exec_param *p1 = ptc_exec_model_params(cm[r], &n1), *p2;
        /* the CUDA model's host copy is stale until params() refreshes it */
        assert_int_equal(shim_model_params(gm[r], &p2, &n2), PTC_OK);
        assert_int_equal(n1, n2);
        for (size_t i = 0; i < n1; i++) {
            assert_string_equal(p1[i].name, p2[i].name);
            assert_int_equal(p1[i].shape[0], p2[i].shape[0]);
            size_t cnt = (size_t)p1[i].shape[0] * (size_t)(p1[i].ndim > 1 ? p1[i].shape[1] : 1);
            assert_memory_equal(p1[i].data, p2[i].data, cnt * sizeof(float));
        }
    }
    for (int r = 0; r < P; r++) {
        ptc_exec_model_destroy(cm[r]);
        shim_model_destroy(gm[r]);
    }
    assert_int_equal(shim_live, live0); /* every device allocation freed */
    mailbox_free(&mc, slots);
    mailbox_free(&mg, slots);
    free(pos);
    free(cm);
    free(gm);
    free(cs);
    free(gs);
    ptc_sched_destroy(s);
}

static void test_equal_1f1b(void **st) { (void)st; compare_kind(PTC_SCHED_1F1B, 3, 4, 3); }
static void test_equal_gpipe(void **st) { (void)st; compare_kind(PTC_SCHED_GPIPE, 2, 3, 2); }
static void test_equal_interleaved(void **st)
{
    (void)st;
    compare_kind(PTC_SCHED_INTERLEAVED, 2, 4, 3);
}
static void test_equal_zbh1(void **st) { (void)st; compare_kind(PTC_SCHED_ZBH1, 2, 4, 3); }
static void test_equal_zbv(void **st) { (void)st; compare_kind(PTC_SCHED_ZBV, 2, 4, 2); }
static void test_equal_chimera(void **st) { (void)st; compare_kind(PTC_SCHED_CHIMERA, 2, 4, 2); }
static void test_equal_single(void **st) { (void)st; compare_kind(PTC_SCHED_1F1B, 1, 3, 3); }

static void test_select_device(void **st)
{
    (void)st;
    int dev = 7;
    shim_devices = 3;
    assert_int_equal(shim_select_device(4, 0, &dev), PTC_OK); /* size unknown: modulo */
    assert_int_equal(dev, 1);
    assert_int_equal(shim_device, 1);
    assert_int_equal(shim_select_device(2, 3, NULL), PTC_OK);
    assert_int_equal(shim_device, 2);
    assert_int_equal(shim_select_device(-1, 0, &dev), PTC_E_INVAL);
    assert_int_equal(dev, -1);
    assert_int_equal(shim_select_device(3, 3, &dev), PTC_E_INVAL);
    shim_device = -1;
    assert_int_equal(shim_select_device(0, 4, &dev), PTC_E_CONFIG); /* 4 ranks, 3 GPUs */
    assert_non_null(strstr(ptc_last_error(), "4 processes on this node but 3 cuda devices"));
    assert_int_equal(shim_device, -1); /* nothing bound */
    shim_devices = 0;
    assert_int_equal(shim_select_device(0, 0, &dev), PTC_E_CUDA);
    assert_non_null(strstr(ptc_last_error(), "no cuda device"));
    shim_devices = -1; /* the runtime reports no device / no driver */
    assert_int_equal(shim_select_device(0, 1, &dev), PTC_E_CUDA);
    assert_non_null(strstr(ptc_last_error(), "no CUDA-capable device"));
    assert_int_equal(dev, -1);
    shim_devices = 1;
}

/* Every device allocation of create fails in turn: an error, *out NULL and
 * nothing left allocated. */
static void test_create_failures(void **st)
{
    (void)st;
    ptc_sched_gen g = {.kind = PTC_SCHED_INTERLEAVED, .ranks = 2, .microbatches = 2, .chunks = 2};
    ptc_sched *s = NULL;
    assert_int_equal(ptc_sched_generate(&s, &g), PTC_OK);
    ptc_exec_model_cfg cfg = {.layers = 3, .hidden = 4, .vocab = 8, .tokens = 2, .seed = 1};
    int vocab = cfg.vocab, failures = 0;
    for (long at = 0;; at++) {
        long live0 = shim_live;
        shim_allocs = 0;
        shim_fail_at = at;
        ptc_exec_model_cuda *x = (ptc_exec_model_cuda *)&vocab;
        int rc = shim_model_create(&x, &cfg, s, 0, 0, 2, data_fn, &vocab);
        shim_fail_at = -1;
        if (rc == PTC_OK) {
            assert_true(shim_allocs <= at); /* no allocation left to fail */
            shim_model_destroy(x);
            assert_int_equal(shim_live, live0);
            break;
        }
        assert_int_equal(rc, PTC_E_CUDA);
        assert_null(x);
        assert_int_equal(shim_live, live0);
        failures++;
    }
    /* stream, cuBLAS, scratch, losses, 2 chunks x 4 arrays */
    assert_int_equal(failures, 12);
    ptc_sched_destroy(s);
}


/* Run one whole step of a single-rank schedule (no boundaries to carry). */
static void one_rank_step(ptc_exec_stage *f, const ptc_sched *s, int64_t step,
                          ptc_exec_model_cuda *g)
{
    shim_model_set_step(g, step);
    size_t n;
    const ptc_sched_action *a = ptc_sched_actions(s, 0, &n);
    for (size_t i = 0; i < n; i++) {
        const ptc_sched_action *x = &a[i];
        if (x->op == PTC_SCHED_F)
            assert_int_equal(f->forward(f->user, x->chunk, x->mb, NULL, NULL), PTC_OK);
        else if (x->op == PTC_SCHED_B)
            assert_int_equal(f->backward(f->user, x->chunk, x->mb, NULL, NULL), PTC_OK);
    }
    assert_int_equal(f->optimizer_step(f->user), PTC_OK);
}

/* The state's round trip through the host mirror, as `ptc train --device
 * cuda` saves, resumes and resizes: pull copies the device's parameters and
 * both moments into the host model's arrays exactly; a fresh model given
 * them by push continues bit for bit like the one that never stopped. */
static void test_state_pull_push(void **st)
{
    (void)st;
    ptc_sched_gen sg = {.kind = PTC_SCHED_1F1B, .ranks = 1, .microbatches = 3};
    ptc_sched *s = NULL;
    assert_int_equal(ptc_sched_generate(&s, &sg), PTC_OK);
    ptc_exec_model_cfg cfg = {.layers = 3, .hidden = 8, .vocab = 40, .tokens = 6, .lr = 1e-2f,
                              .seed = 3};
    int vocab = cfg.vocab;
    long live0 = shim_live;
    ptc_exec_model_cuda *a = NULL, *b = NULL;
    assert_int_equal(shim_model_create(&a, &cfg, s, 0, 0, 3, data_fn, &vocab), PTC_OK);
    assert_int_equal(shim_model_create(&b, &cfg, s, 0, 0, 3, data_fn, &vocab), PTC_OK);
    assert_null(shim_model_host(NULL));
    ptc_exec_model *ha = shim_model_host(a), *hb = shim_model_host(b);
    assert_non_null(ha);
    assert_ptr_equal(ha, a->h);
    ptc_exec_stage fa, fb;
    shim_model_stage(a, &fa);
    shim_model_stage(b, &fb);
    for (int64_t k = 0; k < 2; k++)
        one_rank_step(&fa, s, k, a);
    /* before the pull the mirror's moments are the initial zeros */
    size_t np, npb;
    const ptc_exec_param *pa = ptc_exec_model_params(ha, &np);
    assert_true(np > 0);
    assert_true(pa[0].exp_avg[0] == 0.0f);
    assert_int_equal(shim_model_pull(a), PTC_OK);
    size_t total = 0;
    bool moved = false;
    for (int c = 0; c < ha->nch; c++) {
        const chunk *k = &ha->ch[c];
        assert_memory_equal(k->p, a->d[c].p, k->count * sizeof(float));
        assert_memory_equal(k->m, a->d[c].m, k->count * sizeof(float));
        assert_memory_equal(k->v, a->d[c].v, k->count * sizeof(float));
        for (size_t i = 0; i < k->count; i++)
            moved |= k->m[i] != 0.0f && k->v[i] > 0.0f;
        total += k->count;
    }
    assert_true(total > 0);
    assert_true(moved); /* two steps of AdamW: the moments are not zero */
    /* the parameters listed for a checkpoint point into those arrays */
    const ptc_exec_param *pb = ptc_exec_model_params(hb, &npb);
    assert_int_equal(np, npb);
    /* b: a fresh model; its mirror gets a's state (as a load or a move
     * fills it), then the device */
    for (size_t i = 0; i < np; i++) {
        assert_string_equal(pa[i].name, pb[i].name);
        size_t cnt = (size_t)pa[i].shape[0] * (size_t)(pa[i].ndim > 1 ? pa[i].shape[1] : 1);
        memcpy(pb[i].data, pa[i].data, cnt * sizeof(float));
        memcpy(pb[i].exp_avg, pa[i].exp_avg, cnt * sizeof(float));
        memcpy(pb[i].exp_avg_sq, pa[i].exp_avg_sq, cnt * sizeof(float));
    }
    assert_int_equal(shim_model_push(b), PTC_OK);
    for (int c = 0; c < hb->nch; c++) {
        assert_memory_equal(b->d[c].p, a->d[c].p, hb->ch[c].count * sizeof(float));
        assert_memory_equal(b->d[c].m, a->d[c].m, hb->ch[c].count * sizeof(float));
        assert_memory_equal(b->d[c].v, a->d[c].v, hb->ch[c].count * sizeof(float));
    }
    /* step 2 on both: the same losses and state, bit for bit */
    one_rank_step(&fa, s, 2, a);
    one_rank_step(&fb, s, 2, b);
    const double *la, *lb;
    int na, nb;
    assert_int_equal(shim_model_losses(a, &la, &na), PTC_OK);
    assert_int_equal(shim_model_losses(b, &lb, &nb), PTC_OK);
    assert_int_equal(na, nb);
    assert_true(la[0] > 0.5);
    assert_memory_equal(la, lb, (size_t)na * sizeof(double));
    for (int c = 0; c < ha->nch; c++) {
        assert_memory_equal(b->d[c].p, a->d[c].p, ha->ch[c].count * sizeof(float));
        assert_memory_equal(b->d[c].m, a->d[c].m, ha->ch[c].count * sizeof(float));
        assert_memory_equal(b->d[c].v, a->d[c].v, ha->ch[c].count * sizeof(float));
    }
    /* a fresh model that was not given the state differs after that step */
    ptc_exec_model_cuda *z = NULL;
    assert_int_equal(shim_model_create(&z, &cfg, s, 0, 0, 3, data_fn, &vocab), PTC_OK);
    ptc_exec_stage fz;
    shim_model_stage(z, &fz);
    one_rank_step(&fz, s, 2, z);
    assert_true(memcmp(z->d[0].p, a->d[0].p, ha->ch[0].count * sizeof(float)) != 0);
    shim_model_destroy(z);
    shim_model_destroy(a);
    shim_model_destroy(b);
    assert_int_equal(shim_live, live0);
    ptc_sched_destroy(s);
}

/* A value per chunk, array and element, so a copy to the wrong chunk or
 * array shows. */
static float tagged(int c, int arr, size_t i) { return (float)(c * 100000 + arr * 10000) + (float)i; }

/* Pull and push with two chunks on the process (rank 0 of an interleaved
 * schedule), then the device side released: only the host model is left,
 * every device allocation is freed, and the calls that need the device
 * say so. */
static void test_state_chunks_release(void **st)
{
    (void)st;
    ptc_sched_gen sg = {.kind = PTC_SCHED_INTERLEAVED, .ranks = 2, .microbatches = 2,
                        .chunks = 2};
    ptc_sched *s = NULL;
    assert_int_equal(ptc_sched_generate(&s, &sg), PTC_OK);
    ptc_exec_model_cfg cfg = {.layers = 4, .hidden = 4, .vocab = 8, .tokens = 2, .seed = 1};
    int vocab = cfg.vocab;
    long live0 = shim_live;
    ptc_exec_model_cuda *x = NULL;
    assert_int_equal(shim_model_create(&x, &cfg, s, 0, 0, 2, data_fn, &vocab), PTC_OK);
    ptc_exec_model *h = shim_model_host(x);
    assert_int_equal(h->nch, 2);
    for (int c = 0; c < 2; c++) {
        float *dev[3] = {x->d[c].p, x->d[c].m, x->d[c].v};
        assert_true(h->ch[c].count > 0);
        for (int arr = 0; arr < 3; arr++)
            for (size_t i = 0; i < h->ch[c].count; i++)
                dev[arr][i] = tagged(c, arr, i);
    }
    assert_int_equal(shim_model_pull(x), PTC_OK);
    for (int c = 0; c < 2; c++) {
        const chunk *k = &h->ch[c];
        float *host[3] = {k->p, k->m, k->v};
        for (int arr = 0; arr < 3; arr++)
            for (size_t i = 0; i < k->count; i++) {
                assert_true(host[arr][i] == tagged(c, arr, i));
                host[arr][i] = -tagged(c, arr, i); /* what the push must carry back */
            }
    }
    assert_int_equal(shim_model_push(x), PTC_OK);
    for (int c = 0; c < 2; c++) {
        float *dev[3] = {x->d[c].p, x->d[c].m, x->d[c].v};
        for (int arr = 0; arr < 3; arr++)
            for (size_t i = 0; i < h->ch[c].count; i++)
                assert_true(dev[arr][i] == -tagged(c, arr, i));
    }
    /* a forward leaves an activation block on the device: released too */
    ptc_exec_stage f;
    shim_model_stage(x, &f);
    shim_model_set_step(x, 0);
    assert_int_equal(f.forward(f.user, 0, 0, NULL, NULL), PTC_OK);
    assert_true(shim_live > live0);
    shim_model_release(x);
    assert_int_equal(shim_live, live0); /* every device allocation freed */
    assert_ptr_equal(shim_model_host(x), h);
    for (int c = 0; c < 2; c++)
        for (size_t i = 0; i < h->ch[c].count; i++)
            assert_true(h->ch[c].m[i] == -tagged(c, 1, i));
    const double *l;
    int n;
    const ptc_exec_param *pp;
    size_t np;
    assert_int_equal(shim_model_pull(x), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "released"));
    assert_int_equal(shim_model_push(x), PTC_E_INVAL);
    assert_int_equal(shim_model_losses(x, &l, &n), PTC_E_INVAL);
    assert_int_equal(shim_model_params(x, &pp, &np), PTC_E_INVAL);
    assert_int_equal(f.forward(f.user, 1, 0, NULL, NULL), PTC_E_INVAL);
    assert_int_equal(f.optimizer_step(f.user), PTC_E_INVAL);
    shim_model_release(x); /* twice: nothing left to free */
    shim_model_release(NULL);
    assert_int_equal(shim_model_pull(NULL), PTC_E_INVAL);
    assert_int_equal(shim_model_push(NULL), PTC_E_INVAL);
    shim_model_destroy(x);
    assert_int_equal(shim_live, live0);
    ptc_sched_destroy(s);
}

static void test_misuse(void **st)
{
    (void)st;
    ptc_sched_gen g = {.kind = PTC_SCHED_ZBH1, .ranks = 2, .microbatches = 2};
    ptc_sched *s = NULL;
    assert_int_equal(ptc_sched_generate(&s, &g), PTC_OK);
    ptc_exec_model_cfg cfg = {.layers = 2, .hidden = 4, .vocab = 8, .tokens = 2, .seed = 1};
    int vocab = cfg.vocab;
    ptc_exec_model_cuda *x = NULL;
    assert_int_equal(shim_model_create(&x, &cfg, s, 1, 0, 2, data_fn, &vocab), PTC_OK);
    ptc_exec_stage f;
    shim_model_stage(x, &f);
    float buf[8] = {0};
    assert_int_equal(f.backward(f.user, 0, 0, NULL, buf), PTC_E_INVAL);   /* before F */
    assert_int_equal(f.backward_weight(f.user, 0, 1), PTC_E_INVAL);       /* before I */
    assert_int_equal(f.forward(f.user, 0, 0, NULL, NULL), PTC_E_INVAL);   /* no input */
    assert_int_equal(f.forward(f.user, 1, 0, buf, NULL), PTC_E_RANGE);    /* no chunk 1 */
    assert_int_equal(f.forward(f.user, 0, 2, buf, NULL), PTC_E_RANGE);    /* mb 2 of 2 */
    assert_int_equal(f.forward(f.user, 0, 0, buf, NULL), PTC_OK);
    assert_int_equal(f.forward(f.user, 0, 0, buf, NULL), PTC_E_INVAL);    /* twice */
    float *gr;
    size_t n;
    assert_int_equal(f.grads(f.user, 3, &gr, &n), PTC_E_RANGE);
    shim_model_destroy(x);
    shim_model_destroy(NULL);
    ptc_sched_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_single),      cmocka_unit_test(test_equal_1f1b),
        cmocka_unit_test(test_equal_gpipe),       cmocka_unit_test(test_equal_interleaved),
        cmocka_unit_test(test_equal_zbh1),        cmocka_unit_test(test_equal_zbv),
        cmocka_unit_test(test_equal_chimera),     cmocka_unit_test(test_select_device),
        cmocka_unit_test(test_create_failures),   cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_state_pull_push),
        cmocka_unit_test(test_state_chunks_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* built without CUDA: the header stubs */

#include "ptc/exec_model.h"

static void test_stubs(void **st)
{
    (void)st;
    int dev = 5;
    assert_int_equal(ptc_exec_cuda_select_device(0, 1, &dev), PTC_E_UNSUPPORTED);
    assert_int_equal(dev, -1);
    ptc_exec_model_cuda *x = (ptc_exec_model_cuda *)&dev;
    ptc_exec_model_cfg cfg = {.layers = 1, .hidden = 4, .vocab = 8, .tokens = 2};
    assert_int_equal(ptc_exec_model_cuda_create(&x, &cfg, NULL, 0, 0, 1, NULL, NULL),
                     PTC_E_UNSUPPORTED);
    assert_null(x);
    ptc_exec_stage f;
    memset(&f, 0xff, sizeof f);
    ptc_exec_model_cuda_stage(NULL, &f);
    assert_null(f.forward);
    const double *l;
    int n;
    assert_int_equal(ptc_exec_model_cuda_losses(NULL, &l, &n), PTC_E_UNSUPPORTED);
    assert_null(ptc_exec_model_cuda_host(NULL));
    assert_int_equal(ptc_exec_model_cuda_pull_state(NULL), PTC_E_UNSUPPORTED);
    assert_int_equal(ptc_exec_model_cuda_push_state(NULL), PTC_E_UNSUPPORTED);
    ptc_exec_model_cuda_release_device(NULL);
    ptc_exec_model_cuda_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stubs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
