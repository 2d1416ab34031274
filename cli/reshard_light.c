/* ptc reshard --mpi in the light `ptc`: run by ptc-full, so that the light
 * command maps no MPI library (cli/cli_reshard.h). */
#include <string.h>

#include "cli/cli_reshard.h"

int ptc_cli_reshard_handoff(int argc, char **argv)
{
    /* --mpi, --mpi-budget or an abbreviation of either: all of the command
     * line, --help included, is ptc-full's */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strncmp(argv[i], "--mp", 4))
            return ptc_cli_run_full();
    return PTC_CLI_CONTINUE;
}

int ptc_cli_reshard_mpi(ptc_cli_reshard *a, int argc, char **argv)
{
    (void)a;
    (void)argc;
    (void)argv;
    return ptc_cli_run_full(); /* not reached: handed over before parsing */
}
