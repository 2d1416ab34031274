/* Fuzz the check of meta/data.mdb's page structure (ptc/store/store_mdbcheck.c,
 * docs/format.md §2.6): the input is the whole file, handed to the check
 * through a memory file. The meta pages are read (ptc_store_mdb_metas, only
 * where their transaction ids pair up and their page sizes agree: otherwise
 * it waits for a writer to finish), then every page reachable from either
 * meta page's snapshot is walked. Any outcome but a crash, a hang or a leak
 * is fine; the check must never read outside the file or recurse without
 * bound. Seeds: data.mdb of real stores (the campaign raises -max_len). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Little-endian field of the input (0 past its end). */
static uint64_t field(const uint8_t *data, size_t size, size_t off, int n)
{
    return off + (size_t)n <= size ? ptc_le_get(data + off, n) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0 && (fd = memfd_create("data.mdb", 0)) < 0)
        abort();
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    /* meta page i: page header (16 bytes), then the meta: page size at +40,
     * transaction id at +144 of its page */
    uint64_t psize = field(data, size, 40, 4);
    uint64_t t0 = field(data, size, 144, 8);
    uint64_t t1 = psize < size ? field(data, size, (size_t)psize + 144, 8) : 0;
    uint64_t p1 = psize < size ? field(data, size, (size_t)psize + 40, 4) : 0;
    bool paired = (t0 == 0 && t1 == 0) || (t0 + 1 == t1 && t1 % 2 == 1) ||
                  (t1 + 1 == t0 && t0 % 2 == 0);
    uint64_t txnid = 0;
    if (paired && psize == p1)
        (void)ptc_store_mdb_metas(fd, "fuzz", &txnid);
    (void)ptc_store_mdb_walk(fd, "fuzz", t0);
    if (t1 != t0)
        (void)ptc_store_mdb_walk(fd, "fuzz", t1);
    return 0;
}
