/* Metadata integrity (docs/format.md §2.5): every record of a format-2 store
 * ends with a checksum over its key and value; a version record carries the
 * digest of its tensor and shard records; summaries in ptc.meta pin down the
 * version list and the dataset catalog, so a record that vanishes is noticed
 * as surely as one that changes. Values liblmdb returns are checked to lie
 * inside the file before they are read. Format-1 stores (no checksums) are
 * read unchecked and upgraded inside the next write transaction of a writer
 * that holds the writer lock. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <xxhash.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

/* ---- what liblmdb returns --------------------------------------------------------- */

int ptc_store_mdb_error(int rc, const char *what)
{
    switch (rc) {
    case MDB_MAP_FULL:
        return ptc_error_set(PTC_E_IO, "%s: store metadata map is full (%s)", what,
                             mdb_strerror(rc));
    case ENOMEM:
        return ptc_error_set(PTC_E_NOMEM, "%s: %s", what, mdb_strerror(rc));
    case MDB_NOTFOUND:
        return ptc_error_set(PTC_E_NOTFOUND, "%s: %s", what, mdb_strerror(rc));
    case MDB_CORRUPTED:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
    case MDB_PAGE_NOTFOUND:
        return ptc_error_set(PTC_E_STORE, "%s: %s", what, mdb_strerror(rc));
    default:
        return ptc_error_set(PTC_E_IO, "%s: %s", what, mdb_strerror(rc));
    }
}


int ptc_store_map_find(ptc_store *s)
{
    /* liblmdb does not say where it mapped data.mdb: the process's map of
     * that file (offset 0) is it */
    int fd;
    struct stat st;
    s->map_lo = NULL;
    s->map_len = 0;
    if (mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &st) != 0)
        return PTC_OK;
    s->map_file = (uint64_t)st.st_size;
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off, ino;
        unsigned maj, min;
        if (sscanf(line, "%lx-%lx %*s %lx %x:%x %lu", &lo, &hi, &off, &maj, &min, &ino) == 6 &&
            off == 0 && ino == (unsigned long)st.st_ino && maj == major(st.st_dev) &&
            min == minor(st.st_dev)) {
            s->map_lo = (const uint8_t *)lo;
            s->map_len = hi - lo;
            break;
        }
    }
    if (f)
        fclose(f);
    if (!s->map_lo)
        ptc_log(PTC_LOG_DEBUG, "store %s: metadata map not found; values are not bounds-checked",
                s->dir);
    return PTC_OK;
}

/* Whether [p, p + n) lies inside data.mdb as it is now (it only grows). */
static bool in_file(ptc_store *s, uint64_t off, uint64_t n)
{
    uint64_t size = atomic_load(&s->map_file);
    if (off <= size && n <= size - off)
        return true;
    int fd;
    struct stat st;
    if (mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &st) != 0)
        return false;
    atomic_store(&s->map_file, (uint64_t)st.st_size);
    size = (uint64_t)st.st_size;
    return off <= size && n <= size - off;
}

int ptc_store_val_check(ptc_store *s, const MDB_val *k, const MDB_val *v, const char *what)
{
    const MDB_val *vals[2] = {k, v};
    for (int i = 0; i < 2; i++) {
        const MDB_val *x = vals[i];
        if (!x || !s->map_lo)
            continue;
        const uint8_t *p = x->mv_data;
        /* a corrupt page can hand out a size or an address past the file's
         * end, where reading would fault. Pointers outside the map are the
         * caller's own keys or pages a write transaction is changing. */
        if (!p || p < s->map_lo || (uint64_t)(p - s->map_lo) >= s->map_len)
            continue;
        if (!in_file(s, (uint64_t)(p - s->map_lo), x->mv_size))
            return ptc_error_set(PTC_E_STORE,
                                 "store %s: corrupt metadata (%s: a %s of %zu bytes outside the "
                                 "database file); run ptc verify",
                                 s->dir, what, i ? "value" : "key", x->mv_size);
    }
    return PTC_OK;
}

