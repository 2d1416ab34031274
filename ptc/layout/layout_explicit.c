/* Explicit layouts: per (tensor, rank) the local shape and pieces given by
 * the caller (a job's DTensor placements, a version's shard records)
 * instead of computed from a configuration and rules. The distinct shards
 * of each tensor are stored once, found by equality of their local shape
 * and pieces; a (tensor, rank) table points into them, so a query costs
 * O(pieces) as for a layout of a configuration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ptc/layout/layout_internal.h"
#include "base/util_internal.h"

struct lx_shard {
    int ndim;
    int64_t shape[PTC_MAX_DIMS];
    size_t p0, np; /* pieces: ex->pc[p0 .. p0 + np) */
    int owner;     /* the lowest rank holding it */
    uint64_t hash;
};

static void ex_free(lx_data *ex)
{
    if (!ex)
        return;
    ptc_free(ex->cell);
    ptc_free(ex->c0);
    ptc_free(ex->sh);
    ptc_free(ex->t0);
    ptc_free(ex->pc);
    ptc_free(ex);
}

bool ptc_layout_is_explicit(const ptc_layout *l)
{
    return l->ex != NULL;
}

int ptc_layout_world(const ptc_layout *l)
{
    return ptc_config_world(&l->cfg);
}

int ptc_layout_describe(const ptc_layout *l, char *buf, size_t cap)
{
    if (!l->ex)
        return ptc_config_format(&l->cfg, PTC_CONFIG_STYLE_KEYS, buf, cap);
    int n = snprintf(buf, cap, PTC_LAYOUT_EXPLICIT_PREFIX "%d", l->ex->world);
    if (n < 0 || (size_t)n >= cap)
        return ptc_error_set(PTC_E_RANGE, "layout text needs %d bytes, room for %zu", n + 1,
                             cap);
    return PTC_OK;
}

int ptc_layout_parse_explicit(const char *text, int *world)
{
    static const char pre[] = PTC_LAYOUT_EXPLICIT_PREFIX;
    *world = 0;
    if (strncmp(text, pre, sizeof pre - 1) != 0)
        return PTC_OK;
    const char *d = text + sizeof pre - 1;
    long long w = 0;
    bool ok = *d >= '1' && *d <= '9';
    for (; ok && *d; d++) {
        ok = *d >= '0' && *d <= '9';
        w = w * 10 + (*d - '0');
        ok = ok && w <= PTC_CONFIG_MAX_WORLD;
    }
    if (!ok)
        return ptc_error_set(PTC_E_INVAL, "bad explicit layout '%.64s' (explicit:W, W in "
                                          "1..%d)", text, PTC_CONFIG_MAX_WORLD);
    *world = (int)w;
    return PTC_OK;
}

/* ---- queries ------------------------------------------------------------------------- */

/* The shard index of (t, rank), or -1: a binary search of t's entries. */
static int64_t find_cell(const lx_data *ex, size_t t, int rank)
{
    size_t lo = ex->c0[t], hi = ex->c0[t + 1];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ex->cell[mid].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ex->c0[t + 1] && ex->cell[lo].rank == rank ? (int64_t)ex->cell[lo].shard : -1;
}

static void ex_shard(const ptc_layout *l, size_t t, int rank, ptc_shard *out,
                     ptc_piece *pieces, size_t cap)
{
    const lx_data *ex = l->ex;
    memset(out, 0, sizeof *out);
    out->owner = -1;
    int64_t c = find_cell(ex, t, rank);
    if (c < 0)
        return;
    const lx_shard *x = &ex->sh[c];
    out->present = true;
    out->ndim = x->ndim;
    memcpy(out->shape, x->shape, sizeof out->shape);
    out->flat_hi = 1;
    for (int d = 0; d < x->ndim; d++)
        out->flat_hi *= x->shape[d];
    out->npieces = x->np;
    out->owner = x->owner;
    if (pieces)
        memcpy(pieces, ex->pc + x->p0, sizeof *pieces * PTC_MIN(cap, x->np));
}

