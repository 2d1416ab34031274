/* ptc import: safetensors checkpoints into a new store version. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ptc/import.h"

#define MAX_PARAMS 64

const char ptc_cmd_import_help[] =
    "import safetensors checkpoints into a store under a parallel configuration\n"
    "\n"
    "usage: ptc import --store DIR --config CFG --rules FILE|PRESET\n"
    "                  [--param NAME=VALUE]... [--hf-config FILE|none]\n"
    "                  [--compress zstd[:LEVEL]] [--step N] [--json]\n"
    "                  FILE.safetensors|model.safetensors.index.json ...\n"
    "\n"
    "  --store DIR      the store (created if missing)\n"
    "  --config CFG     dp=D,tp=T,pp=P[,zero=1][,layers=a:b:...] or dpD-tpT-ppP\n"
    "  --rules R        placement rules file, or a preset: llama gpt2 megatron-gpt ptc-mlp\n"
    "                   bert phi3 none\n"
    "  --param NAME=V   a rules parameter ($NAME: head counts, tie_word_embeddings, ...);\n"
    "                   overrides config.json\n"
    "  --hf-config F    read rules parameters from this Hugging Face config.json; default:\n"
    "                   config.json beside the first input, if there is one; none: no file\n"
    "  --compress zstd[:L]  compress each 1 MiB block with zstd (level L)\n"
    "  --step N         step label recorded with the version\n"
    "  --json           print {\"version\":V,...} on success\n"
    "Each distinct shard is stored once (replicas are references). Prints the new\n"
    "version number. Exit 0 on success, 1 on failure, 2 on a usage error.\n";

/* The rules with their parameters: --param values, then those of config.json
 * (explicit, or beside @p first_input) that --param does not set. */
static int load_rules(ptc_rules **rules, const char *spec, const char *hf_config,
                      const char *first_input, const ptc_rules_param *given, size_t ngiven)
{
    char path[4096];
    if (!hf_config) {
        const char *slash = strrchr(first_input, '/');
        int dirlen = slash ? (int)(slash - first_input) : 1;
        snprintf(path, sizeof path, "%.*s/config.json", dirlen, slash ? first_input : ".");
        hf_config = access(path, F_OK) == 0 ? path : "none";
    }
    ptc_rules_param *file = NULL, *all = NULL;
    size_t nfile = 0;
    if (strcmp(hf_config, "none") != 0)
        PTC_TRY(ptc_rules_params_read(hf_config, &file, &nfile));
    int rc = PTC_E_NOMEM;
    all = malloc((ngiven + nfile + 1) * sizeof *all);
    if (!all)
        goto out_free;
    size_t n = 0;
    for (size_t i = 0; i < ngiven; i++)
        all[n++] = given[i];
    for (size_t i = 0; i < nfile; i++) {
        bool dup = false;
        for (size_t j = 0; j < ngiven; j++)
            dup |= strcmp(file[i].name, given[j].name) == 0;
        if (!dup)
            all[n++] = file[i];
    }
    rc = ptc_rules_load_params(rules, spec, all, n);
out_free:
    free(all);
    ptc_rules_params_free(file, nfile);
    return rc;
}

int ptc_cmd_import(int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'},  {"config", required_argument, NULL, 'c'},
        {"rules", required_argument, NULL, 'r'},  {"compress", required_argument, NULL, 'z'},
        {"step", required_argument, NULL, 't'},   {"json", no_argument, NULL, 'j'},
        {"param", required_argument, NULL, 'p'},  {"hf-config", required_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *store = NULL, *config = NULL, *rules_spec = NULL, *step = NULL;
    const char *hf_config = NULL;
    ptc_rules_param given[MAX_PARAMS];
    char given_names[MAX_PARAMS][64];
    size_t ngiven = 0;
    ptc_import_options io = {0};
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': store = optarg; break;
        case 'c': config = optarg; break;
        case 'r': rules_spec = optarg; break;
        case 't': {
            uint64_t v;
            if (!ptc_cli_parse_u64(optarg, &v))
                return ptc_cli_usage_error("--step: '%s' is not a non-negative integer", optarg);
            step = optarg;
            break;
        }
        case 'z':
            if (ptc_cli_parse_compress(optarg, &io.codec, &io.level))
                return PTC_CLI_USAGE;
            break;
        case 'p': {
            const char *eq = strchr(optarg, '=');
            uint64_t v;
            if (!eq || eq == optarg || (size_t)(eq - optarg) >= sizeof given_names[0] ||
                !ptc_cli_parse_u64(eq + 1, &v) || v > INT64_MAX)
                return ptc_cli_usage_error("--param: expected NAME=VALUE (a non-negative "
                                           "integer), got '%s'", optarg);
            if (ngiven == MAX_PARAMS)
                return ptc_cli_usage_error("--param: more than %d parameters", MAX_PARAMS);
            memcpy(given_names[ngiven], optarg, (size_t)(eq - optarg));
            given_names[ngiven][eq - optarg] = '\0';
            given[ngiven].name = given_names[ngiven];
            given[ngiven].value = (int64_t)v;
            ngiven++;
            break;
        }
        case 'H': hf_config = optarg; break;
        case 'j': json = true; break;
        case 'h': ptc_cli_help(ptc_cmd_import_help); return PTC_CLI_OK;
        default: return ptc_cli_bad_option(argv);
        }
    }
    if (!store || !config || !rules_spec)
        return ptc_cli_usage_error("import needs --store, --config and --rules");
    if (optind >= argc)
        return ptc_cli_usage_error("import needs at least one input file");
    ptc_config cfg;
    int rc = ptc_config_parse(&cfg, config);
    if (rc)
        return ptc_cli_usage_error("%s", ptc_last_error());
    ptc_rules *rules = NULL;
    rc = load_rules(&rules, rules_spec, hf_config, argv[optind], given, ngiven);
    if (rc)
        return ptc_cli_lib_error(rc);
    ptc_store *s = NULL;
    int created;
    int ret = ptc_cli_open_store_new(store, &s, &created);
    if (ret) {
        ptc_rules_destroy(rules);
        return ret;
    }
    io.step = step;
    io.progress = ptc_cli_progress;
    uint64_t version = 0;
    rc = ptc_import(s, (const char *const *)argv + optind, (size_t)(argc - optind), &cfg, rules,
                    &io, &version);
    ptc_cli_progress_done();
    if (rc) {
        ret = ptc_cli_lib_error(rc);
    } else if (json) {
        printf("{\"version\":%llu}\n", (unsigned long long)version);
    } else {
        printf("imported version %llu\n", (unsigned long long)version);
    }
    ptc_cli_close_store_new(s, store, created, ret != PTC_CLI_OK);
    ptc_rules_destroy(rules);
    return ret;
}
