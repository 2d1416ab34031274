/* Private layout of the demo model (exec/model/model.c), shared with its
 * CUDA variant (exec/model/model_cuda.c), which builds a host model for
 * the layout, the tensor names and the initial values, then mirrors every
 * chunk on the device. Never installed. */
#ifndef PTC_RUNTIME_MODEL_INTERNAL_H
#define PTC_RUNTIME_MODEL_INTERNAL_H

#include "ptc/exec_model.h"
#include "base/util_internal.h"

#define LN_EPS 1e-5f
#define MODEL_MAX_PARAMS (1 << 20)

/* Offsets (in floats) of one layer's parameters inside its chunk. */
typedef struct layer_off {
    size_t lnw, lnb, w1, b1, w2, b2;
} layer_off;

typedef struct chunk {
    int pipe, stage, l0, l1; /* layers [l0, l1) */
    bool first, last;
    size_t count;            /* floats of parameters */
    size_t ocount;           /* floats of each AdamW moment (ZeRO: this replica's ranges) */
    int rep, nrep;           /* ZeRO: this chunk's place among its replicas, their number */
    float *p, *g, *m, *v;
    size_t emb, nw, nb, head; /* offsets (first / last stage) */
    layer_off *lay;
    /* saved-activation layout per micro-batch (floats) */
    size_t a_x0, a_lay, a_lay_stride, a_head, a_demb, a_total;
    float **act;             /* [mbs] saved activations or NULL */
    int32_t **tok;           /* [mbs] ids (n) then targets (n) */
} chunk;

struct ptc_exec_model {
    ptc_exec_model_cfg cfg;
    int T, t;                /* tensor parallelism: degree, this shard's index */
    size_t fl;               /* columns of up_proj (rows of down_proj) held here */
    MPI_Comm tp_comm;        /* the tensor-parallel group (T > 1) */
    MPI_Comm rep_comm;       /* replicas of every chunk (ZeRO's all-gather) */
    const ptc_sched *s;
    int rank, nch, mbs, S;
    int64_t gmb_base, gmb_total, step;
    ptc_exec_data_fn data;
    void *data_user;
    chunk *ch;
    double *losses;
    ptc_exec_param *params;
    size_t nparams;
    char **names;
    float *scratch;          /* [n, max(H, 4H, V)] x 3 */
    void (*before_update)(void *user); /* exec_model_before_update */
    void *before_update_user;
};

/* Call @p fn(@p user) at the start of every optimizer step, before the
 * parameters and moments change (NULL: none): where a training job waits
 * for a deferred snapshot of its state (ptc_ckpt_stage_defer). */
void exec_model_before_update(ptc_exec_model *x, void (*fn)(void *user), void *user);

/* Saved activations of one layer inside a micro-batch's block `a`. */
typedef struct lay_act {
    float *ln, *xout, *dx2, *dsum, *mean, *rstd, *h, *g, *dh;
} lay_act;

static inline lay_act lay_ptrs(const ptc_exec_model *x, const chunk *k, float *a, int li)
{
    size_t n = (size_t)x->cfg.tokens, H = (size_t)x->cfg.hidden, F = x->fl;
    float *b = a + k->a_lay + k->a_lay_stride * (size_t)li;
    lay_act r;
    r.ln = b;
    r.xout = b + n * H;
    r.dx2 = b + 2 * n * H;
    r.dsum = b + 3 * n * H;
    r.mean = b + 4 * n * H;
    r.rstd = r.mean + n;
    r.h = r.rstd + n;
    r.g = r.h + n * F;
    r.dh = r.g + n * F;
    return r;
}

/* The kernels of the weight-gradient pass, on the host or on the device
 * (ctx: the variant's own state; the host passes NULL). matmul: the weight
 * (and bias, when db is not NULL) gradients of out = x w + b, accumulated;
 * embedding: the table's gradient, accumulated. */
typedef struct model_wgrad_ops {
    int (*matmul)(void *ctx, float *dw, float *db, const float *dout, const float *x,
                  const float *w, size_t n, size_t in, size_t out);
    int (*embedding)(void *ctx, float *dtable, const float *dout, const int32_t *tok, size_t n,
                     size_t vocab, size_t hidden);
} model_wgrad_ops;

/* The weight-gradient half of micro-batch @p mb's backward on chunk @p c
 * (its layout in x->ch[c]): the GEMMs the input pass skipped, on the douts
 * it saved in the block @p a, in the same per-tensor order as the full
 * backward, into @p g from the parameters @p p (the host's or the
 * device's), with the token ids @p tok. PTC_E_INVAL when @p a is NULL (no
 * input pass ran). Both variants of the model run this one walk. */
int model_weight_pass(const ptc_exec_model *x, int c, int mb, float *a, float *g, const float *p,
                      const int32_t *tok, const model_wgrad_ops *ops, void *ctx);

#endif
