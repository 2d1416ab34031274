/* The view backed by a store: datasets read through the store's block
 * engine (ptc_store_dataset_*), models through virtual safetensors files
 * (ptc_vfile), served-record counts into the store's count map. Readers,
 * layouts and vfiles are cached (bounded LRU) so repeated stats and reads
 * do not rebuild headers.
 *
 * A version's reader holds its pack files open (a version deleted and
 * collected meanwhile stays readable through it), so the readers kept are
 * bounded: beyond the versions a read is in progress on, at most VS_READERS
 * versions holding at most a quarter of the process's open-file limit in
 * pack files (least recently used go first). A model file whose version is
 * let go keeps its size and name and opens the version again at its next
 * read, so the kernel may keep its node as long as it likes. A version
 * deleted from the store is let go at the next flush (the mount's tick):
 * its files that no one holds go at once, and a file someone still holds
 * keeps the version until it is released, so that reader reads the bytes it
 * opened to the end. (A version both let go for the bound while a process
 * holds its file, and then deleted and collected, cannot be read again:
 * that read fails.) */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ptc/dataset.h"
#include "ptc/vfile.h"
#include "ptc/store.h"
#include "base/util_internal.h"
#include "ptc/view.h"

#define VS_VFILES_DEFAULT 64
#define VS_LAYOUTS 16
#define VS_READERS 8 /* versions kept open that no open file uses (docs/cli.md) */
#define VS_KEY_MAX (PTC_VIEW_NAME_MAX + 1)

/* An open version. refs: the files whose vfile reads it and the calls
 * between get_reader and put_reader; under vs->lock. kept: in the table
 * (found by new users); one that is not closes at its last reference. */
struct vs_reader {
    uint64_t version;
    ptc_store_reader *r;
    size_t packs; /* pack files it holds open */
    long refs;
    uint64_t used;
    bool kept;
};

/* A model file: info.json text or a vfile, refcounted (the cache, each
 * open). Under vs->lock: refs, busy, vf/rd (set together; NULL while the
 * version is let go: the next read opens it again). */
struct vs_file {
    struct vs_file *next, *prev; /* every live file (vs->all) */
    long refs;
    int busy;             /* reads in progress */
    struct vs_reader *rd; /* the version its vfile reads (a reference) */
    ptc_vfile *vf;
    ptc_view_node node;   /* what it is (to build it again) */
    char cfg[VS_KEY_MAX];
    uint64_t used;
    char *text;
    uint64_t size;
};

struct vs_layout {
    uint64_t version;
    char cfg[VS_KEY_MAX];
    ptc_layout *l; /* NULL: the config does not fit the version */
    int rc;
    uint64_t used;
};

struct vs_dataset {
    ptc_store_dataset *d;
    char *info;
};

struct ptc_view_store {
    ptc_view *view;
    char *dir;
    ptc_store *store;
    bool own_store;
    ptc_dataset_counter *counter;
    ptc_store_block_cache *blocks; /* decoded blocks of every compressed dataset */
    pthread_mutex_t lock;
    struct vs_reader **readers;
    size_t nreaders, rcap;
    struct vs_layout layouts[VS_LAYOUTS];
    struct vs_file **files;
    size_t nfiles, fcap;
    struct vs_file *all; /* every live file, cached or not */
    uint64_t tick;
    int (*source)(void *user, ptc_store *store, uint64_t version, ptc_store **from,
                  uint64_t *as);
    void *source_user;
    pthread_mutex_t source_lock; /* one version's source asked at a time */
};

static int not_attached(void)
{
    return ptc_error_set(PTC_E_INVAL, "the view's store is not open yet");
}

/* ---- datasets -------------------------------------------------------------------------- */

static int ds_size(void *user, uint64_t id, uint64_t *size)
{
    return ptc_store_dataset_record_size(((struct vs_dataset *)user)->d, id, size);
}

static int ds_read(void *user, uint64_t id, uint64_t off, void *buf, size_t len)
{
    return ptc_store_dataset_record_read(((struct vs_dataset *)user)->d, id, off, buf, len);
}

