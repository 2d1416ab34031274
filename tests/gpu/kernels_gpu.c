/* GPU training kernels against the CPU references (run by
 * test_kernels_gpu.sh, label gpu). Exits 77 (skipped) with a line saying
 * so when no device is usable (1 under PTC_REQUIRE_GPU=1: gpu_skip.h), 1 on
 * any mismatch. Tolerance: |got - ref| <=
 * abs + |ref| * eps, as in the unit tests (docs/kernels.md). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdbool.h>

#include "kernels/adamw.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "../unit/kernels_test_util.h"
#include "gpu_skip.h"

static int failures;
static cudaStream_t stream;
static cublasHandle_t cublas;

static void die_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "kernels_gpu: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    die_cuda(cudaMalloc(&p, bytes > 0 ? bytes : 4), "cudaMalloc");
    return p;
}

static float *dev_from(const float *h, size_t n)
{
    float *d = dev_alloc(n * sizeof(float));
    die_cuda(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    return d;
}

static int32_t *dev_ids(const int32_t *h, size_t n)
{
    int32_t *d = dev_alloc(n * sizeof(int32_t));
    die_cuda(cudaMemcpy(d, h, n * sizeof(int32_t), cudaMemcpyHostToDevice), "h2d");
    return d;
}

/* Copy a device result back (after the stream finishes). */
static float *host_from(const float *d, size_t n)
{
    die_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    float *h = kt_alloc(n);
    die_cuda(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost), "d2h");
    return h;
}

static void expect_ok(int rc, const char *what)
{
    if (rc != PTC_OK) {
        fprintf(stderr, "%s: returned %d (%s)\n", what, rc, ptc_last_error());
        failures++;
    }
}

static void check(const char *what, const float *d_got, const float *ref,
                  size_t n, double abs_tol, double rel_eps)
{
    float *got = host_from(d_got, n);
    size_t bad = kt_compare(what, got, ref, n, abs_tol, rel_eps);
    printf("%-28s %s\n", what, bad ? "FAIL" : "ok");
    failures += bad != 0;
    free(got);
}

static void check_bits(const char *what, const float *d_got, const float *ref,
                       size_t n)
{
    float *got = host_from(d_got, n);
    size_t bad = kt_compare_bits(what, got, ref, n);
    printf("%-28s %s\n", what, bad ? "FAIL" : "ok (bit-exact)");
    failures += bad != 0;
    free(got);
}

static void test_matmul(kt_rng *r)
{
    const size_t n = 128, c = 256, oc = 384;
    float *inp = kt_random(n * c, -1, 1, r), *w = kt_random(oc * c, -1, 1, r);
    float *b = kt_random(oc, -1, 1, r), *g = kt_random(n * oc, -1, 1, r);
    float *out = kt_alloc(n * oc);
    float *dinp = kt_random(n * c, -1, 1, r), *dw = kt_random(oc * c, -1, 1, r);
    float *db = kt_random(oc, -1, 1, r);
    float *d_inp = dev_from(inp, n * c), *d_w = dev_from(w, oc * c);
    float *d_b = dev_from(b, oc), *d_g = dev_from(g, n * oc);
    float *d_out = dev_alloc(n * oc * sizeof(float));
    float *d_dinp = dev_from(dinp, n * c), *d_dw = dev_from(dw, oc * c);
    float *d_db = dev_from(db, oc);
    expect_ok(ptc_matmul_forward_ref(out, inp, w, b, n, c, oc), "matmul_forward_ref");
    expect_ok(ptc_matmul_forward_cuda(d_out, d_inp, d_w, d_b, n, c, oc, cublas, stream),
              "matmul_forward_cuda");
    check("matmul_forward", d_out, out, n * oc, 2e-5, 1e-5);
    expect_ok(ptc_matmul_backward_ref(dinp, dw, db, g, inp, w, n, c, oc),
              "matmul_backward_ref");
    expect_ok(ptc_matmul_backward_cuda(d_dinp, d_dw, d_db, d_g, d_inp, d_w, n, c,
                                       oc, cublas, stream),
              "matmul_backward_cuda");
    check("matmul_dinp", d_dinp, dinp, n * c, 2e-5, 1e-5);
    check("matmul_dweight", d_dw, dw, oc * c, 2e-5, 1e-5);
    check("matmul_dbias", d_db, db, oc, 2e-5, 1e-5);
    /* Argument errors come back before anything is launched. */
    if (ptc_matmul_forward_cuda(d_out, d_inp, d_w, d_b, n, c, oc, NULL, stream) !=
        PTC_E_INVAL) {
        fprintf(stderr, "matmul_forward_cuda: a null handle was accepted\n");
        failures++;
    }
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_g); cudaFree(d_out);
    cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db);
    free(inp); free(w); free(b); free(g); free(out); free(dinp); free(dw); free(db);
}

