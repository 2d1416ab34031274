/* Encoding of the store's LMDB keys and values and of descriptor buffers
 * (docs/format.md). Keys are big-endian so LMDB's byte order sorts them by
 * number; values are little-endian. Decoders treat their input as untrusted:
 * a corrupt store or a bad descriptor buffer is an error, never a crash. */
#include <string.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

/* ---- keys ------------------------------------------------------------------- */

static void be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void be32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

void ptc_key_version(uint8_t out[8], uint64_t v)
{
    be64(out, v);
}

void ptc_key_tensor(uint8_t out[12], uint64_t v, uint32_t t)
{
    be64(out, v);
    be32(out + 8, t);
}

void ptc_key_shard(uint8_t out[16], uint64_t v, uint32_t t, uint32_t rank)
{
    be64(out, v);
    be32(out + 8, t);
    be32(out + 12, rank);
}

uint64_t ptc_key_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

uint64_t ptc_le_get(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

uint32_t ptc_key_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = (v << 8) | p[i];
    return v;
}

/* ---- version record ------------------------------------------------------------ */

/* Record format 1: the fields up to metadata. Format 2 (store format 2)
 * adds shard_count and digest (docs/format.md §2.2); a writer writes 2. */
#define VERSION_REC_FORMAT 2u

int ptc_version_rec_encode(ptc_buf *b, const ptc_version_rec *r)
{
    PTC_TRY(ptc_buf_u32(b, VERSION_REC_FORMAT));
    PTC_TRY(ptc_buf_u32(b, r->state));
    PTC_TRY(ptc_buf_u64(b, r->parent));
    PTC_TRY(ptc_buf_u64(b, (uint64_t)r->created_unix_ns));
    PTC_TRY(ptc_buf_u64(b, r->tensor_count));
    PTC_TRY(ptc_buf_u64(b, r->bytes));
    PTC_TRY(ptc_buf_u64(b, r->stored_bytes));
    const char *s[4] = {r->step, r->config, r->rules, r->metadata_json};
    for (int i = 0; i < 4; i++)
        PTC_TRY(ptc_buf_str(b, s[i] ? s[i] : "", s[i] ? strlen(s[i]) : 0));
    PTC_TRY(ptc_buf_u64(b, r->shard_count));
    return ptc_buf_u64(b, r->digest);
}

int ptc_version_rec_decode(ptc_version_rec *v, const void *data, size_t len)
{
    memset(v, 0, sizeof *v);
    ptc_rd r = {data, len, 0, "version record"};
    uint32_t fmt;
    uint64_t created;
    int rc;
    if ((rc = ptc_rd_u32(&r, &fmt, "format")) < 0)
        goto out_free;
    if (fmt != 1 && fmt != VERSION_REC_FORMAT) {
        rc = ptc_error_set(PTC_E_FORMAT, "version record: unknown record format %u", fmt);
        goto out_free;
    }
    v->record_format = fmt;
    if ((rc = ptc_rd_u32(&r, &v->state, "state")) < 0 ||
        (rc = ptc_rd_u64(&r, &v->parent, "parent")) < 0 ||
        (rc = ptc_rd_u64(&r, &created, "created")) < 0 ||
        (rc = ptc_rd_u64(&r, &v->tensor_count, "tensor_count")) < 0 ||
        (rc = ptc_rd_u64(&r, &v->bytes, "bytes")) < 0 ||
        (rc = ptc_rd_u64(&r, &v->stored_bytes, "stored_bytes")) < 0 ||
        (rc = ptc_rd_str(&r, &v->step, NULL, "step")) < 0 ||
        (rc = ptc_rd_str(&r, &v->config, NULL, "config")) < 0 ||
        (rc = ptc_rd_str(&r, &v->rules, NULL, "rules")) < 0 ||
        (rc = ptc_rd_str(&r, &v->metadata_json, NULL, "metadata")) < 0)
        goto out_free;
    if (fmt >= 2 && ((rc = ptc_rd_u64(&r, &v->shard_count, "shard_count")) < 0 ||
                     (rc = ptc_rd_u64(&r, &v->digest, "digest")) < 0))
        goto out_free;
    if ((rc = ptc_rd_end(&r)) < 0)
        goto out_free;
    v->created_unix_ns = (int64_t)created;
    return PTC_OK;
out_free:
    ptc_version_rec_free(v);
    return rc;
}

