/* The configuration rule of ptc elastic (include/ptc/elastic.h), and the same
 * choice asked of the configuration search's cost model (docs/elastic.md). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ptc/elastic.h"
#include "exec/model/elastic_internal.h"
#include "base/util_internal.h"

/* ---- the watched inputs ------------------------------------------------------------ */

/* A slots file's typo must not start thousands of processes on one machine. */
int elastic_local_max_slots(const ptc_elastic_opts *o)
{
    if (o->max_slots > 0)
        return o->max_slots;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long cap = (cpus > 0 ? cpus : 1) * ELASTIC_SLOTS_PER_CPU;
    if (cap < ELASTIC_SLOTS_MIN)
        cap = ELASTIC_SLOTS_MIN;
    return cap > PTC_CONFIG_MAX_WORLD ? PTC_CONFIG_MAX_WORLD : (int)cap;
}

int elastic_read_input(const char *what, const char *path, char *buf, size_t cap)
{
    char *txt = NULL;
    int rc = ptc_file_read_text(path, cap - 1, &txt);
    if (rc == PTC_OK) {
        memcpy(buf, txt, strlen(txt) + 1);
        ptc_free(txt);
        return PTC_OK;
    }
    return ptc_error_set(rc == PTC_E_BUSY ? PTC_E_BUSY : PTC_E_INVAL, "cannot read the %s %s: %s",
                         what, path, ptc_last_error());
}

int elastic_read_slots(const ptc_elastic_opts *o, char *sbuf, size_t cap, int *total)
{
    *total = o->slots;
    if (!o->slots_file)
        return PTC_OK;
    PTC_TRY(elastic_read_input("slots file", o->slots_file, sbuf, cap));
    if (elastic_slots_parse(sbuf, total) != PTC_OK)
        return ptc_error_set(PTC_E_INVAL, "%s: %s", o->slots_file, ptc_last_error());
    return PTC_OK;
}

/* ---- hostfiles ------------------------------------------------------------------ */

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* A decimal 0..PTC_CONFIG_MAX_WORLD spelled by [s, s+len). */
static bool count_of(const char *s, size_t len, int *out)
{
    if (len == 0 || len > 9)
        return false;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > PTC_CONFIG_MAX_WORLD)
        return false;
    *out = v;
    return true;
}

int elastic_slots_parse(const char *text, int *slots)
{
    const char *p = text;
    while (blank(*p) || *p == '\n')
        p++;
    const char *d = p;
    while (*d >= '0' && *d <= '9')
        d++;
    const char *q = d;
    while (blank(*q) || *q == '\n')
        q++;
    if (*q || !count_of(p, (size_t)(d - p), slots)) {
        char t[64];
        ptc_quote_name(t, sizeof t, p, strcspn(p, "\n"));
        return ptc_error_set(PTC_E_INVAL, "slots file: '%s' is not a number of slots (0..%d)",
                             t, PTC_CONFIG_MAX_WORLD);
    }
    return PTC_OK;
}

