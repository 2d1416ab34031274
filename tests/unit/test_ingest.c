/* Ingest readers: record boundaries per format, errors, progress. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/crc32c.h"
#include "ptc/dataset.h"
#include "ptc/npy.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ptc_ingest_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *write_file(const char *rel, const void *data, size_t n)
{
    static char paths[16][512];
    static int next;
    char *p = paths[next++ % 16];
    snprintf(p, 512, "%s/%s", tmpdir, rel);
    for (char *s = strchr(p + strlen(tmpdir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(p, 0755);
        *s = '/';
    }
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    return p;
}

/* Read all records; returns the count, concatenates them with '|' into out
 * (if not NULL) and returns the final code in *rc. */
static size_t drain(ptc_ingest *r, char *out, size_t cap, int *rc)
{
    size_t n = 0, used = 0;
    if (out)
        out[0] = 0;
    for (;;) {
        const uint8_t *d;
        size_t len;
        bool end;
        *rc = ptc_ingest_next(r, &d, &len, &end);
        if (*rc < 0 || end)
            break;
        if (out) {
            assert_true(used + len + 2 < cap);
            if (n)
                out[used++] = '|';
            memcpy(out + used, d, len);
            used += len;
            out[used] = 0;
        }
        n++;
    }
    assert_int_equal(ptc_ingest_count(r), n);
    return n;
}

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(ptc_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(ptc_crc32c(0, "", 0), 0);
    /* incremental = one shot */
    uint32_t c = ptc_crc32c(0, "1234", 4);
    assert_int_equal(ptc_crc32c(c, "56789", 5), 0xE3069283u);
    uint32_t x = 0x12345678u;
    assert_int_equal(ptc_crc32c_mask(x), (((x >> 15) | (x << 17)) + 0xa282ead8u));
}

static void test_lines(void **state)
{
    (void)state;
    char out[256];
    int rc;
    const char *a = write_file("l/a.txt", "a\nbb\n\nccc", 9);
    const char *b = write_file("l/b.txt", "dd\n", 3);
    const char *c = write_file("l/c.txt", "", 0);
    const char *d = write_file("l/d.txt", "\n", 1);
    const char *in[] = {a, b, c, d};
    ptc_ingest *r;
    assert_int_equal(ptc_ingest_open(&r, "lines", in, 4), PTC_OK);
    assert_int_equal(drain(r, out, sizeof out, &rc), 6);
    assert_int_equal(rc, PTC_OK);
    assert_string_equal(out, "a|bb||ccc|dd|");
    /* end is sticky and harmless */
    const uint8_t *p;
    size_t len;
    bool end;
    assert_int_equal(ptc_ingest_next(r, &p, &len, &end), PTC_OK);
    assert_true(end);
    ptc_ingest_destroy(r);

    assert_int_equal(ptc_ingest_open_buffer(&r, "lines", "x\r\ny", 4), PTC_OK);
    assert_int_equal(drain(r, out, sizeof out, &rc), 2);
    assert_string_equal(out, "x\r|y");
    ptc_ingest_destroy(r);
    ptc_ingest_destroy(NULL);
}

/* Lines across window refills, including one much longer than a window. */
static void test_lines_long(void **state)
{
    (void)state;
    size_t n = 5u << 20;
    char *buf = malloc(n);
    assert_non_null(buf);
    size_t pos = 0, want = 0;
    unsigned seed = 1;
    /* line k has length (k * 7919) % 3001, then one 3 MiB line, then more */
    while (pos < n) {
        size_t len = (want == 700) ? (3u << 20) : (want * 7919u) % 3001u;
        if (pos + len + 1 > n)
            break;
        for (size_t i = 0; i < len; i++)
            buf[pos + i] = (char)('a' + (seed = seed * 1103515245u + 12345u) % 26);
        buf[pos + len] = '\n';
        pos += len + 1;
        want++;
    }
    const char *f = write_file("long.txt", buf, pos);
    ptc_ingest *r;
    assert_int_equal(ptc_ingest_open(&r, "lines", &f, 1), PTC_OK);
    size_t k = 0, at = 0;
    for (;;) {
        const uint8_t *d;
        size_t len;
        bool end;
        assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
        if (end)
            break;
        size_t exp = (k == 700) ? (3u << 20) : (k * 7919u) % 3001u;
        assert_int_equal(len, exp);
        assert_memory_equal(d, buf + at, len);
        at += len + 1;
        k++;
    }
    assert_int_equal(k, want);
    assert_int_equal(at, pos);
    ptc_ingest_destroy(r);
    free(buf);
}

