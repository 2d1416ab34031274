/* The one writer of a layout rank's shards (store_ranks.h): aliases for
 * shards another rank owns, references to stored shards that did not
 * change, and the rest written by the caller's source. */
#include <string.h>

#include <xxhash.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

/* The owner of rank @p r's shard @p sh in a store that holds the ranks
 * @p local marks: the layout's owner if held, else the lowest held rank
 * whose shard has the same owner (identical shards share their owner). */
static int local_owner(const ptc_layout *l, size_t t, int r, const ptc_shard *sh,
                       const uint8_t *local, int *owner)
{
    *owner = sh->owner;
    if (!local || local[sh->owner])
        return PTC_OK;
    for (int q = sh->owner + 1; q < r; q++) {
        ptc_shard o;
        if (!local[q])
            continue;
        PTC_TRY(ptc_layout_shard(l, t, q, &o));
        if (o.present && o.owner == sh->owner) {
            *owner = q;
            return PTC_OK;
        }
    }
    *owner = r;
    return PTC_OK;
}

int ptc_store_write_rank(ptc_store_writer *w, const ptc_layout *l, int r, size_t t_lo,
                         size_t t_hi, const ptc_rank_source *src, ptc_rank_counts *counts)
{
    ptc_rank_counts n = {0};
    ptc_piece *pc = NULL;
    size_t cap = 0;
    int rc = PTC_OK;
    for (size_t t = t_lo; t < t_hi && rc == PTC_OK; t++) {
        ptc_shard sh;
        size_t np;
        if ((rc = ptc_layout_shard(l, t, r, &sh)) < 0)
            break;
        if (!sh.present)
            continue;
        int owner;
        if ((rc = local_owner(l, t, r, &sh, src->local, &owner)) < 0)
            break;
        if (owner != r) {
            rc = ptc_store_shard_alias(w, (uint32_t)t, (uint32_t)r, (uint32_t)owner);
            n.aliased++;
            continue;
        }
        if ((rc = ptc_grow((void **)&pc, &cap, sh.npieces + 1, sizeof *pc)) < 0 ||
            (rc = ptc_layout_pieces(l, t, r, pc, cap, &np)) < 0)
            break;
        const ptc_store_reader *rd = NULL;
        size_t st = 0;
        int64_t from = -1;
        if (src->find && (rc = src->find(src->user, t, r, &sh, pc, np, &rd, &st, &from)) < 0)
            break;
        if (from >= 0) {
            rc = ptc_store_shard_reuse(w, (uint32_t)t, (uint32_t)r, rd, st, (uint32_t)from);
            if (rc == PTC_E_CHECKSUM || rc == PTC_E_IO) {
                /* the stored copy went bad: store the source's bytes again (a
                 * source that reads the same copy reports the damage) */
                ptc_log(PTC_LOG_WARN, "%s; writing the shard again", ptc_last_error());
                rc = src->write(src->user, w, t, r, &sh, pc, np);
                n.written++;
                n.rewritten++;
            } else {
                n.reused++;
            }
        } else {
            rc = src->write(src->user, w, t, r, &sh, pc, np);
            n.written++;
        }
    }
    ptc_free(pc);
    if (counts) {
        counts->written += n.written;
        counts->reused += n.reused;
        counts->aliased += n.aliased;
        counts->rewritten += n.rewritten;
    }
    return rc;
}

/* Same local tensor and the same pieces (strides compared where they
 * matter: along dimensions of extent > 1). */
static bool same_place(const ptc_shard_rec *rec, const ptc_shard *sh, const ptc_piece *pc)
{
    if (rec->kind != PTC_SHARD_DATA || rec->local_ndim != sh->ndim ||
        rec->npieces != sh->npieces)
        return false;
    for (int d = 0; d < sh->ndim; d++)
        if (rec->local_shape[d] != sh->shape[d])
            return false;
    for (size_t k = 0; k < sh->npieces; k++) {
        const ptc_piece *a = &rec->pieces[k], *b = &pc[k];
        if (!ptc_box_equal(&a->box, &b->box) || a->local_offset != b->local_offset)
            return false;
        for (int d = 0; d < a->box.ndim; d++)
            if (a->box.hi[d] - a->box.lo[d] > 1 && a->local_stride[d] != b->local_stride[d])
                return false;
    }
    return true;
}

