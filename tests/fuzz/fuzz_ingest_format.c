/* Fuzz the ingest format names (the `--format` of `ptc dataset ingest`),
 * through the public openers since the name parser is private. The input
 * up to its first NUL (at most 256 bytes) is the format. An independent
 * matcher of the forms in docs/dataset.md decides what must be accepted:
 * exactly `lines`, `jsonl`, `files`, `npy`, `tfrecord`, and
 * `tokens:u16:LEN` / `tokens:u32:LEN` with LEN a positive decimal without
 * leading zeros whose window (2 or 4 bytes a token) is at most
 * PTC_INGEST_MAX_RECORD. ptc_ingest_open (on an input that does not exist)
 * must fail with PTC_E_INVAL exactly for the other strings; an accepted
 * format must then read small probe buffers as its kind does (tokens: the
 * window width and token size, the others: the record boundaries that tell
 * them apart), and `files` is refused for a buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/crc32c.h"
#include "ptc/dataset.h"
#include "ptc/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FMT_CAP 256
#define PROBE_MAX ((size_t)3 << 20)

enum kind { K_BAD, K_LINES, K_JSONL, K_FILES, K_NPY, K_TFRECORD, K_TOKENS };

static void check(bool ok)
{
    if (!ok)
        abort();
}

/* The documented forms; for tokens also the token width and LEN. */
static enum kind match(const char *s, unsigned *width, uint64_t *len)
{
    static const struct {
        const char *name;
        enum kind kind;
    } plain[] = {{"lines", K_LINES}, {"jsonl", K_JSONL}, {"files", K_FILES},
                 {"npy", K_NPY},     {"tfrecord", K_TFRECORD}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strcmp(s, plain[i].name) == 0)
            return plain[i].kind;
    if (strncmp(s, "tokens:u16:", 11) == 0)
        *width = 2;
    else if (strncmp(s, "tokens:u32:", 11) == 0)
        *width = 4;
    else
        return K_BAD;
    const char *p = s + 11;
    if (*p < '1' || *p > '9')
        return K_BAD;
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return K_BAD;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v * *width > PTC_INGEST_MAX_RECORD)
            return K_BAD;
    }
    *len = v;
    return K_TOKENS;
}

/* Read every record of @p n bytes at @p buf: the record lengths (at most
 * @p cap of them) and the code that ended the reading. */
static int read_all(const char *fmt, const uint8_t *buf, size_t n, size_t *lens, size_t cap,
                    size_t *count)
{
    ptc_ingest *r;
    *count = 0;
    check(ptc_ingest_open_buffer(&r, fmt, buf, n) == PTC_OK);
    int rc;
    for (;;) {
        const uint8_t *d;
        size_t len;
        bool end;
        rc = ptc_ingest_next(r, &d, &len, &end);
        if (rc != PTC_OK || end)
            break;
        check(d >= buf && len <= n && d + len <= buf + n);
        check(*count < cap);
        lens[(*count)++] = len;
    }
    check(ptc_ingest_count(r) == *count);
    ptc_ingest_destroy(r);
    return rc;
}

/* Outcome of reading a probe: -1 for an error, else the record count, with
 * every record length checked against @p want (NULL: not checked). */
static int probe(const char *fmt, const void *buf, size_t size, const size_t *want)
{
    size_t lens[8], n;
    if (read_all(fmt, buf, size, lens, 8, &n) != PTC_OK)
        return -1;
    for (size_t i = 0; want && i < n; i++)
        check(lens[i] == want[i]);
    return (int)n;
}

static int probe_text(const char *fmt, const char *text, const size_t *want)
{
    return probe(fmt, text, strlen(text), want);
}

/* One tfrecord of the single byte 'x'. */
static size_t tfrecord_probe(uint8_t out[17])
{
    memset(out, 0, 17);
    out[0] = 1;
    uint32_t c = ptc_crc32c_mask(ptc_crc32c(0, out, 8));
    for (int i = 0; i < 4; i++)
        out[8 + i] = (uint8_t)(c >> (8 * i));
    out[12] = 'x';
    c = ptc_crc32c_mask(ptc_crc32c(0, out + 12, 1));
    for (int i = 0; i < 4; i++)
        out[13 + i] = (uint8_t)(c >> (8 * i));
    return 17;
}