static void test_jsonl(void **state)
{
    (void)state;
    char out[256];
    int rc;
    const char *good = "{\"a\":1}\n[1,2]\n\"s\"\n3\n";
    ptc_ingest *r;
    assert_int_equal(ptc_ingest_open_buffer(&r, "jsonl", good, strlen(good)), PTC_OK);
    assert_int_equal(drain(r, out, sizeof out, &rc), 4);
    assert_int_equal(rc, PTC_OK);
    assert_string_equal(out, "{\"a\":1}|[1,2]|\"s\"|3");
    ptc_ingest_destroy(r);

    const char *bad = "{\"a\":1}\n{\"b\":2}\n{\"c\":\n{}\n";
    assert_int_equal(ptc_ingest_open_buffer(&r, "jsonl", bad, strlen(bad)), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 2);
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "line 3"));
    const uint8_t *p;
    size_t len;
    bool end;
    assert_int_equal(ptc_ingest_next(r, &p, &len, &end), PTC_E_FORMAT); /* sticky */
    ptc_ingest_destroy(r);

    const char *blank = "1\n\n2\n";
    assert_int_equal(ptc_ingest_open_buffer(&r, "jsonl", blank, strlen(blank)), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 1);
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "line 2"));
    ptc_ingest_destroy(r);
}

static void test_tokens(void **state)
{
    (void)state;
    uint16_t t16[10];
    for (int i = 0; i < 10; i++)
        t16[i] = (uint16_t)(1000 + i);
    const char *f = write_file("tok.bin", t16, sizeof t16);
    ptc_ingest *r;
    const uint8_t *d;
    size_t len;
    bool end;
    int rc;
    assert_int_equal(ptc_ingest_open(&r, "tokens:u16:3", &f, 1), PTC_OK);
    for (int w = 0; w < 3; w++) {
        assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
        assert_false(end);
        assert_int_equal(len, 6);
        assert_memory_equal(d, t16 + 3 * w, 6);
    }
    assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
    assert_true(end); /* token 9 is a partial window: dropped */
    ptc_ingest_destroy(r);

    /* two inputs are one token stream: 2 x 5 u32 tokens make 5 windows of 2,
     * the third across the files */
    const char *in[] = {f, f};
    assert_int_equal(ptc_ingest_open(&r, "tokens:u32:2", in, 2), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 5);
    assert_int_equal(rc, PTC_OK);
    ptc_ingest_destroy(r);

    /* a partial token is a corrupt file */
    const char *odd = write_file("odd.bin", t16, 7);
    assert_int_equal(ptc_ingest_open(&r, "tokens:u16:2", &odd, 1), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 1);
    assert_int_equal(rc, PTC_E_FORMAT);
    ptc_ingest_destroy(r);

    const char *bad[] = {"tokens:u16:0", "tokens:u8:4", "tokens:u16:", "tokens:u16:01",
                         "tokens:u32:x", "tokens:u32:268435457", "tokens:u16:99999999999999999999",
                         "token", "", "LINES"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = (ptc_ingest *)1;
        assert_int_equal(ptc_ingest_open(&r, bad[i], &f, 1), PTC_E_INVAL);
        assert_null(r);
    }
    assert_int_equal(ptc_ingest_open(&r, "tokens:u32:268435456", &f, 1), PTC_OK);
    ptc_ingest_destroy(r);
}

/* Windows span input files (issue 17): many files shorter than a window
 * make whole windows of the concatenated stream, files of one token
 * included; a stream shorter than one window is an error, never 0 records
 * and success. */
