/* Decoded blocks of compressed datasets, shared by threads and handles.
 *
 * Records of a dataset are read in epoch (random) order, so consecutive
 * records of a step file lie in different blocks: without a cache every
 * record decompresses (and hashes) a whole 1 MiB block. Here a block is
 * decoded once and then copied from memory by every record and thread that
 * touches it, while it stays among the least recently used.
 *
 * The bound is strict: an entry counts from the moment it is reserved
 * (before it is decoded) until it is freed, and an entry pinned by a
 * reader is never evicted; when a shard cannot make room, the reader gets
 * no entry and decodes into its own scratch. Decoding runs outside the
 * shard lock; readers of a block being decoded wait for it (one decode).
 *
 * The blocks live in one arena of whole-block slots, reserved (not
 * committed) at create and split over the shards: a fresh malloc per block
 * cost the first pass over a dataset 256 page faults per decoded MiB —
 * about as much CPU as the decompression itself. The arena asks for
 * transparent huge pages (one fault per 2 MiB where the kernel grants
 * them), is touched only as slots are used, and so never holds more than
 * the bound. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

#define BC_MAX_SHARDS 16u
#define BC_MAX_WORKERS 4u /* readahead decoders, at most one per processor */
#define BC_QUEUE 256      /* blocks waiting to be decoded ahead; more are dropped */
/* Blocks hinted for later reads (the next step files) that may wait
 * decoded and unread, as a fraction of the cache: they must not push out
 * the blocks of the reads before them. */
#define BC_LATER_SHARE 4

enum { BC_LOADING, BC_READY };

struct ptc_block_entry {
    struct ptc_block_entry *hnext;      /* hash chain */
    struct ptc_block_entry *prev, *next; /* LRU list, most recent first */
    uint64_t owner, k;
    size_t len;   /* decoded bytes */
    int refs;     /* readers copying out of it (and the loader) */
    int state;
    bool ahead;   /* decoded ahead and not read yet */
    uint8_t *data; /* its slot in the arena */
};

struct bc_shard {
    pthread_mutex_t lock;
    pthread_cond_t loaded; /* a BC_LOADING entry became ready or went away */
    struct ptc_block_entry **tab;
    size_t nbuckets;              /* a power of two */
    struct ptc_block_entry lru;   /* sentinel */
    uint64_t bytes, cap;
    uint8_t **slots; /* free slots, a stack: the lowest address on top */
    size_t nfree;
};

/* A block to decode ahead of its reader. */
struct bc_job {
    uint64_t owner, k;
    const ptc_blob_ref *b; /* valid until drop_owner(owner) returns */
};

/* The readahead workers: started at the first prefetch (never before a
 * fork: a view is created before the mount detaches), stopped by destroy. */
struct bc_pool {
    pthread_mutex_t lock;
    pthread_cond_t work, idle; /* a job queued; a worker finished one */
    struct bc_job jobs[BC_QUEUE];
    size_t njobs;
    /* blocks of later reads, first hinted first; taken only when jobs is
     * empty: later[lfirst .. nlater) */
    struct bc_job later[BC_QUEUE];
    size_t lfirst, nlater;
    size_t ltaken; /* later jobs taken by a worker, not reserved yet */
    pthread_t th[BC_MAX_WORKERS];
    uint64_t busy[BC_MAX_WORKERS]; /* owner of the job each worker runs, 0: none */
    unsigned nworkers;
    bool started, stop;
};

struct ptc_store_block_cache {
    uint64_t max_bytes;
    unsigned nshards;
    struct bc_shard *shards;
    void *map; /* the arena mapping (NULL: no slots) */
    size_t map_len;
    struct bc_pool pool;
    _Atomic uint64_t bytes, peak, hits, decodes, bypassed, ahead;
    _Atomic uint64_t unread; /* entries decoded (or being decoded) ahead, not read yet */
    uint64_t later_max;      /* the most of them later hints may add to */
};

static uint64_t bc_mix(uint64_t owner, uint64_t k)
{
    uint64_t x = owner * 0x9E3779B97F4A7C15ull ^ (k + 0x632BE59BD9B4E019ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 29);
}

static struct bc_shard *shard_of(const ptc_store_block_cache *c, uint64_t owner, uint64_t k)
{
    /* consecutive blocks of one dataset go to different shards */
    return &c->shards[(k + owner * 7) % c->nshards];
}

