/* torch.distributed.pipelining's per-rank action lists (the CSV its
 * schedules dump and its runtime loads), read and written
 * (docs/schedule-format.md, "torch action lists").
 *
 * A cell is an action `<stage><type>[<micro-batch>]`, e.g. `3F0`, `2I5`,
 * `1SEND_F4`, `0REDUCE_GRAD`, or a group `(<action>;<action>...)OVERLAP_F_B`;
 * row r (0-based) is rank r; an empty cell is an idle step. torch numbers
 * stages globally, so a stage index is a PTC stage of pipe 0; a rank's
 * chunks are its stages in increasing order. */
#include <stdio.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

/* Action types of the format, longest first where one is a prefix of
 * another (the type is followed by digits or the end of the cell). */
enum { T_F, T_I, T_W, T_B, T_SEND_F, T_RECV_F, T_SEND_B, T_RECV_B, T_WAIT_SEND_F,
       T_WAIT_SEND_B, T_UNSHARD, T_RESHARD, T_REDUCE_GRAD, T_WAIT_REDUCE_GRAD, T_NTYPES };

static const char *const type_names[T_NTYPES] = {
    "F", "I", "W", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "WAIT_SEND_F", "WAIT_SEND_B",
    "UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_REDUCE_GRAD"};

/* ---- writing ------------------------------------------------------------------ */

typedef struct wstate {
    const ptc_sched *s;
    ptc_buf b;
    bool first; /* no cell yet on this row */
} wstate;

static void cell(wstate *w, int stage, int type, int mb)
{
    ptc_buf_printf(&w->b, "%s%d%s", w->first ? "" : ",", stage, type_names[type]);
    if (mb >= 0)
        ptc_buf_printf(&w->b, "%d", mb);
    w->first = false;
}

static int stage_of(const ptc_sched *s, int rank, int chunk)
{
    return sched_gs(s, rank, chunk) % s->stages;
}

/* The gradient reductions of the stages whose last B or W has run. */
static void flush_reduce(wstate *w, int *red, int *nred)
{
    for (int i = 0; i < *nred; i++) {
        cell(w, red[i], T_REDUCE_GRAD, -1);
        cell(w, red[i], T_WAIT_REDUCE_GRAD, -1);
    }
    *nred = 0;
}

/* Row of @p r with the explicit communication of @p s (from infer) plus
 * the waits and gradient reductions torch's compute_comms form needs: a
 * forward send is waited for after the local backward of the same stage
 * and micro-batch (the peer has consumed it by then), a backward send at
 * the end; a stage's gradients are reduced once its last B or W is done,
 * after the sends that follow it (they are not held up by the reduction). */
static int comms_row(wstate *w, int r, int *nback, uint8_t *pend, int *red)
{
    const ptc_sched *s = w->s;
    const sched_list *l = &s->lists[r];
    size_t cells = (size_t)s->mbs * s->stages;
    int nred = 0;
    memset(pend, 0, cells);
    for (int c = 0; c < s->nchunks[r]; c++)
        nback[stage_of(s, r, c)] = 0;
    for (size_t i = 0; i < l->n; i++) {
        const ptc_sched_action *a = &l->a[i];
        int st = stage_of(s, r, a->chunk);
        size_t cl = (size_t)a->mb * s->stages + st;
        switch (a->op) {
        case PTC_SCHED_SEND:
            cell(w, st, a->tensor == PTC_SCHED_ACT ? T_SEND_F : T_SEND_B, a->mb);
            pend[cl] |= a->tensor == PTC_SCHED_ACT ? 1 : 2;
            break;
        case PTC_SCHED_RECV:
            cell(w, st, a->tensor == PTC_SCHED_ACT ? T_RECV_F : T_RECV_B, a->mb);
            break;
        default: {
            static const int ct[] = {T_F, T_B, T_I, T_W};
            flush_reduce(w, red, &nred);
            cell(w, st, ct[a->op], a->mb);
            if ((a->op == PTC_SCHED_B || a->op == PTC_SCHED_I) && (pend[cl] & 1)) {
                cell(w, st, T_WAIT_SEND_F, a->mb);
                pend[cl] &= (uint8_t)~1;
            }
            if ((a->op == PTC_SCHED_B || a->op == PTC_SCHED_W) && ++nback[st] == s->mbs)
                red[nred++] = st;
            break;
        }
        }
    }
    flush_reduce(w, red, &nred);
    /* Sends still pending, in the order they were posted. */
    for (size_t i = 0; i < l->n; i++) {
        const ptc_sched_action *a = &l->a[i];
        if (a->op != PTC_SCHED_SEND)
            continue;
        int st = stage_of(s, r, a->chunk);
        size_t cl = (size_t)a->mb * s->stages + st;
        uint8_t bit = a->tensor == PTC_SCHED_ACT ? 1 : 2;
        if (pend[cl] & bit) {
            cell(w, st, bit == 1 ? T_WAIT_SEND_F : T_WAIT_SEND_B, a->mb);
            pend[cl] &= (uint8_t)~bit;
        }
    }
    return PTC_OK;
}