void ptc_version_rec_free(ptc_version_rec *v)
{
    ptc_free(v->step);
    ptc_free(v->config);
    ptc_free(v->rules);
    ptc_free(v->metadata_json);
    memset(v, 0, sizeof *v);
}

/* ---- tensor record --------------------------------------------------------------- */

int ptc_tensor_rec_encode(ptc_buf *b, const ptc_tensor_rec *t)
{
    PTC_TRY(ptc_buf_u32(b, t->dtype));
    PTC_TRY(ptc_buf_u32(b, (uint32_t)t->ndim));
    for (int d = 0; d < t->ndim; d++)
        PTC_TRY(ptc_buf_u64(b, (uint64_t)t->shape[d]));
    PTC_TRY(ptc_buf_str(b, t->name, t->name_len));
    const char *pl = t->placement ? t->placement : "";
    return ptc_buf_str(b, pl, strlen(pl));
}

int ptc_tensor_rec_decode(ptc_tensor_rec *t, const void *data, size_t len)
{
    memset(t, 0, sizeof *t);
    ptc_rd r = {data, len, 0, "tensor record"};
    uint32_t nd;
    int rc;
    if ((rc = ptc_rd_u32(&r, &t->dtype, "dtype")) < 0 || (rc = ptc_rd_u32(&r, &nd, "ndim")) < 0)
        goto out_free;
    if (t->dtype >= PTC_DTYPE_COUNT || nd > PTC_MAX_DIMS) {
        rc = ptc_error_set(PTC_E_FORMAT, "tensor record: bad dtype %u or ndim %u", t->dtype,
                           nd);
        goto out_free;
    }
    t->ndim = (int)nd;
    int64_t vol = 1;
    for (int d = 0; d < t->ndim; d++) {
        if ((rc = ptc_rd_i64(&r, &t->shape[d], "shape")) < 0)
            goto out_free;
        if (t->shape[d] < 0 || ptc_mul_overflow_i64(vol, t->shape[d], &vol)) {
            rc = ptc_error_set(PTC_E_FORMAT, "tensor record: bad shape");
            goto out_free;
        }
    }
    if ((rc = ptc_rd_str(&r, &t->name, &t->name_len, "name")) < 0 ||
        (rc = ptc_rd_str(&r, &t->placement, NULL, "placement")) < 0 || (rc = ptc_rd_end(&r)) < 0)
        goto out_free;
    if (t->name_len == 0 || t->name_len > PTC_STORE_MAX_NAME ||
        memchr(t->name, 0, t->name_len)) {
        rc = ptc_error_set(PTC_E_FORMAT, "tensor record: bad name length %u", t->name_len);
        goto out_free;
    }
    return PTC_OK;
out_free:
    ptc_tensor_rec_free(t);
    return rc;
}

void ptc_tensor_rec_free(ptc_tensor_rec *t)
{
    ptc_free(t->name);
    ptc_free(t->placement);
    memset(t, 0, sizeof *t);
}

/* ---- shard record ------------------------------------------------------------------ */

