/* Datasets in the store and the block engine under them: byte-exact round
 * trips of records (empty, small, spanning blocks) raw and zstd, sub-range
 * reads, the catalog (exists, replace, list), gc keeping referenced packs,
 * aborted writers, corruption detected, blob records encoded/decoded. */
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

#include "ptc/dataset.h"
#include "ptc/store.h"
#include "ptc/store/store_internal.h"

#define NREC 300

static char dir[64];

static uint64_t rec_len(uint64_t i)
{
    if (i % 50 == 7)
        return 0;
    if (i == 13)
        return 3 * PTC_STORE_BLOCK_SIZE + 12345; /* spans four blocks */
    return (i * 7919) % 20000;
}

static uint8_t rec_byte(uint64_t i, uint64_t off, unsigned salt)
{
    /* compressible for some records, not for others */
    return i % 3 ? (uint8_t)(off / 64 + i + salt) : (uint8_t)((off * 2654435761u) >> 13 ^ i ^ salt);
}

static void write_dataset(ptc_store *s, const char *name, unsigned codec, bool replace,
                          unsigned salt)
{
    ptc_store_dataset_options o = {.codec = codec, .level = 3, .replace = replace};
    ptc_store_dataset_writer *w;
    assert_int_equal(ptc_store_dataset_writer_begin(&w, s, name, &o), PTC_OK);
    uint8_t *buf = malloc(4 * PTC_STORE_BLOCK_SIZE);
    for (uint64_t i = 0; i < NREC; i++) {
        uint64_t n = rec_len(i);
        for (uint64_t k = 0; k < n; k++)
            buf[k] = rec_byte(i, k, salt);
        assert_int_equal(ptc_store_dataset_writer_append(w, buf, (size_t)n), PTC_OK);
    }
    free(buf);
    ptc_store_dataset_info info;
    assert_int_equal(ptc_store_dataset_writer_commit(w, "lines", &info), PTC_OK);
    ptc_store_dataset_writer_destroy(w);
    assert_int_equal(info.samples, NREC);
}

static void check_dataset(ptc_store *s, const char *name, unsigned salt)
{
    ptc_store_dataset_info st;
    assert_int_equal(ptc_store_dataset_stat(s, name, &st), PTC_OK);
    ptc_store_dataset *d;
    assert_int_equal(ptc_store_dataset_open(&d, s, name), PTC_OK);
    const ptc_store_dataset_info *info = ptc_store_dataset_get_info(d);
    assert_int_equal(info->samples, NREC);
    uint64_t total = 0;
    uint8_t *buf = malloc(4 * PTC_STORE_BLOCK_SIZE);
    for (uint64_t i = 0; i < NREC; i++) {
        uint64_t n;
        assert_int_equal(ptc_store_dataset_record_size(d, i, &n), PTC_OK);
        assert_int_equal(n, rec_len(i));
        total += n;
        /* hints, in range or not, change nothing that is read */
        ptc_store_dataset_record_prefetch(d, i, 0, (size_t)n);
        ptc_store_dataset_record_prefetch(d, i, n, 1);
        ptc_store_dataset_record_prefetch(d, NREC + i, 0, 1);
        assert_int_equal(ptc_store_dataset_record_read(d, i, 0, buf, (size_t)n), PTC_OK);
        for (uint64_t k = 0; k < n; k++)
            if (buf[k] != rec_byte(i, k, salt))
                fail_msg("record %llu byte %llu differs", (unsigned long long)i,
                         (unsigned long long)k);
        if (n > 10) { /* a sub-range, read twice (verified path) */
            uint64_t a = n / 3, len = n / 2;
            for (int rep = 0; rep < 2; rep++) {
                assert_int_equal(ptc_store_dataset_record_read(d, i, a, buf, (size_t)len), PTC_OK);
                for (uint64_t k = 0; k < len; k++)
                    assert_int_equal(buf[k], rec_byte(i, a + k, salt));
            }
        }
        assert_int_equal(ptc_store_dataset_record_read(d, i, n, buf, 1), PTC_E_RANGE);
        /* in place: the same bytes from the mapping when stored raw (also
         * across blocks: record 13), never for compressed data */
        const void *m = &m;
        assert_int_equal(ptc_store_dataset_record_map(d, i, 0, 0, &m), PTC_OK);
        assert_null(m);
        assert_int_equal(ptc_store_dataset_record_map(d, i, n, 1, &m), PTC_E_RANGE);
        assert_null(m);
        if (n == 0)
            continue;
        uint64_t a = n / 4, len = n - n / 4 - n / 5;
        assert_int_equal(ptc_store_dataset_record_map(d, i, a, (size_t)len, &m), PTC_OK);
        if (!st.data_raw) {
            assert_null(m);
            continue;
        }
        assert_non_null(m);
        for (uint64_t k = 0; k < len; k++)
            if (((const uint8_t *)m)[k] != rec_byte(i, a + k, salt))
                fail_msg("mapped record %llu byte %llu differs", (unsigned long long)i,
                         (unsigned long long)(a + k));
    }
    assert_int_equal(info->bytes, total);
    uint64_t n;
    assert_int_equal(ptc_store_dataset_record_size(d, NREC, &n), PTC_E_RANGE);
    free(buf);
    ptc_store_dataset_close(d);
}

