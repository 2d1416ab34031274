/* Private helpers of the reshard module (never installed). */
#ifndef PTC_RESHARD_INTERNAL_H
#define PTC_RESHARD_INTERNAL_H

#include "base/piecewalk_internal.h"
#include "ptc/reshard.h"

/* B minus I (I must lie inside B) as at most 2*ndim disjoint boxes written
 * to out; returns their count. */
size_t ptc_box_subtract(ptc_box *out, const ptc_box *b, const ptc_box *i);

/* Identical shards: same presence, local shape and pieces (strides compared
 * along extents > 1) — so the same bytes in the same places, whether the
 * layouts call them flat (zero=1) or explicit. */
bool ptc_shard_same(const ptc_shard *a, const ptc_piece *pa, const ptc_shard *b,
                    const ptc_piece *pb);



/* Pack transfer @p x from its provider's local buffer @p from into
 * row-major @p out (host memory). */
int ptc_reshard_pack_one(const ptc_plan *p, const ptc_transfer *x, const void *from, void *out);
/* Unpack row-major @p in into the target rank's local buffer @p to. */
int ptc_reshard_unpack_one(const ptc_plan *p, const ptc_transfer *x, const void *in, void *to);
/* Box @p b at element strides @p stride is one run of memory. */
bool ptc_reshard_box_contiguous(const ptc_box *b, const int64_t *stride);

/* ptc_reshard_host_owned_range() over a transport, for every tensor: the
 * whole plan @p p (the same on every process); per phase (reused shards and
 * transfers from source buffers, then the fan-outs from target buffers) one
 * ptc_transport_exchange, a message of its own for each large item, sent
 * from / received into the rank buffers where the box is one run of memory
 * there, else packed / unpacked. @p rc is the caller's outcome so far
 * (@p p may be NULL where it failed): it is agreed in the first exchange's
 * own round, as are every failure after it. */
int ptc_reshard_owned_over(int rc, const ptc_plan *p, const ptc_transport *t,
                           const int *src_owner, const void *const *const *src,
                           const int *dst_owner, void *const *const *dst);
/* ---- across hosts (reshard_hosts.c, reshard_hosts_held.c) ---------------- */

/* Every process's @p n bytes at @p in into @p out (size x n), or a copy
 * alone on a transport of one process. Collective. */
int ptc_reshard_gather_all(const ptc_transport *t, const void *in, size_t n, void *out);
/* Bytes of rank @p r's local tensors of @p l. */
uint64_t ptc_reshard_rank_bytes(const ptc_layout *l, int r);
/* Which saved ranks of layout @p src the part open in @p rd holds (world
 * bytes into @p have: 1 when every present shard of the rank is there). */
int ptc_reshard_hosts_inventory(const ptc_store_reader *rd, const ptc_layout *src, uint8_t *have);
/* For a process whose host holds no part of version @p version (@p lv 0):
 * the source layout built from the version's configuration and rules, sent
 * by the lowest process whose host holds a part, with @p dst's tensors
 * (the holders checked them against theirs). Nothing is sent when every
 * process holds a part. Collective; agreed; *@p src is set where NULL;
 * PTC_E_NOTFOUND when no host present holds a part. */
int ptc_reshard_hosts_share_layout(const ptc_transport *t, ptc_store *s, uint64_t version,
                                   uint64_t lv, const ptc_layout *dst, ptc_layout **src);
#endif