static void ds_prefetch(void *user, uint64_t id, uint64_t off, size_t len)
{
    ptc_store_dataset_record_prefetch(((struct vs_dataset *)user)->d, id, off, len);
}

static void ds_prefetch_later(void *user, uint64_t id, uint64_t off, size_t len)
{
    ptc_store_dataset_record_prefetch_later(((struct vs_dataset *)user)->d, id, off, len);
}

static int ds_map(void *user, uint64_t id, uint64_t off, size_t len, const void **ptr)
{
    return ptc_store_dataset_record_map(((struct vs_dataset *)user)->d, id, off, len, ptr);
}

static int ds_open(void *user, const char *name, ptc_view_dataset *ds)
{
    ptc_view_store *vs = user;
    if (!vs->store)
        return not_attached();
    struct vs_dataset *w = ptc_calloc(1, sizeof *w);
    if (!w)
        return PTC_E_NOMEM;
    int rc = ptc_store_dataset_open(&w->d, vs->store, name);
    if (rc < 0) {
        ptc_free(w);
        return rc;
    }
    ptc_store_dataset_set_cache(w->d, vs->blocks);
    const ptc_store_dataset_info *i = ptc_store_dataset_get_info(w->d);
    json_t *j = json_pack("{s:s, s:I, s:I, s:s, s:s, s:I}", "name", i->name, "samples",
                          (json_int_t)i->samples, "bytes", (json_int_t)i->bytes, "format",
                          i->format, "codec", i->codec ? "zstd" : "none", "created_unix_ns",
                          (json_int_t)i->created_unix_ns);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (s) {
        size_t l = strlen(s);
        w->info = ptc_malloc(l + 2);
        if (w->info) {
            memcpy(w->info, s, l);
            memcpy(w->info + l, "\n", 2);
        }
        free(s);
    }
    if (!w->info) {
        ptc_store_dataset_close(w->d);
        ptc_free(w);
        return ptc_error_set(PTC_E_NOMEM, "out of memory formatting info.json");
    }
    memset(ds, 0, sizeof *ds);
    ds->n = i->samples;
    ds->generation = i->id;
    ds->info_json = w->info;
    ds->user = w;
    ds->record_size = ds_size;
    ds->record_read = ds_read;
    ds->record_map = ds_map;
    ds->record_prefetch = ds_prefetch;
    /* only blocks that must be decoded gain from the next steps' hints */
    if (i->codec != PTC_STORE_CODEC_NONE && vs->blocks)
        ds->record_prefetch_later = ds_prefetch_later;
    return PTC_OK;
}

static void ds_close(void *user, ptc_view_dataset *ds)
{
    (void)user;
    struct vs_dataset *w = ds->user;
    if (!w)
        return;
    ptc_store_dataset_close(w->d);
    ptc_free(w->info);
    ptc_free(w);
}

static int ds_list(void *user, ptc_view_emit_fn emit, void *ctx)
{
    ptc_view_store *vs = user;
    if (!vs->store)
        return not_attached();
    ptc_store_dataset_info *v;
    size_t n;
    PTC_TRY(ptc_store_datasets(vs->store, &v, &n));
    for (size_t i = 0; i < n; i++)
        if (emit(ctx, v[i].name, true))
            break;
    ptc_store_free(v);
    return PTC_OK;
}

static void ds_served(void *user, const char *name, uint64_t gen, uint64_t seed, uint64_t epoch,
                      uint64_t id)
{
    ptc_view_store *vs = user;
    if (vs->counter && ptc_dataset_counter_add(vs->counter, name, gen, seed, epoch, id) < 0)
        ptc_log(PTC_LOG_WARN, "cannot count a served record of %s: %s", name, ptc_last_error());
}

/* ---- models --------------------------------------------------------------------------- */

static void file_unref_locked(ptc_view_store *vs, struct vs_file *f);

static struct vs_reader *find_reader_locked(ptc_view_store *vs, uint64_t v, size_t *at)
{
    for (size_t i = 0; i < vs->nreaders; i++)
        if (vs->readers[i]->version == v) {
            if (at)
                *at = i;
            return vs->readers[i];
        }
    return NULL;
}

