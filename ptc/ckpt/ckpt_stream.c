/* Streamed local tensors (ptc_ckpt_stream): bytes that are not in host
 * memory cross in chunks through the caller's callbacks.
 *
 * Saving pulls an owned shard front to back into the store's block engine.
 * Reuse of an unchanged shard is decided as the bytes pass: where the
 * parent holds a shard of the same place (ptc_store_candidate_find), each
 * 1 MiB block's XXH3-64 is compared with the stored one and nothing is
 * written while they agree. Equal to the end: the shard references the
 * parent's bytes and nothing was written. The first difference: the shard
 * is written from its start, the equal prefix pulled a second time (for a
 * shard that changed at its first block, the usual case of a training step,
 * nothing is pulled twice). The bytes of one pull are hashed once while
 * comparing and once more by the block engine where they are written.
 *
 * Loading cuts each streamed destination into windows of the chunk size
 * (ranges of its row-major local buffer). A piece's elements lie in
 * increasing local order (its local strides are those of a row-major
 * tensor), so the ones whose local index falls in a window are a flat range
 * of the piece's own row-major order: found by bisection and cut into at most
 * 2·ndim-1 boxes (ptc_flat_to_boxes), each read with the store's box reader
 * straight into the window's host buffer, verifying blocks as they are read. */
#include <stdio.h>
#include <string.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

size_t ptc_ckpt_stream_chunk(const ptc_ckpt_stream *s, bool save)
{
    size_t c = s && s->chunk ? s->chunk : PTC_CKPT_STREAM_CHUNK;
    if (save) {
        const size_t BS = (size_t)PTC_STORE_BLOCK_SIZE;
        c = (c + BS - 1) / BS * BS;
    }
    return c;
}

int ptc_ckpt_io_bind(ptc_ckpt_io *io, uint8_t **tab, const ptc_layout *l, const int *ranks,
                     size_t nranks, const ptc_ckpt_local *locals, size_t n,
                     const ptc_ckpt_stream *stream, bool save)
{
    *tab = NULL;
    io->stream = stream;
    io->streamed = NULL;
    size_t nt = ptc_layout_count(l), j = 0;
    while (j < n && !locals[j].streamed)
        j++;
    if (j == n)
        return PTC_OK;
    if (!stream || (save ? !stream->pull || !stream->release
                         : !stream->acquire || !stream->push || !stream->release))
        return ptc_error_set(PTC_E_INVAL, "checkpoint: tensor '%s' on rank %d is streamed, but "
                                          "the options give no stream with the callbacks of a "
                                          "%s", locals[j].name, locals[j].rank,
                             save ? "save (pull, release)" : "load (acquire, push, release)");
    uint8_t *s = ptc_calloc(nranks * nt + 1, 1);
    if (!s)
        return PTC_E_NOMEM;
    for (; j < n; j++) {
        size_t t, i = 0;
        if (!locals[j].streamed)
            continue;
        while (i < nranks && ranks[i] != locals[j].rank)
            i++;
        /* ptc_ckpt_bind checked both already */
        if (i < nranks && ptc_layout_find(l, locals[j].name, &t) == PTC_OK)
            s[i * nt + t] = 1;
    }
    *tab = s;
    io->streamed = s;
    return PTC_OK;
}

/* ---- saving ------------------------------------------------------------------------------ */

/* Bytes of rank @p r's local tensor @p t where it owns its shard, else 0. */
static uint64_t owned_bytes(const ptc_layout *l, size_t t, int r)
{
    ptc_shard sh;
    if (ptc_layout_shard(l, t, r, &sh) < 0 || !sh.present || sh.owner != r)
        return 0;
    uint64_t b = ptc_dtype_size(ptc_layout_tensor(l, t)->dtype);
    for (int d = 0; d < sh.ndim; d++)
        b *= (uint64_t)sh.shape[d];
    return b;
}

int ptc_ckpt_stream_plan(const ptc_ckpt_io *io, const ptc_layout *l, const int *ranks,
                         size_t nranks, void *const *bufs)
{
    if (!io || !io->streamed || !io->stream->plan)
        return PTC_OK;
    size_t nt = ptc_layout_count(l), n = 0;
    void **tok = ptc_malloc(sizeof *tok * (nranks * nt + 1));
    uint64_t *bytes = ptc_malloc(sizeof *bytes * (nranks * nt + 1));
    int rc = tok && bytes ? PTC_OK : PTC_E_NOMEM;
    for (size_t i = 0; rc == PTC_OK && i < nranks; i++)
        for (size_t t = 0; t < nt; t++) {
            uint64_t b = ptc_ckpt_io_streamed(io, i, nt, t) ? owned_bytes(l, t, ranks[i]) : 0;
            if (b) {
                tok[n] = bufs[i * nt + t];
                bytes[n++] = b;
            }
        }
    if (rc == PTC_OK && n)
        rc = io->stream->plan(io->stream->user, tok, bytes, n);
    ptc_free(tok);
    ptc_free(bytes);
    return rc;
}

