/* Ingest readers: streaming record iterators over the inputs of
 * `ptc dataset ingest`. Inputs are read through one growing window so a
 * record is returned as a pointer into it (no copy for lines, tokens,
 * tfrecord); only `files` reads each file whole. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/ingest_internal.h"
#include "base/util_internal.h"

#define INGEST_REPORT_EVERY ((uint64_t)16 << 20)

static void src_close(struct ingest_src *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    s->open = false;
}

/* ---- format names ----------------------------------------------------------------- */

static int parse_format(ptc_ingest *r, const char *fmt)
{
    if (!fmt)
        return ptc_error_set(PTC_E_INVAL, "no ingest format given");
    if (strcmp(fmt, "lines") == 0) {
        r->kind = INGEST_LINES;
    } else if (strcmp(fmt, "jsonl") == 0) {
        r->kind = INGEST_JSONL;
    } else if (strcmp(fmt, "files") == 0) {
        r->kind = INGEST_FILES;
    } else if (strcmp(fmt, "npy") == 0) {
        r->kind = INGEST_NPY;
    } else if (strcmp(fmt, "tfrecord") == 0) {
        r->kind = INGEST_TFRECORD;
    } else if (strncmp(fmt, "tokens:u16:", 11) == 0 || strncmp(fmt, "tokens:u32:", 11) == 0) {
        r->kind = INGEST_TOKENS;
        r->tok_width = fmt[8] == '1' ? 2 : 4;
        const char *p = fmt + 11;
        uint64_t v = 0;
        if (*p < '1' || *p > '9')
            goto bad_tokens;
        for (; *p; p++) {
            if (*p < '0' || *p > '9' || v > PTC_INGEST_MAX_RECORD)
                goto bad_tokens;
            v = v * 10 + (uint64_t)(*p - '0');
        }
        if (v * r->tok_width > PTC_INGEST_MAX_RECORD)
            return ptc_error_set(PTC_E_INVAL, "format '%s': window of more than %llu bytes",
                                 fmt, (unsigned long long)PTC_INGEST_MAX_RECORD);
        r->tok_len = v;
    } else {
        return ptc_error_set(PTC_E_INVAL,
                             "unknown ingest format '%s' (lines, jsonl, files, "
                             "tokens:u16:LEN, tokens:u32:LEN, npy, tfrecord)",
                             fmt);
    }
    return PTC_OK;
bad_tokens:
    return ptc_error_set(PTC_E_INVAL, "format '%s': LEN must be a positive decimal number", fmt);
}

int ptc_ingest_format_check(const char *format)
{
    ptc_ingest r;
    memset(&r, 0, sizeof r);
    return parse_format(&r, format);
}

/* ---- `files`: the sorted file list -------------------------------------------------- */

struct path_list {
    char **v;
    size_t n, cap;
};

