/* safetensors: every rejection of the reader (one case each, checking the
 * code and that the message names the problem), canonical writer output,
 * write -> read -> write byte-exact round trips, streaming in any chunking,
 * writer failures leaving nothing behind (fault injection), index files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include "ptc/formats/formats_internal.h"
#include "ptc/safetensors.h"

static char tmpdir[256];

static int setup_dir(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/ptc-st-XXXXXX", base);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(tmpdir);
    return 0;
}

static const char *tpath(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* Number of entries in tmpdir (to prove no temporary file is left). */
static int dir_entries(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    if (d)
        closedir(d);
    return n;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_raw(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* 8-byte length + header text (+ pad spaces) + data_len bytes 0..255. */
static unsigned char *make_buf(const char *hdr, size_t pad, size_t data_len, size_t *total)
{
    size_t hl = strlen(hdr) + pad;
    *total = 8 + hl + data_len;
    unsigned char *b = malloc(*total ? *total : 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, strlen(hdr));
    memset(b + 8 + strlen(hdr), ' ', pad);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hl + i] = (unsigned char)i;
    return b;
}

/* ---- rejections: one cmocka test per row ------------------------------------ */

typedef struct reject_case {
    const char *label;
    const char *header;
    size_t data_len;
    const char *want; /* substring of the message */
} reject_case;

#define T1(dt, shape, a, b) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" a "," b "]}"

static const reject_case REJECTS[] = {
    {"not_json", "{\"a\":", 0, "not valid json"},
    {"not_object", "[1,2,3]", 0, "not a json object"},
    {"entry_not_object", "{\"w\":[1]}", 0, "tensor 'w': entry is not a json object"},
    {"missing_dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': missing field 'dtype'"},
    {"missing_shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
     "tensor 'w': missing field 'shape'"},
    {"missing_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
     "tensor 'w': missing field 'data_offsets'"},
    {"dtype_not_string", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "field 'dtype' is not a string"},
    {"shape_not_array", "{\"w\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4,
     "field 'shape' is not an array"},
    {"offsets_not_array", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":4}}", 4,
     "'data_offsets' is not an array of 2"},
    {"offsets_three", "{\"w\":" T1("F32", "[1]", "0", "4,4") "}", 4,
     "'data_offsets' is not an array of 2"},
    {"extra_field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
     4, "tensor 'w': unexpected field 'x'"},
    {"unknown_dtype", "{\"w\":" T1("F4", "[1]", "0", "4") "}", 4, "unknown dtype 'F4'"},
    {"lowercase_dtype", "{\"w\":" T1("f32", "[1]", "0", "4") "}", 4, "unknown dtype 'f32'"},
    {"negative_offset", "{\"w\":" T1("U8", "[1]", "-1", "0") "}", 1, "not non-negative integers"},
    {"float_offset", "{\"w\":" T1("U8", "[1]", "0.0", "1") "}", 1, "not non-negative integers"},
    {"string_offset", "{\"w\":" T1("U8", "[1]", "\"0\"", "1") "}", 1,
     "not non-negative integers"},
    {"offset_too_big_for_json", "{\"w\":" T1("U8", "[1]", "0", "99999999999999999999") "}", 1,
     "too big integer"},
    {"offset_beyond_data", "{\"w\":" T1("U8", "[8]", "0", "8") "}", 4,
     "tensor 'w': data_offsets end 8 beyond the data buffer of 4 bytes"},
    {"offset_huge_span", "{\"w\":" T1("U8", "[1]", "0", "9223372036854775807") "}", 1,
     "shape needs 1 bytes of U8"},
    {"end_before_begin", "{\"w\":" T1("U8", "[0]", "4", "0") "}", 4, "end before they begin"},
    {"negative_dim", "{\"w\":" T1("F32", "[-1]", "0", "4") "}", 4,
     "tensor 'w': shape[0] is not a non-negative integer"},
    {"float_dim", "{\"w\":" T1("F32", "[1.0]", "0", "4") "}", 4,
     "shape[0] is not a non-negative integer"},
    {"volume_overflow", "{\"w\":" T1("F32", "[4294967296,4294967296]", "0", "4") "}", 4,
     "tensor 'w': shape volume overflows"},
    {"bytes_overflow", "{\"w\":" T1("F64", "[2305843009213693952]", "0", "4") "}", 4,
     "shape volume overflows"},
    {"span_mismatch", "{\"w\":" T1("F32", "[2,3]", "0", "20") "}", 20,
     "tensor 'w': shape needs 24 bytes of F32 but data_offsets [0, 20] span 20"},
    {"too_many_dims", "{\"w\":" T1("U8", "[1,1,1,1,1,1,1,1,1]", "0", "1") "}", 1,
     "shape has 9 dims, at most 8"},
    {"overlap", "{\"a\":" T1("U8", "[8]", "0", "8") ",\"b\":" T1("U8", "[8]", "4", "12") "}", 12,
     "tensor 'b': data [4, 12) overlaps tensor 'a' ending at 8"},
    {"overlap_one_byte", "{\"a\":" T1("U8", "[8]", "0", "8") ",\"b\":" T1("U8", "[8]", "7", "15") "}",
     15, "tensor 'b': data [7, 15) overlaps tensor 'a' ending at 8"},
    {"empty_inside_other", "{\"a\":" T1("U8", "[8]", "0", "8") ",\"e\":" T1("U8", "[0]", "4", "4") "}",
     8, "tensor 'e': data [4, 4) overlaps tensor 'a'"},
    {"gap", "{\"a\":" T1("U8", "[4]", "0", "4") ",\"b\":" T1("U8", "[4]", "8", "12") "}", 12,
     "tensor 'b': gap of 4 bytes before its data at offset 8"},
    {"gap_one_byte", "{\"a\":" T1("U8", "[4]", "0", "4") ",\"b\":" T1("U8", "[4]", "5", "9") "}", 9,
     "tensor 'b': gap of 1 bytes before its data at offset 5"},
    {"gap_at_start", "{\"a\":" T1("U8", "[4]", "2", "6") "}", 6, "tensor 'a': gap of 2 bytes"},
    {"trailing_bytes", "{\"a\":" T1("U8", "[4]", "0", "4") "}", 5,
     "tensor data ends at 4 but the data buffer has 5 bytes"},
    {"data_but_no_tensors", "{}", 3, "tensor data ends at 0 but the data buffer has 3 bytes"},
    {"duplicate_names", "{\"a\":" T1("U8", "[1]", "0", "1") ",\"a\":" T1("U8", "[1]", "1", "2") "}",
     2, "duplicate object key"},
    {"metadata_not_object", "{\"__metadata__\":[\"x\"]}", 0, "__metadata__ is not a json object"},
    {"metadata_non_string", "{\"__metadata__\":{\"k\":1}}", 0,
     "__metadata__ value of 'k' is not a string"},
    {"metadata_null_value", "{\"__metadata__\":{\"k\":null}}", 0,
     "__metadata__ value of 'k' is not a string"},
    /* __metadata__ is read apart from jansson (safetensors_meta.c); what it
     * does not take goes through jansson whole, with jansson's message */
    {"metadata_duplicate_key", "{\"__metadata__\":{\"k\":\"a\",\"j\":\"b\",\"k\":\"c\"}}", 0,
     "duplicate object key"},
    {"metadata_twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate object key"},
    {"metadata_escaped_twice", "{\"__metadata__\":{},\"\\u005f_metadata__\":{}}", 0,
     "duplicate object key"},
    {"metadata_escaped_non_string", "{\"\\u005f_metadata__\":{\"k\":2}}", 0,
     "__metadata__ value of 'k' is not a string"},
    {"metadata_bad_escape", "{\"__metadata__\":{\"k\":\"\\x\"}}", 0, "not valid json"},
    {"metadata_nul_escape", "{\"__metadata__\":{\"k\":\"a\\u0000\"}}", 0, "not valid json"},
    {"metadata_nul_key", "{\"__metadata__\":{\"\\u0000\":\"v\"}}", 0, "not valid json"},
    {"metadata_control_byte", "{\"__metadata__\":{\"k\":\"a\tb\"}}", 0, "not valid json"},
    {"metadata_bad_utf8", "{\"__metadata__\":{\"k\":\"\xc3\"}}", 0, "not valid json"},
    {"metadata_lone_surrogate", "{\"__metadata__\":{\"k\":\"\\ud800\"}}", 0, "not valid json"},
    {"metadata_trailing_comma", "{\"__metadata__\":{\"k\":\"v\",}}", 0, "not valid json"},
    {"metadata_missing_colon", "{\"__metadata__\":{\"k\" \"v\"}}", 0, "not valid json"},
    {"metadata_unterminated", "{\"__metadata__\":{\"k\":\"v}}", 0, "not valid json"},
    {"metadata_closed_by_bracket", "{\"__metadata__\":{\"k\":\"v\"],\"w\":" T1("U8", "[1]", "0", "1") "}",
     1, "not valid json"},
    {"metadata_then_bad_json", "{\"__metadata__\":{\"k\":\"v\"},\"w\":tru}", 0,
     "not valid json: invalid token near 'tru' (byte 33)"},
    {"name_with_newline_quoted", "{\"a\\nb\":" T1("U8", "[2]", "0", "1") "}", 1,
     "tensor 'a\\x0ab'"},
    {"nul_in_header_string", "{\"a\\u0000\":" T1("U8", "[1]", "0", "1") "}", 1,
     "not valid json"},
    {"invalid_utf8", "{\"\xff\":" T1("U8", "[1]", "0", "1") "}", 1, "not valid json"},
    {"empty_header", "", 0, "not valid json"},
    {"trailing_garbage", "{} x", 0, "not valid json"},
};

static void run_reject(void **state)
{
    const reject_case *c = *state;
    size_t total;
    unsigned char *b = make_buf(c->header, 0, c->data_len, &total);
    ptc_st_header *h = (ptc_st_header *)0x1;
    int rc = ptc_st_parse_header(b, total, total, &h);
    if (rc != PTC_E_FORMAT || !strstr(ptc_last_error(), c->want))
        print_error("%s: rc %d, message: %s\n", c->label, rc, ptc_last_error());
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_null(h);
    assert_non_null(strstr(ptc_last_error(), c->want));
    assert_null(strchr(ptc_last_error(), '\n'));
    /* the same bytes as a file: the message starts with the path */
    const char *p = tpath("reject.safetensors");
    write_raw(p, b, total);
    ptc_st_file *f = (ptc_st_file *)0x1;
    assert_int_equal(ptc_st_open(&f, p), PTC_E_FORMAT);
    assert_null(f);
    assert_non_null(strstr(ptc_last_error(), c->want));
    assert_int_equal(strncmp(ptc_last_error(), p, strlen(p)), 0);
    unlink(p);
    free(b);
}

static void test_reject_empty_file(void **state)
{
    (void)state;
    const char *p = tpath("empty.safetensors");
    write_raw(p, "", 0);
    ptc_st_file *f;
    assert_int_equal(ptc_st_open(&f, p), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "truncated: 0 bytes"));
    ptc_st_header *h;
    assert_int_equal(ptc_st_parse_header("", 0, 0, &h), PTC_E_FORMAT);
    unlink(p);
}

