/* Helpers shared by the subcommands of the ptc command. */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ptc/error.h"
#include "ptc/rules.h"
#include "ptc/store.h"

static void log_to_stderr(int level, const char *msg, void *user)
{
    (void)user;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    fprintf(stderr, "ptc: %s: %s\n", names[level & 3], msg);
}

void ptc_cli_init(void)
{
    const char *v = getenv("PTC_VERBOSE");
    ptc_log_set(log_to_stderr, NULL, v && *v ? PTC_LOG_DEBUG : PTC_LOG_WARN);
}

static void vline(const char *fmt, va_list ap)
{
    ptc_cli_progress_done();
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    for (char *p = buf; *p; p++)
        if (*p == '\n')
            *p = ' ';
    fprintf(stderr, "ptc: error: %s\n", buf);
}

int ptc_cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
    return PTC_CLI_USAGE;
}

int ptc_cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
    return PTC_CLI_FAIL;
}

int ptc_cli_lib_error(int rc)
{
    const char *m = ptc_last_error();
    return ptc_cli_error("%s", m && *m ? m : ptc_strerror(rc));
}

void ptc_cli_help(const char *help)
{
    fputs(help, stdout);
    if (help[0] && help[strlen(help) - 1] != '\n')
        fputc('\n', stdout);
}

static bool progress_drawn;
static struct timespec progress_last;

void ptc_cli_progress(const char *what, uint64_t done, uint64_t total, void *user)
{
    (void)user;
    if (!isatty(STDERR_FILENO))
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double dt = (double)(now.tv_sec - progress_last.tv_sec) +
                (double)(now.tv_nsec - progress_last.tv_nsec) * 1e-9;
    if (progress_drawn && dt < 0.1 && done != total)
        return;
    progress_last = now;
    if (total)
        fprintf(stderr, "\r%s: %llu/%llu (%.0f%%)   ", what, (unsigned long long)done,
                (unsigned long long)total, 100.0 * (double)done / (double)total);
    else
        fprintf(stderr, "\r%s: %llu   ", what, (unsigned long long)done);
    progress_drawn = true;
}

void ptc_cli_progress_done(void)
{
    if (progress_drawn) {
        fputc('\n', stderr);
        progress_drawn = false;
    }
}

bool ptc_cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

