/* Text form of schedules (docs/schedule-format.md): parse and print. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

static const char op_letter[] = {'F', 'B', 'I', 'W'};

int ptc_sched_action_format(const ptc_sched_action *a, char *buf, size_t cap)
{
    char chunk[16] = "";
    if (a->chunk)
        snprintf(chunk, sizeof chunk, ".%u", (unsigned)a->chunk);
    int k;
    if (sched_is_compute(a->op))
        k = snprintf(buf, cap, "%c%d%s", op_letter[a->op], (int)a->mb, chunk);
    else
        k = snprintf(buf, cap, "%c%c%d%s%c%d", a->op == PTC_SCHED_SEND ? 'S' : 'R',
                     a->tensor == PTC_SCHED_GRAD ? 'G' : 'A', (int)a->mb, chunk,
                     a->op == PTC_SCHED_SEND ? '>' : '<', (int)a->peer);
    if (k < 0 || (size_t)k >= cap)
        return ptc_error_set(PTC_E_RANGE, "action token does not fit %zu bytes", cap);
    return PTC_OK;
}

int ptc_sched_format(const ptc_sched *s, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    PTC_TRY(ptc_sched_check_placement(s));
    ptc_buf b = {0};
    ptc_buf_printf(&b, "ptc-schedule 1\n");
    if (s->kind[0]) {
        if (s->k)
            ptc_buf_printf(&b, "kind %s %d\n", s->kind, s->k);
        else
            ptc_buf_printf(&b, "kind %s\n", s->kind);
    }
    ptc_buf_printf(&b, "ranks %d\nstages %d\npipes %d\nmicrobatches %d\n", s->ranks,
                     s->stages, s->pipes, s->mbs);
    for (int r = 0; r < s->ranks; r++) {
        ptc_buf_printf(&b, "place %d", r);
        for (int c = 0; c < s->nchunks[r]; c++) {
            int g = s->chunk_gs[r][c];
            if (s->pipes == 1)
                ptc_buf_printf(&b, " %d", g);
            else
                ptc_buf_printf(&b, " %d:%d", g / s->stages, g % s->stages);
        }
        ptc_buf_printf(&b, "\n");
    }
    for (int r = 0; r < s->ranks; r++) {
        ptc_buf_printf(&b, "rank %d:", r);
        for (size_t i = 0; i < s->lists[r].n; i++) {
            char t[48];
            ptc_sched_action_format(&s->lists[r].a[i], t, sizeof t);
            ptc_buf_printf(&b, " %s", t);
        }
        ptc_buf_printf(&b, "\n");
    }
    if (b.err) {
        ptc_free(b.s);
        return b.err == PTC_E_NOMEM ? PTC_E_NOMEM : ptc_error_set(b.err, "format failed");
    }
    *out = b.s;
    if (len)
        *len = b.len;
    return PTC_OK;
}

/* ---- parsing ---------------------------------------------------------------- */

typedef struct tok {
    const char *p;
    size_t n;
} tok;

/* Decimal number of at most 9 digits starting at *p (advanced). */
static bool take_num(const char **p, const char *e, int *out)
{
    const char *q = *p;
    int v = 0, d = 0;
    while (q < e && *q >= '0' && *q <= '9' && d < 9) {
        v = v * 10 + (*q - '0');
        q++;
        d++;
    }
    if (d == 0 || (q < e && *q >= '0' && *q <= '9'))
        return false; /* empty, or a tenth digit: too large */
    *p = q;
    *out = v;
    return true;
}

static bool tok_num(tok t, int *out)
{
    const char *p = t.p;
    return take_num(&p, t.p + t.n, out) && p == t.p + t.n;
}

static bool tok_is(tok t, const char *w)
{
    return t.n == strlen(w) && !memcmp(t.p, w, t.n);
}