static void test_reject_short_length_word(void **state)
{
    (void)state;
    const char *p = tpath("short.safetensors");
    write_raw(p, "\x02\0\0\0", 4);
    ptc_st_file *f;
    assert_int_equal(ptc_st_open(&f, p), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "truncated: 4 bytes"));
    unlink(p);
}

static void test_reject_header_over_limit(void **state)
{
    (void)state;
    unsigned char b[16] = {0};
    uint64_t n = 100000001;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(n >> (8 * i));
    ptc_st_header *h;
    /* even when the "file" claims to be big enough */
    assert_int_equal(ptc_st_parse_header(b, sizeof b, 200000000, &h), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "header length 100000001 exceeds the 100 MB"));
    memset(b, 0xFF, 8); /* 2^64-1: must not wrap around in n + 8 */
    assert_int_equal(ptc_st_parse_header(b, sizeof b, sizeof b, &h), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "exceeds the 100 MB"));
}

static void test_reject_header_beyond_file(void **state)
{
    (void)state;
    size_t total;
    unsigned char *b = make_buf("{}", 0, 0, &total);
    b[0] = 40; /* claims 40 header bytes, file has 2 */
    ptc_st_header *h;
    assert_int_equal(ptc_st_parse_header(b, total, total, &h), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "header length 40 exceeds the file size 10"));
    const char *p = tpath("trunc.safetensors");
    write_raw(p, b, total);
    ptc_st_file *f;
    assert_int_equal(ptc_st_open(&f, p), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "exceeds the file size"));
    unlink(p);
    /* buffer shorter than the header though the file is long enough */
    b[0] = 2;
    assert_int_equal(ptc_st_parse_header(b, 9, total, &h), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "truncated: header needs 10 bytes, have 9"));
    free(b);
}