int ptc_sched_to_torch(const ptc_sched *s, int form, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (form != PTC_SCHED_TORCH_COMPUTE && form != PTC_SCHED_TORCH_COMMS)
        return ptc_error_set(PTC_E_INVAL, "unknown torch action-list form %d", form);
    if (s->pipes != 1)
        return ptc_error_set(PTC_E_UNSUPPORTED,
                             "a schedule of %d pipelines (%s) cannot be written for "
                             "torch.distributed.pipelining, whose stages form one pipeline "
                             "that every micro-batch passes",
                             s->pipes, s->kind[0] ? s->kind : "two-pipe");
    PTC_TRY(sched_check_deps(s, NULL));
    ptc_sched *c = NULL;
    if (form == PTC_SCHED_TORCH_COMMS) {
        PTC_TRY(ptc_sched_clone(&c, s));
        int rc = ptc_sched_infer_comm(c);
        if (rc) {
            ptc_sched_destroy(c);
            return rc;
        }
        s = c;
    }
    wstate w = {.s = s, .first = true};
    size_t cells = (size_t)s->mbs * s->stages;
    int *nback = ptc_calloc((size_t)s->stages, sizeof(int));
    int *red = ptc_calloc((size_t)s->stages, sizeof(int));
    uint8_t *pend = ptc_malloc(cells);
    int rc = nback && red && pend ? PTC_OK : PTC_E_NOMEM;
    for (int r = 0; r < s->ranks && !rc; r++) {
        w.first = true;
        if (form == PTC_SCHED_TORCH_COMMS) {
            rc = comms_row(&w, r, nback, pend, red);
        } else {
            static const int ct[] = {T_F, T_B, T_I, T_W};
            for (size_t i = 0; i < s->lists[r].n; i++) {
                const ptc_sched_action *a = &s->lists[r].a[i];
                if (sched_is_compute(a->op))
                    cell(&w, stage_of(s, r, a->chunk), ct[a->op], a->mb);
            }
        }
        ptc_buf_printf(&w.b, "\n");
    }
    ptc_free(nback);
    ptc_free(red);
    ptc_free(pend);
    ptc_sched_destroy(c);
    if (!rc && w.b.err)
        rc = w.b.err == PTC_E_NOMEM ? PTC_E_NOMEM : ptc_error_set(w.b.err, "format failed");
    if (rc) {
        ptc_free(w.b.s);
        return rc;
    }
    *out = w.b.s;
    if (len)
        *len = w.b.len;
    return PTC_OK;
}

/* ---- reading ------------------------------------------------------------------ */

typedef struct tact {
    int stage, mb; /* mb -1 when the cell has none */
    uint8_t type;
} tact;

typedef struct rstate {
    tact *a;        /* every compute action, in row order */
    int *rank_of;   /* of each entry of a */
    size_t n, cap;
    int ranks, max_stage, max_mb, max_mb_rank;
    size_t skipped; /* communication and memory actions */
    int line, col;  /* position for messages (1-based) */
} rstate;

static int rerr(const rstate *t, const char *c, size_t n, const char *why)
{
    return ptc_error_set(PTC_E_FORMAT, "torch schedule line %d (rank %d) cell %d '%.*s': %s",
                         t->line, t->line - 1, t->col, n > 48 ? 48 : (int)n, c, why);
}

/* A decimal number at *p (advanced): 1, 0 if none, -1 if over 999999999. */
static int digits(const char **p, const char *e, int *out)
{
    const char *q = *p;
    long v = 0;
    while (q < e && *q >= '0' && *q <= '9') {
        v = v * 10 + (*q - '0');
        if (v > 999999999)
            return -1;
        q++;
    }
    if (q == *p)
        return 0;
    *p = q;
    *out = (int)v;
    return 1;
}

