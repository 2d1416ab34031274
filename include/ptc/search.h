/**
 * @file search.h
 * @brief Configuration search: an analytical cost model of data, tensor and
 *        pipeline parallelism, ZeRO and pipeline schedules, and the search
 *        behind `ptc suggest`.
 *
 * The model is described as plain data: a list of tensors (shape, dtype,
 * tensor-parallel split, pipeline placement, layer, parameter or optimizer
 * state, and what the tensor does: matrix product, embedding lookup or
 * element-wise) plus a few transformer-wide figures (sequence length,
 * hidden width, attention FLOPs, activation bytes). ptc_cost_model_from_spec()
 * builds that description from a transformer spec; a stored version is turned
 * into one by the store adapter of the command (exec/model/search_store.c, ptc/search_store.h).
 *
 * For one configuration (dp, tp, pp, zero, schedule, micro-batches, chunks,
 * k) ptc_cost_evaluate() predicts the step time and its parts (compute,
 * pipeline bubble, tensor-, data- and pipeline-parallel communication) and
 * the memory per GPU (parameters, gradients, optimizer state, activations).
 * Collectives are costed with an alpha-beta model on the links they cross
 * under DESIGN.md's rank order `rank = (pp_i*D + dp_i)*T + tp_i` with
 * `gpus_per_host` consecutive ranks per host; the bubble and the peak
 * activations come from the schedule simulator (ptc/sched.h).
 * ptc_search_run() finds the fastest configuration that fits in memory by
 * coordinate descent with restarts, or by trying every valid configuration.
 * Every formula and assumption: docs/search.md.
 *
 * Units: seconds, bytes, FLOP/s, bytes/s throughout.
 *
 * @note Thread safety: a ptc_cost_model is immutable after creation and may
 *       be shared by any number of threads (evaluations and searches keep
 *       their caches in their own call frames / result objects). A
 *       ptc_search_result is immutable after ptc_search_run() returns; any
 *       number of threads may read it. All other functions are pure and safe.
 */
#ifndef PTC_SEARCH_H
#define PTC_SEARCH_H

#include "ptc/box.h"
#include "ptc/dtype.h"
#include "ptc/error.h"
#include "ptc/sched.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model description ------------------------------------------------------ */

/** Pipeline placement of a described tensor (as the placement rules' pp=). */
typedef enum ptc_cost_pp {
    PTC_COST_PP_LAYER = 0,      /**< on the stage that owns `layer` */
    PTC_COST_PP_FIRST = 1,      /**< stage 0 */
    PTC_COST_PP_LAST = 2,       /**< the last stage */
    PTC_COST_PP_FIRST_LAST = 3, /**< a replica on the first and the last stage */
    PTC_COST_PP_ALL = 4,        /**< every pipeline rank */
} ptc_cost_pp;

/** What a described tensor is. */
typedef enum ptc_cost_kind {
    PTC_COST_PARAM = 0, /**< parameter (has a gradient) */
    PTC_COST_OPTIM = 1, /**< optimizer state / fp32 master (sharded by zero=1) */
} ptc_cost_kind;

/** What a parameter does in the forward pass (decides FLOPs and the
 * tensor-parallel collectives). */
typedef enum ptc_cost_op {
    PTC_COST_OP_OTHER = 0,  /**< element-wise (norms, biases): no FLOPs counted */
    PTC_COST_OP_MATMUL = 1, /**< a 2-D weight of a matrix product: 2*numel FLOPs
                                 per token forward, 4*numel backward */
    PTC_COST_OP_LOOKUP = 2, /**< an embedding table [rows, width]: a lookup */
    PTC_COST_OP_TIED = 3,   /**< a tied embedding [vocab, width]: a lookup on
                                 the first stage and the output matrix product
                                 on the last (pp must be FIRST_LAST) */
} ptc_cost_op;

