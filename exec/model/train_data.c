/* Where a training job's tokens come from: synthetic (from the seed), a raw
 * u16 token file, or a stored dataset read by the epoch order (DESIGN.md,
 * "Dataset view") — from the store itself or through the step files of a
 * mount. Step k of a run that started at position X of epoch E reads data-
 * parallel rank r's part of global batch k, positions [X + kB, X + (k+1)B),
 * one record per micro-batch. One process of each replica (pipeline and
 * tensor index 0) reads and counts the records and broadcasts them to the
 * replica's other processes, so every record is served once. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/model/train_internal.h"
#include "ptc/crc32c.h"
#include "ptc/dataset.h"

int train_data_kind_parse(const char *spec, enum train_data_kind *kind)
{
    if (!strcmp(spec, "synthetic"))
        *kind = DATA_SYNTHETIC;
    else if (!strncmp(spec, "tokens:", 7) && spec[7])
        *kind = DATA_TOKENS;
    else if (!strncmp(spec, "dataset:", 8) && spec[8])
        *kind = DATA_DATASET;
    else if (!strncmp(spec, "mount:", 6) && spec[6])
        *kind = DATA_MOUNT;
    else
        return ptc_error_set(PTC_E_INVAL, "--data: expected synthetic, tokens:FILE, "
                                          "dataset:NAME or mount:MNT/datasets/NAME");
    return PTC_OK;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int load_tokens(train_data *d, const char *path)
{
    char *buf = NULL;
    size_t len = 0;
    PTC_TRY(ptc_file_read(path, SIZE_MAX / 2, &buf, &len));
    if (len / 2 < (size_t)d->tokens + 1) {
        ptc_free(buf);
        return ptc_error_set(PTC_E_FORMAT, "%s: fewer than %d tokens", path, d->tokens + 1);
    }
    d->tok = (uint16_t *)buf;
    d->ntok = len / 2;
    return PTC_OK;
}

/* The record format of a dataset: u16 token windows of tokens + 1, or
 * records of bytes read by a byte-level tokenizer (each byte one token). */
static int check_format(train_data *d, const char *format)
{
    unsigned long len = 0;
    if (!strncmp(format, "tokens:u16:", 11)) {
        char *end;
        len = strtoul(format + 11, &end, 10);
        if (*end || len != (unsigned long)d->tokens + 1)
            return ptc_error_set(PTC_E_CONFIG, "dataset '%s' holds %s windows; the model "
                                               "takes tokens=%d (windows of %d)",
                                 d->name, format, d->tokens, d->tokens + 1);
        return PTC_OK;
    }
    if (!strncmp(format, "tokens:", 7))
        return ptc_error_set(PTC_E_CONFIG, "dataset '%s' is %s: only u16 token windows "
                                           "or byte records feed the demo model",
                             d->name, format);
    if (d->vocab < 256)
        return ptc_error_set(PTC_E_CONFIG, "dataset '%s' (%s) is read byte by byte: the model "
                                           "needs vocab >= 256", d->name, format);
    d->bytes = true;
    return PTC_OK;
}

/* Decoded blocks kept for a compressed dataset read by one process. */
#define TRAIN_BLOCK_CACHE ((uint64_t)64 << 20)

static int open_store_dataset(train_data *d, ptc_store *store)
{
    if (!store)
        return ptc_error_set(PTC_E_INVAL, "--data dataset:%s needs --store (the store that "
                                          "holds the dataset)", d->name);
    ptc_store_dataset_info info;
    PTC_TRY(ptc_store_dataset_stat(store, d->name, &info));
    d->samples = info.samples;
    d->gen = info.id;
    PTC_TRY(check_format(d, info.format));
    if (!d->reader)
        return PTC_OK;
    PTC_TRY(ptc_store_dataset_open(&d->ds, store, d->name));
    /* records come in epoch order, each in another block: without a cache
     * a compressed dataset decodes a whole block per record */
    if (info.codec != PTC_STORE_CODEC_NONE) {
        PTC_TRY(ptc_store_block_cache_create(&d->blocks, TRAIN_BLOCK_CACHE));
        ptc_store_dataset_set_cache(d->ds, d->blocks);
    }
    return ptc_dataset_counter_create(&d->counter, store);
}

