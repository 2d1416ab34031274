/* The layout function: placements resolved once per tensor, shards computed
 * on request from (tensor, rank) in O(pieces), owners in closed form. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ptc/layout/layout_internal.h"
#include "base/util_internal.h"

/* One non-empty part of a block on a tp rank: global start along the split
 * dim, start in the local tensor, length. */
typedef struct part {
    int64_t glo, llo, len;
} part;

const char *ptc_layout_clip(const char *s, char buf[96])
{
    size_t n = strlen(s), m = n > 80 ? 80 : n;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (n > m) {
        memcpy(buf + m, "...", 3);
        m += 3;
    }
    buf[m] = '\0';
    return buf;
}

void ptc_layout_destroy(ptc_layout *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        ptc_free((char *)l->t[i].info.name);
    ptc_free(l->t);
    ptc_free(l->hash);
    if (l->ex)
        l->ops->free(l->ex);
    ptc_free(l);
}

size_t ptc_layout_count(const ptc_layout *l)
{
    return l->n;
}

const ptc_config *ptc_layout_config(const ptc_layout *l)
{
    return &l->cfg;
}

int64_t ptc_layout_nlayers(const ptc_layout *l)
{
    return l->nlayers;
}

const ptc_tensor_info *ptc_layout_tensor(const ptc_layout *l, size_t t)
{
    return &l->t[t].info;
}

const ptc_placement *ptc_layout_placement(const ptc_layout *l, size_t t)
{
    return &l->t[t].pl;
}

static uint64_t name_hash(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}

/* Index + 1 of the tensor named @p name, 0 if none (no message). */
static size_t lookup(const ptc_layout *l, const char *name)
{
    for (size_t h = name_hash(name) & l->hmask;; h = (h + 1) & l->hmask) {
        size_t v = l->hash[h];
        if (!v || strcmp(l->t[v - 1].info.name, name) == 0)
            return v;
    }
}

int ptc_layout_find(const ptc_layout *l, const char *name, size_t *t)
{
    char cb[96];
    size_t v = lookup(l, name);
    if (v) {
        *t = v - 1;
        return PTC_OK;
    }
    return ptc_error_set(PTC_E_NOTFOUND, "no tensor '%s' in the layout",
                         ptc_layout_clip(name, cb));
}

/* ptc_rules_has_fn over the layout being built (its name table is complete). */
static bool layout_has(const char *name, void *user)
{
    return lookup(user, name) != 0;
}

/* Size of block b of the split dim. */
static int64_t block_size(const ltensor *lt, int b)
{
    const ptc_placement *pl = &lt->pl;
    int64_t S = lt->info.shape[pl->dim];
    if (pl->nblocks == 0)
        return pl->nheads > 1 ? pl->heads[b] * lt->unit : S;
    if (pl->blocks_equal)
        return S / pl->nblocks;
    return pl->blocks[b];
}

/* Heads of block b (0: not head-aware) and whether they are kv heads. */
static int64_t block_heads(const ltensor *lt, int b, bool *kv)
{
    const ptc_placement *pl = &lt->pl;
    int e = pl->nheads == 1 ? 0 : b;
    *kv = pl->nheads && (pl->kv >> e & 1);
    return pl->nheads ? pl->heads[e] : 0;
}

/* Whether block b's h kv heads are replicated over T ranks: each rank holds
 * one whole head, head floor(i*h/T) (vLLM's QKVParallelLinear). */
static bool block_replicates(const ltensor *lt, int b, int T)
{
    bool kv;
    int64_t h = block_heads(lt, b, &kv);
    return kv && h > 0 && T > h && T % h == 0;
}

/* Part of block b (of size S) on tp rank i: the split rule, or one whole
 * replicated head. */
static void block_part(const ltensor *lt, int b, int64_t S, int T, int i, int64_t *lo,
                       int64_t *hi)
{
    if (lt->repl && block_replicates(lt, b, T)) {
        bool kv;
        int64_t h = block_heads(lt, b, &kv), D = S / h, k = (int64_t)i * h / T;
        *lo = k * D;
        *hi = (k + 1) * D;
        return;
    }
    ptc_split(S, T, i, lo, hi);
}

/* Length of tp part i along the split dim (sum over blocks). */
static int64_t part_len(const ltensor *lt, int T, int i)
{
    int64_t sum = 0;
    for (int b = 0; b < lt->nb; b++) {
        int64_t lo, hi;
        block_part(lt, b, block_size(lt, b), T, i, &lo, &hi);
        sum += hi - lo;
    }
    return sum;
}

