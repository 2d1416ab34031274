/* GEMM throughput of the fully connected layer's forward pass: the OpenBLAS
 * path (ptc_matmul_forward_cpu) against the plain reference loop
 * (ptc_matmul_forward_ref), for transformer-like shapes (GPT-2 small: 768
 * channels, 4x MLP, fused QKV). With a CUDA build and a visible GPU, also
 * cuBLAS (ptc_matmul_forward_cuda); otherwise that column reads "-".
 *
 *   bench_gemm [--quick] [--rows N]
 *
 * Prints one line per shape: GFLOP/s (2*n*c*oc per pass) of each path and
 * the cblas/naive ratio, plus the largest |cblas - ref| as a sanity check. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/matmul.h"
#include "ptc/build_config.h"

#if PTC_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_buf(size_t n, unsigned *seed)
{
    float *p = malloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (float)(*seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    return p;
}

#if PTC_WITH_CUDA
/* cuBLAS GFLOP/s for one shape, or a negative value when no GPU is usable. */
static double bench_cuda(const float *inp, const float *w, const float *b,
                         size_t n, size_t c, size_t oc)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        return -1.0;
    double gflops = -1.0;
    float *d_inp = NULL, *d_w = NULL, *d_b = NULL, *d_out = NULL;
    cublasHandle_t h = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaMalloc((void **)&d_inp, n * c * 4) != cudaSuccess ||
        cudaMalloc((void **)&d_w, oc * c * 4) != cudaSuccess ||
        cudaMalloc((void **)&d_b, oc * 4) != cudaSuccess ||
        cudaMalloc((void **)&d_out, n * oc * 4) != cudaSuccess ||
        cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        goto out_free;
    cudaMemcpy(d_inp, inp, n * c * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_w, w, oc * c * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_b, b, oc * 4, cudaMemcpyHostToDevice);
    if (ptc_matmul_forward_cuda(d_out, d_inp, d_w, d_b, n, c, oc, h, NULL) != 0)
        goto out_free;
    const int reps = 50;
    cudaEventRecord(e0, NULL);
    for (int r = 0; r < reps; r++)
        ptc_matmul_forward_cuda(d_out, d_inp, d_w, d_b, n, c, oc, h, NULL);
    cudaEventRecord(e1, NULL);
    if (cudaEventSynchronize(e1) != cudaSuccess)
        goto out_free;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    gflops = 2.0 * (double)n * (double)c * (double)oc * reps / (ms * 1e-3) / 1e9;
out_free:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (h)
        cublasDestroy(h);
    cudaFree(d_inp);
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_out);
    return gflops;
}
#else
static double bench_cuda(const float *inp, const float *w, const float *b,
                         size_t n, size_t c, size_t oc)
{
    (void)inp, (void)w, (void)b, (void)n, (void)c, (void)oc;
    return -1.0; /* built without CUDA */
}
#endif

int main(int argc, char **argv)
{
    size_t rows = 512;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            rows = 64;
        } else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
            rows = strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: bench_gemm [--quick] [--rows N]\n");
            return 2;
        }
    }
    /* (c, oc): attention projection, fused QKV, MLP up, MLP down. */
    const size_t shapes[][2] = {{768, 768}, {768, 2304}, {768, 3072}, {3072, 768}};
    printf("%-22s %12s %12s %8s %12s %10s\n", "n x c -> oc", "naive GF/s",
           "cblas GF/s", "ratio", "cuBLAS GF/s", "max|diff|");
    unsigned seed = 12345;
    int rc = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        size_t n = rows, c = shapes[s][0], oc = shapes[s][1];
        float *inp = random_buf(n * c, &seed), *w = random_buf(oc * c, &seed);
        float *b = random_buf(oc, &seed);
        float *out_ref = malloc(n * oc * 4), *out_blas = malloc(n * oc * 4);
        if (!out_ref || !out_blas)
            return 1;
        double flop = 2.0 * (double)n * (double)c * (double)oc;

        double t0 = now_s();
        if (ptc_matmul_forward_ref(out_ref, inp, w, b, n, c, oc) != 0)
            return 1;
        double t_ref = now_s() - t0;

        if (ptc_matmul_forward_cpu(out_blas, inp, w, b, n, c, oc) != 0)
            return 1; /* warm-up: thread pool start, page faults */
        int reps = 0;
        t0 = now_s();
        double t_blas;
        do {
            ptc_matmul_forward_cpu(out_blas, inp, w, b, n, c, oc);
            reps++;
            t_blas = now_s() - t0;
        } while (t_blas < 0.3 && reps < 1000);
        t_blas /= reps;

        double max_diff = 0;
        for (size_t i = 0; i < n * oc; i++)
            max_diff = fmax(max_diff, fabs((double)out_blas[i] - out_ref[i]));
        if (!(max_diff < 1e-3)) {
            fprintf(stderr, "bench_gemm: cblas and reference disagree (%g)\n",
                    max_diff);
            rc = 1;
        }
        double gf_cuda = bench_cuda(inp, w, b, n, c, oc);
        char cuda_col[32];
        if (gf_cuda < 0)
            snprintf(cuda_col, sizeof cuda_col, "-");
        else
            snprintf(cuda_col, sizeof cuda_col, "%.1f", gf_cuda);
        char shape[64];
        snprintf(shape, sizeof shape, "%zu x %zu -> %zu", n, c, oc);
        printf("%-22s %12.2f %12.1f %7.1fx %12s %10.2g\n", shape,
               flop / t_ref / 1e9, flop / t_blas / 1e9, t_ref / t_blas,
               cuda_col, max_diff);
        free(inp); free(w); free(b); free(out_ref); free(out_blas);
    }
    return rc;
}
