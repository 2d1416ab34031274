/* ptc export: the whole model, one rank's stored shards, or every rank of
 * any configuration, as safetensors files. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "ptc/vfile.h"

const char ptc_cmd_export_help[] =
    "export a stored version as safetensors files\n"
    "\n"
    "usage: ptc export --store DIR [--version V] [--dtype F32|BF16|F16] --out FILE.safetensors\n"
    "       ptc export --store DIR [--version V] [--dtype T] --rank R --out FILE.safetensors\n"
    "       ptc export --store DIR [--version V] [--dtype T] --config CFG --out-dir DIR\n"
    "\n"
    "  (no --rank/--config)  the whole model: global tensors and the checkpoint's metadata\n"
    "  --rank R       rank R's shards under the stored configuration\n"
    "  --config CFG   rank-<R>.safetensors for every rank of CFG, into --out-dir\n"
    "  --dtype T      convert floating-point tensors to F32, BF16 or F16 on the way\n"
    "Rank files hold local shapes and record their placement in __metadata__\n"
    "(ptc.config, ptc.rank, ptc.coords, ptc.layout). Files are written atomically.\n";

static int parse_dtype(const char *s, ptc_dtype *out)
{
    if (!strcmp(s, "F32"))
        *out = PTC_DTYPE_F32;
    else if (!strcmp(s, "BF16"))
        *out = PTC_DTYPE_BF16;
    else if (!strcmp(s, "F16"))
        *out = PTC_DTYPE_F16;
    else
        return ptc_cli_usage_error("--dtype must be F32, BF16 or F16, not '%s'", s);
    return PTC_CLI_OK;
}

static int write_rank(const ptc_store_reader *r, const ptc_layout *l, int rank, ptc_dtype dt,
                      const char *path)
{
    ptc_vfile *f = NULL;
    int rc = ptc_vfile_rank(&f, r, l, rank, dt);
    if (rc == PTC_OK)
        rc = ptc_vfile_write(f, path, ptc_cli_progress, NULL);
    ptc_vfile_destroy(f);
    ptc_cli_progress_done();
    return rc ? ptc_cli_lib_error(rc) : PTC_CLI_OK;
}

int ptc_cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'},   {"version", required_argument, NULL, 'v'},
        {"out", required_argument, NULL, 'o'},     {"out-dir", required_argument, NULL, 'd'},
        {"rank", required_argument, NULL, 'r'},    {"config", required_argument, NULL, 'c'},
        {"dtype", required_argument, NULL, 't'},   {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *store = NULL, *out = NULL, *out_dir = NULL, *config = NULL;
    uint64_t version = 0;
    int rank = -1;
    ptc_dtype dt = PTC_DTYPE_KEEP;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': store = optarg; break;
        case 'o': out = optarg; break;
        case 'd': out_dir = optarg; break;
        case 'c': config = optarg; break;
        case 'v':
            if (!ptc_cli_parse_version(optarg, &version))
                return ptc_cli_usage_error("--version: '%s' is not a version number", optarg);
            break;
        case 'r':
            if (!ptc_cli_parse_int(optarg, 0, PTC_CONFIG_MAX_WORLD - 1, &rank))
                return ptc_cli_usage_error("--rank: '%s' is not a rank", optarg);
            break;
        case 't':
            if (parse_dtype(optarg, &dt))
                return PTC_CLI_USAGE;
            break;
        case 'h': ptc_cli_help(ptc_cmd_export_help); return PTC_CLI_OK;
        default: return ptc_cli_bad_option(argv);
        }
    }
    if (optind < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!store)
        return ptc_cli_usage_error("export needs --store");
    if (config && rank >= 0)
        return ptc_cli_usage_error("--rank and --config exclude each other");
    if (config ? (!out_dir || out) : (!out || out_dir))
        return ptc_cli_usage_error(config ? "--config needs --out-dir (not --out)"
                                          : "export needs --out FILE (or --config with --out-dir)");
    ptc_config cfg;
    if (config && ptc_config_parse(&cfg, config))
        return ptc_cli_usage_error("%s", ptc_last_error());

    ptc_store *s = NULL;
    int ret = ptc_cli_open_store(store, false, &s);
    if (ret)
        return ret;
    ptc_store_reader *r = NULL;
    ptc_layout *l = NULL;
    int rc = ptc_store_reader_open(&r, s, version);
    if (rc) {
        ret = ptc_cli_lib_error(rc);
        goto out_close_store;
    }
    if (!config && rank < 0) {
        ptc_vfile *f = NULL;
        rc = ptc_vfile_whole(&f, r, dt);
        if (rc == PTC_OK)
            rc = ptc_vfile_write(f, out, ptc_cli_progress, NULL);
        ptc_vfile_destroy(f);
        ptc_cli_progress_done();
        if (rc)
            ret = ptc_cli_lib_error(rc);
        goto out_close_reader;
    }
    rc = ptc_layout_of_version(&l, r, config ? &cfg : NULL);
    if (rc) {
        ret = ptc_cli_lib_error(rc);
        goto out_close_reader;
    }
    int world = ptc_config_world(ptc_layout_config(l));
    if (!config) {
        if (rank >= world) {
            ret = ptc_cli_error("rank %d outside the stored world of %d ranks", rank, world);
            goto out_destroy_layout;
        }
        ret = write_rank(r, l, rank, dt, out);
        goto out_destroy_layout;
    }
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
        ret = ptc_cli_error("cannot create %s: %s", out_dir, strerror(errno));
        goto out_destroy_layout;
    }
    for (int k = 0; k < world && ret == PTC_CLI_OK; k++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/rank-%d.safetensors", out_dir, k) >= (int)sizeof path) {
            ret = ptc_cli_error("--out-dir path too long");
            break;
        }
        ret = write_rank(r, l, k, dt, path);
    }
out_destroy_layout:
    ptc_layout_destroy(l);
out_close_reader:
    ptc_store_reader_close(r);
out_close_store:
    ptc_store_close(s);
    return ret;
}