/* Non-empty parts of tp rank i; returns their count, *len the local extent. */
static int tp_parts(const ltensor *lt, int T, int i, part *out, int64_t *len)
{
    int np = 0;
    int64_t start = 0, local = 0;
    for (int b = 0; b < lt->nb; b++) {
        int64_t S = block_size(lt, b), lo, hi;
        block_part(lt, b, S, T, i, &lo, &hi);
        if (hi > lo) {
            out[np].glo = start + lo;
            out[np].llo = local;
            out[np].len = hi - lo;
            np++;
        }
        local += hi - lo;
        start += S;
    }
    *len = local;
    return np;
}

bool ptc_layout_on_stage(const ptc_layout *l, size_t t, int stage)
{
    if (l->ex)
        return stage == 0;
    const ltensor *lt = &l->t[t];
    int P = l->cfg.pp;
    switch (lt->pl.pp) {
    case PTC_PP_LAYER: return stage == lt->stage;
    case PTC_PP_FIRST: return stage == 0;
    case PTC_PP_LAST: return stage == P - 1;
    case PTC_PP_FIRST_LAST: return stage == 0 || stage == P - 1;
    case PTC_PP_ALL: return stage >= 0 && stage < P;
    }
    return false;
}

static int first_stage(const ltensor *lt, int P)
{
    switch (lt->pl.pp) {
    case PTC_PP_LAYER: return lt->stage;
    case PTC_PP_LAST: return P - 1;
    default: return 0;
    }
}

/* Lowest tp index whose shard equals tp rank i's (non-flat shards). Two tp
 * shards are equal only if their parts are equal: split parts with elements
 * are distinct, replicated heads are shared by the ranks holding the same
 * head, and empty shards are equal when their local extents agree. */
