/* Check: the cost model's activation memory against the runtime's own
 * count. Runs the demo model (exec.h) over MPI for several schedules
 * (`mpirun -np P search_memory`, dp=1, pp=P; alone it runs pp=1),
 * counting on every rank the bytes of the activation blocks the model
 * holds (allocated at a micro-batch's F, released at its B or W), and
 * compares the count of the rank the cost model names as the fullest with
 * ptc_cost_evaluate()'s activation bytes of the same configuration (the
 * mlp spec of the same model): they must be equal, for one-chunk and
 * two-chunk schedules alike. One JSON object on rank 0; exit 1 on a
 * mismatch. Run by tests/mpi/test_search_memory.sh. */
#include <stdio.h>
#include <string.h>

#include "exec/model/model_internal.h"
#include "ptc/exec_model.h"
#include "ptc/search.h"

typedef struct wrap {
    ptc_exec_stage in;
    ptc_exec_model *x;
    double live, peak;
} wrap;

static double block(const wrap *w, int c) { return (double)w->x->ch[c].a_total * sizeof(float); }

static int w_forward(void *u, int c, int mb, const void *in, void *out)
{
    wrap *w = u;
    PTC_TRY(w->in.forward(w->in.user, c, mb, in, out));
    w->live += block(w, c);
    w->peak = w->live > w->peak ? w->live : w->peak;
    return PTC_OK;
}

static int w_backward(void *u, int c, int mb, const void *d, void *di)
{
    wrap *w = u;
    PTC_TRY(w->in.backward(w->in.user, c, mb, d, di));
    w->live -= block(w, c);
    return PTC_OK;
}

static int w_backward_input(void *u, int c, int mb, const void *d, void *di)
{
    wrap *w = u;
    return w->in.backward_input(w->in.user, c, mb, d, di); /* still held for W */
}

static int w_backward_weight(void *u, int c, int mb)
{
    wrap *w = u;
    PTC_TRY(w->in.backward_weight(w->in.user, c, mb));
    w->live -= block(w, c);
    return PTC_OK;
}

static int w_grads(void *u, int c, float **g, size_t *n)
{
    wrap *w = u;
    return w->in.grads(w->in.user, c, g, n);
}

static int w_optimizer(void *u)
{
    wrap *w = u;
    return w->in.optimizer_step(w->in.user);
}

static int data(void *user, int64_t step, int64_t gmb, int32_t *ids, int32_t *tg, int n)
{
    (void)user;
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((step * 31 + gmb * 7 + i) % 16);
        tg[i] = (ids[i] * 3 + 1) % 16;
    }
    return PTC_OK;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    const char *spec_text = "mlp:layers=8,hidden=32,vocab=16,tokens=8";
    ptc_exec_model_cfg mc = {.layers = 8, .hidden = 32, .vocab = 16, .tokens = 8, .lr = 1e-3f};
    ptc_search_spec sp;
    ptc_cost_model *cm;
    if (ptc_search_spec_parse(&sp, spec_text) || ptc_cost_model_from_spec(&cm, &sp)) {
        fprintf(stderr, "spec: %s\n", ptc_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    struct {
        ptc_sched_kind_id kind;
        int V, k;
    } kinds[] = {{PTC_SCHED_1F1B, 1, 0},  {PTC_SCHED_GPIPE, 1, 0}, {PTC_SCHED_KFKB, 1, 2},
                 {PTC_SCHED_ZBH1, 1, 0},  {PTC_SCHED_INTERLEAVED, 2, 0},
                 {PTC_SCHED_ZBV, 2, 0},   {PTC_SCHED_CHIMERA, 1, 0}};
    int M = 8, bad = 0;
    if (rank == 0)
        printf("{\"pp\": %d, \"model\": \"%s\", \"microbatches\": %d, \"runs\": [", P, spec_text,
               M);
    bool first = true;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (P == 1 && kinds[i].kind != PTC_SCHED_1F1B)
            continue;
        if (kinds[i].kind == PTC_SCHED_ZBV && 2 * P > mc.layers)
            continue;
        if (kinds[i].kind == PTC_SCHED_INTERLEAVED && M % P)
            continue;
        ptc_sched_gen g = {kinds[i].kind, P, M, kinds[i].V, kinds[i].k ? kinds[i].k : 1,
                           1, 2, 1};
        ptc_sched *s;
        ptc_exec_model *x;
        ptc_exec *e;
        ptc_config cfg;
        ptc_config_init(&cfg);
        cfg.pp = P;
        if (ptc_sched_generate(&s, &g) ||
            ptc_exec_model_create(&x, &mc, s, rank, 0, M, data, NULL)) {
            fprintf(stderr, "rank %d: %s\n", rank, ptc_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        wrap w = {.x = x};
        ptc_exec_model_stage(x, &w.in);
        ptc_exec_stage fns = {&w, w_forward, w_backward, w_backward_input, w_backward_weight,
                              w_grads, w_optimizer};
        ptc_exec_opts eo;
        ptc_exec_opts_init(&eo);
        eo.act_bytes = ptc_exec_model_act_bytes(&mc);
        if (ptc_exec_create(&e, s, &cfg, MPI_COMM_WORLD, &fns, &eo)) {
            fprintf(stderr, "rank %d: %s\n", rank, ptc_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int step = 0; step < 2; step++) {
            ptc_exec_model_set_step(x, step);
            if (ptc_exec_step(e)) {
                fprintf(stderr, "rank %d: %s\n", rank, ptc_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        double peaks[64] = {0};
        MPI_Gather(&w.peak, 1, MPI_DOUBLE, peaks, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            ptc_search_cluster c;
            ptc_search_cluster_init(&c);
            c.gpus = P;
            ptc_search_job j;
            ptc_search_job_init(&j);
            j.global_batch = M;
            ptc_search_config sc = {1, 1, P, 0, P == 1 ? PTC_SCHED_1F1B : kinds[i].kind, M, 1,
                                    kinds[i].V, kinds[i].k};
            ptc_cost_result r;
            if (ptc_cost_evaluate(cm, &c, &j, &sc, &r)) {
                fprintf(stderr, "evaluate: %s\n", ptc_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            double measured = peaks[r.mem_rank], most = 0;
            for (int q = 0; q < P && q < 64; q++)
                most = peaks[q] > most ? peaks[q] : most;
            bool ok = r.mem_act == measured;
            bad += !ok;
            printf("%s\n  {\"schedule\": \"%s\", \"predicted_activation_bytes\": %.0f, "
                   "\"runtime_activation_bytes\": %.0f, \"rank\": %d, "
                   "\"runtime_largest_over_ranks\": %.0f, \"ok\": %s}",
                   first ? "" : ",", ptc_sched_kind_name(kinds[i].kind), r.mem_act, measured,
                   r.mem_rank, most, ok ? "true" : "false");
            first = false;
        }
        ptc_exec_destroy(e);
        ptc_exec_model_destroy(x);
        ptc_sched_destroy(s);
    }
    if (rank == 0)
        printf("\n], \"all_ok\": %s}\n", bad ? "false" : "true");
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    ptc_cost_model_destroy(cm);
    MPI_Finalize();
    return bad ? 1 : 0;
}
