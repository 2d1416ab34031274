/* The training-state record of a version (docs/format.md §9): its JSON in
 * the version's metadata under PTC_CKPT_RECORD_KEY, written compact with
 * sorted keys and parsed strictly (untrusted text). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

/* ---- the record ------------------------------------------------------------------ */

void ptc_ckpt_record_free(ptc_ckpt_record *rec)
{
    if (!rec)
        return;
    ptc_free((void *)rec->config);
    ptc_free((void *)rec->schedule);
    ptc_free((void *)rec->dataset);
    ptc_free((void *)rec->rng);
    for (size_t i = 0; rec->extra && i < rec->nextra; i++) {
        ptc_free((void *)rec->extra[i].key);
        ptc_free((void *)rec->extra[i].value);
    }
    ptc_free((void *)rec->extra);
    memset(rec, 0, sizeof *rec);
}

/* Set o[key] = v (a new reference); v NULL means jansson refused the value. */
static int put_new(json_t *o, const char *key, json_t *v, const char *what)
{
    if (!v)
        return ptc_error_set(PTC_E_INVAL, "training-state record: %s is not valid UTF-8", what);
    if (json_object_set_new(o, key, v) != 0)
        return ptc_error_set(PTC_E_NOMEM, "training-state record: cannot add '%s'", key);
    return PTC_OK;
}

static int put_u63(json_t *o, const char *key, uint64_t v)
{
    if (v > (uint64_t)INT64_MAX)
        return ptc_error_set(PTC_E_RANGE, "training-state record: %s %llu exceeds 2^63-1", key,
                             (unsigned long long)v);
    json_t *j = json_integer((json_int_t)v);
    if (!j)
        return ptc_error_set(PTC_E_NOMEM, "training-state record: cannot add '%s'", key);
    return put_new(o, key, j, key);
}

static int put_str(json_t *o, const char *key, const char *s)
{
    if (!s)
        return PTC_OK;
    return put_new(o, key, json_string(s), key);
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp(((const ptc_ckpt_kv *)a)->key, ((const ptc_ckpt_kv *)b)->key);
}

int ptc_ckpt_record_to_json(const ptc_ckpt_record *rec, char **json)
{
    *json = NULL;
    if (!rec)
        return ptc_error_set(PTC_E_INVAL, "training-state record: NULL");
    if (rec->rng_len > PTC_CKPT_RNG_MAX)
        return ptc_error_set(PTC_E_RANGE, "training-state record: rng state of %zu bytes (at most %zu)",
                             rec->rng_len, PTC_CKPT_RNG_MAX);
    if (rec->rng_len && !rec->rng)
        return ptc_error_set(PTC_E_INVAL, "training-state record: rng is NULL with rng_len %zu",
                             rec->rng_len);
    if (rec->nextra > PTC_CKPT_EXTRA_MAX)
        return ptc_error_set(PTC_E_RANGE, "training-state record: %zu free-form keys (at most %d)",
                             rec->nextra, PTC_CKPT_EXTRA_MAX);
    if (rec->nextra && !rec->extra)
        return ptc_error_set(PTC_E_INVAL, "training-state record: extra is NULL with nextra %zu",
                             rec->nextra);
    json_t *o = json_object();
    json_t *ex = NULL;
    char *hex = NULL;
    int rc = PTC_OK;
    if (!o)
        return ptc_error_set(PTC_E_NOMEM, "training-state record: out of memory");
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)rec->seed);
    if ((rc = put_u63(o, "format", PTC_CKPT_RECORD_FORMAT)) < 0 ||
        (rc = put_u63(o, "step", rec->step)) < 0 || (rc = put_str(o, "config", rec->config)) < 0 ||
        (rc = put_str(o, "schedule", rec->schedule)) < 0 ||
        (rc = put_str(o, "seed", seed)) < 0 || (rc = put_u63(o, "epoch", rec->epoch)) < 0 ||
        (rc = put_u63(o, "sample", rec->sample)) < 0 ||
        (rc = put_u63(o, "global_batch", rec->global_batch)) < 0 ||
        (rc = put_str(o, "dataset", rec->dataset)) < 0)
        goto out_decref;
    if (rec->has_loss) {
        json_t *l;
        if (isnan(rec->loss))
            l = json_string("nan");
        else if (isinf(rec->loss))
            l = json_string(rec->loss > 0 ? "inf" : "-inf");
        else
            l = json_real(rec->loss);
        if (!l) {
            rc = ptc_error_set(PTC_E_NOMEM, "training-state record: out of memory");
            goto out_decref;
        }
        if ((rc = put_new(o, "loss", l, "loss")) < 0)
            goto out_decref;
    }
    if (rec->rng_len) {
        static const char digits[] = "0123456789abcdef";
        if (!(hex = ptc_malloc(2 * rec->rng_len + 1))) {
            rc = PTC_E_NOMEM;
            goto out_decref;
        }
        for (size_t i = 0; i < rec->rng_len; i++) {
            hex[2 * i] = digits[rec->rng[i] >> 4];
            hex[2 * i + 1] = digits[rec->rng[i] & 15];
        }
        hex[2 * rec->rng_len] = 0;
        if ((rc = put_str(o, "rng", hex)) < 0)
            goto out_decref;
    }
    if (rec->nextra) {
        if (!(ex = json_object())) {
            rc = ptc_error_set(PTC_E_NOMEM, "training-state record: out of memory");
            goto out_decref;
        }
        for (size_t i = 0; i < rec->nextra; i++) {
            const ptc_ckpt_kv *kv = &rec->extra[i];
            if (!kv->key || !kv->key[0] || !kv->value) {
                rc = ptc_error_set(PTC_E_INVAL,
                                   "training-state record: free-form entry %zu has an empty key "
                                   "or a NULL value", i);
                goto out_decref;
            }
            if (json_object_get(ex, kv->key)) {
                rc = ptc_error_set(PTC_E_INVAL,
                                   "training-state record: free-form key '%.200s' given twice",
                                   kv->key);
                goto out_decref;
            }
            json_t *v = json_string(kv->value);
            if (!v || json_object_set_new(ex, kv->key, v) != 0) {
                rc = ptc_error_set(PTC_E_INVAL,
                                   "training-state record: free-form key '%.200s' or its value "
                                   "is not valid UTF-8", kv->key);
                goto out_decref;
            }
        }
        rc = json_object_set_new(o, "extra", ex) == 0
                 ? PTC_OK
                 : ptc_error_set(PTC_E_NOMEM, "training-state record: out of memory");
        ex = NULL;
        if (rc < 0)
            goto out_decref;
    }
    char *txt = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    if (!txt) {
        rc = ptc_error_set(PTC_E_NOMEM, "training-state record: cannot serialise");
        goto out_decref;
    }
    size_t n = strlen(txt);
    if (n > PTC_CKPT_RECORD_MAX) {
        free(txt);
        rc = ptc_error_set(PTC_E_RANGE, "training-state record: %zu bytes of JSON (at most %zu)",
                           n, PTC_CKPT_RECORD_MAX);
        goto out_decref;
    }
    *json = ptc_strdup(txt);
    free(txt);
    if (!*json)
        rc = PTC_E_NOMEM;