int ptc_store_format_txn(ptc_store *s, MDB_txn *txn, unsigned *fmt)
{
    MDB_val k = {6, (void *)"format"}, v;
    int mrc = mdb_get(txn, s->dbi_meta, &k, &v);
    if (mrc == MDB_NOTFOUND)
        return ptc_error_set(PTC_E_STORE, "store '%s' has no format record", s->dir);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    PTC_TRY(ptc_store_val_check(s, &k, &v, "format record"));
    const uint8_t *p = v.mv_data;
    uint32_t f = 0, bs = 0;
    if (v.mv_size == 16)
        for (int i = 3; i >= 0; i--) {
            f = (f << 8) | p[8 + i];
            bs = (bs << 8) | p[12 + i];
        }
    if (v.mv_size != 16 || memcmp(p, PTC_STORE_MAGIC, 8) != 0)
        return ptc_error_set(PTC_E_STORE, "store '%s': bad format record", s->dir);
    if ((f != PTC_STORE_FORMAT_VERSION && f != PTC_STORE_FORMAT_UNCHECKED) ||
        bs != PTC_STORE_BLOCK_SIZE)
        return ptc_error_set(PTC_E_STORE,
                             "store '%s': unsupported format %u (block size %u); this build "
                             "reads formats %u and %u",
                             s->dir, f, bs, PTC_STORE_FORMAT_UNCHECKED, PTC_STORE_FORMAT_VERSION);
    *fmt = f;
    return PTC_OK;
}

int ptc_store_format_put(ptc_store *s, MDB_txn *txn, unsigned fmt)
{
    uint8_t rec[16];
    memcpy(rec, PTC_STORE_MAGIC, 8);
    for (int i = 0; i < 4; i++) {
        rec[8 + i] = (uint8_t)(fmt >> (8 * i));
        rec[12 + i] = (uint8_t)(PTC_STORE_BLOCK_SIZE >> (8 * i));
    }
    MDB_val k = {6, (void *)"format"}, v = {sizeof rec, rec};
    int mrc = mdb_put(txn, s->dbi_meta, &k, &v, 0);
    return mrc ? ptc_store_mdb_error(mrc, s->dir) : PTC_OK;
}

/* ---- record sums ------------------------------------------------------------------------ */

uint64_t ptc_rec_sum(unsigned tag, const void *key, size_t klen, const void *val, size_t vlen)
{
    return XXH3_64bits_withSeed(val, vlen, XXH3_64bits_withSeed(key, klen, tag));
}

uint64_t ptc_rec_fold(uint64_t digest, uint64_t sum)
{
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(sum >> (8 * i));
    return XXH3_64bits_withSeed(le, sizeof le, digest);
}

int ptc_rec_seal(ptc_buf *b, size_t start, unsigned tag, const void *key, size_t klen,
                 uint64_t *sum)
{
    if (b->err)
        return b->err;
    uint64_t x = ptc_rec_sum(tag, key, klen, b->p + start, b->len - start);
    if (sum)
        *sum = x;
    return ptc_buf_u64(b, x);
}

static const char *tag_name(unsigned tag)
{
    static const char *const names[] = {"?", "version record", "tensor record", "shard record",
                                        "dataset catalog record", "summary record"};
    return tag < PTC_ARRAY_LEN(names) ? names[tag] : "record";
}

/* A printable key for messages: "version 7 tensor 3 rank 1". */
static void key_text(char *out, size_t cap, unsigned tag, const MDB_val *k)
{
    const uint8_t *p = k->mv_data;
    if ((tag == PTC_REC_VERSION || tag == PTC_REC_TENSOR || tag == PTC_REC_SHARD) &&
        k->mv_size >= 8) {
        int n = snprintf(out, cap, "version %llu", (unsigned long long)ptc_key_get_u64(p));
        if (k->mv_size >= 12 && n > 0 && (size_t)n < cap)
            n += snprintf(out + n, cap - (size_t)n, " tensor %u", ptc_key_get_u32(p + 8));
        if (k->mv_size >= 16 && n > 0 && (size_t)n < cap)
            snprintf(out + n, cap - (size_t)n, " rank %u", ptc_key_get_u32(p + 12));
        return;
    }
    char q[128];
    ptc_quote_name(q, sizeof q, k->mv_data, k->mv_size);
    snprintf(out, cap, "'%s'", q);
}

