/**
 * @file config.h
 * @brief Parallel configurations: parse, print, rank coordinates, stages.
 *
 * Text forms (both accepted by ptc_config_parse):
 *  - key form  `dp=2,tp=4,pp=2,zero=1,layers=3:5` (keys in any order, missing
 *    keys are 1, zero defaults to 0);
 *  - path form `dp2-tp4-pp2-zero1-layers3:5` (as in the mounted tree).
 * Rank numbering (Megatron): rank = (pp_i*D + dp_i)*T + tp_i.
 *
 * @note Thread safety: value type and pure functions; safe.
 */
#ifndef PTC_CONFIG_H
#define PTC_CONFIG_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest accepted world size dp*tp*pp. */
#define PTC_CONFIG_MAX_WORLD (1 << 20)
/** Largest pp for which an explicit layers= list may be given. */
#define PTC_CONFIG_MAX_STAGES 1024

/** A parallel configuration. */
typedef struct ptc_config {
    int dp, tp, pp;
    bool zero;       /**< zero=1: optimizer state sharded over dp */
    int nlayers;     /**< number of entries in layers[]; 0 = no override */
    uint32_t layers[PTC_CONFIG_MAX_STAGES]; /**< layers per stage */
} ptc_config;

/** Text styles for ptc_config_format. */
enum { PTC_CONFIG_STYLE_KEYS = 0, PTC_CONFIG_STYLE_PATH = 1 };

/**
 * Parse either text form. Rejects unknown keys, repeated keys, values < 1,
 * non-numbers, overflow, world sizes over PTC_CONFIG_MAX_WORLD, a layers list
 * whose length is not pp, and zero other than 0/1.
 * @return PTC_OK or PTC_E_INVAL (detail names the bad part).
 */
PTC_API int ptc_config_parse(ptc_config *out, const char *text);

/** Default configuration dp=tp=pp=1. */
PTC_API void ptc_config_init(ptc_config *out);

/** Print in canonical form: keys form `dp=D,tp=T,pp=P[,zero=1][,layers=…]`,
 * path form `dpD-tpT-ppP[-zero1][-layersa:b…]`.
 * @return PTC_OK, or PTC_E_RANGE if @p cap is too small. */
PTC_API int ptc_config_format(const ptc_config *c, int style, char *buf,
                              size_t cap);

/** @return dp*tp*pp. */
PTC_API int ptc_config_world(const ptc_config *c);

/** Coordinates of @p rank (0 <= rank < world). */
PTC_API void ptc_config_coords(const ptc_config *c, int rank, int *pp_i,
                               int *dp_i, int *tp_i);

/** Rank of coordinates. */
PTC_API int ptc_config_rank(const ptc_config *c, int pp_i, int dp_i, int tp_i);

/** @return true if both describe the same layout. */
PTC_API bool ptc_config_equal(const ptc_config *a, const ptc_config *b);

/**
 * Stage of layer @p layer of @p nlayers: with layers= the explicit counts,
 * otherwise the stage s with layer in [floor(s*n/P), floor((s+1)*n/P)).
 * @return PTC_OK, or PTC_E_CONFIG if layers= does not sum to @p nlayers.
 */
PTC_API int ptc_config_stage_of_layer(const ptc_config *c, int64_t nlayers,
                                      int64_t layer, int *stage);

/** Check that layers= (if any) fits a model of @p nlayers layers.
 * @return PTC_OK or PTC_E_CONFIG naming the mismatch. */
PTC_API int ptc_config_check_layers(const ptc_config *c, int64_t nlayers);

#ifdef __cplusplus
}
#endif
#endif
