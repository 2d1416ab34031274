/* The __metadata__ object of a safetensors header, read without a hash table.
 *
 * jansson keeps every object in a hash table. For an object of a few
 * hundred thousand keys (files written by tools that put a whole config or
 * an index into __metadata__) the random accesses into that table leave the
 * caches, and parsing 400k keys costs 2.6 times 200k on the development
 * machine instead of 2. This reader finds the top-level "__metadata__"
 * member by a lexical scan, reads its object sequentially into one buffer,
 * and detects duplicate keys by radix-sorting their 64-bit hashes (streaming
 * passes, no random access). The caller then lets jansson parse the header
 * with that object's text cut to "{}".
 *
 * It is an accelerator, not a second parser: it accepts only what jansson
 * accepts (strings holding an escape or a byte >= 0x80 are decoded by
 * jansson itself) and gives up on anything else — a duplicate or a colliding
 * hash, a non-string value, odd structure — so the caller falls back to
 * jansson on the whole header, which then reports the error exactly as
 * before. tests/fuzz/fuzz_safetensors.c checks that both paths agree. */
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "ptc/formats/formats_internal.h"
#include "base/util_internal.h"

#define META_KEY "__metadata__"

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* @p p at a '"': the byte after the closing quote, or NULL. *plain: the
 * string holds no escape and only printable ASCII. */
static const char *string_end(const char *p, const char *e, bool *plain)
{
    bool pl = true;
    for (p++; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            *plain = pl;
            return p + 1;
        }
        if (c == '\\') {
            pl = false;
            if (++p == e) /* the escaped byte; a \u's digits are plain bytes */
                return NULL;
        } else if (c < 0x20 || c >= 0x80) {
            pl = false;
        }
    }
    return NULL;
}

/* Skip one JSON value at @p p (lexically: strings and brackets tracked,
 * nothing validated). The byte after it, or NULL. */
static const char *skip_value(const char *p, const char *e)
{
    bool plain;
    if (p >= e)
        return NULL;
    if (*p == '"')
        return string_end(p, e, &plain);
    if (*p != '{' && *p != '[') {
        while (p < e && !strchr(",}] \t\n\r", *p) && *p != '\0')
            p++;
        return p;
    }
    size_t depth = 0;
    while (p < e) {
        char c = *p;
        if (c == '"') {
            if (!(p = string_end(p, e, &plain)))
                return NULL;
            continue;
        }
        if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return p + 1;
        p++;
    }
    return NULL;
}

/* Where the top-level "__metadata__" object's value lies; false if the
 * header has none spelled plainly, has two, or does not scan. */
static bool find_meta(const char *text, size_t n, size_t *begin, size_t *end)
{
    const char *p = text, *e = text + n;
    bool found = false, plain;
    p = skip_ws(p, e);
    if (p == e || *p++ != '{')
        return false;
    p = skip_ws(p, e);
    if (p < e && *p == '}')
        return false;
    for (;;) {
        if (p == e || *p != '"')
            return false;
        const char *k = p, *q = string_end(p, e, &plain);
        if (!q)
            return false;
        bool is_meta = plain && (size_t)(q - k) == sizeof META_KEY + 1 &&
                       memcmp(k + 1, META_KEY, sizeof META_KEY - 1) == 0;
        p = skip_ws(q, e);
        if (p == e || *p++ != ':')
            return false;
        p = skip_ws(p, e);
        const char *v = p;
        if (!(p = skip_value(p, e)))
            return false;
        if (is_meta) {
            /* the scan pairs brackets of any kind: {"k":"v"] ends here too */
            if (found || *v != '{' || p[-1] != '}')
                return false;
            found = true;
            *begin = (size_t)(v - text);
            *end = (size_t)(p - text);
        }
        p = skip_ws(p, e);
        if (p == e)
            return false;
        if (*p == '}')
            break;
        if (*p++ != ',')
            return false;
        p = skip_ws(p, e);
    }
    return found && skip_ws(p + 1, e) == e;
}

/* Decode the string token [p, q) into @p out (NUL-terminated); false if
 * jansson would not take it or it holds a NUL. */
