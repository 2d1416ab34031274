/**
 * @file elastic.h
 * @brief The configuration rule of `ptc elastic` (exec/model/elastic.c):
 *        which dp/tp/pp a job runs on the slots it has (docs/elastic.md).
 *
 * The rule, in order of preference:
 *  1. tensor parallelism stays within a host: a tp group is tp consecutive
 *     ranks, and mpirun fills each host's slots in rank order, so each host
 *     offers floor(slots / tp) * tp slots. Fixed tp (want->tp > 0) is kept;
 *     automatic tp (0) is the largest of 8, 4, 2, 1 that divides every
 *     host's slot count and the model's hidden width (when given) and
 *     leaves room for one replica (tp * fixed pp, or tp);
 *  2. pipeline parallelism divides the layers: fixed pp (want->pp > 0) is
 *     kept; automatic pp (0) is, among the p that divide the layers, are at
 *     most the micro-batches (when given) and leave room for one replica,
 *     the one that leaves the fewest slots idle (the larger on a tie);
 *  3. the rest is data parallelism: dp = floor(usable slots / (tp * pp)).
 * Slots beyond dp * tp * pp stay idle.
 *
 * @note Thread safety: pure functions; safe.
 */
#ifndef PTC_ELASTIC_H
#define PTC_ELASTIC_H

#include "ptc/config.h"
#include "ptc/search.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What the job wants of a configuration (small value type). */
typedef struct ptc_elastic_want {
    int tp;           /**< tensor-parallel degree; 0: chosen by the rule */
    int pp;           /**< pipeline degree; 0: chosen by the rule */
    bool zero;        /**< zero=1 in every configuration picked */
    int layers;       /**< the model's layers (>= 1) */
    int hidden;       /**< the model's hidden width (automatic tp divides it; 0: any) */
    int microbatches; /**< per replica and step (automatic pp <= it; 0: any) */
    /* for ptc_elastic_search only: the rest of the demo model and its schedule */
    int vocab;        /**< vocabulary (0: the train default 32) */
    int tokens;       /**< tokens per sequence (0: the train default 8) */
    ptc_sched_kind_id schedule; /**< one stage per process kinds (default 1f1b) */
} ptc_elastic_want;

/** A host of an Open MPI hostfile (small value type). */
typedef struct ptc_elastic_host {
    char name[256]; /**< as the file spells it (mpirun names the host so) */
    int slots;      /**< slots=N, default 1 */
} ptc_elastic_host;

/**
 * Parse the text of an Open MPI hostfile, as `ptc elastic --hostfile` reads
 * it: one host per line, `NAME [slots=N] [max_slots=M]` separated by blanks,
 * `#` to the end of the line a comment, blank lines skipped; N and M are
 * decimal 0..PTC_CONFIG_MAX_WORLD (slots default 1; max_slots is checked and
 * not used). A NAME is 1..255 printable bytes without `=`; a host named twice
 * is an error.
 * @param hosts receives up to @p cap hosts in file order; *@p n their count
 * @return PTC_OK; PTC_E_INVAL with a one-line message "line L: ..." (an
 *   unknown word, a bad number, a bad or repeated name, more than @p cap
 *   hosts).
 */
PTC_API int ptc_elastic_hostfile_parse(const char *text, ptc_elastic_host *hosts, size_t cap,
                                       size_t *n);

/**
 * Pick the configuration for hosts with @p slots[i] free slots each.
 * @param out     receives the configuration (dp, tp, pp, zero; no layers=)
 * @param usable  may be NULL; else receives per host the slots the job may
 *                use (a multiple of tp; the ranks fill them in host order)
 * @return PTC_OK; PTC_E_INVAL (no hosts, a negative slot count, layers < 1,
 *   a negative degree); PTC_E_CONFIG "no configuration fits ..." (no slot at
 *   all, a fixed tp larger than every host, fewer usable slots than one
 *   replica of tp * pp, a fixed pp over the layers), naming the slots.
 */
PTC_API int ptc_elastic_pick(ptc_config *out, int *usable, const int *slots, size_t nhosts,
                             const ptc_elastic_want *want);

/**
 * The same choice asked of the configuration search's cost model
 * (include/ptc/search.h): among the configurations the rule allows — tp of
 * 1, 2, 4 or 8 dividing every host's slots and the hidden width (or the
 * fixed tp), pp dividing the layers and at most the micro-batches (or the
 * fixed pp), dp the rest — the one with the highest predicted throughput
 * (sequences per second: dp * microbatches over the predicted step time of
 * the demo model on @p cluster, whose gpus is set per candidate and whose
 * gpus_per_host is the largest host's slots) that fits in its memory. On a
 * tie the rule's order (larger tp, then larger pp) decides.
 * @param cluster NULL: ptc_search_cluster_init's figures
 * @param predicted may be NULL; else the chosen configuration's predicted
 *        step time in seconds
 * @return as ptc_elastic_pick; PTC_E_CONFIG "no configuration fits ..." also
 *   when the cost model rejects every candidate (memory, validity).
 */
PTC_API int ptc_elastic_search(ptc_config *out, int *usable, const int *slots, size_t nhosts,
                               const ptc_elastic_want *want, const ptc_search_cluster *cluster,
                               double *predicted);

#ifdef __cplusplus
}
#endif
#endif
