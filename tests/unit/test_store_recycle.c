/* Spare pack files (docs/format.md §7): a recycling gc keeps the files of a
 * dropped version that no reader holds as packs/spare/rank-<R>.pack, and
 * the next writer of rank R renames it into its version and overwrites it
 * in place, its stale tail cut;
 *  - the new version's file is the old one (same inode), as long as a fresh
 *    write, and reads back byte-exact; verify passes;
 *  - a file a reader holds is removed instead, and the reader still reads
 *    the dropped version's bytes;
 *  - a plain gc removes every spare; a spare no writer took is removed by
 *    the next recycling gc;
 *  - a link in a spare's place is neither taken nor followed, a spare with
 *    another name (a hard link) is not taken;
 *  - a file being written (a pack-only writer's, never committed) or held
 *    exclusively (by gc moving it) is not recycled / not read;
 *  - two dropped versions' files of one rank leave one spare; a spare
 *    smaller than the new file grows;
 *  - a shard read in place from the reader's mapping
 *    (ptc_store_reader_map_shard): its bytes, checked (a flipped byte is a
 *    checksum error), none for a compressed shard, and still the version's
 *    bytes after the version is deleted and the next save written.
 * Needs nothing but a temporary directory. */
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ptc/store.h"
#include "ptc/store/store_ranks.h"

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(p);
}

static char *mktmp(void)
{
    char *t = strdup("/tmp/ptc_recycle_XXXXXX");
    assert_non_null(mkdtemp(t));
    return t;
}

static void rmrf(char *p)
{
    nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(p);
}

static ptc_store *open_store(const char *dir)
{
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, dir, PTC_STORE_CREATE), PTC_OK);
    return s;
}

/* Element i of the one tensor of a version written with @p salt. */
static float value(int salt, int i)
{
    return (float)(salt * 100000 + i);
}

/* A version of one F32 tensor [cols] on rank 0, zstd-compressed with @p zstd. */
static uint64_t put_codec(ptc_store *s, int salt, int64_t cols, bool zstd)
{
    ptc_store_write_options o = {.world_size = 1, .config = "dp=1,tp=1,pp=1", .step = "1",
                                 .codec = zstd ? PTC_STORE_CODEC_ZSTD : PTC_STORE_CODEC_NONE};
    ptc_store_writer *w;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    uint32_t idx;
    assert_int_equal(ptc_store_writer_add_tensor(w, "w", 1, PTC_DTYPE_F32, 1, &cols, "", &idx),
                     PTC_OK);
    float *buf = malloc((size_t)cols * sizeof *buf);
    for (int64_t i = 0; i < cols; i++)
        buf[i] = value(salt, (int)i);
    ptc_piece p = {.box = {.ndim = 1, .lo = {0}, .hi = {cols}}, .local_stride = {1}};
    assert_int_equal(
        ptc_store_shard_put(w, idx, 0, 1, &cols, &p, 1, buf, (size_t)cols * sizeof *buf),
        PTC_OK);
    free(buf);
    uint64_t v;
    assert_int_equal(ptc_store_writer_commit(w, &v), PTC_OK);
    ptc_store_writer_destroy(w);
    return v;
}

static uint64_t put(ptc_store *s, int salt, int64_t cols)
{
    return put_codec(s, salt, cols, false);
}

/* The tensor of version @p v reads back as written with @p salt. */
static void check(ptc_store_reader *r, int salt, int64_t cols)
{
    float *buf = malloc((size_t)cols * sizeof *buf);
    assert_int_equal(ptc_store_reader_read_shard(r, 0, 0, buf, (size_t)cols * sizeof *buf),
                     PTC_OK);
    for (int64_t i = 0; i < cols; i++)
        if (buf[i] != value(salt, (int)i))
            fail_msg("element %lld: %g, not %g", (long long)i, (double)buf[i],
                     (double)value(salt, (int)i));
    free(buf);
}

static void check_version(ptc_store *s, uint64_t v, int salt, int64_t cols)
{
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, v), PTC_OK);
    check(r, salt, cols);
    ptc_store_reader_close(r);
}

