/* .npy reader and writer.
 *
 * The header is a Python dict literal, not JSON, so it gets a small strict
 * recursive-descent parser here that accepts exactly what numpy writes
 * (single- or double-quoted strings without escapes, True/False, tuples of
 * decimal integers with optional trailing commas) and nothing else. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/npy.h"
#include "base/util_internal.h"

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static const struct {
    const char *descr;
    ptc_dtype dtype;
} DESCRS[] = {
    {"|b1", PTC_DTYPE_BOOL}, {"|u1", PTC_DTYPE_U8},  {"|i1", PTC_DTYPE_I8},
    {"<u1", PTC_DTYPE_U8},   {"<i1", PTC_DTYPE_I8},  {"<b1", PTC_DTYPE_BOOL},
    {"<i2", PTC_DTYPE_I16},  {"<u2", PTC_DTYPE_U16}, {"<i4", PTC_DTYPE_I32},
    {"<u4", PTC_DTYPE_U32},  {"<i8", PTC_DTYPE_I64}, {"<u8", PTC_DTYPE_U64},
    {"<f2", PTC_DTYPE_F16},  {"<f4", PTC_DTYPE_F32}, {"<f8", PTC_DTYPE_F64},
};

/* ---- header dict parser ----------------------------------------------------------- */

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes; returns its bytes in *s, *n. */
static bool parse_str(cursor *c, const char **s, size_t *n)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    char q = *c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p == '\n')
            return false;
        c->p++;
    }
    if (c->p >= c->end)
        return false;
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return true;
}

static bool parse_word(cursor *c, const char *w)
{
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* Parse "(d0, d1, ...)" into info; returns PTC_OK or a FORMAT error. */
static int parse_shape(cursor *c, ptc_npy_info *info, const char *what)
{
    if (!eat(c, '('))
        return ptc_error_set(PTC_E_FORMAT, "%s: 'shape' is not a tuple", what);
    int nd = 0;
    bool comma = false;
    for (;;) {
        if (eat(c, ')'))
            break;
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return ptc_error_set(PTC_E_FORMAT, "%s: 'shape' entry %d is not a non-negative "
                                 "integer", what, nd);
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (ptc_mul_overflow_i64(v, 10, &v) || ptc_add_overflow_i64(v, *c->p - '0', &v))
                return ptc_error_set(PTC_E_FORMAT, "%s: 'shape' entry %d overflows", what, nd);
            c->p++;
        }
        if (c->p < c->end && *c->p == 'L') /* Python 2 long */
            c->p++;
        if (nd >= PTC_NPY_MAX_DIMS)
            return ptc_error_set(PTC_E_FORMAT, "%s: 'shape' has more than %d dims", what,
                                 PTC_NPY_MAX_DIMS);
        info->shape[nd++] = v;
        comma = eat(c, ',');
        if (comma)
            continue;
        if (eat(c, ')'))
            break;
        return ptc_error_set(PTC_E_FORMAT, "%s: malformed 'shape' tuple", what);
    }
    /* a 1-tuple needs its comma in Python: "(3)" is an int, not a tuple */
    if (nd == 1 && !comma)
        return ptc_error_set(PTC_E_FORMAT, "%s: 'shape' (n) is not a tuple; write (n,)", what);
    info->ndim = nd;
    return PTC_OK;
}

static int parse_descr(const char *s, size_t n, ptc_dtype *dt, const char *what)
{
    for (size_t i = 0; i < PTC_ARRAY_LEN(DESCRS); i++)
        if (strlen(DESCRS[i].descr) == n && memcmp(DESCRS[i].descr, s, n) == 0) {
            *dt = DESCRS[i].dtype;
            return PTC_OK;
        }
    char q[200];
    ptc_quote_name(q, sizeof q, s, n);
    if (n >= 1 && s[0] == '>')
        return ptc_error_set(PTC_E_FORMAT, "%s: big-endian descr '%s' is not supported", what,
                             q);
    if (n >= 2 && (s[1] == 'O' || s[0] == 'O'))
        return ptc_error_set(PTC_E_FORMAT, "%s: object descr '%s' is not supported", what, q);
    return ptc_error_set(PTC_E_FORMAT, "%s: unknown or unsupported descr '%s'", what, q);
}

