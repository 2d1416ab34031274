/* A version of a store spread over hosts as every process of a reader sees
 * it (ptc_reshard_hosts_version_open): its layout, rules and record from
 * this host's part or, on a host whose store holds no part of it (a fresh
 * or replaced host joining), from the version's description sent by the
 * lowest process whose host holds one. The description travels as bytes:
 *   str config, str rules, str record JSON ("": none), u32 tensors, then
 *   per tensor: str name, u32 dtype, u32 ndim, ndim x i64 shape
 * (little-endian, base/buf_internal.h; decoded by ptc_reshard_hosts_desc_
 * decode, fuzzed in tests/fuzz/fuzz_hosts_desc.c). */
#include <limits.h>
#include <string.h>

#include "ptc/ckpt.h"
#include "base/buf_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

static const char what[] = "load across hosts";

void ptc_reshard_hosts_desc_free(ptc_reshard_hosts_desc *d)
{
    for (size_t i = 0; d->tensors && i < d->ntensors; i++)
        ptc_free((char *)d->tensors[i].name);
    ptc_free(d->tensors);
    ptc_free(d->config);
    ptc_free(d->rules);
    ptc_free(d->record);
    memset(d, 0, sizeof *d);
}

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
        rc = ptc_rd_u32(&r, &n, "tensors");
    if (rc == PTC_OK && n > (r.len - r.pos) / 12) /* a tensor takes 12 bytes or more */
        rc = ptc_rd_fail(&r, "tensors");
    if (rc == PTC_OK && !(d->tensors = ptc_calloc((size_t)n + 1, sizeof *d->tensors)))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the version's %u tensors", n);
    for (uint32_t i = 0; rc == PTC_OK && i < n; i++) {
        ptc_tensor_info *ti = &d->tensors[i];
        char *name = NULL;
        uint32_t dt = 0, nd = 0;
        rc = rd_text(&r, &name, "tensor name");
        if (rc < 0)
            break;
        ti->name = name;
        d->ntensors++;
        if ((rc = ptc_rd_u32(&r, &dt, "dtype")) == PTC_OK && dt >= PTC_DTYPE_COUNT)
            rc = ptc_rd_fail(&r, "dtype");
        if (rc == PTC_OK && (rc = ptc_rd_u32(&r, &nd, "ndim")) == PTC_OK && nd > PTC_MAX_DIMS)
            rc = ptc_rd_fail(&r, "ndim");
        ti->dtype = (ptc_dtype)dt;
        ti->ndim = (int)nd;
        for (uint32_t k = 0; rc == PTC_OK && k < nd; k++)
            rc = ptc_rd_i64(&r, &ti->shape[k], "shape");
    }
    if (rc == PTC_OK)
        rc = ptc_rd_end(&r);
    if (rc < 0)
        ptc_reshard_hosts_desc_free(d);
    return rc;
}

int ptc_reshard_hosts_desc_encode(ptc_buf *b, const char *config, const char *rules,
                                  const char *record, const ptc_tensor_info *tensors, size_t n)
{
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
    return b->err;
}

/* The description of local version @p lv of @p s into @p b. */
static int desc_of_version(ptc_store *s, uint64_t lv, ptc_buf *b)
{
    ptc_store_reader *rd = NULL;
    PTC_TRY(ptc_store_reader_open(&rd, s, lv));
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
                                           vi->rules ? vi->rules : "", json ? json : "", ti, nt);
    ptc_free(ti);
    ptc_store_free(json);
    ptc_store_reader_close(rd);
    return rc;
}

/* From this host's part: the layout under @p cfg and @p rules (NULL: the
 * version's), the version's rules, the record. */
static int open_local(ptc_store *s, const ptc_config *cfg, const ptc_rules *rules, bool record,
                      ptc_reshard_hosts_version *v)
{
    ptc_store_reader *rd = NULL;
    PTC_TRY(ptc_store_reader_open(&rd, s, v->lv));
    int rc = ptc_layout_of_version_rules(&v->layout, rd, cfg, rules);
    if (rc == PTC_OK)
        rc = ptc_layout_version_rules(rd, &v->rules);
    ptc_store_reader_close(rd);
    if (rc == PTC_OK && record && (rc = ptc_ckpt_read_record(s, v->lv, &v->rec)) == PTC_OK)
        v->has_rec = true;
    return rc;
}