static int tp_owner(const ltensor *lt, int T, int i, int64_t Li)
{
    if (lt->pl.tp != PTC_TP_SPLIT)
        return 0;
    if (lt->repl && Li > 0 && lt->other_vol > 0) {
        part mine[PTC_RULES_MAX_BLOCKS], other[PTC_RULES_MAX_BLOCKS];
        int64_t lm, lo_;
        int nm = tp_parts(lt, T, i, mine, &lm);
        for (int j = 0; j < i; j++) {
            int no = tp_parts(lt, T, j, other, &lo_);
            if (no == nm && lo_ == lm && memcmp(mine, other, sizeof(part) * (size_t)nm) == 0)
                return j;
        }
        return i;
    }
    if (Li > 0 && lt->other_vol > 0)
        return i;
    /* part lengths do not increase with i (split rule), so equal lengths
     * form a run; with replicated heads every part is non-empty */
    int lo = 0, hi = i; /* first j in [0, i] with L_j == Li */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (part_len(lt, T, mid) > Li)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Compute the shard of (t, rank); pieces are written to out[0..cap) and
 * counted in sh->npieces. */
static void shard_compute(const ptc_layout *l, size_t t, int rank, ptc_shard *sh,
                          ptc_piece *out, size_t cap)
{
    if (l->ex) {
        l->ops->shard(l, t, rank, sh, out, cap);
        return;
    }
    const ltensor *lt = &l->t[t];
    const ptc_config *c = &l->cfg;
    int pp_i, dp_i, tp_i;
    ptc_config_coords(c, rank, &pp_i, &dp_i, &tp_i);
    memset(sh, 0, sizeof *sh);
    sh->owner = -1;
    if (!ptc_layout_on_stage(l, t, pp_i))
        return;
    sh->present = true;
    int nd = lt->info.ndim;
    const int T = c->tp, D = c->dp;
    int s0 = first_stage(lt, c->pp);

    /* tp-local shard: shape and parts (replicate: one part, the whole). */
    int64_t lshape[PTC_MAX_DIMS];
    memcpy(lshape, lt->info.shape, sizeof lshape);
    part parts[PTC_RULES_MAX_BLOCKS];
    int np;
    int d = lt->pl.tp == PTC_TP_SPLIT ? lt->pl.dim : -1;
    int64_t Li = 0;
    if (d >= 0) {
        np = tp_parts(lt, T, tp_i, parts, &Li);
        lshape[d] = Li;
    } else {
        np = 1;
        parts[0].glo = parts[0].llo = 0;
        parts[0].len = nd ? lt->info.shape[0] : 1;
    }
    int64_t V = 1;
    for (int e = 0; e < nd; e++)
        V *= lshape[e];
    if (lt->other_vol == 0)
        np = 0; /* no element anywhere: no pieces */
    int64_t lst[PTC_MAX_DIMS];
    ptc_strides_row_major(nd, lshape, lst);

    size_t k = 0;
    if (!lt->zero) {
        sh->ndim = nd;
        memcpy(sh->shape, lshape, sizeof lshape);
        sh->flat_lo = 0;
        sh->flat_hi = V;
        for (int p = 0; p < np; p++, k++) {
            if (k >= cap)
                continue;
            ptc_piece *pc = &out[k];
            memset(pc, 0, sizeof *pc);
            ptc_box_full(&pc->box, nd, lt->info.shape);
            if (d >= 0) {
                pc->box.lo[d] = parts[p].glo;
                pc->box.hi[d] = parts[p].glo + parts[p].len;
                pc->local_offset = parts[p].llo * lst[d];
            }
            memcpy(pc->local_stride, lst, sizeof lst);
        }
        sh->npieces = k;
        sh->owner = ptc_config_rank(c, s0, 0, tp_owner(lt, T, tp_i, Li));
        return;
    }

    /* zero-sharded: flat range of the tp-local shard */
    int64_t a, b;
    ptc_split(V, D, dp_i, &a, &b);
    sh->flat = true;
    sh->ndim = 1;
    sh->shape[0] = b - a;
    sh->flat_lo = a;
    sh->flat_hi = b;
    ptc_box fb[2 * PTC_MAX_DIMS];
    size_t nfb = 0;
    (void)ptc_flat_to_boxes(fb, &nfb, nd, lshape, a, b); /* a, b within [0, V] */
    for (size_t f = 0; f < nfb; f++) {
        for (int p = 0; p < np; p++) {
            ptc_box lb, isect;
            ptc_box_full(&lb, nd, lshape);
            if (d >= 0) {
                lb.lo[d] = parts[p].llo;
                lb.hi[d] = parts[p].llo + parts[p].len;
            }
            if (!ptc_box_intersect(&isect, &fb[f], &lb))
                continue;
            if (k++ >= cap)
                continue;
            ptc_piece *pc = &out[k - 1];
            memset(pc, 0, sizeof *pc);
            pc->box = isect;
            int64_t off = 0, own = 1;
            for (int e = nd - 1; e >= 0; e--) {
                int64_t ext = isect.hi[e] - isect.lo[e];
                off += isect.lo[e] * lst[e];
                pc->local_stride[e] = ext > 1 ? lst[e] : own;
                own *= ext;
            }
            pc->local_offset = off - a;
            if (d >= 0) {
                pc->box.lo[d] += parts[p].glo - parts[p].llo;
                pc->box.hi[d] += parts[p].glo - parts[p].llo;
            }
        }
    }
    sh->npieces = k;

    /* owner: a non-empty range is unique up to tp replication; every empty
     * range is the same shard (1-D, length 0, no pieces). */
    int dpo = dp_i, tpo = tp_i;
    if (b > a) {
        if (d < 0)
            tpo = 0;
        else if (lt->repl)
            tpo = tp_owner(lt, T, tp_i, Li);
    } else {
        dpo = D;
        for (int j = 0; j < T && dpo > 0; j++) {
            int64_t Vj = d >= 0 ? part_len(lt, T, j) * lt->other_vol : V;
            int64_t cj = Vj / D + (Vj % D != 0);
            int first_empty = Vj == 0 ? 0 : (int)((Vj + cj - 1) / cj);
            if (first_empty < dpo) {
                dpo = first_empty;
                tpo = j;
            }
            if (d < 0)
                break;
        }
    }
    sh->owner = ptc_config_rank(c, s0, dpo, tpo);
}

static int check_rank(const ptc_layout *l, size_t t, int rank)
{
    if (t >= l->n)
        return ptc_error_set(PTC_E_RANGE, "tensor index %zu outside 0..%zu", t, l->n);
    if (rank < 0 || rank >= ptc_config_world(&l->cfg))
        return ptc_error_set(PTC_E_RANGE, "rank %d outside 0..%d", rank,
                             ptc_config_world(&l->cfg) - 1);
    return PTC_OK;
}

int ptc_layout_shard(const ptc_layout *l, size_t t, int rank, ptc_shard *out)
{
    PTC_TRY(check_rank(l, t, rank));
    shard_compute(l, t, rank, out, NULL, 0);
    return PTC_OK;
}

int ptc_layout_pieces(const ptc_layout *l, size_t t, int rank, ptc_piece *pieces, size_t cap,
                      size_t *n)
{
    *n = 0;
    PTC_TRY(check_rank(l, t, rank));
    ptc_shard sh;
    shard_compute(l, t, rank, &sh, pieces, cap);
    *n = sh.npieces;
    if (sh.npieces > cap)
        return ptc_error_set(PTC_E_RANGE, "shard has %zu pieces, room for %zu", sh.npieces,
                             cap);
    return PTC_OK;
}

int ptc_layout_owners(const ptc_layout *l, size_t t, int *owners)
{
    PTC_TRY(check_rank(l, t, 0));
    if (l->ex) {
        l->ops->owners(l, t, owners);
        return PTC_OK;
    }
    const ltensor *lt = &l->t[t];
    const ptc_config *c = &l->cfg;
    int s0 = first_stage(lt, c->pp);
    int per_stage = c->dp * c->tp;
    for (int s = 0; s < c->pp; s++) {
        int *row = owners + (size_t)s * per_stage;
        if (!ptc_layout_on_stage(l, t, s)) {
            for (int r = 0; r < per_stage; r++)
                row[r] = -1;
        } else if (s > s0) {
            /* same shards as the first stage holding it */
            memcpy(row, owners + (size_t)s0 * per_stage, sizeof(int) * (size_t)per_stage);
        } else {
            for (int r = 0; r < per_stage; r++) {
                ptc_shard sh;
                if (!lt->zero && r >= c->tp) {
                    /* ordinary shards do not vary over dp */
                    row[r] = row[r % c->tp];
                    continue;
                }
                shard_compute(l, t, s * per_stage + r, &sh, NULL, 0);
                row[r] = sh.owner;
            }
        }
    }
    return PTC_OK;
}

int ptc_layout_groups(const ptc_layout *l, size_t t, ptc_shard_group **groups, size_t *n)
{
    *groups = NULL;
    *n = 0;
    PTC_TRY(check_rank(l, t, 0));
    int W = ptc_config_world(&l->cfg);
    int *own = ptc_malloc(sizeof(int) * 2 * (size_t)W);
    if (!own)
        return PTC_E_NOMEM;
    int *gidx = own + W;
    int rc = ptc_layout_owners(l, t, own);
    if (rc != PTC_OK)
        goto out_free_own;
    size_t ng = 0, npresent = 0;
    for (int r = 0; r < W; r++) {
        if (own[r] < 0)
            continue;
        npresent++;
        if (own[r] == r)
            gidx[r] = (int)ng++;
    }
    ptc_shard_group *g = ptc_malloc(sizeof *g * ng + sizeof(int) * npresent + 1);
    if (!g) {
        rc = PTC_E_NOMEM;
        goto out_free_own;
    }
    int *ranks = (int *)(g + ng);
    /* count, then place */
    for (size_t i = 0; i < ng; i++)
        g[i].nranks = 0;
    for (int r = 0; r < W; r++)
        if (own[r] >= 0)
            g[gidx[own[r]]].nranks++;
    size_t at = 0;
    for (int r = 0; r < W; r++)
        if (own[r] == r) {
            size_t i = (size_t)gidx[r];
            g[i].owner = r;
            g[i].ranks = ranks + at;
            at += g[i].nranks;
            g[i].nranks = 0;
        }
    for (int r = 0; r < W; r++)
        if (own[r] >= 0) {
            ptc_shard_group *gi = &g[gidx[own[r]]];
            ((int *)gi->ranks)[gi->nranks++] = r;
        }
    *groups = g;
    *n = ng;
out_free_own:
    ptc_free(own);
    return rc;
}

void ptc_layout_groups_free(ptc_shard_group *groups)
{
    ptc_free(groups);
}

/* ---- creation ------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Heads of a head-aware split against the shape and T: every block holds
 * whole heads of head_dim rows, and T divides each block's heads or (kv
 * heads) is a multiple of them, unless the rule says `cut`. */
static int check_heads(ltensor *lt, int T)
{
    char cb[96];
    const ptc_tensor_info *ti = &lt->info;
    const ptc_placement *pl = &lt->pl;
    const char *name = ptc_layout_clip(ti->name, cb);
    int64_t S = ti->shape[pl->dim];
    if (pl->nblocks == 0 && pl->nheads > 1) {
        int64_t sum = 0;
        for (int e = 0; e < pl->nheads; e++)
            sum += pl->heads[e]; /* each at most 2^62, at most 64 of them: no overflow */
        if (S % sum != 0)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s': dim %d of size %lld does not hold %lld whole "
                                 "heads", name, pl->dim, (long long)S, (long long)sum);
        lt->unit = S / sum;
        lt->nb = pl->nheads;
    }
    for (int b = 0; b < lt->nb; b++) {
        bool kv;
        int64_t h = block_heads(lt, b, &kv), size = block_size(lt, b);
        if (size % h != 0)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s': block %d of dim %d has %lld rows, not %lld whole "
                                 "heads", name, b, pl->dim, (long long)size, (long long)h);
        if (pl->head_dim && size / h != pl->head_dim)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s': block %d of dim %d holds %lld heads of %lld, "
                                 "not head_dim=%lld", name, b, pl->dim, (long long)h,
                                 (long long)(size / h), (long long)pl->head_dim);
        if (h % T == 0)
            continue;
        if (block_replicates(lt, b, T)) {
            lt->repl = true;
            continue;
        }
        if (pl->cut)
            continue;
        return ptc_error_set(PTC_E_RULE,
                             "tensor '%s': tp=%d would cut its %lld %sheads (dim %d%s): tp "
                             "must divide them%s, or the rule must say split(...,cut)", name, T,
                             (long long)h, kv ? "key/value " : "", pl->dim,
                             lt->nb > 1 ? ", a block" : "",
                             kv ? " or be a multiple of them" : "");
    }
    return PTC_OK;
}