static int path_list_add(struct path_list *l, const char *path)
{
    PTC_TRY(ptc_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    char *s = ptc_strdup(path);
    if (!s)
        return PTC_E_NOMEM;
    l->v[l->n++] = s;
    return PTC_OK;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Regular files under @p dir (recursively; symlinks to files followed,
 * symlinks to directories not, so a walk cannot loop). */
static int walk_dir(struct path_list *l, const char *dir, int depth)
{
    if (depth > 256)
        return ptc_error_set(PTC_E_INVAL, "%s: directories nested too deeply", dir);
    DIR *d = opendir(dir);
    if (!d)
        return ptc_error_sys(PTC_E_IO, "open directory %s", dir);
    int rc = PTC_OK;
    struct dirent *e;
    size_t dlen = strlen(dir);
    for (;;) {
        errno = 0;
        e = readdir(d);
        if (!e) {
            if (errno)
                rc = ptc_error_sys(PTC_E_IO, "read directory %s", dir);
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t plen = dlen + 1 + strlen(e->d_name) + 1;
        char *p = ptc_malloc(plen);
        if (!p) {
            rc = PTC_E_NOMEM;
            break;
        }
        snprintf(p, plen, "%s%s%s", dir, (dlen && dir[dlen - 1] == '/') ? "" : "/", e->d_name);
        struct stat st;
        if (lstat(p, &st) != 0) {
            rc = ptc_error_sys(PTC_E_IO, "stat %s", p);
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk_dir(l, p, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            rc = path_list_add(l, p);
        } else if (S_ISLNK(st.st_mode) && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            rc = path_list_add(l, p);
        }
        ptc_free(p);
        if (rc < 0)
            break;
    }
    closedir(d);
    return rc;
}

static void free_paths(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ptc_free(v[i]);
    ptc_free(v);
}

static int collect_files(ptc_ingest *r, const char *const *inputs, size_t n)
{
    struct path_list all = {0};
    int rc = PTC_OK;
    for (size_t i = 0; i < n && rc == PTC_OK; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0) {
            rc = ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "input %s",
                               inputs[i]);
            break;
        }
        if (S_ISREG(st.st_mode)) {
            rc = path_list_add(&all, inputs[i]);
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            rc = ptc_error_set(PTC_E_INVAL, "input %s is neither a file nor a directory",
                               inputs[i]);
            break;
        }
        size_t first = all.n;
        rc = walk_dir(&all, inputs[i], 0);
        if (rc == PTC_OK)
            qsort(all.v + first, all.n - first, sizeof *all.v, cmp_path);
    }
    if (rc < 0) {
        free_paths(all.v, all.n);
        return rc;
    }
    r->inputs = all.v;
    r->ninputs = all.n;
    return PTC_OK;
}

/* ---- open / destroy --------------------------------------------------------------- */

static int ingest_alloc(ptc_ingest **out, const char *format)
{
    ptc_ingest *r = ptc_calloc(1, sizeof *r);
    if (!r)
        return PTC_E_NOMEM;
    r->src.fd = -1;
    int rc = parse_format(r, format);
    if (rc < 0) {
        ptc_free(r);
        return rc;
    }
    *out = r;
    return PTC_OK;
}

int ptc_ingest_open(ptc_ingest **out, const char *format, const char *const *inputs,
                    size_t ninputs)
{
    *out = NULL;
    if (ninputs == 0)
        return ptc_error_set(PTC_E_INVAL, "no input given");
    ptc_ingest *r;
    PTC_TRY(ingest_alloc(&r, format));
    int rc;
    if (r->kind == INGEST_FILES) {
        rc = collect_files(r, inputs, ninputs);
        if (rc < 0)
            goto out_free;
    } else {
        r->inputs = ptc_calloc(ninputs, sizeof *r->inputs);
        if (!r->inputs) {
            rc = PTC_E_NOMEM;
            goto out_free;
        }
        r->ninputs = ninputs;
        for (size_t i = 0; i < ninputs; i++) {
            r->inputs[i] = ptc_strdup(inputs[i]);
            if (!r->inputs[i]) {
                rc = PTC_E_NOMEM;
                goto out_free;
            }
        }
    }
    /* Check every input up front, so a typo fails before any work. */
    for (size_t i = 0; i < r->ninputs; i++) {
        struct stat st;
        if (stat(r->inputs[i], &st) != 0) {
            rc = ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "input %s",
                               r->inputs[i]);
            goto out_free;
        }
        if (!S_ISREG(st.st_mode)) {
            rc = ptc_error_set(PTC_E_INVAL, "input %s is not a regular file", r->inputs[i]);
            goto out_free;
        }
        r->total += (uint64_t)st.st_size;
    }
    *out = r;
    return PTC_OK;
out_free:
    ptc_ingest_destroy(r);
    return rc;
}

int ptc_ingest_open_buffer(ptc_ingest **out, const char *format, const void *data,
                           size_t len)
{
    *out = NULL;
    ptc_ingest *r;
    PTC_TRY(ingest_alloc(&r, format));
    if (r->kind == INGEST_FILES) {
        ptc_ingest_destroy(r);
        return ptc_error_set(PTC_E_INVAL, "format 'files' needs directories, not a buffer");
    }
    r->mem = true;
    r->ninputs = 1;
    r->total = len;
    r->src.data = data ? data : (const uint8_t *)"";
    r->src.end = len;
    *out = r;
    return PTC_OK;
}

void ptc_ingest_destroy(ptc_ingest *r)
{
    if (!r)
        return;
    src_close(&r->src);
    ptc_free(r->src.own);
    free_paths(r->inputs, r->inputs ? r->ninputs : 0);
    ptc_free(r->fbuf);
    ptc_free(r->tbuf);
    ptc_ingest_npy_reset(r);
    ptc_free(r);
}

uint64_t ptc_ingest_count(const ptc_ingest *r)
{
    return r->count;
}

void ptc_ingest_set_progress(ptc_ingest *r, ptc_progress_fn fn, void *user)
{
    r->progress = fn;
    r->progress_user = user;
}

static void report(ptc_ingest *r, bool final)
{
    if (!r->progress)
        return;
    uint64_t done = r->done_before + r->src.base + r->src.pos;
    if (final || done - r->last_report >= INGEST_REPORT_EVERY) {
        r->last_report = done;
        r->progress("ingest", done, r->total, r->progress_user);
    }
}

/* Open the next input as the window; *more false when none is left. */
static int next_input(ptc_ingest *r, bool *more)
{
    struct ingest_src *s = &r->src;
    if (s->open) {
        r->done_before += s->base + s->end;
        s->base = s->pos = s->end = 0;
        src_close(s);
        ptc_ingest_npy_reset(r);
    }
    r->in_record = 0;
    if (r->mem) {
        *more = r->cur == 0;
        if (*more) {
            r->cur = 1;
            s->open = true;
            s->eof = true;
            s->name = "<buffer>";
        }
        return PTC_OK;
    }
    if (r->cur >= r->ninputs) {
        *more = false;
        return PTC_OK;
    }
    const char *path = r->inputs[r->cur++];
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return ptc_error_sys(errno == ENOENT ? PTC_E_NOTFOUND : PTC_E_IO, "open %s", path);
    struct stat st;
    if (fstat(s->fd, &st) != 0)
        return ptc_error_sys(PTC_E_IO, "stat %s", path);
    s->size = (uint64_t)st.st_size;
    s->name = path;
    s->pos = s->end = 0;
    s->base = 0;
    s->eof = false;
    s->open = true;
    *more = true;
    return PTC_OK;
}

/* ---- per-format record readers (current input) ----------------------------------- */

static int read_line(ptc_ingest *r, const uint8_t **data, size_t *len, bool *got)
{
    struct ingest_src *s = &r->src;
    size_t scanned = 0;
    for (;;) {
        const uint8_t *start = s->data + s->pos;
        size_t avail = s->end - s->pos;
        const uint8_t *nl =
            avail > scanned ? memchr(start + scanned, '\n', avail - scanned) : NULL;
        if (nl) {
            *data = start;
            *len = (size_t)(nl - start);
            s->pos += *len + 1;
            *got = true;
            return PTC_OK;
        }
        if (s->eof) {
            *got = avail > 0;
            *data = start;
            *len = avail;
            s->pos = s->end;
            return PTC_OK;
        }
        if (avail >= PTC_INGEST_MAX_RECORD)
            return ptc_error_set(PTC_E_FORMAT, "%s: line %llu is longer than %llu bytes",
                                 s->name, (unsigned long long)r->in_record + 1,
                                 (unsigned long long)PTC_INGEST_MAX_RECORD);
        scanned = avail;
        size_t want = avail < INGEST_WINDOW / 2 ? INGEST_WINDOW : avail * 2;
        PTC_TRY(ptc_ingest_src_fill(s, want));
    }
}

/* jansson builds the whole tree of a line to check it: about this many
 * bytes per value (struct, malloc overhead, object slots) */
#define JSONL_VALUE_COST 64
/* A line whose tree would take more than this (and more than twice the line
 * itself: a long string costs its length) is refused rather than parsed. */
#define JSONL_CHECK_MAX ((uint64_t)256 << 20)

/* Upper bound of the values in json text @p s: every value but the first
 * follows a '[', ',' or ':' outside a string. A scan, not a parse. */
static uint64_t json_values_bound(const uint8_t *s, size_t n)
{
    uint64_t v = 1;
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                str = false;
        } else if (c == '"') {
            str = true;
        } else if (c == '[' || c == ',' || c == ':') {
            v++;
        }
    }
    return v;
}

