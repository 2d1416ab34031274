/* ptc rules: list and show placement rules presets; check a checkpoint against
 * rules and a configuration without importing it (every problem at once). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptc/dtype.h"
#include "ptc/layout.h"
#include "ptc/safetensors.h"

const char ptc_cmd_rules_help[] =
    "list, show and check placement rules (docs/rules.md)\n"
    "\n"
    "usage: ptc rules list\n"
    "       ptc rules show PRESET|FILE [--canonical] [--param NAME=VALUE]... [--hf-config F]\n"
    "       ptc rules check --rules R --config CFG [--param NAME=VALUE]...\n"
    "                       [--hf-config FILE|none] [--json]\n"
    "                       FILE.safetensors|model.safetensors.index.json ...\n"
    "\n"
    "  list         the preset names, one a line\n"
    "  show         a preset's text as built in (comments included), or with\n"
    "               --canonical the normalised rules (presets and includes expanded,\n"
    "               parameters substituted: what a store records)\n"
    "  check        a dry run of the import's layout: reads only the files' headers\n"
    "               and lists every tensor that cannot be placed (no rule, a split the\n"
    "               shape does not fit, heads tp would cut, ...) with its dtype and\n"
    "               shape; exit 0 when every tensor is placed, 1 otherwise\n"
    "  --rules R    rules file or preset (as for ptc import)\n"
    "  --config CFG the parallel configuration to check against\n"
    "  --param NAME=V  a rules parameter; overrides config.json\n"
    "  --hf-config F   rules parameters from this config.json; default: config.json\n"
    "               beside the first input (check) if there is one; none: no file\n"
    "  --json       check: {\"tensors\":N,\"problems\":[{\"tensor\",\"dtype\",\"shape\",\n"
    "               \"error\"}...]} (tensor is null for a problem of the whole collection)\n";

static int cmd_list(void)
{
    for (const char *const *n = ptc_rules_preset_names(); *n; n++)
        printf("%s\n", *n);
    return PTC_CLI_OK;
}

/* The tensors of the inputs (headers only); the open files stay in files /
 * indexes so that the names live until inputs_free. */
typedef struct inputs {
    ptc_st_file **files;
    ptc_st_index **indexes;
    size_t nfiles, nindexes;
    ptc_tensor_info *t;
    size_t n, cap;
} inputs;

static void inputs_free(inputs *in)
{
    for (size_t i = 0; i < in->nfiles; i++)
        ptc_st_close(in->files[i]);
    for (size_t i = 0; i < in->nindexes; i++)
        ptc_st_index_close(in->indexes[i]);
    free(in->files);
    free(in->indexes);
    free(in->t);
}

