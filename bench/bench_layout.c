/* Layout speed: 1000 Llama-named tensors (parameters and Adam moments,
 * BF16, about 4096 x 4096) under dp=4,tp=4,pp=4,zero=1 (64 ranks): create
 * the layout, then ask every tensor's shard and pieces on every rank.
 * Goal: under 100 ms in all. Baseline in the same run: the same 64,000
 * queries answered from a table of the results (what a cache could give at
 * best), so the ratio is what computing the placement costs over looking it
 * up.
 *
 *   bench_layout [--rounds N]
 *
 * Prints the median of N rounds (default 5) and PASS/FAIL; exits 1 on FAIL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ptc/layout.h"

#define NT 1000
#define RANKS 64
#define MAXP 1024

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rounds = 5;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
    if (rounds < 1 || rounds > 1000)
        rounds = 5;
    static ptc_tensor_info t[NT];
    static char names[NT][80];
    static const char *const parts[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                        "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                                        "mlp.down_proj.weight"};
    size_t n = 0;
    for (int L = 0; n + 10 <= NT; L++)
        for (int k = 0; k < 5; k++)
            for (int o = 0; o < 2; o++) {
                snprintf(names[n], sizeof names[n], "model.layers.%d.%s%s", L, parts[k],
                         o ? ".exp_avg" : "");
                t[n] = (ptc_tensor_info){.name = names[n], .dtype = PTC_DTYPE_BF16, .ndim = 2,
                                         .shape = {4096 + 3 * k, 4096 - k}};
                n++;
            }
    ptc_rules *r = NULL;
    ptc_config c;
    if (ptc_rules_load(&r, "llama") != PTC_OK || ptc_config_parse(&c, "dp=4,tp=4,pp=4,zero=1"))
        return fprintf(stderr, "setup: %s\n", ptc_last_error()), 2;
    static ptc_piece pc[MAXP];
    /* the table of the baseline: per (tensor, rank) its piece count and
     * first piece, filled once outside any timer */
    static size_t table_np[NT][RANKS];
    static ptc_piece table_first[NT][RANKS];
    double *lay = calloc((size_t)rounds, sizeof *lay), *tab = calloc((size_t)rounds, sizeof *tab);
    if (!lay || !tab)
        return 2;
    long long total = 0, check = 0;
    for (int round = 0; round < rounds; round++) {
        double t0 = now_ms();
        ptc_layout *l = NULL;
        if (ptc_layout_create(&l, t, n, r, &c) != PTC_OK)
            return fprintf(stderr, "layout: %s\n", ptc_last_error()), 2;
        total = 0;
        for (size_t i = 0; i < n; i++)
            for (int rank = 0; rank < RANKS; rank++) {
                ptc_shard sh;
                size_t np;
                if (ptc_layout_shard(l, i, rank, &sh) != PTC_OK ||
                    ptc_layout_pieces(l, i, rank, pc, MAXP, &np) != PTC_OK)
                    return fprintf(stderr, "query: %s\n", ptc_last_error()), 2;
                total += (long long)np;
                if (round == 0) {
                    table_np[i][rank] = np;
                    table_first[i][rank] = np ? pc[0] : (ptc_piece){0};
                }
            }
        lay[round] = now_ms() - t0;
        ptc_layout_destroy(l);
        t0 = now_ms();
        check = 0;
        for (size_t i = 0; i < n; i++)
            for (int rank = 0; rank < RANKS; rank++) {
                size_t np = table_np[i][rank];
                if (np)
                    memcpy(pc, &table_first[i][rank], sizeof pc[0]);
                check += (long long)np + (long long)pc[0].box.lo[0];
            }
        tab[round] = now_ms() - t0;
    }
    qsort(lay, (size_t)rounds, sizeof *lay, cmp_d);
    qsort(tab, (size_t)rounds, sizeof *tab, cmp_d);
    double ml = lay[rounds / 2], mt = tab[rounds / 2];
    printf("layout: %zu tensors x %d ranks, %lld pieces: %.1f ms (median of %d)\n", n, RANKS,
           total, ml, rounds);
    printf("table lookups of the same answers: %.3f ms (checksum %lld)\n", mt, check);
    printf("ratio layout / table: %.0fx\n", mt > 0 ? ml / mt : 0.0);
    printf("goal: under 100 ms: %s\n", ml < 100.0 ? "PASS" : "FAIL");
    free(lay);
    free(tab);
    ptc_rules_destroy(r);
    return ml < 100.0 ? 0 : 1;
}
