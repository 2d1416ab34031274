/* Dependency checks of a schedule and the deadlock report, shared by the
 * validator (sched_check.c) and the simulator (sched_sim.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

void sched_tokname(const ptc_sched_action *a, char *buf, size_t cap)
{
    if (ptc_sched_action_format(a, buf, cap))
        buf[0] = 0;
}

typedef struct cellc {
    uint8_t f, b, i, w;
} cellc;

int sched_check_deps(const ptc_sched *s, ptc_sched_report *rep)
{
    int rc = ptc_sched_check_placement(s);
    if (rc)
        return sched_report_set(rep, PTC_E_INVAL, -1, -1, "%s", ptc_last_error());
    size_t cells = (size_t)s->mbs * s->stages;
    cellc *cc = ptc_calloc(cells, sizeof *cc);
    if (!cc)
        return PTC_E_NOMEM;
    char tk[48];
    for (int r = 0; r < s->ranks; r++) {
        for (size_t i = 0; i < s->lists[r].n; i++) {
            const ptc_sched_action *a = &s->lists[r].a[i];
            int g = sched_gs(s, r, a->chunk);
            if (g < 0 || s->mb_pipe[a->mb] != g / s->stages)
                sched_tokname(a, tk, sizeof tk);
            if (g < 0) {
                rc = sched_report_set(rep, PTC_E_INVAL, r, (int)i,
                                      "rank %d step %zu (%s): chunk %u is not placed on rank %d",
                                      r, i, tk, a->chunk, r);
                goto out_free;
            }
            int pipe = g / s->stages, st = g % s->stages;
            if (pipe != s->mb_pipe[a->mb]) {
                rc = sched_report_set(rep, PTC_E_INVAL, r, (int)i,
                                      "rank %d step %zu (%s): micro-batch %d runs on pipe %d, "
                                      "chunk %u holds pipe %d",
                                      r, i, tk, a->mb, s->mb_pipe[a->mb], a->chunk, pipe);
                goto out_free;
            }
            cellc *c = &cc[(size_t)a->mb * s->stages + st];
            const char *why = NULL;
            switch (a->op) {
            case PTC_SCHED_F:
                if (c->f++)
                    why = "forward repeated";
                break;
            case PTC_SCHED_B:
            case PTC_SCHED_I:
                if (!c->f)
                    why = "backward before the forward of the same micro-batch and stage";
                else if (c->b || c->i)
                    why = "backward repeated";
                else if (c->w)
                    why = "both B and I/W";
                if (a->op == PTC_SCHED_B)
                    c->b++;
                else
                    c->i++;
                break;
            case PTC_SCHED_W:
                if (c->b)
                    why = "both B and I/W";
                else if (!c->i)
                    why = "W before I of the same micro-batch and stage";
                else if (c->w)
                    why = "W repeated";
                c->w++;
                break;
            default:
                break;
            }
            if (why) {
                sched_tokname(a, tk, sizeof tk);
                rc = sched_report_set(rep, PTC_E_INVAL, r, (int)i,
                                      "rank %d step %zu (%s): %s", r, i, tk, why);
                goto out_free;
            }
        }
    }
    for (int m = 0; m < s->mbs; m++) {
        int pipe = s->mb_pipe[m];
        for (int st = 0; st < s->stages; st++) {
            const cellc *c = &cc[(size_t)m * s->stages + st];
            int owner = s->place_rank[pipe * s->stages + st];
            const char *why = NULL;
            if (!c->f)
                why = "no forward";
            else if (!c->b && !c->i)
                why = "no backward";
            else if (c->i && !c->w)
                why = "I without W";
            if (why) {
                rc = sched_report_set(rep, PTC_E_INVAL, owner, -1,
                                      "micro-batch %d pipe %d stage %d (rank %d): %s", m, pipe,
                                      st, owner, why);
                goto out_free;
            }
        }
    }
    rc = PTC_OK;
out_free:
    ptc_free(cc);
    return rc;
}

/* Rank whose output the blocked action @p a on @p r waits for, or -1. */
static int waits_on(const ptc_sched *s, int r, const ptc_sched_action *a)
{
    if (!sched_is_compute(a->op))
        return a->peer;
    int g = sched_gs(s, r, a->chunk);
    int pipe = g / s->stages, st = g % s->stages;
    if (a->op == PTC_SCHED_F && st > 0)
        return s->place_rank[pipe * s->stages + st - 1];
    if ((a->op == PTC_SCHED_B || a->op == PTC_SCHED_I) && st + 1 < s->stages)
        return s->place_rank[pipe * s->stages + st + 1];
    return r;
}

