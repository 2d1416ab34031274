/* A version of a store spread over hosts as every process of a reader sees
 * it (ptc_reshard_hosts_version_open): its layout, rules and record from
 * this host's part or, on a host whose store holds no part of it (a fresh
 * or replaced host joining), from the version's description sent by the
 * lowest process whose host holds one; a version saved with an explicit
 * layout, under its own layout, from the shard records of every host
 * present (each part holds its ranks' and its replicas' records only). The
 * description travels as bytes:
 *   str config, str rules, str record JSON ("": none), u32 tensors, then
 *   per tensor: str name, u32 dtype, u32 ndim, ndim x i64 shape;
 *   u32 shards, then per shard record of an explicit layout: u32 tensor,
 *   u32 rank, u32 ndim, ndim x i64 local shape, u32 pieces, then that many
 *   pieces as docs/format.md §2.4 writes them
 * (little-endian, base/buf_internal.h; decoded by ptc_reshard_hosts_desc_
 * decode, fuzzed in tests/fuzz/fuzz_hosts_desc.c). A description that
 * carries shard records alone has an empty header (no tensors). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ptc/ckpt.h"
#include "base/buf_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

static const char what[] = "load across hosts";

int ptc_reshard_gather_all(const ptc_transport *t, const void *in, size_t n, void *out)
{
    if (t->size <= 1) {
        memcpy(out, in, n);
        return PTC_OK;
    }
    return n ? t->allgather(t->user, in, n, out) : PTC_OK;
}

void ptc_reshard_hosts_desc_free(ptc_reshard_hosts_desc *d)
{
    for (size_t i = 0; d->tensors && i < d->ntensors; i++)
        ptc_free((char *)d->tensors[i].name);
    for (size_t i = 0; d->shards && i < d->nshards; i++)
        ptc_free((ptc_piece *)d->shards[i].pieces);
    ptc_free(d->tensors);
    ptc_free(d->shards);
    ptc_free(d->config);
    ptc_free(d->rules);
    ptc_free(d->record);
    memset(d, 0, sizeof *d);
}

/* ---- the description's bytes -------------------------------------------------------- */

/* A string without NUL bytes. */
static int rd_text(ptc_rd *r, char **out, const char *field)
{
    uint32_t n = 0;
    size_t at = r->pos;
    PTC_TRY(ptc_rd_str(r, out, &n, field));
    if (strlen(*out) == n)
        return PTC_OK;
    ptc_free(*out);
    *out = NULL;
    r->pos = at;
    return ptc_rd_fail(r, field);
}

/* A tensor: name, dtype, shape (the values a layout checks). */
static int rd_tensor(ptc_rd *r, ptc_tensor_info *ti, char **name)
{
    uint32_t dt = 0, nd = 0;
    PTC_TRY(rd_text(r, name, "tensor name"));
    ti->name = *name;
    PTC_TRY(ptc_rd_u32(r, &dt, "dtype"));
    if (dt >= PTC_DTYPE_COUNT)
        return ptc_rd_fail(r, "dtype");
    PTC_TRY(ptc_rd_u32(r, &nd, "ndim"));
    if (nd > PTC_MAX_DIMS)
        return ptc_rd_fail(r, "ndim");
    ti->dtype = (ptc_dtype)dt;
    ti->ndim = (int)nd;
    for (uint32_t k = 0; k < nd; k++)
        PTC_TRY(ptc_rd_i64(r, &ti->shape[k], "shape"));
    return PTC_OK;
}

/* A shard record: tensor index, rank, local shape (each extent >= 0),
 * pieces (into a fresh array, owned by @p sh from the start). */