static void ex_owners(const ptc_layout *l, size_t t, int *owners)
{
    const lx_data *ex = l->ex;
    for (int r = 0; r < ex->world; r++)
        owners[r] = -1;
    for (size_t k = ex->c0[t]; k < ex->c0[t + 1]; k++)
        owners[ex->cell[k].rank] = ex->sh[ex->cell[k].shard].owner;
}

static const lx_ops EX_OPS = {.shard = ex_shard, .owners = ex_owners, .free = ex_free};

/* ---- creation ------------------------------------------------------------------------ */

/* Strides matter only along extents > 1: elsewhere they multiply zero. */
static int64_t stride_of(const ptc_piece *p, int d)
{
    return p->box.hi[d] - p->box.lo[d] > 1 ? p->local_stride[d] : 0;
}

static uint64_t shard_hash(int ndim, const int64_t *shape, const ptc_piece *pc, size_t np)
{
    int64_t v[3 * PTC_MAX_DIMS + 2];
    v[0] = ndim;
    memcpy(v + 1, shape, sizeof *shape * (size_t)ndim);
    uint64_t h = XXH3_64bits(v, sizeof *v * (size_t)(ndim + 1));
    for (size_t i = 0; i < np; i++) { /* chained: each piece seeded by the hash so far */
        const ptc_piece *p = &pc[i];
        int k = 0;
        for (int d = 0; d < p->box.ndim; d++) {
            v[k++] = p->box.lo[d];
            v[k++] = p->box.hi[d];
            v[k++] = stride_of(p, d);
        }
        v[k++] = p->local_offset;
        h = XXH3_64bits_withSeed(v, sizeof *v * (size_t)k, h);
    }
    return h;
}

static bool shard_equal(const lx_shard *x, const ptc_piece *xp, int ndim, const int64_t *shape,
                        const ptc_piece *pc, size_t np)
{
    if (x->ndim != ndim || x->np != np ||
        (ndim && memcmp(x->shape, shape, sizeof *shape * (size_t)ndim)))
        return false;
    for (size_t i = 0; i < np; i++) {
        if (!ptc_box_equal(&xp[i].box, &pc[i].box) || xp[i].local_offset != pc[i].local_offset)
            return false;
        for (int d = 0; d < pc[i].box.ndim; d++)
            if (stride_of(&xp[i], d) != stride_of(&pc[i], d))
                return false;
    }
    return true;
}

/* An entry's sort key: (tensor, rank), then its index. */
typedef struct entry_key {
    size_t tensor;
    int rank;
    size_t k;
} entry_key;

typedef struct build {
    ptc_layout *l;
    const ptc_layout_explicit_shard *in;
    entry_key *ord;    /* entries sorted by (tensor, rank) */
    size_t nsh_cap, npc_cap;
    ptc_piece *scratch; /* an entry's non-empty pieces */
    size_t scratch_cap;
    size_t *table;     /* one tensor's shards by hash: index + 1 */
    size_t table_cap;
} build;

static int cmp_entry(const void *a, const void *b)
{
    const entry_key *x = a, *y = b;
    if (x->tensor != y->tensor)
        return x->tensor < y->tensor ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Entry @p e checked against its tensor; its non-empty pieces into the
 * scratch (*np of them). */
static int check_entry(build *b, const ptc_layout_explicit_shard *e, size_t *np)
{
    char cb[96];
    const ptc_tensor_info *ti = &b->l->t[e->tensor].info;
    const char *name = ptc_layout_clip(ti->name, cb);
    if (e->ndim < 0 || e->ndim > PTC_MAX_DIMS)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: %d local dimensions (0..%d)",
                             name, e->rank, e->ndim, PTC_MAX_DIMS);
    int64_t vol = 1;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0)
            return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: negative local extent",
                                 name, e->rank);
        if (ptc_mul_overflow_i64(vol, e->shape[d], &vol))
            return ptc_error_set(PTC_E_RANGE, "tensor '%s' on rank %d: local volume overflows",
                                 name, e->rank);
    }
    if (e->npieces && !e->pieces)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: pieces is NULL", name,
                             e->rank);
    PTC_TRY(ptc_grow((void **)&b->scratch, &b->scratch_cap, e->npieces + 1, sizeof(ptc_piece)));
    int64_t held = 0;
    *np = 0;
    for (size_t i = 0; i < e->npieces; i++) {
        const ptc_piece *p = &e->pieces[i];
        if (ptc_piece_check(p, ti->ndim, ti->shape, vol) != PTC_OK)
            return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d, piece %zu: %s", name,
                                 e->rank, i, ptc_last_error());
        int64_t v = ptc_box_volume(&p->box);
        if (v == 0)
            continue;
        if (ptc_add_overflow_i64(held, v, &held))
            held = INT64_MAX; /* more than any local tensor holds */
        b->scratch[(*np)++] = *p;
    }
    if (held != vol)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s' on rank %d: its pieces hold %lld "
                                          "elements, its local tensor %lld", name, e->rank,
                             (long long)held, (long long)vol);
    return PTC_OK;
}

