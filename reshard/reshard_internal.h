/* Private helpers of the reshard module (never installed). */
#ifndef PTC_RESHARD_INTERNAL_H
#define PTC_RESHARD_INTERNAL_H

#include "base/piecewalk_internal.h"
#include "ptc/ckpt.h"
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
 * alone on a transport of one process (reshard_hosts_version.c, which the
 * other files of the load across hosts call). Collective. */
int ptc_reshard_gather_all(const ptc_transport *t, const void *in, size_t n, void *out);
/* Bytes of rank @p r's local tensors of @p l. */
uint64_t ptc_reshard_rank_bytes(const ptc_layout *l, int r);
/* Which saved ranks of layout @p src the part open in @p rd holds (world
 * bytes into @p have: 1 when every present shard of the rank is there). */
int ptc_reshard_hosts_inventory(const ptc_store_reader *rd, const ptc_layout *src, uint8_t *have);
/* A version of a store spread over hosts as a reader sees it
 * (reshard_hosts_version.c). */
typedef struct ptc_reshard_hosts_version {
    uint64_t lv;        /* this host's local version of it (0: no part here) */
    bool all;           /* every process's host holds a part */
    ptc_layout *layout; /* under the configuration and rules asked for */
    ptc_rules *rules;   /* the version's rules */
    ptc_ckpt_record rec; /* its record, when asked for and has_rec */
    bool has_rec;
} ptc_reshard_hosts_version;
/* Open version @p version (committed) on every process: from this host's
 * part, or — a host whose store holds none (a fresh or replaced host) —
 * from the description the lowest process whose host holds a part
 * broadcasts (nothing is sent when every host holds one). The layout is
 * the version's under @p cfg (NULL: its own) and @p rules (NULL: its own);
 * with @p record, its record. A version saved with an explicit layout
 * opened under its own (@p cfg NULL) is rebuilt from the shard records of
 * every host present (a part holds its ranks' and replicas' only): each
 * saved rank's records sent once, by the lowest process whose part holds
 * them; PTC_E_NOTFOUND naming the saved ranks of no host present when the
 * records left do not cover every tensor. Collective; agreed;
 * PTC_E_NOTFOUND "no host present holds a part of version G". */
int ptc_reshard_hosts_version_open(const ptc_transport *t, ptc_store *s, uint64_t version,
                                   const ptc_config *cfg, const ptc_rules *rules, bool record,
                                   ptc_reshard_hosts_version *v);
void ptc_reshard_hosts_version_close(ptc_reshard_hosts_version *v);
/* For a version saved with an explicit layout: how many saved ranks, held
 * by no host present, leave some tensor not covered by the records of the
 * hosts present (*@p lost; 0: whole). Collective; agreed; the errors of
 * ptc_reshard_hosts_version_open but for that one. */
int ptc_reshard_hosts_explicit_lost(const ptc_transport *t, ptc_store *s, uint64_t version,
                                    int *lost);
/* A version's description as sent between the processes of a reader: its
 * configuration, rules, record and tensors (the header: empty, with no
 * tensors, in a description that carries shard records alone) and shard
 * records of an explicit layout (tensor indices into the version's
 * tensors). */
typedef struct ptc_reshard_hosts_desc {
    char *config, *rules, *record; /* record: JSON, "" when none */
    ptc_tensor_info *tensors;      /* names owned */
    size_t ntensors;
    ptc_layout_explicit_shard *shards; /* pieces owned */
    size_t nshards;
} ptc_reshard_hosts_desc;
/* Encode a description into @p b (reshard_hosts_version.c's format):
 * PTC_E_RANGE for a shard's tensor index or piece count beyond 32 bits or a
 * negative rank. */
struct ptc_buf;
int ptc_reshard_hosts_desc_encode(struct ptc_buf *b, const char *config, const char *rules,
                                  const char *record, const ptc_tensor_info *tensors, size_t n,
                                  const ptc_layout_explicit_shard *shards, size_t nshards);
/* Decode untrusted description bytes: PTC_E_FORMAT naming the field, or
 * PTC_E_NOMEM; free with ptc_reshard_hosts_desc_free. */
int ptc_reshard_hosts_desc_decode(const void *data, size_t len, ptc_reshard_hosts_desc *d);
void ptc_reshard_hosts_desc_free(ptc_reshard_hosts_desc *d);
#endif