/* Check shapes against the placement and tp; fill nb, other_vol, unit and
 * repl. Optimizer state with fewer dims than its parameter's split (Adam's
 * 0-d step) is replicated over tp. */
static int check_tensor(ltensor *lt, int T)
{
    char cb[96];
    const ptc_tensor_info *ti = &lt->info;
    ptc_placement *pl = &lt->pl;
    if (pl->tp == PTC_TP_SPLIT && pl->kind == PTC_KIND_OPTIM && pl->dim >= ti->ndim) {
        pl->tp = PTC_TP_REPLICATE;
        pl->dim = -1;
        pl->nblocks = 0;
        pl->blocks_equal = false;
        pl->nheads = 0;
        pl->kv = 0;
        pl->head_dim = 0;
        pl->cut = false;
    }
    lt->nb = 0;
    lt->other_vol = 1;
    lt->unit = 0;
    lt->repl = false;
    for (int e = 0; e < ti->ndim; e++)
        if (!(pl->tp == PTC_TP_SPLIT && e == pl->dim))
            lt->other_vol *= ti->shape[e];
    if (pl->tp != PTC_TP_SPLIT)
        return PTC_OK;
    if (pl->dim < 0 || pl->dim >= ti->ndim)
        return ptc_error_set(PTC_E_RULE, "tensor '%s': split dim %d but the tensor has %d dims",
                             ptc_layout_clip(ti->name, cb), pl->dim, ti->ndim);
    int64_t S = ti->shape[pl->dim];
    lt->nb = pl->nblocks ? pl->nblocks : 1;
    if (pl->nblocks && pl->blocks_equal && S % pl->nblocks != 0)
        return ptc_error_set(PTC_E_RULE,
                             "tensor '%s': dim %d of size %lld is not divisible into %d blocks",
                             ptc_layout_clip(ti->name, cb), pl->dim, (long long)S, pl->nblocks);
    if (pl->nblocks && !pl->blocks_equal) {
        int64_t sum = 0;
        bool over = false;
        for (int b = 0; b < pl->nblocks; b++)
            over |= ptc_add_overflow_i64(sum, pl->blocks[b], &sum);
        if (over || sum != S)
            return ptc_error_set(PTC_E_RULE,
                                 "tensor '%s': blocks sum to %s%lld but dim %d has size %lld",
                                 ptc_layout_clip(ti->name, cb), over ? "more than " : "",
                                 over ? (long long)INT64_MAX : (long long)sum, pl->dim,
                                 (long long)S);
    }
    if (pl->nheads)
        return check_heads(lt, T);
    return PTC_OK;
}

