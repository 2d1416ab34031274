/* The mounted tree as a library: the stateful view over an abstract
 * dataset — its open datasets, cached step plans, served counts and reads.
 * Paths are parsed by view_path.c, step files computed by view_step.c. The
 * FUSE adapter (mount_fuse3.c) is a thin shell around this file, so
 * everything here is testable without mounting. */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/util_internal.h"
#include "fuse/view_internal.h"
#include "ptc/batch.h"

#define VIEW_CACHE 64
#define VIEW_LIST_MAX 1024

static const char view_readme[] =
    "PTC mount: the model and dataset state of a PTC store, computed on read.\n"
    "\n"
    "models/<V>/info.json                       version V: step, config, tensors\n"
    "models/<V>/model.safetensors               the whole model, assembled on read\n"
    "models/<V>/<CFG>/rank-<R>.safetensors      rank R's shards for any CFG,\n"
    "                                           written dp2-tp4-pp1[-zero1]\n"
    "                                           (tp4-dp2, dp=2,tp=4 open it too)\n"
    "datasets/<NAME>/info.json                  the dataset: samples, format\n"
    "datasets/<NAME>/samples/<ID>               one record (not counted)\n"
    "datasets/<NAME>/seed-<S>/epoch-<E>/batch-<B>/start-<X>/dp-<D>/rank-<R>/step-<K>\n"
    "    the records of step K for data-parallel rank R of D, concatenated:\n"
    "    global batch K covers positions [X+K*B, X+(K+1)*B) of the epoch order\n"
    "    (clipped to the dataset), split over the D ranks by the split rule.\n"
    "    step-<K>.idx holds n+1 little-endian u64 offsets into step-<K>.\n"
    "    A step past the end does not exist. Every record whose last byte is\n"
    "    read is counted for `ptc dataset audit`.\n"
    "\n"
    "Numbers are plain decimal without leading zeros. Directories whose\n"
    "children are unbounded list nothing: open the path you need.\n";

/* ---- the view object ------------------------------------------------------------------- */

struct view_ds {
    char *name;
    ptc_view_dataset ds;
};

struct plan_ref {
    atomic_long refs;
    ptc_view_step *step;
};

struct cache_entry {
    const struct view_ds *ds;
    ptc_dataset_step st;
    struct plan_ref *plan;
    uint64_t used;
};

struct ptc_view {
    ptc_view_ops ops;
    void *user;
    pthread_mutex_t lock;
    struct view_ds **ds;
    size_t nds, cap;
    struct cache_entry cache[VIEW_CACHE];
    uint64_t tick;
    /* empty step files already counted: 128-bit hashes of (generation,
     * path), open addressing; guarded by lock */
    XXH128_hash_t *empty;
    size_t nempty, empty_cap;
};

/* A resolved node: what reads need, found once. On the heap it is a
 * refcounted handle (ptc_view_node_resolve) or the inside of an open file;
 * the path calls (ptc_view_pread, ...) keep one on their stack. */
struct ptc_view_handle {
    atomic_long refs; /* heap handles only */
    ptc_view *v;
    ptc_view_kind kind;
    bool is_dir;
    uint64_t size;
    const struct view_ds *ds; /* dataset nodes; valid until ptc_view_destroy */
    struct plan_ref *plan;    /* step files and their .idx */
    uint64_t id;
    ptc_dataset_step st; /* step files: the step (its records are counted in
                            st.seed, st.epoch; the next steps are hinted) */
    char *text; /* datasets/<NAME>/info.json */
    void *fh;   /* model files: what ops.model_open gave */
};

struct ptc_view_file {
    ptc_view_handle h;
};

static void plan_unref(struct plan_ref *p)
{
    if (p && atomic_fetch_sub(&p->refs, 1) == 1) {
        ptc_view_step_destroy(p->step);
        ptc_free(p);
    }
}

int ptc_view_create(ptc_view **out, const ptc_view_ops *ops, void *user)
{
    *out = NULL;
    ptc_view *v = ptc_calloc(1, sizeof *v);
    if (!v)
        return PTC_E_NOMEM;
    if (ops)
        v->ops = *ops;
    v->user = user;
    pthread_mutex_init(&v->lock, NULL);
    *out = v;
    return PTC_OK;
}