/* From the description @p d sent by a holder: the same as open_local. */
static int open_sent(const ptc_reshard_hosts_desc *d, uint64_t version, const ptc_config *cfg,
                     const ptc_rules *rules, bool record, ptc_reshard_hosts_version *v)
{
    int world = 0;
    ptc_config own;
    if (ptc_layout_parse_explicit(d->config, &world) == PTC_OK && world > 0)
        return ptc_error_set(PTC_E_UNSUPPORTED, "version %llu has an explicit layout (saved from "
                             "per-rank pieces): a host whose store holds no part of it cannot "
                             "take part in its load", (unsigned long long)version);
    ptc_error_clear();
    PTC_TRY(ptc_rules_parse(&v->rules, d->rules, strlen(d->rules), "stored rules"));
    if (!cfg) {
        PTC_TRY(ptc_config_parse(&own, d->config));
        cfg = &own;
    }
    PTC_TRY(ptc_layout_create(&v->layout, d->tensors, d->ntensors, rules ? rules : v->rules,
                              cfg));
    if (record && d->record[0]) {
        PTC_TRY(ptc_ckpt_record_from_json(d->record, strlen(d->record), &v->rec));
        v->has_rec = true;
    }
    return PTC_OK;
}

/* The lowest process with @p has set (-1: none), and whether every process
 * has it. Collective. */
static int lowest_holder(const ptc_transport *t, bool has, int *root, bool *all)
{
    int mine = has ? t->rank : INT_MAX;
    int *each = ptc_malloc(sizeof(int) * (size_t)t->size);
    int rc = each ? PTC_OK : ptc_error_set(PTC_E_NOMEM, "no memory for the holders");
    rc = ptc_transport_agree(t, rc, what);
    if (rc == PTC_OK)
        rc = ptc_reshard_gather_all(t, &mine, sizeof mine, each);
    *root = -1;
    *all = true;
    for (int p = 0; rc == PTC_OK && p < t->size; p++) {
        if (each[p] != INT_MAX && *root < 0)
            *root = each[p];
        *all = *all && each[p] != INT_MAX;
    }
    ptc_free(each);
    return rc;
}

/* The description from process @p root to the processes without a part. */
static int send_desc(const ptc_transport *t, ptc_store *s, int root, uint64_t version,
                     const ptc_config *cfg, const ptc_rules *rules, bool record,
                     ptc_reshard_hosts_version *v)
{
    ptc_buf b = {0};
    uint64_t len = 0;
    int rc = t->rank == root ? desc_of_version(s, v->lv, &b) : PTC_OK;
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
            rc = open_sent(&d, version, cfg, rules, record, v);
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

void ptc_reshard_hosts_version_close(ptc_reshard_hosts_version *v)
{
    if (v->has_rec)
        ptc_ckpt_record_free(&v->rec);
    ptc_rules_destroy(v->rules);
    ptc_layout_destroy(v->layout);
    memset(v, 0, sizeof *v);
}

int ptc_reshard_hosts_version_open(const ptc_transport *t, ptc_store *s, uint64_t version,
                                   const ptc_config *cfg, const ptc_rules *rules, bool record,
                                   ptc_reshard_hosts_version *v)
{
    memset(v, 0, sizeof *v);
    int rc = ptc_ckpt_hosts_local_version(s, version, &v->lv);
    if (rc == PTC_E_NOTFOUND) { /* no part here: the description comes from a holder */
        ptc_error_clear();
        rc = PTC_OK;
    }
    if (rc == PTC_OK && v->lv)
        rc = open_local(s, cfg, rules, record, v);
    int root = -1;
    if ((rc = ptc_transport_agree(t, rc, what)) == PTC_OK)
        rc = lowest_holder(t, v->lv != 0, &root, &v->all);
    if (rc == PTC_OK && root < 0)
        rc = ptc_transport_agree(t, ptc_error_set(PTC_E_NOTFOUND, "no host present holds a "
                                                  "part of version %llu",
                                                  (unsigned long long)version), what);
    else if (rc == PTC_OK && !v->all)
        rc = send_desc(t, s, root, version, cfg, rules, record, v);
    rc = ptc_transport_agree(t, rc, what);
    if (rc < 0)
        ptc_reshard_hosts_version_close(v);
    return rc;
}
