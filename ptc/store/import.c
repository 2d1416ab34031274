/* Import of safetensors checkpoints into a new store version.
 *
 * Every distinct shard of the target layout is written once, by its owner
 * rank; replicas become aliases. A shard is streamed in bounded chunks: for
 * each chunk of its local tensor the pieces' sub-boxes that land in it are
 * copied from the mapped checkpoint (base/piecewalk.c), so memory stays at a
 * chunk whatever the model size. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kernels/pack.h"
#include "ptc/import.h"
#include "ptc/layout.h"
#include "ptc/safetensors.h"
#include "base/buf_internal.h"
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

/* ---- the one writer ---------------------------------------------------------
 *
 * Both imports end the same way: a version holding the layout's tensors,
 * every distinct shard written once by its owner rank (from wherever the
 * source keeps it), its replicas stored as aliases. */

struct source {
    /* the checkpoint's own metadata */
    int (*metadata)(ptc_store_writer *w, void *user);
    /* tensor t's shard of group g's owner: begin, data, end */
    int (*shard)(ptc_store_writer *w, size_t t, const ptc_shard_group *g, const ptc_shard *sh,
                 const ptc_piece *pieces, void *user, uint64_t *done, uint64_t total);
    void *user;
};

static int shard_total(const ptc_layout *l, const ptc_tensor_info *infos, size_t n,
                       uint64_t *total)
{
    *total = 0;
    for (size_t t = 0; t < n; t++) {
        ptc_shard_group *groups = NULL;
        size_t ng = 0;
        int rc = ptc_layout_groups(l, t, &groups, &ng);
        for (size_t g = 0; g < ng && rc == PTC_OK; g++) {
            ptc_shard sh;
            rc = ptc_layout_shard(l, t, groups[g].owner, &sh);
            int64_t nel = 1;
            for (int d = 0; d < sh.ndim; d++)
                nel *= sh.shape[d];
            *total += (uint64_t)nel * ptc_dtype_size(infos[t].dtype);
        }
        ptc_layout_groups_free(groups);
        PTC_TRY(rc);
    }
    return PTC_OK;
}

static int write_version(ptc_store *s, const ptc_store_write_options *wo, const ptc_layout *l,
                         const ptc_tensor_info *infos, size_t n, const struct source *src,
                         uint64_t *version)
{
    ptc_store_writer *w = NULL;
    ptc_piece *pieces = NULL;
    size_t pcap = 0;
    uint64_t total = 0, done = 0;
    int rc = ptc_store_writer_begin(&w, s, wo);
    if (rc)
        return rc;
    rc = src->metadata(w, src->user);
    for (size_t t = 0; t < n && rc == PTC_OK; t++) {
        char place[256];
        rc = ptc_placement_format(ptc_layout_placement(l, t), place, sizeof place);
        if (rc == PTC_OK)
            rc = ptc_store_writer_add_tensor(w, infos[t].name, strlen(infos[t].name),
                                             infos[t].dtype, infos[t].ndim, infos[t].shape,
                                             place, NULL);
    }
    if (rc == PTC_OK)
        rc = shard_total(l, infos, n, &total);
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
                rc = src->shard(w, t, &groups[g], &sh, pieces, src->user, &done, total);
            for (size_t k = 1; k < groups[g].nranks && rc == PTC_OK; k++)
                rc = ptc_store_shard_alias(w, (uint32_t)t, (uint32_t)groups[g].ranks[k],
                                           (uint32_t)owner);
        }
        ptc_layout_groups_free(groups);
    }
    if (rc == PTC_OK)
        rc = ptc_store_writer_commit(w, version);
    ptc_store_writer_destroy(w);
    ptc_free(pieces);
    return rc;
}

