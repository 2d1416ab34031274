/* The store's block checksum, XXH3-64, as fast as this CPU allows: xxHash
 * inlined (XXH_INLINE_ALL) rather than called in the shared library, which
 * builds for the baseline CPU and reaches about 19 GB/s on the development
 * machine's EPYC; inlined it reaches 28 GB/s with SSE2 and 46 GB/s with AVX2
 * (hash_avx2.c, chosen at run time). The values are XXH3_64bits' on every
 * CPU: the vector unit changes the speed, never the hash. */
#include <stdatomic.h>
#include <sys/uio.h>

#include "base/util_internal.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if PTC_HASH_AVX2
uint64_t ptc_hash_avx2(const void *p, size_t n);
uint64_t ptc_hash_iov_avx2(const struct iovec *seg, int n);

static bool have_avx2(void)
{
    static atomic_int have = -1;
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx2") ? 1 : 0;
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h == 1;
}
#endif

uint64_t ptc_hash(const void *p, size_t n)
{
#if PTC_HASH_AVX2
    if (have_avx2())
        return ptc_hash_avx2(p, n);
#endif
    return XXH3_64bits(p, n);
}

uint64_t ptc_hash_iov(const struct iovec *seg, int n)
{
#if PTC_HASH_AVX2
    if (have_avx2())
        return ptc_hash_iov_avx2(seg, n);
#endif
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 0; i < n; i++)
        XXH3_64bits_update(&st, seg[i].iov_base, seg[i].iov_len);
    return XXH3_64bits_digest(&st);
}
