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

#define VIEW_CACHE 64
#define VIEW_LIST_MAX 1024

static const char view_readme[] =
    "PTC mount: the model and dataset state of a PTC store, computed on read.\n"
    "\n"
    "models/<V>/info.json                       version V: step, config, tensors\n"
    "models/<V>/model.safetensors               the whole model, assembled on read\n"
    "models/<V>/<CFG>/rank-<R>.safetensors      rank R's shards for any CFG,\n"
    "                                           written dp2-tp4-pp1[-zero1]\n"
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
    uint64_t seed, epoch, batch, start, dp, rank, step;
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

struct ptc_view_file {
    ptc_view *v;
    ptc_view_kind kind;
    uint64_t size;
    const struct view_ds *ds;
    struct plan_ref *plan;
    uint64_t id, seed, epoch;
    char *text;
    void *fh;
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

static bool cache_match(const struct cache_entry *e, const struct view_ds *ds,
                        const ptc_view_node *n)
{
    return e->plan && e->ds == ds && e->seed == n->seed && e->epoch == n->epoch &&
           e->batch == n->batch && e->start == n->start && e->dp == n->dp &&
           e->rank == n->rank && e->step == n->step;
}

/* The plan of a step node, shared through a small LRU cache (getattr,
 * open and the .idx of one step all need the same plan). */
static int view_plan(ptc_view *v, const struct view_ds *ds, const ptc_view_node *n,
                     struct plan_ref **out)
{
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < VIEW_CACHE; i++) {
        if (cache_match(&v->cache[i], ds, n)) {
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
    int rc = ptc_view_step_plan(&ds->ds, n->seed, n->epoch, n->batch, n->start, n->dp,
                                n->rank, n->step, &p->step);
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
    e->seed = n->seed;
    e->epoch = n->epoch;
    e->batch = n->batch;
    e->start = n->start;
    e->dp = n->dp;
    e->rank = n->rank;
    e->step = n->step;
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
    case PTC_VIEW_RANK:
        return n->start <= d->ds.n ? PTC_OK : ptc_view_not_found(path);
    case PTC_VIEW_STEP:
    case PTC_VIEW_STEP_IDX: {
        struct plan_ref *p;
        int rc = view_plan(v, d, n, &p);
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
    case PTC_VIEW_DP:
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

static void count_served(ptc_view_file *f, uint64_t a, uint64_t b)
{
    const ptc_view_step *s = f->plan->step;
    if (!f->v->ops.served || s->n == 0)
        return;
    uint64_t first, end;
    ptc_view_step_served(s, a, b, &first, &end);
    for (uint64_t i = first; i < end; i++)
        f->v->ops.served(f->v->user, f->ds->name, f->ds->ds.generation, f->seed, f->epoch,
                         s->ids[i]);
}

/* Resolve @p path into the caller's @p f (heap or stack): what a read
 * needs, without the counting of an empty step file. */
static int file_init(ptc_view *v, const char *path, ptc_view_file *f, ptc_view_node *n)
{
    ptc_view_stat st;
    memset(f, 0, sizeof *f);
    PTC_TRY(ptc_view_parse(path, n));
    f->v = v;
    f->kind = n->kind;
    f->id = n->id;
    f->seed = n->seed;
    f->epoch = n->epoch;
    int rc = view_resolve(v, path, n, &st, &f->ds, &f->plan, &f->text);
    if (rc < 0)
        goto out_release;
    if (st.is_dir) {
        rc = ptc_error_set(PTC_E_INVAL, "%s is a directory", path);
        goto out_release;
    }
    f->size = st.size;
    if (n->kind == PTC_VIEW_MODEL_INFO || n->kind == PTC_VIEW_MODEL_FULL ||
        n->kind == PTC_VIEW_MODEL_RANK) {
        rc = v->ops.model_open ? v->ops.model_open(v->user, n, &f->fh)
                               : ptc_error_set(PTC_E_UNSUPPORTED, "models are not served here");
        if (rc < 0)
            goto out_release;
    }
    return PTC_OK;
out_release:
    plan_unref(f->plan);
    ptc_free(f->text);
    f->plan = NULL;
    f->text = NULL;
    return rc;
}

static void file_fini(ptc_view_file *f)
{
    if (f->fh && f->v->ops.model_close)
        f->v->ops.model_close(f->v->user, f->fh);
    plan_unref(f->plan);
    ptc_free(f->text);
}

static bool hash_empty_slot(XXH128_hash_t h)
{
    return h.low64 == 0 && h.high64 == 0;
}

/* Insert into the set of counted empty step files; false if it was there. */
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
 * time the file is opened or (without opens) looked up in this view —
 * once, however often the kernel looks it up again. */
static void count_empty(ptc_view *v, const ptc_view_file *f, const char *path)
{
    if (f->kind != PTC_VIEW_STEP || f->size != 0 || !v->ops.served || f->plan->step->n == 0)
        return;
    if (!empty_first(v, XXH3_128bits_withSeed(path, strlen(path), f->ds->ds.generation)))
        return;
    for (uint64_t i = 0; i < f->plan->step->n; i++)
        v->ops.served(v->user, f->ds->name, f->ds->ds.generation, f->seed, f->epoch,
                      f->plan->step->ids[i]);
}

int ptc_view_open(ptc_view *v, const char *path, ptc_view_file **out)
{
    *out = NULL;
    ptc_view_file *f = ptc_malloc(sizeof *f);
    if (!f)
        return PTC_E_NOMEM;
    ptc_view_node n;
    int rc = file_init(v, path, f, &n);
    if (rc < 0) {
        ptc_free(f);
        return rc;
    }
    count_empty(v, f, path);
    *out = f;
    return PTC_OK;
}

int ptc_view_lookup(ptc_view *v, const char *path, ptc_view_stat *st)
{
    ptc_view_node n;
    PTC_TRY(ptc_view_parse(path, &n));
    if (n.kind != PTC_VIEW_STEP)
        return view_resolve(v, path, &n, st, NULL, NULL, NULL);
    ptc_view_file f;
    PTC_TRY(file_init(v, path, &f, &n));
    st->is_dir = false;
    st->size = f.size;
    count_empty(v, &f, path);
    file_fini(&f);
    return PTC_OK;
}

int ptc_view_pread(ptc_view *v, const char *path, uint64_t off, void *buf, size_t len,
                   size_t *got)
{
    *got = 0;
    ptc_view_file f;
    ptc_view_node n;
    PTC_TRY(file_init(v, path, &f, &n));
    int rc = ptc_view_read(&f, off, buf, len, got);
    file_fini(&f);
    return rc;
}

uint64_t ptc_view_file_size(const ptc_view_file *f)
{
    return f->size;
}

static void read_text(const char *text, uint64_t size, uint64_t off, void *buf, size_t len,
                      size_t *got)
{
    size_t n = off >= size ? 0 : (size_t)PTC_MIN((uint64_t)len, size - off);
    memcpy(buf, text + off, n);
    *got = n;
}

static int prefetch_piece(void *ctx, uint64_t id, uint64_t in, size_t n, uint64_t pos)
{
    const ptc_view_dataset *ds = ctx;
    (void)pos;
    ds->record_prefetch(ds->user, id, in, n);
    return PTC_OK;
}

/* Tell the dataset which record pieces bytes [off, end) of a step file
 * are about to read, so it can load them all at once. */
static void prefetch_step(const ptc_view_file *f, uint64_t off, uint64_t end)
{
    const ptc_view_dataset *ds = &f->ds->ds;
    if (ds->record_prefetch)
        ptc_view_step_pieces(f->plan->step, off, end, prefetch_piece, (void *)ds);
}

struct step_copy {
    const ptc_view_dataset *ds;
    uint8_t *buf; /* file offset off goes here */
    uint64_t off;
};

static int copy_piece(void *ctx, uint64_t id, uint64_t in, size_t n, uint64_t pos)
{
    struct step_copy *c = ctx;
    return c->ds->record_read(c->ds->user, id, in, c->buf + (pos - c->off), n);
}

static int read_step(ptc_view_file *f, uint64_t off, uint8_t *buf, uint64_t end)
{
    struct step_copy c = {&f->ds->ds, buf, off};
    prefetch_step(f, off, end);
    return ptc_view_step_pieces(f->plan->step, off, end, copy_piece, &c);
}

int ptc_view_read(ptc_view_file *f, uint64_t off, void *buf, size_t len, size_t *got)
{
    *got = 0;
    if (f->kind == PTC_VIEW_MODEL_INFO || f->kind == PTC_VIEW_MODEL_FULL ||
        f->kind == PTC_VIEW_MODEL_RANK)
        return f->v->ops.model_read
                   ? f->v->ops.model_read(f->v->user, f->fh, off, buf, len, got)
                   : ptc_error_set(PTC_E_UNSUPPORTED, "models are not served here");
    if (off >= f->size || len == 0)
        return PTC_OK;
    uint64_t end = off + PTC_MIN((uint64_t)len, f->size - off);
    switch (f->kind) {
    case PTC_VIEW_README:
        read_text(view_readme, f->size, off, buf, len, got);
        return PTC_OK;
    case PTC_VIEW_DATASET_INFO:
        read_text(f->text, f->size, off, buf, len, got);
        return PTC_OK;
    case PTC_VIEW_SAMPLE:
        PTC_TRY(f->ds->ds.record_read(f->ds->ds.user, f->id, off, buf, (size_t)(end - off)));
        *got = (size_t)(end - off);
        return PTC_OK;
    case PTC_VIEW_STEP_IDX:
        ptc_view_step_idx_read(f->plan->step, off, buf, len, got);
        return PTC_OK;
    case PTC_VIEW_STEP:
        PTC_TRY(read_step(f, off, buf, end));
        count_served(f, off, end);
        *got = (size_t)(end - off);
        return PTC_OK;
    default:
        return ptc_error_set(PTC_E_INVAL, "not a file");
    }
}

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

/* Bytes [pos, pos + n) of the file, record @p id from @p in: in place when
 * the dataset holds them so and a slot is left, else copied to @p dst. */
static int seg_record(struct seg_list *g, const ptc_view_dataset *ds, uint64_t id, uint64_t in,
                      size_t n, uint8_t *dst)
{
    if (ds->record_map && g->n + 1 < g->cap) {
        const void *p;
        PTC_TRY(ds->record_map(ds->user, id, in, n, &p));
        if (p) {
            seg_add(g, p, n);
            return PTC_OK;
        }
    }
    PTC_TRY(ds->record_read(ds->user, id, in, dst, n));
    seg_add(g, dst, n);
    return PTC_OK;
}

struct step_segs {
    struct seg_list *g;
    const ptc_view_dataset *ds;
    uint8_t *buf; /* file offset off goes here when copied */
    uint64_t off;
};

static int seg_piece(void *ctx, uint64_t id, uint64_t in, size_t n, uint64_t pos)
{
    struct step_segs *c = ctx;
    return seg_record(c->g, c->ds, id, in, n, c->buf + (pos - c->off));
}

int ptc_view_pread_segs(ptc_view *v, const char *path, uint64_t off, size_t len,
                        void *scratch, ptc_view_seg *segs, size_t *nseg, size_t *got)
{
    *got = 0;
    if (*nseg < 2)
        return ptc_error_set(PTC_E_INVAL, "a segmented read needs room for 2 pieces");
    struct seg_list g = {segs, 0, *nseg};
    *nseg = 0;
    ptc_view_file f;
    ptc_view_node n;
    PTC_TRY(file_init(v, path, &f, &n));
    int rc = PTC_OK;
    uint8_t *buf = scratch;
    if ((f.kind != PTC_VIEW_SAMPLE && f.kind != PTC_VIEW_STEP) || !f.ds->ds.record_map) {
        rc = ptc_view_read(&f, off, scratch, len, got);
        if (rc == PTC_OK && *got)
            seg_add(&g, scratch, *got);
        goto out;
    }
    if (off >= f.size || len == 0)
        goto out;
    uint64_t end = off + PTC_MIN((uint64_t)len, f.size - off);
    if (f.kind == PTC_VIEW_SAMPLE) {
        rc = seg_record(&g, &f.ds->ds, f.id, off, (size_t)(end - off), buf);
    } else {
        struct step_segs c = {&g, &f.ds->ds, buf, off};
        prefetch_step(&f, off, end);
        rc = ptc_view_step_pieces(f.plan->step, off, end, seg_piece, &c);
        if (rc == PTC_OK)
            count_served(&f, off, end);
    }
    if (rc == PTC_OK)
        *got = (size_t)(end - off);
out:
    if (rc == PTC_OK)
        *nseg = g.n;
    file_fini(&f);
    return rc;
}

void ptc_view_close(ptc_view_file *f)
{
    if (!f)
        return;
    file_fini(f);
    ptc_free(f);
}
