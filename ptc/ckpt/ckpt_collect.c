/* The layout of a collection that every process describes in part, and the
 * check of a process's described local tensors against a layout: what a job
 * that knows only its own tensors (the Python package) needs before the
 * collective save and load of ckpt_collective.c.
 *
 * The exchanged descriptions are the same bytes on every process, so every
 * check of them runs alike everywhere and its failure is returned as is; only
 * a failure of one process (its own description, memory) is agreed. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

/* The global shape is unknown (on the wire: a dimension count of all ones). */
#define DESC_NO_GLOBAL UINT32_MAX
/* The description is of a configuration: no pieces (a piece count of all ones). */
#define DESC_NO_PIECES UINT32_MAX

/* ---- this process's description ------------------------------------------------------- */

static bool same_shape(int na, const int64_t *a, int nb, const int64_t *b)
{
    return na == nb && (na == 0 || !memcmp(a, b, sizeof *a * (size_t)na));
}

static int check_shape(const char *name, const char *what, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > PTC_MAX_DIMS)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s': %s has %d dimensions (0..%d)", name,
                             what, ndim, PTC_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return ptc_error_set(PTC_E_INVAL, "tensor '%s': %s has a negative extent", name,
                                 what);
    return PTC_OK;
}

static int check_local(const int *ranks, size_t nranks, const ptc_ckpt_local *locals, size_t i)
{
    const ptc_ckpt_local *x = &locals[i];
    if (!x->name || !x->name[0])
        return ptc_error_set(PTC_E_INVAL, "local tensor %zu has no name", i);
    size_t k = 0;
    while (k < nranks && ranks[k] != x->rank)
        k++;
    if (k == nranks)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' is given for rank %d, which this "
                                          "process does not run", x->name, x->rank);
    if ((unsigned)x->dtype >= PTC_DTYPE_COUNT)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s': bad dtype %d", x->name, (int)x->dtype);
    PTC_TRY(check_shape(x->name, "the local shape", x->ndim, x->shape));
    if (x->has_global)
        PTC_TRY(check_shape(x->name, "the global shape", x->global_ndim, x->global_shape));
    return PTC_OK;
}

static int cmp_local(const void *a, const void *b)
{
    const ptc_ckpt_local *x = *(const ptc_ckpt_local *const *)a;
    const ptc_ckpt_local *y = *(const ptc_ckpt_local *const *)b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

/* Every local tensor well formed and of one of @p ranks, none twice. */
static int check_locals(const int *ranks, size_t nranks, const ptc_ckpt_local *locals,
                        size_t n)
{
    if (n && !locals)
        return ptc_error_set(PTC_E_INVAL, "local tensors is NULL with %zu of them", n);
    for (size_t i = 0; i < n; i++)
        PTC_TRY(check_local(ranks, nranks, locals, i));
    const ptc_ckpt_local **by = ptc_malloc(sizeof *by * (n + 1));
    if (!by)
        return ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %zu local tensors", n);
    for (size_t i = 0; i < n; i++)
        by[i] = &locals[i];
    qsort(by, n, sizeof *by, cmp_local);
    int rc = PTC_OK;
    for (size_t i = 1; rc == PTC_OK && i < n; i++)
        if (by[i]->rank == by[i - 1]->rank && !strcmp(by[i]->name, by[i - 1]->name))
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s' is given twice for rank %d",
                               by[i]->name, by[i]->rank);
    ptc_free(by);
    return rc;
}

static int check_ranks(const int *ranks, size_t nranks)
{
    if (nranks && !ranks)
        return ptc_error_set(PTC_E_INVAL, "ranks is NULL with %zu ranks", nranks);
    for (size_t i = 0; i < nranks; i++) {
        if (ranks[i] < 0)
            return ptc_error_set(PTC_E_INVAL, "rank %d is negative", ranks[i]);
        for (size_t j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return ptc_error_set(PTC_E_INVAL, "rank %d given twice", ranks[i]);
    }
    return PTC_OK;
}

static void put_shape(ptc_buf *b, int ndim, const int64_t *shape)
{
    ptc_buf_u32(b, (uint32_t)ndim);
    for (int d = 0; d < ndim; d++)
        ptc_buf_u64(b, (uint64_t)shape[d]);
}

/* The one piece of a local tensor given by its box (the buffer row-major,
 * so the box's extents are the local shape) or, with neither box nor
 * pieces, by being the whole tensor of global shape @p gshape. */
static int one_piece(const ptc_ckpt_local *x, int gndim, const int64_t *gshape, ptc_piece *p)
{
    memset(p, 0, sizeof *p);
    if (x->has_box) {
        p->box = x->box;
        bool fits = x->box.ndim == x->ndim;
        for (int d = 0; fits && d < x->ndim; d++)
            fits = x->box.hi[d] - x->box.lo[d] == x->shape[d];
        if (!fits) {
            char a[256];
            ptc_ckpt_shape_text(a, sizeof a, x->ndim, x->shape);
            return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: its box does not have "
                                              "its local shape %s", x->name, x->rank, a);
        }
    } else {
        if (!same_shape(x->ndim, x->shape, gndim, gshape)) {
            char a[256], g[256];
            ptc_ckpt_shape_text(a, sizeof a, x->ndim, x->shape);
            ptc_ckpt_shape_text(g, sizeof g, gndim, gshape);
            return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: local shape %s of a "
                                              "global %s, but neither its box nor its pieces "
                                              "are given (a plain tensor is the whole tensor "
                                              "unless a configuration places it)", x->name,
                                 x->rank, a, g);
        }
        ptc_box_full(&p->box, x->ndim, x->shape);
    }
    ptc_strides_row_major(x->ndim, x->shape, p->local_stride);
    return PTC_OK;
}

