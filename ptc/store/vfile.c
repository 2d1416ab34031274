/* Virtual safetensors files over a stored version: the whole model, or one
 * rank of any configuration. The header is computed from the layout; data
 * bytes are assembled on read from the stored pieces, touching only the
 * blocks they come from (ptc_store_reader_read_box). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/vfile.h"
#include "ptc/convert.h"
#include "ptc/safetensors.h"
#include "base/piecewalk_internal.h"
#include "base/util_internal.h"

#define VFILE_CHUNK (8u << 20)

struct ventry {
    size_t tensor;       /* index in the reader */
    ptc_dtype src_dtype; /* stored */
    ptc_dtype dtype;     /* served */
    int ndim;
    int64_t shape[PTC_MAX_DIMS];
    int64_t nel;
    ptc_piece *pieces;
    size_t npieces;
};

struct ptc_vfile {
    const ptc_store_reader *r;
    struct ventry *e;
    size_t n;
    ptc_st_tensor *st; /* n: the header entries (names owned by the reader) */
    uint64_t *offsets; /* n + 1: data start of each entry, then file size */
    uint8_t *header;
    size_t header_len;
    ptc_st_kv *meta;
    size_t nmeta;
    char **meta_strings; /* owned key/value strings */
    size_t nmeta_strings;
};

void ptc_vfile_destroy(ptc_vfile *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        ptc_free(f->e[i].pieces);
    for (size_t i = 0; i < f->nmeta_strings; i++)
        ptc_free(f->meta_strings[i]);
    ptc_free(f->meta_strings);
    ptc_free(f->meta);
    ptc_free(f->e);
    ptc_free(f->st);
    ptc_free(f->offsets);
    free(f->header); /* from ptc_st_header_build (malloc) */
    ptc_free(f);
}

uint64_t ptc_vfile_size(const ptc_vfile *f)
{
    return f->offsets[f->n];
}

static ptc_dtype served_dtype(ptc_dtype stored, ptc_dtype want)
{
    if (want == PTC_DTYPE_KEEP || !ptc_dtype_is_float(stored))
        return stored;
    return want;
}

static int add_meta(ptc_vfile *f, const char *key, const char *value)
{
    size_t cap = f->nmeta, scap = f->nmeta_strings;
    PTC_TRY(ptc_grow((void **)&f->meta, &cap, f->nmeta + 1, sizeof *f->meta));
    PTC_TRY(ptc_grow((void **)&f->meta_strings, &scap, f->nmeta_strings + 2,
                     sizeof *f->meta_strings));
    char *k = ptc_strdup(key);
    char *v = k ? ptc_strdup(value) : NULL;
    if (!v) {
        ptc_free(k);
        return PTC_E_NOMEM;
    }
    f->meta_strings[f->nmeta_strings++] = k;
    f->meta_strings[f->nmeta_strings++] = v;
    f->meta[f->nmeta].key = k;
    f->meta[f->nmeta].value = v;
    f->nmeta++;
    return PTC_OK;
}

/* The checkpoint's own __metadata__, stored as a JSON object. */
static int add_version_meta(ptc_vfile *f, const ptc_store_reader *r)
{
    const ptc_version_info *vi = ptc_store_reader_version(r);
    const char *text = vi->metadata_json ? vi->metadata_json : "{}";
    json_error_t jerr;
    json_t *obj = json_loads(text, 0, &jerr);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return ptc_error_set(PTC_E_STORE, "version %llu: metadata is not a JSON object",
                             (unsigned long long)vi->version);
    }
    const char *key;
    json_t *val;
    int rc = PTC_OK;
    json_object_foreach(obj, key, val)
    {
        if (rc == PTC_OK && json_is_string(val))
            rc = add_meta(f, key, json_string_value(val));
    }
    json_decref(obj);
    return rc;
}

/* The header entries, their offsets and the header bytes (kept: the
 * writer of ptc_vfile_write takes the same entries). */
static int finish(ptc_vfile *f)
{
    ptc_st_tensor *st = f->st = ptc_calloc(f->n ? f->n : 1, sizeof *st);
    f->offsets = ptc_calloc(f->n + 1, sizeof *f->offsets);
    if (!st || !f->offsets)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < f->n; i++) {
        ptc_store_tensor ti;
        PTC_TRY(ptc_store_reader_tensor(f->r, f->e[i].tensor, &ti));
        st[i].name = ti.name;
        st[i].dtype = f->e[i].dtype;
        st[i].ndim = f->e[i].ndim;
        memcpy(st[i].shape, f->e[i].shape, sizeof(int64_t) * PTC_MAX_DIMS);
    }
    void *hdr = NULL;
    int rc = ptc_st_header_build(st, f->n, f->meta, f->nmeta, &hdr, &f->header_len,
                                 f->offsets);
    f->header = hdr;
    return rc;
}