/* The shard of entry @p e (checked, pieces in the scratch): an existing
 * shard of the tensor, or a new one. */
static int add_entry(build *b, const ptc_layout_explicit_shard *e, size_t at, size_t np,
                     size_t mask)
{
    lx_data *ex = b->l->ex;
    uint64_t h = shard_hash(e->ndim, e->shape, b->scratch, np);
    size_t k = (size_t)h & mask;
    for (; b->table[k]; k = (k + 1) & mask) {
        size_t s = b->table[k] - 1;
        const lx_shard *x = &ex->sh[s];
        if (x->hash == h && shard_equal(x, ex->pc + x->p0, e->ndim, e->shape, b->scratch, np)) {
            ex->cell[at] = (lx_cell){e->rank, (uint32_t)s};
            return PTC_OK;
        }
    }
    size_t s = ex->t0[e->tensor + 1]; /* the next shard */
    if (s >= (size_t)UINT32_MAX)
        return ptc_error_set(PTC_E_RANGE, "explicit layout: more than %u shards", UINT32_MAX);
    PTC_TRY(ptc_grow((void **)&ex->sh, &b->nsh_cap, s + 1, sizeof *ex->sh));
    size_t p0 = s ? ex->sh[s - 1].p0 + ex->sh[s - 1].np : 0;
    PTC_TRY(ptc_grow((void **)&ex->pc, &b->npc_cap, p0 + np + 1, sizeof *ex->pc));
    memcpy(ex->pc + p0, b->scratch, sizeof *ex->pc * np);
    lx_shard *x = &ex->sh[s];
    memset(x, 0, sizeof *x);
    x->ndim = e->ndim;
    memcpy(x->shape, e->shape, sizeof *x->shape * (size_t)e->ndim);
    x->p0 = p0;
    x->np = np;
    x->owner = e->rank;
    x->hash = h;
    b->table[k] = s + 1;
    ex->t0[e->tensor + 1] = s + 1;
    ex->cell[at] = (lx_cell){e->rank, (uint32_t)s};
    return PTC_OK;
}

/* The shards of tensor t: entries ord[i .. j), in rank order. */
static int add_tensor(build *b, size_t i, size_t j)
{
    size_t want = 16;
    while (want < 2 * (j - i))
        want *= 2;
    if (want > b->table_cap) {
        ptc_free(b->table);
        b->table = ptc_malloc(sizeof *b->table * want);
        if (!b->table)
            return PTC_E_NOMEM;
        b->table_cap = want;
    }
    memset(b->table, 0, sizeof *b->table * want);
    for (size_t k = i; k < j; k++) {
        const ptc_layout_explicit_shard *e = &b->in[b->ord[k].k];
        size_t np = 0;
        PTC_TRY(check_entry(b, e, &np));
        PTC_TRY(add_entry(b, e, k, np, want - 1)); /* entries in order: cell k */
    }
    return PTC_OK;
}