static int open_mount(train_data *d, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (n >= sizeof d->dir - 64)
        return ptc_error_set(PTC_E_INVAL, "--data mount: path too long");
    memcpy(d->dir, dir, n);
    d->dir[n] = 0;
    const char *slash = strrchr(d->dir, '/'), *name = slash ? slash + 1 : d->dir;
    if (strlen(name) >= sizeof d->name)
        return ptc_error_set(PTC_E_INVAL, "--data mount: dataset name too long");
    memcpy(d->name, name, strlen(name) + 1);
    char path[4200], *txt = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/info.json", d->dir);
    int rc = ptc_file_read(path, 1 << 20, &txt, &len);
    if (rc == PTC_E_NOTFOUND)
        return ptc_error_set(PTC_E_NOTFOUND, "--data mount:%s: no dataset there (expected "
                                             "MNT/datasets/NAME of a ptc mount)", d->dir);
    PTC_TRY(rc);
    json_error_t je;
    json_t *j = json_loadb(txt, len, 0, &je);
    ptc_free(txt);
    json_t *samples = j ? json_object_get(j, "samples") : NULL;
    json_t *format = j ? json_object_get(j, "format") : NULL;
    rc = json_is_integer(samples) && json_is_string(format)
             ? PTC_OK
             : ptc_error_set(PTC_E_FORMAT, "%s: no samples or format", path);
    if (rc == PTC_OK) {
        d->samples = (uint64_t)json_integer_value(samples);
        rc = check_format(d, json_string_value(format));
    }
    json_decref(j);
    return rc;
}

/* With a store on each host (--replicas), every host's store holds the
 * dataset: the same records (count, bytes, format) on every process, or the
 * epoch order — a function of the count and the seed — would differ between
 * the replicas. Collective over @p world, whatever @p rc (this process's
 * opening). */
static int same_on_hosts(const train_data *d, ptc_store *store, MPI_Comm world, int rc)
{
    ptc_store_dataset_info info;
    memset(&info, 0, sizeof info);
    if (rc == PTC_OK)
        rc = ptc_store_dataset_stat(store, d->name, &info);
    uint64_t mine[4] = {(uint64_t)(int64_t)rc, info.samples, info.bytes,
                        ptc_crc32c(0, info.format, strlen(info.format))};
    int np, me;
    MPI_Comm_size(world, &np);
    MPI_Comm_rank(world, &me);
    uint64_t *all = ptc_malloc(sizeof mine * (size_t)np);
    if (!all)
        return PTC_E_NOMEM; /* the caller's agreement fails the others */
    if (ptc_mpi_allgather(mine, 4, MPI_UINT64_T, all, 4, MPI_UINT64_T, world) != MPI_SUCCESS) {
        ptc_free(all);
        return ptc_error_set(PTC_E_MPI, "MPI_Allgather of the hosts' datasets failed");
    }
    for (int p = 0; p < np && rc == PTC_OK; p++) {
        const uint64_t *q = all + 4 * (size_t)p;
        if ((int64_t)q[0] != PTC_OK)
            rc = ptc_error_set((int)(int64_t)q[0], "dataset '%s' cannot be read from the store "
                               "of process %d's host", d->name, p);
        else if (q[1] != mine[1] || q[2] != mine[2] || q[3] != mine[3])
            rc = ptc_error_set(PTC_E_CONFIG, "dataset '%s' differs between the hosts' stores: "
                               "%llu records of %llu bytes on process %d's host, %llu of %llu "
                               "on process %d's (ingest the same dataset into every host's "
                               "store)", d->name, (unsigned long long)mine[1],
                               (unsigned long long)mine[2], me, (unsigned long long)q[1],
                               (unsigned long long)q[2], p);
    }
    ptc_free(all);
    return rc;
}

