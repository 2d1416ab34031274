/* safetensors: validating reader (pure header parser + mmap), canonical
 * header builder and streaming atomic writer (the index files of sharded
 * checkpoints: safetensors_index.c).
 *
 * The parser keeps the jansson tree alive and points tensor names into it;
 * the __metadata__ strings are read apart into one buffer
 * (safetensors_meta.c). Validation order follows the
 * file: length word, JSON, each entry's fields, then the layout of the data
 * buffer as a whole (sorted by offsets: every begin must equal the previous
 * end, the last end must be the data size). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/formats/formats_internal.h"
#include "ptc/safetensors.h"
#include "base/util_internal.h"

#define META_KEY "__metadata__"

struct ptc_st_header {
    json_t *root;           /* owns every string the tensors point to */
    ptc_st_tensor *tensors; /* data order */
    size_t n;
    ptc_st_kv *meta;
    size_t n_meta;
    char *meta_text; /* owns the metadata strings when read apart */
    uint64_t data_start;
};

struct ptc_st_file {
    ptc_st_header *h;
    void *map;
    size_t map_len;
    uint64_t size;
};

/* ---- parser ------------------------------------------------------------------ */

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void store_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A non-negative JSON integer (jansson rejects integers beyond int64). */
static bool get_uint(const json_t *v, int64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (int64_t)json_integer_value(v);
    return true;
}

static int parse_entry(const char *what, const char *name, json_t *obj, ptc_st_tensor *t,
                       uint64_t *begin, uint64_t *end)
{
    char q[400];
    QNAME(q, name);
    if (strlen(name) > PTC_ST_MAX_NAME)
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': name longer than %d bytes", what,
                             q, PTC_ST_MAX_NAME);
    if (!json_is_object(obj))
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': entry is not a json object", what,
                             q);
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets")) {
            char qk[400];
            QNAME(qk, key);
            return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': unexpected field '%s'", what,
                                 q, qk);
        }
    }
    json_t *dt = json_object_get(obj, "dtype");
    json_t *shape = json_object_get(obj, "shape");
    json_t *offs = json_object_get(obj, "data_offsets");
    if (!dt)
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': missing field 'dtype'", what, q);
    if (!shape)
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': missing field 'shape'", what, q);
    if (!offs)
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': missing field 'data_offsets'",
                             what, q);
    if (!json_is_string(dt))
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': field 'dtype' is not a string",
                             what, q);
    if (ptc_dtype_parse(json_string_value(dt), json_string_length(dt), &t->dtype) < 0) {
        char qd[400];
        ptc_quote_name(qd, sizeof qd, json_string_value(dt), json_string_length(dt));
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': unknown dtype '%s'", what, q, qd);
    }
    if (!json_is_array(shape))
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': field 'shape' is not an array",
                             what, q);
    size_t nd = json_array_size(shape);
    if (nd > PTC_ST_MAX_DIMS)
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': shape has %zu dims, at most %d",
                             what, q, nd, PTC_ST_MAX_DIMS);
    t->ndim = (int)nd;
    int64_t vol = 1;
    bool overflow = false, zero = false;
    for (size_t d = 0; d < nd; d++) {
        int64_t x;
        if (!get_uint(json_array_get(shape, d), &x))
            return ptc_error_set(PTC_E_FORMAT,
                                 "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                                 what, q, d);
        t->shape[d] = x;
        zero |= x == 0;
        /* the product of the non-zero dims must fit too: strides and boxes of
         * an empty tensor are computed from it */
        if (!overflow && x != 0 && ptc_mul_overflow_i64(vol, x, &vol))
            overflow = true;
    }
    int64_t nbytes = 0;
    if (overflow || ptc_mul_overflow_i64(vol, (int64_t)ptc_dtype_size(t->dtype), &nbytes))
        return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': shape volume overflows", what, q);
    if (zero)
        nbytes = 0;
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: tensor '%s': field 'data_offsets' is not an array of 2",
                             what, q);
    int64_t b, e;
    if (!get_uint(json_array_get(offs, 0), &b) || !get_uint(json_array_get(offs, 1), &e))
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: tensor '%s': data_offsets are not non-negative integers",
                             what, q);
    if (e < b)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: tensor '%s': data_offsets [%lld, %lld] end before they begin",
                             what, q, (long long)b, (long long)e);
    if (e - b != nbytes)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: tensor '%s': shape needs %lld bytes of %s but data_offsets "
                             "[%lld, %lld] span %lld",
                             what, q, (long long)nbytes, ptc_dtype_name(t->dtype), (long long)b,
                             (long long)e, (long long)(e - b));
    t->name = name;
    t->nbytes = (uint64_t)nbytes;
    *begin = (uint64_t)b;
    *end = (uint64_t)e;
    return PTC_OK;
}