static void test_reject_long_name(void **state)
{
    (void)state;
    char hdr[2200];
    char name[1100];
    memset(name, 'n', 1025);
    name[1025] = 0;
    snprintf(hdr, sizeof hdr, "{\"%s\":" T1("U8", "[1]", "0", "1") "}", name);
    size_t total;
    unsigned char *b = make_buf(hdr, 0, 1, &total);
    ptc_st_header *h;
    assert_int_equal(ptc_st_parse_header(b, total, total, &h), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "name longer than 1024 bytes"));
    assert_true(strlen(ptc_last_error()) < 300); /* the name is truncated in the message */
    free(b);
}

static void test_reject_missing_file(void **state)
{
    (void)state;
    ptc_st_file *f;
    assert_int_equal(ptc_st_open(&f, tpath("nope.safetensors")), PTC_E_NOTFOUND);
    assert_non_null(strstr(ptc_last_error(), "nope.safetensors"));
    assert_int_equal(ptc_st_open(&f, tmpdir), PTC_E_IO);
}

/* ---- __metadata__ read apart from jansson ------------------------------------------ */

/* The header parsed both ways (metadata read apart whatever its size, and
 * jansson alone): the same code, message, tensors and metadata entries in the
 * same order; @p apart: whether the reader takes the object (1) or leaves it
 * to jansson (0). */
static void expect_same_as_reference(const char *hdr, size_t data_len, int apart)
{
    size_t total;
    unsigned char *b = make_buf(hdr, 0, data_len, &total);
    ptc_st_meta m;
    int scan = ptc_st_meta_scan((const char *)b + 8, strlen(hdr), 0, &m);
    ptc_st_meta_free(&m);
    if (scan != apart)
        print_error("%s: the reader %s it\n", hdr, scan ? "took" : "did not take");
    assert_int_equal(scan, apart);
    ptc_st_header *h, *r;
    int rc = ptc_st_parse_header_with(b, total, total, 0, &h);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? ptc_last_error() : "");
    int rr = ptc_st_parse_header_with(b, total, total, SIZE_MAX, &r);
    if (rc != rr || (rc && strcmp(msg, ptc_last_error())))
        print_error("%s: fast %d '%s', reference %d '%s'\n", hdr, rc, msg, rr,
                    rr ? ptc_last_error() : "");
    assert_int_equal(rc, rr);
    if (rc) {
        assert_string_equal(msg, ptc_last_error());
    } else {
        assert_int_equal(ptc_st_header_count(h), ptc_st_header_count(r));
        for (size_t i = 0; i < ptc_st_header_count(h); i++) {
            assert_string_equal(ptc_st_header_tensor(h, i)->name, ptc_st_header_tensor(r, i)->name);
            assert_int_equal(ptc_st_header_tensor(h, i)->offset, ptc_st_header_tensor(r, i)->offset);
        }
        assert_int_equal(ptc_st_header_metadata_count(h), ptc_st_header_metadata_count(r));
        for (size_t i = 0; i < ptc_st_header_metadata_count(h); i++) {
            assert_string_equal(ptc_st_header_metadata_at(h, i).key,
                                ptc_st_header_metadata_at(r, i).key);
            assert_string_equal(ptc_st_header_metadata_at(h, i).value,
                                ptc_st_header_metadata_at(r, i).value);
        }
        ptc_st_header_destroy(h);
        ptc_st_header_destroy(r);
    }
    free(b);
}