static void test_round_trip(void **state)
{
    (void)state;
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    write_dataset(s, "raw", PTC_STORE_CODEC_NONE, false, 1);
    write_dataset(s, "z", PTC_STORE_CODEC_ZSTD, false, 2);
    check_dataset(s, "raw", 1);
    check_dataset(s, "z", 2);
    ptc_store_dataset_info a, b;
    assert_int_equal(ptc_store_dataset_stat(s, "raw", &a), PTC_OK);
    assert_int_equal(ptc_store_dataset_stat(s, "z", &b), PTC_OK);
    assert_true(a.data_raw);
    assert_false(b.data_raw);
    assert_true(b.stored_bytes < a.stored_bytes);
    assert_int_equal(ptc_store_dataset_stat(s, "nope", &a), PTC_E_NOTFOUND);
    assert_int_equal(ptc_store_dataset_stat(s, ".bad", &a), PTC_E_INVAL);

    /* an existing name needs replace; replace swaps the content */
    ptc_store_dataset_writer *w;
    assert_int_equal(ptc_store_dataset_writer_begin(&w, s, "raw", NULL), PTC_E_EXISTS);
    assert_null(w);
    write_dataset(s, "raw", PTC_STORE_CODEC_NONE, true, 9);
    check_dataset(s, "raw", 9);

    /* an aborted writer leaves no file and no record */
    assert_int_equal(ptc_store_dataset_writer_begin(&w, s, "gone", NULL), PTC_OK);
    assert_int_equal(ptc_store_dataset_writer_append(w, "abc", 3), PTC_OK);
    ptc_store_dataset_writer_destroy(w);
    assert_int_equal(ptc_store_dataset_stat(s, "gone", &a), PTC_E_NOTFOUND);

    ptc_store_dataset_info *list;
    size_t n;
    assert_int_equal(ptc_store_datasets(s, &list, &n), PTC_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].name, "raw");
    assert_string_equal(list[1].name, "z");
    uint64_t raw_id = list[0].id, z_id = list[1].id;
    ptc_store_free(list);

    /* gc removes the replaced dataset's pack (id 1), keeps the referenced */
    ptc_store_gc_stats st;
    assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 1);
    char p[256];
    struct stat sb;
    snprintf(p, sizeof p, "%s/packs/datasets/d1.pack", dir);
    assert_int_not_equal(stat(p, &sb), 0);
    snprintf(p, sizeof p, "%s/packs/datasets/d%llu.pack", dir, (unsigned long long)raw_id);
    assert_int_equal(stat(p, &sb), 0);
    snprintf(p, sizeof p, "%s/packs/datasets/d%llu.pack", dir, (unsigned long long)z_id);
    assert_int_equal(stat(p, &sb), 0);
    check_dataset(s, "raw", 9);
    check_dataset(s, "z", 2);

    /* one flipped byte in a raw block: the record read reports it */
    assert_int_equal(ptc_store_dataset_stat(s, "raw", &a), PTC_OK);
    snprintf(p, sizeof p, "%s/packs/datasets/d%llu.pack", dir, (unsigned long long)raw_id);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    uint8_t byte;
    off_t at = (off_t)(a.data_offset + 100);
    assert_int_equal(pread(fd, &byte, 1, at), 1);
    byte ^= 0x40;
    assert_int_equal(pwrite(fd, &byte, 1, at), 1);
    close(fd);
    ptc_store_dataset *d;
    assert_int_equal(ptc_store_dataset_open(&d, s, "raw"), PTC_OK);
    uint8_t buf[64];
    uint64_t len0;
    assert_int_equal(ptc_store_dataset_record_size(d, 0, &len0), PTC_OK);
    int rc = ptc_store_dataset_record_read(d, 1, 0, buf, 8);
    assert_int_equal(rc, PTC_E_CHECKSUM);
    assert_non_null(strstr(ptc_last_error(), "dataset 'raw'"));
    ptc_store_dataset_close(d);
    /* and so does a read in place, on a handle that never read it */
    assert_int_equal(ptc_store_dataset_open(&d, s, "raw"), PTC_OK);
    const void *m = &m;
    assert_int_equal(ptc_store_dataset_record_map(d, 1, 0, 8, &m), PTC_E_CHECKSUM);
    assert_null(m);
    ptc_store_dataset_close(d);
    /* record 2 (bytes 7919 to 23757) lies after the flipped byte in the same
     * mapped raw block: on fresh handles its read, and its read in place,
     * fail as well */
    uint64_t len2;
    assert_int_equal(ptc_store_dataset_open(&d, s, "raw"), PTC_OK);
    assert_int_equal(ptc_store_dataset_record_size(d, 2, &len2), PTC_OK);
    assert_int_equal(len2, rec_len(2));
    assert_int_equal(ptc_store_dataset_record_read(d, 2, len2 - 8, buf, 8), PTC_E_CHECKSUM);
    assert_non_null(strstr(ptc_last_error(), "block 0"));
    ptc_store_dataset_close(d);
    assert_int_equal(ptc_store_dataset_open(&d, s, "raw"), PTC_OK);
    m = &m;
    assert_int_equal(ptc_store_dataset_record_map(d, 2, 0, (size_t)len2, &m), PTC_E_CHECKSUM);
    assert_null(m);
    ptc_store_dataset_close(d);
    ptc_store_close(s);
}

