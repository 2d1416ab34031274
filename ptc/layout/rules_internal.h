/* What the placement-rule files share (private to ptc/layout/). Four files,
 * one job each, in dependency order (none calls into a file above it):
 *
 *   rules.c            the rule set: the parser of rules text (layer, optim,
 *                      match, include and param lines), its canonical text,
 *                      and the resolution of a tensor name to its placement
 *   rules_hf.c         parameters from a Hugging Face config.json
 *   rules_placement.c  placement values: numbers and $parameters, the tp=,
 *                      pp= and kind= grammar, and the placement text
 *                      (ptc_placement_format / _parse / _equal)
 *   rules_presets.c    the built-in presets (ptc_rules_preset_*)
 *
 * docs/rules.md is the language. */
#ifndef PTC_RULES_INTERNAL_H
#define PTC_RULES_INTERNAL_H

#include "base/buf_internal.h"
#include "ptc/rules.h"

/* Longest parameter name. */
#define PTC_RULES_NAME_MAX 63

/* Largest block size, head count or parameter value. */
#define PTC_RULES_MAX_VALUE ((int64_t)1 << 62)

/* ---- presets (rules_presets.c) ------------------------------------------------ */

/* The text of preset @p name (its @p n bytes, no NUL needed), or NULL. */
const char *ptc_rules_preset_find(const char *name, size_t n);

/* ---- values (rules_placement.c) ----------------------------------------------- */

/* A parameter ($NAME in a value) and the parameters of a rule set. */
typedef struct ptc_rules_var {
    char *name;
    int64_t value;
} ptc_rules_var;

typedef struct ptc_rules_vars {
    ptc_rules_var *v;
    size_t n, cap;
} ptc_rules_vars;

/* The parameter named by the @p n bytes at @p s, or NULL (also for NULL
 * @p vars). */
ptc_rules_var *ptc_rules_var_find(const ptc_rules_vars *vars, const char *s, size_t n);

/* Copy at most 80 bytes of untrusted text into @p buf for a message, with
 * control characters shown as '?'. @return buf. */
const char *ptc_rules_clip(const char *s, size_t n, char buf[96]);

/* Decimal without sign; false on empty, non-digit or a value above max. */
bool ptc_rules_dec(const char *s, size_t n, int64_t max, int64_t *out);

/* A parameter name: letters, digits and '_', not starting with a digit, at
 * most PTC_RULES_NAME_MAX bytes. */
bool ptc_rules_name_ok(const char *s, size_t n);

/* The name of a parameter a tp= value refers to but nobody set, and where. */
typedef struct ptc_rules_unset {
    const char *name; /* NULL: none */
    size_t n;
    bool in_blocks;   /* in blocks= (the split cannot do without it) */
    bool in_heads;    /* in heads= / kv_heads= */
    bool in_head_dim; /* only in head_dim= (a check that can be left out) */
} ptc_rules_unset;

/* A number, or `$NAME` when @p vars is given. @return 1 a value, 0 an
 * unset parameter (recorded in @p u when given), -1 not a number or a bad
 * reference. */
int ptc_rules_value(const char *s, size_t n, int64_t max, const ptc_rules_vars *vars,
                    int64_t *out, ptc_rules_unset *u);

/* tp=replicate on @p pl: no split, no blocks, no heads. */
void ptc_rules_tp_reset(ptc_placement *pl);

/* Parse the value of tp=: replicate | split(d[,blocks=N|a:b:...][,heads=...]
 * [,kv_heads=...][,head_dim=D][,cut]). Parameters ($NAME) are looked up in
 * @p vars (NULL: not allowed). An unset parameter is reported in @p u (may
 * be NULL); the caller decides (docs/rules.md). On failure returns false
 * and a reason in *why. */
bool ptc_rules_tp_parse(const char *v, size_t n, ptc_placement *pl, const char **why,
                        const ptc_rules_vars *vars, ptc_rules_unset *u);

/* Append the tp= value of a placement (canonical item order). */
void ptc_rules_tp_format(ptc_buf *b, const ptc_placement *pl);

/* pp= values: layer, first, last, first+last, all. */
bool ptc_rules_pp_parse(const char *v, size_t n, ptc_pp_kind *pp);
const char *ptc_rules_pp_name(ptc_pp_kind pp);

/* kind= values: param, optim. */
bool ptc_rules_kind_parse(const char *v, size_t n, ptc_tensor_kind *k);

#endif
