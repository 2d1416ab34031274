/* The umbrella header compiles on its own and the version is reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/ptc.h"

static void version_is_dotted(void **state)
{
    (void)state;
    const char *v = ptc_version();
    assert_non_null(strchr(v, '.'));
    assert_string_equal(ptc_strerror(PTC_OK), "success");
    assert_string_equal(ptc_strerror(PTC_E_CHECKSUM), "checksum mismatch");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(version_is_dotted)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
