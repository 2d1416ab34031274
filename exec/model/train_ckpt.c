/* The training job's state in its store: the layout it saves and loads
 * under, and which of its buffers hold which layout rank's shards.
 *
 * A job of D replicas, T tensor-parallel shards and a schedule of S stages
 * per pipe (P pipeline ranks; S = P·chunks for interleaved and V-shaped
 * schedules; two pipes for Chimera) stores its state under the rules preset
 * ptc-mlp and the configuration dp = D·pipes, tp = T, pp = S (zero as the
 * job's): every chunk of every process is one layout rank, so each process
 * saves and loads the ranks of its chunks. The layout's data-parallel index
 * of a chunk is its replica index (ptc_exec_model_replica: the
 * data-parallel index, and for Chimera the replica pair's order), so that
 * under zero=1 a chunk's AdamW ranges are the layout's flat ranges. Any
 * other job — other D, T, P, schedule or zero — loads the same version into
 * its own layout: the stored layout is only how it was written. */
#include <stdio.h>
#include <string.h>

#include "exec/model/train_internal.h"
#include "ptc/ckpt.h"

int train_ckpt_layout(const ptc_train_opts *o, const ptc_sched *s, ptc_layout **layout,
                      ptc_rules **rules)
{
    *layout = NULL;
    *rules = NULL;
    ptc_tensor_info *t = NULL;
    size_t n = 0;
    PTC_TRY(ptc_exec_model_tensors(&o->model, true, &t, &n));
    ptc_config c;
    ptc_config_init(&c);
    c.dp = o->cfg.dp * ptc_sched_pipes(s);
    c.tp = o->cfg.tp;
    c.pp = ptc_sched_stages(s);
    c.zero = o->cfg.zero;
    c.nlayers = o->cfg.nlayers; /* the model checked they fit its stages */
    memcpy(c.layers, o->cfg.layers, sizeof c.layers);
    int rc = ptc_rules_load(rules, "ptc-mlp");
    if (rc == PTC_OK)
        rc = ptc_layout_create(layout, t, n, *rules, &c);
    ptc_exec_model_tensors_free(t, n);
    if (rc != PTC_OK) {
        ptc_rules_destroy(*rules);
        *rules = NULL;
    }
    return rc;
}

/* The layout rank of chunk (pipe, stage) of this process. */
static int chunk_rank(const ptc_train_opts *o, const ptc_sched *s, int pp_i, int dp_i, int tp_i,
                      int pipe, int stage)
{
    int rep, nrep;
    ptc_exec_model_replica(ptc_sched_pipes(s), ptc_sched_ranks(s), o->cfg.dp, pp_i, dp_i, pipe,
                           stage, &rep, &nrep);
    return (stage * nrep + rep) * o->cfg.tp + tp_i;
}

int train_ckpt_buffers(const ptc_train_opts *o, const ptc_sched *s, const ptc_exec_model *m,
                       const ptc_layout *l, int pp_i, int dp_i, int tp_i, int **ranks_out,
                       size_t *nranks_out, void ***bufs_out)
{
    *ranks_out = NULL;
    *bufs_out = NULL;
    *nranks_out = 0;
    size_t np = 0, nt = ptc_layout_count(l);
    const ptc_exec_param *p = ptc_exec_model_params(m, &np);
    int nch = ptc_sched_chunks(s, pp_i);
    int *ranks = ptc_calloc((size_t)(nch > 0 ? nch : 1), sizeof *ranks);
    void **bufs = ptc_calloc((size_t)(nch > 0 ? nch : 1) * (nt ? nt : 1), sizeof *bufs);
    if (!ranks || !bufs) {
        ptc_free(ranks);
        ptc_free(bufs);
        return PTC_E_NOMEM;
    }
    for (int c = 0; c < nch; c++) {
        int pipe, stage;
        ptc_sched_stage_of(s, pp_i, c, &pipe, &stage);
        ranks[c] = chunk_rank(o, s, pp_i, dp_i, tp_i, pipe, stage);
        for (size_t i = 0; i < np; i++) {
            if (p[i].chunk != c)
                continue;
            size_t nl = strlen(p[i].name);
            for (size_t t = 0; t < nt; t++) {
                const char *tn = ptc_layout_tensor(l, t)->name;
                if (strncmp(tn, p[i].name, nl) != 0)
                    continue;
                if (!tn[nl])
                    bufs[(size_t)c * nt + t] = p[i].data;
                else if (!strcmp(tn + nl, ".exp_avg"))
                    bufs[(size_t)c * nt + t] = p[i].exp_avg;
                else if (!strcmp(tn + nl, ".exp_avg_sq"))
                    bufs[(size_t)c * nt + t] = p[i].exp_avg_sq;
            }
        }
    }
    *ranks_out = ranks;
    *bufs_out = bufs;
    *nranks_out = (size_t)nch;
    return PTC_OK;
}