static void test_gelu_residual(kt_rng *r)
{
    const size_t n = 1000003;
    float *x = kt_random(n, -6, 6, r), *y = kt_random(n, -6, 6, r);
    float *g = kt_random(n, -1, 1, r), *out = kt_alloc(n);
    float *dx = kt_random(n, -1, 1, r), *dy = kt_random(n, -1, 1, r);
    float *d_x = dev_from(x, n), *d_y = dev_from(y, n), *d_g = dev_from(g, n);
    float *d_out = dev_alloc(n * sizeof(float));
    float *d_dx = dev_from(dx, n), *d_dy = dev_from(dy, n);

    expect_ok(ptc_gelu_forward_ref(out, x, n), "gelu_forward_ref");
    expect_ok(ptc_gelu_forward_cuda(d_out, d_x, n, stream), "gelu_forward_cuda");
    check("gelu_forward", d_out, out, n, 1e-6, 1e-5);
    expect_ok(ptc_gelu_backward_ref(dx, x, g, n), "gelu_backward_ref");
    expect_ok(ptc_gelu_backward_cuda(d_dx, d_x, d_g, n, stream), "gelu_backward_cuda");
    check("gelu_backward", d_dx, dx, n, 1e-6, 1e-5);

    expect_ok(ptc_residual_forward_ref(out, x, y, n), "residual_forward_ref");
    expect_ok(ptc_residual_forward_cuda(d_out, d_x, d_y, n, stream),
              "residual_forward_cuda");
    check_bits("residual_forward", d_out, out, n);
    die_cuda(cudaMemcpy(d_dx, y, n * sizeof(float), cudaMemcpyHostToDevice), "h2d");
    memcpy(dx, y, n * sizeof(float));
    expect_ok(ptc_residual_backward_ref(dx, dy, g, n), "residual_backward_ref");
    expect_ok(ptc_residual_backward_cuda(d_dx, d_dy, d_g, n, stream),
              "residual_backward_cuda");
    check_bits("residual_dinp1", d_dx, dx, n);
    check_bits("residual_dinp2", d_dy, dy, n);
    cudaFree(d_x); cudaFree(d_y); cudaFree(d_g); cudaFree(d_out); cudaFree(d_dx);
    cudaFree(d_dy);
    free(x); free(y); free(g); free(out); free(dx); free(dy);
}

