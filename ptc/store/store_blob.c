/* The block engine shared by tensor shards and datasets: a blob is written
 * as 1 MiB raw blocks (XXH3-64 of the raw bytes, optional zstd per block)
 * appended to a pack file, and read back by byte range, touching (reading,
 * decompressing, verifying) only the blocks the range covers. */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <zstd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

/* ---- records -------------------------------------------------------------------- */

void ptc_blob_rec_free(ptc_blob_rec *b)
{
    ptc_free(b->blocks);
    b->blocks = NULL;
    b->nblocks = 0;
}

uint64_t ptc_blob_block_raw(uint64_t raw_length, uint64_t nblocks, uint64_t k)
{
    return k + 1 < nblocks ? PTC_STORE_BLOCK_SIZE : raw_length - k * PTC_STORE_BLOCK_SIZE;
}

int ptc_blob_check_blocks(uint64_t raw_length, uint64_t length, uint64_t nblocks,
                          const ptc_block *blocks)
{
    if (nblocks != (raw_length + PTC_STORE_BLOCK_SIZE - 1) / PTC_STORE_BLOCK_SIZE)
        return ptc_error_set(PTC_E_FORMAT, "blob: block count does not match raw length");
    uint64_t total = 0;
    for (uint64_t i = 0; i < nblocks; i++) {
        const ptc_block *b = &blocks[i];
        uint64_t raw = ptc_blob_block_raw(raw_length, nblocks, i);
        if (b->codec > PTC_BLOCK_ZSTD || (b->codec == PTC_BLOCK_RAW && b->stored != raw) ||
            (b->codec == PTC_BLOCK_ZSTD && (b->stored == 0 || b->stored > raw)))
            return ptc_error_set(PTC_E_FORMAT, "blob: bad length or codec of block %llu",
                                 (unsigned long long)i);
        total += b->stored;
    }
    if (total != length)
        return ptc_error_set(PTC_E_FORMAT, "blob: block lengths do not add up to its length");
    return PTC_OK;
}