/* ---- per-rank imports ------------------------------------------------------
 *
 * Files a job wrote per rank (local shapes, global names). A rank is named by
 * the file's `ptc.rank` metadata, else by a `rank-<R>.safetensors` file name
 * (when every input has one), else by its position among the inputs. Global
 * shapes come from `ptc.layout` when present, else from the rules: a split
 * dimension's global extent is the sum of the tp ranks' extents. Every
 * rank's local shapes are then checked against the layout of the
 * configuration, and each distinct shard is stored once from its owner's
 * file (its replicas must hold the same bytes). */

struct rank_in {
    const ptc_st_file *f;
    const char *path;
    json_t *layout; /* ptc.layout, parsed, or NULL */
};

struct has_ctx {
    struct rank_in *ri;
    int world;
};

static bool in_any_file(const char *name, void *user)
{
    struct has_ctx *h = user;
    size_t k;
    for (int r = 0; r < h->world; r++)
        if (ptc_st_find(h->ri[r].f, name, &k) == PTC_OK)
            return true;
    return false;
}

static bool rank_from_name(const char *path, int *rank)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    if (strncmp(b, "rank-", 5) != 0 || b[5] < '0' || b[5] > '9')
        return false;
    char *end;
    long v = strtol(b + 5, &end, 10);
    if (strcmp(end, ".safetensors") != 0 || v < 0 || v >= PTC_CONFIG_MAX_WORLD)
        return false;
    *rank = (int)v;
    return true;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

/* Whether the inputs are per-rank files: only single files, and either every
 * one carries ptc.rank or some tensor name appears in two of them. */
static bool is_rank_set(const struct input *in, size_t n)
{
    bool all_meta = true;
    for (size_t i = 0; i < n; i++) {
        if (!in[i].file)
            return false;
        if (!ptc_st_header_metadata_get(ptc_st_file_header(in[i].file), "ptc.rank"))
            all_meta = false;
    }
    if (all_meta)
        return true;
    for (size_t i = 1; i < n; i++)
        for (size_t t = 0; t < ptc_st_count(in[i].file); t++)
            for (size_t j = 0; j < i; j++) {
                size_t k;
                if (ptc_st_find(in[j].file, ptc_st_tensor_at(in[i].file, t)->name, &k) ==
                    PTC_OK)
                    return true;
            }
    return false;
}

static int assign_ranks(struct rank_in *ri, const struct input *in, const char *const *paths,
                        size_t n, const ptc_config *cfg)
{
    int world = ptc_config_world(cfg);
    char want[PTC_CONFIG_MAX_STAGES * 11 + 64];
    PTC_TRY(ptc_config_format(cfg, PTC_CONFIG_STYLE_KEYS, want, sizeof want));
    if ((int64_t)n != world)
        return ptc_error_set(PTC_E_CONFIG,
                             "per-rank import needs one file per rank: %zu files for the %d "
                             "ranks of %s", n, world, want);
    bool names = true;
    for (size_t i = 0; i < n; i++) {
        int r;
        if (!rank_from_name(paths[i], &r))
            names = false;
    }
    for (size_t i = 0; i < n; i++) {
        const ptc_st_header *h = ptc_st_file_header(in[i].file);
        const char *mr = ptc_st_header_metadata_get(h, "ptc.rank");
        const char *mc = ptc_st_header_metadata_get(h, "ptc.config");
        int r = (int)i;
        if (mc) {
            ptc_config fc;
            if (ptc_config_parse(&fc, mc) != PTC_OK || !ptc_config_equal(&fc, cfg))
                return ptc_error_set(PTC_E_CONFIG, "%s: written for ptc.config %s, not %s",
                                     paths[i], mc, want);
        }
        if (mr) {
            char *end;
            long v = strtol(mr, &end, 10);
            if (*mr < '0' || *mr > '9' || *end || v >= world)
                return ptc_error_set(PTC_E_FORMAT, "%s: ptc.rank '%s' is not a rank of %s",
                                     paths[i], mr, want);
            r = (int)v;
        } else if (names) {
            rank_from_name(paths[i], &r);
            if (r >= world)
                return ptc_error_set(PTC_E_CONFIG, "%s: rank %d outside the %d ranks of %s",
                                     paths[i], r, world, want);
        }
        if (ri[r].f)
            return ptc_error_set(PTC_E_INVAL, "%s and %s are both rank %d", ri[r].path,
                                 paths[i], r);
        ri[r].f = in[i].file;
        ri[r].path = paths[i];
        const char *ml = ptc_st_header_metadata_get(h, "ptc.layout");
        if (ml) {
            ri[r].layout = json_loads(ml, 0, NULL);
            if (!json_is_object(ri[r].layout))
                return ptc_error_set(PTC_E_FORMAT, "%s: ptc.layout is not a JSON object",
                                     paths[i]);
        }
    }
    return PTC_OK;
}