/* Drop a reference; the last one of a reader no longer kept closes it. */
static void reader_unref_locked(ptc_view_store *vs, struct vs_reader *rd)
{
    (void)vs;
    if (--rd->refs > 0 || rd->kept)
        return;
    ptc_store_reader_close(rd->r);
    ptc_free(rd);
}

/* Stop keeping version @p rd: out of the table, its layouts dropped. A
 * version that still exists (@p reopenable) lets go of every file of it no
 * read is in progress on (they open it again when read); a deleted one lets
 * go of its files no one holds, and stays open for the others. */
static void drop_locked(ptc_view_store *vs, struct vs_reader *rd, bool reopenable)
{
    size_t at;
    if (find_reader_locked(vs, rd->version, &at) == rd)
        vs->readers[at] = vs->readers[--vs->nreaders];
    for (int i = 0; i < VS_LAYOUTS; i++)
        if (vs->layouts[i].version == rd->version) {
            ptc_layout_destroy(vs->layouts[i].l);
            memset(&vs->layouts[i], 0, sizeof vs->layouts[i]);
        }
    rd->refs++; /* held while its files go */
    rd->kept = false;
    for (size_t i = 0; i < vs->nfiles;) {
        struct vs_file *f = vs->files[i];
        if (!reopenable && f->rd == rd && f->refs == 1) {
            vs->files[i] = vs->files[--vs->nfiles];
            file_unref_locked(vs, f);
        } else {
            i++;
        }
    }
    for (struct vs_file *f = vs->all; reopenable && f; f = f->next)
        if (f->rd == rd && f->busy == 0) {
            ptc_vfile_destroy(f->vf);
            f->vf = NULL;
            f->rd = NULL;
            reader_unref_locked(vs, rd);
        }
    reader_unref_locked(vs, rd);
}

/* The pack files @p r holds open: the distinct files its data records
 * point to (ptc_store_reader_open opens them all). */
static size_t reader_packs(const ptc_store_reader *r)
{
    struct pk {
        uint64_t v;
        uint32_t rank;
    } *seen = NULL;
    size_t n = 0, cap = 0;
    for (size_t t = 0; t < ptc_store_reader_tensor_count(r); t++) {
        ptc_store_tensor ti;
        if (ptc_store_reader_tensor(r, t, &ti) != PTC_OK)
            break;
        for (size_t i = 0; i < ti.nshards; i++) {
            ptc_shard_info sh;
            if (ptc_store_reader_shard_at(r, t, i, &sh) != PTC_OK || sh.alias || !sh.length)
                continue;
            bool dup = false;
            for (size_t k = 0; k < n && !dup; k++)
                dup = seen[k].v == sh.pack_version && seen[k].rank == sh.pack_rank;
            if (dup)
                continue;
            if (ptc_grow((void **)&seen, &cap, n + 1, sizeof *seen) != PTC_OK)
                break;
            seen[n++] = (struct pk){sh.pack_version, sh.pack_rank};
        }
    }
    ptc_free(seen);
    return n;
}

/* The pack files idle versions may hold: a quarter of the open-file limit. */
static size_t pack_budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 1024;
    return PTC_MAX((size_t)rl.rlim_cur / 4, 4);
}

/* Versions kept beyond those a read is in progress on: at most VS_READERS,
 * holding at most pack_budget() pack files; the least recently used idle
 * one is let go first. */
static void trim_readers_locked(ptc_view_store *vs)
{
    size_t budget = pack_budget();
    for (;;) {
        size_t idle = 0, packs = 0;
        struct vs_reader *victim = NULL;
        for (size_t i = 0; i < vs->nreaders; i++) {
            struct vs_reader *rd = vs->readers[i];
            long quiet = 0; /* its files' references with no read in progress */
            for (struct vs_file *f = vs->all; f; f = f->next)
                quiet += f->rd == rd && f->busy == 0;
            if (rd->refs != quiet)
                continue; /* in use */
            idle++;
            packs += rd->packs;
            if (!victim || rd->used < victim->used)
                victim = rd;
        }
        if ((idle <= VS_READERS && packs <= budget) || !victim)
            return;
        drop_locked(vs, victim, true);
    }
}