static void test_metadata_apart_same_as_jansson(void **state)
{
    (void)state;
    static const struct {
        const char *hdr;
        int apart;
    } cases[] = {
        {"{\"__metadata__\":{}}", 1},
        {"{ \"__metadata__\" : { } }", 1},
        {"{\"__metadata__\":{\"format\":\"pt\"},\"w\":" T1("U8", "[1]", "0", "1") "}", 1},
        {"{\"w\":" T1("U8", "[1]", "0", "1") ",\n\t\"__metadata__\" :\r{ \"b\" : \"2\" ,\"a\":\"1\" } }", 1},
        /* escapes and UTF-8 (decoded by jansson, string by string) */
        {"{\"__metadata__\":{\"q\\\"k\":\"a\\\\b\\/c\\n\",\"\\u00e9t\\u00e9\":\"\\ud83d\\ude00\","
         "\"\xc3\xa9\":\"\xe2\x82\xac \x7f\"}}", 1},
        /* braces, brackets and quotes inside strings end nothing */
        {"{\"x}{\\\"]\":" T1("U8", "[1]", "0", "1") ","
         "\"__metadata__\":{\"}\":\"{\",\"\\\"\":\"]\",\"[\":\"\\\\\"}}", 1},
        /* an escaped spelling is jansson's alone */
        {"{\"\\u005f_metadata__\":{\"k\":\"v\"}}", 0},
        /* errors: duplicate, bad escape, NUL, control byte, bad UTF-8, structure */
        {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"c\"}}", 0},
        {"{\"__metadata__\":{\"k\":\"\\q\"}}", 0},
        {"{\"__metadata__\":{\"k\":\"\\u0000\"}}", 0},
        {"{\"__metadata__\":{\"k\":\"a\nb\"}}", 0},
        {"{\"__metadata__\":{\"k\":\"\xff\"}}", 0},
        {"{\"__metadata__\":{\"k\":\"\xed\xa0\x80\"}}", 0},
        {"{\"__metadata__\":{\"k\":5}}", 0},
        {"{\"__metadata__\":{\"k\":\"v\",}}", 0},
        {"{\"__metadata__\":{,}}", 0},
        /* a bracket of the other kind closing the object (found by fuzzing:
         * cut to {} the rest was valid) */
        {"{\"__metadata__\":{\"k\":\"v\"],\"w\":" T1("U8", "[1]", "0", "1") "}", 0},
        {"{\"__metadata__\":{\"k\":\"v\"}", 0},
        {"{\"__metadata__\":{\"k\":\"v\\", 0},
        /* the object is fine, the rest is not: taken, then jansson's message */
        {"{\"__metadata__\":{\"k\":\"v\"}} x", 0},
        {"{\"__metadata__\":{\"k\":\"v\"},\"w\":tru}", 1},
        {"{\"w\":nul,\"__metadata__\":{\"k\":\"v\"}}", 1},
        {"[{\"__metadata__\":{}}]", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_same_as_reference(cases[i].hdr, strstr(cases[i].hdr, "data_offsets") ? 1 : 0,
                                 cases[i].apart);

    /* many keys, some escaped, in file order; then one repeated at the end */
    size_t n = 5000, cap = n * 48 + 64, at = 0;
    char *big = malloc(cap);
    assert_non_null(big);
    at += (size_t)snprintf(big + at, cap - at, "{\"__metadata__\":{");
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(big + at, cap - at, "%s\"k%zu%s\":\"v%zu\"", i ? "," : "",
                               (i * 7919) % n, i % 10 ? "" : "\\t", i);
    snprintf(big + at, cap - at, "}}");
    expect_same_as_reference(big, 0, 1);
    ptc_st_meta m; /* the object was read apart, not by jansson */
    assert_int_equal(ptc_st_meta_scan(big, strlen(big), PTC_ST_META_APART_MIN, &m), 1);
    assert_int_equal(m.n, n);
    assert_int_equal(m.begin, strlen("{\"__metadata__\":"));
    assert_int_equal(m.end, strlen(big) - 1);
    ptc_st_meta_free(&m);
    size_t tot;
    unsigned char *b = make_buf(big, 0, 0, &tot);
    ptc_st_header *h;
    assert_int_equal(ptc_st_parse_header(b, tot, tot, &h), PTC_OK);
    assert_int_equal(ptc_st_header_metadata_count(h), n);
    assert_string_equal(ptc_st_header_metadata_at(h, 0).key, "k0\t");
    assert_string_equal(ptc_st_header_metadata_at(h, 1).key, "k2919");
    assert_string_equal(ptc_st_header_metadata_get(h, "k2919"), "v1");
    ptc_st_header_destroy(h);
    free(b);
    snprintf(big + at, cap - at, ",\"k2919\":\"again\"}}");
    expect_same_as_reference(big, 0, 0);
    b = make_buf(big, 0, 0, &tot);
    assert_int_equal(ptc_st_parse_header(b, tot, tot, &h), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "duplicate object key"));
    free(b);
    free(big);
}

/* ---- accepted inputs ------------------------------------------------------------- */

static void test_accept_padding_scalars_empty(void **state)
{
    (void)state;
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"s\":" T1("F32", "[]", "0", "4") ","
                      "\"e\":" T1("BF16", "[0,5]", "4", "4") ","
                      "\"../../x\":" T1("I16", "[2]", "4", "8") "}";
    size_t total;
    unsigned char *b = make_buf(hdr, 5, 8, &total); /* 5 trailing spaces */
    ptc_st_header *h;
    assert_int_equal(ptc_st_parse_header(b, total, total, &h), PTC_OK);
    assert_int_equal(ptc_st_header_count(h), 3);
    const ptc_st_tensor *t = ptc_st_header_tensor(h, 0);
    assert_string_equal(t->name, "s");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->nbytes, 4);
    assert_int_equal(t->offset, 8 + strlen(hdr) + 5);
    assert_null(t->data);
    t = ptc_st_header_tensor(h, 1);
    assert_string_equal(t->name, "e");
    assert_int_equal(t->dtype, PTC_DTYPE_BF16);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 0);
    assert_int_equal(t->shape[1], 5);
    assert_int_equal(t->nbytes, 0);
    size_t i;
    assert_int_equal(ptc_st_header_find(h, "../../x", &i), PTC_OK);
    assert_int_equal(i, 2);
    assert_int_equal(ptc_st_header_find(h, "zz", &i), PTC_E_NOTFOUND);
    assert_null(ptc_st_header_tensor(h, 3));
    assert_int_equal(ptc_st_header_metadata_count(h), 1);
    assert_string_equal(ptc_st_header_metadata_get(h, "format"), "pt");
    assert_null(ptc_st_header_metadata_get(h, "nope"));
    assert_null(ptc_st_header_metadata_at(h, 1).key);
    assert_int_equal(ptc_st_header_data_start(h), 8 + strlen(hdr) + 5);
    ptc_st_header_destroy(h);
    ptc_st_header_destroy(NULL);
    free(b);

    /* an empty checkpoint: "{}" and no data */
    b = make_buf("{}", 6, 0, &total);
    assert_int_equal(ptc_st_parse_header(b, total, total, &h), PTC_OK);
    assert_int_equal(ptc_st_header_count(h), 0);
    ptc_st_header_destroy(h);
    free(b);
}