/* The local tensor's global shape and pieces on the wire (an explicit
 * description): a plain tensor is the whole tensor. */
static int put_explicit(ptc_buf *b, const ptc_ckpt_local *x)
{
    int gndim = x->has_global ? x->global_ndim : x->ndim;
    const int64_t *gshape = x->has_global ? x->global_shape : x->shape;
    put_shape(b, gndim, gshape);
    if (x->npieces) {
        if (!x->pieces)
            return ptc_error_set(PTC_E_INVAL, "tensor '%s': pieces is NULL with %zu of them",
                                 x->name, x->npieces);
        if (x->npieces >= UINT32_MAX)
            return ptc_error_set(PTC_E_RANGE, "tensor '%s': %zu pieces", x->name, x->npieces);
        ptc_buf_u32(b, (uint32_t)x->npieces);
        for (size_t i = 0; i < x->npieces; i++) {
            if (x->pieces[i].box.ndim != gndim)
                return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: piece %zu has %d "
                                                  "dimensions, the tensor %d", x->name,
                                     x->rank, i, x->pieces[i].box.ndim, gndim);
            ptc_buf_piece(b, &x->pieces[i]);
        }
        return PTC_OK;
    }
    ptc_piece p;
    PTC_TRY(one_piece(x, gndim, gshape, &p));
    ptc_buf_u32(b, 1);
    ptc_buf_piece(b, &p);
    return PTC_OK;
}

int ptc_ckpt_desc_encode(ptc_buf *b, const int *ranks, size_t nranks,
                         const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                         const ptc_rules *rules)
{
    if (cfg && !rules)
        return ptc_error_set(PTC_E_INVAL, "checkpoint: a configuration needs rules");
    if (nranks > UINT32_MAX || n > UINT32_MAX)
        return ptc_error_set(PTC_E_RANGE, "checkpoint: %zu ranks, %zu local tensors", nranks, n);
    PTC_TRY(check_ranks(ranks, nranks));
    PTC_TRY(check_locals(ranks, nranks, locals, n));
    char text[PTC_CONFIG_MAX_STAGES * 11 + 64] = "";
    if (cfg)
        PTC_TRY(ptc_config_format(cfg, PTC_CONFIG_STYLE_KEYS, text, sizeof text));
    const char *rt = rules ? ptc_rules_text(rules) : "";
    ptc_buf_u32(b, PTC_CKPT_DESC_FORMAT);
    ptc_buf_str(b, text, strlen(text));
    ptc_buf_str(b, rt, strlen(rt));
    ptc_buf_u32(b, (uint32_t)nranks);
    for (size_t i = 0; i < nranks; i++)
        ptc_buf_u32(b, (uint32_t)ranks[i]);
    ptc_buf_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        const ptc_ckpt_local *x = &locals[i];
        ptc_buf_str(b, x->name, strlen(x->name));
        ptc_buf_u32(b, (uint32_t)x->rank);
        ptc_buf_u32(b, (uint32_t)x->dtype);
        put_shape(b, x->ndim, x->shape);
        if (!cfg) {
            PTC_TRY(put_explicit(b, x));
            continue;
        }
        if (x->has_global)
            put_shape(b, x->global_ndim, x->global_shape);
        else
            ptc_buf_u32(b, DESC_NO_GLOBAL);
        ptc_buf_u32(b, DESC_NO_PIECES);
    }
    return b->err;
}

/* ---- decoding (untrusted bytes) ---------------------------------------------------------- */

static int rd_count(ptc_rd *r, size_t *n, size_t min_size, const char *field)
{
    uint32_t v;
    PTC_TRY(ptc_rd_u32(r, &v, field));
    /* every element takes at least min_size bytes: no allocation beyond the input */
    if ((size_t)v > (r->len - r->pos) / min_size)
        return ptc_rd_fail(r, field);
    *n = v;
    return PTC_OK;
}