int ptc_blob_rec_encode(ptc_buf *b, const ptc_blob_rec *r)
{
    PTC_TRY(ptc_buf_u64(b, r->offset));
    PTC_TRY(ptc_buf_u64(b, r->length));
    PTC_TRY(ptc_buf_u64(b, r->raw_length));
    PTC_TRY(ptc_buf_u32(b, r->codec));
    PTC_TRY(ptc_buf_u32(b, 0));
    PTC_TRY(ptc_buf_u64(b, r->nblocks));
    for (uint64_t i = 0; i < r->nblocks; i++) {
        PTC_TRY(ptc_buf_u64(b, r->blocks[i].xxh3));
        PTC_TRY(ptc_buf_u32(b, r->blocks[i].stored));
        PTC_TRY(ptc_buf_u32(b, r->blocks[i].codec));
    }
    return PTC_OK;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ptc_blob_rec_decode(ptc_blob_rec *r, const uint8_t **data, size_t *len)
{
    memset(r, 0, sizeof *r);
    const uint8_t *p = *data;
    size_t n = *len;
    if (n < 40)
        return ptc_error_set(PTC_E_FORMAT, "blob record: truncated");
    r->offset = le64(p);
    r->length = le64(p + 8);
    r->raw_length = le64(p + 16);
    r->codec = le32(p + 24);
    uint32_t reserved = le32(p + 28);
    r->nblocks = le64(p + 32);
    p += 40;
    n -= 40;
    if (r->codec > PTC_STORE_CODEC_ZSTD || reserved != 0)
        return ptc_error_set(PTC_E_FORMAT, "blob record: bad codec");
    if (r->offset > INT64_MAX || r->length > INT64_MAX - r->offset || r->raw_length > INT64_MAX)
        return ptc_error_set(PTC_E_FORMAT, "blob record: extent out of range");
    if (r->nblocks > n / 16)
        return ptc_error_set(PTC_E_FORMAT, "blob record: block table truncated");
    if (r->nblocks) {
        r->blocks = ptc_calloc((size_t)r->nblocks, sizeof *r->blocks);
        if (!r->blocks)
            return PTC_E_NOMEM;
    }
    for (uint64_t i = 0; i < r->nblocks; i++, p += 16, n -= 16) {
        r->blocks[i].xxh3 = le64(p);
        r->blocks[i].stored = le32(p + 8);
        r->blocks[i].codec = le32(p + 12);
    }
    int rc = ptc_blob_check_blocks(r->raw_length, r->length, r->nblocks, r->blocks);
    if (rc < 0) {
        ptc_blob_rec_free(r);
        return rc;
    }
    *data = p;
    *len = n;
    return PTC_OK;
}

int ptc_blob_block_offsets(const ptc_blob_rec *b, uint64_t **out)
{
    *out = NULL;
    if (b->nblocks == 0)
        return PTC_OK;
    uint64_t *o = ptc_malloc((size_t)b->nblocks * sizeof *o);
    if (!o)
        return PTC_E_NOMEM;
    uint64_t off = b->offset;
    for (uint64_t i = 0; i < b->nblocks; i++) {
        o[i] = off;
        off += b->blocks[i].stored;
    }
    *out = o;
    return PTC_OK;
}

/* ---- writing ---------------------------------------------------------------------- */

/* Bytes appended between two starts of writeback (see flush_block). */
#define PTC_WRITEBACK_BYTES ((uint64_t)8 << 20)

void ptc_blob_out_init(ptc_blob_out *o, int fd, const char *path, uint64_t off, unsigned codec,
                       int level)
{
    memset(o, 0, sizeof *o);
    o->fd = fd;
    o->path = path;
    o->off = off;
    o->flushed = off;
    o->codec = codec;
    o->level = level;
}

int ptc_blob_begin(ptc_blob_out *o, uint64_t expect)
{
    if (o->open)
        return ptc_error_set(PTC_E_INVAL, "a blob is already open in %s", o->path);
    if (!o->raw && !(o->raw = ptc_malloc(PTC_STORE_BLOCK_SIZE)))
        return PTC_E_NOMEM;
    if (o->codec == PTC_STORE_CODEC_ZSTD && !o->cbuf) {
        o->ccap = ZSTD_compressBound(PTC_STORE_BLOCK_SIZE);
        o->cbuf = ptc_malloc(o->ccap);
        o->cctx = ZSTD_createCCtx();
        if (!o->cbuf || !o->cctx)
            return ptc_error_set(PTC_E_NOMEM, "cannot allocate zstd context");
    }
    memset(&o->cur, 0, sizeof o->cur);
    o->cur.offset = o->off;
    o->cur.codec = o->codec;
    o->bcap = 0;
    uint64_t nb = (expect + PTC_STORE_BLOCK_SIZE - 1) / PTC_STORE_BLOCK_SIZE;
    if (nb) {
        if (nb > SIZE_MAX / sizeof(ptc_block))
            return ptc_error_set(PTC_E_NOMEM, "blob of %llu bytes is too large",
                                 (unsigned long long)expect);
        o->cur.blocks = ptc_malloc((size_t)nb * sizeof(ptc_block));
        if (!o->cur.blocks)
            return PTC_E_NOMEM;
        o->bcap = (size_t)nb;
    }
    o->fill = 0;
    o->open = true;
    return PTC_OK;
}

/* Hash, maybe compress, and append one raw block of @p n bytes. */
static int flush_block(ptc_blob_out *o, const uint8_t *raw, size_t n)
{
    ptc_blob_rec *c = &o->cur;
    PTC_TRY(ptc_grow((void **)&c->blocks, &o->bcap, (size_t)c->nblocks + 1, sizeof *c->blocks));
    ptc_block *b = &c->blocks[c->nblocks];
    b->xxh3 = ptc_hash(raw, n);
    const void *out = raw;
    size_t len = n;
    b->codec = PTC_BLOCK_RAW;
    if (o->codec == PTC_STORE_CODEC_ZSTD) {
        size_t z = ZSTD_compressCCtx(o->cctx, o->cbuf, o->ccap, raw, n, o->level);
        if (!ZSTD_isError(z) && z < n) { /* keep a block raw if zstd does not help */
            out = o->cbuf;
            len = z;
            b->codec = PTC_BLOCK_ZSTD;
        }
    }
    PTC_TRY(ptc_pwrite_all(o->fd, out, len, o->off, o->path));
    b->stored = (uint32_t)len;
    o->off += len;
    /* Start writing back what is written so far: the disk works while the
     * next blocks are copied, instead of all of it in the closing fsync
     * (which is still what makes the data durable). */
    if (o->off - o->flushed >= PTC_WRITEBACK_BYTES) {
        ptc_start_writeback(o->fd, o->flushed, o->off - o->flushed);
        o->flushed = o->off;
    }
    c->length += len;
    c->raw_length += n;
    c->nblocks++;
    return PTC_OK;
}

int ptc_blob_write(ptc_blob_out *o, const void *data, size_t n)
{
    if (!o->open)
        return ptc_error_set(PTC_E_INVAL, "no blob is open in %s", o->path);
    const uint8_t *p = data;
    while (n > 0) {
        if (o->fill == 0 && n >= PTC_STORE_BLOCK_SIZE) { /* whole block from the caller */
            PTC_TRY(flush_block(o, p, PTC_STORE_BLOCK_SIZE));
            p += PTC_STORE_BLOCK_SIZE;
            n -= PTC_STORE_BLOCK_SIZE;
            continue;
        }
        size_t take = PTC_MIN(n, PTC_STORE_BLOCK_SIZE - o->fill);
        memcpy(o->raw + o->fill, p, take);
        o->fill += take;
        p += take;
        n -= take;
        if (o->fill == PTC_STORE_BLOCK_SIZE) {
            PTC_TRY(flush_block(o, o->raw, o->fill));
            o->fill = 0;
        }
    }
    return PTC_OK;
}

int ptc_blob_end(ptc_blob_out *o, ptc_blob_rec *out)
{
    memset(out, 0, sizeof *out);
    if (!o->open)
        return ptc_error_set(PTC_E_INVAL, "no blob is open in %s", o->path);
    if (o->fill) {
        int rc = flush_block(o, o->raw, o->fill);
        if (rc < 0) {
            ptc_blob_abort(o);
            return rc;
        }
        o->fill = 0;
    }
    *out = o->cur;
    memset(&o->cur, 0, sizeof o->cur);
    o->open = false;
    return PTC_OK;
}

void ptc_blob_abort(ptc_blob_out *o)
{
    ptc_blob_rec_free(&o->cur);
    o->fill = 0;
    o->open = false;
}

void ptc_blob_out_free(ptc_blob_out *o)
{
    ptc_blob_abort(o);
    ptc_free(o->raw);
    ptc_free(o->cbuf);
    ZSTD_freeCCtx(o->cctx);
    o->raw = o->cbuf = NULL;
    o->cctx = NULL;
}

/* ---- reading ------------------------------------------------------------------------ */

void ptc_blob_scratch_free(ptc_blob_scratch *sc)
{
    ptc_free(sc->raw);
    ptc_free(sc->cbuf);
    ZSTD_freeDCtx(sc->dctx);
    memset(sc, 0, sizeof *sc);
}

static int checksum_error(const ptc_blob_ref *b, uint64_t k, const char *what)
{
    return ptc_error_set(PTC_E_CHECKSUM, "%s in %s: pack %s, block %llu at byte offset %llu",
                         what, b->what, b->path, (unsigned long long)k,
                         (unsigned long long)b->block_off[k]);
}

int ptc_blob_read_block(ptc_blob_scratch *sc, const ptc_blob_ref *b, uint64_t k, uint8_t *dst)
{
    const ptc_block *bl = &b->blocks[k];
    uint64_t raw = ptc_blob_block_raw(b->raw_length, b->nblocks, k);
    if (bl->codec == PTC_BLOCK_RAW) {
        PTC_TRY(ptc_pread_all(b->fd, dst, (size_t)raw, b->block_off[k], b->path));
    } else {
        if (!sc->dctx && !(sc->dctx = ZSTD_createDCtx()))
            return ptc_error_set(PTC_E_NOMEM, "cannot allocate zstd context");
        /* from the mapping where the pack is mapped: no copy of the frame */
        const uint8_t *src;
        if (b->map && b->block_off[k] <= b->map_len && bl->stored <= b->map_len - b->block_off[k]) {
            src = b->map + b->block_off[k];
        } else {
            if (!sc->cbuf && !(sc->cbuf = ptc_malloc(PTC_STORE_BLOCK_SIZE)))
                return PTC_E_NOMEM;
            PTC_TRY(ptc_pread_all(b->fd, sc->cbuf, bl->stored, b->block_off[k], b->path));
            src = sc->cbuf;
        }
        size_t z = ZSTD_decompressDCtx(sc->dctx, dst, (size_t)raw, src, bl->stored);
        if (ZSTD_isError(z) || z != raw)
            return checksum_error(b, k, "corrupt compressed block");
    }
    if (ptc_hash(dst, (size_t)raw) != bl->xxh3)
        return checksum_error(b, k, "checksum mismatch");
    if (b->verified && bl->codec == PTC_BLOCK_RAW)
        atomic_store_explicit((_Atomic unsigned char *)&b->verified[k], 1, memory_order_release);
    return PTC_OK;
}

int ptc_blob_read_block_iov(const ptc_blob_ref *b, uint64_t k, const struct iovec *seg, int n,
                            struct iovec *tmp)
{
    const ptc_block *bl = &b->blocks[k];
    if (bl->codec != PTC_BLOCK_RAW)
        return ptc_error_set(PTC_E_INVAL, "block %llu of %s is compressed",
                             (unsigned long long)k, b->what);
    memcpy(tmp, seg, sizeof *seg * (size_t)n);
    PTC_TRY(ptc_preadv_all(b->fd, tmp, n, b->block_off[k], b->path));
    if (ptc_hash_iov(seg, n) != bl->xxh3)
        return checksum_error(b, k, "checksum mismatch");
    return PTC_OK;
}

int ptc_blob_get_block(ptc_blob_scratch *sc, const ptc_blob_ref *b, const void *key, uint64_t k,
                       const uint8_t **out)
{
    if (sc->valid && sc->key == key && sc->blk == k) {
        *out = sc->raw;
        return PTC_OK;
    }
    if (!sc->raw && !(sc->raw = ptc_malloc(PTC_STORE_BLOCK_SIZE)))
        return PTC_E_NOMEM;
    sc->valid = false;
    PTC_TRY(ptc_blob_read_block(sc, b, k, sc->raw));
    sc->key = key;
    sc->blk = k;
    sc->valid = true;
    *out = sc->raw;
    return PTC_OK;
}

static bool is_verified(const ptc_blob_ref *b, uint64_t k)
{
    return b->verified && b->blocks[k].codec == PTC_BLOCK_RAW &&
           atomic_load_explicit((_Atomic unsigned char *)&b->verified[k], memory_order_acquire);
}

/* Raw block @p k lies whole in the mapping. */
static bool block_mapped(const ptc_blob_ref *b, uint64_t k, uint64_t raw)
{
    return b->map && b->blocks[k].codec == PTC_BLOCK_RAW && b->block_off[k] <= b->map_len &&
           raw <= b->map_len - b->block_off[k];
}

/* Ask for mapped block @p k from the disk in one go. */
static void willneed(const ptc_blob_ref *b, uint64_t k, uint64_t raw)
{
    const uint8_t *m = b->map + b->block_off[k];
    uintptr_t page = (uintptr_t)m & ~(uintptr_t)4095;
    madvise((void *)page, (size_t)((uintptr_t)m + raw - page), MADV_WILLNEED);
}

void ptc_blob_prefetch(const ptc_blob_ref *b, uint64_t off, size_t len)
{
    if (len == 0 || off > b->raw_length || len > b->raw_length - off)
        return;
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    for (uint64_t k = off / BS; k <= (off + len - 1) / BS; k++) {
        uint64_t raw = ptc_blob_block_raw(b->raw_length, b->nblocks, k);
        if (is_verified(b, k))
            continue;
        if (block_mapped(b, k, raw))
            willneed(b, k, raw);
        else
            posix_fadvise(b->fd, (off_t)b->block_off[k], (off_t)b->blocks[k].stored,
                          POSIX_FADV_WILLNEED);
    }
}

/* Check mapped raw block @p k once per handle. */
static int verify_mapped(const ptc_blob_ref *b, uint64_t k, uint64_t raw)
{
    if (is_verified(b, k))
        return PTC_OK;
    /* one read of the whole block rather than a fault per read-around
     * window (best effort: the hash faults in what is missing) */
    willneed(b, k, raw);
    if (ptc_hash(b->map + b->block_off[k], (size_t)raw) != b->blocks[k].xxh3)
        return checksum_error(b, k, "checksum mismatch");
    if (b->verified)
        atomic_store_explicit((_Atomic unsigned char *)&b->verified[k], 1, memory_order_release);
    return PTC_OK;
}

const uint8_t *ptc_blob_map_file(int fd, uint64_t *len)
{
    struct stat st;
    *len = 0;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || (uint64_t)st.st_size > SIZE_MAX)
        return NULL;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return NULL;
    *len = (uint64_t)st.st_size;
    return m;
}