/* One action `<stage><type>[<mb>]` filling the whole of [p, e). */
static int parse_one(rstate *t, const char *p, const char *e, const char *c, size_t cn,
                     tact *out)
{
    int st, d = digits(&p, e, &st);
    if (d < 0)
        return rerr(t, c, cn, "stage number too large");
    if (d == 0)
        return rerr(t, c, cn, "an action starts with its stage number");
    int type = -1;
    size_t tl = 0;
    for (int k = 0; k < T_NTYPES; k++) {
        size_t l = strlen(type_names[k]);
        if ((size_t)(e - p) >= l && !memcmp(p, type_names[k], l) && l > tl &&
            (p + l == e || (p[l] >= '0' && p[l] <= '9'))) {
            type = k;
            tl = l;
        }
    }
    if (type < 0)
        return rerr(t, c, cn, "unknown action type (F, I, W, B, SEND_F, RECV_F, SEND_B, "
                              "RECV_B, WAIT_SEND_F, WAIT_SEND_B, UNSHARD, RESHARD, "
                              "REDUCE_GRAD, WAIT_REDUCE_GRAD, OVERLAP_F_B)");
    p += tl;
    int mb = -1;
    if (p < e && digits(&p, e, &mb) < 0)
        return rerr(t, c, cn, "micro-batch number too large");
    if (p != e)
        return rerr(t, c, cn, "trailing characters");
    if (type <= T_B && mb < 0)
        return rerr(t, c, cn, "a compute action needs its micro-batch");
    if (st >= PTC_SCHED_MAX_STAGES)
        return rerr(t, c, cn, "stage number over the limit");
    if (mb >= PTC_SCHED_MAX_MICROBATCHES)
        return rerr(t, c, cn, "micro-batch number over the limit");
    out->stage = st;
    out->mb = mb;
    out->type = (uint8_t)type;
    return PTC_OK;
}

static int keep(rstate *t, const tact *a)
{
    if (a->type > T_B) {
        t->skipped++;
        return PTC_OK;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap;
        PTC_TRY(ptc_grow((void **)&t->a, &t->cap, t->n + 1, sizeof *t->a));
        PTC_TRY(ptc_grow((void **)&t->rank_of, &cap, t->n + 1, sizeof *t->rank_of));
    }
    if (t->n >= PTC_SCHED_MAX_ACTIONS)
        return ptc_error_set(PTC_E_RANGE, "torch schedule: more than %d actions",
                             PTC_SCHED_MAX_ACTIONS);
    t->a[t->n] = *a;
    t->rank_of[t->n++] = t->ranks - 1;
    t->max_stage = PTC_MAX(t->max_stage, a->stage);
    if (a->mb > t->max_mb) {
        t->max_mb = a->mb;
        t->max_mb_rank = t->ranks - 1;
    }
    return PTC_OK;
}

/* One cell (quotes already removed). */
static int parse_cell(rstate *t, const char *c, size_t n)
{
    const char *e = c + n;
    while (c < e && (*c == ' ' || *c == '\t'))
        c++;
    while (e > c && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    n = (size_t)(e - c);
    if (n == 0)
        return PTC_OK; /* an idle step */
    tact a;
    if (*c != '(') {
        PTC_TRY(parse_one(t, c, e, c, n, &a));
        return keep(t, &a);
    }
    const char *close = memchr(c, ')', n);
    static const char grp[] = "OVERLAP_F_B";
    if (!close || (size_t)(e - close - 1) != sizeof grp - 1 || memcmp(close + 1, grp, sizeof grp - 1))
        return rerr(t, c, n, "a group is '(ACTION;ACTION...)OVERLAP_F_B'");
    for (const char *p = c + 1; p < close;) {
        const char *q = memchr(p, ';', (size_t)(close - p));
        if (!q)
            q = close;
        const char *b = p, *f = q;
        while (b < f && *b == ' ')
            b++;
        while (f > b && f[-1] == ' ')
            f--;
        if (b == f)
            return rerr(t, c, n, "empty action in a group");
        PTC_TRY(parse_one(t, b, f, c, n, &a));
        if (a.type > T_B)
            return rerr(t, c, n, "a group holds compute actions only");
        PTC_TRY(keep(t, &a));
        p = q + 1;
    }
    return PTC_OK;
}

/* Split the text in rows and cells. */
static int scan(rstate *t, const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    while (p < end) {
        t->line++;
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e)
            e = end;
        const char *le = e > p && e[-1] == '\r' ? e - 1 : e;
        if (t->ranks >= PTC_SCHED_MAX_RANKS)
            return ptc_error_set(PTC_E_RANGE, "torch schedule: more than %d ranks (rows)",
                                 PTC_SCHED_MAX_RANKS);
        /* A last empty line is the file's final newline, not a rank. */
        if (le == p && e == end)
            break;
        t->ranks++;
        t->col = 0;
        for (const char *c = p; c <= le;) {
            t->col++;
            const char *ce;
            if (c < le && *c == '"') {
                const char *q = memchr(c + 1, '"', (size_t)(le - c - 1));
                if (!q || (q + 1 < le && q[1] != ','))
                    return rerr(t, c, (size_t)(le - c), "unterminated or misplaced quote");
                PTC_TRY(parse_cell(t, c + 1, (size_t)(q - c - 1)));
                ce = q + 1;
            } else {
                ce = memchr(c, ',', (size_t)(le - c));
                if (!ce)
                    ce = le;
                for (const char *x = c; x < ce; x++)
                    if ((unsigned char)*x < 32 || (unsigned char)*x > 126)
                        if (*x != '\t')
                            return rerr(t, c, (size_t)(ce - c), "unexpected character");
                PTC_TRY(parse_cell(t, c, (size_t)(ce - c)));
            }
            c = ce + 1;
        }
        p = e + 1;
    }
    if (t->ranks == 0)
        return ptc_error_set(PTC_E_FORMAT, "torch schedule: no rows");
    return PTC_OK;
}