static int rd_shard(ptc_rd *r, ptc_layout_explicit_shard *sh)
{
    uint32_t tensor = 0, rank = 0, nd = 0, np = 0;
    PTC_TRY(ptc_rd_u32(r, &tensor, "shard tensor"));
    PTC_TRY(ptc_rd_u32(r, &rank, "shard rank"));
    if (rank > INT_MAX)
        return ptc_rd_fail(r, "shard rank");
    PTC_TRY(ptc_rd_u32(r, &nd, "local ndim"));
    if (nd > PTC_MAX_DIMS)
        return ptc_rd_fail(r, "local ndim");
    sh->tensor = tensor;
    sh->rank = (int)rank;
    sh->ndim = (int)nd;
    for (uint32_t k = 0; k < nd; k++) {
        PTC_TRY(ptc_rd_i64(r, &sh->shape[k], "local shape"));
        if (sh->shape[k] < 0)
            return ptc_rd_fail(r, "local shape");
    }
    PTC_TRY(ptc_rd_u32(r, &np, "pieces"));
    if (np > (r->len - r->pos) / 16) /* a piece takes 16 bytes or more */
        return ptc_rd_fail(r, "pieces");
    ptc_piece *pc = ptc_calloc((size_t)np + 1, sizeof *pc);
    if (!pc)
        return ptc_error_set(PTC_E_NOMEM, "no memory for %u pieces", np);
    sh->pieces = pc;
    sh->npieces = np;
    for (uint32_t i = 0; i < np; i++)
        PTC_TRY(ptc_rd_piece(r, &pc[i], "piece"));
    return PTC_OK;
}

/* @p n items of at least @p min bytes each: never more than the input holds. */
static int rd_count(ptc_rd *r, uint32_t *n, size_t min, const char *field)
{
    PTC_TRY(ptc_rd_u32(r, n, field));
    return *n > (r->len - r->pos) / min ? ptc_rd_fail(r, field) : PTC_OK;
}

int ptc_reshard_hosts_desc_decode(const void *data, size_t len, ptc_reshard_hosts_desc *d)
{
    memset(d, 0, sizeof *d);
    ptc_rd r = {data, len, 0, "version description"};
    uint32_t n = 0;
    int rc = rd_text(&r, &d->config, "config");
    if (rc == PTC_OK)
        rc = rd_text(&r, &d->rules, "rules");
    if (rc == PTC_OK)
        rc = rd_text(&r, &d->record, "record");
    if (rc == PTC_OK)
        rc = rd_count(&r, &n, 12, "tensors"); /* a tensor takes 12 bytes or more */
    if (rc == PTC_OK && !(d->tensors = ptc_calloc((size_t)n + 1, sizeof *d->tensors)))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the version's %u tensors", n);
    for (uint32_t i = 0; rc == PTC_OK && i < n; i++) {
        char *name = NULL;
        rc = rd_tensor(&r, &d->tensors[i], &name);
        if (name) /* owned from here */
            d->ntensors++;
    }
    if (rc == PTC_OK)
        rc = rd_count(&r, &n, 16, "shards"); /* a shard record takes 16 bytes or more */
    if (rc == PTC_OK && !(d->shards = ptc_calloc((size_t)n + 1, sizeof *d->shards)))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for %u shard records", n);
    for (uint32_t i = 0; rc == PTC_OK && i < n; i++) {
        d->nshards++;
        rc = rd_shard(&r, &d->shards[i]);
    }
    if (rc == PTC_OK)
        rc = ptc_rd_end(&r);
    if (rc < 0)
        ptc_reshard_hosts_desc_free(d);
    return rc;
}