int ptc_blob_map(const ptc_blob_ref *b, uint64_t off, size_t len, const uint8_t **out)
{
    *out = NULL;
    if (off > b->raw_length || len > b->raw_length - off || len == 0)
        return ptc_error_set(PTC_E_RANGE, "map of [%llu, +%zu) outside the blob of %llu bytes",
                             (unsigned long long)off, len, (unsigned long long)b->raw_length);
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    uint64_t first = off / BS, last = (off + len - 1) / BS;
    /* raw blocks follow each other in the pack file, so a range over
     * several is contiguous in the mapping too */
    for (uint64_t k = first; k <= last; k++)
        if (!block_mapped(b, k, ptc_blob_block_raw(b->raw_length, b->nblocks, k)))
            return PTC_OK;
    for (uint64_t k = first; k <= last; k++)
        PTC_TRY(verify_mapped(b, k, ptc_blob_block_raw(b->raw_length, b->nblocks, k)));
    *out = b->map + b->block_off[first] + (off - first * BS);
    return PTC_OK;
}

int ptc_blob_read(ptc_blob_scratch *sc, const ptc_blob_ref *b, const void *key, uint64_t off,
                  void *dst, size_t len)
{
    if (off > b->raw_length || len > b->raw_length - off)
        return ptc_error_set(PTC_E_RANGE, "read of [%llu, +%zu) outside the blob of %llu bytes",
                             (unsigned long long)off, len, (unsigned long long)b->raw_length);
    const uint64_t BS = PTC_STORE_BLOCK_SIZE;
    uint8_t *d = dst;
    while (len > 0) {
        uint64_t k = off / BS, in = off - k * BS;
        uint64_t raw = ptc_blob_block_raw(b->raw_length, b->nblocks, k);
        size_t n = (size_t)PTC_MIN((uint64_t)len, raw - in);
        bool cached = sc->valid && sc->key == key && sc->blk == k;
        if (block_mapped(b, k, raw)) {
            /* mapped raw block: check it once, then copy straight from the map */
            PTC_TRY(verify_mapped(b, k, raw));
            memcpy(d, b->map + b->block_off[k] + in, n);
        } else if (cached) {
            memcpy(d, sc->raw + in, n);
        } else if (in == 0 && n == raw) {
            /* a whole block: read or decompress straight into the caller */
            PTC_TRY(ptc_blob_read_block(sc, b, k, d));
        } else if (is_verified(b, k)) {
            /* checked once in this process: read only the bytes wanted */
            PTC_TRY(ptc_pread_all(b->fd, d, n, b->block_off[k] + in, b->path));
        } else {
            const uint8_t *blk;
            PTC_TRY(ptc_blob_get_block(sc, b, key, k, &blk));
            memcpy(d, blk + in, n);
        }
        d += n;
        off += n;
        len -= n;
    }
    return PTC_OK;
}