int ptc_shard_rec_encode(ptc_buf *b, const ptc_shard_rec *s)
{
    PTC_TRY(ptc_buf_u32(b, s->kind));
    PTC_TRY(ptc_buf_u32(b, s->kind == PTC_SHARD_ALIAS ? s->alias_rank : 0));
    if (s->kind == PTC_SHARD_ALIAS)
        return PTC_OK;
    PTC_TRY(ptc_buf_u64(b, s->pack_version));
    PTC_TRY(ptc_buf_u32(b, s->pack_rank));
    PTC_TRY(ptc_buf_u32(b, s->codec));
    PTC_TRY(ptc_buf_u64(b, s->offset));
    PTC_TRY(ptc_buf_u64(b, s->length));
    PTC_TRY(ptc_buf_u64(b, s->raw_length));
    PTC_TRY(ptc_buf_u32(b, (uint32_t)s->local_ndim));
    PTC_TRY(ptc_buf_u32(b, s->npieces));
    PTC_TRY(ptc_buf_u64(b, s->nblocks));
    for (int d = 0; d < s->local_ndim; d++)
        PTC_TRY(ptc_buf_u64(b, (uint64_t)s->local_shape[d]));
    for (uint32_t i = 0; i < s->npieces; i++)
        PTC_TRY(ptc_buf_piece(b, &s->pieces[i]));
    for (uint64_t i = 0; i < s->nblocks; i++) {
        PTC_TRY(ptc_buf_u64(b, s->blocks[i].xxh3));
        PTC_TRY(ptc_buf_u32(b, s->blocks[i].stored));
        PTC_TRY(ptc_buf_u32(b, s->blocks[i].codec));
    }
    return PTC_OK;
}

static int shard_fail(const char *msg)
{
    return ptc_error_set(PTC_E_FORMAT, "shard record: %s", msg);
}

int ptc_shard_rec_decode(ptc_shard_rec *s, const void *data, size_t len)
{
    uint32_t tensor = s->tensor, rank = s->rank; /* set by the caller from the key */
    memset(s, 0, sizeof *s);
    s->tensor = tensor;
    s->rank = rank;
    ptc_rd r = {data, len, 0, "shard record"};
    int rc;
    uint32_t nd;
    if ((rc = ptc_rd_u32(&r, &s->kind, "kind")) < 0 ||
        (rc = ptc_rd_u32(&r, &s->alias_rank, "alias")) < 0)
        goto out_free;
    if (s->kind == PTC_SHARD_ALIAS)
        return ptc_rd_end(&r);
    if (s->kind != PTC_SHARD_DATA) {
        rc = shard_fail("unknown kind");
        goto out_free;
    }
    if ((rc = ptc_rd_u64(&r, &s->pack_version, "pack_version")) < 0 ||
        (rc = ptc_rd_u32(&r, &s->pack_rank, "pack_rank")) < 0 ||
        (rc = ptc_rd_u32(&r, &s->codec, "codec")) < 0 ||
        (rc = ptc_rd_u64(&r, &s->offset, "offset")) < 0 ||
        (rc = ptc_rd_u64(&r, &s->length, "length")) < 0 ||
        (rc = ptc_rd_u64(&r, &s->raw_length, "raw_length")) < 0 ||
        (rc = ptc_rd_u32(&r, &nd, "local_ndim")) < 0 ||
        (rc = ptc_rd_u32(&r, &s->npieces, "npieces")) < 0 ||
        (rc = ptc_rd_u64(&r, &s->nblocks, "nblocks")) < 0)
        goto out_free;
    if (nd > PTC_MAX_DIMS) {
        rc = shard_fail("local ndim > 8");
        goto out_free;
    }
    if (s->codec > PTC_STORE_CODEC_ZSTD || s->pack_version == 0) {
        rc = shard_fail("bad codec or pack version");
        goto out_free;
    }
    if (s->offset > INT64_MAX || s->length > INT64_MAX - s->offset ||
        s->raw_length > INT64_MAX) {
        rc = shard_fail("extent out of range");
        goto out_free;
    }
    s->local_ndim = (int)nd;
    for (int d = 0; d < s->local_ndim; d++)
        if ((rc = ptc_rd_i64(&r, &s->local_shape[d], "local_shape")) < 0)
            goto out_free;
    /* each piece takes at least 16 bytes, each block exactly 16 */
    if (s->npieces > (r.len - r.pos) / 16) {
        rc = shard_fail("piece count exceeds record");
        goto out_free;
    }
    uint64_t want_blocks = (s->raw_length + PTC_STORE_BLOCK_SIZE - 1) / PTC_STORE_BLOCK_SIZE;
    if (s->nblocks != want_blocks) {
        rc = shard_fail("block count does not match raw length");
        goto out_free;
    }
    if (s->npieces) {
        s->pieces = ptc_calloc(s->npieces, sizeof *s->pieces);
        if (!s->pieces) {
            rc = PTC_E_NOMEM;
            goto out_free;
        }
    }
    for (uint32_t i = 0; i < s->npieces; i++)
        if ((rc = ptc_rd_piece(&r, &s->pieces[i], "piece")) < 0)
            goto out_free;
    if (s->nblocks != (r.len - r.pos) / 16 || (r.len - r.pos) % 16) {
        rc = shard_fail("block table length does not match block count");
        goto out_free;
    }
    if (s->nblocks) {
        s->blocks = ptc_calloc(s->nblocks, sizeof *s->blocks);
        if (!s->blocks) {
            rc = PTC_E_NOMEM;
            goto out_free;
        }
    }
    uint64_t total = 0;
    for (uint64_t i = 0; i < s->nblocks; i++) {
        ptc_block *b = &s->blocks[i];
        if ((rc = ptc_rd_u64(&r, &b->xxh3, "block hash")) < 0 ||
            (rc = ptc_rd_u32(&r, &b->stored, "block length")) < 0 ||
            (rc = ptc_rd_u32(&r, &b->codec, "block codec")) < 0)
            goto out_free;
        uint64_t raw = i + 1 < s->nblocks ? PTC_STORE_BLOCK_SIZE
                                          : s->raw_length - i * PTC_STORE_BLOCK_SIZE;
        if (b->codec > PTC_BLOCK_ZSTD || (b->codec == PTC_BLOCK_RAW && b->stored != raw) ||
            (b->codec == PTC_BLOCK_ZSTD && (b->stored == 0 || b->stored > raw))) {
            rc = shard_fail("bad block length or codec");
            goto out_free;
        }
        total += b->stored;
    }
    if (total != s->length) {
        rc = shard_fail("block lengths do not add up to the shard length");
        goto out_free;
    }
    return ptc_rd_end(&r);
out_free:
    ptc_shard_rec_free(s);
    return rc;
}