int sched_report_deadlock(const ptc_sched *s, const size_t *stuck, ptc_sched_report *rep,
                          bool compute_view)
{
    (void)compute_view;
    int r0 = -1;
    size_t lo = SIZE_MAX;
    for (int r = 0; r < s->ranks; r++)
        if (stuck[r] < s->lists[r].n) {
            if (r0 < 0)
                r0 = r;
            if (stuck[r] < lo)
                lo = stuck[r];
        }
    if (r0 < 0)
        return PTC_OK;
    const ptc_sched_action *a = &s->lists[r0].a[stuck[r0]];
    char t0[48], t1[48] = "";
    sched_tokname(a, t0, sizeof t0);
    int q = waits_on(s, r0, a);
    char peer[160];
    if (q < 0 || q == r0)
        snprintf(peer, sizeof peer, "itself");
    else if (stuck[q] >= s->lists[q].n)
        snprintf(peer, sizeof peer, "rank %d, which has finished", q);
    else {
        sched_tokname(&s->lists[q].a[stuck[q]], t1, sizeof t1);
        snprintf(peer, sizeof peer, "rank %d, blocked at step %zu (%s)", q, stuck[q], t1);
    }
    int rc = sched_report_set(rep, PTC_E_DEADLOCK, r0, (int)stuck[r0],
                              "deadlock: rank %d step %zu (%s) waits for %s", r0, stuck[r0], t0,
                              peer);
    if (!rep)
        return rc;
    /* The rank x step picture around the stuck point. */
    size_t from = lo > 3 ? lo - 3 : 0, to = from + 10, width = 4, longest = 0;
    for (int r = 0; r < s->ranks; r++)
        longest = PTC_MAX(longest, s->lists[r].n + 1);
    to = PTC_MIN(to, longest);
    for (int r = 0; r < s->ranks; r++)
        for (size_t i = from; i < to && i < s->lists[r].n; i++) {
            char t[48];
            sched_tokname(&s->lists[r].a[i], t, sizeof t);
            if (strlen(t) + 2 > width)
                width = strlen(t) + 2;
        }
    ptc_buf b = {0};
    ptc_buf_printf(&b, "%-9s", "step");
    for (size_t i = from; i < to; i++)
        ptc_buf_printf(&b, " %*zu", (int)width, i);
    ptc_buf_printf(&b, "\n");
    int shown = 0;
    for (int r = 0; r < s->ranks; r++) {
        if (shown == 64) {
            ptc_buf_printf(&b, "(%d more ranks)\n", s->ranks - r);
            break;
        }
        shown++;
        ptc_buf_printf(&b, "rank %-4d", r);
        for (size_t i = from; i < to; i++) {
            char t[48] = "", cell[56];
            if (i < s->lists[r].n)
                sched_tokname(&s->lists[r].a[i], t, sizeof t);
            else if (i == s->lists[r].n)
                strcpy(t, "end");
            if (i == stuck[r] && i < s->lists[r].n)
                snprintf(cell, sizeof cell, "[%s]", t);
            else
                snprintf(cell, sizeof cell, "%s", t);
            ptc_buf_printf(&b, " %*s", (int)width, cell);
        }
        ptc_buf_printf(&b, "%s\n", stuck[r] >= s->lists[r].n ? "   (done)" : "");
    }
    ptc_buf_printf(&b, "[x] = the action each rank is blocked at\n");
    if (b.err)
        ptc_free(b.s);
    else
        rep->grid = b.s;
    return rc;
}