void ptc_view_destroy(ptc_view *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < VIEW_CACHE; i++)
        plan_unref(v->cache[i].plan);
    for (size_t i = 0; i < v->nds; i++) {
        if (v->ops.dataset_close)
            v->ops.dataset_close(v->user, &v->ds[i]->ds);
        ptc_free(v->ds[i]->name);
        ptc_free(v->ds[i]);
    }
    ptc_free(v->ds);
    ptc_free(v->empty);
    pthread_mutex_destroy(&v->lock);
    ptc_free(v);
}

/* Find or open a dataset; the result stays valid until ptc_view_destroy. */
static int view_dataset(ptc_view *v, const char *name, const struct view_ds **out)
{
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < v->nds; i++) {
        if (strcmp(v->ds[i]->name, name) == 0) {
            *out = v->ds[i];
            pthread_mutex_unlock(&v->lock);
            return PTC_OK;
        }
    }
    pthread_mutex_unlock(&v->lock);
    if (!v->ops.dataset_open)
        return ptc_error_set(PTC_E_NOTFOUND, "no dataset '%s'", name);
    struct view_ds *d = ptc_calloc(1, sizeof *d);
    if (!d)
        return PTC_E_NOMEM;
    d->name = ptc_strdup(name);
    if (!d->name) {
        ptc_free(d);
        return PTC_E_NOMEM;
    }
    int rc = v->ops.dataset_open(v->user, name, &d->ds);
    if (rc < 0) {
        ptc_free(d->name);
        ptc_free(d);
        return rc;
    }
    pthread_mutex_lock(&v->lock);
    /* another thread may have opened it meanwhile: keep the first */
    for (size_t i = 0; i < v->nds; i++) {
        if (strcmp(v->ds[i]->name, name) == 0) {
            *out = v->ds[i];
            pthread_mutex_unlock(&v->lock);
            goto out_close;
        }
    }
    rc = ptc_grow((void **)&v->ds, &v->cap, v->nds + 1, sizeof *v->ds);
    if (rc == PTC_OK) {
        v->ds[v->nds++] = d;
        *out = d;
    }
    pthread_mutex_unlock(&v->lock);
    if (rc == PTC_OK)
        return PTC_OK;
out_close:
    if (v->ops.dataset_close)
        v->ops.dataset_close(v->user, &d->ds);
    ptc_free(d->name);
    ptc_free(d);
    return rc;
}

/* The step a step-file node names. */
static ptc_dataset_step node_step(const ptc_view_node *n)
{
    return (ptc_dataset_step){.seed = n->seed, .epoch = n->epoch, .batch = n->batch,
                              .start = n->start, .dp = n->dp, .rank = n->rank,
                              .step = n->step, .policy = n->policy};
}

static bool cache_match(const struct cache_entry *e, const struct view_ds *ds,
                        const ptc_dataset_step *st)
{
    const ptc_dataset_step *c = &e->st;
    return e->plan && e->ds == ds && c->seed == st->seed && c->epoch == st->epoch &&
           c->batch == st->batch && c->start == st->start && c->dp == st->dp &&
           c->rank == st->rank && c->step == st->step && c->policy == st->policy;
}

/* The plan of a step, shared through a small LRU cache (getattr, open and
 * the .idx of one step all need the same plan). */
static int view_plan(ptc_view *v, const struct view_ds *ds, const ptc_dataset_step *st,
                     struct plan_ref **out)
{
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < VIEW_CACHE; i++) {
        if (cache_match(&v->cache[i], ds, st)) {
            v->cache[i].used = ++v->tick;
            atomic_fetch_add(&v->cache[i].plan->refs, 1);
            *out = v->cache[i].plan;
            pthread_mutex_unlock(&v->lock);
            return PTC_OK;
        }
    }
    pthread_mutex_unlock(&v->lock);
    struct plan_ref *p = ptc_calloc(1, sizeof *p);
    if (!p)
        return PTC_E_NOMEM;
    int rc = ptc_view_step_plan(&ds->ds, st, &p->step);
    if (rc < 0) {
        ptc_free(p);
        return rc;
    }
    atomic_init(&p->refs, 2); /* the caller's and the cache's */
    pthread_mutex_lock(&v->lock);
    size_t victim = 0;
    for (size_t i = 1; i < VIEW_CACHE; i++)
        if (v->cache[i].used < v->cache[victim].used)
            victim = i;
    struct plan_ref *old = v->cache[victim].plan;
    struct cache_entry *e = &v->cache[victim];
    e->ds = ds;
    e->st = *st;
    e->plan = p;
    e->used = ++v->tick;
    pthread_mutex_unlock(&v->lock);
    plan_unref(old);
    *out = p;
    return PTC_OK;
}

