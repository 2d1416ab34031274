/**
 * @file rules.h
 * @brief Placement rules: which tensor-parallel split and pipeline stage each
 * tensor of a collection gets, from a rules file or a built-in preset.
 *
 * Rules file (docs/rules.md has the full grammar and every preset):
 * @code
 * # comment                    (a token starting with '#' ends the line)
 * include PRESET               the preset's lines, here (first match wins, so
 *                              lines above an include override the preset)
 * param  NAME VALUE            a parameter ($NAME in a value below)
 * layer  model.layers.{L}.     substring pattern; {L} captures a layer index
 * optim  .exp_avg .exp_avg_sq  <param><suffix> takes <param>'s placement,
 *                              kind=optim (the longest matching suffix wins)
 * match  GLOB [tp=replicate|split(d[,blocks=N|a:b:…][,heads=h…][,kv_heads=k…]
 *                                   [,head_dim=D][,cut])]
 *             [pp=layer|first|last|first+last|all] [kind=param|optim] [if=V]
 *             [unless=NAME]     (left out when the collection holds NAME)
 * @endcode
 * `match` globs cover the whole name: `*` matches any run of characters
 * (dots included), `?` exactly one UTF-8 character, `\x` the character x.
 * The first matching `match` line wins. tp defaults to replicate; pp defaults
 * to layer when a `layer` pattern matches the name, otherwise pp= is
 * required. A tensor that no rule matches is an error. Numbers in split()
 * and if= may be `$NAME` parameters (param lines, or the values the caller
 * passes, e.g. from a Hugging Face config.json).
 *
 * @note Thread safety: a ptc_rules is immutable once parsed; any number of
 * threads may resolve names with it concurrently. Placement functions are
 * pure.
 */
#ifndef PTC_RULES_H
#define PTC_RULES_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest number of blocks in a `split(d,blocks=…)`. */
#define PTC_RULES_MAX_BLOCKS 64

/** Tensor-parallel placement. */
typedef enum ptc_tp_kind {
    PTC_TP_REPLICATE = 0, /**< every tp rank holds the whole tensor */
    PTC_TP_SPLIT = 1,     /**< dim `dim` split with the split rule */
} ptc_tp_kind;

/** Pipeline placement. */
typedef enum ptc_pp_kind {
    PTC_PP_LAYER = 0,      /**< the stage that owns the tensor's layer */
    PTC_PP_FIRST = 1,      /**< stage 0 */
    PTC_PP_LAST = 2,       /**< stage P-1 */
    PTC_PP_FIRST_LAST = 3, /**< stages 0 and P-1 (tied embeddings) */
    PTC_PP_ALL = 4,        /**< every stage */
} ptc_pp_kind;

/** What a tensor holds; kind=optim tensors are sharded over dp when zero=1. */
typedef enum ptc_tensor_kind {
    PTC_KIND_PARAM = 0, /**< parameter or buffer */
    PTC_KIND_OPTIM = 1, /**< optimizer state or fp32 master copy */
} ptc_tensor_kind;

/** The placement of one tensor, as resolved from the rules (shape-free). */
typedef struct ptc_placement {
    ptc_tp_kind tp;
    int dim;           /**< split dimension, 0..7; -1 for replicate */
    int nblocks;       /**< 0: no blocks= (see nheads); else number of blocks */
    bool blocks_equal; /**< true: `blocks=N`, N equal blocks (sizes from the
                            shape); false: sizes in blocks[] */
    int64_t blocks[PTC_RULES_MAX_BLOCKS]; /**< block sizes (!blocks_equal) */
    ptc_pp_kind pp;
    int64_t layer;        /**< layer index for PTC_PP_LAYER, else -1 */
    ptc_tensor_kind kind;
    int rule;             /**< index of the matching `match` line (0-based,
                               in canonical order); -1 if not from rules */
    /* Head-aware splits (docs/rules.md, "Heads"). */
    int nheads;           /**< head entries: 0 = not head-aware; else the
                               `heads=` entries, then the `kv_heads=` ones */
    int64_t heads[PTC_RULES_MAX_BLOCKS]; /**< heads per block (one entry
                               applies to every block of blocks=) */
    uint64_t kv;          /**< bit e: entry e is a kv_heads entry (whole
                               heads are replicated when tp exceeds them) */
    int64_t head_dim;     /**< head_dim=: checked against the shape; 0 = none */
    bool cut;             /**< a tp that does not fit the heads splits rows by
                               the split rule instead of being an error */
} ptc_placement;

/** A named integer parameter of a rules text (`$NAME`). */
typedef struct ptc_rules_param {
    const char *name;  /**< [A-Za-z_][A-Za-z0-9_]*, at most 63 bytes */
    int64_t value;     /**< >= 0 */
} ptc_rules_param;

/** A parsed rule set (opaque). */
typedef struct ptc_rules ptc_rules;

/**
 * Parse rules from text.
 * @param out    receives the rules; NULL on failure
 * @param text   rules text of @p len bytes (need not be NUL-terminated)
 * @param origin name used in messages, e.g. a file name ("rules.txt" gives
 *               "rules.txt:12: …"); NULL means "rules"
 * @return PTC_OK, PTC_E_RULE (syntax or semantic error; the message names
 *         origin, line and problem) or PTC_E_NOMEM.
 */
PTC_API int ptc_rules_parse(ptc_rules **out, const char *text, size_t len,
                            const char *origin);

