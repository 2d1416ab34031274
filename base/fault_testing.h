/* Fault injection: the setters of the test build (base/fault_testing.c).
 * Never installed, and not in the shipped libptc: only test programs, the
 * test build's libptc.so (build/test-hooks/, for the Python tests) and its
 * ptc commands have them. */
#ifndef PTC_FAULT_TESTING_H
#define PTC_FAULT_TESTING_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Make the @p n-th allocation from now fail (1 = the next one); 0 disables.
 * Counts every allocation the library makes through its allocator on any
 * thread. For tests of clean-up paths. */
PTC_API void ptc_fault_alloc_at(long n);

/** Make the @p n-th write or fsync from now fail with OS error @p err
 * (e.g. ENOSPC; 0: EIO); 0 disables. */
PTC_API void ptc_fault_write_at(long n, int err);

/** Make the @p n-th message the pipeline runtime sends from now never go
 * (the receiver waits for it); 0 disables. */
PTC_API void ptc_fault_send_at(long n);

/** Arm the crash point named @p point (NULL disarms) for the calling thread
 * only: when this thread next reaches that point of a protocol, the protocol
 * returns PTC_E_IO ("crash point NAME") at once, with no clean-up and no
 * further collective, as a process killed there would leave its files. The
 * point fires once, then disarms. Names are the protocol's (docs/format.md
 * §10: "hosts.prepared", ...). */
PTC_API void ptc_fault_crash_at(const char *point);

/** @return allocations / writes counted since the last ptc_fault_*_at call
 * (lets a test learn the total and then fail each one in turn). */
PTC_API long ptc_fault_alloc_count(void);
PTC_API long ptc_fault_write_count(void);

#ifdef __cplusplus
}
#endif
#endif