static int read_jsonl(ptc_ingest *r, const uint8_t **data, size_t *len, bool *got)
{
    PTC_TRY(read_line(r, data, len, got));
    if (!*got)
        return PTC_OK;
    uint64_t cost = json_values_bound(*data, *len) * JSONL_VALUE_COST + *len;
    if (cost > JSONL_CHECK_MAX && cost > 2 * (uint64_t)*len)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: line %llu holds too many json values to check (about %llu "
                             "MiB to parse; the limit is %llu MiB)",
                             r->src.name, (unsigned long long)r->in_record + 1,
                             (unsigned long long)(cost >> 20),
                             (unsigned long long)(JSONL_CHECK_MAX >> 20));
    json_error_t err;
    json_t *j = json_loadb((const char *)*data, *len, JSON_DECODE_ANY, &err);
    if (!j)
        return ptc_error_set(PTC_E_FORMAT, "%s: line %llu is not valid json: %s",
                             r->src.name, (unsigned long long)r->in_record + 1, err.text);
    json_decref(j);
    return PTC_OK;
}

/* The inputs are one token stream: a window that the end of an input cuts
 * is completed from the next ones (copied into tbuf); windows that lie in
 * one input are returned in place. */
static int read_tokens(ptc_ingest *r, const uint8_t **data, size_t *len, bool *got)
{
    struct ingest_src *s = &r->src;
    size_t rec = (size_t)(r->tok_len * r->tok_width);
    size_t need = rec - r->tfill;
    PTC_TRY(ptc_ingest_src_fill(s, need));
    size_t avail = s->end - s->pos;
    if (avail >= need) {
        r->tok_total += need / r->tok_width;
        *len = rec;
        *got = true;
        if (r->tfill == 0) {
            *data = s->data + s->pos;
        } else {
            PTC_TRY(ptc_grow((void **)&r->tbuf, &r->tcap, rec, 1));
            memcpy(r->tbuf + r->tfill, s->data + s->pos, need);
            r->tfill = 0;
            *data = r->tbuf;
        }
        s->pos += need;
        return PTC_OK;
    }
    /* end of this input: its last tokens start (or continue) a window that
     * the next input completes; a partial token is a corrupt file */
    if (avail % r->tok_width != 0)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: size is not a multiple of the %u-byte token size",
                             s->name, r->tok_width);
    if (avail > 0) {
        /* grown by what the inputs hold, not by what LEN claims */
        PTC_TRY(ptc_grow((void **)&r->tbuf, &r->tcap, r->tfill + avail, 1));
        memcpy(r->tbuf + r->tfill, s->data + s->pos, avail);
        r->tfill += avail;
        r->tok_total += avail / r->tok_width;
    }
    s->pos = s->end;
    *got = false;
    return PTC_OK;
}