/**
 * ptc_rules_parse with parameter values: `$NAME` in the text takes the value
 * of a `param NAME` line of the text, else of @p params (so a rules file
 * overrides what the caller derived, e.g. from config.json). Parameters no
 * one sets are handled as docs/rules.md says: a head-aware split loses its
 * heads (it splits rows), an `if=` line is left out, a split whose blocks
 * depend on the parameter fails when a tensor resolves to it.
 * @param params @p nparams values (names copied); may be NULL if 0
 * @return as ptc_rules_parse; PTC_E_RULE also for a bad parameter name.
 */
PTC_API int ptc_rules_parse_params(ptc_rules **out, const char *text, size_t len,
                                   const char *origin, const ptc_rules_param *params,
                                   size_t nparams);

/**
 * Load rules by preset name (`llama`, `gpt2`, `megatron-gpt`, `ptc-mlp`,
 * `bert`, `phi3`, `none`) or, if @p spec is not a preset name, from the file
 * at path @p spec (write `./llama` for a file that has a preset's name).
 * @return PTC_OK, PTC_E_IO (cannot read the file), PTC_E_RULE, PTC_E_NOMEM.
 */
PTC_API int ptc_rules_load(ptc_rules **out, const char *spec);

/** ptc_rules_load with parameter values (see ptc_rules_parse_params). */
PTC_API int ptc_rules_load_params(ptc_rules **out, const char *spec,
                                  const ptc_rules_param *params, size_t nparams);

/**
 * Read rules parameters from a Hugging Face `config.json`: every top-level
 * integer (>= 0) and boolean (0/1) entry under its key, plus the values
 * Hugging Face derives when the file leaves them out: `num_key_value_heads`
 * = `num_attention_heads`, and `head_dim` = `hidden_size` /
 * `num_attention_heads` when that divides.
 * @param params receives @p n entries (names owned by the array), freed
 *               with ptc_rules_params_free; NULL on failure
 * @return PTC_OK, PTC_E_IO (cannot read), PTC_E_FORMAT (not a JSON object),
 *         PTC_E_NOMEM.
 */
PTC_API int ptc_rules_params_read(const char *config_json_path, ptc_rules_param **params,
                                  size_t *n);

/** Free what ptc_rules_params_read returned. NULL is a no-op. */
PTC_API void ptc_rules_params_free(ptc_rules_param *params, size_t n);

/**
 * The parameters the rules refer to in a split but nobody set, so that a
 * split lost its heads or a rule cannot resolve (e.g.
 * "num_attention_heads,num_key_value_heads"); "" when none.
 * @return NUL-terminated text owned by @p r, valid until it is destroyed.
 */
PTC_API const char *ptc_rules_missing_params(const ptc_rules *r);

/**
 * The text of a built-in preset.
 * @param text receives static text (valid forever)
 * @return PTC_OK or PTC_E_NOTFOUND naming the unknown preset.
 */
PTC_API int ptc_rules_preset_text(const char *name, const char **text);

/** NULL-terminated list of the preset names (static). */
PTC_API const char *const *ptc_rules_preset_names(void);

/** Free rules. NULL is a no-op. */
PTC_API void ptc_rules_destroy(ptc_rules *r);

/**
 * The canonical text of the rules: one normalised line per directive, no
 * comments; presets expanded. Parsing it gives rules that place every tensor
 * identically (the store keeps it so a later reader reproduces the layout).
 * @return NUL-terminated text owned by @p r, valid until it is destroyed.
 */
PTC_API const char *ptc_rules_text(const ptc_rules *r);

/**
 * Resolve a tensor name to its placement.
 * @param name NUL-terminated tensor name
 * @return PTC_OK, or PTC_E_RULE naming the tensor: no rule matches; the
 *         matching rule has no pp= and the name has no layer index; pp=layer
 *         but the name has no layer index; a layer index too large; the
 *         rule needs a parameter nobody set.
 */
PTC_API int ptc_rules_resolve(const ptc_rules *r, const char *name,
                              ptc_placement *out);

/** Whether the collection being placed holds a tensor named @p name. */
typedef bool (*ptc_rules_has_fn)(const char *name, void *user);

/**
 * ptc_rules_resolve within a collection: a `match` line with `unless=NAME`
 * is skipped when @p has says the collection holds NAME (a tied embedding
 * gets a last-stage replica when there is no separate output layer).
 * ptc_rules_resolve is this with @p has NULL, which skips every `unless=`
 * line (the placement of a collection that holds every such NAME).
 * ptc_layout_create resolves each tensor with its own collection.
 * @return as ptc_rules_resolve.
 */
PTC_API int ptc_rules_resolve_in(const ptc_rules *r, const char *name, ptc_rules_has_fn has,
                                 void *user, ptc_placement *out);

/**
 * Format a placement as one line of text, e.g.
 * `tp=split(1,blocks=3) pp=layer layer=4 kind=optim`,
 * `tp=split(0,heads=32,kv_heads=8:8) pp=layer layer=0 kind=param` or
 * `tp=replicate pp=first kind=param`; `layer=` appears only for pp=layer.
 * @return PTC_OK, or PTC_E_RANGE if @p cap is too small.
 */
PTC_API int ptc_placement_format(const ptc_placement *p, char *buf, size_t cap);

/**
 * Parse the text ptc_placement_format writes (rule is set to -1).
 * @return PTC_OK or PTC_E_INVAL naming the bad part.
 */
PTC_API int ptc_placement_parse(ptc_placement *out, const char *text);

/** @return true if both placements place a tensor identically (rule index
 * ignored). */
PTC_API bool ptc_placement_equal(const ptc_placement *a, const ptc_placement *b);

#ifdef __cplusplus
}
#endif
#endif