/* A 2x3 u8 .npy array: two records of 3 bytes. */
static int npy_probe(const char *fmt, const size_t *want)
{
    const int64_t shape[2] = {2, 3};
    void *hdr;
    size_t hl;
    check(ptc_npy_header_build(PTC_DTYPE_U8, 2, shape, &hdr, &hl) == PTC_OK);
    uint8_t *buf = malloc(hl + 6);
    check(buf != NULL);
    memcpy(buf, hdr, hl);
    memset(buf + hl, 7, 6);
    free(hdr);
    int n = probe(fmt, buf, hl + 6, want);
    free(buf);
    return n;
}

static void check_tokens(const char *fmt, unsigned width, uint64_t tlen)
{
    static uint8_t zeros[PROBE_MAX];
    size_t lens[4], n;
    uint64_t win = width * tlen;
    if (win <= PROBE_MAX / 3) {
        /* two windows, then a partial one that is dropped */
        size_t size = (size_t)(2 * win + width * (tlen - 1));
        check(read_all(fmt, zeros, size, lens, 4, &n) == PTC_OK);
        check(n == 2 && lens[0] == win && lens[1] == win);
        /* two windows, then a partial token: a corrupt file */
        check(read_all(fmt, zeros, (size_t)(2 * win + 1), lens, 4, &n) == PTC_E_FORMAT);
        check(n == 2);
    }
    /* whole tokens short of one window are an error (never zero records and
     * success); a partial token is another error, so the token size is 2
     * exactly when 2 bytes are whole tokens */
    int rc = read_all(fmt, zeros, width, lens, 4, &n);
    check(tlen == 1 ? rc == PTC_OK && n == 1
                    : rc == PTC_E_FORMAT && n == 0 &&
                          strstr(ptc_last_error(), "fewer than one window") != NULL);
    rc = read_all(fmt, zeros, 2, lens, 4, &n);
    check((rc == PTC_OK || strstr(ptc_last_error(), "fewer than one window") != NULL) ==
          (width == 2));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char fmt[FMT_CAP + 1];
    size_t len = 0;
    while (len < size && len < FMT_CAP && data[len] != 0) {
        fmt[len] = (char)data[len];
        len++;
    }
    fmt[len] = '\0';

    unsigned width = 0;
    uint64_t tlen = 0;
    enum kind k = match(fmt, &width, &tlen);
    const char *missing[] = {"/nonexistent/ptc-fuzz-ingest-input"};
    ptc_ingest *r = NULL;
    int rc = ptc_ingest_open(&r, fmt, missing, 1);
    check(r == NULL); /* either way: a bad format or a missing input */
    check(rc == (k == K_BAD ? PTC_E_INVAL : PTC_E_NOTFOUND));
    rc = ptc_ingest_open_buffer(&r, fmt, "", 0);
    check((rc == PTC_OK) == (k != K_BAD && k != K_FILES));
    check(rc == PTC_OK || (rc == PTC_E_INVAL && r == NULL));
    ptc_ingest_destroy(r);

    static const size_t two_one[] = {1, 1}, one[] = {1}, two_three[] = {3, 3};
    uint8_t tfr[17];
    size_t tfr_len = tfrecord_probe(tfr);
    switch (k) {
    case K_LINES:
        check(probe_text(fmt, "a\nb", two_one) == 2 && probe_text(fmt, "", NULL) == 0);
        break;
    case K_JSONL:
        check(probe_text(fmt, "a\nb", NULL) == -1 && probe_text(fmt, "1\n", one) == 1);
        break;
    case K_TFRECORD:
        check(probe(fmt, tfr, tfr_len, one) == 1 && npy_probe(fmt, NULL) == -1);
        break;
    case K_NPY:
        check(npy_probe(fmt, two_three) == 2 && probe(fmt, tfr, tfr_len, NULL) == -1);
        break;
    case K_TOKENS:
        check(tlen >= 1 && width * tlen <= PTC_INGEST_MAX_RECORD);
        check_tokens(fmt, width, tlen);
        break;
    default:
        break;
    }
    return 0;
}