/** One tensor of a model description (small value type). */
typedef struct ptc_cost_tensor {
    const char *name; /**< for messages only; may be NULL; copied */
    ptc_dtype dtype;  /**< stored dtype (memory) */
    int ndim;         /**< 0..PTC_MAX_DIMS */
    int64_t shape[PTC_MAX_DIMS];
    int tp_dim;       /**< split dimension, or -1 for tp=replicate */
    int tp_blocks;    /**< equal blocks of the split dimension (fused QKV);
                           0 or 1: none. Each block is split with the split
                           rule, so a rank holds blocks*ceil(extent/blocks/T) */
    ptc_cost_pp pp;
    int64_t layer;    /**< layer index for PTC_COST_PP_LAYER, else ignored */
    ptc_cost_kind kind;
    ptc_cost_op op;   /**< PTC_COST_PARAM only; optimizer state has no op */
    int in_dim;       /**< MATMUL: the contraction (input-feature) dimension,
                           1 for torch.nn.Linear [out,in], 0 for a GPT-2 Conv1D
                           [in,out]. LOOKUP/TIED: the vocabulary dimension
                           (0 for [vocab, width]). Splitting in_dim makes a
                           partial sum (row parallel); splitting the other
                           dimension splits the output (column parallel). */
} ptc_cost_tensor;

/** Model-wide figures that the tensors do not carry. */
typedef struct ptc_cost_model_info {
    int64_t seq;    /**< tokens per sequence (>= 1) */
    int64_t hidden; /**< width of the activation that crosses pipeline
                         stages (elements per token, >= 1) */
    int64_t heads, kv_heads; /**< attention heads (0: no attention); tp must
                                  divide both when they are > 0 */
    ptc_dtype act_dtype;     /**< activations, p2p and tp collectives */
    ptc_dtype grad_dtype;    /**< gradients and the dp reduction */
    /** Optimizer state bytes per parameter element, used only when the
     * description lists no PTC_COST_OPTIM tensor (12 for Adam with an fp32
     * master of 16-bit parameters, 8 for Adam on fp32 parameters). */
    double optim_bytes_per_param;
    /** Forward FLOPs per token per layer besides the matrix products
     * (attention scores and weighted sum: 4*seq*hidden), split over tp. */
    double attn_flops;
    /** Extra backward FLOPs per token per layer for recomputation (selective
     * recomputation redoes the attention core: attn_flops), split over tp. */
    double recompute_flops;
    /** Activation bytes per token held per layer from a micro-batch's
     * forward to its backward: act_fixed + act_split / tp. */
    double act_fixed, act_split;
    /** Activation bytes per token held on the first stage (embedding
     * output), the last stage (logits: divided by tp) and every stage (its
     * input), besides the layers. */
    double act_first, act_last_split, act_stage;
} ptc_cost_model_info;

/** A model description (opaque, immutable once created). */
typedef struct ptc_cost_model ptc_cost_model;

/**
 * Create a model description from tensors.
 * Layers are the distinct `layer` values of PTC_COST_PP_LAYER tensors, which
 * must be 0..L-1 (L >= 1). A tensor's name is used only in messages.
 * @param t    @p n tensors (copied, names too)
 * @param info model-wide figures (copied)
 * @return PTC_OK; PTC_E_INVAL naming the first bad tensor or field (bad
 *         shape, split dimension, op without a 2-D shape, TIED not on
 *         FIRST_LAST, layer gaps, seq/hidden < 1, no layer at all);
 *         PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_cost_model_create(ptc_cost_model **out, const ptc_cost_tensor *t, size_t n,
                                  const ptc_cost_model_info *info);

/** Free; NULL is a no-op. */
PTC_API void ptc_cost_model_destroy(ptc_cost_model *m);

/** @return the number of layers L. */
PTC_API int64_t ptc_cost_model_layers(const ptc_cost_model *m);

/** @return the number of parameter elements (kind PARAM; a FIRST_LAST
 * tensor counted once). */
PTC_API double ptc_cost_model_params(const ptc_cost_model *m);