/* stat of STORE/REL, no link followed; false if absent. */
static bool stat_at(const char *dir, const char *rel, struct stat *st)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return lstat(p, st) == 0;
}

/* The size of the pack file of a version written with @p salt and
 * @p cols into a new store: what a recycled file must be cut to. */
static off_t fresh_size(int salt, int64_t cols)
{
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, salt, cols);
    struct stat st;
    assert_true(stat_at(dir, "packs/v1/rank-0.pack", &st));
    ptc_store_close(s);
    rmrf(dir);
    return st.st_size;
}

static void test_spare_overwritten_in_place(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    assert_int_equal(put(s, 1, 600000), 1); /* 2.4 MB: three blocks */
    assert_int_equal(put(s, 2, 600000), 2);
    struct stat v1, sp, v3;
    assert_true(stat_at(dir, "packs/v1/rank-0.pack", &v1));
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_OK);
    ptc_store_gc_stats st;
    assert_int_equal(ptc_store_gc_recycle(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 1);
    assert_false(stat_at(dir, "packs/v1", &sp));
    assert_true(stat_at(dir, "packs/spare/rank-0.pack", &sp));
    assert_int_equal(sp.st_ino, v1.st_ino);
    /* a smaller version: the spare's tail is cut */
    assert_int_equal(put(s, 3, 300000), 3);
    assert_false(stat_at(dir, "packs/spare/rank-0.pack", &sp));
    assert_true(stat_at(dir, "packs/v3/rank-0.pack", &v3));
    assert_int_equal(v3.st_ino, v1.st_ino);
    assert_int_equal(v3.st_size, fresh_size(3, 300000));
    assert_true(v3.st_size < v1.st_size);
    check_version(s, 2, 2, 600000);
    check_version(s, 3, 3, 300000);
    assert_int_equal(ptc_store_verify(s, 0, NULL, NULL), PTC_OK);
    ptc_store_close(s);
    rmrf(dir);
}

static void test_held_file_removed_not_recycled(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 300000);
    put(s, 2, 300000);
    struct stat v1, x;
    assert_true(stat_at(dir, "packs/v1/rank-0.pack", &v1));
    ptc_store_reader *r;
    assert_int_equal(ptc_store_reader_open(&r, s, 1), PTC_OK);
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_OK);
    assert_int_equal(ptc_store_gc_recycle(s, NULL), PTC_OK);
    assert_false(stat_at(dir, "packs/v1", &x));
    assert_false(stat_at(dir, "packs/spare/rank-0.pack", &x)); /* held: removed */
    put(s, 3, 300000);
    assert_true(stat_at(dir, "packs/v3/rank-0.pack", &x));
    check(r, 1, 300000); /* the reader keeps the deleted version's bytes */
    ptc_store_reader_close(r);
    check_version(s, 3, 3, 300000);
    ptc_store_close(s);
    rmrf(dir);
}