static int entry_init(struct ventry *e, const ptc_store_reader *r, size_t t, ptc_dtype want)
{
    ptc_store_tensor ti;
    PTC_TRY(ptc_store_reader_tensor(r, t, &ti));
    e->tensor = t;
    e->src_dtype = ti.dtype;
    e->dtype = served_dtype(ti.dtype, want);
    return PTC_OK;
}

int ptc_vfile_whole(ptc_vfile **out, const ptc_store_reader *r, ptc_dtype dtype)
{
    return ptc_vfile_subset(out, r, NULL, ptc_store_reader_tensor_count(r), dtype);
}

int ptc_vfile_subset(ptc_vfile **out, const ptc_store_reader *r, const size_t *tensors,
                     size_t n, ptc_dtype dtype)
{
    *out = NULL;
    for (size_t i = 0; tensors && i < n; i++)
        if (tensors[i] >= ptc_store_reader_tensor_count(r))
            return ptc_error_set(PTC_E_RANGE, "tensor index %zu out of range", tensors[i]);
    ptc_vfile *f = ptc_calloc(1, sizeof *f);
    if (!f)
        return PTC_E_NOMEM;
    f->r = r;
    int rc = PTC_OK;
    f->e = ptc_calloc(n ? n : 1, sizeof *f->e);
    if (!f->e) {
        rc = PTC_E_NOMEM;
        goto out_destroy;
    }
    for (size_t i = 0; i < n; i++, f->n++) {
        struct ventry *e = &f->e[i];
        size_t t = tensors ? tensors[i] : i;
        ptc_store_tensor ti;
        rc = entry_init(e, r, t, dtype);
        if (rc == PTC_OK)
            rc = ptc_store_reader_tensor(r, t, &ti);
        if (rc)
            goto out_destroy;
        e->ndim = ti.ndim;
        memcpy(e->shape, ti.shape, sizeof e->shape);
        e->pieces = ptc_calloc(1, sizeof *e->pieces);
        if (!e->pieces) {
            rc = PTC_E_NOMEM;
            goto out_destroy;
        }
        e->npieces = 1;
        ptc_box_full(&e->pieces[0].box, ti.ndim, ti.shape);
        ptc_strides_row_major(ti.ndim, ti.shape, e->pieces[0].local_stride);
        e->nel = ptc_box_volume(&e->pieces[0].box);
    }
    rc = add_version_meta(f, r);
    if (rc == PTC_OK)
        rc = finish(f);
    if (rc == PTC_OK) {
        *out = f;
        return PTC_OK;
    }
out_destroy:
    ptc_vfile_destroy(f);
    return rc;
}

static json_t *pieces_json(const ptc_piece *p, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *box = json_array(), *st = json_array();
        for (int d = 0; d < p[i].box.ndim; d++) {
            json_array_append_new(box, json_pack("[II]", (json_int_t)p[i].box.lo[d],
                                                 (json_int_t)p[i].box.hi[d]));
            json_array_append_new(st, json_integer(p[i].local_stride[d]));
        }
        json_array_append_new(arr, json_pack("{s:o,s:I,s:o}", "box", box, "offset",
                                             (json_int_t)p[i].local_offset, "strides", st));
    }
    return arr;
}

