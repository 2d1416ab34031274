/* Pictures of simulated schedules: SVG timeline and Chrome trace JSON. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/sched/sched_internal.h"

/* Colours per op, [even chunk, odd chunk], and label colour. */
static const char *const fill[4][2] = {
    {"#4e79a7", "#2c4f7c"}, /* F */
    {"#59a14f", "#356b2e"}, /* B */
    {"#76b7b2", "#3f817c"}, /* I */
    {"#f28e2b", "#b8600f"}, /* W */
};
static const char *const label_col[4] = {"#ffffff", "#ffffff", "#ffffff", "#1a1a1a"};

static double nice_step(double span)
{
    double raw = span / 10, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

int ptc_sched_svg(const ptc_sched *s, const ptc_sched_sim *sim, char **out)
{
    *out = NULL;
    const double left = 80, top = 44, row = 28, bar = 22, width = 1200;
    double span = ptc_sched_sim_makespan(sim);
    if (span <= 0)
        span = 1;
    double sc = width / span;
    double h = top + row * s->ranks + 70;
    ptc_buf b = {0};
    ptc_buf_printf(&b,
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                     "font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
                     "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
                     left + width + 20, h);
    ptc_buf_printf(&b,
                     "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s: %d ranks, %d stages x %d "
                     "pipe(s), %d micro-batches; makespan %.6g, bubble %.2f%%</text>\n",
                     left, s->kind[0] ? s->kind : "schedule", s->ranks, s->stages, s->pipes,
                     s->mbs, ptc_sched_sim_makespan(sim), 100 * ptc_sched_sim_bubble(sim));
    for (int r = 0; r < s->ranks; r++) {
        double y = top + r * row;
        ptc_buf_printf(&b,
                         "<text x=\"8\" y=\"%.1f\" font-size=\"12\">rank %d</text>\n"
                         "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                         "fill=\"#ececec\"/>\n",
                         y + bar * 0.7, r, left, y, width, bar);
        size_t n;
        const ptc_sched_action *a = ptc_sched_actions(s, r, &n);
        for (size_t i = 0; i < n; i++) {
            double t0, t1;
            if (!sched_is_compute(a[i].op) || ptc_sched_sim_timing(sim, r, i, &t0, &t1))
                continue;
            double x = left + t0 * sc, wd = (t1 - t0) * sc;
            if (wd <= 0)
                continue;
            int op = a[i].op, odd = a[i].chunk & 1;
            char tok[48];
            ptc_sched_action_format(&a[i], tok, sizeof tok);
            ptc_buf_printf(&b,
                             "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                             "fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"%s\"><title>rank %d "
                             "%s [%.6g, %.6g)</title></rect>\n",
                             x, y, wd, bar, fill[op][odd], wd > 3 ? "0.8" : "0", r, tok, t0, t1);
            char lab[24];
            snprintf(lab, sizeof lab, "%d", (int)a[i].mb);
            double fs = wd >= 7.0 * (double)strlen(lab) ? 11 : wd >= 5.0 * (double)strlen(lab) ? 8 : 0;
            if (fs > 0)
                ptc_buf_printf(&b,
                                 "<text x=\"%.2f\" y=\"%.1f\" font-size=\"%.0f\" "
                                 "text-anchor=\"middle\" fill=\"%s\">%s</text>\n",
                                 x + wd / 2, y + bar / 2 + fs * 0.36, fs, label_col[op], lab);
        }
    }
    /* Time axis. */
    double ay = top + row * s->ranks + 4, st = nice_step(span);
    ptc_buf_printf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                     left, ay, left + width, ay);
    for (double t = 0; t <= span * (1 + 1e-9); t += st)
        ptc_buf_printf(&b,
                         "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                         "text-anchor=\"middle\">%.6g</text>\n",
                         left + t * sc, ay, left + t * sc, ay + 4, left + t * sc, ay + 15, t);
    /* Legend. */
    static const char *const names[4] = {"F forward", "B backward", "I input grad",
                                         "W weight grad"};
    double lx = left, ly = ay + 30;
    for (int op = 0; op < 4; op++) {
        ptc_buf_printf(&b,
                         "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text>\n",
                         lx, ly, fill[op][0], lx + 18, ly + 11, names[op]);
        lx += 130;
    }
    ptc_buf_printf(&b,
                     "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">darker = odd chunk; "
                     "numbers = micro-batch; grey = idle</text>\n</svg>\n",
                     lx, ly + 11);
    if (b.err) {
        ptc_free(b.s);
        return b.err == PTC_E_NOMEM ? PTC_E_NOMEM : ptc_error_set(b.err, "svg failed");
    }
    *out = b.s;
    return PTC_OK;
}

int ptc_sched_trace_json(const ptc_sched *s, const ptc_sched_sim *sim, char **out)
{
    *out = NULL;
    static const char *const cat[4] = {"F", "B", "I", "W"};
    json_t *root = json_object(), *evs = json_array();
    if (!root || !evs) {
        json_decref(root);
        json_decref(evs);
        return ptc_error_set(PTC_E_NOMEM, "out of memory building trace");
    }
    json_object_set_new(root, "traceEvents", evs);
    json_object_set_new(root, "displayTimeUnit", json_string("ms"));
    int bad = 0;
    for (int r = 0; r < s->ranks; r++) {
        char nm[32];
        snprintf(nm, sizeof nm, "rank %d", r);
        bad |= json_array_append_new(
            evs, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M",
                           "pid", 0, "tid", r, "args", "name", nm));
        size_t n;
        const ptc_sched_action *a = ptc_sched_actions(s, r, &n);
        for (size_t i = 0; i < n; i++) {
            double t0, t1;
            if (!sched_is_compute(a[i].op) || ptc_sched_sim_timing(sim, r, i, &t0, &t1))
                continue;
            char tok[48];
            ptc_sched_action_format(&a[i], tok, sizeof tok);
            int g = sched_gs(s, r, a[i].chunk);
            bad |= json_array_append_new(
                evs, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:i, s:i, s:i, s:i}}",
                               "name", tok, "cat", cat[a[i].op], "ph", "X", "ts", t0 * 1000.0,
                               "dur", (t1 - t0) * 1000.0, "pid", 0, "tid", r, "args", "mb",
                               (int)a[i].mb, "chunk", (int)a[i].chunk, "pipe", g / s->stages,
                               "stage", g % s->stages));
        }
    }
    char *txt = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!txt)
        return ptc_error_set(PTC_E_NOMEM, "out of memory writing trace");
    /* Hand back memory of our own allocator (ptc_sched_text_free). */
    *out = ptc_strdup(txt);
    free(txt);
    return *out ? PTC_OK : PTC_E_NOMEM;
}