int ptc_elastic_hostfile_parse(const char *text, ptc_elastic_host *hosts, size_t cap,
                               size_t *n)
{
    if (!text || !n || (cap && !hosts))
        return ptc_error_set(PTC_E_INVAL, "hostfile: no text");
    *n = 0;
    const char *p = text;
    for (int line = 1; *p; line++) {
        const char *eol = strchr(p, '\n'), *hash;
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        if ((hash = memchr(p, '#', ll)))
            ll = (size_t)(hash - p);
        const char *q = p, *end = p + ll;
        ptc_elastic_host h = {.slots = 1};
        bool have_name = false, have_slots = false, have_max = false;
        while (q < end) {
            while (q < end && blank(*q))
                q++;
            if (q == end)
                break;
            const char *w = q;
            while (q < end && !blank(*q))
                q++;
            size_t wl = (size_t)(q - w);
            if (!have_name) {
                bool ok = wl < sizeof h.name;
                for (size_t i = 0; ok && i < wl; i++)
                    ok = w[i] > ' ' && w[i] < 0x7f && w[i] != '=';
                if (!ok)
                    return ptc_error_set(PTC_E_INVAL, "hostfile line %d: '%.*s' is not a host "
                                                      "name (1-255 printable bytes, no '=')",
                                         line, (int)(wl > 64 ? 64 : wl), w);
                memcpy(h.name, w, wl);
                h.name[wl] = 0;
                have_name = true;
            } else if (wl >= 6 && !strncmp(w, "slots=", 6) && !have_slots) {
                if (!count_of(w + 6, wl - 6, &h.slots))
                    return ptc_error_set(PTC_E_INVAL, "hostfile line %d: bad '%.*s' (slots=N, N "
                                                      "from 0 to %d)",
                                         line, (int)(wl > 64 ? 64 : wl), w, PTC_CONFIG_MAX_WORLD);
                have_slots = true;
            } else if (wl >= 10 && !strncmp(w, "max_slots=", 10) && !have_max) {
                int m;
                if (!count_of(w + 10, wl - 10, &m))
                    return ptc_error_set(PTC_E_INVAL, "hostfile line %d: bad '%.*s'", line,
                                         (int)(wl > 64 ? 64 : wl), w);
                have_max = true;
            } else {
                return ptc_error_set(PTC_E_INVAL, "hostfile line %d: unknown or repeated '%.*s' "
                                                  "(expected NAME [slots=N] [max_slots=M])",
                                     line, (int)(wl > 64 ? 64 : wl), w);
            }
        }
        if (have_name) {
            for (size_t i = 0; i < *n; i++)
                if (!strcmp(hosts[i].name, h.name))
                    return ptc_error_set(PTC_E_INVAL, "hostfile line %d: host %s named twice",
                                         line, h.name);
            if (*n >= cap)
                return ptc_error_set(PTC_E_INVAL, "hostfile line %d: more than %zu hosts", line,
                                     cap);
            hosts[(*n)++] = h;
        }
        p = eol ? eol + 1 : p + strlen(p);
    }
    return PTC_OK;
}

static int usable_slots(const int *slots, size_t n, int tp, int *usable)
{
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        int u = slots[i] / tp * tp;
        if (usable)
            usable[i] = u;
        total += u;
    }
    return total;
}

int ptc_elastic_pick(ptc_config *out, int *usable, const int *slots, size_t nhosts,
                     const ptc_elastic_want *w)
{
    if (!out || !slots || !w || nhosts == 0)
        return ptc_error_set(PTC_E_INVAL, "elastic: no hosts");
    if (w->layers < 1 || w->tp < 0 || w->pp < 0 || w->hidden < 0 || w->microbatches < 0)
        return ptc_error_set(PTC_E_INVAL, "elastic: layers >= 1 and degrees >= 0 expected");
    long total = 0;
    for (size_t i = 0; i < nhosts; i++) {
        if (slots[i] < 0 || slots[i] > PTC_CONFIG_MAX_WORLD)
            return ptc_error_set(PTC_E_INVAL, "elastic: host %zu has %d slots", i, slots[i]);
        total += slots[i];
    }
    if (total == 0)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: no slot is available");
    if (total > PTC_CONFIG_MAX_WORLD)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: %ld slots is over %d", total,
                             PTC_CONFIG_MAX_WORLD);
    /* 1. tp within a host */
    int tp = w->tp;
    if (tp == 0) {
        int pmin = w->pp > 0 ? w->pp : 1;
        for (tp = 8; tp > 1; tp /= 2) {
            bool ok = w->hidden == 0 || w->hidden % tp == 0;
            for (size_t i = 0; ok && i < nhosts; i++)
                ok = slots[i] % tp == 0;
            if (ok && (long)usable_slots(slots, nhosts, tp, NULL) >= (long)tp * pmin)
                break;
        }
    }
    int S = usable_slots(slots, nhosts, tp, usable);
    if (S == 0)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: tp=%d is more than the slots "
                                           "of every host (%ld slots in all)", tp, total);
    /* 2. pp divides the layers */
    int pp = w->pp;
    if (pp > w->layers)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: pp=%d is more than the "
                                           "model's %d layers", pp, w->layers);
    if (pp == 0) {
        /* the divisor that leaves the fewest slots idle; on a tie the larger */
        int best_used = -1;
        pp = 1;
        for (int p = 1; p <= w->layers; p++) {
            if (w->layers % p || (w->microbatches > 0 && p > w->microbatches) ||
                (long)tp * p > S)
                continue;
            int used = S / (tp * p) * (tp * p);
            if (used >= best_used) {
                best_used = used;
                pp = p;
            }
        }
    }
    if ((long)tp * pp > S)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: one replica needs tp*pp = "
                                           "%d slots, %d usable of %ld (tp groups stay within "
                                           "a host)", tp * pp, S, total);
    /* 3. the rest is dp */
    memset(out, 0, sizeof *out);
    out->tp = tp;
    out->pp = pp;
    out->dp = S / (tp * pp);
    out->zero = w->zero;
    return PTC_OK;
}