static int rd_int(ptc_rd *r, int *v, const char *field)
{
    uint32_t u;
    PTC_TRY(ptc_rd_u32(r, &u, field));
    if (u > INT_MAX)
        return ptc_rd_fail(r, field);
    *v = (int)u;
    return PTC_OK;
}

static int rd_shape(ptc_rd *r, int *ndim, int64_t *shape, bool maybe_none, const char *field)
{
    uint32_t nd;
    PTC_TRY(ptc_rd_u32(r, &nd, field));
    if (maybe_none && nd == DESC_NO_GLOBAL) {
        *ndim = -1;
        return PTC_OK;
    }
    if (nd > PTC_MAX_DIMS)
        return ptc_rd_fail(r, field);
    *ndim = (int)nd;
    for (uint32_t d = 0; d < nd; d++) {
        PTC_TRY(ptc_rd_i64(r, &shape[d], field));
        if (shape[d] < 0)
            return ptc_rd_fail(r, field);
    }
    return PTC_OK;
}

/* A local tensor; an explicit description's carry their pieces (values
 * are checked by the layout that takes them). */
static int rd_tensor(ptc_rd *r, ptc_ckpt_desc_tensor *x, bool explicit)
{
    uint32_t len, dt;
    PTC_TRY(ptc_rd_str(r, &x->name, &len, "name"));
    if (len == 0 || memchr(x->name, 0, len))
        return ptc_rd_fail(r, "name");
    PTC_TRY(rd_int(r, &x->rank, "rank"));
    PTC_TRY(ptc_rd_u32(r, &dt, "dtype"));
    if (dt >= PTC_DTYPE_COUNT)
        return ptc_rd_fail(r, "dtype");
    x->dtype = (ptc_dtype)dt;
    PTC_TRY(rd_shape(r, &x->ndim, x->shape, false, "local shape"));
    PTC_TRY(rd_shape(r, &x->global_ndim, x->global_shape, !explicit, "global shape"));
    if (!explicit) {
        uint32_t none;
        PTC_TRY(ptc_rd_u32(r, &none, "pieces"));
        return none == DESC_NO_PIECES ? PTC_OK : ptc_rd_fail(r, "pieces");
    }
    PTC_TRY(rd_count(r, &x->npieces, 16, "pieces")); /* a piece takes 16 bytes or more */
    if (!(x->pieces = ptc_calloc(x->npieces + 1, sizeof *x->pieces)))
        return PTC_E_NOMEM;
    for (size_t i = 0; i < x->npieces; i++)
        PTC_TRY(ptc_rd_piece(r, &x->pieces[i], "piece"));
    return PTC_OK;
}

int ptc_ckpt_desc_decode(ptc_ckpt_desc *d, const void *data, size_t len)
{
    memset(d, 0, sizeof *d);
    ptc_rd r = {data, len, 0, "checkpoint description"};
    uint32_t format;
    int rc = ptc_rd_u32(&r, &format, "format");
    if (rc == PTC_OK && format != PTC_CKPT_DESC_FORMAT)
        rc = ptc_error_set(PTC_E_FORMAT, "checkpoint description: format %u (this library "
                                         "reads %u)", format, PTC_CKPT_DESC_FORMAT);
    if (rc == PTC_OK)
        rc = ptc_rd_str(&r, &d->config, NULL, "config");
    if (rc == PTC_OK)
        rc = ptc_rd_str(&r, &d->rules, NULL, "rules");
    if (rc == PTC_OK)
        rc = rd_count(&r, &d->nranks, 4, "ranks");
    if (rc == PTC_OK && !(d->ranks = ptc_calloc(d->nranks + 1, sizeof *d->ranks)))
        rc = PTC_E_NOMEM;
    for (size_t i = 0; rc == PTC_OK && i < d->nranks; i++)
        rc = rd_int(&r, &d->ranks[i], "ranks");
    size_t nt = 0;
    if (rc == PTC_OK) /* name 4+1, rank, dtype, two ndims, a piece count */
        rc = rd_count(&r, &nt, 25, "tensors");
    if (rc == PTC_OK && !(d->tensors = ptc_calloc(nt + 1, sizeof *d->tensors)))
        rc = PTC_E_NOMEM;
    for (size_t i = 0; rc == PTC_OK && i < nt; i++) {
        d->ntensors = i + 1;
        rc = rd_tensor(&r, &d->tensors[i], d->config[0] == '\0');
    }
    if (rc == PTC_OK)
        rc = ptc_rd_end(&r);
    if (rc == PTC_E_NOMEM)
        rc = ptc_error_set(PTC_E_NOMEM, "checkpoint description: out of memory");
    if (rc != PTC_OK)
        ptc_ckpt_desc_free(d);
    return rc;
}

void ptc_ckpt_desc_free(ptc_ckpt_desc *d)
{
    if (!d)
        return;
    ptc_free(d->config);
    ptc_free(d->rules);
    ptc_free(d->ranks);
    for (size_t i = 0; d->tensors && i < d->ntensors; i++) {
        ptc_free(d->tensors[i].name);
        ptc_free(d->tensors[i].pieces);
    }
    ptc_free(d->tensors);
    memset(d, 0, sizeof *d);
}