/* Version @p v's reader, referenced (release with put_reader). */
static int get_reader(ptc_view_store *vs, uint64_t v, struct vs_reader **out)
{
    if (!vs->store)
        return not_attached();
    pthread_mutex_lock(&vs->lock);
    struct vs_reader *rd = find_reader_locked(vs, v, NULL);
    if (rd) {
        rd->refs++;
        rd->used = ++vs->tick;
    }
    pthread_mutex_unlock(&vs->lock);
    if (rd) {
        *out = rd;
        return PTC_OK;
    }
    ptc_store_reader *r;
    if (vs->source) { /* the version is read from elsewhere */
        ptc_store *from = NULL;
        uint64_t as = 0;
        pthread_mutex_lock(&vs->source_lock);
        int src = vs->source(vs->source_user, vs->store, v, &from, &as);
        pthread_mutex_unlock(&vs->source_lock);
        PTC_TRY(src);
        PTC_TRY(ptc_store_reader_open(&r, from, as));
    } else {
        PTC_TRY(ptc_store_reader_open(&r, vs->store, v));
    }
    rd = ptc_calloc(1, sizeof *rd);
    if (!rd) {
        ptc_store_reader_close(r);
        return PTC_E_NOMEM;
    }
    *rd = (struct vs_reader){.version = v, .r = r, .packs = reader_packs(r), .refs = 1};
    pthread_mutex_lock(&vs->lock);
    struct vs_reader *first = find_reader_locked(vs, v, NULL);
    int rc = PTC_OK;
    if (first) { /* another thread was first */
        first->refs++;
        first->used = ++vs->tick;
    } else if ((rc = ptc_grow((void **)&vs->readers, &vs->rcap, vs->nreaders + 1,
                              sizeof *vs->readers)) == PTC_OK) {
        rd->used = ++vs->tick;
        rd->kept = true;
        vs->readers[vs->nreaders++] = rd;
        trim_readers_locked(vs);
    }
    pthread_mutex_unlock(&vs->lock);
    if (first || rc < 0) {
        ptc_store_reader_close(r);
        ptc_free(rd);
        if (rc < 0)
            return rc;
        rd = first;
    }
    *out = rd;
    return PTC_OK;
}

static void put_reader(ptc_view_store *vs, struct vs_reader *rd)
{
    pthread_mutex_lock(&vs->lock);
    reader_unref_locked(vs, rd);
    pthread_mutex_unlock(&vs->lock);
}

/* Let go of the versions deleted from the store since they were opened,
 * and of idle versions beyond the bound. */
static int sweep_deleted(ptc_view_store *vs)
{
    if (!vs->store)
        return PTC_OK;
    pthread_mutex_lock(&vs->lock);
    size_t n = vs->nreaders;
    pthread_mutex_unlock(&vs->lock);
    if (n == 0)
        return PTC_OK;
    ptc_version_info *v;
    size_t nv;
    PTC_TRY(ptc_store_versions(vs->store, &v, &nv));
    pthread_mutex_lock(&vs->lock);
    for (size_t i = 0; i < vs->nreaders;) {
        struct vs_reader *rd = vs->readers[i];
        bool live = false;
        for (size_t k = 0; k < nv && !live; k++)
            live = v[k].version == rd->version;
        if (live)
            i++;
        else
            drop_locked(vs, rd, false); /* out of the table: the same i again */
    }
    trim_readers_locked(vs); /* reads ended since: back within the bound */
    pthread_mutex_unlock(&vs->lock);
    ptc_store_versions_free(v, nv);
    return PTC_OK;
}

/* The layout of (@p v, @p cfg); built once per cache slot. The caller holds
 * vs->lock and uses the layout only while holding it. */
