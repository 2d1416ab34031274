/* safetensors index files (model.safetensors.index.json): a sharded
 * checkpoint's weight map read and checked, every file it names opened by
 * the reader of safetensors.c, and written. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/formats/formats_internal.h"
#include "ptc/safetensors.h"
#include "base/util_internal.h"

struct ptc_st_index {
    json_t *root;
    char **names;       /* sorted distinct file names (into root's strings) */
    ptc_st_file **files;
    size_t n_files;
    char *meta_json;
    json_t *weight_map; /* borrowed from root */
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool file_name_ok(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static size_t file_slot(const ptc_st_index *x, const char *name)
{
    char *key = (char *)name;
    char **hit = bsearch(&key, x->names, x->n_files, sizeof *x->names, cmp_str);
    return hit ? (size_t)(hit - x->names) : SIZE_MAX;
}

int ptc_st_index_open(ptc_st_index **out, const char *index_path)
{
    *out = NULL;
    int rc;
    json_error_t jerr;
    ptc_st_index *x = ptc_calloc(1, sizeof *x);
    if (!x)
        return PTC_E_NOMEM;
    /* read a regular file of bounded size, never "until EOF" (a FIFO or
     * /dev/zero named as the index would grow memory without bound) */
    int fd = open(index_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "open %s", index_path);
        goto out_index;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > PTC_ST_MAX_HEADER) {
        close(fd);
        rc = ptc_error_set(PTC_E_FORMAT, "%s: not a regular file of at most %llu bytes",
                           index_path, (unsigned long long)PTC_ST_MAX_HEADER);
        goto out_index;
    }
    char *text = ptc_malloc((size_t)st.st_size + 1);
    if (!text) {
        close(fd);
        rc = PTC_E_NOMEM;
        goto out_index;
    }
    rc = ptc_pread_all(fd, text, (size_t)st.st_size, 0, index_path);
    close(fd);
    if (rc == PTC_OK) {
        x->root = json_loadb(text, (size_t)st.st_size, JSON_REJECT_DUPLICATES, &jerr);
        if (!x->root)
            rc = ptc_error_set(PTC_E_FORMAT, "%s: %s (line %d)", index_path, jerr.text,
                               jerr.line);
    }
    ptc_free(text);
    if (rc < 0)
        goto out_index;
    if (!json_is_object(x->root)) {
        rc = ptc_error_set(PTC_E_FORMAT, "%s: not a json object", index_path);
        goto out_index;
    }
    json_t *meta = json_object_get(x->root, "metadata");
    if (meta && !json_is_object(meta) && !json_is_null(meta)) {
        rc = ptc_error_set(PTC_E_FORMAT, "%s: 'metadata' is not a json object", index_path);
        goto out_index;
    }
    x->meta_json = json_is_object(meta) ? json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER)
                                        : strdup("{}");
    if (!x->meta_json) {
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory reading %s", index_path);
        goto out_index;
    }
    x->weight_map = json_object_get(x->root, "weight_map");
    if (!json_is_object(x->weight_map)) {
        rc = ptc_error_set(PTC_E_FORMAT, "%s: missing or non-object 'weight_map'", index_path);
        goto out_index;
    }
    size_t nw = json_object_size(x->weight_map);
    x->names = ptc_calloc(nw ? nw : 1, sizeof *x->names);
    if (!x->names) {
        rc = PTC_E_NOMEM;
        goto out_index;
    }
    const char *key;
    json_t *val;
    json_object_foreach(x->weight_map, key, val)
    {
        char q[400], qf[400];
        QNAME(q, key);
        if (!json_is_string(val)) {
            rc = ptc_error_set(PTC_E_FORMAT, "%s: weight_map entry '%s' is not a string",
                               index_path, q);
            goto out_index;
        }
        const char *fn = json_string_value(val);
        if (strlen(fn) != json_string_length(val) || !file_name_ok(fn)) {
            QNAME(qf, fn);
            rc = ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': file name '%s' is not a plain "
                               "file name in the index's directory", index_path, q, qf);
            goto out_index;
        }
        x->names[x->n_files++] = (char *)fn;
    }
    qsort(x->names, x->n_files, sizeof *x->names, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < x->n_files; i++)
        if (u == 0 || strcmp(x->names[u - 1], x->names[i]) != 0)
            x->names[u++] = x->names[i];
    x->n_files = u;
    x->files = ptc_calloc(u ? u : 1, sizeof *x->files);
    if (!x->files) {
        rc = PTC_E_NOMEM;
        goto out_index;
    }
    const char *slash = strrchr(index_path, '/');
    size_t dirlen = slash ? (size_t)(slash - index_path) + 1 : 0;
    for (size_t i = 0; i < x->n_files; i++) {
        size_t plen = dirlen + strlen(x->names[i]) + 1;
        char *p = ptc_malloc(plen);
        if (!p) {
            rc = PTC_E_NOMEM;
            goto out_index;
        }
        memcpy(p, index_path, dirlen);
        strcpy(p + dirlen, x->names[i]);
        rc = ptc_st_open(&x->files[i], p);
        ptc_free(p);
        if (rc < 0)
            goto out_index;
    }
    /* every mapped tensor is in its file ... */
    json_object_foreach(x->weight_map, key, val)
    {
        size_t slot = file_slot(x, json_string_value(val)), ti;
        if (ptc_st_find(x->files[slot], key, &ti) < 0) {
            char q[400], qf[400];
            QNAME(q, key);
            QNAME(qf, x->names[slot]);
            rc = ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s' is mapped to '%s' but missing "
                               "from it", index_path, q, qf);
            goto out_index;
        }
    }
    /* ... and every tensor of every file is mapped to that file */
    for (size_t i = 0; i < x->n_files; i++) {
        for (size_t t = 0; t < ptc_st_count(x->files[i]); t++) {
            const char *name = ptc_st_tensor_at(x->files[i], t)->name;
            json_t *v = json_object_get(x->weight_map, name);
            if (!v || strcmp(json_string_value(v), x->names[i]) != 0) {
                char q[400], qf[400];
                QNAME(q, name);
                QNAME(qf, x->names[i]);
                rc = ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s' in '%s' is not mapped to "
                                   "that file in the weight_map", index_path, q, qf);
                goto out_index;
            }
        }
    }
    *out = x;
    return PTC_OK;