/* The global shape of tensor @p t (first seen in rank @p r's file). */
static int global_shape(ptc_tensor_info *info, const ptc_st_tensor *t, int r,
                        struct rank_in *ri, const ptc_config *cfg, const ptc_rules *rules,
                        struct has_ctx *has, const ptc_st_tensor *const *list,
                        const int *first, size_t n)
{
    info->name = t->name;
    info->dtype = t->dtype;
    info->ndim = t->ndim;
    memcpy(info->shape, t->shape, sizeof info->shape);
    json_t *e = ri[r].layout ? json_object_get(ri[r].layout, t->name) : NULL;
    if (e) {
        json_t *gs = json_object_get(e, "global_shape");
        size_t nd = json_array_size(gs);
        if (!json_is_array(gs) || nd > PTC_MAX_DIMS)
            return ptc_error_set(PTC_E_FORMAT, "%s: ptc.layout of tensor '%s' has no global_shape",
                                 ri[r].path, t->name);
        info->ndim = (int)nd;
        memset(info->shape, 0, sizeof info->shape);
        for (size_t d = 0; d < nd; d++) {
            json_t *v = json_array_get(gs, d);
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return ptc_error_set(PTC_E_FORMAT, "%s: ptc.layout of tensor '%s': bad global_shape",
                                     ri[r].path, t->name);
            info->shape[d] = json_integer_value(v);
        }
        return PTC_OK;
    }
    ptc_placement p;
    PTC_TRY(ptc_rules_resolve_in(rules, t->name, in_any_file, has, &p));
    if (p.kind == PTC_KIND_OPTIM && cfg->zero) {
        /* a flat range: the shape is its parameter's (the longest name that
         * prefixes it and is a parameter: `<param><suffix>` of an optim line) */
        size_t best = n, blen = 0, tlen = strlen(t->name);
        for (size_t k = 0; k < n; k++) {
            size_t len = strlen(list[k]->name);
            ptc_placement q;
            if (len < tlen && len > blen && strncmp(t->name, list[k]->name, len) == 0 &&
                ptc_rules_resolve_in(rules, list[k]->name, in_any_file, has, &q) == PTC_OK &&
                q.kind == PTC_KIND_PARAM) {
                best = k;
                blen = len;
            }
        }
        if (best == n)
            return ptc_error_set(PTC_E_UNSUPPORTED,
                                 "%s: tensor '%s' is zero-sharded optimizer state without its "
                                 "parameter; its global shape needs the ptc.layout metadata of a "
                                 "ptc export", ri[r].path, t->name);
        ptc_tensor_info pi;
        PTC_TRY(global_shape(&pi, list[best], first[best], ri, cfg, rules, has, list, first, n));
        info->ndim = pi.ndim;
        memcpy(info->shape, pi.shape, sizeof info->shape);
        return PTC_OK;
    }
    if (p.tp != PTC_TP_SPLIT || p.dim >= t->ndim)
        return PTC_OK;
    int pp_i, dp_i, tp_i;
    ptc_config_coords(cfg, r, &pp_i, &dp_i, &tp_i);
    int64_t sum = 0;
    for (int k = 0; k < cfg->tp; k++) {
        int q = ptc_config_rank(cfg, pp_i, dp_i, k);
        size_t i;
        if (ptc_st_find(ri[q].f, t->name, &i) != PTC_OK)
            return ptc_error_set(PTC_E_FORMAT, "%s lacks tensor '%s' that tensor-parallel peer %s holds",
                                 ri[q].path, t->name, ri[r].path);
        sum += ptc_st_tensor_at(ri[q].f, i)->shape[p.dim];
    }
    info->shape[p.dim] = sum;
    return PTC_OK;
}