void ptc_shard_rec_free(ptc_shard_rec *s)
{
    ptc_free(s->pieces);
    ptc_free(s->blocks);
    ptc_free(s->block_off);
    s->pieces = NULL;
    s->blocks = NULL;
    s->block_off = NULL;
    s->npieces = 0;
    s->nblocks = 0;
}

int ptc_shard_rec_check(const ptc_shard_rec *s, int ndim, const int64_t *shape,
                        size_t elem_size)
{
    if (s->kind != PTC_SHARD_DATA)
        return PTC_OK;
    if (s->local_ndim < 0 || s->local_ndim > PTC_MAX_DIMS)
        return ptc_error_set(PTC_E_INVAL, "shard: bad local ndim %d", s->local_ndim);
    int64_t vol = 1, bytes;
    for (int d = 0; d < s->local_ndim; d++)
        if (s->local_shape[d] < 0 || ptc_mul_overflow_i64(vol, s->local_shape[d], &vol))
            return ptc_error_set(PTC_E_INVAL, "shard: bad local shape");
    if (ptc_mul_overflow_i64(vol, (int64_t)elem_size, &bytes) || (uint64_t)bytes != s->raw_length)
        return ptc_error_set(PTC_E_INVAL, "shard: raw length %llu does not match local shape",
                             (unsigned long long)s->raw_length);
    for (uint32_t i = 0; i < s->npieces; i++)
        if (ptc_piece_check(&s->pieces[i], ndim, shape, vol) != PTC_OK)
            return ptc_error_set(PTC_E_INVAL, "shard piece %u: %s", i, ptc_last_error());
    return PTC_OK;
}