int ptc_store_rec_open(ptc_store *s, unsigned fmt, unsigned tag, const MDB_val *k,
                       const MDB_val *v, size_t *body, uint64_t *sum)
{
    PTC_TRY(ptc_store_val_check(s, k, v, tag_name(tag)));
    if (fmt < 2) {
        *body = v->mv_size;
        if (sum)
            *sum = 0;
        return PTC_OK;
    }
    char kt[200];
    if (v->mv_size < 8) {
        key_text(kt, sizeof kt, tag, k);
        return ptc_error_set(PTC_E_STORE, "store %s: corrupt metadata: %s of %s has no checksum",
                             s->dir, tag_name(tag), kt);
    }
    size_t n = v->mv_size - 8;
    const uint8_t *p = v->mv_data;
    uint64_t want = 0;
    for (int i = 7; i >= 0; i--)
        want = (want << 8) | p[n + (size_t)i];
    uint64_t got = ptc_rec_sum(tag, k->mv_data, k->mv_size, p, n);
    if (got != want) {
        key_text(kt, sizeof kt, tag, k);
        return ptc_error_set(PTC_E_STORE,
                             "store %s: corrupt metadata: %s of %s fails its checksum "
                             "(XXH3 %016llx, recorded %016llx)",
                             s->dir, tag_name(tag), kt, (unsigned long long)got,
                             (unsigned long long)want);
    }
    *body = n;
    if (sum)
        *sum = want;
    return PTC_OK;
}

/* "store S version 7 tensor 3: <decoder's message>" */
static int rec_bad(ptc_store *s, unsigned tag, const MDB_val *k, int rc)
{
    char kt[200];
    key_text(kt, sizeof kt, tag, k);
    return ptc_error_set(rc == PTC_E_NOMEM ? rc : PTC_E_STORE, "store %s %s: %s", s->dir, kt,
                         ptc_last_error());
}

int ptc_store_shard_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
                            ptc_shard_rec *r, uint64_t *sum)
{
    size_t n;
    PTC_TRY(ptc_store_rec_open(s, fmt, PTC_REC_SHARD, k, v, &n, sum));
    if (k->mv_size != 16)
        return rec_bad(s, PTC_REC_SHARD, k,
                       ptc_error_set(PTC_E_FORMAT, "shard key of %zu bytes", k->mv_size));
    r->tensor = ptc_key_get_u32((const uint8_t *)k->mv_data + 8);
    r->rank = ptc_key_get_u32((const uint8_t *)k->mv_data + 12);
    int rc = ptc_shard_rec_decode(r, v->mv_data, n);
    return rc < 0 ? rec_bad(s, PTC_REC_SHARD, k, rc) : PTC_OK;
}

int ptc_store_tensor_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
                             ptc_tensor_rec *t, uint64_t *sum)
{
    size_t n;
    PTC_TRY(ptc_store_rec_open(s, fmt, PTC_REC_TENSOR, k, v, &n, sum));
    if (k->mv_size != 12)
        return rec_bad(s, PTC_REC_TENSOR, k,
                       ptc_error_set(PTC_E_FORMAT, "tensor key of %zu bytes", k->mv_size));
    int rc = ptc_tensor_rec_decode(t, v->mv_data, n);
    return rc < 0 ? rec_bad(s, PTC_REC_TENSOR, k, rc) : PTC_OK;
}