/* At the end of a token stream: the tokens of a last partial window are
 * dropped with a warning; a stream with no tokens, or with tokens but not
 * one whole window, is an error (never zero records and success). */
static int tokens_end(ptc_ingest *r)
{
    if (r->kind != INGEST_TOKENS)
        return PTC_OK;
    if (r->tfill == 0 && r->count == 0)
        return ptc_error_set(PTC_E_FORMAT,
                             "no tokens in any input: a token dataset needs at least one window "
                             "of %llu",
                             (unsigned long long)r->tok_len);
    if (r->tfill == 0)
        return PTC_OK;
    uint64_t left = r->tfill / r->tok_width;
    r->tfill = 0;
    if (r->count == 0)
        return ptc_error_set(PTC_E_FORMAT,
                             "%llu tokens in all the inputs: fewer than one window of %llu",
                             (unsigned long long)r->tok_total, (unsigned long long)r->tok_len);
    ptc_log(PTC_LOG_WARN, "dropped the last %llu of %llu tokens: fewer than a window of %llu",
            (unsigned long long)left, (unsigned long long)r->tok_total,
            (unsigned long long)r->tok_len);
    return PTC_OK;
}

static int read_file(ptc_ingest *r, const uint8_t **data, size_t *len, bool *got)
{
    struct ingest_src *s = &r->src;
    if (r->in_record > 0) {
        *got = false;
        return PTC_OK;
    }
    struct stat st;
    if (fstat(s->fd, &st) != 0)
        return ptc_error_sys(PTC_E_IO, "stat %s", s->name);
    if ((uint64_t)st.st_size > PTC_INGEST_MAX_RECORD)
        return ptc_error_set(PTC_E_FORMAT, "%s: file of %lld bytes is larger than %llu bytes",
                             s->name, (long long)st.st_size,
                             (unsigned long long)PTC_INGEST_MAX_RECORD);
    size_t n = (size_t)st.st_size;
    PTC_TRY(ptc_grow((void **)&r->fbuf, &r->fcap, n ? n : 1, 1));
    size_t done = 0;
    while (done < n) {
        ssize_t k = read(s->fd, r->fbuf + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return ptc_error_sys(PTC_E_IO, "read %s", s->name);
        if (k == 0)
            return ptc_error_set(PTC_E_IO, "%s: file shrank while being read", s->name);
        done += (size_t)k;
    }
    s->base = n; /* progress: the whole file is consumed */
    *data = r->fbuf;
    *len = n;
    *got = true;
    return PTC_OK;
}

int ptc_ingest_next(ptc_ingest *r, const uint8_t **data, size_t *len, bool *end)
{
    *data = NULL;
    *len = 0;
    *end = false;
    if (r->err)
        return r->err;
    int rc = PTC_OK;
    for (;;) {
        if (!r->src.open) {
            bool more;
            rc = next_input(r, &more);
            if (rc < 0)
                break;
            if (!more) {
                if ((rc = tokens_end(r)) < 0)
                    break;
                *end = true;
                report(r, true);
                return PTC_OK;
            }
        }
        bool got = false;
        switch (r->kind) {
        case INGEST_LINES: rc = read_line(r, data, len, &got); break;
        case INGEST_JSONL: rc = read_jsonl(r, data, len, &got); break;
        case INGEST_FILES: rc = read_file(r, data, len, &got); break;
        case INGEST_TOKENS: rc = read_tokens(r, data, len, &got); break;
        case INGEST_NPY: rc = ptc_ingest_npy_next(r, data, len, &got); break;
        case INGEST_TFRECORD: rc = ptc_ingest_tfrecord_next(r, data, len, &got); break;
        }
        if (rc < 0)
            break;
        if (got) {
            r->in_record++;
            r->count++;
            report(r, false);
            return PTC_OK;
        }
        /* this input is done; on to the next */
        rc = next_input(r, &got);
        if (rc < 0)
            break;
        if (!got) {
            if ((rc = tokens_end(r)) < 0)
                break;
            *end = true;
            report(r, true);
            return PTC_OK;
        }
    }
    *data = NULL;
    *len = 0;
    r->err = rc;
    return rc;
}
