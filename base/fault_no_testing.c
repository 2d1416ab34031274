/* The shipped library's fault hooks: none fires. The test build links
 * fault_testing.c in place of this file (cmake/modules.cmake). */
#include <stdbool.h>

#include "base/util_internal.h"

bool ptc_fault_alloc_hit(void)
{
    return false;
}

int ptc_fault_write_hit(void)
{
    return 0;
}

bool ptc_fault_send_hit(void)
{
    return false;
}

bool ptc_fault_crash_hit(const char *point)
{
    (void)point;
    return false;
}

void ptc_fault_step(const char *point, uint64_t version)
{
    (void)point;
    (void)version;
}

bool ptc_fault_mpi_single(void)
{
    return false;
}

bool ptc_fault_no_map(void)
{
    return false;
}