/* Append @p name to @p b as a glob that matches exactly it (rules' `\x`);
 * false for a name a glob cannot spell (whitespace, control bytes). */
static bool glob_literal(ptc_buf *b, const char *name)
{
    for (const char *c = name; *c; c++) {
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return false;
        if ((*c == '*' || *c == '?' || *c == '\\') && ptc_buf_put(b, "\\", 1) < 0)
            return false;
        if (ptc_buf_put(b, c, 1) < 0)
            return false;
    }
    return true;
}

/* The rules to import rank files by: every tensor whose file records its
 * placement (ptc.layout of a ptc export) is placed as recorded — the files
 * say how they were split, e.g. the kv_heads of a grouped-query split that
 * @p rules alone know only from config.json — ahead of @p rules, which
 * place the rest. *out is NULL when no file records a placement. */
static int recorded_rules(const ptc_rules *rules, const struct rank_in *ri,
                          const ptc_st_tensor *const *list, const int *first, size_t n,
                          ptc_rules **out)
{
    *out = NULL;
    const char *text = ptc_rules_text(rules);
    ptc_buf b = {0}, lines = {0};
    size_t nrec = 0;
    for (size_t t = 0; t < n; t++) {
        json_t *e = ri[first[t]].layout ? json_object_get(ri[first[t]].layout, list[t]->name)
                                        : NULL;
        const char *pl = json_string_value(json_object_get(e, "placement"));
        ptc_placement p;
        if (!pl || ptc_placement_parse(&p, pl) != PTC_OK)
            continue;
        size_t mark = lines.len;
        if (ptc_buf_puts(&lines, "match ") < 0 || !glob_literal(&lines, list[t]->name)) {
            lines.len = mark;
            continue;
        }
        /* the placement text without layer= (the layer line gives it) and
         * kind=param (the default) */
        char item[256];
        snprintf(item, sizeof item, "%s", pl);
        for (char *tok = strtok(item, " "); tok; tok = strtok(NULL, " "))
            if (strncmp(tok, "layer=", 6) != 0 && strcmp(tok, "kind=param") != 0)
                ptc_buf_printf(&lines, " %s", tok);
        ptc_buf_puts(&lines, "\n");
        nrec++;
    }
    /* @p rules' layer and optim lines, ours, then its match lines */
    const char *m = strstr(text, "match ");
    while (m && m != text && m[-1] != '\n')
        m = strstr(m + 1, "match ");
    size_t head = m ? (size_t)(m - text) : strlen(text);
    ptc_buf_put(&b, text, head);
    if (head && text[head - 1] != '\n')
        ptc_buf_puts(&b, "\n");
    ptc_buf_put(&b, lines.p, lines.len);
    ptc_buf_puts(&b, text + head);
    int rc = b.err ? b.err : lines.err;
    if (rc == PTC_OK && nrec)
        rc = ptc_rules_parse(out, b.s, b.len, "recorded placements");
    ptc_buf_free(&b);
    ptc_buf_free(&lines);
    return rc;
}

/* Every rank's file holds exactly its stage's tensors, with the layout's
 * local shapes and the dtype of the first holder. */
