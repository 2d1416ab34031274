/* .npy: numpy's exact header bytes, round trips of every supported dtype,
 * v1/v2/v3 headers, every rejection (one case each, checking the code and
 * the message), data size checks, atomic writes under fault injection. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/npy.h"

static char tmpdir[256];

static int setup_dir(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/ptc-npy-XXXXXX", base);
    return mkdtemp(tmpdir) ? 0 : -1;
}

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

static int teardown_dir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
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
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    return p;
}

static void write_raw(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
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

/* A v1 (or v2/v3) file image: prefix + dict + pad + '\n' (aligned to 64). */
static unsigned char *make_npy(int major, const char *dict, size_t *len)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + 63) / 64 * 64, hl = total - pre;
    unsigned char *b = malloc(total);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        b[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', hl - dl - 1);
    b[total - 1] = '\n';
    *len = total;
    return b;
}

/* ---- numpy's exact bytes ------------------------------------------------------ */

static void test_header_matches_numpy(void **state)
{
    (void)state;
    /* np.save of np.zeros((3, 4), np.float32): a 118-byte v1.0 header */
    const char want[] = "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, "
                        "'shape': (3, 4), }";
    void *b;
    size_t len;
    int64_t shape[2] = {3, 4};
    assert_int_equal(ptc_npy_header_build(PTC_DTYPE_F32, 2, shape, &b, &len), PTC_OK);
    assert_int_equal(len, 128);
    assert_memory_equal(b, want, sizeof want - 1);
    for (size_t i = sizeof want - 1; i < 127; i++)
        assert_int_equal(((char *)b)[i], ' ');
    assert_int_equal(((char *)b)[127], '\n');
    free(b);
    /* 1-D keeps Python's 1-tuple comma; 0-D is () */
    int64_t n5 = 5;
    assert_int_equal(ptc_npy_header_build(PTC_DTYPE_U8, 1, &n5, &b, &len), PTC_OK);
    assert_non_null(memmem(b, len, "'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", 55));
    free(b);
    assert_int_equal(ptc_npy_header_build(PTC_DTYPE_F64, 0, NULL, &b, &len), PTC_OK);
    assert_non_null(memmem(b, len, "'shape': (), }", 14));
    assert_int_equal(len % 64, 0);
    free(b);
}

/* ---- round trips -------------------------------------------------------------- */

static void test_roundtrip_all_dtypes(void **state)
{
    (void)state;
    const ptc_dtype dts[] = {PTC_DTYPE_BOOL, PTC_DTYPE_U8,  PTC_DTYPE_I8,  PTC_DTYPE_I16,
                             PTC_DTYPE_U16,  PTC_DTYPE_I32, PTC_DTYPE_U32, PTC_DTYPE_I64,
                             PTC_DTYPE_U64,  PTC_DTYPE_F16, PTC_DTYPE_F32, PTC_DTYPE_F64};
    const int64_t shapes[][3] = {{2, 3, 4}, {7, 0, 0}, {0, 0, 0}, {0, 5, 0}};
    const int ndims[] = {3, 1, 0, 2};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        for (size_t s = 0; s < 4; s++) {
            size_t es = ptc_dtype_size(dts[i]);
            size_t vol = 1;
            for (int d = 0; d < ndims[s]; d++)
                vol *= (size_t)shapes[s][d];
            unsigned char data[24 * 8];
            for (size_t k = 0; k < vol * es; k++)
                data[k] = (unsigned char)(k * 13 + i);
            const char *p = tpath("rt.npy");
            assert_int_equal(ptc_npy_write(p, dts[i], ndims[s], shapes[s], data), PTC_OK);
            ptc_npy_info info;
            void *got;
            assert_int_equal(ptc_npy_read(p, &info, &got), PTC_OK);
            assert_int_equal(info.dtype, dts[i]);
            assert_int_equal(info.ndim, ndims[s]);
            assert_int_equal(info.major, 1);
            assert_int_equal(info.data_offset % 64, 0);
            for (int d = 0; d < ndims[s]; d++)
                assert_int_equal(info.shape[d], shapes[s][d]);
            assert_int_equal(info.nbytes, vol * es);
            assert_memory_equal(got, data, vol * es);
            free(got);
            assert_int_equal(ptc_npy_read_info(p, &info), PTC_OK);
            assert_int_equal(dir_entries(), 1);
            /* the file is exactly the built header followed by the data */
            size_t flen, hlen;
            void *hdr;
            unsigned char *file = read_all(p, &flen);
            assert_int_equal(ptc_npy_header_build(dts[i], ndims[s], shapes[s], &hdr, &hlen), PTC_OK);
            assert_int_equal(flen, hlen + vol * es);
            assert_memory_equal(file, hdr, hlen);
            assert_memory_equal(file + hlen, data, vol * es);
            free(hdr);
            free(file);
            unlink(p);
        }
    }
}

