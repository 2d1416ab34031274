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
typedef struct lx_cell {
    int rank;
    uint32_t shard;  /* index into sh */
} lx_cell;
typedef struct lx_data {
    int world;
    lx_cell *cell;   /* the (tensor, rank) entries, by tensor then rank */
    size_t *c0;      /* n + 1: tensor t's entries are cell[c0[t] .. c0[t+1]) */
    lx_shard *sh;    /* the distinct shards, tensor by tensor, each by owner */
    size_t *t0;      /* n + 1: tensor t's shards are sh[t0[t] .. t0[t+1]) */
    ptc_piece *pc;   /* the pieces of every shard */
} lx_data;

/* The queries of a layout not computed from a configuration: set by its
 * creator (layout_explicit.c), called by layout.c's public functions, which
 * check the tensor index and rank first. */
typedef struct lx_ops {
    void (*shard)(const ptc_layout *l, size_t t, int rank, ptc_shard *out, ptc_piece *pieces,
                  size_t cap);
    void (*owners)(const ptc_layout *l, size_t t, int *owners);
    void (*free)(lx_data *ex);
} lx_ops;

struct ptc_layout {
    ptc_config cfg;
    size_t n;
    ltensor *t;
    int64_t nlayers;
    size_t *hash;         /* open addressing: index+1, 0 = empty */
    size_t hmask;
    lx_data *ex;          /* explicit layouts only, with their queries: */
    const lx_ops *ops;
};

/* The tensor name @p s made printable and cut to 80 bytes, in @p buf. */
const char *ptc_layout_clip(const char *s, char buf[96]);

/* A new layout holding copies of @p tensors (checked, names unique) and
 * their name table; configuration and placements zero. */
int ptc_layout_alloc(ptc_layout **out, const ptc_tensor_info *tensors, size_t n);


#endif
