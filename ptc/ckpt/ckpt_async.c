/* Asynchronous saves: the state is copied into a reusable snapshot area
 * (ptc_ckpt_stage) on the caller's thread, then the save runs on a thread of
 * its own while the job goes on.
 *
 * Two ways to split the protocol (ckpt_collective.c's steps):
 *   - background (the default): the thread runs the whole collective save
 *     — collection of the layout, begin, writes, commit — over the caller's
 *     transport, which nothing else may use meanwhile (a process group or
 *     communicator of its own);
 *   - collectives_in_caller: the begin (and the collection) run inside
 *     ptc_ckpt_save_*_async on the caller's thread, the thread only writes
 *     this process's pack files, and ptc_ckpt_async_wait runs the commit:
 *     no collective ever leaves the caller's thread.
 * A save across hosts (ptc_ckpt_hosts_save_async) runs the background way:
 * its thread runs the whole protocol of ckpt_hosts.c on the snapshot, and
 * receives the replicas into a second area of the stage, kept from save to
 * save. Through a deferred stage (ptc_ckpt_stage_defer) the snapshot too is
 * the thread's: it copies first, then the caller, waiting in
 * ptc_ckpt_async_snapshot_wait, may change its buffers.
 * Either way a failure of the snapshot on one process is not returned
 * there alone: it is this process's outcome in the protocol's first
 * agreement, so every process fails alike and none waits for it.
 * The thread runs at a lower CPU priority than the job (save_nice): with
 * more threads than cores it takes the cores the job leaves idle. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/pool_internal.h"
#include "base/util_internal.h"

/* Alignment of each buffer in the snapshot area. */
#define STAGE_ALIGN ((size_t)64)
/* Bytes of one copy item of a snapshot. */
#define STAGE_ITEM ((size_t)16 << 20)
/* Most threads of a snapshot by default. */
#define STAGE_THREADS_MAX 16

/* ---- the snapshot ------------------------------------------------------------------------ */

/* The buffers to copy: host memory, or tokens of @c stream. */
typedef struct snap {
    size_t n;
    const void **src;
    const uint8_t *streamed; /* may be NULL */
    const uint64_t *bytes;
    uint8_t **dst;           /* out: their place in the area (NULL for 0 bytes) */
    const ptc_ckpt_stream *stream;
    size_t *first;           /* the first copy item of buffer k */
    size_t items;
    size_t unit;             /* bytes of a streamed item: the stream's chunk */
} snap;

/* Bytes of one copy item of buffer @p k. */
static size_t snap_unit(const snap *sn, size_t k)
{
    return sn->streamed && sn->streamed[k] ? sn->unit : STAGE_ITEM;
}

