/* A test "device" for streamed checkpoint tensors (ptc_ckpt_stream): its
 * memory is reached only through the stream's callbacks and a ring of four
 * host slots, poisoned when given back, with counts of every call and
 * checks of every range; and a small model (a layout of five tensors with
 * known bytes) to save and load. Used by test_ckpt_stream.c and
 * test_ckpt_async.c. */
#ifndef PTC_TEST_CKPT_DEVICE_H
#define PTC_TEST_CKPT_DEVICE_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/ckpt.h"
#include "base/util_internal.h"

/* ---- the device -------------------------------------------------------------------- */

#define SLOTS 4

/* One tensor in device memory: the token of the stream. */
typedef struct dev_tensor {
    uint8_t *mem;
    uint64_t bytes;
} dev_tensor;

typedef struct device {
    pthread_mutex_t mu;
    size_t chunk;      /* what the stream asks for: a load's ranges */
    size_t save_chunk; /* a save's: the chunk rounded up to whole 1 MiB blocks */
    uint8_t *slot[SLOTS];
    bool used[SLOTS];
    const void *tok[SLOTS];
    uint64_t off[SLOTS];
    size_t len[SLOTS];
    /* what happened */
    int pulls, releases, acquires, pushes;
    uint64_t pulled;
    int bad;          /* a range that is not a whole chunk, or a slot misuse */
    int fail_after;   /* > 0: the fail_after-th pull / acquire fails */
    int calls;
    void *planned[16];
    size_t nplanned;
} device;

static inline int dev_slot(device *d, const void *tok, uint64_t off, size_t n,
                           const dev_tensor *x, size_t chunk)
{
    size_t want = (size_t)PTC_MIN((uint64_t)chunk, x->bytes - off);
    if (off % chunk || n != want || off >= x->bytes) {
        d->bad++;
        return ptc_error_set(PTC_E_INVAL, "device: range [%llu, +%zu) is not a chunk",
                             (unsigned long long)off, n);
    }
    if (d->fail_after && ++d->calls == d->fail_after)
        return ptc_error_set(PTC_E_IO, "device copy failed at byte %llu",
                             (unsigned long long)off);
    for (int k = 0; k < SLOTS; k++)
        if (!d->used[k]) {
            d->used[k] = true;
            d->tok[k] = tok;
            d->off[k] = off;
            d->len[k] = n;
            return k;
        }
    d->bad++; /* more ranges held at once than the ring has slots */
    return ptc_error_set(PTC_E_NOMEM, "device: every slot is in use");
}

static inline int dev_pull(void *user, void *token, uint64_t off, size_t n, const void **data)
{
    device *d = user;
    dev_tensor *x = token;
    pthread_mutex_lock(&d->mu);
    int k = dev_slot(d, token, off, n, x, d->save_chunk);
    if (k >= 0) {
        memcpy(d->slot[k], x->mem + off, n);
        *data = d->slot[k];
        d->pulls++;
        d->pulled += n;
    }
    pthread_mutex_unlock(&d->mu);
    return k < 0 ? k : PTC_OK;
}

static inline int dev_find(device *d, const void *tok, uint64_t off, size_t n)
{
    for (int k = 0; k < SLOTS; k++)
        if (d->used[k] && d->tok[k] == tok && d->off[k] == off && d->len[k] == n)
            return k;
    d->bad++;
    return -1;
}

static inline void dev_release(void *user, void *token, uint64_t off, size_t n)
{
    device *d = user;
    pthread_mutex_lock(&d->mu);
    int k = dev_find(d, token, off, n);
    if (k >= 0) {
        memset(d->slot[k], 0xAA, n); /* the library must not read it again */
        d->used[k] = false;
        d->releases++;
    }
    pthread_mutex_unlock(&d->mu);
}

static inline int dev_acquire(void *user, void *token, uint64_t off, size_t n, void **buf)
{
    device *d = user;
    pthread_mutex_lock(&d->mu);
    int k = dev_slot(d, token, off, n, token, d->chunk);
    if (k >= 0) {
        memset(d->slot[k], 0x55, n); /* bytes the load leaves out show */
        *buf = d->slot[k];
        d->acquires++;
    }
    pthread_mutex_unlock(&d->mu);
    return k < 0 ? k : PTC_OK;
}

static inline int dev_push(void *user, void *token, uint64_t off, size_t n)
{
    device *d = user;
    dev_tensor *x = token;
    pthread_mutex_lock(&d->mu);
    int k = dev_find(d, token, off, n);
    if (k >= 0) {
        memcpy(x->mem + off, d->slot[k], n);
        memset(d->slot[k], 0xAA, n);
        d->used[k] = false;
        d->pushes++;
    }
    pthread_mutex_unlock(&d->mu);
    return PTC_OK;
}

static inline int dev_plan(void *user, void *const *tokens, const uint64_t *bytes, size_t n)
{
    device *d = user;
    (void)bytes;
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < n && d->nplanned < 16; i++)
        d->planned[d->nplanned++] = tokens[i];
    pthread_mutex_unlock(&d->mu);
    return PTC_OK;
}