/* The stored blocks' checksums equal the buffer's. */
static bool same_bytes(const ptc_shard_rec *rec, const uint8_t *buf, uint64_t bytes)
{
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    if (rec->raw_length != bytes || rec->nblocks != (bytes + BS - 1) / BS)
        return false;
    for (uint64_t k = 0; k < rec->nblocks; k++) {
        size_t n = (size_t)PTC_MIN(BS, bytes - k * BS);
        if (XXH3_64bits(buf + k * BS, n) != rec->blocks[k].xxh3)
            return false;
    }
    return true;
}

int64_t ptc_store_find_unchanged(const ptc_store_reader *parent, const ptc_layout *l, size_t t,
                                 int r, const ptc_shard *sh, const ptc_piece *pc,
                                 const void *buf, uint64_t bytes, size_t *pt)
{
    const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
    if (ptc_store_reader_find(parent, ti->name, strlen(ti->name), pt) != PTC_OK) {
        ptc_error_clear();
        return -1;
    }
    ptc_store_tensor st;
    if (ptc_store_reader_tensor(parent, *pt, &st) != PTC_OK || st.dtype != ti->dtype ||
        st.ndim != ti->ndim)
        return -1;
    for (int d = 0; d < ti->ndim; d++)
        if (st.shape[d] != ti->shape[d])
            return -1;
    const ptc_shard_rec *rec;
    if (ptc_store_reader_rec(parent, *pt, (uint32_t)r, true, &rec) == PTC_OK) {
        if (same_place(rec, sh, pc) && same_bytes(rec, buf, bytes))
            return r;
    } else {
        ptc_error_clear();
        rec = NULL;
    }
    const ptc_shard_rec *all;
    size_t n;
    ptc_store_reader_recs(parent, *pt, &all, &n);
    for (size_t i = 0; i < n; i++)
        if (&all[i] != rec && same_place(&all[i], sh, pc) && same_bytes(&all[i], buf, bytes))
            return all[i].rank;
    return -1;
}

/* Mark the (tensor, rank) cells the descriptors hold. */
static int mark_cells(const void *desc, size_t len, size_t nt, size_t world, uint8_t *seen)
{
    uint64_t v;
    ptc_shard_rec *recs;
    size_t n;
    PTC_TRY(ptc_desc_decode(desc, len, &v, &recs, &n));
    for (size_t i = 0; i < n; i++) {
        if (recs[i].tensor < nt && recs[i].rank < world)
            seen[(size_t)recs[i].tensor * world + recs[i].rank] = 1;
        ptc_shard_rec_free(&recs[i]);
    }
    ptc_free(recs);
    return PTC_OK;
}

int ptc_store_check_coverage(const ptc_layout *l, const void *const *descs, const size_t *lens,
                             size_t n, const uint8_t *want)
{
    size_t nt = ptc_layout_count(l), world = (size_t)ptc_config_world(ptc_layout_config(l));
    uint8_t *seen = ptc_calloc(nt * world + 1, 1);
    if (!seen)
        return PTC_E_NOMEM;
    int rc = PTC_OK;
    for (size_t i = 0; i < n && rc == PTC_OK; i++)
        if ((rc = mark_cells(descs[i], lens[i], nt, world, seen)) < 0)
            rc = ptc_error_set(rc, "checkpoint descriptor %zu: %s", i, ptc_last_error());
    for (size_t t = 0; t < nt && rc == PTC_OK; t++)
        for (size_t r = 0; r < world && rc == PTC_OK; r++) {
            if (seen[t * world + r] || (want && !want[r]))
                continue;
            ptc_shard sh;
            if ((rc = ptc_layout_shard(l, t, (int)r, &sh)) == PTC_OK && sh.present)
                rc = ptc_error_set(PTC_E_INVAL,
                                   "checkpoint: rank %zu's shard of tensor '%.200s' is missing "
                                   "(no process wrote rank %zu)",
                                   r, ptc_layout_tensor(l, t)->name, r);
        }
    ptc_free(seen);
    return rc;
}