int ptc_reshard_hosts_desc_encode(ptc_buf *b, const char *config, const char *rules,
                                  const char *record, const ptc_tensor_info *tensors, size_t n,
                                  const ptc_layout_explicit_shard *shards, size_t nshards)
{
    if (n > UINT32_MAX || nshards > UINT32_MAX)
        return ptc_error_set(PTC_E_RANGE, "a description of %zu tensors and %zu shard records",
                             n, nshards);
    for (size_t i = 0; i < nshards; i++)
        if (shards[i].tensor > UINT32_MAX || shards[i].rank < 0 || shards[i].ndim < 0 ||
            shards[i].ndim > PTC_MAX_DIMS || shards[i].npieces > UINT32_MAX)
            return ptc_error_set(PTC_E_RANGE, "shard record %zu (tensor %zu, rank %d, %zu "
                                 "pieces) does not fit a description", i, shards[i].tensor,
                                 shards[i].rank, shards[i].npieces);
    ptc_buf_str(b, config, strlen(config));
    ptc_buf_str(b, rules, strlen(rules));
    ptc_buf_str(b, record, strlen(record));
    ptc_buf_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        ptc_buf_str(b, tensors[i].name, strlen(tensors[i].name));
        ptc_buf_u32(b, (uint32_t)tensors[i].dtype);
        ptc_buf_u32(b, (uint32_t)tensors[i].ndim);
        for (int k = 0; k < tensors[i].ndim; k++)
            ptc_buf_u64(b, (uint64_t)tensors[i].shape[k]);
    }
    ptc_buf_u32(b, (uint32_t)nshards);
    for (size_t i = 0; i < nshards; i++) {
        const ptc_layout_explicit_shard *sh = &shards[i];
        ptc_buf_u32(b, (uint32_t)sh->tensor);
        ptc_buf_u32(b, (uint32_t)sh->rank);
        ptc_buf_u32(b, (uint32_t)sh->ndim);
        for (int k = 0; k < sh->ndim; k++)
            ptc_buf_u64(b, (uint64_t)sh->shape[k]);
        ptc_buf_u32(b, (uint32_t)sh->npieces);
        for (size_t k = 0; k < sh->npieces; k++)
            ptc_buf_piece(b, &sh->pieces[k]);
    }
    return b->err;
}

/* ---- what this host's part says ------------------------------------------------------ */

/* The description of the version open in @p rd (local version @p lv of
 * @p s) with @p nsh shard records into @p b. */
static int desc_of_version(ptc_store *s, uint64_t lv, const ptc_store_reader *rd,
                           const ptc_layout_explicit_shard *sh, size_t nsh, ptc_buf *b)
{
    const ptc_version_info *vi = ptc_store_reader_version(rd);
    ptc_ckpt_record rec;
    char *json = NULL;
    int rc = ptc_ckpt_read_record(s, lv, &rec);
    if (rc == PTC_OK) {
        rc = rec.format ? ptc_ckpt_record_to_json(&rec, &json) : PTC_OK;
        ptc_ckpt_record_free(&rec);
    }
    size_t nt = ptc_store_reader_tensor_count(rd);
    ptc_tensor_info *ti = ptc_calloc(nt + 1, sizeof *ti);
    if (rc == PTC_OK && !ti)
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the version's %zu tensors", nt);
    for (size_t i = 0; rc == PTC_OK && i < nt; i++) {
        ptc_store_tensor st;
        if ((rc = ptc_store_reader_tensor(rd, i, &st)) == PTC_OK) {
            ti[i].name = st.name;
            ti[i].dtype = st.dtype;
            ti[i].ndim = st.ndim;
            memcpy(ti[i].shape, st.shape, sizeof ti[i].shape);
        }
    }
    if (rc == PTC_OK)
        rc = ptc_reshard_hosts_desc_encode(b, vi->config ? vi->config : "",
                                           vi->rules ? vi->rules : "", json ? json : "", ti, nt,
                                           sh, nsh);
    ptc_free(ti);
    ptc_store_free(json);
    return rc;
}

/* The shard records of the part open in @p rd: with @p has, mark the ranks
 * they belong to (@p world bytes); else those of the ranks whose
 * @p from is @p me into a fresh *@p out (pieces borrowed from @p rd). An
 * alias holds its owner's local shape and pieces (ptc_layout_of_version). */
