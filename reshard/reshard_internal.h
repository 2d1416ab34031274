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
/* One round of ptc_reshard_owned_over: the items of tensors [@p t0, @p t1)
 * of @p p only (src and dst need hold those tensors only). @p rc, the
 * caller's outcome so far, is agreed in the round's first exchange; the
 * round returns this process's outcome after its last unpack, NOT agreed:
 * pass it to the next round, or agree it (ptc_transport_agree) — except
 * where *@p gone: an exchange's round failed, alike on every process (the
 * failure is agreed already). Every process makes the same collective
 * calls whatever the outcomes. */
int ptc_reshard_owned_round(int rc, const ptc_plan *p, const ptc_transport *t,
                            const int *src_owner, const void *const *const *src,
                            const int *dst_owner, void *const *const *dst, size_t t0, size_t t1,
                            bool *gone);
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
/* The source shards one process provides to a load across hosts, read in
 * rounds over groups of tensors (reshard_hosts_rounds.c). */
typedef struct ptc_reshard_hosts_src {
    const ptc_layout *src;    /* the version's layout (borrowed) */
    ptc_store_reader *rd;     /* this host's part (NULL: nothing to read here) */
    uint32_t *map;            /* the part's index of each tensor */
    int *mine;                /* the source ranks this process provides */
    size_t nmine;
    void **bufs;              /* nmine x ntensors: the shards read (NULL: none, shared) */
    const void **ptrs;        /* nmine x ntensors: where each shard is, shared or not */
    size_t *gend, ngroups;    /* group g: tensors [gend[g - 1], gend[g]) */
    uint64_t *gbytes;         /* this process's source bytes of each group */
    uint64_t budget;          /* source bytes held at once (within max with a tensor) */
    uint64_t held, peak;      /* source bytes held now, at most */
    double read_seconds;      /* spent reading */
} ptc_reshard_hosts_src;
/* The budget: PTC_HOSTS_LOAD_BUDGET (bytes, or with K, M or G), else
 * PTC_RESHARD_HOSTS_LOAD_BUDGET_DEFAULT (a bad value warns). */
uint64_t ptc_reshard_hosts_budget(void);
/* Cut the groups (alike on every process: from @p src and the process of
 * each source rank, @p src_owner, of @p np) and open local version @p lv
 * of @p st where process @p me provides ranks. Free with _src_free. */
int ptc_reshard_hosts_src_init(ptc_reshard_hosts_src *s, const ptc_layout *src, ptc_store *st,
                               uint64_t lv, const int *src_owner, int np, int me,
                               uint64_t budget);
/* Read group @p g's shards into fresh buffers; drop them. */
int ptc_reshard_hosts_src_read(ptc_reshard_hosts_src *s, size_t g);
void ptc_reshard_hosts_src_drop(ptc_reshard_hosts_src *s, size_t g);
void ptc_reshard_hosts_src_free(ptc_reshard_hosts_src *s);
/* ptc_reshard_owned_over round by round: read group g (group g + 1 on a
 * thread meanwhile, where both fit the budget), ptc_reshard_owned_round
 * over its tensors, drop it. @p src: per source rank, this process's rows
 * of s->ptrs. @p rc agreed in the first round; *@p rounds: the rounds
 * run. Collective; every failure agreed. */
int ptc_reshard_hosts_src_move(ptc_reshard_hosts_src *s, int rc, const ptc_plan *p,
                               const ptc_transport *t, const int *src_owner,
                               const void *const *const *src, const int *dst_owner,
                               void *const *const *dst, size_t *rounds);
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
/* ptc_reshard_hosts_load of version @p version opened in @p hv by
 * ptc_reshard_hosts_version_open with no configuration or rules (so that
 * hv->layout is the version's own: the load's source; borrowed). The
 * callers that open the version for themselves (ptc_reshard_hosts_load_
 * locals) open it once. Collective; agreed. */
int ptc_reshard_hosts_load_open(const ptc_transport *t, int host, ptc_store *s, uint64_t version,
                                const ptc_reshard_hosts_version *hv, const ptc_layout *dst,
                                const int *ranks, size_t nranks, void *const *bufs,
                                ptc_reshard_hosts_result *res);
/* For a version saved with an explicit layout: how many saved ranks, held
 * by no host present, leave some tensor not covered by the records of the
 * hosts present (*@p lost; 0: whole). Finding out opens the version, the
 * records of every host gathered: when it is whole and @p v is not NULL,
 * it stays open in *@p v — as ptc_reshard_hosts_version_open(t, s,
 * version, NULL, NULL, @p record, v) opens it, to close with
 * ptc_reshard_hosts_version_close — so that a load need not gather them
 * again; else *@p v is closed (v->layout NULL). Collective; agreed; the
 * errors of ptc_reshard_hosts_version_open but for that one. */
int ptc_reshard_hosts_explicit_lost(const ptc_transport *t, ptc_store *s, uint64_t version,
                                    bool record, int *lost, ptc_reshard_hosts_version *v);
/* ptc_reshard_hosts_pick, handing over the version it opened to choose:
 * with @p version 0, a version saved with an explicit layout is opened to
 * count its lost ranks (ptc_reshard_hosts_explicit_lost); when that
 * version is the one picked, it is open in *@p hv (its own layout, the
 * record with @p record), else hv->layout is NULL (a version saved under
 * a configuration, checked from the hosts' inventories alone: the caller
 * opens it, ptc_reshard_hosts_version_open). Close *@p hv in either case.
 * Collective; agreed; the errors and the warning of ptc_reshard_hosts_pick. */
int ptc_reshard_hosts_pick_open(const ptc_transport *t, int host, ptc_store *s, uint64_t version,
                                bool record, uint64_t *picked, ptc_reshard_hosts_version *hv);
/* *@p hv as ptc_reshard_hosts_pick_open left it, opened now (version
 * @p version, its own layout, with @p record) unless the pick opened it.
 * Collective; agreed. */
int ptc_reshard_hosts_version_ensure(const ptc_transport *t, ptc_store *s, uint64_t version,
                                     bool record, ptc_reshard_hosts_version *hv);
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