static int parse_dict(const char *s, size_t n, ptc_npy_info *info, const char *what)
{
    cursor c = {s, s + n};
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!eat(&c, '{'))
        return ptc_error_set(PTC_E_FORMAT, "%s: header is not a dict literal", what);
    for (;;) {
        if (eat(&c, '}'))
            break;
        const char *k;
        size_t kn;
        if (!parse_str(&c, &k, &kn))
            return ptc_error_set(PTC_E_FORMAT, "%s: header dict key is not a string", what);
        if (!eat(&c, ':'))
            return ptc_error_set(PTC_E_FORMAT, "%s: header dict: ':' expected", what);
        if (kn == 5 && memcmp(k, "descr", 5) == 0) {
            const char *v;
            size_t vn;
            if (have_descr)
                return ptc_error_set(PTC_E_FORMAT, "%s: duplicate key 'descr'", what);
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return ptc_error_set(PTC_E_FORMAT, "%s: structured descr is not supported",
                                     what);
            if (!parse_str(&c, &v, &vn))
                return ptc_error_set(PTC_E_FORMAT, "%s: 'descr' is not a string", what);
            PTC_TRY(parse_descr(v, vn, &info->dtype, what));
            have_descr = true;
        } else if (kn == 13 && memcmp(k, "fortran_order", 13) == 0) {
            if (have_fortran)
                return ptc_error_set(PTC_E_FORMAT, "%s: duplicate key 'fortran_order'", what);
            if (parse_word(&c, "True"))
                return ptc_error_set(PTC_E_FORMAT, "%s: fortran_order True is not supported "
                                     "(C order only)", what);
            if (!parse_word(&c, "False"))
                return ptc_error_set(PTC_E_FORMAT, "%s: 'fortran_order' is not True or False",
                                     what);
            have_fortran = true;
        } else if (kn == 5 && memcmp(k, "shape", 5) == 0) {
            if (have_shape)
                return ptc_error_set(PTC_E_FORMAT, "%s: duplicate key 'shape'", what);
            PTC_TRY(parse_shape(&c, info, what));
            have_shape = true;
        } else {
            char q[200];
            ptc_quote_name(q, sizeof q, k, kn);
            return ptc_error_set(PTC_E_FORMAT, "%s: unexpected header key '%s'", what, q);
        }
        if (eat(&c, ','))
            continue;
        if (eat(&c, '}'))
            break;
        return ptc_error_set(PTC_E_FORMAT, "%s: header dict: ',' or '}' expected", what);
    }
    skip_ws(&c);
    if (c.p != c.end)
        return ptc_error_set(PTC_E_FORMAT, "%s: unexpected bytes after the header dict", what);
    if (!have_descr || !have_fortran || !have_shape)
        return ptc_error_set(PTC_E_FORMAT, "%s: header lacks '%s'", what,
                             !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    return PTC_OK;
}