static int get_layout_locked(ptc_view_store *vs, ptc_store_reader *r, uint64_t v,
                             const ptc_config *cfg, const char *key, const ptc_layout **out)
{
    struct vs_layout *victim = &vs->layouts[0];
    for (int i = 0; i < VS_LAYOUTS; i++) {
        struct vs_layout *e = &vs->layouts[i];
        if (e->version == v && strcmp(e->cfg, key) == 0) {
            e->used = ++vs->tick;
            *out = e->l;
            return e->l ? PTC_OK
                        : ptc_error_set(e->rc, "configuration %s does not fit version %llu", key,
                                        (unsigned long long)v);
        }
        if (e->used < victim->used)
            victim = e;
    }
    ptc_layout *l = NULL;
    int rc = ptc_layout_of_version(&l, r, cfg);
    if (rc == PTC_E_NOMEM)
        return rc;
    ptc_layout_destroy(victim->l);
    victim->version = v;
    snprintf(victim->cfg, sizeof victim->cfg, "%s", key);
    victim->l = rc == PTC_OK ? l : NULL;
    victim->rc = rc == PTC_OK ? PTC_OK : PTC_E_NOTFOUND;
    victim->used = ++vs->tick;
    *out = victim->l;
    return rc == PTC_OK ? PTC_OK : PTC_E_NOTFOUND; /* a CFG that does not fit: no such dir */
}

/* info.json of version @p v read through @p r: a version read from
 * elsewhere (vs->source) is described by its record in the view's store
 * (number, parent, time, step), its tensors by the copy read. */
static int version_info_text(ptc_view_store *vs, uint64_t v, ptc_store_reader *r, char **out,
                             uint64_t *size)
{
    const ptc_version_info *vi = ptc_store_reader_version(r);
    ptc_store_reader *own = NULL;
    if (vs->source && ptc_store_reader_open(&own, vs->store, v) == PTC_OK)
        vi = ptc_store_reader_version(own);
    json_t *tensors = json_array();
    size_t nt = ptc_store_reader_tensor_count(r);
    for (size_t i = 0; tensors && i < nt; i++) {
        ptc_store_tensor t;
        if (ptc_store_reader_tensor(r, i, &t) < 0)
            break;
        json_t *shape = json_array();
        for (int d = 0; shape && d < t.ndim; d++)
            json_array_append_new(shape, json_integer(t.shape[d]));
        json_array_append_new(tensors,
                              json_pack("{s:s%, s:s, s:o, s:s}", "name", t.name, t.name_len,
                                        "dtype", ptc_dtype_name(t.dtype), "shape", shape,
                                        "placement", t.placement));
    }
    json_t *j = json_pack("{s:I, s:I, s:I, s:s, s:s, s:I, s:I, s:o}", "version",
                          (json_int_t)vi->version, "parent", (json_int_t)vi->parent,
                          "created_unix_ns", (json_int_t)vi->created_unix_ns, "step", vi->step,
                          "config", vi->config, "tensor_count", (json_int_t)vi->tensor_count,
                          "bytes", (json_int_t)vi->bytes, "tensors", tensors);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    ptc_store_reader_close(own);
    if (!s)
        return ptc_error_set(PTC_E_NOMEM, "out of memory formatting info.json");
    size_t l = strlen(s);
    *out = ptc_malloc(l + 2);
    if (*out) {
        memcpy(*out, s, l);
        memcpy(*out + l, "\n", 2);
        *size = l + 1;
    }
    free(s);
    return *out ? PTC_OK : PTC_E_NOMEM;
}

static void file_unref_locked(ptc_view_store *vs, struct vs_file *f)
{
    if (!f || --f->refs > 0)
        return;
    if (f->prev)
        f->prev->next = f->next;
    else
        vs->all = f->next;
    if (f->next)
        f->next->prev = f->prev;
    ptc_vfile_destroy(f->vf);
    ptc_free(f->text);
    if (f->rd)
        reader_unref_locked(vs, f->rd);
    ptc_free(f);
}

static bool file_match(const struct vs_file *f, const ptc_view_node *n, const char *key)
{
    return f->node.version == n->version && f->node.kind == n->kind &&
           f->node.rank == n->rank && strcmp(f->cfg, key) == 0;
}

