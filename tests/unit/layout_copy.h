/* The explicit layout holding every shard of a layout as it is: the same
 * local shapes and pieces given per rank (ptc_layout_create_explicit), so
 * the same bytes in the same places. Used by test_plan_equiv.c (plans
 * between a configuration and its explicit copy) and tests/mpi/ckpt_mpi.c
 * (--layout explicit: a configuration saved as DTensors without config=
 * would be). */
#ifndef PTC_TEST_LAYOUT_COPY_H
#define PTC_TEST_LAYOUT_COPY_H

#include <stdlib.h>
#include <string.h>

#include "ptc/layout.h"

/* Into a fresh *@p out; PTC_E_NOMEM or the layout calls' errors. */
static inline int layout_explicit_copy(const ptc_layout *l, ptc_layout **out)
{
    size_t nt = ptc_layout_count(l), n = 0, npc = 0;
    int world = ptc_layout_world(l), rc = PTC_OK;
    *out = NULL;
    for (int pass = 0; pass < 2 && rc == PTC_OK; pass++) { /* count, then fill */
        ptc_layout_explicit_shard *e = pass ? calloc(n + 1, sizeof *e) : NULL;
        ptc_piece *pc = pass ? calloc(npc + 1, sizeof *pc) : NULL;
        ptc_tensor_info *ti = pass ? calloc(nt + 1, sizeof *ti) : NULL;
        if (pass && (!e || !pc || !ti))
            rc = PTC_E_NOMEM;
        size_t k = 0, at = 0;
        for (size_t t = 0; rc == PTC_OK && t < nt; t++) {
            if (ti)
                ti[t] = *ptc_layout_tensor(l, t);
            for (int r = 0; rc == PTC_OK && r < world; r++) {
                ptc_shard sh;
                size_t np = 0;
                if ((rc = ptc_layout_shard(l, t, r, &sh)) < 0 || !sh.present)
                    continue;
                np = sh.npieces;
                if (pc && (rc = ptc_layout_pieces(l, t, r, pc + at, npc - at, &np)) < 0)
                    break;
                if (e) {
                    e[k] = (ptc_layout_explicit_shard){.tensor = t, .rank = r, .ndim = sh.ndim,
                                                       .pieces = pc + at, .npieces = np};
                    memcpy(e[k].shape, sh.shape, sizeof e[k].shape);
                }
                k++;
                at += np;
            }
        }
        n = k;
        npc = at;
        if (pass && rc == PTC_OK)
            rc = ptc_layout_create_explicit(out, ti, nt, world, e, n);
        free(e);
        free(pc);
        free(ti);
    }
    return rc;
}

#endif
