/* ptc mount --across-hosts: this host's part of a store spread over hosts
 * (ptc train --replicas, docs/checkpoint.md "Across hosts") served whole.
 * A version's model files are read from a whole copy of it that a gather
 * wrote into another store on this host: `LAUNCHER ptc reshard --mpi
 * --across-hosts --store DIR --version G --to CFG --out GATHERED --json`,
 * run on the version's first opening (the minimal plan across the hosts'
 * parts and replicas; docs/checkpoint.md "The mount and a store spread over
 * hosts"); the gathers' errors go to GATHERED.log. */
#ifndef PTC_CLI_MOUNT_GATHER_H
#define PTC_CLI_MOUNT_GATHER_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "ptc/store.h"

typedef struct ptc_cli_gather {
    const char *launcher;      /* shell text that starts the MPI job, e.g.
                                  "mpirun --hostfile H -np 3" (this host first) */
    char store[PATH_MAX];      /* the part's store, absolute */
    char dir[PATH_MAX];        /* the store gathered versions go to, absolute */
    bool own_dir;              /* made here: removed by fini */
    char self[PATH_MAX];       /* this ptc binary */
    ptc_store *whole;          /* dir's store, once a gather made it */
    struct ptc_cli_gathered {
        uint64_t part;         /* the local version (the part) */
        uint64_t as;           /* its whole copy in dir */
    } *map;
    size_t n, cap;
} ptc_cli_gather;

/* Set up: @p store the part's directory, @p dir the gathered store (NULL: a
 * new directory ptc-gathered.XXXXXX in $TMPDIR or /tmp, removed at the
 * end). PTC_OK or PTC_E_IO. */
int ptc_cli_gather_init(ptc_cli_gather *g, const char *launcher, const char *store,
                        const char *dir);

/* ptc_view_store_options.source: an ordinary version of @p store is read
 * from it; a part of version G across hosts from its whole copy, gathered
 * now if not yet (under the view's lock for sources: one at a time). */
int ptc_cli_gather_source(void *user, ptc_store *store, uint64_t version, ptc_store **from,
                          uint64_t *as);

/* Close the gathered store; remove it (and its log) when init made it. */
void ptc_cli_gather_fini(ptc_cli_gather *g);

#endif
