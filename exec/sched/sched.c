/* Schedule IR: sizes, placement, per-rank action lists. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

int ptc_sched_create(ptc_sched **out, int ranks, int stages, int pipes, int microbatches)
{
    *out = NULL;
    if (ranks < 1 || ranks > PTC_SCHED_MAX_RANKS || stages < 1 ||
        stages > PTC_SCHED_MAX_STAGES || pipes < 1 || pipes > PTC_SCHED_MAX_PIPES ||
        microbatches < 1 || microbatches > PTC_SCHED_MAX_MICROBATCHES)
        return ptc_error_set(PTC_E_RANGE,
                             "schedule sizes out of range (ranks %d, stages %d, pipes %d, "
                             "microbatches %d)",
                             ranks, stages, pipes, microbatches);
    if ((int64_t)pipes * stages * microbatches > PTC_SCHED_MAX_CELLS)
        return ptc_error_set(PTC_E_RANGE,
                             "schedule too large: pipes*stages*microbatches over %d",
                             PTC_SCHED_MAX_CELLS);
    ptc_sched *s = ptc_calloc(1, sizeof *s);
    if (!s)
        return PTC_E_NOMEM;
    s->ranks = ranks;
    s->stages = stages;
    s->pipes = pipes;
    s->mbs = microbatches;
    size_t gs = (size_t)pipes * stages;
    s->place_rank = ptc_malloc(gs * sizeof(int));
    s->place_chunk = ptc_malloc(gs * sizeof(int));
    s->chunk_gs = ptc_calloc((size_t)ranks, sizeof(int *));
    s->nchunks = ptc_calloc((size_t)ranks, sizeof(int));
    s->chunk_cap = ptc_calloc((size_t)ranks, sizeof(int));
    s->mb_pipe = ptc_calloc((size_t)microbatches, sizeof(int));
    s->lists = ptc_calloc((size_t)ranks, sizeof(sched_list));
    if (!s->place_rank || !s->place_chunk || !s->chunk_gs || !s->nchunks || !s->chunk_cap ||
        !s->mb_pipe || !s->lists) {
        ptc_sched_destroy(s);
        return PTC_E_NOMEM;
    }
    for (size_t i = 0; i < gs; i++)
        s->place_rank[i] = s->place_chunk[i] = -1;
    *out = s;
    return PTC_OK;
}

void ptc_sched_destroy(ptc_sched *s)
{
    if (!s)
        return;
    if (s->chunk_gs)
        for (int r = 0; r < s->ranks; r++)
            ptc_free(s->chunk_gs[r]);
    if (s->lists)
        for (int r = 0; r < s->ranks; r++)
            ptc_free(s->lists[r].a);
    ptc_free(s->place_rank);
    ptc_free(s->place_chunk);
    ptc_free(s->chunk_gs);
    ptc_free(s->nchunks);
    ptc_free(s->chunk_cap);
    ptc_free(s->mb_pipe);
    ptc_free(s->lists);
    ptc_free(s);
}

int ptc_sched_clone(ptc_sched **out, const ptc_sched *s)
{
    ptc_sched *c;
    PTC_TRY(ptc_sched_create(&c, s->ranks, s->stages, s->pipes, s->mbs));
    memcpy(c->kind, s->kind, sizeof c->kind);
    c->k = s->k;
    size_t gs = (size_t)s->pipes * s->stages;
    memcpy(c->place_rank, s->place_rank, gs * sizeof(int));
    memcpy(c->place_chunk, s->place_chunk, gs * sizeof(int));
    memcpy(c->mb_pipe, s->mb_pipe, (size_t)s->mbs * sizeof(int));
    for (int r = 0; r < s->ranks; r++) {
        if (s->nchunks[r]) {
            c->chunk_gs[r] = ptc_malloc((size_t)s->nchunks[r] * sizeof(int));
            if (!c->chunk_gs[r])
                goto out_destroy;
            memcpy(c->chunk_gs[r], s->chunk_gs[r], (size_t)s->nchunks[r] * sizeof(int));
            c->nchunks[r] = c->chunk_cap[r] = s->nchunks[r];
        }
        if (s->lists[r].n) {
            c->lists[r].a = ptc_malloc(s->lists[r].n * sizeof(ptc_sched_action));
            if (!c->lists[r].a)
                goto out_destroy;
            memcpy(c->lists[r].a, s->lists[r].a, s->lists[r].n * sizeof(ptc_sched_action));
            c->lists[r].n = c->lists[r].cap = s->lists[r].n;
        }
    }
    c->total = s->total;
    *out = c;
    return PTC_OK;
out_destroy:
    ptc_sched_destroy(c);
    *out = NULL;
    return PTC_E_NOMEM;
}

int ptc_sched_place(ptc_sched *s, int pipe, int stage, int rank, int chunk)
{
    if (pipe < 0 || pipe >= s->pipes || stage < 0 || stage >= s->stages || rank < 0 ||
        rank >= s->ranks || chunk < 0 || chunk >= s->pipes * s->stages)
        return ptc_error_set(PTC_E_RANGE, "placement of pipe %d stage %d on rank %d chunk %d "
                                          "out of range", pipe, stage, rank, chunk);
    int g = pipe * s->stages + stage;
    if (s->place_rank[g] >= 0)
        return ptc_error_set(PTC_E_INVAL, "pipe %d stage %d placed twice", pipe, stage);
    if (chunk >= s->chunk_cap[rank]) {
        size_t cap = (size_t)s->chunk_cap[rank];
        if (ptc_grow((void **)&s->chunk_gs[rank], &cap, (size_t)chunk + 1, sizeof(int)))
            return PTC_E_NOMEM;
        for (size_t i = (size_t)s->chunk_cap[rank]; i < cap; i++)
            s->chunk_gs[rank][i] = -1;
        s->chunk_cap[rank] = (int)cap;
    }
    if (chunk < s->nchunks[rank] && s->chunk_gs[rank][chunk] >= 0)
        return ptc_error_set(PTC_E_INVAL, "rank %d chunk %d placed twice", rank, chunk);
    s->chunk_gs[rank][chunk] = g;
    if (chunk >= s->nchunks[rank])
        s->nchunks[rank] = chunk + 1;
    s->place_rank[g] = rank;
    s->place_chunk[g] = chunk;
    return PTC_OK;
}

int ptc_sched_place_looped(ptc_sched *s)
{
    if (s->pipes != 1 || s->stages % s->ranks)
        return ptc_error_set(PTC_E_INVAL, "looped placement needs one pipe and stages (%d) "
                                          "a multiple of ranks (%d)", s->stages, s->ranks);
    for (int st = 0; st < s->stages; st++)
        PTC_TRY(ptc_sched_place(s, 0, st, st % s->ranks, st / s->ranks));
    return PTC_OK;
}

int ptc_sched_check_placement(const ptc_sched *s)
{
    for (int g = 0; g < s->pipes * s->stages; g++)
        if (s->place_rank[g] < 0)
            return ptc_error_set(PTC_E_INVAL, "pipe %d stage %d is not placed on any rank",
                                 g / s->stages, g % s->stages);
    for (int r = 0; r < s->ranks; r++) {
        if (s->nchunks[r] == 0)
            return ptc_error_set(PTC_E_INVAL, "rank %d holds no stage", r);
        for (int c = 0; c < s->nchunks[r]; c++)
            if (s->chunk_gs[r][c] < 0)
                return ptc_error_set(PTC_E_INVAL, "rank %d chunk %d is not placed", r, c);
    }
    return PTC_OK;
}

int ptc_sched_set_mb_pipe(ptc_sched *s, int mb, int pipe)
{
    if (mb < 0 || mb >= s->mbs || pipe < 0 || pipe >= s->pipes)
        return ptc_error_set(PTC_E_RANGE, "micro-batch %d / pipe %d out of range", mb, pipe);
    s->mb_pipe[mb] = pipe;
    return PTC_OK;
}

int ptc_sched_append(ptc_sched *s, int rank, ptc_sched_action a)
{
    if (rank < 0 || rank >= s->ranks)
        return ptc_error_set(PTC_E_RANGE, "rank %d out of range", rank);
    if (a.op > PTC_SCHED_RECV || a.mb < 0 || a.mb >= s->mbs ||
        (int)a.chunk >= s->pipes * s->stages)
        return ptc_error_set(PTC_E_RANGE, "rank %d: action out of range (micro-batch %d, "
                                          "chunk %u)", rank, a.mb, a.chunk);
    if (sched_is_compute(a.op)) {
        a.peer = -1;
        a.tensor = 0;
    } else if (a.peer < 0 || a.peer >= s->ranks || a.peer == rank || a.tensor > PTC_SCHED_GRAD) {
        return ptc_error_set(PTC_E_RANGE, "rank %d: bad peer %d or tensor kind", rank, a.peer);
    }
    if (s->total >= PTC_SCHED_MAX_ACTIONS)
        return ptc_error_set(PTC_E_RANGE, "schedule has more than %d actions",
                             PTC_SCHED_MAX_ACTIONS);
    sched_list *l = &s->lists[rank];
    if (l->n == l->cap && ptc_grow((void **)&l->a, &l->cap, l->n + 1, sizeof a))
        return PTC_E_NOMEM;
    l->a[l->n++] = a;
    s->total++;
    return PTC_OK;
}

int ptc_sched_set_kind(ptc_sched *s, const char *kind, int k)
{
    size_t n = strlen(kind);
    if (n >= sizeof s->kind)
        return ptc_error_set(PTC_E_INVAL, "kind label '%.40s%s' has %zu characters, at most %zu",
                             kind, n > 40 ? "..." : "", n, sizeof s->kind - 1);
    if (k < 0)
        return ptc_error_set(PTC_E_INVAL, "kind label k %d is negative", k);
    for (size_t i = 0; i < n; i++) {
        char c = kind[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return ptc_error_set(PTC_E_INVAL, "kind label '%.40s' may hold only a-z, 0-9 and '-'",
                                 kind);
    }
    memcpy(s->kind, kind, n + 1);
    s->k = k;
    return PTC_OK;
}

int ptc_sched_ranks(const ptc_sched *s) { return s->ranks; }
int ptc_sched_stages(const ptc_sched *s) { return s->stages; }
int ptc_sched_pipes(const ptc_sched *s) { return s->pipes; }
int ptc_sched_microbatches(const ptc_sched *s) { return s->mbs; }
const char *ptc_sched_kind(const ptc_sched *s) { return s->kind; }
int ptc_sched_k(const ptc_sched *s) { return s->k; }

int ptc_sched_mb_pipe(const ptc_sched *s, int mb)
{
    return mb >= 0 && mb < s->mbs ? s->mb_pipe[mb] : 0;
}

int ptc_sched_chunks(const ptc_sched *s, int rank)
{
    return rank >= 0 && rank < s->ranks ? s->nchunks[rank] : 0;
}

int ptc_sched_stage_of(const ptc_sched *s, int rank, int chunk, int *pipe, int *stage)
{
    if (rank < 0 || rank >= s->ranks)
        return ptc_error_set(PTC_E_RANGE, "rank %d out of range", rank);
    int g = sched_gs(s, rank, chunk);
    if (g < 0)
        return ptc_error_set(PTC_E_RANGE, "rank %d has no chunk %d", rank, chunk);
    *pipe = g / s->stages;
    *stage = g % s->stages;
    return PTC_OK;
}

int ptc_sched_rank_of(const ptc_sched *s, int pipe, int stage, int *rank, int *chunk)
{
    if (pipe < 0 || pipe >= s->pipes || stage < 0 || stage >= s->stages)
        return ptc_error_set(PTC_E_RANGE, "pipe %d stage %d out of range", pipe, stage);
    int g = pipe * s->stages + stage;
    if (s->place_rank[g] < 0)
        return ptc_error_set(PTC_E_RANGE, "pipe %d stage %d not placed", pipe, stage);
    *rank = s->place_rank[g];
    *chunk = s->place_chunk[g];
    return PTC_OK;
}

const ptc_sched_action *ptc_sched_actions(const ptc_sched *s, int rank, size_t *n)
{
    if (rank < 0 || rank >= s->ranks) {
        *n = 0;
        return NULL;
    }
    *n = s->lists[rank].n;
    return s->lists[rank].a;
}

bool ptc_sched_has_comm(const ptc_sched *s)
{
    for (int r = 0; r < s->ranks; r++)
        for (size_t i = 0; i < s->lists[r].n; i++)
            if (!sched_is_compute(s->lists[r].a[i].op))
                return true;
    return false;
}

static bool action_eq(const ptc_sched_action *x, const ptc_sched_action *y)
{
    return x->op == y->op && x->tensor == y->tensor && x->chunk == y->chunk &&
           x->mb == y->mb && x->peer == y->peer;
}

bool ptc_sched_equal(const ptc_sched *a, const ptc_sched *b)
{
    if (a->ranks != b->ranks || a->stages != b->stages || a->pipes != b->pipes ||
        a->mbs != b->mbs || a->k != b->k || strcmp(a->kind, b->kind))
        return false;
    size_t gs = (size_t)a->pipes * a->stages;
    if (memcmp(a->place_rank, b->place_rank, gs * sizeof(int)) ||
        memcmp(a->place_chunk, b->place_chunk, gs * sizeof(int)) ||
        memcmp(a->mb_pipe, b->mb_pipe, (size_t)a->mbs * sizeof(int)))
        return false;
    for (int r = 0; r < a->ranks; r++) {
        if (a->lists[r].n != b->lists[r].n)
            return false;
        for (size_t i = 0; i < a->lists[r].n; i++)
            if (!action_eq(&a->lists[r].a[i], &b->lists[r].a[i]))
                return false;
    }
    return true;
}

void ptc_sched_text_free(char *text) { ptc_free(text); }

int sched_report_set(ptc_sched_report *rep, int code, int rank, int step, const char *fmt, ...)
{
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rep) {
        rep->code = code;
        rep->rank = rank;
        rep->step = step;
        memcpy(rep->message, msg, sizeof msg);
    }
    return ptc_error_set(code, "%s", msg);
}

void ptc_sched_report_clear(ptc_sched_report *rep)
{
    if (!rep)
        return;
    ptc_free(rep->grid);
    memset(rep, 0, sizeof *rep);
    rep->rank = rep->step = -1;
}