/* ---- the collection ------------------------------------------------------------------------ */

/* Every process runs a distinct rank of the world, and every rank is run. */
static int check_world(const ptc_ckpt_desc *d, size_t n, int world, const char *cfg)
{
    int *owner = ptc_malloc(sizeof *owner * (size_t)(world > 0 ? world : 1));
    if (!owner)
        return ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %d ranks", world);
    for (int r = 0; r < world; r++)
        owner[r] = -1;
    int rc = PTC_OK, run = 0;
    for (size_t p = 0; rc == PTC_OK && p < n; p++)
        for (size_t i = 0; rc == PTC_OK && i < d[p].nranks; i++) {
            int r = d[p].ranks[i];
            if (r >= world)
                rc = ptc_error_set(PTC_E_INVAL, "process %zu runs rank %d, outside the world "
                                                "of %d ranks of %s", p, r, world, cfg);
            else if (owner[r] >= 0)
                rc = ptc_error_set(PTC_E_INVAL, "rank %d is run by processes %d and %zu", r,
                                   owner[r], p);
            else
                owner[r] = (int)p, run++;
        }
    for (int r = 0; rc == PTC_OK && r < world; r++)
        if (owner[r] < 0)
            rc = ptc_error_set(PTC_E_INVAL, "no process runs rank %d of %s (%zu processes run "
                                            "%d of %d ranks)", r, cfg, n, run, world);
    ptc_free(owner);
    return rc;
}

/* A tensor entry of the collection in exchange order. */
typedef struct entry {
    const ptc_ckpt_desc_tensor *x;
    size_t k; /* position in exchange order */
} entry;

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = strcmp(x->x->name, y->x->name);
    return c ? c : (x->k > y->k) - (x->k < y->k);
}

/* Compare each entry with the earlier ones of its name (sorted by name,
 * then by exchange order): the error of the first entry, in exchange order,
 * that disagrees. *first of each entry: the group's first entry. */
static int check_entries(const entry *e, size_t m, size_t *first, const int64_t **gshape,
                         int *gndim)
{
    size_t bad = SIZE_MAX;
    char msg[1024] = "";
    for (size_t i = 0; i < m;) {
        size_t j = i;
        const ptc_ckpt_desc_tensor *f = e[i].x;
        int nd = f->global_ndim;
        const int64_t *g = f->global_shape;
        for (; j < m && !strcmp(e[j].x->name, f->name); j++) {
            const ptc_ckpt_desc_tensor *x = e[j].x;
            first[e[j].k] = e[i].k;
            if (j == i)
                continue;
            if (x->dtype != f->dtype) {
                if (e[j].k < bad) {
                    bad = e[j].k;
                    snprintf(msg, sizeof msg, "tensor '%s' is %s on rank %d and %s on rank %d",
                             f->name, ptc_dtype_name(f->dtype), f->rank, ptc_dtype_name(x->dtype),
                             x->rank);
                }
                continue;
            }
            if (x->global_ndim < 0)
                continue;
            if (nd >= 0 && !same_shape(nd, g, x->global_ndim, x->global_shape) && e[j].k < bad) {
                char a[256], b[256];
                ptc_ckpt_shape_text(a, sizeof a, nd, g);
                ptc_ckpt_shape_text(b, sizeof b, x->global_ndim, x->global_shape);
                bad = e[j].k;
                snprintf(msg, sizeof msg, "tensor '%s' has global shape %s on one rank and %s "
                                          "on another", f->name, a, b);
            }
            nd = x->global_ndim;
            g = x->global_shape;
        }
        for (size_t q = i; q < j; q++) {
            gshape[e[q].k] = g;
            gndim[e[q].k] = nd;
        }
        i = j;
    }
    return bad == SIZE_MAX ? PTC_OK : ptc_error_set(PTC_E_INVAL, "%s", msg);
}

/* Whether @p rules give every rank holding @p name its whole tensor under
 * @p cfg (replicated, and not an optimizer state flattened by zero=1). */
static bool replicated(const ptc_rules *rules, const ptc_config *cfg, const char *name)
{
    ptc_placement p;
    if (ptc_rules_resolve(rules, name, &p) != PTC_OK) {
        ptc_error_clear();
        return false;
    }
    return p.tp == PTC_TP_REPLICATE && (p.kind == PTC_KIND_PARAM || !cfg->zero);
}

/* "config 'dp=2,tp=1,pp=1'" or "an explicit layout" (a description's config ""). */
static void layout_text(char *buf, size_t cap, const char *config)
{
    if (config[0])
        snprintf(buf, cap, "config '%.64s'", config);
    else
        snprintf(buf, cap, "an explicit layout (no config)");
}

