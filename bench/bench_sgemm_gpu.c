/* GPU throughput: cuBLAS SGEMM (FP32 arithmetic, no TF32) in GFLOP/s and as
 * a fraction of the device's FP32 peak, for square sizes and for the demo
 * model's / GPT-2's fully connected shapes through ptc_matmul_forward_cuda
 * (the call `ptc train --device cuda` makes, bias kernel included).
 *
 *   bench_sgemm_gpu [--quick] [--device N]
 *
 * FP32 peak, from the device properties:
 *
 *   peak FLOP/s = SMs x FP32 lanes per SM x 2 (an FMA is 2 FLOP) x clock
 *
 * SMs = cudaDevAttrMultiProcessorCount, clock = cudaDevAttrClockRate (the
 * peak clock, kHz), FP32 lanes (FMA per SM per clock) by compute capability:
 * 64 for 6.0, 7.x and 8.0 (P100, V100, T4, A100); 128 for 5.x, 6.1, 6.2,
 * 8.6-8.9, 9.0, 10.x, 12.x (Maxwell, consumer Pascal, Ampere GA10x, Ada,
 * Hopper, Blackwell); 192 for 3.x. E.g. H100 SXM: 132 x 128 x 2 x 1.98 GHz
 * = 66.9 TFLOP/s, NVIDIA's published FP32 figure. Sustained clocks under
 * load may sit below the peak clock, so 100% is not reachable.
 *
 * GFLOP/s = 2 m n k / time per GEMM (CUDA events around a batch of calls
 * after warm-up; best of 3 batches). Each size is checked on a few elements
 * against a double-precision dot product on the host. Without CUDA in the
 * build or without a visible GPU it says so and exits 0. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul.h"
#include "ptc/build_config.h"

#if PTC_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

/* FP32 FMA lanes per SM for compute capability major.minor; 0 if unknown. */
static int fp32_lanes_per_sm(int major, int minor)
{
    switch (major) {
    case 3:
        return 192;
    case 5:
        return 128;
    case 6:
        return minor == 0 ? 64 : 128;
    case 7:
        return 64;
    case 8:
        return minor == 0 ? 64 : 128;
    case 9:
    case 10:
    case 11:
    case 12:
        return 128;
    default:
        return 0;
    }
}

