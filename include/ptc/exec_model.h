/**
 * @file exec_model.h
 * @brief The demo model of `ptc train` (exec/model/): a small transformer-
 *        style MLP whose pipeline stages plug into the runtime of
 *        ptc/exec.h, on the CPU (OpenBLAS) or on a CUDA device (cuBLAS).
 *
 * @note Thread safety: a ptc_exec_model and a ptc_exec_model_cuda are
 *       externally synchronised and must be used from the thread that
 *       initialised MPI (their callbacks run inside ptc_exec_step()).
 */
#ifndef PTC_EXEC_MODEL_H
#define PTC_EXEC_MODEL_H

#include "ptc/exec.h"
#include "ptc/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- demo model ----------------------------------------------------------------- */

/** Demo model shape: embedding, L blocks x + W2 gelu(W1 LN(x) + b1) + b2,
 * final LayerNorm, lm_head, softmax cross-entropy.
 *
 * Tensor parallelism (Megatron-style, @ref tp > 1): up_proj (W1, b1) is
 * column-parallel — shard t holds rows part t of T of its 4H outputs (the
 * split rule) — and down_proj (W2) row-parallel — the same part of its 4H
 * inputs; down_proj's output is all-reduced over the tensor-parallel group
 * in the forward (then its replicated bias added) and up_proj's input
 * gradient in the backward. LayerNorms, down_proj's bias, the embedding and
 * the head are replicated: every shard computes them alike. This is
 * exactly the placement of the `ptc-mlp` rules preset (docs/rules.md).
 *
 * ZeRO-1 (@ref zero): each chunk's AdamW moments are held only for this
 * replica's flat ranges of each tensor — part @c rep of @c nrep of the
 * tensor's local elements by the split rule, as `kind=optim` placements of
 * a zero=1 configuration define them — and after the update every replica's
 * ranges are all-gathered over the replicas' communicator. */
typedef struct ptc_exec_model_cfg {
    int layers, hidden, vocab;
    int tokens;        /**< tokens (rows) per micro-batch */
    float lr;          /**< AdamW learning rate (default 1e-3) */
    uint64_t seed;     /**< parameter initialisation */
    int tp;            /**< tensor-parallel degree T (0 or 1: none) */
    int tp_rank;       /**< this shard's index in its tensor-parallel group */
    bool zero;         /**< ZeRO-1: AdamW moments sharded over the replicas */
    int dp;            /**< data-parallel degree D (ZeRO; 0: 1) */
    int dp_rank;       /**< this shard's data-parallel index (ZeRO) */
    /** Layers per stage (a configuration's layers=), @ref nstage_layers of
     * them, one per stage of the schedule, summing to @ref layers; borrowed
     * during create. 0 / NULL: the default rule of ptc_config_stage_of_layer. */
    const uint32_t *stage_layers;
    int nstage_layers;
} ptc_exec_model_cfg;

/** Parse `mlp:layers=L,hidden=H,vocab=V[,tokens=N]` into @p m (other fields
 * keep their values). @return PTC_OK or PTC_E_INVAL naming the bad part. */
PTC_API int ptc_exec_model_parse(ptc_exec_model_cfg *m, const char *text);

/** Opaque model shard (the chunks of one pipeline rank). */
typedef struct ptc_exec_model ptc_exec_model;

/** Where a micro-batch's tokens come from: fill @p ids and @p targets (n
 * each) for global micro-batch @p gmb of step @p step. */
typedef int (*ptc_exec_data_fn)(void *user, int64_t step, int64_t gmb,
                                int32_t *ids, int32_t *targets, int n);

/**
 * Build the shard of pipeline rank @p rank of @p s: chunk c holds global
 * stage g = (pipe, stage) with layer l on stage ptc_config_stage_of_layer
 * (pp = stages), the embedding on stage 0 and the head on the last stage.
 * Parameters are initialised from (seed, tensor name), so every shard of
 * every layout starts from the same model.
 * @param gmb_base   global index of this replica's micro-batch 0
 * @param gmb_total  micro-batches per step over all replicas (loss scale)
 * @return PTC_OK, PTC_E_INVAL, PTC_E_CONFIG or PTC_E_NOMEM.
 */
PTC_API int ptc_exec_model_create(ptc_exec_model **out,
                                  const ptc_exec_model_cfg *m,
                                  const ptc_sched *s, int rank, int64_t gmb_base,
                                  int64_t gmb_total, ptc_exec_data_fn data,
                                  void *data_user);
