/* Parallel configurations: both text forms, every rejection, round trips,
 * rank coordinates and layer stages against their definitions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/config.h"

static void test_parse_keys(void **state)
{
    (void)state;
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "dp=2,tp=4,pp=3"), PTC_OK);
    assert_true(c.dp == 2 && c.tp == 4 && c.pp == 3 && !c.zero && c.nlayers == 0);
    assert_int_equal(ptc_config_parse(&c, "pp=2,zero=1,layers=3:5"), PTC_OK);
    assert_true(c.dp == 1 && c.tp == 1 && c.pp == 2 && c.zero && c.nlayers == 2);
    assert_true(c.layers[0] == 3 && c.layers[1] == 5);
    assert_int_equal(ptc_config_parse(&c, "tp=8"), PTC_OK);
    assert_true(c.dp == 1 && c.tp == 8 && c.pp == 1);
    assert_int_equal(ptc_config_parse(&c, "zero=0,dp=3"), PTC_OK);
    assert_true(c.dp == 3 && !c.zero);
    /* a stage may have no layers */
    assert_int_equal(ptc_config_parse(&c, "pp=3,layers=0:4:0"), PTC_OK);
    assert_true(c.layers[0] == 0 && c.layers[1] == 4 && c.layers[2] == 0);
}

static void test_parse_path(void **state)
{
    (void)state;
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "dp2-tp4-pp1"), PTC_OK);
    assert_true(c.dp == 2 && c.tp == 4 && c.pp == 1 && !c.zero);
    assert_int_equal(ptc_config_parse(&c, "dp2-tp1-pp2-zero1-layers3:5"), PTC_OK);
    assert_true(c.dp == 2 && c.pp == 2 && c.zero && c.nlayers == 2 && c.layers[1] == 5);
    assert_int_equal(ptc_config_parse(&c, "pp4"), PTC_OK);
    assert_true(c.dp == 1 && c.tp == 1 && c.pp == 4);
}

static void expect_bad(const char *text, const char *needle)
{
    ptc_config c;
    ptc_config_init(&c);
    c.dp = 77;
    int rc = ptc_config_parse(&c, text);
    if (rc != PTC_E_INVAL || !strstr(ptc_last_error(), needle))
        fail_msg("config '%s': rc %d, message '%s' (wanted '%s')", text, rc, ptc_last_error(),
                 needle);
    assert_int_equal(c.dp, 77); /* untouched on failure */
}

static void test_parse_bad(void **state)
{
    (void)state;
    expect_bad("", "empty");
    expect_bad("tp=0", "at least 1");
    expect_bad("dp0-tp1", "at least 1");
    expect_bad("dp=abc", "not a number");
    expect_bad("dp=-1", "not a number");
    expect_bad("dp=+2", "not a number");
    expect_bad("dp= 2", "not a number");
    expect_bad("dp=", "no value");
    expect_bad("xx=2", "unknown key");
    expect_bad("dp2-foo3", "unknown key");
    expect_bad("DP=2", "unknown key");
    expect_bad("dp=2,dp=2", "twice");
    expect_bad("dp2-dp2", "twice");
    expect_bad("dp=2,", "empty item");
    expect_bad(",dp=2", "empty item");
    expect_bad("dp=2,,tp=2", "empty item");
    expect_bad("dp=2,tp", "no '='");
    expect_bad("dp=99999999999999999999", "too large");
    expect_bad("dp=1048577", "too large");
    expect_bad("dp=1024,tp=1024,pp=2", "exceeds");
    expect_bad("zero=2", "0 or 1");
    expect_bad("zero=99999", "too large");
    expect_bad("pp=2,layers=3", "entries but pp=2");
    expect_bad("pp=2,layers=1:2:3", "entries but pp=2");
    expect_bad("layers=1:2", "entries but pp=1");
    expect_bad("pp=2,layers=1:", "no value");
    expect_bad("pp=2,layers=1:x", "not a number");
    expect_bad("pp=2,layers=4294967296:1", "too large");
    expect_bad("dp2-tp", "no value");
    char longtext[20000];
    memset(longtext, '1', sizeof longtext - 1);
    longtext[sizeof longtext - 1] = '\0';
    memcpy(longtext, "dp=", 3);
    expect_bad(longtext, "too long");
    /* more than 1024 layer entries */
    char many[8000];
    size_t at = (size_t)snprintf(many, sizeof many, "pp=1025,layers=1");
    for (int i = 1; i < 1025; i++)
        at += (size_t)snprintf(many + at, sizeof many - at, ":1");
    expect_bad(many, "longer than 1024");
}

static void round_trip(const char *text)
{
    ptc_config a, b, c;
    char keys[16384], path[16384];
    assert_int_equal(ptc_config_parse(&a, text), PTC_OK);
    assert_int_equal(ptc_config_format(&a, PTC_CONFIG_STYLE_KEYS, keys, sizeof keys), PTC_OK);
    assert_int_equal(ptc_config_format(&a, PTC_CONFIG_STYLE_PATH, path, sizeof path), PTC_OK);
    assert_int_equal(ptc_config_parse(&b, keys), PTC_OK);
    assert_int_equal(ptc_config_parse(&c, path), PTC_OK);
    assert_true(ptc_config_equal(&a, &b));
    assert_true(ptc_config_equal(&a, &c));
}