/* ---- writer -------------------------------------------------------------------- */

static const char *const NAMES[] = {"model.embed.weight", "../../x", "名前\n\"q\"", "scalar",
                                    "empty"};

static void example_entries(ptc_st_tensor *e, size_t *n, size_t *data_len)
{
    memset(e, 0, 5 * sizeof *e);
    e[0] = (ptc_st_tensor){.name = NAMES[0], .dtype = PTC_DTYPE_F32, .ndim = 2, .shape = {3, 4}};
    e[1] = (ptc_st_tensor){.name = NAMES[1], .dtype = PTC_DTYPE_U8, .ndim = 1, .shape = {5}};
    e[2] = (ptc_st_tensor){.name = NAMES[2], .dtype = PTC_DTYPE_BF16, .ndim = 3, .shape = {1, 2, 3}};
    e[3] = (ptc_st_tensor){.name = NAMES[3], .dtype = PTC_DTYPE_I64, .ndim = 0};
    e[4] = (ptc_st_tensor){.name = NAMES[4], .dtype = PTC_DTYPE_F16, .ndim = 2, .shape = {4, 0}};
    *n = 5;
    *data_len = 48 + 5 + 12 + 8 + 0;
}

static const ptc_st_kv META[] = {{"zeta", "last"}, {"alpha", "first \"quoted\""}};

static void test_writer_canonical_bytes(void **state)
{
    (void)state;
    ptc_st_tensor e = {.name = "a", .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {2}};
    ptc_st_kv m = {"k", "v"};
    void *bytes;
    size_t len;
    uint64_t offs[2];
    assert_int_equal(ptc_st_header_build(&e, 1, &m, 1, &bytes, &len, offs), PTC_OK);
    const char *want = "{\"__metadata__\":{\"k\":\"v\"},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t wl = strlen(want), padded = (wl + 7) / 8 * 8;
    assert_int_equal(len, 8 + padded);
    assert_int_equal(((unsigned char *)bytes)[0], padded);
    assert_memory_equal((char *)bytes + 8, want, wl);
    for (size_t i = wl; i < padded; i++)
        assert_int_equal(((char *)bytes)[8 + i], ' ');
    assert_int_equal(offs[0], len);
    assert_int_equal(offs[1], len + 8);
    free(bytes);
}

/* Write the example through the streaming writer in chunks of @p chunk. */
static void write_example(const char *path, size_t chunk, unsigned char *data, size_t dlen)
{
    ptc_st_tensor e[5];
    size_t n, dl;
    example_entries(e, &n, &dl);
    assert_int_equal(dl, dlen);
    ptc_st_writer *w;
    assert_int_equal(ptc_st_writer_create(&w, path, e, n, META, 2), PTC_OK);
    for (size_t off = 0; off < dlen; off += chunk) {
        size_t k = dlen - off < chunk ? dlen - off : chunk;
        assert_int_equal(ptc_st_writer_write(w, data + off, k), PTC_OK);
    }
    assert_int_equal(ptc_st_writer_remaining(w), 0);
    assert_int_equal(ptc_st_writer_finish(w), PTC_OK);
}