static int check_info(const ptc_tensor_info *ti, size_t i)
{
    char cb[96];
    if (!ti->name)
        return ptc_error_set(PTC_E_INVAL, "tensor %zu has no name", i);
    if (strlen(ti->name) > PTC_TENSOR_NAME_MAX)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s': name longer than %d bytes",
                             ptc_layout_clip(ti->name, cb), PTC_TENSOR_NAME_MAX);
    if ((unsigned)ti->dtype >= PTC_DTYPE_COUNT)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s': bad dtype %d",
                             ptc_layout_clip(ti->name, cb), (int)ti->dtype);
    if (ti->ndim < 0 || ti->ndim > PTC_MAX_DIMS)
        return ptc_error_set(PTC_E_INVAL, "tensor '%s': %d dims (0..%d allowed)",
                             ptc_layout_clip(ti->name, cb), ti->ndim, PTC_MAX_DIMS);
    /* the product of the nonzero extents: every partial product the layout
     * takes (the volume beside a split dim, a shard's) fits too, also for
     * an empty tensor (a zero extent) */
    int64_t v = 1;
    for (int e = 0; e < ti->ndim; e++) {
        if (ti->shape[e] < 0)
            return ptc_error_set(PTC_E_INVAL, "tensor '%s': negative extent in dim %d",
                                 ptc_layout_clip(ti->name, cb), e);
        if (ti->shape[e] && ptc_mul_overflow_i64(v, ti->shape[e], &v))
            return ptc_error_set(PTC_E_RANGE, "tensor '%s': element count overflows",
                                 ptc_layout_clip(ti->name, cb));
    }
    return PTC_OK;
}

