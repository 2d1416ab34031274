/* Rules parameters from a Hugging Face config.json: its non-negative
 * integer and boolean keys that are parameter names, and what Hugging
 * Face derives when config.json leaves it out. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/util_internal.h"
#include "ptc/layout/rules_internal.h"

static int params_add(ptc_rules_param **p, size_t *n, size_t *cap, const char *name, int64_t v)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*p)[i].name, name) == 0)
            return PTC_OK;
    PTC_TRY(ptc_grow((void **)p, cap, *n + 1, sizeof **p));
    char *s = ptc_strdup(name);
    if (!s)
        return PTC_E_NOMEM;
    (*p)[*n].name = s;
    (*p)[*n].value = v;
    (*n)++;
    return PTC_OK;
}

static bool params_get(const ptc_rules_param *p, size_t n, const char *name, int64_t *v)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0) {
            *v = p[i].value;
            return true;
        }
    return false;
}

void ptc_rules_params_free(ptc_rules_param *params, size_t n)
{
    for (size_t i = 0; params && i < n; i++)
        ptc_free((char *)params[i].name);
    ptc_free(params);
}

int ptc_rules_params_read(const char *path, ptc_rules_param **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    json_error_t jerr;
    json_t *obj = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj) {
        FILE *f = fopen(path, "r");
        if (!f)
            return ptc_error_sys(PTC_E_IO, "cannot read '%.200s'", path);
        fclose(f);
        return ptc_error_set(PTC_E_FORMAT, "%.200s:%d: %s", path, jerr.line, jerr.text);
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        return ptc_error_set(PTC_E_FORMAT, "%.200s: not a JSON object", path);
    }
    ptc_rules_param *p = NULL;
    size_t n = 0, cap = 0;
    int rc = PTC_OK;
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        if (rc != PTC_OK || !ptc_rules_name_ok(key, strlen(key)))
            continue;
        if (json_is_integer(val) && json_integer_value(val) >= 0)
            rc = params_add(&p, &n, &cap, key, (int64_t)json_integer_value(val));
        else if (json_is_boolean(val))
            rc = params_add(&p, &n, &cap, key, json_is_true(val) ? 1 : 0);
    }
    json_decref(obj);
    /* what Hugging Face derives when config.json leaves it out */
    int64_t heads, kv, hidden;
    if (rc == PTC_OK && params_get(p, n, "num_attention_heads", &heads) && heads > 0) {
        if (!params_get(p, n, "num_key_value_heads", &kv))
            rc = params_add(&p, &n, &cap, "num_key_value_heads", heads);
        if (rc == PTC_OK && params_get(p, n, "hidden_size", &hidden) && hidden % heads == 0)
            rc = params_add(&p, &n, &cap, "head_dim", hidden / heads);
    }
    if (rc != PTC_OK) {
        ptc_rules_params_free(p, n);
        return rc;
    }
    *out = p;
    *nout = n;
    return PTC_OK;
}