/* The explicit layout of the entries: each entry (exchange order, byk) is
 * its rank's shard of tensor tix[k]. */
static int build_explicit(const ptc_ckpt_desc_tensor *const *byk, size_t m, const size_t *tix,
                          const ptc_tensor_info *ti, size_t nt, int world, ptc_layout **out)
{
    ptc_layout_explicit_shard *sh = ptc_calloc(m + 1, sizeof *sh);
    if (!sh)
        return ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %zu shards", m);
    for (size_t k = 0; k < m; k++) {
        const ptc_ckpt_desc_tensor *x = byk[k];
        sh[k].tensor = tix[k];
        sh[k].rank = x->rank;
        sh[k].ndim = x->ndim;
        memcpy(sh[k].shape, x->shape, sizeof sh[k].shape);
        sh[k].pieces = x->pieces;
        sh[k].npieces = x->npieces;
    }
    int rc = ptc_layout_create_explicit(out, ti, nt, world, sh, m);
    ptc_free(sh);
    return rc;
}

/* The layout's tensors: each name once, in exchange order of its first
 * entry; @p cfg NULL: explicit, of @p world ranks. */
static int build(const entry *e, size_t m, const size_t *first, const int64_t *const *gshape,
                 const int *gndim, const ptc_config *cfg, const ptc_rules *rules, int world,
                 ptc_layout **out)
{
    const ptc_ckpt_desc_tensor **byk = ptc_calloc(m + 1, sizeof *byk);
    ptc_tensor_info *ti = ptc_calloc(m + 1, sizeof *ti);
    size_t *tix = ptc_calloc(m + 1, sizeof *tix);
    int rc = byk && ti && tix ? PTC_OK
                              : ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %zu "
                                                           "tensors", m);
    for (size_t i = 0; rc == PTC_OK && i < m; i++)
        byk[e[i].k] = e[i].x;
    size_t nt = 0;
    for (size_t k = 0; rc == PTC_OK && k < m; k++) {
        if (first[k] != k) {
            tix[k] = tix[first[k]]; /* first[k] < k: its index is known */
            continue;
        }
        const ptc_ckpt_desc_tensor *x = byk[k];
        tix[k] = nt;
        ptc_tensor_info *t = &ti[nt++];
        t->name = x->name;
        t->dtype = x->dtype;
        if (gndim[k] >= 0) {
            t->ndim = gndim[k];
            memcpy(t->shape, gshape[k], sizeof *t->shape * (size_t)t->ndim);
        } else if (world == 1 || replicated(rules, cfg, x->name)) {
            t->ndim = x->ndim;
            memcpy(t->shape, x->shape, sizeof *t->shape * (size_t)t->ndim);
        } else {
            rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': its global shape is unknown (no "
                                            "process gives it, and only a replicated tensor's "
                                            "local shape is its global shape)", x->name);
        }
    }
    if (rc == PTC_OK)
        rc = cfg ? ptc_layout_create(out, ti, nt, rules, cfg)
                 : build_explicit(byk, m, tix, ti, nt, world, out);
    ptc_free(byk);
    ptc_free(ti);
    ptc_free(tix);
    return rc;
}

int ptc_ckpt_desc_layout(const ptc_ckpt_desc *d, size_t n, const ptc_config *cfg,
                         const ptc_rules *rules, ptc_layout **out)
{
    *out = NULL;
    for (size_t p = 1; p < n; p++) {
        if (strcmp(d[p].config, d[0].config) && d[p].config[0] && d[0].config[0])
            return ptc_error_set(PTC_E_INVAL, "process %zu saves with config '%s', process 0 "
                                              "with '%s'", p, d[p].config, d[0].config);
        if (strcmp(d[p].config, d[0].config)) {
            char a[96], b[96];
            layout_text(a, sizeof a, d[p].config);
            layout_text(b, sizeof b, d[0].config);
            return ptc_error_set(PTC_E_INVAL, "process %zu saves with %s, process 0 with %s", p,
                                 a, b);
        }
        if (strcmp(d[p].rules, d[0].rules))
            return ptc_error_set(PTC_E_INVAL, "process %zu saves with rules '%s', process 0 "
                                              "with '%s'", p, d[p].rules, d[0].rules);
    }
    if (n && !cfg != !d[0].config[0]) /* the descriptions are this process's and others' */
        return ptc_error_set(PTC_E_INVAL, "checkpoint: the description does not match the "
                                          "configuration");
    char text[PTC_CONFIG_MAX_STAGES * 11 + 64];
    int world = 0;
    if (cfg) {
        PTC_TRY(ptc_config_format(cfg, PTC_CONFIG_STYLE_KEYS, text, sizeof text));
        world = ptc_config_world(cfg);
    } else {
        size_t w = 0;
        for (size_t p = 0; p < n && w <= PTC_CONFIG_MAX_WORLD; p++)
            w += d[p].nranks;
        if (w < 1 || w > PTC_CONFIG_MAX_WORLD)
            return ptc_error_set(PTC_E_INVAL, "an explicit layout of %zu ranks (1..%d)", w,
                                 PTC_CONFIG_MAX_WORLD);
        world = (int)w;
        snprintf(text, sizeof text, "the explicit layout of %d ranks", world);
    }
    PTC_TRY(check_world(d, n, world, text));
    size_t m = 0;
    for (size_t p = 0; p < n; p++)
        m += d[p].ntensors;
    entry *e = ptc_calloc(m + 1, sizeof *e);
    size_t *first = ptc_calloc(m + 1, sizeof *first);
    const int64_t **gshape = ptc_calloc(m + 1, sizeof *gshape);
    int *gndim = ptc_calloc(m + 1, sizeof *gndim);
    int rc = e && first && gshape && gndim
                 ? PTC_OK
                 : ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %zu tensors", m);
    if (rc == PTC_OK) {
        size_t k = 0;
        for (size_t p = 0; p < n; p++)
            for (size_t i = 0; i < d[p].ntensors; i++, k++)
                e[k] = (entry){&d[p].tensors[i], k};
        qsort(e, m, sizeof *e, cmp_entry);
        rc = check_entries(e, m, first, gshape, gndim);
    }
    if (rc == PTC_OK)
        rc = build(e, m, first, gshape, gndim, cfg, rules, world, out);
    ptc_free(e);
    ptc_free(first);
    ptc_free(gshape);
    ptc_free(gndim);
    return rc;
}