static int push(inputs *in, const ptc_st_file *f)
{
    for (size_t i = 0; i < ptc_st_count(f); i++) {
        if (in->n == in->cap) {
            size_t cap = in->cap ? 2 * in->cap : 256;
            ptc_tensor_info *t = realloc(in->t, cap * sizeof *t);
            if (!t)
                return PTC_E_NOMEM;
            in->t = t;
            in->cap = cap;
        }
        const ptc_st_tensor *s = ptc_st_tensor_at(f, i);
        ptc_tensor_info *ti = &in->t[in->n++];
        memset(ti, 0, sizeof *ti);
        ti->name = s->name;
        ti->dtype = s->dtype;
        ti->ndim = s->ndim;
        for (int d = 0; d < s->ndim && d < PTC_MAX_DIMS; d++)
            ti->shape[d] = s->shape[d];
    }
    return PTC_OK;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

static int read_inputs(inputs *in, char **paths, int npaths)
{
    in->files = calloc((size_t)npaths, sizeof *in->files);
    in->indexes = calloc((size_t)npaths, sizeof *in->indexes);
    if (!in->files || !in->indexes)
        return PTC_E_NOMEM;
    for (int i = 0; i < npaths; i++) {
        if (ends_with(paths[i], ".json")) {
            ptc_st_index *x = NULL;
            PTC_TRY(ptc_st_index_open(&x, paths[i]));
            in->indexes[in->nindexes++] = x;
            for (size_t k = 0; k < ptc_st_index_file_count(x); k++)
                PTC_TRY(push(in, ptc_st_index_file(x, k)));
        } else {
            ptc_st_file *f = NULL;
            PTC_TRY(ptc_st_open(&f, paths[i]));
            in->files[in->nfiles++] = f;
            PTC_TRY(push(in, f));
        }
    }
    return PTC_OK;
}

typedef struct report {
    bool json;
    json_t *problems;
} report;

static void shape_text(const ptc_tensor_info *t, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

static void on_problem(const ptc_tensor_info *t, int code, const char *msg, void *user)
{
    (void)code;
    report *r = user;
    if (r->json) {
        json_t *shape = json_array();
        for (int d = 0; t && d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_array_append_new(
            r->problems,
            json_pack("{s:o,s:o,s:o,s:s}", "tensor", t ? json_string(t->name) : json_null(),
                      "dtype", t ? json_string(ptc_dtype_name(t->dtype)) : json_null(),
                      "shape", t ? shape : (json_decref(shape), json_null()), "error", msg));
        return;
    }
    if (!t) {
        printf("(collection): %s\n", msg);
        return;
    }
    char sh[256];
    shape_text(t, sh, sizeof sh);
    printf("%s %s %s: %s\n", t->name, ptc_dtype_name(t->dtype), sh, msg);
}

static int cmd_check(int argc, char **argv)
{
    const char *spec = NULL, *config = NULL, *hf_config = NULL;
    ptc_cli_params given = {0};
    bool json = false;
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STR("rules", &spec), PTC_CLI_OPT_STR("config", &config),
        PTC_CLI_OPT_CALL("param", ptc_cli_opt_param, &given),
        PTC_CLI_OPT_STR("hf-config", &hf_config), PTC_CLI_OPT_JSON(&json), PTC_CLI_OPT_END};
    int next;
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_rules_help, PTC_CLI_ARGS, &next);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (!spec || !config)
        return ptc_cli_usage_error("rules check needs --rules and --config");
    if (next >= argc)
        return ptc_cli_usage_error("rules check needs at least one input file");
    ptc_config cfg;
    int rc = ptc_config_parse(&cfg, config);
    if (rc)
        return ptc_cli_usage_error("%s", ptc_last_error());
    ptc_rules *rules = NULL;
    rc = ptc_cli_load_rules(&rules, spec, hf_config, argv[next], &given);
    if (rc)
        return ptc_cli_lib_error(rc);
    inputs in;
    memset(&in, 0, sizeof in);
    ret = PTC_CLI_OK;
    rc = read_inputs(&in, argv + next, argc - next);
    if (rc) {
        ret = ptc_cli_lib_error(rc);
        goto out_free;
    }
    report r = {json, json ? json_array() : NULL};
    size_t nproblems = 0;
    rc = ptc_layout_check(in.t, in.n, rules, &cfg, on_problem, &r, &nproblems);
    if (rc) {
        json_decref(r.problems);
        ret = ptc_cli_lib_error(rc);
        goto out_free;
    }
    if (json) {
        json_t *obj = json_pack("{s:I,s:o}", "tensors", (json_int_t)in.n, "problems",
                                r.problems);
        char *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
        ptc_cli_print_json(text ? text : "{}");
        free(text);
        json_decref(obj);
    }
    if (nproblems) {
        ret = ptc_cli_error("%zu problem%s among %zu tensors under %s (%s)", nproblems,
                            nproblems == 1 ? "" : "s", in.n, config,
                            json ? "in the JSON" : "listed above");
    } else if (!json) {
        printf("ok: %zu tensors placed under %s\n", in.n, config);
    }
out_free:
    inputs_free(&in);
    ptc_rules_destroy(rules);
    return ret;
}

static int cmd_show(int argc, char **argv)
{
    bool canonical = false;
    const char *hf_config = NULL;
    ptc_cli_params given = {0};
    const ptc_cli_opt opts[] = {PTC_CLI_OPT_FLAG("canonical", &canonical),
                                PTC_CLI_OPT_CALL("param", ptc_cli_opt_param, &given),
                                PTC_CLI_OPT_STR("hf-config", &hf_config), PTC_CLI_OPT_END};
    int next;
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_rules_help, PTC_CLI_ARGS, &next);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (next + 1 != argc)
        return ptc_cli_usage_error("rules show takes exactly one preset or file");
    const char *spec = argv[next];
    const char *text = NULL;
    if (!canonical && ptc_rules_preset_text(spec, &text) == PTC_OK) {
        fputs(text, stdout);
        return PTC_CLI_OK;
    }
    if (!canonical)
        return ptc_cli_usage_error("no rules preset '%s' (ptc rules list; a file needs "
                                   "--canonical)", spec);
    ptc_rules *rules = NULL;
    int rc = ptc_cli_load_rules(&rules, spec, hf_config ? hf_config : "none", NULL, &given);
    if (rc)
        return ptc_cli_lib_error(rc);
    fputs(ptc_rules_text(rules), stdout);
    const char *missing = ptc_rules_missing_params(rules);
    if (*missing)
        fprintf(stderr, "ptc: note: parameters not set: %s\n", missing);
    ptc_rules_destroy(rules);
    return PTC_CLI_OK;
}

int ptc_cmd_rules(int argc, char **argv)
{
    if (argc < 2)
        return ptc_cli_usage_error("rules needs a subcommand: list, show or check");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h")) {
        ptc_cli_help(ptc_cmd_rules_help);
        return PTC_CLI_OK;
    }
    if (!strcmp(sub, "list")) {
        if (argc != 2)
            return ptc_cli_usage_error("rules list takes no arguments");
        return cmd_list();
    }
    if (!strcmp(sub, "show"))
        return cmd_show(argc - 1, argv + 1);
    if (!strcmp(sub, "check"))
        return cmd_check(argc - 1, argv + 1);
    return ptc_cli_usage_error("unknown rules subcommand '%s' (list, show or check)", sub);
}