static int part_shards(const ptc_store_reader *rd, uint64_t version, int world, uint8_t *has,
                       const int *from, int me, ptc_layout_explicit_shard **out, size_t *n)
{
    size_t nt = ptc_store_reader_tensor_count(rd), cap = 0;
    int rc = PTC_OK;
    if (out) {
        *out = NULL;
        *n = 0;
    }
    for (size_t t = 0; rc == PTC_OK && t < nt; t++) {
        ptc_store_tensor st;
        rc = ptc_store_reader_tensor(rd, t, &st);
        for (size_t i = 0; rc == PTC_OK && i < st.nshards; i++) {
            ptc_shard_info si;
            if ((rc = ptc_store_reader_shard_at(rd, t, i, &si)) < 0)
                break;
            if (si.rank >= (uint32_t)world) {
                rc = ptc_error_set(PTC_E_STORE, "version %llu: tensor '%.200s' has a shard "
                                   "record of rank %u, its explicit layout %d ranks",
                                   (unsigned long long)version, st.name, si.rank, world);
                break;
            }
            if (has) {
                has[si.rank] = 1;
                continue;
            }
            if (from[si.rank] != me)
                continue;
            if (*n == cap && (rc = ptc_grow((void **)out, &cap, *n + 1, sizeof **out)) < 0)
                break;
            ptc_layout_explicit_shard *sh = &(*out)[(*n)++];
            memset(sh, 0, sizeof *sh);
            sh->tensor = t;
            sh->rank = (int)si.rank;
            sh->ndim = si.local_ndim;
            memcpy(sh->shape, si.local_shape, sizeof sh->shape);
            sh->pieces = si.pieces;
            sh->npieces = si.npieces;
        }
    }
    return rc;
}

/* From this host's part @p rd: the layout under @p cfg and @p rules (NULL:
 * the version's), the version's rules, the record. */
static int open_local(ptc_store *s, const ptc_store_reader *rd, const ptc_config *cfg,
                      const ptc_rules *rules, bool record, ptc_reshard_hosts_version *v)
{
    int rc = ptc_layout_of_version_rules(&v->layout, rd, cfg, rules);
    if (rc == PTC_OK)
        rc = ptc_layout_version_rules(rd, &v->rules);
    if (rc == PTC_OK && record && (rc = ptc_ckpt_read_record(s, v->lv, &v->rec)) == PTC_OK)
        v->has_rec = true;
    return rc;
}

/* ---- what a holder sends -------------------------------------------------------------- */

/* The rules and record of the description @p d (the header of a version
 * whose explicit layout has W = @p world ranks, 0: a configuration; as
 * ptc_layout_version_rules, an explicit version without rules has the
 * preset "none"). */
static int open_sent_header(const ptc_reshard_hosts_desc *d, int world, bool record,
                            ptc_reshard_hosts_version *v)
{
    const char *rt = d->rules;
    if (world && !rt[0])
        PTC_TRY(ptc_rules_preset_text("none", &rt));
    PTC_TRY(ptc_rules_parse(&v->rules, rt, strlen(rt), "stored rules"));
    if (record && d->record[0]) {
        PTC_TRY(ptc_ckpt_record_from_json(d->record, strlen(d->record), &v->rec));
        v->has_rec = true;
    }
    return PTC_OK;
}

/* From the description @p d sent by a holder: the same as open_local, for
 * a configuration @p cfg given or the version's own (never an explicit
 * layout's: open_explicit). */
static int open_sent(const ptc_reshard_hosts_desc *d, int world, const ptc_config *cfg,
                     const ptc_rules *rules, bool record, ptc_reshard_hosts_version *v)
{
    ptc_config own;
    PTC_TRY(open_sent_header(d, world, record, v));
    if (!cfg) {
        PTC_TRY(ptc_config_parse(&own, d->config));
        cfg = &own;
    }
    return ptc_layout_create(&v->layout, d->tensors, d->ntensors, rules ? rules : v->rules, cfg);
}

/* Every process's holding of the version: the lowest process with a part
 * (-1: none), whether every process has one, and the explicit world W of
 * the holders' parts (0: a configuration; *@p world in: this process's).
 * Collective. */