static inline void dev_init(device *d, size_t chunk)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    d->chunk = chunk;
    d->save_chunk = (chunk + (1 << 20) - 1) / (1 << 20) * (1 << 20);
    for (int k = 0; k < SLOTS; k++)
        assert_non_null(d->slot[k] = malloc(PTC_MAX(chunk, d->save_chunk)));
}

static inline void dev_free(device *d)
{
    for (int k = 0; k < SLOTS; k++)
        free(d->slot[k]);
    pthread_mutex_destroy(&d->mu);
}

static inline ptc_ckpt_stream dev_stream(device *d)
{
    return (ptc_ckpt_stream){.chunk = d->chunk, .plan = dev_plan, .pull = dev_pull,
                             .release = dev_release, .acquire = dev_acquire, .push = dev_push,
                             .user = d};
}

/* Every range given back, none misused. */
static inline void dev_clean(const device *d)
{
    assert_int_equal(d->bad, 0);
    assert_int_equal(d->pulls + d->acquires, d->releases + d->pushes);
    for (int k = 0; k < SLOTS; k++)
        assert_false(d->used[k]);
}

/* ---- the model ------------------------------------------------------------------------ */

static const char RULES[] = "optim .m\n"
                            "match big tp=split(0) pp=all\n"
                            "match fused tp=split(1,blocks=3) pp=all\n"
                            "match * tp=replicate pp=all\n";

/* name, dtype, global shape: big is 2 MiB per tp=2 rank (several chunks) */
static const struct {
    const char *name;
    ptc_dtype dt;
    int ndim;
    int64_t shape[2];
} TENSORS[] = {
    {"big", PTC_DTYPE_F32, 2, {1024, 1024}},
    {"big.m", PTC_DTYPE_F32, 2, {1024, 1024}},
    {"fused", PTC_DTYPE_BF16, 2, {40, 36}},
    {"rep", PTC_DTYPE_F64, 1, {3}},
    {"scalar", PTC_DTYPE_I32, 0, {0}},
};
#define NT (sizeof TENSORS / sizeof TENSORS[0])

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Byte b of element e of tensor t, in round @p gen of the data. */
static inline uint8_t gbyte(size_t t, int64_t e, size_t b, int gen)
{
    return (uint8_t)(mix(((uint64_t)t << 48) ^ ((uint64_t)e << 4) ^ b) >> (8 * gen));
}

/* Rank @p r's local tensor @p t of @p l: the bytes its pieces hold. */
static inline uint8_t *local_of(const ptc_layout *l, size_t t, int r, int gen, uint64_t *bytes)
{
    ptc_shard sh;
    assert_int_equal(ptc_layout_shard(l, t, r, &sh), PTC_OK);
    const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
    size_t es = ptc_dtype_size(ti->dtype);
    int64_t vol = sh.present ? 1 : 0;
    for (int d = 0; sh.present && d < sh.ndim; d++)
        vol *= sh.shape[d];
    *bytes = (uint64_t)vol * es;
    uint8_t *buf = calloc((size_t)*bytes + 1, 1);
    ptc_piece pc[16];
    size_t np = 0;
    if (vol)
        assert_int_equal(ptc_layout_pieces(l, t, r, pc, 16, &np), PTC_OK);
    int64_t gstr[PTC_MAX_DIMS];
    ptc_strides_row_major(ti->ndim, ti->shape, gstr);
    for (size_t k = 0; k < np; k++) {
        int64_t n = ptc_box_volume(&pc[k].box);
        for (int64_t u = 0; u < n; u++) {
            int64_t g[PTC_MAX_DIMS], rest = u, ge = 0;
            for (int d = pc[k].box.ndim - 1; d >= 0; d--) {
                int64_t ext = pc[k].box.hi[d] - pc[k].box.lo[d];
                g[d] = pc[k].box.lo[d] + rest % ext;
                rest /= ext;
            }
            for (int d = 0; d < pc[k].box.ndim; d++)
                ge += g[d] * gstr[d];
            int64_t at = ptc_piece_local_index(&pc[k], g);
            for (size_t b = 0; b < es; b++)
                buf[(size_t)at * es + b] = gbyte(t, ge, b, gen);
        }
    }
    return buf;
}

static inline ptc_layout *make_layout(const char *cfgtext)
{
    ptc_config cfg;
    ptc_rules *rules;
    ptc_layout *l;
    ptc_tensor_info ti[NT];
    for (size_t t = 0; t < NT; t++) {
        ti[t] = (ptc_tensor_info){.name = TENSORS[t].name, .dtype = TENSORS[t].dt,
                                  .ndim = TENSORS[t].ndim};
        memcpy(ti[t].shape, TENSORS[t].shape, sizeof TENSORS[t].shape);
    }
    assert_int_equal(ptc_config_parse(&cfg, cfgtext), PTC_OK);
    assert_int_equal(ptc_rules_parse(&rules, RULES, strlen(RULES), "rules"), PTC_OK);
    if (ptc_layout_create(&l, ti, NT, rules, &cfg) != PTC_OK)
        fail_msg("layout of %s: %s", cfgtext, ptc_last_error());
    ptc_rules_destroy(rules);
    return l;
}

#endif