/* Pull [off, off + n) of @p tok and append it to the open shard of rank @p r. */
static int write_pulled(ptc_store_writer *w, const ptc_ckpt_stream *s, void *tok, int r,
                        uint64_t off, size_t n)
{
    const void *data;
    PTC_TRY(s->pull(s->user, tok, off, n, &data));
    int rc = ptc_store_shard_write(w, (uint32_t)r, data, n);
    s->release(s->user, tok, off, n);
    return rc;
}

/* Every block of the pulled range [off, off + n) equals the candidate's. */
static bool range_equal(const ptc_store_candidate *cand, uint64_t off, const uint8_t *data,
                        size_t n)
{
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    for (uint64_t at = 0; at < n; at += BS) {
        size_t m = (size_t)PTC_MIN(BS, n - at);
        if (!ptc_store_candidate_block(cand, (off + at) / BS, ptc_hash(data + at, m)))
            return false;
    }
    return true;
}

int ptc_ckpt_stream_write(ptc_store_writer *w, const ptc_ckpt_stream *s, void *tok,
                          const ptc_store_candidate *cand, size_t t, int r,
                          const ptc_shard *sh, const ptc_piece *pc, size_t np, uint64_t bytes)
{
    size_t chunk = ptc_ckpt_stream_chunk(s, true);
    bool comparing = cand != NULL, open = false;
    int rc = PTC_OK;
    for (uint64_t off = 0; off < bytes && rc == PTC_OK; off += chunk) {
        size_t n = (size_t)PTC_MIN((uint64_t)chunk, bytes - off);
        const void *data;
        PTC_TRY(s->pull(s->user, tok, off, n, &data));
        if (comparing && range_equal(cand, off, data, n)) {
            s->release(s->user, tok, off, n);
            continue;
        }
        if (!open) {
            /* the first difference (or no candidate): write from the start,
             * the ranges found equal so far pulled again */
            comparing = false;
            rc = ptc_store_shard_begin(w, (uint32_t)t, (uint32_t)r, sh->ndim, sh->shape, pc, np);
            open = rc == PTC_OK;
            for (uint64_t at = 0; rc == PTC_OK && at < off; at += chunk)
                rc = write_pulled(w, s, tok, r, at, chunk);
        }
        if (rc == PTC_OK)
            rc = ptc_store_shard_write(w, (uint32_t)r, data, n);
        s->release(s->user, tok, off, n);
    }
    if (rc < 0)
        return rc; /* an open shard goes with the writer */
    if (comparing)
        return ptc_store_shard_reuse(w, (uint32_t)t, (uint32_t)r, cand->rd, cand->st, cand->rank);
    if (!open) /* no bytes */
        PTC_TRY(ptc_store_shard_begin(w, (uint32_t)t, (uint32_t)r, sh->ndim, sh->shape, pc, np));
    return ptc_store_shard_end(w, (uint32_t)r);
}

/* ---- loading: windows ---------------------------------------------------------------------- */

/* Local element index of the @p u-th element (row-major) of piece @p p. */
static int64_t image(const ptc_piece *p, const int64_t *ext, int64_t u)
{
    int64_t at = p->local_offset;
    for (int d = p->box.ndim - 1; d >= 0; d--) {
        at += (u % ext[d]) * p->local_stride[d];
        u /= ext[d];
    }
    return at;
}

/* The first element (row-major) of piece @p p, of @p vol, whose local index
 * is >= @p x (vol when none). */
