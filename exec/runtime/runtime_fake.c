/* Fake compute: sleep for the simulator's costs, stamp outputs, check inputs. */
#include <math.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "exec/runtime/runtime_internal.h"

#define FAKE_MAGIC 0x50544346u /* "PTCF" */

struct ptc_exec_fake {
    const ptc_sched *s;
    int rank;
    double f, i, w, b; /* seconds per action on one chunk */
    size_t act_bytes;
    size_t checked;
};

int ptc_exec_fake_create(ptc_exec_fake **out, const ptc_sched *s, int rank,
                         const ptc_sched_costs *c, double unit, size_t act_bytes)
{
    *out = NULL;
    if (act_bytes < 32)
        return ptc_error_set(PTC_E_INVAL, "fake compute needs act_bytes >= 32, got %zu",
                             act_bytes);
    if (!(unit >= 0) || !(c->f >= 0) || !(c->b >= c->w) || !(c->w >= 0))
        return ptc_error_set(PTC_E_INVAL, "fake compute: bad costs");
    if (rank < 0 || rank >= ptc_sched_ranks(s))
        return ptc_error_set(PTC_E_RANGE, "fake compute: rank %d outside the schedule", rank);
    ptc_exec_fake *f = ptc_calloc(1, sizeof *f);
    if (!f)
        return ptc_error_set(PTC_E_NOMEM, "fake compute");
    double scale = (double)ptc_sched_ranks(s) / (double)ptc_sched_stages(s) * unit;
    f->s = s;
    f->rank = rank;
    f->f = c->f * scale;
    f->b = c->b * scale;
    f->w = c->w * scale;
    f->i = (c->b - c->w) * scale;
    f->act_bytes = act_bytes;
    /* Sleep precision matters more than the default 50 us timer slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    *out = f;
    return PTC_OK;
}

void ptc_exec_fake_destroy(ptc_exec_fake *f) { ptc_free(f); }

size_t ptc_exec_fake_checked(const ptc_exec_fake *f) { return f->checked; }

static void fake_sleep(double sec)
{
    if (sec <= 0)
        return;
    struct timespec ts = {(time_t)sec, (long)((sec - floor(sec)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int gstage(const ptc_exec_fake *f, int chunk, int *pipe, int *stage)
{
    int rc = ptc_sched_stage_of(f->s, f->rank, chunk, pipe, stage);
    if (rc != PTC_OK)
        return ptc_error_set(PTC_E_RANGE, "fake compute: chunk %d not on rank %d", chunk,
                             f->rank);
    return PTC_OK;
}

static void stamp(void *buf, int kind, int pipe, int stage, int mb)
{
    uint32_t w[4] = {FAKE_MAGIC, (uint32_t)kind, (uint32_t)(pipe << 20 | stage),
                     (uint32_t)mb};
    memcpy(buf, w, sizeof w);
}

static int check(ptc_exec_fake *f, const void *buf, int kind, int pipe, int stage, int mb)
{
    if (!buf)
        return ptc_error_set(PTC_E_INVAL, "fake compute: missing input (mb %d stage %d)", mb,
                             stage);
    uint32_t w[4];
    memcpy(w, buf, sizeof w);
    uint32_t want[4] = {FAKE_MAGIC, (uint32_t)kind, (uint32_t)(pipe << 20 | stage),
                        (uint32_t)mb};
    if (memcmp(w, want, sizeof w) != 0)
        return ptc_error_set(PTC_E_INVAL,
                             "fake compute: rank %d got %s for pipe %u stage %u mb %u where "
                             "pipe %d stage %d mb %d was due",
                             f->rank, w[1] ? "a gradient" : "an activation", w[2] >> 20,
                             w[2] & 0xfffff, w[3], pipe, stage, mb);
    f->checked++;
    return PTC_OK;
}

static int fake_forward(void *user, int chunk, int mb, const void *in, void *out)
{
    ptc_exec_fake *f = user;
    int pipe, st;
    PTC_TRY(gstage(f, chunk, &pipe, &st));
    if (st > 0)
        PTC_TRY(check(f, in, PTC_SCHED_ACT, pipe, st, mb));
    fake_sleep(f->f);
    if (out)
        stamp(out, PTC_SCHED_ACT, pipe, st + 1, mb);
    return PTC_OK;
}

static int fake_bwd(ptc_exec_fake *f, int chunk, int mb, const void *dout, void *dinp,
                    double sec)
{
    int pipe, st;
    PTC_TRY(gstage(f, chunk, &pipe, &st));
    if (st < ptc_sched_stages(f->s) - 1)
        PTC_TRY(check(f, dout, PTC_SCHED_GRAD, pipe, st, mb));
    fake_sleep(sec);
    if (dinp)
        stamp(dinp, PTC_SCHED_GRAD, pipe, st - 1, mb);
    return PTC_OK;
}

static int fake_backward(void *user, int chunk, int mb, const void *dout, void *dinp)
{
    ptc_exec_fake *f = user;
    return fake_bwd(f, chunk, mb, dout, dinp, f->b);
}

static int fake_backward_input(void *user, int chunk, int mb, const void *dout, void *dinp)
{
    ptc_exec_fake *f = user;
    return fake_bwd(f, chunk, mb, dout, dinp, f->i);
}

static int fake_backward_weight(void *user, int chunk, int mb)
{
    ptc_exec_fake *f = user;
    (void)chunk;
    (void)mb;
    fake_sleep(f->w);
    return PTC_OK;
}

void ptc_exec_fake_stage(ptc_exec_fake *f, ptc_exec_stage *out)
{
    memset(out, 0, sizeof *out);
    out->user = f;
    out->forward = fake_forward;
    out->backward = fake_backward;
    out->backward_input = fake_backward_input;
    out->backward_weight = fake_backward_weight;
}
