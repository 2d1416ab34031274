/* What moving a job between configurations costs: the link model over a
 * plan's per-host figures, and the configuration search's candidates
 * ranked by step time plus the move amortised over the steps that follow
 * (docs/search.md, "Moving there"). Figures only: no data is read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util_internal.h"
#include "ptc/search_store.h"

/* ---- the link model --------------------------------------------------------------- */

int ptc_search_net_parse(ptc_search_cluster *c, const char *text)
{
    static const char *const keys[] = {"intra-bw", "inter-bw", "intra-lat", "inter-lat"};
    ptc_search_cluster out = *c;
    const char *p = text;
    if (!*p)
        return ptc_error_set(PTC_E_INVAL, "net: empty (expected intra-bw=GBPS,inter-bw=GBPS,...)");
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (!eq || eq > end)
            return ptc_error_set(PTC_E_INVAL, "net: '%.*s' is not key=value", (int)(end - p), p);
        size_t kl = (size_t)(eq - p);
        int k = -1;
        for (int i = 0; i < 4; i++)
            if (strlen(keys[i]) == kl && !strncmp(p, keys[i], kl))
                k = i;
        if (k < 0)
            return ptc_error_set(PTC_E_INVAL,
                                 "net: unknown key '%.*s' (intra-bw, inter-bw, intra-lat, "
                                 "inter-lat)", (int)PTC_MIN(kl, 64), p);
        char num[64];
        size_t vl = (size_t)(end - eq - 1);
        if (vl == 0 || vl >= sizeof num)
            return ptc_error_set(PTC_E_INVAL, "net: bad value for %s", keys[k]);
        memcpy(num, eq + 1, vl);
        num[vl] = '\0';
        char *e;
        double v = strtod(num, &e);
        bool lat = k >= 2;
        if (*e || !isfinite(v) || v > 1e12 || (lat ? v < 0 : v <= 0))
            return ptc_error_set(PTC_E_INVAL, "net: %s=%s: expected a %s number", keys[k], num,
                                 lat ? "non-negative" : "positive");
        switch (k) {
        case 0: out.intra_bw = v * 1e9; break;
        case 1: out.inter_bw = v * 1e9; break;
        case 2: out.intra_lat = v * 1e-6; break;
        default: out.inter_lat = v * 1e-6; break;
        }
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return ptc_error_set(PTC_E_INVAL, "net: trailing ','");
    }
    *c = out;
    return PTC_OK;
}

int ptc_search_move_time(const ptc_plan *p, const ptc_search_cluster *c, ptc_search_move *out)
{
    memset(out, 0, sizeof *out);
    out->busiest_host = -1;
    if (!(c->inter_bw > 0) || !(c->intra_bw > 0) || !(c->inter_lat >= 0) || !(c->intra_lat >= 0))
        return ptc_error_set(PTC_E_INVAL, "move time: link bandwidths must be > 0");
    ptc_plan_stats st;
    ptc_plan_stats_get(p, &st);
    int ws = ptc_config_world(ptc_layout_config(ptc_plan_source(p)));
    int wt = ptc_config_world(ptc_layout_config(ptc_plan_target(p)));
    /* GPUs per host: the most ranks one side places on it */
    int *gs = ptc_calloc((size_t)st.hosts + 1, sizeof *gs);
    int *gt = ptc_calloc((size_t)st.hosts + 1, sizeof *gt);
    if (!gs || !gt) {
        ptc_free(gs);
        ptc_free(gt);
        return PTC_E_NOMEM;
    }
    for (int r = 0; r < ws; r++)
        gs[ptc_plan_src_host(p, r)]++;
    for (int r = 0; r < wt; r++)
        gt[ptc_plan_dst_host(p, r)]++;
    double net = 0, copy = 0;
    for (int h = 0; h < st.hosts; h++) {
        ptc_plan_host_stats hs;
        ptc_plan_host_stats_get(p, h, &hs);
        double gpus = (double)PTC_MAX(1, PTC_MAX(gs[h], gt[h]));
        uint64_t b = PTC_MAX(hs.bytes_in, hs.bytes_out);
        double tn = (double)b / (c->inter_bw * gpus);
        double tc = (double)hs.bytes_copy / (c->intra_bw * gpus);
        if (b && tn > net) {
            net = tn;
            out->busiest_host = h;
            out->busiest_bytes = b;
        }
        copy = PTC_MAX(copy, tc);
    }
    ptc_free(gs);
    ptc_free(gt);
    out->network_seconds = net + (net > 0 ? c->inter_lat : 0);
    out->copy_seconds = copy + (copy > 0 ? c->intra_lat : 0);
    out->seconds = out->network_seconds + out->copy_seconds;
    return PTC_OK;
}

