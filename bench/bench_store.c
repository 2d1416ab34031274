/* Store throughput: write a 128 MiB tensor (2 ranks), read it whole, read a
 * column slab (strided runs) and a transposed box; raw and zstd. Prints MB/s
 * and, as the baseline, plain pread of the same pack files from page cache. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ptc/store.h"

#include "bench_util.h"

static void run(const char *dir, unsigned codec)
{
    const int64_t R = 4096, C = 8192;
    const size_t bytes = (size_t)(R * C * 4);
    float *g = malloc(bytes), *out = malloc(bytes);
    for (int64_t i = 0; i < R * C; i++)
        g[i] = codec ? (float)(i % 1000) : (float)rand();
    ptc_store *s;
    CHECK(ptc_store_open(&s, dir, PTC_STORE_CREATE));
    ptc_store_write_options o = {.world_size = 2, .codec = codec, .level = 1};
    ptc_store_writer *w;
    double t0 = bench_now();
    CHECK(ptc_store_writer_begin(&w, s, &o));
    const int64_t shape[2] = {R, C};
    uint32_t idx;
    CHECK(ptc_store_writer_add_tensor(w, "w", 1, PTC_DTYPE_F32, 2, shape, NULL, &idx));
    for (int r = 0; r < 2; r++) {
        ptc_piece pc;
        memset(&pc, 0, sizeof pc);
        pc.box.ndim = 2;
        pc.box.lo[0] = r * R / 2;
        pc.box.hi[0] = (r + 1) * R / 2;
        pc.box.hi[1] = C;
        pc.local_stride[0] = C;
        pc.local_stride[1] = 1;
        int64_t ls[2] = {R / 2, C};
        CHECK(ptc_store_shard_put(w, idx, (uint32_t)r, 2, ls, &pc, 1, g + r * (R / 2) * C,
                                  bytes / 2));
    }
    uint64_t v;
    CHECK(ptc_store_writer_commit(w, &v));
    ptc_store_writer_destroy(w);
    double tw = bench_now() - t0;
    ptc_store_reader *rd;
    CHECK(ptc_store_reader_open(&rd, s, v));
    ptc_box all = {2, {0, 0}, {R, C}};
    CHECK(ptc_store_reader_read_box(rd, 0, &all, out, NULL)); /* warm the page cache */
    t0 = bench_now();
    CHECK(ptc_store_reader_read_box(rd, 0, &all, out, NULL));
    double tr = bench_now() - t0;
    if (memcmp(out, g, bytes) != 0) {
        fprintf(stderr, "mismatch\n");
        exit(1);
    }
    ptc_box slab = {2, {0, 1024}, {R, 2048}};
    t0 = bench_now();
    CHECK(ptc_store_reader_read_box(rd, 0, &slab, out, NULL));
    double ts = bench_now() - t0;
    ptc_box sq = {2, {1000, 1000}, {3000, 3000}};
    const int64_t tr_st[2] = {1, 2000};
    t0 = bench_now();
    CHECK(ptc_store_reader_read_box(rd, 0, &sq, out, tr_st));
    double tt = bench_now() - t0;
    /* baseline: pread of the pack files */
    char path[4096];
    double tp = 0;
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/packs/v%llu/rank-%d.pack", dir, (unsigned long long)v, r);
        int fd = open(path, O_RDONLY);
        off_t n = lseek(fd, 0, SEEK_END);
        char *buf = (char *)out;
        t0 = bench_now();
        for (off_t o2 = 0; o2 < n; o2 += 1 << 20)
            if (pread(fd, buf + (o2 % (64 << 20)), 1 << 20, o2) < 0)
                exit(1);
        tp += bench_now() - t0;
        close(fd);
    }
    ptc_shard_info si;
    CHECK(ptc_store_reader_shard(rd, 0, 0, &si));
    const double mb = bytes / 1e6;
    printf("%-4s write+commit %7.0f MB/s | read whole %7.0f MB/s (pread baseline %7.0f MB/s, "
           "stored %.0f%%) | slab 1/8 cols %7.0f MB/s | transposed 2000^2 %7.0f MB/s\n",
           codec ? "zstd" : "raw", mb / tw, mb / tr, (si.length * 2 / 1e6) / tp,
           100.0 * si.length / si.raw_length, mb / 8 / ts, 2000.0 * 2000 * 4 / 1e6 / tt);
    ptc_store_reader_close(rd);
    ptc_store_close(s);
    free(g);
    free(out);
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/ptc_bench_store_XXXXXX";
    const char *base = argc > 1 ? argv[1] : mkdtemp(tmpl);
    char d1[4096], d2[4096];
    snprintf(d1, sizeof d1, "%s/raw", base);
    snprintf(d2, sizeof d2, "%s/zstd", base);
    run(d1, PTC_STORE_CODEC_NONE);
    run(d2, PTC_STORE_CODEC_ZSTD);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (argc == 1 && system(cmd) != 0)
        return 1;
    return 0;
}