typedef struct span {
    uint64_t begin, end;
    size_t order; /* position in the JSON object */
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : (x->order > y->order);
}

static int parse_metadata(const char *what, json_t *m, ptc_st_header *h)
{
    if (!json_is_object(m))
        return ptc_error_set(PTC_E_FORMAT, "%s: __metadata__ is not a json object", what);
    size_t n = json_object_size(m);
    h->meta = ptc_calloc(n ? n : 1, sizeof *h->meta);
    if (!h->meta)
        return PTC_E_NOMEM;
    const char *key;
    json_t *val;
    json_object_foreach(m, key, val)
    {
        if (!json_is_string(val)) {
            char q[400];
            QNAME(q, key);
            return ptc_error_set(PTC_E_FORMAT, "%s: __metadata__ value of '%s' is not a string",
                                 what, q);
        }
        h->meta[h->n_meta].key = key;
        h->meta[h->n_meta].value = json_string_value(val);
        h->n_meta++;
    }
    return PTC_OK;
}

static int parse_header(const void *buf, size_t len, uint64_t file_size, const char *what,
                        size_t apart_min, ptc_st_header **out)
{
    *out = NULL;
    const unsigned char *p = buf;
    if (file_size < 8 || len < 8)
        return ptc_error_set(PTC_E_FORMAT, "%s: truncated: %llu bytes, a safetensors file needs "
                             "at least 8", what, (unsigned long long)PTC_MIN((uint64_t)len, file_size));
    uint64_t n = load_le64(p);
    if (n > PTC_ST_MAX_HEADER)
        return ptc_error_set(PTC_E_FORMAT, "%s: header length %llu exceeds the 100 MB limit",
                             what, (unsigned long long)n);
    if (n + 8 > file_size)
        return ptc_error_set(PTC_E_FORMAT, "%s: header length %llu exceeds the file size %llu",
                             what, (unsigned long long)n, (unsigned long long)file_size);
    if (n + 8 > len)
        return ptc_error_set(PTC_E_FORMAT, "%s: truncated: header needs %llu bytes, have %zu",
                             what, (unsigned long long)(n + 8), len);
    /* a large __metadata__ is read apart (safetensors_meta.c: jansson's hash
     * table makes a huge object cost more than linear time) and jansson
     * parses a copy of the rest with that object cut to {}; anything unusual
     * (an error included) goes through jansson whole, for its exact message
     * and position */
    const char *text = (const char *)p + 8;
    ptc_st_meta meta = {0};
    char *cut = NULL;
    int rc = apart_min == SIZE_MAX ? 0 : ptc_st_meta_scan(text, (size_t)n, apart_min, &meta);
    if (rc < 0)
        return rc;
    bool apart = rc == 1;
    size_t tlen = (size_t)n;
    if (apart) { /* the text with that object's value cut to {} */
        tlen = meta.begin + 2 + ((size_t)n - meta.end);
        if (!(cut = ptc_malloc(tlen))) {
            ptc_st_meta_free(&meta);
            return PTC_E_NOMEM;
        }
        memcpy(cut, text, meta.begin);
        memcpy(cut + meta.begin, "{}", 2);
        memcpy(cut + meta.begin + 2, text + meta.end, (size_t)n - meta.end);
        text = cut;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, tlen, JSON_REJECT_DUPLICATES, &jerr);
    ptc_free(cut);
    if (!root && apart) {
        ptc_st_meta_free(&meta);
        return parse_header(buf, len, file_size, what, SIZE_MAX, out);
    }
    if (!root)
        return ptc_error_set(PTC_E_FORMAT, "%s: header is not valid json: %s (byte %d)", what,
                             jerr.text, jerr.position);
    ptc_st_header *h = ptc_calloc(1, sizeof *h);
    span *spans = NULL;
    if (!h) {
        ptc_st_meta_free(&meta);
        rc = PTC_E_NOMEM;
        goto out_root;
    }
    h->root = root;
    if (apart) { /* the entries read apart stand for the cut object's */
        h->meta = meta.kv;
        h->n_meta = meta.n;
        h->meta_text = meta.text;
    }
    h->data_start = n + 8;
    if (!json_is_object(root)) {
        rc = ptc_error_set(PTC_E_FORMAT, "%s: header is not a json object", what);
        goto out_header;
    }
    size_t total = json_object_size(root);
    h->tensors = ptc_calloc(total ? total : 1, sizeof *h->tensors);
    spans = ptc_calloc(total ? total : 1, sizeof *spans);
    if (!h->tensors || !spans) {
        rc = PTC_E_NOMEM;
        goto out_header;
    }
    ptc_st_tensor *tmp = ptc_calloc(total ? total : 1, sizeof *tmp);
    if (!tmp) {
        rc = PTC_E_NOMEM;
        goto out_header;
    }
    const char *key;
    json_t *val;
    size_t k = 0;
    rc = PTC_OK;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, META_KEY) == 0) {
            if (!apart)
                rc = parse_metadata(what, val, h);
        } else {
            rc = parse_entry(what, key, val, &tmp[k], &spans[k].begin, &spans[k].end);
            spans[k].order = k;
            k++;
        }
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        ptc_free(tmp);
        goto out_header;
    }
    h->n = k;
    qsort(spans, k, sizeof *spans, cmp_span);
    uint64_t data_size = file_size - h->data_start, cursor = 0;
    for (size_t i = 0; i < k; i++) {
        const ptc_st_tensor *t = &tmp[spans[i].order];
        char q[400];
        if (spans[i].begin != cursor || spans[i].end > data_size)
            QNAME(q, t->name);
        if (spans[i].begin < cursor) {
            char q2[400];
            QNAME(q2, tmp[spans[i - 1].order].name);
            rc = ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': data [%llu, %llu) overlaps "
                               "tensor '%s' ending at %llu", what, q,
                               (unsigned long long)spans[i].begin,
                               (unsigned long long)spans[i].end, q2, (unsigned long long)cursor);
            break;
        }
        if (spans[i].begin > cursor) {
            rc = ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': gap of %llu bytes before its "
                               "data at offset %llu", what, q,
                               (unsigned long long)(spans[i].begin - cursor),
                               (unsigned long long)spans[i].begin);
            break;
        }
        if (spans[i].end > data_size) {
            rc = ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s': data_offsets end %llu beyond the "
                               "data buffer of %llu bytes (truncated file?)", what, q,
                               (unsigned long long)spans[i].end, (unsigned long long)data_size);
            break;
        }
        cursor = spans[i].end;
        h->tensors[i] = *t;
        h->tensors[i].offset = h->data_start + spans[i].begin;
    }
    ptc_free(tmp);
    if (rc < 0)
        goto out_header;
    if (cursor != data_size) {
        rc = ptc_error_set(PTC_E_FORMAT, "%s: tensor data ends at %llu but the data buffer has "
                           "%llu bytes (trailing bytes)", what, (unsigned long long)cursor,
                           (unsigned long long)data_size);
        goto out_header;
    }
    ptc_free(spans);
    *out = h;
    return PTC_OK;