static void test_layernorm(kt_rng *r)
{
    const size_t n = 257, c = 768;
    float *x = kt_random(n * c, -3, 5, r), *w = kt_random(c, 0.5f, 1.5f, r);
    float *b = kt_random(c, -1, 1, r), *g = kt_random(n * c, -1, 1, r);
    float *out = kt_alloc(n * c), *mean = kt_alloc(n), *rstd = kt_alloc(n);
    float *dx = kt_random(n * c, -1, 1, r), *dw = kt_random(c, -1, 1, r);
    float *db = kt_random(c, -1, 1, r);
    float *d_x = dev_from(x, n * c), *d_w = dev_from(w, c), *d_b = dev_from(b, c);
    float *d_g = dev_from(g, n * c), *d_out = dev_alloc(n * c * sizeof(float));
    float *d_mean = dev_alloc(n * sizeof(float)), *d_rstd = dev_alloc(n * sizeof(float));
    float *d_dx = dev_from(dx, n * c), *d_dw = dev_from(dw, c), *d_db = dev_from(db, c);
    float *d_dw2 = dev_from(dw, c);
    expect_ok(ptc_layernorm_forward_ref(out, mean, rstd, x, w, b, n, c, 1e-5f),
              "layernorm_forward_ref");
    expect_ok(ptc_layernorm_forward_cuda(d_out, d_mean, d_rstd, d_x, d_w, d_b, n, c,
                                         1e-5f, stream),
              "layernorm_forward_cuda");
    check("layernorm_out", d_out, out, n * c, 1e-5, 1e-5);
    check("layernorm_mean", d_mean, mean, n, 1e-5, 1e-5);
    check("layernorm_rstd", d_rstd, rstd, n, 1e-5, 1e-5);
    /* The backward uses the reference's statistics on both sides. */
    float *d_rmean = dev_from(mean, n), *d_rrstd = dev_from(rstd, n);
    expect_ok(ptc_layernorm_backward_ref(dx, dw, db, g, x, w, mean, rstd, n, c),
              "layernorm_backward_ref");
    expect_ok(ptc_layernorm_backward_cuda(d_dx, d_dw, d_db, d_g, d_x, d_w, d_rmean,
                                          d_rrstd, n, c, stream),
              "layernorm_backward_cuda");
    check("layernorm_dinp", d_dx, dx, n * c, 1e-5, 1e-5);
    check("layernorm_dweight", d_dw, dw, c, 1e-4, 1e-5);
    check("layernorm_dbias", d_db, db, c, 1e-4, 1e-5);
    /* Deterministic: a second run gives the same bits. */
    expect_ok(ptc_layernorm_backward_cuda(NULL, d_dw2, NULL, d_g, d_x, d_w, d_rmean,
                                          d_rrstd, n, c, stream),
              "layernorm_backward_cuda (rerun)");
    /* d_dw2 started from the same initial dw as d_dw. */
    float *dw_first = host_from(d_dw, c);
    check_bits("layernorm_dweight_rerun", d_dw2, dw_first, c);
    free(dw_first);
    cudaFree(d_x); cudaFree(d_w); cudaFree(d_b); cudaFree(d_g); cudaFree(d_out);
    cudaFree(d_mean); cudaFree(d_rstd); cudaFree(d_dx); cudaFree(d_dw);
    cudaFree(d_db); cudaFree(d_dw2); cudaFree(d_rmean); cudaFree(d_rrstd);
    free(x); free(w); free(b); free(g); free(out); free(mean); free(rstd);
    free(dx); free(dw); free(db);
}

static void test_crossentropy(kt_rng *r)
{
    const size_t n = 129, v = 5003;
    float *l = kt_random(n * v, -8, 8, r), *loss = kt_alloc(n);
    float *dl = kt_random(n * v, -1e-3f, 1e-3f, r);
    int32_t *t = malloc(n * sizeof *t);
    if (!t)
        exit(1);
    for (size_t i = 0; i < n; i++)
        t[i] = i % 17 == 3 ? -1 : (int32_t)(kt_next(r) % v);
    float *d_l = dev_from(l, n * v), *d_loss = dev_alloc(n * sizeof(float));
    float *d_dl = dev_from(dl, n * v);
    int32_t *d_t = dev_ids(t, n);
    expect_ok(ptc_crossentropy_forward_ref(loss, l, t, n, v), "crossentropy_forward_ref");
    expect_ok(ptc_crossentropy_forward_cuda(d_loss, d_l, d_t, n, v, stream),
              "crossentropy_forward_cuda");
    check("crossentropy_loss", d_loss, loss, n, 1e-5, 1e-5);
    expect_ok(ptc_crossentropy_backward_ref(dl, l, t, n, v, 1.0f / n),
              "crossentropy_backward_ref");
    expect_ok(ptc_crossentropy_backward_cuda(d_dl, d_l, d_t, n, v, 1.0f / n, stream),
              "crossentropy_backward_cuda");
    check("crossentropy_dlogits", d_dl, dl, n * v, 1e-7, 1e-4);
    cudaFree(d_l); cudaFree(d_loss); cudaFree(d_dl); cudaFree(d_t);
    free(l); free(loss); free(dl); free(t);
}