static void test_blob_rec_codec(void **state)
{
    (void)state;
    ptc_block blocks[2] = {{0x1122334455667788ull, PTC_STORE_BLOCK_SIZE, PTC_BLOCK_RAW},
                           {42, 100, PTC_BLOCK_ZSTD}};
    ptc_blob_rec r = {.offset = 64, .length = PTC_STORE_BLOCK_SIZE + 100,
                      .raw_length = PTC_STORE_BLOCK_SIZE + 500, .codec = 1, .nblocks = 2,
                      .blocks = blocks};
    ptc_buf b = {0};
    assert_int_equal(ptc_blob_rec_encode(&b, &r), PTC_OK);
    assert_int_equal(b.len, 40 + 32);
    const uint8_t *p = b.p;
    size_t n = b.len;
    ptc_blob_rec d;
    assert_int_equal(ptc_blob_rec_decode(&d, &p, &n), PTC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(d.raw_length, r.raw_length);
    assert_memory_equal(d.blocks, blocks, sizeof blocks);
    ptc_blob_rec_free(&d);
    for (size_t cut = 0; cut < b.len; cut++) { /* every truncation is an error */
        p = b.p;
        n = cut;
        assert_int_equal(ptc_blob_rec_decode(&d, &p, &n), PTC_E_FORMAT);
    }
    b.p[19] ^= 1; /* raw length + 16 MiB: no longer matches the block table */
    p = b.p;
    n = b.len;
    assert_int_equal(ptc_blob_rec_decode(&d, &p, &n), PTC_E_FORMAT);
    free(b.p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ptc_dsstore_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    rmdir(dir); /* the store refuses a non-empty directory; let it create */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_blob_rec_codec),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