/* ---- collectively -------------------------------------------------------------------------- */

int ptc_ckpt_lost(int rc, const char *what, const char *step)
{
    return ptc_error_set(rc, "%s: %s: %s", what, step, ptc_last_error());
}

/* Every process's description, decoded. */
static int decode_all(const ptc_transport *t, const uint8_t *all, const size_t *lens,
                      ptc_ckpt_desc **out)
{
    ptc_ckpt_desc *d = ptc_calloc((size_t)t->size, sizeof *d);
    if (!d)
        return ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %d descriptions", t->size);
    int rc = PTC_OK;
    size_t at = 0;
    for (int p = 0; rc == PTC_OK && p < t->size; p++) {
        rc = ptc_ckpt_desc_decode(&d[p], all + at, lens[p]);
        at += lens[p];
    }
    *out = d;
    return rc;
}

/* The dtype of tensor @p name in version @p rd (NULL: the version whose
 * layout is @p vl); false when the version lacks it (the load names it). */
static bool version_dtype(const ptc_store_reader *rd, const ptc_layout *vl, const char *name,
                          ptc_dtype *dt)
{
    size_t st;
    ptc_store_tensor info;
    if (rd && ptc_store_reader_find(rd, name, strlen(name), &st) == PTC_OK &&
        ptc_store_reader_tensor(rd, st, &info) == PTC_OK) {
        *dt = info.dtype;
        return true;
    }
    if (!rd && ptc_layout_find(vl, name, &st) == PTC_OK) {
        *dt = ptc_layout_tensor(vl, st)->dtype;
        return true;
    }
    ptc_error_clear();
    return false;
}

/* Where a load's buffers take a tensor of the version (@p rd, or @p vl) as
 * raw bits, the layout gets the version's dtype (ptc_ckpt_bind then accepts
 * them). */
static void version_dtypes(ptc_ckpt_desc *d, size_t n, const ptc_store_reader *rd,
                           const ptc_layout *vl)
{
    for (size_t p = 0; p < n; p++)
        for (size_t i = 0; i < d[p].ntensors; i++) {
            ptc_ckpt_desc_tensor *x = &d[p].tensors[i];
            ptc_dtype dt;
            if (version_dtype(rd, vl, x->name, &dt) && ptc_ckpt_raw_ok(x->dtype, dt))
                x->dtype = dt;
        }
}

static int collect_run(const ptc_transport *t, const char *what, int rc, const int *ranks,
                       size_t nranks, const ptc_ckpt_local *locals, size_t n,
                       const ptc_config *cfg, const ptc_rules *rules,
                       const ptc_store_reader *rd, const ptc_layout *vl, ptc_layout **out)
{
    *out = NULL;
    ptc_buf b = {0};
    void *all = NULL;
    size_t *lens = NULL;
    ptc_ckpt_desc *d = NULL;
    if (rc == PTC_OK)
        rc = ptc_ckpt_desc_encode(&b, ranks, nranks, locals, n, cfg, rules);
    if (rc == PTC_OK && !(lens = ptc_calloc((size_t)t->size, sizeof *lens)))
        rc = ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %d processes", t->size);
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_free;
    if ((rc = ptc_transport_allgatherv(t, b.p, b.len, &all, lens)) < 0) {
        rc = ptc_ckpt_lost(rc, what, "exchange of the local tensors");
        goto out_free;
    }
    rc = decode_all(t, all, lens, &d);
    if (rc == PTC_OK && (rd || vl))
        version_dtypes(d, (size_t)t->size, rd, vl);
    if (rc == PTC_OK)
        rc = ptc_ckpt_desc_layout(d, (size_t)t->size, cfg, rules, out);
    /* the outcome is the same on every process unless memory ran out on one */
    int arc = ptc_transport_agree(t, rc == PTC_E_NOMEM ? rc : PTC_OK, what);
    if (arc < 0)
        rc = arc;
out_free:
    if (rc < 0) {
        ptc_layout_destroy(*out);
        *out = NULL;
    }
    for (int p = 0; d && p < t->size; p++)
        ptc_ckpt_desc_free(&d[p]);
    ptc_free(d);
    ptc_transport_free(all);
    ptc_free(lens);
    ptc_buf_free(&b);
    return rc;
}