static int check_ranks(const ptc_layout *l, struct rank_in *ri, int world, const char *cfg_text)
{
    size_t nt = ptc_layout_count(l);
    for (int r = 0; r < world; r++) {
        for (size_t i = 0; i < ptc_st_count(ri[r].f); i++) {
            const ptc_st_tensor *ft = ptc_st_tensor_at(ri[r].f, i);
            size_t t;
            ptc_shard sh;
            PTC_TRY(ptc_layout_find(l, ft->name, &t));
            PTC_TRY(ptc_layout_shard(l, t, r, &sh));
            if (!sh.present)
                return ptc_error_set(PTC_E_CONFIG,
                                     "%s: tensor '%s' is not on rank %d's pipeline stage under %s",
                                     ri[r].path, ft->name, r, cfg_text);
        }
        for (size_t t = 0; t < nt; t++) {
            const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
            ptc_shard sh;
            size_t i;
            PTC_TRY(ptc_layout_shard(l, t, r, &sh));
            if (!sh.present)
                continue;
            if (ptc_st_find(ri[r].f, ti->name, &i) != PTC_OK)
                return ptc_error_set(PTC_E_CONFIG, "%s: tensor '%s' missing: rank %d holds it under %s",
                                     ri[r].path, ti->name, r, cfg_text);
            const ptc_st_tensor *ft = ptc_st_tensor_at(ri[r].f, i);
            if (ft->dtype != ti->dtype)
                return ptc_error_set(PTC_E_FORMAT, "%s: tensor '%s' is %s, another rank's is %s",
                                     ri[r].path, ti->name, ptc_dtype_name(ft->dtype),
                                     ptc_dtype_name(ti->dtype));
            bool same = ft->ndim == sh.ndim;
            for (int d = 0; same && d < sh.ndim; d++)
                same = ft->shape[d] == sh.shape[d];
            if (!same) {
                char got[160], want[160];
                shape_text(got, sizeof got, ft->ndim, ft->shape);
                shape_text(want, sizeof want, sh.ndim, sh.shape);
                return ptc_error_set(PTC_E_CONFIG,
                                     "%s: tensor '%s' has local shape %s; rank %d of %s under the "
                                     "rules holds %s", ri[r].path, ti->name, got, r, cfg_text, want);
            }
        }
    }
    return PTC_OK;
}

static const ptc_st_tensor *tensor_of(const struct rank_in *ri, int r, const char *name)
{
    size_t i;
    if (ptc_st_find(ri[r].f, name, &i) != PTC_OK)
        return NULL;
    return ptc_st_tensor_at(ri[r].f, i);
}

struct rank_src {
    const struct rank_in *ri;
    int world;
    const ptc_tensor_info *infos;
    const ptc_import_options *o;
};

/* every rank's metadata, ptc.* placement keys left out */
static int rank_metadata(ptc_store_writer *w, void *user)
{
    const struct rank_src *rs = user;
    for (int r = 0; r < rs->world; r++) {
        const ptc_st_header *h = ptc_st_file_header(rs->ri[r].f);
        for (size_t i = 0; i < ptc_st_header_metadata_count(h); i++) {
            ptc_st_kv kv = ptc_st_header_metadata_at(h, i);
            if (strncmp(kv.key, "ptc.", 4) != 0)
                PTC_TRY(ptc_store_writer_set_metadata(w, kv.key, kv.value));
        }
    }
    return PTC_OK;
}

/* the owner's file holds the shard as stored (check_ranks checked its
 * shape); the files of its replicas must hold the same bytes */
