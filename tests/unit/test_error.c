/* The thread's last error message: wrapping the previous message in a new
 * one (the store does it on every layer), one line always, errno text. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/ptc.h"
#include "base/util_internal.h"

static void test_wrap(void **state)
{
    (void)state;
    assert_int_equal(ptc_error_set(PTC_E_FORMAT, "record: truncated at byte %d", 8),
                     PTC_E_FORMAT);
    assert_int_equal(ptc_error_set(PTC_E_STORE, "store %s version %d: %s", "s", 1,
                                   ptc_last_error()),
                     PTC_E_STORE);
    assert_string_equal(ptc_last_error(), "store s version 1: record: truncated at byte 8");
    /* twice more, the message growing past the buffer: cut, never garbled */
    char big[900];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ptc_error_set(PTC_E_IO, "%s", big);
    ptc_error_set(PTC_E_IO, "a: %s", ptc_last_error());
    ptc_error_set(PTC_E_IO, "b: %s", ptc_last_error());
    const char *m = ptc_last_error();
    assert_int_equal(strncmp(m, "b: a: xxx", 9), 0);
    assert_true(strlen(m) < 1024 && strlen(m) > 900);
    assert_int_equal(strspn(m + 6, "x"), strlen(m) - 6);
}

static void test_one_line(void **state)
{
    (void)state;
    ptc_error_set(PTC_E_INVAL, "tensor '%s' bad", "a\nb\rc");
    assert_string_equal(ptc_last_error(), "tensor 'a b c' bad");
    ptc_error_clear();
    assert_string_equal(ptc_last_error(), "");
}

static void test_sys(void **state)
{
    (void)state;
    ptc_error_set(PTC_E_NOTFOUND, "inner");
    errno = ENOENT;
    assert_int_equal(ptc_error_sys(PTC_E_IO, "open %s (%s)", "f", ptc_last_error()), PTC_E_IO);
    assert_string_equal(ptc_last_error(), "open f (inner): No such file or directory");
    assert_int_equal(errno, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrap),
        cmocka_unit_test(test_one_line),
        cmocka_unit_test(test_sys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