static void test_versions_2_and_3_and_spellings(void **state)
{
    (void)state;
    const char *dicts[] = {
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
        "{\"shape\": (2L,), \"descr\": \"<i4\", \"fortran_order\": False}",
        "{'descr':'<i4','fortran_order':False,'shape':(1,2,)}",
    };
    for (int major = 1; major <= 3; major++) {
        for (size_t k = 0; k < 3; k++) {
            size_t len;
            unsigned char *b = make_npy(major, dicts[k], &len);
            b = realloc(b, len + 8);
            memset(b + len, 0x11, 8);
            ptc_npy_info info;
            assert_int_equal(ptc_npy_parse_header(b, len + 8, &info), PTC_OK);
            assert_int_equal(info.major, major);
            assert_int_equal(info.dtype, PTC_DTYPE_I32);
            assert_int_equal(info.nbytes, 8);
            assert_int_equal(info.data_offset, len);
            const char *p = tpath("v.npy");
            write_raw(p, b, len + 8);
            void *data;
            assert_int_equal(ptc_npy_read(p, &info, &data), PTC_OK);
            assert_int_equal(((unsigned char *)data)[7], 0x11);
            free(data);
            unlink(p);
            free(b);
        }
    }
}

/* ---- rejections -------------------------------------------------------------- */

typedef struct reject_case {
    const char *label;
    int major;
    const char *dict;
    const char *want;
} reject_case;

static const reject_case REJECTS[] = {
    {"fortran_true", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
     "fortran_order True is not supported"},
    {"big_endian", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
     "big-endian descr '>f4'"},
    {"object", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
     "object descr '|O'"},
    {"complex", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }",
     "unknown or unsupported descr '<c8'"},
    {"unicode", 1, "{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }",
     "unknown or unsupported descr '<U3'"},
    {"structured", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
     "structured descr"},
    {"missing_descr", 1, "{'fortran_order': False, 'shape': (2,), }", "header lacks 'descr'"},
    {"missing_fortran", 1, "{'descr': '<f4', 'shape': (2,), }", "header lacks 'fortran_order'"},
    {"missing_shape", 1, "{'descr': '<f4', 'fortran_order': False, }", "header lacks 'shape'"},
    {"duplicate_key", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }",
     "duplicate key 'descr'"},
    {"extra_key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1, }",
     "unexpected header key 'x'"},
    {"shape_list", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2], }",
     "'shape' is not a tuple"},
    {"shape_int", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }",
     "'shape' (n) is not a tuple"},
    {"shape_negative", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
     "'shape' entry 0 is not a non-negative integer"},
    {"shape_float", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }",
     "malformed 'shape' tuple"},
    {"shape_overflow", 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
     "'shape' entry 0 overflows"},
    {"volume_overflow", 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
     "shape volume overflows"},
    {"bytes_overflow", 1,
     "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
     "shape volume overflows"},
    {"too_many_dims", 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
     "more than 8 dims"},
    {"fortran_int", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (), }",
     "'fortran_order' is not True or False"},
    {"key_not_string", 1, "{descr: '<f4', 'fortran_order': False, 'shape': (), }",
     "header dict key is not a string"},
    {"not_a_dict", 1, "('<f4', False, ())", "header is not a dict literal"},
    {"trailing_bytes", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), } x",
     "unexpected bytes after the header dict"},
    {"missing_comma", 1, "{'descr': '<f4' 'fortran_order': False, 'shape': (), }",
     "',' or '}' expected"},
    {"escape_in_string", 1, "{'descr': '<f\\4', 'fortran_order': False, 'shape': (), }",
     "'descr' is not a string"},
    {"unterminated_dict", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': ()",
     "',' or '}' expected"},
    {"non_ascii_v1", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), '\xc3\xa9': 1}",
     "non-ascii byte"},
    {"non_ascii_v3_key", 3,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (), '\xc3\xa9': 1}",
     "unexpected header key"},
};