/** Free; NULL is a no-op. */
PTC_API void ptc_exec_model_destroy(ptc_exec_model *x);
/** The callbacks (user = @p x). */
PTC_API void ptc_exec_model_stage(ptc_exec_model *x, ptc_exec_stage *out);
/** Bytes of a boundary activation: tokens * hidden * 4. */
PTC_API size_t ptc_exec_model_act_bytes(const ptc_exec_model_cfg *m);
/** Set the step number used for data and AdamW's t (t = step + 1). */
PTC_API void ptc_exec_model_set_step(ptc_exec_model *x, int64_t step);
/** Mean loss of each of this shard's micro-batches of the last step
 * (micro-batch order; 0 where this shard has no last stage). Owned by @p x. */
PTC_API const double *ptc_exec_model_losses(const ptc_exec_model *x, int *n);

/** A parameter tensor of the shard (F32, row-major) and its AdamW moments. */
typedef struct ptc_exec_param {
    const char *name;  /**< llama-style name, e.g. model.layers.3.mlp.up_proj.weight */
    int ndim;
    int64_t shape[2];  /**< this shard's local shape */
    float *data;       /**< owned by the model */
    int pipe, stage, chunk;
    int64_t global_shape[2]; /**< the whole tensor's shape */
    int64_t global_offset[2]; /**< where the local block starts in it (row, column) */
    /** The AdamW moments held here: elements [optim_offset, optim_offset +
     * optim_count) of the local tensor viewed flat (all of it without ZeRO),
     * owned by the model. */
    float *exp_avg, *exp_avg_sq;
    int64_t optim_offset, optim_count;
    int rep, nrep;     /**< ZeRO: the replica index and count of its chunk */
} ptc_exec_param;

/** Parameters of the shard: @p *n entries, owned by @p x. Their data and
 * moments may be written (a loaded checkpoint) between steps. */
PTC_API const ptc_exec_param *ptc_exec_model_params(const ptc_exec_model *x,
                                                    size_t *n);

/**
 * Every tensor of the whole model of @p m, in its canonical order (the
 * embedding, each layer's six, the final norm's two, the head), F32 with
 * global shapes; with @p optim followed by each tensor's AdamW moments
 * `<name>.exp_avg` and then `<name>.exp_avg_sq` (the rules preset ptc-mlp
 * places them). Free with ptc_exec_model_tensors_free().
 * @return PTC_OK or PTC_E_NOMEM.
 */
PTC_API int ptc_exec_model_tensors(const ptc_exec_model_cfg *m, bool optim,
                                   ptc_tensor_info **out, size_t *n);
/** Free a list from ptc_exec_model_tensors(); NULL is a no-op. */
PTC_API void ptc_exec_model_tensors_free(ptc_tensor_info *t, size_t n);

/**
 * Hand the model its communicators once the runtime has made them (before
 * the first step): @p tp, the tensor-parallel group (ptc_exec_tp_comm), and
 * @p replicas, the group its gradients are reduced over (ptc_exec_reduce_comm).
 * Not needed when tp = 1 and zero is off.
 * @return PTC_OK; PTC_E_CONFIG if a group's size or this shard's place in it
 *   is not what the model was built for.
 */
PTC_API int ptc_exec_model_set_comms(ptc_exec_model *x, MPI_Comm tp, MPI_Comm replicas);

/**
 * The replica index and count of a chunk under ZeRO-1: the replicas of
 * global stage (@p pipe, @p stage) are its data-parallel copies, and for a
 * two-pipe (Chimera) schedule also the other pipe's copies, numbered as the
 * runtime's replica communicator orders them (docs/runtime.md).
 * @param rank  pipeline rank holding the chunk; @p P pipeline ranks
 */
PTC_API void ptc_exec_model_replica(int pipes, int P, int D, int rank, int dp_rank, int pipe,
                                    int stage, int *rep, int *nrep);

/* ---- demo model on a CUDA device ------------------------------------------------- */

/**
 * Opaque model shard whose parameters, gradients, AdamW moments and saved
 * activations live on the current CUDA device (exec/model/model_cuda.c).
 * Same model, layout, tensor names and initial values as ptc_exec_model;
 * its callbacks take and give device buffers, so it pairs with a runtime in
 * PTC_EXEC_DEVICE_CUDA mode. Each shard has one stream and one cuBLAS handle;
 * every callback has finished its device work when it returns (the runtime's
 * NCCL transfers and reduction read the buffers afterwards). Results agree
 * with the CPU model within rounding (cuBLAS and the CUDA reductions sum in
 * another order), not bit for bit.
 */
typedef struct ptc_exec_model_cuda ptc_exec_model_cuda;