out_header:
    ptc_free(spans);
    ptc_st_header_destroy(h);
    return rc;
out_root:
    json_decref(root);
    return rc;
}

int ptc_st_parse_header(const void *buf, size_t len, uint64_t file_size, ptc_st_header **out)
{
    return parse_header(buf, len, file_size, "safetensors header", PTC_ST_META_APART_MIN, out);
}

int ptc_st_parse_header_with(const void *buf, size_t len, uint64_t file_size, size_t apart_min,
                             ptc_st_header **out)
{
    return parse_header(buf, len, file_size, "safetensors header", apart_min, out);
}

void ptc_st_header_destroy(ptc_st_header *h)
{
    if (!h)
        return;
    ptc_free(h->tensors);
    ptc_free(h->meta);
    ptc_free(h->meta_text);
    json_decref(h->root);
    ptc_free(h);
}

size_t ptc_st_header_count(const ptc_st_header *h)
{
    return h->n;
}

const ptc_st_tensor *ptc_st_header_tensor(const ptc_st_header *h, size_t i)
{
    return i < h->n ? &h->tensors[i] : NULL;
}

int ptc_st_header_find(const ptc_st_header *h, const char *name, size_t *index)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->tensors[i].name, name) == 0) {
            *index = i;
            return PTC_OK;
        }
    }
    char q[400];
    QNAME(q, name);
    return ptc_error_set(PTC_E_NOTFOUND, "no tensor '%s'", q);
}

