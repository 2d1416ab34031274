/* ptc export: the whole model, one rank's stored shards, or every rank of
 * any configuration, as safetensors files. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "ptc/safetensors.h"
#include "ptc/vfile.h"

const char ptc_cmd_export_help[] =
    "export a stored version as safetensors files\n"
    "\n"
    "usage: ptc export --store DIR [--version V] [--dtype F32|BF16|F16] --out FILE.safetensors\n"
    "       ptc export --store DIR [--version V] [--dtype T] --rank R --out FILE.safetensors\n"
    "       ptc export --store DIR [--version V] [--dtype T] --config CFG --out-dir DIR\n"
    "       ptc export --store DIR [--version V] [--dtype T] --max-shard-size SIZE --out-dir DIR\n"
    "\n"
    "  (no --rank/--config)  the whole model: global tensors and the checkpoint's metadata\n"
    "  --max-shard-size SIZE  the whole model as Hugging Face shards in --out-dir:\n"
    "                 model-0000k-of-0000n.safetensors of at most SIZE bytes each (a larger\n"
    "                 tensor gets a file of its own) and model.safetensors.index.json;\n"
    "                 one shard is written as model.safetensors, no index. SIZE: bytes, or\n"
    "                 with KB MB GB TB (powers of 1000) or KiB MiB GiB TiB, e.g. 5GB\n"
    "  --params-only  leave optimizer state (placement kind=optim) out of a whole-model\n"
    "                 export (--out or --max-shard-size)\n"
    "  --rank R       rank R's shards under the stored configuration\n"
    "  --config CFG   rank-<R>.safetensors for every rank of CFG, into --out-dir\n"
    "  --dtype T      convert floating-point tensors to F32, BF16 or F16 on the way\n"
    "Rank files hold local shapes and record their placement in __metadata__\n"
    "(ptc.config, ptc.rank, ptc.coords, ptc.layout). Files are written atomically.\n";

/* --dtype (dest: ptc_dtype *). */
static int parse_dtype(const char *s, void *dest)
{
    ptc_dtype *out = dest;
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

/* "5GB", "500MB", "2GiB", "123": transformers' max_shard_size spellings. */
static bool size_of(const char *s, uint64_t *out)
{
    static const struct { const char *suffix; uint64_t mult; } units[] = {
        {"", 1},
        {"B", 1},
        {"KB", 1000ULL},
        {"MB", 1000000ULL},
        {"GB", 1000000000ULL},
        {"TB", 1000000000000ULL},
        {"KIB", 1ULL << 10},
        {"MIB", 1ULL << 20},
        {"GIB", 1ULL << 30},
        {"TIB", 1ULL << 40},
    };
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || v == 0)
        return false;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (strcasecmp(end, units[i].suffix) != 0)
            continue;
        if (v > UINT64_MAX / units[i].mult)
            return false;
        *out = v * units[i].mult;
        return true;
    }
    return false;
}

/* --max-shard-size (dest: uint64_t *). */
static int parse_size(const char *s, void *dest)
{
    if (!size_of(s, dest))
        return ptc_cli_usage_error("--max-shard-size: '%s' is not a size (5GB, 500MB, 2GiB or "
                                   "bytes)", s);
    return PTC_CLI_OK;
}

static bool is_optim(const ptc_store_reader *r, size_t t)
{
    ptc_store_tensor ti;
    return ptc_store_reader_tensor(r, t, &ti) == PTC_OK && strstr(ti.placement, "kind=optim");
}

/* The tensors of a whole-model export, in stored order. */
static int select_tensors(const ptc_store_reader *r, bool params_only, size_t **out, size_t *n)
{
    size_t total = ptc_store_reader_tensor_count(r);
    *out = calloc(total ? total : 1, sizeof **out);
    if (!*out)
        return ptc_cli_error("out of memory");
    *n = 0;
    for (size_t t = 0; t < total; t++)
        if (!params_only || !is_optim(r, t))
            (*out)[(*n)++] = t;
    return PTC_CLI_OK;
}