out_index:
    ptc_st_index_close(x);
    return rc;
}

void ptc_st_index_close(ptc_st_index *x)
{
    if (!x)
        return;
    for (size_t i = 0; x->files && i < x->n_files; i++)
        ptc_st_close(x->files[i]);
    ptc_free(x->files);
    ptc_free(x->names);
    free(x->meta_json);
    json_decref(x->root);
    ptc_free(x);
}

size_t ptc_st_index_file_count(const ptc_st_index *x)
{
    return x->n_files;
}

const ptc_st_file *ptc_st_index_file(const ptc_st_index *x, size_t i)
{
    return i < x->n_files ? x->files[i] : NULL;
}

const char *ptc_st_index_file_name(const ptc_st_index *x, size_t i)
{
    return i < x->n_files ? x->names[i] : NULL;
}

int ptc_st_index_find(const ptc_st_index *x, const char *name, size_t *file, size_t *tensor)
{
    json_t *v = json_object_get(x->weight_map, name);
    if (v) {
        size_t slot = file_slot(x, json_string_value(v));
        if (ptc_st_find(x->files[slot], name, tensor) == PTC_OK) {
            *file = slot;
            return PTC_OK;
        }
    }
    char q[400];
    QNAME(q, name);
    return ptc_error_set(PTC_E_NOTFOUND, "no tensor '%s' in the index", q);
}

const char *ptc_st_index_metadata_json(const ptc_st_index *x)
{
    return x->meta_json;
}

int ptc_st_index_write(const char *path, const char *const *names, const char *const *files,
                       size_t n, uint64_t total_size, uint64_t total_parameters)
{
    int rc;
    char *text = NULL, *tmp = NULL;
    int fd = -1;
    json_t *root = json_object(), *wm = json_object();
    json_t *meta = total_parameters
                       ? json_pack("{sIsI}", "total_size", (json_int_t)total_size,
                                   "total_parameters", (json_int_t)total_parameters)
                       : json_pack("{sI}", "total_size", (json_int_t)total_size);
    if (!root || !wm || !meta) {
        json_decref(wm);
        json_decref(meta);
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory building %s", path);
        goto out_root;
    }
    if ((rc = ptc_st_json_put(root, "metadata", meta)) < 0 || (rc = ptc_st_json_put(root, "weight_map", wm)) < 0)
        goto out_root;
    for (size_t i = 0; i < n; i++) {
        char q[400];
        QNAME(q, names[i]);
        if (!file_name_ok(files[i])) {
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': '%s' is not a plain file name", q,
                               files[i]);
            goto out_root;
        }
        if (json_object_get(wm, names[i])) {
            rc = ptc_error_set(PTC_E_INVAL, "duplicate tensor name '%s' in the index", q);
            goto out_root;
        }
        json_t *s = json_string(files[i]);
        if (!s || json_object_set_new(wm, names[i], s) != 0) {
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': name or file is not valid utf-8", q);
            goto out_root;
        }
    }
    text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) {
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory building %s", path);
        goto out_root;
    }
    rc = ptc_tmpfile_create(path, &tmp, &fd);
    if (rc < 0)
        goto out_text;
    size_t tl = strlen(text);
    text[tl] = '\n'; /* json_dumps' NUL becomes the final newline */
    rc = ptc_write_all(fd, text, tl + 1, tmp);
    if (rc < 0) {
        ptc_tmpfile_discard(fd, tmp);
        goto out_text;
    }
    rc = ptc_tmpfile_commit(fd, tmp, path);
out_text:
    free(text);
out_root:
    json_decref(root);
    return rc;
}