static void test_roundtrip_byte_exact(void **state)
{
    (void)state;
    ptc_st_tensor e[5];
    size_t n, dlen;
    example_entries(e, &n, &dlen);
    unsigned char data[73];
    for (size_t i = 0; i < dlen; i++)
        data[i] = (unsigned char)(i * 7 + 1);
    const char *p1 = tpath("one.safetensors"), *p2 = tpath("two.safetensors");
    write_example(p1, dlen, data, dlen);
    assert_int_equal(dir_entries(), 1); /* no temporary file left */

    ptc_st_file *f;
    assert_int_equal(ptc_st_open(&f, p1), PTC_OK);
    assert_int_equal(ptc_st_count(f), 5);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const ptc_st_tensor *t = ptc_st_tensor_at(f, i);
        assert_string_equal(t->name, NAMES[i]); /* data order = writer order */
        assert_int_equal(t->dtype, e[i].dtype);
        assert_int_equal(t->ndim, e[i].ndim);
        assert_memory_equal(t->shape, e[i].shape, sizeof t->shape);
        assert_memory_equal(t->data, data + off, t->nbytes);
        off += t->nbytes;
    }
    const ptc_st_header *h = ptc_st_file_header(f);
    assert_int_equal(ptc_st_header_metadata_count(h), 2);
    assert_string_equal(ptc_st_header_metadata_at(h, 0).key, "alpha"); /* sorted */
    assert_string_equal(ptc_st_header_metadata_get(h, "alpha"), "first \"quoted\"");
    assert_int_equal(ptc_st_file_size(f), ptc_st_header_data_start(h) + dlen);

    /* write again from what was read: identical bytes */
    ptc_st_kv meta[2] = {ptc_st_header_metadata_at(h, 1), ptc_st_header_metadata_at(h, 0)};
    ptc_st_writer *w;
    ptc_st_tensor again[5];
    for (size_t i = 0; i < n; i++)
        again[i] = *ptc_st_tensor_at(f, i);
    assert_int_equal(ptc_st_writer_create(&w, p2, again, n, meta, 2), PTC_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ptc_st_writer_write(w, again[i].data, again[i].nbytes), PTC_OK);
    assert_int_equal(ptc_st_writer_finish(w), PTC_OK);

    size_t l1, l2;
    unsigned char *b1 = read_all(p1, &l1), *b2 = read_all(p2, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(b1, b2, l1);

    /* the header builder yields the same prefix and offsets */
    void *prefix;
    size_t plen;
    uint64_t offs[6];
    assert_int_equal(ptc_st_header_build(again, n, meta, 2, &prefix, &plen, offs), PTC_OK);
    assert_int_equal(plen, ptc_st_header_data_start(h));
    assert_memory_equal(prefix, b1, plen);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(offs[i], ptc_st_tensor_at(f, i)->offset);
    assert_int_equal(offs[n], l1);
    free(prefix);
    free(b1);
    free(b2);
    ptc_st_close(f);
    ptc_st_close(NULL);

    /* one byte at a time gives the same file */
    write_example(p2, 1, data, dlen);
    b1 = read_all(p1, &l1);
    b2 = read_all(p2, &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(b1, b2, l1);
    free(b1);
    free(b2);
    unlink(p1);
    unlink(p2);
}

static void test_writer_byte_count_errors(void **state)
{
    (void)state;
    ptc_st_tensor e = {.name = "a", .dtype = PTC_DTYPE_U16, .ndim = 1, .shape = {3}};
    const char *p = tpath("count.safetensors");
    unsigned char buf[8] = {0};
    ptc_st_writer *w;
    /* too many bytes */
    assert_int_equal(ptc_st_writer_create(&w, p, &e, 1, NULL, 0), PTC_OK);
    assert_int_equal(ptc_st_writer_write(w, buf, 4), PTC_OK);
    assert_int_equal(ptc_st_writer_write(w, buf, 3), PTC_E_RANGE);
    assert_non_null(strstr(ptc_last_error(), "past the end"));
    assert_int_equal(ptc_st_writer_finish(w), PTC_E_INVAL);
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(dir_entries(), 0);
    /* too few */
    assert_int_equal(ptc_st_writer_create(&w, p, &e, 1, NULL, 0), PTC_OK);
    assert_int_equal(ptc_st_writer_write(w, buf, 5), PTC_OK);
    assert_int_equal(ptc_st_writer_remaining(w), 1);
    assert_int_equal(ptc_st_writer_finish(w), PTC_E_RANGE);
    assert_non_null(strstr(ptc_last_error(), "1 bytes of tensor data missing"));
    assert_int_equal(dir_entries(), 0);
    /* abort */
    assert_int_equal(ptc_st_writer_create(&w, p, &e, 1, NULL, 0), PTC_OK);
    assert_int_equal(dir_entries(), 1);
    ptc_st_writer_abort(w);
    ptc_st_writer_abort(NULL);
    assert_int_equal(dir_entries(), 0);
}

static void test_writer_rejects_bad_entries(void **state)
{
    (void)state;
    ptc_st_tensor e[2] = {{.name = "a", .dtype = PTC_DTYPE_U8, .ndim = 1, .shape = {1}},
                          {.name = "a", .dtype = PTC_DTYPE_U8, .ndim = 1, .shape = {1}}};
    ptc_st_writer *w = (ptc_st_writer *)0x1;
    const char *p = tpath("bad.safetensors");
    assert_int_equal(ptc_st_writer_create(&w, p, e, 2, NULL, 0), PTC_E_INVAL);
    assert_null(w);
    assert_non_null(strstr(ptc_last_error(), "duplicate tensor name 'a'"));
    e[1].name = "__metadata__";
    assert_int_equal(ptc_st_writer_create(&w, p, e, 2, NULL, 0), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "reserved"));
    e[1].name = "b";
    e[1].shape[0] = -1;
    assert_int_equal(ptc_st_writer_create(&w, p, e, 2, NULL, 0), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "tensor 'b'"));
    e[1].shape[0] = 1;
    e[1].ndim = 9;
    assert_int_equal(ptc_st_writer_create(&w, p, e, 2, NULL, 0), PTC_E_INVAL);
    e[1].ndim = 1;
    e[1].dtype = PTC_DTYPE_COUNT;
    assert_int_equal(ptc_st_writer_create(&w, p, e, 2, NULL, 0), PTC_E_INVAL);
    e[1].dtype = PTC_DTYPE_U8;
    ptc_st_kv dup[2] = {{"k", "1"}, {"k", "2"}};
    assert_int_equal(ptc_st_writer_create(&w, p, e, 2, dup, 2), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "duplicate metadata key 'k'"));
    e[1].name = "bad\xff";
    assert_int_equal(ptc_st_writer_create(&w, p, e, 2, NULL, 0), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "utf-8"));
    assert_int_equal(dir_entries(), 0);
    /* unwritable directory */
    assert_int_equal(ptc_st_writer_create(&w, "/nonexistent-dir/x.safetensors", e, 1, NULL, 0),
                     PTC_E_IO);
    assert_null(w);
}