int ptc_ckpt_collect(const ptc_transport *t, const char *what, int rc, const int *ranks,
                     size_t nranks, const ptc_ckpt_local *locals, size_t n,
                     const ptc_config *cfg, const ptc_rules *rules, ptc_layout **out)
{
    return collect_run(t, what, rc, ranks, nranks, locals, n, cfg, rules, NULL, NULL, out);
}

int ptc_ckpt_collect_load(const ptc_transport *t, const char *what, const int *ranks,
                          size_t nranks, const ptc_ckpt_local *locals, size_t n,
                          const ptc_store_reader *rd, const ptc_layout *vl, ptc_layout **out)
{
    return collect_run(t, what, PTC_OK, ranks, nranks, locals, n, NULL, NULL, rd, vl, out);
}

int ptc_ckpt_collect_over(const ptc_transport *t, const int *ranks, size_t nranks,
                          const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                          const ptc_rules *rules, ptc_layout **out)
{
    return ptc_ckpt_collect(t, "checkpoint collect", PTC_OK, ranks, nranks, locals, n, cfg,
                            rules, out);
}

/* ---- local tensors against a layout ---------------------------------------------------------- */

/* An integer buffer of the same size may carry BF16 / FP8 as raw bits. */
bool ptc_ckpt_raw_ok(ptc_dtype have, ptc_dtype want)
{
    bool narrow = want == PTC_DTYPE_BF16 || want == PTC_DTYPE_F8_E4M3 ||
                  want == PTC_DTYPE_F8_E5M2;
    bool bits = have == PTC_DTYPE_U8 || have == PTC_DTYPE_I8 || have == PTC_DTYPE_U16 ||
                have == PTC_DTYPE_I16;
    return narrow && bits && ptc_dtype_size(have) == ptc_dtype_size(want);
}

static void box_text(char *buf, size_t cap, const ptc_box *b)
{
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < b->ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld:%lld", d ? ", " : "",
                               (long long)b->lo[d], (long long)b->hi[d]);
}

/* "a:b, c:d; e:f, g:h": the boxes of @p n pieces. */
static void boxes_text(char *buf, size_t cap, const ptc_piece *pc, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && at < cap; i++) {
        at += (size_t)snprintf(buf + at, cap - at, "%s", i ? "; " : "");
        if (at < cap)
            box_text(buf + at, cap - at, &pc[i].box);
        at += strlen(buf + at);
    }
}

static bool same_piece(const ptc_piece *a, const ptc_piece *b)
{
    if (!ptc_box_equal(&a->box, &b->box) || a->local_offset != b->local_offset)
        return false;
    for (int d = 0; d < a->box.ndim; d++)
        if (a->box.hi[d] - a->box.lo[d] > 1 && a->local_stride[d] != b->local_stride[d])
            return false;
    return true;
}

/* The pieces the buffer says it holds (given, or its box) must be the
 * layout's pieces of the rank. */
static int check_box(const ptc_layout *l, size_t t, const ptc_shard *sh,
                     const ptc_ckpt_local *x, const char *cfg)
{
    const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
    size_t ngiven = x->npieces ? x->npieces : 1;
    ptc_piece *pc = ptc_calloc(sh->npieces + ngiven + 1, sizeof *pc), *given = pc + sh->npieces;
    if (!pc)
        return ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for %zu pieces", sh->npieces);
    size_t np = 0, ng = 0;
    int rc = ptc_layout_pieces(l, t, x->rank, pc, sh->npieces, &np);
    if (rc == PTC_OK && x->npieces) {
        for (size_t i = 0; i < x->npieces; i++) /* pieces with no elements are never listed */
            if (ptc_box_volume(&x->pieces[i].box) > 0 && x->pieces[i].box.ndim == ti->ndim)
                given[ng++] = x->pieces[i];
    } else if (rc == PTC_OK) {
        rc = one_piece(x, ti->ndim, ti->shape, &given[0]);
        ng = 1;
    }
    bool same = rc == PTC_OK && np == ng;
    for (size_t i = 0; same && i < np; i++)
        same = same_piece(&pc[i], &given[i]);
    if (rc == PTC_OK && !same) {
        char have[512], want[1024];
        boxes_text(have, sizeof have, given, ng);
        boxes_text(want, sizeof want, pc, np);
        rc = ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: the local tensor holds [%s] "
                                        "of the global tensor, but the layout of %s places "
                                        "[%s] there (placements and rank must match the rules)",
                           x->name, x->rank, have, cfg, want);
    }
    ptc_free(pc);
    return rc;
}

