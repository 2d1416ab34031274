/* cuBLAS through dlopen on first use (see cublas_internal.h for why). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "kernels/cublas_internal.h"
#include "ptc/build_config.h"
#include "ptc/error.h"

static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int,
                            const float *, float *, int);
    const char *(*status_string)(cublasStatus_t);
} fn;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char why[512]; /* the loader's reason, empty once loaded */

/* The versioned entry points cublas_v2.h maps the names to. */
static const char *const names[] = {"cublasCreate_v2",    "cublasDestroy_v2",
                                    "cublasSetMathMode",  "cublasSetStream_v2",
                                    "cublasSgemm_v2",     "cublasGetStatusString"};

static void load(void)
{
    void *h = dlopen(PTC_CUBLAS_SONAME, RTLD_NOW | RTLD_GLOBAL);
    if (!h)
        h = dlopen(PTC_CUBLAS_PATH, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "cannot load cuBLAS (%s): %s", PTC_CUBLAS_SONAME,
                 e ? e : "not found");
        return;
    }
    void **slot[] = {(void **)&fn.create,     (void **)&fn.destroy, (void **)&fn.set_math_mode,
                     (void **)&fn.set_stream, (void **)&fn.sgemm,   (void **)&fn.status_string};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *slot[i] = dlsym(h, names[i]);
        if (!*slot[i]) {
            snprintf(why, sizeof why, "%s has no %s", PTC_CUBLAS_SONAME, names[i]);
            fn.create = NULL; /* the marker of a usable table */
            return;
        }
    }
}

static int loaded(void)
{
    pthread_once(&once, load);
    return fn.create != NULL;
}

int ptc_cublas_load(void)
{
    if (loaded())
        return PTC_OK;
    return ptc_error_set(PTC_E_CUDA, "%s", why);
}

cublasStatus_t ptc_cublas_create(cublasHandle_t *handle)
{
    return loaded() ? fn.create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t ptc_cublas_destroy(cublasHandle_t handle)
{
    return loaded() ? fn.destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t ptc_cublas_set_math_mode(cublasHandle_t handle, cublasMath_t mode)
{
    return loaded() ? fn.set_math_mode(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t ptc_cublas_set_stream(cublasHandle_t handle, cudaStream_t stream)
{
    return loaded() ? fn.set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t ptc_cublas_sgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                                int m, int n, int k, const float *alpha, const float *a, int lda,
                                const float *b, int ldb, const float *beta, float *c, int ldc)
{
    if (!loaded())
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return fn.sgemm(handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char *ptc_cublas_status_string(cublasStatus_t status)
{
    return loaded() ? fn.status_string(status) : "cuBLAS is not loaded";
}