/** @return the model-wide figures (owned by @p m, valid while it lives). */
PTC_API const ptc_cost_model_info *ptc_cost_model_get_info(const ptc_cost_model *m);

/** @return the number of tensors of the description. */
PTC_API size_t ptc_cost_model_count(const ptc_cost_model *m);

/** Tensor @p i of the description, as created (names copied); owned by
 * @p m, valid while it lives; NULL when @p i >= ptc_cost_model_count(). */
PTC_API const ptc_cost_tensor *ptc_cost_model_tensor(const ptc_cost_model *m, size_t i);

/* ---- transformer specs ------------------------------------------------------ */

/** Spec families. */
typedef enum ptc_search_family {
    PTC_SEARCH_GPT = 0, /**< GPT decoder (Megatron-LM layout, GELU MLP) */
    PTC_SEARCH_MLP = 1, /**< the demo model of `ptc train` (exec.h) */
} ptc_search_family;

/** Recomputation assumed by a GPT spec's activation figures. */
typedef enum ptc_search_recompute {
    PTC_SEARCH_RECOMPUTE_SELECTIVE = 0, /**< sequence parallel + selective
                                             recomputation (default) */
    PTC_SEARCH_RECOMPUTE_NONE = 1,      /**< every activation kept */
    PTC_SEARCH_RECOMPUTE_FULL = 2,      /**< only each layer's input kept;
                                             the forward is run twice */
} ptc_search_recompute;

/** A transformer spec (small value type). */
typedef struct ptc_search_spec {
    ptc_search_family family;
    int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq;
    ptc_search_recompute recompute;
} ptc_search_spec;

/**
 * Parse `gpt:layers=L,hidden=H,heads=A,vocab=V,seq=S[,kv_heads=K][,ffn=F]
 * [,recompute=selective|none|full]` (ffn defaults to 4H, kv_heads to A) or
 * the demo model's `mlp:layers=L,hidden=H,vocab=V[,tokens=N]` (seq = tokens,
 * default 8; hidden default 16, vocab 32, layers 4 as in `ptc train`).
 * @return PTC_OK or PTC_E_INVAL with a one-line message (unknown family or
 *         key, missing key, a value < 1 or over 2^40, heads not dividing
 *         hidden, kv_heads not dividing heads).
 */
PTC_API int ptc_search_spec_parse(ptc_search_spec *out, const char *text);

/**
 * Build the description of a spec. GPT: per layer a fused QKV weight
 * [H+2*K*H/A, H] (column parallel) and bias, an output projection [H,H]
 * (row parallel) and bias, fc1 [F,H] (column) and bias, fc2 [H,F] (row) and
 * bias, two LayerNorms; a vocabulary-parallel embedding [V,H] and learned
 * positions [S,H] on the first stage, the final LayerNorm and an untied
 * output layer [V,H] on the last; BF16 parameters and gradients, 12 bytes of
 * optimizer state per parameter; activations per the recompute setting
 * (docs/search.md). MLP: the demo model's F32 tensors (replicated over tp
 * unless split like a Megatron MLP), AdamW state 8 bytes per parameter and
 * the exact activation block the demo model keeps per micro-batch.
 * @return PTC_OK, PTC_E_INVAL (spec invalid) or PTC_E_NOMEM.
 */
PTC_API int ptc_cost_model_from_spec(ptc_cost_model **out, const ptc_search_spec *spec);

/* ---- cluster, job, configuration --------------------------------------------- */

/** The cluster. */
typedef struct ptc_search_cluster {
    int gpus;             /**< GPUs to use (all of them: D*T*P == gpus) */
    int gpus_per_host;    /**< G: ranks r with the same r / G share a host */
    double mem_bytes;     /**< memory per GPU available to the job */
    double flops;         /**< achievable FLOP/s per GPU */
    double intra_lat, intra_bw; /**< link inside a host: alpha (s), bytes/s */
    double inter_lat, inter_bw; /**< link between hosts, per GPU */
} ptc_search_cluster;