/* Layer indices of pp=layer tensors must be exactly 0..n-1. */
static int count_layers(ptc_layout *l)
{
    char cb[96];
    size_t m = 0;
    for (size_t i = 0; i < l->n; i++)
        m += l->t[i].pl.pp == PTC_PP_LAYER;
    l->nlayers = 0;
    if (m == 0)
        return PTC_OK;
    int64_t *idx = ptc_malloc(sizeof *idx * m);
    if (!idx)
        return PTC_E_NOMEM;
    m = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->t[i].pl.pp == PTC_PP_LAYER)
            idx[m++] = l->t[i].pl.layer;
    qsort(idx, m, sizeof *idx, cmp_i64);
    int64_t n = 0;
    int rc = PTC_OK;
    for (size_t i = 0; i < m; i++) {
        if (i && idx[i] == idx[i - 1])
            continue;
        if (idx[i] != n) {
            /* name a tensor beyond the gap */
            for (size_t j = 0; j < l->n; j++)
                if (l->t[j].pl.pp == PTC_PP_LAYER && l->t[j].pl.layer == idx[i]) {
                    rc = ptc_error_set(PTC_E_RULE,
                                       "layer %lld is missing: tensor '%s' has layer %lld but "
                                       "layer indices must be 0..n-1", (long long)n,
                                       ptc_layout_clip(l->t[j].info.name, cb), (long long)idx[i]);
                    break;
                }
            goto out_free;
        }
        n++;
    }
    l->nlayers = n;
out_free:
    ptc_free(idx);
    return rc;
}

int ptc_layout_alloc(ptc_layout **out, const ptc_tensor_info *tensors, size_t n)
{
    char cb[96];
    *out = NULL;
    int rc = PTC_E_NOMEM;
    ptc_layout *l = ptc_calloc(1, sizeof *l);
    if (!l)
        return PTC_E_NOMEM;
    l->t = ptc_calloc(n ? n : 1, sizeof *l->t);
    size_t hsize = 16;
    while (hsize < 2 * n)
        hsize *= 2;
    l->hash = ptc_calloc(hsize, sizeof *l->hash);
    if (!l->t || !l->hash)
        goto out_destroy;
    l->hmask = hsize - 1;
    for (size_t i = 0; i < n; i++) {
        rc = check_info(&tensors[i], i);
        if (rc != PTC_OK)
            goto out_destroy;
        ltensor *lt = &l->t[i];
        lt->info = tensors[i];
        lt->info.name = ptc_strdup(tensors[i].name);
        if (!lt->info.name) {
            rc = PTC_E_NOMEM;
            goto out_destroy;
        }
        l->n = i + 1;
        size_t h = name_hash(lt->info.name) & l->hmask;
        for (; l->hash[h]; h = (h + 1) & l->hmask)
            if (strcmp(l->t[l->hash[h] - 1].info.name, lt->info.name) == 0) {
                rc = ptc_error_set(PTC_E_INVAL, "tensor '%s' is listed twice",
                                   ptc_layout_clip(lt->info.name, cb));
                goto out_destroy;
            }
        l->hash[h] = i + 1;
    }
    *out = l;
    return PTC_OK;
out_destroy:
    ptc_layout_destroy(l);
    return rc;
}

