/* The decoded-block cache of compressed datasets (ptc_store_block_cache):
 * eight threads reading every record in their own random order get the
 * bytes that were written; the cache never holds more than its bound (the
 * peak it reports, with a bound smaller than the dataset, so blocks are
 * evicted and readers find shards full); with room for the whole dataset
 * every block is decompressed exactly once however many threads want it;
 * (readers and readahead workers together); a bound below one block
 * caches nothing; closing a handle frees its blocks and cancels its
 * readahead; hints for later reads (the next step files) decode ahead no
 * more than a quarter of the cache, and their blocks are then read
 * without a decode. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ptc/store.h"

#define NREC 6000
#define THREADS 8

static char dir[64];
static uint64_t nblocks; /* of the data blob */

static uint64_t rec_len(uint64_t i)
{
    if (i % 97 == 5)
        return 0;
    if (i == 1234)
        return 2 * PTC_STORE_BLOCK_SIZE + 777; /* spans three blocks */
    return 1000 + (i * 7919) % 6000;
}

/* text-like: compresses, but not to nothing */
static uint8_t rec_byte(uint64_t i, uint64_t off)
{
    static const char words[] = "the quick brown fox jumps over the lazy dog 0123456789 ";
    uint64_t w = (i * 31 + off / 11) * 2654435761u;
    return (uint8_t)(off % 11 == 10 ? ' ' : words[(w >> 7) % (sizeof words - 1)]);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ptc_test_bcache_XXXXXX");
    assert_non_null(mkdtemp(dir));
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    ptc_store_dataset_options o = {.codec = PTC_STORE_CODEC_ZSTD, .level = 1};
    ptc_store_dataset_writer *w;
    assert_int_equal(ptc_store_dataset_writer_begin(&w, s, "z", &o), PTC_OK);
    uint8_t *buf = malloc(3 * PTC_STORE_BLOCK_SIZE);
    uint64_t total = 0;
    for (uint64_t i = 0; i < NREC; i++) {
        uint64_t n = rec_len(i);
        for (uint64_t k = 0; k < n; k++)
            buf[k] = rec_byte(i, k);
        assert_int_equal(ptc_store_dataset_writer_append(w, buf, (size_t)n), PTC_OK);
        total += n;
    }
    free(buf);
    ptc_store_dataset_info info;
    assert_int_equal(ptc_store_dataset_writer_commit(w, "lines", &info), PTC_OK);
    ptc_store_dataset_writer_destroy(w);
    ptc_store_close(s);
    /* compressed for real, and larger than the small caches below */
    assert_true(info.stored_bytes < info.bytes / 2);
    nblocks = (total + PTC_STORE_BLOCK_SIZE - 1) / PTC_STORE_BLOCK_SIZE;
    assert_true(nblocks >= 24);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

struct reader {
    ptc_store_dataset *d;
    unsigned seed;
    int t; /* picks the stride */
    uint64_t count; /* records read */
    uint64_t bad; /* records whose bytes differ */
    int rc;
};

/* @p count records (all of them: NREC), each once, in an order of this
 * thread's own (a stride walk). */
static void *read_all(void *p)
{
    struct reader *r = p;
    uint8_t *buf = malloc(3 * PTC_STORE_BLOCK_SIZE);
    /* primes that do not divide NREC (6000): each walk visits every record */
    static const uint64_t strides[THREADS] = {7, 11, 13, 17, 19, 23, 29, 31};
    uint64_t stride = strides[r->t] * 101;
    for (uint64_t j = 0; j < r->count && r->rc == PTC_OK; j++) {
        uint64_t i = (j * stride + r->seed) % NREC, n;
        if (j % 16 == 0) /* as a step read does: hint the next records first */
            for (uint64_t a = j; a < j + 16 && a < r->count; a++) {
                uint64_t ia = (a * stride + r->seed) % NREC, na;
                if (ptc_store_dataset_record_size(r->d, ia, &na) == PTC_OK)
                    ptc_store_dataset_record_prefetch(r->d, ia, 0, (size_t)na);
            }
        r->rc = ptc_store_dataset_record_size(r->d, i, &n);
        if (r->rc == PTC_OK)
            r->rc = ptc_store_dataset_record_read(r->d, i, 0, buf, (size_t)n);
        for (uint64_t k = 0; r->rc == PTC_OK && k < n; k++)
            if (buf[k] != rec_byte(i, k)) {
                r->bad++;
                break;
            }
        /* a piece in the middle, as a step file's read may cut a record */
        if (r->rc == PTC_OK && n > 100) {
            r->rc = ptc_store_dataset_record_read(r->d, i, n / 3, buf, 50);
            for (uint64_t k = 0; r->rc == PTC_OK && k < 50; k++)
                if (buf[k] != rec_byte(i, n / 3 + k)) {
                    r->bad++;
                    break;
                }
        }
    }
    free(buf);
    return NULL;
}

/* Eight threads over one handle, each reading @p count records. */
static void read_threads(ptc_store_dataset *d, uint64_t count)
{
    pthread_t th[THREADS];
    struct reader r[THREADS];
    for (int t = 0; t < THREADS; t++) {
        r[t] = (struct reader){.d = d, .seed = (unsigned)t * 977u, .t = t, .count = count};
        assert_int_equal(pthread_create(&th[t], NULL, read_all, &r[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(r[t].rc, PTC_OK);
        assert_int_equal(r[t].bad, 0);
    }
}

static ptc_store_dataset *open_z(ptc_store **s, ptc_store_block_cache *c)
{
    assert_int_equal(ptc_store_open(s, dir, 0), PTC_OK);
    ptc_store_dataset *d;
    assert_int_equal(ptc_store_dataset_open(&d, *s, "z"), PTC_OK);
    ptc_store_dataset_set_cache(d, c);
    return d;
}

static void test_bounded_under_threads(void **state)
{
    (void)state;
    const uint64_t cap = 8 * PTC_STORE_BLOCK_SIZE; /* a third of the dataset */
    ptc_store_block_cache *c;
    assert_int_equal(ptc_store_block_cache_create(&c, cap), PTC_OK);
    ptc_store *s;
    ptc_store_dataset *d = open_z(&s, c);
    read_threads(d, 800); /* a miss decodes 1 MiB: keep it short */
    ptc_store_block_cache_stats st;
    ptc_store_block_cache_get_stats(c, &st);
    printf("bound %llu: peak %llu, hits %llu, decodes %llu (ahead %llu), bypassed %llu\n",
           (unsigned long long)st.max_bytes, (unsigned long long)st.peak_bytes,
           (unsigned long long)st.hits, (unsigned long long)st.decodes,
           (unsigned long long)st.decoded_ahead, (unsigned long long)st.bypassed);
    assert_int_equal(st.max_bytes, cap);
    assert_true(st.peak_bytes <= cap);
    assert_true(st.bytes <= cap);
    assert_true(st.peak_bytes >= PTC_STORE_BLOCK_SIZE);
    /* the dataset does not fit: blocks were evicted and decoded again */
    assert_true(st.decodes + st.bypassed > nblocks);
    assert_true(st.hits > 0);
    ptc_store_dataset_close(d);
    ptc_store_block_cache_get_stats(c, &st);
    assert_int_equal(st.bytes, 0); /* the handle's blocks went with it */
    ptc_store_close(s);
    ptc_store_block_cache_destroy(c);
}

static void test_each_block_decoded_once(void **state)
{
    (void)state;
    ptc_store_block_cache *c;
    assert_int_equal(ptc_store_block_cache_create(&c, PTC_STORE_BLOCK_CACHE_DEFAULT), PTC_OK);
    ptc_store *s;
    ptc_store_dataset *d = open_z(&s, c);
    read_threads(d, NREC);
    read_threads(d, NREC); /* again: all from the cache */
    ptc_store_block_cache_stats st;
    ptc_store_block_cache_get_stats(c, &st);
    assert_int_equal(st.decodes, nblocks); /* by readers and readahead together */
    assert_true(st.decoded_ahead <= st.decodes);
    assert_int_equal(st.bypassed, 0);
    assert_int_equal(st.bytes, st.peak_bytes);
    assert_true(st.bytes <= nblocks * PTC_STORE_BLOCK_SIZE);
    assert_true(st.hits > 2 * THREADS * (uint64_t)NREC - nblocks);
    ptc_store_dataset_close(d);
    ptc_store_close(s);
    ptc_store_block_cache_destroy(c);
}

/* A handle closed while its readahead is queued or running: the workers
 * never touch it afterwards (run under ASan/TSan to see it). */
static void test_close_with_readahead(void **state)
{
    (void)state;
    ptc_store_block_cache *c;
    assert_int_equal(ptc_store_block_cache_create(&c, 64 * PTC_STORE_BLOCK_SIZE), PTC_OK);
    for (int round = 0; round < 20; round++) {
        ptc_store *s;
        ptc_store_dataset *d = open_z(&s, c);
        for (uint64_t i = 0; i < NREC; i += 97)
            ptc_store_dataset_record_prefetch(d, i, 0, 1000);
        ptc_store_dataset_close(d);
        ptc_store_block_cache_stats st;
        ptc_store_block_cache_get_stats(c, &st);
        assert_int_equal(st.bytes, 0);
        ptc_store_close(s);
    }
    ptc_store_block_cache_stats st;
    ptc_store_block_cache_get_stats(c, &st);
    assert_true(st.decoded_ahead <= st.decodes);
    ptc_store_block_cache_destroy(c);
}

/* The cache's counters once its workers have made at least @p decodes
 * decodes (a barrier: however slowly a loaded machine runs them) and then
 * been idle for 100 ms (so that one too many shows); at most 20 s. */
static ptc_store_block_cache_stats settled(ptc_store_block_cache *c, uint64_t decodes)
{
    ptc_store_block_cache_stats st;
    ptc_store_block_cache_get_stats(c, &st);
    for (int quiet = 0, i = 0; (quiet < 10 || st.decodes < decodes) && i < 2000; i++) {
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        uint64_t before = st.decodes;
        ptc_store_block_cache_get_stats(c, &st);
        quiet = st.decodes == before ? quiet + 1 : 0;
    }
    return st;
}

static void test_later_hints(void **state)
{
    (void)state;
    /* 64 blocks: later hints may keep 16 decoded and unread */
    ptc_store_block_cache *c;
    assert_int_equal(ptc_store_block_cache_create(&c, 64 * PTC_STORE_BLOCK_SIZE), PTC_OK);
    ptc_store *s;
    ptc_store_dataset *d = open_z(&s, c);
    assert_true(nblocks > 16);
    uint64_t n;
    for (uint64_t i = 0; i < NREC; i++) /* every block of the dataset */
        if (ptc_store_dataset_record_size(d, i, &n) == PTC_OK && n > 0)
            ptc_store_dataset_record_prefetch_later(d, i, 0, (size_t)n);
    ptc_store_block_cache_stats st = settled(c, 16);
    assert_int_equal(st.decodes, 16);
    assert_int_equal(st.decoded_ahead, 16);
    assert_int_equal(st.bytes, 16 * PTC_STORE_BLOCK_SIZE);
    /* the first records lie in the first blocks, which went first: read
     * without a decode */
    uint8_t *buf = malloc(3 * PTC_STORE_BLOCK_SIZE);
    uint64_t i = 0, end = 0;
    while (i < NREC && end + 3 * PTC_STORE_BLOCK_SIZE < 16 * PTC_STORE_BLOCK_SIZE) {
        assert_int_equal(ptc_store_dataset_record_size(d, i, &n), PTC_OK);
        assert_int_equal(ptc_store_dataset_record_read(d, i, 0, buf, (size_t)n), PTC_OK);
        for (uint64_t k = 0; k < n; k++)
            assert_int_equal(buf[k], rec_byte(i, k));
        end += n;
        i++;
    }
    ptc_store_block_cache_get_stats(c, &st);
    assert_true(i > 100);
    assert_int_equal(st.decodes, 16);
    assert_true(st.hits > 0);
    /* read: no longer counted against the later hints, which may now
     * decode again what is missing, up to 16 unread once more */
    for (uint64_t j = 0; j < NREC; j++)
        if (ptc_store_dataset_record_size(d, j, &n) == PTC_OK && n > 0)
            ptc_store_dataset_record_prefetch_later(d, j, 0, (size_t)n);
    st = settled(c, 17);
    assert_true(st.decodes > 16);
    assert_true(st.decodes <= 32);
    assert_int_equal(st.decodes, st.decoded_ahead);
    free(buf);
    ptc_store_dataset_close(d);
    ptc_store_close(s);
    ptc_store_block_cache_destroy(c);

    /* a cache whose quarter is not one block: later hints decode nothing */
    assert_int_equal(ptc_store_block_cache_create(&c, 3 * PTC_STORE_BLOCK_SIZE), PTC_OK);
    d = open_z(&s, c);
    for (uint64_t j = 0; j < NREC; j += 50)
        ptc_store_dataset_record_prefetch_later(d, j, 0, 1);
    st = settled(c, 0);
    assert_int_equal(st.decodes, 0);
    ptc_store_dataset_close(d);
    ptc_store_close(s);
    ptc_store_block_cache_destroy(c);
}

static void test_tiny_cache_and_no_cache(void **state)
{
    (void)state;
    ptc_store_block_cache *c;
    assert_int_equal(ptc_store_block_cache_create(&c, PTC_STORE_BLOCK_SIZE - 1), PTC_OK);
    ptc_store *s;
    ptc_store_dataset *d = open_z(&s, c);
    read_threads(d, 200);
    ptc_store_block_cache_stats st;
    ptc_store_block_cache_get_stats(c, &st);
    assert_int_equal(st.peak_bytes, 0);
    assert_int_equal(st.decodes, 0);
    assert_true(st.bypassed > 0);
    ptc_store_dataset_set_cache(d, NULL); /* and without one: the same bytes */
    read_threads(d, 200);
    ptc_store_dataset_close(d);
    ptc_store_close(s);
    ptc_store_block_cache_destroy(c);
    ptc_store_block_cache_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounded_under_threads),
        cmocka_unit_test(test_each_block_decoded_once),
        cmocka_unit_test(test_close_with_readahead),
        cmocka_unit_test(test_later_hints),
        cmocka_unit_test(test_tiny_cache_and_no_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