static int dataset_info_text(const struct view_ds *d, char **out)
{
    if (d->ds.info_json) {
        *out = ptc_strdup(d->ds.info_json);
        return *out ? PTC_OK : PTC_E_NOMEM;
    }
    json_t *j = json_pack("{s:s, s:I}", "name", d->name, "samples", (json_int_t)d->ds.n);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return ptc_error_set(PTC_E_NOMEM, "out of memory formatting info.json");
    size_t l = strlen(s);
    *out = ptc_malloc(l + 2);
    if (*out) {
        memcpy(*out, s, l);
        (*out)[l] = '\n';
        (*out)[l + 1] = 0;
    }
    free(s);
    return *out ? PTC_OK : PTC_E_NOMEM;
}

/* Resolve a parsed node: existence against the data, directory or file,
 * size; for files the dataset and plan a read needs (the caller releases
 * *plan with plan_unref and frees *text). */
static int view_resolve(ptc_view *v, const char *path, const ptc_view_node *n,
                        ptc_view_stat *st, const struct view_ds **dsp, struct plan_ref **plan,
                        char **text)
{
    st->is_dir = ptc_view_kind_is_dir(n->kind);
    st->size = 0;
    switch (n->kind) {
    case PTC_VIEW_ROOT:
    case PTC_VIEW_MODELS:
    case PTC_VIEW_DATASETS:
        return PTC_OK;
    case PTC_VIEW_README:
        st->size = sizeof view_readme - 1;
        return PTC_OK;
    case PTC_VIEW_MODEL:
    case PTC_VIEW_MODEL_INFO:
    case PTC_VIEW_MODEL_FULL:
    case PTC_VIEW_MODEL_CFG:
    case PTC_VIEW_MODEL_RANK:
        if (!v->ops.model_stat)
            return ptc_view_not_found(path);
        return v->ops.model_stat(v->user, n, &st->size);
    default:
        break;
    }
    const struct view_ds *d = NULL;
    PTC_TRY(view_dataset(v, n->name, &d));
    if (dsp)
        *dsp = d;
    switch (n->kind) {
    case PTC_VIEW_DATASET_INFO: {
        char *t = NULL;
        PTC_TRY(dataset_info_text(d, &t));
        st->size = strlen(t);
        if (text)
            *text = t;
        else
            ptc_free(t);
        return PTC_OK;
    }
    case PTC_VIEW_SAMPLE:
        if (n->id >= d->ds.n)
            return ptc_view_not_found(path);
        return d->ds.record_size(d->ds.user, n->id, &st->size);
    case PTC_VIEW_START:
    case PTC_VIEW_DP:
    case PTC_VIEW_POLICY:
    case PTC_VIEW_RANK:
        return n->start <= d->ds.n ? PTC_OK : ptc_view_not_found(path);
    case PTC_VIEW_STEP:
    case PTC_VIEW_STEP_IDX: {
        struct plan_ref *p;
        ptc_dataset_step step = node_step(n);
        int rc = view_plan(v, d, &step, &p);
        if (rc == PTC_E_NOTFOUND)
            return ptc_view_not_found(path);
        if (rc < 0)
            return rc;
        st->size = n->kind == PTC_VIEW_STEP ? p->step->offsets[p->step->n] : 8 * (p->step->n + 1);
        if (plan)
            *plan = p;
        else
            plan_unref(p);
        return PTC_OK;
    }
    default:
        return PTC_OK; /* dataset, samples/, seed-, epoch-, batch- levels */
    }
}

int ptc_view_stat_path(ptc_view *v, const char *path, ptc_view_stat *st)
{
    ptc_view_node n;
    PTC_TRY(ptc_view_parse(path, &n));
    return view_resolve(v, path, &n, st, NULL, NULL, NULL);
}