static void test_adamw_embedding(kt_rng *r)
{
    const size_t n = 100003;
    const ptc_adamw_params hp = {3e-4f, 0.9f, 0.999f, 1e-8f, 0.1f};
    float *p = kt_random(n, -1, 1, r), *m = kt_alloc(n), *v = kt_alloc(n);
    float *g = kt_random(n, -1, 1, r);
    float *d_p = dev_from(p, n), *d_m = dev_from(m, n), *d_v = dev_from(v, n);
    float *d_g = dev_from(g, n);
    for (int t = 1; t <= 3; t++) {
        expect_ok(ptc_adamw_update_ref(p, m, v, g, n, &hp, t), "adamw_update_ref");
        expect_ok(ptc_adamw_update_cuda(d_p, d_m, d_v, d_g, n, &hp, t, stream),
                  "adamw_update_cuda");
    }
    check("adamw_params", d_p, p, n, 1e-6, 1e-5);
    check("adamw_m", d_m, m, n, 1e-6, 1e-5);
    check("adamw_v", d_v, v, n, 1e-6, 1e-5);
    cudaFree(d_p); cudaFree(d_m); cudaFree(d_v); cudaFree(d_g);
    free(p); free(m); free(v); free(g);

    const size_t rows = 512, vocab = 1000, c = 768;
    float *table = kt_random(vocab * c, -1, 1, r), *out = kt_alloc(rows * c);
    float *dout = kt_random(rows * c, -1, 1, r);
    float *dtable = kt_random(vocab * c, -1, 1, r);
    int32_t *ids = malloc(rows * sizeof *ids);
    if (!ids)
        exit(1);
    for (size_t i = 0; i < rows; i++)
        ids[i] = (int32_t)(i % 3 == 0 ? kt_next(r) % 4 : kt_next(r) % vocab);
    float *d_table = dev_from(table, vocab * c), *d_out = dev_alloc(rows * c * sizeof(float));
    float *d_dout = dev_from(dout, rows * c), *d_dtable = dev_from(dtable, vocab * c);
    int32_t *d_ids = dev_ids(ids, rows);
    expect_ok(ptc_embedding_forward_ref(out, ids, table, rows, vocab, c),
              "embedding_forward_ref");
    expect_ok(ptc_embedding_forward_cuda(d_out, d_ids, d_table, rows, vocab, c, stream),
              "embedding_forward_cuda");
    check_bits("embedding_forward", d_out, out, rows * c);
    expect_ok(ptc_embedding_backward_ref(dtable, dout, ids, rows, vocab, c),
              "embedding_backward_ref");
    expect_ok(ptc_embedding_backward_cuda(d_dtable, d_dout, d_ids, rows, vocab, c,
                                          stream),
              "embedding_backward_cuda");
    check_bits("embedding_backward", d_dtable, dtable, vocab * c);
    cudaFree(d_table); cudaFree(d_out); cudaFree(d_dout); cudaFree(d_dtable);
    cudaFree(d_ids);
    free(table); free(out); free(dout); free(dtable); free(ids);
}

int main(void)
{
    int st = gpu_skip_status("kernels_gpu", 1, true);
    if (st)
        return st;
    die_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "kernels_gpu: cublasCreate failed\n");
        return 1;
    }
    kt_rng r = {2024};
    test_matmul(&r);
    test_gelu_residual(&r);
    test_layernorm(&r);
    test_crossentropy(&r);
    test_adamw_embedding(&r);
    die_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cublasDestroy(cublas);
    cudaStreamDestroy(stream);
    printf("kernels_gpu: %s\n", failures ? "FAILED" : "all ops match the references");
    return failures ? 1 : 0;
}
