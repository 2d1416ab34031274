/* Version metadata set through the store writer: many keys (each set once
 * or several times, in scrambled order), the last value of a key wins, the
 * stored text is a compact JSON object with sorted keys and jansson's
 * escaping, bad UTF-8 is refused at once, and the cost per key does not
 * grow with the number of keys already set. */
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
#include <jansson.h>

#include "ptc/store.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ptc-test-meta.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static ptc_store *open_store(const char *name)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ptc_store *s;
    assert_int_equal(ptc_store_open(&s, p, PTC_STORE_CREATE), PTC_OK);
    return s;
}

static ptc_store_writer *begin(ptc_store *s)
{
    ptc_store_write_options o = {.world_size = 1};
    ptc_store_writer *w;
    assert_int_equal(ptc_store_writer_begin(&w, s, &o), PTC_OK);
    return w;
}

/* The metadata text of the store's newest version. */
static char *latest_metadata(ptc_store *s)
{
    ptc_version_info *v;
    size_t n;
    assert_int_equal(ptc_store_versions(s, &v, &n), PTC_OK);
    assert_true(n > 0);
    char *m = strdup(v[n - 1].metadata_json);
    ptc_store_versions_free(v, n);
    return m;
}

static void test_values_order_escaping(void **state)
{
    (void)state;
    ptc_store *s = open_store("a");
    ptc_store_writer *w = begin(s);
    enum { N = 5000 };
    json_t *want = json_object();
    char k[64], v[64];
    /* keys in scrambled order; every third key set again later */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < N; i++) {
            int j = (int)(((unsigned)i * 2654435761u) % N);
            if (pass == 1 && j % 3)
                continue;
            snprintf(k, sizeof k, "key %05d", j);
            snprintf(v, sizeof v, "value %d of pass %d", j, pass);
            assert_int_equal(ptc_store_writer_set_metadata(w, k, v), PTC_OK);
            json_object_set_new(want, k, json_string(v));
        }
    static const char *const odd[][2] = {
        {"quote\"back\\slash", "tab\tnew\nline\x01"},
        {"", "empty key"},
        {"\xc3\xa9t\xc3\xa9", "\xe2\x82\xac \xf0\x9f\x98\x80"},
        {"empty value", ""},
        /* around the 8-byte prefix the sort compares first */
        {"abcdefgh", "8"},
        {"abcdefg", "7"},
        {"abcdefghi", "9"},
        {"abcdefgh\xc3\xa9", "high byte after the prefix"},
        {"abcdefgh\x7f", "DEL after the prefix"},
        {"\xc3\xa9tabcdefgh", "high byte in the prefix"},
        {"abcdefgh", "8 again: the later value wins"},
    };
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
        assert_int_equal(ptc_store_writer_set_metadata(w, odd[i][0], odd[i][1]), PTC_OK);
        json_object_set_new(want, odd[i][0], json_string(odd[i][1]));
    }
    /* refused at once, and nothing of them kept */
    assert_int_equal(ptc_store_writer_set_metadata(w, "bad\xff", "v"), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "UTF-8"));
    assert_int_equal(ptc_store_writer_set_metadata(w, "k", "\xc0\xaf"), PTC_E_INVAL);
    assert_int_equal(ptc_store_writer_set_metadata(w, NULL, "v"), PTC_E_INVAL);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);

    char *got = latest_metadata(s);
    char *expect = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(got, expect);
    free(expect);
    free(got);
    json_decref(want);

    /* no metadata at all: "{}" */
    w = begin(s);
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    ptc_store_writer_destroy(w);
    got = latest_metadata(s);
    assert_string_equal(got, "{}");
    free(got);
    ptc_store_close(s);
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU seconds to set @p n distinct keys and commit. */
static double set_and_commit(ptc_store *s, int n)
{
    ptc_store_writer *w = begin(s);
    char k[32];
    double t0 = cpu_now();
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof k, "k%08x", (unsigned)i * 2654435761u);
        assert_int_equal(ptc_store_writer_set_metadata(w, k, "v"), PTC_OK);
    }
    assert_int_equal(ptc_store_writer_commit(w, NULL), PTC_OK);
    double t = cpu_now() - t0;
    ptc_store_writer_destroy(w);
    return t;
}

/* A scan of the earlier keys per key makes 8x the keys cost 64x the time;
 * linear (n log n) work costs about 8-9x. The bound (24x, best of three) is
 * far from both, so a loaded machine does not make it flaky. */
static void test_not_quadratic(void **state)
{
    (void)state;
    ptc_store *s = open_store("b");
    double small = 1e9, large = 1e9;
    for (int r = 0; r < 3; r++) {
        double a = set_and_commit(s, 10000), b = set_and_commit(s, 80000);
        small = a < small ? a : small;
        large = b < large ? b : large;
    }
    print_message("10k keys %.4f s, 80k keys %.4f s: ratio %.1f\n", small, large,
                  large / small);
    assert_true(large < 24 * small + 0.05);
    ptc_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_order_escaping),
        cmocka_unit_test(test_not_quadratic),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