static void test_format(void **state)
{
    (void)state;
    ptc_config c;
    char buf[128];
    assert_int_equal(ptc_config_parse(&c, "pp=2,tp=4,dp=2,zero=1,layers=3:5"), PTC_OK);
    assert_int_equal(ptc_config_format(&c, PTC_CONFIG_STYLE_KEYS, buf, sizeof buf), PTC_OK);
    assert_string_equal(buf, "dp=2,tp=4,pp=2,zero=1,layers=3:5");
    assert_int_equal(ptc_config_format(&c, PTC_CONFIG_STYLE_PATH, buf, sizeof buf), PTC_OK);
    assert_string_equal(buf, "dp2-tp4-pp2-zero1-layers3:5");
    assert_int_equal(ptc_config_parse(&c, "dp=3,zero=0"), PTC_OK);
    assert_int_equal(ptc_config_format(&c, PTC_CONFIG_STYLE_PATH, buf, sizeof buf), PTC_OK);
    assert_string_equal(buf, "dp3-tp1-pp1");
    /* exact fit and one byte short */
    assert_int_equal(ptc_config_format(&c, PTC_CONFIG_STYLE_PATH, buf, 12), PTC_OK);
    assert_int_equal(ptc_config_format(&c, PTC_CONFIG_STYLE_PATH, buf, 11), PTC_E_RANGE);
    round_trip("dp=2,tp=4,pp=2,zero=1,layers=3:5");
    round_trip("dp8-tp1-pp1");
    round_trip("pp=4,layers=0:4294967295:0:1");
    round_trip("zero=1");
    round_trip("dp=1048576");
}

static void test_equal(void **state)
{
    (void)state;
    ptc_config a, b;
    assert_int_equal(ptc_config_parse(&a, "dp=2,pp=2,layers=1:2"), PTC_OK);
    assert_int_equal(ptc_config_parse(&b, "dp2-pp2-layers1:2"), PTC_OK);
    assert_true(ptc_config_equal(&a, &b));
    assert_int_equal(ptc_config_parse(&b, "dp=2,pp=2,layers=2:1"), PTC_OK);
    assert_false(ptc_config_equal(&a, &b));
    assert_int_equal(ptc_config_parse(&b, "dp=2,pp=2"), PTC_OK);
    assert_false(ptc_config_equal(&a, &b));
    assert_int_equal(ptc_config_parse(&b, "dp=2,pp=2,zero=1,layers=1:2"), PTC_OK);
    assert_false(ptc_config_equal(&a, &b));
}

static void test_coords(void **state)
{
    (void)state;
    ptc_config c;
    assert_int_equal(ptc_config_parse(&c, "dp=3,tp=2,pp=4"), PTC_OK);
    assert_int_equal(ptc_config_world(&c), 24);
    for (int r = 0; r < 24; r++) {
        int p, d, t;
        ptc_config_coords(&c, r, &p, &d, &t);
        /* Megatron order: tp fastest, then dp, then pp */
        assert_int_equal(r, (p * 3 + d) * 2 + t);
        assert_int_equal(ptc_config_rank(&c, p, d, t), r);
        assert_true(p < 4 && d < 3 && t < 2);
    }
}

static void test_stages(void **state)
{
    (void)state;
    ptc_config c;
    for (int P = 1; P <= 9; P++)
        for (int64_t n = 1; n <= 20; n++) {
            ptc_config_init(&c);
            c.pp = P;
            for (int64_t L = 0; L < n; L++) {
                int s = -1, want = -1;
                assert_int_equal(ptc_config_stage_of_layer(&c, n, L, &s), PTC_OK);
                for (int k = 0; k < P; k++)
                    if (k * n / P <= L && L < (k + 1) * n / P)
                        want = k;
                assert_int_equal(s, want);
            }
        }
    /* explicit counts, including empty stages */
    assert_int_equal(ptc_config_parse(&c, "pp=4,layers=2:0:3:1"), PTC_OK);
    int want[6] = {0, 0, 2, 2, 2, 3};
    for (int L = 0; L < 6; L++) {
        int s;
        assert_int_equal(ptc_config_stage_of_layer(&c, 6, L, &s), PTC_OK);
        assert_int_equal(s, want[L]);
    }
    int s;
    assert_int_equal(ptc_config_stage_of_layer(&c, 7, 0, &s), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "sums to 6"));
    assert_int_equal(ptc_config_stage_of_layer(&c, 6, 6, &s), PTC_E_RANGE);
    assert_int_equal(ptc_config_stage_of_layer(&c, 6, -1, &s), PTC_E_RANGE);
    assert_int_equal(ptc_config_check_layers(&c, 6), PTC_OK);
    assert_int_equal(ptc_config_check_layers(&c, 5), PTC_E_CONFIG);
    ptc_config_init(&c);
    assert_int_equal(ptc_config_check_layers(&c, 123), PTC_OK);
    /* a large model does not overflow */
    c.pp = 1000;
    assert_int_equal(ptc_config_stage_of_layer(&c, (int64_t)1 << 40, ((int64_t)1 << 40) - 1, &s),
                     PTC_OK);
    assert_int_equal(s, 999);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_keys),  cmocka_unit_test(test_parse_path),
        cmocka_unit_test(test_parse_bad),   cmocka_unit_test(test_format),
        cmocka_unit_test(test_equal),       cmocka_unit_test(test_coords),
        cmocka_unit_test(test_stages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
