/* ptc import: safetensors checkpoints into a new store version. */
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
    ptc_cli_store cs = {0};
    const char *config = NULL, *rules_spec = NULL, *step = NULL, *hf_config = NULL;
    ptc_cli_params given = {0};
    ptc_cli_compress z = {0};
    bool json = false;
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&cs.dir),          PTC_CLI_OPT_STR("config", &config),
        PTC_CLI_OPT_STR("rules", &rules_spec), PTC_CLI_OPT_COMPRESS(&z),
        PTC_CLI_OPT_CALL("step", ptc_cli_opt_step, &step), PTC_CLI_OPT_JSON(&json),
        PTC_CLI_OPT_CALL("param", ptc_cli_opt_param, &given),
        PTC_CLI_OPT_STR("hf-config", &hf_config), PTC_CLI_OPT_END};
    int next;
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_import_help, PTC_CLI_ARGS, &next);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (!cs.dir || !config || !rules_spec)
        return ptc_cli_usage_error("import needs --store, --config and --rules");
    if (next >= argc)
        return ptc_cli_usage_error("import needs at least one input file");
    ptc_config cfg;
    int rc = ptc_config_parse(&cfg, config);
    if (rc)
        return ptc_cli_usage_error("%s", ptc_last_error());
    ptc_rules *rules = NULL;
    rc = ptc_cli_load_rules(&rules, rules_spec, hf_config, argv[next], &given);
    if (rc)
        return ptc_cli_lib_error(rc);
    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_NEW, 0);
    if (ret) {
        ptc_rules_destroy(rules);
        return ret;
    }
    ptc_import_options io = {.codec = z.codec, .level = z.level, .step = step,
                             .progress = ptc_cli_progress};
    uint64_t version = 0;
    rc = ptc_import(cs.s, (const char *const *)argv + next, (size_t)(argc - next), &cfg, rules,
                    &io, &version);
    ptc_cli_progress_done();
    if (rc) {
        ret = ptc_cli_lib_error(rc);
    } else if (json) {
        printf("{\"version\":%llu}\n", (unsigned long long)version);
    } else {
        printf("imported version %llu\n", (unsigned long long)version);
    }
    ptc_cli_store_close(&cs, ret != PTC_CLI_OK);
    ptc_rules_destroy(rules);
    return ret;
}