int ptc_view_list(ptc_view *v, const char *path, ptc_view_emit_fn emit, void *ctx)
{
    ptc_view_node n;
    ptc_view_stat st;
    PTC_TRY(ptc_view_parse(path, &n));
    PTC_TRY(view_resolve(v, path, &n, &st, NULL, NULL, NULL));
    if (!st.is_dir)
        return ptc_error_set(PTC_E_INVAL, "%s is not a directory", path);
    char name[64];
    switch (n.kind) {
    case PTC_VIEW_ROOT:
        if (emit(ctx, "README.txt", false) || emit(ctx, "models", true))
            return PTC_OK;
        emit(ctx, "datasets", true);
        return PTC_OK;
    case PTC_VIEW_MODELS:
        return v->ops.model_list ? v->ops.model_list(v->user, emit, ctx) : PTC_OK;
    case PTC_VIEW_MODEL:
        if (!emit(ctx, "info.json", false))
            emit(ctx, "model.safetensors", false);
        return PTC_OK;
    case PTC_VIEW_MODEL_CFG: {
        int world = ptc_config_world(&n.config);
        for (int r = 0; r < world && r < VIEW_LIST_MAX; r++) {
            snprintf(name, sizeof name, "rank-%d.safetensors", r);
            if (emit(ctx, name, false))
                break;
        }
        return PTC_OK;
    }
    case PTC_VIEW_DATASETS:
        return v->ops.dataset_list ? v->ops.dataset_list(v->user, emit, ctx) : PTC_OK;
    case PTC_VIEW_DATASET:
        if (!emit(ctx, "info.json", false))
            emit(ctx, "samples", true);
        return PTC_OK;
    case PTC_VIEW_DP:     /* policy-<P> children are not listed: the default tree */
    case PTC_VIEW_POLICY:
        for (uint64_t r = 0; r < n.dp && r < VIEW_LIST_MAX; r++) {
            snprintf(name, sizeof name, "rank-%llu", (unsigned long long)r);
            if (emit(ctx, name, true))
                break;
        }
        return PTC_OK;
    default:
        return PTC_OK; /* unbounded children: list nothing */
    }
}

static bool is_model_file(ptc_view_kind k)
{
    return k == PTC_VIEW_MODEL_INFO || k == PTC_VIEW_MODEL_FULL || k == PTC_VIEW_MODEL_RANK;
}

/* Resolve @p path into @p h (the caller's memory): what reads need,
 * without the counting of an empty step file. With @p file_only a
 * directory is PTC_E_INVAL, as an open answers. */
static int node_init(ptc_view *v, const char *path, bool file_only, ptc_view_handle *h)
{
    ptc_view_node n;
    ptc_view_stat st;
    memset(h, 0, sizeof *h);
    PTC_TRY(ptc_view_parse(path, &n));
    h->v = v;
    h->kind = n.kind;
    h->id = n.id;
    h->st = node_step(&n);
    int rc = view_resolve(v, path, &n, &st, &h->ds, &h->plan, &h->text);
    if (rc < 0)
        goto out_release;
    if (st.is_dir && file_only) {
        rc = ptc_error_set(PTC_E_INVAL, "%s is a directory", path);
        goto out_release;
    }
    h->is_dir = st.is_dir;
    h->size = st.size;
    if (is_model_file(n.kind)) {
        rc = v->ops.model_open ? v->ops.model_open(v->user, &n, &h->fh)
                               : ptc_error_set(PTC_E_UNSUPPORTED, "models are not served here");
        if (rc < 0)
            goto out_release;
    }
    return PTC_OK;
out_release:
    plan_unref(h->plan);
    ptc_free(h->text);
    h->plan = NULL;
    h->text = NULL;
    return rc;
}

static void node_fini(ptc_view_handle *h)
{
    if (h->fh && h->v->ops.model_close)
        h->v->ops.model_close(h->v->user, h->fh);
    plan_unref(h->plan);
    ptc_free(h->text);
}

/* ---- served counts ------------------------------------------------------------------- */

/* Report the records that bytes [a, b) of step file @p h serve. */
static void count_served(const ptc_view_handle *h, uint64_t a, uint64_t b)
{
    const ptc_view_step *s = h->plan->step;
    const ptc_view *v = h->v;
    if (!v->ops.served || s->n == 0)
        return;
    uint64_t first, end;
    ptc_view_step_served(s, a, b, &first, &end);
    for (uint64_t i = first; i < end; i++)
        v->ops.served(v->user, h->ds->name, h->ds->ds.generation, h->st.seed, h->st.epoch,
                      s->ids[i]);
}