size_t ptc_st_header_metadata_count(const ptc_st_header *h)
{
    return h->n_meta;
}

ptc_st_kv ptc_st_header_metadata_at(const ptc_st_header *h, size_t i)
{
    ptc_st_kv none = {NULL, NULL};
    return i < h->n_meta ? h->meta[i] : none;
}

const char *ptc_st_header_metadata_get(const ptc_st_header *h, const char *key)
{
    for (size_t i = 0; i < h->n_meta; i++)
        if (strcmp(h->meta[i].key, key) == 0)
            return h->meta[i].value;
    return NULL;
}

uint64_t ptc_st_header_data_start(const ptc_st_header *h)
{
    return h->data_start;
}

/* ---- file reader ---------------------------------------------------------------- */

int ptc_st_open(ptc_st_file **out, const char *path)
{
    *out = NULL;
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = ptc_error_sys(PTC_E_IO, "stat %s", path);
        goto out_close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ptc_error_set(PTC_E_IO, "%s: not a regular file", path);
        goto out_close_fd;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        rc = ptc_error_set(PTC_E_FORMAT, "%s: truncated: %llu bytes, a safetensors file needs "
                           "at least 8", path, (unsigned long long)size);
        goto out_close_fd;
    }
    ptc_st_file *f = ptc_calloc(1, sizeof *f);
    if (!f) {
        rc = PTC_E_NOMEM;
        goto out_close_fd;
    }
    f->size = size;
    f->map_len = (size_t)size;
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = ptc_error_sys(PTC_E_IO, "mmap %s", path);
        goto out_free_file;
    }
    close(fd);
    fd = -1;
    rc = parse_header(f->map, f->map_len, size, path, PTC_ST_META_APART_MIN, &f->h);
    if (rc < 0)
        goto out_free_file;
    for (size_t i = 0; i < f->h->n; i++)
        f->h->tensors[i].data = (const unsigned char *)f->map + f->h->tensors[i].offset;
    *out = f;
    return PTC_OK;

out_free_file:
    ptc_st_close(f);
out_close_fd:
    if (fd >= 0)
        close(fd);
    return rc;
}

void ptc_st_close(ptc_st_file *f)
{
    if (!f)
        return;
    ptc_st_header_destroy(f->h);
    if (f->map)
        munmap(f->map, f->map_len);
    ptc_free(f);
}

const ptc_st_header *ptc_st_file_header(const ptc_st_file *f)
{
    return f->h;
}

size_t ptc_st_count(const ptc_st_file *f)
{
    return f->h->n;
}

const ptc_st_tensor *ptc_st_tensor_at(const ptc_st_file *f, size_t i)
{
    return ptc_st_header_tensor(f->h, i);
}

int ptc_st_find(const ptc_st_file *f, const char *name, size_t *index)
{
    return ptc_st_header_find(f->h, name, index);
}

uint64_t ptc_st_file_size(const ptc_st_file *f)
{
    return f->size;
}

/* ---- header builder ------------------------------------------------------------- */

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const ptc_st_kv *)a)->key, ((const ptc_st_kv *)b)->key);
}

int ptc_st_json_put(json_t *obj, const char *key, json_t *v)
{
    if (!v || json_object_set_new(obj, key, v) != 0)
        return ptc_error_set(PTC_E_NOMEM, "out of memory building a safetensors header");
    return PTC_OK;
}