static uint64_t tensor_bytes(const ptc_store_reader *r, size_t t, ptc_dtype dt)
{
    ptc_store_tensor ti;
    if (ptc_store_reader_tensor(r, t, &ti) != PTC_OK)
        return 0;
    ptc_dtype served = (dt == PTC_DTYPE_KEEP || !ptc_dtype_is_float(ti.dtype)) ? ti.dtype : dt;
    uint64_t b = ptc_dtype_size(served);
    for (int d = 0; d < ti.ndim; d++)
        b *= (uint64_t)ti.shape[d];
    return b;
}

static int write_subset(const ptc_store_reader *r, const size_t *idx, size_t n, ptc_dtype dt,
                        const char *path)
{
    ptc_vfile *f = NULL;
    int rc = ptc_vfile_subset(&f, r, idx, n, dt);
    if (rc == PTC_OK)
        rc = ptc_vfile_write(f, path, ptc_cli_progress, NULL);
    ptc_vfile_destroy(f);
    ptc_cli_progress_done();
    return rc ? ptc_cli_lib_error(rc) : PTC_CLI_OK;
}

/* Hugging Face sharding (save_pretrained): tensors in order; a new shard
 * starts when the next tensor would take the current one past the limit. */
static int write_sharded(const ptc_store_reader *r, const size_t *idx, size_t n, ptc_dtype dt,
                         uint64_t max, const char *dir)
{
    size_t *shard_of = calloc(n ? n : 1, sizeof *shard_of);
    const char **names = calloc(n ? n : 1, sizeof *names);
    char **files = NULL;
    if (!shard_of || !names) {
        free(shard_of);
        free(names);
        return ptc_cli_error("out of memory");
    }
    size_t nshards = 0;
    uint64_t cur = 0, total = 0, params = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = tensor_bytes(r, idx[i], dt);
        ptc_store_tensor ti;
        if (ptc_store_reader_tensor(r, idx[i], &ti) == PTC_OK) {
            uint64_t el = 1;
            for (int d = 0; d < ti.ndim; d++)
                el *= (uint64_t)ti.shape[d];
            params += el;
        }
        if (nshards == 0 || (cur > 0 && cur + b > max)) {
            nshards++;
            cur = 0;
        }
        cur += b;
        total += b;
        shard_of[i] = nshards - 1;
    }
    if (nshards == 0)
        nshards = 1;
    int ret = PTC_CLI_OK;
    files = calloc(nshards, sizeof *files);
    if (!files) {
        ret = ptc_cli_error("out of memory");
        goto out_free;
    }
    for (size_t k = 0; k < nshards && ret == PTC_CLI_OK; k++) {
        char name[64], path[4096];
        if (nshards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, nshards);
        files[k] = strdup(name);
        if (!files[k]) {
            ret = ptc_cli_error("out of memory");
            break;
        }
        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
            ret = ptc_cli_error("--out-dir path too long");
            break;
        }
        size_t a = 0;
        while (a < n && shard_of[a] != k)
            a++;
        size_t b = a;
        while (b < n && shard_of[b] == k)
            b++;
        ret = write_subset(r, idx + a, b - a, dt, path);
    }
    if (ret == PTC_CLI_OK && nshards > 1) {
        char path[4096];
        for (size_t i = 0; i < n; i++) {
            ptc_store_tensor ti;
            ptc_store_reader_tensor(r, idx[i], &ti);
            names[i] = ti.name;
        }
        const char **fl = calloc(n ? n : 1, sizeof *fl);
        if (!fl) {
            ret = ptc_cli_error("out of memory");
            goto out_free;
        }
        for (size_t i = 0; i < n; i++)
            fl[i] = files[shard_of[i]];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        int rc = ptc_st_index_write(path, names, fl, n, total, params);
        free(fl);
        if (rc)
            ret = ptc_cli_lib_error(rc);
    }