static void run_reject(void **state)
{
    const reject_case *c = *state;
    size_t len;
    unsigned char *b = make_npy(c->major, c->dict, &len);
    ptc_npy_info info;
    int rc = ptc_npy_parse_header(b, len, &info);
    if (rc != PTC_E_FORMAT || !strstr(ptc_last_error(), c->want))
        print_error("%s: rc %d: %s\n", c->label, rc, ptc_last_error());
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), c->want));
    free(b);
}

static void expect_raw_reject(const void *b, size_t len, const char *want)
{
    ptc_npy_info info;
    int rc = ptc_npy_parse_header(b, len, &info);
    if (rc != PTC_E_FORMAT || !strstr(ptc_last_error(), want))
        print_error("rc %d: %s (want %s)\n", rc, ptc_last_error(), want);
    assert_int_equal(rc, PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), want));
}

static void test_reject_prefix(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &len);
    expect_raw_reject(b, 0, "truncated: 0 bytes");
    expect_raw_reject(b, 9, "truncated: 9 bytes");
    expect_raw_reject(b, len - 1, "truncated: header needs 128 bytes, have 127");
    b[7] = 1;
    expect_raw_reject(b, len, "unsupported npy version 1.1");
    b[7] = 0;
    b[6] = 4;
    expect_raw_reject(b, len, "unsupported npy version 4.0");
    b[6] = 0;
    expect_raw_reject(b, len, "unsupported npy version 0.0");
    b[6] = 2;
    expect_raw_reject(b, 11, "npy v2 header needs at least 12");
    b[6] = 1;
    b[len - 1] = ' ';
    expect_raw_reject(b, len, "does not end with a newline");
    b[0] = 'X';
    expect_raw_reject(b, len, "bad magic");
    free(b);
    b = make_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &len);
    b[11] = 0x80; /* 2 GiB header length */
    expect_raw_reject(b, len, "truncated: header needs");
    free(b);
}

static void test_reject_data_size(void **state)
{
    (void)state;
    size_t len;
    unsigned char *b = make_npy(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", &len);
    unsigned char *full = calloc(1, len + 7);
    memcpy(full, b, len);
    const char *p = tpath("short.npy");
    ptc_npy_info info;
    void *data = (void *)0x1;
    write_raw(p, full, len + 5);
    assert_int_equal(ptc_npy_read(p, &info, &data), PTC_E_FORMAT);
    assert_null(data);
    assert_non_null(strstr(ptc_last_error(), "shape needs 6 data bytes but the file has 5 (truncated)"));
    write_raw(p, full, len + 7);
    assert_int_equal(ptc_npy_read_info(p, &info), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "(trailing bytes)"));
    write_raw(p, full, len / 2); /* header cut */
    assert_int_equal(ptc_npy_read_info(p, &info), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "truncated"));
    assert_int_equal(strncmp(ptc_last_error(), p, strlen(p)), 0);
    write_raw(p, full, 3);
    assert_int_equal(ptc_npy_read_info(p, &info), PTC_E_FORMAT);
    assert_non_null(strstr(ptc_last_error(), "truncated: 3 bytes"));
    unlink(p);
    assert_int_equal(ptc_npy_read_info(p, &info), PTC_E_NOTFOUND);
    free(full);
    free(b);
}