/* Stage -> rank from the actions: one owner per stage, every stage seen. */
static int owners(const rstate *t, int S, int *owner)
{
    for (int st = 0; st < S; st++)
        owner[st] = -1;
    for (size_t i = 0; i < t->n; i++) {
        int st = t->a[i].stage, r = t->rank_of[i];
        if (owner[st] < 0)
            owner[st] = r;
        else if (owner[st] != r)
            return ptc_error_set(PTC_E_FORMAT, "torch schedule: stage %d has actions on rank "
                                               "%d and on rank %d", st, owner[st], r);
    }
    for (int st = 0; st < S; st++)
        if (owner[st] < 0)
            return ptc_error_set(PTC_E_FORMAT, "torch schedule: stage %d has no action (stages "
                                               "0..%d are used)", st, S - 1);
    return PTC_OK;
}

int ptc_sched_from_torch(ptc_sched **out, const char *text, size_t len, int microbatches,
                         size_t *skipped)
{
    *out = NULL;
    if (skipped)
        *skipped = 0;
    if (microbatches < 0 || microbatches > PTC_SCHED_MAX_MICROBATCHES)
        return ptc_error_set(PTC_E_RANGE, "microbatches %d out of range", microbatches);
    rstate t;
    memset(&t, 0, sizeof t);
    t.max_stage = t.max_mb = -1;
    int *owner = NULL, *nch = NULL, *chunk = NULL, rc;
    ptc_sched *s = NULL;
    if ((rc = scan(&t, text, len)))
        goto out_free;
    if (t.n == 0) {
        rc = ptc_error_set(PTC_E_FORMAT, "torch schedule: no compute action (F, I, W, B)");
        goto out_free;
    }
    int S = t.max_stage + 1, M = microbatches ? microbatches : t.max_mb + 1;
    if (t.max_mb >= M) {
        rc = ptc_error_set(PTC_E_FORMAT, "torch schedule: rank %d runs micro-batch %d, out of "
                                         "range (microbatches %d)", t.max_mb_rank, t.max_mb, M);
        goto out_free;
    }
    owner = ptc_malloc((size_t)S * sizeof(int));
    chunk = ptc_malloc((size_t)S * sizeof(int));
    nch = ptc_calloc((size_t)t.ranks, sizeof(int));
    rc = PTC_E_NOMEM;
    if (!owner || !chunk || !nch)
        goto out_free;
    if ((rc = owners(&t, S, owner)))
        goto out_free;
    if ((rc = ptc_sched_create(&s, t.ranks, S, 1, M)) ||
        (rc = ptc_sched_set_kind(s, "torch", 0)))
        goto out_free;
    for (int st = 0; st < S && !rc; st++) { /* a rank's chunks: its stages in order */
        chunk[st] = nch[owner[st]]++;
        rc = ptc_sched_place(s, 0, st, owner[st], chunk[st]);
    }
    static const uint8_t op_of[] = {PTC_SCHED_F, PTC_SCHED_I, PTC_SCHED_W, PTC_SCHED_B};
    for (size_t i = 0; i < t.n && !rc; i++)
        rc = sched_add(s, t.rank_of[i], op_of[t.a[i].type], t.a[i].mb, chunk[t.a[i].stage]);
    if (!rc && (rc = ptc_sched_check_placement(s)))
        rc = ptc_error_set(PTC_E_FORMAT, "torch schedule: %s", ptc_last_error());
out_free:
    ptc_free(t.a);
    ptc_free(t.rank_of);
    ptc_free(owner);
    ptc_free(chunk);
    ptc_free(nch);
    if (rc) {
        ptc_sched_destroy(s);
        return rc;
    }
    if (skipped)
        *skipped = t.skipped;
    *out = s;
    return PTC_OK;
}