out_free:
    for (size_t k = 0; files && k < nshards; k++)
        free(files[k]);
    free(files);
    free(names);
    free(shard_of);
    return ret;
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
    ptc_cli_store cs = {0};
    const char *out = NULL, *out_dir = NULL, *config = NULL;
    uint64_t version = 0;
    int rank = -1;
    ptc_dtype dt = PTC_DTYPE_KEEP;
    uint64_t max_shard = 0;
    bool params_only = false;
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&cs.dir), PTC_CLI_OPT_VERSION(&version),
        PTC_CLI_OPT_STR("out", &out), PTC_CLI_OPT_STR("out-dir", &out_dir),
        PTC_CLI_OPT_INT("rank", &rank, 0, PTC_CONFIG_MAX_WORLD - 1, "--rank: '%s' is not a rank"),
        PTC_CLI_OPT_STR("config", &config), PTC_CLI_OPT_CALL("dtype", parse_dtype, &dt),
        PTC_CLI_OPT_CALL("max-shard-size", parse_size, &max_shard),
        PTC_CLI_OPT_FLAG("params-only", &params_only), PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_export_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (!cs.dir)
        return ptc_cli_usage_error("export needs --store");
    if (config && rank >= 0)
        return ptc_cli_usage_error("--rank and --config exclude each other");
    if (max_shard && (config || rank >= 0 || out || !out_dir))
        return ptc_cli_usage_error("--max-shard-size needs --out-dir, and no --out, --rank or "
                                   "--config");
    if (params_only && (config || rank >= 0))
        return ptc_cli_usage_error("--params-only applies to whole-model exports (--out or "
                                   "--max-shard-size), not --rank or --config");
    if (!max_shard && (config ? (!out_dir || out) : (!out || out_dir)))
        return ptc_cli_usage_error(config ? "--config needs --out-dir (not --out)"
                                          : "export needs --out FILE (or --config with --out-dir)");
    ptc_config cfg;
    if (config && ptc_config_parse(&cfg, config))
        return ptc_cli_usage_error("%s", ptc_last_error());

    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_READER, version);
    if (ret)
        return ret;
    ptc_store_reader *r = cs.r;
    ptc_layout *l = NULL;
    if (!config && rank < 0) {
        size_t *idx = NULL, n = 0;
        ret = select_tensors(r, params_only, &idx, &n);
        if (ret == PTC_CLI_OK && max_shard) {
            if (mkdir(out_dir, 0777) != 0 && errno != EEXIST)
                ret = ptc_cli_error("cannot create %s: %s", out_dir, strerror(errno));
            else
                ret = write_sharded(r, idx, n, dt, max_shard, out_dir);
        } else if (ret == PTC_CLI_OK) {
            ret = write_subset(r, idx, n, dt, out);
        }
        free(idx);
        goto out_close;
    }
    int rc = ptc_layout_of_version(&l, r, config ? &cfg : NULL);
    if (rc) {
        ret = ptc_cli_lib_error(rc);
        goto out_close;
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
    /* every rank file under a staging name first, renamed once all are
     * written: a failed export leaves no rank file of it */
    int k = 0;
    for (; k < world && ret == PTC_CLI_OK; k++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/.rank-%d.safetensors.partial", out_dir, k) >=
            (int)sizeof path) {
            ret = ptc_cli_error("--out-dir path too long");
            break;
        }
        ret = write_rank(r, l, k, dt, path);
    }
    for (int j = 0; j < k; j++) {
        char tmp[4096], path[4096];
        snprintf(tmp, sizeof tmp, "%s/.rank-%d.safetensors.partial", out_dir, j);
        snprintf(path, sizeof path, "%s/rank-%d.safetensors", out_dir, j);
        if (ret != PTC_CLI_OK)
            unlink(tmp);
        else if (rename(tmp, path) != 0)
            ret = ptc_cli_error("cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
out_destroy_layout:
    ptc_layout_destroy(l);
out_close:
    ptc_cli_store_close(&cs, ret != PTC_CLI_OK);
    return ret;
}