/* Every write and fsync failing in turn: an error, and neither the target nor
 * a temporary file left behind. Every allocation failing in turn, too. */
static void test_writer_fault_injection(void **state)
{
    (void)state;
    ptc_st_tensor e[5];
    size_t n, dlen;
    example_entries(e, &n, &dlen);
    unsigned char data[73] = {0};
    const char *p = tpath("fault.safetensors");
    ptc_fault_write_at(0, 0);
    write_example(p, 16, data, dlen);
    long writes = ptc_fault_write_count();
    assert_true(writes >= 6);
    unlink(p);
    for (long k = 1; k <= writes; k++) {
        ptc_fault_write_at(k, ENOSPC);
        ptc_st_writer *w;
        int rc = ptc_st_writer_create(&w, p, e, n, META, 2);
        for (size_t off = 0; rc == PTC_OK && off < dlen; off += 16)
            rc = ptc_st_writer_write(w, data + off, dlen - off < 16 ? dlen - off : 16);
        if (rc == PTC_OK)
            rc = ptc_st_writer_finish(w);
        else if (w)
            ptc_st_writer_abort(w);
        ptc_fault_write_at(0, 0);
        if (k < writes) { /* the last counted call is the directory fsync */
            assert_int_equal(rc, PTC_E_IO);
            assert_non_null(strstr(ptc_last_error(), "No space left"));
            assert_int_equal(dir_entries(), 0);
        } else {
            assert_int_equal(rc, PTC_E_IO);
            unlink(p);
        }
    }
    /* allocations */
    ptc_fault_alloc_at(0);
    ptc_st_writer *w;
    assert_int_equal(ptc_st_writer_create(&w, p, e, n, META, 2), PTC_OK);
    ptc_st_writer_abort(w);
    long allocs = ptc_fault_alloc_count();
    for (long k = 1; k <= allocs; k++) {
        ptc_fault_alloc_at(k);
        int rc = ptc_st_writer_create(&w, p, e, n, META, 2);
        ptc_fault_alloc_at(0);
        assert_int_equal(rc, PTC_E_NOMEM);
        assert_null(w);
        assert_int_equal(dir_entries(), 0);
    }
    /* reader allocations */
    write_example(p, dlen, data, dlen);
    ptc_fault_alloc_at(0);
    ptc_st_file *f;
    assert_int_equal(ptc_st_open(&f, p), PTC_OK);
    ptc_st_close(f);
    allocs = ptc_fault_alloc_count();
    for (long k = 1; k <= allocs; k++) {
        ptc_fault_alloc_at(k);
        int rc = ptc_st_open(&f, p);
        ptc_fault_alloc_at(0);
        assert_int_equal(rc, PTC_E_NOMEM);
        assert_null(f);
    }
    unlink(p);
}

/* ---- index files --------------------------------------------------------------- */

static void write_shard(const char *file, const char *const *names, size_t n)
{
    ptc_st_tensor e[4];
    memset(e, 0, sizeof e);
    unsigned char data[4 * 8];
    for (size_t i = 0; i < n; i++) {
        e[i] = (ptc_st_tensor){.name = names[i], .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {2}};
        memset(data + 8 * i, (int)i + 1, 8);
    }
    ptc_st_writer *w;
    assert_int_equal(ptc_st_writer_create(&w, tpath(file), e, n, NULL, 0), PTC_OK);
    assert_int_equal(ptc_st_writer_write(w, data, 8 * n), PTC_OK);
    assert_int_equal(ptc_st_writer_finish(w), PTC_OK);
}

static void write_text(const char *file, const char *text)
{
    write_raw(tpath(file), text, strlen(text));
}

static void test_index_ok(void **state)
{
    (void)state;
    const char *a[] = {"w1", "w2"}, *b[] = {"w3"};
    write_shard("model-00001-of-00002.safetensors", a, 2);
    write_shard("model-00002-of-00002.safetensors", b, 1);
    const char *names[] = {"w3", "w1", "w2"};
    const char *files[] = {"model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors",
                           "model-00001-of-00002.safetensors"};
    const char *ip = tpath("model.safetensors.index.json");
    assert_int_equal(ptc_st_index_write(ip, names, files, 3, 24, 0), PTC_OK);
    size_t len;
    unsigned char *text = read_all(ip, &len);
    assert_non_null(strstr((char *)text, "\"total_size\": 24"));
    assert_true(strstr((char *)text, "\"w1\"") < strstr((char *)text, "\"w3\"")); /* sorted */
    free(text);

    ptc_st_index *x;
    assert_int_equal(ptc_st_index_open(&x, ip), PTC_OK);
    assert_int_equal(ptc_st_index_file_count(x), 2);
    assert_string_equal(ptc_st_index_file_name(x, 0), "model-00001-of-00002.safetensors");
    assert_null(ptc_st_index_file_name(x, 2));
    assert_null(ptc_st_index_file(x, 2));
    size_t fi, ti;
    assert_int_equal(ptc_st_index_find(x, "w3", &fi, &ti), PTC_OK);
    assert_int_equal(fi, 1);
    assert_int_equal(ti, 0);
    const ptc_st_tensor *t = ptc_st_tensor_at(ptc_st_index_file(x, fi), ti);
    assert_int_equal(((const unsigned char *)t->data)[0], 1);
    assert_int_equal(ptc_st_index_find(x, "w9", &fi, &ti), PTC_E_NOTFOUND);
    assert_string_equal(ptc_st_index_metadata_json(x), "{\"total_size\":24}");
    ptc_st_index_close(x);
    ptc_st_index_close(NULL);
}

