/* Planner speed: a 1000-tensor Llama-named model (with Adam moments when
 * zero=1) planned between 64-rank and 48-rank configurations, one host and
 * 8 ranks per host. Goal: each plan in under 1 s.
 *
 *   bench_plan [--layers N]
 *
 * Prints per case the plan time, the figures and PASS/FAIL against the
 * goal; exits 1 if a case misses it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/plan.h"
#include "ptc/store.h"

#define MAXT 4096

int main(int argc, char **argv)
{
    int layers = 110;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
            layers = atoi(argv[++i]);
    static const char *const lt[] = {
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
        "mlp.down_proj.weight",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
    static ptc_tensor_info t[MAXT];
    static char names[MAXT][96];
    size_t n = 0;
    const int64_t h = 4096, ff = 11008, kv = 1024, vocab = 32003;
    for (int L = 0; L < layers && n + 9 < MAXT; L++)
        for (int k = 0; k < 9; k++) {
            snprintf(names[n], sizeof names[0], "model.layers.%d.%s", L, lt[k]);
            t[n] = (ptc_tensor_info){.name = names[n], .dtype = PTC_DTYPE_BF16, .ndim = 2};
            int64_t a = h, b = h;
            if (k == 1 || k == 2)
                a = kv;
            if (k == 4 || k == 5)
                a = ff;
            if (k == 6)
                b = ff;
            t[n].shape[0] = a;
            t[n].shape[1] = b;
            if (k >= 7)
                t[n].ndim = 1;
            n++;
        }
    const char *extra[] = {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"};
    for (int k = 0; k < 3; k++) {
        snprintf(names[n], sizeof names[0], "%s", extra[k]);
        t[n] = (ptc_tensor_info){.name = names[n], .dtype = PTC_DTYPE_BF16, .ndim = k < 2 ? 2 : 1,
                                 .shape = {k < 2 ? vocab : h, h}};
        n++;
    }
    size_t nparam = n;
    /* Adam moments for the zero=1 cases */
    static ptc_tensor_info t2[MAXT * 2];
    static char names2[MAXT][112];
    memcpy(t2, t, sizeof(ptc_tensor_info) * nparam);
    size_t n2 = nparam;
    for (size_t i = 0; i < nparam && n2 < 2 * MAXT; i++) {
        snprintf(names2[i], sizeof names2[0], "%s.exp_avg", t[i].name);
        t2[n2] = t[i];
        t2[n2].name = names2[i];
        t2[n2].dtype = PTC_DTYPE_F32;
        n2++;
    }
    ptc_rules *rules;
    const char *txt;
    ptc_rules_preset_text("llama", &txt);
    if (ptc_rules_parse(&rules, txt, strlen(txt), "llama") != PTC_OK) {
        fprintf(stderr, "rules: %s\n", ptc_last_error());
        return 1;
    }
    struct {
        const char *from, *to;
        int hosts;
        bool optim;
    } cases[] = {
        {"dp=2,tp=4,pp=8", "dp=3,tp=4,pp=4", 0, false},
        {"dp=2,tp=4,pp=8", "dp=3,tp=4,pp=4", 8, false},
        {"dp=1,tp=8,pp=8", "dp=2,tp=8,pp=3", 8, false},
        {"dp=2,tp=4,pp=8,zero=1", "dp=3,tp=4,pp=4,zero=1", 8, true},
    };
    int fails = 0;
    printf("%-24s %-24s %5s %7s %9s %12s %14s %14s %12s %s\n", "from", "to", "hosts", "tensors",
           "seconds", "transfers", "bytes_total", "bytes_network", "lower_bound", "goal<1s");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ptc_config a, b;
        ptc_config_parse(&a, cases[c].from);
        ptc_config_parse(&b, cases[c].to);
        size_t nn = cases[c].optim ? n2 : nparam;
        ptc_tensor_info *tt = cases[c].optim ? t2 : t;
        /* the 1000-tensor goal: planning alone, layouts built beforehand */
        ptc_layout *la, *lb;
        if (ptc_layout_create(&la, tt, nn, rules, &a) != PTC_OK ||
            ptc_layout_create(&lb, tt, nn, rules, &b) != PTC_OK) {
            fprintf(stderr, "layout: %s\n", ptc_last_error());
            return 1;
        }
        ptc_plan *p;
        ptc_plan_options o = {.hosts = cases[c].hosts};
        if (ptc_plan_create(&p, la, lb, &o) != PTC_OK) {
            fprintf(stderr, "plan: %s\n", ptc_last_error());
            return 1;
        }
        ptc_plan_stats s;
        ptc_plan_stats_get(p, &s);
        bool ok = s.plan_seconds < 1.0 && s.bytes_network == s.bytes_network_lower_bound;
        fails += !ok;
        printf("%-24s %-24s %5d %7zu %9.3f %12llu %14llu %14llu %12llu %s\n", cases[c].from,
               cases[c].to, cases[c].hosts, nn, s.plan_seconds, (unsigned long long)s.transfers,
               (unsigned long long)s.bytes_total, (unsigned long long)s.bytes_network,
               (unsigned long long)s.bytes_network_lower_bound, ok ? "PASS" : "FAIL");
        ptc_plan_destroy(p);
        ptc_layout_destroy(la);
        ptc_layout_destroy(lb);
    }
    ptc_rules_destroy(rules);
    return fails ? 1 : 0;
}