out_decref:
    json_decref(ex);
    json_decref(o);
    ptc_free(hex);
    return rc;
}

static int bad_record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_record(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ptc_error_set(PTC_E_FORMAT, "training-state record: %s", msg);
}

static int get_u63(json_t *v, const char *key, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad_record("'%s' must be a non-negative integer", key);
    *out = (uint64_t)json_integer_value(v);
    return PTC_OK;
}

static int get_str(json_t *v, const char *key, const char **out)
{
    if (!json_is_string(v))
        return bad_record("'%s' must be a string", key);
    char *s = ptc_strdup(json_string_value(v));
    if (!s)
        return PTC_E_NOMEM;
    *out = s;
    return PTC_OK;
}

static int get_seed(json_t *v, uint64_t *out)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    size_t n = s ? strlen(s) : 0;
    if (!s || n == 0 || n > 20 || (n > 1 && s[0] == '0'))
        return bad_record("'seed' must be a decimal string of a u64 without leading zeros");
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
            return bad_record("'seed' must be a decimal string of a u64 without leading zeros");
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *out = x;
    return PTC_OK;
}

static int get_loss(json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return PTC_OK;
    }
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "nan") == 0)
        *out = NAN;
    else if (strcmp(s, "inf") == 0)
        *out = INFINITY;
    else if (strcmp(s, "-inf") == 0)
        *out = -INFINITY;
    else
        return bad_record("'loss' must be a number or \"nan\", \"inf\", \"-inf\"");
    return PTC_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int get_rng(json_t *v, ptc_ckpt_record *rec)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    size_t n = s ? json_string_length(v) : 0;
    if (!s || n % 2 || n == 0)
        return bad_record("'rng' must be a non-empty string of lower-case hex digit pairs");
    if (n / 2 > PTC_CKPT_RNG_MAX)
        return bad_record("'rng' holds %zu bytes (at most %zu)", n / 2, PTC_CKPT_RNG_MAX);
    uint8_t *b = ptc_malloc(n / 2);
    if (!b)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            ptc_free(b);
            return bad_record("'rng' must be a non-empty string of lower-case hex digit pairs");
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    rec->rng = b;
    rec->rng_len = n / 2;
    return PTC_OK;
}

