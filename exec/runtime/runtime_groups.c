/* Process-group arithmetic of a parallel configuration (pure functions).
 * Rank numbering is DESIGN.md's: rank = (pp_i*D + dp_i)*T + tp_i. */
#include "ptc/exec.h"

int ptc_exec_group_color(const ptc_config *c, int rank, ptc_exec_group_kind kind,
                         int *color, int *key)
{
    int world = ptc_config_world(c);
    if (rank < 0 || rank >= world)
        return ptc_error_set(PTC_E_RANGE, "rank %d outside world of %d", rank, world);
    int p, d, t;
    ptc_config_coords(c, rank, &p, &d, &t);
    int P = c->pp, D = c->dp, T = c->tp;
    switch (kind) {
    case PTC_EXEC_GROUP_PIPE:
        *color = d * T + t;
        *key = p;
        return PTC_OK;
    case PTC_EXEC_GROUP_DP:
        *color = p * T + t;
        *key = d;
        return PTC_OK;
    case PTC_EXEC_GROUP_TP:
        *color = p * D + d;
        *key = t;
        return PTC_OK;
    case PTC_EXEC_GROUP_PAIR: {
        int lo = p < P - 1 - p ? p : P - 1 - p;
        *color = lo * T + t;
        *key = (p == lo ? 0 : 1) * D + d;
        return PTC_OK;
    }
    }
    return ptc_error_set(PTC_E_INVAL, "unknown group kind %d", (int)kind);
}

int ptc_exec_group_members(const ptc_config *c, int rank, ptc_exec_group_kind kind,
                           int *members, size_t cap, int *n, int *index)
{
    int color, key;
    PTC_TRY(ptc_exec_group_color(c, rank, kind, &color, &key));
    int p, d, t;
    ptc_config_coords(c, rank, &p, &d, &t);
    int P = c->pp, D = c->dp, T = c->tp;
    int cnt = 0;
    switch (kind) {
    case PTC_EXEC_GROUP_PIPE:
        cnt = P;
        break;
    case PTC_EXEC_GROUP_DP:
        cnt = D;
        break;
    case PTC_EXEC_GROUP_TP:
        cnt = T;
        break;
    case PTC_EXEC_GROUP_PAIR: {
        int lo = p < P - 1 - p ? p : P - 1 - p;
        cnt = (lo == P - 1 - lo ? 1 : 2) * D;
        break;
    }
    }
    if ((size_t)cnt > cap)
        return ptc_error_set(PTC_E_RANGE, "group of %d members, room for %zu", cnt, cap);
    for (int i = 0; i < cnt; i++) {
        int r = 0;
        switch (kind) {
        case PTC_EXEC_GROUP_PIPE:
            r = ptc_config_rank(c, i, d, t);
            break;
        case PTC_EXEC_GROUP_DP:
            r = ptc_config_rank(c, p, i, t);
            break;
        case PTC_EXEC_GROUP_TP:
            r = ptc_config_rank(c, p, d, i);
            break;
        case PTC_EXEC_GROUP_PAIR: {
            int lo = p < P - 1 - p ? p : P - 1 - p;
            r = ptc_config_rank(c, i / D == 0 ? lo : P - 1 - lo, i % D, t);
            break;
        }
        }
        members[i] = r;
    }
    (void)T;
    *n = cnt;
    if (index)
        *index = key;
    return PTC_OK;
}

int ptc_exec_tag(int tensor, int mb, int gstage, int microbatches, int tag_ub)
{
    int64_t tag = ((int64_t)gstage * microbatches + mb) * 2 + tensor;
    if (tensor < 0 || tensor > 1 || mb < 0 || gstage < 0 || tag > tag_ub)
        return -1;
    return (int)tag;
}
