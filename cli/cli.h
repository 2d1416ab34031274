/* Shared helpers of the ptc command: exit codes, error lines, progress,
 * option parsing conventions. Only cli/ includes this. */
#ifndef PTC_CLI_H
#define PTC_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { PTC_CLI_OK = 0, PTC_CLI_FAIL = 1, PTC_CLI_USAGE = 2 };

/* Install the library log callback (stderr; PTC_VERBOSE=1: debug lines). */
void ptc_cli_init(void);

/* Print "ptc: error: <msg>" and return PTC_CLI_USAGE. */
int ptc_cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "ptc: error: <msg>" and return PTC_CLI_FAIL. */
int ptc_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "ptc: error: <ptc_last_error() or ptc_strerror(rc)>" for a failed
 * library call and return PTC_CLI_FAIL. */
int ptc_cli_lib_error(int rc);

/* Run this command line (all of it, `ptc` included) as ptc-full: exec'd
 * from beside this executable or from ../libexec/ptc. Returns only on
 * failure (one `ptc: error:` line, PTC_CLI_FAIL). The light `ptc` uses it
 * for the commands and options that need MPI, CUDA, NCCL or OpenBLAS. */
int ptc_cli_run_full(void);
/* The command line ptc_cli_run_full hands over (main's argv). */
void ptc_cli_set_argv(char **argv);

/* Print a command's help text to stdout. */
void ptc_cli_help(const char *help);

/* Progress callback for the library: one self-overwriting line on stderr
 * when stderr is a terminal, nothing otherwise. user: unused. */
void ptc_cli_progress(const char *what, uint64_t done, uint64_t total, void *user);

/* End a progress line (newline if one was drawn). */
void ptc_cli_progress_done(void);

/* Parse a non-negative decimal integer option; false if bad. */
bool ptc_cli_parse_u64(const char *s, uint64_t *out);
bool ptc_cli_parse_int(const char *s, int lo, int hi, int *out);

#endif

/* Store helpers shared by the subcommands (public API only). */
struct ptc_store;
/* Open the store at @p dir (create: make it if missing). Prints the error;
 * returns PTC_CLI_OK or PTC_CLI_FAIL. */
int ptc_cli_open_store(const char *dir, bool create, struct ptc_store **out);
/* For commands that may write the first version or dataset of a store:
 * open it, creating it if missing; *created records what this call made
 * (0 nothing, 1 the store in an existing directory, 2 the directory too). */
int ptc_cli_open_store_new(const char *dir, struct ptc_store **out, int *created);
/* Close a store opened by ptc_cli_open_store_new; when the command @p failed
 * and the store was made by it, remove it again if it holds nothing (a
 * failed first import leaves no empty store behind). */
void ptc_cli_close_store_new(struct ptc_store *s, const char *dir, int created, bool failed);
/* Rules parameters given with --param NAME=VALUE (at most 64). */
#define PTC_CLI_MAX_PARAMS 64
struct ptc_rules;
struct ptc_rules_param;
typedef struct ptc_cli_params {
    size_t n;
    char names[PTC_CLI_MAX_PARAMS][64];
    int64_t values[PTC_CLI_MAX_PARAMS];
} ptc_cli_params;
/* Add one --param NAME=VALUE; prints a usage error and returns PTC_CLI_USAGE
 * when it is malformed. */
int ptc_cli_param_add(ptc_cli_params *p, const char *arg);
/* Load rules (preset or file) with their parameters: the --param values, then
 * those of @p hf_config (a config.json path, "none", or NULL: config.json
 * beside @p first_input if there is one, none if @p first_input is NULL) that
 * --param does not set. Returns a library code (message set). */
int ptc_cli_load_rules(struct ptc_rules **out, const char *spec, const char *hf_config,
                       const char *first_input, const ptc_cli_params *given);

/* Parse --version: a positive integer. */
bool ptc_cli_parse_version(const char *s, uint64_t *out);
/* Print a JSON text (NUL-terminated) followed by a newline. */
void ptc_cli_print_json(const char *text);
/* One dataset's catalog record as a JSON object (new reference), for
 * `ptc dataset ls/info --json` and `ptc info --json`. */
struct json_t;
struct ptc_store_dataset_info;
struct json_t *ptc_cli_dataset_json(const struct ptc_store_dataset_info *d);

/* Parse --compress zstd[:LEVEL] into a store codec and level. Prints the
 * usage error; returns PTC_CLI_OK or PTC_CLI_USAGE. */
int ptc_cli_parse_compress(const char *arg, unsigned *codec, int *level);
/* For getopt_long's '?': print "ptc: error: bad option 'X' ..." (unknown
 * option or missing value) and return PTC_CLI_USAGE. main() sets opterr = 0
 * so getopt itself prints nothing. */
int ptc_cli_bad_option(char **argv);
