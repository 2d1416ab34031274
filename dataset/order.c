/* Epoch order (keyed Feistel permutation with cycle-walking) and the batch
 * arithmetic of the dataset view. docs/dataset.md is the normative spec;
 * every constant here is part of the on-disk/on-wire contract because other
 * programs must reproduce the order bit for bit. */
#include <string.h>
#include <xxhash.h>

#include "ptc/box.h"
#include "ptc/dataset.h"
#include "base/util_internal.h"

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Round function: XXH3-64 (seeded with S) of epoch || round || h || R, all
 * little-endian, truncated to h bits. Building the message byte by byte
 * keeps it independent of the host's endianness. */
static uint64_t order_round(const ptc_order *o, uint32_t round, uint64_t r)
{
    uint8_t msg[24];
    put_u64le(msg, o->epoch);
    put_u32le(msg + 8, round);
    put_u32le(msg + 12, o->half);
    put_u64le(msg + 16, r);
    return XXH3_64bits_withSeed(msg, sizeof msg, o->seed) & o->mask;
}

static uint64_t feistel_forward(const ptc_order *o, uint64_t x)
{
    uint64_t l = x >> o->half, r = x & o->mask;
    for (uint32_t i = 0; i < PTC_ORDER_ROUNDS; i++) {
        uint64_t t = l ^ order_round(o, i, r);
        l = r;
        r = t;
    }
    return (l << o->half) | r;
}

static uint64_t feistel_inverse(const ptc_order *o, uint64_t y)
{
    uint64_t l = y >> o->half, r = y & o->mask;
    for (uint32_t i = PTC_ORDER_ROUNDS; i-- > 0;) {
        uint64_t t = r ^ order_round(o, i, l);
        r = l;
        l = t;
    }
    return (l << o->half) | r;
}

int ptc_order_init(ptc_order *o, uint64_t n, uint64_t seed, uint64_t epoch)
{
    if (n > PTC_DATASET_MAX_SAMPLES)
        return ptc_error_set(PTC_E_RANGE, "dataset of %llu samples is too large",
                             (unsigned long long)n);
    uint32_t h = 1;
    /* smallest h >= 1 with 2^(2h) >= n; h <= 32 because n < 2^63 */
    while (h < 32 && ((uint64_t)1 << (2 * h)) < n)
        h++;
    o->n = n;
    o->seed = seed;
    o->epoch = epoch;
    o->half = h;
    o->mask = (h == 32) ? 0xffffffffULL : (((uint64_t)1 << h) - 1);
    return PTC_OK;
}

int ptc_order_sample(const ptc_order *o, uint64_t pos, uint64_t *id)
{
    if (pos >= o->n)
        return ptc_error_set(PTC_E_RANGE, "position %llu is outside an epoch of %llu samples",
                             (unsigned long long)pos, (unsigned long long)o->n);
    /* Cycle-walking: pos lies on a cycle of the domain permutation that
     * contains at least one element < n (itself), so this terminates. */
    uint64_t y = feistel_forward(o, pos);
    while (y >= o->n)
        y = feistel_forward(o, y);
    *id = y;
    return PTC_OK;
}

int ptc_order_position(const ptc_order *o, uint64_t id, uint64_t *pos)
{
    if (id >= o->n)
        return ptc_error_set(PTC_E_RANGE, "sample %llu is outside a dataset of %llu samples",
                             (unsigned long long)id, (unsigned long long)o->n);
    uint64_t x = feistel_inverse(o, id);
    while (x >= o->n)
        x = feistel_inverse(o, x);
    *pos = x;
    return PTC_OK;
}

int ptc_batch_steps(uint64_t n, uint64_t batch, uint64_t start, uint64_t *steps)
{
    if (batch == 0)
        return ptc_error_set(PTC_E_INVAL, "batch size must be at least 1");
    if (n > PTC_DATASET_MAX_SAMPLES)
        return ptc_error_set(PTC_E_RANGE, "dataset of %llu samples is too large",
                             (unsigned long long)n);
    if (start >= n) {
        *steps = 0;
        return PTC_OK;
    }
    uint64_t rest = n - start;
    *steps = rest / batch + (rest % batch != 0);
    return PTC_OK;
}

int ptc_batch_part(uint64_t n, uint64_t batch, uint64_t start, uint64_t dp,
                   uint64_t rank, uint64_t step, uint64_t *lo, uint64_t *hi)
{
    if (batch == 0)
        return ptc_error_set(PTC_E_INVAL, "batch size must be at least 1");
    if (dp == 0 || rank >= dp)
        return ptc_error_set(PTC_E_INVAL, "rank %llu is not a rank of dp=%llu",
                             (unsigned long long)rank, (unsigned long long)dp);
    if (n > PTC_DATASET_MAX_SAMPLES)
        return ptc_error_set(PTC_E_RANGE, "dataset of %llu samples is too large",
                             (unsigned long long)n);
    uint64_t off, glo, ghi;
    /* An overflowing step*batch or start+off lies past any n < 2^63. */
    if (start >= n || __builtin_mul_overflow(step, batch, &off) ||
        __builtin_add_overflow(start, off, &glo) || glo >= n)
        return ptc_error_set(PTC_E_NOTFOUND, "step %llu is past the end of the epoch",
                             (unsigned long long)step);
    ghi = (n - glo > batch) ? glo + batch : n;
    /* The extent is < 2^63 and ranks beyond it only see empty parts, so
     * clamping dp and rank to int64 keeps the split rule exact. */
    int64_t extent = (int64_t)(ghi - glo);
    int64_t d = dp > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)dp;
    int64_t a, b;
    if (rank >= (uint64_t)d) {
        a = b = extent;
    } else {
        ptc_split(extent, d, (int64_t)rank, &a, &b);
    }
    *lo = glo + (uint64_t)a;
    *hi = glo + (uint64_t)b;
    return PTC_OK;
}

