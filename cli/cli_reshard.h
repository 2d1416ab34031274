/* ptc reshard's parts that differ between the two executables: the run
 * with --mpi is cli/reshard_full.c's in ptc-full and cli/reshard_light.c's
 * (a hand-over to ptc-full) in the light `ptc`. Only cli/ includes this. */
#ifndef PTC_CLI_RESHARD_H
#define PTC_CLI_RESHARD_H

#include "cli/cli.h"
#include "ptc/reshard.h"

/* The parsed command line of ptc reshard. */
typedef struct ptc_cli_reshard {
    ptc_cli_store cs;            /* --store (not open yet) */
    uint64_t version;            /* --version (0: the newest) */
    ptc_config cfg;              /* --to */
    ptc_reshard_options opts;
    bool json;
    bool across_hosts;           /* --across-hosts: the store is spread over hosts */
    const char *out;             /* --out DIR (with --across-hosts) */
    int replicas;                /* --replicas K (-1: the source's) */
} ptc_cli_reshard;

/* Before parsing: the light `ptc` hands a command line with --mpi over to
 * ptc-full (returns only on failure, the exit status); ptc-full goes on
 * (PTC_CLI_CONTINUE). */
int ptc_cli_reshard_handoff(int argc, char **argv);

/* Run the reshard with --mpi (every process of the job calls it); @p argc
 * and @p argv as the command got them (MPI_Init may read them). Returns the
 * exit status. */
int ptc_cli_reshard_mpi(ptc_cli_reshard *a, int argc, char **argv);

/* Print what the reshard did (text, or one JSON object); @p peak: the
 * largest peak resident memory of a process. Returns PTC_CLI_OK. */
int ptc_cli_reshard_print(const ptc_reshard_result *res, unsigned long long peak, bool json);

/* Print what a reshard across hosts did: the new version @p written
 * (across hosts, or of @p out), the load's figures. Returns PTC_CLI_OK. */
int ptc_cli_reshard_hosts_print(const ptc_reshard_hosts_result *res, uint64_t written,
                                const char *out, unsigned long long peak, bool json);

/* This process's peak resident memory in bytes (0: unknown). */
unsigned long long ptc_cli_peak_rss(void);

#endif