bool ptc_cli_parse_int(const char *s, int lo, int hi, int *out)
{
    if (!s || !*s)
        return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* ---- the open-the-store step ------------------------------------------------------- */

int ptc_cli_open_store(const char *dir, bool create, ptc_store **out)
{
    *out = NULL;
    if (!dir || !*dir)
        return ptc_cli_usage_error("--store DIR is required");
    int rc = ptc_store_open(out, dir, create ? PTC_STORE_CREATE : 0);
    if (rc)
        return ptc_cli_lib_error(rc);
    return PTC_CLI_OK;
}

int ptc_cli_store_open(ptc_cli_store *cs, unsigned how, uint64_t version)
{
    cs->s = NULL;
    cs->r = NULL;
    cs->created = 0;
    if (!cs->dir || !*cs->dir)
        return ptc_cli_usage_error("--store DIR is required");
    ptc_store_options so = {.flags = cs->flags};
    if (cs->lock_timeout_given) /* 0 s: not at all */
        so.lock_timeout_ms = cs->lock_timeout > 0 ? (int64_t)(cs->lock_timeout * 1000.0 + 0.5)
                                                  : PTC_STORE_LOCK_NOWAIT;
    struct stat st;
    bool dir_existed = (how & PTC_CLI_STORE_NEW) && stat(cs->dir, &st) == 0;
    int rc = ptc_store_open_ex(&cs->s, cs->dir, &so);
    if (rc == PTC_E_NOTFOUND && (how & PTC_CLI_STORE_NEW)) {
        so.flags |= PTC_STORE_CREATE;
        rc = ptc_store_open_ex(&cs->s, cs->dir, &so);
        if (rc == PTC_OK)
            cs->created = dir_existed ? 1 : 2;
    }
    if (rc)
        return ptc_cli_lib_error(rc);
    if (how & PTC_CLI_STORE_READER) {
        rc = ptc_store_reader_open(&cs->r, cs->s, version);
        if (rc) {
            int ret = ptc_cli_lib_error(rc);
            ptc_cli_store_close(cs, true);
            return ret;
        }
    }
    return PTC_CLI_OK;
}

void ptc_cli_store_close(ptc_cli_store *cs, bool failed)
{
    ptc_store_reader_close(cs->r);
    ptc_store_close(cs->s);
    if (failed && cs->created)
        ptc_store_remove_empty(cs->dir, cs->created == 2); /* quietly: the failure is reported */
    cs->r = NULL;
    cs->s = NULL;
    cs->created = 0;
}

bool ptc_cli_parse_version(const char *s, uint64_t *out)
{
    return ptc_cli_parse_u64(s, out) && *out >= 1;
}

void ptc_cli_print_json(const char *text)
{
    fputs(text, stdout);
    fputc('\n', stdout);
}

int ptc_cli_parse_compress(const char *arg, unsigned *codec, int *level)
{
    if (strncmp(arg, "zstd", 4) != 0 || (arg[4] && arg[4] != ':'))
        return ptc_cli_usage_error("--compress: unknown codec '%s' (only zstd[:LEVEL])", arg);
    *codec = PTC_STORE_CODEC_ZSTD;
    if (arg[4] == ':' && !ptc_cli_parse_int(arg + 5, 1, 22, level))
        return ptc_cli_usage_error("--compress: zstd level must be 1..22");
    return PTC_CLI_OK;
}

int ptc_cli_bad_option(char **argv)
{
    const char *opt = optind > 0 ? argv[optind - 1] : "?";
    if (optopt && (opt[0] != '-' || opt[1] != '-'))
        return ptc_cli_usage_error("%s: unknown option or missing value '-%c' (see ptc %s --help)",
                                   argv[0], optopt, argv[0]);
    return ptc_cli_usage_error("%s: unknown option or missing value '%s' (see ptc %s --help)",
                               argv[0], opt, argv[0]);
}

/* ---- options ------------------------------------------------------------------------- */

#define MAX_OPTS 64

static int set_value(const ptc_cli_opt *o, const char *v)
{
    int iv;
    uint64_t u;
    switch (o->kind) {
    case PTC_CLI_FLAG:
        *(bool *)o->dest = true;
        return PTC_CLI_OK;
    case PTC_CLI_STR:
        *(const char **)o->dest = v;
        return PTC_CLI_OK;
    case PTC_CLI_INT:
        if (!ptc_cli_parse_int(v, (int)o->lo, (int)o->hi, &iv))
            break;
        *(int *)o->dest = iv;
        return PTC_CLI_OK;
    case PTC_CLI_U64:
        if (!ptc_cli_parse_u64(v, &u) || u < (uint64_t)o->lo || (o->hi && u > o->hi))
            break;
        *(uint64_t *)o->dest = u;
        return PTC_CLI_OK;
    case PTC_CLI_VERSION:
        if (!ptc_cli_parse_version(v, &u))
            break;
        *(uint64_t *)o->dest = u;
        return PTC_CLI_OK;
    case PTC_CLI_DOUBLE:
    case PTC_CLI_POSITIVE: {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(d) || (o->hi && d > (double)o->hi))
            break;
        if (o->kind == PTC_CLI_DOUBLE ? d < (double)o->lo : !(d > 0))
            break;
        *(double *)o->dest = d;
        return PTC_CLI_OK;
    }
    case PTC_CLI_COMPRESS: {
        ptc_cli_compress *z = o->dest;
        return ptc_cli_parse_compress(v, &z->codec, &z->level);
    }
    case PTC_CLI_CALL:
        return o->call(v, o->dest);
    }
    if (o->bad)
        return ptc_cli_usage_error(o->bad, v);
    return ptc_cli_usage_error("--%s: bad value '%s'", o->name, v);
}

int ptc_cli_parse(int argc, char **argv, int start, const ptc_cli_opt *opts, const char *help,
                  unsigned flags, int *next)
{
    struct option lo[MAX_OPTS + 2];
    char shorts[2 * MAX_OPTS + 3], *sp = shorts;
    if (flags & PTC_CLI_IN_ORDER)
        *sp++ = '+';
    *sp++ = 'h';
    size_t n = 0;
    for (; opts[n].name; n++) {
        assert(n < MAX_OPTS); /* our own tables */
        int arg = opts[n].kind == PTC_CLI_FLAG ? no_argument : required_argument;
        lo[n] = (struct option){opts[n].name, arg, NULL, 256 + (int)n};
        if (opts[n].short_name) {
            *sp++ = opts[n].short_name;
            if (arg == required_argument)
                *sp++ = ':';
        }
    }
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    *sp = 0;
    int c;
    optind = start;
    while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        if (c == 'h') {
            ptc_cli_help(help);
            return PTC_CLI_OK;
        }
        const ptc_cli_opt *o = NULL;
        if (c >= 256 && (size_t)(c - 256) < n)
            o = &opts[c - 256];
        for (size_t i = 0; !o && c != '?' && c != ':' && i < n; i++)
            if (opts[i].short_name == c)
                o = &opts[i];
        if (!o)
            return ptc_cli_bad_option(argv);
        int rc = set_value(o, optarg);
        if (rc != PTC_CLI_OK)
            return rc;
        if (o->given)
            *o->given = true;
    }
    if (!(flags & PTC_CLI_ARGS) && optind < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (next)
        *next = optind;
    return PTC_CLI_CONTINUE;
}