/* ---- batch policies ----------------------------------------------------------------- */

static const char *const policy_names[] = {"none", "drop-last", "equal", "drop-last+equal"};

int ptc_batch_policy_parse(const char *text, unsigned *policy)
{
    for (unsigned p = 0; text && p <= PTC_BATCH_POLICY_ALL; p++) {
        if (strcmp(text, policy_names[p]) == 0) {
            *policy = p;
            return PTC_OK;
        }
    }
    return ptc_error_set(PTC_E_INVAL,
                         "unknown batch policy '%s' (none, drop-last, equal, drop-last+equal)",
                         text ? text : "(null)");
}

const char *ptc_batch_policy_name(unsigned policy)
{
    return policy <= PTC_BATCH_POLICY_ALL ? policy_names[policy] : NULL;
}

static int check_policy(unsigned policy)
{
    if (policy & ~(unsigned)PTC_BATCH_POLICY_ALL)
        return ptc_error_set(PTC_E_INVAL, "unknown batch policy flags 0x%x", policy);
    return PTC_OK;
}

int ptc_batch_steps_policy(uint64_t n, uint64_t batch, uint64_t start, unsigned policy,
                           uint64_t *steps)
{
    PTC_TRY(check_policy(policy));
    PTC_TRY(ptc_batch_steps(n, batch, start, steps));
    if ((policy & PTC_BATCH_POLICY_DROP_LAST) && start < n && (n - start) % batch != 0)
        (*steps)--;
    return PTC_OK;
}

int ptc_batch_part_policy(uint64_t n, uint64_t batch, uint64_t start, uint64_t dp,
                          uint64_t rank, uint64_t step, unsigned policy, uint64_t *lo,
                          uint64_t *hi)
{
    PTC_TRY(check_policy(policy));
    uint64_t a, b;
    PTC_TRY(ptc_batch_part(n, batch, start, dp, rank, step, &a, &b));
    /* the step exists, so start + step*batch < n does not overflow */
    uint64_t glo = start + step * batch;
    uint64_t size = (n - glo > batch) ? batch : n - glo;
    if ((policy & PTC_BATCH_POLICY_DROP_LAST) && size < batch)
        return ptc_error_set(PTC_E_NOTFOUND,
                             "step %llu is the partial last batch, dropped by drop-last",
                             (unsigned long long)step);
    if (policy & PTC_BATCH_POLICY_EQUAL) {
        uint64_t q = size / dp; /* q * (rank + 1) <= size: no overflow */
        a = glo + q * rank;
        b = a + q;
    }
    *lo = a;
    *hi = b;
    return PTC_OK;
}

static int policy_args(uint64_t n, uint64_t batch, uint64_t dp, unsigned policy)
{
    PTC_TRY(check_policy(policy));
    if (batch == 0)
        return ptc_error_set(PTC_E_INVAL, "batch size must be at least 1");
    if (dp == 0)
        return ptc_error_set(PTC_E_INVAL, "dp must be at least 1");
    if (n > PTC_DATASET_MAX_SAMPLES)
        return ptc_error_set(PTC_E_RANGE, "dataset of %llu samples is too large",
                             (unsigned long long)n);
    return PTC_OK;
}

int ptc_batch_dropped(uint64_t n, uint64_t batch, uint64_t start, uint64_t dp,
                      unsigned policy, uint64_t *count)
{
    PTC_TRY(policy_args(n, batch, dp, policy));
    *count = 0;
    if (start >= n)
        return PTC_OK;
    uint64_t rest = n - start, full = rest / batch, tail = rest % batch;
    uint64_t c = 0;
    if (policy & PTC_BATCH_POLICY_EQUAL)
        c = full * (batch % dp) + tail % dp; /* <= rest: no overflow */
    if (policy & PTC_BATCH_POLICY_DROP_LAST)
        c = c - ((policy & PTC_BATCH_POLICY_EQUAL) ? tail % dp : 0) + tail;
    *count = c;
    return PTC_OK;
}

int ptc_batch_is_dropped(uint64_t n, uint64_t batch, uint64_t start, uint64_t dp,
                         unsigned policy, uint64_t pos, bool *dropped)
{
    PTC_TRY(policy_args(n, batch, dp, policy));
    if (pos >= n)
        return ptc_error_set(PTC_E_RANGE, "position %llu is outside an epoch of %llu samples",
                             (unsigned long long)pos, (unsigned long long)n);
    *dropped = false;
    if (pos < start)
        return PTC_OK;
    uint64_t off = pos - start, k = off / batch, i = off % batch;
    uint64_t glo = start + k * batch;
    uint64_t size = (n - glo > batch) ? batch : n - glo;
    if ((policy & PTC_BATCH_POLICY_DROP_LAST) && size < batch)
        *dropped = true;
    else if ((policy & PTC_BATCH_POLICY_EQUAL) && i >= size - size % dp)
        *dropped = true;
    return PTC_OK;
}