/* Entries in range and distinct; their order by (tensor, rank) in b->ord. */
static int order_entries(build *b, size_t n, int world, size_t nshards)
{
    char cb[96];
    for (size_t k = 0; k < nshards; k++) {
        const ptc_layout_explicit_shard *e = &b->in[k];
        if (e->tensor >= n)
            return ptc_error_set(PTC_E_INVAL, "explicit shard %zu: tensor %zu of %zu", k,
                                 e->tensor, n);
        if (e->rank < 0 || e->rank >= world)
            return ptc_error_set(PTC_E_INVAL, "tensor '%s': rank %d outside the world of %d",
                                 ptc_layout_clip(b->l->t[e->tensor].info.name, cb), e->rank,
                                 world);
        b->ord[k] = (entry_key){e->tensor, e->rank, k};
    }
    qsort(b->ord, nshards, sizeof *b->ord, cmp_entry);
    for (size_t k = 1; k < nshards; k++) {
        const entry_key *x = &b->ord[k - 1], *y = &b->ord[k];
        if (x->tensor == y->tensor && x->rank == y->rank)
            return ptc_error_set(PTC_E_INVAL, "tensor '%s': rank %d's shard is given twice",
                                 ptc_layout_clip(b->l->t[x->tensor].info.name, cb), x->rank);
    }
    return PTC_OK;
}

int ptc_layout_create_explicit(ptc_layout **out, const ptc_tensor_info *tensors, size_t n,
                               int world, const ptc_layout_explicit_shard *shards,
                               size_t nshards)
{
    *out = NULL;
    if (world < 1 || world > PTC_CONFIG_MAX_WORLD)
        return ptc_error_set(PTC_E_INVAL, "explicit layout: world of %d ranks (1..%d)", world,
                             PTC_CONFIG_MAX_WORLD);
    if (nshards && !shards)
        return ptc_error_set(PTC_E_INVAL, "explicit layout: shards is NULL");
    ptc_layout *l;
    PTC_TRY(ptc_layout_alloc(&l, tensors, n));
    build b = {.l = l, .in = shards};
    int rc = PTC_E_NOMEM;
    ptc_config_init(&l->cfg);
    l->cfg.tp = world;
    for (size_t t = 0; t < n; t++) {
        ltensor *lt = &l->t[t];
        lt->pl.tp = PTC_TP_REPLICATE;
        lt->pl.dim = -1;
        lt->pl.pp = PTC_PP_ALL;
        lt->pl.kind = PTC_KIND_PARAM;
        lt->stage = -1;
    }
    lx_data *ex = l->ex = ptc_calloc(1, sizeof *ex);
    if (!ex)
        goto out_destroy;
    l->ops = &EX_OPS;
    ex->world = world;
    ex->cell = ptc_malloc(sizeof *ex->cell * (nshards + 1));
    ex->c0 = ptc_calloc(n + 2, sizeof *ex->c0);
    ex->t0 = ptc_calloc(n + 2, sizeof *ex->t0);
    b.ord = ptc_malloc(sizeof *b.ord * (nshards + 1));
    if (!ex->cell || !ex->c0 || !ex->t0 || !b.ord)
        goto out_destroy;
    if ((rc = order_entries(&b, n, world, nshards)) != PTC_OK)
        goto out_destroy;
    size_t i = 0;
    for (size_t t = 0; t < n; t++) {
        ex->t0[t + 1] = ex->t0[t];
        size_t j = i;
        while (j < nshards && b.ord[j].tensor == t)
            j++;
        ex->c0[t] = i;
        ex->c0[t + 1] = j;
        if ((rc = add_tensor(&b, i, j)) != PTC_OK)
            goto out_destroy;
        i = j;
    }
    ptc_free(b.ord);
    ptc_free(b.scratch);
    ptc_free(b.table);
    *out = l;
    return PTC_OK;
out_destroy:
    if (rc == PTC_E_NOMEM)
        rc = ptc_error_set(PTC_E_NOMEM, "explicit layout: out of memory");
    ptc_free(b.ord);
    ptc_free(b.scratch);
    ptc_free(b.table);
    ptc_layout_destroy(l);
    return rc;
}

/* ---- coverage ------------------------------------------------------------------------ */

typedef struct cov_piece {
    int64_t lo;        /* the sort key: box.lo along the sweep dimension */
    const ptc_piece *p;
    int owner;
} cov_piece;