static void test_tokens_span_files(void **state)
{
    (void)state;
    enum { FILES = 10, PER = 100, LEN = 205 };
    uint16_t all[FILES * PER];
    const char *in[FILES];
    char name[32];
    for (int i = 0; i < FILES * PER; i++)
        all[i] = (uint16_t)(7 * i + 3);
    for (int k = 0; k < FILES; k++) {
        snprintf(name, sizeof name, "span%d.bin", k);
        in[k] = strdup(write_file(name, all + k * PER, PER * sizeof *all));
    }
    char fmt[32];
    snprintf(fmt, sizeof fmt, "tokens:u16:%d", LEN);
    ptc_ingest *r;
    const uint8_t *d;
    size_t len;
    bool end;
    assert_int_equal(ptc_ingest_open(&r, fmt, in, FILES), PTC_OK);
    int w = 0;
    for (;; w++) {
        assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
        if (end)
            break;
        assert_int_equal(len, LEN * 2);
        assert_memory_equal(d, all + w * LEN, LEN * 2);
    }
    assert_int_equal(w, FILES * PER / LEN); /* 4; the last 180 tokens are dropped */
    ptc_ingest_destroy(r);

    /* files of one token each, windows of three */
    const char *one[7];
    for (int k = 0; k < 7; k++) {
        snprintf(name, sizeof name, "one%d.bin", k);
        one[k] = strdup(write_file(name, all + k, 2));
    }
    assert_int_equal(ptc_ingest_open(&r, "tokens:u16:3", one, 7), PTC_OK);
    for (w = 0; w < 2; w++) {
        assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
        assert_false(end);
        assert_int_equal(len, 6);
        assert_memory_equal(d, all + 3 * w, 6);
    }
    assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
    assert_true(end);
    ptc_ingest_destroy(r);

    /* fewer tokens in all the inputs than one window: an error */
    assert_int_equal(ptc_ingest_open(&r, "tokens:u16:2049", in, FILES), PTC_OK);
    assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_E_FORMAT);
    ptc_ingest_destroy(r);
    for (int k = 0; k < FILES; k++)
        free((void *)in[k]);
    for (int k = 0; k < 7; k++)
        free((void *)one[k]);
}

static void test_files(void **state)
{
    (void)state;
    write_file("tree/b/z", "Z", 1);
    write_file("tree/b/a", "BA", 2);
    write_file("tree/a.txt", "ATXT", 4);
    write_file("tree/a/1", "A1", 2);
    write_file("tree/empty", "", 0);
    write_file("tree/.hidden", "H", 1);
    write_file("single", "S", 1);
    char tree[512], single[512], link[512], target[512];
    snprintf(tree, sizeof tree, "%s/tree", tmpdir);
    snprintf(single, sizeof single, "%s/single", tmpdir);
    /* a symlink to a file is followed, one to a directory is not */
    snprintf(link, sizeof link, "%s/tree/c-link", tmpdir);
    assert_int_equal(symlink(single, link), 0);
    snprintf(link, sizeof link, "%s/tree/d-loop", tmpdir);
    snprintf(target, sizeof target, "%s/tree", tmpdir);
    assert_int_equal(symlink(target, link), 0);
    const char *in[] = {tree, single};
    ptc_ingest *r;
    char out[256];
    int rc;
    assert_int_equal(ptc_ingest_open(&r, "files", in, 2), PTC_OK);
    /* byte order of paths: ".hidden" < "a.txt" < "a/1" < "b/a" < "b/z" < "c-link" < "empty" */
    assert_int_equal(drain(r, out, sizeof out, &rc), 8);
    assert_int_equal(rc, PTC_OK);
    assert_string_equal(out, "H|ATXT|A1|BA|Z|S||S");
    ptc_ingest_destroy(r);

    char missing[512];
    snprintf(missing, sizeof missing, "%s/nope", tmpdir);
    const char *m = missing;
    r = (ptc_ingest *)1;
    assert_int_equal(ptc_ingest_open(&r, "files", &m, 1), PTC_E_NOTFOUND);
    assert_null(r);
    assert_int_equal(ptc_ingest_open(&r, "lines", &m, 1), PTC_E_NOTFOUND);
    assert_int_equal(ptc_ingest_open(&r, "lines", in, 0), PTC_E_INVAL);
    assert_int_equal(ptc_ingest_open(&r, "lines", in, 1), PTC_E_INVAL); /* a directory */
    assert_int_equal(ptc_ingest_open_buffer(&r, "files", "x", 1), PTC_E_INVAL);
}

static size_t put_tfrecord(uint8_t *out, const void *data, uint64_t n)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (8 * i));
    uint32_t lc = ptc_crc32c_mask(ptc_crc32c(0, out, 8));
    memcpy(out + 8, &lc, 4); /* the test host is little-endian */
    memcpy(out + 12, data, n);
    uint32_t dc = ptc_crc32c_mask(ptc_crc32c(0, data, n));
    memcpy(out + 12 + n, &dc, 4);
    return 16 + n;
}