static int parse_header(const void *buf, size_t len, ptc_npy_info *info, const char *what)
{
    const unsigned char *b = buf;
    memset(info, 0, sizeof *info);
    if (len < 10)
        return ptc_error_set(PTC_E_FORMAT, "%s: truncated: %zu bytes, an npy header needs at "
                             "least 10", what, len);
    if (memcmp(b, MAGIC, 6) != 0)
        return ptc_error_set(PTC_E_FORMAT, "%s: not an npy file (bad magic)", what);
    info->major = b[6];
    info->minor = b[7];
    if (info->major < 1 || info->major > 3 || info->minor != 0)
        return ptc_error_set(PTC_E_FORMAT, "%s: unsupported npy version %d.%d", what,
                             info->major, info->minor);
    uint64_t hl, pre;
    if (info->major == 1) {
        hl = (uint64_t)b[8] | (uint64_t)b[9] << 8;
        pre = 10;
    } else {
        if (len < 12)
            return ptc_error_set(PTC_E_FORMAT, "%s: truncated: %zu bytes, an npy v%d header "
                                 "needs at least 12", what, len, info->major);
        hl = (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 |
             (uint64_t)b[11] << 24;
        pre = 12;
    }
    if (pre + hl > len)
        return ptc_error_set(PTC_E_FORMAT, "%s: truncated: header needs %llu bytes, have %zu",
                             what, (unsigned long long)(pre + hl), len);
    const char *s = (const char *)b + pre;
    if (hl == 0 || s[hl - 1] != '\n')
        return ptc_error_set(PTC_E_FORMAT, "%s: header does not end with a newline", what);
    if (info->major < 3) { /* latin-1 for v1/v2; this parser needs ASCII either way */
        for (uint64_t i = 0; i < hl; i++)
            if ((unsigned char)s[i] >= 0x80)
                return ptc_error_set(PTC_E_FORMAT, "%s: non-ascii byte in the header", what);
    }
    PTC_TRY(parse_dict(s, (size_t)hl, info, what));
    int64_t vol = 1, nbytes;
    bool zero = false, ovf = false;
    for (int d = 0; d < info->ndim; d++) {
        zero |= info->shape[d] == 0;
        /* the non-zero dims' product must fit even when a dim is 0 */
        if (!ovf && info->shape[d] != 0)
            ovf = ptc_mul_overflow_i64(vol, info->shape[d], &vol);
    }
    if (ovf || ptc_mul_overflow_i64(vol, (int64_t)ptc_dtype_size(info->dtype), &nbytes))
        return ptc_error_set(PTC_E_FORMAT, "%s: shape volume overflows", what);
    if (zero)
        nbytes = 0;
    info->data_offset = pre + hl;
    info->nbytes = (uint64_t)nbytes;
    return PTC_OK;
}

int ptc_npy_parse_header(const void *buf, size_t len, ptc_npy_info *info)
{
    return parse_header(buf, len, info, "npy header");
}

/* Open @p path, parse its header and check the data size. */
static int open_checked(const char *path, ptc_npy_info *info, int *fd_out)
{
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = ptc_error_set(PTC_E_IO, "%s: not a readable regular file", path);
        goto out_close;
    }
    /* the header of every version fits in 12 + 4 GiB, but numpy keeps it
     * small; read what the length word says, up to the file size */
    unsigned char pre[12];
    size_t have = (size_t)PTC_MIN((uint64_t)st.st_size, (uint64_t)sizeof pre);
    rc = ptc_pread_all(fd, pre, have, 0, path);
    if (rc < 0)
        goto out_close;
    if (have < 10 || memcmp(pre, MAGIC, 6) != 0 || (pre[6] != 1 && have < 12)) {
        rc = parse_header(pre, have, info, path);
        goto out_close;
    }
    uint64_t hl = pre[6] == 1 ? ((uint64_t)pre[8] | (uint64_t)pre[9] << 8)
                              : ((uint64_t)pre[8] | (uint64_t)pre[9] << 8 |
                                 (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24);
    uint64_t total = (pre[6] == 1 ? 10 : 12) + hl;
    if (total > (uint64_t)st.st_size)
        total = (uint64_t)st.st_size; /* parse_header reports the truncation */
    unsigned char *hb = ptc_malloc((size_t)total);
    if (!hb) {
        rc = PTC_E_NOMEM;
        goto out_close;
    }
    rc = ptc_pread_all(fd, hb, (size_t)total, 0, path);
    if (rc == PTC_OK)
        rc = parse_header(hb, (size_t)total, info, path);
    ptc_free(hb);
    if (rc < 0)
        goto out_close;
    uint64_t data = (uint64_t)st.st_size - info->data_offset;
    if (data != info->nbytes) {
        rc = ptc_error_set(PTC_E_FORMAT, "%s: shape needs %llu data bytes but the file has %llu%s",
                           path, (unsigned long long)info->nbytes, (unsigned long long)data,
                           data < info->nbytes ? " (truncated)" : " (trailing bytes)");
        goto out_close;
    }
    *fd_out = fd;
    return PTC_OK;

out_close:
    close(fd);
    return rc;
}

int ptc_npy_read_info(const char *path, ptc_npy_info *info)
{
    int fd;
    PTC_TRY(open_checked(path, info, &fd));
    close(fd);
    return PTC_OK;
}

int ptc_npy_read(const char *path, ptc_npy_info *info, void **data)
{
    *data = NULL;
    int fd;
    PTC_TRY(open_checked(path, info, &fd));
    int rc = PTC_OK;
    void *b = ptc_malloc(info->nbytes ? (size_t)info->nbytes : 1);
    if (!b) {
        rc = PTC_E_NOMEM;
        goto out_close;
    }
    rc = ptc_pread_all(fd, b, (size_t)info->nbytes, info->data_offset, path);
    if (rc < 0) {
        ptc_free(b);
        goto out_close;
    }
    *data = b;
out_close:
    close(fd);
    return rc;
}

/* ---- writer -------------------------------------------------------------------- */

static const char *descr_of(ptc_dtype dt)
{
    switch (dt) {
    case PTC_DTYPE_BOOL: return "|b1";
    case PTC_DTYPE_U8: return "|u1";
    case PTC_DTYPE_I8: return "|i1";
    case PTC_DTYPE_I16: return "<i2";
    case PTC_DTYPE_U16: return "<u2";
    case PTC_DTYPE_I32: return "<i4";
    case PTC_DTYPE_U32: return "<u4";
    case PTC_DTYPE_I64: return "<i8";
    case PTC_DTYPE_U64: return "<u8";
    case PTC_DTYPE_F16: return "<f2";
    case PTC_DTYPE_F32: return "<f4";
    case PTC_DTYPE_F64: return "<f8";
    default: return NULL;
    }
}

static int shape_bytes(ptc_dtype dtype, int ndim, const int64_t *shape, uint64_t *nbytes)
{
    if (ndim < 0 || ndim > PTC_NPY_MAX_DIMS)
        return ptc_error_set(PTC_E_INVAL, "npy: %d dims, at most %d", ndim, PTC_NPY_MAX_DIMS);
    int64_t vol = 1, nb;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || ptc_mul_overflow_i64(vol, shape[d], &vol))
            return ptc_error_set(PTC_E_INVAL, "npy: negative dim or shape overflow");
    if (ptc_mul_overflow_i64(vol, (int64_t)ptc_dtype_size(dtype), &nb))
        return ptc_error_set(PTC_E_INVAL, "npy: shape overflow");
    *nbytes = (uint64_t)nb;
    return PTC_OK;
}