static bool hash_empty_slot(XXH128_hash_t h)
{
    return h.low64 == 0 && h.high64 == 0;
}
static bool empty_first(ptc_view *v, XXH128_hash_t h)
{
    if (hash_empty_slot(h))
        h.low64 = 1;
    pthread_mutex_lock(&v->lock);
    if (2 * (v->nempty + 1) > v->empty_cap) {
        size_t ncap = v->empty_cap ? 2 * v->empty_cap : 64;
        XXH128_hash_t *t = ptc_calloc(ncap, sizeof *t);
        if (!t) {
            pthread_mutex_unlock(&v->lock);
            return true; /* out of memory: count rather than lose the records */
        }
        for (size_t i = 0; i < v->empty_cap; i++)
            if (!hash_empty_slot(v->empty[i]))
                for (size_t j = v->empty[i].low64 & (ncap - 1);; j = (j + 1) & (ncap - 1))
                    if (hash_empty_slot(t[j])) {
                        t[j] = v->empty[i];
                        break;
                    }
        ptc_free(v->empty);
        v->empty = t;
        v->empty_cap = ncap;
    }
    bool fresh = true;
    for (size_t j = h.low64 & (v->empty_cap - 1);; j = (j + 1) & (v->empty_cap - 1)) {
        if (hash_empty_slot(v->empty[j])) {
            v->empty[j] = h;
            v->nempty++;
            break;
        }
        if (XXH128_isEqual(v->empty[j], h)) {
            fresh = false;
            break;
        }
    }
    pthread_mutex_unlock(&v->lock);
    return fresh;
}

/* An empty step file is never read: its (empty) records count the first
 * time the file is opened, resolved or (without opens) looked up in this
 * view — once, however often the kernel looks it up again. */
static void count_empty(const ptc_view_handle *h, const char *path)
{
    ptc_view *v = h->v;
    if (h->kind != PTC_VIEW_STEP || h->size != 0 || !v->ops.served || h->plan->step->n == 0)
        return;
    if (!empty_first(v, XXH3_128bits_withSeed(path, strlen(path), h->ds->ds.generation)))
        return;
    for (uint64_t i = 0; i < h->plan->step->n; i++)
        v->ops.served(v->user, h->ds->name, h->ds->ds.generation, h->st.seed, h->st.epoch,
                      h->plan->step->ids[i]);
}

/* ---- reads --------------------------------------------------------------------------- */

/* Pieces of a read in order; adjacent ones merge. The last slot is kept
 * for the tail: once the others are used, the rest is copied into the
 * scratch, where it lies contiguous. */
struct seg_list {
    ptc_view_seg *s;
    size_t n, cap;
};

static void seg_add(struct seg_list *g, const uint8_t *p, size_t len)
{
    ptc_view_seg *last = g->n ? &g->s[g->n - 1] : NULL;
    if (last && (const uint8_t *)last->ptr + last->len == p)
        last->len += len;
    else
        g->s[g->n++] = (ptc_view_seg){p, len};
}

/* Bytes [in, in + n) of record @p id: with a piece list @p g, in place
 * when the dataset holds them so and a slot is left; else copied to
 * @p dst (and, with @p g, listed from there). */
static int fetch_piece(struct seg_list *g, const ptc_view_dataset *ds, uint64_t id, uint64_t in,
                       size_t n, uint8_t *dst)
{
    if (g && ds->record_map && g->n + 1 < g->cap) {
        const void *p;
        PTC_TRY(ds->record_map(ds->user, id, in, n, &p));
        if (p) {
            seg_add(g, p, n);
            return PTC_OK;
        }
    }
    PTC_TRY(ds->record_read(ds->user, id, in, dst, n));
    if (g)
        seg_add(g, dst, n);
    return PTC_OK;
}

static int prefetch_piece(void *ctx, uint64_t id, uint64_t in, size_t n, uint64_t pos)
{
    const ptc_view_dataset *ds = ctx;
    (void)pos;
    ds->record_prefetch(ds->user, id, in, n);
    return PTC_OK;
}

static int later_piece(void *ctx, uint64_t id, uint64_t in, size_t n, uint64_t pos)
{
    const ptc_view_dataset *ds = ctx;
    (void)pos;
    ds->record_prefetch_later(ds->user, id, in, n);
    return PTC_OK;
}