int ptc_store_block_cache_create(ptc_store_block_cache **out, uint64_t max_bytes)
{
    *out = NULL;
    ptc_store_block_cache *c = ptc_calloc(1, sizeof *c);
    if (!c)
        return PTC_E_NOMEM;
    pthread_mutex_init(&c->pool.lock, NULL);
    pthread_cond_init(&c->pool.work, NULL);
    pthread_cond_init(&c->pool.idle, NULL);
    uint64_t blocks = max_bytes / PTC_STORE_BLOCK_SIZE;
    c->max_bytes = max_bytes;
    c->nshards = blocks < BC_MAX_SHARDS ? (blocks ? (unsigned)blocks : 1u) : BC_MAX_SHARDS;
    c->shards = ptc_calloc(c->nshards, sizeof *c->shards);
    if (!c->shards) {
        c->nshards = 0;
        ptc_store_block_cache_destroy(c);
        return PTC_E_NOMEM;
    }
    uint64_t per = blocks / c->nshards; /* whole blocks per shard */
    c->later_max = per * c->nshards / BC_LATER_SHARE;
    size_t nb = 16;
    while (nb < 2 * per && nb < ((size_t)1 << 20))
        nb *= 2;
    uint8_t *base = NULL;
    if (per > 0) {
        /* address space only: pages are committed as slots are first
         * written; aligned so that huge pages can back it */
        const size_t HUGE_PAGE = (size_t)2 << 20;
        uint64_t len = per * c->nshards * PTC_STORE_BLOCK_SIZE;
        if (len > SIZE_MAX - HUGE_PAGE) {
            c->nshards = 0;
            goto out_nomem;
        }
        c->map_len = (size_t)len + HUGE_PAGE;
        c->map = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (c->map == MAP_FAILED) {
            c->map = NULL;
            c->nshards = 0;
            goto out_nomem;
        }
        base = (uint8_t *)(((uintptr_t)c->map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
        (void)madvise(base, (size_t)len, MADV_HUGEPAGE); /* a hint: fine if refused */
    }
    for (unsigned i = 0; i < c->nshards; i++) {
        struct bc_shard *s = &c->shards[i];
        s->cap = per * PTC_STORE_BLOCK_SIZE;
        s->nbuckets = nb;
        s->tab = ptc_calloc(nb, sizeof *s->tab);
        s->slots = ptc_malloc((size_t)(per ? per : 1) * sizeof *s->slots);
        s->lru.next = s->lru.prev = &s->lru;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->loaded, NULL);
        if (!s->tab || !s->slots) {
            c->nshards = i + 1;
            goto out_nomem;
        }
        for (uint64_t j = 0; j < per; j++) /* the shard's slot j lies j blocks in */
            s->slots[s->nfree++] = base + ((uint64_t)i * per + per - 1 - j) * PTC_STORE_BLOCK_SIZE;
    }
    *out = c;
    return PTC_OK;
out_nomem:
    ptc_store_block_cache_destroy(c);
    return PTC_E_NOMEM;
}

/* Free @p e and give its slot back to @p s (locked, or no longer shared). */
static void entry_free(struct bc_shard *s, struct ptc_block_entry *e)
{
    if (e->data)
        s->slots[s->nfree++] = e->data;
    ptc_free(e);
}

void ptc_store_block_cache_destroy(ptc_store_block_cache *c)
{
    if (!c)
        return;
    struct bc_pool *p = &c->pool;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nworkers; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    for (unsigned i = 0; i < c->nshards; i++) {
        struct bc_shard *s = &c->shards[i];
        for (struct ptc_block_entry *e = s->lru.next, *next; s->tab && e != &s->lru; e = next) {
            next = e->next;
            entry_free(s, e);
        }
        ptc_free(s->tab);
        ptc_free(s->slots);
        pthread_cond_destroy(&s->loaded);
        pthread_mutex_destroy(&s->lock);
    }
    ptc_free(c->shards);
    if (c->map)
        munmap(c->map, c->map_len);
    ptc_free(c);
}

void ptc_store_block_cache_get_stats(const ptc_store_block_cache *c,
                                     ptc_store_block_cache_stats *out)
{
    ptc_store_block_cache *m = (ptc_store_block_cache *)c;
    out->max_bytes = c->max_bytes;
    out->bytes = atomic_load(&m->bytes);
    out->peak_bytes = atomic_load(&m->peak);
    out->hits = atomic_load(&m->hits);
    out->decodes = atomic_load(&m->decodes);
    out->bypassed = atomic_load(&m->bypassed);
    out->decoded_ahead = atomic_load(&m->ahead);
}

/* ---- entries (the shard lock held) ------------------------------------------------- */

static struct ptc_block_entry **bucket(struct bc_shard *s, uint64_t owner, uint64_t k)
{
    return &s->tab[bc_mix(owner, k) & (s->nbuckets - 1)];
}

static void lru_unlink(struct ptc_block_entry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push(struct bc_shard *s, struct ptc_block_entry *e)
{
    e->next = s->lru.next;
    e->prev = &s->lru;
    s->lru.next->prev = e;
    s->lru.next = e;
}

/* Take @p e out of the table and the LRU list; its bytes are released. */
static void entry_remove(ptc_store_block_cache *c, struct bc_shard *s, struct ptc_block_entry *e)
{
    struct ptc_block_entry **pp = bucket(s, e->owner, e->k);
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    s->bytes -= e->len;
    atomic_fetch_sub(&c->bytes, e->len);
    if (e->ahead)
        atomic_fetch_sub(&c->unread, 1);
}

static void note_peak(ptc_store_block_cache *c, uint64_t held)
{
    uint64_t p = atomic_load(&c->peak);
    while (held > p && !atomic_compare_exchange_weak(&c->peak, &p, held))
        ;
}

/* Room for @p need more bytes and a free slot in @p s, evicting unpinned
 * entries from the cold end. For readahead (@p ahead), blocks decoded
 * ahead and not read yet are kept: a read that hints more blocks than the
 * cache holds must not have its readahead evict its own readahead. False
 * if there is no room. */
static bool make_room(ptc_store_block_cache *c, struct bc_shard *s, uint64_t need, bool ahead)
{
    struct ptc_block_entry *e = s->lru.prev;
    while ((s->bytes + need > s->cap || s->nfree == 0) && e != &s->lru) {
        struct ptc_block_entry *prev = e->prev;
        if (e->refs == 0 && !(ahead && e->ahead)) {
            entry_remove(c, s, e);
            entry_free(s, e);
        }
        e = prev;
    }
    return s->bytes + need <= s->cap && s->nfree > 0;
}

/* ---- the read path ----------------------------------------------------------------- */

enum { BC_FOUND, BC_RESERVED, BC_FULL };

/* Block @p k of @p owner in shard @p s (locked): BC_FOUND with the entry
 * pinned — after waiting for its decode when @p wait (a reader), else
 * whatever its state (readahead skips it); BC_RESERVED with a new entry
 * (BC_LOADING, pinned once, bytes counted) that the caller decodes; or
 * BC_FULL when the pinned entries leave no room. PTC_E_NOMEM as a
 * negative return. */
static int find_or_reserve(ptc_store_block_cache *c, struct bc_shard *s, uint64_t owner,
                           uint64_t k, uint64_t need, bool wait, struct ptc_block_entry **out)
{
    for (;;) {
        struct ptc_block_entry *e = *bucket(s, owner, k);
        while (e && !(e->owner == owner && e->k == k))
            e = e->hnext;
        if (!e)
            break;
        if (!wait) {
            *out = NULL;
            return BC_FOUND;
        }
        if (e->state == BC_LOADING) {
            /* one decode per block: wait for the thread doing it; if it
             * fails the entry goes away and this one tries itself */
            pthread_cond_wait(&s->loaded, &s->lock);
            continue;
        }
        e->refs++;
        if (e->ahead) {
            e->ahead = false;
            atomic_fetch_sub(&c->unread, 1);
        }
        lru_unlink(e);
        lru_push(s, e);
        *out = e;
        return BC_FOUND;
    }
    if (!make_room(c, s, need, !wait))
        return BC_FULL;
    struct ptc_block_entry *e = ptc_calloc(1, sizeof *e);
    if (!e)
        return PTC_E_NOMEM;
    *e = (struct ptc_block_entry){.owner = owner, .k = k, .len = (size_t)need, .refs = 1,
                                  .state = BC_LOADING, .ahead = !wait,
                                  .data = s->slots[--s->nfree]};
    struct ptc_block_entry **bk = bucket(s, owner, k);
    e->hnext = *bk;
    *bk = e;
    lru_push(s, e);
    s->bytes += need;
    note_peak(c, atomic_fetch_add(&c->bytes, need) + need);
    if (e->ahead)
        atomic_fetch_add(&c->unread, 1);
    *out = e;
    return BC_RESERVED;
}

/* Decode block @p k into reserved entry @p e (the shard unlocked), then
 * publish it to the readers waiting for it; on failure the entry is gone. */
static int decode_entry(ptc_store_block_cache *c, struct bc_shard *s, struct ptc_block_entry *e,
                        ptc_blob_scratch *sc, const ptc_blob_ref *b, uint64_t k)
{
    int rc = ptc_blob_read_block(sc, b, k, e->data);
    pthread_mutex_lock(&s->lock);
    if (rc < 0) {
        entry_remove(c, s, e);
        entry_free(s, e);
    } else {
        e->state = BC_READY;
    }
    pthread_cond_broadcast(&s->loaded);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int ptc_block_cache_get(ptc_store_block_cache *c, uint64_t owner, ptc_blob_scratch *sc,
                        const ptc_blob_ref *b, uint64_t k, ptc_block_entry **out)
{
    *out = NULL;
    struct bc_shard *s = shard_of(c, owner, k);
    struct ptc_block_entry *e = NULL;
    pthread_mutex_lock(&s->lock);
    int st = find_or_reserve(c, s, owner, k, ptc_blob_block_raw(b->raw_length, b->nblocks, k),
                             true, &e);
    pthread_mutex_unlock(&s->lock);
    if (st < 0)
        return st;
    if (st == BC_FULL) {
        atomic_fetch_add(&c->bypassed, 1);
        return PTC_OK; /* no room: the caller decodes into its scratch */
    }
    if (st == BC_FOUND) {
        atomic_fetch_add(&c->hits, 1);
        *out = e;
        return PTC_OK;
    }
    PTC_TRY(decode_entry(c, s, e, sc, b, k));
    atomic_fetch_add(&c->decodes, 1);
    *out = e;
    return PTC_OK;
}

const uint8_t *ptc_block_cache_data(const ptc_block_entry *e)
{
    return e->data;
}

void ptc_block_cache_put(ptc_store_block_cache *c, ptc_block_entry *e)
{
    struct bc_shard *s = shard_of(c, e->owner, e->k);
    pthread_mutex_lock(&s->lock);
    e->refs--;
    pthread_mutex_unlock(&s->lock);
}

/* ---- readahead ---------------------------------------------------------------------- */

struct bc_worker {
    ptc_store_block_cache *c;
    unsigned i;
};

/* Decode queued blocks, newest first: a reader decodes the blocks of its
 * read from the first one on while the workers take them from the last,
 * so they meet in the middle rather than queue behind each other. Only
 * when no read waits, the blocks of later reads, oldest hint first: so a
 * worker keeps decoding while the reader copies a read out and its
 * caller consumes it, instead of idling until the next read asks. */
static void *worker_main(void *arg)
{
    struct bc_worker w = *(struct bc_worker *)arg;
    ptc_free(arg);
    ptc_store_block_cache *c = w.c;
    struct bc_pool *p = &c->pool;
    ptc_blob_scratch sc = {0};
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->njobs == 0 && p->lfirst == p->nlater)
            pthread_cond_wait(&p->work, &p->lock);
        if (p->stop)
            break;
        struct bc_job j;
        bool later = p->njobs == 0;
        if (!later) {
            j = p->jobs[--p->njobs];
        } else {
            j = p->later[p->lfirst++];
            if (p->lfirst == p->nlater)
                p->lfirst = p->nlater = 0;
            p->ltaken++;
        }
        p->busy[w.i] = j.owner;
        pthread_mutex_unlock(&p->lock);
        struct bc_shard *s = shard_of(c, j.owner, j.k);
        struct ptc_block_entry *e = NULL;
        pthread_mutex_lock(&s->lock);
        int st = find_or_reserve(c, s, j.owner, j.k,
                                 ptc_blob_block_raw(j.b->raw_length, j.b->nblocks, j.k), false,
                                 &e);
        pthread_mutex_unlock(&s->lock);
        if (later) { /* counted in unread now, if reserved */
            pthread_mutex_lock(&p->lock);
            p->ltaken--;
            pthread_mutex_unlock(&p->lock);
        }
        /* a failed decode is left for the reader, which reports it */
        if (st == BC_RESERVED && decode_entry(c, s, e, &sc, j.b, j.k) == PTC_OK) {
            atomic_fetch_add(&c->decodes, 1);
            atomic_fetch_add(&c->ahead, 1);
            ptc_block_cache_put(c, e);
        }
        pthread_mutex_lock(&p->lock);
        p->busy[w.i] = 0;
        pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    ptc_blob_scratch_free(&sc);
    return NULL;
}

/* Start the workers (pool locked): one per processor beyond the first, as
 * the reader decodes too, at least one, at most BC_MAX_WORKERS. */
static void pool_start(ptc_store_block_cache *c)
{
    struct bc_pool *p = &c->pool;
    p->started = true;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = ncpu > 2 ? (unsigned)(ncpu - 1) : 1u;
    n = n < BC_MAX_WORKERS ? n : BC_MAX_WORKERS;
    for (unsigned i = 0; i < n; i++) {
        struct bc_worker *w = ptc_malloc(sizeof *w);
        if (!w)
            break;
        *w = (struct bc_worker){c, p->nworkers};
        if (pthread_create(&p->th[p->nworkers], NULL, worker_main, w) != 0) {
            ptc_free(w);
            break;
        }
        p->nworkers++;
    }
}

/* Queue block @p k of @p owner for the workers: with @p later behind
 * every block of a current read, and only while the blocks decoded ahead
 * and not read yet stay under later_max. */
static void prefetch(ptc_store_block_cache *c, uint64_t owner, const ptc_blob_ref *b, uint64_t k,
                     bool later)
{
    struct bc_shard *s = shard_of(c, owner, k);
    if (s->cap == 0)
        return;
    /* already there (or being decoded): nothing to queue. A racy look
     * is enough: the worker checks again under the lock. */
    pthread_mutex_lock(&s->lock);
    struct ptc_block_entry *e = *bucket(s, owner, k);
    while (e && !(e->owner == owner && e->k == k))
        e = e->hnext;
    pthread_mutex_unlock(&s->lock);
    if (e)
        return;
    struct bc_pool *p = &c->pool;
    pthread_mutex_lock(&p->lock);
    if (!p->started)
        pool_start(c);
    if (p->nworkers > 0 && !p->stop) {
        if (!later && p->njobs < BC_QUEUE) {
            p->jobs[p->njobs++] = (struct bc_job){owner, k, b};
            pthread_cond_signal(&p->work);
        } else if (later && p->nlater < BC_QUEUE &&
                   atomic_load(&c->unread) + (p->nlater - p->lfirst) + p->ltaken <
                       c->later_max) {
            /* the next reads' hints overlap: queue a block once */
            size_t i = p->lfirst;
            while (i < p->nlater && !(p->later[i].owner == owner && p->later[i].k == k))
                i++;
            if (i == p->nlater) {
                p->later[p->nlater++] = (struct bc_job){owner, k, b};
                pthread_cond_signal(&p->work);
            }
        }
    }
    pthread_mutex_unlock(&p->lock);
}

void ptc_block_cache_prefetch(ptc_store_block_cache *c, uint64_t owner, const ptc_blob_ref *b,
                              uint64_t k)
{
    prefetch(c, owner, b, k, false);
}

void ptc_block_cache_prefetch_later(ptc_store_block_cache *c, uint64_t owner,
                                    const ptc_blob_ref *b, uint64_t k)
{
    prefetch(c, owner, b, k, true);
}

void ptc_block_cache_drop_owner(ptc_store_block_cache *c, uint64_t owner)
{
    /* no worker may touch the owner's blob once this returns */
    struct bc_pool *p = &c->pool;
    pthread_mutex_lock(&p->lock);
    size_t o = 0;
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].owner != owner)
            p->jobs[o++] = p->jobs[i];
    p->njobs = o;
    o = 0;
    for (size_t i = p->lfirst; i < p->nlater; i++)
        if (p->later[i].owner != owner)
            p->later[o++] = p->later[i];
    p->lfirst = 0;
    p->nlater = o;
    for (;;) {
        bool busy = false;
        for (unsigned i = 0; i < p->nworkers; i++)
            busy |= p->busy[i] == owner;
        if (!busy)
            break;
        pthread_cond_wait(&p->idle, &p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < c->nshards; i++) {
        struct bc_shard *s = &c->shards[i];
        pthread_mutex_lock(&s->lock);
        for (struct ptc_block_entry *e = s->lru.next, *next; e != &s->lru; e = next) {
            next = e->next;
            if (e->owner == owner && e->refs == 0) {
                entry_remove(c, s, e);
                /* give the memory back: nothing of the owner is read again */
                (void)madvise(e->data, PTC_STORE_BLOCK_SIZE, MADV_DONTNEED);
                entry_free(s, e);
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
}