static int64_t first_at(const ptc_piece *p, const int64_t *ext, int64_t vol, int64_t x)
{
    int64_t lo = 0, hi = vol;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (image(p, ext, mid) >= x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The piece's local indices grow with its row-major order (every layout's
 * pieces do: their strides are a row-major tensor's). */
static bool ordered(const ptc_piece *p, const int64_t *ext)
{
    int64_t span = 0; /* the local distance its inner dims cover */
    for (int d = p->box.ndim - 1; d >= 0; d--) {
        if (ext[d] <= 1)
            continue;
        if (p->local_stride[d] <= span)
            return false;
        span += (ext[d] - 1) * p->local_stride[d];
    }
    return true;
}

static int add_part(ptc_ckpt_windows *ws, const ptc_ckpt_part *part)
{
    PTC_TRY(ptc_grow((void **)&ws->p, &ws->pcap, ws->np + 1, sizeof *ws->p));
    ws->p[ws->np++] = *part;
    return PTC_OK;
}

/* The parts of piece @p p in the window of local elements [a, b). */
static int window_parts(ptc_ckpt_windows *ws, const ptc_piece *p, const int64_t *ext,
                        int64_t vol, uint32_t st, int64_t a, int64_t b, size_t es)
{
    if (image(p, ext, 0) >= b || image(p, ext, vol - 1) < a)
        return PTC_OK;
    int64_t u0 = first_at(p, ext, vol, a), u1 = first_at(p, ext, vol, b);
    ptc_box boxes[2 * PTC_MAX_DIMS];
    size_t nb;
    PTC_TRY(ptc_flat_to_boxes(boxes, &nb, p->box.ndim, ext, u0, u1));
    for (size_t k = 0; k < nb; k++) {
        ptc_ckpt_part part = {.st = st, .box = boxes[k]};
        int64_t first = 0;
        for (int d = 0; d < p->box.ndim; d++) {
            first = first * ext[d] + boxes[k].lo[d];
            part.box.lo[d] += p->box.lo[d];
            part.box.hi[d] += p->box.lo[d];
            part.stride[d] = p->local_stride[d];
        }
        part.at = (uint64_t)(image(p, ext, first) - a) * es;
        PTC_TRY(add_part(ws, &part));
    }
    return PTC_OK;
}

int ptc_ckpt_windows_add(ptc_ckpt_windows *ws, const ptc_layout *l, size_t t, uint32_t st,
                         const ptc_piece *pc, size_t np, void *tok, size_t chunk)
{
    size_t es = ptc_dtype_size(ptc_layout_tensor(l, t)->dtype);
    int64_t total = 0;
    int64_t *pext = ptc_malloc(sizeof *pext * PTC_MAX_DIMS * (np + 1)), *pvol = NULL;
    if (!pext || !(pvol = ptc_malloc(sizeof *pvol * (np + 1)))) {
        ptc_free(pext);
        return PTC_E_NOMEM;
    }
    int rc = PTC_OK;
    for (size_t k = 0; k < np && rc == PTC_OK; k++) {
        int64_t *e = pext + k * PTC_MAX_DIMS;
        for (int d = 0; d < pc[k].box.ndim; d++)
            e[d] = pc[k].box.hi[d] - pc[k].box.lo[d];
        pvol[k] = ptc_box_volume(&pc[k].box);
        total += pvol[k];
        if (pvol[k] && !ordered(&pc[k], e))
            rc = ptc_error_set(PTC_E_INVAL, "checkpoint: a piece of tensor '%.200s' is not in "
                                            "row-major order in its local tensor",
                               ptc_layout_tensor(l, t)->name);
    }
    int64_t wel = PTC_MAX((int64_t)1, (int64_t)(chunk / es));
    for (int64_t a = 0; rc == PTC_OK && a < total; a += wel) {
        int64_t b = PTC_MIN(total, a + wel);
        ptc_ckpt_window win = {.tok = tok, .off = (uint64_t)a * es, .n = (uint64_t)(b - a) * es,
                               .first = ws->np};
        for (size_t k = 0; k < np && rc == PTC_OK; k++)
            if (pvol[k])
                rc = window_parts(ws, &pc[k], pext + k * PTC_MAX_DIMS, pvol[k], st, a, b, es);
        win.count = ws->np - win.first;
        if (rc == PTC_OK &&
            (rc = ptc_grow((void **)&ws->w, &ws->cap, ws->n + 1, sizeof *ws->w)) == PTC_OK)
            ws->w[ws->n++] = win;
    }
    ptc_free(pext);
    ptc_free(pvol);
    return rc;
}

int ptc_ckpt_window_run(const ptc_ckpt_windows *ws, const ptc_store_reader *rd,
                        const ptc_ckpt_stream *s, size_t i)
{
    const ptc_ckpt_window *w = &ws->w[i];
    void *buf;
    PTC_TRY(s->acquire(s->user, w->tok, w->off, (size_t)w->n, &buf));
    int rc = PTC_OK;
    for (size_t k = 0; k < w->count && rc == PTC_OK; k++) {
        const ptc_ckpt_part *p = &ws->p[w->first + k];
        rc = ptc_store_reader_read_box(rd, p->st, &p->box, (uint8_t *)buf + p->at, p->stride);
    }
    if (rc == PTC_OK)
        return s->push(s->user, w->tok, w->off, (size_t)w->n);
    s->release(s->user, w->tok, w->off, (size_t)w->n);
    return rc;
}

void ptc_ckpt_windows_free(ptc_ckpt_windows *ws)
{
    ptc_free(ws->w);
    ptc_free(ws->p);
    memset(ws, 0, sizeof *ws);
}