/* Parse one action token; NULL if fine, else what is wrong with it. */
static const char *parse_action(tok t, ptc_sched_action *a)
{
    const char *p = t.p, *e = t.p + t.n;
    memset(a, 0, sizeof *a);
    a->peer = -1;
    if (p >= e)
        return "empty";
    char c = *p++;
    bool comm = false;
    switch (c) {
    case 'F': a->op = PTC_SCHED_F; break;
    case 'B': a->op = PTC_SCHED_B; break;
    case 'I': a->op = PTC_SCHED_I; break;
    case 'W': a->op = PTC_SCHED_W; break;
    case 'S': a->op = PTC_SCHED_SEND; comm = true; break;
    case 'R': a->op = PTC_SCHED_RECV; comm = true; break;
    default: return "an action starts with F, B, I, W, S (send) or R (receive)";
    }
    if (comm) {
        if (p >= e || (*p != 'A' && *p != 'G'))
            return "a send or receive names its tensor: A (activation) or G (gradient)";
        a->tensor = *p++ == 'G' ? PTC_SCHED_GRAD : PTC_SCHED_ACT;
    }
    int v;
    if (!take_num(&p, e, &v))
        return "expected a micro-batch number (at most 9 digits)";
    a->mb = v;
    if (p < e && *p == '.') {
        p++;
        if (!take_num(&p, e, &v))
            return "expected a chunk number after '.'";
        if (v > 65535)
            return "chunk over 65535";
        a->chunk = (uint16_t)v;
    }
    if (comm) {
        char want = a->op == PTC_SCHED_SEND ? '>' : '<';
        if (p >= e || *p++ != want)
            return a->op == PTC_SCHED_SEND ? "a send ends with '>PEER'"
                                           : "a receive ends with '<PEER'";
        if (!take_num(&p, e, &v))
            return "expected the peer rank";
        a->peer = v;
    }
    return p == e ? NULL : "trailing characters";
}

typedef struct parser {
    int line;
    int ranks, stages, pipes, mbs, k;
    char kind[32];
    bool have_kind;
    ptc_sched *s;
    bool any_place;
    bool *placed_rank;
} parser;