static int cmp_cov(const void *a, const void *b)
{
    const cov_piece *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static bool meets(const ptc_box *a, const ptc_box *b)
{
    for (int d = 0; d < a->ndim; d++)
        if (PTC_MAX(a->lo[d], b->lo[d]) >= PTC_MIN(a->hi[d], b->hi[d]))
            return false;
    return true;
}

/* The dimension along which the pieces' starts differ most (-1: none). */
static int sweep_dim(const cov_piece *c, size_t m, int ndim, int64_t *scratch)
{
    int best = -1;
    size_t most = 0;
    for (int d = 0; d < ndim; d++) {
        for (size_t i = 0; i < m; i++)
            scratch[i] = c[i].p->box.lo[d];
        qsort(scratch, m, sizeof *scratch, cmp_i64);
        size_t distinct = m > 0;
        for (size_t i = 1; i < m; i++)
            distinct += scratch[i] != scratch[i - 1];
        if (best < 0 || distinct > most) {
            best = d;
            most = distinct;
        }
    }
    return best;
}

/* Pieces of the tensor's distinct shards, pairwise disjoint: a sweep along
 * one dimension compares each piece with those still open there. */
static int check_disjoint(const ptc_layout *l, size_t t, cov_piece *c, size_t m)
{
    char cb[96];
    const ptc_tensor_info *ti = &l->t[t].info;
    int64_t *scratch = ptc_malloc(sizeof *scratch * (m + 1));
    if (!scratch)
        return PTC_E_NOMEM;
    int d = sweep_dim(c, m, ti->ndim, scratch);
    ptc_free(scratch);
    if (d >= 0) {
        for (size_t i = 0; i < m; i++)
            c[i].lo = c[i].p->box.lo[d];
        qsort(c, m, sizeof *c, cmp_cov);
    }
    size_t open = 0; /* c[open .. i) may reach piece i along d */
    for (size_t i = 0; i < m; i++) {
        while (d >= 0 && open < i && c[open].p->box.hi[d] <= c[i].p->box.lo[d])
            open++;
        for (size_t k = open; k < i; k++) {
            if (d >= 0 && c[k].p->box.hi[d] <= c[i].p->box.lo[d])
                continue;
            if (!meets(&c[k].p->box, &c[i].p->box))
                continue;
            if (c[k].owner == c[i].owner)
                return ptc_error_set(PTC_E_INVAL, "tensor '%s': rank %d holds some elements "
                                                  "twice", ptc_layout_clip(ti->name, cb),
                                     c[i].owner);
            return ptc_error_set(PTC_E_INVAL, "tensor '%s': ranks %d and %d hold overlapping "
                                              "parts that are not one shard",
                                 ptc_layout_clip(ti->name, cb), PTC_MIN(c[k].owner, c[i].owner),
                                 PTC_MAX(c[k].owner, c[i].owner));
        }
    }
    return PTC_OK;
}

int ptc_layout_check_cover(const ptc_layout *l, size_t t)
{
    char cb[96];
    if (t >= l->n)
        return ptc_error_set(PTC_E_RANGE, "tensor index %zu outside 0..%zu", t, l->n);
    if (!l->ex)
        return PTC_OK; /* by construction */
    const lx_data *ex = l->ex;
    const ptc_tensor_info *ti = &l->t[t].info;
    size_t m = 0;
    for (size_t s = ex->t0[t]; s < ex->t0[t + 1]; s++)
        m += ex->sh[s].np;
    cov_piece *c = ptc_malloc(sizeof *c * (m + 1));
    if (!c)
        return ptc_error_set(PTC_E_NOMEM, "explicit layout: out of memory");
    int64_t held = 0, vol = 1;
    m = 0;
    for (size_t s = ex->t0[t]; s < ex->t0[t + 1]; s++)
        for (size_t i = 0; i < ex->sh[s].np; i++) {
            c[m].p = &ex->pc[ex->sh[s].p0 + i];
            c[m].owner = ex->sh[s].owner;
            held += ptc_box_volume(&c[m].p->box);
            m++;
        }
    for (int d = 0; d < ti->ndim; d++)
        vol *= ti->shape[d];
    int rc = check_disjoint(l, t, c, m);
    ptc_free(c);
    if (rc == PTC_OK && held != vol)
        rc = ptc_error_set(PTC_E_INVAL, "tensor '%s': its shards hold %lld of its %lld "
                                        "elements (no rank holds the rest)",
                           ptc_layout_clip(ti->name, cb), (long long)held, (long long)vol);
    return rc;
}