/* Build the vfile of @p f from the reader @p rd (referenced by the caller). */
static int file_build(ptc_view_store *vs, struct vs_file *f, struct vs_reader *rd,
                      ptc_vfile **out)
{
    *out = NULL;
    if (f->node.kind == PTC_VIEW_MODEL_FULL)
        return ptc_vfile_whole(out, rd->r, PTC_DTYPE_KEEP);
    const ptc_layout *l;
    pthread_mutex_lock(&vs->lock);
    int rc = get_layout_locked(vs, rd->r, f->node.version, &f->node.config, f->cfg, &l);
    if (rc == PTC_OK)
        rc = ptc_vfile_rank(out, rd->r, l, (int)f->node.rank, PTC_DTYPE_KEEP);
    pthread_mutex_unlock(&vs->lock);
    return rc;
}

/* The cached model file of @p n (a new reference; release with put_file). */
static int get_file(ptc_view_store *vs, const ptc_view_node *n, struct vs_file **out)
{
    char key[VS_KEY_MAX] = "";
    if (n->kind == PTC_VIEW_MODEL_RANK)
        PTC_TRY(ptc_config_format(&n->config, PTC_CONFIG_STYLE_PATH, key, sizeof key));
    pthread_mutex_lock(&vs->lock);
    for (size_t i = 0; i < vs->nfiles; i++)
        if (file_match(vs->files[i], n, key)) {
            struct vs_file *f = vs->files[i];
            f->refs++;
            f->used = ++vs->tick;
            pthread_mutex_unlock(&vs->lock);
            *out = f;
            return PTC_OK;
        }
    pthread_mutex_unlock(&vs->lock);
    struct vs_reader *rd;
    PTC_TRY(get_reader(vs, n->version, &rd));
    struct vs_file *f = ptc_calloc(1, sizeof *f);
    if (!f) {
        put_reader(vs, rd);
        return PTC_E_NOMEM;
    }
    f->refs = 1;
    f->node = *n;
    snprintf(f->cfg, sizeof f->cfg, "%s", key);
    ptc_vfile *vf = NULL;
    int rc = n->kind == PTC_VIEW_MODEL_INFO ? version_info_text(vs, n->version, rd->r, &f->text, &f->size)
                                            : file_build(vs, f, rd, &vf);
    pthread_mutex_lock(&vs->lock);
    f->next = vs->all;
    if (vs->all)
        vs->all->prev = f;
    vs->all = f;
    if (vf) {
        f->vf = vf;
        f->rd = rd; /* the reference get_reader took */
        f->size = ptc_vfile_size(vf);
    } else {
        reader_unref_locked(vs, rd); /* info.json needs no reader once made */
    }
    if (rc < 0) {
        file_unref_locked(vs, f);
        pthread_mutex_unlock(&vs->lock);
        return rc;
    }
    f->used = ++vs->tick;
    if (vs->nfiles == vs->fcap) { /* the configured bound */
        size_t victim = 0;
        for (size_t i = 1; i < vs->nfiles; i++)
            if (vs->files[i]->used < vs->files[victim]->used)
                victim = i;
        struct vs_file *old = vs->files[victim];
        vs->files[victim] = vs->files[--vs->nfiles];
        file_unref_locked(vs, old);
    }
    f->refs++; /* the cache's reference */
    vs->files[vs->nfiles++] = f;
    pthread_mutex_unlock(&vs->lock);
    *out = f;
    return PTC_OK;
}

static void put_file(ptc_view_store *vs, struct vs_file *f)
{
    pthread_mutex_lock(&vs->lock);
    if (f->rd && !f->rd->kept && f->refs == 2) {
        /* the last holder of a file of a version let go: out of the cache */
        for (size_t i = 0; i < vs->nfiles; i++)
            if (vs->files[i] == f) {
                vs->files[i] = vs->files[--vs->nfiles];
                file_unref_locked(vs, f);
                break;
            }
    }
    file_unref_locked(vs, f);
    pthread_mutex_unlock(&vs->lock);
}