static int lowest_holder(const ptc_transport *t, uint64_t version, bool has, int *world,
                         int *root, bool *all)
{
    int mine[2] = {has ? t->rank : INT_MAX, *world};
    int *each = ptc_malloc(sizeof mine * (size_t)t->size);
    int rc = each ? PTC_OK : ptc_error_set(PTC_E_NOMEM, "no memory for the holders");
    rc = ptc_transport_agree(t, rc, what);
    if (rc == PTC_OK)
        rc = ptc_reshard_gather_all(t, mine, sizeof mine, each);
    *root = -1;
    *all = true;
    for (int p = 0; rc == PTC_OK && p < t->size; p++) {
        if (each[2 * p] != INT_MAX && *root < 0) {
            *root = each[2 * p];
            *world = each[2 * p + 1];
        }
        *all = *all && each[2 * p] != INT_MAX;
    }
    for (int p = 0; rc == PTC_OK && p < t->size; p++)
        if (each[2 * p] != INT_MAX && each[2 * p + 1] != *world)
            rc = ptc_error_set(PTC_E_STORE, "the hosts' parts of version %llu disagree on its "
                               "layout (processes %d and %d)", (unsigned long long)version,
                               *root, p);
    ptc_free(each);
    return rc;
}

/* The description from process @p root to the processes without a part. */
static int send_desc(const ptc_transport *t, ptc_store *s, const ptc_store_reader *rd, int root,
                     int world, const ptc_config *cfg, const ptc_rules *rules, bool record,
                     ptc_reshard_hosts_version *v)
{
    ptc_buf b = {0};
    uint64_t len = 0;
    int rc = t->rank == root ? desc_of_version(s, v->lv, rd, NULL, 0, &b) : PTC_OK;
    len = b.len;
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = t->broadcast(t->user, &len, sizeof len, root);
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out;
    if (t->rank != root && !(b.p = ptc_malloc((size_t)len + 1)))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the version's description");
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = t->broadcast(t->user, b.p, (size_t)len, root);
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK && !v->lv) {
        ptc_reshard_hosts_desc d;
        if ((rc = ptc_reshard_hosts_desc_decode(b.p, (size_t)len, &d)) == PTC_OK) {
            rc = open_sent(&d, world, cfg, rules, record, v);
            ptc_reshard_hosts_desc_free(&d);
        }
    }
out:
    if (t->rank == root)
        ptc_buf_free(&b);
    else
        ptc_free(b.p);
    return rc;
}

/* ---- an explicit layout from every host's records -------------------------------------- */

/* The explicit layout of @p world ranks from the processes' descriptions
 * (@p n of them, @p root's with the header), its tensors covered; ranks
 * whose @p from is -1 are held by no host present. With @p lost, tensors
 * not covered for want of such ranks are no failure: *@p lost counts the
 * ranks (0: covered) and *@p out is NULL. */
static int build_explicit(const ptc_reshard_hosts_desc *d, int n, int root, int world,
                          const int *from, uint64_t version, int *lost, ptc_layout **out)
{
    size_t m = 0, k = 0;
    for (int p = 0; p < n; p++)
        m += d[p].nshards;
    ptc_layout_explicit_shard *sh = ptc_calloc(m + 1, sizeof *sh);
    if (!sh)
        return ptc_error_set(PTC_E_NOMEM, "no memory for %zu shard records", m);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < d[p].nshards; i++)
            sh[k++] = d[p].shards[i];
    const ptc_reshard_hosts_desc *h = &d[root];
    int rc = ptc_layout_create_explicit(out, h->tensors, h->ntensors, world, sh, m);
    ptc_free(sh);
    if (rc == PTC_E_INVAL || rc == PTC_E_RANGE)
        return ptc_error_set(PTC_E_STORE, "version %llu (an explicit layout of %d ranks): %s",
                             (unsigned long long)version, world, ptc_last_error());
    for (size_t t = 0; rc == PTC_OK && t < h->ntensors; t++)
        if ((rc = ptc_layout_check_cover(*out, t)) == PTC_E_INVAL) {
            char names[256] = "";
            int nlost = 0;
            for (int r = 0; r < world; r++) {
                size_t at = strlen(names);
                if (from[r] < 0 && at + 16 < sizeof names)
                    snprintf(names + at, sizeof names - at, "%s%d", nlost ? ", " : "", r);
                nlost += from[r] < 0;
            }
            if (nlost && lost) {
                *lost = nlost;
                rc = PTC_E_NOTFOUND;
                ptc_error_clear();
                break;
            }
            rc = nlost ? ptc_error_set(PTC_E_NOTFOUND, "version %llu: the shards of %d saved "
                                       "rank%s (%s) are on no host present: lost with every "
                                       "copy (save with more --replicas)",
                                       (unsigned long long)version, nlost,
                                       nlost == 1 ? "" : "s", names)
                       : ptc_error_set(PTC_E_STORE, "version %llu: %s",
                                       (unsigned long long)version, ptc_last_error());
        }
    if (rc < 0) {
        ptc_layout_destroy(*out);
        *out = NULL;
    }
    return lost && *lost ? PTC_OK : rc;
}