int ptc_cli_opt_step(const char *value, void *dest)
{
    uint64_t v;
    if (!ptc_cli_parse_u64(value, &v))
        return ptc_cli_usage_error("--step: '%s' is not a non-negative integer", value);
    *(const char **)dest = value;
    return PTC_CLI_OK;
}

json_t *ptc_cli_dataset_json(const ptc_store_dataset_info *d)
{
    char pack[64];
    snprintf(pack, sizeof pack, "packs/datasets/d%llu.pack", (unsigned long long)d->id);
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:I}", "name", d->name, "format",
                     d->format, "id", (json_int_t)d->id, "samples", (json_int_t)d->samples,
                     "bytes", (json_int_t)d->bytes, "stored_bytes", (json_int_t)d->stored_bytes,
                     "codec", d->codec ? "zstd" : "none", "pack", pack,
                     "created_unix_ns", (json_int_t)d->created_unix_ns);
}

int ptc_cli_param_add(ptc_cli_params *p, const char *arg)
{
    const char *eq = strchr(arg, '=');
    uint64_t v;
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof p->names[0] ||
        !ptc_cli_parse_u64(eq + 1, &v) || v > INT64_MAX)
        return ptc_cli_usage_error("--param: expected NAME=VALUE (a non-negative integer), "
                                   "got '%s'", arg);
    if (p->n == PTC_CLI_MAX_PARAMS)
        return ptc_cli_usage_error("--param: more than %d parameters", PTC_CLI_MAX_PARAMS);
    memcpy(p->names[p->n], arg, (size_t)(eq - arg));
    p->names[p->n][eq - arg] = '\0';
    p->values[p->n] = (int64_t)v;
    p->n++;
    return PTC_CLI_OK;
}

int ptc_cli_opt_param(const char *value, void *dest)
{
    return ptc_cli_param_add(dest, value);
}

int ptc_cli_load_rules(ptc_rules **rules, const char *spec, const char *hf_config,
                       const char *first_input, const ptc_cli_params *given)
{
    char path[4096];
    if (!hf_config && first_input) {
        const char *slash = strrchr(first_input, '/');
        snprintf(path, sizeof path, "%.*s/config.json", slash ? (int)(slash - first_input) : 1,
                 slash ? first_input : ".");
        hf_config = access(path, F_OK) == 0 ? path : NULL;
    }
    ptc_rules_param *file = NULL, *all = NULL;
    size_t nfile = 0;
    if (hf_config && strcmp(hf_config, "none") != 0)
        PTC_TRY(ptc_rules_params_read(hf_config, &file, &nfile));
    size_t ngiven = given ? given->n : 0;
    int rc = PTC_E_NOMEM;
    all = malloc((ngiven + nfile + 1) * sizeof *all);
    if (!all)
        goto out_free;
    size_t n = 0;
    for (size_t i = 0; i < ngiven; i++) {
        all[n].name = given->names[i];
        all[n++].value = given->values[i];
    }
    for (size_t i = 0; i < nfile; i++) {
        bool dup = false;
        for (size_t j = 0; j < ngiven; j++)
            dup |= strcmp(file[i].name, given->names[j]) == 0;
        if (!dup)
            all[n++] = file[i];
    }
    rc = ptc_rules_load_params(rules, spec, all, n);
out_free:
    free(all);
    ptc_rules_params_free(file, nfile);
    return rc;
}

/* ---- ptc-full ---------------------------------------------------------------- */

static char **main_argv; /* the whole command line, for ptc_cli_run_full */

void ptc_cli_set_argv(char **argv)
{
    main_argv = argv;
}

/* exec ptc-full with this process's arguments: next to this executable (a
 * build tree), else in ../libexec/ptc (an installed prefix). Returns only on
 * failure. */
static int run_full(char **argv)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return ptc_cli_error("cannot find the ptc executable: %s", strerror(errno));
    self[n] = 0;
    char *slash = strrchr(self, '/');
    *(slash ? slash : self) = 0;
    static const char *const where[] = {"%s/ptc-full", "%s/../libexec/ptc/ptc-full"};
    char path[PATH_MAX + 32];
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        snprintf(path, sizeof path, where[i], self);
        if (access(path, X_OK) != 0)
            continue;
        execv(path, argv);
        return ptc_cli_error("cannot run %s: %s", path, strerror(errno));
    }
    return ptc_cli_error("ptc %s needs ptc-full, which is not in %s nor in %s/../libexec/ptc",
                         argv[1], self, self);
}

int ptc_cli_run_full(void)
{
    if (!main_argv)
        return ptc_cli_error("no command line to hand to ptc-full");
    return run_full(main_argv);
}