static int build_json(const ptc_st_tensor *entries, size_t n, const ptc_st_kv *meta,
                      size_t n_meta, json_t **out, uint64_t *data_size, uint64_t *sizes)
{
    int rc = PTC_OK;
    json_t *root = json_object();
    ptc_st_kv *sorted = NULL;
    if (!root)
        return ptc_error_set(PTC_E_NOMEM, "out of memory building a safetensors header");
    if (n_meta > 0) {
        sorted = ptc_malloc(n_meta * sizeof *sorted);
        if (!sorted) {
            rc = PTC_E_NOMEM;
            goto out_root;
        }
        memcpy(sorted, meta, n_meta * sizeof *sorted);
        qsort(sorted, n_meta, sizeof *sorted, cmp_kv);
        json_t *m = json_object();
        if ((rc = ptc_st_json_put(root, META_KEY, m)) < 0)
            goto out_sorted;
        for (size_t i = 0; i < n_meta; i++) {
            char q[400];
            if (!sorted[i].key || !sorted[i].value) {
                rc = ptc_error_set(PTC_E_INVAL, "metadata entry %zu has a NULL key or value", i);
                goto out_sorted;
            }
            if (i > 0 && strcmp(sorted[i].key, sorted[i - 1].key) == 0) {
                QNAME(q, sorted[i].key);
                rc = ptc_error_set(PTC_E_INVAL, "duplicate metadata key '%s'", q);
                goto out_sorted;
            }
            json_t *s = json_string(sorted[i].value);
            if (!s) {
                QNAME(q, sorted[i].key);
                rc = ptc_error_set(PTC_E_INVAL, "metadata value of '%s' is not valid utf-8", q);
                goto out_sorted;
            }
            if ((rc = ptc_st_json_put(m, sorted[i].key, s)) < 0)
                goto out_sorted;
        }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const ptc_st_tensor *t = &entries[i];
        char q[400];
        if (!t->name) {
            rc = ptc_error_set(PTC_E_INVAL, "tensor %zu has no name", i);
            goto out_sorted;
        }
        QNAME(q, t->name);
        if (strlen(t->name) > PTC_ST_MAX_NAME || strcmp(t->name, META_KEY) == 0) {
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': name is reserved or longer than %d "
                               "bytes", q, PTC_ST_MAX_NAME);
            goto out_sorted;
        }
        if (json_object_get(root, t->name)) {
            rc = ptc_error_set(PTC_E_INVAL, "duplicate tensor name '%s'", q);
            goto out_sorted;
        }
        size_t es = ptc_dtype_size(t->dtype);
        if (es == 0 || t->ndim < 0 || t->ndim > PTC_ST_MAX_DIMS) {
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': invalid dtype or %d dims", q, t->ndim);
            goto out_sorted;
        }
        json_t *shape = json_array();
        json_t *ent = json_object();
        if (!shape || !ent) {
            json_decref(shape);
            json_decref(ent);
            rc = ptc_error_set(PTC_E_NOMEM, "out of memory building a safetensors header");
            goto out_sorted;
        }
        int64_t vol = 1;
        bool bad = false;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || ptc_mul_overflow_i64(vol, t->shape[d], &vol))
                bad = true;
            json_array_append_new(shape, json_integer(t->shape[d]));
        }
        int64_t nbytes;
        uint64_t end;
        if (bad || ptc_mul_overflow_i64(vol, (int64_t)es, &nbytes) ||
            __builtin_add_overflow(off, (uint64_t)nbytes, &end) || end > (uint64_t)INT64_MAX) {
            json_decref(shape);
            json_decref(ent);
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': negative dim or size overflow", q);
            goto out_sorted;
        }
        json_t *offs = json_pack("[II]", (json_int_t)off, (json_int_t)end);
        if ((rc = ptc_st_json_put(ent, "dtype", json_string(ptc_dtype_name(t->dtype)))) < 0 ||
            (rc = ptc_st_json_put(ent, "shape", shape)) < 0 || (rc = ptc_st_json_put(ent, "data_offsets", offs)) < 0) {
            json_decref(ent);
            goto out_sorted;
        }
        if (json_object_set_new(root, t->name, ent) != 0) {
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': name is not valid utf-8", q);
            goto out_sorted;
        }
        if (sizes)
            sizes[i] = off;
        off = end;
    }
    ptc_free(sorted);
    *data_size = off;
    *out = root;
    return PTC_OK;

out_sorted:
    ptc_free(sorted);
out_root:
    json_decref(root);
    return rc;
}