static int get_extra(json_t *v, ptc_ckpt_record *rec)
{
    if (!json_is_object(v))
        return bad_record("'extra' must be an object of strings");
    size_t n = json_object_size(v);
    if (n > PTC_CKPT_EXTRA_MAX)
        return bad_record("'extra' has %zu keys (at most %d)", n, PTC_CKPT_EXTRA_MAX);
    if (n == 0)
        return PTC_OK;
    ptc_ckpt_kv *kv = ptc_calloc(n, sizeof *kv);
    if (!kv)
        return PTC_E_NOMEM;
    rec->extra = kv;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!k[0])
            return bad_record("'extra' has an empty key");
        if (!json_is_string(x))
            return bad_record("'extra' value of '%.200s' must be a string", k);
        kv[rec->nextra].key = ptc_strdup(k);
        kv[rec->nextra].value = ptc_strdup(json_string_value(x));
        rec->nextra++;
        if (!kv[rec->nextra - 1].key || !kv[rec->nextra - 1].value)
            return PTC_E_NOMEM;
    }
    qsort(kv, rec->nextra, sizeof *kv, cmp_kv);
    return PTC_OK;
}

int ptc_ckpt_record_from_json(const char *text, size_t len, ptc_ckpt_record *rec)
{
    memset(rec, 0, sizeof *rec);
    if (!text)
        return bad_record("no text");
    if (len > PTC_CKPT_RECORD_MAX)
        return bad_record("%zu bytes of JSON (at most %zu)", len, PTC_CKPT_RECORD_MAX);
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return bad_record("not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = PTC_OK;
    bool have_format = false, have_step = false;
    if (!json_is_object(o)) {
        rc = bad_record("not a JSON object");
        goto out_decref;
    }
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (strcmp(k, "format") == 0) {
            uint64_t f = 0;
            if ((rc = get_u63(v, k, &f)) < 0)
                goto out_decref;
            if (f != PTC_CKPT_RECORD_FORMAT) {
                rc = bad_record("unknown format %llu (this library reads %u)",
                                (unsigned long long)f, PTC_CKPT_RECORD_FORMAT);
                goto out_decref;
            }
            rec->format = (uint32_t)f;
            have_format = true;
        } else if (strcmp(k, "step") == 0) {
            rc = get_u63(v, k, &rec->step);
            have_step = true;
        } else if (strcmp(k, "config") == 0) {
            rc = get_str(v, k, &rec->config);
        } else if (strcmp(k, "schedule") == 0) {
            rc = get_str(v, k, &rec->schedule);
        } else if (strcmp(k, "dataset") == 0) {
            rc = get_str(v, k, &rec->dataset);
        } else if (strcmp(k, "seed") == 0) {
            rc = get_seed(v, &rec->seed);
        } else if (strcmp(k, "epoch") == 0) {
            rc = get_u63(v, k, &rec->epoch);
        } else if (strcmp(k, "sample") == 0) {
            rc = get_u63(v, k, &rec->sample);
        } else if (strcmp(k, "global_batch") == 0) {
            rc = get_u63(v, k, &rec->global_batch);
        } else if (strcmp(k, "loss") == 0) {
            rc = get_loss(v, &rec->loss);
            rec->has_loss = rc == PTC_OK;
        } else if (strcmp(k, "rng") == 0) {
            rc = get_rng(v, rec);
        } else if (strcmp(k, "extra") == 0) {
            rc = get_extra(v, rec);
        } else {
            rc = bad_record("unknown key '%.200s' (free-form keys belong in 'extra')", k);
        }
        if (rc < 0)
            goto out_decref;
    }
    if (!have_format)
        rc = bad_record("no 'format'");
    else if (!have_step)
        rc = bad_record("no 'step'");
out_decref:
    json_decref(o);
    if (rc < 0)
        ptc_ckpt_record_free(rec);
    return rc;
}

/* The record of an open version: zeroed when it has none. */
int ptc_ckpt_reader_record(const ptc_store_reader *rd, ptc_ckpt_record *rec, bool required)
{
    memset(rec, 0, sizeof *rec);
    const ptc_version_info *vi = ptc_store_reader_version(rd);
    const char *txt = ptc_store_reader_metadata(rd, PTC_CKPT_RECORD_KEY);
    if (!txt) {
        if (required)
            return ptc_error_set(PTC_E_NOTFOUND, "version %llu has no training-state record ('%s')",
                                 (unsigned long long)vi->version, PTC_CKPT_RECORD_KEY);
        return PTC_OK;
    }
    int rc = ptc_ckpt_record_from_json(txt, strlen(txt), rec);
    if (rc < 0)
        return ptc_error_set(rc, "version %llu: %s", (unsigned long long)vi->version,
                             ptc_last_error());
    return PTC_OK;
}

int ptc_ckpt_read_record(ptc_store *s, uint64_t version, ptc_ckpt_record *rec)
{
    memset(rec, 0, sizeof *rec);
    ptc_store_reader *rd;
    PTC_TRY(ptc_store_reader_open(&rd, s, version));
    int rc = ptc_ckpt_reader_record(rd, rec, true);
    ptc_store_reader_close(rd);
    return rc;
}