static int rank_shard(ptc_store_writer *w, size_t t, const ptc_shard_group *g,
                      const ptc_shard *sh, const ptc_piece *pieces, void *user, uint64_t *done,
                      uint64_t total)
{
    const struct rank_src *rs = user;
    const char *name = rs->infos[t].name;
    const ptc_st_tensor *src = tensor_of(rs->ri, g->owner, name);
    for (size_t k = 1; k < g->nranks; k++) {
        const ptc_st_tensor *rep = tensor_of(rs->ri, g->ranks[k], name);
        if (memcmp(rep->data, src->data, (size_t)src->nbytes) != 0)
            return ptc_error_set(PTC_E_FORMAT,
                                 "tensor '%s': %s and %s hold different bytes for the same "
                                 "shard (replicas must be equal)", name, rs->ri[g->owner].path,
                                 rs->ri[g->ranks[k]].path);
    }
    PTC_TRY(ptc_store_shard_begin(w, (uint32_t)t, (uint32_t)g->owner, sh->ndim, sh->shape,
                                  pieces, sh->npieces));
    for (uint64_t a = 0; a < src->nbytes; a += IMPORT_CHUNK) {
        size_t nb = (size_t)PTC_MIN((uint64_t)IMPORT_CHUNK, src->nbytes - a);
        PTC_TRY(ptc_store_shard_write(w, (uint32_t)g->owner, (const uint8_t *)src->data + a,
                                      nb));
        *done += nb;
        if (rs->o->progress)
            rs->o->progress("import", *done, total, rs->o->progress_user);
    }
    return ptc_store_shard_end(w, (uint32_t)g->owner);
}

static int import_ranks(ptc_store *s, const struct input *in, const char *const *paths,
                        size_t npaths, const ptc_config *cfg, const ptc_rules *rules,
                        const ptc_import_options *o, uint64_t *version)
{
    int world = ptc_config_world(cfg);
    int rc;
    const ptc_st_tensor **list = NULL;
    int *first = NULL;
    size_t n = 0, cap = 0, fcap = 0;
    ptc_tensor_info *infos = NULL;
    ptc_layout *l = NULL;
    ptc_rules *own_rules = NULL; /* the placements the files record */
    char cfg_text[PTC_CONFIG_MAX_STAGES * 11 + 64];
    struct has_ctx has;
    struct rank_in *ri = ptc_calloc((size_t)world, sizeof *ri);
    if (!ri)
        return PTC_E_NOMEM;
    has.ri = ri;
    has.world = world;
    rc = ptc_config_format(cfg, PTC_CONFIG_STYLE_KEYS, cfg_text, sizeof cfg_text);
    if (rc == PTC_OK)
        rc = assign_ranks(ri, in, paths, npaths, cfg);
    if (rc)
        goto out_free_ranks;
    /* The global order: a merge of the files' orders (each file lists its
     * tensors in the checkpoint's order), the smallest name first where the
     * files do not decide; so a checkpoint in name order (safetensors' own
     * writer, ptc synth) comes back in its order. */
    size_t *head = ptc_calloc((size_t)world, sizeof *head);
    if (!head) {
        rc = PTC_E_NOMEM;
        goto out_free_list;
    }
    for (;;) {
        const ptc_st_tensor *best = NULL;
        int br = -1;
        for (int r = 0; r < world; r++) {
            while (head[r] < ptc_st_count(ri[r].f)) {
                const ptc_st_tensor *t = ptc_st_tensor_at(ri[r].f, head[r]);
                bool seen = false;
                for (size_t k = 0; k < n && !seen; k++)
                    seen = strcmp(list[k]->name, t->name) == 0;
                if (!seen)
                    break;
                head[r]++;
            }
            if (head[r] >= ptc_st_count(ri[r].f))
                continue;
            const ptc_st_tensor *t = ptc_st_tensor_at(ri[r].f, head[r]);
            if (!best || strcmp(t->name, best->name) < 0) {
                best = t;
                br = r;
            }
        }
        if (!best)
            break;
        rc = ptc_grow((void **)&list, &cap, n + 1, sizeof *list);
        if (rc == PTC_OK)
            rc = ptc_grow((void **)&first, &fcap, n + 1, sizeof *first);
        if (rc)
            break;
        first[n] = br;
        list[n++] = best;
    }
    ptc_free(head);
    if (rc)
        goto out_free_list;
    infos = ptc_calloc(n ? n : 1, sizeof *infos);
    if (!infos) {
        rc = PTC_E_NOMEM;
        goto out_free_list;
    }
    rc = recorded_rules(rules, ri, list, first, n, &own_rules);
    if (own_rules)
        rules = own_rules;
    for (size_t t = 0; t < n && rc == PTC_OK; t++)
        rc = global_shape(&infos[t], list[t], first[t], ri, cfg, rules, &has, list, first, n);
    if (rc == PTC_OK)
        rc = ptc_layout_create(&l, infos, n, rules, cfg);
    if (rc == PTC_OK)
        rc = check_ranks(l, ri, world, cfg_text);
    if (rc)
        goto out_destroy_layout;
    ptc_store_write_options wo = {
        .step = o->step,
        .config = cfg_text,
        .rules = ptc_rules_text(rules),
        .world_size = (uint32_t)world,
        .codec = o->codec,
        .level = o->level,
    };
    struct rank_src rs = {.ri = ri, .world = world, .infos = infos, .o = o};
    struct source src = {.metadata = rank_metadata, .shard = rank_shard, .user = &rs};
    rc = write_version(s, &wo, l, infos, n, &src, version);
out_destroy_layout:
    ptc_layout_destroy(l);
    ptc_free(infos);
out_free_list:
    ptc_rules_destroy(own_rules);
    ptc_free(list);
    ptc_free(first);
out_free_ranks:
    for (int r = 0; r < world; r++)
        json_decref(ri[r].layout);
    ptc_free(ri);
    return rc;
}