static void test_gc_removes_spares(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 1000);
    put(s, 2, 1000);
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_OK);
    assert_int_equal(ptc_store_gc_recycle(s, NULL), PTC_OK);
    /* a spare of a rank no writer writes: the next recycling gc removes it */
    char p[512];
    snprintf(p, sizeof p, "%s/packs/spare/rank-5.pack", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("stale", f);
    fclose(f);
    put(s, 3, 1000); /* takes rank-0's spare */
    struct stat x;
    assert_true(stat_at(dir, "packs/spare/rank-5.pack", &x));
    assert_int_equal(ptc_store_version_delete(s, 2), PTC_OK);
    ptc_store_gc_stats st;
    assert_int_equal(ptc_store_gc_recycle(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 2); /* the stale spare, v2's file moved */
    assert_false(stat_at(dir, "packs/spare/rank-5.pack", &x));
    assert_true(stat_at(dir, "packs/spare/rank-0.pack", &x));
    /* a plain gc leaves no spare */
    assert_int_equal(ptc_store_gc(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 1);
    assert_int_equal(st.dirs_removed, 1);
    assert_false(stat_at(dir, "packs/spare", &x));
    check_version(s, 3, 3, 1000);
    ptc_store_close(s);
    rmrf(dir);
}

static void test_link_spare_left_alone(void **state)
{
    (void)state;
    char *dir = mktmp(), *out = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 1000);
    char p[512], target[512];
    snprintf(p, sizeof p, "%s/packs/spare", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(target, sizeof target, "%s/victim", out);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fputs("keep me", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/packs/spare/rank-0.pack", dir);
    assert_int_equal(symlink(target, p), 0);
    put(s, 2, 1000);
    struct stat x;
    assert_true(stat_at(dir, "packs/v2/rank-0.pack", &x));
    assert_true(S_ISREG(x.st_mode));
    assert_true(stat_at(dir, "packs/spare/rank-0.pack", &x));
    assert_true(S_ISLNK(x.st_mode));
    check_version(s, 2, 2, 1000);
    /* gc names the link and follows nothing */
    assert_int_equal(ptc_store_gc(s, NULL), PTC_E_STORE);
    assert_non_null(strstr(ptc_last_error(), "symbolic link"));
    char got[16] = {0};
    f = fopen(target, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof got, f));
    fclose(f);
    assert_string_equal(got, "keep me");
    ptc_store_close(s);
    rmrf(dir);
    rmrf(out);
}

static void test_hard_linked_spare_not_taken(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 1000);
    put(s, 2, 1000);
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_OK);
    assert_int_equal(ptc_store_gc_recycle(s, NULL), PTC_OK);
    char sp[512], other[512];
    snprintf(sp, sizeof sp, "%s/packs/spare/rank-0.pack", dir);
    snprintf(other, sizeof other, "%s/backup.pack", dir);
    assert_int_equal(link(sp, other), 0);
    struct stat before, x, v3;
    assert_int_equal(stat(other, &before), 0);
    put(s, 3, 1000);
    assert_true(stat_at(dir, "packs/spare/rank-0.pack", &x)); /* left alone */
    assert_true(stat_at(dir, "packs/v3/rank-0.pack", &v3));
    assert_int_not_equal(v3.st_ino, before.st_ino);
    assert_int_equal(stat(other, &x), 0);
    assert_int_equal(x.st_size, before.st_size);
    assert_int_equal(x.st_mtime, before.st_mtime);
    check_version(s, 3, 3, 1000);
    ptc_store_close(s);
    rmrf(dir);
}

static void test_written_file_not_recycled(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 1000);
    /* a straggler: a pack-only writer of version 5 that nobody commits */
    ptc_store_write_options o = {.world_size = 1, .config = "dp=1,tp=1,pp=1"};
    uint32_t rank = 0;
    ptc_store_writer *w;
    assert_int_equal(ptc_store_writer_begin_pack(&w, s, 5, &o, &rank, 1), PTC_OK);
    int64_t cols = 1000;
    uint32_t idx;
    assert_int_equal(ptc_store_writer_add_tensor(w, "w", 1, PTC_DTYPE_F32, 1, &cols, "", &idx),
                     PTC_OK);
    float buf[1000] = {0};
    ptc_piece p = {.box = {.ndim = 1, .lo = {0}, .hi = {cols}}, .local_stride = {1}};
    assert_int_equal(ptc_store_shard_put(w, idx, 0, 1, &cols, &p, 1, buf, sizeof buf), PTC_OK);
    struct stat x;
    assert_true(stat_at(dir, "packs/v5/rank-0.pack", &x));
    assert_int_equal(ptc_store_gc_recycle(s, NULL), PTC_OK);
    assert_false(stat_at(dir, "packs/v5/rank-0.pack", &x)); /* unlinked, */
    assert_false(stat_at(dir, "packs/spare/rank-0.pack", &x)); /* not kept */
    ptc_store_writer_destroy(w);
    check_version(s, 1, 1, 1000);
    ptc_store_close(s);
    rmrf(dir);
}

