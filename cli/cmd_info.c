/* ptc info: a version's configuration, tensors and placements. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptc/store.h"

const char ptc_cmd_info_help[] =
    "describe a stored version: configuration, tensors, placements, shards\n"
    "\n"
    "usage: ptc info --store DIR [--version V] [--json] [--blocks]\n"
    "  --json    one JSON object: the store format, the version record, every\n"
    "            tensor (dtype, shape, placement) and shard (rank, pack file,\n"
    "            offset, length, codec, pieces), and the datasets\n"
    "  --blocks  with --json: include each shard's block table (xxh3, lengths)\n";

static void print_shape(const int64_t *shape, int ndim)
{
    putchar('[');
    for (int d = 0; d < ndim; d++)
        printf(d ? ",%lld" : "%lld", (long long)shape[d]);
    putchar(']');
}

/* @p s (@p n bytes of UTF-8) made safe for a terminal: a name may hold any
 * character, so C0 and C1 controls, DEL, backslash and the bidirectional
 * overrides (which reorder what the line shows) are written as \xNN or
 * \uNNNN escapes. Returns malloc'd text (NULL: out of memory). */
static char *escape_text(const char *s, size_t n)
{
    char *out = malloc(n * 6 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        unsigned cp = c, len = 1;
        if (c >= 0xc2 && c < 0xe0 && i + 1 < n) {
            cp = (c & 0x1fu) << 6 | ((unsigned char)s[i + 1] & 0x3fu);
            len = 2;
        } else if (c >= 0xe0 && c < 0xf0 && i + 2 < n) {
            cp = (c & 0x0fu) << 12 | ((unsigned char)s[i + 1] & 0x3fu) << 6 |
                 ((unsigned char)s[i + 2] & 0x3fu);
            len = 3;
        }
        if (c < 0x20 || c == 0x7f || c == '\\')
            o += sprintf(o, "\\x%02x", c);
        else if ((cp >= 0x80 && cp <= 0x9f && len == 2) ||
                 (len == 3 && (cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
                               (cp >= 0x2066 && cp <= 0x2069))))
            o += sprintf(o, "\\u%04x", cp);
        else {
            memcpy(o, s + i, len);
            o += len;
        }
        i += len;
    }
    *o = '\0';
    return out;
}

int ptc_cmd_info(int argc, char **argv)
{
    ptc_cli_store cs = {0};
    uint64_t version = 0;
    bool json = false, blocks = false;
    const ptc_cli_opt opts[] = {PTC_CLI_OPT_STORE(&cs.dir), PTC_CLI_OPT_VERSION(&version),
                                PTC_CLI_OPT_JSON(&json), PTC_CLI_OPT_FLAG("blocks", &blocks),
                                PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_info_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_READER, version);
    if (ret)
        return ret;
    ptc_store *s = cs.s;
    ptc_store_reader *r = cs.r;
    int rc;
    if (json) {
        char *text = NULL;
        rc = ptc_store_info_json(s, ptc_store_reader_version(r)->version,
                                 blocks ? PTC_STORE_INFO_BLOCKS : 0, &text);
        json_t *obj = rc ? NULL : json_loads(text, 0, NULL);
        ptc_store_free(text);
        ptc_store_dataset_info *ds = NULL;
        size_t nds = 0;
        if (rc == PTC_OK && !obj)
            rc = ptc_error_set(PTC_E_STORE, "store info is not JSON");
        if (rc == PTC_OK)
            rc = ptc_store_datasets(s, &ds, &nds);
        if (rc == PTC_OK) {
            json_t *arr = json_array();
            for (size_t i = 0; i < nds; i++)
                json_array_append_new(arr, ptc_cli_dataset_json(&ds[i]));
            json_object_set_new(obj, "datasets", arr);
            char *out = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
            ptc_cli_print_json(out ? out : "{}");
            free(out);
        } else {
            ret = ptc_cli_lib_error(rc);
        }
        ptc_store_free(ds);
        json_decref(obj);
        goto out_close;
    }
    const ptc_version_info *vi = ptc_store_reader_version(r);
    char *step = escape_text(vi->step ? vi->step : "", vi->step ? strlen(vi->step) : 0);
    char *cfg = escape_text(vi->config, strlen(vi->config));
    printf("version %llu  step %s  config %s  parent %llu\n", (unsigned long long)vi->version,
           step && *step ? step : "-", cfg ? cfg : "?", (unsigned long long)vi->parent);
    free(step);
    free(cfg);
    printf("%llu tensors, %llu bytes (%llu stored by this version)\n",
           (unsigned long long)vi->tensor_count, (unsigned long long)vi->bytes,
           (unsigned long long)vi->stored_bytes);
    size_t n = ptc_store_reader_tensor_count(r);
    for (size_t t = 0; t < n; t++) {
        ptc_store_tensor ti;
        if (ptc_store_reader_tensor(r, t, &ti) != PTC_OK)
            break;
        char *name = escape_text(ti.name, ti.name_len);
        char *place = escape_text(ti.placement, strlen(ti.placement));
        if (!name || !place) {
            free(name);
            free(place);
            ret = ptc_cli_error("out of memory");
            break;
        }
        printf("  %-48s %-7s ", name, ptc_dtype_name(ti.dtype));
        print_shape(ti.shape, ti.ndim);
        printf("  %s\n", place);
        free(name);
        free(place);
    }
out_close:
    ptc_cli_store_close(&cs, ret != PTC_CLI_OK);
    return ret;
}
