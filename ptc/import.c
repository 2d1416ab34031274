/* Import of safetensors checkpoints into a new store version.
 *
 * Every distinct shard of the target layout is written once, by its owner
 * rank; replicas become aliases. A shard is streamed in bounded chunks: for
 * each chunk of its local tensor the pieces' sub-boxes that land in it are
 * copied from the mapped checkpoint (base/piecewalk.c), so memory stays at a
 * chunk whatever the model size. */
#include <string.h>

#include "kernels/pack.h"
#include "ptc/import.h"
#include "ptc/layout.h"
#include "ptc/safetensors.h"
#include "base/piecewalk_internal.h"
#include "base/util_internal.h"

#define IMPORT_CHUNK (8u << 20)

struct input {
    ptc_st_file *file;   /* a single file, or */
    ptc_st_index *index; /* an index with its files */
};

struct src_tensor {
    const ptc_st_tensor *t;
};

struct fill_ctx {
    const ptc_st_tensor *src;
    int64_t src_strides[PTC_MAX_DIMS];
    size_t esize;
    uint8_t *chunk;
    int64_t a;
};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int copy_from_source(const ptc_piece *sub, void *user)
{
    struct fill_ctx *c = user;
    int64_t src_off = 0, ext[PTC_MAX_DIMS];
    for (int d = 0; d < sub->box.ndim; d++) {
        src_off += sub->box.lo[d] * c->src_strides[d];
        ext[d] = sub->box.hi[d] - sub->box.lo[d];
    }
    return ptc_pack_copy(c->chunk + (size_t)(sub->local_offset - c->a) * c->esize,
                         sub->local_stride,
                         (const uint8_t *)c->src->data + (size_t)src_off * c->esize,
                         c->src_strides, ext, sub->box.ndim, c->esize);
}

/* A piece that is the whole tensor in row-major order: the shard's bytes
 * are the source's bytes. */
static bool is_identity(const ptc_piece *p, size_t npieces, const ptc_st_tensor *t)
{
    if (npieces != 1 || p->local_offset != 0 || p->box.ndim != t->ndim)
        return false;
    int64_t st[PTC_MAX_DIMS];
    ptc_strides_row_major(t->ndim, t->shape, st);
    for (int d = 0; d < t->ndim; d++)
        if (p->box.lo[d] != 0 || p->box.hi[d] != t->shape[d] ||
            (t->shape[d] > 1 && p->local_stride[d] != st[d]))
            return false;
    return true;
}

static int write_shard(ptc_store_writer *w, uint32_t ti, int rank, const ptc_shard *sh,
                       const ptc_piece *pieces, const ptc_st_tensor *src, uint8_t *chunk,
                       const ptc_import_options *o, uint64_t *done, uint64_t total)
{
    size_t es = ptc_dtype_size(src->dtype);
    PTC_TRY(ptc_store_shard_begin(w, ti, (uint32_t)rank, sh->ndim, sh->shape, pieces,
                                  sh->npieces));
    int64_t nel = 1;
    for (int d = 0; d < sh->ndim; d++)
        nel *= sh->shape[d];
    bool direct = is_identity(pieces, sh->npieces, src);
    int64_t per = (int64_t)(IMPORT_CHUNK / es);
    struct fill_ctx c = {.src = src, .esize = es, .chunk = chunk};
    ptc_strides_row_major(src->ndim, src->shape, c.src_strides);
    for (int64_t a = 0; a < nel; a += per) {
        int64_t b = PTC_MIN(nel, a + per);
        size_t nb = (size_t)(b - a) * es;
        const void *data = chunk;
        if (direct) {
            data = (const uint8_t *)src->data + (size_t)a * es;
        } else {
            c.a = a;
            for (size_t i = 0; i < sh->npieces; i++)
                PTC_TRY(ptc_piece_walk_range(&pieces[i], a, b, copy_from_source, &c));
        }
        PTC_TRY(ptc_store_shard_write(w, (uint32_t)rank, data, nb));
        *done += nb;
        if (o->progress)
            o->progress("import", *done, total, o->progress_user);
    }
    return ptc_store_shard_end(w, (uint32_t)rank);
}