int ptc_layout_create(ptc_layout **out, const ptc_tensor_info *tensors, size_t n,
                      const ptc_rules *rules, const ptc_config *cfg)
{
    *out = NULL;
    if (cfg->dp < 1 || cfg->tp < 1 || cfg->pp < 1 ||
        (long long)cfg->dp * cfg->tp * cfg->pp > PTC_CONFIG_MAX_WORLD)
        return ptc_error_set(PTC_E_CONFIG, "bad configuration dp=%d tp=%d pp=%d", cfg->dp,
                             cfg->tp, cfg->pp);
    ptc_layout *l;
    int rc = ptc_layout_alloc(&l, tensors, n);
    if (rc != PTC_OK)
        return rc;
    l->cfg = *cfg;
    /* every name is known before any is resolved (unless= asks the collection) */
    for (size_t i = 0; i < n; i++) {
        ltensor *lt = &l->t[i];
        rc = ptc_rules_resolve_in(rules, lt->info.name, layout_has, l, &lt->pl);
        if (rc != PTC_OK)
            goto out_destroy;
        rc = check_tensor(lt, cfg->tp);
        if (rc != PTC_OK)
            goto out_destroy;
        lt->zero = cfg->zero && lt->pl.kind == PTC_KIND_OPTIM;
    }
    rc = count_layers(l);
    if (rc != PTC_OK)
        goto out_destroy;
    rc = ptc_config_check_layers(cfg, l->nlayers);
    if (rc != PTC_OK)
        goto out_destroy;
    for (size_t i = 0; i < n; i++) {
        ltensor *lt = &l->t[i];
        lt->stage = -1;
        if (lt->pl.pp == PTC_PP_LAYER) {
            rc = ptc_config_stage_of_layer(cfg, l->nlayers, lt->pl.layer, &lt->stage);
            if (rc != PTC_OK)
                goto out_destroy;
        }
    }
    *out = l;
    return PTC_OK;

out_destroy:
    ptc_layout_destroy(l);
    return rc;
}

/* ---- dry run --------------------------------------------------------------------- */

typedef struct tensor_list {
    const ptc_tensor_info *t;
    size_t n;
} tensor_list;

/* ptc_rules_has_fn over a plain tensor array (a dry run asks rarely). */
static bool list_has(const char *name, void *user)
{
    const tensor_list *tl = user;
    for (size_t i = 0; i < tl->n; i++)
        if (tl->t[i].name && strcmp(tl->t[i].name, name) == 0)
            return true;
    return false;
}

static void report(ptc_layout_problem_fn fn, void *user, const ptc_tensor_info *t, int code,
                   size_t *count)
{
    (*count)++;
    if (fn)
        fn(t, code, ptc_last_error(), user);
}

int ptc_layout_check(const ptc_tensor_info *tensors, size_t n, const ptc_rules *rules,
                     const ptc_config *cfg, ptc_layout_problem_fn fn, void *user,
                     size_t *nproblems)
{
    *nproblems = 0;
    tensor_list tl = {tensors, n};
    for (size_t i = 0; i < n; i++) {
        ltensor lt;
        memset(&lt, 0, sizeof lt);
        int rc = check_info(&tensors[i], i);
        if (rc == PTC_OK) {
            lt.info = tensors[i];
            rc = ptc_rules_resolve_in(rules, tensors[i].name, list_has, &tl, &lt.pl);
        }
        if (rc == PTC_OK)
            rc = check_tensor(&lt, cfg->tp);
        if (rc == PTC_E_NOMEM)
            return rc;
        if (rc != PTC_OK)
            report(fn, user, &tensors[i], rc, nproblems);
    }
    if (*nproblems)
        return PTC_OK;
    ptc_layout *l = NULL;
    int rc = ptc_layout_create(&l, tensors, n, rules, cfg);
    ptc_layout_destroy(l);
    if (rc == PTC_E_NOMEM)
        return rc;
    if (rc != PTC_OK)
        report(fn, user, NULL, rc, nproblems);
    return PTC_OK;
}