/** Defaults: 8 GPUs, 8 per host, 80 GiB, 150 TFLOP/s, intra 300 GB/s
 * and 2 us, inter 25 GB/s and 5 us (an A100-80GB DGX cluster). */
PTC_API void ptc_search_cluster_init(ptc_search_cluster *c);

/** The training job. */
typedef struct ptc_search_job {
    int64_t global_batch; /**< sequences per optimizer step (>= 1) */
    /** Largest micro-batch size (sequences) tried; 0: no limit. */
    int64_t max_mb_size;
    /** Schedule kinds tried: bit (1u << ptc_sched_kind_id); 0: all. */
    unsigned kinds;
    /** Do not try zero=1 (systems without a sharded optimizer). */
    bool no_zero;
    /** The gradient reduction overlaps the last micro-batch's backward
     * (Megatron-LM's overlapped gradient reduction, PyTorch DDP buckets):
     * only max(reduction - that backward, reduction / layers on the rank)
     * adds to the step. false: it starts after the last backward, as in
     * PTC's runtime (exec.h). */
    bool dp_overlap;
} ptc_search_job;

/** Defaults: global batch 1, no micro-batch limit, every kind, zero
 * allowed, no overlap of the gradient reduction. */
PTC_API void ptc_search_job_init(ptc_search_job *j);

/** A configuration (small value type). */
typedef struct ptc_search_config {
    int dp, tp, pp, zero;
    ptc_sched_kind_id schedule; /**< 1f1b when pp == 1 */
    int microbatches;           /**< M per data-parallel replica */
    int mb_size;                /**< sequences per micro-batch: B = D*M*mb_size */
    int chunks;                 /**< V: interleaved; 2 for zb-v; else 1 */
    int k;                      /**< kfkb group size; else 0 */
} ptc_search_config;

/**
 * Format as `dp=D,tp=T,pp=P,zero=Z schedule=K microbatches=M mb_size=B`
 * (plus ` chunks=V` for interleaved, ` k=K` for kfkb).
 * @return PTC_OK or PTC_E_RANGE if @p cap is too small (128 always fits).
 */
PTC_API int ptc_search_config_format(const ptc_search_config *c, char *buf, size_t cap);

/** Predicted figures of one configuration. Times are per optimizer step. */
typedef struct ptc_cost_result {
    double step_time;  /**< = compute + tp_comm + bubble + pp_comm + dp_comm */
    double compute;    /**< the busiest pipeline rank's FLOP time */
    double tp_comm;    /**< its tensor-parallel collectives */
    double bubble;     /**< idle time of the schedule without p2p costs */
    double pp_comm;    /**< what p2p transfers add to the makespan */
    double dp_comm;    /**< gradient reduction not hidden behind the backward */
    double stage_f, stage_b, stage_w; /**< the simulator's whole-stage costs */
    double makespan;   /**< simulated pipeline time */
    double peak_activations; /**< largest simulator peak over ranks
                                  (whole-stage units) */
    double mem;        /**< bytes per GPU on the fullest rank: the sum below */
    double mem_params, mem_grads, mem_optim, mem_act;
    int mem_rank;      /**< pipeline rank with the most memory */
    bool fits;         /**< mem <= cluster mem_bytes */
    double shortfall;  /**< mem - mem_bytes when it does not fit, else 0 */
    bool pp_inter, tp_inter, dp_inter; /**< the collective crosses hosts */
} ptc_cost_result;

/**
 * Predict a configuration's step time and memory.
 * @return PTC_OK; PTC_E_CONFIG with a one-line reason when the configuration
 *         is not valid for this model, cluster and batch (D*T*P != gpus,
 *         D*M*mb_size != global batch, tp not dividing heads or a split
 *         layer tensor, more stages than layers, a schedule's requirement);
 *         PTC_E_INVAL (bad cluster figures); PTC_E_NOMEM.
 */