/* ---- descriptor buffers ------------------------------------------------------------- */

#define DESC_FORMAT 1u

int ptc_desc_encode(ptc_buf *b, uint64_t version, const ptc_shard_rec *const *recs, size_t n)
{
    PTC_TRY(ptc_buf_put(b, PTC_DESC_MAGIC, 8));
    PTC_TRY(ptc_buf_u32(b, DESC_FORMAT));
    PTC_TRY(ptc_buf_u32(b, 0));
    PTC_TRY(ptc_buf_u64(b, version));
    PTC_TRY(ptc_buf_u64(b, n));
    for (size_t i = 0; i < n; i++) {
        PTC_TRY(ptc_buf_u32(b, recs[i]->tensor));
        PTC_TRY(ptc_buf_u32(b, recs[i]->rank));
        size_t at = b->len;
        PTC_TRY(ptc_buf_u32(b, 0)); /* length, patched below */
        PTC_TRY(ptc_shard_rec_encode(b, recs[i]));
        size_t rl = b->len - at - 4;
        if (rl > UINT32_MAX)
            return ptc_error_set(PTC_E_INVAL, "shard descriptor too large");
        for (int k = 0; k < 4; k++)
            b->p[at + (size_t)k] = (uint8_t)(rl >> (8 * k));
    }
    return PTC_OK;
}

int ptc_desc_decode(const void *data, size_t len, uint64_t *version, ptc_shard_rec **out,
                    size_t *nout)
{
    *out = NULL;
    *nout = 0;
    ptc_rd r = {data, len, 0, "descriptor buffer"};
    uint32_t fmt, pad;
    uint64_t n;
    if (len < 8 || memcmp(data, PTC_DESC_MAGIC, 8) != 0)
        return ptc_error_set(PTC_E_FORMAT, "descriptor buffer: bad magic");
    r.pos = 8;
    PTC_TRY(ptc_rd_u32(&r, &fmt, "format"));
    PTC_TRY(ptc_rd_u32(&r, &pad, "reserved"));
    if (fmt != DESC_FORMAT)
        return ptc_error_set(PTC_E_FORMAT, "descriptor buffer: unknown format %u", fmt);
    PTC_TRY(ptc_rd_u64(&r, version, "version"));
    PTC_TRY(ptc_rd_u64(&r, &n, "count"));
    if (n > (len - r.pos) / 20) /* each entry: 12-byte head + at least 8 */
        return ptc_error_set(PTC_E_FORMAT, "descriptor buffer: count %llu exceeds buffer",
                             (unsigned long long)n);
    ptc_shard_rec *recs = NULL;
    if (n) {
        recs = ptc_calloc((size_t)n, sizeof *recs);
        if (!recs)
            return PTC_E_NOMEM;
    }
    int rc = PTC_OK;
    size_t done = 0;
    for (; done < n; done++) {
        uint32_t t, rank, rl;
        if ((rc = ptc_rd_u32(&r, &t, "tensor")) < 0 || (rc = ptc_rd_u32(&r, &rank, "rank")) < 0 ||
            (rc = ptc_rd_u32(&r, &rl, "length")) < 0)
            goto out_free;
        if (rl > r.len - r.pos) {
            rc = ptc_rd_fail(&r, "record");
            goto out_free;
        }
        recs[done].tensor = t;
        recs[done].rank = rank;
        if ((rc = ptc_shard_rec_decode(&recs[done], r.p + r.pos, rl)) < 0)
            goto out_free;
        r.pos += rl;
    }
    if ((rc = ptc_rd_end(&r)) < 0)
        goto out_free;
    *out = recs;
    *nout = (size_t)n;
    return PTC_OK;
out_free:
    for (size_t i = 0; i <= done && i < n; i++)
        ptc_shard_rec_free(&recs[i]);
    ptc_free(recs);
    return rc;
}