static int open_inputs(struct input *in, const char *const *paths, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ends_with(paths[i], ".json"))
            PTC_TRY(ptc_st_index_open(&in[i].index, paths[i]));
        else
            PTC_TRY(ptc_st_open(&in[i].file, paths[i]));
    }
    return PTC_OK;
}

static void close_inputs(struct input *in, size_t n)
{
    for (size_t i = 0; in && i < n; i++) {
        ptc_st_close(in[i].file);
        ptc_st_index_close(in[i].index);
    }
    ptc_free(in);
}

static int push_file(const ptc_st_file *f, const ptc_st_tensor ***list, size_t *n, size_t *cap)
{
    for (size_t i = 0; i < ptc_st_count(f); i++) {
        PTC_TRY(ptc_grow((void **)list, cap, *n + 1, sizeof **list));
        (*list)[(*n)++] = ptc_st_tensor_at(f, i);
    }
    return PTC_OK;
}

static int add_metadata(ptc_store_writer *w, const ptc_st_file *f)
{
    const ptc_st_header *h = ptc_st_file_header(f);
    for (size_t i = 0; i < ptc_st_header_metadata_count(h); i++) {
        ptc_st_kv kv = ptc_st_header_metadata_at(h, i);
        PTC_TRY(ptc_store_writer_set_metadata(w, kv.key, kv.value));
    }
    return PTC_OK;
}