static void expect_index_error(const char *text, int code, const char *want)
{
    const char *ip = tpath("bad.index.json");
    write_text("bad.index.json", text);
    ptc_st_index *x = (ptc_st_index *)0x1;
    int rc = ptc_st_index_open(&x, ip);
    if (rc != code || !strstr(ptc_last_error(), want))
        print_error("index %s: rc %d, message: %s\n", text, rc, ptc_last_error());
    assert_int_equal(rc, code);
    assert_null(x);
    assert_non_null(strstr(ptc_last_error(), want));
    unlink(ip);
}

static void test_index_errors(void **state)
{
    (void)state;
    const char *a[] = {"w1", "w2"};
    write_shard("s1.safetensors", a, 2);
    expect_index_error("{\"weight_map\":{\"w1\":\"s1.safetensors\"}}", PTC_E_FORMAT,
                       "tensor 'w2' in 's1.safetensors' is not mapped");
    expect_index_error("{\"weight_map\":{\"w1\":\"s1.safetensors\",\"w2\":\"s1.safetensors\","
                       "\"w7\":\"s1.safetensors\"}}",
                       PTC_E_FORMAT, "tensor 'w7' is mapped to 's1.safetensors' but missing");
    expect_index_error("{\"weight_map\":{\"w1\":\"../s1.safetensors\"}}", PTC_E_FORMAT,
                       "file name '../s1.safetensors' is not a plain file name");
    expect_index_error("{\"weight_map\":{\"w1\":\"..\"}}", PTC_E_FORMAT, "not a plain file name");
    expect_index_error("{\"weight_map\":{\"w1\":\"/etc/passwd\"}}", PTC_E_FORMAT,
                       "not a plain file name");
    expect_index_error("{\"weight_map\":{\"w1\":\"missing.safetensors\"}}", PTC_E_NOTFOUND,
                       "missing.safetensors");
    expect_index_error("{\"weight_map\":{\"w1\":3}}", PTC_E_FORMAT,
                       "weight_map entry 'w1' is not a string");
    expect_index_error("{\"metadata\":{}}", PTC_E_FORMAT, "'weight_map'");
    expect_index_error("{\"metadata\":5,\"weight_map\":{}}", PTC_E_FORMAT, "'metadata'");
    expect_index_error("{\"weight_map\":{\"w1\":\"s1.safetensors\",\"w1\":\"s1.safetensors\"}}",
                       PTC_E_FORMAT, "duplicate object key");
    expect_index_error("[", PTC_E_FORMAT, "bad.index.json");
    ptc_st_index *x;
    assert_int_equal(ptc_st_index_open(&x, tpath("none.json")), PTC_E_NOTFOUND);
    /* a tensor in two files: the one not named by the map is an error */
    const char *b[] = {"w2"};
    write_shard("s2.safetensors", b, 1);
    expect_index_error("{\"weight_map\":{\"w1\":\"s1.safetensors\",\"w2\":\"s1.safetensors\","
                       "\"w3\":\"s2.safetensors\"}}",
                       PTC_E_FORMAT, "missing from it");
    expect_index_error("{\"weight_map\":{\"w1\":\"s1.safetensors\",\"w2\":\"s2.safetensors\"}}",
                       PTC_E_FORMAT, "tensor 'w2' in 's1.safetensors' is not mapped");
    /* writer side */
    const char *names[] = {"w1", "w1"}, *files[] = {"s1.safetensors", "s1.safetensors"};
    assert_int_equal(ptc_st_index_write(tpath("i.json"), names, files, 2, 0, 0), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "duplicate tensor name 'w1'"));
    const char *bad[] = {"a/b"};
    assert_int_equal(ptc_st_index_write(tpath("i.json"), names, bad, 1, 0, 0), PTC_E_INVAL);
    assert_int_equal(access(tpath("i.json"), F_OK), -1);
}

int main(void)
{
    struct CMUnitTest tests[64 + sizeof REJECTS / sizeof REJECTS[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof REJECTS / sizeof REJECTS[0]; i++) {
        struct CMUnitTest t = {REJECTS[i].label, run_reject, NULL, NULL, (void *)&REJECTS[i]};
        tests[n++] = t;
    }
    const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_reject_empty_file),
        cmocka_unit_test(test_reject_short_length_word),
        cmocka_unit_test(test_reject_header_over_limit),
        cmocka_unit_test(test_reject_header_beyond_file),
        cmocka_unit_test(test_reject_long_name),
        cmocka_unit_test(test_reject_missing_file),
        cmocka_unit_test(test_metadata_apart_same_as_jansson),
        cmocka_unit_test(test_accept_padding_scalars_empty),
        cmocka_unit_test(test_writer_canonical_bytes),
        cmocka_unit_test(test_roundtrip_byte_exact),
        cmocka_unit_test(test_writer_byte_count_errors),
        cmocka_unit_test(test_writer_rejects_bad_entries),
        cmocka_unit_test(test_writer_fault_injection),
        cmocka_unit_test(test_index_ok),
        cmocka_unit_test(test_index_errors),
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        tests[n++] = fixed[i];
    return _cmocka_run_group_tests("safetensors", tests, n, setup_dir, teardown_dir);
}