static void test_locked_file_not_read(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 1000);
    char p[512];
    snprintf(p, sizeof p, "%s/packs/v1/rank-0.pack", dir);
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0); /* as gc holds a file it moves away */
    ptc_store_reader *r;
    assert_int_not_equal(ptc_store_reader_open(&r, s, 1), PTC_OK);
    close(fd);
    check_version(s, 1, 1, 1000);
    ptc_store_close(s);
    rmrf(dir);
}

static void test_two_dropped_one_spare_grows(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 1000);
    put(s, 2, 2000);
    put(s, 3, 1000);
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_OK);
    assert_int_equal(ptc_store_version_delete(s, 2), PTC_OK);
    ptc_store_gc_stats st;
    assert_int_equal(ptc_store_gc_recycle(s, &st), PTC_OK);
    assert_int_equal(st.files_removed, 2);
    assert_int_equal(st.dirs_removed, 2);
    struct stat sp, v4;
    assert_true(stat_at(dir, "packs/spare/rank-0.pack", &sp));
    assert_false(stat_at(dir, "packs/v1", &v4));
    assert_false(stat_at(dir, "packs/v2", &v4));
    put(s, 4, 700000); /* larger than the spare */
    assert_true(stat_at(dir, "packs/v4/rank-0.pack", &v4));
    assert_int_equal(v4.st_ino, sp.st_ino);
    assert_int_equal(v4.st_size, fresh_size(4, 700000));
    check_version(s, 3, 3, 1000);
    check_version(s, 4, 4, 700000);
    assert_int_equal(ptc_store_verify(s, 0, NULL, NULL), PTC_OK);
    ptc_store_close(s);
    rmrf(dir);
}

static void check_map(ptc_store_reader *r, int salt, int64_t cols)
{
    const void *at;
    assert_int_equal(ptc_store_reader_map_shard(r, 0, 0, &at), PTC_OK);
    assert_non_null(at);
    const float *f = at;
    for (int64_t i = 0; i < cols; i++)
        if (f[i] != value(salt, (int)i))
            fail_msg("mapped element %lld: %g", (long long)i, (double)f[i]);
}

static void test_mapped_shard(void **state)
{
    (void)state;
    char *dir = mktmp();
    ptc_store *s = open_store(dir);
    put(s, 1, 600000);
    put_codec(s, 2, 600000, true);
    ptc_store_reader *r, *z;
    assert_int_equal(ptc_store_reader_open(&r, s, 1), PTC_OK);
    check_map(r, 1, 600000);
    assert_int_equal(ptc_store_reader_open(&z, s, 2), PTC_OK);
    const void *at = &at;
    assert_int_equal(ptc_store_reader_map_shard(z, 0, 0, &at), PTC_OK);
    assert_null(at); /* compressed: read it */
    check(z, 2, 600000);
    ptc_store_reader_close(z);
    /* deleted, collected, the next save written: the mapping keeps v1's bytes */
    assert_int_equal(ptc_store_version_delete(s, 1), PTC_OK);
    assert_int_equal(ptc_store_gc_recycle(s, NULL), PTC_OK);
    put(s, 3, 600000);
    check_map(r, 1, 600000);
    ptc_store_reader_close(r);
    /* a flipped byte of the payload (block 2): a checksum error */
    char p[512];
    snprintf(p, sizeof p, "%s/packs/v3/rank-0.pack", dir);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, 64 + (2 << 20) + 5, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 64 + (2 << 20) + 5, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    assert_int_equal(ptc_store_reader_open(&r, s, 3), PTC_OK);
    assert_int_equal(ptc_store_reader_map_shard(r, 0, 0, &at), PTC_E_CHECKSUM);
    ptc_store_reader_close(r);
    ptc_store_close(s);
    rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spare_overwritten_in_place),
        cmocka_unit_test(test_held_file_removed_not_recycled),
        cmocka_unit_test(test_gc_removes_spares),
        cmocka_unit_test(test_link_spare_left_alone),
        cmocka_unit_test(test_hard_linked_spare_not_taken),
        cmocka_unit_test(test_written_file_not_recycled),
        cmocka_unit_test(test_locked_file_not_read),
        cmocka_unit_test(test_two_dropped_one_spare_grows),
        cmocka_unit_test(test_mapped_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