/* One local tensor against the layout's shard of its rank. */
static int check_one(const ptc_layout *l, size_t t, const ptc_shard *sh, const ptc_ckpt_local *x,
                     const char *where, bool raw, const char *cfg)
{
    const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
    if (!sh->present)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' is not held by rank %d under %s", x->name,
                             x->rank, cfg);
    if (x->dtype != ti->dtype && !(raw && ptc_ckpt_raw_ok(x->dtype, ti->dtype)))
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d has dtype %s; %s has %s",
                             x->name, x->rank, ptc_dtype_name(x->dtype), where,
                             ptc_dtype_name(ti->dtype));
    if (!same_shape(x->ndim, x->shape, sh->ndim, sh->shape)) {
        char a[256], b[256];
        ptc_ckpt_shape_text(a, sizeof a, x->ndim, x->shape);
        ptc_ckpt_shape_text(b, sizeof b, sh->ndim, sh->shape);
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: local shape %s, but the "
                                          "layout of %s gives %s", x->name, x->rank, a, cfg, b);
    }
    if ((x->has_box || x->npieces) && ptc_ckpt_shard_volume(sh) > 0)
        return check_box(l, t, sh, x, cfg);
    return PTC_OK;
}

/* Rank ranks[i]'s row of the buffer table. @p at: scratch of ntensors. */
static int bind_rank(const ptc_layout *l, int rank, const ptc_ckpt_local *locals, size_t n,
                     const char *where, bool raw, const char *cfg, size_t *at, void **row)
{
    size_t nt = ptc_layout_count(l);
    memset(at, 0, sizeof *at * nt);
    for (size_t j = 0; j < n; j++) {
        if (locals[j].rank != rank)
            continue;
        size_t t;
        if (ptc_layout_find(l, locals[j].name, &t) != PTC_OK)
            return ptc_error_set(PTC_E_NOTFOUND, "tensor '%s' is not in %s", locals[j].name,
                                 where);
        at[t] = j + 1;
    }
    for (size_t t = 0; t < nt; t++) {
        ptc_shard sh;
        PTC_TRY(ptc_layout_shard(l, t, rank, &sh));
        if (!at[t]) {
            if (ptc_ckpt_shard_volume(&sh) > 0) {
                char s[256];
                ptc_ckpt_shape_text(s, sizeof s, sh.ndim, sh.shape);
                return ptc_error_set(PTC_E_INVAL, "rank %d holds tensor '%s' (local shape %s "
                                                  "under %s), but the state has no tensor of "
                                                  "that name", rank,
                                     ptc_layout_tensor(l, t)->name, s, cfg);
            }
            continue;
        }
        const ptc_ckpt_local *x = &locals[at[t] - 1];
        PTC_TRY(check_one(l, t, &sh, x, where, raw, cfg));
        row[t] = x->data;
    }
    return PTC_OK;
}

int ptc_ckpt_bind(const ptc_layout *l, const int *ranks, size_t nranks,
                  const ptc_ckpt_local *locals, size_t n, const char *where, bool raw,
                  void ***bufs)
{
    *bufs = NULL;
    PTC_TRY(check_ranks(ranks, nranks));
    PTC_TRY(check_locals(ranks, nranks, locals, n));
    int world = ptc_layout_world(l);
    for (size_t i = 0; i < nranks; i++)
        if (ranks[i] >= world)
            return ptc_error_set(PTC_E_INVAL, "rank %d outside the world of %d ranks", ranks[i],
                                 world);
    char cfg[PTC_CONFIG_MAX_STAGES * 11 + 64];
    PTC_TRY(ptc_layout_describe(l, cfg, sizeof cfg));
    size_t nt = ptc_layout_count(l);
    void **tab = ptc_calloc(nranks * nt + 1, sizeof *tab);
    size_t *at = ptc_calloc(nt + 1, sizeof *at);
    int rc = tab && at ? PTC_OK : ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for the "
                                                             "buffer table");
    for (size_t i = 0; rc == PTC_OK && i < nranks; i++)
        rc = bind_rank(l, ranks[i], locals, n, where, raw, cfg, at, tab + i * nt);
    ptc_free(at);
    if (rc != PTC_OK) {
        ptc_free(tab);
        return rc;
    }
    *bufs = tab;
    return PTC_OK;
}