/* Prefix bytes (8-byte length + JSON + padding) for @p root. */
static int dump_prefix(json_t *root, void **bytes, size_t *len)
{
    size_t jl = json_dumpb(root, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (jl == 0)
        return ptc_error_set(PTC_E_NOMEM, "cannot serialize a safetensors header");
    size_t padded = (jl + 7) & ~(size_t)7;
    unsigned char *b = ptc_malloc(8 + padded);
    if (!b)
        return PTC_E_NOMEM;
    if (json_dumpb(root, (char *)b + 8, jl, JSON_COMPACT | JSON_PRESERVE_ORDER) != jl) {
        ptc_free(b);
        return ptc_error_set(PTC_E_NOMEM, "cannot serialize a safetensors header");
    }
    memset(b + 8 + jl, ' ', padded - jl);
    store_le64(b, padded);
    *bytes = b;
    *len = 8 + padded;
    return PTC_OK;
}

int ptc_st_header_build(const ptc_st_tensor *entries, size_t n, const ptc_st_kv *meta,
                        size_t n_meta, void **bytes, size_t *len, uint64_t *offsets_out)
{
    *bytes = NULL;
    *len = 0;
    json_t *root;
    uint64_t data_size;
    PTC_TRY(build_json(entries, n, meta, n_meta, &root, &data_size, offsets_out));
    int rc = dump_prefix(root, bytes, len);
    json_decref(root);
    if (rc < 0)
        return rc;
    if (offsets_out) {
        for (size_t i = 0; i < n; i++)
            offsets_out[i] += *len;
        offsets_out[n] = *len + data_size;
    }
    return PTC_OK;
}

/* ---- streaming writer ----------------------------------------------------------- */

struct ptc_st_writer {
    int fd;
    char *tmp_path;
    char *path;
    uint64_t remaining;
    bool failed;
};

int ptc_st_writer_create(ptc_st_writer **out, const char *path, const ptc_st_tensor *entries,
                         size_t n, const ptc_st_kv *meta, size_t n_meta)
{
    *out = NULL;
    json_t *root;
    uint64_t data_size;
    void *prefix = NULL;
    size_t plen = 0;
    PTC_TRY(build_json(entries, n, meta, n_meta, &root, &data_size, NULL));
    int rc = dump_prefix(root, &prefix, &plen);
    json_decref(root);
    if (rc < 0)
        return rc;
    ptc_st_writer *w = ptc_calloc(1, sizeof *w);
    if (!w) {
        rc = PTC_E_NOMEM;
        goto out_prefix;
    }
    w->fd = -1;
    w->remaining = data_size;
    w->path = ptc_strdup(path);
    if (!w->path) {
        rc = PTC_E_NOMEM;
        goto out_writer;
    }
    rc = ptc_tmpfile_create(path, &w->tmp_path, &w->fd);
    if (rc < 0)
        goto out_writer;
    rc = ptc_write_all(w->fd, prefix, plen, w->tmp_path);
    if (rc < 0)
        goto out_writer;
    ptc_free(prefix);
    *out = w;
    return PTC_OK;

out_writer:
    ptc_st_writer_abort(w);
out_prefix:
    ptc_free(prefix);
    return rc;
}

int ptc_st_writer_write(ptc_st_writer *w, const void *data, size_t len)
{
    if (w->failed)
        return ptc_error_set(PTC_E_INVAL, "%s: writer already failed", w->path);
    if ((uint64_t)len > w->remaining) {
        w->failed = true;
        return ptc_error_set(PTC_E_RANGE, "%s: %zu bytes written past the end of the tensor "
                             "data (%llu expected)", w->path, len,
                             (unsigned long long)w->remaining);
    }
    int rc = ptc_write_all(w->fd, data, len, w->tmp_path);
    if (rc < 0) {
        w->failed = true;
        return rc;
    }
    w->remaining -= len;
    return PTC_OK;
}

uint64_t ptc_st_writer_remaining(const ptc_st_writer *w)
{
    return w->remaining;
}

int ptc_st_writer_finish(ptc_st_writer *w)
{
    int rc;
    if (w->failed) {
        rc = ptc_error_set(PTC_E_INVAL, "%s: writer already failed", w->path);
        goto out_abort;
    }
    if (w->remaining != 0) {
        rc = ptc_error_set(PTC_E_RANGE, "%s: %llu bytes of tensor data missing", w->path,
                           (unsigned long long)w->remaining);
        goto out_abort;
    }
    rc = ptc_tmpfile_commit(w->fd, w->tmp_path, w->path);
    w->fd = -1;
    w->tmp_path = NULL;
    ptc_free(w->path);
    ptc_free(w);
    return rc;

out_abort:
    ptc_st_writer_abort(w);
    return rc;
}

void ptc_st_writer_abort(ptc_st_writer *w)
{
    if (!w)
        return;
    ptc_tmpfile_discard(w->fd, w->tmp_path);
    ptc_free(w->path);
    ptc_free(w);
}