static int model_stat(void *user, const ptc_view_node *n, uint64_t *size)
{
    ptc_view_store *vs = user;
    *size = 0;
    struct vs_reader *rd;
    int rc = get_reader(vs, n->version, &rd);
    if (rc < 0)
        return rc;
    if (n->kind == PTC_VIEW_MODEL_CFG) {
        char key[VS_KEY_MAX];
        const ptc_layout *l;
        if ((rc = ptc_config_format(&n->config, PTC_CONFIG_STYLE_PATH, key, sizeof key)) ==
            PTC_OK) {
            pthread_mutex_lock(&vs->lock);
            rc = get_layout_locked(vs, rd->r, n->version, &n->config, key, &l);
            pthread_mutex_unlock(&vs->lock);
        }
    } else if (n->kind != PTC_VIEW_MODEL) {
        struct vs_file *f;
        if ((rc = get_file(vs, n, &f)) == PTC_OK) {
            *size = f->size;
            put_file(vs, f);
        }
    }
    put_reader(vs, rd);
    return rc;
}

static int model_open(void *user, const ptc_view_node *n, void **fh)
{
    struct vs_file *f;
    PTC_TRY(get_file(user, n, &f));
    *fh = f;
    return PTC_OK;
}

static int model_read(void *user, void *fh, uint64_t off, void *buf, size_t len, size_t *got)
{
    ptc_view_store *vs = user;
    struct vs_file *f = fh;
    if (f->text) {
        size_t n = off >= f->size ? 0 : (size_t)PTC_MIN((uint64_t)len, f->size - off);
        memcpy(buf, f->text + off, n);
        *got = n;
        return PTC_OK;
    }
    pthread_mutex_lock(&vs->lock);
    f->busy++; /* its version stays open until the read ends */
    ptc_vfile *vf = f->vf;
    pthread_mutex_unlock(&vs->lock);
    int rc = PTC_OK;
    if (!vf) { /* its version was let go: open it again */
        struct vs_reader *rd;
        ptc_vfile *nvf = NULL;
        if ((rc = get_reader(vs, f->node.version, &rd)) == PTC_OK &&
            (rc = file_build(vs, f, rd, &nvf)) == PTC_OK && ptc_vfile_size(nvf) != f->size)
            rc = ptc_error_set(PTC_E_STORE, "version %llu changed size while mounted",
                               (unsigned long long)f->node.version);
        pthread_mutex_lock(&vs->lock);
        if (rc == PTC_OK && !f->vf) {
            f->vf = nvf;
            f->rd = rd;
            nvf = NULL;
            rd = NULL;
        }
        vf = f->vf;
        if (rd)
            reader_unref_locked(vs, rd);
        pthread_mutex_unlock(&vs->lock);
        ptc_vfile_destroy(nvf);
    }
    if (rc == PTC_OK)
        rc = ptc_vfile_read(vf, buf, off, len, got);
    pthread_mutex_lock(&vs->lock);
    f->busy--;
    pthread_mutex_unlock(&vs->lock);
    return rc;
}

static void model_close(void *user, void *fh)
{
    put_file(user, fh);
}

static int model_list(void *user, ptc_view_emit_fn emit, void *ctx)
{
    ptc_view_store *vs = user;
    if (!vs->store)
        return not_attached();
    ptc_version_info *v;
    size_t n;
    PTC_TRY(ptc_store_versions(vs->store, &v, &n));
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "%llu", (unsigned long long)v[i].version);
        if (emit(ctx, name, true))
            break;
    }
    ptc_store_versions_free(v, n);
    return PTC_OK;
}

/* ---- the object -------------------------------------------------------------------------- */