/* Hint the records of the next PTC_VIEW_LOOKAHEAD step files of @p h's
 * directory: a reader takes them in order, and a dataset that decodes
 * blocks (zstd) can then decode theirs while this one is copied out and
 * consumed. Their plans go to the plan cache, where their opens find them. */
static void hint_next_steps(const ptc_view_handle *h)
{
    const ptc_view_dataset *ds = &h->ds->ds;
    uint64_t steps;
    if (ptc_batch_steps_policy(ds->n, h->st.batch, h->st.start, h->st.policy, &steps) < 0)
        return;
    ptc_dataset_step next = h->st;
    for (uint64_t j = 1; j <= PTC_VIEW_LOOKAHEAD && h->st.step + j < steps; j++) {
        struct plan_ref *p;
        next.step = h->st.step + j;
        if (view_plan(h->v, h->ds, &next, &p) < 0)
            return;
        ptc_view_step_pieces(p->step, 0, p->step->offsets[p->step->n], later_piece, (void *)ds);
        plan_unref(p);
    }
}

struct step_read {
    struct seg_list *g; /* NULL: copy everything */
    const ptc_view_dataset *ds;
    uint8_t *buf; /* file offset off goes here when copied */
    uint64_t off;
};

static int read_piece(void *ctx, uint64_t id, uint64_t in, size_t n, uint64_t pos)
{
    struct step_read *c = ctx;
    return fetch_piece(c->g, c->ds, id, in, n, c->buf + (pos - c->off));
}

/* Bytes [off, end) of step file @p h: every record piece is hinted to the
 * dataset (so it can load them all at once) before any is fetched. */
static int read_step(const ptc_view_handle *h, uint64_t off, uint64_t end, uint8_t *buf,
                     struct seg_list *g)
{
    const ptc_view_dataset *ds = &h->ds->ds;
    if (ds->record_prefetch)
        ptc_view_step_pieces(h->plan->step, off, end, prefetch_piece, (void *)ds);
    if (ds->record_prefetch_later && off == 0)
        hint_next_steps(h);
    struct step_read c = {g, ds, buf, off};
    return ptc_view_step_pieces(h->plan->step, off, end, read_piece, &c);
}

/* The one read path: bytes [off, off + len) of @p h, clipped to its size,
 * copied into @p buf or, with a piece list @p g, listed there (in place
 * where the dataset holds them so, else from @p buf). */
static int node_read(const ptc_view_handle *h, uint64_t off, size_t len, uint8_t *buf,
                     struct seg_list *g, size_t *got)
{
    const ptc_view *v = h->v;
    *got = 0;
    if (is_model_file(h->kind)) {
        int rc = v->ops.model_read
                     ? v->ops.model_read(v->user, h->fh, off, buf, len, got)
                     : ptc_error_set(PTC_E_UNSUPPORTED, "models are not served here");
        if (rc == PTC_OK && g && *got)
            seg_add(g, buf, *got);
        return rc;
    }
    if (h->is_dir)
        return ptc_error_set(PTC_E_INVAL, "not a file");
    if (off >= h->size || len == 0)
        return PTC_OK;
    uint64_t end = off + PTC_MIN((uint64_t)len, h->size - off);
    size_t n = (size_t)(end - off), k;
    switch (h->kind) {
    case PTC_VIEW_README:
        memcpy(buf, view_readme + off, n);
        break;
    case PTC_VIEW_DATASET_INFO:
        memcpy(buf, h->text + off, n);
        break;
    case PTC_VIEW_STEP_IDX:
        ptc_view_step_idx_read(h->plan->step, off, buf, n, &k);
        break;
    case PTC_VIEW_SAMPLE:
        PTC_TRY(fetch_piece(g, &h->ds->ds, h->id, off, n, buf));
        *got = n;
        return PTC_OK;
    case PTC_VIEW_STEP:
        PTC_TRY(read_step(h, off, end, buf, g));
        count_served(h, off, end);
        *got = n;
        return PTC_OK;
    default:
        return ptc_error_set(PTC_E_INVAL, "not a file");
    }
    if (g)
        seg_add(g, buf, n);
    *got = n;
    return PTC_OK;
}

static int node_read_segs(const ptc_view_handle *h, uint64_t off, size_t len, void *scratch,
                          ptc_view_seg *segs, size_t *nseg, size_t *got)
{
    struct seg_list g = {segs, 0, *nseg};
    *nseg = 0;
    PTC_TRY(node_read(h, off, len, scratch, &g, got));
    *nseg = g.n;
    return PTC_OK;
}