static void test_write_errors(void **state)
{
    (void)state;
    int64_t shape[2] = {2, 2};
    unsigned char data[32] = {0};
    const char *p = tpath("w.npy");
    assert_int_equal(ptc_npy_write(p, PTC_DTYPE_BF16, 2, shape, data), PTC_E_UNSUPPORTED);
    assert_non_null(strstr(ptc_last_error(), "BF16 has no numpy descr"));
    assert_int_equal(ptc_npy_write(p, PTC_DTYPE_F8_E4M3, 2, shape, data), PTC_E_UNSUPPORTED);
    assert_int_equal(ptc_npy_write(p, PTC_DTYPE_F8_E5M2, 2, shape, data), PTC_E_UNSUPPORTED);
    assert_int_equal(ptc_npy_write(p, PTC_DTYPE_F32, 9, shape, data), PTC_E_INVAL);
    int64_t neg[1] = {-2};
    assert_int_equal(ptc_npy_write(p, PTC_DTYPE_F32, 1, neg, data), PTC_E_INVAL);
    assert_int_equal(ptc_npy_write("/nonexistent-dir/x.npy", PTC_DTYPE_F32, 2, shape, data),
                     PTC_E_IO);
    assert_int_equal(dir_entries(), 0);
    /* every write/fsync failing in turn leaves nothing behind */
    ptc_fault_write_at(0, 0);
    assert_int_equal(ptc_npy_write(p, PTC_DTYPE_F32, 2, shape, data), PTC_OK);
    long writes = ptc_fault_write_count();
    assert_int_equal(writes, 4); /* header, data, fsync, directory fsync */
    unlink(p);
    for (long k = 1; k < writes; k++) {
        ptc_fault_write_at(k, ENOSPC);
        int rc = ptc_npy_write(p, PTC_DTYPE_F32, 2, shape, data);
        ptc_fault_write_at(0, 0);
        assert_int_equal(rc, PTC_E_IO);
        assert_int_equal(dir_entries(), 0);
    }
    ptc_fault_alloc_at(0);
    assert_int_equal(ptc_npy_write(p, PTC_DTYPE_F32, 2, shape, data), PTC_OK);
    long allocs = ptc_fault_alloc_count();
    unlink(p);
    assert_int_equal(allocs, 3); /* header, temporary name, directory name */
    for (long k = 1; k <= allocs; k++) {
        ptc_fault_alloc_at(k);
        int rc = ptc_npy_write(p, PTC_DTYPE_F32, 2, shape, data);
        ptc_fault_alloc_at(0);
        assert_int_equal(rc, PTC_E_NOMEM);
        /* only the last one (after the rename) leaves the finished file */
        assert_int_equal(dir_entries(), k == allocs ? 1 : 0);
        unlink(p);
    }
}

int main(void)
{
    struct CMUnitTest tests[16 + sizeof REJECTS / sizeof REJECTS[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof REJECTS / sizeof REJECTS[0]; i++) {
        struct CMUnitTest t = {REJECTS[i].label, run_reject, NULL, NULL, (void *)&REJECTS[i]};
        tests[n++] = t;
    }
    const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_header_matches_numpy),
        cmocka_unit_test(test_roundtrip_all_dtypes),
        cmocka_unit_test(test_versions_2_and_3_and_spellings),
        cmocka_unit_test(test_reject_prefix),
        cmocka_unit_test(test_reject_data_size),
        cmocka_unit_test(test_write_errors),
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        tests[n++] = fixed[i];
    return _cmocka_run_group_tests("npy", tests, n, setup_dir, teardown_dir);
}
