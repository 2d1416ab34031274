/* Schedule generators: GPipe, 1F1B, interleaved 1F1B, kFkB, Chimera, ZB-H1,
 * ZB-V. Formulas and sources: docs/schedule-format.md. */
#include <math.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved", "kfkb",
                                         "chimera", "zb-h1", "zb-v"};

int ptc_sched_kind_parse(const char *name, ptc_sched_kind_id *out)
{
    for (size_t i = 0; i < PTC_ARRAY_LEN(kind_names); i++)
        if (!strcmp(name, kind_names[i])) {
            *out = (ptc_sched_kind_id)i;
            return PTC_OK;
        }
    return ptc_error_set(PTC_E_INVAL, "unknown schedule kind '%s' (gpipe, 1f1b, interleaved, "
                                      "kfkb, chimera, zb-h1, zb-v)", name);
}

const char *ptc_sched_kind_name(ptc_sched_kind_id kind)
{
    return (size_t)kind < PTC_ARRAY_LEN(kind_names) ? kind_names[kind] : "?";
}

static int add(ptc_sched *s, int rank, int op, int mb, int chunk)
{
    ptc_sched_action a = {(uint8_t)op, 0, (uint16_t)chunk, mb, -1};
    return ptc_sched_append(s, rank, a);
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
        PTC_TRY(add(s, i, op, m, 0));
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
            PTC_TRY(add(s, i, PTC_SCHED_F, m, c));
        }
        for (int k = 0; k < total - warm; k++) {
            {
                AT(k + warm, 1, m, c);
                PTC_TRY(add(s, i, PTC_SCHED_F, m, c));
            }
            {
                AT(k, 0, m, c);
                PTC_TRY(add(s, i, PTC_SCHED_B, m, c));
            }
        }
        for (int k = total - warm; k < total; k++) {
            AT(k, 0, m, c);
            PTC_TRY(add(s, i, PTC_SCHED_B, m, c));
        }
#undef AT
    }
    return PTC_OK;
}

/* ---- greedy list scheduler (Chimera, ZB-V) ---------------------------------
 * Simulates the pipeline with the given costs and, whenever a rank is idle,
 * starts its most urgent ready action: B/I (oldest micro-batch, later stage
 * first), then F (later stage first, then oldest) if the chunk holds fewer
 * activations than its cap, then W. W also goes first once a rank has
 * `wmax` of them pending. Chimera puts F (oldest micro-batch first, within
 * the caps) before B: the two pipelines then fill each other's bubbles.
 * Micro-batches pass each stage in increasing order. */

typedef struct greedy {
    ptc_sched *s;
    int *cap;      /* [pipes*stages] activations a stage may hold */
    bool split;    /* emit I + W instead of B */
    double f, b, w;
    int *wmax;     /* [ranks] pending W a rank may keep before W goes first */
    bool fwd_first;  /* F (within its cap) outranks B/I */
    bool fwd_oldest; /* among F, the oldest micro-batch first (else later stage) */
} greedy;

typedef struct gstate {
    int *list, *lcount, *loff; /* micro-batches per pipe, in order */
    int *fn, *bn, *wn, *held;  /* per global stage: next F/B/W index, held acts */
    double *f_end, *b_end;     /* per cell */
    double *free_at;
    bool *running;
    int *wpend;
} gstate;