static int snap_item(void *arg, size_t i)
{
    const snap *sn = arg;
    size_t k = 0, lo = 0, hi = sn->n;
    while (lo < hi) { /* the last buffer whose first item is <= i */
        size_t mid = lo + (hi - lo) / 2;
        if (sn->first[mid] <= i) {
            k = mid;
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    size_t unit = snap_unit(sn, k);
    uint64_t off = (uint64_t)(i - sn->first[k]) * unit;
    size_t n = (size_t)PTC_MIN((uint64_t)unit, sn->bytes[k] - off);
    if (!sn->streamed || !sn->streamed[k]) {
        memcpy(sn->dst[k] + off, (const uint8_t *)sn->src[k] + off, n);
        return PTC_OK;
    }
    const void *data;
    PTC_TRY(sn->stream->pull(sn->stream->user, (void *)sn->src[k], off, n, &data));
    memcpy(sn->dst[k] + off, data, n);
    sn->stream->release(sn->stream->user, (void *)sn->src[k], off, n);
    return PTC_OK;
}

/* Copy the buffers of @p sn into @p st (grown when too small), in parallel
 * over @p threads; sets sn->dst. */
static int snapshot(ptc_ckpt_stage *st, snap *sn, int threads)
{
    size_t total = 0;
    if (!(sn->first = ptc_calloc(sn->n + 1, sizeof *sn->first)))
        return PTC_E_NOMEM;
    sn->unit = ptc_ckpt_stream_chunk(sn->stream, false);
    for (size_t k = 0; k < sn->n; k++) {
        size_t unit = snap_unit(sn, k);
        sn->first[k] = sn->items;
        sn->items += (size_t)((sn->bytes[k] + unit - 1) / unit);
        total += (size_t)(sn->bytes[k] + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
    }
    if (total > st->cap) {
        /* the old bytes are not needed: free first, so that the peak is the
         * new size, not the sum */
        ptc_free(st->mem);
        st->cap = 0;
        if (!(st->mem = ptc_malloc(total)))
            return ptc_error_set(PTC_E_NOMEM, "checkpoint: no memory for a snapshot of %zu "
                                              "bytes", total);
        st->cap = total;
    }
    size_t at = 0;
    for (size_t k = 0; k < sn->n; k++) {
        sn->dst[k] = sn->bytes[k] ? st->mem + at : NULL;
        at += (size_t)(sn->bytes[k] + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
    }
    return ptc_pool_for(threads, sn->items, snap_item, sn);
}

/* ---- the save in the background ------------------------------------------------------------ */

struct ptc_ckpt_async {
    pthread_t th;
    bool started;          /* th runs */
    atomic_bool done;
    bool caller;           /* collectives_in_caller */
    bool hosts;            /* a save across hosts (ptc_ckpt_hosts_save_async) */
    int host;
    ptc_ckpt_hosts_options hopts;
    ptc_transport t;
    ptc_store *s;
    const ptc_layout *l;   /* the caller's, or own_l */
    ptc_layout *own_l;     /* collected in the caller (locals, caller mode) */
    const ptc_rules *rules;
    int *ranks;
    size_t nranks;
    void **bufs;           /* nranks x ntensors, into the stage (layout saves) */
    ptc_ckpt_local *locals;/* copies pointing into the stage (locals saves) */
    size_t n;
    ptc_piece *pieces;     /* the locals' pieces, copied */
    ptc_config cfg;
    bool has_cfg;          /* NULL: the explicit layout the locals describe */
    bool has_rec;
    ptc_ckpt_record rec;   /* strings in @c arena */
    char *arena;
    ptc_ckpt_options opts; /* no stream: the snapshot is host memory */
    ptc_ckpt_stage *stage;  /* held until the background part ends */
    const void **src;      /* deferred: the caller's buffers, until snapped */
    pthread_mutex_t mu;    /* deferred: guards snapped */
    pthread_cond_t cv;
    bool snapped;          /* the snapshot is taken (or failed) */
    ptc_ckpt_saving sv;    /* caller mode: between begin and commit */
    int rc_in;             /* this process's outcome before the background */
    char msg[1024];        /* ... and the message of rc_in, then of rc */
    int rc;
    uint64_t version;
};

/* Deep copy of a record into one allocation (*arena). */
static int rec_copy(ptc_ckpt_record *dst, const ptc_ckpt_record *src, char **arena)
{
    size_t need = src->rng_len + src->nextra * sizeof(ptc_ckpt_kv) + 3;
    const char *strs[3] = {src->config, src->schedule, src->dataset};
    for (int i = 0; i < 3; i++)
        need += strs[i] ? strlen(strs[i]) + 1 : 0;
    for (size_t i = 0; i < src->nextra; i++)
        need += strlen(src->extra[i].key) + strlen(src->extra[i].value) + 2;
    char *p = ptc_malloc(need + sizeof(ptc_ckpt_kv));
    if (!p)
        return PTC_E_NOMEM;
    *arena = p;
    *dst = *src;
    /* the key/value array first: aligned */
    ptc_ckpt_kv *kv = (ptc_ckpt_kv *)p;
    char *at = p + src->nextra * sizeof *kv;
    const char **outs[3] = {&dst->config, &dst->schedule, &dst->dataset};
    for (int i = 0; i < 3; i++)
        if (strs[i]) {
            *outs[i] = strcpy(at, strs[i]);
            at += strlen(at) + 1;
        }
    for (size_t i = 0; i < src->nextra; i++) {
        kv[i].key = strcpy(at, src->extra[i].key);
        at += strlen(at) + 1;
        kv[i].value = strcpy(at, src->extra[i].value);
        at += strlen(at) + 1;
    }
    dst->extra = src->nextra ? kv : NULL;
    if (src->rng_len) {
        memcpy(at, src->rng, src->rng_len);
        dst->rng = (const uint8_t *)at;
    }
    return PTC_OK;
}

static void async_free(ptc_ckpt_async *a)
{
    if (!a)
        return;
    ptc_ckpt_saving_free(&a->sv);
    ptc_free(a->src);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    if (a->stage)
        ptc_ckpt_stage_give(a->stage);
    ptc_layout_destroy(a->own_l);
    if (a->locals)
        for (size_t i = 0; i < a->n; i++)
            ptc_free((char *)a->locals[i].name);
    ptc_free(a->locals);
    ptc_free(a->pieces);
    ptc_free(a->ranks);
    ptc_free(a->bufs);
    ptc_free(a->arena);
    ptc_free(a);
}

/* This process's outcome so far, with its message, as the thread sets it. */
static void keep_error(ptc_ckpt_async *a, int rc)
{
    if (rc < 0 && a->rc_in == PTC_OK) {
        a->rc_in = rc;
        snprintf(a->msg, sizeof a->msg, "%s", ptc_last_error());
    }
}

static int restore_error(const ptc_ckpt_async *a)
{
    return a->rc_in < 0 ? ptc_error_set(a->rc_in, "%s", a->msg) : PTC_OK;
}

/* The snapshot is taken: the caller may change its buffers. */
static void set_snapped(ptc_ckpt_async *a)
{
    pthread_mutex_lock(&a->mu);
    a->snapped = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static int snap_layout(ptc_ckpt_async *a, const ptc_layout *l, const void *const *bufs);

/* Lower the calling thread's priority by PTC_SAVE_NICE (default 19, 0..19;
 * the threads it starts inherit it), so that a background save takes the
 * cores the job leaves idle rather than the job's; where the job waits for
 * it, nothing else wants the cores and it runs at full speed. Best effort. */
static void save_nice(void)
{
    const char *e = getenv("PTC_SAVE_NICE");
    char *end = NULL;
    long n = e && *e ? strtol(e, &end, 10) : 19;
    if (e && *e && (*end || n < 0 || n > 19))
        n = 19;
    if (n == 0)
        return;
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, tid);
    if (cur == -1 && errno)
        return;
    (void)setpriority(PRIO_PROCESS, tid, cur + (int)n > 19 ? 19 : cur + (int)n);
}

static void *run(void *arg)
{
    ptc_ckpt_async *a = arg;
    save_nice();
    const ptc_ckpt_record *rec = a->has_rec ? &a->rec : NULL;
    if (a->src) { /* the deferred snapshot first: the caller waits for it */
        keep_error(a, snap_layout(a, a->l, a->src));
        ptc_free(a->src);
        a->src = NULL;
        set_snapped(a);
    }
    int rc = restore_error(a);
    if (a->hosts) {
        rc = ptc_ckpt_hosts_save_rc(&a->t, rc, a->host, a->s, a->l, a->rules, a->ranks,
                                    a->nranks, (const void *const *)a->bufs, rec, &a->opts,
                                    &a->hopts, a->stage, &a->version);
    } else if (a->caller) {
        /* only the writes: the commit is the wait's */
        if (rc == PTC_OK)
            rc = ptc_ckpt_write_local_io(a->s, a->sv.version, a->sv.parent, a->l, a->ranks,
                                         a->nranks, (const void *const *)a->bufs, &a->opts, NULL,
                                         &a->sv.desc, &a->sv.dlen);
    } else if (a->locals) {
        rc = ptc_ckpt_save_locals_over(&a->t, rc, a->s, a->ranks, a->nranks, a->locals, a->n,
                                       a->has_cfg ? &a->cfg : NULL, a->rules, rec, &a->opts,
                                       &a->version);
    } else {
        ptc_ckpt_saving sv = {0};
        rc = ptc_ckpt_save_begin(&a->t, a->s, a->l, a->rules, rec, &a->opts, rc, &sv);
        if (rc == PTC_OK) {
            rc = ptc_ckpt_write_local_io(a->s, sv.version, sv.parent, a->l, a->ranks, a->nranks,
                                         (const void *const *)a->bufs, &a->opts, NULL, &sv.desc,
                                         &sv.dlen);
            rc = ptc_ckpt_save_finish(&a->t, rc, rec, &sv, &a->version);
        }
    }
    a->rc = rc;
    if (rc < 0)
        snprintf(a->msg, sizeof a->msg, "%s", ptc_last_error());
    /* done before the area is given: a save waiting for the area finds
     * this one done (the thread, niced, may run again only later) */
    atomic_store(&a->done, true);
    /* the next save may use the area (and, after this, the transport) */
    if (a->stage)
        ptc_ckpt_stage_give(a->stage);
    a->stage = NULL;
    return NULL;
}

/* The parts both entry points share: the handle with its copies. */
static int async_new(ptc_ckpt_async **out, const ptc_transport *t, ptc_store *s,
                     const ptc_rules *rules, const int *ranks, size_t nranks,
                     const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                     ptc_ckpt_stage *stage, bool hosts)
{
    ptc_ckpt_async *a = ptc_calloc(1, sizeof *a);
    if (!a)
        return PTC_E_NOMEM;
    int rc = ptc_ckpt_lock_init(&a->mu, &a->cv);
    if (rc < 0) {
        ptc_free(a);
        return rc;
    }
    a->snapped = true; /* unless deferred */
    a->t = *t;
    a->s = s;
    a->rules = rules;
    if (opts)
        a->opts = *opts;
    else
        ptc_ckpt_options_init(&a->opts);
    a->opts.stream = NULL;
    a->hosts = hosts;
    a->caller = a->opts.collectives_in_caller && !hosts;
    a->nranks = nranks;
    if (nranks && !ranks)
        rc = ptc_error_set(PTC_E_INVAL, "checkpoint: ranks is NULL with %zu ranks", nranks);
    else if (!(a->ranks = ptc_malloc(sizeof *a->ranks * (nranks + 1))))
        rc = PTC_E_NOMEM;
    else if (nranks)
        memcpy(a->ranks, ranks, sizeof *ranks * nranks);
    if (rc == PTC_OK && rec && (t->rank == 0 || hosts)) { /* across hosts: every leader's */
        rc = rec_copy(&a->rec, rec, &a->arena);
        a->has_rec = rc == PTC_OK;
    }
    if (rc == PTC_OK && stage) {
        /* the previous save through this area first (its background part) */
        ptc_ckpt_stage_take(stage);
        a->stage = stage;
    }
    keep_error(a, rc);
    *out = a;
    return PTC_OK;
}

/* Start the thread (or, where none can start, run it here). */
static void async_start(ptc_ckpt_async *a)
{
    if (pthread_create(&a->th, NULL, run, a) == 0)
        a->started = true;
    else
        run(a);
}

static int snapshot_threads(const ptc_ckpt_async *a)
{
    return ptc_pool_threads(a->opts.threads, STAGE_THREADS_MAX);
}

/* The layout save's buffers into the stage. */
static int snap_layout(ptc_ckpt_async *a, const ptc_layout *l, const void *const *bufs)
{
    size_t nt = ptc_layout_count(l), m = a->nranks * nt;
    uint64_t *bytes = ptc_calloc(m + 1, sizeof *bytes);
    a->bufs = ptc_calloc(m + 1, sizeof *a->bufs);
    if (!bytes || !a->bufs) {
        ptc_free(bytes);
        return PTC_E_NOMEM;
    }
    int rc = PTC_OK;
    for (size_t i = 0; i < a->nranks && rc == PTC_OK; i++)
        for (size_t t = 0; t < nt && rc == PTC_OK; t++) {
            size_t b = 0;
            rc = ptc_ckpt_local_bytes(l, t, a->ranks[i], &b);
            bytes[i * nt + t] = bufs[i * nt + t] ? b : 0;
        }
    if (rc == PTC_OK && !a->stage) {
        memcpy(a->bufs, bufs, sizeof *bufs * m);
    } else if (rc == PTC_OK) {
        snap sn = {.n = m, .src = (const void **)bufs, .bytes = bytes, .dst = (uint8_t **)a->bufs};
        rc = snapshot(a->stage, &sn, snapshot_threads(a));
        ptc_free(sn.first);
    }
    ptc_free(bytes);
    return rc;
}

/* The layout save's buffers, to be copied on the save's thread: their
 * addresses kept until then (the caller keeps the bytes unchanged until
 * ptc_ckpt_async_snapshot_wait). */
static int defer_layout(ptc_ckpt_async *a, const ptc_layout *l, const void *const *bufs)
{
    size_t m = a->nranks * ptc_layout_count(l);
    if (!(a->src = ptc_calloc(m + 1, sizeof *a->src)))
        return PTC_E_NOMEM;
    if (m)
        memcpy(a->src, bufs, sizeof *bufs * m);
    a->snapped = false;
    return PTC_OK;
}

int ptc_ckpt_save_async(ptc_ckpt_async **out, const ptc_transport *t, ptc_store *s,
                        const ptc_layout *l, const ptc_rules *rules, const int *ranks,
                        size_t nranks, const void *const *bufs, const ptc_ckpt_record *rec,
                        const ptc_ckpt_options *opts, ptc_ckpt_stage *stage)
{
    *out = NULL;
    if (!t || !l)
        return ptc_error_set(PTC_E_INVAL, "checkpoint save: transport and layout are required");
    ptc_ckpt_async *a;
    PTC_TRY(async_new(&a, t, s, rules, ranks, nranks, rec, opts, stage, false));
    a->l = l;
    if (a->rc_in == PTC_OK)
        keep_error(a, nranks && !bufs ? ptc_error_set(PTC_E_INVAL, "checkpoint save: buffers "
                                                                   "are required")
                                      : snap_layout(a, l, bufs));
    if (a->caller) {
        /* the begin here: its outcome (and the snapshot's) returns now */
        int rc = ptc_ckpt_save_begin(t, s, l, rules, a->has_rec ? &a->rec : NULL, &a->opts,
                                     restore_error(a), &a->sv);
        if (rc < 0) {
            async_free(a);
            return rc;
        }
    }
    async_start(a);
    *out = a;
    return PTC_OK;
}

int ptc_ckpt_hosts_save_async(ptc_ckpt_async **out, const ptc_transport *t, int host,
                              ptc_store *s, const ptc_layout *l, const ptc_rules *rules,
                              const int *ranks, size_t nranks, const void *const *bufs,
                              const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                              const ptc_ckpt_hosts_options *hopts, ptc_ckpt_stage *stage)
{
    *out = NULL;
    if (!t || !l || !stage)
        return ptc_error_set(PTC_E_INVAL, "checkpoint save across hosts: transport, layout "
                                          "and snapshot area are required");
    ptc_ckpt_async *a;
    PTC_TRY(async_new(&a, t, s, rules, ranks, nranks, rec, opts, stage, true));
    a->l = l;
    a->host = host;
    if (hopts)
        a->hopts = *hopts;
    else
        ptc_ckpt_hosts_options_init(&a->hopts);
    if (a->rc_in == PTC_OK && nranks && !bufs)
        keep_error(a, ptc_error_set(PTC_E_INVAL, "checkpoint save: buffers are required"));
    else if (a->rc_in == PTC_OK && stage->deferred)
        keep_error(a, defer_layout(a, l, bufs));
    else if (a->rc_in == PTC_OK)
        keep_error(a, snap_layout(a, l, bufs));
    async_start(a);
    *out = a;
    return PTC_OK;
}

/* Copies of the locals' pieces (one allocation), the copied descriptions
 * pointing there. */
static int copy_pieces(ptc_ckpt_async *a, const ptc_ckpt_local *locals, size_t n)
{
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        if (locals[i].npieces && !locals[i].pieces)
            return ptc_error_set(PTC_E_INVAL, "checkpoint: tensor '%s' on rank %d has %zu "
                                              "pieces and no array of them", locals[i].name,
                                 locals[i].rank, locals[i].npieces);
        if (locals[i].npieces > SIZE_MAX / sizeof(ptc_piece) - np)
            return ptc_error_set(PTC_E_RANGE, "checkpoint: too many pieces");
        np += locals[i].npieces;
    }
    if (!np)
        return PTC_OK;
    if (!(a->pieces = ptc_malloc(np * sizeof *a->pieces)))
        return PTC_E_NOMEM;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (!locals[i].npieces)
            continue;
        memcpy(a->pieces + at, locals[i].pieces, locals[i].npieces * sizeof *a->pieces);
        a->locals[i].pieces = a->pieces + at;
        at += locals[i].npieces;
    }
    return PTC_OK;
}

/* The described tensors' bytes into the stage (streamed ones pulled through
 * @p stream), and copies of their descriptions (pieces included) pointing
 * there. */
static int snap_locals(ptc_ckpt_async *a, const ptc_ckpt_local *locals, size_t n,
                       const ptc_ckpt_stream *stream)
{
    if (n && !locals)
        return ptc_error_set(PTC_E_INVAL, "checkpoint save: locals is NULL with %zu tensors", n);
    a->n = n;
    a->locals = ptc_calloc(n + 1, sizeof *a->locals);
    uint64_t *bytes = ptc_calloc(n + 1, sizeof *bytes);
    const void **src = ptc_calloc(n + 1, sizeof *src);
    uint8_t *streamed = ptc_calloc(n + 1, 1), **dst = ptc_calloc(n + 1, sizeof *dst);
    int rc = a->locals && bytes && src && streamed && dst ? PTC_OK : PTC_E_NOMEM;
    for (size_t i = 0; i < n && rc == PTC_OK; i++) {
        const ptc_ckpt_local *x = &locals[i];
        a->locals[i] = *x;
        a->locals[i].name = NULL;
        a->locals[i].pieces = NULL; /* copy_pieces */
        if (!x->name) {
            rc = ptc_error_set(PTC_E_INVAL, "checkpoint: local tensor %zu has no name", i);
            break;
        }
        if (!(a->locals[i].name = ptc_strdup(x->name))) {
            rc = PTC_E_NOMEM;
            break;
        }
        int64_t vol = 1;
        for (int d = 0; d < x->ndim && d < PTC_MAX_DIMS; d++)
            vol *= x->shape[d] > 0 ? x->shape[d] : 0;
        bytes[i] = x->data ? (uint64_t)vol * ptc_dtype_size(x->dtype) : 0;
        src[i] = x->data;
        streamed[i] = x->streamed;
        if (x->streamed && (!a->stage || !stream || !stream->pull || !stream->release))
            rc = ptc_error_set(PTC_E_INVAL, "checkpoint: tensor '%s' on rank %d is streamed: an "
                                            "asynchronous save needs a snapshot area and a stream "
                                            "that pulls", x->name, x->rank);
    }
    if (rc == PTC_OK)
        rc = copy_pieces(a, locals, n);
    if (rc == PTC_OK && a->stage) {
        snap sn = {.n = n, .src = src, .streamed = streamed, .bytes = bytes, .dst = dst,
                   .stream = stream};
        rc = snapshot(a->stage, &sn, snapshot_threads(a));
        ptc_free(sn.first);
        for (size_t i = 0; i < n && rc == PTC_OK; i++) {
            a->locals[i].data = dst[i];
            a->locals[i].streamed = false;
        }
    }
    ptc_free(bytes);
    ptc_free(src);
    ptc_free(streamed);
    ptc_free(dst);
    return rc;
}

int ptc_ckpt_save_locals_async(ptc_ckpt_async **out, const ptc_transport *t, int rc,
                               ptc_store *s, const int *ranks, size_t nranks,
                               const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                               const ptc_rules *rules, const ptc_ckpt_record *rec,
                               const ptc_ckpt_options *opts, ptc_ckpt_stage *stage)
{
    *out = NULL;
    if (!t)
        return ptc_error_set(PTC_E_INVAL, "checkpoint save: a transport is required");
    ptc_ckpt_async *a;
    if (rc < 0) { /* keep the caller's message: async_new may overwrite it */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ptc_last_error());
        PTC_TRY(async_new(&a, t, s, rules, NULL, 0, NULL, opts, NULL, false));
        a->rc_in = rc;
        snprintf(a->msg, sizeof a->msg, "%s", msg);
    } else {
        PTC_TRY(async_new(&a, t, s, rules, ranks, nranks, rec, opts, stage, false));
        if (cfg)
            a->cfg = *cfg;
        a->has_cfg = cfg != NULL;
        if (a->rc_in == PTC_OK)
            keep_error(a, snap_locals(a, locals, n, opts ? opts->stream : NULL));
    }
    if (a->caller) {
        /* the collection, the check and the begin here */
        static const char what[] = "checkpoint save";
        void **bufs = NULL;
        rc = ptc_ckpt_collect(t, what, restore_error(a), a->ranks, a->nranks, a->locals, a->n,
                              a->has_cfg ? &a->cfg : NULL, rules, &a->own_l);
        if (rc < 0) {
            async_free(a);
            return rc;
        }
        a->l = a->own_l;
        rc = ptc_ckpt_bind_save(a->l, a->ranks, a->nranks, a->locals, a->n, &bufs);
        a->bufs = bufs;
        rc = ptc_ckpt_save_begin(t, s, a->l, rules, a->has_rec ? &a->rec : NULL, &a->opts, rc,
                                 &a->sv);
        if (rc < 0) {
            async_free(a);
            return rc;
        }
    }
    async_start(a);
    *out = a;
    return PTC_OK;
}

void ptc_ckpt_async_snapshot_wait(ptc_ckpt_async *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    while (!a->snapped)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

bool ptc_ckpt_async_done(const ptc_ckpt_async *a)
{
    return !a || atomic_load(&a->done);
}

int ptc_ckpt_async_wait(ptc_ckpt_async *a, uint64_t *version)
{
    if (!a)
        return PTC_OK;
    if (a->started)
        pthread_join(a->th, NULL);
    int rc = a->rc;
    if (rc < 0)
        ptc_error_set(rc, "%s", a->msg);
    if (a->caller)
        rc = ptc_ckpt_save_finish(&a->t, rc, a->has_rec ? &a->rec : NULL, &a->sv, &a->version);
    if (rc == PTC_OK && version)
        *version = a->version;
    if (rc < 0) { /* the message outlives the handle */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ptc_last_error());
        async_free(a);
        return ptc_error_set(rc, "%s", msg);
    }
    async_free(a);
    return PTC_OK;
}

void ptc_ckpt_async_cancel(ptc_ckpt_async *a)
{
    if (!a)
        return;
    if (a->started)
        pthread_join(a->th, NULL);
    async_free(a); /* the begun version aborted, its files removed */
}