PTC_API int ptc_cost_evaluate(const ptc_cost_model *m, const ptc_search_cluster *c,
                              const ptc_search_job *j, const ptc_search_config *cfg,
                              ptc_cost_result *out);

/* ---- search ------------------------------------------------------------------ */

/** Search options. */
typedef struct ptc_search_opts {
    int top;         /**< best configurations kept (>= 1; default 5) */
    int rejected;    /**< fastest configurations rejected for memory kept
                          (default 5) */
    bool exhaustive; /**< evaluate every valid configuration */
    int restarts;    /**< coordinate-descent starting points (default 6) */
    uint64_t seed;   /**< for the random starting points (default 1) */
} ptc_search_opts;

/** Fill the defaults. */
PTC_API void ptc_search_opts_init(ptc_search_opts *o);

/** A configuration with its prediction. */
typedef struct ptc_search_entry {
    ptc_search_config config;
    ptc_cost_result cost;
} ptc_search_entry;

/** Search outcome (opaque, immutable). */
typedef struct ptc_search_result ptc_search_result;

/**
 * Find the fastest configurations of @p m on @p c for @p j that fit in
 * memory. Coordinate descent over (tp, pp, micro-batch size, schedule,
 * zero) from several starting points; or every valid configuration with
 * `exhaustive`. When descent finds nothing that fits, every configuration
 * is tried before answering that none fits. Deterministic for given inputs.
 * This is the call an elastic controller makes when its slots change.
 * @return PTC_OK (also when no configuration fits: see
 *         ptc_search_result_count() and ptc_search_result_closest());
 *         PTC_E_CONFIG when no configuration is valid at all (e.g. gpus
 *         that no tp*pp divides with the batch), with the reason;
 *         PTC_E_INVAL (gpus < 1, bad cluster figures, global batch < 1);
 *         PTC_E_NOMEM. On failure *out is NULL.
 */
PTC_API int ptc_search_run(ptc_search_result **out, const ptc_cost_model *m,
                           const ptc_search_cluster *c, const ptc_search_job *j,
                           const ptc_search_opts *o);

/** Free; NULL is a no-op. */
PTC_API void ptc_search_result_destroy(ptc_search_result *r);

/** @return the number of fitting configurations kept (<= top), best first
 * (step time, then memory, then the configuration's order). */
PTC_API size_t ptc_search_result_count(const ptc_search_result *r);

/** @return entry @p i (best first); owned by @p r, valid while it lives;
 * NULL if out of range. */
PTC_API const ptc_search_entry *ptc_search_result_entry(const ptc_search_result *r, size_t i);

/** @return the number of kept configurations rejected for memory: the
 * fastest ones that are faster than the best fitting one (or all, fastest
 * first, when none fits), at most opts.rejected. */
PTC_API size_t ptc_search_result_rejected_count(const ptc_search_result *r);

/** @return rejected entry @p i (fastest first) or NULL; owned by @p r. */
PTC_API const ptc_search_entry *ptc_search_result_rejected(const ptc_search_result *r,
                                                           size_t i);

/** @return the evaluated configuration with the smallest memory shortfall
 * when none fits; NULL when some configuration fits. Owned by @p r. */
PTC_API const ptc_search_entry *ptc_search_result_closest(const ptc_search_result *r);

/** Counters of a search. */
typedef struct ptc_search_stats {
    size_t evaluated;     /**< distinct configurations costed */
    size_t fitting;       /**< of those, fitting in memory */
    size_t rejected;      /**< of those, rejected for memory */
    size_t simulations;   /**< schedule simulations run (cache misses) */
    bool exhaustive;      /**< every valid configuration was tried */
    double seconds;       /**< wall time of the search */
} ptc_search_stats;

/** Counters of the search that made @p r. */
PTC_API void ptc_search_result_stats(const ptc_search_result *r, ptc_search_stats *st);

#ifdef __cplusplus
}
#endif
#endif
