/* cuBLAS on first use (kernels/cublas_cuda.c): a process of a CUDA build
 * does not map libcublas until a wrapper needs it, then loads it once and
 * the wrappers reach it. Needs no GPU (cublasGetStatusString does not touch
 * a device). In a build without CUDA there is nothing to load: skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/build_config.h"
#include "ptc/error.h"

#if PTC_WITH_CUDA
#include "kernels/cublas_internal.h"

/* Whether this process maps a file whose name contains libcublas.so. */
static bool cublas_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/libcublas.so"))
            found = true;
    fclose(f);
    return found;
}

static void loaded_on_first_use(void **state)
{
    (void)state;
    assert_false(cublas_mapped()); /* not linked: libptc's start did not map it */
    assert_int_equal(ptc_cublas_load(), PTC_OK);
    assert_true(cublas_mapped());
    assert_int_equal(ptc_cublas_load(), PTC_OK); /* once: the second call is a no-op */
    /* the wrappers reach the library's own entry points: its texts, not the
     * stand-in of an unloaded library, one per status */
    const char *a = ptc_cublas_status_string(CUBLAS_STATUS_NOT_INITIALIZED);
    const char *b = ptc_cublas_status_string(CUBLAS_STATUS_SUCCESS);
    assert_non_null(a);
    assert_non_null(b);
    assert_string_not_equal(a, "cuBLAS is not loaded");
    assert_string_not_equal(a, b);
    /* a handle needs a device: without one cublasCreate fails, with one it
     * succeeds; either way through the loaded library, not the stand-in */
    cublasHandle_t h = NULL;
    cublasStatus_t st = ptc_cublas_create(&h);
    if (st == CUBLAS_STATUS_SUCCESS)
        assert_int_equal(ptc_cublas_destroy(h), CUBLAS_STATUS_SUCCESS);
    else
        assert_null(h);
}
#endif

int main(void)
{
#if PTC_WITH_CUDA
    const struct CMUnitTest tests[] = {cmocka_unit_test(loaded_on_first_use)};
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    puts("skipped: a build without CUDA loads no cuBLAS");
    return 77;
#endif
}
