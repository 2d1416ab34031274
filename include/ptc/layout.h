/**
 * @file layout.h
 * @brief The layout function: for every (tensor, rank) of a parallel
 * configuration, whether the rank holds the tensor, its local shape and the
 * pieces (global boxes and their places in the local tensor).
 *
 * Semantics (DESIGN.md, docs/rules.md):
 *  - tp: `split(d)` splits dim d with the split rule (ptc_split); with
 *    blocks, dim d is a concatenation of blocks, each split with the split
 *    rule, and tp rank i holds the concatenation of the blocks' parts i in
 *    block order: one piece per non-empty block part. A block of h kv heads
 *    with T > h (T a multiple of h) gives tp rank i the whole head
 *    floor(i*h/T) instead (replicated on T/h ranks); docs/rules.md.
 *  - pp: `layer` puts layer L of n on the stage s with L in
 *    [floor(s*n/P), floor((s+1)*n/P)) unless layers= gives per-stage counts;
 *    n is the number of distinct layer indices of the pp=layer tensors,
 *    which must be exactly 0..n-1. `first`, `last`, `first+last`, `all`.
 *  - dp: replicated; with zero=1 a kind=optim tensor's tp/pp-local shard is
 *    viewed flat (row-major) and split into D ranges with the split rule;
 *    the local tensor is 1-D of the range length.
 *  - Pieces of an ordinary shard use the local tensor's row-major strides.
 *    Pieces of a zero-sharded shard: the flat range is cut into the minimal
 *    list of flat-contiguous boxes of the tp-local tensor
 *    (ptc_flat_to_boxes), each intersected with the tp-local pieces, mapped
 *    to global coordinates; along every dimension where the piece has
 *    extent > 1 its local stride is the tp-local row-major stride (its place
 *    in the flat 1-D tensor), along extent-1 dimensions the piece box's own
 *    row-major stride. For a piece that is contiguous in the 1-D tensor this
 *    is exactly the box's own row-major strides.
 *  - Pieces with no elements are never listed (a zero-volume shard has none).
 *  - The owner (canonical replica) of a shard is the lowest rank whose shard
 *    of the same tensor is identical: same local shape and same pieces.
 *
 * Nothing is allocated per (tensor, rank): shards are computed on request in
 * O(pieces) time into caller memory.
 *
 * @note Thread safety: a ptc_layout is immutable after creation; any number
 * of threads may query it concurrently.
 */
#ifndef PTC_LAYOUT_H
#define PTC_LAYOUT_H

#include "ptc/box.h"
#include "ptc/config.h"
#include "ptc/dtype.h"
#include "ptc/rules.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest accepted tensor name, bytes (DESIGN: names are at most 1024). */
#define PTC_TENSOR_NAME_MAX 1024

/** A tensor of a collection: name, dtype and global shape. */
typedef struct ptc_tensor_info {
    const char *name;  /**< UTF-8, NUL-terminated, at most 1024 bytes */
    ptc_dtype dtype;
    int ndim;          /**< 0..PTC_MAX_DIMS */
    int64_t shape[PTC_MAX_DIMS];
} ptc_tensor_info;

/** A layout (opaque): tensors with resolved placements under one config. */
typedef struct ptc_layout ptc_layout;

/**
 * Resolve every tensor's placement and validate it against the shapes and
 * the configuration.
 * @param tensors @p n tensors; order is kept (tensor index = position);
 *                names are copied
 * @param rules   rules to resolve with (not referenced after return)
 * @param cfg     configuration (copied)
 * @return PTC_OK, or, with a message naming the tensor:
 *   PTC_E_RULE   no rule; split dim >= ndim; block sizes do not sum to the
 *                dim; blocks=N does not divide the dim; heads that do not
 *                fit the dim or head_dim=, or that tp would cut (tp must
 *                divide a block's heads, or for kv_heads be a multiple of
 *                them, unless the rule says cut); layer indices with a
 *                gap (the message names the missing index); pp= missing;
 *   PTC_E_CONFIG layers= does not match the number of layers;
 *   PTC_E_INVAL  duplicate or over-long name, bad ndim/dtype/shape;
 *   PTC_E_RANGE  tensor volume overflows int64;
 *   PTC_E_NOMEM.
 */
