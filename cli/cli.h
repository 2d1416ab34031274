/* Shared helpers of the ptc command: exit codes, error lines, progress,
 * option parsing conventions. Only cli/ includes this. */
#ifndef PTC_CLI_H
#define PTC_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses; PTC_CLI_CONTINUE (never an exit status): ptc_cli_parse
 * found nothing to stop for, the command goes on. */
enum { PTC_CLI_OK = 0, PTC_CLI_FAIL = 1, PTC_CLI_USAGE = 2, PTC_CLI_CONTINUE = -1 };

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
struct ptc_store;

/* ---- options: a declarative table ----------------------------------------------------
 *
 * A command lists its options once, each with where its value goes and the
 * usage error a bad value gets, and calls ptc_cli_parse:
 *
 *     const ptc_cli_opt opts[] = {
 *         PTC_CLI_OPT_STORE(&store), PTC_CLI_OPT_VERSION(&version),
 *         PTC_CLI_OPT_FLAG("json", &json), PTC_CLI_OPT_END};
 *     int rc = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_info_help, 0, NULL);
 *     if (rc != PTC_CLI_CONTINUE)
 *         return rc;
 */
typedef enum ptc_cli_opt_kind {
    PTC_CLI_FLAG,     /* no value: *(bool *)dest = true */
    PTC_CLI_STR,      /* *(const char **)dest = the value */
    PTC_CLI_INT,      /* *(int *)dest: a decimal in lo..hi */
    PTC_CLI_U64,      /* *(uint64_t *)dest: a decimal >= lo (and <= hi unless hi is 0) */
    PTC_CLI_VERSION,  /* *(uint64_t *)dest: a version number >= 1 */
    PTC_CLI_DOUBLE,   /* *(double *)dest: a finite number >= lo (and <= hi unless hi is 0) */
    PTC_CLI_POSITIVE, /* *(double *)dest: a finite number > 0 (and <= hi unless hi is 0) */
    PTC_CLI_COMPRESS, /* *(ptc_cli_compress *)dest: zstd[:LEVEL] (its own errors) */
    PTC_CLI_CALL,     /* call(value, dest): PTC_CLI_OK, or PTC_CLI_USAGE after printing */
} ptc_cli_opt_kind;

typedef struct ptc_cli_opt {
    const char *name;             /* the long name, without "--"; NULL ends the table */
    char short_name;              /* also -X (0: none) */
    ptc_cli_opt_kind kind;
    void *dest;
    long long lo;                 /* PTC_CLI_INT, PTC_CLI_U64, PTC_CLI_DOUBLE */
    unsigned long long hi;        /* those and PTC_CLI_POSITIVE */
    const char *bad;              /* the usage error of a bad value: a format
                                     with at most one %s (the value) */
    int (*call)(const char *value, void *dest);
    bool *given;                  /* set when the option is given (may be NULL) */
} ptc_cli_opt;

/* --compress zstd[:LEVEL] as parsed (codec 0: not given). */
typedef struct ptc_cli_compress {
    unsigned codec;
    int level;
} ptc_cli_compress;

/* Table entries; the compound literals check the destination's type. */
#define PTC_CLI_OPT_FLAG(n, p) {.name = (n), .kind = PTC_CLI_FLAG, .dest = (bool *){p}}
#define PTC_CLI_OPT_STR(n, p) {.name = (n), .kind = PTC_CLI_STR, .dest = (const char **){p}}
#define PTC_CLI_OPT_INT(n, p, l, h, msg)                                                     \
    {.name = (n), .kind = PTC_CLI_INT, .dest = (int *){p}, .lo = (l), .hi = (h), .bad = (msg)}
#define PTC_CLI_OPT_U64(n, p, l, h, msg)                                                     \
    {.name = (n), .kind = PTC_CLI_U64, .dest = (uint64_t *){p}, .lo = (l), .hi = (h),       \
     .bad = (msg)}
#define PTC_CLI_OPT_DOUBLE(n, p, l, msg)                                                     \
    {.name = (n), .kind = PTC_CLI_DOUBLE, .dest = (double *){p}, .lo = (l), .bad = (msg)}
/* ... at most h (a whole number) */
#define PTC_CLI_OPT_DOUBLE_MAX(n, p, l, h, msg)                                              \
    {.name = (n), .kind = PTC_CLI_DOUBLE, .dest = (double *){p}, .lo = (l), .hi = (h),       \
     .bad = (msg)}
#define PTC_CLI_OPT_POSITIVE(n, p, h, msg)                                                   \
    {.name = (n), .kind = PTC_CLI_POSITIVE, .dest = (double *){p}, .hi = (h), .bad = (msg)}