/**
 * Bind this process to CUDA device @p local_rank modulo the device count
 * (cudaSetDevice). Call it before creating a model or a runtime in device
 * mode; `ptc train` passes the node-local rank and size from the launcher
 * (OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE).
 * @param local_size processes on this node, or 0 if unknown. NCCL refuses
 *                   two ranks of one communicator on the same device, so
 *                   more processes than devices is an error here rather
 *                   than an "invalid usage" from ncclCommInitRank later.
 * @param device     receives the chosen device index, -1 on failure (may be
 *                   NULL)
 * @return PTC_OK; PTC_E_INVAL (@p local_rank < 0, or >= @p local_size when
 *         that is given); PTC_E_CUDA when no device is visible or the
 *         runtime cannot start (the message starts "no cuda device");
 *         PTC_E_CONFIG when @p local_size exceeds the device count;
 *         PTC_E_UNSUPPORTED in a build without CUDA (as every
 *         ptc_exec_model_cuda_* call that can fail).
 */
PTC_API int ptc_exec_cuda_select_device(int local_rank, int local_size, int *device);

/**
 * As ptc_exec_model_create(), on the current device: the parameters are
 * initialised on the host (identically) and copied up.
 * @return PTC_OK, PTC_E_INVAL, PTC_E_RANGE, PTC_E_CONFIG, PTC_E_NOMEM or
 *         PTC_E_CUDA (allocation, stream or cuBLAS handle). On failure
 *         *out is NULL.
 */
PTC_API int ptc_exec_model_cuda_create(ptc_exec_model_cuda **out,
                                       const ptc_exec_model_cfg *m,
                                       const ptc_sched *s, int rank,
                                       int64_t gmb_base, int64_t gmb_total,
                                       ptc_exec_data_fn data, void *data_user);
/** Free (device memory, stream, cuBLAS handle); NULL is a no-op. */
PTC_API void ptc_exec_model_cuda_destroy(ptc_exec_model_cuda *x);
/** The callbacks (user = @p x); boundary buffers are device memory. */
PTC_API void ptc_exec_model_cuda_stage(ptc_exec_model_cuda *x, ptc_exec_stage *out);
/** Set the step number used for data and AdamW's t (t = step + 1). */
PTC_API void ptc_exec_model_cuda_set_step(ptc_exec_model_cuda *x, int64_t step);
/**
 * Mean loss of each of this shard's micro-batches of the last step, copied
 * back from the device (micro-batch order; 0 where this shard has no last
 * stage). Each mean is summed in double on the host in row order, as the
 * CPU model does. @p *losses is owned by @p x, valid until the next call.
 * @return PTC_OK or PTC_E_CUDA.
 */
PTC_API int ptc_exec_model_cuda_losses(ptc_exec_model_cuda *x, const double **losses,
                                       int *n);
/**
 * Copy the parameters back to the host and list them (as
 * ptc_exec_model_params(): global names, F32, row-major; `data` is host
 * memory owned by @p x, refreshed by each call).
 * @return PTC_OK or PTC_E_CUDA.
 */
PTC_API int ptc_exec_model_cuda_params(ptc_exec_model_cuda *x,
                                       const ptc_exec_param **params, size_t *n);
/**
 * The host model that @p x mirrors on the device: its layout, its tensor
 * names, and host arrays of the parameters and AdamW moments
 * (ptc_exec_model_params() of it) that hold the training state between
 * ptc_exec_model_cuda_pull_state() and ptc_exec_model_cuda_push_state().
 * Owned by @p x; NULL for NULL (and in a build without CUDA).
 */
PTC_API ptc_exec_model *ptc_exec_model_cuda_host(ptc_exec_model_cuda *x);
/**
 * Copy the parameters and both AdamW moments of every chunk from the
 * device into the host model's arrays (at a step boundary: gradients are
 * zero then and are not copied), so that a checkpoint or an online resize
 * reads them there.
 * @return PTC_OK, PTC_E_CUDA; PTC_E_INVAL for NULL or after
 *   ptc_exec_model_cuda_release_device().
 */
PTC_API int ptc_exec_model_cuda_pull_state(ptc_exec_model_cuda *x);
/**
 * The other way: the host model's parameters and moments (filled by a
 * checkpoint load or an online resize) onto the device.
 * @return PTC_OK, PTC_E_CUDA; PTC_E_INVAL for NULL or after
 *   ptc_exec_model_cuda_release_device().
 */
PTC_API int ptc_exec_model_cuda_push_state(ptc_exec_model_cuda *x);
/**
 * Free everything @p x holds on the device (parameters, gradients, moments,
 * activation blocks, scratch, its stream and cuBLAS handle) and keep the
 * host model: call it after ptc_exec_model_cuda_pull_state() when the host
 * arrays are all that is still needed, e.g. while an online resize builds
 * the new layout's model on the same device and moves the state into it,
 * so that the device never holds two models. Afterwards only
 * ptc_exec_model_cuda_host() and ptc_exec_model_cuda_destroy() are of use;
 * every other call returns PTC_E_INVAL. NULL is a no-op.
 */
PTC_API void ptc_exec_model_cuda_release_device(ptc_exec_model_cuda *x);

#ifdef __cplusplus
}
#endif
#endif