static bool decode_string(const char *p, const char *q, bool plain, char **out)
{
    char *o = *out;
    if (plain) {
        size_t len = (size_t)(q - p) - 2;
        memcpy(o, p + 1, len);
        o[len] = '\0';
        *out = o + len + 1;
        return true;
    }
    json_error_t err;
    json_t *s = json_loadb(p, (size_t)(q - p), JSON_DECODE_ANY, &err);
    bool ok = s && json_is_string(s);
    if (ok) {
        size_t len = json_string_length(s);
        const char *v = json_string_value(s);
        /* a decoded string is never longer than its token */
        ok = len + 2 <= (size_t)(q - p) && memchr(v, '\0', len) == NULL;
        if (ok) {
            memcpy(o, v, len);
            o[len] = '\0';
            *out = o + len + 1;
        }
    }
    json_decref(s);
    return ok;
}

/* Sort @p n 64-bit values (LSD radix, 8 bits a pass; a pass that would not
 * move anything is skipped). @p tmp holds n values. */
static void radix_sort(uint64_t *a, uint64_t *tmp, size_t n)
{
    for (int shift = 0; shift < 64; shift += 8) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++)
            count[((a[i] >> shift) & 0xff) + 1]++;
        bool one = false;
        for (int b = 1; b <= 256; b++)
            if (count[b] == n)
                one = true;
        if (one)
            continue;
        for (int b = 0; b < 256; b++)
            count[b + 1] += count[b];
        for (size_t i = 0; i < n; i++)
            tmp[count[(a[i] >> shift) & 0xff]++] = a[i];
        memcpy(a, tmp, n * sizeof *a);
    }
}

/* No two keys hash alike (so none repeats). */
static int keys_distinct(const ptc_st_kv *kv, size_t n, bool *distinct)
{
    *distinct = true;
    if (n < 2)
        return PTC_OK;
    uint64_t *h = ptc_malloc(2 * n * sizeof *h);
    if (!h)
        return PTC_E_NOMEM;
    for (size_t i = 0; i < n; i++)
        h[i] = XXH3_64bits(kv[i].key, strlen(kv[i].key));
    radix_sort(h, h + n, n);
    for (size_t i = 1; i < n && *distinct; i++)
        *distinct = h[i] != h[i - 1];
    ptc_free(h);
    return PTC_OK;
}

/* The string token at *@p p (after whitespace) into @p o (*@p out: where it
 * starts), then past the whitespace after it; false if there is none jansson
 * would take. */
static bool take_string(const char **p, const char *e, char **o, char **out)
{
    bool plain;
    const char *q;
    *p = skip_ws(*p, e);
    if (*p >= e || **p != '"' || !(q = string_end(*p, e, &plain)))
        return false;
    *out = *o;
    if (!decode_string(*p, q, plain, o))
        return false;
    *p = skip_ws(q, e);
    return true;
}

int ptc_st_meta_scan(const char *text, size_t n, size_t min_bytes, ptc_st_meta *out)
{
    memset(out, 0, sizeof *out);
    size_t begin = 0, end = 0;
    if (n < min_bytes || !find_meta(text, n, &begin, &end) || end - begin < min_bytes)
        return 0;
    const char *p = skip_ws(text + begin + 1, text + end - 1), *e = text + end - 1;
    /* strings decode to no more bytes than their tokens, quotes included,
     * which leaves room for the NULs */
    char *buf = ptc_malloc(end - begin), *o = buf;
    if (!buf)
        return PTC_E_NOMEM;
    ptc_st_kv *kv = NULL;
    size_t nkv = 0, cap = 0;
    int rc = PTC_OK;
    bool ok = true;
    while (ok && rc == PTC_OK && p < e) {
        char *key, *value;
        ok = take_string(&p, e, &o, &key) && p < e && *p++ == ':' &&
             take_string(&p, e, &o, &value);
        if (ok && nkv == cap)
            rc = ptc_grow((void **)&kv, &cap, nkv + 1, sizeof *kv);
        if (ok && rc == PTC_OK) {
            kv[nkv++] = (ptc_st_kv){key, value};
            if (p < e) /* a comma, then another entry */
                ok = *p++ == ',' && skip_ws(p, e) < e;
        }
    }
    bool distinct = false;
    if (ok && rc == PTC_OK)
        rc = keys_distinct(kv, nkv, &distinct);
    if (rc < 0 || !ok || !distinct) {
        ptc_free(buf);
        ptc_free(kv);
        return rc < 0 ? rc : 0;
    }
    *out = (ptc_st_meta){.begin = begin, .end = end, .kv = kv, .n = nkv, .text = buf};
    return 1;
}

void ptc_st_meta_free(ptc_st_meta *m)
{
    ptc_free(m->kv);
    ptc_free(m->text);
    memset(m, 0, sizeof *m);
}