static float *dev_random(size_t n, unsigned *seed, float **host)
{
    float *h = malloc(n * sizeof *h), *d = NULL;
    if (!h)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        h[i] = (float)(*seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    if (cudaMalloc((void **)&d, n * sizeof *d) != cudaSuccess ||
        cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        free(h);
        return NULL;
    }
    *host = h;
    return d;
}

/* Seconds per call of `fn` (best of 3 batches of `reps`). */
typedef int (*gemm_fn)(void *ctx);
static double time_calls(gemm_fn fn, void *ctx, int reps)
{
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        return -1;
    double best = -1;
    for (int i = 0; i < 3; i++)
        if (fn(ctx) != 0) /* warm-up: cuBLAS heuristics, clocks */
            goto out_events;
    for (int round = 0; round < 3; round++) {
        cudaEventRecord(e0, NULL);
        for (int r = 0; r < reps; r++)
            fn(ctx);
        cudaEventRecord(e1, NULL);
        if (cudaEventSynchronize(e1) != cudaSuccess) {
            best = -1;
            goto out_events;
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        double s = ms * 1e-3 / reps;
        if (best < 0 || s < best)
            best = s;
    }
out_events:
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

typedef struct gemm_ctx {
    cublasHandle_t h;
    int m, n, k;
    const float *a, *b, *bias;
    float *c;
} gemm_ctx;

/* Row-major C[m,n] = A[m,k] B[k,n], as column-major C^T = B^T A^T. */
static int run_sgemm(void *p)
{
    gemm_ctx *g = p;
    const float one = 1.0f, zero = 0.0f;
    return cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->m, g->k, &one, g->b, g->n,
                       g->a, g->k, &zero, g->c, g->n) == CUBLAS_STATUS_SUCCESS
               ? 0
               : -1;
}

/* The model's layer: out[m, n] = inp[m, k] W[n, k]^T + bias. */
static int run_matmul(void *p)
{
    gemm_ctx *g = p;
    return ptc_matmul_forward_cuda(g->c, g->a, g->b, g->bias, (size_t)g->m, (size_t)g->k,
                                   (size_t)g->n, g->h, NULL);
}

/* Largest relative error of a few entries against a double dot product.
 * transposed_b: B is [n, k] (the layer's weight) instead of [k, n]. */
static double check(const gemm_ctx *g, const float *ha, const float *hb, const float *hbias,
                    bool transposed_b)
{
    size_t cnt = (size_t)g->m * (size_t)g->n;
    float *hc = malloc(cnt * sizeof *hc);
    if (!hc || cudaMemcpy(hc, g->c, cnt * sizeof *hc, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(hc);
        return INFINITY;
    }
    double worst = 0;
    unsigned s = 99;
    for (int t = 0; t < 16; t++) {
        s = s * 1664525u + 1013904223u;
        int i = (int)(s % (unsigned)g->m);
        s = s * 1664525u + 1013904223u;
        int j = (int)(s % (unsigned)g->n);
        double ref = hbias ? hbias[j] : 0, mag = fabs(ref);
        for (int q = 0; q < g->k; q++) {
            double bv = transposed_b ? hb[(size_t)j * g->k + q] : hb[(size_t)q * g->n + j];
            double term = (double)ha[(size_t)i * g->k + q] * bv;
            ref += term;
            mag += fabs(term);
        }
        double err = fabs(hc[(size_t)i * g->n + j] - ref) / (mag > 0 ? mag : 1);
        worst = fmax(worst, err);
    }
    free(hc);
    return worst;
}

static int bench(int dev, bool quick)
{
    if (cudaSetDevice(dev) != cudaSuccess)
        return -1;
    struct cudaDeviceProp prop;
    int sms = 0, khz = 0, major = 0, minor = 0;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return -1;
    int lanes = fp32_lanes_per_sm(major, minor);
    double peak = (double)sms * lanes * 2.0 * (double)khz * 1e3; /* FLOP/s */
    printf("device %d: %s, compute capability %d.%d, %d SMs x %d FP32 lanes x 2 x %.3f GHz\n",
           dev, prop.name, major, minor, sms, lanes, khz * 1e-6);
    if (lanes)
        printf("FP32 peak (formula above): %.1f GFLOP/s\n", peak * 1e-9);
    else
        printf("FP32 peak: unknown lanes per SM for %d.%d, fraction not reported\n", major,
               minor);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return -1;
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); /* FP32 arithmetic, no TF32 */
    /* {m, n, k, through the layer?} */
    const int shapes[][4] = {{1024, 1024, 1024, 0}, {2048, 2048, 2048, 0},
                             {4096, 4096, 4096, 0}, {8192, 8192, 8192, 0},
                             {8192, 3072, 768, 1},  {8192, 768, 3072, 1},
                             {8192, 2304, 768, 1},  {64, 64, 16, 1}};
    size_t nshapes = sizeof shapes / sizeof shapes[0];
    printf("%-28s %10s %12s %8s %10s\n", "m x k -> n", "ms", "GFLOP/s", "% peak", "rel err");
    int rc = 0;
    unsigned seed = 7;
    for (size_t i = 0; i < nshapes; i++) {
        int m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        bool layer = shapes[i][3];
        if (quick && (m > 2048 || n > 2048) && !layer)
            continue;
        float *ha = NULL, *hb = NULL, *hbias = NULL, *c = NULL;
        float *a = dev_random((size_t)m * k, &seed, &ha);
        float *b = dev_random((size_t)k * n, &seed, &hb);
        float *bias = dev_random((size_t)n, &seed, &hbias);
        if (!a || !b || !bias || cudaMalloc((void **)&c, (size_t)m * n * 4) != cudaSuccess) {
            fprintf(stderr, "bench_sgemm_gpu: allocation failed at %d x %d x %d\n", m, k, n);
            rc = -1;
        } else {
            gemm_ctx g = {h, m, n, k, a, b, bias, c};
            double flop = 2.0 * m * (double)n * k;
            int reps = (int)fmin(1000, fmax(5, 2e12 / flop)); /* ~0.1 s at 20 TFLOP/s */
            double s = time_calls(layer ? run_matmul : run_sgemm, &g, reps);
            double err = s > 0 ? check(&g, ha, hb, layer ? hbias : NULL, layer) : INFINITY;
            char name[64];
            snprintf(name, sizeof name, "%d x %d -> %d%s", m, k, n, layer ? " (layer)" : "");
            if (s <= 0) {
                printf("%-28s failed\n", name);
                rc = -1;
            } else {
                char pct[16] = "-";
                if (lanes)
                    snprintf(pct, sizeof pct, "%.1f", 100.0 * flop / s / peak);
                printf("%-28s %10.4f %12.1f %8s %10.2g\n", name, s * 1e3, flop / s * 1e-9, pct,
                       err);
                if (!(err < 1e-5)) {
                    fprintf(stderr, "bench_sgemm_gpu: wrong result at %s\n", name);
                    rc = -1;
                }
            }
        }
        cudaFree(a);
        cudaFree(b);
        cudaFree(bias);
        cudaFree(c);
        free(ha);
        free(hb);
        free(hbias);
    }
    cublasDestroy(h);
    return rc;
}

static int device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return 0;
    return n;
}
#else
static int device_count(void) { return -1; }
static int bench(int dev, bool quick)
{
    (void)dev, (void)quick;
    return -1;
}
#endif

int main(int argc, char **argv)
{
    bool quick = false;
    int dev = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            dev = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_sgemm_gpu [--quick] [--device N]\n");
            return 2;
        }
    }
    int n = device_count();
    if (n < 0) {
        printf("bench_sgemm_gpu: built without CUDA, nothing measured\n");
        return 0;
    }
    if (n == 0) {
        printf("bench_sgemm_gpu: no GPU visible, nothing measured\n");
        return 0;
    }
    if (dev < 0 || dev >= n) {
        fprintf(stderr, "bench_sgemm_gpu: --device %d: %d device(s)\n", dev, n);
        return 2;
    }
    return bench(dev, quick) == 0 ? 0 : 1;
}