struct file_src {
    const struct input *in;
    size_t n;
    const ptc_st_tensor *const *list;
    uint8_t *chunk;
    const ptc_import_options *o;
};

/* the checkpoint's __metadata__ ({"format":"pt"}, ...): a single file's, or
 * every shard file's of an index, in input order (the last value of a key wins) */
static int file_metadata(ptc_store_writer *w, void *user)
{
    const struct file_src *fs = user;
    for (size_t i = 0; i < fs->n; i++) {
        if (fs->in[i].file) {
            PTC_TRY(add_metadata(w, fs->in[i].file));
            continue;
        }
        for (size_t k = 0; k < ptc_st_index_file_count(fs->in[i].index); k++)
            PTC_TRY(add_metadata(w, ptc_st_index_file(fs->in[i].index, k)));
    }
    return PTC_OK;
}

static int file_shard(ptc_store_writer *w, size_t t, const ptc_shard_group *g,
                      const ptc_shard *sh, const ptc_piece *pieces, void *user, uint64_t *done,
                      uint64_t total)
{
    const struct file_src *fs = user;
    return write_shard(w, (uint32_t)t, g->owner, sh, pieces, fs->list[t], fs->chunk, fs->o,
                       done, total);
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
    struct input *in = ptc_calloc(npaths, sizeof *in);
    if (!in)
        return PTC_E_NOMEM;
    rc = open_inputs(in, paths, npaths);
    if (rc)
        goto out_close_inputs;
    if (is_rank_set(in, npaths)) {
        rc = import_ranks(s, in, paths, npaths, cfg, rules, &o, version);
        goto out_close_inputs;
    }
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
    uint8_t *chunk = ptc_malloc(IMPORT_CHUNK);
    if (!chunk) {
        rc = PTC_E_NOMEM;
        goto out_destroy_layout;
    }
    struct file_src fs = {.in = in, .n = npaths, .list = list, .chunk = chunk, .o = &o};
    struct source src = {.metadata = file_metadata, .shard = file_shard, .user = &fs};
    rc = write_version(s, &wo, l, infos, n, &src, version);
    ptc_free(chunk);
out_destroy_layout:
    ptc_layout_destroy(l);
out_free_infos:
    ptc_free(infos);
out_free_list:
    ptc_free(list);
out_close_inputs:
    close_inputs(in, npaths);
    return rc;
}