/* Which process sends each saved rank's records: the lowest whose part
 * holds any (-1: none), into @p from. Collective. */
static int record_senders(const ptc_transport *t, const ptc_store_reader *rd, uint64_t version,
                          int world, int *from)
{
    uint8_t *has = ptc_calloc((size_t)world + 1, 1),
            *each = ptc_calloc((size_t)t->size * (size_t)world + 1, 1);
    int rc = has && each ? PTC_OK : ptc_error_set(PTC_E_NOMEM, "no memory for the holders");
    if (rc == PTC_OK && rd)
        rc = part_shards(rd, version, world, has, NULL, 0, NULL, NULL);
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = ptc_reshard_gather_all(t, has, (size_t)world, each);
    for (int r = 0; rc == PTC_OK && r < world; r++) {
        from[r] = -1;
        for (int p = t->size - 1; p >= 0; p--)
            if (each[(size_t)p * (size_t)world + (size_t)r])
                from[r] = p;
    }
    ptc_free(has);
    ptc_free(each);
    return rc;
}

/* Version @p version's explicit layout of @p world ranks on every process:
 * each saved rank's records sent by one holder (record_senders), @p root
 * adding the header (tensors, rules, record). Collective. */
static int open_explicit(const ptc_transport *t, ptc_store *s, const ptc_store_reader *rd,
                         uint64_t version, int root, int world, bool record, int *lost,
                         ptc_reshard_hosts_version *v)
{
    int *from = ptc_malloc(sizeof(int) * ((size_t)world + 1));
    size_t *lens = ptc_calloc((size_t)t->size, sizeof *lens), nsh = 0;
    ptc_reshard_hosts_desc *d = ptc_calloc((size_t)t->size, sizeof *d);
    ptc_layout_explicit_shard *sh = NULL;
    ptc_buf b = {0};
    void *all = NULL;
    int rc = from && lens && d ? PTC_OK : ptc_error_set(PTC_E_NOMEM, "no memory for the holders");
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = record_senders(t, rd, version, world, from);
    if (rc == PTC_OK && rd)
        rc = part_shards(rd, version, world, NULL, from, t->rank, &sh, &nsh);
    if (rc == PTC_OK && t->rank == root)
        rc = desc_of_version(s, v->lv, rd, sh, nsh, &b);
    else if (rc == PTC_OK && nsh)
        rc = ptc_reshard_hosts_desc_encode(&b, "", "", "", NULL, 0, sh, nsh);
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = ptc_transport_allgatherv(t, b.p, b.len, &all, lens);
    size_t at = 0;
    for (int p = 0; rc == PTC_OK && p < t->size; p++) {
        if (lens[p] || p == root)
            rc = ptc_reshard_hosts_desc_decode((const uint8_t *)all + at, lens[p], &d[p]);
        at += lens[p];
    }
    if (rc == PTC_OK)
        rc = open_sent_header(&d[root], world, record, v);
    if (rc == PTC_OK)
        rc = build_explicit(d, t->size, root, world, from, version, lost, &v->layout);
    for (int p = 0; d && p < t->size; p++)
        ptc_reshard_hosts_desc_free(&d[p]);
    ptc_transport_free(all);
    ptc_buf_free(&b);
    ptc_free(sh);
    ptc_free(d);
    ptc_free(lens);
    ptc_free(from);
    return rc;
}

/* ---- the version as every process sees it ---------------------------------------------- */