PTC_API int ptc_layout_create(ptc_layout **out, const ptc_tensor_info *tensors, size_t n,
                              const ptc_rules *rules, const ptc_config *cfg);

/** Called by ptc_layout_check for each problem: the tensor (NULL for a
 * problem of the whole collection), its error code and one-line message
 * (both valid during the call only). */
typedef void (*ptc_layout_problem_fn)(const ptc_tensor_info *tensor, int code,
                                      const char *message, void *user);

/**
 * A dry run of ptc_layout_create that reports every problem, not the first:
 * each tensor is resolved and checked against its shape and @p cfg (no
 * rule, a split dim the tensor lacks, blocks that do not fit, a head the
 * tp degree would cut, a parameter the rule needs, …); if every tensor
 * passes, the collection's own checks follow (duplicate names, layer
 * indices, layers=).
 * @param fn        called once per problem, in tensor order (may be NULL)
 * @param nproblems receives the number of problems
 * @return PTC_OK when the check ran (whatever it found), or PTC_E_NOMEM.
 */
PTC_API int ptc_layout_check(const ptc_tensor_info *tensors, size_t n, const ptc_rules *rules,
                             const ptc_config *cfg, ptc_layout_problem_fn fn, void *user,
                             size_t *nproblems);

/** Free a layout. NULL is a no-op. */
PTC_API void ptc_layout_destroy(ptc_layout *l);

/** @return number of tensors. */
PTC_API size_t ptc_layout_count(const ptc_layout *l);

/** The configuration the layout was made for (owned by @p l). */
PTC_API const ptc_config *ptc_layout_config(const ptc_layout *l);

/** @return the number of layers n (distinct pp=layer indices; 0 if none). */
PTC_API int64_t ptc_layout_nlayers(const ptc_layout *l);

/** Tensor @p t (< count); the name is owned by @p l, valid until destroy. */
PTC_API const ptc_tensor_info *ptc_layout_tensor(const ptc_layout *l, size_t t);

/** Resolved placement of tensor @p t (owned by @p l). */
PTC_API const ptc_placement *ptc_layout_placement(const ptc_layout *l, size_t t);

/** Index of the tensor called @p name.
 * @return PTC_OK or PTC_E_NOTFOUND. */
PTC_API int ptc_layout_find(const ptc_layout *l, const char *name, size_t *t);

/** Whether pipeline stage @p stage holds tensor @p t. */
PTC_API bool ptc_layout_on_stage(const ptc_layout *l, size_t t, int stage);

/** The shard of one tensor on one rank (a value; pieces come separately). */
typedef struct ptc_shard {
    bool present;     /**< the rank's pipeline stage holds the tensor; if
                           false every other field is zero and owner -1 */
    bool flat;        /**< zero-sharded: local tensor is 1-D */
    int ndim;         /**< local ndim: the tensor's, or 1 when flat */
    int64_t shape[PTC_MAX_DIMS]; /**< local shape */
    int64_t flat_lo, flat_hi;    /**< flat: the range of the tp/pp-local
                                      shard's flat order; else 0 and volume */
    size_t npieces;   /**< number of pieces (none has zero volume) */
    int owner;        /**< lowest rank holding an identical shard */
} ptc_shard;

/**
 * The shard of tensor @p t on rank @p rank (0 <= rank < world).
 * @return PTC_OK or PTC_E_RANGE (bad index or rank).
 */
PTC_API int ptc_layout_shard(const ptc_layout *l, size_t t, int rank, ptc_shard *out);

/**
 * The pieces of tensor @p t on rank @p rank, in canonical order (block order
 * for ordinary shards; flat order, then block order, when flat).
 * @param pieces room for @p cap pieces (may be NULL if cap is 0)
 * @param n      receives the number of pieces (also when cap is too small)
 * @return PTC_OK, PTC_E_RANGE (bad index or rank, or cap < *n).
 */