int train_data_open(train_data *d, const ptc_train_opts *o, ptc_store *store, MPI_Comm world,
                    int dp_rank)
{
    memset(d, 0, sizeof *d);
    d->group = MPI_COMM_NULL;
    d->tokens = o->model.tokens;
    d->vocab = o->model.vocab;
    d->M = o->microbatches;
    d->D = o->cfg.dp;
    d->dp_rank = dp_rank;
    d->per_step = (int64_t)o->microbatches * o->cfg.dp;
    d->seed = o->data_seed;
    d->pos.epoch = o->data_epoch;
    d->pos.start = o->data_position;
    PTC_TRY(train_data_kind_parse(o->data, &d->kind));
    if (d->kind == DATA_SYNTHETIC)
        return PTC_OK;
    if (d->kind == DATA_TOKENS)
        return load_tokens(d, o->data + 7);
    int wrank;
    MPI_Comm_rank(world, &wrank);
    int pp_i, dp_i, tp_i;
    ptc_config_coords(&o->cfg, wrank, &pp_i, &dp_i, &tp_i);
    d->reader = pp_i == 0 && tp_i == 0;
    /* key = world rank: the reader (pp 0, tp 0) has the lowest in its replica */
    if (MPI_Comm_split(world, dp_i, wrank, &d->group) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_split of the data groups failed");
    d->buf = ptc_calloc((size_t)d->M * ((size_t)d->tokens + 1), sizeof *d->buf);
    if (!d->buf)
        return PTC_E_NOMEM;
    if (d->kind == DATA_DATASET) {
        snprintf(d->name, sizeof d->name, "%s", o->data + 8);
        int rc = open_store_dataset(d, store);
        if (o->replicas >= 0)
            rc = same_on_hosts(d, store, world, rc);
        PTC_TRY(rc);
    } else {
        PTC_TRY(open_mount(d, o->data + 6));
    }
    if (d->samples < (uint64_t)d->per_step)
        return ptc_error_set(PTC_E_CONFIG, "dataset '%s' has %llu records, fewer than a global "
                                           "batch of %lld", d->name,
                             (unsigned long long)d->samples, (long long)d->per_step);
    if (d->pos.start > d->samples)
        return ptc_error_set(PTC_E_RANGE, "position %llu is past the %llu records of '%s'",
                             (unsigned long long)d->pos.start, (unsigned long long)d->samples,
                             d->name);
    return PTC_OK;
}

/* Token i of a record of bytes: the byte, or 0 past its end. */
static void bytes_to_tokens(uint16_t *dst, const uint8_t *src, size_t len, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = i < len ? src[i] : 0;
}

/* The step being run: data-parallel rank r's part of global batch k. The
 * job reads full global batches only (train_data_next starts the next
 * epoch instead of a partial one), so the default rule's paths serve it. */
static ptc_dataset_step data_step(const train_data *d)
{
    return (ptc_dataset_step){.seed = d->seed, .epoch = d->step_epoch,
                              .batch = (uint64_t)d->per_step, .start = d->step_start,
                              .dp = (uint64_t)d->D, .rank = (uint64_t)d->dp_rank,
                              .step = d->step_index};
}

/* The reader of a stored dataset: the step's records, by id, into d->buf. */
static int read_store_step(train_data *d, const ptc_dataset_step *st)
{
    size_t W = (size_t)d->tokens + 1;
    uint64_t count;
    uint64_t *ids = ptc_malloc((size_t)d->M * sizeof *ids);
    uint8_t *tmp = d->bytes ? ptc_malloc(W) : NULL;
    int rc = !ids || (d->bytes && !tmp) ? PTC_E_NOMEM : PTC_OK;
    if (rc == PTC_OK)
        rc = ptc_dataset_step_ids(d->samples, st, ids, (uint64_t)d->M, &count);
    for (uint64_t i = 0; rc == PTC_OK && i < count; i++) {
        uint64_t id = ids[i], size;
        uint16_t *dst = d->buf + i * W;
        rc = ptc_store_dataset_record_size(d->ds, id, &size);
        if (rc == PTC_OK && !d->bytes && size != 2 * W)
            rc = ptc_error_set(PTC_E_FORMAT, "record %llu of '%s' has %llu bytes, not %zu",
                               (unsigned long long)id, d->name, (unsigned long long)size,
                               2 * W);
        size_t take = d->bytes ? (size < W ? (size_t)size : W) : 2 * W;
        if (rc == PTC_OK)
            rc = ptc_store_dataset_record_read(d->ds, id, 0, d->bytes ? (void *)tmp
                                                                      : (void *)dst, take);
        if (rc == PTC_OK && d->bytes)
            bytes_to_tokens(dst, tmp, take, W);
        if (rc == PTC_OK)
            rc = ptc_dataset_counter_add(d->counter, d->name, d->gen, d->seed, d->step_epoch,
                                         id);
    }
    ptc_free(tmp);
    ptc_free(ids);
    return rc;
}

/* The reader through a mount: the step file and, for byte records, its
 * index, into d->buf. */
static int read_mount_step(train_data *d, const ptc_dataset_step *st)
{
    size_t W = (size_t)d->tokens + 1;
    char rel[PTC_DATASET_STEP_PATH_MAX], path[sizeof d->dir + sizeof rel], *data = NULL,
        *idx = NULL;
    size_t len = 0, ilen = 0;
    PTC_TRY(ptc_dataset_step_format(st, PTC_DATASET_STEP_LEVEL_FILE, rel, sizeof rel));
    snprintf(path, sizeof path, "%s/%s", d->dir, rel);
    int rc = ptc_file_read(path, (size_t)1 << 31, &data, &len);
    if (rc == PTC_OK && !d->bytes && len != (size_t)d->M * 2 * W)
        rc = ptc_error_set(PTC_E_FORMAT, "%s: %zu bytes, expected %d windows of %zu", path, len,
                           d->M, 2 * W);
    if (rc == PTC_OK && !d->bytes)
        memcpy(d->buf, data, len);
    if (rc == PTC_OK && d->bytes) {
        rc = ptc_dataset_step_format(st, PTC_DATASET_STEP_LEVEL_INDEX, rel, sizeof rel);
        if (rc == PTC_OK) {
            snprintf(path, sizeof path, "%s/%s", d->dir, rel);
            rc = ptc_file_read(path, ((size_t)d->M + 1) * 8, &idx, &ilen);
        }
        if (rc == PTC_OK && ilen != ((size_t)d->M + 1) * 8)
            rc = ptc_error_set(PTC_E_FORMAT, "%s: %zu bytes, expected %d offsets", path, ilen,
                               d->M + 1);
        for (int i = 0; rc == PTC_OK && i < d->M; i++) {
            uint64_t a, b;
            memcpy(&a, idx + 8 * (size_t)i, 8);
            memcpy(&b, idx + 8 * (size_t)i + 8, 8);
            if (a > b || b > len)
                rc = ptc_error_set(PTC_E_FORMAT, "%s: bad offsets", path);
            else
                bytes_to_tokens(d->buf + (size_t)i * W, (const uint8_t *)data + a,
                                (size_t)(b - a) < W ? (size_t)(b - a) : W, W);
        }
    }
    ptc_free(data);
    ptc_free(idx);
    return rc;
}

/* The reader: this replica's M records of the step into d->buf. */
static int read_step(train_data *d)
{
    ptc_dataset_step st = data_step(d);
    uint64_t lo, hi;
    PTC_TRY(ptc_dataset_step_range(d->samples, &st, &lo, &hi));
    if (hi - lo != (uint64_t)d->M)
        return ptc_error_set(PTC_E_INVAL, "step %llu of '%s' gives this replica %llu records, "
                                          "not %d", (unsigned long long)d->step_index, d->name,
                             (unsigned long long)(hi - lo), d->M);
    return d->kind == DATA_DATASET ? read_store_step(d, &st) : read_mount_step(d, &st);
}

int train_data_next(train_data *d)
{
    if (d->kind == DATA_SYNTHETIC || d->kind == DATA_TOKENS)
        return PTC_OK;
    uint64_t B = (uint64_t)d->per_step;
    /* the next global batch must fit in the epoch; a partial last batch is
     * dropped and the next epoch starts at position 0 */
    if (d->pos.start + (d->pos.steps + 1) * B > d->samples) {
        d->pos.epoch++;
        d->pos.start = 0;
        d->pos.steps = 0;
    }
    d->step_epoch = d->pos.epoch;
    d->step_start = d->pos.start;
    d->step_index = d->pos.steps;
    int rc = d->reader ? read_step(d) : PTC_OK;
    /* the reader's outcome, then the records, to the whole replica */
    if (ptc_mpi_bcast(&rc, 1, MPI_INT, 0, d->group) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Bcast of the data failed");
    if (rc != PTC_OK)
        return d->reader ? rc
                         : ptc_error_set(rc, "reading the records of data-parallel rank %d "
                                             "failed", d->dp_rank);
    size_t n = (size_t)d->M * ((size_t)d->tokens + 1);
    if (ptc_mpi_bcast(d->buf, (int)n, MPI_UINT16_T, 0, d->group) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Bcast of the data failed");
    return PTC_OK;
}

void train_data_done(train_data *d)
{
    d->pos.steps++;
}

int train_data_flush(train_data *d)
{
    return d->counter ? ptc_dataset_counter_flush(d->counter) : PTC_OK;
}

void train_data_close(train_data *d)
{
    ptc_dataset_counter_destroy(d->counter); /* flushes */
    ptc_store_dataset_close(d->ds);
    ptc_store_block_cache_destroy(d->blocks); /* after the dataset that used it */
    if (d->group != MPI_COMM_NULL)
        MPI_Comm_free(&d->group);
    ptc_free(d->tok);
    ptc_free(d->buf);
    memset(d, 0, sizeof *d);
}

int train_data_fn(void *user, int64_t step, int64_t gmb, int32_t *ids, int32_t *targets, int n)
{
    train_data *d = user;
    /* the window's number is a position to hash: unsigned, so that it wraps
     * rather than overflows near the last step a job counts (2^63 - 1) */
    if (d->kind == DATA_SYNTHETIC) {
        uint64_t window = (uint64_t)step * (uint64_t)d->per_step + (uint64_t)gmb;
        for (int i = 0; i < n; i++) {
            ids[i] = (int32_t)(mix(d->seed ^ mix(window * (uint64_t)n + (uint64_t)i)) %
                               (uint64_t)d->vocab);
            targets[i] = (int32_t)(((uint64_t)ids[i] * 7 + 3) % (uint64_t)d->vocab);
        }
        return PTC_OK;
    }
    const uint16_t *w;
    size_t at;
    if (d->kind == DATA_TOKENS) {
        uint64_t window = (uint64_t)step * (uint64_t)d->per_step + (uint64_t)gmb;
        size_t span = d->ntok - (size_t)n;
        at = (size_t)((window * (uint64_t)n) % span);
        w = d->tok + at;
    } else {
        int64_t mb = gmb - (int64_t)d->dp_rank * d->M;
        if (mb < 0 || mb >= d->M || n != d->tokens)
            return ptc_error_set(PTC_E_RANGE, "micro-batch %lld is not this replica's",
                                 (long long)gmb);
        at = (size_t)mb * ((size_t)n + 1);
        w = d->buf + at;
    }
    for (int i = 0; i < n; i++) {
        ids[i] = w[i];
        targets[i] = w[i + 1];
        if (ids[i] >= d->vocab || targets[i] >= d->vocab)
            return ptc_error_set(PTC_E_RANGE, "token %d at %zu is outside vocab %d",
                                 ids[i] >= d->vocab ? ids[i] : targets[i], at + (size_t)i,
                                 d->vocab);
    }
    return PTC_OK;
}
