/* Schedule generators: the kinds, their requirements and placements, and
 * the fixed-order ones (GPipe, 1F1B, kFkB, interleaved 1F1B, looped BFS).
 * The greedy and zero-bubble ones are in sched_zb.c. Formulas and sources:
 * docs/schedule-format.md. */
#include <math.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved", "kfkb", "chimera",
                                         "zb-h1", "zb-v", "zb-h2", "zb-interleaved",
                                         "looped-bfs", "dualpipev", "dualpipe"};

int ptc_sched_kind_parse(const char *name, ptc_sched_kind_id *out)
{
    for (size_t i = 0; i < PTC_ARRAY_LEN(kind_names); i++)
        if (!strcmp(name, kind_names[i])) {
            *out = (ptc_sched_kind_id)i;
            return PTC_OK;
        }
    return ptc_error_set(PTC_E_INVAL, "unknown schedule kind '%s' (gpipe, 1f1b, interleaved, "
                                      "kfkb, chimera, zb-h1, zb-v, zb-h2, zb-interleaved, "
                                      "looped-bfs, dualpipev, dualpipe)", name);
}

const char *ptc_sched_kind_name(ptc_sched_kind_id kind)
{
    return (size_t)kind < PTC_ARRAY_LEN(kind_names) ? kind_names[kind] : "?";
}


/* kFkB: micro-batches in groups of k; 1F1B over groups. k=1 is 1F1B, k=M is
 * GPipe. */
static int gen_kfkb(ptc_sched *s, int k)
{
    int P = s->ranks, M = s->mbs, G = (M + k - 1) / k;
    for (int i = 0; i < P; i++) {
        int w = PTC_MIN(P - 1 - i, G);
#define GROUP(op, gi)                                                  \
    for (int m = (gi) * k; m < PTC_MIN(M, ((gi) + 1) * k); m++)        \
        PTC_TRY(sched_add(s, i, op, m, 0));
        for (int g = 0; g < w; g++)
            GROUP(PTC_SCHED_F, g);
        for (int j = 0; j < G - w; j++) {
            GROUP(PTC_SCHED_F, w + j);
            GROUP(PTC_SCHED_B, j);
        }
        for (int g = G - w; g < G; g++)
            GROUP(PTC_SCHED_B, g);
#undef GROUP
    }
    return PTC_OK;
}

/* Megatron-LM's interleaved 1F1B (Narayanan et al., SC'21). */
static int gen_interleaved(ptc_sched *s, int V)
{
    int P = s->ranks, M = s->mbs, total = M * V;
    for (int i = 0; i < P; i++) {
        int warm = V > 1 ? (P - 1 - i) * 2 + (V - 1) * P : P - 1 - i;
        warm = PTC_MIN(warm, total);
#define AT(kk, fwd, mbv, chv)                                 \
    int r_ = (kk) % (P * V);                                  \
    int mbv = (kk) / (P * V) * P + r_ % P;                    \
    int chv = (fwd) ? r_ / P : V - 1 - r_ / P;
        for (int k = 0; k < warm; k++) {
            AT(k, 1, m, c);
            PTC_TRY(sched_add(s, i, PTC_SCHED_F, m, c));
        }
        for (int k = 0; k < total - warm; k++) {
            {
                AT(k + warm, 1, m, c);
                PTC_TRY(sched_add(s, i, PTC_SCHED_F, m, c));
            }
            {
                AT(k, 0, m, c);
                PTC_TRY(sched_add(s, i, PTC_SCHED_B, m, c));
            }
        }
        for (int k = total - warm; k < total; k++) {
            AT(k, 0, m, c);
            PTC_TRY(sched_add(s, i, PTC_SCHED_B, m, c));
        }
#undef AT
    }
    return PTC_OK;
}

/* Looped BFS (Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2022):
 * every rank runs all forwards of its chunk 0, then of chunk 1, ..., then
 * the backwards chunk by chunk in reverse. Micro-batches go in increasing
 * order in both directions, so each stage sums its weight gradients in the
 * order 1F1B does. */
static int gen_looped_bfs(ptc_sched *s, int V)
{
    for (int i = 0; i < s->ranks; i++) {
        for (int c = 0; c < V; c++)
            for (int m = 0; m < s->mbs; m++)
                PTC_TRY(sched_add(s, i, PTC_SCHED_F, m, c));
        for (int c = V - 1; c >= 0; c--)
            for (int m = 0; m < s->mbs; m++)
                PTC_TRY(sched_add(s, i, PTC_SCHED_B, m, c));
    }
    return PTC_OK;
}