PTC_API int ptc_layout_pieces(const ptc_layout *l, size_t t, int rank, ptc_piece *pieces,
                              size_t cap, size_t *n);

/**
 * Owner rank of every rank's shard of tensor @p t.
 * @param owners room for world ints; owners[r] = owner of rank r's shard, or
 *               -1 where rank r does not hold the tensor
 * @return PTC_OK or PTC_E_RANGE.
 */
PTC_API int ptc_layout_owners(const ptc_layout *l, size_t t, int *owners);

/** One distinct shard of a tensor and the ranks that hold it. */
typedef struct ptc_shard_group {
    int owner;         /**< the lowest of ranks[] */
    size_t nranks;
    const int *ranks;  /**< increasing; ranks[0] == owner */
} ptc_shard_group;

/**
 * The distinct shards of tensor @p t, ordered by owner, with their holders.
 * @param groups receives an array of @p *n groups in one allocation (rank
 *               lists included), freed with ptc_layout_groups_free
 * @return PTC_OK, PTC_E_RANGE or PTC_E_NOMEM (then *groups is NULL).
 */
PTC_API int ptc_layout_groups(const ptc_layout *l, size_t t, ptc_shard_group **groups,
                              size_t *n);

/** Free what ptc_layout_groups returned. NULL is a no-op. */
PTC_API void ptc_layout_groups_free(ptc_shard_group *groups);

/* ---- explicit layouts: per-rank pieces ------------------------------------------ */

/** Prefix of the configuration text of an explicit layout: "explicit:W"
 * for a world of W ranks (ptc_layout_describe; a version's record). */
#define PTC_LAYOUT_EXPLICIT_PREFIX "explicit:"

/**
 * One rank's shard of one tensor of an explicit layout: its local tensor
 * (row-major, @p ndim dimensions of @p shape) and the pieces of the global
 * tensor it holds, each a box and its place in the local tensor (ptc_piece).
 * A DTensor's shard is one piece (Shard / Replicate placements) or, for a
 * strided shard (FSDP2 over a tensor-parallel dimension, `_StridedShard`),
 * the product of the runs of global indices its local tensor holds along
 * each dimension (docs/checkpoint.md, "Layouts from DTensors").
 */
typedef struct ptc_layout_explicit_shard {
    size_t tensor;                /**< index into the tensors of the layout */
    int rank;                     /**< 0 <= rank < world */
    int ndim;                     /**< local dimensions, 0..PTC_MAX_DIMS */
    int64_t shape[PTC_MAX_DIMS];  /**< local shape */
    const ptc_piece *pieces;      /**< @ref npieces pieces (copied) */
    size_t npieces;
} ptc_layout_explicit_shard;

/**
 * A layout given as explicit per-rank pieces instead of a configuration and
 * rules: rank r holds tensor t iff some entry of @p shards names (t, r).
 * Every query of this header answers for it as for a layout of a
 * configuration: shards (never flat), pieces in the order given (pieces
 * with no elements dropped), owners (the lowest rank holding an identical
 * shard: same local shape and pieces, strides compared along extents > 1),
 * groups. Its configuration (ptc_layout_config) is dp=1, tp=world, pp=1,
 * so that code exploiting the structure of configurations (shards repeat
 * over dp, stages repeat) takes its general path; its placements are
 * replicate/pp=all and mean nothing; ptc_layout_describe names it
 * "explicit:W". Memory: the entries and the distinct shards' pieces (a
 * query of (tensor, rank) is a binary search among the tensor's entries).
 *
 * @param tensors  @p n tensors (names copied; checked as ptc_layout_create)
 * @param world    number of ranks, 1..PTC_CONFIG_MAX_WORLD
 * @param shards   @p nshards entries, at most one per (tensor, rank)
 * @return PTC_OK, or with a message naming the tensor and rank:
 *   PTC_E_INVAL  a bad tensor (as ptc_layout_create); a bad world; an entry
 *                with a tensor index or rank out of range, given twice, with
 *                a bad local shape, a piece outside the tensor or the local
 *                tensor (ptc_piece_check), or pieces whose elements do not
 *                add up to the local tensor's;
 *   PTC_E_RANGE  a local volume that overflows;
 *   PTC_E_NOMEM.
 */
