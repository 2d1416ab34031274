/* The allocator every module uses: failures set a PTC_E_NOMEM detail, and
 * fault injection (fault.c) can fail the N-th allocation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/error.h"
#include "base/util_internal.h"

static void *nomem(size_t n)
{
    ptc_error_set(PTC_E_NOMEM, "out of memory allocating %zu bytes", n);
    return NULL;
}

void *ptc_malloc(size_t n)
{
    if (ptc_fault_alloc_hit())
        return nomem(n);
    void *p = malloc(n ? n : 1);
    return p ? p : nomem(n);
}

void *ptc_calloc(size_t count, size_t size)
{
    if (ptc_fault_alloc_hit())
        return nomem(count * size);
    void *p = calloc(count ? count : 1, size ? size : 1);
    return p ? p : nomem(count * size);
}

void *ptc_realloc(void *p, size_t n)
{
    if (ptc_fault_alloc_hit())
        return nomem(n);
    void *q = realloc(p, n ? n : 1);
    return q ? q : nomem(n);
}

char *ptc_strndup(const char *s, size_t n)
{
    char *p = ptc_malloc(n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *ptc_strdup(const char *s)
{
    return ptc_strndup(s, strlen(s));
}

void ptc_free(void *p)
{
    free(p);
}

int ptc_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return PTC_OK;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem)
            return ptc_error_set(PTC_E_NOMEM, "array too large (%zu elements)", need);
        ncap *= 2;
    }
    void *q = ptc_realloc(*p, ncap * elem);
    if (!q)
        return PTC_E_NOMEM;
    *p = q;
    *cap = ncap;
    return PTC_OK;
}