/* Sizes and placement of kind @p g (checked requirements). */
static int shape_of(const ptc_sched_gen *g, int *stages, int *pipes, int *k)
{
    int P = g->ranks, M = g->microbatches, V = g->chunks > 0 ? g->chunks : 1;
    const char *name = kind_names[g->kind];
    *stages = P;
    *pipes = 1;
    *k = 0;
    switch (g->kind) {
    case PTC_SCHED_INTERLEAVED:
        if (M % P)
            return ptc_error_set(PTC_E_INVAL, "interleaved needs microbatches (%d) to be a "
                                              "multiple of stages (%d)", M, P);
        /* fall through */
    case PTC_SCHED_ZBI:
    case PTC_SCHED_LOOPED_BFS:
        if ((int64_t)V * P > PTC_SCHED_MAX_STAGES)
            return ptc_error_set(PTC_E_INVAL, "%s: chunks (%d) times stages (%d) over %d", name,
                                 V, P, PTC_SCHED_MAX_STAGES);
        *stages = P * V;
        break;
    case PTC_SCHED_KFKB:
        if (g->k < 1 || g->k > M)
            return ptc_error_set(PTC_E_INVAL, "kfkb needs 1 <= k (%d) <= microbatches (%d)",
                                 g->k, M);
        *k = g->k;
        break;
    case PTC_SCHED_CHIMERA:
        if (P < 2)
            return ptc_error_set(PTC_E_INVAL, "chimera needs at least 2 stages");
        *pipes = 2;
        break;
    case PTC_SCHED_DUALPIPE:
        if (P % 2 || M % 2 || M < 2 * P)
            return ptc_error_set(PTC_E_INVAL, "dualpipe needs an even number of stages (%d) and "
                                              "an even number of microbatches (%d) >= 2 * "
                                              "stages", P, M);
        *pipes = 2;
        break;
    case PTC_SCHED_DUALPIPEV:
        if (M < 2 * P)
            return ptc_error_set(PTC_E_INVAL, "dualpipev needs microbatches (%d) >= 2 * stages "
                                              "(%d)", M, 2 * P);
        *stages = 2 * P;
        break;
    case PTC_SCHED_ZBV:
        *stages = 2 * P;
        break;
    default:
        break;
    }
    return PTC_OK;
}

static int place(ptc_sched *s, ptc_sched_kind_id kind)
{
    int P = s->ranks, rc = PTC_OK;
    switch (kind) {
    case PTC_SCHED_CHIMERA:
    case PTC_SCHED_DUALPIPE: /* bidirectional: rank i holds stage i and P-1-i */
        for (int st = 0; st < P && !rc; st++) {
            rc = ptc_sched_place(s, 0, st, st, 0);
            if (!rc)
                rc = ptc_sched_place(s, 1, st, P - 1 - st, 1);
        }
        for (int m = 0; m < s->mbs && !rc; m++)
            rc = ptc_sched_set_mb_pipe(s, m, m % 2);
        return rc;
    case PTC_SCHED_ZBV:
    case PTC_SCHED_DUALPIPEV: /* V: rank i holds stage i and 2P-1-i */
        for (int st = 0; st < 2 * P && !rc; st++)
            rc = st < P ? ptc_sched_place(s, 0, st, st, 0)
                        : ptc_sched_place(s, 0, st, 2 * P - 1 - st, 1);
        return rc;
    default:
        return ptc_sched_place_looped(s);
    }
}

int ptc_sched_generate(ptc_sched **out, const ptc_sched_gen *g)
{
    return ptc_sched_generate_costed(out, g, NULL);
}

int ptc_sched_generate_costed(ptc_sched **out, const ptc_sched_gen *g,
                              const ptc_sched_costs *links)
{
    *out = NULL;
    int P = g->ranks, M = g->microbatches, V = g->chunks > 0 ? g->chunks : 1;
    if (P < 1 || M < 1)
        return ptc_error_set(PTC_E_INVAL, "stages and microbatches must be >= 1");
    if ((size_t)g->kind >= PTC_ARRAY_LEN(kind_names))
        return ptc_error_set(PTC_E_INVAL, "unknown schedule kind %d", (int)g->kind);
    if (links && sched_costs_check(links))
        return PTC_E_INVAL;
    int stages, pipes, k;
    PTC_TRY(shape_of(g, &stages, &pipes, &k));
    ptc_sched *s;
    PTC_TRY(ptc_sched_create(&s, P, stages, pipes, M));
    int rc = ptc_sched_set_kind(s, kind_names[g->kind], k);
    if (!rc)
        rc = place(s, g->kind);
    if (rc)
        goto out_destroy;
    switch (g->kind) {
    case PTC_SCHED_GPIPE:
        rc = gen_kfkb(s, M);
        break;
    case PTC_SCHED_1F1B:
        rc = gen_kfkb(s, 1);
        break;
    case PTC_SCHED_KFKB:
        rc = gen_kfkb(s, k);
        break;
    case PTC_SCHED_INTERLEAVED:
        rc = gen_interleaved(s, V);
        break;
    case PTC_SCHED_LOOPED_BFS:
        rc = gen_looped_bfs(s, V);
        break;
    case PTC_SCHED_DUALPIPEV:
    case PTC_SCHED_DUALPIPE:
        rc = sched_gen_dualpipe(s, g, links);
        break;
    default: /* chimera and the zero-bubble greedy kinds */
        rc = sched_gen_greedy(s, g, links);
        break;
    }
    if (rc)
        goto out_destroy;
    *out = s;
    return PTC_OK;
out_destroy:
    ptc_sched_destroy(s);
    return rc;
}