static int greedy_run(greedy *gr)
{
    ptc_sched *s = gr->s;
    int P = s->ranks, S = s->stages, GS = s->pipes * S;
    size_t cells = (size_t)s->mbs * S;
    gstate z;
    memset(&z, 0, sizeof z);
    int rc = PTC_E_NOMEM;
    z.list = ptc_malloc((size_t)s->mbs * sizeof(int));
    z.lcount = ptc_calloc((size_t)s->pipes, sizeof(int));
    z.loff = ptc_calloc((size_t)s->pipes + 1, sizeof(int));
    z.fn = ptc_calloc((size_t)GS, sizeof(int));
    z.bn = ptc_calloc((size_t)GS, sizeof(int));
    z.wn = ptc_calloc((size_t)GS, sizeof(int));
    z.held = ptc_calloc((size_t)GS, sizeof(int));
    z.f_end = ptc_malloc(cells * sizeof(double));
    z.b_end = ptc_malloc(cells * sizeof(double));
    z.free_at = ptc_calloc((size_t)P, sizeof(double));
    z.running = ptc_calloc((size_t)P, sizeof(bool));
    z.wpend = ptc_calloc((size_t)P, sizeof(int));
    if (!z.list || !z.lcount || !z.loff || !z.fn || !z.bn || !z.wn || !z.held || !z.f_end ||
        !z.b_end || !z.free_at || !z.running || !z.wpend)
        goto out_free;
    for (int m = 0; m < s->mbs; m++)
        z.lcount[s->mb_pipe[m]]++;
    for (int p = 0; p < s->pipes; p++)
        z.loff[p + 1] = z.loff[p] + z.lcount[p];
    memset(z.lcount, 0, (size_t)s->pipes * sizeof(int));
    for (int m = 0; m < s->mbs; m++) {
        int p = s->mb_pipe[m];
        z.list[z.loff[p] + z.lcount[p]++] = m;
    }
    for (size_t i = 0; i < cells; i++)
        z.f_end[i] = z.b_end[i] = INFINITY;
    double scale = (double)P / S, now = 0;
    size_t left = (size_t)s->mbs * S * (gr->split ? 3 : 2);
    while (left) {
        double next = INFINITY;
        for (int r = 0; r < P; r++) {
            if (z.running[r] && z.free_at[r] <= now)
                z.running[r] = false;
            if (z.running[r]) {
                next = fmin(next, z.free_at[r]);
                continue;
            }
            /* Pick among this rank's chunks. */
            int best_op = -1, best_g = -1, best_mb = 0, best_rank = 99;
            for (int c = 0; c < s->nchunks[r]; c++) {
                int g = s->chunk_gs[r][c], p = g / S, st = g % S, n = z.lcount[p];
                const int *L = z.list + z.loff[p];
                int cand_op = -1, cand_mb = 0, rankv = 99;
                if (z.bn[g] < z.fn[g]) {
                    int m = L[z.bn[g]];
                    size_t cl = (size_t)m * S + st;
                    if (z.f_end[cl] <= now && (st == S - 1 || z.b_end[cl + 1] <= now)) {
                        cand_op = gr->split ? PTC_SCHED_I : PTC_SCHED_B;
                        cand_mb = m;
                        rankv = gr->fwd_first ? 2 : 1;
                    }
                }
                if (gr->split && z.wn[g] < z.bn[g] && z.wpend[r] >= gr->wmax[r]) {
                    int m = L[z.wn[g]];
                    if (z.b_end[(size_t)m * S + st] <= now && 0 < rankv) {
                        cand_op = PTC_SCHED_W;
                        cand_mb = m;
                        rankv = 0;
                    }
                }
                if ((cand_op < 0 || gr->fwd_first) && z.fn[g] < n && z.held[g] < gr->cap[g]) {
                    int m = L[z.fn[g]];
                    if (st == 0 || z.f_end[(size_t)m * S + st - 1] <= now) {
                        cand_op = PTC_SCHED_F;
                        cand_mb = m;
                        rankv = gr->fwd_first ? 1 : 2;
                    }
                }
                if (cand_op < 0 && gr->split && z.wn[g] < z.bn[g]) {
                    int m = L[z.wn[g]];
                    if (z.b_end[(size_t)m * S + st] <= now) {
                        cand_op = PTC_SCHED_W;
                        cand_mb = m;
                        rankv = 3;
                    }
                }
                if (cand_op < 0)
                    continue;
                /* lower rankv wins; then, for B/I and W the older micro-batch,
                 * for F the later stage; remaining ties: later stage. */
                bool better = rankv < best_rank;
                if (rankv == best_rank) {
                    if (cand_op == PTC_SCHED_F && !gr->fwd_oldest)
                        better = g > best_g || (g == best_g && cand_mb < best_mb);
                    else
                        better = cand_mb < best_mb || (cand_mb == best_mb && g > best_g);
                }
                if (better) {
                    best_rank = rankv;
                    best_op = cand_op;
                    best_g = g;
                    best_mb = cand_mb;
                }
            }
            if (best_op < 0)
                continue;
            int st = best_g % S;
            size_t cl = (size_t)best_mb * S + st;
            double cost;
            switch (best_op) {
            case PTC_SCHED_F:
                cost = gr->f;
                z.fn[best_g]++;
                z.held[best_g]++;
                break;
            case PTC_SCHED_W:
                cost = gr->w;
                z.wn[best_g]++;
                z.wpend[r]--;
                break;
            default:
                cost = best_op == PTC_SCHED_B ? gr->b : gr->b - gr->w;
                z.bn[best_g]++;
                if (gr->split)
                    z.wpend[r]++;
                break;
            }
            double end = now + cost * scale;
            /* Results become visible at `end`; the rank is busy until then. */
            if (best_op == PTC_SCHED_F)
                z.f_end[cl] = end;
            else if (best_op != PTC_SCHED_W)
                z.b_end[cl] = end;
            if (best_op == PTC_SCHED_B || best_op == PTC_SCHED_I)
                z.held[best_g]--; /* freed at its end: count it now, the rank is busy */
            z.free_at[r] = end;
            z.running[r] = true;
            left--;
            if ((rc = add(s, r, best_op, best_mb, s->place_chunk[best_g])))
                goto out_free;
            next = fmin(next, end);
        }
        if (!left)
            break;
        if (isinf(next)) {
            rc = ptc_error_set(PTC_E_INVAL, "internal: greedy scheduler stalled");
            goto out_free;
        }
        /* Zero-length actions end at `now`: loop again at the same time. */
        now = next;
    }
    rc = PTC_OK;
out_free:
    ptc_free(z.list);
    ptc_free(z.lcount);
    ptc_free(z.loff);
    ptc_free(z.fn);
    ptc_free(z.bn);
    ptc_free(z.wn);
    ptc_free(z.held);
    ptc_free(z.f_end);
    ptc_free(z.b_end);
    ptc_free(z.free_at);
    ptc_free(z.running);
    ptc_free(z.wpend);
    return rc;
}