int ptc_import(ptc_store *s, const char *const *paths, size_t npaths, const ptc_config *cfg,
               const ptc_rules *rules, const ptc_import_options *opts, uint64_t *version)
{
    ptc_import_options o = {0};
    if (opts)
        o = *opts;
    if (npaths == 0)
        return ptc_error_set(PTC_E_INVAL, "no input files");
    int rc;
    const ptc_st_tensor **list = NULL;
    size_t n = 0, cap = 0;
    ptc_tensor_info *infos = NULL;
    ptc_layout *l = NULL;
    ptc_store_writer *w = NULL;
    ptc_piece *pieces = NULL;
    size_t pcap = 0;
    uint8_t *chunk = NULL;
    struct input *in = ptc_calloc(npaths, sizeof *in);
    if (!in)
        return PTC_E_NOMEM;
    rc = open_inputs(in, paths, npaths);
    if (rc)
        goto out_close_inputs;
    for (size_t i = 0; i < npaths && rc == PTC_OK; i++) {
        if (in[i].file) {
            rc = push_file(in[i].file, &list, &n, &cap);
            continue;
        }
        for (size_t k = 0; k < ptc_st_index_file_count(in[i].index) && rc == PTC_OK; k++)
            rc = push_file(ptc_st_index_file(in[i].index, k), &list, &n, &cap);
    }
    if (rc)
        goto out_free_list;
    infos = ptc_calloc(n ? n : 1, sizeof *infos);
    if (!infos) {
        rc = PTC_E_NOMEM;
        goto out_free_list;
    }
    for (size_t i = 0; i < n; i++) {
        infos[i].name = list[i]->name;
        infos[i].dtype = list[i]->dtype;
        infos[i].ndim = list[i]->ndim;
        memcpy(infos[i].shape, list[i]->shape, sizeof infos[i].shape);
    }
    rc = ptc_layout_create(&l, infos, n, rules, cfg);
    if (rc)
        goto out_free_infos;

    char cfg_text[PTC_CONFIG_MAX_STAGES * 11 + 64];
    rc = ptc_config_format(cfg, PTC_CONFIG_STYLE_KEYS, cfg_text, sizeof cfg_text);
    if (rc)
        goto out_destroy_layout;
    ptc_store_write_options wo = {
        .step = o.step,
        .config = cfg_text,
        .rules = ptc_rules_text(rules),
        .world_size = (uint32_t)ptc_config_world(cfg),
        .codec = o.codec,
        .level = o.level,
    };
    rc = ptc_store_writer_begin(&w, s, &wo);
    if (rc)
        goto out_destroy_layout;
    /* the checkpoint's __metadata__ ({"format":"pt"}, ...): a single file's, or
     * every shard file's of an index, in input order (the last value of a key wins) */
    for (size_t i = 0; i < npaths && rc == PTC_OK; i++) {
        if (in[i].file) {
            rc = add_metadata(w, in[i].file);
            continue;
        }
        for (size_t k = 0; k < ptc_st_index_file_count(in[i].index) && rc == PTC_OK; k++)
            rc = add_metadata(w, ptc_st_index_file(in[i].index, k));
    }
    uint64_t total = 0, done = 0;
    for (size_t t = 0; t < n && rc == PTC_OK; t++) {
        char place[256];
        rc = ptc_placement_format(ptc_layout_placement(l, t), place, sizeof place);
        if (rc == PTC_OK)
            rc = ptc_store_writer_add_tensor(w, list[t]->name, strlen(list[t]->name),
                                             list[t]->dtype, list[t]->ndim, list[t]->shape,
                                             place, NULL);
    }
    for (size_t t = 0; t < n && rc == PTC_OK; t++) {
        ptc_shard_group *groups = NULL;
        size_t ng = 0;
        rc = ptc_layout_groups(l, t, &groups, &ng);
        for (size_t g = 0; g < ng && rc == PTC_OK; g++) {
            ptc_shard sh;
            rc = ptc_layout_shard(l, t, groups[g].owner, &sh);
            int64_t nel = 1;
            for (int d = 0; d < sh.ndim; d++)
                nel *= sh.shape[d];
            total += (uint64_t)nel * ptc_dtype_size(list[t]->dtype);
        }
        ptc_layout_groups_free(groups);
    }
    if (rc)
        goto out_destroy_writer;
    chunk = ptc_malloc(IMPORT_CHUNK);
    if (!chunk) {
        rc = PTC_E_NOMEM;
        goto out_destroy_writer;
    }
    for (size_t t = 0; t < n && rc == PTC_OK; t++) {
        ptc_shard_group *groups = NULL;
        size_t ng = 0;
        rc = ptc_layout_groups(l, t, &groups, &ng);
        for (size_t g = 0; g < ng && rc == PTC_OK; g++) {
            ptc_shard sh;
            size_t np;
            int owner = groups[g].owner;
            rc = ptc_layout_shard(l, t, owner, &sh);
            if (rc == PTC_OK)
                rc = ptc_grow((void **)&pieces, &pcap, sh.npieces + 1, sizeof *pieces);
            if (rc == PTC_OK)
                rc = ptc_layout_pieces(l, t, owner, pieces, pcap, &np);
            if (rc == PTC_OK)
                rc = write_shard(w, (uint32_t)t, owner, &sh, pieces, list[t], chunk, &o,
                                 &done, total);
            for (size_t k = 1; k < groups[g].nranks && rc == PTC_OK; k++)
                rc = ptc_store_shard_alias(w, (uint32_t)t, (uint32_t)groups[g].ranks[k],
                                           (uint32_t)owner);
        }
        ptc_layout_groups_free(groups);
    }
    if (rc == PTC_OK)
        rc = ptc_store_writer_commit(w, version);
    ptc_free(chunk);
out_destroy_writer:
    ptc_store_writer_destroy(w);
out_destroy_layout:
    ptc_free(pieces);
    ptc_layout_destroy(l);
out_free_infos:
    ptc_free(infos);
out_free_list:
    ptc_free(list);
out_close_inputs:
    close_inputs(in, npaths);
    return rc;
}
