/* Benchmark: configuration search for GPT models on 4096 A100-class GPUs
 * (8 per host, NVLink inside, InfiniBand between): coordinate descent (the
 * default of `ptc suggest`; goal <= 1 s) and, in the same run, the
 * exhaustive search it replaces, with the ratio of their times and of
 * their best step times. Prints one JSON object. */
#include <stdio.h>
#include <string.h>

#include "ptc/search.h"

typedef struct run {
    double seconds, step;
    size_t evaluated, simulations;
    ptc_search_config best;
} run;

static int search(const ptc_cost_model *m, const ptc_search_cluster *c, const ptc_search_job *j,
                  bool exhaustive, run *out)
{
    ptc_search_opts o;
    ptc_search_opts_init(&o);
    o.exhaustive = exhaustive;
    ptc_search_result *r;
    if (ptc_search_run(&r, m, c, j, &o) != PTC_OK) {
        fprintf(stderr, "search: %s\n", ptc_last_error());
        return 1;
    }
    ptc_search_stats st;
    ptc_search_result_stats(r, &st);
    out->seconds = st.seconds;
    out->evaluated = st.evaluated;
    out->simulations = st.simulations;
    out->step = ptc_search_result_count(r) ? ptc_search_result_entry(r, 0)->cost.step_time : 0;
    if (ptc_search_result_count(r))
        out->best = ptc_search_result_entry(r, 0)->config;
    ptc_search_result_destroy(r);
    return 0;
}

int main(void)
{
    static const struct {
        const char *name, *spec;
        int batch;
    } cases[] = {
        {"gpt-175b", "gpt:layers=96,hidden=12288,heads=96,vocab=51200,seq=2048", 2048},
        {"gpt-530b", "gpt:layers=105,hidden=20480,heads=128,vocab=51200,seq=2048", 4096},
        {"gpt-1t", "gpt:layers=128,hidden=25600,heads=160,vocab=51200,seq=2048", 4096},
    };
    const int gpus = 4096;
    printf("{\"gpus\": %d, \"goal_descent_s\": 1.0, \"cases\": [", gpus);
    double worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ptc_search_spec sp;
        ptc_cost_model *m;
        if (ptc_search_spec_parse(&sp, cases[i].spec) || ptc_cost_model_from_spec(&m, &sp)) {
            fprintf(stderr, "%s: %s\n", cases[i].spec, ptc_last_error());
            return 1;
        }
        ptc_search_cluster c;
        ptc_search_cluster_init(&c);
        c.gpus = gpus;
        ptc_search_job j;
        ptc_search_job_init(&j);
        j.global_batch = cases[i].batch;
        j.dp_overlap = true;
        run d, x;
        if (search(m, &c, &j, false, &d) || search(m, &c, &j, true, &x))
            return 1;
        char bd[160], bx[160];
        ptc_search_config_format(&d.best, bd, sizeof bd);
        ptc_search_config_format(&x.best, bx, sizeof bx);
        printf("%s\n  {\"model\": \"%s\", \"global_batch\": %d, \"descent_s\": %.4f, "
               "\"exhaustive_s\": %.4f, \"speedup\": %.1f, \"descent_evaluated\": %zu, "
               "\"exhaustive_evaluated\": %zu, \"descent_simulations\": %zu, "
               "\"exhaustive_simulations\": %zu, \"descent_best\": \"%s\", "
               "\"exhaustive_best\": \"%s\", \"step_ratio\": %.6f}",
               i ? "," : "", cases[i].name, cases[i].batch, d.seconds, x.seconds,
               x.seconds / d.seconds, d.evaluated, x.evaluated, d.simulations, x.simulations,
               bd, bx, d.step / x.step);
        if (d.seconds > worst)
            worst = d.seconds;
        ptc_cost_model_destroy(m);
    }
    printf("\n], \"worst_descent_s\": %.4f, \"within_goal\": %s}\n", worst,
           worst <= 1.0 ? "true" : "false");
    return 0;
}