int ptc_npy_header_build(ptc_dtype dtype, int ndim, const int64_t *shape, void **bytes,
                         size_t *len)
{
    *bytes = NULL;
    *len = 0;
    const char *descr = descr_of(dtype);
    if (!descr)
        return ptc_error_set(PTC_E_UNSUPPORTED, "npy: dtype %s has no numpy descr",
                             ptc_dtype_name(dtype));
    uint64_t nbytes;
    PTC_TRY(shape_bytes(dtype, ndim, shape, &nbytes));
    char dict[64 + PTC_NPY_MAX_DIMS * 24];
    int o = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    for (int d = 0; d < ndim; d++)
        o += snprintf(dict + o, sizeof dict - (size_t)o, d ? ", %lld" : "%lld",
                      (long long)shape[d]);
    o += snprintf(dict + o, sizeof dict - (size_t)o, ndim == 1 ? ",), }" : "), }");
    size_t dl = (size_t)o;
    /* v1 unless the padded dict outgrows the 2-byte length (never at 8 dims) */
    size_t pre = 10;
    size_t total = (pre + dl + 1 + 63) / 64 * 64;
    int major = 1;
    if (total - pre > 65535) {
        pre = 12;
        total = (pre + dl + 1 + 63) / 64 * 64;
        major = 2;
    }
    unsigned char *b = ptc_malloc(total);
    if (!b)
        return PTC_E_NOMEM;
    size_t hl = total - pre;
    memcpy(b, MAGIC, 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        b[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', hl - dl - 1);
    b[total - 1] = '\n';
    *bytes = b;
    *len = total;
    return PTC_OK;
}

int ptc_npy_write(const char *path, ptc_dtype dtype, int ndim, const int64_t *shape,
                  const void *data)
{
    void *hdr;
    size_t hl;
    uint64_t nbytes;
    PTC_TRY(ptc_npy_header_build(dtype, ndim, shape, &hdr, &hl));
    shape_bytes(dtype, ndim, shape, &nbytes); /* validated by the builder */
    char *tmp;
    int fd;
    int rc = ptc_tmpfile_create(path, &tmp, &fd);
    if (rc < 0)
        goto out_hdr;
    rc = ptc_write_all(fd, hdr, hl, tmp);
    if (rc == PTC_OK && nbytes)
        rc = ptc_write_all(fd, data, (size_t)nbytes, tmp);
    if (rc < 0) {
        ptc_tmpfile_discard(fd, tmp);
        goto out_hdr;
    }
    rc = ptc_tmpfile_commit(fd, tmp, path);
out_hdr:
    ptc_free(hdr);
    return rc;
}