int ptc_store_version_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
                              ptc_version_rec *r, uint64_t *sum)
{
    size_t n;
    PTC_TRY(ptc_store_rec_open(s, fmt, PTC_REC_VERSION, k, v, &n, sum));
    if (k->mv_size != 8)
        return rec_bad(s, PTC_REC_VERSION, k,
                       ptc_error_set(PTC_E_FORMAT, "version key of %zu bytes", k->mv_size));
    int rc = ptc_version_rec_decode(r, v->mv_data, n);
    if (rc == PTC_OK && r->record_format != (fmt >= 2 ? 2u : 1u)) {
        ptc_version_rec_free(r);
        rc = ptc_error_set(PTC_E_FORMAT, "version record of format %u in a format-%u store",
                           r->record_format, fmt);
    }
    return rc < 0 ? rec_bad(s, PTC_REC_VERSION, k, rc) : PTC_OK;
}

/* ---- summaries ----------------------------------------------------------------------- */

#define SUMMARY_FORMAT 1u

int ptc_store_summary_get(ptc_store *s, MDB_txn *txn, const char *which, ptc_store_summary *out)
{
    memset(out, 0, sizeof *out);
    MDB_val k = {strlen(which), (void *)which}, v;
    int mrc = mdb_get(txn, s->dbi_meta, &k, &v);
    if (mrc == MDB_NOTFOUND)
        return ptc_error_set(PTC_E_STORE,
                             "store %s: corrupt metadata: the summary of the %s is missing",
                             s->dir, which);
    if (mrc)
        return ptc_store_mdb_error(mrc, s->dir);
    size_t n;
    PTC_TRY(ptc_store_rec_open(s, 2, PTC_REC_SUMMARY, &k, &v, &n, NULL));
    if (ptc_store_summary_decode(v.mv_data, n, out) < 0)
        return ptc_error_set(PTC_E_STORE, "store %s: corrupt metadata: bad %s summary", s->dir,
                             which);
    return PTC_OK;
}

int ptc_store_summary_decode(const void *data, size_t len, ptc_store_summary *out)
{
    memset(out, 0, sizeof *out);
    const uint8_t *p = data;
    uint64_t f[4] = {0};
    if (len != 32)
        return PTC_E_FORMAT;
    for (int j = 0; j < 4; j++)
        f[j] = ptc_le_get(p + 8 * j, 8);
    if (f[0] != SUMMARY_FORMAT)
        return PTC_E_FORMAT;
    out->count = f[1];
    out->newest = f[2];
    out->xsum = f[3];
    return PTC_OK;
}

int ptc_store_summary_put(ptc_store *s, MDB_txn *txn, const char *which,
                          const ptc_store_summary *in)
{
    ptc_buf b = {0};
    uint64_t f[4] = {SUMMARY_FORMAT, in->count, in->newest, in->xsum};
    for (int j = 0; j < 4; j++)
        ptc_buf_u64(&b, f[j]);
    int rc = ptc_rec_seal(&b, 0, PTC_REC_SUMMARY, which, strlen(which), NULL);
    if (rc == PTC_OK) {
        MDB_val k = {strlen(which), (void *)which}, v = {b.len, b.p};
        int mrc = mdb_put(txn, s->dbi_meta, &k, &v, 0);
        if (mrc)
            rc = ptc_store_mdb_error(mrc, s->dir);
    }
    ptc_free(b.p);
    return rc;
}

int ptc_store_summary_mismatch(ptc_store *s, const char *which, const ptc_store_summary *want,
                               const ptc_store_summary *got)
{
    if (want->count == got->count && want->xsum == got->xsum && want->newest == got->newest)
        return PTC_OK;
    return ptc_error_set(PTC_E_STORE,
                         "store %s: corrupt metadata: the %s hold %llu records (newest %llu), "
                         "their summary says %llu (newest %llu)%s; run ptc verify",
                         s->dir, which, (unsigned long long)got->count,
                         (unsigned long long)got->newest, (unsigned long long)want->count,
                         (unsigned long long)want->newest,
                         want->count == got->count && want->newest == got->newest
                             ? " and their checksums differ"
                             : "");
}
