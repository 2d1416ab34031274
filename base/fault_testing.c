/* Fault injection: the allocator (alloc.c) and the write wrappers (file.c)
 * ask these counters whether the N-th call fails, so that every clean-up
 * path can run in a test (include/ptc/error.h, PTC_TESTING). */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "ptc/error.h"
#include "base/util_internal.h"

static atomic_long alloc_fail_at, alloc_count;
static atomic_long write_fail_at, write_count;
static atomic_int write_fail_errno;

void ptc_fault_alloc_at(long n)
{
    atomic_store(&alloc_count, 0);
    atomic_store(&alloc_fail_at, n);
}

void ptc_fault_write_at(long n, int err)
{
    atomic_store(&write_count, 0);
    atomic_store(&write_fail_errno, err ? err : EIO);
    atomic_store(&write_fail_at, n);
}

long ptc_fault_alloc_count(void)
{
    return atomic_load(&alloc_count);
}

long ptc_fault_write_count(void)
{
    return atomic_load(&write_count);
}

bool ptc_fault_alloc_hit(void)
{
    long c = atomic_fetch_add(&alloc_count, 1) + 1;
    long at = atomic_load(&alloc_fail_at);
    return at > 0 && c == at;
}

/* Returns the errno to fail with, or 0. */
int ptc_fault_write_hit(void)
{
    long c = atomic_fetch_add(&write_count, 1) + 1;
    long at = atomic_load(&write_fail_at);
    return (at > 0 && c == at) ? atomic_load(&write_fail_errno) : 0;
}