/* ---- candidates ranked with the move ----------------------------------------------- */

static int cmp_moved(const void *a, const void *b)
{
    const ptc_search_moved *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

/* The move from @p from to configuration @p e (dp, tp, pp, zero). */
static int plan_move(const ptc_search_tensors *t, const ptc_layout *from,
                     const ptc_search_entry *e, const ptc_search_cluster *c, ptc_search_move *mv,
                     uint64_t *net_bytes)
{
    ptc_config to;
    memset(&to, 0, sizeof to);
    to.dp = e->config.dp;
    to.tp = e->config.tp;
    to.pp = e->config.pp;
    to.zero = e->config.zero;
    size_t n;
    const ptc_tensor_info *ti = ptc_search_tensors_list(t, &n);
    ptc_layout *lt = NULL;
    ptc_plan *p = NULL;
    ptc_plan_options po = {.hosts = c->gpus_per_host, .figures_only = true};
    int rc = ptc_layout_create(&lt, ti, n, ptc_search_tensors_rules(t), &to);
    if (rc == PTC_OK)
        rc = ptc_plan_create(&p, from, lt, &po);
    if (rc == PTC_OK)
        rc = ptc_search_move_time(p, c, mv);
    if (rc == PTC_OK) {
        ptc_plan_stats st;
        ptc_plan_stats_get(p, &st);
        *net_bytes = st.bytes_network;
    }
    ptc_plan_destroy(p);
    ptc_layout_destroy(lt);
    return rc;
}

int ptc_search_rank_moves(const ptc_search_result *r, const ptc_search_tensors *t,
                          const ptc_config *from, const ptc_search_cluster *c,
                          double amortize_steps, ptc_search_moved **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    if (!(amortize_steps >= 1))
        return ptc_error_set(PTC_E_INVAL, "the move is amortised over at least one step");
    size_t n = ptc_search_result_count(r), nt;
    const ptc_tensor_info *ti = ptc_search_tensors_list(t, &nt);
    ptc_layout *ls = NULL;
    PTC_TRY(ptc_layout_create(&ls, ti, nt, ptc_search_tensors_rules(t), from));
    ptc_search_moved *m = ptc_calloc(n + 1, sizeof *m);
    int rc = m ? PTC_OK : PTC_E_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n && rc == PTC_OK; i++) {
        const ptc_search_entry *e = ptc_search_result_entry(r, i);
        ptc_search_moved *x = &m[k];
        x->entry = *e;
        x->order = i;
        /* entries differing only in schedule or micro-batches move alike */
        size_t j = 0;
        for (; j < k; j++)
            if (m[j].entry.config.dp == e->config.dp && m[j].entry.config.tp == e->config.tp &&
                m[j].entry.config.pp == e->config.pp && m[j].entry.config.zero == e->config.zero)
                break;
        if (j < k) {
            x->move = m[j].move;
            x->move_bytes_network = m[j].move_bytes_network;
        } else {
            rc = plan_move(t, ls, e, c, &x->move, &x->move_bytes_network);
            if (rc == PTC_E_RULE || rc == PTC_E_CONFIG) {
                rc = PTC_OK; /* a layout the tensors cannot take: not a candidate */
                continue;
            }
        }
        x->score = e->cost.step_time + x->move.seconds / amortize_steps;
        k++;
    }
    ptc_layout_destroy(ls);
    if (rc != PTC_OK) {
        ptc_free(m);
        return rc;
    }
    qsort(m, k, sizeof *m, cmp_moved);
    *out = m;
    *nout = k;
    return PTC_OK;
}

void ptc_search_moves_free(ptc_search_moved *m) { ptc_free(m); }
