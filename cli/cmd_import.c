/* ptc import: safetensors checkpoints into a new store version. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptc/import.h"

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
    "Per-rank files (one per rank of CFG, local shapes: every input has ptc.rank\n"
    "metadata, or tensor names repeat across inputs) are imported as the shards of\n"
    "CFG: a file's rank is its ptc.rank, else R of a rank-<R>.safetensors name (when\n"
    "every input has one), else its position; ptc.config must equal CFG; global\n"
    "shapes come from ptc.layout, else from the rules (a split dim sums the tp ranks'\n"
    "extents); every local shape must match CFG's layout; replicas must be equal.\n"
    "Each distinct shard is stored once (replicas are references). Prints the new\n"
    "version number. Exit 0 on success, 1 on failure, 2 on a usage error.\n";

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
    ptc_cli_params given = {0};
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
        case 'p':
            if (ptc_cli_param_add(&given, optarg))
                return PTC_CLI_USAGE;
            break;
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
    rc = ptc_cli_load_rules(&rules, rules_spec, hf_config, argv[optind], &given);
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