static int segs_room(size_t *nseg, size_t *got)
{
    *got = 0;
    if (*nseg < 2)
        return ptc_error_set(PTC_E_INVAL, "a segmented read needs room for 2 pieces");
    return PTC_OK;
}

/* ---- resolved nodes ------------------------------------------------------------------ */

int ptc_view_node_resolve(ptc_view *v, const char *path, ptc_view_handle **out)
{
    *out = NULL;
    ptc_view_handle *h = ptc_malloc(sizeof *h);
    if (!h)
        return PTC_E_NOMEM;
    int rc = node_init(v, path, false, h);
    if (rc < 0) {
        ptc_free(h);
        return rc;
    }
    count_empty(h, path);
    atomic_init(&h->refs, 1);
    *out = h;
    return PTC_OK;
}

ptc_view_handle *ptc_view_node_retain(ptc_view_handle *h)
{
    atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    return h;
}

void ptc_view_node_release(ptc_view_handle *h)
{
    if (h && atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1) {
        node_fini(h);
        ptc_free(h);
    }
}

void ptc_view_node_stat(const ptc_view_handle *h, ptc_view_stat *st)
{
    st->is_dir = h->is_dir;
    st->size = h->size;
}

ptc_view_kind ptc_view_node_kind(const ptc_view_handle *h)
{
    return h->kind;
}

int ptc_view_node_pread(ptc_view_handle *h, uint64_t off, void *buf, size_t len, size_t *got)
{
    return node_read(h, off, len, buf, NULL, got);
}

int ptc_view_node_pread_segs(ptc_view_handle *h, uint64_t off, size_t len, void *scratch,
                             ptc_view_seg *segs, size_t *nseg, size_t *got)
{
    PTC_TRY(segs_room(nseg, got));
    return node_read_segs(h, off, len, scratch, segs, nseg, got);
}

/* ---- files and path reads (a resolved node each) ------------------------------------- */

int ptc_view_open(ptc_view *v, const char *path, ptc_view_file **out)
{
    *out = NULL;
    ptc_view_file *f = ptc_malloc(sizeof *f);
    if (!f)
        return PTC_E_NOMEM;
    int rc = node_init(v, path, true, &f->h);
    if (rc < 0) {
        ptc_free(f);
        return rc;
    }
    count_empty(&f->h, path);
    *out = f;
    return PTC_OK;
}

uint64_t ptc_view_file_size(const ptc_view_file *f)
{
    return f->h.size;
}

int ptc_view_read(ptc_view_file *f, uint64_t off, void *buf, size_t len, size_t *got)
{
    return node_read(&f->h, off, len, buf, NULL, got);
}

void ptc_view_close(ptc_view_file *f)
{
    if (!f)
        return;
    node_fini(&f->h);
    ptc_free(f);
}

int ptc_view_lookup(ptc_view *v, const char *path, ptc_view_stat *st)
{
    ptc_view_node n;
    PTC_TRY(ptc_view_parse(path, &n));
    if (n.kind != PTC_VIEW_STEP)
        return view_resolve(v, path, &n, st, NULL, NULL, NULL);
    ptc_view_handle h;
    PTC_TRY(node_init(v, path, true, &h));
    ptc_view_node_stat(&h, st);
    count_empty(&h, path);
    node_fini(&h);
    return PTC_OK;
}

int ptc_view_pread(ptc_view *v, const char *path, uint64_t off, void *buf, size_t len,
                   size_t *got)
{
    *got = 0;
    ptc_view_handle h;
    PTC_TRY(node_init(v, path, true, &h));
    int rc = node_read(&h, off, len, buf, NULL, got);
    node_fini(&h);
    return rc;
}

int ptc_view_pread_segs(ptc_view *v, const char *path, uint64_t off, size_t len,
                        void *scratch, ptc_view_seg *segs, size_t *nseg, size_t *got)
{
    PTC_TRY(segs_room(nseg, got));
    size_t room = *nseg;
    *nseg = 0;
    ptc_view_handle h;
    PTC_TRY(node_init(v, path, true, &h));
    *nseg = room;
    int rc = node_read_segs(&h, off, len, scratch, segs, nseg, got);
    node_fini(&h);
    return rc;
}
