/* Inside ptc/layout: the layout object that layout.c (layouts of a
 * configuration) and layout_explicit.c (explicit per-rank pieces) share.
 * Never installed. */
#ifndef PTC_LAYOUT_INTERNAL_H
#define PTC_LAYOUT_INTERNAL_H

#include "ptc/layout.h"

typedef struct ltensor {
    ptc_tensor_info info; /* info.name owned */
    ptc_placement pl;
    int stage;            /* pp=layer: the stage of the layer */
    bool zero;            /* flat over dp (zero=1 and kind=optim) */
    int nb;               /* split: number of blocks (1 without blocks) */
    int64_t other_vol;    /* volume of every dim except the split dim */
    int64_t unit;         /* heads without blocks=: rows of one head */
    bool repl;            /* some block replicates whole heads over tp */
} ltensor;

/* The shards of an explicit layout (layout_explicit.c). */
typedef struct lx_shard lx_shard;
typedef struct lx_data {
    int world;
    int32_t *cell;   /* n * world: shard index of (t, r), -1 where r lacks t */
    lx_shard *sh;    /* the distinct shards, tensor by tensor, each by owner */
    size_t *t0;      /* n + 1: tensor t's shards are sh[t0[t] .. t0[t+1]) */
    ptc_piece *pc;   /* the pieces of every shard */
} lx_data;

struct ptc_layout {
    ptc_config cfg;
    size_t n;
    ltensor *t;
    int64_t nlayers;
    size_t *hash;         /* open addressing: index+1, 0 = empty */
    size_t hmask;
    lx_data *ex;          /* explicit layouts only */
};

/* The tensor name @p s made printable and cut to 80 bytes, in @p buf. */
const char *ptc_layout_clip(const char *s, char buf[96]);

/* A new layout holding copies of @p tensors (checked, names unique) and
 * their name table; configuration and placements zero. */
int ptc_layout_alloc(ptc_layout **out, const ptc_tensor_info *tensors, size_t n);

/* layout_explicit.c: the queries of layout.h for an explicit layout (the
 * tensor index and rank are checked by the caller). */
void ptc_layout_ex_free(lx_data *ex);
void ptc_layout_ex_shard(const ptc_layout *l, size_t t, int rank, ptc_shard *out,
                         ptc_piece *pieces, size_t cap);
void ptc_layout_ex_owners(const ptc_layout *l, size_t t, int *owners);

#endif