static int add_rank_meta(ptc_vfile *f, const ptc_layout *l, int rank)
{
    const ptc_config *cfg = ptc_layout_config(l);
    bool ex = ptc_layout_is_explicit(l);
    char buf[PTC_CONFIG_MAX_STAGES * 11 + 64];
    PTC_TRY(ptc_layout_describe(l, buf, sizeof buf));
    PTC_TRY(add_meta(f, "ptc.config", buf));
    PTC_TRY(add_meta(f, "ptc.format", "1"));
    snprintf(buf, sizeof buf, "%d", rank);
    PTC_TRY(add_meta(f, "ptc.rank", buf));
    if (!ex) { /* an explicit layout's ranks have no coordinates */
        int pp_i, dp_i, tp_i;
        ptc_config_coords(cfg, rank, &pp_i, &dp_i, &tp_i);
        snprintf(buf, sizeof buf, "pp=%d,dp=%d,tp=%d", pp_i, dp_i, tp_i);
        PTC_TRY(add_meta(f, "ptc.coords", buf));
    }

    json_t *tensors = json_object();
    if (!tensors)
        return ptc_error_set(PTC_E_NOMEM, "out of memory building rank metadata");
    int rc = PTC_OK;
    for (size_t i = 0; i < f->n && rc == PTC_OK; i++) {
        const struct ventry *e = &f->e[i];
        const ptc_tensor_info *ti = ptc_layout_tensor(l, e->tensor);
        char place[256] = "";
        rc = ex ? PTC_OK
                : ptc_placement_format(ptc_layout_placement(l, e->tensor), place, sizeof place);
        if (rc)
            break;
        json_t *shape = json_array();
        for (int d = 0; d < ti->ndim; d++)
            json_array_append_new(shape, json_integer(ti->shape[d]));
        json_t *one = json_pack("{s:o,s:s,s:b,s:o}", "global_shape", shape, "placement",
                                place, "flat", e->ndim == 1 && ti->ndim != 1 ? 1 : 0,
                                "pieces", pieces_json(e->pieces, e->npieces));
        if (!one || json_object_set_new(tensors, ti->name, one) != 0)
            rc = ptc_error_set(PTC_E_NOMEM, "out of memory building rank metadata");
    }
    char *text = rc == PTC_OK ? json_dumps(tensors, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(tensors);
    if (rc)
        return rc;
    if (!text)
        return ptc_error_set(PTC_E_NOMEM, "out of memory building rank metadata");
    rc = add_meta(f, "ptc.layout", text);
    free(text);
    return rc;
}

int ptc_vfile_rank(ptc_vfile **out, const ptc_store_reader *r, const ptc_layout *l, int rank,
                   ptc_dtype dtype)
{
    *out = NULL;
    if (rank < 0 || rank >= ptc_layout_world(l))
        return ptc_error_set(PTC_E_RANGE, "rank %d outside a world of %d", rank,
                             ptc_layout_world(l));
    ptc_vfile *f = ptc_calloc(1, sizeof *f);
    if (!f)
        return PTC_E_NOMEM;
    f->r = r;
    int rc = PTC_OK;
    size_t n = ptc_layout_count(l);
    f->e = ptc_calloc(n ? n : 1, sizeof *f->e);
    if (!f->e) {
        rc = PTC_E_NOMEM;
        goto out_destroy;
    }
    for (size_t t = 0; t < n; t++) {
        ptc_shard sh;
        rc = ptc_layout_shard(l, t, rank, &sh);
        if (rc)
            goto out_destroy;
        if (!sh.present)
            continue;
        struct ventry *e = &f->e[f->n];
        rc = entry_init(e, r, t, dtype);
        if (rc)
            goto out_destroy;
        e->ndim = sh.ndim;
        memcpy(e->shape, sh.shape, sizeof e->shape);
        e->nel = 1;
        for (int d = 0; d < sh.ndim; d++)
            e->nel *= sh.shape[d];
        e->pieces = ptc_calloc(sh.npieces ? sh.npieces : 1, sizeof *e->pieces);
        if (!e->pieces) {
            rc = PTC_E_NOMEM;
            goto out_destroy;
        }
        f->n++;
        rc = ptc_layout_pieces(l, t, rank, e->pieces, sh.npieces, &e->npieces);
        if (rc)
            goto out_destroy;
    }
    rc = add_version_meta(f, r);
    if (rc == PTC_OK)
        rc = add_rank_meta(f, l, rank);
    if (rc == PTC_OK)
        rc = finish(f);
    if (rc == PTC_OK) {
        *out = f;
        return PTC_OK;
    }
out_destroy:
    ptc_vfile_destroy(f);
    return rc;
}

struct read_ctx {
    const ptc_store_reader *r;
    size_t tensor;
    uint8_t *dst;
    int64_t a;
    size_t esize;
};

static int read_sub(const ptc_piece *sub, void *user)
{
    struct read_ctx *c = user;
    return ptc_store_reader_read_box(c->r, c->tensor, &sub->box,
                                     c->dst + (size_t)(sub->local_offset - c->a) * c->esize,
                                     sub->local_stride);
}

/* Local elements [a, b) of entry e, in the stored dtype, into dst. */
static int read_elements(const ptc_vfile *f, const struct ventry *e, int64_t a, int64_t b,
                         uint8_t *dst)
{
    struct read_ctx c = {.r = f->r, .tensor = e->tensor, .dst = dst, .a = a,
                         .esize = ptc_dtype_size(e->src_dtype)};
    for (size_t i = 0; i < e->npieces; i++)
        PTC_TRY(ptc_piece_walk_range(&e->pieces[i], a, b, read_sub, &c));
    return PTC_OK;
}

/* Bytes [lo, hi) of entry e's served data into out. */
static int read_entry(const ptc_vfile *f, const struct ventry *e, uint64_t lo, uint64_t hi,
                      uint8_t *out)
{
    size_t oes = ptc_dtype_size(e->dtype), ses = ptc_dtype_size(e->src_dtype);
    bool convert = e->dtype != e->src_dtype;
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    int rc = PTC_OK;
    while (lo < hi) {
        int64_t a = (int64_t)(lo / oes);
        int64_t b = (int64_t)((hi + oes - 1) / oes);
        int64_t per = (int64_t)(VFILE_CHUNK / (ses > oes ? ses : oes));
        if (b - a > per)
            b = a + per;
        uint64_t take_hi = PTC_MIN(hi, (uint64_t)b * oes);
        bool aligned = !convert && lo == (uint64_t)a * oes && take_hi == (uint64_t)b * oes;
        if (aligned) {
            rc = read_elements(f, e, a, b, out);
        } else {
            size_t need = (size_t)(b - a) * (ses + oes);
            if (need > tmp_cap) {
                ptc_free(tmp);
                tmp = ptc_malloc(need);
                tmp_cap = tmp ? need : 0;
                if (!tmp)
                    return PTC_E_NOMEM;
            }
            uint8_t *conv = tmp + (size_t)(b - a) * ses;
            rc = read_elements(f, e, a, b, tmp);
            if (rc == PTC_OK && convert)
                rc = ptc_dtype_convert(conv, e->dtype, tmp, e->src_dtype, (size_t)(b - a));
            if (rc == PTC_OK)
                memcpy(out, (convert ? conv : tmp) + (lo - (uint64_t)a * oes), take_hi - lo);
        }
        if (rc)
            break;
        out += take_hi - lo;
        lo = take_hi;
    }
    ptc_free(tmp);
    return rc;
}

int ptc_vfile_read(const ptc_vfile *f, void *buf, uint64_t off, size_t len, size_t *got)
{
    uint64_t size = ptc_vfile_size(f);
    uint64_t end = off >= size ? off : PTC_MIN(size, off + len);
    uint8_t *out = buf;
    uint64_t pos = off;
    *got = 0;
    if (pos < end && pos < f->header_len) {
        uint64_t take = PTC_MIN(end, f->header_len) - pos;
        memcpy(out, f->header + pos, take);
        out += take;
        pos += take;
    }
    /* first entry whose data ends after pos */
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (f->offsets[mid + 1] <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < f->n && pos < end; i++) {
        uint64_t s = f->offsets[i], e = f->offsets[i + 1];
        if (e <= pos)
            continue;
        uint64_t take_end = PTC_MIN(end, e);
        PTC_TRY(read_entry(f, &f->e[i], pos - s, take_end - s, out));
        out += take_end - pos;
        pos = take_end;
    }
    *got = (size_t)(pos - off);
    return PTC_OK;
}

int ptc_vfile_write(const ptc_vfile *f, const char *path, ptc_progress_fn progress, void *user)
{
    ptc_st_writer *w = NULL;
    int rc = ptc_st_writer_create(&w, path, f->st, f->n, f->meta, f->nmeta);
    if (rc)
        return rc;
    uint8_t *chunk = ptc_malloc(VFILE_CHUNK);
    if (!chunk) {
        ptc_st_writer_abort(w);
        return PTC_E_NOMEM;
    }
    uint64_t size = ptc_vfile_size(f);
    for (uint64_t pos = f->header_len; pos < size && rc == PTC_OK;) {
        size_t got;
        rc = ptc_vfile_read(f, chunk, pos, VFILE_CHUNK, &got);
        if (rc == PTC_OK)
            rc = ptc_st_writer_write(w, chunk, got);
        pos += got;
        if (progress)
            progress("export", pos, size, user);
    }
    ptc_free(chunk);
    if (rc) {
        ptc_st_writer_abort(w);
        return rc;
    }
    return ptc_st_writer_finish(w);
}
