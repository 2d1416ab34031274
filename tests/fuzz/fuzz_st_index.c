/* Fuzz ptc_st_index_open, the reader of model.safetensors.index.json. It
 * only takes a path, so the input is written to a temporary file (mkstemp,
 * unlinked after each run) in a fixture directory created once per process
 * and removed at exit:
 *
 *     T/evil.safetensors            tensor "e"   (outside the index's dir)
 *     T/m/a.safetensors             tensors "x", "y"
 *     T/m/b.safetensors             tensor "z"
 *     T/m/.hidden.safetensors       tensor "h"
 *     T/m/empty.safetensors         no tensor
 *     T/m/d/inner.safetensors       tensor "i"   (in a subdirectory)
 *     T/m/index-XXXXXX              the input
 *
 * so an index that reaches beyond its directory ("../evil.safetensors",
 * "d/inner.safetensors") would open if the name check let it. After a
 * success: every file name is a plain name (not empty, no '/', not "." or
 * ".."), the names are sorted and distinct, every tensor of every file is
 * found by ptc_st_index_find in exactly that file at its index, the
 * weight_map of the input has exactly as many entries as the files have
 * tensors and maps each to the file that holds it, and the metadata text
 * is the input's "metadata" object ({} without one). Leaks show under ASan. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>

#include "ptc/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fixture[64];

static void check(bool ok)
{
    if (!ok)
        abort();
}

static const struct {
    const char *path;  /* under the fixture */
    const char *names; /* its tensors, space separated */
} shards[] = {
    {"evil.safetensors", "e"},       {"m/a.safetensors", "x y"},
    {"m/b.safetensors", "z"},        {"m/.hidden.safetensors", "h"},
    {"m/empty.safetensors", ""},     {"m/d/inner.safetensors", "i"},
};
#define NSHARDS (sizeof shards / sizeof shards[0])

static void fixture_path(char *buf, size_t cap, const char *rel)
{
    int n = snprintf(buf, cap, "%s/%s", fixture, rel);
    check(n > 0 && (size_t)n < cap);
}

static void write_shard(const char *rel, const char *names)
{
    ptc_st_tensor t[4];
    char nm[4][8];
    size_t n = 0;
    memset(t, 0, sizeof t);
    for (const char *p = names; *p; p++) {
        if (*p == ' ')
            continue;
        nm[n][0] = *p;
        nm[n][1] = '\0';
        t[n].name = nm[n];
        t[n].dtype = PTC_DTYPE_U8;
        t[n].ndim = 1;
        t[n].shape[0] = 2;
        n++;
    }
    char path[128];
    fixture_path(path, sizeof path, rel);
    ptc_st_writer *w;
    check(ptc_st_writer_create(&w, path, t, n, NULL, 0) == PTC_OK);
    const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    check(ptc_st_writer_write(w, bytes, 2 * n) == PTC_OK);
    check(ptc_st_writer_finish(w) == PTC_OK);
}

static void fixture_remove(void)
{
    char path[128];
    for (size_t i = 0; i < NSHARDS; i++) {
        fixture_path(path, sizeof path, shards[i].path);
        unlink(path);
    }
    fixture_path(path, sizeof path, "m/d");
    rmdir(path);
    fixture_path(path, sizeof path, "m");
    rmdir(path);
    rmdir(fixture);
}

static void fixture_create(void)
{
    char path[128];
    snprintf(fixture, sizeof fixture, "/tmp/ptc-fuzz-st-index-XXXXXX");
    check(mkdtemp(fixture) != NULL);
    fixture_path(path, sizeof path, "m");
    check(mkdir(path, 0700) == 0);
    fixture_path(path, sizeof path, "m/d");
    check(mkdir(path, 0700) == 0);
    for (size_t i = 0; i < NSHARDS; i++)
        write_shard(shards[i].path, shards[i].names);
    atexit(fixture_remove);
}

static bool plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static void check_index(const ptc_st_index *x, const uint8_t *data, size_t size)
{
    size_t nf = ptc_st_index_file_count(x), tensors = 0;
    check(ptc_st_index_file(x, nf) == NULL && ptc_st_index_file_name(x, nf) == NULL);
    for (size_t i = 0; i < nf; i++) {
        const char *fn = ptc_st_index_file_name(x, i);
        const ptc_st_file *f = ptc_st_index_file(x, i);
        check(fn != NULL && f != NULL && plain_name(fn));
        check(i == 0 || strcmp(ptc_st_index_file_name(x, i - 1), fn) < 0);
        for (size_t t = 0; t < ptc_st_count(f); t++) {
            size_t fi, ti;
            check(ptc_st_index_find(x, ptc_st_tensor_at(f, t)->name, &fi, &ti) == PTC_OK);
            check(fi == i && ti == t);
            tensors++;
        }
    }
    size_t fi, ti;
    check(ptc_st_index_find(x, "no such tensor", &fi, &ti) == PTC_E_NOTFOUND);

    /* the same bytes, read independently */
    json_error_t err;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &err);
    check(root != NULL);
    json_t *wm = json_object_get(root, "weight_map");
    check(json_object_size(wm) == tensors);
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val)
    {
        check(ptc_st_index_find(x, key, &fi, &ti) == PTC_OK);
        check(strcmp(ptc_st_index_file_name(x, fi), json_string_value(val)) == 0);
        check(strcmp(ptc_st_tensor_at(ptc_st_index_file(x, fi), ti)->name, key) == 0);
    }
    json_t *meta = json_loads(ptc_st_index_metadata_json(x), 0, &err);
    json_t *want = json_object_get(root, "metadata");
    check(meta != NULL && json_is_object(meta));
    check(json_is_object(want) ? json_equal(meta, want) : json_object_size(meta) == 0);
    json_decref(meta);
    json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fixture[0])
        fixture_create();
    char path[128];
    fixture_path(path, sizeof path, "m/index-XXXXXX");
    int fd = mkstemp(path);
    check(fd >= 0);
    check(size == 0 || write(fd, data, size) == (ssize_t)size);
    close(fd);
    ptc_st_index *x;
    int rc = ptc_st_index_open(&x, path);
    unlink(path);
    check(rc == PTC_OK || rc == PTC_E_FORMAT || rc == PTC_E_NOTFOUND || rc == PTC_E_IO);
    if (rc != PTC_OK) {
        check(x == NULL);
        return 0;
    }
    check_index(x, data, size);
    ptc_st_index_close(x);
    return 0;
}