static void test_tfrecord(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = 0;
    n += put_tfrecord(buf + n, "hello", 5);
    n += put_tfrecord(buf + n, "", 0);
    n += put_tfrecord(buf + n, "world!", 6);
    ptc_ingest *r;
    char out[256];
    int rc;
    const char *f = write_file("x.tfrecord", buf, n);
    assert_int_equal(ptc_ingest_open(&r, "tfrecord", &f, 1), PTC_OK);
    assert_int_equal(drain(r, out, sizeof out, &rc), 3);
    assert_int_equal(rc, PTC_OK);
    assert_string_equal(out, "hello||world!");
    ptc_ingest_destroy(r);

    /* a flipped data byte in record 2 */
    uint8_t bad[512];
    memcpy(bad, buf, n);
    bad[21 + 16 + 12 + 2] ^= 1;
    assert_int_equal(ptc_ingest_open_buffer(&r, "tfrecord", bad, n), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 2);
    assert_int_equal(rc, PTC_E_CHECKSUM);
    assert_non_null(strstr(ptc_last_error(), "record 2"));
    assert_non_null(strstr(ptc_last_error(), "data crc"));
    ptc_ingest_destroy(r);

    /* a flipped length byte in record 1 */
    memcpy(bad, buf, n);
    bad[21] ^= 0x80;
    assert_int_equal(ptc_ingest_open_buffer(&r, "tfrecord", bad, n), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 1);
    assert_int_equal(rc, PTC_E_CHECKSUM);
    assert_non_null(strstr(ptc_last_error(), "record 1"));
    assert_non_null(strstr(ptc_last_error(), "length crc"));
    ptc_ingest_destroy(r);

    /* truncations at every length */
    for (size_t cut = 1; cut < n; cut++) {
        assert_int_equal(ptc_ingest_open_buffer(&r, "tfrecord", buf, cut), PTC_OK);
        size_t got = drain(r, NULL, 0, &rc);
        if (cut == 21 || cut == 37) {
            assert_int_equal(rc, PTC_OK);
        } else {
            assert_int_equal(rc, PTC_E_FORMAT);
            assert_non_null(strstr(ptc_last_error(), "truncated"));
        }
        assert_int_equal(got, cut < 21 ? 0 : cut < 37 ? 1 : 2);
        ptc_ingest_destroy(r);
    }

    /* an absurd length with a valid length crc */
    size_t m = put_tfrecord(bad, "", 0);
    uint64_t huge = (uint64_t)1 << 40;
    for (int i = 0; i < 8; i++)
        bad[i] = (uint8_t)(huge >> (8 * i));
    uint32_t lc = ptc_crc32c_mask(ptc_crc32c(0, bad, 8));
    memcpy(bad + 8, &lc, 4);
    assert_int_equal(ptc_ingest_open_buffer(&r, "tfrecord", bad, m), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 0);
    assert_int_equal(rc, PTC_E_FORMAT);
    ptc_ingest_destroy(r);
}

struct prog {
    int calls;
    uint64_t done, total;
};

static void on_progress(const char *what, uint64_t done, uint64_t total, void *user)
{
    struct prog *p = user;
    assert_string_equal(what, "ingest");
    assert_true(done >= p->done);
    p->calls++;
    p->done = done;
    p->total = total;
}

static void test_progress(void **state)
{
    (void)state;
    size_t n = 40u << 20;
    char *buf = malloc(n);
    assert_non_null(buf);
    memset(buf, 'x', n);
    for (size_t i = 99; i < n; i += 100)
        buf[i] = '\n';
    const char *f = write_file("big.txt", buf, n);
    const char *in[] = {f, f};
    ptc_ingest *r;
    struct prog p = {0};
    int rc;
    assert_int_equal(ptc_ingest_open(&r, "lines", in, 2), PTC_OK);
    ptc_ingest_set_progress(r, on_progress, &p);
    assert_int_equal(drain(r, NULL, 0, &rc), 2 * (n / 100 + 1)); /* + a trailing line */
    assert_int_equal(rc, PTC_OK);
    assert_int_equal(p.total, 2 * n);
    assert_int_equal(p.done, 2 * n);
    assert_true(p.calls >= 4 && p.calls <= 7); /* every 16 MiB + the end */
    ptc_ingest_destroy(r);
    free(buf);
}

