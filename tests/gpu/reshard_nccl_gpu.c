/* ptc_reshard_device against ptc_reshard_host on the same plans: every
 * byte of every target buffer equal. One process per GPU (mpirun -np N with
 * N <= GPUs on one node, rank = device: NCCL refuses two ranks of one
 * communicator on one device; one process checks the CUDA pack/unpack path
 * alone). Exit 0 on success, 1 on a mismatch or failure, 77 (skipped) with
 * fewer GPUs than processes or without NCCL (gpu_skip.h). */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/build_config.h"
#include "ptc/reshard.h"
#include "gpu_skip.h"

static const char rules_txt[] = "layer blk.{L}.\n"
                                "optim .m\n"
                                "match blk.*.qkv tp=split(0,blocks=3)\n"
                                "match blk.*.row tp=split(1)\n"
                                "match emb tp=split(0) pp=first+last\n";

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, np, ndev = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int st = PTC_WITH_NCCL ? gpu_skip_status("reshard_nccl_gpu", np, me == 0) : GPU_SKIP;
    if (st == GPU_SKIP && !PTC_WITH_NCCL && me == 0)
        printf("reshard_nccl_gpu: skipped: built without NCCL\n");
    if (st) {
        MPI_Finalize();
        return st;
    }
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || cudaSetDevice(me) != cudaSuccess) {
        fprintf(stderr, "rank %d: cudaSetDevice(%d) failed\n", me, me);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ptc_tensor_info t[7] = {
        {.name = "blk.0.qkv", .dtype = PTC_DTYPE_BF16, .ndim = 2, .shape = {99, 65}},
        {.name = "blk.0.qkv.m", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {99, 65}},
        {.name = "blk.0.row", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {33, 130}},
        {.name = "blk.1.qkv", .dtype = PTC_DTYPE_BF16, .ndim = 2, .shape = {99, 65}},
        {.name = "blk.1.row.m", .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {33, 130}},
        {.name = "emb", .dtype = PTC_DTYPE_F16, .ndim = 2, .shape = {1001, 64}},
        {.name = "blk.2.row", .dtype = PTC_DTYPE_F64, .ndim = 2, .shape = {7, 9}},
    };
    size_t nt = 7;
    ptc_rules *rules;
    ptc_rules_parse(&rules, rules_txt, strlen(rules_txt), "t");
    ptc_reshard_nccl *ctx = NULL;
    MPI_Comm comm = MPI_COMM_WORLD;
    int rc = ptc_reshard_nccl_create(&ctx, comm);
    if (rc != PTC_OK) {
        fprintf(stderr, "nccl: %s\n", ptc_last_error());
        return 1;
    }
    const char *cfgs[] = {"dp=1", "tp=2", "pp=2", "dp=2,zero=1", "tp=2,pp=2", "tp=4", "dp=4,zero=1"};
    long bad = 0, cases = 0;
    for (size_t i = 0; i < 7; i++)
        for (size_t j = 0; j < 7; j++) {
            ptc_config a, b;
            ptc_config_parse(&a, cfgs[i]);
            ptc_config_parse(&b, cfgs[j]);
            if (ptc_config_world(&a) > np || ptc_config_world(&b) > np)
                continue;
            ptc_layout *la, *lb;
            ptc_layout_create(&la, t, nt, rules, &a);
            ptc_layout_create(&lb, t, nt, rules, &b);
            ptc_plan *p;
            ptc_plan_options o = {.hosts = 1, .no_reuse = (i == j)};
            ptc_plan_create(&p, la, lb, &o);
            void *hs[7] = {0}, *hd[7] = {0}, *ds[7] = {0}, *dd[7] = {0};
            size_t ls[7] = {0}, ld[7] = {0};
            for (size_t k = 0; k < nt; k++) {
                ptc_shard s1, s2;
                ptc_layout_shard(la, k, me, &s1);
                ptc_layout_shard(lb, k, me, &s2);
                size_t es = ptc_dtype_size(t[k].dtype);
                if (me < ptc_config_world(&a) && s1.present) {
                    ls[k] = es;
                    for (int d = 0; d < s1.ndim; d++)
                        ls[k] *= (size_t)s1.shape[d];
                    hs[k] = malloc(ls[k] + 1);
                    for (size_t q = 0; q < ls[k]; q++)
                        ((unsigned char *)hs[k])[q] = (unsigned char)(q * 7 + k + (size_t)me * 3);
                    cudaMalloc(&ds[k], ls[k] + 1);
                    cudaMemcpy(ds[k], hs[k], ls[k], cudaMemcpyHostToDevice);
                }
                if (me < ptc_config_world(&b) && s2.present) {
                    ld[k] = es;
                    for (int d = 0; d < s2.ndim; d++)
                        ld[k] *= (size_t)s2.shape[d];
                    hd[k] = calloc(ld[k] + 1, 1);
                    cudaMalloc(&dd[k], ld[k] + 1);
                    cudaMemset(dd[k], 0, ld[k] + 1);
                }
            }
            /* the source pattern is per rank, not per element: compare the
             * device result with the host executor's, byte for byte */
            if (ptc_reshard_host(p, comm, (const void *const *)hs, hd) != PTC_OK ||
                ptc_reshard_device(p, ctx, (const void *const *)ds, dd, NULL) != PTC_OK) {
                fprintf(stderr, "rank %d: %s\n", me, ptc_last_error());
                bad++;
            }
            for (size_t k = 0; k < nt; k++) {
                if (hd[k]) {
                    unsigned char *back = malloc(ld[k] + 1);
                    cudaMemcpy(back, dd[k], ld[k], cudaMemcpyDeviceToHost);
                    bad += memcmp(back, hd[k], ld[k]) != 0;
                    free(back);
                }
                free(hs[k]);
                free(hd[k]);
                cudaFree(ds[k]);
                cudaFree(dd[k]);
            }
            cases++;
            ptc_plan_destroy(p);
            ptc_layout_destroy(la);
            ptc_layout_destroy(lb);
        }
    long all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0)
        printf("reshard_nccl_gpu: %ld cases on %d processes, %ld mismatching tensors\n", cases, np,
               all);
    ptc_reshard_nccl_destroy(ctx);
    ptc_rules_destroy(rules);
    MPI_Finalize();
    return all ? 1 : 0;
}