PTC_API int ptc_layout_create_explicit(ptc_layout **out, const ptc_tensor_info *tensors,
                                       size_t n, int world,
                                       const ptc_layout_explicit_shard *shards,
                                       size_t nshards);

/**
 * Read the text of an explicit layout, "explicit:W" (a version record's
 * configuration, docs/format.md §2.2): W in plain decimal, 1..PTC_CONFIG_MAX_WORLD,
 * no sign or leading zero.
 * @param world  receives W, or 0 when @p text does not start with
 *               PTC_LAYOUT_EXPLICIT_PREFIX (it may then be a configuration)
 * @return PTC_OK, or PTC_E_INVAL for the prefix followed by anything else.
 */
PTC_API int ptc_layout_parse_explicit(const char *text, int *world);

/** @return whether @p l was made by ptc_layout_create_explicit. */
PTC_API bool ptc_layout_is_explicit(const ptc_layout *l);

/** @return the number of ranks of the layout (its configuration's world). */
PTC_API int ptc_layout_world(const ptc_layout *l);

/**
 * The text that names the layout: its configuration (PTC_CONFIG_STYLE_KEYS)
 * or, for an explicit layout, "explicit:W".
 * @return PTC_OK or PTC_E_RANGE (@p cap too small).
 */
PTC_API int ptc_layout_describe(const ptc_layout *l, char *buf, size_t cap);

/**
 * Whether the distinct shards of tensor @p t hold every element of the
 * tensor exactly once (no element missing, none in two distinct shards):
 * what a layout that saves a tensor must do. Always true for a layout of a
 * configuration.
 * @return PTC_OK; PTC_E_INVAL naming the tensor and the problem ("ranks 1
 *   and 2 hold overlapping parts that are not one shard"; "its shards hold
 *   96 of its 128 elements"); PTC_E_RANGE (bad index); PTC_E_NOMEM.
 */
PTC_API int ptc_layout_check_cover(const ptc_layout *l, size_t t);

/* ---- the layout of a stored version (ptc/layout_store.c) ------------------ */

/** A read view of one stored version (include/ptc/store.h). */
typedef struct ptc_store_reader ptc_store_reader;

/**
 * The layout of a stored version: with @p cfg NULL the layout it was stored
 * with — its configuration under its rules, or, for a version saved with
 * an explicit layout (its record's configuration is "explicit:W",
 * docs/format.md §2.2), the explicit layout rebuilt from its shard records
 * (every rank with a record of a tensor holds that record's local shape and
 * pieces; an alias, its owner's) — or its tensors under @p cfg and the
 * rules of ptc_layout_version_rules().
 * @return PTC_OK or the errors of ptc_rules_parse / ptc_config_parse /
 *   ptc_layout_create / ptc_layout_create_explicit (e.g. PTC_E_CONFIG: a
 *   layers= list that does not fit; PTC_E_STORE: an explicit version whose
 *   world or records do not make a layout).
 */
PTC_API int ptc_layout_of_version(ptc_layout **out, const ptc_store_reader *r,
                                  const ptc_config *cfg);

/**
 * ptc_layout_of_version() under @p cfg (not NULL) with @p rules instead of
 * the version's (NULL: the version's, as ptc_layout_of_version()).
 */
PTC_API int ptc_layout_of_version_rules(ptc_layout **out, const ptc_store_reader *r,
                                        const ptc_config *cfg, const ptc_rules *rules);

/**
 * The rules a version is viewed with under another configuration: its
 * stored rules, or, where it has none (a version saved from DTensors with
 * no rules), the preset `none` (every tensor whole on every rank of the
 * first stage).
 * @param out  receives the rules (ptc_rules_destroy)
 * @return PTC_OK or the errors of ptc_rules_parse.
 */
PTC_API int ptc_layout_version_rules(const ptc_store_reader *r, ptc_rules **out);

#ifdef __cplusplus
}
#endif
#endif