int ptc_view_store_create(ptc_view_store **out, const char *store_dir,
                          const ptc_view_store_options *opts)
{
    *out = NULL;
    ptc_view_store *vs = ptc_calloc(1, sizeof *vs);
    if (!vs)
        return PTC_E_NOMEM;
    pthread_mutex_init(&vs->lock, NULL);
    pthread_mutex_init(&vs->source_lock, NULL);
    if (opts) {
        vs->source = opts->source;
        vs->source_user = opts->source_user;
    }
    vs->fcap = opts && opts->vfile_cache ? opts->vfile_cache : VS_VFILES_DEFAULT;
    vs->files = ptc_calloc(vs->fcap, sizeof *vs->files);
    vs->dir = store_dir ? ptc_strdup(store_dir) : NULL;
    uint64_t cache = opts && opts->block_cache ? opts->block_cache : PTC_STORE_BLOCK_CACHE_DEFAULT;
    if (ptc_store_block_cache_create(&vs->blocks, cache) < 0) {
        ptc_view_store_destroy(vs);
        return PTC_E_NOMEM;
    }
    static const ptc_view_ops ops = {
        .dataset_open = ds_open,   .dataset_close = ds_close, .dataset_list = ds_list,
        .served = ds_served,       .model_stat = model_stat,  .model_open = model_open,
        .model_read = model_read,  .model_close = model_close, .model_list = model_list,
    };
    int rc = PTC_E_NOMEM;
    if (!vs->files || (store_dir && !vs->dir) || (rc = ptc_view_create(&vs->view, &ops, vs)) < 0) {
        ptc_view_store_destroy(vs);
        return rc;
    }
    *out = vs;
    return PTC_OK;
}

ptc_view *ptc_view_store_view(ptc_view_store *vs)
{
    return vs->view;
}

int ptc_view_store_attach(ptc_view_store *vs, ptc_store *store, bool count)
{
    if (vs->store)
        return ptc_error_set(PTC_E_INVAL, "the view's store is already open");
    if (!store) {
        if (!vs->dir)
            return ptc_error_set(PTC_E_INVAL, "no store to open");
        PTC_TRY(ptc_store_open(&store, vs->dir, 0));
        vs->own_store = true;
    }
    if (count) {
        int rc = ptc_dataset_counter_create(&vs->counter, store);
        if (rc < 0) {
            if (vs->own_store)
                ptc_store_close(store);
            vs->own_store = false;
            return rc;
        }
    }
    vs->store = store;
    return PTC_OK;
}

void ptc_view_store_block_cache_stats(const ptc_view_store *vs,
                                      struct ptc_store_block_cache_stats *out)
{
    ptc_store_block_cache_get_stats(vs->blocks, out);
}

int ptc_view_store_flush(ptc_view_store *vs)
{
    /* the mount's tick: also the moment versions deleted meanwhile are let go */
    int rc = vs->counter ? ptc_dataset_counter_flush(vs->counter) : PTC_OK;
    int src = sweep_deleted(vs);
    if (src < 0)
        ptc_log(PTC_LOG_WARN, "cannot list the store's versions: %s", ptc_last_error());
    return rc;
}

void ptc_view_store_destroy(ptc_view_store *vs)
{
    if (!vs)
        return;
    ptc_view_destroy(vs->view); /* closes the datasets */
    for (size_t i = 0; vs->files && i < vs->nfiles; i++)
        file_unref_locked(vs, vs->files[i]);
    ptc_free(vs->files);
    for (int i = 0; i < VS_LAYOUTS; i++)
        ptc_layout_destroy(vs->layouts[i].l);
    /* the files held open are released by the view's destroy above */
    for (size_t i = 0; i < vs->nreaders; i++) {
        vs->readers[i]->kept = false;
        if (vs->readers[i]->refs == 0) {
            ptc_store_reader_close(vs->readers[i]->r);
            ptc_free(vs->readers[i]);
        }
    }
    ptc_free(vs->readers);
    ptc_store_block_cache_destroy(vs->blocks); /* after the datasets that use it */
    ptc_dataset_counter_destroy(vs->counter); /* flushes */
    if (vs->own_store)
        ptc_store_close(vs->store);
    ptc_free(vs->dir);
    pthread_mutex_destroy(&vs->source_lock);
    pthread_mutex_destroy(&vs->lock);
    ptc_free(vs);
}