/* Every allocation failure is reported and cleaned up (ASan checks leaks). */
static void test_alloc_faults(void **state)
{
    (void)state;
    write_file("ft/x/1", "one\ntwo\n", 8);
    write_file("ft/y", "three\n", 6);
    char tree[512];
    snprintf(tree, sizeof tree, "%s/ft", tmpdir);
    const char *in[] = {tree};
    const char *fmts[] = {"files", "lines"};
    for (int fi = 0; fi < 2; fi++) {
        const char *fmt = fmts[fi];
        char f1[512];
        snprintf(f1, sizeof f1, "%s/ft/y", tmpdir);
        const char *inl[] = {f1};
        for (long k = 1; k < 100; k++) {
            ptc_fault_alloc_at(k);
            ptc_ingest *r = NULL;
            int rc = ptc_ingest_open(&r, fmt, fi == 0 ? in : inl, 1);
            if (rc == PTC_OK) {
                drain(r, NULL, 0, &rc);
                ptc_ingest_destroy(r);
            } else {
                assert_null(r);
            }
            bool fired = ptc_fault_alloc_count() >= k;
            ptc_fault_alloc_at(0);
            if (!fired) {
                assert_int_equal(rc, PTC_OK);
                break;
            }
            assert_int_equal(rc, PTC_E_NOMEM);
        }
    }
}

static void test_npy(void **state)
{
    (void)state;
    float a[3][4];
    for (int i = 0; i < 12; i++)
        a[i / 4][i % 4] = (float)i * 0.5f;
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/a.npy", tmpdir);
    snprintf(p2, sizeof p2, "%s/b.npy", tmpdir);
    int64_t shape[3] = {3, 4, 0};
    assert_int_equal(ptc_npy_write(p1, PTC_DTYPE_F32, 2, shape, a), PTC_OK);
    int64_t shape3[3] = {2, 1, 2};
    uint16_t b[4] = {1, 2, 3, 4};
    assert_int_equal(ptc_npy_write(p2, PTC_DTYPE_U16, 3, shape3, b), PTC_OK);
    const char *in[] = {p1, p2};
    ptc_ingest *r;
    const uint8_t *d;
    size_t len;
    bool end;
    int rc;
    assert_int_equal(ptc_ingest_open(&r, "npy", in, 2), PTC_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
        assert_false(end);
        assert_int_equal(len, 16);
        assert_memory_equal(d, a[i], 16);
    }
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
        assert_int_equal(len, 4);
        assert_memory_equal(d, b + 2 * i, 4);
    }
    assert_int_equal(ptc_ingest_next(r, &d, &len, &end), PTC_OK);
    assert_true(end);
    ptc_ingest_destroy(r);

    /* a 1-D array, trailing bytes, truncated data */
    int64_t one = 4;
    assert_int_equal(ptc_npy_write(p2, PTC_DTYPE_U16, 1, &one, b), PTC_OK);
    const char *q = p2;
    assert_int_equal(ptc_ingest_open(&r, "npy", &q, 1), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 0);
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "dimensions"));
    ptc_ingest_destroy(r);
    FILE *f = fopen(p1, "rb");
    assert_non_null(f);
    static uint8_t raw[4096];
    size_t n = fread(raw, 1, sizeof raw, f);
    fclose(f);
    raw[n] = 7;
    assert_int_equal(ptc_ingest_open_buffer(&r, "npy", raw, n + 1), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 3);
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "longer"));
    ptc_ingest_destroy(r);
    assert_int_equal(ptc_ingest_open_buffer(&r, "npy", raw, n - 5), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 0); /* found before the first row */
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "truncated"));
    ptc_ingest_destroy(r);
    assert_int_equal(ptc_ingest_open_buffer(&r, "npy", "\x93NUMPY\x01\x00\xff\xff", 10), PTC_OK);
    assert_int_equal(drain(r, NULL, 0, &rc), 0);
    assert_int_equal(rc, PTC_E_FORMAT);
    ptc_ingest_destroy(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),    cmocka_unit_test(test_lines),
        cmocka_unit_test(test_lines_long), cmocka_unit_test(test_jsonl),
        cmocka_unit_test(test_tokens),    cmocka_unit_test(test_tokens_span_files),    cmocka_unit_test(test_files),
        cmocka_unit_test(test_tfrecord),  cmocka_unit_test(test_progress),
        cmocka_unit_test(test_alloc_faults), cmocka_unit_test(test_npy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
