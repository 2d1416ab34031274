/* The llama-style training state of the MPI benchmarks (bench_ckpt.c,
 * bench_resize.c): fp32 parameters with their two AdamW moments, named as
 * the `llama` rules preset expects. Header-only. */
#ifndef PTC_BENCH_MODEL_H
#define PTC_BENCH_MODEL_H

#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "ptc/layout.h"

#define MAXT 1024

typedef struct model {
    size_t nt;
    ptc_tensor_info ti[MAXT];
    char names[MAXT][96];
} model;

static void model_add(model *m, const char *name, int ndim, int64_t d0, int64_t d1)
{
    if (m->nt + 3 > MAXT) {
        fprintf(stderr, "error: too many tensors\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *kinds[] = {"", ".exp_avg", ".exp_avg_sq"};
    for (int k = 0; k < 3; k++) {
        size_t t = m->nt++;
        snprintf(m->names[t], sizeof m->names[t], "%s%s", name, kinds[k]);
        m->ti[t] = (ptc_tensor_info){.name = m->names[t], .dtype = PTC_DTYPE_F32, .ndim = ndim,
                                     .shape = {d0, d1}};
    }
}

static void model_init(model *m, int layers, int64_t h, int64_t f, int64_t v)
{
    memset(m, 0, sizeof *m);
    char n[96];
    model_add(m, "model.embed_tokens.weight", 2, v, h);
    for (int L = 0; L < layers; L++) {
        static const char *const proj[] = {"self_attn.q_proj", "self_attn.k_proj",
                                           "self_attn.v_proj", "self_attn.o_proj"};
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", L, proj[k]);
            model_add(m, n, 2, h, h);
        }
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj.weight", L);
        model_add(m, n, 2, f, h);
        snprintf(n, sizeof n, "model.layers.%d.mlp.up_proj.weight", L);
        model_add(m, n, 2, f, h);
        snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", L);
        model_add(m, n, 2, h, f);
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", L);
        model_add(m, n, 1, h, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", L);
        model_add(m, n, 1, h, 0);
    }
    model_add(m, "model.norm.weight", 1, h, 0);
    model_add(m, "lm_head.weight", 2, v, h);
}

#endif
