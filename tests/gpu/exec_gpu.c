/* Device-buffer pipeline step: two ranks, one GPU each, run 1F1B with
 * callbacks that write a per-(stage, mb) byte pattern into device buffers
 * with cudaMemset and check what arrives with a copy back. One GPU cannot
 * host both: NCCL refuses two ranks of one communicator on the same device
 * (ncclCommInitRank: invalid usage), so with fewer GPUs than ranks the
 * program exits 77 (skipped; gpu_skip.h). Run by tests/gpu/test_exec_gpu.sh
 * under mpirun on one node (rank = device). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "ptc/exec_model.h"
#include "gpu_skip.h"

#define BYTES 4096

static int check(const void *dev, int want)
{
    unsigned char h[BYTES];
    if (cudaMemcpy(h, dev, BYTES, cudaMemcpyDeviceToHost) != cudaSuccess)
        return ptc_error_set(PTC_E_CUDA, "copy back failed");
    for (int i = 0; i < BYTES; i++)
        if (h[i] != (unsigned char)want)
            return ptc_error_set(PTC_E_INVAL, "byte %d is %d, want %d", i, h[i], want);
    return PTC_OK;
}

static int fwd(void *u, int chunk, int mb, const void *in, void *out)
{
    (void)u;
    (void)chunk;
    if (in)
        PTC_TRY(check(in, 10 + mb));
    if (out && cudaMemset(out, 10 + mb, BYTES) != cudaSuccess)
        return ptc_error_set(PTC_E_CUDA, "memset");
    cudaDeviceSynchronize();
    return PTC_OK;
}

static int bwd(void *u, int chunk, int mb, const void *dout, void *dinp)
{
    (void)u;
    (void)chunk;
    if (dout)
        PTC_TRY(check(dout, 100 + mb));
    if (dinp && cudaMemset(dinp, 100 + mb, BYTES) != cudaSuccess)
        return ptc_error_set(PTC_E_CUDA, "memset");
    cudaDeviceSynchronize();
    return PTC_OK;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int st = gpu_skip_status("exec_gpu", np, rank == 0);
    if (st) {
        MPI_Finalize();
        return st;
    }
    if (cudaSetDevice(rank) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaSetDevice(%d) failed\n", rank, rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ptc_config c;
    ptc_config_parse(&c, "pp=2");
    ptc_sched *s = NULL;
    ptc_sched_gen g = {.kind = PTC_SCHED_1F1B, .ranks = 2, .microbatches = 4};
    ptc_sched_generate(&s, &g);
    ptc_exec_stage fns = {.forward = fwd, .backward = bwd};
    ptc_exec_opts o;
    ptc_exec_opts_init(&o);
    o.act_bytes = BYTES;
    o.device = PTC_EXEC_DEVICE_CUDA;
    o.timeout = 30;
    ptc_exec *e = NULL;
    int rc = ptc_exec_create(&e, s, &c, MPI_COMM_WORLD, &fns, &o);
    for (int k = 0; rc == PTC_OK && k < 3; k++)
        rc = ptc_exec_step(e);
    if (rc != PTC_OK)
        fprintf(stderr, "rank %d: %s\n", rank, ptc_last_error());
    else if (rank == 0)
        printf("exec gpu: 3 steps of 1f1b on device buffers ok\n");
    ptc_exec_destroy(e);
    ptc_sched_destroy(s);
    MPI_Finalize();
    return rc == PTC_OK ? 0 : 1;
}
