/* hash.c's functions compiled for AVX2 (x86-64 with GCC; hash.c calls them
 * only where the CPU has AVX2). */
#include <sys/uio.h>

#include "base/util_internal.h"

#if PTC_HASH_AVX2
#pragma GCC target("avx2")
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t ptc_hash_avx2(const void *p, size_t n);
uint64_t ptc_hash_iov_avx2(const struct iovec *seg, int n);

uint64_t ptc_hash_avx2(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

uint64_t ptc_hash_iov_avx2(const struct iovec *seg, int n)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 0; i < n; i++)
        XXH3_64bits_update(&st, seg[i].iov_base, seg[i].iov_len);
    return XXH3_64bits_digest(&st);
}
#else
typedef int ptc_hash_avx2_unused; /* not an empty translation unit */
#endif