static int perr(const parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(const parser *ps, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ptc_error_set(PTC_E_FORMAT, "schedule line %d: %s", ps->line, what);
}

/* A token for messages: at most 40 characters. */
#define TOK(t) ((t).n > 40 ? 40 : (int)(t).n), (t).p

static int ensure_sched(parser *ps)
{
    if (ps->s)
        return PTC_OK;
    if (!ps->ranks || !ps->stages || !ps->mbs)
        return perr(ps, "ranks, stages and microbatches must come before place/rank lines "
                        "(missing: %s%s%s)", ps->ranks ? "" : "ranks ",
                    ps->stages ? "" : "stages ", ps->mbs ? "" : "microbatches");
    int pipes = ps->pipes ? ps->pipes : 1;
    if ((int64_t)pipes * ps->stages * ps->mbs > PTC_SCHED_MAX_CELLS)
        return perr(ps, "pipes x stages x microbatches = %lld, over the limit %d",
                    (long long)pipes * ps->stages * ps->mbs, PTC_SCHED_MAX_CELLS);
    int rc = ptc_sched_create(&ps->s, ps->ranks, ps->stages, pipes, ps->mbs);
    if (rc)
        return rc == PTC_E_NOMEM ? rc : perr(ps, "%s", ptc_last_error());
    ps->placed_rank = ptc_calloc((size_t)ps->ranks, sizeof(bool));
    if (!ps->placed_rank)
        return PTC_E_NOMEM;
    if (ps->have_kind && (rc = ptc_sched_set_kind(ps->s, ps->kind, ps->k)))
        return rc;
    return PTC_OK;
}

static int parse_line(parser *ps, tok *t, size_t nt)
{
    if (nt == 0)
        return PTC_OK;
    int v;
    if (tok_is(t[0], "ptc-schedule")) {
        if (nt != 2 || !tok_num(t[1], &v) || v != 1)
            return perr(ps, "expected 'ptc-schedule 1' (this reader knows version 1)");
        return PTC_OK;
    }
    if (tok_is(t[0], "kind")) {
        if (ps->have_kind)
            return perr(ps, "kind given twice");
        if (ps->s)
            return perr(ps, "the kind line must come before place/rank lines");
        if (nt < 2 || nt > 3)
            return perr(ps, "expected 'kind NAME [K]', got %zu values", nt - 1);
        if (t[1].n >= sizeof ps->kind)
            return perr(ps, "kind label '%.*s%s' has %zu characters, at most %zu", TOK(t[1]),
                        t[1].n > 40 ? "..." : "", t[1].n, sizeof ps->kind - 1);
        for (size_t i = 0; i < t[1].n; i++) {
            char c = t[1].p[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
                return perr(ps, "kind label '%.*s' may hold only a-z, 0-9 and '-'", TOK(t[1]));
        }
        memcpy(ps->kind, t[1].p, t[1].n);
        ps->kind[t[1].n] = 0;
        if (nt == 3 && (!tok_num(t[2], &ps->k) || ps->k < 1))
            return perr(ps, "k in the kind line must be a number >= 1, got '%.*s'", TOK(t[2]));
        ps->have_kind = true;
        return PTC_OK;
    }
    static const char *const sizes[] = {"ranks", "stages", "pipes", "microbatches"};
    static const int limits[] = {PTC_SCHED_MAX_RANKS, PTC_SCHED_MAX_STAGES, PTC_SCHED_MAX_PIPES,
                                 PTC_SCHED_MAX_MICROBATCHES};
    int *fields[] = {&ps->ranks, &ps->stages, &ps->pipes, &ps->mbs};
    for (size_t f = 0; f < PTC_ARRAY_LEN(sizes); f++) {
        if (!tok_is(t[0], sizes[f]))
            continue;
        if (ps->s)
            return perr(ps, "%s must come before place/rank lines", sizes[f]);
        if (*fields[f])
            return perr(ps, "%s given twice", sizes[f]);
        if (nt != 2 || !tok_num(t[1], &v) || v < 1)
            return perr(ps, "%s: expected one number >= 1", sizes[f]);
        if (v > limits[f])
            return perr(ps, "%s %d over the limit %d", sizes[f], v, limits[f]);
        *fields[f] = v;
        return PTC_OK;
    }
    if (tok_is(t[0], "place")) {
        PTC_TRY(ensure_sched(ps));
        int r;
        if (nt < 3 || !tok_num(t[1], &r))
            return perr(ps, "expected 'place RANK STAGE...'");
        if (r >= ps->ranks)
            return perr(ps, "place: rank %d out of range (ranks %d)", r, ps->ranks);
        if (ps->placed_rank[r])
            return perr(ps, "rank %d placed twice", r);
        ps->placed_rank[r] = true;
        ps->any_place = true;
        for (size_t i = 2; i < nt; i++) {
            const char *p = t[i].p, *e = t[i].p + t[i].n;
            int pipe = 0, st;
            bool ok = take_num(&p, e, &st);
            if (ok && p < e && *p == ':') {
                p++;
                pipe = st;
                ok = take_num(&p, e, &st);
            }
            if (!ok || p != e)
                return perr(ps, "bad stage '%.*s' in place line (STAGE, or PIPE:STAGE)",
                            TOK(t[i]));
            if (pipe >= ps->s->pipes || st >= ps->s->stages)
                return perr(ps, "place: '%.*s' out of range (pipes %d, stages %d)", TOK(t[i]),
                            ps->s->pipes, ps->s->stages);
            if (i - 2 > 65535)
                return perr(ps, "place: more than 65536 chunks on rank %d", r);
            int owner, chunk;
            if (ptc_sched_rank_of(ps->s, pipe, st, &owner, &chunk) == PTC_OK)
                return perr(ps, "place: stage '%.*s' already placed as chunk %d of rank %d",
                            TOK(t[i]), chunk, owner);
            int rc = ptc_sched_place(ps->s, pipe, st, r, (int)(i - 2));
            if (rc)
                return rc == PTC_E_NOMEM ? rc : perr(ps, "%s", ptc_last_error());
        }
        return PTC_OK;
    }
    if (tok_is(t[0], "rank")) {
        PTC_TRY(ensure_sched(ps));
        int r;
        if (nt < 2 || t[1].n < 2 || t[1].p[t[1].n - 1] != ':')
            return perr(ps, "expected 'rank R: ACTION...'");
        tok rt = {t[1].p, t[1].n - 1};
        if (!tok_num(rt, &r))
            return perr(ps, "expected 'rank R: ACTION...'");
        if (r >= ps->ranks)
            return perr(ps, "rank %d out of range (ranks %d)", r, ps->ranks);
        for (size_t i = 2; i < nt; i++) {
            ptc_sched_action a;
            const char *why = parse_action(t[i], &a);
            if (why)
                return perr(ps, "bad action '%.*s': %s", TOK(t[i]), why);
            if (a.mb >= ps->mbs)
                return perr(ps, "action '%.*s': micro-batch %d out of range (microbatches %d)",
                            TOK(t[i]), a.mb, ps->mbs);
            if (!sched_is_compute(a.op) && (a.peer >= ps->ranks || a.peer == r))
                return perr(ps, "action '%.*s': peer %d %s", TOK(t[i]), a.peer,
                            a.peer == r ? "is the rank itself" : "out of range");
            int rc = ptc_sched_append(ps->s, r, a);
            if (rc)
                return rc == PTC_E_NOMEM ? rc : perr(ps, "%s", ptc_last_error());
        }
        return PTC_OK;
    }
    return perr(ps, "unknown keyword '%.*s' (ptc-schedule, kind, ranks, stages, pipes, "
                    "microbatches, place, rank)", TOK(t[0]));
}

int ptc_sched_parse(ptc_sched **out, const char *text, size_t len)
{
    *out = NULL;
    parser ps;
    memset(&ps, 0, sizeof ps);
    tok *t = NULL;
    size_t tcap = 0;
    int rc = PTC_OK;
    const char *p = text, *end = text + len;
    while (p < end) {
        ps.line++;
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e)
            e = end;
        const char *hash = memchr(p, '#', (size_t)(e - p));
        const char *ce = hash ? hash : e;
        size_t nt = 0;
        for (const char *q = p; q < ce;) {
            unsigned char ch = (unsigned char)*q;
            if (ch == ' ' || ch == '\t' || ch == '\r') {
                q++;
                continue;
            }
            if (ch < 32 || ch > 126) {
                rc = perr(&ps, "unexpected byte 0x%02x", ch);
                goto out_free;
            }
            const char *b = q;
            while (q < ce && *q != ' ' && *q != '\t' && *q != '\r')
                q++;
            if (nt == tcap && (rc = ptc_grow((void **)&t, &tcap, nt + 1, sizeof *t)))
                goto out_free;
            t[nt].p = b;
            t[nt].n = (size_t)(q - b);
            nt++;
        }
        if ((rc = parse_line(&ps, t, nt)))
            goto out_free;
        p = e + 1;
    }
    if ((rc = ensure_sched(&ps)))
        goto out_free;
    if (!ps.any_place && (rc = ptc_sched_place_looped(ps.s))) {
        rc = ptc_error_set(PTC_E_FORMAT, "schedule without place lines: the looped placement "
                                         "needs one pipe (have %d) and stages (%d) a multiple "
                                         "of ranks (%d)", ps.s->pipes, ps.s->stages,
                           ps.s->ranks);
        goto out_free;
    }
    /* A micro-batch runs on the pipe of its first compute action. */
    ptc_sched *s = ps.s;
    bool *seen = ptc_calloc((size_t)s->mbs, sizeof(bool));
    if (!seen) {
        rc = PTC_E_NOMEM;
        goto out_free;
    }
    for (int r = 0; r < s->ranks; r++)
        for (size_t i = 0; i < s->lists[r].n; i++) {
            const ptc_sched_action *a = &s->lists[r].a[i];
            int g = sched_gs(s, r, a->chunk);
            if (!sched_is_compute(a->op) || g < 0 || seen[a->mb])
                continue;
            seen[a->mb] = true;
            s->mb_pipe[a->mb] = g / s->stages;
        }
    ptc_free(seen);
    ptc_free(t);
    ptc_free(ps.placed_rank);
    *out = ps.s;
    return PTC_OK;
out_free:
    ptc_free(t);
    ptc_free(ps.placed_rank);
    ptc_sched_destroy(ps.s);
    return rc;
}