static int gen_greedy(ptc_sched *s, const ptc_sched_gen *g, bool split)
{
    int GS = s->pipes * s->stages, P = s->ranks, rc;
    greedy gr;
    memset(&gr, 0, sizeof gr);
    gr.s = s;
    gr.split = split;
    gr.fwd_first = gr.fwd_oldest = s->pipes == 2;
    gr.f = g->cost_f > 0 ? g->cost_f : 1;
    gr.b = g->cost_b > 0 ? g->cost_b : 2;
    gr.w = g->cost_w > 0 && g->cost_w < gr.b ? g->cost_w : gr.b / 2;
    gr.cap = ptc_malloc((size_t)GS * sizeof(int));
    gr.wmax = ptc_malloc((size_t)P * sizeof(int));
    if (!gr.cap || !gr.wmax) {
        ptc_free(gr.cap);
        ptc_free(gr.wmax);
        return PTC_E_NOMEM;
    }
    for (int r = 0; r < P; r++)
        gr.wmax[r] = P;
    for (int x = 0; x < GS; x++) {
        int st = x % s->stages;
        if (s->pipes == 2) /* Chimera: 1F1B's P-st, less one on the upper half */
            gr.cap[x] = PTC_MAX(1, P - st - (2 * st <= P - 1));
        else if (s->stages == P) /* ZB-H1: as 1F1B */
            gr.cap[x] = P - st;
        else               /* V: stage st; caps 2P-1-i and i+1 on rank i */
            gr.cap[x] = st < P ? 2 * P - 1 - st : 2 * P - st;
    }
    rc = greedy_run(&gr);
    ptc_free(gr.cap);
    ptc_free(gr.wmax);
    return rc;
}

int ptc_sched_generate(ptc_sched **out, const ptc_sched_gen *g)
{
    *out = NULL;
    int P = g->ranks, M = g->microbatches, V = g->chunks > 0 ? g->chunks : 1;
    if (P < 1 || M < 1)
        return ptc_error_set(PTC_E_INVAL, "stages and microbatches must be >= 1");
    if ((size_t)g->kind >= PTC_ARRAY_LEN(kind_names))
        return ptc_error_set(PTC_E_INVAL, "unknown schedule kind %d", (int)g->kind);
    int stages = P, pipes = 1, k = 0;
    switch (g->kind) {
    case PTC_SCHED_INTERLEAVED:
        if (M % P)
            return ptc_error_set(PTC_E_INVAL, "interleaved needs microbatches (%d) to be a "
                                              "multiple of stages (%d)", M, P);
        if (V < 1 || (int64_t)V * P > PTC_SCHED_MAX_STAGES)
            return ptc_error_set(PTC_E_INVAL, "chunks out of range");
        stages = P * V;
        break;
    case PTC_SCHED_KFKB:
        if (g->k < 1 || g->k > M)
            return ptc_error_set(PTC_E_INVAL, "kfkb needs 1 <= k (%d) <= microbatches (%d)",
                                 g->k, M);
        k = g->k;
        break;
    case PTC_SCHED_CHIMERA:
        if (P < 2)
            return ptc_error_set(PTC_E_INVAL, "chimera needs at least 2 stages");
        pipes = 2;
        break;
    case PTC_SCHED_ZBV:
        stages = 2 * P;
        break;
    default:
        break;
    }
    ptc_sched *s;
    PTC_TRY(ptc_sched_create(&s, P, stages, pipes, M));
    int rc = ptc_sched_set_kind(s, kind_names[g->kind], k);
    if (rc)
        goto out_destroy;
    if (g->kind == PTC_SCHED_CHIMERA) {
        for (int st = 0; st < P && !rc; st++) {
            rc = ptc_sched_place(s, 0, st, st, 0);
            if (!rc)
                rc = ptc_sched_place(s, 1, st, P - 1 - st, 1);
        }
        for (int m = 0; m < M && !rc; m++)
            rc = ptc_sched_set_mb_pipe(s, m, m % 2);
    } else if (g->kind == PTC_SCHED_ZBV) {
        for (int st = 0; st < 2 * P && !rc; st++)
            rc = st < P ? ptc_sched_place(s, 0, st, st, 0)
                        : ptc_sched_place(s, 0, st, 2 * P - 1 - st, 1);
    } else {
        rc = ptc_sched_place_looped(s);
    }
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
    case PTC_SCHED_ZBH1:
        rc = gen_greedy(s, g, true);
        break;
    case PTC_SCHED_CHIMERA:
        rc = gen_greedy(s, g, false);
        break;
    case PTC_SCHED_ZBV:
        rc = gen_greedy(s, g, true);
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