int ptc_elastic_search(ptc_config *out, int *usable, const int *slots, size_t nhosts,
                       const ptc_elastic_want *w, const ptc_search_cluster *cluster,
                       double *predicted)
{
    /* the rule's checks and answer first: its errors are this call's */
    ptc_config rule;
    PTC_TRY(ptc_elastic_pick(&rule, NULL, slots, nhosts, w));
    ptc_search_spec spec = {.family = PTC_SEARCH_MLP, .layers = w->layers,
                            .hidden = w->hidden ? w->hidden : 16,
                            .vocab = w->vocab ? w->vocab : 32, .seq = w->tokens ? w->tokens : 8};
    ptc_cost_model *m;
    PTC_TRY(ptc_cost_model_from_spec(&m, &spec));
    ptc_search_cluster c;
    if (cluster)
        c = *cluster;
    else
        ptc_search_cluster_init(&c);
    int maxhost = 0;
    for (size_t i = 0; i < nhosts; i++)
        maxhost = slots[i] > maxhost ? slots[i] : maxhost;
    c.gpus_per_host = maxhost;
    ptc_search_job job;
    ptc_search_job_init(&job);
    int M = w->microbatches > 0 ? w->microbatches : 1;
    ptc_config best = {0};
    double best_tput = 0, best_step = 0;
    static const int tps[] = {8, 4, 2, 1};
    for (size_t a = 0; a < 4; a++) {
        int tp = tps[a];
        if (w->tp > 0 && tp != w->tp)
            continue;
        if (w->tp == 0) {
            bool ok = w->hidden == 0 || w->hidden % tp == 0;
            for (size_t i = 0; ok && i < nhosts; i++)
                ok = slots[i] % tp == 0;
            if (!ok)
                continue;
        }
        int S = usable_slots(slots, nhosts, tp, NULL);
        for (int pp = w->layers; pp >= 1; pp--) {
            if ((w->pp > 0 && pp != w->pp) || w->layers % pp || (long)tp * pp > S ||
                (w->pp == 0 && w->microbatches > 0 && pp > w->microbatches))
                continue;
            int dp = S / (tp * pp);
            c.gpus = dp * tp * pp;
            job.global_batch = (int64_t)dp * M;
            ptc_search_config sc = {.dp = dp, .tp = tp, .pp = pp, .zero = w->zero,
                                    .schedule = pp > 1 ? w->schedule : PTC_SCHED_1F1B,
                                    .microbatches = M, .mb_size = 1, .chunks = 1,
                                    .k = w->schedule == PTC_SCHED_KFKB ? 1 : 0};
            ptc_cost_result r;
            if (ptc_cost_evaluate(m, &c, &job, &sc, &r) != PTC_OK || !r.fits || r.step_time <= 0)
                continue;
            double tput = (double)job.global_batch / r.step_time;
            if (tput > best_tput * (1 + 1e-9)) {
                best_tput = tput;
                best_step = r.step_time;
                best = (ptc_config){.dp = dp, .tp = tp, .pp = pp, .zero = w->zero};
            }
        }
    }
    ptc_cost_model_destroy(m);
    if (best_tput == 0)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: the cost model rejects every "
                                           "configuration of the rule on these slots "
                                           "(memory or validity; the rule alone gives %d/%d/%d)",
                             rule.dp, rule.tp, rule.pp);
    usable_slots(slots, nhosts, best.tp, usable);
    *out = best;
    if (predicted)
        *predicted = best_step;
    return PTC_OK;
}