void ptc_reshard_hosts_version_close(ptc_reshard_hosts_version *v)
{
    if (v->has_rec)
        ptc_ckpt_record_free(&v->rec);
    ptc_rules_destroy(v->rules);
    ptc_layout_destroy(v->layout);
    memset(v, 0, sizeof *v);
}

/* The explicit world W of the part open in @p rd (0: a configuration). */
static int part_world(const ptc_store_reader *rd, int *world)
{
    const ptc_version_info *vi = ptc_store_reader_version(rd);
    if (ptc_layout_parse_explicit(vi->config ? vi->config : "", world) != PTC_OK)
        return ptc_error_set(PTC_E_STORE, "version %llu: %s", (unsigned long long)vi->version,
                             ptc_last_error());
    return PTC_OK;
}

/* ptc_reshard_hosts_version_open; with @p lost (an explicit layout, @p cfg
 * NULL), the saved ranks whose loss leaves tensors uncovered are counted
 * in *@p lost (the layout then NULL) instead of failing. */
static int version_open(const ptc_transport *t, ptc_store *s, uint64_t version,
                        const ptc_config *cfg, const ptc_rules *rules, bool record, int *lost,
                        ptc_reshard_hosts_version *v)
{
    memset(v, 0, sizeof *v);
    ptc_store_reader *rd = NULL;
    int world = 0, root = -1;
    int rc = ptc_ckpt_hosts_local_version(s, version, &v->lv);
    if (rc == PTC_E_NOTFOUND) { /* no part here: the description comes from a holder */
        ptc_error_clear();
        rc = PTC_OK;
    }
    if (rc == PTC_OK && v->lv && (rc = ptc_store_reader_open(&rd, s, v->lv)) == PTC_OK)
        rc = part_world(rd, &world);
    /* an explicit layout opened as saved needs every host's records */
    if (rc == PTC_OK && v->lv && !(world && !cfg))
        rc = open_local(s, rd, cfg, rules, record, v);
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = lowest_holder(t, version, v->lv != 0, &world, &root, &v->all);
    rc = ptc_transport_agree(t, rc, what);
    if (rc == PTC_OK && root < 0)
        rc = ptc_error_set(PTC_E_NOTFOUND, "no host present holds a part of version %llu",
                           (unsigned long long)version);
    else if (rc == PTC_OK && world && !cfg)
        rc = open_explicit(t, s, rd, version, root, world, record, lost, v);
    else if (rc == PTC_OK && !v->all)
        rc = send_desc(t, s, rd, root, world, cfg, rules, record, v);
    ptc_store_reader_close(rd);
    rc = ptc_transport_agree(t, rc, what);
    if (rc < 0)
        ptc_reshard_hosts_version_close(v);
    return rc;
}

int ptc_reshard_hosts_version_open(const ptc_transport *t, ptc_store *s, uint64_t version,
                                   const ptc_config *cfg, const ptc_rules *rules, bool record,
                                   ptc_reshard_hosts_version *v)
{
    return version_open(t, s, version, cfg, rules, record, NULL, v);
}

int ptc_reshard_hosts_explicit_lost(const ptc_transport *t, ptc_store *s, uint64_t version,
                                    bool record, int *lost, ptc_reshard_hosts_version *v)
{
    ptc_reshard_hosts_version own;
    ptc_reshard_hosts_version *w = v ? v : &own;
    *lost = 0;
    int rc = version_open(t, s, version, NULL, NULL, record, lost, w);
    if (rc == PTC_OK && (*lost || !v)) /* not whole, or not wanted: closed */
        ptc_reshard_hosts_version_close(w);
    return rc;
}

int ptc_reshard_hosts_version_ensure(const ptc_transport *t, ptc_store *s, uint64_t version,
                                     bool record, ptc_reshard_hosts_version *hv)
{
    if (hv->layout) /* opened by the pick (alike on every process) */
        return PTC_OK;
    ptc_reshard_hosts_version_close(hv);
    return ptc_reshard_hosts_version_open(t, s, version, NULL, NULL, record, hv);
}