#define PTC_CLI_OPT_CALL(n, fn, p) {.name = (n), .kind = PTC_CLI_CALL, .dest = (p), .call = (fn)}
#define PTC_CLI_OPT_COMPRESS(p)                                                              \
    {.name = "compress", .kind = PTC_CLI_COMPRESS, .dest = (ptc_cli_compress *){p}}
#define PTC_CLI_OPT_STORE(p) PTC_CLI_OPT_STR("store", p)
#define PTC_CLI_OPT_JSON(p) PTC_CLI_OPT_FLAG("json", p)
#define PTC_CLI_OPT_VERSION(p)                                                               \
    {.name = "version", .kind = PTC_CLI_VERSION, .dest = (uint64_t *){p},                    \
     .bad = "--version: '%s' is not a version number"}
#define PTC_CLI_OPT_END {.name = NULL}

/* Flags of ptc_cli_parse. */
enum {
    PTC_CLI_ARGS = 1,     /* operands may follow (else "unexpected argument 'X'") */
    PTC_CLI_IN_ORDER = 2, /* stop at the first operand (what follows is another
                             command's) */
};

/* Parse argv[start..] (argv[0]: the command's name, for messages) by the
 * table @p opts; -h and --help print @p help. Returns PTC_CLI_CONTINUE with
 * *@p next (may be NULL without PTC_CLI_ARGS) the index of the first
 * operand; PTC_CLI_OK after the help; PTC_CLI_USAGE after printing the
 * usage error (an unknown option or a missing value: ptc_cli_bad_option's
 * line; a bad value: its entry's; an operand without PTC_CLI_ARGS). */
int ptc_cli_parse(int argc, char **argv, int start, const ptc_cli_opt *opts, const char *help,
                  unsigned flags, int *next);

/* PTC_CLI_CALL for --step N: a non-negative integer, kept as text
 * (dest: const char **). */
int ptc_cli_opt_step(const char *value, void *dest);

/* Store helpers shared by the subcommands (public API only). */
struct ptc_store;
struct ptc_store_reader;
/* The open-the-store step of a command: --store DIR opened as @p how says,
 * the errors printed. Close with ptc_cli_store_close. */
typedef struct ptc_cli_store {
    const char *dir;               /* --store (NULL: "--store DIR is required") */
    struct ptc_store *s;
    struct ptc_store_reader *r;    /* PTC_CLI_STORE_READER: the version's reader */
    int created;                   /* PTC_CLI_STORE_NEW: what the open made (0
                                      nothing, 1 the store in an existing
                                      directory, 2 the directory too) */
    unsigned flags;                /* more ptc_store_open flags (PTC_STORE_CHECK) */
    double lock_timeout;           /* --lock-timeout SECONDS of a writing command */
    bool lock_timeout_given;       /* (not given: the library's default stays) */
} ptc_cli_store;
/* --lock-timeout S: how long the command's writer waits for the store's
 * writer lock (0: not at all; at most 10^9 s). */
#define PTC_CLI_OPT_LOCK_TIMEOUT(cs)                                                         \
    {.name = "lock-timeout", .kind = PTC_CLI_DOUBLE, .dest = (double *){&(cs)->lock_timeout},  \
     .lo = 0, .hi = 1000000000ull, .given = &(cs)->lock_timeout_given,                       \
     .bad = "--lock-timeout needs a number of seconds in 0..1e9, not '%s'"}
enum {
    PTC_CLI_STORE_OPEN = 0,   /* an existing store */
    PTC_CLI_STORE_NEW = 1,    /* a command that may write its first version or
                                 dataset: created when missing */
    PTC_CLI_STORE_READER = 2, /* and a reader of @p version (0: the newest) */
};
/* Open cs->dir; returns PTC_CLI_OK, or PTC_CLI_USAGE / PTC_CLI_FAIL after
 * printing the error (nothing left open). */
int ptc_cli_store_open(ptc_cli_store *cs, unsigned how, uint64_t version);
/* Close what ptc_cli_store_open opened; when the command @p failed and the
 * store was made by it, remove it again if it holds nothing (a failed first
 * import leaves no empty store behind). */
void ptc_cli_store_close(ptc_cli_store *cs, bool failed);
/* Open the store at @p dir (create: make it if missing). Prints the error;
 * returns PTC_CLI_OK or PTC_CLI_FAIL. (The commands not yet on
 * ptc_cli_store_open use it.) */
int ptc_cli_open_store(const char *dir, bool create, struct ptc_store **out);
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
/* PTC_CLI_CALL for --param NAME=VALUE (dest: ptc_cli_params *). */
int ptc_cli_opt_param(const char *value, void *dest);
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

#endif
